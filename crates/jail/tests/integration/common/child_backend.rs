//! A test-only [`Backend`] that runs each job in a child process of the test binary, so the attack suite reaches the
//! launch paths an in-process backend cannot: the one-shot model (the init forked first thing in `main`, while the
//! process is single-threaded, as `sandlot run` does) and the unprivileged modes (the child runs as a plain uid).
//!
//! The parent sends a [`ChildJob`] as JSON on the child's stdin; the child ([`serve_if_child`], called from
//! `common::serve_if_re_executed` before anything else) runs it on a [`JailBackend`] of its own and prints the `Result` of the run as
//! JSON on stdout. Output is not streamed: the sink gets nothing, the engine reads the final outcome.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sandlot_core::{Backend, Job, Language, Limits, OutputSink, RunOutcome, RunnerInfo, Termination};
use sandlot_jail::{JailBackend, JailConfig, ProcessModel, UidRange};
use tokio::io::AsyncWriteExt;

/// The environment variable that makes the test binary a child: its value names the process model.
const CHILD_MARKER: &str = "SANDLOT_TEST_CHILD";

/// The process model a child builds its backend with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildModel {
    /// `ProcessModel::OneShot`, with the init forked at the child's start.
    OneShot,
    /// `ProcessModel::Server { warm_inits: 0 }`: the child's zygote clones the init.
    Server,
}

impl ChildModel {
    fn marker(self) -> &'static str {
        match self {
            Self::OneShot => "one-shot",
            Self::Server => "server",
        }
    }
}

/// What the child needs of a [`Job`] (layout `Data`, no mounts), and of the parent's backend configuration.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ChildJob {
    run_id: String,
    language: Language,
    code: String,
    es_module: bool,
    stdin: Vec<u8>,
    env: BTreeMap<String, String>,
    limits: Limits,
    workspace: PathBuf,
    /// The parent's sandbox uid range (first, last): derived from the parent's pid, which the child does not share.
    uids: (u32, u32),
    data_root: PathBuf,
}

/// Runs each job in a child process, as root or as `caller` (a plain uid, for the unprivileged paths).
pub struct ChildBackend {
    model: ChildModel,
    caller: Option<u32>,
    data_root: PathBuf,
    /// A one-shot backend of the parent's: starts no process, only answers `runners`.
    runners: JailBackend,
}

impl ChildBackend {
    pub fn new(model: ChildModel, caller: Option<u32>, data_root: PathBuf) -> Self {
        let mut config = child_config(super::sandbox_uids(), data_root.clone());
        config.model = ProcessModel::OneShot;
        let runners = JailBackend::new(config).expect("a one-shot backend for the runners");
        Self { model, caller, data_root, runners }
    }
}

/// The configuration a child builds its backend from (the model set by the caller).
fn child_config(uids: UidRange, data_root: PathBuf) -> JailConfig {
    let mut config = JailConfig::new(std::env::current_exe().expect("test binary"));
    config.sandbox_uids = uids;
    config.probe_versions = false;
    config.model = ProcessModel::OneShot;
    config.data_root = Some(data_root);
    config
}

#[async_trait]
impl Backend for ChildBackend {
    fn name(&self) -> &'static str {
        "native-in-a-child"
    }

    fn runners(&self) -> Vec<RunnerInfo> {
        self.runners.runners()
    }

    /// What the child's backend gives a conversation's directory: as root the storage uid (`JailBackend`'s own
    /// answer), unprivileged the caller's uid, whose runs see it as their own through the user namespace.
    fn storage_owner(&self) -> Option<(u32, u32)> {
        match self.caller {
            None => self.runners.storage_owner(),
            Some(uid) => Some((uid, uid)),
        }
    }

    async fn run(&self, job: Job, _sink: &dyn OutputSink) -> sandlot_core::Result<RunOutcome> {
        let fault = |message: String| sandlot_core::Error::Backend { backend: "native-in-a-child", message };
        if let Some(uid) = self.caller {
            // `<root>/<id>` and its `files` are private to the server (0700) and made by this one, root. An
            // unprivileged server owns its whole root: both are given to the caller the child runs as.
            for dir in job.workspace.parent().into_iter().chain([job.workspace.as_path()]) {
                std::os::unix::fs::chown(dir, Some(uid), Some(uid))
                    .map_err(|e| fault(format!("chown {}: {e}", dir.display())))?;
            }
        }
        let uids = super::sandbox_uids();
        let request = ChildJob {
            run_id: job.run_id.clone(),
            language: job.language,
            code: job.code.clone(),
            es_module: job.es_module,
            stdin: job.stdin.clone(),
            env: job.env.clone(),
            limits: job.limits.clone(),
            workspace: job.workspace.clone(),
            uids: (uids.storage(), *uids.run_uids().end()),
            data_root: self.data_root.clone(),
        };
        let mut command = tokio::process::Command::new(std::env::current_exe().expect("test binary"));
        command
            .env(CHILD_MARKER, self.model.marker())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(uid) = self.caller {
            // std drops the supplementary groups itself (setgroups(0)) when root sets a uid and no groups.
            command.uid(uid).gid(uid);
        }
        let mut child = command.spawn().map_err(|e| fault(format!("spawn the child: {e}")))?;
        let json = serde_json::to_vec(&request).map_err(|e| fault(e.to_string()))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(&json).await.map_err(|e| fault(format!("send the job: {e}")))?;
        drop(stdin);
        let started = Instant::now();
        // Cancelling drops the child, which kills it (`kill_on_drop`); its init dies with it (parent-death signal).
        let output = tokio::select! {
            output = child.wait_with_output() => output.map_err(|e| fault(format!("wait for the child: {e}")))?,
            () = job.cancel.cancelled() => return Ok(RunOutcome::empty(Termination::Cancelled, started.elapsed())),
            () = tokio::time::sleep(job.limits.timeout + CHILD_SLACK) => {
                return Err(fault(format!("the child still runs {:?} after its deadline", CHILD_SLACK)));
            }
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        let answer = stdout.lines().last().unwrap_or_default();
        let result: Result<RunOutcome, String> = serde_json::from_str(answer).map_err(|e| {
            fault(format!(
                "the child ({}) gave no outcome ({e})\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        })?;
        result.map_err(|e| fault(format!("the child's backend failed: {e}")))
    }
}

/// In a child (the marker is set): runs the one job it is sent and exits; otherwise returns at once. Call it first
/// thing in `main` (after `run_hidden_subcommand`): a one-shot child forks its init here, before any thread exists.
pub fn serve_if_child() {
    let Some(marker) = std::env::var_os(CHILD_MARKER) else { return };
    let model = if marker == ChildModel::OneShot.marker() { ChildModel::OneShot } else { ChildModel::Server };
    let init = match model {
        ChildModel::OneShot => match sandlot_jail::fork_init_for_one_shot() {
            Ok(init) => Some(init),
            Err(e) => answer(Err(format!("fork the init: {e}"))),
        },
        ChildModel::Server => None,
    };
    answer(run_in_child(model, init))
}

fn run_in_child(model: ChildModel, init: Option<sandlot_jail::ForkedInit>) -> Result<RunOutcome, String> {
    let mut json = Vec::new();
    std::io::stdin().read_to_end(&mut json).map_err(|e| format!("read the job: {e}"))?;
    let request: ChildJob = serde_json::from_slice(&json).map_err(|e| format!("parse the job: {e}"))?;
    let uids = UidRange::new(request.uids.0, request.uids.1)?;
    let mut config = child_config(uids, request.data_root);
    if model == ChildModel::Server {
        config.model = ProcessModel::Server { warm_inits: 0 };
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let backend = JailBackend::new(config).map_err(|e| format!("the backend: {e}"))?;
        if let Some(init) = init {
            backend.use_forked_init(init);
        }
        let job = Job {
            run_id: request.run_id,
            language: request.language,
            code: request.code,
            es_module: request.es_module,
            stdin: request.stdin,
            env: request.env,
            limits: request.limits,
            workspace: request.workspace,
            layout: sandlot_core::Layout::Data,
            mounts: Vec::new(),
            network: None,
            cancel: tokio_util::sync::CancellationToken::new(),
        };
        backend.run(job, &()).await.map_err(|e| e.to_string())
    })
}

/// Prints the child's answer as the last line of its stdout and exits.
fn answer(result: Result<RunOutcome, String>) -> ! {
    let json = serde_json::to_string(&result).unwrap_or_else(|e| format!("{{\"Err\":\"serialize: {e}\"}}"));
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{json}").and_then(|()| stdout.flush());
    std::process::exit(0)
}

/// How long a child may take beyond its run's deadline before the parent gives up on it (and kills it).
const CHILD_SLACK: Duration = Duration::from_secs(60);
