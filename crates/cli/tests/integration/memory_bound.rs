//! The real `sandlot serve` started inside a fresh memory cgroup of 1 GiB without swap
//! (`common::memory_cgroup`), attacked over HTTP with the default configuration through the profiles whose tools run
//! in the server (codegen-sandbox's legacy SSE at `/p/codegen`, open-sandbox's `/p/open-sandbox/mcp`), over a
//! workspace the test fills as a sandbox would: a replace-all into a huge string, reads and searches without end, a
//! sparse file read, hard-linked ignore files of 100,000 patterns, regex bombs at once, and thousands of hard links
//! under a hundred nested ignore files. Afterwards the server still answers and the kernel killed nothing in its
//! group (`oom_kill` 0). Other attacks on the server's memory belong here too: add a test that starts its own
//! [`Server`]. Needs root.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::memory_cgroup::MemoryCgroup;
use serde_json::{Value, json};

const TOKEN: &str = "memory-bound-token";
/// The server's memory, all of it: a fraction of what each attack took before its bound.
const LIMIT: u64 = 1 << 30;

/// `sandlot serve` inside its own memory cgroup, on a free port, over a root in memory; killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    root: common::TempRoot,
    cgroup: MemoryCgroup,
}

impl Server {
    /// Over a root in memory, so the test makes its trees quickly; pages the test writes are charged to the test,
    /// not the server.
    fn start(name: &str) -> Server {
        Server::start_in(name, "/dev/shm")
    }

    /// Over a root in `parent`: on disk for attacks whose bytes the server writes (tmpfs pages the server writes
    /// would be charged to its group, as memory).
    fn start_in(name: &str, parent: &str) -> Server {
        let cgroup = MemoryCgroup::new(name, LIMIT);
        let root = common::TempRoot::new_in(parent);
        let addr = common::free_addr();
        let child = cgroup
            .command(env!("CARGO_BIN_EXE_sandlot"))
            .arg("serve")
            .env("SANDBOX_ROOT", root.path())
            .env("MCP_HTTP_ADDR", addr.to_string())
            .env("MCP_API_TOKEN", TOKEN)
            .env("SANDLOT_LOG", "warn")
            .env("SANDLOT_SANDBOX_UID", (940_000 + std::process::id() % 50_000).to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start sandlot serve");
        let server = Server { child, addr, root, cgroup };
        let ready = common::eventually(Duration::from_secs(60), || server.healthz());
        assert!(ready, "sandlot serve did not answer /healthz within 60 s");
        server
    }

    fn healthz(&self) -> bool {
        let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        common::request_at(self.addr, request, Duration::from_secs(5)).is_ok_and(|(status, _)| status == 200)
    }

    /// A JSON-RPC request to open-sandbox: the answer.
    fn open_sandbox(&self, id: u64, name: &str, arguments: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
        let (status, body) = post(self.addr, "/p/open-sandbox/mcp", &body.to_string()).unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body[..body.len().min(300)]));
        serde_json::from_slice(&body).unwrap()
    }

    /// The files directory of the one workspace whose name starts with `prefix`.
    fn workspace(&self, prefix: &str) -> PathBuf {
        let found: Vec<PathBuf> = std::fs::read_dir(self.root.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        found[0].join("files")
    }

    /// The server answers, and its group saw no OOM kill.
    fn survived(&mut self) {
        assert_eq!(self.child.try_wait().unwrap(), None, "the server exited");
        assert!(self.healthz(), "/healthz");
        assert_eq!(self.cgroup.oom_kills(), 0, "OOM kills in the server's group");
        eprintln!("the server's group held {} MiB at most", self.cgroup.peak_bytes() >> 20);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `POST path` of a JSON `body` with the test's token.
fn post(addr: SocketAddr, path: &str, body: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Accept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    common::request_at(addr, &request, Duration::from_secs(120))
}

/// `PUT target` (a signed upload URL's path and query) of `size` bytes of `x`, sent in 1 MiB writes: the status.
fn put(addr: SocketAddr, target: &str, size: usize) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let head =
        format!("PUT {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes())?;
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0;
    while sent < size {
        let n = chunk.len().min(size - sent);
        // A server that answered early (a refusal) may close before the body is whole: its answer is what counts.
        if stream.write_all(&chunk[..n]).is_err() {
            break;
        }
        sent += n;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(text.into_owned()))
}

/// A codegen-sandbox session over the legacy SSE transport: requests POSTed to its endpoint, answers read from the
/// event stream (HTTP/1.1 chunks decoded as they come).
struct Codegen {
    addr: SocketAddr,
    stream: TcpStream,
    raw: Vec<u8>,
    events: Vec<u8>,
    endpoint: String,
}

impl Codegen {
    fn open(server: &Server) -> Codegen {
        let mut stream = TcpStream::connect(server.addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let request = format!(
            "GET /p/codegen/sse HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
             Accept: text/event-stream\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut session =
            Codegen { addr: server.addr, stream, raw: Vec::new(), events: Vec::new(), endpoint: String::new() };
        while !session.raw.windows(4).any(|w| w == b"\r\n\r\n") {
            session.fill();
        }
        let head_end = session.raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&session.raw[..head_end]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200") && head.contains("transfer-encoding: chunked"), "{head}");
        session.raw.drain(..head_end + 4);
        let (event, data) = session.next_event();
        assert_eq!(event, "endpoint");
        session.endpoint = data;
        let init =
            json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
        session.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}));
        assert_eq!(session.answers(&[0])[0]["result"]["protocolVersion"], "2024-11-05");
        session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    }

    fn fill(&mut self) {
        let mut buffer = [0u8; 64 * 1024];
        let read = self.stream.read(&mut buffer).expect("the event stream is open");
        assert!(read > 0, "the event stream ended");
        self.raw.extend_from_slice(&buffer[..read]);
    }

    /// The next event: its name and data.
    fn next_event(&mut self) -> (String, String) {
        loop {
            if let Some(end) = self.events.windows(2).position(|w| w == b"\n\n") {
                let frame: Vec<u8> = self.events.drain(..end + 2).collect();
                let frame = String::from_utf8_lossy(&frame).into_owned();
                let mut event = String::new();
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(name) = line.strip_prefix("event:") {
                        event = name.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.strip_prefix(' ').unwrap_or(value));
                    }
                }
                if !data.is_empty() {
                    return (event, data);
                }
                continue;
            }
            // One whole chunk decoded, or more bytes read.
            match self.raw.windows(2).position(|w| w == b"\r\n") {
                Some(line_end) => {
                    let size =
                        usize::from_str_radix(String::from_utf8_lossy(&self.raw[..line_end]).trim(), 16).unwrap();
                    if self.raw.len() >= line_end + 2 + size + 2 {
                        let chunk: Vec<u8> = self.raw.drain(..line_end + 2 + size + 2).collect();
                        self.events.extend_from_slice(&chunk[line_end + 2..line_end + 2 + size]);
                        self.events = String::from_utf8_lossy(&self.events).replace("\r\n", "\n").into_bytes();
                    } else {
                        self.fill();
                    }
                }
                None => self.fill(),
            }
        }
    }

    fn send(&self, message: &Value) {
        let (status, body) = post(self.addr, &self.endpoint, &message.to_string()).unwrap();
        assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    }

    /// The answers to requests `ids`, in that order, whatever order they come in (other messages skipped).
    fn answers(&mut self, ids: &[u64]) -> Vec<Value> {
        let mut found = std::collections::HashMap::new();
        while found.len() < ids.len() {
            let (_, data) = self.next_event();
            let message: Value = serde_json::from_str(&data).unwrap();
            if let Some(id) = message["id"].as_u64().filter(|id| ids.contains(id)) {
                found.insert(id, message);
            }
        }
        ids.iter().map(|id| found.remove(id).unwrap()).collect()
    }

    /// Calls every tool of `calls` at once, then reads their answers: each one's text and whether it is an error.
    fn call_all(&mut self, calls: &[(&str, Value)]) -> Vec<(String, bool)> {
        for (index, (name, arguments)) in calls.iter().enumerate() {
            let params = json!({"name": name, "arguments": arguments});
            self.send(&json!({"jsonrpc": "2.0", "id": index + 1, "method": "tools/call", "params": params}));
        }
        let ids: Vec<u64> = (1..=calls.len() as u64).collect();
        self.answers(&ids)
            .into_iter()
            .map(|answer| {
                let result = &answer["result"];
                let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{answer}")).to_owned();
                (text, result["isError"] == true)
            })
            .collect()
    }

    fn call(&mut self, name: &str, arguments: Value) -> (String, bool) {
        self.call_all(&[(name, arguments)]).remove(0)
    }
}

/// Every attack of issue 30 on the file tools, under 1 GiB: each took more than that before its bound (a 2 GiB
/// string; ~640 MB of numbered lines; 304 MiB per sparse read; gigabytes compiling ignore files; ~380 MiB per regex).
#[test]
fn the_file_tools_cannot_take_the_servers_memory() {
    let started_at = Instant::now();
    let mut server = Server::start("file-tools");
    let mut codegen = Codegen::open(&server);
    assert_eq!(
        codegen.call("Write", json!({"file_path": "seed.txt", "content": "x"})),
        ("wrote 1 bytes to seed.txt".into(), false)
    );
    let dir = server.workspace("codegen-");
    let answer = server.open_sandbox(1, "file.write", json!({"path": "seed.txt", "content": "x"}));
    assert_eq!(answer["result"]["result"], json!({"path": "/workspace/seed.txt"}), "{answer}");
    let open_dir = server.workspace("osb-");

    eprintln!("{:?}: item 1", started_at.elapsed());
    // Item 1: replace-all into a 2 GiB string, three at once through both profiles.
    // 16 MiB of `a` in lines of 1 KiB (so Read can mark it read): 16,760,832 of them to replace.
    let sixteen = format!("{}\n", "a".repeat(1023)).repeat(16 << 10);
    std::fs::write(dir.join("a.txt"), &sixteen).unwrap();
    std::fs::write(open_dir.join("a.txt"), &sixteen).unwrap();
    codegen.call("Read", json!({"file_path": "a.txt", "limit": 1}));
    let long = "b".repeat(128);
    let edit = json!({"file_path": "a.txt", "old_string": "a", "new_string": long, "replace_all": true});
    let size = (16 << 10) + 16_760_832 * 128;
    let refusal =
        format!("refusing to change a.txt: the result would be {size} bytes, over the 16 MiB a file may have");
    for (text, is_error) in codegen.call_all(&[("Edit", edit.clone()), ("Edit", edit)]) {
        assert_eq!((text.as_str(), is_error), (refusal.as_str(), true));
    }
    let answer = server.open_sandbox(2, "file.replace", json!({"path": "a.txt", "search": "a", "replace": long}));
    assert_eq!(answer["error"]["data"]["message"], refusal, "{answer}");

    eprintln!("{:?}: item 2", started_at.elapsed());
    // Item 2: 64 MB of newlines read with limit 1e12, a 16 MiB sparse file read, every line searched.
    std::fs::write(dir.join("newlines.txt"), vec![b'\n'; 64_000_000]).unwrap();
    std::fs::File::create(open_dir.join("sparse")).unwrap().set_len(16 << 20).unwrap();
    let read = json!({"file_path": "newlines.txt", "limit": 1e12});
    for (text, is_error) in
        codegen.call_all(&[("Read", read.clone()), ("Read", read), ("Grep", json!({"pattern": "a"}))])
    {
        assert!(!is_error && text.len() < 1_200_000, "{} bytes", text.len());
    }
    for id in 3..6 {
        let answer = server.open_sandbox(id, "file.read", json!({"path": "sparse"}));
        assert_eq!(answer["result"]["result"]["truncated"], true, "{}", &answer.to_string()[..200]);
        let answer = server.open_sandbox(id, "file.search", json!({"path": "a.txt", "query": "a"}));
        assert_eq!(answer["result"]["result"]["truncated"], true);
    }

    eprintln!("{:?}: item 3", started_at.elapsed());
    // Item 3: 40 hard links of one 1 MiB .gitignore of 100,000 patterns, and an innocent Glob.
    let patterns: String = (0..100_000).map(|i| format!("*p{i}*/**/x{i}\n")).collect();
    std::fs::write(dir.join("ignore"), &patterns[..patterns.len().min(1 << 20)]).unwrap();
    for i in 0..40 {
        std::fs::create_dir(dir.join(format!("g{i}"))).unwrap();
        std::fs::hard_link(dir.join("ignore"), dir.join(format!("g{i}/.gitignore"))).unwrap();
    }
    std::fs::write(dir.join("main.py"), "print('x')\n").unwrap();
    let (text, is_error) = codegen.call("Glob", json!({"pattern": "*.py"}));
    assert!(!is_error && text.starts_with("main.py\n[.gitignore cut: 40 ignore file(s)"), "{text}");

    eprintln!("{:?}: item 4", started_at.elapsed());
    // Item 4: regex bombs, four at once (each ~380 MiB under the engine's defaults).
    let bombs: Vec<(&str, Value)> = [r"[\w\W]{1000}{100}", r"(\w{100}){100}", r"\w{1000}\w{1000}", r"(\pL{50}){50}"]
        .into_iter()
        .map(|bomb| ("Grep", json!({"pattern": bomb})))
        .collect();
    for (text, is_error) in codegen.call_all(&bombs) {
        assert!(is_error && text.starts_with("grep: the pattern is too large once compiled"), "{text}");
    }

    eprintln!("{:?}: item 6", started_at.elapsed());
    // Item 6: 8,000 hard links under 100 nested .gitignore files, walked and searched.
    let mut deep = dir.join("nest");
    for level in 0..100 {
        std::fs::create_dir(&deep).unwrap();
        std::fs::write(deep.join(".gitignore"), format!("*.log\n!keep{level}.log\n")).unwrap();
        deep = deep.join("n");
    }
    std::fs::create_dir(&deep).unwrap();
    std::fs::write(deep.join("f0.py"), "needle\n").unwrap();
    for i in 1..8000 {
        std::fs::hard_link(deep.join("f0.py"), deep.join(format!("f{i}.py"))).unwrap();
    }
    let started = Instant::now();
    let found = codegen.call_all(&[
        ("Glob", json!({"pattern": "**/*.py"})),
        ("Grep", json!({"pattern": "needle", "output_mode": "files_with_matches"})),
    ]);
    assert_eq!(
        found[1].0.lines().filter(|line| !line.starts_with('[')).count(),
        1,
        "read once: {}",
        &found[1].0[..found[1].0.len().min(300)]
    );
    // Generous on 2 busy cores: it answers at all, and not in minutes.
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());

    eprintln!("{:?}: the attacks are over", started_at.elapsed());
    server.survived();
    let (text, is_error) = codegen.call("Read", json!({"file_path": "seed.txt"}));
    assert_eq!((text.as_str(), is_error), ("1\tx\n", false));
    let answer = server.open_sandbox(9, "file.read", json!({"path": "seed.txt"}));
    assert_eq!(answer["result"]["result"], json!({"content": "x"}));
}

/// Item 5 and item 15 under 1 GiB: twelve 64 MiB signed uploads at once into three conversations (each body was
/// read whole into memory twice: ~850 MiB for eight), and a legacy SSE stream that is never read while its client
/// keeps asking for 512 KiB files (+116 MB for 200 reads, without end before the bound).
#[test]
fn uploads_and_unread_streams_cannot_take_the_servers_memory() {
    let mut server = Server::start_in("uploads-streams", "/var/tmp");
    let targets: Vec<String> = (0..12)
        .map(|i| {
            let body = json!({"path": format!("in/{i}.bin")}).to_string();
            let (status, answer) =
                post(server.addr, &format!("/v1/conversations/mem-{}/uploads", i % 3), &body).unwrap();
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
            let url = serde_json::from_slice::<Value>(&answer).unwrap()["url"].as_str().unwrap().to_owned();
            let path_start = url.find("/files/").expect("a /files/ URL");
            url[path_start..].to_owned()
        })
        .collect();
    let uploads: Vec<_> = targets
        .into_iter()
        .map(|target| {
            let addr = server.addr;
            std::thread::spawn(move || put(addr, &target, 64 << 20))
        })
        .collect();
    for upload in uploads {
        // Each is written (201) or, past what the conversation's quota or its uploads in flight allow, refused.
        let status = upload.join().unwrap().unwrap();
        assert!([200, 201, 413, 429].contains(&status), "upload status {status}");
    }
    server.survived();

    // Never read: open the stream and make the workspace, then only POST.
    let mut codegen = Codegen::open(&server);
    assert!(!codegen.call("Write", json!({"file_path": "seed.txt", "content": "x"})).1);
    std::fs::write(server.workspace("codegen-").join("half.txt"), format!("{}\n", "y".repeat(1023)).repeat(512))
        .unwrap();
    let read = json!({"file_path": "half.txt"});
    let mut refused = None;
    for id in 1..=400u64 {
        let message =
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "Read", "arguments": read}});
        let (status, _) = post(server.addr, &codegen.endpoint, &message.to_string()).unwrap();
        if status != 202 {
            refused = Some((id, status));
            break;
        }
    }
    // 400 reads of 512 KiB are ~200 MiB of answers: the stream's 16 MiB bound closes it long before.
    let (id, status) = refused.expect("a stream that is never read is closed, and its POSTs refused");
    assert!(id < 200 && (400..500).contains(&status), "refused at call {id} with {status}");
    server.survived();
}
