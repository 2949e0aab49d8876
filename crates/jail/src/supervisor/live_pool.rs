//! The server's prepared live sandboxes: up to `size` live sandboxes built ahead for the server's default limits
//! (what `prepare_for` is given), in sandlot's layout with no volumes, `/data` empty (see `JailSpec::prepared`), each
//! with its Python session driver forked ahead and waiting (see `live_waiting`). A conversation's first `session`
//! call whose sandbox they fit takes one: the supervisor attaches the conversation's idmapped tree (see
//! `LiveJail::attach`; pid 1 enters Landlock only then) and the call goes on as in a sandbox built on its path, but
//! without the build and the driver's fork. A taken sandbox's replacement is built once the conversation's first
//! call has ended (`LiveBackend::first_call_ended`), not beside it: on a small machine the build (a fork of the
//! preloaded interpreter among the rest) slows that call down. A build that fails stops the refills for a while.
//!
//! Invariants: a prepared live sandbox serves one conversation and is never reused; it holds nothing of any
//! conversation until it is attached; `ready` plus those being built never exceed `size`; one that died while it
//! waited is let go, never used.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sandlot_core::{ConversationId, Language, Layout, Limits, LiveSpec};

use super::error::{Error, Result};
use super::live_build::LiveMaker;
use super::live_forked::code_of;
use super::live_sandbox::LiveJail;

/// How long refills pause after a build failed.
const BACKOFF: Duration = Duration::from_secs(2);
/// How long a server's first builds wait for its Python templates to get ready.
const TEMPLATES_START: Duration = Duration::from_secs(120);

/// Prepared live sandboxes waiting for their conversation.
pub struct LivePool {
    maker: Arc<LiveMaker>,
    size: usize,
    state: Mutex<State>,
}

/// A live sandbox prepared for a conversation to come.
pub struct PreparedLive {
    pub jail: LiveJail,
    /// Its run uid (a prepared sandbox is built as root), which the conversation's tree is idmapped to.
    pub run_uid: u32,
    /// Its init's host pid.
    init: i32,
}

#[derive(Default)]
struct State {
    ready: Vec<PreparedLive>,
    building: usize,
    /// The inits of those being built, once started.
    building_inits: Vec<i32>,
    /// What the pool prepares for (`None` before `prepare_for`).
    limits: Option<Limits>,
    /// No refill before then (a build failed).
    paused_until: Option<Instant>,
    /// Numbers the prepared sandboxes' ids (in logs only: a taken sandbox gets the engine's id).
    built: u64,
    /// The server is stopping: nothing more is built.
    closed: bool,
}

impl LivePool {
    /// A pool of `size` prepared live sandboxes built by `maker` (`size` 0: none).
    pub fn new(maker: Arc<LiveMaker>, size: usize) -> Arc<Self> {
        Arc::new(Self { maker, size, state: Mutex::default() })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Ends every waiting sandbox and builds no more (the server stops): returns once they are closed.
    pub async fn close(&self) {
        let waiting = {
            let mut state = self.state();
            state.closed = true;
            state.limits = None;
            std::mem::take(&mut state.ready)
        };
        for prepared in waiting {
            sandlot_core::LiveSandbox::close(&prepared.jail).await;
        }
    }

    /// Prepares sandboxes for live sandboxes of `limits` (the server's defaults; call within the runtime).
    pub fn prepare_for(self: &Arc<Self>, limits: &Limits) {
        if self.size == 0 || self.state().closed {
            return;
        }
        self.state().limits.get_or_insert_with(|| limits.clone());
        self.refill();
    }

    /// A prepared sandbox for `live` if one waits and fits it (sandlot's layout, no volumes, the limits it was built
    /// with). Its replacement comes with [`LivePool::refill`], once its first call has ended.
    pub fn take(self: &Arc<Self>, live: &LiveSpec) -> Option<PreparedLive> {
        if self.size == 0 || live.layout != Layout::Data || !live.mounts.is_empty() {
            return None;
        }
        let (taken, let_go) = {
            let mut state = self.state();
            if !state.limits.as_ref().is_some_and(|limits| fits(limits, &live.limits)) {
                return None;
            }
            let mut let_go = Vec::new();
            let mut taken = None;
            while let Some(prepared) = state.ready.pop() {
                if sandlot_core::LiveSandbox::is_alive(&prepared.jail) {
                    taken = Some(prepared);
                    break;
                }
                tracing::warn!("a prepared live sandbox died while it waited; letting it go");
                let_go.push(prepared);
            }
            (taken, let_go)
        };
        drop(let_go); // dropping a sandbox kills it; its events task releases what it held
        taken
    }

    /// Starts building what the pool lacks, each sandbox in a task of its own (on the current runtime).
    pub fn refill(self: &Arc<Self>) {
        loop {
            let (limits, number) = {
                let mut state = self.state();
                let Some(limits) = state.limits.clone() else { return };
                if state.paused_until.is_some_and(|until| Instant::now() < until)
                    || state.ready.len() + state.building >= self.size
                {
                    return;
                }
                state.building += 1;
                state.built += 1;
                (limits, state.built)
            };
            let pool = Arc::clone(self);
            tokio::spawn(async move {
                let mut init = None;
                let built = pool
                    .build(limits, number, |pid| {
                        init = Some(pid);
                        pool.state().building_inits.push(pid);
                    })
                    .await;
                let mut state = pool.state();
                state.building -= 1;
                state.building_inits.retain(|pid| Some(*pid) != init);
                match (built, init) {
                    (Ok((jail, run_uid)), Some(init)) if !state.closed => {
                        state.ready.push(PreparedLive { jail, run_uid, init })
                    }
                    (Ok(_), _) => {} // dropping a sandbox kills it
                    (Err(e), _) => {
                        state.paused_until = Some(Instant::now() + BACKOFF);
                        tracing::warn!("cannot prepare a live sandbox (retrying in {BACKOFF:?}): {e}");
                    }
                }
            });
        }
    }

    /// Builds one prepared sandbox and forks its Python driver ahead: the sandbox and its run uid.
    async fn build(&self, limits: Limits, number: u64, started: impl FnOnce(i32)) -> Result<(LiveJail, u32)> {
        // A server's first builds wait for its templates, so that their drivers can be forked ahead.
        let deadline = Instant::now() + TEMPLATES_START;
        while self.maker.templates.as_ref().is_some_and(|t| !t.all_ready()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let id = format!("prepared-{number}");
        let conversation = ConversationId::parse(&id)
            .map_err(|e| Error::io("name a prepared live sandbox", std::io::Error::other(e.to_string())))?;
        let live = LiveSpec {
            sandbox_id: id,
            conversation,
            limits,
            workspace: Default::default(),
            layout: Layout::Data,
            mounts: vec![],
            network: None,
        };
        let (jail, run_uid) = self.maker.build(live, true, started).await?;
        let run_uid = run_uid.ok_or_else(|| Error::io("prepare a live sandbox", std::io::Error::other("not root")))?;
        let driver = sandlot_core::session_driver_spawn(Language::Python);
        if let Some(code) = code_of(&driver.args)
            && let Err(why) = jail.fork_ahead(code).await
        {
            // Not kept without its driver: what a first call would gain is the driver's fork.
            sandlot_core::LiveSandbox::close(&jail).await;
            return Err(Error::io("fork a prepared live sandbox's driver", std::io::Error::other(why.to_string())));
        }
        Ok((jail, run_uid))
    }

    /// The host pids of the inits of every sandbox the pool holds or builds (each the parent of its sandbox's pid 1).
    pub fn inits(&self) -> Vec<i32> {
        let state = self.state();
        state.ready.iter().map(|prepared| prepared.init).chain(state.building_inits.iter().copied()).collect()
    }

    /// Sandboxes waiting now.
    pub fn len(&self) -> usize {
        self.state().ready.len()
    }
}

/// Whether a sandbox prepared for `prepared` serves a live sandbox of `wanted`: what its cgroup, `/tmp` and rlimits
/// are made of is the same (a call's timeout and output cap are the engine's business).
fn fits(prepared: &Limits, wanted: &Limits) -> bool {
    prepared.memory_mb == wanted.memory_mb
        && prepared.cpus == wanted.cpus
        && prepared.pids == wanted.pids
        && prepared.tmp_mb == wanted.tmp_mb
        && prepared.disk_mb == wanted.disk_mb
        && prepared.open_files == wanted.open_files
}
