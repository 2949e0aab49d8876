//! The Baponi profile (`reference/profiles.md` §1): a thread is a conversation, mounted at `/home/baponi`
//! ([`sandlot_core::Layout::Home`]) with a scratch working directory at `/data`.

use axum::Router;

use crate::AppState;
use crate::http::Authenticator;

/// Baponi's routes, relative to the profile's base (`<base>/mcp`, `<base>/v1/...`).
pub fn router(_state: AppState, _auth: Authenticator) -> Router {
    Router::new()
}
