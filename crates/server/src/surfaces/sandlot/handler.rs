//! The rmcp handler: server info and instructions, `tools/list` and `tools/call` (with live output), the run
//! history and conversations' files as resources, `subscriptions/listen` (2026-07-28) and `logging/setLevel`.
#![allow(deprecated)] // MCP logging is deprecated by SEP-2577, but clients of earlier protocol versions use it

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, GetTaskParams, GetTaskResult,
    Implementation, InitializeResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use sandlot_core::Escaped;
use tokio_util::sync::CancellationToken;

use super::live_output::{self, Listeners};
use super::{app_views, file_resources, history_resources as history, live_tails, subscriptions, tasks, tools};
use crate::AppState;
use crate::kit::rpc_errors as errors;
use crate::kit::telemetry::GaugeGuard;
use crate::kit::transport::session_runs::SessionRuns;
use crate::kit::{Caller, RequestSpan};
use tracing::Instrument;

/// What a model is told about the server at initialize, naming the tools as `tools/list` does.
fn instructions(names: tools::ToolNames) -> String {
    let (run_code, list_runners) =
        (tools::listed_name(tools::RUN_CODE, names), tools::listed_name(tools::LIST_RUNNERS, names));
    let upload_file = tools::listed_name(tools::UPLOAD_FILE, names);
    let session = tools::listed_name(tools::SESSION, names);
    let browser = tools::listed_name(tools::BROWSER, names);
    format!(
        "sandlot runs code in an isolated Linux sandbox with no network access. \
Call {run_code} with a conversationId (reuse the same id for the whole conversation), a language \
(python, typescript, javascript or bash) and the code. The code runs with /data as its working directory: files \
written there persist across calls with the same conversationId, and every file in /data comes back with a \
download URL. Each run has limits on time, memory, processes and output; print what you need to see. \
{list_runners} lists the available languages and their versions; {upload_file} puts a file (text or base64) \
into /data for the code to read. With session: true, {run_code} runs the code in the conversation's live sandbox, \
whose interpreter keeps variables, imports and background processes between calls; {session} reports, restarts or \
closes it. {browser} drives a headless browser in that live sandbox (navigate, screenshot, click, type...), with the \
sandbox's network."
    )
}

/// The MCP server: the default tool profile over the shared engine. One clone serves one session
/// ([`SandlotMcp::for_session`]), which keeps that session's logging level.
#[derive(Clone)]
pub struct SandlotMcp {
    state: AppState,
    /// Who calls when the request itself does not say (stdio; a legacy SSE session's opener).
    caller: Caller,
    /// The level the client set with `logging/setLevel`, for this session.
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
    /// Cancelled when the session's client went away (stdin closed, legacy SSE stream closed): its runs stop.
    session_end: CancellationToken,
    /// The calls in flight of every Streamable HTTP session, shared by all handlers, so `DELETE /mcp` can cancel a
    /// session's runs.
    session_runs: Arc<SessionRuns>,
    /// The server's tasks (2026-07-28), shared by every handler.
    tasks: Arc<tasks::Tasks>,
    /// This session's `resources/subscribe` URIs.
    subscriptions: subscriptions::LegacySubscriptions,
    /// The output of runs in flight (`sandlot://runs/{runId}/live`), shared by every handler.
    live_tails: Arc<live_tails::LiveTails>,
    /// Counts the session in `sandlot_mcp_sessions_open` until its handler (every clone) is dropped.
    _open: Option<Arc<GaugeGuard>>,
}

impl SandlotMcp {
    /// A handler over `state` whose calls come from `caller` unless an HTTP request names its own.
    pub fn new(state: AppState, caller: Caller) -> Self {
        Self {
            state,
            caller,
            log_level: Arc::default(),
            session_end: CancellationToken::new(),
            session_runs: Arc::default(),
            subscriptions: Default::default(),
            tasks: Arc::default(),
            live_tails: Arc::default(),
            _open: None,
        }
    }

    /// The calls in flight of every Streamable HTTP session served by this handler and its sessions.
    pub fn session_runs(&self) -> Arc<SessionRuns> {
        self.session_runs.clone()
    }

    /// The same handler, counted as an open session of `transport` (see [`crate::kit::telemetry::TRANSPORTS`]) while it
    /// lives.
    pub fn counted(self, transport: &'static str) -> Self {
        Self { _open: Some(Arc::new(crate::kit::telemetry::session_opened(transport))), ..self }
    }

    /// A handler for a new session: the same server, no logging level yet.
    pub fn for_session(&self) -> Self {
        Self {
            session_runs: self.session_runs.clone(),
            tasks: self.tasks.clone(),
            live_tails: self.live_tails.clone(),
            ..Self::new(self.state.clone(), self.caller.clone())
        }
    }

    /// The same handler, whose runs are cancelled when `session_end` is.
    pub fn ending_with(self, session_end: CancellationToken) -> Self {
        Self { session_end, ..self }
    }

    /// A handler for a new session of `caller`.
    pub fn for_caller(&self, caller: Caller) -> Self {
        Self { caller, ..self.for_session() }
    }

    /// The authenticated caller of this request (set by the HTTP auth layer), else the session's.
    fn caller_of(&self, context: &RequestContext<RoleServer>) -> Caller {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .map_or_else(|| self.caller.clone(), Caller::clone)
    }

    fn log_level(&self) -> Option<LoggingLevel> {
        *self.log_level.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `tools/call` as a task, when the request may have one (2026-07-28, the client declares the Tasks extension,
    /// a tool that runs code or drives a browser) and its tenant has room: the handle, or `None` to answer it on
    /// its request.
    fn as_task(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Option<CallToolResponse> {
        let modern = context.protocol_version().is_some_and(|version| !version.has_initialize());
        let declared = context.client_capabilities().is_some_and(|capabilities| capabilities.supports_tasks());
        if !(modern && declared && tools::runs_as_task(&request.name)) {
            return None;
        }
        let caller = self.caller_of(context);
        let (state, name) = (self.state.clone(), request.name.clone());
        let arguments = request.arguments.clone().unwrap_or_default();
        let tenant = caller.name.clone();
        // A conversation id that would not be one is left out: the call fails on it all the same.
        let conversation = arguments
            .get("conversationId")
            .and_then(serde_json::Value::as_str)
            .filter(|id| sandlot_core::ConversationId::parse(id).is_ok())
            .map(str::to_owned);
        let started =
            self.tasks.start(&tenant, conversation.as_deref(), &self.state.shutdown, move |cancel| async move {
                let result = tools::call(&state, &name, arguments, caller, &(), cancel).await;
                errors::arguments_errors_as_results(result, Some(&ProtocolVersion::V_2026_07_28))
            });
        let task = started?;
        tracing::info!(tool = %Escaped(&request.name), task = %task.task_id, "tool call as a task");
        Some(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    /// `tools/call`: runs the tool with live output and logs the call.
    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Before the run exists, so its live output is followed from its first byte.
        self.live_tails.start(&self.state);
        if let Some(task) = self.as_task(&request, &context) {
            return Ok(task);
        }
        let arguments = request.arguments.unwrap_or_default();
        let started = std::time::Instant::now();
        let caller = self.caller_of(&context);
        let version = context.protocol_version();
        let log_level = live_output::log_level_of_request(&context.meta, version.as_ref(), self.log_level());
        let listeners = Listeners { progress: context.meta.get_progress_token(), log_level };
        // The run is killed, and ends as cancelled, on `notifications/cancelled` or a stateless HTTP request
        // dropped (rmcp cancels `context.ct`), or when the session's client goes away (`session_end`).
        // Over Streamable HTTP, also when the session is ended with `DELETE /mcp` (see `SessionRuns`).
        let cancel = self.session_end.child_token();
        let _stop_linking = cancel.clone().drop_guard();
        let session_call = session_id(&context).map(|id| self.session_runs.enter(id));
        let session_ended = session_call.as_ref().map_or_else(CancellationToken::new, |call| call.ended());
        let (request_ct, linked) = (context.ct.clone(), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = request_ct.cancelled() => linked.cancel(),
                () = session_ended.cancelled() => linked.cancel(),
                () = linked.cancelled() => {}
            }
        });
        let result = match live_output::forward(context.peer.clone(), listeners) {
            Some((sink, forwarder)) => {
                let result = tools::call(&self.state, &request.name, arguments, caller, &sink, cancel).await;
                drop(sink);
                let _ = forwarder.await; // all live output goes out before the result
                result
            }
            None => tools::call(&self.state, &request.name, arguments, caller, &(), cancel).await,
        };
        let result = errors::arguments_errors_as_results(result, version.as_ref());
        tracing::info!(
            tool = %Escaped(&request.name),
            ok = result.is_ok(),
            is_error = result.as_ref().ok().and_then(|r| r.is_error),
            duration_ms = started.elapsed().as_millis() as u64,
            "tool call"
        );
        result.map(CallToolResponse::Complete)
    }
}

/// The `Mcp-Session-Id` of the HTTP request that carried this call, if any.
fn session_id(context: &RequestContext<RoleServer>) -> Option<&str> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get("mcp-session-id"))
        .and_then(|value| value.to_str().ok())
}

impl ServerHandler for SandlotMcp {
    fn get_info(&self) -> InitializeResult {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_logging()
            .enable_tasks()
            .build();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("sandlot", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions(self.state.tool_names))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::catalogue(self.state.tool_names).to_vec()))
    }

    /// Either name of a tool finds it (the unlisted form is an alias).
    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::find(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // rmcp runs the call in a task of its own: its lines (the run's included) go in the span of the HTTP request
        // that carried it, with the request id (a legacy SSE POST's parts are carried too). Over stdio there is none.
        let span = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<RequestSpan>())
            .map_or_else(tracing::Span::none, |span| span.0.clone());
        self.call(request, context).instrument(span).await
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        subscriptions::accepted(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let caller = self.caller_of(context.request_context());
        subscriptions::listen(&self.state, caller, context).await;
        Ok(())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if subscriptions::sessionless(&context) {
            let message = "resources/subscribe needs a session (initialize first), or use subscriptions/listen \
                           (protocol 2026-07-28)";
            return Err(McpError::invalid_request(message, None));
        }
        let caller = self.caller_of(&context);
        self.subscriptions.subscribe(&self.state, caller, request.uri, context.peer.clone(), &self.session_end)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscriptions.unsubscribe(&request.uri);
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let owner = self.caller_of(&context).name;
        self.tasks.get(&owner, &request.task_id).map(GetTaskResult::new)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = self.caller_of(&context).name;
        self.tasks.cancel(&owner, &request.task_id)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        *self.log_level.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(request.level);
        Ok(())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        // The newest runs on the first page, then the files of the newest conversations, a page at a time.
        let cursor = request.and_then(|r| r.cursor);
        let tenant = self.caller_of(&context).tenant();
        // The listing walks directories, which blocks: on the blocking pool, never on the runtime's workers.
        let (state, caller, page) = (self.state.clone(), tenant.clone(), cursor.clone());
        let (files, next) = tokio::task::spawn_blocking(move || file_resources::list(&state, &caller, page.as_deref()))
            .await
            .map_err(|e| McpError::internal_error(format!("resources/list failed: {e}"), None))??;
        let mut result = match cursor {
            None if self.state.engine.history().is_some() => history::list(&self.state, &tenant)?,
            None => ListResourcesResult::with_all_items(Vec::new()),
            Some(_) => ListResourcesResult::with_all_items(Vec::new()),
        };
        // The MCP Apps views, on the first page.
        if cursor.is_none() {
            result.resources.extend(app_views::list());
        }
        result.resources.extend(files);
        result.next_cursor = next;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let mut templates = history::templates();
        templates.push(live_tails::template());
        templates.push(file_resources::template());
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if let Some(view) = app_views::read(&request.uri) {
            return Ok(ReadResourceResponse::Complete(view));
        }
        let tenant = self.caller_of(&context).tenant();
        self.live_tails.start(&self.state);
        if let Some(live) = self.live_tails.read(&self.state, &tenant, &request.uri) {
            return live.map(ReadResourceResponse::Complete);
        }
        if let Some((conversation, path)) = file_resources::parse(&request.uri) {
            return file_resources::read(&self.state, &tenant, &request.uri, conversation, path)
                .await
                .map(ReadResourceResponse::Complete);
        }
        history::read(&self.state, &tenant, &request.uri).map(ReadResourceResponse::Complete)
    }
}
