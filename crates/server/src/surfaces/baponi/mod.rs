//! The Baponi profile (docs/profiles.md): a thread is a conversation, mounted at `/home/baponi`
//! ([`sandlot_core::Layout::Home`]) with a scratch working directory at `/data`.
//!
//! - [`execute`]: the execution core both faces share (arguments, validation, the one-run-per-thread rule);
//!   [`trace_ids`]: how a run is named to Baponi clients and found again.
//! - [`mcp`]: the MCP handler and its tools (`sandbox_execute`, `files_download` in `download`), served
//!   statelessly at `<base>/mcp` by `http`, with Baponi's 401 and 429.
//! - [`volumes`]: the named volumes (`SANDLOT_BAPONI_VOLUMES`) every run sees at `/data/<slug>`, which
//!   `files_download` and the Files API read (and, for `:rw` ones, upload to).
//! - REST (`docs/profiles.md`, "Baponi: REST and Files API"): `rest_execute` (`POST /v1/sandbox/execute`, JSON or
//!   live NDJSON), `executions` (`/v1/executions/{trace_id}`, its cancel and output replay) and `files_api`
//!   (`/v1/files/list`, `download_url`, `upload_url` over sandlot's signed `/files` URLs for threads, and
//!   `volume_files`' own signed `/v1/volumes/...` URLs for volumes).
//!
//! Tenants: every face takes the caller's tenant (`kit::Caller::tenant`). A thread belongs to its first user; reads
//! of another tenant's thread find what a thread that does not exist has, writes and runs into it are an invalid
//! thread id, and a trace id names a run only for the tenant that asked for it (an admin: for every tenant).
//! Volumes are the operator's and shared by every tenant.

mod download;
pub mod execute;
mod executions;
mod files_api;
mod http;
pub mod mcp;
mod ndjson;
mod rest;
mod rest_execute;
pub mod trace_ids;
mod volume_files;
pub mod volumes;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::{get, post};

use crate::AppState;
use crate::kit::Gate;
pub use execute::{BaponiLanguage, ExecuteArgs, ExecuteError, execute, parse, validate};
pub use trace_ids::{run_id_of, trace_id};
pub use volumes::{Volume, Volumes};

/// Where the profile is always mounted (`/p/baponi`): its volume URLs point there, even when it also has the root.
pub const PREFIX: &str = "/p/baponi";

/// What both Baponi faces share: sandlot's state, the threads executing now, and the configured volumes.
#[derive(Clone)]
pub struct BaponiState {
    pub app: AppState,
    /// Threads with an execution running (one at a time per thread).
    busy: Arc<Mutex<HashSet<String>>>,
    pub volumes: Arc<Volumes>,
}

impl BaponiState {
    /// The profile's state over `app`, with these volumes.
    pub fn new(app: AppState, volumes: Volumes) -> Self {
        Self { app, busy: Arc::default(), volumes: Arc::new(volumes) }
    }

    /// Marks `thread_id` busy until the claim is dropped; [`ExecuteError::ThreadBusy`] when it already is (by
    /// this profile, or by a run of sandlot's own tools in the same conversation).
    fn claim_thread(&self, thread_id: &str) -> Result<execute::ThreadClaim, ExecuteError> {
        let busy_error = || ExecuteError::ThreadBusy { thread_id: thread_id.to_owned() };
        if self.app.engine.in_flight().iter().any(|(_, conversation, _)| conversation.as_str() == thread_id) {
            return Err(busy_error());
        }
        if !self.busy.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(thread_id.to_owned()) {
            return Err(busy_error());
        }
        Ok(execute::ThreadClaim { busy: self.busy.clone(), thread_id: thread_id.to_owned() })
    }
}

/// Baponi's routes, relative to the profile's base (`<base>/mcp`, `<base>/v1/...`), behind `gate` but for the
/// signed volume URLs.
pub fn router(state: BaponiState, gate: &Gate) -> Router {
    // One count of wrong keys per address for the whole profile (MCP and REST), with Baponi's 401 body.
    let gate = gate.for_profile(http::AUTH);
    let rest = Router::new()
        .route("/v1/sandbox/execute", post(rest_execute::execute))
        .route("/v1/executions/{trace_id}", get(executions::get))
        .route("/v1/executions/{trace_id}/cancel", post(executions::cancel))
        .route("/v1/executions/{trace_id}/output", get(executions::output))
        .route("/v1/files/list", post(files_api::list))
        .route("/v1/files/download_url", post(files_api::download_url))
        .route("/v1/files/upload_url", post(files_api::upload_url))
        .with_state(rest::RestState::new(state.clone()))
        .route_layer(axum::middleware::from_fn_with_state(gate.opening(rest::opens), crate::kit::require_bearer));
    // Signed URLs: the signature is the authority, no key.
    let signed = Router::new()
        .route(volume_files::ROUTE, get(volume_files::download).put(volume_files::upload))
        .with_state(state.clone());
    http::router(state, &gate).merge(rest).merge(signed)
}
