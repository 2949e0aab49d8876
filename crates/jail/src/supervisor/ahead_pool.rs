//! The server's ahead sandboxes (see `ahead`): at most `capacity`, one per conversation, each built once a
//! JavaScript or TypeScript run of its conversation is over (its sandbox gone), off every run's path. One waits at
//! most [`IDLE`]; when the pool is full the one waiting longest gives way. Under load (as many runs in flight as the
//! machine has cores) none is built: the cores are the limit then, and a sandbox that may go unused costs CPU.
//!
//! Invariants: `ready` holds at most one sandbox per conversation and at most `capacity` in all, counting those
//! being built; every sandbox let go is ended, its slot, uid and hold released; none is built or handed out once the
//! pool is closed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use sandlot_core::Job;

use super::ahead::{Ahead, Builder};
use super::runners::HostRunner;

/// How long an ahead sandbox waits for its conversation's next run before it is let go.
pub const IDLE: Duration = Duration::from_secs(30);

/// Ahead sandboxes waiting for their conversations' next runs.
pub struct AheadPool {
    builder: Builder,
    capacity: usize,
    state: Mutex<State>,
    /// Runs in flight on the backend now, and from how many on the pool builds none.
    in_flight: Arc<AtomicUsize>,
    busy_at: usize,
}

#[derive(Default)]
struct State {
    ready: Vec<Ahead>,
    /// The conversations (files directories) whose sandbox is being built.
    building: HashSet<PathBuf>,
    /// The inits of those being built, once started.
    building_inits: Vec<i32>,
    closed: bool,
}

impl AheadPool {
    /// A pool of at most `capacity` sandboxes, built by `builder`; `in_flight` counts the backend's runs in flight.
    pub fn new(builder: Builder, capacity: usize, in_flight: Arc<AtomicUsize>) -> Arc<Self> {
        let busy_at = std::thread::available_parallelism().map_or(2, |cores| cores.get());
        Arc::new(Self { builder, capacity, state: Mutex::default(), in_flight, busy_at })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a run of `job` by `runner` may be served by an ahead sandbox (see [`Builder::fits`]).
    pub fn fits(&self, job: &Job, runner: &HostRunner) -> bool {
        self.builder.fits(job, runner)
    }

    /// The sandbox waiting for `workspace`'s conversation, if any: the caller's from now on.
    pub fn take(&self, workspace: &Path) -> Option<Ahead> {
        let mut state = self.state();
        let index = state.ready.iter().position(|ahead| ahead.workspace() == workspace)?;
        Some(state.ready.swap_remove(index))
    }

    /// Builds, in the background, the sandbox for the next run of `job`'s conversation (a run by `runner` that
    /// fits, whose sandbox is gone), unless one is there or being built, the pool is closed, or the machine busy.
    pub fn prepare_next(self: &Arc<Self>, job: &Job, runner: &HostRunner) {
        if self.capacity == 0 || self.in_flight.load(Ordering::Relaxed) >= self.busy_at {
            return;
        }
        {
            let mut state = self.state();
            let waiting = state.ready.iter().any(|ahead| ahead.workspace() == job.workspace);
            if state.closed || waiting || !state.building.insert(job.workspace.clone()) {
                return;
            }
            if state.building.len() > self.capacity {
                state.building.remove(&job.workspace);
                return;
            }
        }
        let (pool, job, runner) = (Arc::clone(self), job.clone(), runner.clone());
        tokio::spawn(async move {
            let init = std::sync::atomic::AtomicI32::new(0);
            let started = |pid| {
                init.store(pid, Ordering::Relaxed);
                pool.state().building_inits.push(pid);
            };
            let built = pool.builder.build(&job, &runner, started).await;
            {
                let mut state = pool.state();
                state.building.remove(&job.workspace);
                let init = init.load(Ordering::Relaxed);
                state.building_inits.retain(|&pid| pid != init);
            }
            match built {
                Ok(Some(ahead)) => pool.keep(ahead).await,
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "cannot build a sandbox for a conversation's next run"),
            }
        });
    }

    /// Keeps `ahead` until its run takes it or it has waited [`IDLE`]; the longest waiting gives way when full.
    async fn keep(self: &Arc<Self>, ahead: Ahead) {
        let (init, built) = (ahead.init_pid(), ahead.built);
        let let_go = {
            let mut state = self.state();
            if state.closed {
                vec![ahead]
            } else {
                state.ready.push(ahead);
                let over = (state.ready.len() + state.building.len()).saturating_sub(self.capacity);
                let over = over.min(state.ready.len());
                state.ready.sort_by_key(|ahead| ahead.built);
                state.ready.drain(..over).collect()
            }
        };
        for ahead in let_go {
            self.builder.end(ahead).await;
        }
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(IDLE).await;
            let Some(pool) = Weak::upgrade(&pool) else { return };
            let expired = {
                let mut state = pool.state();
                let index = state.ready.iter().position(|ahead| ahead.init_pid() == init && ahead.built == built);
                index.map(|index| state.ready.swap_remove(index))
            };
            if let Some(ahead) = expired {
                pool.builder.end(ahead).await;
            }
        });
    }

    /// Ends the sandbox waiting for `workspace`'s conversation, if any, and returns once it is gone.
    pub async fn forget(&self, workspace: &Path) {
        if let Some(ahead) = self.take(workspace) {
            self.builder.end(ahead).await;
        }
    }

    /// Ends every waiting sandbox and builds no more (the server stops): returns once their processes are gone.
    pub async fn close(&self) {
        let waiting = {
            let mut state = self.state();
            state.closed = true;
            std::mem::take(&mut state.ready)
        };
        for ahead in waiting {
            self.builder.end(ahead).await;
        }
    }

    /// Ends `ahead`, which its run could not use.
    pub async fn end(&self, ahead: Ahead) {
        self.builder.end(ahead).await;
    }

    /// Sandboxes waiting now.
    pub fn len(&self) -> usize {
        self.state().ready.len()
    }

    /// The host pids of the inits of the sandboxes waiting or being built (processes of no run yet).
    pub fn inits(&self) -> Vec<i32> {
        let state = self.state();
        state.ready.iter().map(Ahead::init_pid).chain(state.building_inits.iter().copied()).collect()
    }
}
