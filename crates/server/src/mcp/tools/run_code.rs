//! `sandbox.run_code {conversationId, language, code, timeoutSeconds?, env?, stdin?, metadata?}`: runs code in the
//! conversation's sandbox and returns `{success, output, stdout, stderr, exitCode, timedOut, truncated, durationMs,
//! files: [{name, url, size}], filesTruncated, runId, outcome}` as structured content and as the same JSON in a
//! text block. A server too busy to queue the run answers at once with `{success: false, busy: true,
//! retryAfterSeconds, outcome: "busy", ...}`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use sandlot_core::{Error, Outcome, RunReport, RunRequest, Termination, json_prefix, timeout_from_secs};
use serde_json::{Value, json};

use super::arguments::{optional_object, optional_seconds, optional_string, optional_string_map, required_string};
use super::list_runners::object;
use crate::AppState;
use crate::mcp::errors;

pub const NAME: &str = "sandbox.run_code";

pub fn definition() -> Tool {
    let input = json!({
        "type": "object",
        "properties": {
            "conversationId": {
                "type": "string",
                "description": "Names the conversation whose /data directory the code sees; files persist across calls with the same id.",
                "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
            },
            "language": {
                "type": "string",
                "description": "python, typescript, javascript (or node) or bash (or shell).",
                "enum": ["python", "typescript", "javascript", "node", "bash", "shell"]
            },
            "code": { "type": "string", "description": "The program's source code (at most 1 MiB)." },
            "timeoutSeconds": { "type": "number", "exclusiveMinimum": 0, "description": "Deadline of the run." },
            "env": { "type": "object", "additionalProperties": { "type": "string" }, "description": "Extra environment variables." },
            "stdin": { "type": "string", "description": "Text fed to the program's standard input." },
            "metadata": { "type": "object", "description": "Your own JSON object about the run (at most 16 KiB), kept in the run history." }
        },
        "required": ["conversationId", "language", "code"]
    });
    let output = json!({
        "type": "object",
        "properties": {
            "success": { "type": "boolean" },
            "output": { "type": "string", "description": "stdout, then stderr, then sandlot's diagnostic if any" },
            "stdout": { "type": "string" },
            "stderr": { "type": "string" },
            "exitCode": { "type": "integer" },
            "timedOut": { "type": "boolean" },
            "truncated": { "type": "boolean" },
            "durationMs": { "type": "integer" },
            "files": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": { "name": { "type": "string" }, "url": { "type": "string" }, "size": { "type": "integer" } },
                    "required": ["name", "url", "size"]
                }
            },
            "filesTruncated": { "type": "boolean" },
            "runId": { "type": "string", "description": "The run's id in the history (sandlot://runs/{runId})" },
            "outcome": {
                "type": "string",
                "enum": ["ok", "error", "timeout", "oom", "cancelled", "busy", "internal"],
                "description": "How the run ended"
            },
            "busy": { "type": "boolean", "description": "The server was too busy to queue the run; retry later" },
            "retryAfterSeconds": { "type": "integer", "description": "With busy: when to retry" }
        },
        "required": ["success", "output", "stdout", "stderr", "exitCode", "timedOut", "truncated", "durationMs", "files"]
    });
    Tool::new(
        NAME,
        "Run Python, TypeScript, JavaScript or Bash in an isolated sandbox with no network. /data is a directory \
         private to the conversation that persists across calls; every file in it is returned with a download URL.",
        Arc::new(object(input)),
    )
    .with_title("Run code in a sandbox")
    .with_raw_output_schema(Arc::new(object(output)))
    .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).idempotent(false).open_world(false))
}

fn parse(
    state: &AppState,
    arguments: &JsonObject,
    caller: String,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<RunRequest, McpError> {
    let max_timeout = state.engine.config().max_timeout;
    let timeout = optional_seconds(arguments, "timeoutSeconds")?
        .map(|secs| timeout_from_secs("timeoutSeconds", secs, max_timeout))
        .transpose()
        .map_err(|e| errors::from_engine(&e))?;
    Ok(RunRequest {
        conversation_id: required_string(arguments, "conversationId")?,
        language: required_string(arguments, "language")?,
        code: required_string(arguments, "code")?,
        timeout,
        env: optional_string_map(arguments, "env")?,
        stdin: optional_string(arguments, "stdin")?.unwrap_or_default().into_bytes(),
        metadata: optional_object(arguments, "metadata")?,
        caller,
        cancel,
    })
}

pub async fn call(
    state: &AppState,
    arguments: JsonObject,
    caller: String,
    sink: &dyn sandlot_core::OutputSink,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<CallToolResult, McpError> {
    let request = parse(state, &arguments, caller, cancel)?;
    match state.engine.run(request, sink).await {
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

fn result(value: Value, success: bool) -> CallToolResult {
    let mut result = CallToolResult::structured(value);
    result.is_error = Some(!success);
    result
}

/// Bytes of each stream a result holds, as JSON (a control byte takes 6). With the file list's own bound
/// (`EngineConfig::max_listed_path_bytes`), this bounds a whole result: stdout and stderr are at most 1 MiB each,
/// `output` (both again) 2 MiB, the files well under 1 MiB, and the text block, the same JSON escaped once more, at
/// most twice all that: under 14 MiB as sent, whatever the run printed or left in `/data`.
pub const RESULT_STREAM_BYTES: usize = 1024 * 1024;

fn render(state: &AppState, report: &RunReport) -> CallToolResult {
    let outcome = &report.outcome;
    let config = state.engine.config();
    let stdout = json_prefix(&outcome.stdout, RESULT_STREAM_BYTES);
    let stderr = json_prefix(&outcome.stderr, RESULT_STREAM_BYTES);
    // Whatever was cut is said in `output`, after the termination's own diagnostic.
    let mut notes: Vec<String> = outcome.termination.diagnostic(report.limits.timeout).into_iter().collect();
    let streams = [
        ("stdout", stdout, &outcome.stdout, outcome.stdout_truncated),
        ("stderr", stderr, &outcome.stderr, outcome.stderr_truncated),
    ];
    for (name, kept, printed, capped) in streams {
        if kept.len() < printed.len() {
            notes.push(format!(
                "{name} cut to its first {} bytes: a result holds at most {} KiB of each stream as JSON",
                kept.len(),
                RESULT_STREAM_BYTES / 1024
            ));
        } else if capped {
            notes.push(format!(
                "{name} cut: the run printed more than the {} bytes kept of each stream",
                report.limits.max_output_bytes
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
    let cut = stdout.len() < outcome.stdout.len() || stderr.len() < outcome.stderr.len();
    let diagnostic = (!notes.is_empty()).then(|| notes.join("\n"));
    let files: Vec<Value> = report
        .files
        .files
        .iter()
        .map(|f| {
            json!({ "name": f.path, "url": state.files.url(report.conversation_id.as_str(), &f.path), "size": f.size })
        })
        .collect();
    let value = json!({
        "success": outcome.success(),
        "output": combined_output(stdout, stderr, diagnostic.as_deref()),
        "stdout": stdout,
        "stderr": stderr,
        "exitCode": outcome.exit_code(),
        "timedOut": outcome.termination == Termination::TimedOut,
        "truncated": outcome.truncated() || cut,
        "durationMs": outcome.duration.as_millis() as u64,
        "files": files,
        "filesTruncated": report.files.truncated,
        "runId": report.run_id,
        "outcome": Outcome::of(&outcome.termination),
    });
    let mut result = result(value, outcome.success());
    result.content.extend(super::result_files::blocks(state, report));
    result
}

/// The answer when the queue is full (or the wait was too long): nothing ran; try again after the hint.
fn busy(error: &Error, retry_after: Duration) -> CallToolResult {
    let mut value = failure_value(error.to_string());
    value["busy"] = Value::Bool(true);
    value["retryAfterSeconds"] = json!(retry_after.as_secs().max(1));
    value["outcome"] = json!(Outcome::Busy);
    result(value, false)
}

fn no_runner(language: &str, available: &[String]) -> CallToolResult {
    let available = if available.is_empty() { "none".to_owned() } else { available.join(", ") };
    failure_without_run(format!("no runner for language {language}; available: {available}"))
}

fn failure_without_run(output: String) -> CallToolResult {
    result(failure_value(output), false)
}

fn failure_value(output: String) -> Value {
    json!({
        "success": false,
        "output": output,
        "stdout": "",
        "stderr": "",
        "exitCode": -1,
        "timedOut": false,
        "truncated": false,
        "durationMs": 0,
        "files": [],
        "filesTruncated": false,
    })
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
