//! `sandlot serve` as operators see it: `/metrics` on its own listener (`SANDLOT_METRICS_ADDR`), scraped and parsed
//! with a Prometheus text-format parser after real runs, sessions, event streams and refused credentials; `/readyz`
//! ready, then not ready when a runner's interpreter disappears (native) or the Docker engine stops answering; and
//! the metrics listener refusing a DNS-rebinding `Host`. Needs root (sandboxes) and, for the Docker test, the engine
//! and the runner images of scripts/build-runners.sh.

use crate::common;

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

use prometheus_parse::{Sample, Scrape, Value};

use common::{dechunk, eventually, free_addr, serve_command};

const TOKEN: &str = "operations-test-token";

/// A `sandlot serve` with a metrics listener, on free loopback ports over a temporary root; killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    metrics: SocketAddr,
    root: common::TempRoot,
}

impl Server {
    fn start(env: &[(&str, &str)]) -> Server {
        assert!(nix::unistd::geteuid().is_root(), "these tests start sandboxes and need root (scripts/test.sh)");
        let root = common::TempRoot::new();
        let (addr, metrics) = (free_addr(), free_addr());
        let child = serve_command(root.path(), addr, 960_000 + std::process::id() % 30_000)
            .env("SANDLOT_METRICS_ADDR", metrics.to_string())
            .env("MCP_API_TOKEN", TOKEN)
            .env("SANDLOT_LOG", "warn")
            .envs(env.iter().copied())
            .spawn()
            .expect("start sandlot serve");
        let server = Server { child, addr, metrics, root };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(server.get(server.addr, "/healthz").0 == 200 && server.get(server.metrics, "/healthz").0 == 200) {
            assert!(Instant::now() < deadline, "sandlot serve did not answer /healthz on both listeners within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// `GET path` on `addr` with `Host: 127.0.0.1`: (status, body); status 0 when nothing answered.
    fn get(&self, addr: SocketAddr, path: &str) -> (u16, String) {
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        request_at(addr, &request).unwrap_or((0, String::new()))
    }

    /// `/metrics`, parsed.
    fn scrape(&self) -> Metrics {
        let (status, body) = self.get(self.metrics, "/metrics");
        assert_eq!(status, 200, "{body}");
        let scrape = Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("the Prometheus text format");
        Metrics(scrape.samples)
    }

    /// A stateless `tools/call` of `sandbox.run_code`: the structured result.
    fn run(&self, arguments: serde_json::Value) -> serde_json::Value {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "sandbox.run_code", "arguments": arguments }
        });
        let (status, response) = self.post_mcp(&body, &format!("Bearer {TOKEN}"), "");
        assert_eq!(status, 200, "{response}");
        let reply: serde_json::Value = serde_json::from_str(&response).unwrap();
        reply["result"]["structuredContent"].clone()
    }

    /// `POST /mcp` with this `Authorization` (none when empty) and extra header lines: (status, body).
    fn post_mcp(&self, body: &serde_json::Value, authorization: &str, extra: &str) -> (u16, String) {
        let body = body.to_string();
        let auth = if authorization.is_empty() { String::new() } else { format!("Authorization: {authorization}\r\n") };
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}{extra}Content-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        request_at(self.addr, &request).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request on a new connection, read to its end: (status, body, dechunked).
fn request_at(addr: SocketAddr, request: &str) -> std::io::Result<(u16, String)> {
    let (status, head, mut body) = send(addr, request, |stream| {
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        Ok(response)
    })?;
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Sends `request` and reads the response with `read`: (status, head, body).
fn send(
    addr: SocketAddr,
    request: &str,
    read: impl FnOnce(&mut TcpStream) -> std::io::Result<Vec<u8>>,
) -> std::io::Result<(u16, String, Vec<u8>)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    stream.write_all(request.as_bytes())?;
    let mut response = read(&mut stream)?;
    let head_end =
        response.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| std::io::Error::other("no HTTP head"))?;
    let head = String::from_utf8_lossy(&response[..head_end]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_off(head_end + 4);
    Ok((status, head, body))
}

/// The samples of one scrape.
struct Metrics(Vec<Sample>);

impl Metrics {
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Sample> {
        self.0.iter().find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
    }

    /// A counter's, gauge's or untyped sample's value (panics if absent).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        match self.find(name, labels).map(|s| &s.value) {
            Some(Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) => *v,
            other => panic!("{name}{labels:?}: {other:?}"),
        }
    }

    /// A histogram's observation count (its `+Inf` bucket) and its `_count` and `_sum` samples.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> (f64, f64, f64) {
        let Some(Value::Histogram(buckets)) = self.find(name, labels).map(|s| &s.value) else {
            panic!("{name}{labels:?} is not a histogram here");
        };
        let inf = buckets.iter().find(|b| b.less_than.is_infinite()).expect("a +Inf bucket").count;
        (inf, self.value(&format!("{name}_count"), labels), self.value(&format!("{name}_sum"), labels))
    }

    /// Every sample of `name` whose value is not 0, as (labels, value), sorted.
    fn nonzero(&self, name: &str) -> Vec<(String, f64)> {
        let mut found: Vec<(String, f64)> = self
            .0
            .iter()
            .filter(|s| s.metric == name)
            .filter_map(|s| match s.value {
                Value::Counter(v) | Value::Gauge(v) if v != 0.0 => {
                    let mut labels: Vec<String> = ["outcome", "language", "reason", "transport"]
                        .iter()
                        .filter_map(|k| s.labels.get(k).map(|v| format!("{k}={v}")))
                        .collect();
                    labels.sort();
                    Some((labels.join(","), v))
                }
                _ => None,
            })
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found
    }
}

#[test]
fn metrics_count_runs_the_queue_sessions_streams_and_refused_credentials() {
    // One run at a time and no queue: a run arriving while another executes is refused as busy at once.
    let server = Server::start(&[("SANDLOT_MAX_CONCURRENT_RUNS", "1"), ("SANDLOT_MAX_QUEUED", "0")]);
    let before = server.scrape();
    assert_eq!(before.nonzero("sandlot_runs_total"), []);
    assert_eq!(before.value("sandlot_runs_total", &[("outcome", "ok"), ("language", "python")]), 0.0);
    assert_eq!(before.value("sandlot_busy_refusals_total", &[("reason", "queue_full")]), 0.0);
    assert_eq!(before.value("sandlot_backend_errors_total", &[("backend", "native")]), 0.0);
    assert_eq!(before.value("sandlot_build_info", &[("backend", "native")]), 1.0);

    // One ok, one failing, one timed out; a fourth arrives while the third runs and is refused.
    let ok = server.run(serde_json::json!({"conversationId": "m1", "language": "python", "code": "print(1)"}));
    assert_eq!(ok["outcome"], "ok", "{ok}");
    let failed =
        server.run(serde_json::json!({"conversationId": "m2", "language": "python", "code": "raise SystemExit(3)"}));
    assert_eq!(failed["outcome"], "error", "{failed}");
    let slow = std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            server.run(serde_json::json!({
                "conversationId": "m3", "language": "python", "code": "import time\ntime.sleep(60)",
                "timeoutSeconds": 5
            }))
        });
        assert!(
            eventually(Duration::from_secs(20), || server.scrape().value("sandlot_runs_in_flight", &[]) == 1.0),
            "the slow run never showed in sandlot_runs_in_flight"
        );
        let busy = server.run(serde_json::json!({"conversationId": "m4", "language": "bash", "code": "echo hi"}));
        assert_eq!(busy["outcome"], "busy", "{busy}");
        slow.join().unwrap()
    });
    assert_eq!(slow["outcome"], "timeout", "{slow}");

    // Refused credentials: a wrong token and none at all.
    let list = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(server.post_mcp(&list, "Bearer wrong-token", "").0, 401);
    assert_eq!(server.post_mcp(&list, "", "").0, 401);

    // A Streamable HTTP session, counted while open.
    let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "metrics-test", "version": "1"}}});
    let (status, head, _) = send(server.addr, &initialize_request(&initialize), |stream| {
        let mut reader = std::io::BufReader::new(stream);
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut line = Vec::new();
            assert!(reader.read_until(b'\n', &mut line).unwrap() > 0, "the initialize response ended early");
            head.extend_from_slice(&line);
        }
        Ok(head)
    })
    .unwrap();
    assert_eq!(status, 200, "{head}");
    let session = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find_map(|(name, value)| name.eq_ignore_ascii_case("mcp-session-id").then(|| value.trim().to_owned()))
        .expect("an Mcp-Session-Id");
    let sessions =
        |server: &Server| server.scrape().value("sandlot_mcp_sessions_open", &[("transport", "streamable_http")]);
    assert!(eventually(Duration::from_secs(10), || sessions(&server) == 1.0), "the session was not counted");
    let delete = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nMcp-Session-Id: {session}\r\n\
         Connection: close\r\n\r\n"
    );
    let (status, _) = request_at(server.addr, &delete).unwrap();
    assert!(status < 300, "DELETE /mcp: {status}");
    assert!(eventually(Duration::from_secs(10), || sessions(&server) == 0.0), "the closed session is still counted");

    // An event stream, counted while its client holds it.
    let events = format!(
        "GET /mcp/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
    );
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream.write_all(events.as_bytes()).unwrap();
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let streams = |server: &Server| server.scrape().value("sandlot_event_streams_open", &[]);
    assert!(eventually(Duration::from_secs(10), || streams(&server) == 1.0), "the event stream was not counted");
    drop(stream);
    assert!(
        eventually(Duration::from_secs(10), || streams(&server) == 0.0),
        "the closed event stream is still counted"
    );

    let after = server.scrape();
    let expected: Vec<(String, f64)> = [
        ("language=bash,outcome=busy", 1.0),
        ("language=python,outcome=error", 1.0),
        ("language=python,outcome=ok", 1.0),
        ("language=python,outcome=timeout", 1.0),
    ]
    .map(|(labels, n)| (labels.to_owned(), n))
    .to_vec();
    assert_eq!(after.nonzero("sandlot_runs_total"), expected);
    assert_eq!(after.nonzero("sandlot_busy_refusals_total"), [("reason=queue_full".to_owned(), 1.0)]);
    assert_eq!(
        after.nonzero("sandlot_auth_failures_total"),
        [("reason=missing".to_owned(), 1.0), ("reason=rejected".to_owned(), 1.0)]
    );
    assert_eq!(after.nonzero("sandlot_backend_errors_total"), []);
    // Three python runs started (the busy one never did); the timed-out one alone took 5 s. (Its deadline leaves a
    // loaded machine 5 s between seeing it in flight and sending the run that must find it there.)
    let (observed, count, sum) = after.histogram("sandlot_run_duration_seconds", &[("language", "python")]);
    assert_eq!((observed, count), (3.0, 3.0));
    assert!((5.0..60.0).contains(&sum), "run durations add up to {sum} s");
    assert!(after.find("sandlot_run_duration_seconds", &[("language", "bash")]).is_none());
    let (observed, count, sum) = after.histogram("sandlot_queue_wait_seconds", &[]);
    assert_eq!((observed, count), (3.0, 3.0));
    assert!(sum < 5.0, "the admitted runs waited {sum} s");
    assert_eq!(after.value("sandlot_queue_depth", &[]), 0.0);
    assert_eq!(after.value("sandlot_runs_in_flight", &[]), 0.0);
    assert_eq!(after.nonzero("sandlot_mcp_sessions_open"), []);
    // No run asked for a live sandbox: both gauges are there, at zero (tests/e2e's test_sessions.py moves them).
    assert_eq!(after.value("sandlot_live_sandboxes", &[]), 0.0);
    assert_eq!(after.value("sandlot_live_sandbox_memory_bytes", &[]), 0.0);
}

fn initialize_request(body: &serde_json::Value) -> String {
    let body = body.to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Attack: a web page that rebinds its own name to 127.0.0.1 reads the metrics listener with the victim's
/// browser. Its requests carry the page's name as `Host`, which the listener refuses; nor are the metrics served on
/// the MCP port, where only the token guards.
#[test]
fn the_metrics_listener_refuses_a_rebound_host_and_the_mcp_port_has_no_metrics() {
    let server = Server::start(&[]);
    let rebound = "GET /metrics HTTP/1.1\r\nHost: attacker.example.com:9464\r\nConnection: close\r\n\r\n";
    let (status, body) = request_at(server.metrics, rebound).unwrap();
    assert_eq!(status, 421, "{body}");
    assert!(!body.contains("sandlot_runs_total"), "{body}");
    // By IP literal and by localhost the scraper is served.
    let by_name = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    assert_eq!(request_at(server.metrics, by_name).unwrap().0, 200);
    assert_eq!(server.get(server.metrics, "/nothing-here").0, 404);
    let (status, body) = server.get(server.addr, "/metrics");
    assert_ne!(status, 200, "{body}");
    assert!(!body.contains("sandlot_runs_total"), "{body}");
}

/// `/readyz` says which checks pass, on both listeners and without a credential: 200 with the jail and runners ok,
/// still 200 once the zygote is killed (the readiness check starts another), then 503 naming the runner check once an interpreter the server
/// found at start is gone; `/healthz` stays 200.
/// The body names no path.
#[test]
fn readyz_is_ready_then_names_the_runner_whose_interpreter_is_gone() {
    let interpreters = common::TempRoot::new();
    let python = interpreters.path().join("python3");
    std::os::unix::fs::symlink("/usr/bin/python3", &python).unwrap();
    let server = Server::start(&[("SANDLOT_PYTHON", python.to_str().unwrap())]);
    for listener in [server.addr, server.metrics] {
        let (status, body) = server.get(listener, "/readyz");
        assert_eq!(status, 200, "{body}");
        let readiness: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(readiness["ready"], true);
        assert_eq!(readiness["backend"], "native");
        let checks: Vec<(&str, bool)> = readiness["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["ok"].as_bool().unwrap()))
            .collect();
        // The Python template's line is informational: ok while it starts too.
        assert_eq!(checks, [("jail", true), ("runners", true), ("python-template", true)], "{body}");
        assert_eq!(readiness["checks"][0]["detail"], "the zygote is running");
    }
    // The zygote dies: the next readiness check starts another, so the server is still ready.
    let zygote = zygote_of(server.child.id()).expect("the server's zygote");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(zygote), nix::sys::signal::Signal::SIGKILL).unwrap();
    let mut last = (0, String::new());
    let replaced = eventually(Duration::from_secs(15), || {
        last = server.get(server.addr, "/readyz");
        zygote_of(server.child.id()).is_some_and(|new| new != zygote)
    });
    assert!(replaced && last.0 == 200, "after the zygote died: {} {}", last.0, last.1);
    let readiness: serde_json::Value = serde_json::from_str(&last.1).unwrap();
    assert_eq!(readiness["checks"][0]["ok"], true, "{}", last.1);
    std::fs::remove_file(&python).unwrap();
    let gone = eventually(Duration::from_secs(15), || {
        last = server.get(server.addr, "/readyz");
        last.0 == 503
    });
    assert!(gone, "/readyz stayed {} after python's interpreter was removed: {}", last.0, last.1);
    let readiness: serde_json::Value = serde_json::from_str(&last.1).unwrap();
    assert_eq!(readiness["ready"], false);
    let runners = readiness["checks"].as_array().unwrap().iter().find(|c| c["name"] == "runners").unwrap();
    assert_eq!(runners["ok"], false, "{}", last.1);
    assert!(runners["detail"].as_str().unwrap().contains("python"), "{}", last.1);
    for secret in [interpreters.path().to_str().unwrap(), server.root.path().to_str().unwrap(), TOKEN, "/usr/"] {
        assert!(!last.1.contains(secret), "/readyz shows {secret:?}: {}", last.1);
    }
    assert_eq!(server.get(server.metrics, "/readyz").0, 503);
    assert_eq!(server.get(server.addr, "/healthz").0, 200, "liveness does not depend on readiness");
}

/// The pid of the jail zygote among `server`'s children.
fn zygote_of(server: u32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        let parent: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let zygote = cmdline.split(|b| *b == 0).nth(1) == Some(b"__jail-zygote".as_slice());
        // The inits it clones share its command line; only the zygote reads a socket.
        let socket =
            std::fs::read_link(entry.path().join("fd/0")).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
        (parent == server && zygote && socket).then_some(pid)
    })
}

/// A stand-in for the Docker engine's socket: forwards every connection to `/var/run/docker.sock` until stopped,
/// then refuses new ones (its socket file is gone) and cuts the open ones, as an engine that stopped would.
struct EngineProxy {
    socket: std::path::PathBuf,
    connections: std::sync::Arc<std::sync::Mutex<Vec<std::os::unix::net::UnixStream>>>,
    _dir: common::TempRoot,
}

impl EngineProxy {
    fn start() -> EngineProxy {
        use std::os::unix::net::{UnixListener, UnixStream};
        let dir = common::TempRoot::new();
        let socket = dir.path().join("docker.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::<UnixStream>::new()));
        let open = connections.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(engine) = UnixStream::connect("/var/run/docker.sock") else { return };
                let mut list = open.lock().unwrap();
                list.extend([client.try_clone().unwrap(), engine.try_clone().unwrap()]);
                for (mut from, mut to) in [(client.try_clone().unwrap(), engine.try_clone().unwrap()), (engine, client)]
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        EngineProxy { socket, connections, _dir: dir }
    }

    fn docker_host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The engine "stops": nothing can connect any more, and every open connection is cut.
    fn stop(&self) {
        std::fs::remove_file(&self.socket).unwrap();
        for connection in self.connections.lock().unwrap().drain(..) {
            let _ = connection.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The Docker backend's readiness: ready while the engine answers and the four runner images are there, 503 naming
/// the engine check once the engine stops answering (its socket goes away), with no socket path in the body.
#[test]
fn readyz_with_docker_names_the_engine_once_it_stops_answering() {
    let proxy = EngineProxy::start();
    let docker_host = proxy.docker_host();
    let server = Server::start(&[("SANDLOT_BACKEND", "docker"), ("DOCKER_HOST", &docker_host)]);
    let (status, body) = server.get(server.addr, "/readyz");
    assert_eq!(status, 200, "{body}");
    let readiness: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(readiness["backend"], "docker");
    let checks: Vec<(&str, bool, &str)> = readiness["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["ok"].as_bool().unwrap(), c["detail"].as_str().unwrap()))
        .collect();
    assert_eq!(checks, [("engine", true, "the Docker engine answers"), ("runners", true, "4 languages")], "{body}");
    proxy.stop();
    let mut last = (0, String::new());
    let stopped = eventually(Duration::from_secs(15), || {
        last = server.get(server.metrics, "/readyz");
        last.0 == 503
    });
    assert!(stopped, "/readyz stayed {} after the engine stopped: {}", last.0, last.1);
    let readiness: serde_json::Value = serde_json::from_str(&last.1).unwrap();
    let engine = readiness["checks"].as_array().unwrap().iter().find(|c| c["name"] == "engine").unwrap();
    assert_eq!(engine["ok"], false, "{}", last.1);
    assert!(!last.1.contains(proxy.socket.to_str().unwrap()) && !last.1.contains("docker.sock"), "{}", last.1);
    assert_eq!(server.get(server.addr, "/healthz").0, 200);
}
