//! Background shells (`Bash` with `run_in_background`, `BashOutput`, `KillShell`;
//! `docs/profiles.md#codegen-sandbox-bash-and-scrubbing`). A background command is a sandlot run that outlives its
//! call: a spawned task holds `Engine::run_as` (recorded in the history like any run; it releases its conversation's
//! turn so the workspace's next commands need not wait for it) with its own cancellation token, a child of the
//! server's shutdown token; on a backend with live sandboxes it runs as a process of its own in the workspace's live
//! sandbox (`SessionUse::Process`), beside the persistent shell of `Bash`. Its output is buffered here, 1 MiB per stream. It ends by itself, at its timeout (the one
//! given, else the longest, 600 s), by `KillShell` (the sandbox and every process in it are killed before the answer),
//! or when the server stops.
//!
//! Bounded: a tenant (a caller, whichever of its workspaces the shell runs in) holds at most
//! [`MAX_SHELLS_PER_TENANT`] shells and the server [`MAX_SHELLS`]; a new one forgets the oldest finished shell to make
//! room, and is refused while all are running. A tenant sees only its own shells: another's id is an unknown one (an
//! admin sees every tenant's).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use sandlot_core::{Engine, OutputChunk, OutputSink, SessionUse, Stream, Tenant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::bash::{BashCall, MAX_TIMEOUT_SECS, Runner, request, session_use};
use super::tenant::refusal;

/// Shells one tenant (one caller, all its workspaces) holds at once, running or finished.
pub const MAX_SHELLS_PER_TENANT: usize = 8;
/// Shells the server holds at once: with [`STREAM_CAP`], at most 128 MiB of buffered output.
pub const MAX_SHELLS: usize = 64;
/// The output kept of each stream of a shell.
pub const STREAM_CAP: usize = 1 << 20;
/// How long `KillShell` waits for the killed run to be gone.
const KILL_WAIT: Duration = Duration::from_secs(30);

/// The registry of background shells.
pub struct Shells {
    engine: Arc<Engine>,
    shutdown: CancellationToken,
    /// In start order.
    shells: Mutex<Vec<Arc<Shell>>>,
}

struct Shell {
    id: String,
    /// The name of the tenant that started it: the only one that sees it, but for an admin.
    owner: String,
    command: String,
    started: SystemTime,
    cancel: CancellationToken,
    state: Mutex<ShellState>,
    task: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct ShellState {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stdout_truncated: bool,
    stderr_truncated: bool,
    exit: Option<i32>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shell {
    fn finished(&self) -> bool {
        locked(&self.state).exit.is_some()
    }
}

impl OutputSink for Shell {
    fn output(&self, chunk: OutputChunk) {
        let mut state = locked(&self.state);
        let state = &mut *state;
        let (buffer, truncated) = match chunk.stream {
            Stream::Stdout => (&mut state.stdout, &mut state.stdout_truncated),
            Stream::Stderr => (&mut state.stderr, &mut state.stderr_truncated),
        };
        let room = STREAM_CAP.saturating_sub(buffer.len());
        buffer.extend_from_slice(&chunk.data[..chunk.data.len().min(room)]);
        *truncated |= chunk.data.len() > room;
    }
}

impl Shells {
    /// A registry whose shells run on `engine` and are killed when `shutdown` is cancelled.
    pub fn new(engine: Arc<Engine>, shutdown: CancellationToken) -> Self {
        Self { engine, shutdown, shells: Mutex::new(Vec::new()) }
    }

    /// Starts `call` in the background for `runner`; its shell id, or the text of the refusal.
    pub fn start(&self, runner: &Runner, call: &BashCall) -> Result<String, String> {
        let mut shells = locked(&self.shells);
        let owner = runner.tenant.name();
        let own = shells.iter().filter(|s| s.owner == owner).count();
        if own >= MAX_SHELLS_PER_TENANT {
            make_room(&mut shells, Some(owner)).map_err(|()| {
                format!("too many background shells: {MAX_SHELLS_PER_TENANT} are running; KillShell one first")
            })?;
        }
        if shells.len() >= MAX_SHELLS {
            make_room(&mut shells, None).map_err(|()| {
                format!("too many background shells: {MAX_SHELLS} are running on this server; try again later")
            })?;
        }
        let cancel = self.shutdown.child_token();
        let shell = Arc::new(Shell {
            id: uuid::Uuid::new_v4().to_string(),
            owner: owner.to_owned(),
            command: call.command.clone(),
            started: SystemTime::now(),
            cancel: cancel.clone(),
            state: Mutex::default(),
            task: Mutex::new(None),
        });
        // A process of its own in the workspace's live sandbox (when the backend keeps one): what it serves on the
        // loopback answers later commands; `KillShell` (its cancellation) ends it.
        let session = session_use(&self.engine, SessionUse::Process);
        let timeout = call.timeout_given.unwrap_or(MAX_TIMEOUT_SECS);
        let mut run = request(runner, &call.command, timeout, session, cancel);
        run.alongside = true;
        let (engine, running, tenant) = (self.engine.clone(), shell.clone(), runner.tenant.clone());
        let workspace = runner.workspace.clone();
        let task = tokio::spawn(async move {
            let exit = match engine.run_as(&tenant, run, running.as_ref()).await {
                Ok(report) => {
                    let mut state = locked(&running.state);
                    state.stdout_truncated |= report.outcome.stdout_truncated;
                    state.stderr_truncated |= report.outcome.stderr_truncated;
                    report.outcome.termination.exit_code()
                }
                Err(error) => {
                    let line = format!("{}\n", refusal("bash: ", &workspace, &error));
                    running.output(OutputChunk { stream: Stream::Stderr, data: line.into_bytes() });
                    -1
                }
            };
            locked(&running.state).exit = Some(exit);
        });
        *locked(&shell.task) = Some(task);
        let id = shell.id.clone();
        shells.push(shell);
        Ok(id)
    }

    /// `BashOutput`: the shell's command, status, start and whole buffers; `Err` for an unknown id (and for
    /// another tenant's, alike).
    pub fn output(&self, tenant: &Tenant, id: &str) -> Result<String, String> {
        let shell = self.find(tenant, id)?;
        let state = locked(&shell.state);
        let mut text = format!("command: {}\n", shell.command);
        match state.exit {
            None => text.push_str("status: running\n"),
            Some(code) => text.push_str(&format!("status: completed (exit {code})\n")),
        }
        text.push_str(&format!("started: {}\n\n", sandlot_core::rfc3339_seconds(shell.started)));
        for (name, bytes, truncated) in
            [("stdout", &state.stdout, state.stdout_truncated), ("stderr", &state.stderr, state.stderr_truncated)]
        {
            let marker = if truncated { " [TRUNCATED]" } else { "" };
            text.push_str(&format!("--- {name} ({} bytes){marker} ---\n", bytes.len()));
            text.push_str(&String::from_utf8_lossy(bytes));
            if bytes.last().is_some_and(|&last| last != b'\n') {
                text.push('\n');
            }
        }
        Ok(text)
    }

    /// `KillShell`: kills the shell's sandbox (every process of the command), waits until its run has ended, and
    /// forgets it; `Err` for an unknown id (and for another tenant's, alike).
    pub async fn kill(&self, tenant: &Tenant, id: &str) -> Result<String, String> {
        let shell = self.find(tenant, id)?;
        locked(&self.shells).retain(|s| !Arc::ptr_eq(s, &shell));
        shell.cancel.cancel();
        let task = locked(&shell.task).take();
        if let Some(task) = task
            && tokio::time::timeout(KILL_WAIT, task).await.is_err()
        {
            tracing::warn!(shell_id = id, "a killed background shell's run has not ended yet");
        }
        Ok(format!("killed: {id}\n"))
    }

    /// Shells held now (running or finished), all tenants together.
    pub fn len(&self) -> usize {
        locked(&self.shells).len()
    }

    /// Whether no shell is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn find(&self, tenant: &Tenant, id: &str) -> Result<Arc<Shell>, String> {
        locked(&self.shells)
            .iter()
            .find(|s| s.id == id && tenant.may_use(&s.owner))
            .cloned()
            .ok_or_else(|| format!("unknown shell_id: {id}"))
    }
}

/// Forgets the oldest finished shell (of `owner`, or of anyone); `Err` when every one is running.
fn make_room(shells: &mut Vec<Arc<Shell>>, owner: Option<&str>) -> Result<(), ()> {
    let oldest = shells.iter().position(|s| owner.is_none_or(|o| s.owner == o) && s.finished()).ok_or(())?;
    shells.remove(oldest);
    Ok(())
}

impl Drop for Shells {
    /// A registry that goes away takes its running shells with it.
    fn drop(&mut self) {
        for shell in locked(&self.shells).iter() {
            shell.cancel.cancel();
        }
    }
}
