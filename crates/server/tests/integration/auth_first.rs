//! Authentication before the body, and the bounds on what an authenticated caller may hold (docs/security.md,
//! "Authentication before the body"), through the whole app:
//! - every route that needs a credential answers a request without one (or with a wrong one) from its headers,
//!   whatever body it declares, in its surface's shape and closing the connection; the table of routes here must
//!   match the routes the sources declare, so a new route cannot be left out silently;
//! - long-lived streams are capped per caller, across every surface;
//! - a stream opened with a JWT ends when the JWT expires;
//! - request bodies keep a pace, except open-sandbox's NDJSON stream.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use sandlot_server::kit::{AllowedHosts, Authenticator, BodyLimits, Credentials, JwtSettings};
use sandlot_server::{HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// The gate: a bearer credential, refused in the kit's shape.
    Kit,
    /// The gate with Baponi's 401 message.
    Baponi,
    /// The gate with open-sandbox's HTTP 200 and -32001.
    OpenSandbox,
    /// A signed URL: the signature, checked before the body (403).
    Signed,
    /// Anyone: no body is read.
    Public,
}

/// Every route the sources declare: the file (under `src/`), the route as written there, who may call it, and the
/// methods to try (none for a public route).
const ROUTES: &[(&str, &str, Access, &[&str])] = &[
    ("app.rs", "/healthz", Access::Public, &[]),
    ("app.rs", "/readyz", Access::Public, &[]),
    ("app.rs", "/files/{conversation_id}/{*path}", Access::Signed, &["GET", "PUT"]),
    ("app.rs", "/.well-known/{*probe}", Access::Public, &[]),
    // With SANDLOT_OAUTH_ISSUER only: the Protected Resource Metadata (tests/e2e/python_v2/test_oauth.py).
    ("app.rs", "/.well-known/oauth-protected-resource", Access::Public, &[]),
    ("app.rs", "/.well-known/oauth-protected-resource/{*resource}", Access::Public, &[]),
    // The metrics listener's own app (`SANDLOT_METRICS_ADDR`), apart from the main one.
    ("kit/ops.rs", "/metrics", Access::Public, &[]),
    ("kit/ops.rs", "/healthz", Access::Public, &[]),
    ("kit/ops.rs", "/readyz", Access::Public, &[]),
    ("surfaces/sandlot/playground.rs", "/", Access::Public, &[]),
    ("surfaces/sandlot/playground.rs", "/assets/playground.css", Access::Public, &[]),
    ("surfaces/sandlot/playground.rs", "/assets/playground.js", Access::Public, &[]),
    ("surfaces/sandlot/mod.rs", "/mcp", Access::Kit, &["POST", "GET", "DELETE"]),
    ("surfaces/sandlot/mod.rs", "/mcp/", Access::Kit, &["POST", "GET", "DELETE"]),
    ("surfaces/sandlot/mod.rs", "/sse", Access::Kit, &["GET"]),
    ("surfaces/sandlot/mod.rs", "/mcp/sse", Access::Kit, &["GET"]),
    ("surfaces/sandlot/mod.rs", "/message", Access::Kit, &["POST"]),
    ("surfaces/sandlot/mod.rs", "/mcp/message", Access::Kit, &["POST"]),
    ("surfaces/sandlot/mod.rs", "/mcp/events", Access::Kit, &["GET"]),
    ("surfaces/sandlot/mod.rs", "/v1/runs", Access::Kit, &["GET"]),
    ("surfaces/sandlot/mod.rs", "/v1/runs/{run_id}", Access::Kit, &["GET"]),
    ("surfaces/sandlot/mod.rs", "/v1/runs/{run_id}/output", Access::Kit, &["GET"]),
    ("surfaces/sandlot/mod.rs", "/v1/conversations", Access::Kit, &["GET"]),
    ("surfaces/sandlot/mod.rs", "/v1/conversations/{conversation_id}", Access::Kit, &["DELETE", "GET"]),
    ("surfaces/sandlot/mod.rs", "/v1/conversations/{conversation_id}/uploads", Access::Kit, &["POST"]),
    ("surfaces/baponi/http.rs", "/mcp", Access::Baponi, &["POST", "GET", "DELETE"]),
    ("surfaces/baponi/http.rs", "/mcp/", Access::Baponi, &["POST", "GET", "DELETE"]),
    ("surfaces/baponi/mod.rs", "/v1/sandbox/execute", Access::Baponi, &["POST"]),
    ("surfaces/baponi/mod.rs", "/v1/executions/{trace_id}", Access::Baponi, &["GET"]),
    ("surfaces/baponi/mod.rs", "/v1/executions/{trace_id}/cancel", Access::Baponi, &["POST"]),
    ("surfaces/baponi/mod.rs", "/v1/executions/{trace_id}/output", Access::Baponi, &["GET"]),
    ("surfaces/baponi/mod.rs", "/v1/files/list", Access::Baponi, &["POST"]),
    ("surfaces/baponi/mod.rs", "/v1/files/download_url", Access::Baponi, &["POST"]),
    ("surfaces/baponi/mod.rs", "/v1/files/upload_url", Access::Baponi, &["POST"]),
    ("surfaces/baponi/mod.rs", "volume_files::ROUTE", Access::Signed, &["GET", "PUT"]),
    ("surfaces/codegen/mod.rs", "/sse", Access::Kit, &["GET"]),
    ("surfaces/codegen/mod.rs", "/message", Access::Kit, &["POST"]),
    ("surfaces/open_sandbox/http.rs", "/mcp", Access::OpenSandbox, &["POST"]),
    ("surfaces/open_sandbox/http.rs", "/mcp/sse", Access::OpenSandbox, &["GET"]),
    ("surfaces/open_sandbox/http.rs", "/mcp/stream", Access::OpenSandbox, &["POST"]),
];

/// Every `.route(...)` of the sources: (file under `src/`, the route's literal or the name it is given by).
fn declared_routes() -> BTreeSet<(String, String)> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeSet::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let file = path.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            for (_, rest) in text.match_indices(".route(").map(|(at, _)| ((), &text[at + ".route(".len()..])) {
                let rest = rest.trim_start();
                let route = match rest.strip_prefix('"') {
                    Some(literal) => literal.split('"').next().unwrap().to_owned(),
                    None => rest.split([',', ')']).next().unwrap().trim().to_owned(),
                };
                found.insert((file.clone(), route));
            }
        }
    }
    found
}

#[test]
fn the_table_names_every_route_the_sources_declare() {
    let table: BTreeSet<(String, String)> =
        ROUTES.iter().map(|(file, route, _, _)| ((*file).to_owned(), (*route).to_owned())).collect();
    assert_eq!(declared_routes(), table);
}

/// Where each surface's routes are mounted in the default layout.
fn bases(file: &str) -> &'static [&'static str] {
    match file.split('/').nth(1) {
        Some("sandlot") if file.ends_with("mod.rs") => &["", "/p/sandlot"],
        Some("baponi") => &["/p/baponi"],
        Some("codegen") => &["/p/codegen"],
        Some("open_sandbox") => &["/p/open-sandbox"],
        _ => &[""],
    }
}

/// A concrete path for a route: its parameters filled in.
fn concrete(route: &str) -> String {
    let route = if route == "volume_files::ROUTE" { "/v1/volumes/{slug}/{*path}" } else { route };
    route
        .split('/')
        .map(|segment| match segment.strip_prefix('{') {
            Some(_) if segment.starts_with("{*") => "a.txt".to_owned(),
            Some("trace_id}") => "trc_00000000000000000000".to_owned(),
            Some(_) => "x1".to_owned(),
            None => segment.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A request whose body declares 10 MiB and never sends a byte.
fn unsent_body(method: &str, path: &str, token: Option<&str>) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header(header::CONTENT_LENGTH, 10 * 1024 * 1024);
    if let Some(token) = token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    builder.body(Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>())).unwrap()
}

/// The answer to a refused credential, with open-sandbox's fresh trace id blanked.
fn refusal(access: Access, token: Option<&str>) -> (StatusCode, Option<&'static str>, Value) {
    let why = if token.is_some() {
        "invalid bearer token"
    } else {
        "missing Authorization header (expected: Bearer <token>)"
    };
    match access {
        Access::Kit => (StatusCode::UNAUTHORIZED, Some("close"), json!({"error": "unauthorized", "message": why})),
        Access::Baponi => (
            StatusCode::UNAUTHORIZED,
            Some("close"),
            json!({"error": "unauthorized", "message": "Invalid or revoked API key."}),
        ),
        Access::OpenSandbox => (
            StatusCode::OK,
            Some("close"),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": "unauthorized",
                "data": {"code": "unauthorized", "message": why, "trace_id": "", "kind": "unauthorized"}}}),
        ),
        Access::Signed => {
            (StatusCode::FORBIDDEN, None, json!({"error": "forbidden", "message": "not an upload or download URL"}))
        }
        Access::Public => unreachable!("public routes are not tried"),
    }
}

/// The JSON of a refusal's body (plain, or the `data:` of one SSE frame), open-sandbox's trace id blanked.
fn refusal_body(bytes: &[u8]) -> Value {
    let mut answer = common::jsonrpc_answer(bytes);
    if let Some(trace) = answer.pointer_mut("/error/data/trace_id") {
        *trace = json!("");
    }
    answer
}

/// Attack: a request without a valid credential declares a large body and never sends it. Before, open-sandbox's
/// transports read the body first, so the request waited for it (and, with NDJSON, held its connection in flight
/// forever). Every route that needs a credential (or a signature) now answers at once, without the body.
#[tokio::test]
async fn every_protected_route_answers_a_bad_credential_without_reading_the_body() {
    let (_root, state) = common::state("s", None);
    let router = app(state, Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    for (file, route, access, methods) in ROUTES {
        for base in bases(file) {
            for method in *methods {
                for token in [None, Some("wrong-token")] {
                    let path = format!("{base}{}", concrete(route));
                    let request = unsent_body(method, &path, token);
                    // Long enough for a loaded machine; a handler that waited for the body would wait forever.
                    let response = tokio::time::timeout(Duration::from_secs(20), router.clone().oneshot(request))
                        .await
                        .unwrap_or_else(|_| panic!("{method} {path} waited for the body"))
                        .unwrap();
                    let connection = response.headers().get(header::CONNECTION).map(|v| v.to_str().unwrap().to_owned());
                    let status = response.status();
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    let (want_status, want_connection, want_body) = refusal(*access, token);
                    let mut got_body = refusal_body(&body);
                    if *access == Access::Signed {
                        // Which signature check refused it (download or upload, thread or volume) does not matter.
                        got_body["message"] = json!("not an upload or download URL");
                    }
                    assert_eq!(
                        (status, connection.as_deref(), got_body),
                        (want_status, want_connection, want_body),
                        "{method} {path} with {token:?}"
                    );
                }
            }
        }
    }
}

/// An app with the static token `tok` (tenant `api-token`) and a named one (tenant `other`), at most
/// `max_streams` streams per caller.
fn capped_app(max_streams: usize) -> (tempfile::TempDir, axum::Router) {
    let (root, state) = common::state("s", None);
    let credentials =
        Credentials::token("tok").with_tokens(vec![("other".into(), "other-token-0123456789".into())]).unwrap();
    let options = HttpOptions {
        max_streams_per_caller: max_streams,
        ..HttpOptions::new(AllowedHosts::new(vec!["localhost".into()]))
    };
    (root, app(state, Authenticator::new(credentials), options))
}

/// A request opening a stream with `token`: an SSE `GET`, or open-sandbox's NDJSON stream with a body that stays
/// open.
fn open_stream(path: &str, token: &str) -> Request<Body> {
    let builder = Request::builder()
        .uri(path)
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::ACCEPT, "text/event-stream");
    if path.ends_with("/mcp/stream") {
        let body = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        builder.method("POST").header(header::CONTENT_TYPE, "application/x-ndjson").body(body).unwrap()
    } else {
        builder.method("GET").body(Body::empty()).unwrap()
    }
}

fn head(status: StatusCode, headers: &HeaderMap) -> (StatusCode, Option<String>) {
    (status, headers.get(header::CONNECTION).map(|v| v.to_str().unwrap().to_owned()))
}

/// Attack: one caller opens stream after stream (each holds a connection in flight, which the connection tracker
/// never evicts) until no connection is left for anyone. Its streams are capped across every surface; another
/// caller, and the same caller once a stream ended, are served.
#[tokio::test]
async fn streams_are_capped_per_caller_across_every_surface() {
    let (_root, router) = capped_app(5);
    let streams = ["/mcp/events", "/sse", "/p/codegen/sse", "/p/baponi/mcp", "/p/open-sandbox/mcp/stream"];
    let mut held = Vec::new();
    for path in streams {
        let response = router.clone().oneshot(open_stream(path, "tok")).await.unwrap();
        assert_eq!(head(response.status(), response.headers()), (StatusCode::OK, None), "{path}");
        held.push(response.into_body()); // the stream lives as long as its body
    }
    let refused = json!({
        "error": "too_many_streams",
        "message": "this credential has 5 streams open, the most it may; close one first",
    });
    for path in streams {
        let response = router.clone().oneshot(open_stream(path, "tok")).await.unwrap();
        let head = head(response.status(), response.headers());
        let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!((head, body), ((StatusCode::TOO_MANY_REQUESTS, Some("close".into())), refused.clone()), "{path}");
    }
    // Another caller has places of its own; exchanges of the capped caller go on.
    let response = router.clone().oneshot(open_stream("/mcp/events", "other-token-0123456789")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let list = common::post_mcp(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    assert_eq!(router.clone().oneshot(list).await.unwrap().status(), StatusCode::OK);
    // A stream that ends frees its place.
    held.pop();
    let response = router.clone().oneshot(open_stream("/mcp/events", "tok")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A JWT of subject `agent` expiring at `exp` (Unix seconds).
fn jwt(exp: u64) -> String {
    let claims = json!({ "sub": "agent", "exp": exp });
    encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(b"shared-secret")).unwrap()
}

fn jwt_app() -> (tempfile::TempDir, axum::Router) {
    let (root, state) = common::state("s", None);
    let settings = JwtSettings { secret: Some("shared-secret".into()), ..JwtSettings::default() };
    let auth = Authenticator::new(Credentials::jwt(&settings).unwrap());
    (root, app(state, auth, HttpOptions::new(AllowedHosts::new(vec!["localhost".into()]))))
}

/// Reads `body` to its end, failing if that takes past `limit`: what it sent.
async fn read_to_end(body: Body, limit: Duration) -> String {
    let read = tokio::time::timeout(limit, body.collect()).await.expect("the stream did not end").unwrap();
    String::from_utf8(read.to_bytes().to_vec()).unwrap()
}

/// A stream opened with a JWT ends when the JWT expires (at `exp` itself: the check's 30 s of leeway decide only
/// whether a request is let in), and one opened within the leeway, after `exp`, ends at once. Before, a stream
/// outlived its credential for as long as the client kept it open.
#[tokio::test]
async fn a_stream_ends_when_its_jwt_expires() {
    let (_root, router) = jwt_app();
    let exp = unix_now() + 3;
    let events = router.clone().oneshot(open_stream("/mcp/events", &jwt(exp))).await.unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    let (lines, body) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let request = Request::post("/p/open-sandbox/mcp/stream")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {}", jwt(exp)))
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(body)))
        .unwrap();
    let ndjson = router.clone().oneshot(request).await.unwrap();
    assert_eq!(ndjson.status(), StatusCode::OK);
    lines.send(Ok(Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"))).await.unwrap();
    // The expiry is 3 s away; a loaded machine may add seconds, never an hour.
    let limit = Duration::from_secs(60);
    let (events, ndjson) = tokio::join!(read_to_end(events.into_body(), limit), read_to_end(ndjson.into_body(), limit));
    let ended = SystemTime::now();
    assert!(ended >= UNIX_EPOCH + Duration::from_secs(exp), "ended before the JWT's exp");
    let answers: Vec<Value> = ndjson.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!((events, answers), (String::new(), vec![json!({"jsonrpc": "2.0", "id": 1, "result": {}})]));

    // Within the leeway: let in, but its stream ends at once.
    let expired = jwt(unix_now() - 5);
    let list = common::post_mcp_as(&expired, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    assert_eq!(router.clone().oneshot(list).await.unwrap().status(), StatusCode::OK);
    let events = router.clone().oneshot(open_stream("/mcp/events", &expired)).await.unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    assert_eq!(read_to_end(events.into_body(), Duration::from_secs(20)).await, "");
}

/// An app whose bodies must arrive within 4 s, after 1 s at 1000 bytes/s.
fn paced_app() -> (tempfile::TempDir, axum::Router) {
    let (root, state) = common::state("s", None);
    let body_limits = BodyLimits {
        deadline: Duration::from_secs(4),
        bytes_per_extra_second: 1024 * 1024,
        grace: Duration::from_secs(1),
        min_rate: 1000,
    };
    let options = HttpOptions { body_limits, ..HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])) };
    (root, app(state, Authenticator::token("tok"), options))
}

/// A body fed by the test.
fn fed_body() -> (tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>, Body) {
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    (sender, Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver)))
}

/// Attack: a caller with a credential sends part of a body, then stalls (or dribbles), holding the buffer, the
/// connection and the handler. The body is cut once it breaks the pace, answered 408, and the connection closes.
/// Time is paused: the rules are measured exactly, whatever the machine's load.
#[tokio::test(start_paused = true)]
async fn a_body_that_stalls_or_dribbles_is_cut_and_its_connection_closed() {
    let (_root, router) = paced_app();
    // Stalls after 11 bytes; or dribbles 299 bytes every 300 ms (897 bytes a second: under the 1000 asked for).
    for (dribble, measured) in [(None, 0), (Some(Duration::from_millis(300)), 897)] {
        let (sender, body) = fed_body();
        let request = Request::post("/mcp")
            .header(header::HOST, "localhost")
            .header(header::AUTHORIZATION, "Bearer tok")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .body(body)
            .unwrap();
        let feeder = tokio::spawn(async move {
            let _ = sender.send(Ok(Bytes::from_static(b"{\"jsonrpc\":"))).await;
            while let Some(every) = dribble {
                tokio::time::sleep(every).await;
                if sender.send(Ok(Bytes::from(vec![b' '; 299]))).await.is_err() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        });
        let started = tokio::time::Instant::now();
        let response = router.clone().oneshot(request).await.unwrap();
        let head = head(response.status(), response.headers());
        let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
        let message = format!("request body too slow: {measured} bytes in the last 1 s, at least 1000 are needed");
        assert_eq!(
            (head, body, started.elapsed()),
            (
                (StatusCode::REQUEST_TIMEOUT, Some("close".into())),
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message}}),
                // The grace, then the first period measured.
                Duration::from_secs(2),
            ),
            "{dribble:?}"
        );
        feeder.abort();
    }
}

/// open-sandbox's NDJSON stream is a stream of requests over time: it may idle far past the body deadline, and
/// still answers.
#[tokio::test(start_paused = true)]
async fn an_ndjson_stream_may_idle_past_the_body_deadline() {
    let (_root, router) = paced_app();
    let (lines, body) = fed_body();
    let request = Request::post("/p/open-sandbox/mcp/stream")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(body)
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
    lines.send(Ok(Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n"))).await.unwrap();
    drop(lines);
    let text = read_to_end(response.into_body(), Duration::from_secs(60)).await;
    let answers: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(answers, vec![json!({"jsonrpc": "2.0", "id": 7, "result": {}})]);
}
