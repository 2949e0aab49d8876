//! The codegen-sandbox profile (`reference/profiles.md` §2): Claude-Code-style workspace tools (`Read`, `Write`,
//! `Edit`, `Glob`, `Grep`, `Bash`, `BashOutput`, `KillShell`) over the legacy HTTP+SSE transport at `<base>/sse`,
//! on one persistent workspace per tenant (a sandlot conversation) mounted at `/workspace` in the sandbox.

pub mod bash;
pub mod shells;

use axum::Router;

use crate::AppState;
use crate::http::Authenticator;

/// codegen-sandbox's routes, relative to the profile's base (`<base>/sse`, `<base>/message`).
pub fn router(_state: AppState, _auth: Authenticator) -> Router {
    Router::new()
}
