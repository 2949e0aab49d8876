//! `sandbox.run_code {conversationId, language, code, timeoutSeconds?, env?, stdin?, metadata?, session?}`: runs code
//! in the conversation's sandbox (with `session`, in its live sandbox's persistent interpreter; absent, the server's
//! `SANDLOT_SESSION_DEFAULT`) and returns `{success, output, stdout, stderr, exitCode, timedOut, truncated,
//! durationMs, files: [{name, url, size}], filesTruncated, runId, outcome, session?}` as structured content (a serialized
//! `run_code_output::RunCodeOutput`, the type the `outputSchema` is derived from), and a text block written for a
//! model (see `run_result`: outcome, exit code, output within a budget, each byte once). A server too busy to queue
//! the run answers at once with `{success: false, busy: true, retryAfterSeconds, outcome: "busy", ...}`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use sandlot_core::{
    ConversationId, Error, NetworkUse, Outcome, RunReport, RunRequest, SessionUse, Termination, timeout_from_secs,
};
use serde_json::Value;

use super::run_code_output::{ResultFile, RunCodeOutput, SessionInfo};
use super::run_result;
use crate::AppState;
use crate::kit::Caller;
use crate::kit::rpc_errors as errors;
use crate::kit::tenant_workspaces::refuse_derived_for_another;

pub const NAME: &str = "sandbox.run_code";

pub fn definition() -> Tool {
    Tool::new(
        NAME,
        "Run Python, TypeScript, JavaScript or Bash in an isolated sandbox with no network beyond what the server's \
         egress policy allows. /data is a directory \
         private to the conversation that persists across calls; every file in it is returned with a download URL. \
         With session: true the code runs in the conversation's live sandbox, in a persistent interpreter: variables, \
         imports, the working directory and background processes stay for the next session call.",
        super::run_code_args::input_schema(),
    )
    .with_title("Run code in a sandbox")
    .with_raw_output_schema(Arc::new(crate::kit::schema::output_schema_of::<RunCodeOutput>()))
    .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).idempotent(false).open_world(false))
    // MCP Apps: a host that renders them shows the call in the run view; others ignore it.
    .with_meta(super::super::app_views::tool_meta(super::super::app_views::RUN_VIEW))
}

fn parse(
    state: &AppState,
    arguments: &JsonObject,
    caller: &Caller,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<RunRequest, McpError> {
    let args = super::run_code_args::parse(arguments)?;
    // Absent: the server's default (`SANDLOT_SESSION_DEFAULT`); a backend without live sandboxes refuses `true`
    // naming `session` (the engine's check), so the default is off there whatever it says.
    let session = match args.session {
        Some(true) => SessionUse::Interpreter,
        Some(false) => SessionUse::Off,
        None if state.engine.sessions().config().session_default && state.engine.supports_sessions() => {
            SessionUse::Interpreter
        }
        None => SessionUse::Off,
    };
    let max_timeout = state.engine.config().max_timeout;
    let timeout = args
        .timeout_seconds
        .map(|secs| timeout_from_secs("timeoutSeconds", secs, max_timeout))
        .transpose()
        .map_err(|e| errors::from_engine(&e))?;
    Ok(RunRequest {
        conversation_id: args.conversation_id,
        language: args.language,
        code: args.code,
        timeout,
        env: args.env.unwrap_or_default(),
        stdin: args.stdin.unwrap_or_default().into_bytes(),
        metadata: args.metadata.map(Value::Object),
        caller: caller.name.clone(),
        cancel,
        layout: Default::default(),
        mounts: Vec::new(),
        alongside: false,
        session,
        network: match args.network {
            Some(network) => {
                NetworkUse::Narrowed(sandlot_core::PolicySpec { allow: network.allow, deny: network.deny })
            }
            None => NetworkUse::Server,
        },
    })
}

pub async fn call(
    state: &AppState,
    arguments: JsonObject,
    caller: Caller,
    sink: &dyn sandlot_core::OutputSink,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<CallToolResult, McpError> {
    let request = parse(state, &arguments, &caller, cancel)?;
    let tenant = caller.tenant();
    if let Ok(conversation) = ConversationId::parse(&request.conversation_id) {
        refuse_derived_for_another(&conversation, &tenant).map_err(|e| errors::from_engine(&e))?;
    }
    match state.engine.run_as(&tenant, request, sink).await {
        Ok(report) => Ok(render(state, &report)),
        Err(error @ Error::Busy { retry_after, .. }) => Ok(busy(&error, retry_after)),
        Err(Error::NoRunner { language, available }) => Ok(no_runner(&language, &available)),
        // A language sandlot does not know is, for the caller, one without a runner: a result listing the others.
        Err(Error::InvalidArgument { field: "language", .. }) => {
            let language = arguments.get("language").and_then(Value::as_str).unwrap_or_default();
            let available: Vec<String> = state.engine.runners().iter().map(|r| r.language.to_string()).collect();
            Ok(no_runner(language, &available))
        }
        Err(error) => Err(errors::from_engine(&error)),
    }
}

/// The outcome with secret shapes in its streams replaced (`SANDLOT_SCRUB_SECRETS`).
fn scrubbed_outcome(outcome: &sandlot_core::RunOutcome) -> sandlot_core::RunOutcome {
    let mut scrubbed = outcome.clone();
    scrubbed.stdout = sandlot_core::scrub_secrets(&outcome.stdout).into_owned();
    scrubbed.stderr = sandlot_core::scrub_secrets(&outcome.stderr).into_owned();
    scrubbed
}

/// The spec's combined output: stdout, then (after a newline when both are non-empty) stderr, then the diagnostic.
pub fn combined_output(stdout: &str, stderr: &str, diagnostic: Option<&str>) -> String {
    let mut output = stdout.to_owned();
    for part in [Some(stderr), diagnostic].into_iter().flatten().filter(|p| !p.is_empty()) {
        if !output.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(part);
    }
    output
}

/// The result: `output` as structured content, and the text a model reads ([`run_result::model_text`]);
/// `isError` exactly when it is not a success.
fn result(output: &RunCodeOutput) -> CallToolResult {
    let mut result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(run_result::model_text(output))]);
    result.structured_content = Some(crate::kit::schema::structured(output));
    result.is_error = Some(!output.success);
    result
}

fn render(state: &AppState, report: &RunReport) -> CallToolResult {
    let scrubbed;
    let outcome = if state.scrub_secrets {
        scrubbed = scrubbed_outcome(&report.outcome);
        &scrubbed
    } else {
        &report.outcome
    };
    let config = state.engine.config();
    // Output is bounded by the result budget (head and tail; see `run_result`), the whole kept in the history.
    let budget = config.result_text_bytes;
    let (stdout, stdout_cut) = run_result::excerpt(&outcome.stdout, budget / 2, &report.run_id);
    let (stderr, stderr_cut) = run_result::excerpt(&outcome.stderr, budget / 2, &report.run_id);
    let (output, output_cut) =
        run_result::excerpt(&combined_output(&outcome.stdout, &outcome.stderr, None), budget, &report.run_id);
    let mut notes: Vec<String> = outcome.termination.diagnostic(report.limits.timeout).into_iter().collect();
    for (name, capped) in [("stdout", outcome.stdout_truncated), ("stderr", outcome.stderr_truncated)] {
        if capped {
            let kept = report.limits.max_output_bytes;
            notes.push(format!(
                "{name} cut: the run printed more than the {kept} bytes kept of each stream (its first {} and last {})",
                kept / 2,
                kept - kept / 2
            ));
        }
    }
    if report.files.truncated {
        notes.push(format!(
            "file list cut: {} files listed; a result lists at most {} files and {} KiB of paths",
            report.files.files.len(),
            config.max_files_listed,
            config.max_listed_path_bytes / 1024
        ));
    }
    let cut = stdout_cut || stderr_cut || output_cut;
    let diagnostic = (!notes.is_empty()).then(|| notes.join("\n"));
    let files = report
        .files
        .files
        .iter()
        .map(|f| ResultFile {
            name: f.path.clone(),
            url: state.files.url(report.conversation_id.as_str(), &f.path),
            size: f.size,
        })
        .collect();
    let output = RunCodeOutput {
        success: outcome.success(),
        output: combined_output(&output, "", diagnostic.as_deref()),
        stdout,
        stderr,
        exit_code: outcome.exit_code(),
        timed_out: outcome.termination == Termination::TimedOut,
        truncated: outcome.truncated() || cut,
        duration_ms: outcome.duration.as_millis() as u64,
        files,
        files_truncated: report.files.truncated,
        run_id: Some(report.run_id.clone()),
        outcome: Some(Outcome::of(&outcome.termination)),
        session: report.session.as_ref().map(SessionInfo::of),
        ..RunCodeOutput::failure(String::new())
    };
    let mut result = result(&output);
    result.content.extend(super::result_files::blocks(state, report));
    result
}

/// The answer when the queue is full (or the wait was too long): nothing ran; try again after the hint.
fn busy(error: &Error, retry_after: Duration) -> CallToolResult {
    result(&RunCodeOutput {
        busy: true,
        retry_after_seconds: Some(retry_after.as_secs().max(1)),
        outcome: Some(Outcome::Busy),
        ..RunCodeOutput::failure(error.to_string())
    })
}

fn no_runner(language: &str, available: &[String]) -> CallToolResult {
    let available = if available.is_empty() { "none".to_owned() } else { available.join(", ") };
    result(&RunCodeOutput::failure(format!("no runner for language {language}; available: {available}")))
}

#[cfg(test)]
mod tests {
    use super::combined_output;

    #[test]
    fn output_joins_the_streams_like_the_spec() {
        assert_eq!(combined_output("out\n", "", None), "out\n");
        assert_eq!(combined_output("out", "err", None), "out\nerr");
        assert_eq!(combined_output("", "err\n", Some("timed out")), "err\ntimed out");
        assert_eq!(combined_output("", "", None), "");
    }
}
