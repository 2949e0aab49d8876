//! sandlot-jail: the native Linux backend, the only crate with `unsafe`.
//!
//! Two halves share this crate:
//! - the **supervisor** ([`JailBackend`]), which lives in the (multi-threaded) server: it creates the run's cgroup,
//!   starts the init by re-executing the sandlot binary, feeds it the [`spec::JailSpec`], reads output with caps,
//!   enforces the deadline and the disk quota, and kills the whole tree;
//! - the **init** ([`init::run_main`]), a single-threaded process that builds the namespaces, the filesystem and the
//!   restrictions, and execs the interpreter.
//!
//! `docs/security.md` lists every layer and what it protects.

mod capabilities;
mod cgroup;
mod doctor;
mod error;
mod filesystem;
pub mod init;
mod landlock_rules;
mod launcher;
mod loopback;
mod mount_api;
mod pid1;
mod report;
mod rlimits;
mod runners;
mod seccomp;
pub mod spec;
mod supervisor;
mod warm_pool;
mod worker;

pub use cgroup::CgroupSupport;
pub use doctor::{Check, CheckStatus, diagnose};
pub use error::{Error, Result};
pub use launcher::Prefork;
pub use runners::{HostRunner, RunnerOverrides, discover_runners};
pub use supervisor::{INIT_SUBCOMMAND, JailBackend, JailConfig};
