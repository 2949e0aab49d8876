//! The Baponi profile (`reference/profiles.md` §1): a thread is a conversation, mounted at `/home/baponi`
//! ([`sandlot_core::Layout::Home`]) with a scratch working directory at `/data`.
//!
//! - [`execute`]: the execution core both faces share (arguments, validation, the one-run-per-thread rule, trace
//!   ids).
//! - [`mcp`]: the MCP handler and its tools (`sandbox_execute`, `files_download` in `download`), served
//!   statelessly at `<base>/mcp` by `http`, with Baponi's 401 and 429.
//! - [`volumes`]: the named volumes `files_download` reads from (`SANDLOT_BAPONI_VOLUMES`).

mod download;
pub mod execute;
mod http;
pub mod mcp;
pub mod volumes;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::Router;

use crate::AppState;
use crate::http::Authenticator;
pub use execute::{BaponiLanguage, ExecuteArgs, ExecuteError, execute, parse, run_id_of, trace_id, validate};
pub use volumes::{Volume, Volumes};

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

/// Baponi's routes, relative to the profile's base (`<base>/mcp`, `<base>/v1/...`).
pub fn router(state: BaponiState, auth: Authenticator) -> Router {
    http::router(state, &auth)
}
