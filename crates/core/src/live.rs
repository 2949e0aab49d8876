//! The seam between the engine and a backend's live sandboxes: a sandbox per conversation that outlives a call.
//!
//! A backend that can keep a sandbox up implements [`LiveBackend`]. A [`LiveSandbox`] is one set of namespaces (or one
//! container) with one cgroup for everything it runs, one `/tmp`, one loopback and the conversation's files, kept
//! until [`LiveSandbox::close`] or until it ends by itself (its init died, it was out of memory as a whole). Every
//! process in it dies with it. The engine's session manager (`sessions/`) decides when sandboxes start and end and
//! what runs in them; the backend only starts, spawns into, measures and ends them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{ConversationId, Language, Layout, Limits, Mount, Result, Termination};

/// What a live sandbox is made with.
#[derive(Debug, Clone)]
pub struct LiveSpec {
    /// Unique id of this sandbox (used for cgroup and container names, and in logs).
    pub sandbox_id: String,
    pub conversation: ConversationId,
    /// Memory, pids, CPU and `/tmp` bound the whole sandbox, everything it runs together. `timeout` and
    /// `max_output_bytes` are per call and the engine's business: the backend ignores them.
    pub limits: Limits,
    /// The conversation's directory on the host, mounted read-write at `layout.conversation_path()`; it exists.
    pub workspace: PathBuf,
    pub layout: Layout,
    /// Host directories bound at their paths, as for a run.
    pub mounts: Vec<Mount>,
    /// What it may reach beyond its loopback, for its whole life: `None`, loopback only (see `network`).
    pub network: Option<crate::JobNetwork>,
}

/// A process to start in a live sandbox: the backend's interpreter for `language` with `args` after it (`python3
/// args...`, `node args...`, `bash args...`). For TypeScript the backend starts its JavaScript interpreter (`node`)
/// and sets `SANDLOT_ESBUILD` to a path `require()` loads esbuild from, so a driver can strip types itself.
#[derive(Debug, Clone)]
pub struct Spawn {
    pub language: Language,
    pub args: Vec<String>,
    /// Added to the sandbox's usual environment (`HOME`, `PATH`, `LANG`, `TMPDIR`...).
    pub env: BTreeMap<String, String>,
}

/// A process started in a live sandbox: its three streams and its handle. The process runs as the sandbox's user,
/// confined as a run's program is, in its own session (process group) inside the sandbox; what it starts stays in
/// the sandbox when it exits.
pub struct LiveProcess {
    pub stdin: Pin<Box<dyn AsyncWrite + Send>>,
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    pub stderr: Pin<Box<dyn AsyncRead + Send>>,
    pub handle: Arc<dyn ProcessHandle>,
}

/// A handle on a process of a live sandbox.
#[async_trait]
pub trait ProcessHandle: Send + Sync {
    /// Its pid as the sandbox sees it.
    fn pid(&self) -> u32;
    /// Sends `signal` to the process, or to its whole process group when `group`. A process that has ended is not
    /// an error.
    async fn signal(&self, signal: i32, group: bool) -> Result<()>;
    /// Waits for the process to end: `Exited` or `Signaled` (or `OutOfMemory` when the kernel's OOM killer took it,
    /// when the backend can tell). Cancel-safe; may be called again after it returned.
    async fn wait(&self) -> Termination;
}

/// What a live sandbox uses now, against its limits.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SandboxUsage {
    pub memory_bytes: u64,
    pub memory_limit_bytes: u64,
    /// Processes and threads.
    pub pids: u64,
    pub pids_limit: u64,
    /// CPU time used since the sandbox started.
    pub cpu_seconds: f64,
    /// Processes the kernel's OOM killer ended in this sandbox since it started.
    pub oom_kills: u64,
}

/// One process of a live sandbox, as `ps` would show it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SandboxProcess {
    /// Its pid as the sandbox sees it.
    pub pid: u32,
    /// Its command line, arguments joined by spaces (cut to 256 bytes).
    pub command: String,
    pub cpu_seconds: f64,
    /// Resident memory.
    pub memory_bytes: u64,
}

/// A sandbox that stays up between calls.
#[async_trait]
pub trait LiveSandbox: Send + Sync {
    /// The id it was made with.
    fn id(&self) -> &str;
    /// Starts a process in it.
    async fn spawn(&self, spawn: Spawn) -> Result<LiveProcess>;
    /// Its usage now.
    async fn usage(&self) -> SandboxUsage;
    /// Its processes now (the backend's own helpers, such as the jail's pid 1, left out).
    async fn processes(&self) -> Vec<SandboxProcess>;
    /// Whether it still runs: false once it ended by itself or was closed.
    fn is_alive(&self) -> bool;
    /// Raises its memory limit to `memory_mb` and its process limit to `pids` where they are below (never lowers
    /// them): what a browser started in a sandbox made for code needs. A backend that cannot says so.
    async fn raise_limits(&self, memory_mb: u64, pids: u64) -> Result<()> {
        let _ = (memory_mb, pids);
        Err(crate::Error::Backend {
            backend: "live",
            message: "this backend cannot raise a live sandbox's limits".into(),
        })
    }
    /// Ends it: every process in it killed, its cgroup, mounts, uid, network namespace or container released.
    /// Idempotent; returns when everything is gone.
    async fn close(&self);
    /// Its egress network, when it is on a leash: the sessions say which run is current and take each call's
    /// connections from it.
    fn egress(&self) -> Option<Arc<sandlot_egress::SandboxNetwork>> {
        None
    }
}

/// A backend that can keep sandboxes up.
#[async_trait]
pub trait LiveBackend: Send + Sync {
    /// Starts a sandbox for a conversation. Errors are the backend's faults (no cgroup, no image...).
    async fn start(&self, spec: LiveSpec) -> Result<Arc<dyn LiveSandbox>>;

    /// The first call in a sandbox [`LiveBackend::start`] gave has ended (however it ended): a backend that builds
    /// sandboxes ahead builds the next one now, not beside that call, whose cores it would take. Nothing by default.
    fn first_call_ended(&self) {}
}
