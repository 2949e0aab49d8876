//! `sandlot serve`'s logs as a real process writes them to a file (not a terminal): in JSON mode every line is one
//! JSON object with no duplicate key and no Rust debug text, the start is a structured event, and a request's id
//! (also in the response's `x-request-id`) is on the request's line and on the lines of the run it made; in text
//! mode there is no colour code. Text a caller controls (a tool name, a method, a path) never forges a line in
//! either format, and a start that fails is one JSON line in JSON mode. Needs root, like every test that starts
//! sandboxes.

use crate::common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

/// A `sandlot serve` whose stderr goes to a file; stopped with SIGTERM by [`Server::stop`].
struct Server {
    child: Child,
    addr: SocketAddr,
    root: common::TempRoot,
    log: std::path::PathBuf,
}

impl Server {
    /// Starts with `env` (and without `MCP_API_TOKEN` unless `env` sets it) and waits for `/healthz`.
    fn start(env: &[(&str, &str)]) -> Server {
        assert!(nix::unistd::geteuid().is_root(), "these tests start sandboxes and need root");
        let root = common::TempRoot::new();
        let log = root.path().join("stderr.log");
        let addr = common::free_addr();
        let child = common::serve_command(&root.path().join("data"), addr, 950_000 + std::process::id() % 40_000)
            .env_remove("MCP_API_TOKEN")
            .env_remove("NO_COLOR")
            .envs(env.iter().copied())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start sandlot serve");
        let server = Server { child, addr, root, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http(addr, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").is_err() {
            assert!(Instant::now() < deadline, "sandlot serve did not answer /healthz within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// SIGTERM, wait for the exit, and the lines it wrote to stderr.
    fn stop(mut self) -> Vec<String> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
        std::fs::read_to_string(&self.log).unwrap().lines().map(str::to_owned).collect()
    }

    /// A stateless `tools/call` running bash `code`, with `token` and maybe an `x-request-id`: the response's head
    /// and body.
    fn run_bash(&self, token: &str, code: &str, request_id: Option<&str>) -> (String, String) {
        self.call(token, serde_json::json!({ "conversationId": "logs", "language": "bash", "code": code }), request_id)
    }

    /// A stateless `tools/call` of `sandbox_run_code` with `arguments`.
    fn call(&self, token: &str, arguments: serde_json::Value, request_id: Option<&str>) -> (String, String) {
        let message = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "sandbox_run_code", "arguments": arguments }
        });
        self.post_mcp(token, &message, request_id)
    }

    /// A stateless POST of one JSON-RPC `message` to `/mcp`.
    fn post_mcp(&self, token: &str, message: &serde_json::Value, request_id: Option<&str>) -> (String, String) {
        self.post("/mcp", token, message, request_id)
    }

    /// A stateless POST of one JSON-RPC `message` to an MCP endpoint at `path`.
    fn post(&self, path: &str, token: &str, message: &serde_json::Value, request_id: Option<&str>) -> (String, String) {
        let body = message.to_string();
        let id = request_id.map(|id| format!("X-Request-Id: {id}\r\n")).unwrap_or_default();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n{id}\
             Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        http(self.addr, &request).unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request on a new connection, read to its end: (head, body). Bodies here are short and not chunked.
fn http(addr: SocketAddr, request: &str) -> std::io::Result<(String, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(|| std::io::Error::other("no HTTP head"))?;
    Ok((head.to_owned(), body.to_owned()))
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// A JSON value parsed with every object checked for duplicate keys (serde_json keeps the last silently).
struct Strict(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Strict;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Strict, E> {
                Ok(Strict(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Strict, E> {
                Ok(Strict(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Strict, E> {
                Ok(Strict(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Strict, E> {
                Ok(Strict(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Strict, E> {
                Ok(Strict(v.into()))
            }
            fn visit_unit<E>(self) -> Result<Strict, E> {
                Ok(Strict(serde_json::Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
                let mut items = Vec::new();
                while let Some(Strict(item)) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Strict(items.into()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
                let mut object = serde_json::Map::new();
                while let Some((key, Strict(value))) = map.next_entry::<String, Strict>()? {
                    if object.insert(key.clone(), value).is_some() {
                        return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
                    }
                }
                Ok(Strict(object.into()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Every string in `value`, recursively.
fn strings(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// Rust `Debug` text in a log field: `Some(..)`, `None`, `Ok(..)`, a struct or enum variant with braces, escaped quotes.
fn looks_like_debug(text: &str) -> bool {
    let starts_like_a_variant = ["Some(", "Ok(", "Err(", "None"].iter().any(|p| text.starts_with(p));
    let struct_like = text.split_once(" { ").is_some_and(|(name, _)| {
        name.chars().next().is_some_and(char::is_uppercase) && name.chars().all(|c| c.is_alphanumeric() || c == ':')
    });
    starts_like_a_variant || struct_like || text.contains("\\\"")
}

/// Every line of a JSON-mode server (a request with its run, a generated token, an unknown path, a refused token,
/// the shutdown) is a JSON object without duplicate keys or debug text; the start is one structured event; the
/// request id the response carries in `x-request-id` is on the request's line and on its run's lines, and a
/// caller's own id is kept; the generated token is in no line, but in the token file the start event names.
#[test]
fn json_logs_are_json_lines_with_the_request_id_on_the_request_and_its_run() {
    let server = Server::start(&[("SANDLOT_LOG_FORMAT", "json")]);
    let token_file = server.root.path().join("data/.sandlot/api-token");
    let token = std::fs::read_to_string(&token_file).expect("the generated token's file").trim().to_owned();
    assert_eq!(token.len(), 64, "{token}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777, 0o600);

    let (head, body) = server.run_bash(&token, "echo logged", None);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(body.contains("logged"), "{body}");
    let id = header(&head, "x-request-id").expect("x-request-id on the response").to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let (head, _) = server.run_bash(&token, "echo mine", Some("caller-id-42"));
    assert_eq!(header(&head, "x-request-id"), Some("caller-id-42"));
    let (head, _) = server.run_bash(&token, "true", Some(&"x".repeat(200)));
    assert_ne!(header(&head, "x-request-id"), Some("x".repeat(200).as_str()), "an overlong id is replaced");
    // A bad argument is logged with its field and reason (its `message` key used to be written twice).
    let bad = serde_json::json!({ "conversationId": "../up", "language": "bash", "code": "true" });
    let (head, body) = server.call(&token, bad, Some("bad-argument"));
    assert!(head.starts_with("HTTP/1.1 200") && body.contains("-32602"), "{head}\n{body}");
    let (head, _) = server.run_bash("wrong", "true", None);
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    let (head, _) =
        http(server.addr, "GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    let root = server.root.path().join("data");
    let lines = server.stop();
    assert!(lines.len() >= 8, "{lines:#?}");
    let mut events = Vec::new();
    for line in &lines {
        assert!(!line.contains("\x1b["), "a colour code: {line}");
        assert!(!line.contains(&token), "the token is logged: {line}");
        let Strict(event) = serde_json::from_str(line).unwrap_or_else(|e| panic!("not strict JSON ({e}): {line}"));
        assert!(event.is_object(), "{line}");
        let mut texts = Vec::new();
        strings(&event, &mut texts);
        for text in texts {
            assert!(!looks_like_debug(&text), "Rust debug text {text:?} in {line}");
        }
        events.push(event);
    }
    let message = |event: &serde_json::Value| event["fields"]["message"].as_str().unwrap_or_default().to_owned();
    let started: Vec<_> = events.iter().filter(|e| message(e) == "sandlot started").collect();
    assert_eq!(started.len(), 1, "{lines:#?}");
    let fields = &started[0]["fields"];
    assert_eq!(fields["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(fields["address"], server_addr_of(fields));
    assert_eq!(fields["backend"], "native");
    assert_eq!(fields["root"], root.display().to_string());
    assert!(fields["runners"].as_str().unwrap().split(',').any(|r| r == "bash"), "{fields}");
    assert_eq!(fields["token_file"], token_file.display().to_string());

    let with_id = |id: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| {
                e["span"]["request_id"] == id
                    || e["spans"].as_array().is_some_and(|s| s.iter().any(|s| s["request_id"] == id))
            })
            .map(message)
            .collect()
    };
    let mine = with_id(&id);
    for expected in ["run started", "run finished", "tool call", "request"] {
        assert!(mine.iter().any(|m| m == expected), "no {expected:?} line with request id {id}: {mine:?}\n{lines:#?}");
    }
    let request_line =
        events.iter().find(|e| e["span"]["request_id"] == id.as_str() && message(e) == "request").unwrap();
    assert_eq!(
        (request_line["span"]["method"].as_str(), request_line["span"]["path"].as_str()),
        (Some("POST"), Some("/mcp"))
    );
    assert_eq!(request_line["fields"]["status"], 200);
    assert!(with_id("caller-id-42").iter().any(|m| m == "run started"), "{lines:#?}");
    // Every request has its line, with an id (the /healthz polls of the start are left out).
    let requests: Vec<_> =
        events.iter().filter(|e| message(e) == "request" && e["span"]["path"] != "/healthz").collect();
    assert_eq!(requests.len(), 6, "{lines:#?}");
    assert!(with_id("bad-argument").iter().any(|m| m == "invalid tool arguments"), "{lines:#?}");
    assert!(requests.iter().all(|e| e["span"]["request_id"].as_str().is_some_and(|id| !id.is_empty())), "{lines:#?}");
}

/// The address the start event names, checked to be a socket address.
fn server_addr_of(fields: &serde_json::Value) -> String {
    let address = fields["address"].as_str().unwrap();
    address.parse::<SocketAddr>().expect("address is ip:port");
    address.to_owned()
}

/// Text logs written to a file (not a terminal) carry no colour codes, and still give each request its id.
#[test]
fn text_logs_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let server = Server::start(&[("SANDLOT_LOG", "info"), ("MCP_API_TOKEN", "text-token")]);
    let (head, _) = server.run_bash("text-token", "echo text", None);
    let id = header(&head, "x-request-id").unwrap().to_owned();
    let lines = server.stop();
    let text = lines.join("\n");
    assert!(!text.contains('\x1b'), "colour codes in:\n{text}");
    assert!(text.contains("sandlot: serving MCP at"), "{text}");
    let seen: HashSet<&str> = lines
        .iter()
        .filter(|l| l.contains(&format!("request_id={id}")))
        .filter_map(|l| ["run started", "run finished", "request"].into_iter().find(|m| l.contains(m)))
        .collect();
    assert_eq!(seen, HashSet::from(["run started", "run finished", "request"]), "{text}");
}

/// Reads `stream` until what was read contains `needle` (within 60 s); everything read so far.
fn read_until(stream: &mut TcpStream, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buffer = [0u8; 4096];
    while !seen.contains(needle) {
        assert!(Instant::now() < deadline, "no {needle:?} in {seen}");
        let read = stream.read(&mut buffer).expect("read the SSE stream");
        assert!(read > 0, "the SSE stream ended before {needle:?}: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
}

/// Over the legacy HTTP+SSE transport the run is started by a `POST /message`, and its lines carry that POST's
/// request id too.
#[test]
fn legacy_sse_runs_carry_the_request_id_of_their_post() {
    let server = Server::start(&[("SANDLOT_LOG_FORMAT", "json"), ("MCP_API_TOKEN", "legacy-token")]);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    stream
        .write_all(b"GET /sse HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer legacy-token\r\nAccept: text/event-stream\r\n\r\n")
        .unwrap();
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, "sessionId=");
    let start = seen.find("/message?sessionId=").unwrap();
    let path: String = seen[start..].chars().take_while(|c| !c.is_whitespace()).collect();
    let post = |body: serde_json::Value, request_id: &str| {
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer legacy-token\r\nX-Request-Id: {request_id}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let (head, _) = http(server.addr, &request).unwrap();
        assert!(head.starts_with("HTTP/1.1 202"), "{head}");
    };
    let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "logs-test", "version": "0"}}});
    post(initialize, "legacy-init");
    read_until(&mut stream, &mut seen, "\"id\":1");
    post(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), "legacy-initialized");
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "sandbox_run_code", "arguments": {"conversationId": "legacy", "language": "bash", "code": "echo old"}}});
    post(call, "legacy-run-7");
    read_until(&mut stream, &mut seen, "\"id\":2");
    assert!(seen.contains("old\\n"), "{seen}");
    drop(stream);
    let lines = server.stop();
    let messages: Vec<String> = lines
        .iter()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .filter(|event| event["span"]["request_id"] == "legacy-run-7")
        .map(|event| event["fields"]["message"].as_str().unwrap_or_default().to_owned())
        .collect();
    for expected in ["run started", "run finished", "tool call", "request"] {
        assert!(messages.iter().any(|m| m == expected), "no {expected:?} line with the POST's id: {lines:#?}");
    }
}

/// What each forged value holds after its ordinary start: a newline, what looks like a whole log line, and an ESC
/// sequence (clear the screen); a marker naming the case follows it.
const FORGED: &str = "\n2026-11-28T00:00:00.000000Z  INFO sandlot: forged\x1b[2J";
/// [`FORGED`] as a log shows it, escaped (written out by hand, not by the code under test).
const FORGED_ESCAPED: &str = "\\n2026-11-28T00:00:00.000000Z  INFO sandlot: forged\\u{1b}[2J";

/// How a field's value appears in a text line: `%` fields as they are (the server escapes them), string fields
/// as Rust `Debug` (tracing's text format quotes them).
enum Shown {
    Display(String),
    Str(String),
}

impl Shown {
    fn value(&self) -> &str {
        match self {
            Shown::Display(value) | Shown::Str(value) => value,
        }
    }

    fn in_text(&self) -> String {
        match self {
            Shown::Display(value) => value.clone(),
            Shown::Str(value) => format!("{value:?}"),
        }
    }
}

/// One line expected for a request: its message and some of its fields (a `span.` prefix names a span field).
struct Expected {
    message: &'static str,
    fields: Vec<(&'static str, Shown)>,
}

fn expect(message: &'static str, fields: Vec<(&'static str, Shown)>) -> Expected {
    Expected { message, fields }
}

/// The messages the forged requests log, longest first (a text line's message is the one its text starts with).
const MESSAGES: [&str; 4] = ["invalid tool arguments", "baponi tool call", "tool call", "request"];

/// Text a caller controls never makes a log line of its own, in either format: a tool name (sandlot's tools and
/// Baponi's), a JSON-RPC method, a path argument and an HTTP path, each holding a newline, what looks like a log
/// line and an ESC sequence, give their request exactly the lines it logs anyway, the forged text escaped on one of
/// them (`\n`, `\u{1b}`), and no line holds an ESC. In JSON mode every start-up line is a JSON event too, the data
/// root and the metrics listener's address included.
#[test]
fn caller_text_never_forges_a_log_line_in_either_format() {
    const TOKEN: &str = "forge-token";
    let call = |name: String| serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": {}}});
    for format in ["text", "json"] {
        let metrics = common::free_addr();
        let server = Server::start(&[
            ("SANDLOT_LOG_FORMAT", format),
            ("MCP_API_TOKEN", TOKEN),
            ("SANDLOT_METRICS_ADDR", &metrics.to_string()),
        ]);
        let (head, _) = server.post_mcp(TOKEN, &call(format!("no_such_tool{FORGED}TOOL")), Some("forge-tool"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let (head, _) =
            server.post("/p/baponi/mcp", TOKEN, &call(format!("no_such_tool{FORGED}BAPONI")), Some("forge-baponi"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let method = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": format!("tools/list{FORGED}METHOD")});
        let (head, _) = server.post_mcp(TOKEN, &method, Some("forge-method"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let upload = serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "sandbox_upload_file",
            "arguments": {"conversationId": "forge", "path": format!("a{FORGED}PATH"), "content": "x"}}});
        let (head, _) = server.post_mcp(TOKEN, &upload, Some("forge-path"));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        // A raw control character never gets past hyper in a request line; percent-encoded, it is logged as sent.
        let get = "GET /nowhere%0Aforged%1B%5B2JHTTPPATH HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: forge-http-path\r\n\
                   Connection: close\r\n\r\n";
        let (head, _) = http(server.addr, get).unwrap();
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");
        let lines = server.stop();
        let all = lines.join("\n");

        assert!(!all.contains('\x1b'), "an ESC in the {format} log:\n{all}");
        // Each forged value ends on the line that carries its request's id (a forged line break would move its end
        // to a line of its own); the method is never logged.
        let ends = [
            ("[2JTOOL", "forge-tool", 1),
            ("[2JBAPONI", "forge-baponi", 1),
            ("[2JMETHOD", "forge-method", 0),
            ("[2JPATH", "forge-path", 1),
            ("%5B2JHTTPPATH", "forge-http-path", 1),
        ];
        for (end, id, count) in ends {
            let found: Vec<&String> = lines.iter().filter(|l| l.contains(end)).collect();
            assert_eq!(found.len(), count, "{end} in the {format} log:\n{all}");
            assert!(found.iter().all(|l| l.contains(id)), "{end} without {id}:\n{all}");
        }
        let invalid_path = format!("invalid path \"a{}PATH\": contains a control character", FORGED_ESCAPED);
        let expected: Vec<(&str, Vec<Expected>)> = vec![
            (
                "forge-tool",
                vec![
                    expect("tool call", vec![("tool", Shown::Display(format!("no_such_tool{FORGED_ESCAPED}TOOL")))]),
                    expect("request", vec![]),
                ],
            ),
            (
                "forge-baponi",
                vec![
                    expect(
                        "baponi tool call",
                        vec![("tool", Shown::Display(format!("no_such_tool{FORGED_ESCAPED}BAPONI")))],
                    ),
                    expect("request", vec![]),
                ],
            ),
            ("forge-method", vec![expect("request", vec![])]),
            (
                "forge-path",
                vec![
                    expect("invalid tool arguments", vec![("reason", Shown::Str(invalid_path))]),
                    expect("tool call", vec![("tool", Shown::Display("sandbox_upload_file".into()))]),
                    expect("request", vec![]),
                ],
            ),
            (
                "forge-http-path",
                vec![expect(
                    "request",
                    vec![
                        ("span.path", Shown::Display("/nowhere%0Aforged%1B%5B2JHTTPPATH".into())),
                        ("status", Shown::Display("404".into())),
                    ],
                )],
            ),
        ];
        if format == "json" {
            let events: Vec<serde_json::Value> = lines
                .iter()
                .map(|line| serde_json::from_str::<Strict>(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")).0)
                .collect();
            let messages: Vec<&str> = events.iter().filter_map(|e| e["fields"]["message"].as_str()).collect();
            let metrics_line = format!("metrics at http://{metrics}/metrics");
            for start in ["data root", metrics_line.as_str(), "sandlot started"] {
                assert_eq!(messages.iter().filter(|m| **m == start).count(), 1, "{start:?} in:\n{all}");
            }
            for (id, lines) in &expected {
                let mine: Vec<&serde_json::Value> = events.iter().filter(|e| e["span"]["request_id"] == *id).collect();
                let got: Vec<&str> = mine.iter().map(|e| e["fields"]["message"].as_str().unwrap_or_default()).collect();
                let want: Vec<&str> = lines.iter().map(|l| l.message).collect();
                assert_eq!(got, want, "the lines of {id}:\n{all}");
                for (event, line) in mine.iter().zip(lines) {
                    for (field, shown) in &line.fields {
                        let value = match field.strip_prefix("span.") {
                            Some(field) => event["span"][field].clone(),
                            None => event["fields"][field].clone(),
                        };
                        let value = value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string());
                        assert_eq!(value, shown.value(), "{field} of {id}'s {:?}", line.message);
                    }
                }
            }
        } else {
            assert_eq!(
                lines.iter().filter(|l| **l == format!("sandlot: metrics at http://{metrics}/metrics")).count(),
                1,
                "{all}"
            );
            for (id, expected_lines) in &expected {
                let mine: Vec<&String> = lines.iter().filter(|l| l.contains(&format!("request_id={id}}}"))).collect();
                // The message follows the span and the target: `... request{...}: target: message fields`.
                let message_of = |line: &str| {
                    let text = line.split_once("}: ").and_then(|(_, rest)| rest.split_once(": ")).map(|(_, m)| m);
                    MESSAGES.into_iter().find(|m| text.is_some_and(|t| t.starts_with(m))).unwrap_or("?")
                };
                let got: Vec<&str> = mine.iter().map(|l| message_of(l)).collect();
                let want: Vec<&str> = expected_lines.iter().map(|l| l.message).collect();
                assert_eq!(got, want, "the lines of {id}:\n{all}");
                for (line, expected_line) in mine.iter().zip(expected_lines) {
                    for (field, shown) in &expected_line.fields {
                        let field = field.trim_start_matches("span.");
                        let shown = format!("{field}={}", shown.in_text());
                        let whole = line.contains(&format!("{shown} ")) || line.ends_with(&shown);
                        assert!(whole, "no {shown} in {line}");
                    }
                }
            }
        }
    }
}

/// A start that fails on a bad value says so in one JSON line in JSON mode, an error event, even before the
/// command line is parsed (a bad option value) and when the bad value is `SANDLOT_LOG` itself.
#[test]
fn a_failed_start_in_json_mode_is_one_json_error_line() {
    let cases = [
        (("SANDLOT_MEMORY_MB", "lots"), "invalid SANDLOT_MEMORY_MB=\"lots\": invalid digit found in string"),
        (("SANDLOT_LOG", "info,="), "invalid SANDLOT_LOG=\"info,=\": invalid filter directive"),
        (("MCP_API_TOKEN", ""), "MCP_API_TOKEN must not be empty"),
        // The value is quoted with Rust's `Debug` (`\u{1b}`), whose backslash the line's escape doubles.
        (
            ("SANDLOT_PROFILES", "e2b\u{1b}[2J"),
            "invalid SANDLOT_PROFILES=\"e2b\\\\u{1b}[2J\": unknown profile \"e2b\\\\u{1b}[2J\"; known: {profiles}, or all, none",
        ),
    ];
    let profiles = sandlot_server::surfaces::Profile::ALL.map(|p| p.name()).join(", ");
    for ((name, value), message) in cases {
        let message = message.replace("{profiles}", &profiles);
        let root = common::TempRoot::new();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .arg("serve")
            .env("SANDBOX_ROOT", root.path())
            .env("MCP_HTTP_ADDR", "127.0.0.1:0")
            .env("SANDLOT_LOG_FORMAT", "json")
            .env(name, value)
            .output()
            .expect("run sandlot serve");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let events: Vec<serde_json::Value> = stderr
            .lines()
            .map(|line| serde_json::from_str::<Strict>(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")).0)
            .collect();
        let got: Vec<(&str, &str)> = events
            .iter()
            .map(|e| (e["level"].as_str().unwrap_or_default(), e["fields"]["message"].as_str().unwrap_or_default()))
            .collect();
        assert_eq!((out.status.code(), got), (Some(2), vec![("ERROR", message.as_str())]), "{name}={value:?}");
    }
}

/// A server whose stderr nobody reads any more (its pipe closed: a supervisor gone, a shell exited) keeps serving:
/// the log lines it cannot write are dropped, never a panic of the thread that logged.
#[test]
fn a_closed_stderr_never_stops_the_server() {
    assert!(nix::unistd::geteuid().is_root(), "these tests start sandboxes and need root");
    let root = common::TempRoot::new();
    let addr = common::free_addr();
    let child = common::serve_command(&root.path().join("data"), addr, 950_000 + std::process::id() % 40_000)
        .env("MCP_API_TOKEN", "tok")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start sandlot serve");
    let mut server = Server { child, addr, root, log: Default::default() };
    let healthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let deadline = Instant::now() + Duration::from_secs(60);
    while http(addr, healthz).is_err() {
        assert!(Instant::now() < deadline, "sandlot serve did not answer /healthz within 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(server.child.stderr.take()); // nobody reads stderr from now on: every line fails to write
    let list = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
    for _ in 0..20 {
        let (head, _) = http(addr, healthz).unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let (head, body) = server.post_mcp("tok", &list, None);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(body.contains("sandbox_run_code"), "{body}");
        let (head, _) = server.post_mcp("wrong", &list, None);
        assert!(head.starts_with("HTTP/1.1 401") || head.starts_with("HTTP/1.1 429"), "{head}");
    }
}
