//! One process of a live sandbox: a `docker exec` of the language's interpreter, attached (stdin, stdout, stderr, no
//! tty). The engine's multiplexed output is split into two pipes by a task; stdin is the exec's hijacked connection,
//! whose shutdown or drop half-closes it, which Docker passes on as end of file (`stdin.rs`).
//!
//! The handle works on the host: Docker's runtime starts every exec in a session of its own (so its pgid is its
//! pid), the engine reports its host pid, and sandlot, root beside dockerd, holds a pidfd on it. A single process is
//! signalled through the pidfd (never a recycled pid); a group with `killpg` on that pid, which the kernel does not
//! reuse while any member of the group lives (once the leader has exited, only if a process of the container is
//! still in the group). The end is the pidfd turning readable; Docker's record of the exec then
//! gives the exit status, 128 + N for a signal N, as for a run's container.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures::StreamExt;
use sandlot_core::{LiveProcess, ProcessHandle, Termination};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{OnceCell, watch};

use super::cgroup::Cgroup;
use super::host_proc;
use super::stdin::ExecStdin;
use crate::{Error, Result};

/// Bytes an output pipe holds before the task that splits the exec's output waits for its reader.
const PIPE_BYTES: usize = 64 * 1024;
/// How long Docker may take to report a started exec's pid, or an ended one's status.
const RECORD_BOUND: Duration = Duration::from_secs(10);
/// Between two looks at the exec's record.
const RECORD_POLL: Duration = Duration::from_millis(10);
/// Between two looks at whether the process has ended (its pidfd, a system call; without one, the engine's record).
const EXIT_POLL: Duration = Duration::from_millis(20);
/// Without a pidfd: between two looks at the engine's record while the process's output is still open.
const RUNNING_POLL: Duration = Duration::from_millis(200);

/// Starts `cmd` in the container `container` with `env` (added to the container's), in `working_dir` as `user` (the
/// container's, named again so no image setting can change it).
pub(crate) async fn start(
    docker: &Docker,
    container: &str,
    cmd: Vec<String>,
    env: Vec<String>,
    (working_dir, user): (&str, &str),
    cgroup: Option<Cgroup>,
) -> Result<LiveProcess> {
    let config = ExecConfig {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        env: Some(env),
        cmd: Some(cmd),
        working_dir: Some(working_dir.to_owned()),
        user: Some(user.to_owned()),
        ..Default::default()
    };
    let exec = docker.create_exec(container, config).await.map_err(|e| Error::engine("create exec", e))?.id;
    let oom_kills_before = cgroup.as_ref().map_or(0, Cgroup::oom_kills);
    let options = StartExecOptions { detach: false, tty: false, output_capacity: None };
    let StartExecResults::Attached { mut output, input } =
        docker.start_exec(&exec, Some(options)).await.map_err(|e| Error::engine("start exec", e))?
    else {
        return Err(Error::Exec { exec, reason: "the engine started it detached".into() });
    };
    let host_pid = started_pid(docker, &exec).await?;
    let pidfd = host_pid.and_then(|pid| pidfd_in(pid, container));
    let pid = host_pid.filter(|_| pidfd.as_ref().is_some_and(|fd| !exited(fd))).and_then(host_proc::namespace_pid);
    let pid = pid.unwrap_or(0);

    let (stdout, mut stdout_in) = tokio::io::simplex(PIPE_BYTES);
    let (stderr, mut stderr_in) = tokio::io::simplex(PIPE_BYTES);
    let (ended, streams_ended) = watch::channel(false);
    tokio::spawn(async move {
        while let Some(Ok(chunk)) = output.next().await {
            // A reader that is gone loses its stream; the other is still fed, so the process never blocks on it.
            let _ = match chunk {
                LogOutput::StdOut { message } | LogOutput::Console { message } => stdout_in.write_all(&message).await,
                LogOutput::StdErr { message } => stderr_in.write_all(&message).await,
                LogOutput::StdIn { .. } => Ok(()),
            };
        }
        let _ = stdout_in.shutdown().await;
        let _ = stderr_in.shutdown().await;
        let _ = ended.send(true);
    });
    let stdin: std::pin::Pin<Box<dyn AsyncWrite + Send>> = Box::pin(ExecStdin::new(input));
    let handle = ExecHandle {
        docker: docker.clone(),
        exec,
        pid,
        host_pid: host_pid.unwrap_or(0),
        pidfd,
        cgroup,
        oom_kills_before,
        streams_ended,
        ended: OnceCell::new(),
    };
    Ok(LiveProcess { stdin, stdout: Box::pin(stdout), stderr: Box::pin(stderr), handle: Arc::new(handle) })
}

/// The host pid of a started exec, once the engine reports it (it answers the start before it runs the process);
/// `None` when the exec ended before it was seen.
async fn started_pid(docker: &Docker, exec: &str) -> Result<Option<u32>> {
    let deadline = tokio::time::Instant::now() + RECORD_BOUND;
    loop {
        let record = docker.inspect_exec(exec).await.map_err(|e| Error::engine("inspect exec", e))?;
        match (record.pid.and_then(|p| u32::try_from(p).ok()).filter(|&p| p > 0), record.exit_code) {
            (Some(pid), _) => return Ok(Some(pid)),
            (None, Some(_)) if record.running == Some(false) => return Ok(None),
            _ if tokio::time::Instant::now() >= deadline => {
                return Err(Error::Exec { exec: exec.to_owned(), reason: "the engine reports no pid".into() });
            }
            _ => tokio::time::sleep(RECORD_POLL).await,
        }
    }
}

/// A pidfd on `host_pid` if that is a process of `container`. The pidfd is opened first, then the process checked:
/// a pid recycled after a quick exit (by a host process) fails the check, or passes it only when the pidfd's process
/// has ended too, so a signal through it never reaches a process outside the container.
fn pidfd_in(host_pid: u32, container: &str) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(host_pid).ok()?)?;
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
    host_proc::in_container(host_pid, container).then_some(pidfd)
}

/// Whether a pidfd's process has exited (its pidfd is readable); an error counts as exited.
fn exited(pidfd: &OwnedFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(pidfd, rustix::event::PollFlags::IN)];
    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    !matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(0))
}

/// A [`ProcessHandle`] on an exec.
struct ExecHandle {
    docker: Docker,
    exec: String,
    /// Its pid in the container (0 when it ended before it was seen).
    pid: u32,
    /// Its pid on the host, also its process group's id there (0 when the engine never reported it).
    host_pid: u32,
    /// `None` when the exec ended before it was seen.
    pidfd: Option<OwnedFd>,
    cgroup: Option<Cgroup>,
    /// The container's OOM kills when the exec started.
    oom_kills_before: u64,
    /// True once the exec's output ended.
    streams_ended: watch::Receiver<bool>,
    ended: OnceCell<Termination>,
}

impl ExecHandle {
    /// Whether a process of the container is in the exec's process group (whose id is the exec's host pid). While
    /// one is, the kernel does not give that number to another process or group.
    fn group_lives(&self) -> bool {
        let Some(cgroup) = &self.cgroup else { return false };
        cgroup.host_pids().into_iter().any(|pid| host_proc::process_group(pid) == Some(self.host_pid))
    }

    /// Waits for the process to end and reads its status from the engine.
    async fn termination(&self) -> Termination {
        let mut streams_ended = self.streams_ended.clone();
        if let Some(pidfd) = &self.pidfd {
            // A pidfd is readable once its process has exited (it need not be our child). tokio's reactor would
            // need `unsafe` to watch it (AsyncFd::register), so it is polled: a system call every EXIT_POLL, woken
            // early when the output ends (usually the moment the process exits).
            while !exited(pidfd) {
                let _ = tokio::time::timeout(EXIT_POLL, streams_ended.wait_for(|&e| e)).await;
                if *streams_ended.borrow() {
                    // Ended output without an exit: something the process started holds it; poll at leisure.
                    tokio::time::sleep(EXIT_POLL).await;
                }
            }
        }
        let deadline = tokio::time::Instant::now() + RECORD_BOUND;
        let code = loop {
            let record = self.docker.inspect_exec(&self.exec).await;
            match record {
                Ok(record) if record.running == Some(false) => break record.exit_code,
                Ok(_) => {}
                // The container was removed (the sandbox closed), which kills every process in it with SIGKILL.
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => break Some(137),
                Err(e) => {
                    tracing::warn!(exec = self.exec, "cannot read how the process ended: {e}");
                    break None;
                }
            }
            if self.pidfd.is_some() {
                // The process has ended: the engine records it at once; only a wedged engine takes longer.
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(exec = self.exec, "the engine does not record the process's end");
                    break None;
                }
                tokio::time::sleep(RECORD_POLL).await;
            } else {
                // The process may still run: look again when its output ends, or after a while (something it
                // started may hold its output open).
                let ended = *streams_ended.borrow();
                let poll = if ended { RECORD_POLL } else { RUNNING_POLL };
                let _ = tokio::time::timeout(poll, streams_ended.wait_for(|&e| e)).await;
            }
        };
        let oom_kills = self.cgroup.as_ref().map_or(0, Cgroup::oom_kills);
        match code {
            Some(137) if oom_kills > self.oom_kills_before => Termination::OutOfMemory,
            Some(code) if code > 128 && code < 160 => Termination::Signaled { signal: (code - 128) as i32 },
            Some(code) => Termination::Exited { code: i32::try_from(code).unwrap_or(-1) },
            None => Termination::Exited { code: -1 },
        }
    }
}

#[async_trait]
impl ProcessHandle for ExecHandle {
    fn pid(&self) -> u32 {
        self.pid
    }

    async fn signal(&self, signal: i32, group: bool) -> sandlot_core::Result<()> {
        let invalid = || sandlot_core::Error::invalid("signal", format!("{signal} is no signal"));
        let result = if group {
            let signal = nix::sys::signal::Signal::try_from(signal).map_err(|_| invalid())?;
            // The leader holds the group's number while it runs; after it, only a member of the container does.
            let leader_runs = self.pidfd.as_ref().is_some_and(|pidfd| !exited(pidfd));
            let Ok(leader) = i32::try_from(self.host_pid) else { return Ok(()) };
            if leader == 0 || !(leader_runs || self.group_lives()) {
                return Ok(()); // nothing of the group is left, and its number may be another's by now
            }
            nix::sys::signal::killpg(nix::unistd::Pid::from_raw(leader), signal).map_err(std::io::Error::from)
        } else {
            let signal = rustix::process::Signal::from_named_raw(signal).ok_or_else(invalid)?;
            let Some(pidfd) = &self.pidfd else { return Ok(()) }; // it ended before it was seen
            rustix::process::pidfd_send_signal(pidfd, signal).map_err(std::io::Error::from)
        };
        match result {
            Ok(()) => Ok(()),
            // Ended (or, for a group, every member has).
            Err(e) if e.raw_os_error() == Some(nix::libc::ESRCH) => Ok(()),
            Err(e) => Err(Error::Io { action: format!("signal the process of exec {}", self.exec), source: e }.into()),
        }
    }

    async fn wait(&self) -> Termination {
        self.ended.get_or_init(|| self.termination()).await.clone()
    }
}
