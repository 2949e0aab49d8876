//! The sandbox's pid 1: builds the filesystem, names the host, brings up loopback (unless the init did), writes
//! the code, starts the worker and reaps every process until the worker ends. Then it ends the run before it
//! reports the program's end: it kills every process left in the pid namespace (background and double-forked ones
//! too) and reaps them all. So when the report arrives, nothing of the program runs any more and its cgroups are
//! empty: the supervisor can finish the run without waiting for the namespaces to be torn down. The run's tmpfs
//! mounts, whose pages count against the run's memory cgroup, are unmounted after the report when the init shares
//! the cgroup slot's lock (the slot stays taken until they are gone), else before it. A live sandbox's pid 1
//! (`spec.resident`) writes no code and starts no worker of its own: once the filesystem is built it serves the
//! supervisor's requests ([`super::resident`]) until the sandbox ends.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use nix::errno::Errno;
use nix::mount::{MntFlags, umount2};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Pid, sethostname};
use sandlot_core::Termination;

use super::events::{self, SetupError, Step};
use super::loopback;
use super::mounts::{self, HostTrees};
use super::stdio::close_stdio;
use super::worker::{self, ProgramToStart};
use crate::protocol::{InitEvent, JailSpec};
use crate::sys::{die_with_parent, map_stack};

/// What pid 1 is given by the init, all of it its own.
pub struct SandboxToRun {
    pub spec: JailSpec,
    pub trees: Option<HostTrees>,
    /// The run's `cgroup.procs` files, which the worker joins; pid 1 closes them once the worker has.
    pub cgroups: Vec<File>,
    /// Pid 1's end of the liveness pipe (see [`parent_gone`]).
    pub parent_alive: std::io::PipeReader,
    /// The init's end of that pipe: pid 1 closes its copy of the descriptor.
    pub init_end: RawFd,
    /// Report the program's end before unmounting the run's tmpfs mounts (see [`unmount_tmpfs`]).
    pub report_first: bool,
}

/// Runs pid 1; never returns.
/// Stack of pid 1, mapped on demand (only the pages it touches get memory), above a guard page.
const PID1_STACK_BYTES: usize = 8 * 1024 * 1024;

/// Starts pid 1 (the init has unshared the pid namespace, so its next child is pid 1 there) and returns its pid on
/// the host.
///
/// Pid 1 shares the init's memory (`CLONE_VM`) on a stack of its own, with its own descriptor table, credentials and
/// namespaces: a `fork` would copy the init's page tables and then both would take copy-on-write faults, which under
/// load cost throughput (docs/benchmarks.md). The price is the rule of `init::watch_pid1`, the only code the init
/// runs from here on; pid 1 owns everything in `sandbox`.
pub fn start(sandbox: SandboxToRun) -> Result<Pid, SetupError> {
    extern "C" fn pid1_entry(sandbox: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `sandbox` is the box leaked by `start` for this process alone; the init never touches it again.
        let sandbox = unsafe { Box::from_raw(sandbox as *mut SandboxToRun) };
        run(*sandbox)
    }
    let stack = map_stack(PID1_STACK_BYTES).step(|| "map pid 1's stack".into())?;
    let sandbox = Box::into_raw(Box::new(sandbox));
    // SAFETY: the child runs on its own stack (never unmapped), never returns from `pid1_entry`, and the parent
    // touches neither the box nor the heap from here on (`init::watch_pid1`).
    let pid = unsafe { libc::clone(pid1_entry, stack, libc::CLONE_VM | libc::SIGCHLD, sandbox.cast()) };
    if pid < 0 {
        let error = std::io::Error::last_os_error();
        // SAFETY: no child took the box; it is this process's again.
        drop(unsafe { Box::from_raw(sandbox) });
        return Err(SetupError::new("clone pid 1", error));
    }
    Ok(Pid::from_raw(pid))
}

fn run(sandbox: SandboxToRun) -> ! {
    sandlot_core::marks::mark("p.start");
    let SandboxToRun { spec, trees, cgroups, parent_alive, init_end, report_first } = sandbox;
    // SAFETY: closes pid 1's copy of the init's end of the liveness pipe (its own descriptor table).
    unsafe { libc::close(init_end) };
    let spec = &spec;
    match prepare(spec, trees, &parent_alive) {
        Ok(()) => {}
        Err(error) => error.report_and_exit(),
    }
    if spec.resident {
        super::resident::serve(spec, &cgroups)
    }
    let status = match spec.forked {
        true => {
            drop(cgroups);
            await_forked_program()
        }
        false => start_and_wait_worker(spec, cgroups),
    };
    sandlot_core::marks::mark("p.worker_exit");
    end_every_process();
    sandlot_core::marks::mark("p.ended_all");
    let ended = InitEvent::ProgramEnded(status);
    if report_first {
        events::send(&ended);
        // The supervisor may now exit (`sandlot run` does at once), and the init die with it: pid 1, which holds
        // the slot's lock too (inherited from the init), must not die with them before its unmounts are done.
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0) };
        unmount_tmpfs();
    } else {
        unmount_tmpfs();
        events::send(&ended);
    }
    // SAFETY: ends pid 1 (and with it the namespace) without running destructors of the forked image.
    unsafe { libc::_exit(0) }
}

/// Starts the worker, which execs the program, and reaps every process until the worker ends: its end.
fn start_and_wait_worker(spec: &JailSpec, cgroups: Vec<File>) -> Termination {
    let worker = match worker::spawn(&ProgramToStart::of_spec(spec, &cgroups)) {
        Ok(worker) => worker,
        Err(e) => SetupError::new("start the worker", e).report_and_exit(),
    };
    sandlot_core::marks::mark("p.worker_execd");
    drop(cgroups);
    close_stdio();
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == worker => return Termination::Exited { code },
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == worker => {
                return Termination::Signaled { signal: signal as i32 };
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(e) => SetupError::new("wait for worker", e).report_and_exit(),
        }
    }
}

/// A forked run's wait (`spec.forked`): the program is a Python template's child, which the supervisor starts
/// once pid 1 says the sandbox is ready, and whose end it learns from the template. Pid 1 only reaps what is
/// orphaned into it until the supervisor closes its fd 0. The returned end is a placeholder the supervisor
/// replaces with the template's word.
fn await_forked_program() -> Termination {
    // The program's output goes to pipes of its own: pid 1's copies of the init's would only keep them open.
    for fd in 1..=2 {
        // SAFETY: closes descriptor numbers this process owns and no longer uses.
        unsafe { libc::close(fd) };
    }
    events::send(&InitEvent::SandboxReady);
    let mut byte = [0u8; 1];
    loop {
        let mut poll = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; a timeout, so that orphans are reaped while the program runs.
        let ready = unsafe { libc::poll(&mut poll, 1, 100) };
        while let Ok(status) = waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
        if ready > 0 {
            // SAFETY: reads into a one-byte buffer of this stack; nothing is expected but the end of the stream.
            let read = unsafe { libc::read(0, byte.as_mut_ptr().cast(), 1) };
            if read <= 0 {
                break;
            }
        }
    }
    // SAFETY: closes fd 0, pid 1's own.
    unsafe { libc::close(0) };
    Termination::Exited { code: 0 }
}

/// Unmounts the run's tmpfs mounts. Their pages are charged to the run's memory cgroup until the superblock goes,
/// which must happen before another run takes the same cgroup slot: before the report, unless the init shares the
/// slot's lock (then pid 1 holds it too, inherited, and the slot stays taken until both have exited). An unmount
/// waits for an RCU grace period (docs/benchmarks.md), which is why they do not come first when they need not.
fn unmount_tmpfs() {
    for tmpfs in ["/tmp", "/dev/shm"] {
        let _ = umount2(tmpfs, MntFlags::MNT_DETACH);
    }
}

/// Kills every other process in the pid namespace and reaps them all (as pid 1, every orphan is its child). A
/// process forking at the moment of the kill is killed with its child: the loop kills again until none is left.
fn end_every_process() {
    loop {
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        match waitpid(None, None) {
            Err(Errno::ECHILD) => return,
            Ok(_) | Err(_) => continue,
        }
    }
}

/// Whether the init that forked us is gone (its end of the liveness pipe closed).
fn parent_gone(parent_alive: &std::io::PipeReader) -> bool {
    let mut poll = libc::pollfd { fd: parent_alive.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & (libc::POLLHUP | libc::POLLIN) != 0
}

fn prepare(spec: &JailSpec, trees: Option<HostTrees>, parent_alive: &std::io::PipeReader) -> Result<(), SetupError> {
    die_with_parent().step(|| "prctl(PR_SET_PDEATHSIG)".into())?;
    if parent_gone(parent_alive) {
        return Err(SetupError::new("start", "the init died before the sandbox started"));
    }
    mounts::build(spec, trees)?;
    sandlot_core::marks::mark("p.fs");
    sethostname(&spec.hostname).step(|| "sethostname".into())?;
    if spec.switch_to.is_none() {
        // Started as root, the init made the network namespace and brought loopback up before giving up root.
        loopback::bring_up().step(|| "bring up loopback".into())?;
    }
    sandlot_core::marks::mark("p.host");
    if spec.resident || spec.prepared {
        return Ok(()); // a live sandbox's processes, and a prepared sandbox's child, bring their own code
    }
    let mut code = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&spec.code_path)
        .step(|| format!("create {}", spec.code_path.display()))?;
    code.write_all(spec.code.as_bytes()).step(|| format!("write {}", spec.code_path.display()))
}
