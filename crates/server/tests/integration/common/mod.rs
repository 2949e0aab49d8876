//! Shared by the HTTP-level tests: an app state over an engine with no runner (these tests serve what is already in
//! a conversation, or refuse requests before any run; running code is covered end to end in tests/e2e).

use std::sync::Arc;

use sandlot_core::{Backend, Engine, EngineConfig, Job, OutputSink, RunOutcome, RunnerInfo, Signer, Workspaces};
use sandlot_server::{AppState, FileUrls};

pub mod tenants;

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
    state_in(tempfile::tempdir().unwrap(), secret, ttl)
}

/// [`state`] over the temporary directory `root` (one on tmpfs, say, which keeps any mtime).
pub fn state_in(
    root: tempfile::TempDir,
    secret: &str,
    ttl: Option<std::time::Duration>,
) -> (tempfile::TempDir, AppState) {
    let state = state_over(Workspaces::new(root.path()), secret, ttl);
    (root, state)
}

/// [`state`] over `workspaces`.
pub fn state_over(workspaces: Workspaces, secret: &str, ttl: Option<std::time::Duration>) -> AppState {
    let engine = Engine::new(Arc::new(NoRunners), workspaces, EngineConfig::default());
    let files = FileUrls { signer: Signer::new(secret), public_base_url: "http://test".into(), ttl };
    AppState {
        engine: Arc::new(engine),
        files,
        shutdown: Default::default(),
        tool_names: Default::default(),
        resource_read_bytes: sandlot_server::DEFAULT_RESOURCE_READ_BYTES,
        scrub_secrets: false,
    }
}

/// A `method` request of `uri` with the bearer `token`, Host, a JSON `body` (none for null) and both Accept types.
pub fn request(method: &str, uri: &str, token: &str, body: serde_json::Value) -> axum::http::Request<axum::body::Body> {
    use axum::http::header;
    axum::http::Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(axum::body::Body::from(if body.is_null() { String::new() } else { body.to_string() }))
        .unwrap()
}

/// A stateless `POST /mcp` of `body`, with the test token, Host and both Accept types.
pub fn post_mcp(body: &str) -> axum::http::Request<axum::body::Body> {
    post_mcp_as("tok", body)
}

/// A stateless `POST /mcp` of `body` with `token`, Host and both Accept types.
pub fn post_mcp_as(token: &str, body: &str) -> axum::http::Request<axum::body::Body> {
    use axum::http::header;
    axum::http::Request::post("/mcp")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap()
}

/// The JSON-RPC message of a reply body: plain JSON, or the last `data:` line of an SSE reply.
pub fn jsonrpc_answer(bytes: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let json = text.lines().rev().find_map(|l| l.strip_prefix("data:")).unwrap_or(&text).trim().to_owned();
    serde_json::from_str(&json).unwrap()
}

/// The `result` of a JSON-RPC request through `router` (stateless `POST /mcp`); panics on an error answer.
pub async fn mcp_result(router: &axum::Router, method: &str, params: serde_json::Value) -> serde_json::Value {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
    let response = router.clone().oneshot(post_mcp(&body)).await.unwrap();
    let answer = jsonrpc_answer(&response.into_body().collect().await.unwrap().to_bytes());
    answer.get("result").cloned().unwrap_or_else(|| panic!("{method} {params}: {answer}"))
}
