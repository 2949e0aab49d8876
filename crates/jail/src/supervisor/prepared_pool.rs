//! The server's prepared sandboxes (see `prepared`): up to `size` per Python template, for the sandbox limits (memory,
//! CPU, processes, `/tmp`: what is set before the run comes) of the latest Python run. A server's runs mostly share
//! the operator's defaults, which the pool prepares for from the start; the first run of other limits is not
//! prepared for, and the pool prepares for those from then on. A taken sandbox's replacement is built when the run
//! that took it ends (`JailBackend::run` refills), not beside it: on a small machine a build beside the run slows it
//! down. So a burst of at most `size` runs per template finds every sandbox ready. Under load (as many runs in flight as the machine has cores) it builds none: the cores are the limit
//! then, and a run built on its path costs less CPU than a prepared one (it joins its conversation's kept network
//! namespace where a prepared sandbox makes and tears down one of its own). A build that fails stops the refills for
//! a while.
//!
//! Invariants: `ready` holds only sandboxes of `limits`; `ready` of a template plus those being built for it never
//! exceed `size`; every sandbox let go is killed and its slot and uid released.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sandlot_core::Limits;

use super::prepared::{Builder, Prepared};
use super::python_template::Choice;

/// How long refills pause after a build failed.
const BACKOFF: Duration = Duration::from_secs(2);
/// How long a server's first preparations wait for its templates to get ready.
const TEMPLATES_START: Duration = Duration::from_secs(120);

/// Prepared sandboxes waiting for their run.
pub struct PreparedPool {
    builder: Builder,
    size: usize,
    state: Mutex<State>,
    /// Runs in flight on the backend now, and from how many on the pool builds none.
    in_flight: Arc<AtomicUsize>,
    busy_at: usize,
}

#[derive(Default)]
struct State {
    ready: Vec<Prepared>,
    /// Sandboxes being built, for the bare and the loaded template.
    building: [usize; 2],
    /// The inits of those being built, once started.
    building_inits: Vec<i32>,
    /// The limits of the latest Python run: what the pool prepares for (`None` before the first, and once closed).
    limits: Option<Limits>,
    /// The server is stopping: nothing more is built or handed out.
    closed: bool,
    /// No refill before then (a build failed).
    paused_until: Option<Instant>,
}

impl PreparedPool {
    /// A pool of `size` sandboxes per template, built by `builder` (`size` 0: none).
    /// `in_flight` counts the backend's runs in flight.
    pub fn new(builder: Builder, size: usize, in_flight: Arc<AtomicUsize>) -> Arc<Self> {
        let busy_at = std::thread::available_parallelism().map_or(2, |cores| cores.get());
        Arc::new(Self { builder, size, state: Mutex::default(), in_flight, busy_at })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The builder's parts (the idmapped trees a run needs).
    pub fn builder(&self) -> &Builder {
        &self.builder
    }

    /// Ends every waiting sandbox and builds no more (the server stops): returns once their processes are gone.
    pub async fn close(&self) {
        let waiting = {
            let mut state = self.state();
            state.closed = true;
            state.limits = None;
            std::mem::take(&mut state.ready)
        };
        for prepared in waiting {
            prepared.end().await;
        }
    }

    /// Prepares for runs of `limits` once the templates are ready (the server's defaults, at its start).
    pub fn prepare_for(self: &Arc<Self>, limits: &Limits) {
        let mut state = self.state();
        if state.closed {
            return;
        }
        state.limits.get_or_insert_with(|| sandbox_limits(limits));
        drop(state);
        let pool = Arc::clone(self);
        tokio::spawn(async move {
            let deadline = Instant::now() + TEMPLATES_START;
            while pool.choices().is_empty() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            pool.refill();
        });
    }

    /// A prepared sandbox for a run of `limits` whose child is forked from the template of `choice`, if one is
    /// waiting; the pool prepares for `limits` from now on, refilled once the run ends (`refill`).
    pub fn take(self: &Arc<Self>, choice: Choice, limits: &Limits) -> Option<Prepared> {
        if self.size == 0 {
            return None;
        }
        let limits = &sandbox_limits(limits);
        let (taken, let_go) = {
            let mut state = self.state();
            if state.closed {
                return None;
            }
            let mut let_go = Vec::new();
            if state.limits.as_ref() != Some(limits) {
                state.limits = Some(limits.clone());
                let_go = std::mem::take(&mut state.ready);
            }
            let mut taken = None;
            while let Some(at) = state.ready.iter().position(|prepared| prepared.choice == choice) {
                let mut prepared = state.ready.swap_remove(at);
                if prepared.is_alive() {
                    taken = Some(prepared);
                    break;
                }
                tracing::warn!("a prepared sandbox died while it waited; letting it go");
                let_go.push(prepared);
            }
            (taken, let_go)
        };
        let_go.into_iter().for_each(Prepared::discard);
        taken
    }

    /// Starts building what the pool lacks, each sandbox in a task of its own (on the current runtime).
    pub fn refill(self: &Arc<Self>) {
        if self.in_flight.load(Ordering::Relaxed) >= self.busy_at {
            return;
        }
        for choice in self.choices() {
            loop {
                let limits = {
                    let mut state = self.state();
                    let Some(limits) = state.limits.clone() else { return };
                    if state.paused_until.is_some_and(|until| Instant::now() < until) {
                        return;
                    }
                    let ready = state.ready.iter().filter(|prepared| prepared.choice == choice).count();
                    if ready + state.building[choice as usize] >= self.size {
                        break;
                    }
                    state.building[choice as usize] += 1;
                    limits
                };
                let pool = Arc::clone(self);
                tokio::spawn(async move {
                    let mut init = None;
                    let built = pool
                        .builder
                        .build(choice, &limits, |pid| {
                            init = Some(pid);
                            pool.state().building_inits.push(pid);
                        })
                        .await;
                    let mut state = pool.state();
                    state.building[choice as usize] -= 1;
                    state.building_inits.retain(|pid| Some(*pid) != init);
                    match built {
                        Ok(prepared) if state.limits.as_ref() == Some(&prepared.limits) => state.ready.push(prepared),
                        Ok(stale) => {
                            drop(state);
                            stale.discard();
                        }
                        Err(e) => {
                            state.paused_until = Some(Instant::now() + BACKOFF);
                            tracing::warn!("cannot prepare a sandbox for Python runs (retrying in {BACKOFF:?}): {e}");
                        }
                    }
                });
            }
        }
    }

    /// The templates whose children are prepared: those ready now (the bare one, and the loaded one if any).
    fn choices(&self) -> Vec<Choice> {
        let templates = &self.builder.templates;
        [Choice::Bare, Choice::Loaded]
            .into_iter()
            .filter(|&choice| choice == Choice::Bare || templates.has_loaded())
            .filter(|&choice| templates.can_fork(&self.builder.runner.program, choice))
            .collect()
    }

    /// The host pids of the inits of every sandbox the pool holds or builds (each the parent of its sandbox's pid 1).
    pub fn inits(&self) -> Vec<i32> {
        let state = self.state();
        state.ready.iter().map(Prepared::init_pid).chain(state.building_inits.iter().copied()).collect()
    }

    /// Sandboxes waiting now.
    pub fn len(&self) -> usize {
        self.state().ready.len()
    }
}

/// What of `limits` a prepared sandbox is built with (its cgroup's and its `/tmp`'s); the rest is the run's own.
fn sandbox_limits(limits: &Limits) -> Limits {
    Limits {
        memory_mb: limits.memory_mb,
        cpus: limits.cpus,
        pids: limits.pids,
        tmp_mb: limits.tmp_mb,
        ..Limits::default()
    }
}
