//! One run on the supervisor's side: a [`Run`] owns everything the run holds on the host (its init, its cgroup
//! slot, its uid lease, its network namespace) and the one way to kill it, and drives it from the spec to the
//! program's end: it feeds the spec and the input, reads the init's events and the capped output, and enforces the
//! deadline and cancellation.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sandlot_core::{CapturedStream, Job, OutputChunk, OutputSink, Stream, Termination, stop_reason};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::pipe;
use tokio::sync::watch;

use super::cgroup::RunCgroup;
use super::child::PidfdChild;
use super::ending::Waited;
use super::error::{Error, Result};
use super::init_process::{Init, InitPipes};
use super::netns_pool::NetnsPool;
use super::python_template::{Choice, ForkRequest, PythonTemplates, SandboxHandles, sandbox_handles};
use super::template_child::{ChildJob, ChildSetup, ChildSpec, Forked, Program};
use super::uids::UidLease;
use crate::protocol::{InitEvent, JailSpec, frame};

/// How long a prepared sandbox may take to get ready.
const PREPARE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the init may take to reap the sandbox after its pid 1 was killed.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// How long output may keep flowing after the init is gone (it cannot: everything died with pid 1).
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// A run in progress and what it holds.
pub struct Run {
    process: PidfdChild,
    cgroup: Option<RunCgroup>,
    uid: Option<UidLease>,
    /// Pid 1's pid on the host, once the init has reported it (0 before).
    pid1: AtomicI32,
    /// The init has been reaped: its pid no longer names it.
    reaped: AtomicBool,
}

/// What a finished run produced.
pub struct Finished {
    pub waited: Waited,
    /// The init's last event but [`InitEvent::Pid1Started`], if any.
    pub last_event: Option<InitEvent>,
    pub stdout: CapturedStream,
    pub stderr: CapturedStream,
    pub duration: Duration,
    /// The network namespace the init made, when asked to capture it.
    pub new_netns: Option<OwnedFd>,
    /// A forked run's end as its template reported it, or why it could not run (`None`: not forked, or the sandbox
    /// never got ready).
    pub forked: Option<std::result::Result<Termination, ForkFailure>>,
}

/// Why a forked run did not end with its program's end.
pub enum ForkFailure {
    /// The template was not there to fork it: nothing of the program ran (the run may be tried again).
    Unavailable(String),
    /// The program's child failed to set up, or its template died while it ran.
    Failed(String),
}

impl ForkFailure {
    /// A child's failure, `why`: one before the run's code could run (`ran` false: its template went away, say)
    /// may be tried again.
    fn of(why: String, ran: bool) -> Self {
        match ran {
            true => Self::Failed(why),
            false => Self::Unavailable(why),
        }
    }
}

/// A run whose program a Python template forks into the sandbox (`spec.forked`; see `python_template`).
pub struct ForkInto<'a> {
    pub templates: &'a PythonTemplates,
    pub choice: Choice,
    /// The run's `cgroup.procs` files, which the child joins (opened here, as root).
    pub cgroup_procs: Vec<PathBuf>,
}

/// A prepared sandbox whose pid 1 waits (see [`Run::prepare`]): pid 1's fd 0, which ends the run when closed, and
/// the init's events, read past the readiness.
pub struct ReadySandbox {
    stdin: pipe::Sender,
    events: Lines<BufReader<pipe::Receiver>>,
}

/// The supervisor's ends of a forked program's own pipes: its stdin, stdout and stderr.
pub struct ProgramEnds {
    pub stdin: pipe::Sender,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
}

/// Where a forked run's sandbox is: not ready yet, ready for the program, or never to be (its init's events ended).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Readiness {
    Waiting,
    Ready,
    Over,
}

impl Run {
    /// A run of `init` holding `cgroup` and `uid`, and the init's pipes to drive it with.
    pub fn new(init: Init, cgroup: Option<RunCgroup>, uid: Option<UidLease>) -> (Self, InitPipes) {
        let run = Self { process: init.process, cgroup, uid, pid1: AtomicI32::new(0), reaped: AtomicBool::new(false) };
        (run, init.pipes)
    }

    /// Runs `spec` for `job` to its end. With `capture_netns`, keeps the network namespace the init makes. With
    /// `forked`, the program is a Python template's child, with pipes of its own.
    pub async fn execute(
        &mut self,
        pipes: InitPipes,
        spec: &JailSpec,
        job: &Job,
        sink: &dyn OutputSink,
        capture_netns: bool,
        forked: Option<ForkInto<'_>>,
    ) -> Result<Finished> {
        let frame = spec_frame(spec)?;
        self.drive(pipes, frame, spec, job, sink, capture_netns, forked).await
    }

    /// Sends `spec` now, so that its sandbox is built and its program started before its run comes (see `ahead`);
    /// [`Run::execute_sent`] runs it.
    pub async fn send_spec(&mut self, pipes: &mut InitPipes, spec: &JailSpec) -> Result<()> {
        let frame = spec_frame(spec)?;
        pipes.stdin.write_all(&frame).await.map_err(|e| Error::io("send an ahead sandbox its spec", e))
    }

    /// Runs `job` to its end in a sandbox whose spec was sent ahead: `input` reaches its program's stdin before the
    /// job's own. `spec` is the run's as built on its path.
    pub async fn execute_sent(
        &mut self,
        pipes: InitPipes,
        input: Vec<u8>,
        spec: &JailSpec,
        job: &Job,
        sink: &dyn OutputSink,
        capture_netns: bool,
    ) -> Result<Finished> {
        self.drive(pipes, input, spec, job, sink, capture_netns, None).await
    }

    /// [`Run::execute`] once `first` (the spec's frame, or an ahead sandbox's input) is known: writes it on the
    /// init's stdin, then the job's input, and drives the run to its end.
    #[allow(clippy::too_many_arguments)] // execute's, and what it sends first
    async fn drive(
        &mut self,
        pipes: InitPipes,
        first: Vec<u8>,
        spec: &JailSpec,
        job: &Job,
        sink: &dyn OutputSink,
        capture_netns: bool,
        forked: Option<ForkInto<'_>>,
    ) -> Result<Finished> {
        let started = Instant::now();
        let InitPipes { mut stdin, stdout, stderr, events } = pipes;
        let (stdout, stderr, program_stdin, mut forked_stdio) = match forked {
            None => (stdout, stderr, None, None),
            Some(_) => {
                let (stdout, stderr, stdin, stdio) =
                    program_pipes().map_err(|e| Error::io("create the program's pipes", e))?;
                (stdout, stderr, Some(stdin), Some(stdio))
            }
        };
        let (readiness_tx, mut readiness) = watch::channel(Readiness::Waiting);
        let (done_tx, mut done) = watch::channel(false);
        let feed = async move {
            // The program may exit without reading its input; a broken pipe then is not an error.
            let _ = stdin.write_all(&first).await;
            sandlot_core::marks::mark("c.spec_sent");
            match program_stdin {
                None => {
                    let _ = stdin.write_all(&job.stdin).await;
                }
                Some(mut program) => {
                    let _ = program.write_all(&job.stdin).await;
                    drop(program);
                    // Pid 1 ends the run when its fd 0 closes: once the program has ended.
                    let _ = done.wait_for(|done| *done).await;
                }
            }
        };
        let Self { process, cgroup, pid1, reaped, .. } = self;
        let (cgroup, pid1, reaped) = (&*cgroup, &*pid1, &*reaped);
        let init_pid = process.pid().as_raw() as u32;
        let program_ended = tokio::sync::Notify::new();
        // The network namespace is captured through the init's pid, which names the init only until it is reaped:
        // the wait below sets `reaped` first, and both run in this one task.
        let read_events = async {
            let mut lines = BufReader::new(events).lines();
            let (mut last, mut netns) = (None, None);
            // Pid 1 says it is ready and the init says which pid it is: two writers, in either order.
            let mut sandbox_ready = false;
            while let Ok(Some(line)) = lines.next_line().await {
                let event = match serde_json::from_str::<InitEvent>(&line) {
                    Ok(event) => event,
                    Err(e) => {
                        tracing::warn!(%e, line, "unreadable event from the jail init");
                        continue;
                    }
                };
                let elapsed_us = started.elapsed().as_micros() as u64;
                tracing::debug!(run_id = job.run_id, %event, elapsed_us, "jail event");
                match event {
                    InitEvent::Pid1Started { pid } => {
                        pid1.store(pid, Ordering::SeqCst);
                        if capture_netns && !reaped.load(Ordering::SeqCst) {
                            netns = NetnsPool::capture(init_pid)
                                .inspect_err(|e| tracing::debug!("network namespace not kept: {e}"))
                                .ok();
                        }
                    }
                    InitEvent::ProgramEnded(_) => {
                        last = Some(event);
                        program_ended.notify_one();
                        break;
                    }
                    InitEvent::SetupFailed { .. } => last = Some(event),
                    InitEvent::SandboxReady => sandbox_ready = true,
                    // A live sandbox's events; a run's init never sends them.
                    InitEvent::ProcessStarted { .. }
                    | InitEvent::ProcessFailed { .. }
                    | InitEvent::ProcessEnded { .. }
                    | InitEvent::Attached => {}
                }
                if sandbox_ready && pid1.load(Ordering::SeqCst) > 0 {
                    readiness_tx
                        .send_if_modified(|state| std::mem::replace(state, Readiness::Ready) != Readiness::Ready);
                }
            }
            let _ = readiness_tx.send(Readiness::Over);
            (last, netns)
        };
        // A forked run: once the sandbox is ready, the template forks the program into it; its end closes pid 1's
        // fd 0 (through `feed`), which ends the run.
        let fork = async {
            let forked = forked.as_ref()?;
            let ready = readiness.wait_for(|state| *state != Readiness::Waiting).await.map(|state| *state);
            let outcome = match (ready, forked_stdio.take()) {
                (Ok(Readiness::Ready), Some(stdio)) => {
                    Some(fork_program(forked, spec, pid1.load(Ordering::SeqCst), stdio).await)
                }
                _ => None,
            };
            let _ = done_tx.send(true);
            outcome
        };
        let cap = job.limits.max_output_bytes;
        let read_stdout = read_capped(stdout, Stream::Stdout, cap, sink);
        let read_stderr = read_capped(stderr, Stream::Stderr, cap, sink);
        let wait = wait_for_end(process, cgroup, pid1, reaped, &program_ended, job);
        let everything = async { tokio::join!(feed, read_events, read_stdout, read_stderr, wait, fork) };
        let backstop = job.limits.timeout + KILL_GRACE + DRAIN_GRACE;
        let Ok(((), (last_event, new_netns), stdout, stderr, waited, forked)) =
            tokio::time::timeout(backstop, everything).await
        else {
            kill_everything(&self.process, &self.cgroup);
            return Err(Error::io("jail did not finish after its deadline", std::io::ErrorKind::TimedOut.into()));
        };
        tracing::debug!(run_id = job.run_id, elapsed_us = started.elapsed().as_micros() as u64, "jail finished");
        Ok(Finished { waited: waited?, last_event, stdout, stderr, duration: started.elapsed(), new_netns, forked })
    }

    /// Sends a prepared sandbox's `spec` and waits until its pid 1 waits for the program and its pid is known.
    pub async fn prepare(&mut self, pipes: InitPipes, spec: &JailSpec) -> Result<ReadySandbox> {
        // The init's own stdout and stderr carry nothing: a forked program has pipes of its own.
        let InitPipes { mut stdin, events, .. } = pipes;
        stdin.write_all(&spec_frame(spec)?).await.map_err(|e| Error::io("send a prepared sandbox its spec", e))?;
        let mut events = BufReader::new(events).lines();
        let mut ready = false;
        while !ready || self.pid1() == 0 {
            let line = tokio::time::timeout(PREPARE_TIMEOUT, events.next_line()).await;
            let gone = || Error::io("prepare a sandbox", std::io::Error::other("the init ended before it was ready"));
            let line = match line {
                Ok(Ok(Some(line))) => line,
                Ok(_) => return Err(gone()),
                Err(_) => return Err(Error::io("prepare a sandbox", std::io::ErrorKind::TimedOut.into())),
            };
            match serde_json::from_str::<InitEvent>(&line) {
                Ok(InitEvent::Pid1Started { pid }) => self.pid1.store(pid, Ordering::SeqCst),
                Ok(InitEvent::SandboxReady) => ready = true,
                Ok(InitEvent::SetupFailed { step, error }) => return Err(Error::Setup { step, message: error }),
                Ok(_) | Err(_) => return Err(gone()),
            }
        }
        Ok(ReadySandbox { stdin, events })
    }

    /// Gives its cgroup the least CPU weight, or a run's again (see [`RunCgroup::set_background`]).
    pub fn set_background(&self, background: bool) -> Result<()> {
        match &self.cgroup {
            Some(cgroup) => cgroup.set_background(background).map_err(|e| Error::io("set a sandbox's CPU weight", e)),
            None => Ok(()),
        }
    }

    /// The init's pid on the host.
    pub fn init_pid(&self) -> i32 {
        self.process.pid().as_raw()
    }

    /// Sandbox pid 1's pid on the host, once known (0 before).
    pub fn pid1(&self) -> i32 {
        self.pid1.load(Ordering::SeqCst)
    }

    /// Whether the init is still there (a prepared sandbox waiting in its pool).
    pub fn is_alive(&mut self) -> bool {
        self.process.is_alive()
    }

    /// A server's [`Run::release`]: lets go of what the run holds, waits for the init to be gone (so is every process
    /// of the sandbox: pid 1 outlives them, and the init pid 1), then calls `then`.
    pub async fn release_then(self, then: impl FnOnce() + Send + 'static) {
        let Self { mut process, cgroup, uid, .. } = self;
        if let Some(cgroup) = cgroup {
            cgroup.release().await;
        }
        let _ = process.wait().await;
        drop(uid);
        then();
    }

    /// Kills a sandbox that will run nothing and waits until its init, and so every process of it, is gone; then lets
    /// go of what it held.
    pub async fn end(self) {
        kill_sandbox(&self.pid1, &self.process);
        self.release_then(|| {}).await;
    }

    /// Kills a sandbox that will run nothing (a prepared one let go) and lets go of what it holds, in the background.
    pub fn discard(self) {
        kill_sandbox(&self.pid1, &self.process);
        tokio::spawn(self.release(false, false));
    }

    /// Drives a prepared sandbox's run: its template's child, which has its job, runs `job`'s program on
    /// `program`'s pipes; its end (from `child`) closes pid 1's fd 0, which ends the run as any forked run's.
    pub async fn execute_prepared(
        &mut self,
        ready: ReadySandbox,
        mut child: Forked,
        program: ProgramEnds,
        job: &Job,
        sink: &dyn OutputSink,
    ) -> Result<Finished> {
        let started = Instant::now();
        let ReadySandbox { stdin: pid1_stdin, events } = ready;
        let ProgramEnds { stdin: mut program_stdin, stdout, stderr } = program;
        let (done_tx, mut done) = watch::channel(false);
        let feed = async move {
            let _ = program_stdin.write_all(&job.stdin).await;
            drop(program_stdin);
            let _ = done.wait_for(|done| *done).await;
            drop(pid1_stdin);
        };
        let program_ended = tokio::sync::Notify::new();
        let read_events = read_to_the_end(events, &program_ended);
        let child_end = async {
            let end = child.ended().await.map(|(end, _cpu)| end).map_err(|why| ForkFailure::of(why, child.ran()));
            let _ = done_tx.send(true);
            Some(end)
        };
        let cap = job.limits.max_output_bytes;
        let read_stdout = read_capped(stdout, Stream::Stdout, cap, sink);
        let read_stderr = read_capped(stderr, Stream::Stderr, cap, sink);
        let Self { process, cgroup, pid1, reaped, .. } = self;
        let wait = wait_for_end(process, cgroup, pid1, reaped, &program_ended, job);
        let everything = async { tokio::join!(feed, read_events, read_stdout, read_stderr, wait, child_end) };
        let backstop = job.limits.timeout + KILL_GRACE + DRAIN_GRACE;
        let Ok(((), last_event, stdout, stderr, waited, forked)) = tokio::time::timeout(backstop, everything).await
        else {
            kill_everything(&self.process, &self.cgroup);
            return Err(Error::io("jail did not finish after its deadline", std::io::ErrorKind::TimedOut.into()));
        };
        let duration = started.elapsed();
        Ok(Finished { waited: waited?, last_event, stdout, stderr, duration, new_netns: None, forked })
    }

    /// Whether the run's memory cgroup counted an OOM kill.
    pub fn oom_killed(&self) -> bool {
        self.cgroup.as_ref().is_some_and(RunCgroup::oom_killed)
    }

    /// Lets go of what the run holds. Once pid 1 reported the program's end, nothing of the program is left: a
    /// one-shot command, which exits next, leaves its init to exit on its own (it holds the cgroup slot and the uid
    /// until it has), and a server reaps it in the background; otherwise the slot is drained first.
    pub async fn release(self, program_ended: bool, one_shot: bool) {
        let Self { mut process, cgroup, uid, .. } = self;
        match cgroup {
            Some(cgroup) if program_ended && one_shot => drop(cgroup),
            Some(cgroup) => cgroup.release().await,
            None => {}
        }
        drop(uid); // the init holds the lease until it is gone
        if one_shot && program_ended {
            process.abandon();
        } else {
            tokio::spawn(async move {
                let _ = process.wait().await;
            });
        }
    }
}

/// `spec` framed for the init, to be sent in one write (a second would wake the init a second time).
fn spec_frame(spec: &JailSpec) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(spec).map_err(|e| Error::io("encode spec", e.into()))?;
    Ok(frame(&json))
}

/// A forked run's own pipes: the supervisor's ends (stdout, stderr, stdin) and the program's (stdin, stdout, stderr).
pub fn program_pipes() -> std::io::Result<(pipe::Receiver, pipe::Receiver, pipe::Sender, [OwnedFd; 3])> {
    let (stdin_read, stdin_write) = std::io::pipe()?;
    let (stdout_read, stdout_write) = std::io::pipe()?;
    let (stderr_read, stderr_write) = std::io::pipe()?;
    Ok((
        pipe::Receiver::from_owned_fd(stdout_read.into())?,
        pipe::Receiver::from_owned_fd(stderr_read.into())?,
        pipe::Sender::from_owned_fd(stdin_write.into())?,
        [stdin_read.into(), stdout_write.into(), stderr_write.into()],
    ))
}

/// Waits for a run's end: the init's exit, pid 1's report, or the deadline or a cancellation, which kill the
/// sandbox.
async fn wait_for_end(
    process: &mut PidfdChild,
    cgroup: &Option<RunCgroup>,
    pid1: &AtomicI32,
    reaped: &AtomicBool,
    program_ended: &tokio::sync::Notify,
    job: &Job,
) -> Result<Waited> {
    let processes = || super::processes::run_processes(cgroup.as_ref(), pid1.load(Ordering::SeqCst));
    let waited = tokio::select! {
        status = process.wait() => {
            reaped.store(true, Ordering::SeqCst);
            return status.map(Waited::InitExited).map_err(|e| Error::io("wait for jail init", e));
        },
        () = program_ended.notified() => {
            sandlot_core::marks::mark("c.reported");
            reaped.store(true, Ordering::SeqCst); // no capture through the pid from here on
            return Ok(Waited::ProgramEnded);
        },
        stop = stop_reason(job, job.limits.timeout, &processes) => Waited::Stopped(stop),
    };
    reaped.store(true, Ordering::SeqCst); // not yet, but soon: no capture from here on
    kill_sandbox(pid1, process);
    if tokio::time::timeout(KILL_GRACE, process.wait()).await.is_err() {
        tracing::warn!(run_id = job.run_id, "jail init still alive after killing pid 1");
        kill_everything(process, cgroup);
        process.wait().await.map_err(|e| Error::io("wait for jail init", e))?;
    }
    Ok(waited)
}

/// The init's events to pid 1's report of the program's end (then `program_ended` is notified): the last event but
/// a live sandbox's, if any.
async fn read_to_the_end(
    mut events: Lines<BufReader<pipe::Receiver>>,
    program_ended: &tokio::sync::Notify,
) -> Option<InitEvent> {
    let mut last = None;
    while let Ok(Some(line)) = events.next_line().await {
        match serde_json::from_str::<InitEvent>(&line) {
            Ok(event @ InitEvent::ProgramEnded(_)) => {
                program_ended.notify_one();
                return Some(event);
            }
            Ok(event @ InitEvent::SetupFailed { .. }) => last = Some(event),
            Ok(_) => {}
            Err(e) => tracing::warn!(%e, line, "unreadable event from the jail init"),
        }
    }
    last
}

/// The command line an exec'd run of `spec` has: its interpreter and arguments.
pub fn command_of(spec: &JailSpec) -> Vec<String> {
    std::iter::once(spec.program.to_string_lossy().into_owned()).chain(spec.args.iter().cloned()).collect()
}

/// What a template's child of `spec` runs: its code file, which the child writes itself when given `source` (a
/// prepared sandbox's pid 1 wrote none).
pub fn child_job<'a>(spec: &'a JailSpec, source: Option<&'a str>) -> ChildJob<'a> {
    ChildJob {
        rlimits: &spec.rlimits,
        landlock: spec.landlock,
        home: spec.home.as_ref(),
        env: &spec.env,
        program: Program::File { path: &spec.code_path, source },
    }
}

/// Has the template fork the program into the sandbox of `pid1` and waits for its end.
async fn fork_program(
    forked: &ForkInto<'_>,
    spec: &JailSpec,
    pid1: i32,
    stdio: [OwnedFd; 3],
) -> std::result::Result<Termination, ForkFailure> {
    let SandboxHandles { ids, pid1, cgroups } =
        sandbox_handles(pid1, &forked.cgroup_procs).map_err(ForkFailure::Failed)?;
    let child = ChildSpec {
        setup: ChildSetup { says_its_end: true, ids, scoped: true, command: command_of(spec) },
        job: child_job(spec, None),
    };
    let request = ForkRequest { pid1, stdio, cgroups };
    let mut child =
        forked.templates.fork(forked.choice, &child, request).map_err(|e| ForkFailure::Unavailable(e.to_string()))?;
    if let Err(why) = child.started().await {
        // Nothing of the program ran unless the child said so (it may run before the template says it forked):
        // only then may the run be tried again.
        return Err(ForkFailure::of(why, child.ran()));
    }
    sandlot_core::marks::mark("c.forked");
    let (end, cpu) = child.ended().await.map_err(|why| ForkFailure::of(why, child.ran()))?;
    tracing::debug!(cpu_us = (cpu * 1e6) as u64, "the forked program ended"); // its cgroup counts it too
    Ok(end)
}

/// SIGKILLs the sandbox's pid 1: the kernel then kills everything in its pid namespace, and the init (its parent)
/// reaps it and exits, so when the init is gone nothing of the run is left. Before pid 1 is known the init itself is
/// killed (pid 1 dies with it through its parent-death signal).
fn kill_sandbox(pid1: &AtomicI32, init: &PidfdChild) {
    match pid1.load(Ordering::SeqCst) {
        pid1 if pid1 > 0 => {
            let _ = kill(Pid::from_raw(pid1), Signal::SIGKILL);
        }
        _ => init.kill(),
    }
}

/// The last resort when the init does not go: the init, and every process in the run's cgroups.
fn kill_everything(init: &PidfdChild, cgroup: &Option<RunCgroup>) {
    init.kill();
    if let Some(cgroup) = cgroup {
        cgroup.kill_all();
    }
}

/// Reads a stream to its end, keeping at most `cap` bytes (its head and its tail; the excess is read and dropped),
/// forwarding the head as it comes and the rest (the cut marker and the tail) at the end.
async fn read_capped(
    mut pipe: impl AsyncRead + Unpin,
    stream: Stream,
    cap: usize,
    sink: &dyn OutputSink,
) -> CapturedStream {
    let mut captured = CapturedStream::new(cap);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                let rest = captured.rest();
                if !rest.is_empty() {
                    sink.output(OutputChunk { stream, data: rest });
                }
                return captured;
            }
            Ok(n) => {
                let kept = captured.push(&buffer[..n]);
                if !kept.is_empty() {
                    sink.output(OutputChunk { stream, data: kept.to_vec() });
                }
            }
        }
    }
}
