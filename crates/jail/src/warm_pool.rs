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
    ready: Mutex<VecDeque<(InitProcess, InitPipes)>>,
}

impl WarmPool {
    /// A pool of `size` inits started by `starter` (0: no pool, every run starts its own).
    pub fn new(starter: InitStarter, size: usize) -> Arc<Self> {
        Arc::new(Self { starter, size, ready: Mutex::new(VecDeque::new()) })
    }

    fn ready(&self) -> std::sync::MutexGuard<'_, VecDeque<(InitProcess, InitPipes)>> {
        self.ready.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A ready init if one is alive, else one started now; tops the pool up in the background.
    pub fn take(self: &Arc<Self>) -> Result<(InitProcess, InitPipes)> {
        let taken = loop {
            let Some((mut init, pipes)) = self.ready().pop_front() else { break None };
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
    /// inits: an init's parent-death signal fires when the thread that started it exits).
    pub fn refill(self: &Arc<Self>) {
        if self.size == 0 || self.ready().len() >= self.size {
            return;
        }
        let pool = Arc::clone(self);
        tokio::spawn(async move {
            while pool.ready().len() < pool.size {
                match pool.starter.start() {
                    Ok(ready) => pool.ready().push_back(ready),
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

    /// Inits waiting now.
    pub fn len(&self) -> usize {
        self.ready().len()
    }
}
