//! Retention with a real `sandlot serve`: deleting a conversation over REST (`DELETE /v1/conversations/{id}`),
//! idle conversations expiring (`SANDLOT_CONVERSATION_TTL`), and the history pruned (`SANDLOT_HISTORY_MAX_RUNS`);
//! attacked from the network (no token, ids that name the server's state) and from inside a sandbox (a tree made to
//! resist removal, symlinks to what must survive). Needs root, like every test that starts sandboxes.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{dechunk, eventually, free_addr, serve_command};

const TOKEN: &str = "retention-test-token";

/// A `sandlot serve` on a free loopback port over `root`; killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(root: &Path, env: &[(&str, &str)]) -> Server {
        Self::start_as(None, root, env)
    }

    /// The server as the host user `uid` (its own group too) when given, else as root.
    fn start_as(uid: Option<u32>, root: &Path, env: &[(&str, &str)]) -> Server {
        use std::os::unix::process::CommandExt;
        assert!(nix::unistd::geteuid().is_root(), "these tests start sandboxes and need root");
        let addr = free_addr();
        let mut command = serve_command(root, addr, 950_000 + std::process::id() % 40_000);
        if let Some(uid) = uid {
            command.uid(uid).gid(uid);
        }
        let child = command
            .env("MCP_API_TOKEN", TOKEN)
            .env("SANDLOT_LOG", "warn")
            .envs(env.iter().copied())
            .spawn()
            .expect("start sandlot serve");
        let server = Server { child, addr };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !server.request("GET", "/healthz", None, "").is_ok_and(|(status, _)| status == 200) {
            assert!(Instant::now() < deadline, "sandlot serve did not answer /healthz within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// One request on a new connection: (status, body). `token` is sent as a bearer token when given.
    fn request(&self, method: &str, path: &str, token: Option<&str>, body: &str) -> std::io::Result<(u16, Vec<u8>)> {
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n\
             Accept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let timeout = Duration::from_secs(120);
        let mut stream = TcpStream::connect_timeout(&self.addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.write_all(request.as_bytes())?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let head_end = response.windows(4).position(|w| w == b"\r\n\r\n").expect("an HTTP head");
        let head = String::from_utf8_lossy(&response[..head_end]).to_ascii_lowercase();
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let mut body = response.split_off(head_end + 4);
        if head.contains("transfer-encoding: chunked") {
            body = dechunk(&body);
        }
        Ok((status, body))
    }

    /// `sandbox.run_code` in `conversation`: its structured result.
    fn run(&self, conversation: &str, language: &str, code: &str) -> serde_json::Value {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "sandbox.run_code",
                        "arguments": { "conversationId": conversation, "language": language, "code": code } }
        })
        .to_string();
        let (status, body) = self.request("POST", "/mcp", Some(TOKEN), &body).unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let response: serde_json::Value = serde_json::from_slice(&body).unwrap();
        response["result"]["structuredContent"].clone()
    }

    /// `DELETE /v1/conversations/{id}`: (status, JSON body).
    fn delete(&self, id: &str) -> (u16, serde_json::Value) {
        let (status, body) = self.request("DELETE", &format!("/v1/conversations/{id}"), Some(TOKEN), "").unwrap();
        (status, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
    }

    /// The ids of the runs of `conversation` in the history.
    fn runs_of(&self, conversation: &str) -> Vec<String> {
        let path = format!("/v1/runs?conversationId={conversation}&limit=500");
        let (status, body) = self.request("GET", &path, Some(TOKEN), "").unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let runs: serde_json::Value = serde_json::from_slice(&body).unwrap();
        runs["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn conversation_dir(root: &Path, id: &str) -> PathBuf {
    root.join(id)
}

#[test]
fn deleting_a_conversation_removes_its_files_and_history_and_the_next_run_starts_empty() {
    let root = common::TempRoot::new();
    let server = Server::start(root.path(), &[]);
    let result = server.run("doomed", "bash", "mkdir -p /data/sub && echo secret > /data/sub/notes.txt && echo ok");
    assert_eq!(result["success"], true, "{result}");
    let url = result["files"][0]["url"].as_str().unwrap().to_owned();
    server.run("kept", "bash", "echo mine > /data/mine.txt");
    assert_eq!(server.runs_of("doomed").len(), 1);
    assert!(conversation_dir(root.path(), "doomed").join("files/sub/notes.txt").is_file());

    let (status, body) = server.delete("doomed");
    assert_eq!(
        (status, body),
        (200, serde_json::json!({ "conversationId": "doomed", "filesRemoved": true, "runsRemoved": 1 }))
    );
    assert!(!conversation_dir(root.path(), "doomed").exists());
    assert_eq!(server.runs_of("doomed"), Vec::<String>::new());
    let path = url.split_once("127.0.0.1").map(|(_, rest)| rest.split_once('/').unwrap().1).unwrap();
    let (status, _) = server.request("GET", &format!("/{path}"), None, "").unwrap();
    assert_eq!(status, 404, "the file's signed URL after the deletion");
    // The other conversation and the server's state are untouched.
    assert_eq!(std::fs::read_to_string(root.path().join("kept/files/mine.txt")).unwrap(), "mine\n");
    assert_eq!(server.runs_of("kept").len(), 1);
    assert!(root.path().join(".sandlot/history.db").is_file());

    let result = server.run("doomed", "bash", "ls -A /data | wc -l");
    assert_eq!((result["success"].clone(), result["stdout"].clone()), (true.into(), "0\n".into()), "{result}");
    // Gone twice is not found.
    assert_eq!(server.delete("doomed").0, 200, "the new run made it again");
    assert_eq!(server.delete("doomed").0, 404);
}

/// Attack from the network: no token, a bad token, ids that are no conversation or that name the server's own
/// state, which must survive every attempt.
#[test]
fn deletion_needs_the_token_and_a_valid_id_and_never_reaches_the_servers_state() {
    let root = common::TempRoot::new();
    let server = Server::start(root.path(), &[]);
    server.run("victim", "bash", "echo x > /data/x");
    for token in [None, Some("wrong")] {
        let (status, _) = server.request("DELETE", "/v1/conversations/victim", token, "").unwrap();
        assert_eq!(status, 401, "{token:?}");
    }
    for id in [".sandlot", "..", "%2E%2E", ".jail-root", "a%20b", "-x", &"x".repeat(129)] {
        let (status, body) = server.delete(id);
        assert_eq!((status, &body["error"]), (400, &serde_json::json!("invalid_argument")), "{id}: {body}");
    }
    for path in ["/v1/conversations/..%2F.sandlot", "/v1/conversations/victim/files", "/v1/conversations/"] {
        let (status, _) = server.request("DELETE", path, Some(TOKEN), "").unwrap();
        assert!(status == 400 || status == 404 || status == 405, "{path}: {status}");
    }
    assert_eq!(server.delete("never-was").0, 404);
    assert!(root.path().join(".sandlot/history.db").is_file());
    assert!(root.path().join(".sandlot/file-secret").is_file());
    assert!(root.path().join("victim/files/x").is_file());
    assert_eq!(server.runs_of("victim").len(), 1);
}

/// Attack from inside a sandbox: a run leaves a tree made to resist removal (directories without any permission,
/// a chain of directories nested 2000 deep) and symlinks to what must survive (the server's state, another
/// conversation, a host directory). The deletion removes the whole tree, and follows no symlink.
#[test]
fn a_run_cannot_make_its_conversation_undeletable_nor_aim_the_deletion_elsewhere() {
    let root = common::TempRoot::new();
    let server = Server::start(root.path(), &[]);
    server.run("other", "bash", "echo keep > /data/keep.txt");
    let outside = common::TempRoot::new();
    std::fs::write(outside.path().join("host.txt"), "host").unwrap();
    let code = format!(
        r#"import os
os.makedirs('/data/locked/inner')
open('/data/locked/inner/f', 'w').write('x')
os.chmod('/data/locked/inner', 0)
os.chmod('/data/locked', 0)
os.symlink('{state}', '/data/state')
os.symlink('{other}', '/data/other')
os.symlink('{outside}', '/data/outside')
os.symlink('{state}/history.db', '/data/history')
print('planted', flush=True)
os.chdir('/data')
for _ in range(2000):
    os.mkdir('d')
    os.chdir('d')
"#,
        state = root.path().join(".sandlot").display(),
        other = root.path().join("other/files").display(),
        outside = outside.path().display(),
    );
    let result = server.run("attacker", "python", &code);
    assert_eq!(result["stdout"], "planted\n", "{result}");

    let (status, body) = server.delete("attacker");
    assert_eq!((status, &body["filesRemoved"]), (200, &serde_json::json!(true)), "{body}");
    assert!(!root.path().join("attacker").exists());
    assert!(root.path().join(".sandlot/history.db").is_file());
    assert!(root.path().join(".sandlot/file-secret").is_file());
    assert_eq!(std::fs::read_to_string(root.path().join("other/files/keep.txt")).unwrap(), "keep\n");
    assert_eq!(std::fs::read_to_string(outside.path().join("host.txt")).unwrap(), "host");
    assert_eq!(server.runs_of("other").len(), 1);
}

/// The same attack on a server that is not root, which has no power over permissions but its own: directories
/// of mode 000, nested under one another, in a chain as deep as a run can make before the quota watchdog stops it.
/// (`std::fs::remove_dir_all` gives up on them with "Permission denied".)
#[test]
fn a_run_cannot_make_its_conversation_undeletable_on_a_server_that_is_not_root() {
    let dir = common::TempRoot::new();
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    let root = dir.path().join("root");
    let server = Server::start_as(Some(65534), &root, &[]);
    let code = r#"import os
os.makedirs('/data/a/b/c')
open('/data/a/b/c/f', 'w').write('x')
for path in ('/data/a/b/c', '/data/a/b', '/data/a'):
    os.chmod(path, 0)
print('planted', flush=True)
os.chdir('/data')
for _ in range(1500):
    os.mkdir('d')
    os.chdir('d')
os.chmod('.', 0)
"#;
    let result = server.run("attacker", "python", code);
    assert_eq!(result["stdout"], "planted\n", "{result}");
    let (status, body) = server.delete("attacker");
    assert_eq!((status, &body["filesRemoved"]), (200, &serde_json::json!(true)), "{body}");
    assert!(!root.join("attacker").exists());
    assert!(root.join(".sandlot/history.db").is_file());
}

/// A deletion while a run of the conversation goes on is refused (409) and does not disturb the run; once it
/// ended, the deletion goes through.
#[test]
fn deletion_is_refused_while_a_run_goes_and_never_breaks_it() {
    let root = common::TempRoot::new();
    let server = std::sync::Arc::new(Server::start(root.path(), &[]));
    let running = {
        let server = server.clone();
        std::thread::spawn(move || server.run("busy", "bash", "echo mine > /data/f; sleep 4; cat /data/f; ls /data"))
    };
    assert!(
        eventually(Duration::from_secs(30), || root.path().join("busy/files/f").is_file()),
        "the run did not start"
    );
    let (status, body) = server.delete("busy");
    assert_eq!((status, &body["error"]), (409, &serde_json::json!("conflict")), "{body}");
    let result = running.join().unwrap();
    assert_eq!((result["success"].clone(), result["stdout"].clone()), (true.into(), "mine\nf\n".into()), "{result}");
    assert_eq!(server.delete("busy").0, 200);
}

/// Another process's run on the same root (`sandlot run`, which keeps no history) holds its conversation too: a
/// deletion through the server is refused while it goes, and the sweeper leaves it alone, however long it lasts.
#[test]
fn a_run_of_another_process_on_the_root_is_never_removed_under_it() {
    let root = common::TempRoot::new();
    let server = Server::start(root.path(), &[("SANDLOT_CONVERSATION_TTL", "1s")]);
    let mut run = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["run", "-l", "bash", "-c", "shared"])
        .env("SANDBOX_ROOT", root.path())
        .env("SANDLOT_SANDBOX_UID", (950_000 + std::process::id() % 40_000).to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    run.stdin.take().unwrap().write_all(b"echo mine > /data/f; sleep 5; cat /data/f").unwrap();
    assert!(eventually(Duration::from_secs(30), || root.path().join("shared/files/f").is_file()), "no run");
    std::thread::sleep(Duration::from_secs(2)); // idle for the sweeper: the run started more than a TTL ago
    let (status, body) = server.delete("shared");
    assert_eq!((status, &body["error"]), (409, &serde_json::json!("conflict")), "{body}");
    let out = run.wait_with_output().unwrap();
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned()),
        (Some(0), "mine\n".to_owned()),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(eventually(Duration::from_secs(30), || !root.path().join("shared").exists()), "not removed once idle");
}

/// `SANDLOT_CONVERSATION_TTL`: an idle conversation goes (files and history) after its time to live; one whose
/// run lasts longer than that is never removed under it; and runs that start while the sweeper removes their
/// conversation always find a whole `/data` (new and empty, or the old one).
#[test]
fn idle_conversations_expire_and_never_under_a_run() {
    let root = common::TempRoot::new();
    let server = std::sync::Arc::new(Server::start(root.path(), &[("SANDLOT_CONVERSATION_TTL", "2s")]));
    let result = server.run("idle", "bash", "echo x > /data/x");
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(server.runs_of("idle").len(), 1);
    // A run three times as long as the time to live, which needs its file at the end.
    let long = {
        let server = server.clone();
        std::thread::spawn(move || server.run("long", "bash", "echo mine > /data/f; sleep 6; cat /data/f"))
    };
    assert!(
        eventually(Duration::from_secs(30), || !root.path().join("idle").exists()),
        "the idle conversation was not removed"
    );
    assert_eq!(server.runs_of("idle"), Vec::<String>::new());
    let result = long.join().unwrap();
    assert_eq!((result["success"].clone(), result["stdout"].clone()), (true.into(), "mine\n".into()), "{result}");
    // Runs about a time to live apart, so the sweeper (every second) removes the conversation around their starts.
    for round in 0..8 {
        let result =
            server.run("racing", "bash", "test -d /data && echo $RANDOM > /data/m && sleep 0.3 && cat /data/m");
        assert_eq!(result["success"], true, "round {round}: {result}");
        std::thread::sleep(Duration::from_millis(1600 + 200 * (round % 5)));
    }
    assert!(
        eventually(Duration::from_secs(30), || !root.path().join("long").exists()),
        "the long run's conversation was not removed once idle"
    );
}

/// `SANDLOT_HISTORY_MAX_RUNS`: a server keeps at most that many finished runs, the newest.
#[test]
fn the_history_is_pruned_to_its_limit() {
    let root = common::TempRoot::new();
    {
        let server = Server::start(root.path(), &[]);
        for n in 0..3 {
            server.run("pruned", "bash", &format!("echo {n}"));
        }
        assert_eq!(server.runs_of("pruned").len(), 3);
    }
    let server = Server::start(root.path(), &[("SANDLOT_HISTORY_MAX_RUNS", "1")]);
    assert!(eventually(Duration::from_secs(10), || server.runs_of("pruned").len() == 1));
    server.run("pruned", "bash", "echo again");
    let kept = server.runs_of("pruned");
    assert!(kept.len() <= 2, "{kept:?}");
}
