//! Where a run's init comes from: one path per process model ([`ProcessModel`]).
//! - **Server**: the [`Zygote`] clones each init; a [`WarmPool`] keeps a few waiting, so a run takes a ready one.
//! - **One-shot** (`sandlot run`): the command forks the init of its one run at the start of `main`, while it is
//!   single-threaded ([`crate::fork_init_for_one_shot`]), and hands it to the backend ([`ForkedInit`]).
//!
//! A server cannot fork inits itself: it is multi-threaded, and a fork of a multi-threaded process may only call
//! async-signal-safe functions. Either way the init is the same clone (`sandbox::fork_init`) with the same four
//! descriptors (see `protocol`), and the supervisor holds it as an `Init` (`init_process.rs`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::error::{Error, Result};
use super::init_process::{Init, InitEnds};
use super::warm_pool::WarmPool;
use super::zygote::Zygote;
use crate::protocol::{SkeletonRequest, ZygoteSetup};

/// How the processes of runs are started: chosen once, by whoever makes the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessModel {
    /// A server: a zygote clones every init, `warm_inits` of them kept started and waiting.
    Server { warm_inits: usize },
    /// One run by a command that forked its init first thing (see [`crate::fork_init_for_one_shot`]).
    OneShot,
}

/// The init `sandlot run` forked at the start of `main`, for its one run.
#[derive(Debug)]
pub struct ForkedInit {
    pid: i32,
    ends: InitEnds,
}

impl ForkedInit {
    pub fn new(pid: i32, ends: InitEnds) -> Self {
        Self { pid, ends }
    }
}

/// Gives out inits, as the process model says.
pub enum Launcher {
    Server(Arc<WarmPool>),
    OneShot(Mutex<Option<ForkedInit>>),
}

impl Launcher {
    /// A launcher for `model`; a server's starts its zygote now, which caches `skeleton` if given.
    pub fn new(model: &ProcessModel, program: PathBuf, skeleton: Option<SkeletonRequest>) -> Result<Self> {
        Ok(match model {
            ProcessModel::Server { warm_inits } => {
                let zygote = Zygote::start(program, ZygoteSetup { skeleton })?;
                Self::Server(WarmPool::new(zygote, *warm_inits))
            }
            ProcessModel::OneShot => Self::OneShot(Mutex::new(None)),
        })
    }

    /// An init for the next run.
    pub fn take(&self) -> Result<Init> {
        match self {
            Self::Server(pool) => pool.take(),
            Self::OneShot(forked) => {
                let forked = forked.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
                let forked = forked.ok_or_else(|| {
                    Error::io(
                        "start the run",
                        std::io::Error::other("a one-shot backend runs once, with a forked init"),
                    )
                })?;
                Init::adopt(forked.pid, forked.ends)
            }
        }
    }

    /// Hands a one-shot launcher the init forked for its run.
    pub fn hand_over(&self, init: ForkedInit) {
        if let Self::OneShot(forked) = self {
            *forked.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(init);
        }
    }
}
