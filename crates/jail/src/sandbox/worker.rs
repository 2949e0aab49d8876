//! The worker: the last steps before the interpreter runs, in the order that keeps each one possible. Signals
//! unblocked and at their default actions, a new session (no terminal to inject into), the run's cgroups joined (and a cgroup namespace rooted there), rlimits, the working
//! directory, every capability dropped, `no_new_privs`, Landlock, stray descriptors closed, seccomp last, `execve`.
//!
//! Pid 1 starts it with [`spawn`], once per run, or once per process of a live sandbox (see `resident`), whose
//! worker first puts the process's own standard streams on 0-2 and, on failure, leaves its error to pid 1 instead
//! of reporting it as the sandbox's.

use std::cell::Cell;
use std::convert::Infallible;
use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::RawFd;
use std::path::Path;

use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, SigmaskHow, sigprocmask};
use nix::unistd::{Pid, chdir, execve, setsid};

use super::events::{SetupError, Step};
use super::{capabilities, landlock, rlimits, seccomp};
use crate::protocol::{HomeMount, JailSpec};
use crate::sys::map_stack;
use crate::sys::mount::cpath;

/// What the worker starts: `program` with `args` and exactly `env`, confined as `spec` says, in the run's cgroups
/// (`cgroup.procs` files opened by the init as root).
pub struct ProgramToStart<'a> {
    pub spec: &'a JailSpec,
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub cgroups: &'a [File],
    /// Descriptors put on 0, 1 and 2 before the exec (a live sandbox's process: each is 3 or above); `None`: the
    /// inherited ones.
    pub stdio: Option<[RawFd; 3]>,
    /// Where the worker leaves why it failed, for pid 1 (whose memory it shares) to report; `None`: it reports a
    /// failure itself, as the run's.
    pub failure: Option<&'a Cell<Option<SetupError>>>,
    /// Already in the sandbox's Landlock domain, inherited from pid 1 (a live sandbox's, so that its processes share
    /// one domain: Landlock's scopes would fence each process off from the others, its signals and abstract
    /// sockets); `false`: the worker enters a domain of its own (when `spec.landlock`).
    pub landlocked: bool,
}

impl<'a> ProgramToStart<'a> {
    /// The spec's own program, as a run starts it.
    pub fn of_spec(spec: &'a JailSpec, cgroups: &'a [File]) -> Self {
        Self {
            spec,
            program: &spec.program,
            args: &spec.args,
            env: &spec.env,
            cgroups,
            stdio: None,
            failure: None,
            landlocked: false,
        }
    }
}

/// Runs the worker; never returns (it becomes the program, or reports why not).
pub fn run(program: &ProgramToStart) -> ! {
    match prepare_and_exec(program) {
        Ok(never) => match never {},
        Err(error) => match program.failure {
            Some(slot) => {
                slot.set(Some(error));
                // SAFETY: ends the worker without running destructors of pid 1's image, whose memory it shares.
                unsafe { libc::_exit(126) }
            }
            None => error.report_and_exit(),
        },
    }
}

/// Stack of the worker until it execs the program.
const WORKER_STACK_BYTES: usize = 512 * 1024;

/// Starts the worker the way `posix_spawn` starts a program: a clone that shares this process's memory
/// (`CLONE_VM`) on a stack of its own, while this process waits (`CLONE_VFORK`) until it has exec'd the program or
/// exited. Nothing is copied: no page tables, no copy-on-write faults, no second address space to tear down,
/// which a `fork` would cost on every run. The worker changes only what is its own (credentials, seccomp,
/// session, limits, working directory, its copy of the descriptor table); what it allocates on the way stays in
/// this process's heap, unused.
pub fn spawn(program: &ProgramToStart) -> std::io::Result<Pid> {
    extern "C" fn worker_entry(program: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `program` is the &ProgramToStart passed to clone below; the parent is suspended until this child
        // execs or exits, so the reference stays valid for as long as it is used.
        run(unsafe { &*(program as *const ProgramToStart) })
    }
    // Left mapped (unused once the worker has exec'd) until pid 1 exits.
    let top = map_stack(WORKER_STACK_BYTES)?;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    // SAFETY: the child runs on its own stack, shares memory only while this (single-threaded) process is
    // suspended, and never returns from `worker_entry` (it execs or exits).
    let pid = unsafe { libc::clone(worker_entry, top, flags, program as *const ProgramToStart as *mut libc::c_void) };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Pid::from_raw(pid))
}

/// Sets every signal's action to its default. `execve` resets handled signals but keeps ignored ones ignored, and
/// the sandlot binary ignores SIGPIPE (Rust's runtime does, in the zygote and in `sandlot run`): without this, a
/// program writing to a closed pipe would get `EPIPE` instead of dying, and a shell loop such as
/// `while :; do echo x; done | head -1` would never end. The worker has its own signal actions (no `CLONE_SIGHAND`).
/// The raw system call, as libc's wrapper refuses the two real-time signals it reserves (found ignored too).
fn default_signal_actions() {
    /// The kernel's `struct sigaction` (x86-64 and arm64 alike: handler, flags, restorer, mask).
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    let default = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
    for signal in 1..=64 {
        // SAFETY: rt_sigaction reads a valid struct of the kernel's layout (mask size 8) and writes nothing back;
        // SIGKILL, SIGSTOP and numbers the kernel lacks give EINVAL, which changes nothing.
        unsafe { libc::syscall(libc::SYS_rt_sigaction, signal, &default as *const KernelSigaction, 0usize, 8usize) };
    }
}

/// Puts `stdio` on descriptors 0, 1 and 2 (each source is 3 or above, so no order can clobber one).
fn take_stdio(stdio: [RawFd; 3]) -> Result<(), SetupError> {
    for (target, fd) in (0..).zip(stdio) {
        // SAFETY: dup2 between descriptors of this process's own table.
        if unsafe { libc::dup2(fd, target) } < 0 {
            return Err(SetupError::new(format!("dup2 onto {target}"), std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn cstring(text: &str, what: &str) -> Result<CString, SetupError> {
    CString::new(text).step(|| format!("{what} contains a NUL byte"))
}

/// Moves this process into the run's cgroups, then gives it a cgroup namespace rooted there (the program sees
/// its own group as `/`).
fn join_cgroups(cgroups: &[File]) -> Result<(), SetupError> {
    for mut procs in cgroups {
        procs.write_all(b"0").step(|| "join the run's cgroup".into())?;
    }
    if !cgroups.is_empty() {
        unshare(CloneFlags::CLONE_NEWCGROUP).step(|| "unshare cgroup namespace".into())?;
    }
    Ok(())
}

fn prepare_and_exec(program: &ProgramToStart) -> Result<Infallible, SetupError> {
    let spec = program.spec;
    sandlot_core::marks::mark("w.start");
    if let Some(stdio) = program.stdio {
        take_stdio(stdio)?;
    }
    // A live sandbox's pid 1 blocks SIGCHLD (it reads it from a signalfd); the program starts with none blocked.
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None).step(|| "sigprocmask".into())?;
    default_signal_actions();
    setsid().step(|| "setsid".into())?;
    join_cgroups(program.cgroups)?;
    sandlot_core::marks::mark("w.cgroups");
    rlimits::apply(&spec.rlimits).step(|| "setrlimit".into())?;
    let workdir = match &spec.home {
        Some(HomeMount { path, scratch_mb: None }) => path.as_path(),
        _ => Path::new("/data"),
    };
    chdir(workdir).step(|| format!("chdir {}", workdir.display()))?;
    sandlot_core::marks::mark("w.chdir");
    capabilities::drop_all().step(|| "drop capabilities".into())?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } < 0 {
        return Err(SetupError::new("prctl(PR_SET_NO_NEW_PRIVS)", std::io::Error::last_os_error()));
    }
    sandlot_core::marks::mark("w.caps_nnp");
    if spec.landlock && !program.landlocked {
        landlock::apply(spec.home.as_ref().map(|home| home.path.as_path())).step(|| "landlock".into())?;
    }

    sandlot_core::marks::mark("w.landlock");
    let path = cpath(program.program).step(|| "program path".into())?;
    let mut argv = vec![cstring(&program.program.to_string_lossy(), "program")?];
    for arg in program.args {
        argv.push(cstring(arg, "argument")?);
    }
    let env =
        program.env.iter().map(|(k, v)| cstring(&format!("{k}={v}"), "environment")).collect::<Result<Vec<_>, _>>()?;

    // Every inherited descriptor but stdio (the events pipe, the mount sources) closes on exec.
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range on descriptor numbers; no memory is involved.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) } < 0 {
        return Err(SetupError::new("close_range", std::io::Error::last_os_error()));
    }
    sandlot_core::marks::mark("w.closerange");
    seccomp::install().step(|| "seccomp".into())?;
    sandlot_core::marks::mark("w.seccomp");
    let Err(error) = execve(&path, &argv, &env);
    Err(SetupError::new(format!("exec {}", program.program.display()), error))
}
