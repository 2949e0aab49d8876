//! A server's inits, cloned by its zygote ahead of time: each waits for its spec, so a run takes a ready one and its
//! start is off the run's path. A warm init has no namespace, cgroup or secret yet: everything specific to a run
//! comes with its spec. Each is used once; the pool is topped up in the background after every take.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::error::Result;
use super::init_process::Init;
use super::zygote::Zygote;

/// A pool of started, waiting inits.
pub struct WarmPool {
    zygote: Zygote,
    size: usize,
    state: Mutex<State>,
}

/// The inits waiting, and how many are being started for the pool.
#[derive(Default)]
struct State {
    ready: VecDeque<Init>,
    /// Invariant: `ready.len() + starting <= size`. Every take starts a refill task; on a loaded machine they
    /// overlap, and a task that counted only the ready inits filled the pool past its size.
    starting: usize,
}

impl WarmPool {
    /// A pool of `size` inits cloned by `zygote` (0: no pool, every run has its own cloned).
    pub fn new(zygote: Zygote, size: usize) -> Arc<Self> {
        Arc::new(Self { zygote, size, state: Mutex::default() })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A ready init if one is alive, else one started now; tops the pool up in the background.
    pub fn take(self: &Arc<Self>) -> Result<Init> {
        let taken = loop {
            let Some(mut init) = self.state().ready.pop_front() else { break None };
            if init.process.is_alive() {
                break Some(init);
            }
            tracing::warn!("a warm jail init died while waiting; discarding it");
        };
        self.refill();
        match taken {
            Some(ready) => Ok(ready),
            None => Init::from_zygote(&self.zygote),
        }
    }

    /// Starts inits until the pool is full, in a task of the current runtime. Each start reserves its place first,
    /// so refills running at once never start more than the pool lacks.
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
                let started = Init::from_zygote(&pool.zygote);
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

    /// The zygote that clones the inits.
    pub fn zygote(&self) -> &Zygote {
        &self.zygote
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
