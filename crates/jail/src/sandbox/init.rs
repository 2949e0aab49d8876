//! The init: one per run, single-threaded (which `unshare(CLONE_NEWUSER)` requires), started with the four
//! descriptors of [`crate::protocol`] by whoever forked it (the zygote, or `sandlot run` at the start of `main`).
//! Its steps:
//! 1. die with its parent, read the [`JailSpec`] from fd 0;
//! 2. as root: open the run's `cgroup.procs` files (the worker joins them just before the exec, so only the
//!    program's processes are ever in the run's cgroups), take references to the supervisor's locks on the cgroup
//!    slot and the run's uid ([`share_lock`]), capture the host trees (`/data` idmapped from the storage uid to the
//!    run's), enter the network namespace (the conversation's kept one, or a new one with loopback up), then become
//!    the run's unprivileged host uid (the storage uid if the idmap failed);
//! 3. create a user namespace mapping that uid to the sandbox uid, then the mount, pid, IPC, UTS and cgroup
//!    namespaces owned by it (and the network namespace too when not root);
//! 4. start the sandbox's pid 1 ([`super::pid1`], sharing this process's memory), send `Pid1Started`, close its
//!    copies of the program's standard streams (so they end when the program does), wait for pid 1 and exit.

use std::convert::Infallible;
use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Gid, Pid, Uid, getegid, geteuid, setgroups, setresgid, setresuid};

use super::events::{self, SetupError, Step};
use super::loopback;
use super::mounts::{HostTrees, cache_skeleton};
use super::pid1::{self, SandboxToRun};
use super::stdio::close_stdio;
use crate::protocol::{HeldLock, Identity, JailSpec, MAX_SPEC_BYTES, SkeletonRequest, pid1_started_line, read_frame};
use crate::sys::{die_with_parent, pidfd_open};

/// Who made the init, which says what it has before its spec comes.
pub enum Maker {
    /// A server's zygote: its clones share the skeleton it cached (if it could) in its mount namespace.
    Zygote { skeleton: Option<SkeletonRequest> },
    /// `sandlot run`, at the start of `main`: as root, the init makes the standard skeleton and its network
    /// namespace itself while the command prepares the run (the figures are in docs/benchmarks.md).
    OneShot,
}

/// What an init has before its spec comes.
#[derive(Default)]
struct Ahead {
    /// A skeleton cached in this process's mount namespace.
    skeleton: Option<SkeletonRequest>,
    /// This process is in a new network namespace of its own, loopback up.
    network: bool,
}

/// Where `sandlot run`'s init caches the standard skeleton: an empty directory on the host, mounted over only in
/// the init's own mount namespace.
const ONE_SHOT_SKELETON_DIR: &str = "/run/sandlot/skeleton";

/// Entry point of the init; never returns.
pub fn main(maker: Maker) -> ! {
    // First of all, so that nothing made ahead outlives the command or server that forked this process.
    let _ = die_with_parent();
    let ahead = match maker {
        Maker::Zygote { skeleton } => Ahead { skeleton, network: false },
        Maker::OneShot if geteuid().is_root() => prepare_alone(),
        Maker::OneShot => Ahead::default(),
    };
    match build_and_wait(ahead) {
        Ok(never) => match never {},
        Err(error) => error.report_and_exit(),
    }
}

/// As root, before the spec: the standard skeleton, cached as a zygote caches it, and a new network namespace. What
/// fails is made per run instead.
fn prepare_alone() -> Ahead {
    let request =
        SkeletonRequest { dir: ONE_SHOT_SKELETON_DIR.into(), identity: Identity::standard(), mount_points: vec![] };
    let cached = std::fs::create_dir_all(&request.dir).is_ok() && cache_skeleton(&request).is_ok();
    Ahead { skeleton: cached.then_some(request), network: enter_network_namespace(None).is_ok() }
}

fn read_spec() -> Result<JailSpec, SetupError> {
    // SAFETY: fd 0 is the pipe the supervisor gave us; ManuallyDrop keeps it open for the program.
    let mut stdin = ManuallyDrop::new(unsafe { File::from_raw_fd(0) });
    let bytes = read_frame(&mut *stdin, MAX_SPEC_BYTES).step(|| "read spec".into())?;
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

/// Takes a reference of its own to a lock (or the workspace's tree) the supervisor holds (`pidfd_getfd`, as root;
/// close-on-exec; pid 1 inherits it). Held by both until they exit, the cgroup slot's keeps the slot taken until the run's tmpfs mounts,
/// whose pages are charged to the slot's memory cgroup, are gone (so pid 1 may report the program's end before it
/// unmounts them), and the uid's keeps the uid from another run while a process of this one may be left. `None` if
/// the kernel refuses (pid 1 then unmounts first).
fn share_lock(lock: &HeldLock) -> Option<OwnedFd> {
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

/// As root: joins the conversation's kept network namespace, or makes a new one, owned by the host's user namespace
/// (so nothing in the sandbox can reconfigure it), with its loopback up.
fn enter_network_namespace(kept: Option<&Path>) -> Result<(), SetupError> {
    match kept {
        Some(path) => {
            let netns = File::open(path).step(|| format!("open {}", path.display()))?;
            setns(netns, CloneFlags::CLONE_NEWNET).step(|| "join the network namespace".into())
        }
        None => {
            unshare(CloneFlags::CLONE_NEWNET).step(|| "unshare network namespace".into())?;
            loopback::bring_up().step(|| "bring up loopback".into())
        }
    }
}

/// Becomes `uid`/`gid` for good, keeping the parent-death signal and the dumpable flag a credential change clears
/// (without the latter, `/proc/self/{uid,gid}_map` would stay root's and unwritable).
fn become_user(uid: u32, gid: u32) -> Result<(), SetupError> {
    setgroups(&[]).step(|| "setgroups".into())?;
    setresgid(Gid::from_raw(gid), Gid::from_raw(gid), Gid::from_raw(gid)).step(|| format!("setresgid {gid}"))?;
    setresuid(Uid::from_raw(uid), Uid::from_raw(uid), Uid::from_raw(uid)).step(|| format!("setresuid {uid}"))?;
    die_with_parent().step(|| "prctl(PR_SET_PDEATHSIG)".into())?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } < 0 {
        return Err(SetupError::new("prctl(PR_SET_DUMPABLE)", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn build_and_wait(ahead: Ahead) -> Result<Infallible, SetupError> {
    sandlot_core::marks::mark("i.start");
    die_with_parent().step(|| "prctl(PR_SET_PDEATHSIG)".into())?;
    let spec = read_spec()?;
    sandlot_core::marks::mark("i.spec");
    let cgroups = open_cgroups(&spec)?;
    let slot_lock = spec.slot_lock.as_ref().and_then(share_lock);
    let report_first = spec.slot_lock.is_none() || slot_lock.is_some();
    let _uid_lock = spec.uid_lock.as_ref().and_then(share_lock);
    sandlot_core::marks::mark("i.cgroups_lock");
    // As root, capture the trees while every path is still reachable (the run's uid may not traverse to them).
    let trees = match spec.switch_to {
        Some(_) => {
            let skeleton = ahead.skeleton.filter(|cached| cached.fits(&spec));
            let workspace = match &spec.workspace_tree {
                Some(tree) => Some(share_lock(tree).ok_or_else(|| {
                    SetupError::new("pidfd_getfd the workspace's tree", std::io::Error::last_os_error())
                })?),
                None => None,
            };
            Some(HostTrees::capture(&spec, workspace, skeleton.as_ref().map(|cached| cached.dir.as_path()))?)
        }
        None => None,
    };
    sandlot_core::marks::mark("i.trees");
    if spec.switch_to.is_some() && (spec.join_netns.is_some() || !ahead.network) {
        enter_network_namespace(spec.join_netns.as_deref())?;
    }
    sandlot_core::marks::mark("i.netns");
    // Without an idmapped `/data`, the program runs as the uid that owns it on disk (shared by every such run).
    let switch_to = match (&trees, spec.storage_id) {
        (Some(trees), Some(storage)) if !trees.idmapped => spec.switch_to.map(|_| (storage, storage)),
        _ => spec.switch_to,
    };
    if let Some((uid, gid)) = switch_to {
        become_user(uid, gid)?;
    }
    sandlot_core::marks::mark("i.creds");
    let (host_uid, host_gid) = (geteuid().as_raw(), getegid().as_raw());
    unshare(CloneFlags::CLONE_NEWUSER).step(|| "unshare user namespace".into())?;
    sandlot_core::marks::mark("i.userns");
    write_id_maps(&spec, host_uid, host_gid)?;
    sandlot_core::marks::mark("i.idmaps");
    let mut namespaces = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    if spec.switch_to.is_none() {
        namespaces |= CloneFlags::CLONE_NEWNET; // pid 1 brings its loopback up
    }
    unshare(namespaces).step(|| "unshare namespaces".into())?;
    sandlot_core::marks::mark("i.unshared");
    // Pid 1 holds the read end: once the init is gone the pipe reports a hang-up, which closes the window before
    // pid 1 has set its own parent-death signal.
    let (alive_read, alive_write) = std::io::pipe().step(|| "create liveness pipe".into())?;
    // This process's copies of what pid 1 now owns, closed by number once pid 1 has its own.
    let mut handed_over: Vec<RawFd> = cgroups.iter().map(AsRawFd::as_raw_fd).collect();
    handed_over.push(alive_read.as_raw_fd());
    let init_end = alive_write.as_raw_fd();
    let pid1 = pid1::start(SandboxToRun { spec, trees, cgroups, parent_alive: alive_read, init_end, report_first })?;
    watch_pid1(pid1, &handed_over)
}

/// The init's part once pid 1 runs: closes its copies of what pid 1 owns, reports pid 1, closes its copies of the
/// program's standard streams, waits for pid 1 and exits with its status.
///
/// Pid 1 shares this process's memory (see `pid1::start`), so this function and everything it calls allocates and
/// frees nothing, runs no destructor and ends with `_exit`: only `libc` calls, `nix::waitpid` and a stack buffer.
/// The values of `build_and_wait` stay where they are, never dropped.
fn watch_pid1(pid1: Pid, handed_over: &[RawFd]) -> ! {
    sandlot_core::marks::mark("i.pid1_started");
    for fd in handed_over {
        // SAFETY: closes this process's copies of descriptors pid 1 owns in its own descriptor table.
        unsafe { libc::close(*fd) };
    }
    let mut line = [0u8; 64];
    events::send_line(pid1_started_line(pid1.as_raw(), &mut line));
    close_stdio();
    let code = loop {
        match waitpid(pid1, None) {
            Ok(WaitStatus::Exited(_, code)) => break code,
            Ok(WaitStatus::Signaled(_, signal, _)) => break 128 + signal as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break 125,
        }
    };
    // The child that made the idmap's user namespace (see `sys::idmap`), long dead by now: reaped here, off the
    // run's path.
    while !matches!(waitpid(None::<Pid>, None), Err(nix::errno::Errno::ECHILD)) {}
    // SAFETY: ends the init without running the exit handlers of the image it was forked from; the kernel releases
    // all it holds (the shared locks included).
    unsafe { libc::_exit(code) }
}
