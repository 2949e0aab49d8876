//! A process of a live sandbox on the supervisor's side: [`spawn`] asks pid 1 for it (an `Exec` with three new
//! pipes, whose other ends the caller gets as async streams) and [`JailProcess`] is its handle. Pid 1 starts it
//! confined as a run's program and reports its start and end (see `sandbox::resident`); signals go through pid 1,
//! its parent, so they never reach a process that took over its pid.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sandlot_core::{Language, LiveProcess, ProcessHandle, Spawn, Termination};
use tokio::net::unix::pipe;
use tokio::sync::watch;

use super::error::Error;
use super::live_forked::{self, LiveFork};
use super::live_state::{LiveState, end_of};
use super::live_waiting::WaitingProcess;
use crate::protocol::LiveRequest;

/// How long pid 1 may take to answer a start (milliseconds when idle; seconds on a loaded machine).
const START_PATIENCE: Duration = Duration::from_secs(30);

/// The name of the variable that tells a TypeScript process where esbuild is.
pub const ESBUILD_VARIABLE: &str = "SANDLOT_ESBUILD";

/// Starts `spawn` in the sandbox of `state`: a Python `-c` process forked from the server's template when `fork` can
/// (`waiting`'s child, forked ahead, when it runs that code: see `live_waiting`; else one forked now, see
/// `live_forked`), any other exec'd by pid 1.
pub async fn spawn(
    state: &Arc<LiveState>,
    spawn: Spawn,
    fork: Option<&LiveFork>,
    waiting: Option<WaitingProcess>,
) -> sandlot_core::Result<LiveProcess> {
    let fault = |action: &str, e: std::io::Error| sandlot_core::Error::from(Error::io(action, e));
    let program = state
        .programs
        .get(&spawn.language)
        .cloned()
        .ok_or_else(|| sandlot_core::Error::no_runner(spawn.language, state.programs.keys().copied()))?;
    let mut env: BTreeMap<String, String> = state.env.iter().cloned().collect();
    if spawn.language == Language::TypeScript
        && let Some(esbuild) = &state.esbuild
    {
        env.insert(ESBUILD_VARIABLE.into(), esbuild.to_string_lossy().into_owned());
    }
    env.extend(spawn.env);
    if let (Language::Python, Some(fork), Some(code)) = (spawn.language, fork, live_forked::code_of(&spawn.args)) {
        let env: Vec<(String, String)> = env.clone().into_iter().collect();
        if let Some(waiting) = waiting.filter(|waiting| waiting.runs(code))
            && let Some(started) = waiting.start(state, fork, &env)
        {
            return started.map_err(|why| {
                Error::Setup { step: format!("start a process in live sandbox {}", state.id), message: why }.into()
            });
        }
        if let Some(forked) = live_forked::spawn(state, fork, code, &env).await {
            return forked;
        }
    }
    let pipes = || std::io::pipe().map_err(|e| fault("create a live process's pipes", e));
    let (stdin_theirs, stdin) = pipes()?;
    let (stdout, stdout_theirs) = pipes()?;
    let (stderr, stderr_theirs) = pipes()?;
    let id = state.next_id();
    let gone =
        || fault(&format!("start a process in live sandbox {}", state.id), std::io::Error::other("it has ended"));
    let (started, ended) = state.register(id).ok_or_else(gone)?;
    let request = LiveRequest::Exec { id, program, args: spawn.args, env: env.into_iter().collect() };
    let message = serde_json::to_vec(&request).map_err(|e| fault("encode a request", e.into()))?;
    let fds = [stdin_theirs.as_raw_fd(), stdout_theirs.as_raw_fd(), stderr_theirs.as_raw_fd()];
    if let Err(e) = state.send(&message, &fds).await {
        state.forget(id);
        return Err(if state.is_alive() { fault("send a request to a live sandbox", e) } else { gone() });
    }
    drop((stdin_theirs, stdout_theirs, stderr_theirs)); // the process's copies are its own now
    let pid = match tokio::time::timeout(START_PATIENCE, started).await {
        Ok(Ok(Ok(pid))) => pid,
        Ok(Ok(Err(why))) => {
            return Err(
                Error::Setup { step: format!("start a process in live sandbox {}", state.id), message: why }.into()
            );
        }
        Ok(Err(_)) => return Err(gone()),
        Err(_) => return Err(fault("start a process in a live sandbox", std::io::ErrorKind::TimedOut.into())),
    };
    let watch = |e| fault("watch a live process's pipes", e);
    Ok(LiveProcess {
        stdin: Box::pin(pipe::Sender::from_owned_fd(OwnedFd::from(stdin)).map_err(watch)?),
        stdout: Box::pin(pipe::Receiver::from_owned_fd(OwnedFd::from(stdout)).map_err(watch)?),
        stderr: Box::pin(pipe::Receiver::from_owned_fd(OwnedFd::from(stderr)).map_err(watch)?),
        handle: Arc::new(JailProcess { state: Arc::clone(state), id, pid, ended }),
    })
}

/// The handle of one process of a live sandbox.
pub struct JailProcess {
    state: Arc<LiveState>,
    id: u64,
    /// Its pid in the sandbox.
    pid: i32,
    ended: watch::Receiver<Option<Termination>>,
}

#[async_trait]
impl ProcessHandle for JailProcess {
    fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Pid 1 sends it (a group signal also after the process ended: what it left in its group may live on).
    async fn signal(&self, signal: i32, group: bool) -> sandlot_core::Result<()> {
        if (!group && self.ended.borrow().is_some()) || !self.state.is_alive() {
            return Ok(());
        }
        let request = LiveRequest::Signal { id: self.id, signal, group };
        let message = serde_json::to_vec(&request).map_err(|e| Error::io("encode a request", e.into()))?;
        match self.state.send(&message, &[]).await {
            Ok(()) => Ok(()),
            Err(_) if !self.state.is_alive() => Ok(()), // it ended with its sandbox
            Err(e) => Err(Error::io("send a signal request to a live sandbox", e).into()),
        }
    }

    async fn wait(&self) -> Termination {
        end_of(&self.ended).await // `LiveState::end_all` answers every process
    }
}
