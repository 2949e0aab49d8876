//! The HTTP face: `fn app(state) -> Router` with `/mcp` (Streamable HTTP), the legacy SSE pair, `/mcp/events`,
//! the run history at `/v1/runs`, the playground at `/`, signed `/files` downloads, `/healthz` and `/readyz`, behind
//! bearer-token authentication where the contract asks for it; the drop-in profiles under `/p/<name>`, one of them
//! possibly at the root (then sandlot's own MCP and REST routes are only under `/p/sandlot`).

mod auth;
mod client_addr;
mod connections;
mod conversations;
mod credentials;
mod events;
mod files;
pub(crate) mod jsonrpc;
pub(crate) mod legacy_sse;
pub(crate) mod mcp_endpoint;
mod ops;
mod origin;
mod playground;
mod request_log;
mod rest_error;
mod runs;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, delete, get, post};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

pub use auth::{
    AuthLimits, Authenticator, Caller, FailureRendering, MAX_TRACKED as MAX_TRACKED_CLIENTS, Refusal, require_bearer,
};
pub use client_addr::{ClientIpHeader, TrustedProxy};
pub use connections::{ConnectionLimits, raise_nofile_limit, serve};
pub use credentials::{Credentials, JwtSettings};
pub use ops::ops_app;
pub use origin::AllowedHosts;
pub use request_log::{REQUEST_ID, RequestSpan};

pub(crate) use files::{MAX_UPLOAD_BYTES, UPLOAD_URL_TTL, serve_file};
pub(crate) use rest_error::rest_error;

use crate::AppState;
use crate::mcp::SandlotMcp;

/// Settings of the HTTP face.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Hosts (and so origins) requests may address.
    pub allowed_hosts: AllowedHosts,
    /// A session unused this long is closed (clients then initialize again).
    pub session_idle: Duration,
    /// Most Streamable HTTP sessions open at once; an initialize beyond gets 503.
    pub max_sessions: usize,
    /// The drop-in profiles served under `/p/<name>` beside sandlot's own surface.
    pub profiles: Vec<crate::mcp::profiles::Profile>,
    /// What the profiles are configured with (Baponi's volumes).
    pub profile_settings: crate::mcp::profiles::Settings,
    /// A profile served at the root paths; sandlot's own MCP and REST routes are then only under `/p/sandlot`.
    pub root_profile: Option<crate::mcp::profiles::Profile>,
}

impl HttpOptions {
    /// Loopback hosts, 30 min idle sessions, at most 1000 of them.
    pub fn new(allowed_hosts: AllowedHosts) -> Self {
        Self {
            allowed_hosts,
            session_idle: Duration::from_secs(30 * 60),
            max_sessions: 1000,
            profiles: crate::mcp::profiles::Profile::ALL.to_vec(),
            profile_settings: Default::default(),
            root_profile: None,
        }
    }
}

/// The whole HTTP app. The MCP endpoints and `/v1/runs` need the bearer token; the playground page, `/files`
/// (signed URLs), `/healthz`, `/readyz` and the OAuth discovery probes (answered 404 at once: sandlot does not do
/// OAuth) do not; any other path is 404 without asking for a credential. Every route checks `Host` and
/// `Origin`; CORS lets browser clients on allowed origins call the MCP endpoints.
pub fn app(state: AppState, token: Authenticator, options: HttpOptions) -> Router {
    let HttpOptions { allowed_hosts, session_idle, max_sessions, profiles, profile_settings, root_profile } = options;
    let handler = SandlotMcp::new(state.clone(), "anonymous");
    let session_manager = |idle: Duration| {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(idle);
        Arc::new(manager)
    };
    let service = |legacy_session_mode: bool, json_response: bool, manager: Arc<LocalSessionManager>| {
        let handler = handler.clone();
        let mut config = StreamableHttpServerConfig::default();
        config.allowed_hosts = allowed_hosts.to_vec();
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
    let sessions = session_manager(session_idle);
    let services = mcp_endpoint::McpServices {
        sessions: service(true, false, sessions.clone()),
        stateless: service(false, true, session_manager(session_idle)),
        stateless_sse: service(false, false, session_manager(session_idle)),
        session_manager: sessions,
        max_sessions,
        session_runs: handler.session_runs(),
    };
    let streamable = Router::new()
        .route("/mcp", any(mcp_endpoint::endpoint))
        .route("/mcp/", any(mcp_endpoint::endpoint))
        .with_state(services);
    let legacy = Router::new()
        .route("/sse", get(legacy_sse::open))
        .route("/mcp/sse", get(legacy_sse::open))
        .route("/message", post(legacy_sse::post))
        .route("/mcp/message", post(legacy_sse::post))
        .with_state(legacy_sse::LegacySessions::new(handler.clone(), state.shutdown.clone(), max_sessions));
    let run_events = Router::new().route("/mcp/events", get(events::stream)).with_state(state.clone());
    let rest = Router::new()
        .route("/v1/runs", get(runs::list))
        .route("/v1/runs/{run_id}", get(runs::get))
        .route("/v1/runs/{run_id}/output", get(runs::output))
        .route("/v1/conversations/{conversation_id}", delete(conversations::delete))
        .route("/v1/conversations/{conversation_id}/uploads", post(conversations::upload_url))
        .with_state(state.clone());
    let protected = streamable
        .merge(legacy)
        .merge(run_events)
        .merge(rest)
        // A route layer: only the routes above need the token; an unknown path falls through to 404 below, with or
        // without a credential, and is never counted as a failed authentication.
        .route_layer(axum::middleware::from_fn_with_state(token.clone(), auth::require_bearer));
    // Each profile's router is built once (its state, Baponi's busy threads, is shared by its two mounts).
    let mut mounted: Vec<(crate::mcp::profiles::Profile, Router)> = Vec::new();
    for profile in profiles.iter().copied().chain(root_profile) {
        if !mounted.iter().any(|(p, _)| *p == profile) {
            mounted.push((profile, profile.router(state.clone(), token.clone(), &profile_settings)));
        }
    }
    let router_of = |profile| mounted.iter().find(|(p, _)| *p == profile).map(|(_, r)| r.clone()).unwrap_or_default();
    // sandlot's own surface: at the root unless a profile has it, and always under /p/sandlot.
    let own_at_root = if root_profile.is_none() { protected.clone() } else { Router::new() };
    let mut router = Router::new()
        .merge(own_at_root)
        .nest(crate::mcp::profiles::SANDLOT_PREFIX, protected)
        .route("/", get(playground::index))
        .route("/assets/playground.css", get(playground::css))
        .route("/assets/playground.js", get(playground::js))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ops::readyz))
        .route("/files/{conversation_id}/{*path}", get(files::download).put(files::upload))
        .route("/.well-known/{*probe}", any(not_found))
        .fallback(not_found)
        .with_state(state.clone());
    if let Some(profile) = root_profile {
        router = router.merge(router_of(profile));
    }
    for profile in profiles {
        router = router.nest(&profile.prefix(), router_of(profile));
    }
    let router = router
        .layer(axum::middleware::from_fn_with_state(allowed_hosts.clone(), origin::check))
        .layer(cors(allowed_hosts));
    request_log::around(router)
}

async fn not_found() -> axum::response::Response {
    use axum::response::IntoResponse;
    (axum::http::StatusCode::NOT_FOUND, axum::Json(serde_json::json!({ "error": "not_found" }))).into_response()
}

/// CORS for browser clients (the playground, the MCP Inspector) on allowed origins, on errors too.
fn cors(allowed: AllowedHosts) -> tower_http::cors::CorsLayer {
    use axum::http::{HeaderName, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let headers = [
        "authorization",
        "content-type",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "x-request-id",
    ];
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| origin.to_str().is_ok_and(|o| allowed.allows_origin(o))))
        .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
        .allow_headers(headers.map(HeaderName::from_static))
        .expose_headers([HeaderName::from_static("mcp-session-id"), request_log::REQUEST_ID])
}
