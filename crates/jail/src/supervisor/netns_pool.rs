//! Network namespaces kept from one run of a conversation to its next.
//!
//! Creating a network namespace and tearing it down is among the costliest steps of a run (most of it in the
//! kernel's asynchronous clean-up; docs/benchmarks.md measures what keeping them saves). When sandlot runs as root, the init
//! creates the namespace before it gives up root, so the namespace belongs to the host's user namespace and
//! nothing in the sandbox can ever reconfigure it: it has only loopback, up. When the run ends, the supervisor keeps
//! it (an open `/proc/<init>/ns/net`) for the next run of the same conversation, which joins it instead of making
//! one.
//!
//! What a run can leave in it for the next run of the same conversation: nothing that needs a process (every
//! socket closes with the run's processes), only TCP connections still closing (`TIME_WAIT`, up to a minute) and
//! the namespace's counters in `/proc/net`. A namespace is never shared by two runs at once, and never by two
//! conversations; at most [`IDLE_CAPACITY`] are kept, the least recently used are dropped first. A live sandbox
//! (`live.rs`) neither takes one nor gives its own back: its loopback is its own for its life, and ends with it.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Namespaces kept between runs, at most.
pub const IDLE_CAPACITY: usize = 128;

/// Idle network namespaces, by the conversation (workspace) whose runs used them.
#[derive(Default)]
pub struct NetnsPool {
    idle: Mutex<VecDeque<(PathBuf, OwnedFd)>>,
}

impl NetnsPool {
    fn idle(&self) -> std::sync::MutexGuard<'_, VecDeque<(PathBuf, OwnedFd)>> {
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the namespace kept for `workspace`'s conversation, if any; it is the caller's until given back.
    pub fn take(&self, workspace: &Path) -> Option<OwnedFd> {
        let mut idle = self.idle();
        let index = idle.iter().position(|(owner, _)| owner == workspace)?;
        idle.remove(index).map(|(_, netns)| netns)
    }

    /// Keeps `netns` for the next run of `workspace`'s conversation. Call only once every process of the run that
    /// used it is gone.
    pub fn give_back(&self, workspace: PathBuf, netns: OwnedFd) {
        let mut idle = self.idle();
        idle.push_back((workspace, netns));
        while idle.len() > IDLE_CAPACITY {
            idle.pop_front();
        }
    }

    /// Opens the network namespace of the process `pid`, which must be an unreaped child of this process (so the
    /// pid cannot have been reused). Refuses this process's own namespace.
    pub fn capture(pid: u32) -> std::io::Result<OwnedFd> {
        let netns = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
        let own = std::fs::metadata("/proc/self/ns/net")?;
        if netns.metadata()?.ino() == own.ino() {
            return Err(std::io::Error::other("the init is still in the host's network namespace"));
        }
        Ok(OwnedFd::from(netns))
    }

    /// The path through which an init opens `netns` held by this process.
    pub fn path_of(netns: &OwnedFd) -> PathBuf {
        PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), netns.as_raw_fd()))
    }
}
