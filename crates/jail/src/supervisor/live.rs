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
use super::live_sandbox::LiveJail;

#[async_trait]
impl LiveBackend for JailBackend {
    async fn start(&self, live: LiveSpec) -> sandlot_core::Result<Arc<dyn LiveSandbox>> {
        tracing::debug!(sandbox = live.sandbox_id, "live sandbox requested");
        let started = self.start_live(live).await;
        if started.is_err()
            && let Some(pool) = &self.live_pool
        {
            pool.refill(); // no first call will come to refill what a take may have left short
        }
        Ok(Arc::new(started?))
    }

    /// The live pool builds a taken sandbox's replacement now (see `live_pool`).
    fn first_call_ended(&self) {
        if let Some(pool) = &self.live_pool {
            pool.refill();
        }
    }
}

impl JailBackend {
    async fn start_live(&self, live: LiveSpec) -> Result<LiveJail> {
        let Some(maker) = &self.live_maker else {
            return Err(Error::io(
                format!("start live sandbox {}", live.sandbox_id),
                std::io::Error::other("a one-shot backend (sandlot run) keeps no live sandbox: it has no zygote"),
            ));
        };
        // A prepared sandbox has no link: a leashed one is built now.
        if live.network.is_none()
            && let Some(jail) = self.take_prepared_live(&live).await
        {
            return Ok(jail);
        }
        Ok(maker.build(live, false, drop).await?.0)
    }

    /// A prepared live sandbox (see `live_pool`) attached to `live`'s conversation, if one fits; `None`: build one.
    async fn take_prepared_live(&self, live: &LiveSpec) -> Option<LiveJail> {
        let prepared = self.live_pool.as_ref()?.take(live)?;
        let owner = sandlot_core::Backend::storage_owner(self);
        let tree = sandlot_core::hand_over(&live.workspace, owner)
            .and_then(|()| self.trees.tree(&live.workspace, prepared.run_uid))
            .map_err(|e| tracing::warn!(sandbox = live.sandbox_id, "cannot attach a prepared live sandbox: {e}"))
            .ok()?;
        match prepared.jail.attach(live.sandbox_id.clone(), tree).await {
            Ok(jail) => {
                tracing::debug!(sandbox = live.sandbox_id, "a prepared live sandbox attached");
                Some(jail)
            }
            Err(e) => {
                tracing::warn!(sandbox = live.sandbox_id, "cannot attach a prepared live sandbox: {e}");
                None
            }
        }
    }
}

/// What each language's processes exec: its runner's program; TypeScript's is the JavaScript runner's `node`
/// (a driver strips types with esbuild, see `SANDLOT_ESBUILD`), or the TypeScript runner's when that is `node`.
pub fn live_programs(runners: &[super::HostRunner]) -> BTreeMap<Language, PathBuf> {
    let mut programs: BTreeMap<Language, PathBuf> =
        runners.iter().map(|runner| (runner.language, runner.program.clone())).collect();
    programs.remove(&Language::TypeScript);
    let node = programs.get(&Language::JavaScript).cloned().or_else(|| {
        runners
            .iter()
            .find(|r| r.language == Language::TypeScript && r.program.file_name().is_some_and(|n| n == "node"))
            .map(|r| r.program.clone())
    });
    if let Some(node) = node {
        programs.insert(Language::TypeScript, node);
    }
    programs
}

/// The union of `runners`' install prefixes and `more`, sorted, each once.
pub fn live_binds(runners: &[super::HostRunner], more: &[PathBuf]) -> Vec<PathBuf> {
    let mut binds: Vec<PathBuf> =
        runners.iter().flat_map(|r| r.extra_ro_binds.iter().cloned()).chain(more.iter().cloned()).collect();
    binds.sort();
    binds.dedup();
    binds
}
