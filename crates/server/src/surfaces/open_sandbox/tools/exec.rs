//! `shell.exec {command, args, working_dir}` and `code.exec {runtime, args, working_dir}`: one sandlot run of
//! language bash through `Engine::run_as` in the tenant's conversation, mounted at `/workspace` (the codegen layout;
//! another tenant's is refused before its `working_dir` is looked at),
//! whose code is `cd '<working_dir>' && exec -- '<argv[0]>' '<argv[1]>' ...`: every argument single-quoted, so
//! the program gets the argv as given (exec, no shell: `;`, `$(...)`, globs and quotes are passed literally). The
//! result is `{stdout, stderr, exit_code}` for any exit, non-zero included; a run ended otherwise (the 30 s
//! timeout, memory) gets its diagnostic on stderr and the exit code a shell would give (124 for the timeout).
//! Both streams are scrubbed of secrets (`sandlot_core::scrub_secrets`), as the codegen profile's `Bash`.
//!
//! On a backend with live sandboxes the command runs as a process of its own in the workspace's live sandbox
//! (`SessionUse::Process`): it sees the `/tmp`, loopback and processes earlier commands left, and what it leaves
//! running stays for the next one. Elsewhere it gets a fresh sandbox. The wire is the same either way.

use std::time::Duration;

use sandlot_core::{ConversationId, Error, Layout, RunRequest, SessionUse, Tenant, scrub_secrets};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{OUTSIDE, Scope, ToolError, ToolInfo, WORKSPACE_MOUNT, info, parse, refusal, result};
use crate::AppState;
use crate::kit::conversation_access;
use crate::kit::workspace_paths as paths;

/// How long a command may run.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// `shell.exec`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct ShellArgs {
    /// The program to run (looked up on PATH); not a shell command line.
    pub command: String,
    /// Its arguments, passed as they are.
    #[serde(default)]
    pub args: Vec<String>,
    /// Where it runs: a directory in the workspace (default: the workspace root).
    #[serde(default)]
    pub working_dir: Option<String>,
}

/// `code.exec`'s arguments.
#[derive(Deserialize, JsonSchema)]
pub struct CodeArgs {
    /// `python` or `node`.
    pub runtime: String,
    /// The interpreter's arguments (`-c <code>`, `-e <code>`, or a script path).
    #[serde(default)]
    pub args: Vec<String>,
    /// Where it runs: a directory in the workspace (default: the workspace root).
    #[serde(default)]
    pub working_dir: Option<String>,
}

/// What a command printed and how it exited.
#[derive(Serialize, JsonSchema)]
pub struct ExecResult {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

pub fn tools() -> Vec<ToolInfo> {
    vec![
        info::<ShellArgs, ExecResult>("shell.exec", Scope::Exec, None),
        info::<CodeArgs, ExecResult>("code.exec", Scope::Exec, None),
    ]
}

/// `shell.exec` or `code.exec`.
pub async fn call(
    app: &AppState,
    tenant: &Tenant,
    workspace: &ConversationId,
    name: &str,
    arguments: Value,
    cancel: CancellationToken,
) -> Result<Value, ToolError> {
    let (argv, working_dir) = if name == "code.exec" {
        let args: CodeArgs = parse(arguments)?;
        let program = match args.runtime.as_str() {
            "python" => "python3",
            "node" => "node",
            other => return Err(ToolError::Tool(format!("unsupported runtime {other:?}: use python or node"))),
        };
        (std::iter::once(program.to_owned()).chain(args.args).collect::<Vec<_>>(), args.working_dir)
    } else {
        let args: ShellArgs = parse(arguments)?;
        if args.command.is_empty() {
            return Err(ToolError::InvalidParams("command is required".to_owned()));
        }
        (std::iter::once(args.command).chain(args.args).collect(), args.working_dir)
    };
    conversation_access::admit_run(&app.engine, tenant, workspace).map_err(|e| refusal("", workspace, &e))?;
    let working_dir = working_dir_of(app, workspace, working_dir.as_deref().unwrap_or("")).await?;
    let code = command_line(&working_dir, &argv)?;
    let request = RunRequest {
        conversation_id: workspace.as_str().to_owned(),
        language: "bash".into(),
        code,
        timeout: Some(TIMEOUT),
        caller: tenant.name().to_owned(),
        layout: Layout::Workspace { path: WORKSPACE_MOUNT },
        session: if app.engine.supports_sessions() { SessionUse::Process } else { SessionUse::Off },
        cancel,
        ..RunRequest::default()
    };
    let report =
        app.engine.run_as(tenant, request, &()).await.map_err(|e| refusal(&format!("{name}: "), workspace, &e))?;
    let outcome = report.outcome;
    let mut stderr = scrub_secrets(&outcome.stderr).into_owned();
    if let Some(diagnostic) = outcome.termination.diagnostic(TIMEOUT) {
        if !stderr.is_empty() && !stderr.ends_with('\n') {
            stderr.push('\n');
        }
        stderr.push_str(&format!("{name}: {diagnostic}\n"));
    }
    let stdout = scrub_secrets(&outcome.stdout).into_owned();
    result(&ExecResult { stdout, stderr, exit_code: outcome.termination.exit_code() })
}

/// The working directory as the sandbox sees it: `path` made workspace-relative (refused outside the workspace or
/// through a symlink), and a directory that exists.
async fn working_dir_of(app: &AppState, workspace: &ConversationId, path: &str) -> Result<String, ToolError> {
    let relative = paths::relative(path).map_err(|_| ToolError::InvalidParams(OUTSIDE.to_owned()))?;
    if relative.is_empty() {
        return Ok(WORKSPACE_MOUNT.to_owned());
    }
    let workspaces = app.engine.workspaces().clone();
    let (workspace, checked, shown) = (workspace.clone(), relative.clone(), path.to_owned());
    tokio::task::spawn_blocking(move || match workspaces.open_file(&workspace, &checked) {
        Err(Error::InvalidPath { message, .. }) if message == "is a directory" => Ok(()),
        Err(Error::InvalidPath { message, .. }) if message.contains("symlink") => {
            Err(ToolError::InvalidParams(format!("{OUTSIDE}: {shown} goes through a symlink")))
        }
        Err(Error::FileNotFound { .. }) => Err(ToolError::Tool(format!("working_dir {shown}: no such directory"))),
        _ => Err(ToolError::Tool(format!("working_dir {shown} is not a directory"))),
    })
    .await
    .map_err(|e| ToolError::Tool(format!("internal error: {e}")))??;
    Ok(format!("{WORKSPACE_MOUNT}/{relative}"))
}

/// The bash code that runs `argv` in `working_dir`, every word single-quoted.
pub fn command_line(working_dir: &str, argv: &[String]) -> Result<String, ToolError> {
    if argv.iter().any(|arg| arg.contains('\0')) {
        return Err(ToolError::InvalidParams("arguments must not contain NUL characters".to_owned()));
    }
    let words: Vec<String> = argv.iter().map(|arg| quote(arg)).collect();
    Ok(format!("cd {} && exec -- {}", quote(working_dir), words.join(" ")))
}

/// `word` in single quotes, each `'` in it written `'\''`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_is_single_quoted() {
        let argv = ["echo", "a b", "it's", "$(id); rm -rf x", ""].map(String::from);
        assert_eq!(
            command_line("/workspace/d", &argv),
            Ok(r"cd '/workspace/d' && exec -- 'echo' 'a b' 'it'\''s' '$(id); rm -rf x' ''".to_owned())
        );
        assert!(matches!(command_line("/workspace", &["a\0b".to_owned()]), Err(ToolError::InvalidParams(_))));
    }
}
