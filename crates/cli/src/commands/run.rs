//! `sandlot run`: one run through the engine, output streamed live, exit code passed on.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use sandlot_core::{Engine, Error, Language, OutputChunk, RunReport, RunRequest, Stream, Workspaces};

use crate::cli::RunArgs;

/// Exit code for a request sandlot refused (bad argument, unreadable code file, no runner).
const EXIT_USAGE: u8 = 2;

pub async fn run(args: RunArgs, forked_init: Option<sandlot_jail::ForkedInit>) -> anyhow::Result<ExitCode> {
    let code = match args.file.as_deref() {
        None => read_stdin()?,
        Some(path) if path.as_os_str() == "-" => read_stdin()?,
        // A file that cannot be read (missing, a directory, not UTF-8) is a bad argument: exit 2, like `-t 0`.
        Some(path) => match std::fs::read_to_string(path) {
            Ok(code) => code,
            Err(e) => {
                crate::logs::fail(&format!("cannot read {}: {e}", path.display()));
                return Ok(ExitCode::from(EXIT_USAGE));
            }
        },
    };
    let max_timeout = Duration::from_secs(args.sandbox.max_timeout_secs);
    let timeout = match args.timeout.map(|secs| sandlot_core::timeout_from_secs("--timeout", secs, max_timeout)) {
        Some(Ok(timeout)) => Some(timeout),
        Some(Err(e)) => {
            crate::logs::fail(&e.to_string());
            return Ok(ExitCode::from(EXIT_USAGE));
        }
        None => None,
    };
    // Only the runner the run needs is looked up (TypeScript stripped in the server needs the JavaScript one),
    // without asking its version: `run` stays fast.
    let language: Option<Language> =
        args.language.parse().ok().map(|l| args.sandbox.typescript_mode.backend_language(l));
    let backend: std::sync::Arc<dyn sandlot_core::Backend> = match args.sandbox.backend {
        crate::cli::BackendKind::Native => {
            let model = sandlot_jail::ProcessModel::OneShot;
            let backend = super::jail_backend(&args.sandbox, language.map(|l| vec![l]), false, model, false, None)?;
            if let Some(init) = forked_init {
                backend.use_forked_init(init);
            }
            backend
        }
        crate::cli::BackendKind::Docker => super::backend(&args.sandbox, 0, None).await?,
    };
    sandlot_core::marks::mark("c.backend");
    let workspaces =
        super::with_disk_images_for(Workspaces::unbounded(&args.sandbox.root), &args.sandbox, &args.conversation);
    let engine = Engine::new(backend, workspaces, args.sandbox.one_run_engine_config());
    let request = RunRequest {
        conversation_id: args.conversation.clone(),
        language: args.language.clone(),
        code,
        timeout,
        ..RunRequest::default()
    };
    let stream_live = !args.json;
    let sink = move |chunk: OutputChunk| {
        if stream_live {
            let _ = match chunk.stream {
                Stream::Stdout => {
                    std::io::stdout().lock().write_all(&chunk.data).and_then(|()| std::io::stdout().flush())
                }
                Stream::Stderr => std::io::stderr().lock().write_all(&chunk.data),
            };
        }
    };
    sandlot_core::marks::mark("c.engine");
    let report = match engine.run(request, &sink).await {
        Ok(report) => report,
        Err(e @ (Error::InvalidArgument { .. } | Error::NoRunner { .. })) => {
            crate::logs::fail(&e.to_string());
            return Ok(ExitCode::from(EXIT_USAGE));
        }
        Err(e) => return Err(e.into()),
    };
    sandlot_core::marks::mark("c.ran");
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json_report(&report))?);
    } else if let Some(diagnostic) = report.outcome.termination.diagnostic(report.limits.timeout) {
        crate::logs::warn(&diagnostic);
    }
    if !args.json && report.outcome.truncated() {
        let kept = report.limits.max_output_bytes;
        let halves = format!("its first {} and last {} bytes", kept / 2, kept - kept / 2);
        crate::logs::warn(&format!("output truncated at {kept} bytes per stream ({halves})"));
    }
    // Exit here rather than return: what is left to drop (the engine, the backend, the runtime) holds nothing that
    // the kernel does not release at exit, and dropping it is on the path of every run. Standard output is flushed.
    std::process::exit(report.outcome.exit_code() & 0xff)
}

fn read_stdin() -> anyhow::Result<String> {
    let mut code = String::new();
    std::io::stdin().read_to_string(&mut code).context("cannot read code from standard input")?;
    Ok(code)
}

fn json_report(report: &RunReport) -> serde_json::Value {
    let outcome = &report.outcome;
    serde_json::json!({
        "runId": report.run_id,
        "conversationId": report.conversation_id.as_str(),
        "language": report.language,
        "success": outcome.success(),
        "exitCode": outcome.exit_code(),
        "termination": outcome.termination,
        "timedOut": outcome.termination == sandlot_core::Termination::TimedOut,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "stdoutTruncated": outcome.stdout_truncated,
        "stderrTruncated": outcome.stderr_truncated,
        "durationMs": outcome.duration.as_millis() as u64,
        "files": report.files.files,
        "filesTruncated": report.files.truncated,
    })
}
