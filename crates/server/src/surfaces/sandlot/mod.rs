//! sandlot's own surface: the rmcp handler ([`SandlotMcp`]) with its tools (`tools/`), the run history and the
//! conversations' files as MCP resources, live output as notifications, served over every MCP transport of the
//! kit; the event stream `/mcp/events`; the REST routes (`rest/`); the playground page; and the MCP Apps views
//! (`ui://` resources the tools link).

mod app_views;
mod events;
mod file_resources;
mod handler;
mod history_resources;
mod live_output;
mod live_tails;
mod live_view;
pub mod playground;
mod rest;
mod subscriptions;
mod tasks;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::response::Response;
use axum::routing::{any, delete, get, post};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::AppState;
use crate::kit::transport::legacy_sse::{self, LegacySessions, SessionFactory};
use crate::kit::transport::streamable_http::{self, McpServices};
use crate::kit::{AllowedHosts, Caller, Gate, Opens, require_bearer};

pub use file_resources::DEFAULT_RESOURCE_READ_BYTES;
pub use handler::SandlotMcp;
pub use history_resources::not_kept as output_not_kept;
pub use tools::ToolNames;

/// How the Streamable HTTP sessions of the surface are kept.
#[derive(Debug, Clone)]
pub struct Sessions {
    /// Hosts rmcp's own Host check lets through.
    pub allowed_hosts: AllowedHosts,
    /// A session unused this long is closed (clients then initialize again).
    pub idle: Duration,
    /// Most sessions open at once; an initialize beyond gets 503.
    pub max: usize,
}

/// The surface's routes, all behind `gate`, relative to its base: `/mcp` (Streamable HTTP), the legacy SSE pair at
/// `/sse` + `/message` and `/mcp/sse` + `/mcp/message`, `/mcp/events`, `/v1/runs...` and `/v1/conversations...`.
/// Every `GET` of the MCP routes opens a stream (the Streamable HTTP GET stream, a legacy SSE session, the event
/// stream), capped per caller and ended at the credential's expiry.
pub fn router(state: AppState, gate: &Gate, sessions: &Sessions) -> Router {
    let handler = SandlotMcp::new(state.clone(), Caller::anonymous());
    let session_manager = |idle: Duration| {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(idle);
        Arc::new(manager)
    };
    let service = |legacy_session_mode: bool, json_response: bool, manager: Arc<LocalSessionManager>| {
        let handler = handler.clone();
        let mut config = StreamableHttpServerConfig::default();
        config.allowed_hosts = sessions.allowed_hosts.to_vec();
        config.legacy_session_mode = legacy_session_mode;
        config.json_response = json_response;
        // Only the session-keeping service makes sessions; the stateless ones make a handler per request.
        let counted = legacy_session_mode.then_some("streamable_http");
        StreamableHttpService::new(
            move || Ok(counted.map_or_else(|| handler.for_session(), |t| handler.for_session().counted(t))),
            manager,
            config,
        )
    };
    let kept = session_manager(sessions.idle);
    let services = McpServices {
        sessions: service(true, false, kept.clone()),
        stateless: service(false, true, session_manager(sessions.idle)),
        stateless_sse: service(false, false, session_manager(sessions.idle)),
        session_manager: kept,
        max_sessions: sessions.max,
        session_runs: handler.session_runs(),
        owners: Default::default(),
    };
    let streamable = Router::new()
        .route("/mcp", any(streamable_http::endpoint::<SandlotMcp>))
        .route("/mcp/", any(streamable_http::endpoint::<SandlotMcp>))
        .with_state(services);
    let legacy = Router::new()
        .route("/sse", get(legacy_sse::open::<SandlotMcp>))
        .route("/mcp/sse", get(legacy_sse::open::<SandlotMcp>))
        .route("/message", post(legacy_sse::post::<SandlotMcp>))
        .route("/mcp/message", post(legacy_sse::post::<SandlotMcp>))
        .with_state(LegacySessions::new(handler.clone(), state.shutdown.clone(), sessions.max));
    let run_events = Router::new().route("/mcp/events", get(events::stream)).with_state(state.clone());
    let rest = Router::new()
        .route("/v1/runs", get(rest::runs::list))
        .route("/v1/runs/{run_id}", get(rest::runs::get))
        .route("/v1/runs/{run_id}/output", get(rest::runs::output))
        .route("/v1/conversations", get(rest::conversation_status::list))
        .route(
            "/v1/conversations/{conversation_id}",
            delete(rest::conversations::delete).get(rest::conversation_status::get),
        )
        .route("/v1/conversations/{conversation_id}/uploads", post(rest::conversations::upload_url))
        .with_state(state);
    // Route layers: only the routes above need the credential; an unknown path falls through to the app's 404,
    // with or without a credential, and is never counted as a failed authentication.
    let mcp = streamable.merge(legacy).merge(run_events).route_layer(axum::middleware::from_fn_with_state(
        gate.opening(Opens::stream_on_get).checking_messages(),
        require_bearer,
    ));
    mcp.merge(rest.route_layer(axum::middleware::from_fn_with_state(gate.clone(), require_bearer)))
}

/// Serves the tools on this process's stdin and stdout (caller `stdio`) until the client closes stdin.
pub async fn serve_stdio(state: AppState) -> std::io::Result<()> {
    let engine = state.engine.clone();
    crate::kit::transport::stdio::serve(&engine, |closed| {
        SandlotMcp::new(state, Caller::local("stdio")).ending_with(closed)
    })
    .await
}

impl SessionFactory for SandlotMcp {
    type Handler = SandlotMcp;
    fn for_session(
        &self,
        request: &Request,
        closed: tokio_util::sync::CancellationToken,
    ) -> Result<SandlotMcp, Box<Response>> {
        let caller = Caller::of(request.extensions());
        Ok(self.for_caller(caller).ending_with(closed))
    }
}
