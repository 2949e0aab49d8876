//! The native backend's live sandboxes (`LiveBackend`): the jail's third process model, beside a server's runs and
//! `sandlot run`'s one-shot.
//!
//! A live sandbox is one init, cloned by the server's zygote as a run's is, with the same namespaces (user, mount,
//! pid, IPC, UTS, cgroup, and a network namespace of its own with only loopback, never a conversation's kept one:
//! no other sandbox or run ever shares its loopback), one cgroup slot bounding everything it runs (on cgroup v2 an
//! OOM kill takes the process the kernel picks, not the whole group), one run uid leased for its whole life, one
//! `/tmp`, the conversation and its mounts as a run sees them, and every runner's install prefixes bound (it serves
//! every language). Its pid 1 stays up and starts a process per `spawn` (see `sandbox::resident`).
//!
//! A server that is not root keeps them as it runs: without cgroups (rlimits stand in) and as its own uid. A
//! one-shot backend (`sandlot run`) has no zygote, and its one init is a run's: it cannot start one.
//! TypeScript's processes get `SANDLOT_ESBUILD` when tsx's esbuild was found (`runners::find_esbuild`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use sandlot_core::{Language, LiveBackend, LiveSandbox, LiveSpec};

use super::JailBackend;
use super::error::{Error, Result};
use super::init_process::LiveInit;
use super::launch::Launcher;
use super::live_forked::LiveFork;
use super::live_sandbox::LiveJail;
use super::live_state::{Held, LiveParts, LiveState};
use super::spec::{self, Resources};
use crate::protocol::HeldLock;

#[async_trait]
impl LiveBackend for JailBackend {
    async fn start(&self, live: LiveSpec) -> sandlot_core::Result<Arc<dyn LiveSandbox>> {
        tracing::debug!(sandbox = live.sandbox_id, "live sandbox requested");
        Ok(Arc::new(self.start_live(live).await?))
    }
}

impl JailBackend {
    async fn start_live(&self, live: LiveSpec) -> Result<LiveJail> {
        let Launcher::Server(pool) = &self.launcher else {
            return Err(Error::io(
                format!("start live sandbox {}", live.sandbox_id),
                std::io::Error::other("a one-shot backend (sandlot run) keeps no live sandbox: it has no zygote"),
            ));
        };
        let programs = self.live_programs();
        if programs.is_empty() {
            return Err(Error::io("start a live sandbox", std::io::Error::other("no runner")));
        }
        let owner = sandlot_core::Backend::storage_owner(self);
        sandlot_core::hand_over(&live.workspace, owner)
            .map_err(|e| Error::io(format!("hand over {}", live.workspace.display()), e))?;
        sandlot_core::hand_over_writable(&live.mounts, owner)
            .map_err(|e| Error::io(format!("hand over the volumes of live sandbox {}", live.sandbox_id), e))?;
        let uid = match self.root {
            true => Some(
                self.uids
                    .lease()
                    .map_err(|e| Error::io(format!("lease a sandbox uid for live sandbox {}", live.sandbox_id), e))?,
            ),
            false => None,
        };
        let cgroup = self
            .cgroups
            .acquire_for(&live.limits, false)
            .map_err(|e| Error::io(format!("set up cgroups for live sandbox {}", live.sandbox_id), e))?;
        let workspace_tree = match self.root {
            true => Some(
                crate::sys::mount::clone_tree(&live.workspace)
                    .map_err(|e| Error::io(format!("open_tree {}", live.workspace.display()), e.into()))?,
            ),
            false => None,
        };
        let holder_pid = std::process::id();
        let resources = Resources {
            cgroup: cgroup.as_ref().map(|c| (c.procs_files(), HeldLock { holder_pid, fd: c.lock_fd() })),
            uid: uid
                .as_ref()
                .map(|u| (u.uid(), HeldLock { holder_pid, fd: u.lock_fd() }, self.config.sandbox_uids.storage())),
            join_netns: None,
            workspace_tree: workspace_tree
                .as_ref()
                .map(|tree| HeldLock { holder_pid, fd: std::os::fd::AsRawFd::as_raw_fd(tree) }),
        };
        let jail_spec = spec::build_live(&live, self.live_binds(), resources);
        let python = self.runners.iter().find(|runner| runner.language == Language::Python);
        let fork = match (&self.templates, python, &uid) {
            (Some(templates), Some(python), Some(_)) => Some(LiveFork {
                templates: Arc::clone(templates),
                program: python.program.clone(),
                rlimits: jail_spec.rlimits.clone(),
                landlock: jail_spec.landlock,
                home: jail_spec.home.clone(),
                cgroup_procs: cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            }),
            _ => None,
        };
        let LiveInit { process, channel, events } = LiveInit::from_zygote(pool.zygote())?;
        let init = crate::sys::pidfd_open(process.pid()).map_err(|e| Error::io("open a pidfd for the init", e))?;
        let state = LiveState::new(LiveParts {
            id: live.sandbox_id,
            limits: live.limits,
            programs,
            env: jail_spec.env.clone(),
            esbuild: self.esbuild.as_ref().map(|(path, _)| path.clone()),
            channel,
            init,
            held: Held { cgroup, uid, workspace_tree },
        });
        LiveJail::start(state, process, events, &jail_spec, fork).await
    }

    /// What each language's processes exec: its runner's program; TypeScript's is the JavaScript runner's `node`
    /// (a driver strips types with esbuild, see `SANDLOT_ESBUILD`), or the TypeScript runner's when that is `node`.
    fn live_programs(&self) -> BTreeMap<Language, PathBuf> {
        let mut programs: BTreeMap<Language, PathBuf> =
            self.runners.iter().map(|runner| (runner.language, runner.program.clone())).collect();
        programs.remove(&Language::TypeScript);
        let node = programs.get(&Language::JavaScript).cloned().or_else(|| {
            self.runners
                .iter()
                .find(|r| r.language == Language::TypeScript && r.program.file_name().is_some_and(|n| n == "node"))
                .map(|r| r.program.clone())
        });
        if let Some(node) = node {
            programs.insert(Language::TypeScript, node);
        }
        programs
    }

    /// Every runner's install prefixes and esbuild's, each once: a live sandbox serves every language.
    pub(super) fn live_binds(&self) -> Vec<PathBuf> {
        live_binds(&self.runners, self.esbuild.as_ref().map(|(_, binds)| binds.as_slice()).unwrap_or(&[]))
    }
}

/// The union of `runners`' install prefixes and `more`, sorted, each once.
pub fn live_binds(runners: &[super::HostRunner], more: &[PathBuf]) -> Vec<PathBuf> {
    let mut binds: Vec<PathBuf> =
        runners.iter().flat_map(|r| r.extra_ro_binds.iter().cloned()).chain(more.iter().cloned()).collect();
    binds.sort();
    binds.dedup();
    binds
}
