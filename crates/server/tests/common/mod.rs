//! Shared by the HTTP-level tests: an app state over an engine with no runner (these tests serve what is already in
//! a conversation, or refuse requests before any run; running code is covered end to end in tests/e2e).

#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use sandlot_core::{Backend, Engine, EngineConfig, Job, OutputSink, RunOutcome, RunnerInfo, Signer, Workspaces};
use sandlot_server::{AppState, FileUrls};

/// A backend with no runner.
pub struct NoRunners;

#[async_trait::async_trait]
impl Backend for NoRunners {
    fn name(&self) -> &'static str {
        "none"
    }
    fn runners(&self) -> Vec<RunnerInfo> {
        Vec::new()
    }
    async fn run(&self, _job: Job, _sink: &dyn OutputSink) -> sandlot_core::Result<RunOutcome> {
        unreachable!("these tests do not run code")
    }
}

/// State over a temporary root, file URLs signed with `secret` on `http://test`.
pub fn state(secret: &str, ttl: Option<std::time::Duration>) -> (tempfile::TempDir, AppState) {
    let root = tempfile::tempdir().unwrap();
    let engine = Engine::new(Arc::new(NoRunners), Workspaces::new(root.path()), EngineConfig::default());
    let files = FileUrls { signer: Signer::new(secret), public_base_url: "http://test".into(), ttl };
    (
        root,
        AppState {
            engine: Arc::new(engine),
            files,
            shutdown: Default::default(),
            tool_names: Default::default(),
            resource_read_bytes: sandlot_server::DEFAULT_RESOURCE_READ_BYTES,
        },
    )
}
