//! `<base>/mcp`: Baponi's stateless Streamable HTTP endpoint (`docs/profiles.md#baponi-mcp`), in front of a
//! session-less rmcp service over [`BaponiMcp`].
//!
//! - Every request is served on its own: no `Mcp-Session-Id` is issued, one sent is ignored, `tools/call` needs no
//!   `initialize`. Notifications get 202 with an empty body.
//! - A POST is read and checked by sandlot's own [`jsonrpc::read_message`] (1 MiB, -32700, -32600); the reply is
//!   JSON unless the client accepts only `text/event-stream`.
//! - `Mcp-Protocol-Version`, when present, must be a version sandlot speaks (else 400).
//! - `GET` with `Accept: text/event-stream` opens an SSE stream on which nothing is ever sent; it stays open until
//!   the client leaves or the server shuts down. `DELETE` (no session to end) is 405.
//! - Auth: sandlot's bearer check with Baponi's 401 body and its limit of 3 wrong keys per minute per address.

use std::convert::Infallible;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use rmcp::model::ProtocolVersion;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;

use super::BaponiState;
use super::mcp::BaponiMcp;
use crate::kit::jsonrpc::{error_response, read_message};
use crate::kit::transport::streamable_http::{accepts, forward};
use crate::kit::{FailureRendering, Gate, Opens};

/// Baponi's 401 message and its failure limit.
pub const AUTH: FailureRendering = FailureRendering { message: "Invalid or revoked API key.", failures_per_minute: 3 };

type Service = StreamableHttpService<BaponiMcp, LocalSessionManager>;

#[derive(Clone)]
struct Services {
    json: Service,
    sse: Service,
    shutdown: tokio_util::sync::CancellationToken,
}

/// The protocol versions a client may name in `Mcp-Protocol-Version`.
const VERSIONS: [ProtocolVersion; 4] = [
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
];

/// `<base>/mcp` (and `<base>/mcp/`), behind `gate`: Baponi's flavour of the kit's gate (`Gate::for_profile(AUTH)`,
/// made once by `baponi::router` for the MCP and REST routes together); its `GET` stream is capped per caller and
/// ends at the credential's expiry.
pub fn router(state: BaponiState, gate: &Gate) -> Router {
    let handler = BaponiMcp::new(state.clone());
    let service = |json_response: bool| {
        let handler = handler.clone();
        let mut config = StreamableHttpServerConfig::default();
        // Host checks are done once for the whole app (`origin::check`).
        config.allowed_hosts = Vec::new();
        config.legacy_session_mode = false;
        config.json_response = json_response;
        StreamableHttpService::new(move || Ok(handler.clone()), Default::default(), config)
    };
    let services = Services { json: service(true), sse: service(false), shutdown: state.app.shutdown.clone() };
    Router::new().route("/mcp", any(endpoint)).route("/mcp/", any(endpoint)).with_state(services).route_layer(
        axum::middleware::from_fn_with_state(gate.opening(Opens::stream_on_get), crate::kit::require_bearer),
    )
}

async fn endpoint(State(services): State<Services>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    if let Some(version) = parts.headers.get("mcp-protocol-version") {
        let known = version.to_str().is_ok_and(|v| VERSIONS.iter().any(|known| known.as_str() == v));
        if !known {
            let message = format!("unsupported Mcp-Protocol-Version {version:?}; supported: 2025-11-25");
            return error_response(StatusCode::BAD_REQUEST, Value::Null, -32600, &message);
        }
    }
    let accepts = accepts(&mut parts.headers);
    if parts.method == Method::GET {
        if !accepts.sse {
            return (StatusCode::NOT_ACCEPTABLE, "Not Acceptable: GET needs Accept: text/event-stream").into_response();
        }
        return idle_stream(services.shutdown);
    }
    if parts.method != Method::POST {
        let mut response = (StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed: use POST or GET").into_response();
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
        return response;
    }
    let (bytes, _message) = match read_message(body).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove("mcp-session-id");
    let service = if accepts.json { services.json } else { services.sse };
    forward(service, Request::from_parts(parts, Body::from(bytes))).await
}

/// An SSE stream on which the server never sends a message (Baponi has nothing to push), with keep-alive comments.
fn idle_stream(shutdown: tokio_util::sync::CancellationToken) -> Response {
    let stream = futures::stream::once(async move {
        shutdown.cancelled_owned().await;
        Ok::<Event, Infallible>(Event::default().comment("server shutting down"))
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}
