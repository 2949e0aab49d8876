//! The HTTP face: `fn app(state) -> Router` with `/mcp` (Streamable HTTP), signed `/files` downloads and
//! `/healthz`, behind bearer-token authentication where the contract asks for it.

mod auth;
mod files;
mod jsonrpc;
mod legacy_sse;
mod mcp_endpoint;

use std::sync::Arc;

use axum::Router;
use axum::routing::{any, get, post};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use auth::BearerToken;

use crate::AppState;
use crate::mcp::SandlotMcp;

/// The whole HTTP app. `/mcp` needs the bearer token; `/files` (signed URLs) and `/healthz` do not.
pub fn app(state: AppState, token: BearerToken, allowed_hosts: Vec<String>) -> Router {
    let handler = SandlotMcp::new(state.clone());
    let service = |legacy_session_mode: bool| {
        let handler = handler.clone();
        let mut config = StreamableHttpServerConfig::default();
        config.allowed_hosts = allowed_hosts.clone();
        config.legacy_session_mode = legacy_session_mode;
        config.json_response = !legacy_session_mode;
        StreamableHttpService::new(move || Ok(handler.clone()), Arc::new(LocalSessionManager::default()), config)
    };
    let services = mcp_endpoint::McpServices { sessions: service(true), stateless: service(false) };
    let streamable = Router::new()
        .route("/mcp", any(mcp_endpoint::endpoint))
        .route("/mcp/", any(mcp_endpoint::endpoint))
        .with_state(services);
    let legacy = Router::new()
        .route("/sse", get(legacy_sse::open))
        .route("/mcp/sse", get(legacy_sse::open))
        .route("/message", post(legacy_sse::post))
        .route("/mcp/message", post(legacy_sse::post))
        .with_state(legacy_sse::LegacySessions::new(handler.clone()));
    let protected = streamable.merge(legacy).layer(axum::middleware::from_fn_with_state(token, auth::require_bearer));
    Router::new()
        .merge(protected)
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/files/{conversation_id}/{*path}", get(files::download))
        .with_state(state)
}
