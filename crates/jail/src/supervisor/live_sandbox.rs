//! A live sandbox on the supervisor's side: [`LiveJail`], the `LiveSandbox` of the native backend.
//!
//! [`LiveJail::start`] sends a live init its spec and waits for `SandboxReady`; a task ([`drive`]) then reads the
//! sandbox's events for its whole life, answering starts and ends of processes. When the events end (the init and
//! pid 1 are gone: closed, killed, or died by themselves) the same task ends every process still known, reaps the
//! init and releases what the sandbox held (cgroup slot drained, uid lease, the workspace's tree), then marks it
//! done. A prepared sandbox (see `live_pool`) is started the same way before its conversation is known, then
//! [`LiveJail::attach`]ed to it. [`LiveSandbox::close`] only kills pid 1 and waits for that; dropping the handle kills it too, and the task
//! cleans up behind it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use sandlot_core::{Language, LiveProcess, LiveSandbox, SandboxProcess, SandboxUsage, Spawn};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::child::PidfdChild;
use super::error::{Error, Result};
use super::live_forked::{self, LiveFork};
use super::live_process;
use super::live_state::LiveState;
use super::live_usage;
use super::live_waiting::{self, WaitingProcess};
use crate::protocol::{InitEvent, JailSpec, LiveRequest};

/// How long a sandbox may take to be built (tens of milliseconds when idle; seconds on a loaded machine).
const START_PATIENCE: Duration = Duration::from_secs(60);
/// How long the init may take to reap the sandbox after pid 1 was killed, before everything is killed again.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// How long a close waits for the clean-up after the second kill, before it gives up (it cannot take that long).
const CLEANUP_PATIENCE: Duration = Duration::from_secs(30);

/// A live sandbox of the native jail.
pub struct LiveJail {
    /// Its id as the engine knows it (a prepared sandbox's is given when it is taken).
    id: String,
    state: Arc<LiveState>,
    /// Its Python processes forked from the server's template, when there is one.
    fork: Option<LiveFork>,
    /// A prepared sandbox's answer to its `Attach`, until it is attached.
    attached: Mutex<Option<oneshot::Receiver<Result<()>>>>,
    /// A prepared sandbox's driver, forked ahead and waiting for its first spawn.
    waiting: Mutex<Option<WaitingProcess>>,
}

impl LiveJail {
    /// Builds the sandbox of `spec` in `init` (holding what `state` names), and waits until it is ready. On failure
    /// the sandbox is ended and its resources released before the error returns.
    pub async fn start(
        state: LiveState,
        init: PidfdChild,
        events: pipe::Receiver,
        spec: &JailSpec,
        fork: Option<LiveFork>,
    ) -> Result<Self> {
        let state = Arc::new(state);
        let (ready, is_ready) = oneshot::channel();
        let (attached, is_attached) = oneshot::channel();
        tokio::spawn(drive(Arc::clone(&state), init, events, ready, attached));
        let id = state.id.clone();
        let attached = Mutex::new(spec.prepared.then_some(is_attached));
        // From here on, dropping it kills the sandbox.
        let sandbox = Self { id, state, fork, attached, waiting: Mutex::default() };
        let json = serde_json::to_vec(spec).map_err(|e| Error::io("encode a live sandbox's spec", e.into()))?;
        let outcome = match sandbox.state.send(&json, &[]).await {
            Err(e) => Err(Error::io("send a live sandbox's spec", e)),
            Ok(()) => match tokio::time::timeout(START_PATIENCE, is_ready).await {
                Ok(Ok(ready)) => ready,
                Ok(Err(_)) => Err(Error::NoReport { status: "the live sandbox's events ended".into() }),
                Err(_) => Err(Error::io("build a live sandbox", std::io::ErrorKind::TimedOut.into())),
            },
        };
        match outcome {
            Ok(()) => Ok(sandbox),
            Err(e) => {
                sandbox.close().await;
                Err(e)
            }
        }
    }
}

impl LiveJail {
    /// Forks a prepared sandbox's Python driver ahead (`code`, see `live_waiting`); `Err` with the reason when it
    /// cannot (no template: its first call forks then).
    pub async fn fork_ahead(&self, code: &str) -> std::result::Result<(), String> {
        let fork = self.fork.as_ref().ok_or("no Python template")?;
        let waiting = live_waiting::fork_ahead(&self.state, fork, code).await?;
        *lock(&self.waiting) = Some(waiting);
        Ok(())
    }

    /// Attaches a prepared sandbox to its conversation, whose idmapped tree is `tree` (see `LiveRequest::Attach`),
    /// and names it `id`; waits until pid 1 has mounted it and entered Landlock. On failure the sandbox ends.
    pub async fn attach(mut self, id: String, tree: OwnedFd) -> Result<Self> {
        let Some(attached) = lock(&self.attached).take() else {
            return Err(Error::io("attach a live sandbox", std::io::Error::other("it is not prepared")));
        };
        let json = serde_json::to_vec(&LiveRequest::Attach).map_err(|e| Error::io("encode a request", e.into()))?;
        self.state.send(&json, &[tree.as_raw_fd()]).await.map_err(|e| Error::io("send a live sandbox its tree", e))?;
        drop(tree);
        match tokio::time::timeout(START_PATIENCE, attached).await {
            Ok(Ok(Ok(()))) => {
                self.id = id;
                Ok(self)
            }
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(Error::NoReport { status: "the live sandbox ended while it was attached".into() }),
            Err(_) => Err(Error::io("attach a live sandbox", std::io::ErrorKind::TimedOut.into())),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reads the sandbox's events until they end, then cleans up after it (see the module's header).
async fn drive(
    state: Arc<LiveState>,
    mut init: PidfdChild,
    events: pipe::Receiver,
    ready: oneshot::Sender<Result<()>>,
    attached: oneshot::Sender<Result<()>>,
) {
    let mut ready = Some(ready);
    let mut sandbox_ready = false;
    let mut attached = Some(attached);
    let mut lines = BufReader::new(events).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let event = match serde_json::from_str::<InitEvent>(&line) {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(sandbox = state.id, %e, line, "unreadable event from a live sandbox");
                continue;
            }
        };
        tracing::debug!(sandbox = state.id, %event, "live sandbox event");
        match event {
            // Ready once both are known: the init reports pid 1 and pid 1 its readiness, each on its own, in either
            // order, and what comes right after the start (a driver forked ahead) needs pid 1.
            InitEvent::Pid1Started { pid } => {
                state.set_pid1(pid);
                if sandbox_ready && let Some(ready) = ready.take() {
                    let _ = ready.send(Ok(()));
                }
            }
            InitEvent::SandboxReady => {
                sandbox_ready = true;
                if state.pid1().is_some()
                    && let Some(ready) = ready.take()
                {
                    let _ = ready.send(Ok(()));
                }
            }
            InitEvent::SetupFailed { step, error } => match ready.take() {
                Some(ready) => {
                    let _ = ready.send(Err(Error::Setup { step, message: error }));
                }
                None => match attached.take() {
                    Some(attached) => {
                        let _ = attached.send(Err(Error::Setup { step, message: error }));
                    }
                    None => tracing::warn!(sandbox = state.id, step, error, "a live sandbox's pid 1 failed"),
                },
            },
            InitEvent::Attached => {
                if let Some(attached) = attached.take() {
                    let _ = attached.send(Ok(()));
                }
            }
            InitEvent::ProcessStarted { id, pid } => state.started(id, Ok(pid)),
            InitEvent::ProcessFailed { id, step, error } => state.started(id, Err(format!("{step}: {error}"))),
            InitEvent::ProcessEnded { id, termination } => state.ended(id, termination),
            InitEvent::ProgramEnded(_) => {}
        }
    }
    // The init and pid 1 are gone, and with pid 1 every process of its pid namespace.
    state.end_all();
    if let Some(ready) = ready.take() {
        let _ = ready.send(Err(Error::NoReport { status: "the live sandbox ended while it was built".into() }));
    }
    if tokio::time::timeout(KILL_GRACE, init.wait()).await.is_err() {
        tracing::warn!(sandbox = state.id, "a live sandbox's init still runs after its events ended");
        init.kill();
        let _ = init.wait().await;
    }
    if let Some(held) = state.take_held() {
        held.release().await;
    }
    tracing::debug!(sandbox = state.id, "live sandbox ended and released");
    state.done.send_replace(true);
}

#[async_trait]
impl LiveSandbox for LiveJail {
    fn id(&self) -> &str {
        &self.id
    }

    async fn spawn(&self, spawn: Spawn) -> sandlot_core::Result<LiveProcess> {
        // The first spawn takes the waiting process if it runs the code it was forked for, else lets it go (its job
        // socket closed, it exits with nothing run): it never lingers beside a session of another language.
        let waiting = lock(&self.waiting).take().filter(|waiting| {
            spawn.language == Language::Python
                && live_forked::code_of(&spawn.args).is_some_and(|code| waiting.runs(code))
        });
        live_process::spawn(&self.state, spawn, self.fork.as_ref(), waiting).await
    }

    async fn usage(&self) -> SandboxUsage {
        let pid1 = self.state.pid1().unwrap_or(0);
        let held = self.state.held();
        match held.as_ref() {
            Some(held) if self.state.is_alive() => {
                live_usage::usage(held.cgroup.as_ref(), pid1, &self.state.limits, self.state.reaped_cpu())
            }
            _ => SandboxUsage::default(),
        }
    }

    async fn processes(&self) -> Vec<SandboxProcess> {
        let pid1 = self.state.pid1().unwrap_or(0);
        let held = self.state.held();
        match held.as_ref() {
            Some(held) if self.state.is_alive() => live_usage::processes(held.cgroup.as_ref(), pid1),
            _ => Vec::new(),
        }
    }

    fn is_alive(&self) -> bool {
        self.state.is_alive()
    }

    async fn raise_limits(&self, memory_mb: u64, pids: u64) -> sandlot_core::Result<()> {
        let held = self.state.held();
        let Some(cgroup) = held.as_ref().and_then(|held| held.cgroup.as_ref()) else {
            // No cgroup: no memory or process limit to raise (`sandlot doctor` says so).
            return Ok(());
        };
        cgroup.raise(memory_mb * 1024 * 1024, pids).map_err(|e| sandlot_core::Error::Backend {
            backend: "native",
            message: format!("raise a live sandbox's cgroup limits: {e}"),
        })
    }

    fn egress(&self) -> Option<Arc<sandlot_egress::SandboxNetwork>> {
        self.state.network.clone()
    }

    async fn close(&self) {
        self.state.kill();
        let mut done = self.state.done.subscribe();
        if tokio::time::timeout(KILL_GRACE, done.wait_for(|done| *done)).await.is_ok() {
            return;
        }
        tracing::warn!(sandbox = self.state.id, "a live sandbox still runs after its pid 1 was killed");
        self.state.kill_everything();
        if tokio::time::timeout(CLEANUP_PATIENCE, done.wait_for(|done| *done)).await.is_err() {
            tracing::warn!(sandbox = self.state.id, "a live sandbox was not cleaned up after it was killed");
        }
    }
}

impl Drop for LiveJail {
    /// The last handle gone: the sandbox is killed, and the events task cleans up behind it.
    fn drop(&mut self) {
        self.state.kill();
    }
}
