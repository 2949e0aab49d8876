//! Helpers shared by the CLI's integration tests: talking to a real `sandlot serve` over raw HTTP/1.1, an engine over
//! the native jail with the sandlot binary as its init, and a memory cgroup to start a server in
//! ([`memory_cgroup`]).

pub mod memory_cgroup;

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

/// The body of a `Transfer-Encoding: chunked` response, its chunks joined.
pub fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..line_end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        out.extend_from_slice(&body[start..(start + size).min(body.len())]);
        body = &body[(start + size + 2).min(body.len())..];
    }
    out
}

/// One request on a new connection to `addr`, read to its end: (status, body).
pub fn request_at(addr: std::net::SocketAddr, request: &str, timeout: Duration) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no HTTP head in {} bytes", response.len())))?;
    let head = String::from_utf8_lossy(&response[..head_end]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut body = response.split_off(head_end + 4);
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Ok((status, body))
}

/// Polls `done` every 50 ms for up to `limit`; whether it became true.
pub fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A free loopback address to serve on.
pub fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// `sandlot serve` on `root` and `addr`, its sandboxes as the 1000 uids from `sandbox_uid` (each test binary takes
/// its own range, so tests running at once never share one), stdin and stdout closed, stderr the test's.
pub fn serve_command(root: &std::path::Path, addr: std::net::SocketAddr, sandbox_uid: u32) -> std::process::Command {
    use std::process::Stdio;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sandlot"));
    command
        .arg("serve")
        .env("SANDBOX_ROOT", root)
        .env("MCP_HTTP_ADDR", addr.to_string())
        .env("SANDLOT_SANDBOX_UID", sandbox_uid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    command
}

/// An engine over the native jail (the sandlot binary as init, 16 sandbox uids from `uid_base` offset by this
/// process, so parallel test binaries do not share them) with its conversations under `root`. Needs root.
pub fn jail_engine(root: &std::path::Path, uid_base: u32) -> sandlot_core::Engine {
    assert!(nix::unistd::geteuid().is_root(), "jail tests need root");
    let mut config = sandlot_jail::JailConfig::new(env!("CARGO_BIN_EXE_sandlot").into());
    let first = uid_base + (std::process::id() % 200_000) * 16;
    config.sandbox_uids = sandlot_jail::UidRange::new(first, first + 15).unwrap();
    config.probe_versions = false;
    config.data_root = Some(root.to_owned());
    let engine_config = sandlot_core::EngineConfig { max_concurrent_runs: 16, ..sandlot_core::EngineConfig::default() };
    let backend = std::sync::Arc::new(sandlot_jail::JailBackend::new(config).expect("the native backend"));
    sandlot_core::Engine::new(backend, sandlot_core::Workspaces::new(root), engine_config)
}

/// A temporary data root that takes its conversations' disk images with it: a server killed by a test, or a
/// `sandlot run` (which leaves its image mounted for the next), leaves them mounted below the root, and a
/// directory with mounts in it cannot be removed.
pub struct TempRoot(tempfile::TempDir);

impl TempRoot {
    pub fn new() -> Self {
        Self(tempfile::tempdir().expect("a temporary root"))
    }

    /// A temporary root in `parent` (`/dev/shm`, say).
    pub fn new_in(parent: &str) -> Self {
        Self(tempfile::tempdir_in(parent).expect("a temporary root"))
    }

    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl Drop for TempRoot {
    /// Detaches every mount below the root, deepest first.
    fn drop(&mut self) {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut below: Vec<&str> = mountinfo
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| std::path::Path::new(point).starts_with(self.0.path()))
            .collect();
        below.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in below {
            let _ = nix::mount::umount2(point, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}
