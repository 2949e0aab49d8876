//! What the supervisor keeps of one live sandbox, shared by the sandbox's handle, its processes' handles and the
//! task that reads its events: the socket to its pid 1, the processes being started and running, what it holds on
//! the host (cgroup slot, uid lease, the workspace's tree) and how to kill it.
//!
//! Invariants: requests go out whole and one at a time (the socket is behind an async mutex, each frame in one
//! `sendmsg` with its descriptors); a process is registered before its request is sent, so its events always find
//! it; once the sandbox's events ended ([`LiveState::end_all`]) nothing registers any more and every waiter has its
//! answer. Kills go through pidfds, never a pid that may have been reused.

use std::collections::{BTreeMap, HashMap};
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use sandlot_core::{Language, Limits, Termination};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::UnixStream;
use tokio::sync::{oneshot, watch};

use super::cgroup::RunCgroup;
use super::uids::UidLease;
use crate::protocol::frame;

/// What a live sandbox holds on the host until it has ended.
pub struct Held {
    pub cgroup: Option<RunCgroup>,
    pub uid: Option<UidLease>,
    /// The workspace's tree as the supervisor saw it, taken by the init (see `JailSpec::workspace_tree`).
    pub workspace_tree: Option<OwnedFd>,
    /// A leashed sandbox's network namespace and link (see `leashed`).
    pub network: Option<Arc<sandlot_egress::SandboxNetwork>>,
}

impl Held {
    /// Lets go of everything, once no process of the sandbox is left: the slot drained first.
    pub async fn release(self) {
        if let Some(cgroup) = self.cgroup {
            cgroup.release().await;
        }
        drop(self.uid);
        drop(self.workspace_tree);
        drop(self.network);
    }
}

/// What a process started in the sandbox is told when it starts: its pid there, or why it could not start.
pub type StartReply = Result<i32, String>;

/// The processes being started and running, by request id.
#[derive(Default)]
struct Table {
    starting: HashMap<u64, oneshot::Sender<StartReply>>,
    running: HashMap<u64, Running>,
    /// The sandbox's events ended: nothing starts any more.
    over: bool,
}

struct Running {
    ended: watch::Sender<Option<Termination>>,
    /// The cgroup's OOM kills when the process was started.
    oom_baseline: u64,
}

/// One live sandbox, as its handles share it.
pub struct LiveState {
    pub id: String,
    pub limits: Limits,
    /// What each language's processes exec (TypeScript: the JavaScript runner's `node`).
    pub programs: BTreeMap<Language, PathBuf>,
    /// The environment every process starts with, before its own.
    pub env: Vec<(String, String)>,
    /// Where `require()` loads esbuild from, for TypeScript's processes (`SANDLOT_ESBUILD`).
    pub esbuild: Option<PathBuf>,
    channel: tokio::sync::Mutex<UnixStream>,
    next_id: AtomicU64,
    table: Mutex<Table>,
    /// Pid 1's host pid and a pidfd of it, once the init reported it.
    pid1: OnceLock<(i32, OwnedFd)>,
    /// A pidfd of the init.
    init: OwnedFd,
    held: Mutex<Option<Held>>,
    alive: AtomicBool,
    /// Set once the sandbox has ended and everything it held is released.
    pub done: watch::Sender<bool>,
    /// CPU of its processes reaped outside it (see `live_forked`), in microseconds.
    reaped_cpu_micros: AtomicU64,
    /// A leashed sandbox's network (also in `held`, which lets it go when the sandbox has ended).
    pub network: Option<Arc<sandlot_egress::SandboxNetwork>>,
}

/// What a new [`LiveState`] is made of.
pub struct LiveParts {
    pub id: String,
    pub limits: Limits,
    pub programs: BTreeMap<Language, PathBuf>,
    pub env: Vec<(String, String)>,
    pub esbuild: Option<PathBuf>,
    pub channel: UnixStream,
    pub init: OwnedFd,
    pub held: Held,
}

impl LiveState {
    pub fn new(parts: LiveParts) -> Self {
        let LiveParts { id, limits, programs, env, esbuild, channel, init, held } = parts;
        let network = held.network.clone();
        Self {
            id,
            limits,
            programs,
            env,
            esbuild,
            channel: tokio::sync::Mutex::new(channel),
            next_id: AtomicU64::new(1),
            table: Mutex::default(),
            pid1: OnceLock::new(),
            init,
            held: Mutex::new(Some(held)),
            alive: AtomicBool::new(true),
            done: watch::Sender::new(false),
            reaped_cpu_micros: AtomicU64::new(0),
            network,
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What the sandbox holds, while it does (`None` once released).
    pub fn held(&self) -> MutexGuard<'_, Option<Held>> {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes what the sandbox holds, to release it.
    pub fn take_held(&self) -> Option<Held> {
        self.held().take()
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Pid 1's host pid, once known.
    pub fn pid1(&self) -> Option<i32> {
        self.pid1.get().map(|(pid, _)| *pid)
    }

    /// Records pid 1's host pid, and opens a pidfd of it (it cannot have been reaped yet: the init, its parent,
    /// reports it before waiting for it).
    pub fn set_pid1(&self, pid: i32) {
        match crate::sys::pidfd_open(nix::unistd::Pid::from_raw(pid)) {
            Ok(pidfd) => {
                let _ = self.pid1.set((pid, pidfd));
            }
            Err(e) => tracing::warn!(sandbox = self.id, "no pidfd for the live sandbox's pid 1: {e}"),
        }
    }

    /// SIGKILLs pid 1, which ends the whole sandbox (the kernel kills its pid namespace; the init, its parent,
    /// then exits); before pid 1 is known, the init (pid 1 would die with it). A no-op once they are gone.
    pub fn kill(&self) {
        let target = self.pid1.get().map(|(_, pidfd)| pidfd).unwrap_or(&self.init);
        send_kill(target);
    }

    /// The last resort when the sandbox does not end: the init, and every process in its cgroup.
    pub fn kill_everything(&self) {
        self.kill();
        send_kill(&self.init);
        if let Some(cgroup) = self.held().as_ref().and_then(|held| held.cgroup.as_ref()) {
            cgroup.kill_all();
        }
    }

    /// The cgroup's OOM kills now (0 without one).
    /// Adds the CPU seconds of a process that ended outside pid 1's reach (a forked one, reaped by its template).
    pub fn add_reaped_cpu(&self, seconds: f64) {
        let micros = (seconds * 1e6) as u64;
        self.reaped_cpu_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// CPU seconds of the processes [`Self::add_reaped_cpu`] counted.
    pub fn reaped_cpu(&self) -> f64 {
        self.reaped_cpu_micros.load(Ordering::Relaxed) as f64 / 1e6
    }

    pub fn oom_count(&self) -> u64 {
        self.held().as_ref().and_then(|held| held.cgroup.as_ref()).map_or(0, RunCgroup::oom_count)
    }

    /// A new request id.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers process `id` before its request goes out: its start's answer, and its end. `None` once the sandbox
    /// has ended.
    pub fn register(&self, id: u64) -> Option<(oneshot::Receiver<StartReply>, watch::Receiver<Option<Termination>>)> {
        let oom_baseline = self.oom_count();
        let mut table = self.table();
        if table.over {
            return None;
        }
        let (started, start_reply) = oneshot::channel();
        let (ended, end) = watch::channel(None);
        table.starting.insert(id, started);
        table.running.insert(id, Running { ended, oom_baseline });
        Some((start_reply, end))
    }

    /// Forgets process `id`, whose request never went out.
    pub fn forget(&self, id: u64) {
        let mut table = self.table();
        table.starting.remove(&id);
        table.running.remove(&id);
    }

    /// Pid 1's answer to request `id`.
    pub fn started(&self, id: u64, reply: StartReply) {
        let mut table = self.table();
        if reply.is_err() {
            table.running.remove(&id);
        }
        if let Some(waiter) = table.starting.remove(&id) {
            let _ = waiter.send(reply); // a spawn given up on: the process runs on, its streams closed
        }
    }

    /// Process `id` ended.
    pub fn ended(&self, id: u64, termination: Termination) {
        let oom_count = self.oom_count();
        if let Some(running) = self.table().running.remove(&id) {
            running.ended.send_replace(Some(out_of_memory_if(termination, oom_count > running.oom_baseline)));
        }
    }

    /// The sandbox's events ended: it is gone. Every start still waiting fails, every process still running ended
    /// with it (killed by the kernel with the pid namespace).
    pub fn end_all(&self) {
        self.alive.store(false, Ordering::SeqCst);
        let oom_count = self.oom_count();
        let mut table = self.table();
        table.over = true;
        table.starting.clear();
        for (_, running) in table.running.drain() {
            let killed = Termination::Signaled { signal: libc::SIGKILL };
            running.ended.send_replace(Some(out_of_memory_if(killed, oom_count > running.oom_baseline)));
        }
    }

    /// Sends one request (a JSON message, framed) with `fds`, whole, in turn with the other requests.
    ///
    /// Not cancel-safe past its first `sendmsg`: the frames are small, so that one call sends all of it.
    pub async fn send(&self, message: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
        let framed = frame(message);
        let mut channel = self.channel.lock().await;
        let fd = channel.as_raw_fd();
        let sent = channel
            .async_io(Interest::WRITABLE, || {
                let rights = [ControlMessage::ScmRights(fds)];
                let controls: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
                sendmsg::<()>(fd, &[IoSlice::new(&framed)], controls, MsgFlags::MSG_NOSIGNAL, None)
                    .map_err(std::io::Error::from)
            })
            .await?;
        channel.write_all(&framed[sent..]).await
    }
}

/// A process killed by SIGKILL while the cgroup's OOM count rose is reported as out of memory (best effort: another
/// process may have been the one the kernel took).
fn out_of_memory_if(termination: Termination, oom_rose: bool) -> Termination {
    match termination {
        Termination::Signaled { signal: libc::SIGKILL } if oom_rose => Termination::OutOfMemory,
        other => other,
    }
}

fn send_kill(pidfd: &OwnedFd) {
    // SAFETY: pidfd_send_signal on a pidfd this process owns, no siginfo, no flags.
    unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), libc::SIGKILL, 0usize, 0u32) };
}

/// A live process's end, once its `ended` channel says it; a process whose sender went without a word was killed.
pub async fn end_of(ended: &watch::Receiver<Option<Termination>>) -> Termination {
    let mut ended = ended.clone();
    match ended.wait_for(Option::is_some).await {
        Ok(end) => end.clone().unwrap_or(Termination::Signaled { signal: libc::SIGKILL }),
        Err(_) => Termination::Signaled { signal: libc::SIGKILL },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sigkill_while_the_oom_count_rose_is_out_of_memory() {
        let killed = Termination::Signaled { signal: libc::SIGKILL };
        assert_eq!(out_of_memory_if(killed.clone(), true), Termination::OutOfMemory);
        assert_eq!(out_of_memory_if(killed.clone(), false), killed);
        let interrupted = Termination::Signaled { signal: libc::SIGINT };
        assert_eq!(out_of_memory_if(interrupted.clone(), true), interrupted);
        assert_eq!(out_of_memory_if(Termination::Exited { code: 1 }, true), Termination::Exited { code: 1 });
    }
}
