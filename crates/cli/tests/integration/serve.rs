//! `sandlot serve` as a real process, attacked over the network and from inside its sandboxes: what one run can
//! make the server build; what idle connections, requests without a credential that never send their body, and
//! slow bodies can take from it; and a stream outliving its JWT. Needs root, like every test that starts sandboxes.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{dechunk, request_at};

const TOKEN: &str = "serve-test-token";

/// A `sandlot serve` on a free loopback port over a temporary root; killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    _root: common::TempRoot,
}

impl Server {
    /// Starts `program args... sandlot serve` (a wrapper such as `prlimit` may come first) with `env`, and waits
    /// until `/healthz` answers.
    fn start(wrapper: &[&str], env: &[(&str, &str)]) -> Server {
        assert!(is_root(), "these tests start sandboxes and need root (run scripts/test.sh as root)");
        let root = common::TempRoot::new();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let binary = env!("CARGO_BIN_EXE_sandlot");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .arg("serve")
            .env("SANDBOX_ROOT", root.path())
            .env("MCP_HTTP_ADDR", addr.to_string())
            .env("SANDLOT_LOG", "warn")
            .env("SANDLOT_SANDBOX_UID", (930_000 + std::process::id() % 60_000).to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // The test token, unless the test asks for JWTs only (which refuse a static token beside them).
        if !env.iter().any(|(name, _)| *name == "MCP_AUTH_ENABLED") {
            command.env("MCP_API_TOKEN", TOKEN);
        }
        let child = command.spawn().expect("start sandlot serve");
        let server = Server { child, addr, _root: root };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if server.try_get("/healthz").is_ok_and(|(status, _)| status == 200) {
                return server;
            }
            assert!(Instant::now() < deadline, "sandlot serve did not answer /healthz within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn request(&self, request: &str, timeout: Duration) -> std::io::Result<(u16, Vec<u8>)> {
        request_at(self.addr, request, timeout)
    }

    fn try_get(&self, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        self.request(&request, Duration::from_secs(5))
    }

    fn run_code(&self, arguments: serde_json::Value, timeout: Duration) -> std::io::Result<(u16, Vec<u8>)> {
        run_code_at(self.addr, arguments, timeout)
    }

    /// The server's peak resident memory (VmHWM), in KiB.
    fn peak_rss_kib(&self) -> u64 {
        self.memory_kib("VmHWM:")
    }

    /// The server's resident memory now (VmRSS), in KiB.
    fn rss_kib(&self) -> u64 {
        self.memory_kib("VmRSS:")
    }

    /// A figure of `/proc/<pid>/status`, in KiB.
    fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// `/healthz` answers, and so does an authenticated `tools/call` (a stateless `POST /mcp`) that runs code.
    fn still_serves(&self, after: &str) {
        let (status, body) = self.try_get("/healthz").unwrap_or_else(|e| panic!("/healthz after {after}: {e}"));
        assert_eq!((status, body.as_slice()), (200, b"ok\n".as_slice()), "/healthz after {after}");
        let arguments = serde_json::json!({ "conversationId": "still", "language": "bash", "code": "echo serving" });
        let (status, body) = self
            .run_code(arguments, Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("tools/call after {after}: {e}"));
        assert_eq!(status, 200, "tools/call after {after}: {}", String::from_utf8_lossy(&body));
        let result = result_of(&body);
        assert_eq!(
            (result["success"].as_bool(), result["stdout"].as_str()),
            (Some(true), Some("serving\n")),
            "{after}"
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A stateless `tools/call` of `sandbox.run_code` on `addr`: (status, the response body as sent).
fn run_code_at(addr: SocketAddr, arguments: serde_json::Value, timeout: Duration) -> std::io::Result<(u16, Vec<u8>)> {
    {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "sandbox.run_code", "arguments": arguments }
        })
        .to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        request_at(addr, &request, timeout)
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The result of a `tools/call` response body: its `structuredContent`, checked against its text block (a header
/// line, then the same `output`).
fn result_of(body: &[u8]) -> serde_json::Value {
    let response: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&body[..body.len().min(300)])));
    let result = response["result"].clone();
    let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text block: {response}"));
    let output = result["structuredContent"]["output"].as_str().unwrap_or_default();
    let (header, rest) = text.split_once('\n').unwrap_or((text, ""));
    assert!(header.starts_with("outcome: "), "{text}");
    assert!(rest == output || (output.is_empty() && rest == "(no output)"), "{text}");
    result["structuredContent"].clone()
}

/// Attack: one run makes the server build a huge result. 128 nested directories with 250-byte names and 1,000
/// files with long names at the bottom made a 248 MiB result (each path is ~32 KiB, listed with its URL, twice),
/// and 1 MiB of control bytes on each stream became 52 MiB (6 bytes each as JSON, in stdout, stderr and output,
/// then escaped again in the text block). The result stays under 1 MiB as sent (the output is shown within the
/// result budget, head and tail; the file list is bounded), says what it cut, and the server's peak resident memory
/// stays under 160 MiB.
#[test]
fn one_run_cannot_make_the_server_build_a_huge_result() {
    let server = Server::start(&[], &[]);
    let code = r#"
        set -e
        name=$(printf 'd%.0s' $(seq 250))
        for i in $(seq 128); do mkdir "$name"; cd "$name"; done
        for i in $(seq 1000); do : > "${name:0:240}$i"; done
        head -c 1048576 /dev/zero | tr '\0' '\1'
        head -c 1048576 /dev/zero | tr '\0' '\2' >&2
    "#;
    let arguments =
        serde_json::json!({ "conversationId": "huge", "language": "bash", "code": code, "timeoutSeconds": 120 });
    let (status, body) = server.run_code(arguments, Duration::from_secs(300)).expect("tools/call");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body[..body.len().min(300)]));
    let result = result_of(&body);
    let peak_mib = server.peak_rss_kib() / 1024;
    eprintln!("result: {} bytes; server peak RSS: {peak_mib} MiB", body.len());
    assert!(body.len() < 1024 * 1024, "the result is {} bytes", body.len());
    assert!(peak_mib < 160, "the server's peak RSS is {peak_mib} MiB");
    assert_eq!((result["truncated"].as_bool(), result["filesTruncated"].as_bool()), (Some(true), Some(true)));
    let output = result["output"].as_str().unwrap();
    assert!(output.contains("file list cut"), "{}", &output[output.len().saturating_sub(600)..]);
    assert!(output.contains("bytes cut here"), "{}", &output[output.len().saturating_sub(600)..]);
    // A second run of the conversation, which lists the same tree, is bounded too.
    let again = serde_json::json!({ "conversationId": "huge", "language": "bash", "code": "echo again" });
    let (status, body) = server.run_code(again, Duration::from_secs(120)).expect("second tools/call");
    assert_eq!(status, 200);
    assert!(body.len() < 1024 * 1024, "the second result is {} bytes", body.len());
    assert_eq!(result_of(&body)["stdout"], "again\n");
}

/// A run prints 3.2 MB and then its answer, under the default `SANDLOT_MAX_OUTPUT_BYTES` (1 MiB a stream). The
/// model's result ends with the answer, and so does the run's kept output in the history (`GET /v1/runs/{id}/output`),
/// which is the first and last 512 KiB with the capture's cut marker between them. Before the ring the capture
/// kept the first 1 MiB only, and `LAST-LINE` reached neither.
#[test]
fn the_last_line_of_a_long_output_reaches_the_model_over_mcp() {
    let server = Server::start(&[], &[]);
    let code = "for i in range(50000):\n    print(f'line {i:06d} ' + 'x' * 51)\nprint('LAST-LINE')";
    let arguments = serde_json::json!({ "conversationId": "long", "language": "python", "code": code });
    let (status, body) = server.run_code(arguments, Duration::from_secs(120)).expect("tools/call");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body[..body.len().min(300)]));
    let result = result_of(&body);
    assert_eq!((result["success"].as_bool(), result["truncated"].as_bool()), (Some(true), Some(true)));
    let (output, stdout) = (result["output"].as_str().unwrap(), result["stdout"].as_str().unwrap());
    assert!(stdout.ends_with("\nLAST-LINE\n"), "{}", &stdout[stdout.len() - 200..]);
    assert!(output.contains("\nLAST-LINE\n"), "{}", &output[output.len() - 200..]);

    let printed = (0..50_000).map(|i| format!("line {i:06} {}\n", "x".repeat(51))).collect::<String>() + "LAST-LINE\n";
    let half = 512 * 1024;
    let cut = sandlot_core::cut_marker((printed.len() - 2 * half) as u64, half, half);
    let kept = format!("{}{cut}{}", &printed[..half], &printed[printed.len() - half..]);
    let run_id = result["runId"].as_str().unwrap();
    let request = format!(
        "GET /v1/runs/{run_id}/output HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
         Connection: close\r\n\r\n"
    );
    let (status, body) = server.request(&request, Duration::from_secs(30)).expect("GET output");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body[..body.len().min(300)]));
    let history: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(history["stdout"] == kept.as_str(), "the history kept {:?}", history["stdout"].as_str().map(str::len));
    assert_eq!(history["stdoutTruncated"], true);
}

/// Attack: connections that never send a byte. Under systemd's default soft limit of 1024 descriptors, 1,100 of
/// them took every descriptor: `/healthz` and every run timed out. The server now closes the oldest idle
/// connection when it reaches its cap (derived from the limit, minus a reserve for runs), so with 1,100 idle
/// connections open, `/healthz` and an authenticated `tools/call` still succeed.
#[test]
fn idle_connections_cannot_keep_a_real_request_out() {
    // The server's hard limit is 1024 too, so raising its soft limit cannot help: only the cap and eviction can.
    let server = Server::start(&["prlimit", "--nofile=1024:1024", "--"], &[]);
    let mut idle = Vec::new();
    for _ in 0..1100 {
        idle.push(TcpStream::connect(server.addr).expect("connect an idle socket"));
    }
    std::thread::sleep(Duration::from_secs(2)); // let the server accept them all
    server.still_serves("1,100 idle connections");
    // The oldest idle connections were closed to make room.
    let closed = idle.iter().filter(|s| is_closed(s)).count();
    assert!(closed >= 1100 + 2 - 1024, "only {closed} idle connections were closed");
    drop(idle);
}

/// A connection with no request in flight (never sent one, or sends its headers a byte at a time) is closed
/// after the idle timeout; one waiting for a run's result is not.
#[test]
fn idle_and_dribbling_connections_are_closed_after_the_idle_timeout() {
    let server = Server::start(&[], &[("SANDLOT_CONNECTION_IDLE_SECS", "2")]);
    let started = Instant::now();
    let silent = TcpStream::connect(server.addr).unwrap();
    let mut dribbling = TcpStream::connect(server.addr).unwrap();
    dribbling.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    let addr = server.addr;
    let sleeper = std::thread::spawn(move || {
        let arguments =
            serde_json::json!({ "conversationId": "slow", "language": "bash", "code": "sleep 6; echo done" });
        run_code_at(addr, arguments, Duration::from_secs(60))
    });
    for round in 1..=8 {
        std::thread::sleep(Duration::from_millis(500));
        // Half the timeout in, neither is closed yet (checked only if this thread was not delayed past 1.5 s).
        if round == 2 && started.elapsed() < Duration::from_millis(1500) {
            assert!(!is_closed(&silent) && !is_closed(&dribbling), "closed before the idle timeout");
        }
        let _ = dribbling.write_all(b"X");
    }
    for (name, mut stream) in [("silent", &silent), ("dribbling", &dribbling)] {
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buffer = [0u8; 256];
        let read = stream.read(&mut buffer);
        assert!(
            matches!(read, Ok(0)) || matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
            "{name}: {read:?} after {:?}",
            started.elapsed()
        );
    }
    let (status, body) = sleeper.join().unwrap().expect("the slow call is answered");
    assert_eq!((status, result_of(&body)["stdout"].as_str()), (200, Some("done\n")));
}

/// Whether the server closed `stream` (end of file or reset), without waiting long.
fn is_closed(mut stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// A connection that sent `head` and is kept open by the test.
fn connect_and_send(addr: SocketAddr, head: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.write_all(head.as_bytes()).expect("send the head");
    stream
}

/// What the server did with a connection: its whole answer (empty when it closed the connection without one), or
/// an error when the connection was still open at `deadline`.
fn ending(mut stream: &TcpStream, deadline: Instant) -> Result<Vec<u8>, String> {
    stream.set_nonblocking(false).unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return Ok(answer),
            Ok(read) => answer.extend_from_slice(&buffer[..read]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(answer),
            Err(e) => return Err(format!("still open ({e}) after {} bytes", answer.len())),
        }
    }
}

/// Attack: requests without a credential that never send their body. Under a cap of 64 connections, 70 NDJSON
/// streams to open-sandbox that never sent a byte took every connection (open-sandbox read the body before it
/// looked at the credential, and the tracker counted each request in flight from its headers): `/healthz` and an
/// authenticated `tools/call` were refused, and the streams held on forever. Each is now answered from its headers
/// (HTTP 200, one -32001 line) and its connection closed; the server's memory does not grow by 16 MiB.
#[test]
fn unauthenticated_streams_that_never_send_cannot_take_every_connection() {
    let server = Server::start(&[], &[("SANDLOT_MAX_CONNECTIONS", "64")]);
    server.still_serves("start"); // the first run's allocations are not the attack's
    let before = server.rss_kib();
    let head = "POST /p/open-sandbox/mcp/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-ndjson\r\n\
                Transfer-Encoding: chunked\r\n\r\n";
    let streams: Vec<TcpStream> = (0..70).map(|_| connect_and_send(server.addr, head)).collect();
    // Answered at once; the bound is for a loaded machine, and below the idle timeout (30 s), which would close
    // an unanswered one too. A stream in flight forever never ends: the test fails.
    let deadline = Instant::now() + Duration::from_secs(20);
    for (index, stream) in streams.iter().enumerate() {
        let answer = ending(stream, deadline).unwrap_or_else(|e| panic!("stream {index}: {e}"));
        if answer.is_empty() {
            continue; // closed unanswered: the oldest idle connection, evicted at the cap
        }
        let text = String::from_utf8_lossy(&answer);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("stream {index}: {text}"));
        let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
        let body = if chunked { dechunk(body.as_bytes()) } else { body.as_bytes().to_vec() };
        let lines: Vec<serde_json::Value> =
            String::from_utf8(body).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        let refusal = lines.iter().map(|l| (l["id"].clone(), l["error"]["code"].clone())).collect::<Vec<_>>();
        assert!(head.starts_with("HTTP/1.1 200 "), "stream {index}: {head}");
        assert!(head.to_ascii_lowercase().contains("connection: close"), "stream {index}: {head}");
        assert_eq!(refusal, vec![(serde_json::Value::Null, serde_json::json!(-32001))], "stream {index}: {text}");
    }
    server.still_serves("70 unauthenticated streams");
    let grown_mib = server.rss_kib().saturating_sub(before) / 1024;
    assert!(grown_mib < 16, "the server's memory grew by {grown_mib} MiB");
    drop(streams);
}

/// Every kind of route that needs a credential (or a signature) and takes a body: (method, path).
const BODY_ROUTES: [(&str, &str); 10] = [
    ("POST", "/mcp"),
    ("POST", "/message?sessionId=x"),
    ("POST", "/v1/conversations/c1/uploads"),
    ("POST", "/p/codegen/message?sessionId=x"),
    ("POST", "/p/baponi/mcp"),
    ("POST", "/p/baponi/v1/sandbox/execute"),
    ("POST", "/p/open-sandbox/mcp"),
    ("POST", "/p/open-sandbox/mcp/stream"),
    ("PUT", "/files/c1/a.txt?exp=9999999999&sig=00&op=put"),
    ("PUT", "/p/baponi/v1/volumes/v/a.txt?exp=9999999999&sig=00"),
];

/// Sends a 1 MiB body without a credential, all but its last byte, in 64 KiB pieces a few milliseconds apart, and
/// keeps the connection (the server may close it at any point: the rest is then not sent).
fn slow_body(addr: SocketAddr, method: &str, path: &str) -> TcpStream {
    const SIZE: usize = 1024 * 1024;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {SIZE}\r\n\r\n"
    );
    let mut stream = connect_and_send(addr, &head);
    stream.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let piece = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent < SIZE - 1 {
        let size = piece.len().min(SIZE - 1 - sent);
        if stream.write_all(&piece[..size]).is_err() {
            break;
        }
        sent += size;
        std::thread::sleep(Duration::from_millis(5));
    }
    stream
}

/// Attack: slow 1 MiB bodies without a credential, 70 at a time to each kind of route that needs a credential (or
/// a signature), each holding back its last byte. open-sandbox read them whole before looking at the credential:
/// 64 MiB held, every connection in flight past the idle timeout, `/healthz` refused. Every route now answers from
/// the headers and never reads the body: the server still serves, and its memory does not grow by 16 MiB.
#[test]
fn slow_bodies_without_a_credential_are_never_read() {
    let server = Server::start(&[], &[("SANDLOT_MAX_CONNECTIONS", "64")]);
    server.still_serves("start");
    let before = server.rss_kib();
    let mut held = Vec::new();
    for (method, path) in BODY_ROUTES {
        let addr = server.addr;
        let senders: Vec<_> = (0..70).map(|_| std::thread::spawn(move || slow_body(addr, method, path))).collect();
        held.extend(senders.into_iter().map(|sender| sender.join().unwrap()));
        let (status, _) = server.try_get("/healthz").unwrap_or_else(|e| panic!("/healthz after {method} {path}: {e}"));
        assert_eq!(status, 200, "/healthz after {method} {path}");
    }
    server.still_serves("700 slow bodies");
    let grown_mib = server.rss_kib().saturating_sub(before) / 1024;
    assert!(grown_mib < 16, "the server's memory grew by {grown_mib} MiB");
    drop(held);
}

const JWT_SECRET: &str = "serve-test-jwt-secret";

/// A JWT of subject `agent`, signed with [`JWT_SECRET`], expiring at `exp` (Unix seconds).
fn jwt(exp: u64) -> String {
    let claims = serde_json::json!({ "sub": "agent", "exp": exp });
    let key = jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes());
    jsonwebtoken::encode(&jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256), &claims, &key).unwrap()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// Reads a streamed (chunked) response to its last chunk, or to the connection's end: (status, body). An error
/// when it has not ended by `deadline`.
fn streamed_response(stream: &mut TcpStream, deadline: Instant) -> Result<(u16, Vec<u8>), String> {
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    let ended = |response: &[u8]| {
        let head_end = response.windows(4).position(|w| w == b"\r\n\r\n");
        head_end.is_some_and(|end| response[end + 4..].ends_with(b"0\r\n\r\n"))
    };
    while !ended(&response) {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => response.extend_from_slice(&buffer[..read]),
            Err(e) => return Err(format!("not ended ({e}): {}", String::from_utf8_lossy(&response))),
        }
    }
    let head_end = response.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no head")?;
    let head = String::from_utf8_lossy(&response[..head_end]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, dechunk(&response[head_end + 4..])))
}

/// Attack: a stream outlives its credential. A JWT that expires in 3 s opens `/mcp/events` and an open-sandbox
/// NDJSON stream (whose request body stays open); both went on for as long as the client kept them. Each now ends
/// at the JWT's `exp` (the credential check's 30 s of leeway decide only whether a request is let in).
#[test]
fn a_stream_opened_with_a_jwt_ends_when_the_jwt_expires() {
    let server = Server::start(&[], &[("MCP_AUTH_ENABLED", "true"), ("MCP_AUTH_JWT_SECRET", JWT_SECRET)]);
    let exp = unix_now() + 3;
    let token = jwt(exp);
    let mut events = connect_and_send(
        server.addr,
        &format!(
            "GET /mcp/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
             Accept: text/event-stream\r\n\r\n"
        ),
    );
    let ping = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
    let mut ndjson = connect_and_send(
        server.addr,
        &format!(
            "POST /p/open-sandbox/mcp/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{ping}\r\n",
            ping.len()
        ),
    );
    // Both end at exp, 3 s away; the bound is for a loaded machine (a stream that outlives its JWT never ends).
    let deadline = Instant::now() + Duration::from_secs(60);
    let events = streamed_response(&mut events, deadline).expect("/mcp/events");
    let ndjson = streamed_response(&mut ndjson, deadline).expect("the NDJSON stream");
    assert!(unix_now() >= exp, "a stream ended before the JWT's exp");
    let answers: Vec<serde_json::Value> =
        String::from_utf8(ndjson.1).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(
        ((events.0, events.1), (ndjson.0, answers)),
        ((200, Vec::new()), (200, vec![serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {}})]))
    );
}
