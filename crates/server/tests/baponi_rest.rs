//! Baponi's REST twin under `/p/baponi` (`reference/profiles.md` §1.4), raw HTTP through the app: the Files API
//! (list, signed download and upload URLs that sandlot's `/files` then serves) and its errors. Running code through
//! `/v1/sandbox/execute` is covered end to end in tests/e2e/baponi (the official SDK against the real binary).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use sandlot_server::http::{AllowedHosts, Authenticator, HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

fn router() -> (tempfile::TempDir, axum::Router) {
    let (root, state) = common::state("secret", None);
    let router = app(state, Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, router)
}

async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes))))
}

fn post(path: &str, body: &Value) -> Request<Body> {
    Request::post(format!("/p/baponi{path}"))
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// The path and query of a URL of the test app (`http://test/...`).
fn local(url: &Value) -> String {
    url.as_str().unwrap().strip_prefix("http://test").unwrap().to_owned()
}

fn write(root: &std::path::Path, thread: &str, path: &str, bytes: &[u8]) {
    let file = root.join(thread).join("files").join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, bytes).unwrap();
}

#[tokio::test]
async fn files_list_gives_the_threads_files_under_a_path() {
    let (root, router) = router();
    write(root.path(), "t1", "report.csv", b"a,b\n");
    write(root.path(), "t1", "out/chart.png", b"png!");
    write(root.path(), "t1", "out/deep/x.txt", b"x");
    write(root.path(), "t1", "outside.txt", b"no");

    let (status, body) = send(&router, post("/v1/files/list", &json!({ "source": "thread", "id": "t1" }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let paths: Vec<_> = body["files"].as_array().unwrap().iter().map(|f| f["path"].clone()).collect();
    assert_eq!(paths, [json!("out/chart.png"), json!("out/deep/x.txt"), json!("outside.txt"), json!("report.csv")]);

    let (status, body) =
        send(&router, post("/v1/files/list", &json!({ "source": "thread", "id": "t1", "path": "out/" }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let files = body["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{body}");
    let first = &files[0];
    assert_eq!(
        (&first["name"], &first["path"], &first["size"], &first["is_directory"]),
        (&json!("chart.png"), &json!("out/chart.png"), &json!(4), &json!(false))
    );
    assert!(first["modified"].as_str().unwrap().ends_with('Z'), "{first}");

    let (status, body) = send(&router, post("/v1/files/list", &json!({ "source": "thread", "id": "nobody" }))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "files": [], "truncated": false })));
}

#[tokio::test]
async fn a_download_url_serves_the_file_and_an_upload_url_writes_one() {
    let (root, router) = router();
    write(root.path(), "t2", "data.json", b"{\"n\": 1}");

    let (status, signed) =
        send(&router, post("/v1/files/download_url", &json!({ "source": "thread", "id": "t2", "path": "data.json" })))
            .await;
    assert_eq!(status, StatusCode::OK, "{signed}");
    assert_eq!((&signed["method"], &signed["headers"]), (&json!("GET"), &json!([])));
    assert!(signed["expires_at"].as_str().unwrap().ends_with('Z'), "{signed}");
    let download = Request::get(local(&signed["url"])).header(header::HOST, "localhost").body(Body::empty()).unwrap();
    let response = router.clone().oneshot(download).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.into_body().collect().await.unwrap().to_bytes().as_ref(), b"{\"n\": 1}");

    let request = json!({ "source": "thread", "id": "t2", "path": "in/up.txt", "content_length": 5, "content_type": "text/plain" });
    let (status, signed) = send(&router, post("/v1/files/upload_url", &request)).await;
    assert_eq!(status, StatusCode::OK, "{signed}");
    assert_eq!(
        (&signed["method"], &signed["headers"]),
        (&json!("PUT"), &json!([{ "name": "Content-Type", "value": "text/plain" }]))
    );
    let upload = Request::put(local(&signed["url"]))
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("hello"))
        .unwrap();
    let (status, written) = send(&router, upload).await;
    assert_eq!((status, written), (StatusCode::CREATED, json!({ "path": "in/up.txt", "size": 5 })));
    assert_eq!(std::fs::read(root.path().join("t2/files/in/up.txt")).unwrap(), b"hello");
}

#[tokio::test]
async fn files_api_errors_are_baponis() {
    let (_root, router) = router();
    let cases = [
        ("/v1/files/download_url", json!({ "source": "thread", "id": "t3", "path": "missing.txt" }), 404, "not_found"),
        ("/v1/files/download_url", json!({ "source": "volume", "id": "shared", "path": "a.txt" }), 404, "not_found"),
        (
            "/v1/files/download_url",
            json!({ "source": "thread", "id": "t3", "path": "../etc/passwd" }),
            400,
            "validation_error",
        ),
        ("/v1/files/download_url", json!({ "source": "disk", "id": "t3", "path": "a.txt" }), 400, "validation_error"),
        ("/v1/files/download_url", json!({ "source": "thread", "id": "t3" }), 400, "validation_error"),
        ("/v1/files/list", json!({ "source": "thread", "id": "../x" }), 400, "validation_error"),
        (
            "/v1/files/upload_url",
            json!({ "source": "thread", "id": "t3", "path": "a", "content_length": 1u64 << 40 }),
            400,
            "validation_error",
        ),
        (
            "/v1/files/upload_url",
            json!({ "source": "thread", "id": "t3", "path": "/abs", "content_length": 1 }),
            400,
            "validation_error",
        ),
    ];
    for (path, request, status, kind) in cases {
        let (got, body) = send(&router, post(path, &request)).await;
        assert_eq!((got.as_u16(), &body["error"]), (status, &json!(kind)), "{path} {request}: {body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    }
    let (_, body) = send(&router, post("/v1/files/download_url", &json!({ "source": "thread", "id": "t3" }))).await;
    assert!(body["message"].as_str().unwrap().contains("path"), "the missing field is named: {body}");

    let anonymous = Request::post("/p/baponi/v1/files/list")
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "source": "thread", "id": "t3" }).to_string()))
        .unwrap();
    let (status, body) = send(&router, anonymous).await;
    assert_eq!((status, &body["error"]), (StatusCode::UNAUTHORIZED, &json!("unauthorized")));
}

#[tokio::test]
async fn attack_a_download_url_for_a_planted_symlink_is_not_given() {
    let (root, router) = router();
    write(root.path(), "t4", "ok.txt", b"ok");
    std::os::unix::fs::symlink("/etc/passwd", root.path().join("t4/files/passwd")).unwrap();
    let (status, body) =
        send(&router, post("/v1/files/download_url", &json!({ "source": "thread", "id": "t4", "path": "passwd" })))
            .await;
    assert_eq!((status, &body["error"]), (StatusCode::NOT_FOUND, &json!("not_found")));
    let (_, body) = send(&router, post("/v1/files/list", &json!({ "source": "thread", "id": "t4" }))).await;
    let paths: Vec<_> = body["files"].as_array().unwrap().iter().map(|f| f["path"].clone()).collect();
    assert_eq!(paths, [json!("ok.txt")], "a symlink is never listed");
}
