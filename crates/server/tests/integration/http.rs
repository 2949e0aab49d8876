//! The HTTP app without a network: `app(state).oneshot(request)`. Authentication and signed downloads; running code
//! is covered end to end (tests/e2e) with real clients against the real binary.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use sandlot_server::AppState;
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{HttpOptions, app};
use tower::ServiceExt;

fn setup(ttl: Option<std::time::Duration>) -> (tempfile::TempDir, AppState, axum::Router) {
    setup_with_sessions(ttl, 100)
}

fn setup_with_sessions(
    ttl: Option<std::time::Duration>,
    max_sessions: usize,
) -> (tempfile::TempDir, AppState, axum::Router) {
    let (root, state) = common::state("secret", ttl);
    let options = HttpOptions { max_sessions, ..HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])) };
    let router = app(state.clone(), Authenticator::token("tok"), options);
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
    let response = router.clone().oneshot(get(path_of(&url))).await.unwrap();
    assert_eq!(response.headers()[header::CONTENT_SECURITY_POLICY], "default-src 'none'; sandbox");
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

async fn rpc(router: &axum::Router, body: &str) -> (StatusCode, serde_json::Value) {
    let (status, _, bytes) = send(router, common::post_mcp(body)).await;
    let value =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)));
    (status, value)
}

#[tokio::test]
async fn malformed_and_non_jsonrpc_bodies_get_jsonrpc_errors() {
    let (_root, _state, router) = setup(None);
    let cases = [
        ("{not json", -32700),
        ("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}]", -32600),
        ("{\"id\":1}", -32600),
        ("42", -32600),
    ];
    for (body, code) in cases {
        let (status, value) = rpc(&router, body).await;
        assert_eq!((status, value["error"]["code"].as_i64()), (StatusCode::BAD_REQUEST, Some(code)), "{body}: {value}");
    }
}

#[tokio::test]
async fn requests_without_a_session_are_served_statelessly() {
    let (_root, _state, router) = setup(None);
    let (status, value) = rpc(&router, r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> =
        value["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["sandbox_run_code", "sandbox_list_runners", "sandbox_upload_file", "sandbox_session", "sandbox_browser"]
    );
    let (_, value) = rpc(&router, r#"{"jsonrpc":"2.0","id":8,"method":"no/such/method"}"#).await;
    assert_eq!(value["error"]["code"], -32601);
    // 2026-07-28's probe is answered (tests/e2e/python_v2/test_http_2026.py); one without the revision's `_meta`
    // is refused naming what it lacks.
    let (status, value) = rpc(&router, r#"{"jsonrpc":"2.0","id":9,"method":"server/discover","params":{}}"#).await;
    assert_eq!(
        (status, value["id"].as_i64(), value["error"]["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(9), Some(-32602))
    );
    assert!(value["error"]["message"].as_str().is_some_and(|m| m.contains("io.modelcontextprotocol/protocolVersion")));
}

fn call(arguments: serde_json::Value) -> String {
    serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "sandbox.run_code", "arguments": arguments } })
        .to_string()
}

#[tokio::test]
async fn each_bad_argument_gets_32602_naming_its_field() {
    let (_root, _state, router) = setup(None);
    let big = "x".repeat(1024 * 1024 + 1);
    let cases = [
        (
            serde_json::json!({ "language": "python", "code": "1" }),
            "conversationId",
            "missing required argument conversationId",
        ),
        (
            serde_json::json!({ "conversationId": "", "language": "python", "code": "1" }),
            "conversationId",
            "invalid conversationId: must not be empty",
        ),
        (
            serde_json::json!({ "conversationId": "a/../b", "language": "python", "code": "1" }),
            "conversationId",
            "invalid conversationId: must contain only letters, digits, '.', '_' and '-' (found '/')",
        ),
        (
            serde_json::json!({ "conversationId": "c", "language": 3, "code": "1" }),
            "language",
            "language: invalid type: integer `3`, expected a string",
        ),
        (serde_json::json!({ "conversationId": "c", "language": "python" }), "code", "missing required argument code"),
        (
            serde_json::json!({ "conversationId": "c", "language": "python", "code": big }),
            "code",
            "invalid code: is 1048577 bytes; the limit is 1048576",
        ),
        (
            serde_json::json!({ "conversationId": "c", "language": "python", "code": "1", "timeoutSeconds": -1 }),
            "timeoutSeconds",
            "timeoutSeconds must be a positive number of seconds",
        ),
        (
            serde_json::json!({ "conversationId": "c", "language": "python", "code": "1", "env": { "A": 1 } }),
            "env",
            "env.A: invalid type: integer `1`, expected a string",
        ),
    ];
    for (arguments, field, message) in cases {
        let body = call(arguments);
        // The oversize case is over the 1 MiB body limit as a whole: 413 before any parsing.
        if body.len() > 1024 * 1024 {
            let (status, _, _) = send(&router, common::post_mcp(&body)).await;
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
            continue;
        }
        let (status, value) = rpc(&router, &body).await;
        assert_eq!(status, StatusCode::OK);
        let error = &value["error"];
        assert_eq!(
            (
                error["code"].as_i64(),
                error["message"].as_str(),
                error["data"]["field"].as_str(),
                error["data"]["kind"].as_str()
            ),
            (Some(-32602), Some(message), Some(field), Some("invalid_argument")),
            "{value}"
        );
        assert_eq!(error["data"]["trace_id"].as_str().map(str::len), Some(32));
    }
}

#[tokio::test]
async fn a_language_without_runner_is_a_failed_result_listing_the_available_ones() {
    let (_root, _state, router) = setup(None);
    let (status, value) =
        rpc(&router, &call(serde_json::json!({ "conversationId": "c", "language": "python", "code": "print(1)" })))
            .await;
    assert_eq!(status, StatusCode::OK);
    let result = &value["result"];
    assert_eq!(result["isError"], true);
    assert_eq!(result["structuredContent"]["success"], false);
    assert_eq!(result["structuredContent"]["output"], "no runner for language python; available: none");
    // A language sandlot does not know at all is answered the same way (not as a protocol error).
    let (_, value) =
        rpc(&router, &call(serde_json::json!({ "conversationId": "c", "language": "ruby", "code": "puts 1" }))).await;
    assert_eq!(value["result"]["isError"], true);
    assert_eq!(value["result"]["structuredContent"]["output"], "no runner for language ruby; available: none");
    // A model reads the diagnostic alone: nothing ran, so there is no header.
    assert_eq!(result["content"][0]["text"], "no runner for language python; available: none");
}

#[tokio::test]
async fn a_foreign_host_is_refused() {
    let (_root, _state, router) = setup(None);
    let mut request = common::post_mcp(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    request.headers_mut().insert(header::HOST, "evil.example.com".parse().unwrap());
    let (status, _, _) = send(&router, request).await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
}

#[tokio::test]
async fn a_foreign_origin_is_403_and_an_allowed_one_gets_cors() {
    let (_root, _state, router) = setup(None);
    let mut request = common::post_mcp(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    request.headers_mut().insert(header::ORIGIN, "https://evil.example.com".parse().unwrap());
    assert_eq!(send(&router, request).await.0, StatusCode::FORBIDDEN);

    let preflight = Request::options("/mcp")
        .header(header::HOST, "localhost")
        .header(header::ORIGIN, "http://localhost:5173")
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(header::ACCESS_CONTROL_REQUEST_HEADERS, "authorization, content-type, mcp-session-id")
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(preflight).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(response.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "http://localhost:5173");

    let mut request = common::post_mcp(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    request.headers_mut().insert(header::ORIGIN, "http://localhost:5173".parse().unwrap());
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::ACCESS_CONTROL_EXPOSE_HEADERS], "mcp-session-id,x-request-id");
}

#[tokio::test]
async fn oauth_discovery_probes_get_404_at_once() {
    let (_root, _state, router) = setup(None);
    for probe in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-authorization-server/mcp",
        "/.well-known/openid-configuration",
    ] {
        let request = Request::get(probe).header(header::HOST, "localhost").body(Body::empty()).unwrap();
        assert_eq!(send(&router, request).await.0, StatusCode::NOT_FOUND, "{probe}");
    }
}

fn initialize(session: Option<&str>) -> Request<Body> {
    let mut request = common::post_mcp(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
    );
    if let Some(session) = session {
        request.headers_mut().insert("mcp-session-id", session.parse().unwrap());
    }
    request
}

#[tokio::test]
async fn sessions_are_opened_ended_and_capped() {
    let (_root, _state, router) = setup_with_sessions(None, 2);
    let response = router.clone().oneshot(initialize(None)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    assert!(session.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{session}");

    // A request of the session works; DELETE answers 200 (the official SDKs' clients take 200 or 204 as success
    // and warn on anything else); after it the id is unknown (404).
    let mut list = common::post_mcp(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    list.headers_mut().insert("mcp-session-id", session.parse().unwrap());
    list.headers_mut().insert("mcp-protocol-version", "2025-06-18".parse().unwrap());
    let (status, _, _) = send(&router, list).await;
    assert_eq!(status, StatusCode::OK);
    let delete = Request::delete("/mcp")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header("mcp-session-id", &session)
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&router, delete).await.0, StatusCode::OK);
    let mut after = common::post_mcp(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#);
    after.headers_mut().insert("mcp-session-id", session.parse().unwrap());
    assert_eq!(send(&router, after).await.0, StatusCode::NOT_FOUND);

    // At most two sessions (this test's setting): the third initialize is refused.
    for _ in 0..2 {
        assert_eq!(router.clone().oneshot(initialize(None)).await.unwrap().status(), StatusCode::OK);
    }
    let (status, _, body) = send(&router, initialize(None)).await;
    let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, value["error"]["code"].as_i64()), (StatusCode::SERVICE_UNAVAILABLE, Some(-32000)));
}

#[tokio::test]
async fn an_invalid_protocol_version_header_is_400() {
    let (_root, _state, router) = setup(None);
    let response = router.clone().oneshot(initialize(None)).await.unwrap();
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let mut request = common::post_mcp(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    request.headers_mut().insert("mcp-session-id", session.parse().unwrap());
    request.headers_mut().insert("mcp-protocol-version", "1999-01-01".parse().unwrap());
    assert_eq!(send(&router, request).await.0, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn an_unknown_protocol_version_is_counter_offered() {
    let (_root, _state, router) = setup(None);
    let request = common::post_mcp(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2031-01-01","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
    );
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let data = body.lines().find_map(|l| l.strip_prefix("data: ").filter(|d| d.starts_with('{'))).unwrap_or(&body);
    let value: serde_json::Value = serde_json::from_str(data).unwrap();
    let offered = value["result"]["protocolVersion"].as_str().unwrap().to_owned();
    assert!(["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"].contains(&offered.as_str()), "{offered}");
}

#[tokio::test]
async fn byte_ranges_are_served() {
    let (_root, state, router) = setup(None);
    write(&state, "c", "digits.txt", b"0123456789");
    let url = state.files.url("c", "digits.txt");
    let ranged = |range: &str| Request::get(path_of(&url)).header(header::RANGE, range).body(Body::empty()).unwrap();
    let cases: [(&str, StatusCode, &[u8], Option<&str>); 5] = [
        ("bytes=2-4", StatusCode::PARTIAL_CONTENT, b"234", Some("bytes 2-4/10")),
        ("bytes=7-", StatusCode::PARTIAL_CONTENT, b"789", Some("bytes 7-9/10")),
        ("bytes=-2", StatusCode::PARTIAL_CONTENT, b"89", Some("bytes 8-9/10")),
        ("bytes=5-100", StatusCode::PARTIAL_CONTENT, b"56789", Some("bytes 5-9/10")),
        ("bytes=10-", StatusCode::RANGE_NOT_SATISFIABLE, b"", Some("bytes */10")),
    ];
    for (range, status, body, content_range) in cases {
        let response = router.clone().oneshot(ranged(range)).await.unwrap();
        assert_eq!(response.status(), status, "{range}");
        assert_eq!(
            response.headers().get(header::CONTENT_RANGE).map(|v| v.to_str().unwrap()),
            content_range,
            "{range}"
        );
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        if status == StatusCode::PARTIAL_CONTENT {
            assert_eq!(bytes.as_ref(), body, "{range}");
        }
    }
}

async fn initialize_with(router: &axum::Router, version: &str) -> (String, serde_json::Value) {
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } });
    let response = router.clone().oneshot(common::post_mcp(&body.to_string())).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{version}");
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let text = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let data = text.lines().find_map(|l| l.strip_prefix("data: ").filter(|d| d.starts_with('{'))).unwrap_or(&text);
    (session, serde_json::from_str(data).unwrap())
}

#[tokio::test]
async fn every_supported_protocol_version_is_negotiated_as_asked() {
    let (_root, _state, router) = setup(None);
    for version in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let (_, value) = initialize_with(&router, version).await;
        assert_eq!(value["result"]["protocolVersion"], version);
        assert_eq!(value["result"]["serverInfo"]["name"], "sandlot");
        assert!(value["result"]["instructions"].as_str().unwrap().contains("sandbox_run_code"));
    }
}

#[tokio::test]
async fn get_on_a_session_opens_its_server_stream() {
    let (_root, _state, router) = setup(None);
    let (session, _) = initialize_with(&router, "2025-06-18").await;
    let request = Request::get("/mcp")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header(header::ACCEPT, "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-06-18")
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
}

#[tokio::test]
async fn stateless_replies_follow_accept() {
    let (_root, _state, router) = setup(None);
    for (accept, expected) in [
        ("application/json", "application/json"),
        ("application/json, text/event-stream", "application/json"),
        ("*/*", "application/json"),
        ("text/event-stream", "text/event-stream"),
    ] {
        let mut request = common::post_mcp(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        request.headers_mut().insert(header::ACCEPT, accept.parse().unwrap());
        let (status, content_type, body) = send(&router, request).await;
        assert_eq!((status, content_type.as_deref()), (StatusCode::OK, Some(expected)), "{accept}");
        assert!(String::from_utf8_lossy(&body).contains("sandbox_run_code"), "{accept}");
    }
    let mut request = common::post_mcp(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    request.headers_mut().insert(header::ACCEPT, "text/html".parse().unwrap());
    assert_eq!(send(&router, request).await.0, StatusCode::NOT_ACCEPTABLE);
}

#[tokio::test]
async fn legacy_sse_sessions_are_capped_too() {
    let (_root, _state, router) = setup_with_sessions(None, 2);
    let open = || {
        Request::get("/sse")
            .header(header::HOST, "localhost")
            .header(header::AUTHORIZATION, "Bearer tok")
            .body(Body::empty())
            .unwrap()
    };
    // Sessions live as long as their streams: keep the first two responses alive.
    let first = router.clone().oneshot(open()).await.unwrap();
    let second = router.clone().oneshot(open()).await.unwrap();
    assert_eq!((first.status(), second.status()), (StatusCode::OK, StatusCode::OK));
    assert_eq!(router.clone().oneshot(open()).await.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);
    drop(first);
    tokio::task::yield_now().await;
    assert_eq!(
        router.clone().oneshot(open()).await.unwrap().status(),
        StatusCode::OK,
        "a closed stream frees its slot"
    );
    drop(second);
}

/// Attack: a timeout that does not fit a `Duration` (1e300 s) panicked the worker that parsed it, and the request
/// was never answered. Every out-of-range timeout gets -32602 naming `timeoutSeconds` (within 10 s, not never),
/// numbers JSON cannot hold get -32700, and the server answers the next request as usual.
#[tokio::test]
async fn out_of_range_timeouts_are_refused_by_name_and_the_server_keeps_serving() {
    let (_root, _state, router) = setup(None);
    let positive = "timeoutSeconds must be a positive number of seconds";
    let cases = [
        ("1e300", "invalid timeoutSeconds: is 1e300 s; the limit is 3600 s".to_owned()),
        ("1.7976931348623157e308", "invalid timeoutSeconds: is 1.7976931348623157e308 s; the limit is 3600 s".into()),
        ("18446744073709551616", "invalid timeoutSeconds: is 1.8446744073709552e19 s; the limit is 3600 s".into()),
        ("3601", "invalid timeoutSeconds: is 3601 s; the limit is 3600 s".into()),
        ("3600.5", "invalid timeoutSeconds: is 3600.5 s; the limit is 3600 s".into()),
        ("-1", positive.into()),
        ("-1e300", positive.into()),
        ("0", positive.into()),
        ("-0.0", positive.into()),
        ("1e-300", "invalid timeoutSeconds: must be at least 1 ms".into()),
    ];
    for (number, message) in cases {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"sandbox.run_code","arguments":{{"conversationId":"c","language":"python","code":"1","timeoutSeconds":{number}}}}}}}"#
        );
        let answer = tokio::time::timeout(std::time::Duration::from_secs(10), rpc(&router, &body)).await;
        let (status, value) = answer.unwrap_or_else(|_| panic!("timeoutSeconds {number}: no answer within 10 s"));
        let error = &value["error"];
        assert_eq!(
            (status, error["code"].as_i64(), error["message"].as_str(), error["data"]["field"].as_str()),
            (StatusCode::OK, Some(-32602), Some(message.as_str()), Some("timeoutSeconds")),
            "{number}: {value}"
        );
    }
    // NaN, infinity and numbers beyond f64 are not JSON numbers: refused as malformed JSON.
    for number in ["NaN", "Infinity", "1e400"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"sandbox.run_code","arguments":{{"conversationId":"c","language":"python","code":"1","timeoutSeconds":{number}}}}}}}"#
        );
        let (status, value) = rpc(&router, &body).await;
        assert_eq!((status, value["error"]["code"].as_i64()), (StatusCode::BAD_REQUEST, Some(-32700)), "{number}");
    }
    let (status, value) = rpc(&router, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).await;
    assert_eq!((status, value["result"]["tools"].as_array().map(Vec::len)), (StatusCode::OK, Some(5)));
}

/// Attack: the signature of an expiring URL covered `conversationId/path\nexp`, which is also the message of a
/// non-expiring URL for the path `path\nexp`. A sandbox that writes a file named `P\n<exp>` turned an expired URL
/// of `P` into a URL that never expires. Now the expiring form is signed with an encoding no path can imitate, and
/// a path with a control character is refused before anything else.
#[tokio::test]
async fn an_expired_url_cannot_be_replayed_for_a_path_with_a_newline() {
    let (_root, state, router) = setup(Some(std::time::Duration::from_secs(60)));
    let exp = 1_000_000_000u64; // 2001: long expired
    let forged_name = format!("P\n{exp}");
    write(&state, "c", "P", b"real\n");
    write(&state, "c", &forged_name, b"planted\n");
    let expired_sig = state.files.signer.sign("c", "P", Some(exp));
    assert_eq!(send(&router, get(&format!("/files/c/P?exp={exp}&sig={expired_sig}"))).await.0, StatusCode::FORBIDDEN);
    for uri in [
        format!("/files/c/P%0A{exp}?sig={expired_sig}"),
        format!("/files/c/P%0a{exp}?sig={expired_sig}"),
        format!("/files/c/P%0A{exp}?exp={}&sig={expired_sig}", u64::MAX),
    ] {
        let (status, _, body) = send(&router, get(&uri)).await;
        assert!(
            matches!(status, StatusCode::FORBIDDEN | StatusCode::BAD_REQUEST),
            "{uri}: {status} {}",
            String::from_utf8_lossy(&body)
        );
        assert!(!String::from_utf8_lossy(&body).contains("planted"), "{uri}");
    }
    // Even a URL the server signed itself for such a name is refused: no served path holds a control character.
    let signed = state.files.signer.url("http://test", "c", &forged_name, None);
    assert_eq!(send(&router, get(path_of(&signed))).await.0, StatusCode::FORBIDDEN);
}

/// JSON that rmcp cannot type as a JSON-RPC message: an id of 1.5, a key given twice.
const UNTYPABLE: [&str; 2] = [
    r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/list"}"#,
];

/// A body that is JSON but no message rmcp can type got rmcp's HTTP 415 on `/mcp` (and was queued on a legacy
/// session's `/message`), where the docs promise -32600 (Invalid Request). Both endpoints answer 400 with -32600,
/// and the server keeps serving.
#[tokio::test]
async fn json_that_is_no_typable_jsonrpc_message_gets_32600_on_mcp_and_message() {
    let (_root, _state, router) = setup(None);
    for body in UNTYPABLE {
        let (status, value) = rpc(&router, body).await;
        assert_eq!(
            (status, value["error"]["code"].as_i64()),
            (StatusCode::BAD_REQUEST, Some(-32600)),
            "{body}: {value}"
        );
    }
    let (_stream, endpoint) = open_legacy_session(&router).await;
    for body in UNTYPABLE {
        let (status, _, bytes) = send(&router, post_message(&endpoint, body)).await;
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(
            (status, value["error"]["code"].as_i64()),
            (StatusCode::BAD_REQUEST, Some(-32600)),
            "{body}: {value}"
        );
    }
    let (status, value) = rpc(&router, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).await;
    assert_eq!((status, value["result"]["tools"].as_array().map(Vec::len)), (StatusCode::OK, Some(5)));
}

/// Opens a legacy SSE session (`GET /sse`): its event stream, read up to the endpoint event, and that endpoint.
async fn open_legacy_session(router: &axum::Router) -> (Body, String) {
    let open = Request::get("/sse")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .body(Body::empty())
        .unwrap();
    let mut stream = router.clone().oneshot(open).await.unwrap().into_body();
    let mut seen = String::new();
    loop {
        let frame = stream.frame().await.unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(frame.data_ref().unwrap()));
        if let Some(line) = seen.lines().find_map(|line| line.strip_prefix("data: ")) {
            return (stream, line.to_owned());
        }
    }
}

/// A `POST` of `body` to a legacy session's `endpoint`.
fn post_message(endpoint: &str, body: &str) -> Request<Body> {
    Request::post(endpoint)
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// Attack: a client that never reads its legacy SSE stream. Every `POST /message` was still 202 and its answer was
/// kept until the stream closed (+116 MB from 200 reads of a 512 KiB file). Now what the stream holds unread is
/// bounded (16 MiB): past it the session is closed, what it held dropped, and its next POST is answered 410 saying
/// why, well before 200 reads (about 32 fit); the stream then ends, and the server keeps serving.
#[tokio::test]
async fn attack_a_legacy_stream_never_read_is_closed_once_its_answers_pass_the_bound() {
    let (_root, state, router) = setup(None);
    write(&state, "c", "big.txt", "x".repeat(512 * 1024).as_bytes());
    let (mut stream, endpoint) = open_legacy_session(&router).await; // and never read again
    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    assert_eq!(send(&router, post_message(&endpoint, initialize)).await.0, StatusCode::ACCEPTED);
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(send(&router, post_message(&endpoint, initialized)).await.0, StatusCode::ACCEPTED);
    let read = r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"sandlot://conversations/c/files/big.txt"}}"#;
    let mut refused = None;
    for _ in 0..200 {
        let (status, _, body) = send(&router, post_message(&endpoint, read)).await;
        if status != StatusCode::ACCEPTED {
            refused = Some((status, String::from_utf8_lossy(&body).into_owned()));
            break;
        }
    }
    // The reads are answered a moment after their 202: wait for the close (generous for a loaded machine).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while refused.is_none() && std::time::Instant::now() < deadline {
        let (status, _, body) = send(&router, post_message(&endpoint, read)).await;
        if status != StatusCode::ACCEPTED {
            refused = Some((status, String::from_utf8_lossy(&body).into_owned()));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let expected = "session closed: its event stream did not drain (more than 16777216 bytes of answers were waiting \
                    unread); open a new one";
    assert_eq!(refused, Some((StatusCode::GONE, expected.to_owned())), "200 reads were all accepted and queued");
    let mut unread = 0usize;
    while let Some(frame) = tokio::time::timeout(std::time::Duration::from_secs(10), stream.frame()).await.unwrap() {
        unread += frame.unwrap().data_ref().map_or(0, |data| data.len());
    }
    assert!(unread < 1024 * 1024, "the closed stream still sent {unread} bytes");
    let (status, value) = rpc(&router, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).await;
    assert_eq!((status, value["result"]["tools"].as_array().map(Vec::len)), (StatusCode::OK, Some(5)));
}
