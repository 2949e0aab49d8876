//! The HTTP app without a network: `app(state).oneshot(request)`. Authentication and signed downloads; running code
//! is covered end to end (tests/e2e) with real clients against the real binary.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use sandlot_core::{Backend, Engine, EngineConfig, Job, OutputSink, RunOutcome, RunnerInfo, Signer, Workspaces};
use sandlot_server::http::{BearerToken, app};
use sandlot_server::{AppState, FileUrls};
use tower::ServiceExt;

/// An engine with no runner: these tests never run code, they serve what is already in a conversation.
struct NoRunners;

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

fn setup(ttl: Option<std::time::Duration>) -> (tempfile::TempDir, AppState, axum::Router) {
    let root = tempfile::tempdir().unwrap();
    let engine = Engine::new(Arc::new(NoRunners), Workspaces::new(root.path()), EngineConfig::default());
    let files = FileUrls { signer: Signer::new("secret"), public_base_url: "http://test".into(), ttl };
    let state = AppState { engine: Arc::new(engine), files };
    let router = app(state.clone(), BearerToken::new("tok"), vec!["localhost".into()]);
    (root, state, router)
}

async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, Option<String>, Vec<u8>) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, content_type, body)
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn healthz_needs_no_token() {
    let (_root, _state, router) = setup(None);
    assert_eq!(
        send(&router, get("/healthz")).await,
        (StatusCode::OK, Some("text/plain; charset=utf-8".into()), b"ok\n".to_vec())
    );
}

#[tokio::test]
async fn mcp_without_or_with_a_wrong_token_is_401() {
    let (_root, _state, router) = setup(None);
    let cases = [
        (None, r#"{"error":"unauthorized","message":"missing Authorization header (expected: Bearer <token>)"}"#),
        (Some("Bearer nope"), r#"{"error":"unauthorized","message":"invalid bearer token"}"#),
        (Some("Basic dG9r"), r#"{"error":"unauthorized","message":"Authorization must be: Bearer <token>"}"#),
        (Some("tok"), r#"{"error":"unauthorized","message":"Authorization must be: Bearer <token>"}"#),
    ];
    for (authorization, body) in cases {
        let mut request = Request::post("/mcp").header(header::CONTENT_TYPE, "application/json");
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let (status, _, bytes) = send(&router, request.body(Body::from("{}")).unwrap()).await;
        assert_eq!(
            (status, String::from_utf8(bytes).unwrap()),
            (StatusCode::UNAUTHORIZED, body.to_owned()),
            "{authorization:?}"
        );
    }
}

fn write(state: &AppState, conversation: &str, path: &str, bytes: &[u8]) -> std::path::PathBuf {
    let id = sandlot_core::ConversationId::parse(conversation).unwrap();
    let dir = state.engine.workspaces().prepare(&id).unwrap();
    let file = dir.join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, bytes).unwrap();
    dir
}

fn path_of(url: &str) -> &str {
    url.strip_prefix("http://test").unwrap()
}

#[tokio::test]
async fn signed_urls_download_exact_bytes_with_a_content_type() {
    let (_root, state, router) = setup(Some(std::time::Duration::from_secs(60)));
    write(&state, "c", "dir/naïve report.txt", b"hello\n");
    let url = state.files.url("c", "dir/naïve report.txt");
    assert!(url.contains("/files/c/dir/na%C3%AFve%20report.txt?exp="), "{url}");
    let (status, content_type, body) = send(&router, get(path_of(&url))).await;
    assert_eq!(
        (status, content_type.as_deref(), body.as_slice()),
        (StatusCode::OK, Some("text/plain"), b"hello\n".as_slice())
    );
}

#[tokio::test]
async fn bad_expired_or_missing_signatures_are_403() {
    let (_root, state, router) = setup(None);
    write(&state, "c", "a.csv", b"1,2\n");
    let good = state.files.url("c", "a.csv");
    let tampered = good.replace("sig=", "sig=00");
    let other_file = good.replace("a.csv", "b.csv");
    let expired_sig = state.files.signer.sign("c", "a.csv", Some(1));
    for uri in [
        path_of(&tampered).to_owned(),
        path_of(&other_file).to_owned(),
        "/files/c/a.csv".to_owned(),
        format!("/files/c/a.csv?exp=1&sig={expired_sig}"),
        format!("/files/c/a.csv?exp=soon&sig={expired_sig}"),
    ] {
        let (status, _, _) = send(&router, get(&uri)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}");
    }
    assert_eq!(send(&router, get(path_of(&good))).await.0, StatusCode::OK);
}

#[tokio::test]
async fn missing_files_and_symlinks_are_404_and_never_leak_a_byte() {
    let (_root, state, router) = setup(None);
    let dir = write(&state, "c", "real.txt", b"real");
    std::os::unix::fs::symlink("/etc/passwd", dir.join("leak")).unwrap();
    std::os::unix::fs::symlink("/etc", dir.join("etc")).unwrap();
    for path in ["leak", "etc/passwd", "missing.txt", "../../etc/passwd"] {
        // A valid signature for the path: even then, nothing outside the conversation is served.
        let url = state.files.url("c", path);
        let (status, _, body) = send(&router, get(path_of(&url))).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(!String::from_utf8_lossy(&body).contains("root:"), "{path} leaked");
    }
}
