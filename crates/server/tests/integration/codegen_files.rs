//! The codegen-sandbox profile through `sandlot_server::app`
//! (`docs/profiles.md#codegen-sandbox-transport-workspace-and-file-tools`, row by row): the legacy SSE transport at
//! `/p/codegen/sse` in mcp-go's style, and the file tools `Read`, `Write`, `Edit`, `Glob`, `Grep` on the tenant's
//! workspace, with the attacks of docs/security.md (symlinks and `..` in every path argument, a directory swapped for a
//! symlink while a tool runs, FIFOs and devices as targets). The same flows against the real binary are in
//! tests/e2e/python_v1/test_codegen_files.py.

use crate::common;

use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use axum::http::{Request, StatusCode, header};
use futures::StreamExt;
use sandlot_server::AppState;
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{HttpOptions, app};
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
    get_as(uri, "tok")
}

fn get_as(uri: &str, token: &str) -> Request<Body> {
    Request::get(uri)
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::ACCEPT, "text/event-stream")
        .body(Body::empty())
        .unwrap()
}

fn post(uri: &str, body: &str) -> Request<Body> {
    post_as(uri, body, "tok")
}

fn post_as(uri: &str, body: &str, token: &str) -> Request<Body> {
    Request::post(uri)
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
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
    token: String,
}

#[allow(dead_code)]
impl Session {
    /// Opens `uri` (relative to the host) and reads the endpoint event, without initializing.
    async fn open_raw(server: &Server, uri: &str) -> (Session, axum::http::HeaderMap) {
        Session::open_raw_as(server, uri, "tok").await
    }

    async fn open_raw_as(server: &Server, uri: &str, token: &str) -> (Session, axum::http::HeaderMap) {
        let response = server.router.clone().oneshot(get_as(uri, token)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{uri}");
        let headers = response.headers().clone();
        let mut session = Session {
            router: server.router.clone(),
            body: response.into_body().into_data_stream(),
            buffer: String::new(),
            endpoint: String::new(),
            next_id: 1,
            token: token.to_owned(),
        };
        let (event, data) = session.next_event().await;
        assert_eq!(event, "endpoint");
        session.endpoint = data;
        (session, headers)
    }

    /// Opens `uri` and initializes.
    async fn open(server: &Server, uri: &str) -> Session {
        Session::open_as(server, uri, "tok").await
    }

    async fn open_as(server: &Server, uri: &str, token: &str) -> Session {
        let (mut session, _) = Session::open_raw_as(server, uri, token).await;
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
        let response = self.router.clone().oneshot(post_as(&self.endpoint, body, &self.token)).await.unwrap();
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
    let list = session.request("tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<_> = tools.iter().map(|tool| tool["name"].as_str().unwrap()).collect();
    assert_eq!(names[..5], ["Read", "Write", "Edit", "Glob", "Grep"]);
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["file_path"]));
    assert_eq!(tools[0]["annotations"]["destructiveHint"], true);
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

// ---------------------------------------------------------------------------------------------------------------
// §2.3 file tools

/// The host directory of the static token's workspace `named` (created).
fn workspace_dir(server: &Server, named: Option<&str>) -> std::path::PathBuf {
    let id = sandlot_server::surfaces::codegen::tenant::workspace_of("api-token", named).unwrap();
    server.state.engine.workspaces().prepare(&id).unwrap()
}

/// A directory beside the conversations (outside every workspace) holding `secret.txt`.
fn outside(server: &Server) -> std::path::PathBuf {
    let dir = server.state.engine.workspaces().root().parent().unwrap().join(format!("outside-{}", uuid()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("secret.txt"), "SECRET outside\n").unwrap();
    dir
}

fn uuid() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos())
}

fn set_mtime(path: &std::path::Path, seconds_ago: u64) {
    let time = std::time::SystemTime::now() - Duration::from_secs(seconds_ago);
    std::fs::File::options().write(true).open(path).unwrap().set_modified(time).unwrap();
}

#[tokio::test]
async fn read_numbers_lines_with_offset_and_limit() {
    let server = server();
    let dir = workspace_dir(&server, None);
    std::fs::write(dir.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    let mut s = Session::open(&server, "/p/codegen/sse").await;
    assert_eq!(s.ok("Read", json!({"file_path": "a.txt"})).await, "1\tone\n2\ttwo\n3\tthree\n");
    assert_eq!(s.ok("Read", json!({"file_path": "/workspace/a.txt"})).await, "1\tone\n2\ttwo\n3\tthree\n");
    assert_eq!(s.ok("Read", json!({"file_path": "a.txt", "offset": 2, "limit": 1})).await, "2\ttwo\n");
    assert_eq!(s.ok("Read", json!({"file_path": "a.txt", "offset": 0, "limit": 1})).await, "1\tone\n");
    assert_eq!(
        s.err("Read", json!({"file_path": "a.txt", "offset": 10})).await,
        "read: offset 10 exceeds line count 3"
    );
    assert_eq!(
        s.err("Read", json!({"file_path": "missing.txt"})).await,
        "stat: stat /workspace/missing.txt: no such file or directory"
    );
    assert_eq!(s.err("Read", json!({"file_path": "sub"})).await, "path is a directory: sub");
    assert_eq!(s.err("Read", json!({"file_path": "/workspace"})).await, "path is a directory: /workspace");
    assert_eq!(s.err("Read", json!({})).await, "file_path is required");
    assert_eq!(s.err("Read", json!({"file_path": ""})).await, "file_path is required");
    std::fs::write(dir.join("empty.txt"), "").unwrap();
    assert_eq!(s.ok("Read", json!({"file_path": "empty.txt", "offset": 5})).await, "");
    assert_eq!(s.err("Read", json!({"file_path": "../x"})).await, "resolve path: path is outside workspace root");
}

#[tokio::test]
async fn write_is_atomic_and_refuses_to_overwrite_a_file_not_read() {
    let server = server();
    let dir = workspace_dir(&server, None);
    std::fs::write(dir.join("old.txt"), "old\n").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    let mut s = Session::open(&server, "/p/codegen/sse").await;
    assert_eq!(
        s.ok("Write", json!({"file_path": "new/deep/n.txt", "content": "hello"})).await,
        "wrote 5 bytes to new/deep/n.txt"
    );
    assert_eq!(std::fs::read_to_string(dir.join("new/deep/n.txt")).unwrap(), "hello");
    // Written by this server: may be written again without a Read.
    s.ok("Write", json!({"file_path": "new/deep/n.txt", "content": "again"})).await;
    assert_eq!(
        s.err("Write", json!({"file_path": "old.txt", "content": "x"})).await,
        "refusing to overwrite old.txt: Read it first"
    );
    assert_eq!(std::fs::read_to_string(dir.join("old.txt")).unwrap(), "old\n");
    s.ok("Read", json!({"file_path": "/workspace/old.txt"})).await;
    assert_eq!(s.ok("Write", json!({"file_path": "old.txt", "content": "new\n"})).await, "wrote 4 bytes to old.txt");
    assert_eq!(std::fs::read_to_string(dir.join("old.txt")).unwrap(), "new\n");
    assert_eq!(s.err("Write", json!({"file_path": "sub", "content": "x"})).await, "path is a directory: sub");
    assert_eq!(s.ok("Write", json!({"file_path": "empty", "content": ""})).await, "wrote 0 bytes to empty");
    assert_eq!(s.err("Write", json!({"file_path": "a"})).await, "content is required");
    // No temporary file left behind.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.iter().all(|n| !n.to_string_lossy().starts_with(".sandlot")), "{names:?}");
}

#[tokio::test]
async fn edit_replaces_a_unique_match_or_all() {
    let server = server();
    let dir = workspace_dir(&server, None);
    std::fs::write(dir.join("e.txt"), "foo bar foo\nbaz\n").unwrap();
    let mut s = Session::open(&server, "/p/codegen/sse").await;
    let edit = |old: &str, new: &str, all: bool| json!({"file_path": "e.txt", "old_string": old, "new_string": new, "replace_all": all});
    assert_eq!(s.err("Edit", edit("baz", "qux", false)).await, "refusing to edit e.txt: Read it first");
    s.ok("Read", json!({"file_path": "e.txt"})).await;
    assert_eq!(s.err("Edit", edit("", "x", false)).await, "old_string must be non-empty");
    assert_eq!(s.err("Edit", edit("nope", "x", false)).await, "old_string not found in e.txt");
    let non_unique = s.err("Edit", edit("foo", "x", false)).await;
    assert_eq!(
        non_unique,
        "old_string matched 2 times in e.txt; add context to make it unique or set replace_all=true"
    );
    assert_eq!(s.ok("Edit", edit("baz", "qux", false)).await, "replaced 1 occurrence(s) in e.txt");
    assert_eq!(s.ok("Edit", edit("foo", "x", true)).await, "replaced 2 occurrence(s) in e.txt");
    assert_eq!(std::fs::read_to_string(dir.join("e.txt")).unwrap(), "x bar x\nqux\n");
    assert_eq!(s.err("Edit", json!({"file_path": "e.txt", "old_string": "x"})).await, "new_string is required");
}

#[tokio::test]
async fn glob_matches_newest_first_and_honours_gitignore() {
    let server = server();
    let dir = workspace_dir(&server, None);
    for (path, age) in
        [("src/a.rs", 30), ("src/deep/b.rs", 10), ("c.rs", 20), ("build/gen.rs", 1), ("x.log", 1), ("src/keep.log", 1)]
    {
        std::fs::create_dir_all(dir.join(path).parent().unwrap()).unwrap();
        std::fs::write(dir.join(path), "fn main() {}\n").unwrap();
        set_mtime(&dir.join(path), age);
    }
    std::fs::write(dir.join(".gitignore"), "build/\n*.log\n").unwrap();
    // Hidden files and directories are skipped, as ripgrep does.
    std::fs::create_dir(dir.join(".hidden")).unwrap();
    std::fs::write(dir.join(".hidden/h.rs"), "").unwrap();
    std::fs::write(dir.join(".h.rs"), "").unwrap();
    std::fs::write(dir.join("src/.gitignore"), "!keep.log\n").unwrap();
    let mut s = Session::open(&server, "/p/codegen/sse").await;
    assert_eq!(s.ok("Glob", json!({"pattern": "**/*.rs"})).await, "src/deep/b.rs\nc.rs\nsrc/a.rs");
    // No `/`: matches the base name anywhere.
    assert_eq!(s.ok("Glob", json!({"pattern": "*.rs"})).await, "src/deep/b.rs\nc.rs\nsrc/a.rs");
    assert_eq!(s.ok("Glob", json!({"pattern": "*.rs", "path": "src"})).await, "src/deep/b.rs\nsrc/a.rs");
    assert_eq!(s.ok("Glob", json!({"pattern": "*.rs", "path": "/workspace/src", "limit": 1})).await, "src/deep/b.rs");
    assert_eq!(s.ok("Glob", json!({"pattern": "*.log"})).await, "src/keep.log");
    assert_eq!(s.ok("Glob", json!({"pattern": "*.none"})).await, "");
    assert_eq!(s.err("Glob", json!({})).await, "pattern is required");
    assert_eq!(
        s.err("Glob", json!({"pattern": "*", "path": "nope"})).await,
        "stat path: stat /workspace/nope: no such file or directory"
    );
    assert_eq!(s.err("Glob", json!({"pattern": "*", "path": "c.rs"})).await, "path is not a directory: c.rs");
}

#[tokio::test]
async fn grep_has_three_modes_a_glob_filter_case_folding_and_a_head_limit() {
    let server = server();
    let dir = workspace_dir(&server, None);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/a.rs"), "fn alpha() {}\nlet Alpha = 1;\nfn beta() {}\n").unwrap();
    std::fs::write(dir.join("b.txt"), "alpha\n").unwrap();
    std::fs::write(dir.join("ignored.log"), "alpha\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "*.log\n").unwrap();
    let mut s = Session::open(&server, "/p/codegen/sse").await;
    std::fs::write(dir.join(".hidden.txt"), "alpha\n").unwrap();
    assert_eq!(s.ok("Grep", json!({"pattern": "alpha"})).await, "b.txt:1:alpha\nsrc/a.rs:1:fn alpha() {}\n");
    // A file named directly is searched even when hidden or ignored.
    assert_eq!(s.ok("Grep", json!({"pattern": "alpha", "path": "ignored.log"})).await, "ignored.log:1:alpha\n");
    assert_eq!(
        s.ok("Grep", json!({"pattern": "alpha", "case_insensitive": true})).await,
        "b.txt:1:alpha\nsrc/a.rs:1:fn alpha() {}\nsrc/a.rs:2:let Alpha = 1;\n"
    );
    assert_eq!(
        s.ok("Grep", json!({"pattern": "alpha", "output_mode": "files_with_matches"})).await,
        "b.txt\nsrc/a.rs\n"
    );
    assert_eq!(s.ok("Grep", json!({"pattern": "(?i)alpha", "output_mode": "count"})).await, "b.txt:1\nsrc/a.rs:2\n");
    assert_eq!(s.ok("Grep", json!({"pattern": "alpha", "glob": "*.rs"})).await, "src/a.rs:1:fn alpha() {}\n");
    assert_eq!(
        s.ok("Grep", json!({"pattern": "fn", "path": "src/a.rs", "head_limit": 1})).await,
        "src/a.rs:1:fn alpha() {}\n"
    );
    assert_eq!(
        s.ok("Grep", json!({"pattern": "fn", "path": "/workspace/src"})).await,
        "src/a.rs:1:fn alpha() {}\nsrc/a.rs:3:fn beta() {}\n"
    );
    assert_eq!(s.ok("Grep", json!({"pattern": "zzz"})).await, "");
    assert!(s.err("Grep", json!({"pattern": "(unclosed"})).await.starts_with("grep: "));
    assert_eq!(
        s.err("Grep", json!({"pattern": "a", "output_mode": "lines"})).await,
        "unknown output_mode: lines (valid: content, files_with_matches, count)"
    );
    assert_eq!(
        s.err("Grep", json!({"pattern": "a", "path": "nope"})).await,
        "stat path: stat /workspace/nope: no such file or directory"
    );
    assert_eq!(s.err("Grep", json!({})).await, "pattern is required");
}

#[tokio::test]
async fn sessions_of_a_tenant_share_its_workspace_and_other_workspaces_are_apart() {
    let server = server();
    let mut first = Session::open(&server, "/p/codegen/sse").await;
    let mut second = Session::open(&server, "/p/codegen/sse").await;
    let mut other = Session::open(&server, "/p/codegen/sse?workspace=other").await;
    first.ok("Write", json!({"file_path": "shared.txt", "content": "hi\n"})).await;
    assert_eq!(second.ok("Read", json!({"file_path": "shared.txt"})).await, "1\thi\n");
    assert!(other.err("Read", json!({"file_path": "shared.txt"})).await.starts_with("stat: "));
    // The tool's `workspace` argument names another workspace of the same tenant.
    first.ok("Write", json!({"file_path": "o.txt", "content": "o\n", "workspace": "other"})).await;
    assert_eq!(other.ok("Read", json!({"file_path": "o.txt"})).await, "1\to\n");
}

/// A server taking HS256 JWTs signed with `jwt-secret`, and a token for `subject`.
fn jwt_server() -> Server {
    let (root, state) = common::state("secret", None);
    let settings = sandlot_server::kit::JwtSettings {
        secret: Some("jwt-secret".into()),
        ..sandlot_server::kit::JwtSettings::default()
    };
    let auth = Authenticator::new(sandlot_server::kit::Credentials::jwt(&settings).unwrap());
    let router = app(state.clone(), auth, HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    Server { _root: root, state, router }
}

fn jwt_for(subject: &str) -> String {
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
    let key = jsonwebtoken::EncodingKey::from_secret(b"jwt-secret");
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &json!({"sub": subject, "exp": exp}), &key).unwrap()
}

#[tokio::test]
async fn jwt_subjects_never_share_a_workspace_nor_a_session() {
    let server = jwt_server();
    let (alice, bob) = (jwt_for("alice"), jwt_for("bob"));
    let mut a = Session::open_as(&server, "/p/codegen/sse?workspace=team", &alice).await;
    let mut b = Session::open_as(&server, "/p/codegen/sse?workspace=team", &bob).await;
    a.ok("Write", json!({"file_path": "alice.txt", "content": "mine\n"})).await;
    assert!(b.err("Read", json!({"file_path": "alice.txt"})).await.starts_with("stat: "));
    assert!(b.err("Read", json!({"file_path": "alice.txt", "workspace": "team"})).await.starts_with("stat: "));
    // Bob POSTing to Alice's session is refused exactly as a POST to a session that does not exist.
    let read = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                      "params": {"name": "Read", "arguments": {"file_path": "alice.txt"}}});
    let refused = |endpoint: String| {
        let router = server.router.clone();
        let request = post_as(&endpoint, &read.to_string(), &bob);
        async move {
            let response = router.oneshot(request).await.unwrap();
            (response.status(), axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap())
        }
    };
    let unknown = a.endpoint.split("sessionId=").next().unwrap().to_owned() + "sessionId=no-such-session";
    let to_alices = refused(a.endpoint.clone()).await;
    assert_eq!(to_alices, refused(unknown).await);
    assert_eq!(to_alices.0, StatusCode::BAD_REQUEST);
}

// ---------------------------------------------------------------------------------------------------------------
// Tenants (docs/security.md, "Tenants"): for two JWT subjects and two named tokens. B never names A's workspace (the
// derivation uses B's own name); a workspace another tenant made reads to B as one that does not exist and refuses
// B's writes and runs; A's workspace is A's through the other profiles' faces too; and B never sees A's background
// shells. The admin sees A's.

fn tenants_server() -> Server {
    let (root, state) = common::state("secret", None);
    let options = HttpOptions::new(AllowedHosts::new(vec!["localhost".into()]));
    let router = app(state.clone(), common::tenants::authenticator(), options);
    Server { _root: root, state, router }
}

#[tokio::test]
async fn a_workspace_another_tenant_made_reads_as_missing_and_refuses_writes_and_runs() {
    use common::tenants::{admin, pairs};
    let server = tenants_server();
    for (_, b) in pairs() {
        // The admin (who may use any id) makes B's workspace `taken` first, and leaves a file there.
        let taken = sandlot_server::surfaces::codegen::tenant::workspace_of(b.name, Some("taken")).unwrap();
        let upload = json!({ "source": "thread", "id": taken.as_str(), "path": "planted.txt", "content_length": 4 });
        let (status, signed) =
            common::tenants::baponi_as(&server.router, "/v1/files/upload_url", upload, &admin()).await;
        assert_eq!(status, StatusCode::OK, "{signed}");
        let url = signed["url"].as_str().unwrap().strip_prefix("http://test").unwrap().to_owned();
        let put = Request::put(url).header(header::HOST, "localhost").body(Body::from("abcd")).unwrap();
        assert_eq!(server.router.clone().oneshot(put).await.unwrap().status(), StatusCode::CREATED);

        let mut in_taken = Session::open_as(&server, "/p/codegen/sse?workspace=taken", &b.bearer).await;
        let mut in_fresh = Session::open_as(&server, "/p/codegen/sse?workspace=fresh", &b.bearer).await;
        for (tool, arguments) in [
            ("Read", json!({"file_path": "planted.txt"})),
            ("Glob", json!({"pattern": "*"})),
            ("Grep", json!({"pattern": "."})),
            ("Grep", json!({"pattern": ".", "path": "planted.txt"})),
            ("Edit", json!({"file_path": "planted.txt", "old_string": "a", "new_string": "b"})),
        ] {
            assert_eq!(in_taken.call(tool, arguments.clone()).await, in_fresh.call(tool, arguments).await, "{tool}");
        }
        let not_available =
            format!("invalid workspace: {taken} is not available to this caller; use another workspace");
        assert_eq!(in_taken.err("Write", json!({"file_path": "x.txt", "content": "x"})).await, not_available);
        let bash = json!({"command": "ls", "description": "list", "run_in_background": true});
        assert_eq!(in_taken.err("Bash", bash).await, not_available);
        let files = server.state.engine.workspaces().files_dir(&taken);
        assert_eq!(std::fs::read_dir(files).unwrap().count(), 1, "B wrote nothing there");
        // B's other workspace is B's as ever.
        in_fresh.ok("Write", json!({"file_path": "x.txt", "content": "x"})).await;
    }
}

#[tokio::test]
async fn a_codegen_workspace_is_its_tenants_through_the_other_profiles_too() {
    let server = tenants_server();
    for (a, b) in common::tenants::pairs() {
        let mut session = Session::open_as(&server, "/p/codegen/sse", &a.bearer).await;
        session.ok("Write", json!({"file_path": "notes.txt", "content": "A's notes\n"})).await;
        let of_a = sandlot_server::surfaces::codegen::tenant::workspace_of(a.name, None).unwrap();
        common::tenants::hidden_through_baponi(&server.router, of_a.as_str(), "notes.txt", &b).await;
        assert_eq!(session.ok("Read", json!({"file_path": "notes.txt"})).await, "1\tA's notes\n");
    }
}

#[tokio::test]
async fn a_background_shell_is_seen_only_by_its_tenant_and_the_admin() {
    use common::tenants::{admin, pairs};
    let server = tenants_server();
    for (a, b) in pairs() {
        let mut of_a = Session::open_as(&server, "/p/codegen/sse", &a.bearer).await;
        let mut of_b = Session::open_as(&server, "/p/codegen/sse", &b.bearer).await;
        let mut of_admin = Session::open_as(&server, "/p/codegen/sse", &admin().bearer).await;
        let started =
            of_a.ok("Bash", json!({"command": "sleep 1", "description": "wait", "run_in_background": true})).await;
        let id = started.lines().next().unwrap().strip_prefix("shell_id: ").unwrap().to_owned();
        let unknown = "00000000-0000-4000-8000-000000000000";
        for tool in ["BashOutput", "KillShell"] {
            let of_another = of_b.call(tool, json!({"shell_id": id})).await;
            let of_nobody = of_b.call(tool, json!({"shell_id": unknown})).await;
            assert_eq!(
                (of_another.0.replace(&id, "<id>"), of_another.1),
                (of_nobody.0.replace(unknown, "<id>"), of_nobody.1)
            );
            assert_eq!(of_another, (format!("unknown shell_id: {id}"), true));
        }
        for session in [&mut of_a, &mut of_admin] {
            assert!(session.ok("BashOutput", json!({"shell_id": id})).await.starts_with("command: sleep 1\n"));
        }
        assert_eq!(of_admin.ok("KillShell", json!({"shell_id": id})).await, format!("killed: {id}\n"));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Attacks (docs/security.md): nothing outside the workspace is read or written, and nothing blocks.

#[tokio::test]
async fn symlinks_and_dot_dot_in_every_path_argument_reach_nothing_outside() {
    let server = server();
    let dir = workspace_dir(&server, None);
    let out = outside(&server);
    std::os::unix::fs::symlink(out.join("secret.txt"), dir.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(&out, dir.join("linkdir")).unwrap();
    let mut s = Session::open(&server, "/p/codegen/sse").await;
    let escapes =
        ["link.txt", "linkdir/secret.txt", "../outside/secret.txt", "/workspace/../secret.txt", "/etc/passwd"];
    for path in escapes {
        let (text, _) = s.call("Read", json!({"file_path": path})).await;
        assert!(!text.contains("SECRET") && !text.contains("root:"), "{path}: {text}");
        s.err("Read", json!({"file_path": path})).await;
        s.err("Edit", json!({"file_path": path, "old_string": "SECRET", "new_string": "x"})).await;
        s.call("Write", json!({"file_path": path, "content": "pwned"})).await;
        let (text, _) = s.call("Glob", json!({"pattern": "**", "path": path})).await;
        assert!(!text.contains("secret"), "{path}: {text}");
        let (text, _) = s.call("Grep", json!({"pattern": "SECRET", "path": path})).await;
        assert!(!text.contains("SECRET"), "{path}: {text}");
        let (text, _) = s.call("Grep", json!({"pattern": "SECRET", "glob": path})).await;
        assert!(!text.contains("SECRET"), "{path}: {text}");
        s.call("Write", json!({"file_path": format!("{path}/new.txt"), "content": "pwned"})).await;
    }
    assert_eq!(s.ok("Glob", json!({"pattern": "**/secret*"})).await, "");
    assert_eq!(s.ok("Grep", json!({"pattern": "SECRET"})).await, "");
    assert_eq!(std::fs::read_to_string(out.join("secret.txt")).unwrap(), "SECRET outside\n");
    let names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["secret.txt"]);
    assert!(!std::path::Path::new("/etc/passwd/new.txt").exists());
}

#[tokio::test]
async fn fifos_and_devices_are_refused_without_blocking() {
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    let server = server();
    let dir = workspace_dir(&server, None);
    mknodat(CWD, dir.join("fifo"), FileType::Fifo, Mode::from_raw_mode(0o666), 0).unwrap();
    // A character device like /dev/zero (1, 5): reading it would never end.
    mknodat(CWD, dir.join("zero"), FileType::CharacterDevice, Mode::from_raw_mode(0o666), rustix::fs::makedev(1, 5))
        .unwrap();
    std::fs::write(dir.join("plain.txt"), "needle\n").unwrap();
    let mut s = Session::open(&server, "/p/codegen/sse").await;
    tokio::time::timeout(Duration::from_secs(10), async {
        for target in ["fifo", "zero"] {
            s.err("Read", json!({"file_path": target})).await;
            s.err("Edit", json!({"file_path": target, "old_string": "a", "new_string": "b"})).await;
            s.err("Write", json!({"file_path": target, "content": "x"})).await;
            s.call("Grep", json!({"pattern": "x", "path": target})).await;
        }
        assert_eq!(s.ok("Grep", json!({"pattern": "needle"})).await, "plain.txt:1:needle\n");
        assert_eq!(s.ok("Glob", json!({"pattern": "*"})).await, "plain.txt");
    })
    .await
    .unwrap_or_else(|_| {
        // A panic would hang: the runtime waits for the blocked thread at its end.
        eprintln!("a tool blocked on a FIFO or a device");
        std::process::exit(101)
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_while_tools_run_leaks_nothing() {
    let server = server();
    let dir = workspace_dir(&server, None);
    let out = outside(&server);
    let real = dir.join("d");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("secret.txt"), "inside\n").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, dir, out) = (stop.clone(), dir.clone(), out.clone());
        std::thread::spawn(move || {
            let (d, parked, link) = (dir.join("d"), dir.join("d.real"), dir.join("d.link"));
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::rename(&d, &parked);
                let _ = std::os::unix::fs::symlink(&out, &link);
                let _ = std::fs::rename(&link, &d);
                std::thread::yield_now();
                let _ = std::fs::remove_file(&d);
                let _ = std::fs::rename(&parked, &d);
            }
        })
    };
    let mut s = Session::open(&server, "/p/codegen/sse").await;
    s.ok("Write", json!({"file_path": "seed.txt", "content": "x"})).await;
    for round in 0..150 {
        let (text, _) = s.call("Read", json!({"file_path": "d/secret.txt"})).await;
        assert!(!text.contains("SECRET"), "{round}: {text}");
        let (text, _) = s.call("Grep", json!({"pattern": "SECRET|inside"})).await;
        assert!(!text.contains("SECRET"), "{round}: {text}");
        let (text, _) = s.call("Grep", json!({"pattern": "SECRET", "path": "d"})).await;
        assert!(!text.contains("SECRET"), "{round}: {text}");
        let (text, _) = s.call("Glob", json!({"pattern": "**/*.txt", "path": "d"})).await;
        assert!(!text.contains("SECRET"), "{round}: {text}");
        s.call("Write", json!({"file_path": format!("d/w{round}.txt"), "content": "pwned"})).await;
        s.call("Edit", json!({"file_path": "d/secret.txt", "old_string": "SECRET", "new_string": "x"})).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(std::fs::read_to_string(out.join("secret.txt")).unwrap(), "SECRET outside\n");
    let names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["secret.txt"]);
}

#[tokio::test]
async fn at_the_root_the_endpoint_is_the_product_s_own() {
    let (root, state) = common::state("secret", None);
    let options = HttpOptions {
        root_profile: Some(sandlot_server::surfaces::Profile::Codegen),
        ..HttpOptions::new(AllowedHosts::new(vec!["localhost".into()]))
    };
    let router = app(state.clone(), Authenticator::token("tok"), options);
    let server = Server { _root: root, state, router };
    let (session, _) = Session::open_raw(&server, "/sse").await;
    assert!(session.endpoint.starts_with("/message?sessionId="), "{}", session.endpoint);
    let mut session = Session::open(&server, "/sse").await;
    assert_eq!(session.ok("Glob", json!({"pattern": "*"})).await, "");
}
