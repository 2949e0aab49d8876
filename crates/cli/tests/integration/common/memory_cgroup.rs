//! A fresh memory cgroup for a process a test starts, so an attack suite can run `sandlot serve` under a memory limit
//! and then ask whether the kernel had to kill anything in it. cgroup v2 when the unified hierarchy has the memory
//! controller (`memory.max`, `memory.swap.max` 0, `memory.events`' `oom_kill`), else cgroup v1's memory hierarchy
//! (`memory.limit_in_bytes`, `memory.memsw.limit_in_bytes` equal to it, `memory.oom_control`'s `oom_kill`), as on
//! hybrid hosts. The process joins the group before it execs (a `sh` wrapper writes its pid to `cgroup.procs`,
//! since tests have no `unsafe` for a `pre_exec`), so everything it and its children ever allocate is charged. The
//! group is removed when dropped (its processes must have ended). Needs root.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Which cgroup hierarchy holds the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// A memory cgroup of this test process's own, removed when dropped.
pub struct MemoryCgroup {
    dir: PathBuf,
    version: Version,
}

impl MemoryCgroup {
    /// A new group limited to `limit_bytes` of memory and no swap, named after `name` and this process.
    pub fn new(name: &str, limit_bytes: u64) -> MemoryCgroup {
        assert!(nix::unistd::geteuid().is_root(), "a memory cgroup needs root");
        let unified = Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(unified.join("cgroup.controllers"))
            .is_ok_and(|controllers| controllers.split_whitespace().any(|c| c == "memory"));
        let leaf = format!("sandlot-test-{name}-{}", std::process::id());
        let group = if v2 {
            MemoryCgroup { dir: unified.join(leaf), version: Version::V2 }
        } else {
            MemoryCgroup { dir: unified.join("memory").join(leaf), version: Version::V1 }
        };
        std::fs::create_dir(&group.dir).unwrap_or_else(|e| panic!("create {}: {e}", group.dir.display()));
        let limit = limit_bytes.to_string();
        match group.version {
            Version::V2 => {
                group.write("memory.max", &limit);
                group.write("memory.swap.max", "0");
            }
            Version::V1 => {
                group.write("memory.limit_in_bytes", &limit);
                if group.dir.join("memory.memsw.limit_in_bytes").exists() {
                    group.write("memory.memsw.limit_in_bytes", &limit);
                }
            }
        }
        group
    }

    /// A command that runs `program` inside the group (arguments are added to it as to `Command::new(program)`).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("sh");
        command.arg("-c").arg(r#"echo $$ > "$0" && exec "$@""#).arg(self.dir.join("cgroup.procs")).arg(program);
        command
    }

    /// How many processes of the group the kernel's OOM killer has killed.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        let text = std::fs::read_to_string(self.dir.join(file)).unwrap();
        text.lines().find_map(|line| line.strip_prefix("oom_kill ")).map_or(0, |n| n.trim().parse().unwrap())
    }

    /// The most memory the group has held (v2's `memory.peak`, v1's `memory.max_usage_in_bytes`), in bytes.
    pub fn peak_bytes(&self) -> u64 {
        let file = match self.version {
            Version::V2 => "memory.peak",
            Version::V1 => "memory.max_usage_in_bytes",
        };
        std::fs::read_to_string(self.dir.join(file)).map_or(0, |text| text.trim().parse().unwrap_or(0))
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.dir.join(file), value)
            .unwrap_or_else(|e| panic!("write {value} to {}: {e}", self.dir.join(file).display()));
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Its processes were killed and reaped by the test; the kernel may take a moment to let the group go.
        let removed = super::eventually(std::time::Duration::from_secs(10), || std::fs::remove_dir(&self.dir).is_ok());
        if !removed {
            eprintln!("could not remove {}", self.dir.display());
        }
    }
}
