//! The Baponi profile over raw HTTP through `sandlot_server::app` (`docs/profiles.md#baponi-mcp`, row by row), with a
//! scripted backend: each line of `code` is a command (`out:`, `err:`, `write:NAME:TEXT`, `cat:NAME`, `env:NAME`,
//! `layout`, `sleep:MS`, `exit:N`, `timeout`), so the tests pin the profile's rendering, validation and thread
//! rules without a sandbox. The same flows against the real binary and jail are in
//! tests/e2e/python_v1/test_baponi_mcp.py.

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use sandlot_core::{
    Backend, Engine, EngineConfig, History, Job, Language, OutputSink, RunOutcome, RunnerInfo, Signer, Termination,
    Workspaces,
};
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::surfaces::{Settings, baponi};
use sandlot_server::{AppState, FileUrls};
use sandlot_server::{HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

/// Interprets `code` as the module says.
struct Scripted;

#[async_trait::async_trait]
impl Backend for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn runners(&self) -> Vec<RunnerInfo> {
        [Language::Python, Language::JavaScript, Language::Bash]
            .into_iter()
            .map(|language| RunnerInfo {
                language,
                image: "scripted".into(),
                version: "1".into(),
                packages: Default::default(),
            })
            .collect()
    }
    async fn run(&self, job: Job, _sink: &dyn OutputSink) -> sandlot_core::Result<RunOutcome> {
        let (mut stdout, mut stderr, mut termination) = (String::new(), String::new(), Termination::Exited { code: 0 });
        for line in job.code.lines() {
            let (command, rest) = line.split_once(':').unwrap_or((line, ""));
            match command {
                "out" => stdout.push_str(&format!("{rest}\n")),
                "err" => stderr.push_str(&format!("{rest}\n")),
                "write" => {
                    let (name, text) = rest.split_once(':').unwrap();
                    std::fs::write(job.workspace.join(name), text).unwrap();
                }
                "cat" => match std::fs::read_to_string(job.workspace.join(rest)) {
                    Ok(text) => stdout.push_str(&format!("{text}\n")),
                    Err(_) => stdout.push_str("missing\n"),
                },
                "env" => stdout.push_str(&format!("{}\n", job.env.get(rest).map_or("unset", String::as_str))),
                "layout" => stdout.push_str(&format!(
                    "{} {} {}\n",
                    job.layout.conversation_path(),
                    job.layout.scratch_data(),
                    job.language
                )),
                "mounts" => {
                    for mount in &job.mounts {
                        let mode = if mount.read_only { "ro" } else { "rw" };
                        stdout.push_str(&format!("{} {} {mode}\n", mount.path, mount.host.display()));
                    }
                }
                "sleep" => {
                    let sleep = tokio::time::sleep(Duration::from_millis(rest.parse().unwrap()));
                    tokio::select! {
                        () = sleep => {}
                        () = job.cancel.cancelled() => termination = Termination::Cancelled,
                    }
                }
                "exit" => termination = Termination::Exited { code: rest.parse().unwrap() },
                "timeout" => termination = Termination::TimedOut,
                other => panic!("unknown command {other}"),
            }
        }
        Ok(RunOutcome {
            termination,
            stdout,
            stderr,
            stdout_truncated: false,
            stderr_truncated: false,
            duration: Duration::from_millis(5),
            connections: Vec::new(),
            connections_dropped: 0,
        })
    }
}

struct Server {
    root: tempfile::TempDir,
    state: AppState,
    router: axum::Router,
}

fn server_with(settings: Settings) -> Server {
    server_with_auth(settings, Authenticator::token("tok"))
}

/// A server over the scripted backend and a history, taking the credentials `auth` checks.
fn server_with_auth(settings: Settings, auth: Authenticator) -> Server {
    let root = tempfile::tempdir().unwrap();
    let history = History::open(root.path().join("history.db"), true).unwrap();
    let workspaces = Workspaces::new(root.path().join("conversations"));
    let engine = Engine::new(Arc::new(Scripted), workspaces, EngineConfig::default()).with_history(history);
    let state = AppState {
        engine: Arc::new(engine),
        files: FileUrls { signer: Signer::new("secret"), public_base_url: "http://test".into(), ttl: None },
        shutdown: Default::default(),
        tool_names: Default::default(),
        resource_read_bytes: sandlot_server::DEFAULT_RESOURCE_READ_BYTES,
        scrub_secrets: false,
    };
    let options =
        HttpOptions { profile_settings: settings, ..HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])) };
    let router = app(state.clone(), auth, options);
    Server { root, state, router }
}

fn server() -> Server {
    server_with(Settings::default())
}

const MCP: &str = "/p/baponi/mcp";

fn post(path: &str, body: &str, token: Option<&str>, peer: &str) -> Request<Body> {
    let mut request = Request::post(path)
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let mut request = request.body(Body::from(body.to_owned())).unwrap();
    request.extensions_mut().insert(axum::extract::ConnectInfo(SocketAddr::new(peer.parse::<IpAddr>().unwrap(), 1)));
    request
}

/// A GET with the right token that accepts an event stream.
fn get(path: &str) -> Request<Body> {
    let mut request = Request::get(path)
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header(header::ACCEPT, "text/event-stream")
        .body(Body::empty())
        .unwrap();
    request.extensions_mut().insert(axum::extract::ConnectInfo(SocketAddr::from(([10, 0, 0, 1], 1))));
    request
}

impl Server {
    async fn send(&self, request: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        (parts.status, parts.headers, axum::body::to_bytes(body, usize::MAX).await.unwrap().to_vec())
    }

    /// A JSON-RPC request to Baponi's endpoint; its answer.
    async fn rpc(&self, method: &str, params: Value) -> Value {
        self.rpc_as("tok", method, params).await
    }

    /// [`Server::rpc`] with the bearer credential `bearer`.
    async fn rpc_as(&self, bearer: &str, method: &str, params: Value) -> Value {
        let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params }).to_string();
        let (status, headers, bytes) = self.send(post(MCP, &body, Some(bearer), "10.0.0.1")).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&bytes));
        assert!(headers.get("mcp-session-id").is_none(), "no session is issued");
        common::jsonrpc_answer(&bytes)
    }

    async fn call(&self, tool: &str, arguments: Value) -> Value {
        self.rpc("tools/call", json!({ "name": tool, "arguments": arguments })).await
    }

    /// [`Server::call`] as `who`.
    async fn call_as(&self, who: &common::tenants::Who, tool: &str, arguments: Value) -> Value {
        self.rpc_as(&who.bearer, "tools/call", json!({ "name": tool, "arguments": arguments })).await
    }

    async fn execute(&self, arguments: Value) -> Value {
        self.call("sandbox_execute", arguments).await["result"].clone()
    }

    fn thread_dir(&self, thread: &str) -> std::path::PathBuf {
        self.root.path().join("conversations").join(thread).join("files")
    }
}

fn text_result(text: &str, is_error: bool) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": is_error })
}

#[tokio::test]
async fn initialize_answers_with_baponi_info_and_no_session() {
    let server = server();
    let params =
        json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } });
    let answer = server.rpc("initialize", params).await;
    let result = &answer["result"];
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(result["capabilities"], json!({ "tools": { "listChanged": false } }));
    assert_eq!(result["serverInfo"]["name"], "baponi");
    assert_eq!(result["instructions"], baponi::mcp::INSTRUCTIONS);
    let instructions = result["instructions"].as_str().unwrap();
    assert!(instructions.contains("sandbox_execute") && instructions.contains("files_download"));
    // An older client gets its own version, as rmcp negotiates.
    let params =
        json!({ "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } });
    assert_eq!(server.rpc("initialize", params).await["result"]["protocolVersion"], "2025-06-18");
}

#[tokio::test]
async fn a_notification_gets_202_and_an_empty_body() {
    let server = server();
    let body = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (status, _, bytes) = server.send(post(MCP, body, Some("tok"), "10.0.0.1")).await;
    assert_eq!((status, bytes.len()), (StatusCode::ACCEPTED, 0));
}

#[tokio::test]
async fn tools_list_is_the_seed_s_exactly() {
    let server = server();
    let answer = server.rpc("tools/list", json!({})).await;
    let expected = json!([
        {
            "name": "sandbox_execute",
            "description": "Execute code in a sandboxed environment",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "code": { "type": "string", "description": "Code to execute" },
                    "language": {
                        "type": "string",
                        "enum": ["python", "node", "bash"],
                        "description": "Programming language. Defaults to the sandbox's configured language if omitted."
                    },
                    "timeout": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 3600,
                        "description": "Execution timeout in seconds. Defaults to sandbox configuration."
                    },
                    "thread_id": {
                        "type": "string",
                        "description": "Persistent thread ID. Files written to /home/baponi persist across calls with the same thread_id."
                    },
                    "metadata": { "type": "object", "description": "Arbitrary key-value metadata attached to the execution record." },
                    "env_vars": {
                        "type": "object",
                        "additionalProperties": { "type": "string" },
                        "description": "Environment variables injected into the sandbox. Keys must be uppercase letters, digits, and underscores, starting with a letter."
                    }
                },
                "required": ["code"]
            },
            "annotations": { "readOnlyHint": false, "destructiveHint": false, "idempotentHint": false }
        },
        {
            "name": "files_download",
            "description": "Download file content from a thread or volume",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "source": { "type": "string", "enum": ["thread", "volume"], "description": "Where to read the file from." },
                    "id": { "type": "string", "description": "The thread_id or volume name." },
                    "path": { "type": "string", "description": "File path relative to the storage root." }
                },
                "required": ["source", "id", "path"]
            },
            "annotations": { "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true }
        }
    ]);
    assert_eq!(answer["result"]["tools"], expected);
}

#[tokio::test]
async fn the_result_is_the_execution_result_markdown() {
    let server = server();
    let cases = [
        ("out:hello", "## Execution Result\n\n**stdout:**\n```\nhello\n```\n\n**Exit code:** 0", false),
        ("err:oops\nexit:1", "## Execution Result\n\n**stderr:**\n```\noops\n```\n\n**Exit code:** 1", true),
        (
            "out:a\nerr:b\nexit:2",
            "## Execution Result\n\n**stdout:**\n```\na\n```\n\n**stderr:**\n```\nb\n```\n\n**Exit code:** 2",
            true,
        ),
        ("exit:0", "## Execution Result\n\n**Exit code:** 0", false),
        (
            "out:x\ntimeout",
            "## Execution Result\n\n**stdout:**\n```\nx\n```\n\n**Error:** timed out after 30 s; the run was killed\n\n\
             **Exit code:** 124",
            true,
        ),
    ];
    for (code, markdown, is_error) in cases {
        assert_eq!(server.execute(json!({ "code": code })).await, text_result(markdown, is_error), "{code}");
    }
}

#[tokio::test]
async fn runs_see_the_home_layout_and_baponi_languages_map_to_sandlot_s() {
    let server = server();
    for (language, sandlot) in [("python", "python"), ("node", "javascript"), ("bash", "bash")] {
        let result = server.execute(json!({ "code": "layout", "language": language })).await;
        let expected =
            format!("## Execution Result\n\n**stdout:**\n```\n/home/baponi true {sandlot}\n```\n\n**Exit code:** 0");
        assert_eq!(result, text_result(&expected, false));
    }
}

#[tokio::test]
async fn a_thread_persists_and_is_a_conversation_and_no_thread_persists_nothing() {
    let server = server();
    server.execute(json!({ "code": "write:data.json:[1,2]", "thread_id": "t-1" })).await;
    let read = server.execute(json!({ "code": "cat:data.json", "thread_id": "t-1" })).await;
    assert_eq!(read["content"][0]["text"], "## Execution Result\n\n**stdout:**\n```\n[1,2]\n```\n\n**Exit code:** 0");
    // The thread is sandlot's conversation t-1: its directory holds the file; one sandlot wrote is seen back.
    assert_eq!(std::fs::read_to_string(server.thread_dir("t-1").join("data.json")).unwrap(), "[1,2]");
    std::fs::write(server.thread_dir("t-1").join("from-sandlot.txt"), "hi").unwrap();
    let read = server.execute(json!({ "code": "cat:from-sandlot.txt", "thread_id": "t-1" })).await;
    assert_eq!(read["content"][0]["text"], "## Execution Result\n\n**stdout:**\n```\nhi\n```\n\n**Exit code:** 0");
    // Another thread, and no thread, see nothing of it; a run without a thread leaves no conversation behind.
    let other = server.execute(json!({ "code": "cat:data.json", "thread_id": "t-2" })).await;
    assert!(other["content"][0]["text"].as_str().unwrap().contains("missing"));
    server.execute(json!({ "code": "write:eph.txt:x\ncat:eph.txt" })).await;
    server.execute(json!({ "code": "write:eph.txt:x\nexit:3" })).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(conversations(&server), ["t-1", "t-2"]);
}

/// The conversations left under the root.
fn conversations(server: &Server) -> Vec<String> {
    let mut left: Vec<String> = std::fs::read_dir(server.root.path().join("conversations"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    left
}

#[tokio::test]
async fn a_dropped_request_cancels_the_run_and_still_removes_its_ephemeral_conversation() {
    let server = Arc::new(server());
    let call = {
        let server = server.clone();
        tokio::spawn(async move { server.execute(json!({ "code": "write:x.txt:x\nsleep:10000" })).await })
    };
    // Running: its conversation exists.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.state.engine.active_runs() == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(conversations(&server).len(), 1);
    call.abort();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !conversations(&server).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(conversations(&server), Vec::<String>::new());
    let runs = server.state.engine.history().unwrap().list(None, 1).unwrap();
    assert_eq!(runs[0].outcome.map(|o| o.as_str()), Some("cancelled"));
}

#[tokio::test]
async fn env_vars_reach_the_run_and_metadata_the_history() {
    let server = server();
    let result = server
        .execute(json!({ "code": "env:API_KEY", "env_vars": { "API_KEY": "k1" }, "metadata": { "job": "42" } }))
        .await;
    assert_eq!(result["content"][0]["text"], "## Execution Result\n\n**stdout:**\n```\nk1\n```\n\n**Exit code:** 0");
    let runs = server.state.engine.history().unwrap().list(None, 10).unwrap();
    assert_eq!(runs[0].metadata, Some(json!({ "job": "42" })));
    assert_eq!(runs[0].caller, "api-token");
    // Its trace id names it.
    let trace = baponi::trace_id(&runs[0].id);
    let state = baponi::BaponiState::new(server.state.clone(), Default::default());
    let tenant = sandlot_core::Tenant::new("api-token");
    assert_eq!(baponi::run_id_of(&state, &tenant, &trace).unwrap(), Some(runs[0].id.clone()));
    assert_eq!(baponi::run_id_of(&state, &tenant, "trc_ffffffffffffffffffff").unwrap(), None);
}

#[tokio::test]
async fn every_invalid_argument_is_32602_naming_its_field() {
    let server = server();
    let cases = [
        (json!({}), "code"),
        (json!({ "code": "" }), "code"),
        (json!({ "code": "x", "language": "ruby" }), "language"),
        (json!({ "code": "x", "timeout": 0 }), "timeout"),
        (json!({ "code": "x", "timeout": 3601 }), "timeout"),
        (json!({ "code": "x", "thread_id": "../etc" }), "thread_id"),
        (json!({ "code": "x", "thread_id": "a".repeat(129) }), "thread_id"),
        (json!({ "code": "x", "metadata": { "bad key": 1 } }), "metadata"),
        (json!({ "code": "x", "metadata": { "k": "v".repeat(257) } }), "metadata"),
        (
            json!({ "code": "x", "metadata": (0..11).map(|i| (format!("k{i}"), json!(i))).collect::<serde_json::Map<_, _>>() }),
            "metadata",
        ),
        (json!({ "code": "x", "env_vars": { "lower": "v" } }), "env_vars"),
        (json!({ "code": "x", "env_vars": { "PATH": "/x" } }), "env_vars"),
        (json!({ "code": "x", "env_vars": { "LD_PRELOAD": "x" } }), "env_vars"),
        (json!({ "code": "x", "env_vars": { "NO_PROXY": "x" } }), "env_vars"),
        (json!({ "code": "x", "env_vars": { "A": "\u{7}" } }), "env_vars"),
        (json!({ "code": "x", "env_vars": { "A": "v".repeat(4097) } }), "env_vars"),
        (
            json!({ "code": "x", "env_vars": (0..51).map(|i| (format!("V{i}"), json!("v"))).collect::<serde_json::Map<_, _>>() }),
            "env_vars",
        ),
    ];
    for (arguments, field) in cases {
        let answer = server.call("sandbox_execute", arguments.clone()).await;
        assert_eq!(answer["error"]["code"], -32602, "{arguments:.60}: {answer}");
        assert_eq!(answer["error"]["data"]["field"], field, "{arguments:.60}");
    }
}

#[tokio::test]
async fn a_second_execution_of_a_busy_thread_is_refused_at_once() {
    let server = Arc::new(server());
    let first = {
        let server = server.clone();
        tokio::spawn(async move { server.execute(json!({ "code": "sleep:800\nout:done", "thread_id": "busy" })).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let second = server.execute(json!({ "code": "out:second", "thread_id": "busy" })).await;
    assert!(started.elapsed() < Duration::from_millis(400), "refused at once, not queued");
    assert_eq!(
        second,
        text_result("thread busy is busy: another execution of it is running; wait for it to finish, then retry", true)
    );
    assert_eq!(first.await.unwrap()["isError"], false);
    // Free again once the first ended.
    assert_eq!(server.execute(json!({ "code": "out:third", "thread_id": "busy" })).await["isError"], false);
}

fn png() -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 13, b'I', b'H', b'D', b'R', 0xff, 0xfe]);
    bytes
}

#[tokio::test]
async fn files_download_gives_text_images_and_the_two_files_api_errors() {
    use base64::Engine as _;
    let server = server();
    server.execute(json!({ "code": "write:data.json:{\"results\": [1, 2, 3]}", "thread_id": "dl" })).await;
    let dir = server.thread_dir("dl");
    std::fs::create_dir(dir.join("output")).unwrap();
    std::fs::write(dir.join("output/chart.png"), png()).unwrap();
    std::fs::write(dir.join("photo.JPG"), b"\xff\xd8\xff").unwrap();
    std::fs::write(dir.join("big.txt"), "a".repeat(1024 * 1024 + 1)).unwrap();
    std::fs::write(dir.join("blob.bin"), b"\x00\xff\xfe").unwrap();
    let download = |path: &str| server.call("files_download", json!({ "source": "thread", "id": "dl", "path": path }));

    assert_eq!(download("data.json").await["result"], text_result("{\"results\": [1, 2, 3]}", false));
    let encoded = base64::engine::general_purpose::STANDARD.encode(png());
    assert_eq!(
        download("output/chart.png").await["result"],
        json!({ "content": [{ "type": "image", "data": encoded, "mimeType": "image/png" }], "isError": false })
    );
    assert_eq!(download("photo.JPG").await["result"]["content"][0]["mimeType"], "image/jpeg");
    for (path, why) in [("big.txt", "larger than the 1 MiB"), ("blob.bin", "binary file")] {
        let result = download(path).await["result"].clone();
        let text = result["content"][0]["text"].as_str().unwrap();
        assert_eq!(result["isError"], true, "{path}");
        assert!(text.contains(why) && text.contains("REST Files API"), "{path}: {text}");
    }
    let missing = download("nope.txt").await["result"].clone();
    assert_eq!(missing, text_result("no file \"nope.txt\" in thread dl", true));
}

#[tokio::test]
async fn files_download_refuses_traversal_and_symlinks_as_sandlot_does() {
    let server = server();
    server.execute(json!({ "code": "write:a.txt:a", "thread_id": "safe" })).await;
    let dir = server.thread_dir("safe");
    std::fs::write(server.root.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(server.root.path().join("secret.txt"), dir.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(server.root.path(), dir.join("up")).unwrap();
    for (id, path, field) in [
        ("safe", "../../secret.txt", "path"),
        ("safe", "/etc/passwd", "path"),
        ("safe", "link.txt", "path"),
        ("safe", "up/secret.txt", "path"),
        ("../x", "a.txt", "id"),
    ] {
        let answer = server.call("files_download", json!({ "source": "thread", "id": id, "path": path })).await;
        assert_eq!(answer["error"]["code"], -32602, "{path}: {answer}");
        assert_eq!(answer["error"]["data"]["field"], field, "{path}");
        assert!(!answer.to_string().contains("secret\""), "{path}");
    }
}

#[tokio::test]
async fn volumes_are_read_when_configured_and_named_when_not() {
    let volume = tempfile::tempdir().unwrap();
    std::fs::write(volume.path().join("readme.md"), "# docs").unwrap();
    let volumes = baponi::Volumes::parse(&format!("docs={}:ro", volume.path().display())).unwrap();
    let with = server_with(Settings { baponi_volumes: volumes });
    let read = with.call("files_download", json!({ "source": "volume", "id": "docs", "path": "readme.md" })).await;
    assert_eq!(read["result"], text_result("# docs", false));
    let unknown = with.call("files_download", json!({ "source": "volume", "id": "other", "path": "x" })).await;
    assert_eq!(unknown["error"]["message"], "no volume \"other\"; configured: docs");

    let none = server();
    let answer = none.call("files_download", json!({ "source": "volume", "id": "docs", "path": "x" })).await;
    assert_eq!(answer["error"]["code"], -32602);
    assert_eq!(answer["error"]["message"], "no volume \"docs\": this server has no volumes (SANDLOT_BAPONI_VOLUMES)");
}

#[tokio::test]
async fn runs_see_every_volume_at_data_slug_read_only_unless_rw() {
    let (docs, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let text = format!("docs={},work={}:rw", docs.path().display(), work.path().display());
    let server = server_with(Settings { baponi_volumes: baponi::Volumes::parse(&text).unwrap() });
    let result = server.execute(json!({ "code": "mounts" })).await;
    let expected = format!(
        "## Execution Result\n\n**stdout:**\n```\n/data/docs {} ro\n/data/work {} rw\n```\n\n**Exit code:** 0",
        docs.path().display(),
        work.path().display()
    );
    assert_eq!(result, text_result(&expected, false));
    let none = self::server().execute(json!({ "code": "mounts" })).await;
    assert_eq!(none, text_result("## Execution Result\n\n**Exit code:** 0", false));
}

#[tokio::test]
async fn json_rpc_errors_follow_baponi() {
    let server = server();
    let cases = [
        ("{not json", StatusCode::BAD_REQUEST, -32700),
        (r#"{"id":1,"method":"tools/list"}"#, StatusCode::BAD_REQUEST, -32600),
        (r#"{"jsonrpc":"2.0","id":1}"#, StatusCode::BAD_REQUEST, -32600),
        // JSON rmcp cannot type (it answered those with HTTP 415): a fractional id, a key given twice.
        (r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#, StatusCode::BAD_REQUEST, -32600),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/list"}"#, StatusCode::BAD_REQUEST, -32600),
    ];
    for (body, status, code) in cases {
        let (got, _, bytes) = server.send(post(MCP, body, Some("tok"), "10.0.0.1")).await;
        assert_eq!(got, status, "{body}");
        assert_eq!(common::jsonrpc_answer(&bytes)["error"]["code"], code, "{body}");
    }
    assert_eq!(server.rpc("tools/unknown", json!({})).await["error"]["code"], -32601);
    let unknown_tool = server.call("nope", json!({})).await;
    assert_eq!(unknown_tool["error"]["code"], -32602);
    let big = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": { "x": "a".repeat(1024 * 1024) } });
    let (status, _, _) = server.send(post(MCP, &big.to_string(), Some("tok"), "10.0.0.1")).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn mcp_protocol_version_is_checked_when_present() {
    let server = server();
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let mut good = post(MCP, list, Some("tok"), "10.0.0.1");
    good.headers_mut().insert("mcp-protocol-version", "2025-11-25".parse().unwrap());
    assert_eq!(server.send(good).await.0, StatusCode::OK);
    let mut bad = post(MCP, list, Some("tok"), "10.0.0.1");
    bad.headers_mut().insert("mcp-protocol-version", "1999-01-01".parse().unwrap());
    assert_eq!(server.send(bad).await.0, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn get_opens_an_event_stream_that_stays_open() {
    let server = server();
    let response = server.router.clone().oneshot(get(MCP)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "text/event-stream");
    assert!(response.headers().get("mcp-session-id").is_none());
    let mut body = response.into_body().into_data_stream();
    let next = tokio::time::timeout(Duration::from_millis(300), futures::StreamExt::next(&mut body)).await;
    assert!(next.is_err(), "nothing is sent and the stream stays open");
    server.state.shutdown.cancel();
}

#[tokio::test]
async fn a_wrong_key_gets_baponi_s_401_and_the_fourth_within_a_minute_429() {
    let server = server();
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    for _ in 0..3 {
        let (status, headers, bytes) = server.send(post(MCP, list, Some("wrong"), "10.0.0.9")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body, json!({ "error": "unauthorized", "message": "Invalid or revoked API key." }));
    }
    let (status, headers, _) = server.send(post(MCP, list, Some("wrong"), "10.0.0.9")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(headers[header::RETRY_AFTER].to_str().unwrap().parse::<u64>().unwrap() >= 1);
    // A missing key is 401 with the same body; the right key still passes from that address.
    let (status, _, bytes) = server.send(post(MCP, list, None, "10.0.0.9")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap()["message"], "Invalid or revoked API key.");
    assert_eq!(server.send(post(MCP, list, Some("tok"), "10.0.0.9")).await.0, StatusCode::OK);
    // sandlot's own endpoint keeps its own message and allowance.
    let (status, _, bytes) = server.send(post("/mcp", list, Some("wrong"), "10.0.0.9")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_ne!(serde_json::from_slice::<Value>(&bytes).unwrap()["message"], "Invalid or revoked API key.");
}

/// A server with `profile` at the root.
fn server_at_root() -> Server {
    let mut server = server();
    let options = HttpOptions {
        root_profile: Some(sandlot_server::surfaces::Profile::Baponi),
        ..HttpOptions::new(AllowedHosts::new(vec!["localhost".into()]))
    };
    server.router = app(server.state.clone(), Authenticator::token("tok"), options);
    server
}

/// The names `tools/list` gives at `path`.
async fn tool_names(server: &Server, path: &str) -> Vec<String> {
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let mut request = post(path, list, Some("tok"), "10.0.0.1");
    request.headers_mut().insert(header::ACCEPT, "application/json, text/event-stream".parse().unwrap());
    let (status, _, bytes) = server.send(request).await;
    assert_eq!(status, StatusCode::OK, "{path}");
    let answer = common::jsonrpc_answer(&bytes);
    answer["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn paths_by_default_and_with_baponi_at_the_root() {
    let own = ["sandbox_run_code", "sandbox_list_runners", "sandbox_upload_file", "sandbox_session", "sandbox_browser"]
        .map(String::from)
        .to_vec();
    let baponi = ["sandbox_execute", "files_download"].map(String::from).to_vec();
    let server = server();
    assert_eq!(tool_names(&server, "/mcp").await, own);
    assert_eq!(tool_names(&server, "/p/sandlot/mcp").await, own);
    assert_eq!(tool_names(&server, "/p/baponi/mcp").await, baponi);

    let server = server_at_root();
    assert_eq!(tool_names(&server, "/mcp").await, baponi);
    assert_eq!(tool_names(&server, "/p/baponi/mcp").await, baponi);
    assert_eq!(tool_names(&server, "/p/sandlot/mcp").await, own);
    assert_eq!(server.send(get("/p/sandlot/v1/runs")).await.0, StatusCode::OK);
    assert_eq!(server.send(get("/v1/runs")).await.0, StatusCode::NOT_FOUND);
    assert_eq!(server.send(get("/sse")).await.0, StatusCode::NOT_FOUND);
    assert_eq!(server.send(get("/healthz")).await.0, StatusCode::OK);
    // sandlot's legacy SSE under the prefix names its message path under the prefix too.
    let response = server.router.clone().oneshot(get("/p/sandlot/sse")).await.unwrap();
    let mut body = response.into_body().into_data_stream();
    let first = futures::StreamExt::next(&mut body).await.unwrap().unwrap();
    let first = String::from_utf8_lossy(&first).into_owned();
    assert!(first.starts_with("event: endpoint\ndata: /p/sandlot/message?sessionId="), "{first}");
}

#[tokio::test]
async fn a_file_written_through_either_profile_is_seen_through_the_other() {
    let server = server();
    let own_call = |name: &str, arguments: Value| {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": name, "arguments": arguments } });
        let mut request = post("/mcp", &body.to_string(), Some("tok"), "10.0.0.1");
        request.headers_mut().insert(header::ACCEPT, "application/json, text/event-stream".parse().unwrap());
        request
    };
    // sandlot's upload tool → Baponi's run and files_download in the thread of the same name.
    let upload = json!({ "conversationId": "shared", "path": "notes.txt", "content": "from sandlot" });
    let (status, _, _) = server.send(own_call("sandbox_upload_file", upload)).await;
    assert_eq!(status, StatusCode::OK);
    let read = server.execute(json!({ "code": "cat:notes.txt", "thread_id": "shared" })).await;
    assert_eq!(
        read["content"][0]["text"],
        "## Execution Result\n\n**stdout:**\n```\nfrom sandlot\n```\n\n**Exit code:** 0"
    );
    let download =
        server.call("files_download", json!({ "source": "thread", "id": "shared", "path": "notes.txt" })).await;
    assert_eq!(download["result"], text_result("from sandlot", false));
    // Baponi's run → sandlot's run_code in the conversation.
    server.execute(json!({ "code": "write:out.txt:from baponi", "thread_id": "shared" })).await;
    let run = json!({ "conversationId": "shared", "language": "python", "code": "cat:out.txt" });
    let (_, _, bytes) = server.send(own_call("sandbox_run_code", run)).await;
    assert_eq!(common::jsonrpc_answer(&bytes)["result"]["structuredContent"]["stdout"], "from baponi\n");
}

// ---------------------------------------------------------------------------------------------------------------
// Tenants (docs/security.md, "Tenants"): for two JWT subjects and for two named tokens, B neither runs in nor reads a
// thread of A's: `sandbox_execute` refuses it as an invalid `thread_id` (also while A runs there: never "busy"), and
// `files_download` answers exactly as for a thread that does not exist. A and the admin still use it.

/// A JSON-RPC error answer without its `trace_id` (fresh for every error), for comparing whole answers.
fn without_trace_id(mut answer: Value) -> Value {
    if let Some(data) = answer.pointer_mut("/error/data").and_then(Value::as_object_mut) {
        data.remove("trace_id");
    }
    answer
}

#[tokio::test]
async fn another_tenants_thread_is_refused_to_runs_and_missing_to_files_download() {
    use common::tenants::{admin, authenticator, pairs};
    use sandlot_server::kit::tenant_workspaces::profile_workspace;
    let server = server_with_auth(Settings::default(), authenticator());
    for (a, b) in pairs() {
        let thread = format!("{}-mcp", a.name);
        let written = server
            .call_as(&a, "sandbox_execute", json!({ "code": "write:notes.txt:secret", "thread_id": thread }))
            .await;
        assert_eq!(written["result"], text_result("## Execution Result\n\n**Exit code:** 0", false));

        let download = |id: &str| json!({ "source": "thread", "id": id, "path": "notes.txt" });
        let missing = format!("{}-never-used", b.name);
        let of_a = server.call_as(&b, "files_download", download(&thread)).await;
        let of_nobody = server.call_as(&b, "files_download", download(&missing)).await;
        assert_eq!(common::tenants::naming(&of_a, &thread), common::tenants::naming(&of_nobody, &missing));
        assert_eq!(of_a["result"], text_result(&format!("no file \"notes.txt\" in thread {thread}"), true));

        let refused = |thread: &str| {
            let message =
                format!("invalid thread_id: thread {thread:?} is not available to this caller; use another thread_id");
            json!({ "jsonrpc": "2.0", "id": 7, "error": { "code": -32602, "message": message, "data": { "kind": "invalid_argument", "field": "thread_id" } } })
        };
        let run = |thread: &str| json!({ "code": "cat:notes.txt", "thread_id": thread });
        assert_eq!(without_trace_id(server.call_as(&b, "sandbox_execute", run(&thread)).await), refused(&thread));
        // Nor before A ever used them: A's derived workspaces of the other profiles.
        for prefix in ["codegen", "osb"] {
            let derived = profile_workspace(prefix, a.name, None).unwrap().to_string();
            assert_eq!(without_trace_id(server.call_as(&b, "sandbox_execute", run(&derived)).await), refused(&derived));
            assert!(!server.root.path().join("conversations").join(&derived).exists(), "{derived}");
        }
        // While A runs in the thread, B is refused the same way, not told the thread is busy.
        let running = {
            let (server, a, thread) = (server.router.clone(), a.bearer.clone(), thread.clone());
            tokio::spawn(async move {
                let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "sandbox_execute", "arguments": { "code": "sleep:10000", "thread_id": thread } } });
                server.oneshot(post(MCP, &body.to_string(), Some(&a), "10.0.0.1")).await
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while server.state.engine.active_runs() == 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(without_trace_id(server.call_as(&b, "sandbox_execute", run(&thread)).await), refused(&thread));
        running.abort();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while server.state.engine.active_runs() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let history = server.state.engine.history().unwrap();
        assert_eq!(
            history.list_for(&sandlot_core::Tenant::new(b.name), None, 10).unwrap(),
            Vec::new(),
            "B ran nothing"
        );

        // A and the admin read it and run in it.
        for who in [&a, &admin()] {
            assert_eq!(
                server.call_as(who, "files_download", download(&thread)).await["result"],
                text_result("secret", false)
            );
            let read = server.call_as(who, "sandbox_execute", run(&thread)).await;
            assert_eq!(
                read["result"]["content"][0]["text"],
                "## Execution Result\n\n**stdout:**\n```\nsecret\n```\n\n**Exit code:** 0"
            );
        }
    }
}
