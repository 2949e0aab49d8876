//! `/mcp`: the Streamable HTTP endpoint in front of rmcp's services, made as lenient as real clients need
//! (what the official Python and TypeScript SDKs, rmcp, the MCP Inspector and mcp-remote were seen sending, below)
//! and as strict as the contract says.
//!
//! - A POST is read (at most 1 MiB: 413 beyond) and checked before rmcp sees it: malformed JSON gets JSON-RPC
//!   -32700, something that is not a JSON-RPC message (or a batch) gets -32600, both in a JSON body with HTTP 400.
//! - `initialize`, and anything carrying an `Mcp-Session-Id`, goes to the session-keeping service; any other
//!   request without a session is served statelessly (so `tools/list` and `tools/call` work without initialize).
//! - Protocol 2026-07-28 is stateless: its requests (`server/discover` and every request whose `_meta` names the
//!   version) go to the stateless services, where rmcp checks their `MCP-Protocol-Version`, `Mcp-Method`,
//!   `Mcp-Name` and `Mcp-Param-*` headers against the body (-32020 HeaderMismatch, HTTP 400) and cancels the
//!   request when its response stream closes.
//! - `Accept` is read as a list: a client that accepts either JSON or SSE (or `*/*`) is served; 406 only when it
//!   accepts neither.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::Value;
use tower::ServiceExt;

use super::session_runs::SessionRuns;
use crate::kit::jsonrpc::{error_response, read_message};

type Service<H> = StreamableHttpService<H, LocalSessionManager>;

/// The rmcp services of one surface's handler `H` behind `/mcp`, and the cap on sessions.
pub struct McpServices<H: rmcp::ServerHandler + Send + 'static> {
    pub sessions: Service<H>,
    /// Stateless requests, answered with a JSON body.
    pub stateless: Service<H>,
    /// Stateless requests from a client that accepts only `text/event-stream`, answered as an SSE stream.
    pub stateless_sse: Service<H>,
    pub session_manager: std::sync::Arc<LocalSessionManager>,
    pub max_sessions: usize,
    /// The sessions' calls in flight, cancelled when their session is deleted.
    pub session_runs: std::sync::Arc<SessionRuns>,
    /// The tenant that opened each session: only it may use the session.
    pub owners: SessionOwners,
}

/// Which tenant opened each Streamable HTTP session.
#[derive(Clone, Default)]
pub struct SessionOwners(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>);

impl SessionOwners {
    fn table(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, String>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Makes a request that names another tenant's session name one that does not exist instead, so that rmcp answers
/// it exactly as it answers an unknown session.
fn hide_other_tenants_session(parts: &mut axum::http::request::Parts, owners: &SessionOwners) {
    let Some(session) = parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) else { return };
    let owned_by_another =
        owners.table().get(session).is_some_and(|owner| *owner != crate::kit::Caller::of(&parts.extensions).name);
    if owned_by_another {
        let unknown = uuid::Uuid::new_v4().to_string();
        if let Ok(value) = HeaderValue::from_str(&unknown) {
            parts.headers.insert("mcp-session-id", value);
        }
    }
}

impl<H: rmcp::ServerHandler + Send + 'static> Clone for McpServices<H> {
    fn clone(&self) -> Self {
        Self {
            sessions: self.sessions.clone(),
            stateless: self.stateless.clone(),
            stateless_sse: self.stateless_sse.clone(),
            session_manager: self.session_manager.clone(),
            max_sessions: self.max_sessions,
            session_runs: self.session_runs.clone(),
            owners: self.owners.clone(),
        }
    }
}

fn media_types(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|part| part.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .collect()
}

/// What a client's `Accept` allows.
pub struct Accepts {
    pub json: bool,
    pub sse: bool,
}

/// Reads `Accept` as a list, then rewrites it to what rmcp insists on (both types).
pub fn accepts(headers: &mut HeaderMap) -> Accepts {
    let types = media_types(headers);
    let any = types.is_empty() || types.iter().any(|t| t == "*/*" || t == "application/*" || t == "text/*");
    let json = any || types.iter().any(|t| t == "application/json");
    let sse = any || types.iter().any(|t| t == "text/event-stream");
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
    Accepts { json, sse }
}

/// Handles every method on `/mcp` and `/mcp/`.
pub async fn endpoint<H: rmcp::ServerHandler + Send + 'static>(
    State(services): State<McpServices<H>>,
    request: Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let accepts = accepts(&mut parts.headers);
    let acceptable = if parts.method == Method::GET { accepts.sse } else { accepts.json || accepts.sse };
    if !acceptable {
        let message = "Not Acceptable: accept application/json or text/event-stream";
        return (StatusCode::NOT_ACCEPTABLE, message).into_response();
    }
    hide_other_tenants_session(&mut parts, &services.owners);
    if parts.method == Method::DELETE {
        // rmcp answers a session's end with 202; the official SDKs' clients (Python, TypeScript) take only 200 or
        // 204 as success and log a failed termination otherwise. Nothing is pending after a DELETE: 200.
        let session = parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut response = forward(services.sessions, Request::from_parts(parts, body)).await;
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
        // rmcp ended the session (it knew it): its runs stop now, not when their streams are found closed.
        if let Some(session) = session.filter(|_| response.status().is_success()) {
            services.session_runs.end(&session);
            services.owners.table().remove(&session);
        }
        return response;
    }
    if parts.method != Method::POST {
        let request = Request::from_parts(parts, body);
        return forward(services.sessions, request).await;
    }
    let (bytes, message) = match read_message(body).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message.get("method").and_then(Value::as_str);
    if let Some(refused) = crate::kit::oauth::refuse_message(&parts.extensions, method, &id) {
        return refused;
    }
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let stateful = parts.headers.contains_key("mcp-session-id") || method == Some("initialize");
    if method == Some("initialize") && services.session_manager.sessions.read().await.len() >= services.max_sessions {
        let message = format!("too many open sessions (at most {}); retry later", services.max_sessions);
        return error_response(StatusCode::SERVICE_UNAVAILABLE, id, -32000, &message);
    }
    let initialize = method == Some("initialize");
    let tenant = crate::kit::Caller::of(&parts.extensions).name;
    let request = Request::from_parts(parts, Body::from(bytes));
    let service = match (stateful, accepts.json) {
        (true, _) => services.sessions.clone(),
        (false, true) => services.stateless.clone(),
        (false, false) => services.stateless_sse.clone(),
    };
    let response = forward(service, request).await;
    if initialize && let Some(session) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        let open = services.session_manager.sessions.read().await;
        let mut owners = services.owners.table();
        // Sessions rmcp closed (idle) leave their entry: dropped here, bounded by the open sessions.
        if owners.len() > services.max_sessions {
            owners.retain(|id, _| open.contains_key(id.as_str()));
        }
        owners.insert(session.to_owned(), tenant);
    }
    response
}

/// Hands a request to an rmcp service (sandlot's or a profile's).
pub async fn forward<H>(service: StreamableHttpService<H, LocalSessionManager>, request: Request) -> Response
where
    H: rmcp::ServerHandler + Send + 'static,
{
    match service.oneshot(request).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    }
}
