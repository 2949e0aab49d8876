//! The seam between the engine and an isolation technology.

use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;

use crate::{Language, Limits, OutputSink, ReadinessCheck, Result, RunOutcome};

/// A runner a backend can use for one language.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RunnerInfo {
    pub language: Language,
    /// The Docker image, or the host interpreter's path for the native jail.
    pub image: String,
    /// The interpreter's version as it reports it.
    pub version: String,
    /// Key packages the runner has, name → version (for Python: numpy, pandas, matplotlib when installed), so a
    /// model does not guess what it can import. Empty when none or not probed.
    #[serde(default)]
    pub packages: BTreeMap<String, String>,
}

/// A validated run, ready for a backend.
#[derive(Debug, Clone)]
pub struct Job {
    /// Unique id of this run (used for cgroup and container names).
    pub run_id: String,
    pub language: Language,
    pub code: String,
    /// The code is an ES module and runs from a `.mjs` file (JavaScript only): set for TypeScript stripped in the
    /// server when the result has module syntax, so a node without module detection runs it too.
    pub es_module: bool,
    pub stdin: Vec<u8>,
    pub env: BTreeMap<String, String>,
    pub limits: Limits,
    /// The host directory mounted read-write at `layout.conversation_path()`; it exists.
    pub workspace: PathBuf,
    /// Where the sandbox mounts `workspace`, and whether `/data` is a scratch directory instead.
    pub layout: crate::Layout,
    /// Host directories bound at their paths, read-only unless said otherwise (validated: see [`crate::Mount`]).
    pub mounts: Vec<crate::Mount>,
    /// What the run may reach beyond its loopback: `None`, loopback only (see `network`).
    pub network: Option<crate::JobNetwork>,
    /// Cancelled when the caller gives up: the backend kills the sandbox and reports `Termination::Cancelled`.
    pub cancel: tokio_util::sync::CancellationToken,
}

/// An isolation technology: runs one job at a time per call, concurrently across calls.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Short name (`native`, `docker`).
    fn name(&self) -> &'static str;

    /// The languages this backend can run now.
    fn runners(&self) -> Vec<RunnerInfo>;

    /// Runs the job to its end, passing output to `sink` as it comes. Errors are faults of the backend, never of
    /// the code: a program that fails, times out or runs out of memory is a normal [`RunOutcome`].
    async fn run(&self, job: Job, sink: &dyn OutputSink) -> Result<RunOutcome>;

    /// The uid and gid that own a conversation's `/data` on the host while this backend's runs use it (what it
    /// gives the directory with [`crate::hand_over`]), or `None` when the server cannot change owners (not root).
    /// Files the server writes there (uploads) are given to it, so runs can read, change and remove them.
    fn storage_owner(&self) -> Option<(u32, u32)> {
        None
    }

    /// Kills every run still going, when the process is about to exit without waiting for them. Backends whose
    /// sandboxes die with the process (the native jail: its inits have a parent-death signal) have nothing to do.
    async fn abort_all(&self) {}

    /// Removes what a predecessor that crashed left behind (processes, cgroups, containers, temporary files), at
    /// the start of a server.
    async fn remove_leftovers(&self) {}

    /// Whether runs can start now, one check per thing that must hold (see `readiness`): cheap (a probe may ask
    /// every second; the engine caches the answer for a second and gives up after two). Empty: the engine only
    /// checks that there are runners.
    async fn readiness(&self) -> Vec<ReadinessCheck> {
        Vec::new()
    }

    /// Lets go of whatever the backend keeps for the conversation whose files directory is `workspace` between its
    /// runs (a sandbox ready for its next run, and with it its hold on the conversation): the engine is about to
    /// remove it. Returns once nothing of it holds the conversation any more.
    async fn forget_conversation(&self, _workspace: &std::path::Path) {}

    /// The backend's live sandboxes (`session: true` runs), or `None` when it cannot keep a sandbox up.
    fn live(&self) -> Option<&dyn crate::LiveBackend> {
        None
    }
}
