//! codegen-sandbox's MCP server (`docs/profiles.md#codegen-sandbox-transport-workspace-and-file-tools`): the rmcp
//! handler of one SSE session, bound to its [`Tenant`]. `initialize` echoes the client's version as mcp-go does,
//! advertises `tools.listChanged` (never sent) and names itself `codegen-sandbox` 0.1.0; `tools/list` and `tools/call`
//! go to [`super::tools`]; an unknown tool is -32602 "tool 'X' not found". Tools only: no resources, prompts or
//! logging.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use sandlot_core::Escaped;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::tools::{self, Call};
use super::{CodegenState, Tenant};
use crate::kit::Caller;
use crate::kit::transport::legacy_sse::SessionFactory;

/// The versions `initialize` echoes; an empty one gets `2025-03-26`, any other `2025-11-25` (mcp-go v0.49).
const ECHOED: [ProtocolVersion; 4] = [
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
];

/// The version codegen-sandbox answers a client's `requested` one with.
pub fn negotiated(requested: &str) -> ProtocolVersion {
    match ECHOED.iter().find(|known| known.as_str() == requested) {
        Some(known) => known.clone(),
        None if requested.is_empty() => ProtocolVersion::V_2025_03_26,
        None => ProtocolVersion::V_2025_11_25,
    }
}

/// The handler of one session.
#[derive(Clone)]
pub struct CodegenMcp {
    state: CodegenState,
    tenant: Tenant,
    /// Cancelled when the session's stream closes.
    closed: CancellationToken,
}

impl CodegenMcp {
    /// A session of `tenant`.
    pub fn new(state: CodegenState, tenant: Tenant, closed: CancellationToken) -> Self {
        Self { state, tenant, closed }
    }
}

/// Makes a [`CodegenMcp`] for each SSE session from the request that opened it: its caller's tenant (sandlot's
/// auth) and the `workspace` its URL names.
#[derive(Clone)]
pub struct SessionMaker {
    state: CodegenState,
}

impl SessionMaker {
    pub fn new(state: CodegenState) -> Self {
        Self { state }
    }
}

impl SessionFactory for SessionMaker {
    type Handler = CodegenMcp;

    fn for_session(&self, request: &Request, closed: CancellationToken) -> Result<CodegenMcp, Box<Response>> {
        let caller = Caller::of(request.extensions()).tenant();
        let query = request.uri().query().unwrap_or("");
        let named = url_query(query, "workspace");
        let tenant = Tenant::new(caller, named.as_deref()).map_err(|message| {
            Box::new(crate::kit::jsonrpc::error_response(StatusCode::BAD_REQUEST, Value::Null, -32602, &message))
        })?;
        tracing::debug!(workspace = %tenant.workspace, "codegen session opened");
        Ok(CodegenMcp::new(self.state.clone(), tenant, closed))
    }
}

/// The value of `name` in a URL query (percent-decoded), if present.
fn url_query(query: &str, name: &str) -> Option<String> {
    query.split('&').filter_map(|pair| pair.split_once('=').or(Some((pair, "")))).find_map(|(key, value)| {
        (key == name).then(|| percent_encoding::percent_decode_str(value).decode_utf8_lossy().into_owned())
    })
}

/// The caller of this POST (sandlot's auth layer put it in the request), if known.
fn caller_of(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    parts.extensions.get::<Caller>().map(|caller| caller.name.clone())
}

/// A tool's text as its one TextContent (the one place every result's text passes), scrubbed of secrets
/// (`docs/profiles.md#codegen-sandbox-bash-and-scrubbing`), errors included.
fn text_result(result: Result<String, String>) -> CallToolResult {
    let scrubbed = |text: String| vec![ContentBlock::text(sandlot_core::scrub_secrets(&text).into_owned())];
    match result {
        Ok(text) => CallToolResult::success(scrubbed(text)),
        Err(text) => CallToolResult::error(scrubbed(text)),
    }
}

impl ServerHandler for CodegenMcp {
    fn get_info(&self) -> InitializeResult {
        let capabilities = ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build();
        let mut info =
            InitializeResult::new(capabilities).with_server_info(Implementation::new("codegen-sandbox", "0.1.0"));
        info.protocol_version = ProtocolVersion::V_2025_03_26;
        info
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let mut info = self.get_info();
        info.protocol_version = negotiated(request.protocol_version.as_str());
        context.peer.set_peer_info(request);
        Ok(info)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::registry().into_iter().map(|entry| entry.tool).collect()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::registry().into_iter().map(|entry| entry.tool).find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // A session id is a capability, but only for the caller that opened it.
        if caller_of(&context).is_some_and(|caller| caller != self.tenant.caller.name()) {
            let message = "this session belongs to another caller";
            return Err(McpError::new(ErrorCode::INVALID_REQUEST, message, None));
        }
        let name = request.name.to_string();
        let Some(entry) = tools::registry().into_iter().find(|entry| entry.tool.name == name) else {
            return Err(McpError::new(ErrorCode::INVALID_PARAMS, format!("tool '{name}' not found"), None));
        };
        let cancel = context.ct.child_token();
        let closed = self.closed.clone();
        let call = Call {
            state: self.state.clone(),
            tenant: self.tenant.clone(),
            arguments: request.arguments.unwrap_or_default(),
            cancel: cancel.clone(),
        };
        let result = tokio::select! {
            result = (entry.call)(call) => result,
            () = closed.cancelled() => Err("session closed".to_owned()),
        };
        // The workspace is a conversation id (validated, `[A-Za-z0-9._-]`); the tool name is the caller's.
        tracing::info!(
            tool = %Escaped(&name),
            ok = result.is_ok(),
            workspace = %self.tenant.workspace,
            "codegen tool call"
        );
        Ok(CallToolResponse::Complete(text_result(result)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reply_is_scrubbed_errors_too() {
        let text = |result: CallToolResult| {
            let block = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone());
            (block, result.is_error)
        };
        let key = "key AKIAIOSFODNN7EXAMPLE\nexit: 1\n".to_owned();
        let redacted = Some("key [REDACTED:aws-access-key]\nexit: 1\n".to_owned());
        assert_eq!(text(text_result(Ok(key.clone()))), (redacted.clone(), Some(false)));
        assert_eq!(text(text_result(Err(key))), (redacted, Some(true)));
    }
}
