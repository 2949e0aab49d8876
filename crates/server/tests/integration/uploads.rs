//! Files going in: the `sandbox_upload_file` tool and signed upload URLs (`POST /v1/conversations/{id}/uploads`,
//! then `PUT /files/...`). Through the HTTP app without a network; the files are checked on the host.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use sandlot_server::AppState;
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

fn router() -> (tempfile::TempDir, AppState, axum::Router) {
    let (root, state) = common::state("secret", None);
    let router =
        app(state.clone(), Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, state, router)
}

async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, Vec<u8>) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    (status, response.into_body().collect().await.unwrap().to_bytes().to_vec())
}

/// Calls a tool over stateless /mcp: the JSON-RPC answer.
async fn call(router: &axum::Router, name: &str, arguments: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": name, "arguments": arguments } });
    let (_, bytes) = send(router, common::post_mcp(&body.to_string())).await;
    common::jsonrpc_answer(&bytes)
}

/// The path and query of a URL of the test app (`http://test/...`).
fn local(url: &str) -> String {
    url.strip_prefix("http://test").unwrap().to_owned()
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).header(header::HOST, "localhost").body(Body::empty()).unwrap()
}

fn put(uri: &str, body: &'static [u8]) -> Request<Body> {
    Request::put(uri).header(header::HOST, "localhost").body(Body::from(body)).unwrap()
}

#[tokio::test]
async fn the_tool_writes_text_and_base64_files_and_returns_a_download_url() {
    let (root, _state, router) = router();
    for (name, args) in [
        ("sandbox_upload_file", json!({ "conversationId": "up", "path": "in/data.csv", "content": "a,b\n1,2\n" })),
        ("sandbox.upload_file", json!({ "conversationId": "up", "path": "bin/x.bin", "contentBase64": "AAEC/w==" })),
    ] {
        let answer = call(&router, name, args).await;
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    }
    let files = root.path().join("up/files");
    assert_eq!(std::fs::read(files.join("in/data.csv")).unwrap(), b"a,b\n1,2\n");
    assert_eq!(std::fs::read(files.join("bin/x.bin")).unwrap(), [0, 1, 2, 255]);
    let answer =
        call(&router, "sandbox_upload_file", json!({ "conversationId": "up", "path": "t.txt", "content": "hi" })).await;
    let result = &answer["result"]["structuredContent"];
    assert_eq!((result["path"].as_str(), result["size"].as_u64()), (Some("t.txt"), Some(2)));
    let (status, body) = send(&router, get(&local(result["url"].as_str().unwrap()))).await;
    assert_eq!((status, body.as_slice()), (StatusCode::OK, b"hi".as_slice()));
}

#[tokio::test]
async fn bad_upload_arguments_are_errors_naming_the_field() {
    let (root, _state, router) = router();
    let cases = [
        (json!({ "conversationId": "up", "path": "/etc/passwd", "content": "x" }), "path"),
        (json!({ "conversationId": "up", "path": "../other/files/x", "content": "x" }), "path"),
        (json!({ "conversationId": "up", "path": "a\u{0}b", "content": "x" }), "path"),
        (json!({ "conversationId": "up", "path": "a\nb", "content": "x" }), "path"),
        (json!({ "conversationId": "up", "path": "a", "content": "x", "contentBase64": "eA==" }), "content"),
        (json!({ "conversationId": "up", "path": "a" }), "content"),
        (json!({ "conversationId": "up", "path": "a", "contentBase64": "%%%" }), "contentBase64"),
        (json!({ "conversationId": "../x", "path": "a", "content": "x" }), "conversationId"),
    ];
    for (args, field) in cases {
        let answer = call(&router, "sandbox_upload_file", args.clone()).await;
        assert_eq!(answer["error"]["code"], -32602, "{args}: {answer}");
        assert_eq!(answer["error"]["data"]["field"], field, "{args}: {answer}");
    }
    // Nothing was made for the refused calls but the conversation's own directory, if that.
    assert!(!root.path().join("other").exists());
    assert!(!root.path().join("up/files/a").exists());
}

#[tokio::test]
async fn a_signed_upload_url_puts_a_file_that_downloads_back() {
    let (root, _state, router) = router();
    let request = Request::post("/v1/conversations/up/uploads")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "path": "in/big.csv" }).to_string()))
        .unwrap();
    let (status, body) = send(&router, request).await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["method"], "PUT");
    let url = local(answer["url"].as_str().unwrap());
    assert!(url.ends_with("&op=put"), "{url}");
    let (status, body) = send(&router, put(&url, b"x,y\n3,4\n")).await;
    assert_eq!(status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&body));
    assert_eq!(std::fs::read(root.path().join("up/files/in/big.csv")).unwrap(), b"x,y\n3,4\n");
    // The upload signature does not authorize a download.
    let (status, _) = send(&router, get(&url)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Without the token, no upload URL.
    let request = Request::post("/v1/conversations/up/uploads")
        .header(header::HOST, "localhost")
        .body(Body::from(json!({ "path": "x" }).to_string()))
        .unwrap();
    assert_eq!(send(&router, request).await.0, StatusCode::UNAUTHORIZED);
    // A bad path gets no URL.
    let request = Request::post("/v1/conversations/up/uploads")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .body(Body::from(json!({ "path": "../x" }).to_string()))
        .unwrap();
    assert_eq!(send(&router, request).await.0, StatusCode::BAD_REQUEST);
}

/// ATTACK: a download URL (which a run's result hands out) is replayed as an upload, with and without `op=put`,
/// and an upload URL is used after it expired; each is refused and the file is unchanged.
#[tokio::test]
async fn attack_download_signatures_and_expired_upload_urls_cannot_write() {
    let (root, state, router) = router();
    let files = root.path().join("up/files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("f.txt"), "original").unwrap();
    let signer = &state.files.signer;
    let far = sandlot_server::unix_now() + 3600;
    let download = local(&signer.url("http://test", "up", "f.txt", Some(far)));
    let forever = local(&signer.url("http://test", "up", "f.txt", None));
    let expired = local(&signer.upload_url("http://test", "up", "f.txt", sandlot_server::unix_now() - 1));
    for uri in [download.clone(), format!("{download}&op=put"), format!("{forever}&op=put"), expired] {
        let (status, _) = send(&router, put(&uri, b"pwned")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}");
    }
    assert_eq!(std::fs::read_to_string(files.join("f.txt")).unwrap(), "original");
    // The download URL still downloads.
    assert_eq!(send(&router, get(&download)).await, (StatusCode::OK, b"original".to_vec()));
}

/// ATTACK: a run planted symlinks in `/data`; an upload URL signed for a path through one writes nothing outside.
#[tokio::test]
async fn attack_an_upload_url_through_a_planted_symlink_is_refused() {
    let (root, state, router) = router();
    let files = root.path().join("up/files");
    std::fs::create_dir_all(&files).unwrap();
    let outside = root.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, files.join("link")).unwrap();
    let far = sandlot_server::unix_now() + 3600;
    let url = local(&state.files.signer.upload_url("http://test", "up", "link/evil", far));
    let (status, _) = send(&router, put(&url, b"pwned")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}
