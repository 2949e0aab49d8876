//! The codegen-sandbox profile through `http::app` (`reference/profiles.md` §2.1–2.3, row by row): the legacy SSE
//! transport at `/p/codegen/sse` in mcp-go's style, and the file tools `Read`, `Write`, `Edit`, `Glob`, `Grep` on
//! the tenant's workspace, with the attacks of docs/security.md (symlinks and `..` in every path argument, a
//! directory swapped for a symlink while a tool runs, FIFOs and devices as targets). The same flows against the real
//! binary are in tests/e2e/python_v1/test_codegen_files.py.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use axum::http::{Request, StatusCode, header};
use futures::StreamExt;
use sandlot_server::AppState;
use sandlot_server::http::{AllowedHosts, Authenticator, HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

#[allow(dead_code)]
struct Server {
    _root: tempfile::TempDir,
    state: AppState,
    router: axum::Router,
}

fn server() -> Server {
    let (root, state) = common::state("secret", None);
    let options = HttpOptions::new(AllowedHosts::new(vec!["localhost".into()]));
    let router = app(state.clone(), Authenticator::token("tok"), options);
    Server { _root: root, state, router }
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri)
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header(header::ACCEPT, "text/event-stream")
        .body(Body::empty())
        .unwrap()
}

fn post(uri: &str, body: &str) -> Request<Body> {
    Request::post(uri)
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// One open SSE session.
struct Session {
    router: axum::Router,
    body: BodyDataStream,
    buffer: String,
    endpoint: String,
    next_id: u64,
}

#[allow(dead_code)]
impl Session {
    /// Opens `uri` (relative to the host) and reads the endpoint event, without initializing.
    async fn open_raw(server: &Server, uri: &str) -> (Session, axum::http::HeaderMap) {
        let response = server.router.clone().oneshot(get(uri)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{uri}");
        let headers = response.headers().clone();
        let mut session = Session {
            router: server.router.clone(),
            body: response.into_body().into_data_stream(),
            buffer: String::new(),
            endpoint: String::new(),
            next_id: 1,
        };
        let (event, data) = session.next_event().await;
        assert_eq!(event, "endpoint");
        session.endpoint = data;
        (session, headers)
    }

    /// Opens `uri` and initializes.
    async fn open(server: &Server, uri: &str) -> Session {
        let (mut session, _) = Session::open_raw(server, uri).await;
        let init = session.request("initialize", json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})).await;
        assert_eq!(init["result"]["protocolVersion"], "2024-11-05");
        let (status, _) =
            session.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string()).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        session
    }

    /// The next SSE event: its name and data.
    async fn next_event(&mut self) -> (String, String) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let mut event = String::new();
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(name) = line.strip_prefix("event:") {
                        event = name.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.strip_prefix(' ').unwrap_or(value));
                    }
                }
                if !event.is_empty() || !data.is_empty() {
                    return (event, data);
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.body.next())
                .await
                .expect("an event within 20 s")
                .expect("the stream is open")
                .unwrap();
            self.buffer.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        }
    }

    /// POSTs `body` to the session's endpoint: the status and body.
    async fn post(&self, body: &str) -> (StatusCode, Vec<u8>) {
        let response = self.router.clone().oneshot(post(&self.endpoint, body)).await.unwrap();
        let status = response.status();
        (status, axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec())
    }

    /// Sends a request; its answer from the stream.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let (status, body) =
            self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()).await;
        assert_eq!((status, body.as_slice()), (StatusCode::ACCEPTED, &b""[..]));
        loop {
            let (event, data) = self.next_event().await;
            assert_eq!(event, "message");
            let message: Value = serde_json::from_str(&data).unwrap();
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    /// Calls a tool: its one text, and whether it is an error result.
    async fn call(&mut self, name: &str, arguments: Value) -> (String, bool) {
        let answer = self.request("tools/call", json!({"name": name, "arguments": arguments})).await;
        let result = &answer["result"];
        assert!(result.is_object(), "{answer}");
        let content = result["content"].as_array().unwrap();
        assert_eq!(content.len(), 1, "{answer}");
        assert_eq!(content[0]["type"], "text");
        (content[0]["text"].as_str().unwrap().to_owned(), result["isError"] == json!(true))
    }

    async fn ok(&mut self, name: &str, arguments: Value) -> String {
        let (text, is_error) = self.call(name, arguments.clone()).await;
        assert!(!is_error, "{name} {arguments}: {text}");
        text
    }

    async fn err(&mut self, name: &str, arguments: Value) -> String {
        let (text, is_error) = self.call(name, arguments.clone()).await;
        assert!(is_error, "{name} {arguments} should fail: {text}");
        text
    }
}

// ---------------------------------------------------------------------------------------------------------------
// §2.1 transport

#[tokio::test]
async fn the_endpoint_event_names_the_message_path_under_the_prefix() {
    let server = server();
    let (session, headers) = Session::open_raw(&server, "/p/codegen/sse").await;
    assert!(session.endpoint.starts_with("/p/codegen/message?sessionId="), "{}", session.endpoint);
    assert_eq!(headers[header::CONTENT_TYPE], "text/event-stream");
    assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
}

#[tokio::test]
async fn initialize_echoes_known_versions_and_names_codegen_sandbox() {
    let server = server();
    let cases = [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("", "2025-03-26"),
        ("1999-01-01", "2025-11-25"),
    ];
    for (asked, answered) in cases {
        let (mut session, _) = Session::open_raw(&server, "/p/codegen/sse").await;
        let params = json!({"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
        let answer = session.request("initialize", params).await;
        let result = &answer["result"];
        assert_eq!(result["protocolVersion"], answered, "{asked}: {answer}");
        assert_eq!(result["capabilities"]["tools"], json!({"listChanged": true}));
        assert_eq!(result["serverInfo"]["name"], "codegen-sandbox");
        assert_eq!(result["serverInfo"]["version"], "0.1.0");
    }
}

#[tokio::test]
async fn bad_posts_are_400_with_json_rpc_errors() {
    let server = server();
    let (session, _) = Session::open_raw(&server, "/p/codegen/sse").await;
    let error_of = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).unwrap()["error"].clone();
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

    let response = server.router.clone().oneshot(post("/p/codegen/message", list)).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    assert_eq!(error_of(&bytes), json!({"code": -32602, "message": "Missing sessionId"}));

    let response = server.router.clone().oneshot(post("/p/codegen/message?sessionId=nope", list)).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    assert_eq!(error_of(&bytes), json!({"code": -32602, "message": "Invalid session ID"}));

    let (status, bytes) = session.post("{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&bytes)["code"], -32700);

    let mut request = get(&session.endpoint);
    *request.method_mut() = axum::http::Method::GET;
    let response = server.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    assert_eq!(error_of(&bytes)["code"], -32600);
}

#[tokio::test]
async fn the_stream_and_messages_need_sandlot_s_token() {
    let server = server();
    let mut request = get("/p/codegen/sse");
    request.headers_mut().remove(header::AUTHORIZATION);
    assert_eq!(server.router.clone().oneshot(request).await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let (session, _) = Session::open_raw(&server, "/p/codegen/sse").await;
    let mut request = post(&session.endpoint, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    request.headers_mut().remove(header::AUTHORIZATION);
    assert_eq!(server.router.clone().oneshot(request).await.unwrap().status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_unknown_tool_is_32602_naming_it() {
    let server = server();
    let mut session = Session::open(&server, "/p/codegen/sse").await;
    let answer = session.request("tools/call", json!({"name": "Nope", "arguments": {}})).await;
    assert_eq!(answer["error"]["code"], -32602);
    assert_eq!(answer["error"]["message"], "tool 'Nope' not found");
}

#[tokio::test]
async fn a_bad_workspace_id_is_refused_at_open() {
    let server = server();
    let response = server.router.clone().oneshot(get("/p/codegen/sse?workspace=..%2Fx")).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}
