//! sandlot-jail: the native Linux backend, the only crate with `unsafe`.
//!
//! Two halves share this crate:
//! - the **supervisor** ([`JailBackend`]), which lives in the (multi-threaded) server: it creates the run's cgroup,
//!   starts the init by re-executing the sandlot binary, feeds it the [`spec::JailSpec`], reads output with caps,
//!   enforces the deadline and the disk quota, and kills the whole tree;
//! - the **init** ([`init::run_main`]), a single-threaded process that builds the namespaces, the filesystem and the
//!   restrictions, and execs the interpreter; a server's inits are cloned by its [`zygote`].
//!
//! Both the init and the zygote are the sandlot binary itself, started with a hidden subcommand that
//! [`run_hidden_subcommand`] recognises.
//!
//! `docs/security.md` lists every layer and what it protects.

mod capabilities;
mod cgroup;
mod container;
mod cpu_placement;
mod doctor;
mod error;
mod filesystem;
mod host_uids;
mod idmap;
pub mod init;
mod landlock_rules;
mod launcher;
mod loopback;
mod mount_api;
mod netns_pool;
mod pid1;
mod pidfd_child;
mod pinned_netns;
mod report;
mod rlimits;
mod root_template;
mod runners;
mod seccomp;
pub mod spec;
mod supervisor;
mod warm_pool;
mod worker;
pub mod zygote;

pub use cgroup::CgroupSupport;
pub use doctor::{Check, CheckStatus, diagnose};
pub use error::{Error, Result};
pub use host_uids::{DEFAULT_UIDS, UidRange};
pub use launcher::Prefork;
pub use pinned_netns::PinnedNetns;
pub use root_template::TEMPLATE_DIR_NAME;
pub use runners::{HostRunner, RefusedRunner, RunnerOverrides, discover_runners, protected_dirs, screen_runners};
pub use spec::HeadStart;
pub use supervisor::{INIT_SUBCOMMAND, JailBackend, JailConfig};

/// Becomes the jail init or the zygote when the process was started as one (`argv[1]` is a hidden subcommand), and
/// never returns then; otherwise returns at once. Call it first thing in `main`, before any thread exists.
pub fn run_hidden_subcommand() {
    let mut args = std::env::args_os();
    match args.nth(1).as_deref().and_then(std::ffi::OsStr::to_str) {
        Some(INIT_SUBCOMMAND) => {
            let report_fd = args.next().and_then(|a| a.to_str().and_then(|s| s.parse().ok())).unwrap_or(-1);
            init::run_main(report_fd)
        }
        Some(zygote::ZYGOTE_SUBCOMMAND) => zygote::run_main(),
        _ => {}
    }
}
