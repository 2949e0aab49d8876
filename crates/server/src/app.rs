//! The one place the surfaces are composed: `fn app(state, auth, options) -> Router`. sandlot's own surface (MCP on
//! every transport, `/mcp/events`, the REST routes) at the root and under `/p/sandlot`, its playground at `/`; the
//! drop-in profiles under `/p/<name>`, one of them possibly at the root (then sandlot's own MCP and REST routes are
//! only under `/p/sandlot`); the kit's routes that belong to no surface (signed `/files`, `/healthz`, `/readyz`,
//! 404s); and the kit's layers around all of it (request log, CORS, Host/Origin, the body pace).

use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};

use crate::AppState;
use crate::kit::{
    AllowedHosts, Authenticator, BodyLimits, Gate, StreamCap, cors, log_requests, not_found, pace_bodies, readyz,
};
use crate::surfaces::{Profile, SANDLOT_PREFIX, Settings, sandlot};

/// Settings of the HTTP app.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Hosts (and so origins) requests may address.
    pub allowed_hosts: AllowedHosts,
    /// A session unused this long is closed (clients then initialize again).
    pub session_idle: Duration,
    /// Most Streamable HTTP sessions open at once; an initialize beyond gets 503.
    pub max_sessions: usize,
    /// The drop-in profiles served under `/p/<name>` beside sandlot's own surface.
    pub profiles: Vec<Profile>,
    /// What the profiles are configured with (Baponi's volumes).
    pub profile_settings: Settings,
    /// A profile served at the root paths; sandlot's own MCP and REST routes are then only under `/p/sandlot`.
    pub root_profile: Option<Profile>,
    /// The pace every request body must keep.
    pub body_limits: BodyLimits,
    /// Long-lived streams one caller may hold at once, across every surface.
    pub max_streams_per_caller: usize,
}

impl HttpOptions {
    /// Loopback hosts, 30 min idle sessions, at most 1000 of them, every profile, the default body pace and stream
    /// cap.
    pub fn new(allowed_hosts: AllowedHosts) -> Self {
        Self {
            allowed_hosts,
            session_idle: Duration::from_secs(30 * 60),
            max_sessions: 1000,
            profiles: Profile::ALL.to_vec(),
            profile_settings: Default::default(),
            root_profile: None,
            body_limits: BodyLimits::default(),
            max_streams_per_caller: StreamCap::DEFAULT_PER_CALLER,
        }
    }
}

/// The whole HTTP app. The MCP endpoints and the REST routes need a credential, checked by the kit's gate before
/// their body is read; the playground page, `/files` (signed URLs), `/healthz`, `/readyz` and the OAuth discovery
/// paths (the Protected Resource Metadata with an authorization server configured, else 404 at once) do not; any other path is 404 without asking for a
/// credential. Every route checks `Host` and
/// `Origin`; CORS lets browser clients on allowed origins call the MCP endpoints.
pub fn app(state: AppState, auth: Authenticator, options: HttpOptions) -> Router {
    let HttpOptions {
        allowed_hosts,
        session_idle,
        max_sessions,
        profiles,
        profile_settings,
        root_profile,
        body_limits,
        max_streams_per_caller,
    } = options;
    let oauth = auth.oauth().cloned();
    // One gate, one count of streams per caller, for every surface.
    let gate = Gate::new(auth, StreamCap::new(max_streams_per_caller));
    let sessions = sandlot::Sessions { allowed_hosts: allowed_hosts.clone(), idle: session_idle, max: max_sessions };
    let own = sandlot::router(state.clone(), &gate, &sessions);
    // Each profile's router is built once (its state, Baponi's busy threads, is shared by its two mounts).
    let mut mounted: Vec<(Profile, Router)> = Vec::new();
    for profile in profiles.iter().copied().chain(root_profile) {
        if !mounted.iter().any(|(p, _)| *p == profile) {
            mounted.push((profile, profile.router(state.clone(), &gate, &profile_settings)));
        }
    }
    let router_of = |profile| mounted.iter().find(|(p, _)| *p == profile).map(|(_, r)| r.clone()).unwrap_or_default();
    // sandlot's own surface: at the root unless a profile has it, and always under /p/sandlot.
    let own_at_root = if root_profile.is_none() { own.clone() } else { Router::new() };
    // The kit's own routes, which belong to no surface.
    let mut kit_routes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/files/{conversation_id}/{*path}", get(crate::kit::download).put(crate::kit::upload))
        .route("/.well-known/{*probe}", any(not_found))
        .with_state(state.clone());
    if let Some(oauth) = oauth {
        // RFC 9728: at the well-known path, and with the resource's path (`/mcp`) appended.
        let metadata = axum::Json(oauth.metadata());
        let serve = get(move || std::future::ready(metadata.clone()));
        kit_routes = kit_routes
            .route("/.well-known/oauth-protected-resource", serve.clone())
            .route("/.well-known/oauth-protected-resource/{*resource}", serve);
    }
    let mut router = Router::new()
        .merge(own_at_root)
        .nest(SANDLOT_PREFIX, own)
        .merge(sandlot::playground::router(state.clone()))
        .merge(kit_routes)
        .fallback(not_found);
    if let Some(profile) = root_profile {
        router = router.merge(router_of(profile));
    }
    for profile in profiles {
        router = router.nest(&profile.prefix(), router_of(profile));
    }
    let router = router
        .layer(axum::middleware::from_fn_with_state(body_limits, pace_bodies))
        .layer(axum::middleware::from_fn_with_state(allowed_hosts.clone(), crate::kit::check_origin))
        .layer(cors(allowed_hosts));
    log_requests(router)
}
