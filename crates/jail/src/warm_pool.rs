//! Inits started ahead of time. An init spends its first ~0.2 ms (cloned by the zygote) or ~1.5 ms (exec'd) being
//! started, and then waits for its
//! spec on stdin; a server keeps a few waiting, so a run takes a ready one and only that wait is left on its path.
//! A warm init has no namespace, cgroup or secret yet: everything specific to a run comes with its spec. Each is
//! used once; the pool is topped up in the background after every take.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::Result;
use crate::launcher::{InitPipes, InitProcess, InitStarter};

/// A pool of started, waiting inits.
pub struct WarmPool {
    starter: InitStarter,
    size: usize,
    state: Mutex<State>,
}

/// The inits waiting, and how many are being started for the pool.
#[derive(Default)]
struct State {
    ready: VecDeque<(InitProcess, InitPipes)>,
    /// Invariant: `ready.len() + starting <= size`. Every take starts a refill task; on a loaded machine they
    /// overlap, and a task that counted only the ready inits filled the pool past its size.
    starting: usize,
}

impl WarmPool {
    /// A pool of `size` inits started by `starter` (0: no pool, every run starts its own).
    pub fn new(starter: InitStarter, size: usize) -> Arc<Self> {
        Arc::new(Self { starter, size, state: Mutex::default() })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A ready init if one is alive, else one started now; tops the pool up in the background.
    pub fn take(self: &Arc<Self>) -> Result<(InitProcess, InitPipes)> {
        let taken = loop {
            let Some((mut init, pipes)) = self.state().ready.pop_front() else { break None };
            if init.is_alive() {
                break Some((init, pipes));
            }
            tracing::warn!("a warm jail init died while waiting; discarding it");
        };
        self.refill();
        match taken {
            Some(ready) => Ok(ready),
            None => self.starter.start(),
        }
    }

    /// Starts inits until the pool is full, in a task of the current runtime (whose worker threads outlive the
    /// inits: an init's parent-death signal fires when the thread that started it exits). Each start reserves its
    /// place first, so refills running at once never start more than the pool lacks.
    pub fn refill(self: &Arc<Self>) {
        if self.size == 0 || self.lacking() == 0 {
            return;
        }
        let pool = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                {
                    let mut state = pool.state();
                    if state.ready.len() + state.starting >= pool.size {
                        return;
                    }
                    state.starting += 1;
                }
                let started = pool.starter.start();
                let mut state = pool.state();
                state.starting -= 1;
                match started {
                    Ok(ready) => state.ready.push_back(ready),
                    Err(e) => {
                        tracing::warn!("cannot start a warm jail init: {e}");
                        return;
                    }
                }
            }
        });
    }

    /// What starts the inits.
    pub fn starter(&self) -> &InitStarter {
        &self.starter
    }

    /// How many inits the pool lacks, counting those being started.
    fn lacking(&self) -> usize {
        let state = self.state();
        self.size.saturating_sub(state.ready.len() + state.starting)
    }

    /// Inits waiting now.
    pub fn len(&self) -> usize {
        self.state().ready.len()
    }
}
