//! The init: what runs when the supervisor re-executes the sandlot binary with [`crate::INIT_SUBCOMMAND`].
//!
//! It is single-threaded (it starts before any runtime), which `unshare(CLONE_NEWUSER)` requires. Its steps:
//! 1. die with the supervisor (`PR_SET_PDEATHSIG`), read the [`JailSpec`] from standard input;
//! 2. open the run's `cgroup.procs` files while still root (the worker joins them just before the program starts,
//!    so only the program's processes are ever in the run's cgroups) and take a reference to the supervisor's locks
//!    on the cgroup slot and on the run's uid ([`share_slot_lock`]); when started as root, capture `/data` as a
//!    tree idmapped from the storage uid to the run's ([`crate::idmap`]), enter the network namespace (a new one
//!    with loopback up, or the conversation's kept one, see [`crate::netns_pool`]), then become the run's
//!    unprivileged host uid (the storage uid if the idmap failed);
//! 3. create a user namespace mapping that uid to the sandbox uid, then mount, pid, ipc, uts and cgroup
//!    namespaces owned by it (and the network namespace too when not started as root);
//! 4. start the sandbox's pid 1 ([`crate::pid1::start`], which shares this process's memory: from then on the
//!    init allocates nothing), report its pid, close its copies of the program's standard streams (so that they
//!    end when the program does), wait for pid 1 and `_exit`.
//!
//! An init that `sandlot run` forks first thing ([`run_main_ahead`]) does more before step 1 when it is root, while
//! the command is still preparing the run: it makes the IPC namespace (owned by the host's user namespace) and a
//! session of its own, it assembles the standard read-only skeleton in a mount namespace of its own, which it then
//! leaves for the host's again (see [`crate::root_template::assemble_detached`]), and it enters its network
//! namespace: the conversation's pinned one (see [`crate::PinnedNetns`]) or a new one. Which, it learns from the
//! [`HeadStart`] the command sends as soon as it has parsed its arguments.
//!
//! Nothing is ever printed: stdout and stderr belong to the program; the init speaks through [`Report`]s.

use std::convert::Infallible;
use std::fs::File;
use std::io::Read;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Gid, Pid, Uid, getegid, geteuid, setgroups, setresgid, setresuid};

use crate::cpu_placement::CpuSet;
use crate::filesystem::HostTrees;
use crate::pidfd_child::pidfd_open;
use crate::report::{Report, SetupError, Step};
use crate::root_template::DetachedSkeleton;
use crate::spec::{HeadStart, JailSpec, SlotLock};
use crate::{loopback, pid1, root_template};

/// Largest spec accepted (code is capped well below this by the engine).
const MAX_SPEC_BYTES: usize = 64 * 1024 * 1024;

/// Largest [`HeadStart`] accepted.
const MAX_HEAD_START_BYTES: usize = 64 * 1024;

/// Entry point of the init; never returns. `report_fd` is the descriptor number given on the command line.
pub fn run_main(report_fd: i32) -> ! {
    crate::report::set_report_fd(report_fd);
    match helper(Ahead::default()) {
        Ok(never) => match never {},
        Err(error) => error.report_and_exit(),
    }
}

/// What an init made before its spec came.
#[derive(Default)]
struct Ahead {
    /// It is in its network namespace: a new one, with loopback up, or the conversation's pinned one.
    netns: bool,
    /// It leads a session of its own (no controlling terminal), which pid 1 and the program share: the worker
    /// need not make one (`setsid` costs ~0.1 ms, its scheduler autogroup).
    session: bool,
    /// It is in a new IPC namespace (owned by the host's user namespace: nothing in the sandbox can change its
    /// limits).
    ipcns: bool,
    /// The standard read-only skeleton, as a detached tree.
    skeleton: Option<OwnedFd>,
    /// The mount namespace the skeleton was assembled in: held until this process exits (see
    /// [`DetachedSkeleton`]).
    _staging_namespace: Option<OwnedFd>,
    /// The CPUs to widen this process's set to once the spec has come (see [`crate::cpu_placement`]).
    cpus: Option<CpuSet>,
}

/// Entry point of an init forked by `sandlot run` before its spec is ready; never returns. As root, it makes what
/// depends on nothing in the spec while the command is still preparing the run: the IPC namespace, a session, the
/// standard read-only skeleton and, once the command has said whether the conversation has a pinned one, the
/// network namespace (~0.1, ~0.1, ~0.45 and ~0.5 ms of CPU, docs/benchmarks.md; joining a pinned one costs
/// ~10 µs), taken off the run's path. Any that fails is made per run instead, as without a head start. `cpus`: the
/// command's CPUs, which this process widens its set to again once its spec has come (the command started it on the
/// others, see [`crate::cpu_placement`]).
pub fn run_main_ahead(report_fd: i32, cpus: Option<CpuSet>) -> ! {
    crate::report::set_report_fd(report_fd);
    let ahead = match geteuid().is_root() {
        true => {
            let ipcns = unshare(CloneFlags::CLONE_NEWIPC).is_ok();
            let session = nix::unistd::setsid().is_ok();
            let (skeleton, staging_namespace) = match root_template::assemble_detached() {
                Ok(DetachedSkeleton { tree, staging_namespace }) => (Some(tree), Some(staging_namespace)),
                Err(_) => (None, None),
            };
            // The rest comes once the command has parsed its arguments (see `Prefork::announce`): by now, usually.
            let head_start = read_head_start();
            let netns = match &head_start.join_netns {
                Some(path) => join_network_namespace(path).is_ok() || new_network_namespace().is_ok(),
                None => new_network_namespace().is_ok(),
            };
            Ahead { netns, ipcns, session, skeleton, _staging_namespace: staging_namespace, cpus }
        }
        false => {
            read_head_start(); // nothing in it can be done without root
            Ahead { cpus, ..Ahead::default() }
        }
    };
    poll_for_input(SPEC_POLLING);
    match helper(ahead) {
        Ok(never) => match never {},
        Err(error) => error.report_and_exit(),
    }
}

/// How long an init forked by `sandlot run` polls for its spec before it sleeps in `read`. Waking a process that
/// sleeps on another CPU, idle by then, costs ~50–80 µs on our VMs (the write sends an interrupt to a halted
/// virtual CPU); the spec usually comes within a few hundred µs of the init being ready, on a CPU that would be
/// idle anyway.
const SPEC_POLLING: std::time::Duration = std::time::Duration::from_millis(3);

/// Returns once standard input has something to read, or after `limit`, polling without sleeping.
fn poll_for_input(limit: std::time::Duration) {
    let start = std::time::Instant::now();
    let mut stdin = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
    // SAFETY: poll on one pollfd that lives across the call, with a zero timeout (it never sleeps).
    while unsafe { libc::poll(&mut stdin, 1, 0) } == 0 && start.elapsed() < limit {
        std::hint::spin_loop();
    }
}

/// Sets this process to be killed (SIGKILL) when its parent dies.
pub(crate) fn die_with_parent() -> Result<(), SetupError> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } < 0 {
        return Err(SetupError::new("prctl(PR_SET_PDEATHSIG)", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Reads one frame from standard input (the supervisor's pipe): its length (4 bytes, little-endian), then its
/// bytes, at most `max`.
fn read_frame(max: usize) -> std::io::Result<Vec<u8>> {
    // SAFETY: fd 0 is the pipe the supervisor gave us; ManuallyDrop keeps it open for the program.
    let mut stdin = ManuallyDrop::new(unsafe { File::from_raw_fd(0) });
    let mut length = [0u8; 4];
    stdin.read_exact(&mut length)?;
    let length = u32::from_le_bytes(length) as usize;
    if length > max {
        return Err(std::io::Error::other(format!("{length} bytes is too large")));
    }
    let mut bytes = vec![0u8; length];
    stdin.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// The [`HeadStart`] frame; the default (nothing more ahead) if it is unreadable.
fn read_head_start() -> HeadStart {
    read_frame(MAX_HEAD_START_BYTES).ok().and_then(|json| serde_json::from_slice(&json).ok()).unwrap_or_default()
}

fn read_spec() -> Result<JailSpec, SetupError> {
    let bytes = read_frame(MAX_SPEC_BYTES).step(|| "read spec".into())?;
    serde_json::from_slice(&bytes).step(|| "parse spec".into())
}

/// Opens the run's `cgroup.procs` files for writing, as root: a descriptor opened by root lets the worker, an
/// unprivileged process in the sandbox's namespaces by then, move itself in (the kernel checks the credentials of
/// whoever opened the file). Close-on-exec, so the program never holds one.
fn open_cgroups(spec: &JailSpec) -> Result<Vec<File>, SetupError> {
    spec.cgroup_procs
        .iter()
        .map(|procs| std::fs::OpenOptions::new().write(true).open(procs).step(|| format!("open {}", procs.display())))
        .collect()
}

/// Closes this process's copies of the program's standard streams: the supervisor sees the end of the program's
/// output when the program's own copies close, not when the init exits.
pub fn close_stdio() {
    for fd in 0..=2 {
        // SAFETY: closes descriptor numbers this process owns and no longer uses (nothing here reads or prints).
        unsafe { libc::close(fd) };
    }
}

/// Takes a reference of its own to the supervisor's lock on the run's cgroup slot (`pidfd_getfd`, as root; the
/// descriptor is close-on-exec; pid 1 inherits it). Held by both until they exit, it keeps the slot taken until
/// the run's tmpfs mounts, whose pages are charged to the slot's memory cgroup, are gone: so pid 1 may report the
/// program's end before it unmounts them. `None` if the kernel refuses (pid 1 then unmounts first).
fn share_slot_lock(lock: &SlotLock) -> Option<OwnedFd> {
    let pidfd = pidfd_open(Pid::from_raw(lock.holder_pid as libc::pid_t)).ok()?;
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number in that process and flags; returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), lock.fd, 0) };
    // SAFETY: as above, a new descriptor owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn write_id_maps(spec: &JailSpec, host_uid: u32, host_gid: u32) -> Result<(), SetupError> {
    std::fs::write("/proc/self/setgroups", "deny").step(|| "write setgroups".into())?;
    std::fs::write("/proc/self/uid_map", format!("{} {host_uid} 1\n", spec.sandbox_uid))
        .step(|| "write uid_map".into())?;
    std::fs::write("/proc/self/gid_map", format!("{} {host_gid} 1\n", spec.sandbox_gid)).step(|| "write gid_map".into())
}

/// As root: a new network namespace, owned by the host's user namespace (so nothing in the sandbox can reconfigure
/// it), with its loopback up.
fn new_network_namespace() -> Result<(), SetupError> {
    unshare(CloneFlags::CLONE_NEWNET).step(|| "unshare network namespace".into())?;
    loopback::bring_up().step(|| "bring up loopback".into())
}

/// As root: joins the network namespace at `path` (a kept or pinned one).
fn join_network_namespace(path: &Path) -> Result<(), SetupError> {
    let netns = File::open(path).step(|| format!("open {}", path.display()))?;
    setns(netns, CloneFlags::CLONE_NEWNET).step(|| "join the network namespace".into())
}

/// As root: joins the conversation's kept network namespace, or makes a new one unless it has one already
/// (`entered_ahead`).
fn enter_network_namespace(spec: &JailSpec, entered_ahead: bool) -> Result<(), SetupError> {
    match &spec.join_netns {
        Some(path) => join_network_namespace(path),
        None if entered_ahead => Ok(()),
        None => new_network_namespace(),
    }
}

fn helper(ahead: Ahead) -> Result<Infallible, SetupError> {
    die_with_parent()?;
    let spec = read_spec()?;
    if let Some(cpus) = &ahead.cpus {
        cpus.apply_to(0);
    }
    let cgroups = open_cgroups(&spec)?;
    // Held until this process exits, and by pid 1 (inherited) until it exits: see `pid1::unmount_tmpfs`.
    let slot_lock = spec.slot_lock.as_ref().and_then(share_slot_lock);
    let report_first = spec.slot_lock.is_none() || slot_lock.is_some();
    // Held likewise: the run's uid is not leased to another run while a process of this one may be left.
    let _uid_lock = spec.uid_lock.as_ref().and_then(share_slot_lock);
    // As root, capture the trees from outside the system dirs while every path is still reachable.
    let trees = match spec.switch_to {
        Some(_) => {
            let skeleton =
                ahead.skeleton.filter(|_| spec.root_template.is_none() && root_template::standard_fits(&spec));
            Some(HostTrees::capture(&spec, skeleton)?)
        }
        None => None,
    };
    if spec.switch_to.is_some() {
        enter_network_namespace(&spec, ahead.netns)?;
    }
    // Without an idmapped `/data`, the program runs as the uid that owns it on disk (shared by every such run).
    let switch_to = match (&trees, spec.storage_id) {
        (Some(trees), Some(storage)) if !trees.idmapped => spec.switch_to.map(|_| (storage, storage)),
        _ => spec.switch_to,
    };
    if let Some((uid, gid)) = switch_to {
        setgroups(&[]).step(|| "setgroups".into())?;
        setresgid(Gid::from_raw(gid), Gid::from_raw(gid), Gid::from_raw(gid)).step(|| format!("setresgid {gid}"))?;
        setresuid(Uid::from_raw(uid), Uid::from_raw(uid), Uid::from_raw(uid)).step(|| format!("setresuid {uid}"))?;
        die_with_parent()?; // a credential change clears the parent-death signal
        // ... and the dumpable flag, which would leave /proc/self/{uid,gid}_map owned by root and unwritable.
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } < 0 {
            return Err(SetupError::new("prctl(PR_SET_DUMPABLE)", std::io::Error::last_os_error()));
        }
    }
    let (host_uid, host_gid) = (geteuid().as_raw(), getegid().as_raw());
    unshare(CloneFlags::CLONE_NEWUSER).step(|| "unshare user namespace".into())?;
    write_id_maps(&spec, host_uid, host_gid)?;
    let mut namespaces =
        CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWUTS | CloneFlags::CLONE_NEWCGROUP;
    if !ahead.ipcns {
        namespaces |= CloneFlags::CLONE_NEWIPC;
    }
    if spec.switch_to.is_none() {
        namespaces |= CloneFlags::CLONE_NEWNET; // pid 1 brings its loopback up
    }
    unshare(namespaces).step(|| "unshare namespaces".into())?;
    // Pid 1 holds the read end of this pipe: once the init is gone the pipe reports a hang-up, which closes the
    // window before pid 1 has set its parent-death signal.
    let (alive_read, alive_write) = std::io::pipe().step(|| "create liveness pipe".into())?;
    // What this process closes once pid 1 has its own copies: every descriptor it hands to pid 1 but the skeleton
    // and the workspace trees, which it keeps, unused, until it exits.
    let mut handed_over: Vec<i32> = cgroups.iter().map(AsRawFd::as_raw_fd).collect();
    handed_over.push(alive_read.as_raw_fd());
    let task = pid1::Task {
        spec,
        trees,
        cgroups,
        parent_alive: alive_read,
        init_end: alive_write.as_raw_fd(),
        report_first,
        new_session: !ahead.session,
    };
    let pid1 = pid1::start(task)?;
    // Pid 1 shares this process's memory from here on (see `pid1::start`): nothing below allocates or frees,
    // runs a destructor, or exits through `exit` (whose handlers would touch the allocator's state).
    for fd in handed_over.iter() {
        // SAFETY: closes this process's copies of descriptors pid 1 owns in its own descriptor table.
        unsafe { libc::close(*fd) };
    }
    Report::Started { init_pid: pid1.as_raw() }.send();
    close_stdio();
    let code = loop {
        match waitpid(pid1, None) {
            Ok(WaitStatus::Exited(_, code)) => break code,
            Ok(WaitStatus::Signaled(_, signal, _)) => break 128 + signal as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break 125,
        }
    };
    // The child that made the idmap's user namespace (see `idmap::user_namespace`), long dead by now: reaped
    // here, after pid 1's report, off the run's path.
    while !matches!(waitpid(None::<Pid>, None), Err(nix::errno::Errno::ECHILD)) {}
    // SAFETY: ends the init without running exit handlers or destructors (see above); everything it holds is
    // released by the kernel.
    unsafe { libc::_exit(code) }
}
