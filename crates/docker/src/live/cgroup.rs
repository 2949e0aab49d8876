//! The cgroup of a live sandbox's container, read from the host: what it uses against its limits, its OOM kills and
//! its processes. Docker puts every process of a container, its `docker exec`s included, in one cgroup per
//! controller; it is found from the container's init (`/proc/<pid>/cgroup`), so the cgroup driver (cgroupfs or
//! systemd) and the version (v1 or v2) do not matter. Files are read directly, not through `docker stats`: a few
//! microseconds instead of a round trip that waits for a sample (on cgroup v1, a second).
//!
//! Assumes sandlot sees the host's cgroup tree at `/sys/fs/cgroup` and the host's pids, as it does when it runs on
//! the host beside dockerd (which the conversation's bind already requires). Reads that fail give zeros.

use std::path::{Path, PathBuf};

use sandlot_core::SandboxUsage;

const ROOT: &str = "/sys/fs/cgroup";

/// A container's cgroup directories.
#[derive(Debug, Clone)]
pub(crate) enum Cgroup {
    /// The unified hierarchy: one directory.
    V2(PathBuf),
    /// One directory per controller.
    V1 { memory: PathBuf, pids: PathBuf, cpuacct: PathBuf },
}

impl Cgroup {
    /// The cgroup of the process `host_pid` (the container's init).
    pub(crate) fn of_process(host_pid: u32) -> std::io::Result<Self> {
        let lines = std::fs::read_to_string(format!("/proc/{host_pid}/cgroup"))?;
        let not_found = || std::io::Error::new(std::io::ErrorKind::NotFound, "no cgroup for the container's init");
        if Path::new(ROOT).join("cgroup.controllers").exists() {
            let path = lines.lines().find_map(|l| l.strip_prefix("0::")).ok_or_else(not_found)?;
            return Ok(Self::V2(Path::new(ROOT).join(path.trim_start_matches('/'))));
        }
        // v1: `<id>:<controllers>:<path>`; the controllers' directory is named by their list (`cpu,cpuacct`).
        let dir = |controller: &str| {
            lines.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                controllers
                    .split(',')
                    .any(|c| c == controller)
                    .then(|| Path::new(ROOT).join(controllers).join(path.trim_start_matches('/')))
            })
        };
        Ok(Self::V1 {
            memory: dir("memory").ok_or_else(not_found)?,
            pids: dir("pids").ok_or_else(not_found)?,
            cpuacct: dir("cpuacct").ok_or_else(not_found)?,
        })
    }

    /// What the container uses now.
    pub(crate) fn usage(&self) -> SandboxUsage {
        match self {
            Self::V2(dir) => SandboxUsage {
                memory_bytes: number(&dir.join("memory.current")),
                memory_limit_bytes: number(&dir.join("memory.max")),
                pids: number(&dir.join("pids.current")),
                pids_limit: number(&dir.join("pids.max")),
                cpu_seconds: keyed(&dir.join("cpu.stat"), "usage_usec") as f64 / 1e6,
                oom_kills: self.oom_kills(),
            },
            Self::V1 { memory, pids, cpuacct } => SandboxUsage {
                memory_bytes: number(&memory.join("memory.usage_in_bytes")),
                memory_limit_bytes: number(&memory.join("memory.limit_in_bytes")),
                pids: number(&pids.join("pids.current")),
                pids_limit: number(&pids.join("pids.max")),
                cpu_seconds: number(&cpuacct.join("cpuacct.usage")) as f64 / 1e9,
                oom_kills: self.oom_kills(),
            },
        }
    }

    /// Processes the kernel's OOM killer ended in the container since it started (v1 needs Linux 4.13).
    pub(crate) fn oom_kills(&self) -> u64 {
        match self {
            Self::V2(dir) => keyed(&dir.join("memory.events"), "oom_kill"),
            Self::V1 { memory, .. } => keyed(&memory.join("memory.oom_control"), "oom_kill"),
        }
    }

    /// The host pids of the container's processes (not threads).
    pub(crate) fn host_pids(&self) -> Vec<u32> {
        let dir = match self {
            Self::V2(dir) => dir,
            Self::V1 { pids, .. } => pids,
        };
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }
}

/// A file holding one number; `max` (no limit) is `u64::MAX`; unreadable is 0.
fn number(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    match text.trim() {
        "max" => u64::MAX,
        value => value.parse().unwrap_or(0),
    }
}

/// The value of `key` in a file of `key value` lines; 0 when missing.
fn keyed(path: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0)
}
