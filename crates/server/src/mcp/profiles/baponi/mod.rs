//! The Baponi profile (`reference/profiles.md` §1): a thread is a conversation, mounted at `/home/baponi`
//! ([`sandlot_core::Layout::Home`]) with a scratch working directory at `/data`.
//!
//! - `files_api`: the REST Files API (`/v1/files/list`, `download_url`, `upload_url`) over signed `/files` URLs.

mod files_api;

use axum::Router;
use axum::routing::post;

use crate::AppState;
use crate::http::Authenticator;

/// Baponi's routes, relative to the profile's base (`<base>/mcp`, `<base>/v1/...`).
pub fn router(state: AppState, auth: Authenticator) -> Router {
    Router::new()
        .route("/v1/files/list", post(files_api::list))
        .route("/v1/files/download_url", post(files_api::download_url))
        .route("/v1/files/upload_url", post(files_api::upload_url))
        .route_layer(axum::middleware::from_fn_with_state(auth, crate::http::require_bearer))
        .with_state(state)
}
