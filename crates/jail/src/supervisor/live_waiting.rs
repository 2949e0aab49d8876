//! A Python process forked ahead into a prepared live sandbox (see `live_pool`): the session driver, forked from the
//! loaded template before the sandbox's conversation is known, set up as far as it can be without it (its uid and
//! namespaces, its bounding set dropped) and waiting on a job socket, as a prepared run's child does (see
//! `prepared`). The first spawn of its code sends it the rest (limits, environment, Landlock's rules), with no tree:
//! pid 1 attached the conversation at `/data` before, so the child's Landlock rule for `/data` binds to it. So a
//! conversation's first session call pays neither the fork nor the child's setup.
//!
//! Invariants: it serves at most one spawn, the sandbox's first, of exactly the code it was forked for, only after the
//! sandbox was attached; dropped unused (another first spawn, or the sandbox let go), its job socket closes and it
//! exits with nothing run.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use nix::sys::socket::{AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, sendmsg, socketpair};
use sandlot_core::LiveProcess;

use super::live_forked::{self, LiveFork};
use super::live_state::LiveState;
use super::python_template::{Choice, ForkRequest, SandboxHandles, hung_up, memfd_with, sandbox_handles};
use super::template_child::{ChildJob, ChildSetup, Forked, Program, job_json};

/// A forked child waiting for its job in a live sandbox.
pub struct WaitingProcess {
    /// The code it runs (as `python -c`).
    code: String,
    forked: Forked,
    host_pid: i32,
    /// The supervisor's end of its job socket.
    jobs: OwnedFd,
    /// The socket of the template that forked it: hung up, the template and its child are gone.
    template: Arc<OwnedFd>,
    /// The supervisor's ends of its stdin, stdout and stderr.
    ends: [OwnedFd; 3],
}

/// Forks a child of the loaded template into the sandbox of `state` that will run `code`, and waits until it waits.
pub async fn fork_ahead(state: &LiveState, fork: &LiveFork, code: &str) -> Result<WaitingProcess, String> {
    fn io(what: &'static str) -> impl Fn(std::io::Error) -> String + Copy {
        move |e| format!("{what}: {e}")
    }
    if !fork.templates.can_fork(&fork.program, Choice::Loaded) {
        return Err("the loaded Python template is not ready".into());
    }
    let pid1 = state.pid1().ok_or("the sandbox has no pid 1")?;
    let SandboxHandles { ids, pid1, cgroups } = sandbox_handles(pid1, &fork.cgroup_procs)?;
    let pipes = || std::io::pipe().map_err(io("create a live process's pipes"));
    let (stdin_theirs, stdin) = pipes()?;
    let (stdout, stdout_theirs) = pipes()?;
    let (stderr, stderr_theirs) = pipes()?;
    let (jobs, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| format!("create a job socket: {e}"))?;
    let command = [fork.program.to_string_lossy().into_owned(), "-c".to_owned(), code.to_owned()].into();
    let setup = ChildSetup { says_its_end: false, ids, scoped: false, command };
    let stdio = [stdin_theirs.into(), stdout_theirs.into(), stderr_theirs.into()];
    let (mut forked, template) = fork
        .templates
        .prepare(Choice::Loaded, &setup, ForkRequest { pid1, stdio, cgroups }, theirs)
        .map_err(|e| e.to_string())?;
    let host_pid = forked.waiting().await? as i32;
    Ok(WaitingProcess {
        code: code.to_owned(),
        forked,
        host_pid,
        jobs,
        template,
        ends: [stdin.into(), stdout.into(), stderr.into()],
    })
}

impl WaitingProcess {
    /// Whether it runs `code`.
    pub fn runs(&self, code: &str) -> bool {
        self.code == code
    }

    /// Sends it its job (`env` its whole environment): its live process; `None` when the job could not be handed
    /// over (the child or its template is gone; nothing of it ran), and the caller forks another way.
    pub fn start(
        self,
        state: &Arc<LiveState>,
        fork: &LiveFork,
        env: &[(String, String)],
    ) -> Option<Result<LiveProcess, String>> {
        if hung_up(&self.template) {
            return None;
        }
        let job = ChildJob {
            rlimits: &fork.rlimits,
            landlock: fork.landlock,
            home: fork.home.as_ref(),
            env,
            program: Program::Code(&self.code),
        };
        let job = memfd_with(&job_json(&job)).ok()?;
        let oom_baseline = state.oom_count();
        sendmsg::<()>(
            self.jobs.as_raw_fd(),
            &[IoSlice::new(b"j")],
            &[ControlMessage::ScmRights(&[job.as_raw_fd()])],
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            None,
        )
        .ok()?;
        Some(live_forked::process(state, self.forked, self.host_pid, oom_baseline, self.ends))
    }
}
