//! Prepared sandboxes: a Python run's sandbox built before the run is known, with its Python template's child
//! already in it. The jail builds it as any forked run's (init, namespaces, leased uid, cgroup slot with the limits
//! runs have had, tmpfs mounts, a new network namespace) but leaves `/data` empty and writes no code; the child
//! enters it, takes its uid and namespaces, and waits on its job socket, confined as far as it can be without the
//! run. When the run comes, the supervisor sends the child the rest (environment, limits, code) with the
//! conversation's tree, which the child mounts at `/data` before it drops its last capabilities, enters Landlock
//! (whose rule for `/data` so binds to the conversation) and seccomp, and runs the code. So a run pays neither the
//! sandbox's build nor the fork on its path.
//!
//! Invariants: a prepared sandbox serves one run and is never reused; it holds no run's data until its run comes;
//! one whose init or child died while it waited is let go, never used.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use nix::sys::socket::{AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, sendmsg, socketpair};
use sandlot_core::{Job, Limits, OutputSink};

use super::cgroup::CgroupSupport;
use super::error::{Error, Result};
use super::idmapped_trees::IdmappedTrees;
use super::python_template::{
    Choice, ForkRequest, PythonTemplates, SandboxHandles, hung_up, memfd_with, sandbox_handles,
};
use super::run::{Finished, ProgramEnds, ReadySandbox, Run, child_job, command_of, program_pipes};
use super::runners::HostRunner;
use super::spec::{self, Resources};
use super::template_child::{ChildSetup, Forked, job_json};
use super::uids::UidLeases;
use super::warm_pool::WarmPool;

/// What building a prepared sandbox takes: the server's inits, uids, cgroups, templates and Python runner.
pub struct Builder {
    pub inits: Arc<WarmPool>,
    pub uids: Arc<UidLeases>,
    pub cgroups: Arc<CgroupSupport>,
    pub templates: Arc<PythonTemplates>,
    pub runner: HostRunner,
    pub storage_uid: u32,
    pub trees: Arc<IdmappedTrees>,
}

/// A sandbox ready for one Python run whose limits are `limits`, its child forked from the template of `choice`.
pub struct Prepared {
    pub choice: Choice,
    pub limits: Limits,
    run: Run,
    ready: ReadySandbox,
    child: Forked,
    /// The supervisor's end of the child's job socket.
    jobs: OwnedFd,
    /// The socket of the template that forked the child, which reports the child's end: gone, the sandbox is too.
    template: Arc<OwnedFd>,
    program: ProgramEnds,
    /// What the supervisor holds for it, as a run's spec names it.
    resources: Resources,
    /// The child's host uid (the leased one).
    run_uid: u32,
}

impl Builder {
    /// The trees of the runs' conversations.
    pub fn trees(&self) -> &IdmappedTrees {
        &self.trees
    }

    /// Builds a prepared sandbox for runs of `limits`, with a child of the template of `choice`; tells `started` its
    /// init's pid as soon as it has one.
    pub async fn build(&self, choice: Choice, limits: &Limits, started: impl FnOnce(i32)) -> Result<Prepared> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |e: std::io::Error| Error::io(what.clone(), e)
        };
        let uid = self.uids.lease().map_err(io("lease a sandbox uid for a prepared sandbox"))?;
        let cgroup = self.cgroups.acquire(limits).map_err(io("set up cgroups for a prepared sandbox"))?;
        let cgroup_procs = cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default();
        let resources = Resources::held(cgroup.as_ref(), Some((&uid, self.storage_uid)), None, None);
        let run_uid = uid.uid();
        let spec = spec::build_prepared(&self.runner, limits, resources.clone());
        let (mut run, pipes) = Run::new(self.inits.take()?, cgroup, Some(uid));
        started(run.init_pid());
        let ready = match run.prepare(pipes, &spec).await {
            Ok(ready) => ready,
            Err(e) => {
                run.discard();
                return Err(e);
            }
        };
        // Made now, so that the run's tree costs only its clone.
        let trees = Arc::clone(&self.trees);
        let namespace = tokio::task::spawn_blocking(move || trees.namespace(run_uid).map(drop)).await;
        let forked = match namespace {
            Ok(Ok(())) => self.fork_child(choice, &run, &spec, &cgroup_procs).await,
            Ok(Err(e)) => Err(Error::io("make the user namespace of /data's idmap", e)),
            Err(e) => Err(Error::io("make the user namespace of /data's idmap", std::io::Error::other(e))),
        };
        match forked {
            Ok((child, template, jobs, program)) => Ok(Prepared {
                choice,
                limits: limits.clone(),
                run,
                ready,
                child,
                jobs,
                template,
                program,
                resources,
                run_uid,
            }),
            Err(e) => {
                run.discard();
                Err(e)
            }
        }
    }

    /// Has the template of `choice` fork the prepared sandbox's child into `run`'s sandbox, and waits until it
    /// waits for its job: its status, the supervisor's end of its job socket and of its pipes.
    async fn fork_child(
        &self,
        choice: Choice,
        run: &Run,
        spec: &crate::protocol::JailSpec,
        cgroup_procs: &[PathBuf],
    ) -> Result<(Forked, Arc<OwnedFd>, OwnedFd, ProgramEnds)> {
        let failed = |why: String| Error::Setup { step: "fork a prepared sandbox's child".into(), message: why };
        let SandboxHandles { ids, pid1, cgroups } = sandbox_handles(run.pid1(), cgroup_procs).map_err(failed)?;
        let (stdout, stderr, stdin, stdio) = program_pipes().map_err(|e| Error::io("create the program's pipes", e))?;
        let (jobs, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
            .map_err(|e| Error::io("create a prepared child's job socket", e.into()))?;
        let setup = ChildSetup { says_its_end: true, ids, scoped: true, command: command_of(spec) };
        let (mut child, template) = self
            .templates
            .prepare(choice, &setup, ForkRequest { pid1, stdio, cgroups }, theirs)
            .map_err(|e| failed(e.to_string()))?;
        child.waiting().await.map_err(failed)?;
        Ok((child, template, jobs, ProgramEnds { stdin, stdout, stderr }))
    }
}

impl Prepared {
    /// Whether it can still take its run: its init and the template that forked its child are alive (a child that
    /// died is found when its job cannot be sent).
    pub fn is_alive(&mut self) -> bool {
        self.run.is_alive() && !hung_up(&self.template)
    }

    /// Its init's pid on the host.
    pub fn init_pid(&self) -> i32 {
        self.run.init_pid()
    }

    /// Ends it unused, once every process of it is gone.
    pub async fn end(self) {
        self.run.end().await;
    }

    /// Lets it go unused.
    pub fn discard(self) {
        self.run.discard();
    }

    /// Runs `job` (a Python run of this sandbox's limits, in sandlot's layout) by `runner`: sends the child its job
    /// and the conversation's tree, and drives the run to its end. `Err(self)`: the job could not be handed over
    /// (nothing of it ran); the caller lets the sandbox go and runs the job another way.
    pub async fn run(
        self,
        job: &Job,
        runner: &HostRunner,
        trees: &IdmappedTrees,
        sink: &dyn OutputSink,
    ) -> std::result::Result<(Run, Result<Finished>), (Self, String)> {
        let spec = spec::build(job, runner, self.resources.clone());
        let handed = trees
            .tree(&job.workspace, self.run_uid)
            .map_err(|e| format!("idmap {}: {e}", job.workspace.display()))
            .and_then(|tree| {
                let job_fd = memfd_with(&job_json(&child_job(&spec, Some(&job.code))))
                    .map_err(|e| format!("write a prepared child's job: {e}"))?;
                sendmsg::<()>(
                    self.jobs.as_raw_fd(),
                    &[IoSlice::new(b"j")],
                    &[ControlMessage::ScmRights(&[job_fd.as_raw_fd(), tree.as_raw_fd()])],
                    MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
                    None,
                )
                .map(drop)
                .map_err(|e| format!("send a prepared child its job: {e}"))
            });
        if let Err(why) = handed {
            return Err((self, why));
        }
        let Self { mut run, ready, child, program, .. } = self;
        let finished = run.execute_prepared(ready, child, program, job, sink).await;
        Ok((run, finished))
    }
}
