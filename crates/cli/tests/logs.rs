//! `sandlot serve`'s logs as a real process writes them to a file (not a terminal): in JSON mode every line is one
//! JSON object with no duplicate key and no Rust debug text, the start is a structured event, and a request's id
//! (also in the response's `x-request-id`) is on the request's line and on the lines of the run it made; in text
//! mode there is no colour code. Needs root, like every test that starts sandboxes.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

/// A `sandlot serve` whose stderr goes to a file; stopped with SIGTERM by [`Server::stop`].
struct Server {
    child: Child,
    addr: SocketAddr,
    root: tempfile::TempDir,
    log: std::path::PathBuf,
}

impl Server {
    /// Starts with `env` (and without `MCP_API_TOKEN` unless `env` sets it) and waits for `/healthz`.
    fn start(env: &[(&str, &str)]) -> Server {
        assert!(nix::unistd::geteuid().is_root(), "these tests start sandboxes and need root");
        let root = tempfile::tempdir().unwrap();
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
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "sandbox_run_code", "arguments": arguments }
        })
        .to_string();
        let id = request_id.map(|id| format!("X-Request-Id: {id}\r\n")).unwrap_or_default();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n{id}\
             Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        http(self.addr, &request).expect("tools/call")
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
