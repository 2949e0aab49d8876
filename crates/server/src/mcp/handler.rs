//! The rmcp handler: server info and instructions, `tools/list` and `tools/call`.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use super::tools;
use crate::AppState;

/// What a model is told about the server at initialize.
const INSTRUCTIONS: &str = "sandlot runs code in an isolated Linux sandbox with no network access. \
Call sandbox.run_code with a conversationId (reuse the same id for the whole conversation), a language \
(python, typescript, javascript or bash) and the code. The code runs with /data as its working directory: files \
written there persist across calls with the same conversationId, and every file in /data comes back with a \
download URL. Each run has limits on time, memory, processes and output; print what you need to see. \
sandbox.list_runners lists the available languages and their versions.";

/// The MCP server: the default tool profile over the shared engine.
#[derive(Clone)]
pub struct SandlotMcp {
    state: AppState,
}

impl SandlotMcp {
    /// A handler over `state`.
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

impl ServerHandler for SandlotMcp {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sandlot", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::catalogue().to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::catalogue().iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = request.arguments.unwrap_or_default();
        let started = std::time::Instant::now();
        let result = match context.meta.get_progress_token() {
            Some(token) => {
                let (sink, forwarder) = super::progress::forward(context.peer.clone(), token);
                // `notifications/cancelled` (and, for HTTP, the client going away) cancels `context.ct`: the run is
                // then killed and ends as cancelled.
                let result = tools::call(&self.state, &request.name, arguments, &sink, context.ct.clone()).await;
                drop(sink);
                let _ = forwarder.await; // every progress notification goes out before the result
                result
            }
            None => tools::call(&self.state, &request.name, arguments, &(), context.ct.clone()).await,
        };
        tracing::info!(
            tool = %request.name,
            ok = result.is_ok(),
            is_error = result.as_ref().ok().and_then(|r| r.is_error),
            duration_ms = started.elapsed().as_millis() as u64,
            "tool call"
        );
        result.map(CallToolResponse::Complete)
    }
}
