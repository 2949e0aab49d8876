//! `/mcp`: the Streamable HTTP endpoint in front of rmcp's services, made as lenient as real clients need
//! (`reference/mcp-interop-pitfalls.md`) and as strict as the contract says.
//!
//! - A POST is read (at most 1 MiB: 413 beyond) and checked before rmcp sees it: malformed JSON gets JSON-RPC
//!   -32700, something that is not a JSON-RPC message (or a batch) gets -32600, both in a JSON body with HTTP 400.
//! - The `server/discover` probe of 2026-07-28 clients gets -32601 at once, so they fall back to initialize.
//! - `initialize`, and anything carrying an `Mcp-Session-Id`, goes to the session-keeping service; any other
//!   request without a session is served statelessly (so `tools/list` and `tools/call` work without initialize).
//! - `Accept` is read as a list: a client that accepts either JSON or SSE (or `*/*`) is served; 406 only when it
//!   accepts neither.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::mcp::SandlotMcp;

/// Largest request body accepted on `/mcp`.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

type Service = StreamableHttpService<SandlotMcp, LocalSessionManager>;

/// The two rmcp services behind `/mcp`.
#[derive(Clone)]
pub struct McpServices {
    pub sessions: Service,
    pub stateless: Service,
}

fn jsonrpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
    (status, axum::Json(body)).into_response()
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

/// Rewrites `Accept` to what rmcp insists on; false (answer 406) when the client accepts neither JSON nor SSE.
fn normalize_accept(headers: &mut HeaderMap, method: &Method) -> bool {
    let types = media_types(headers);
    let any = types.is_empty() || types.iter().any(|t| t == "*/*" || t == "application/*" || t == "text/*");
    let json = any || types.iter().any(|t| t == "application/json");
    let sse = any || types.iter().any(|t| t == "text/event-stream");
    let acceptable = if method == Method::GET { sse } else { json || sse };
    if acceptable {
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
    }
    acceptable
}

/// Handles every method on `/mcp` and `/mcp/`.
pub async fn endpoint(State(services): State<McpServices>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    if !normalize_accept(&mut parts.headers, &parts.method) {
        let message = "Not Acceptable: accept application/json or text/event-stream";
        return (StatusCode::NOT_ACCEPTABLE, message).into_response();
    }
    if parts.method != Method::POST {
        let request = Request::from_parts(parts, body);
        return forward(services.sessions, request).await;
    }
    let bytes: Bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return jsonrpc_error(StatusCode::PAYLOAD_TOO_LARGE, Value::Null, -32600, "request body is over 1 MiB");
        }
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(e) => return jsonrpc_error(StatusCode::BAD_REQUEST, Value::Null, -32700, &format!("parse error: {e}")),
    };
    let Some(object) = message.as_object() else {
        let what = if message.is_array() { "batches are not supported" } else { "not a JSON-RPC message" };
        return jsonrpc_error(StatusCode::BAD_REQUEST, Value::Null, -32600, &format!("invalid request: {what}"));
    };
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    let method = object.get("method").and_then(Value::as_str);
    let is_message = object.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && (method.is_some() || object.contains_key("result") || object.contains_key("error"));
    if !is_message {
        return jsonrpc_error(StatusCode::BAD_REQUEST, id, -32600, "invalid request: not a JSON-RPC 2.0 message");
    }
    if method == Some("server/discover") {
        return jsonrpc_error(StatusCode::OK, id, -32601, "method not found: server/discover");
    }
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let stateful = parts.headers.contains_key("mcp-session-id") || method == Some("initialize");
    let request = Request::from_parts(parts, Body::from(bytes));
    forward(if stateful { services.sessions } else { services.stateless }, request).await
}

async fn forward(service: Service, request: Request) -> Response {
    match service.oneshot(request).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    }
}
