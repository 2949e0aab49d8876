//! A live sandbox's Python process forked from the server's template instead of exec'd by pid 1, so that a session's
//! interpreter starts warm (imports done). The child confines itself as a run's does (see `python_template`), with
//! Landlock's file rules but without its scopes: pid 1 and the sandbox's other processes share one domain, and the
//! child must still reach them (signals, abstract sockets) as they reach each other; the sandbox's pid and network
//! namespaces fence all of them off from everything else. The child is the template's, not pid 1's: the supervisor
//! signals it itself (a pidfd; its process group by number) and learns its end from the template.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use sandlot_core::{LiveProcess, ProcessHandle, Termination};
use tokio::net::unix::pipe;
use tokio::sync::watch;

use super::error::Error;
use super::live_state::{LiveState, end_of};
use super::python_template::{Choice, ForkRequest, PythonTemplates, SandboxHandles, pidfd_of, sandbox_handles};
use super::template_child::{ChildJob, ChildSetup, ChildSpec, Forked, Program};
use crate::protocol::{HomeMount, RlimitSpec};

/// What a live sandbox's forked processes need, kept for its life.
pub struct LiveFork {
    pub templates: Arc<PythonTemplates>,
    pub program: PathBuf,
    pub rlimits: RlimitSpec,
    pub landlock: bool,
    pub home: Option<HomeMount>,
    /// The sandbox's `cgroup.procs` files (opened per process, as root).
    pub cgroup_procs: Vec<PathBuf>,
}

/// The code of `python [-u] -c CODE`, the only shape forked (a session's driver, a background `-c` job).
pub fn code_of(args: &[String]) -> Option<&str> {
    match args {
        [c, code] | [_, c, code] if c == "-c" && (args.len() == 2 || args[0] == "-u") => Some(code),
        _ => None,
    }
}

/// Forks `code` into the live sandbox of `state`, with `env` as its whole environment; `None` when no template is
/// ready (the caller execs instead).
pub async fn spawn(
    state: &Arc<LiveState>,
    fork: &LiveFork,
    code: &str,
    env: &[(String, String)],
) -> Option<sandlot_core::Result<LiveProcess>> {
    // A session's interpreter is forked from the loaded template: data work imports those modules.
    if !fork.templates.can_fork(&fork.program, Choice::Loaded) {
        return None;
    }
    let pid1 = state.pid1()?;
    Some(start(state, fork, pid1, code, env).await.map_err(|why| {
        Error::Setup { step: format!("fork a process into live sandbox {}", state.id), message: why }.into()
    }))
}

async fn start(
    state: &Arc<LiveState>,
    fork: &LiveFork,
    pid1: i32,
    code: &str,
    env: &[(String, String)],
) -> Result<LiveProcess, String> {
    fn io(what: &'static str) -> impl Fn(std::io::Error) -> String + Copy {
        move |e| format!("{what}: {e}")
    }
    let SandboxHandles { ids, pid1, cgroups } = sandbox_handles(pid1, &fork.cgroup_procs)?;
    let pipes = || std::io::pipe().map_err(io("create a live process's pipes"));
    let (stdin_theirs, stdin) = pipes()?;
    let (stdout, stdout_theirs) = pipes()?;
    let (stderr, stderr_theirs) = pipes()?;
    let command = [fork.program.to_string_lossy().into_owned(), "-c".to_owned(), code.to_owned()].into();
    let child = ChildSpec {
        setup: ChildSetup { says_its_end: false, ids, scoped: false, command },
        job: ChildJob {
            rlimits: &fork.rlimits,
            landlock: fork.landlock,
            home: fork.home.as_ref(),
            env,
            program: Program::Code(code),
        },
    };
    let stdio = [stdin_theirs.into(), stdout_theirs.into(), stderr_theirs.into()];
    let oom_baseline = state.oom_count();
    let mut forked =
        fork.templates.fork(Choice::Loaded, &child, ForkRequest { pid1, stdio, cgroups }).map_err(|e| e.to_string())?;
    let host_pid = forked.started().await? as i32;
    process(state, forked, host_pid, oom_baseline, [stdin.into(), stdout.into(), stderr.into()])
}

/// The live process of the forked child `host_pid` whose word comes through `forked` (its start already read), the
/// supervisor's ends of its pipes `[stdin, stdout, stderr]`: its end reported when the template says it, an OOM kill
/// told from a SIGKILL by the cgroup's OOM count against `oom_baseline` (read before the child could run).
pub fn process(
    state: &Arc<LiveState>,
    mut forked: Forked,
    host_pid: i32,
    oom_baseline: u64,
    [stdin, stdout, stderr]: [OwnedFd; 3],
) -> Result<LiveProcess, String> {
    fn io(what: &'static str) -> impl Fn(std::io::Error) -> String + Copy {
        move |e| format!("{what}: {e}")
    }
    // Opened before the template can reap the child: it reports the start first, and reaps only after the end.
    let pidfd = pidfd_of(host_pid).map_err(io("open a pidfd of the forked process"))?;
    let pid = sandbox_pid(host_pid).unwrap_or(0);
    let (ended_tx, ended) = watch::channel(None);
    let watched = Arc::clone(state);
    tokio::spawn(async move {
        let (end, cpu) = forked.ended().await.unwrap_or((Termination::Signaled { signal: libc::SIGKILL }, 0.0));
        watched.add_reaped_cpu(cpu);
        let end = match end {
            Termination::Signaled { signal } if signal == libc::SIGKILL && watched.oom_count() > oom_baseline => {
                Termination::OutOfMemory
            }
            end => end,
        };
        ended_tx.send_replace(Some(end));
    });
    let watch = io("watch a live process's pipes");
    Ok(LiveProcess {
        stdin: Box::pin(pipe::Sender::from_owned_fd(stdin).map_err(watch)?),
        stdout: Box::pin(pipe::Receiver::from_owned_fd(stdout).map_err(watch)?),
        stderr: Box::pin(pipe::Receiver::from_owned_fd(stderr).map_err(watch)?),
        handle: Arc::new(ForkedProcess { host_pid, pid, pidfd, ended }),
    })
}

/// Its pid in its sandbox's pid namespace (the last of `NSpid`).
fn sandbox_pid(host_pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    status.lines().find_map(|line| line.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse().ok()
}

/// The handle of a forked process of a live sandbox.
pub struct ForkedProcess {
    host_pid: i32,
    pid: i32,
    pidfd: OwnedFd,
    ended: watch::Receiver<Option<Termination>>,
}

#[async_trait]
impl ProcessHandle for ForkedProcess {
    fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Through its pidfd, which never names another process; a group signal by the group's number (the child's
    /// host pid: it leads its own session), also after it ended, as what it left in its group may live on.
    async fn signal(&self, signal: i32, group: bool) -> sandlot_core::Result<()> {
        if group {
            // SAFETY: kill with a negative pid (a process group) and a signal number; no memory is involved.
            unsafe { libc::kill(-self.host_pid, signal) };
            return Ok(());
        }
        if self.ended.borrow().is_some() {
            return Ok(());
        }
        // SAFETY: pidfd_send_signal on a pidfd this handle owns, no siginfo, no flags.
        unsafe {
            libc::syscall(libc::SYS_pidfd_send_signal, self.pidfd.as_raw_fd(), signal, std::ptr::null::<u8>(), 0)
        };
        Ok(())
    }

    async fn wait(&self) -> Termination {
        end_of(&self.ended).await // the task that reads the template's report always sends one
    }
}

#[cfg(test)]
mod tests {
    use super::code_of;

    #[test]
    fn only_python_dash_c_is_forked() {
        let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(code_of(&args(&["-u", "-c", "print(1)"])), Some("print(1)"));
        assert_eq!(code_of(&args(&["-c", "print(1)"])), Some("print(1)"));
        assert_eq!(code_of(&args(&["-X", "-c", "print(1)"])), None);
        assert_eq!(code_of(&args(&["script.py"])), None);
        assert_eq!(code_of(&args(&["-c", "print(1)", "more"])), None);
    }
}
