//! Baponi's MCP server (`docs/profiles.md#baponi-mcp`): the rmcp handler with Baponi's server info and
//! instructions and its two tools, `sandbox_execute` (over [`super::execute`]) and `files_download` (over
//! [`super::download`]). Tools only: no resources, prompts or logging.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeResult,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use sandlot_core::{Escaped, RunReport, Tenant, Termination};
use serde_json::{Value, json};

use super::execute::{self, ExecuteError};
use super::{BaponiState, download};
use crate::kit::rpc_errors as errors;

/// The tools' names.
pub const SANDBOX_EXECUTE: &str = "sandbox_execute";
pub const FILES_DOWNLOAD: &str = "files_download";

/// Baponi's instructions, word for word.
pub const INSTRUCTIONS: &str = "Baponi is a sandboxed code execution platform for AI agents. Use sandbox_execute to \
run Python, Node.js, or Bash code. Use files_download to retrieve files produced by executions.";

/// The handler; one serves every request (it keeps no session state).
#[derive(Clone)]
pub struct BaponiMcp {
    state: BaponiState,
}

impl BaponiMcp {
    pub fn new(state: BaponiState) -> Self {
        Self { state }
    }
}

fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

/// The two tools, exactly as Baponi lists them.
pub fn tools() -> Vec<Tool> {
    let execute = json!({
        "type": "object",
        "properties": {
            "code": { "type": "string", "description": "Code to execute" },
            "language": {
                "type": "string",
                "enum": ["python", "node", "bash"],
                "description": "Programming language. Defaults to the sandbox's configured language if omitted."
            },
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": 3600,
                "description": "Execution timeout in seconds. Defaults to sandbox configuration."
            },
            "thread_id": {
                "type": "string",
                "description": "Persistent thread ID. Files written to /home/baponi persist across calls with the same thread_id."
            },
            "metadata": { "type": "object", "description": "Arbitrary key-value metadata attached to the execution record." },
            "env_vars": {
                "type": "object",
                "additionalProperties": { "type": "string" },
                "description": "Environment variables injected into the sandbox. Keys must be uppercase letters, digits, and underscores, starting with a letter."
            }
        },
        "required": ["code"]
    });
    let download = json!({
        "type": "object",
        "properties": {
            "source": { "type": "string", "enum": ["thread", "volume"], "description": "Where to read the file from." },
            "id": { "type": "string", "description": "The thread_id or volume name." },
            "path": { "type": "string", "description": "File path relative to the storage root." }
        },
        "required": ["source", "id", "path"]
    });
    vec![
        Tool::new(SANDBOX_EXECUTE, "Execute code in a sandboxed environment", schema(execute))
            .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).idempotent(false)),
        Tool::new(FILES_DOWNLOAD, "Download file content from a thread or volume", schema(download))
            .with_annotations(ToolAnnotations::new().read_only(true).destructive(false).idempotent(true)),
    ]
}

/// The `## Execution Result` markdown of a run: each stream's section only when it printed something, a line
/// saying why sandlot stopped the run when it did (timeout, memory, disk, cancel), then the exit code.
pub fn markdown(report: &RunReport) -> String {
    let outcome = &report.outcome;
    let mut text = String::from("## Execution Result\n\n");
    for (name, stream, truncated) in
        [("stdout", &outcome.stdout, outcome.stdout_truncated), ("stderr", &outcome.stderr, outcome.stderr_truncated)]
    {
        if stream.is_empty() {
            continue;
        }
        let newline = if stream.ends_with('\n') { "" } else { "\n" };
        text.push_str(&format!("**{name}:**\n```\n{stream}{newline}```\n\n"));
        if truncated {
            text.push_str(&format!("({name} was cut at the output limit)\n\n"));
        }
    }
    if let Some(diagnostic) = outcome.termination.diagnostic(report.limits.timeout) {
        text.push_str(&format!("**Error:** {diagnostic}\n\n"));
    }
    text.push_str(&format!("**Exit code:** {}", outcome.termination.exit_code()));
    text
}

/// A run's tool result: `isError` unless it exited 0.
fn execution_result(report: &RunReport) -> CallToolResult {
    let content = vec![ContentBlock::text(markdown(report))];
    match report.outcome.termination {
        Termination::Exited { code: 0 } => CallToolResult::success(content),
        _ => CallToolResult::error(content),
    }
}

/// The MCP answer to an execution that did not run: bad arguments are -32602 naming the field; a busy thread, no
/// runner or a full queue an `isError` result the model can act on; a fault of sandlot -32603.
fn execute_error(error: ExecuteError) -> Result<CallToolResult, McpError> {
    match error {
        ExecuteError::Invalid { field, message } => {
            Err(errors::invalid_argument(&field, format!("invalid {field}: {message}")))
        }
        ExecuteError::ThreadBusy { .. } => {
            Ok(CallToolResult::error(vec![ContentBlock::text(format!("{error}; wait for it to finish, then retry"))]))
        }
        ExecuteError::Engine(engine @ (sandlot_core::Error::NoRunner { .. } | sandlot_core::Error::Busy { .. })) => {
            Ok(CallToolResult::error(vec![ContentBlock::text(engine.to_string())]))
        }
        ExecuteError::Engine(engine) => Err(errors::from_engine(&engine)),
    }
}

/// The tenant of the caller the HTTP auth layer put in the request, else the ordinary tenant `anonymous`.
fn tenant(context: &RequestContext<RoleServer>) -> Tenant {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<crate::kit::Caller>())
        .map_or_else(|| crate::kit::Caller::anonymous().tenant(), crate::kit::Caller::tenant)
}

impl ServerHandler for BaponiMcp {
    fn get_info(&self) -> InitializeResult {
        let capabilities = ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build();
        let mut info = InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("baponi", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS);
        info.protocol_version = ProtocolVersion::V_2025_11_25;
        if let Some(tools) = info.capabilities.tools.as_mut() {
            tools.list_changed = Some(false);
        }
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let result = match request.name.as_ref() {
            SANDBOX_EXECUTE => {
                let args = match execute::parse(arguments) {
                    Ok(args) => args,
                    Err(error) => return execute_error(error).map(CallToolResponse::Complete),
                };
                // A dropped HTTP request cancels `context.ct`, and with it the run.
                let cancel = context.ct.child_token();
                match execute::execute(&self.state, args, &tenant(&context), &(), cancel).await {
                    Ok(report) => Ok(execution_result(&report)),
                    Err(error) => execute_error(error),
                }
            }
            FILES_DOWNLOAD => download::call(&self.state, &tenant(&context), arguments).await,
            other => Err(McpError::invalid_params(
                format!("unknown tool {other:?}; available: {SANDBOX_EXECUTE}, {FILES_DOWNLOAD}"),
                Some(json!({ "kind": "unknown_tool", "trace_id": errors::trace_id(), "field": "name" })),
            )),
        };
        tracing::info!(tool = %Escaped(&request.name), ok = result.is_ok(), "baponi tool call");
        result.map(CallToolResponse::Complete)
    }
}
