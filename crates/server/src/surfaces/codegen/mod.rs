//! The codegen-sandbox profile (docs/profiles.md): Claude-Code-style workspace tools over the legacy
//! HTTP+SSE transport at `<base>/sse` + `<base>/message`, on one persistent workspace per tenant (a sandlot
//! conversation) mounted at [`WORKSPACE_MOUNT`] in the sandbox.
//!
//! - [`tenant`]: who a session works for, and the conversation that is its workspace.
//! - [`mcp`]: the rmcp handler (`initialize` with codegen-sandbox's version echo, `tools/list`, `tools/call`).
//! - [`tools`]: the registry (the one place a tool is added) and one file per tool.
//! - `crate::kit::workspace_paths`: the agent's paths (`/workspace/...` or workspace-relative) made workspace-relative.
//! - [`ReadTracker`]: which files were Read or Written, so `Write` and `Edit` refuse to clobber unseen files.
//!
//! The transport is the kit's legacy SSE (`kit::transport::legacy_sse`) in mcp-go's style, behind the kit's gate.

pub mod mcp;
pub mod tenant;
pub mod tools;

pub mod bash;
pub mod command;
pub mod shells;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::{any, get};
use sandlot_core::ConversationId;

use crate::AppState;
use crate::kit::transport::legacy_sse::{self, LegacySessions, Style};
use crate::kit::{Gate, Opens};
pub use mcp::CodegenMcp;
pub use tenant::Tenant;

pub use crate::kit::workspace_paths::WORKSPACE_MOUNT;

/// Open SSE sessions of the profile at most.
const MAX_SESSIONS: usize = 1024;

/// Which files of which workspace were Read or Written (per server, shared by every session), keyed by the
/// workspace's conversation and the workspace-relative path.
#[derive(Clone, Default)]
pub struct ReadTracker {
    seen: Arc<Mutex<HashSet<(ConversationId, String)>>>,
}

impl ReadTracker {
    fn seen(&self) -> std::sync::MutexGuard<'_, HashSet<(ConversationId, String)>> {
        self.seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records that `path` of `workspace` was read or written.
    pub fn mark(&self, workspace: &ConversationId, path: &str) {
        self.seen().insert((workspace.clone(), path.to_owned()));
    }

    /// Whether `path` of `workspace` was read or written.
    pub fn contains(&self, workspace: &ConversationId, path: &str) -> bool {
        self.seen().contains(&(workspace.clone(), path.to_owned()))
    }
}

/// What every codegen session shares: sandlot's state, the read tracker and the registry of background shells
/// (whose runs end when the server shuts down).
#[derive(Clone)]
pub struct CodegenState {
    pub app: AppState,
    pub reads: ReadTracker,
    pub shells: Arc<shells::Shells>,
}

impl CodegenState {
    pub fn new(app: AppState) -> Self {
        let shells = Arc::new(shells::Shells::new(app.engine.clone(), app.shutdown.clone()));
        Self { app, reads: ReadTracker::default(), shells }
    }
}

/// codegen-sandbox's routes, relative to the profile's base: `GET <base>/sse` opens a session whose endpoint
/// event names `<base>/message?sessionId=`; both are behind `gate` (sandlot's bearer credential).
pub fn router(state: AppState, gate: &Gate) -> Router {
    let shutdown = state.shutdown.clone();
    let factory = mcp::SessionMaker::new(CodegenState::new(state));
    let sessions = LegacySessions::new(factory, shutdown, MAX_SESSIONS).with_style(Style::McpGo);
    Router::new()
        .route("/sse", get(legacy_sse::open::<mcp::SessionMaker>))
        .route("/message", any(legacy_sse::post::<mcp::SessionMaker>))
        .with_state(sessions)
        // The SSE stream is capped per caller and ends at the credential's expiry.
        .route_layer(axum::middleware::from_fn_with_state(
            gate.opening(Opens::stream_on_get),
            crate::kit::require_bearer,
        ))
}
