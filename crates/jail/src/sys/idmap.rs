//! Idmapped mounts for `/data`: a run's conversation directory is owned on disk by the storage uid (see
//! `supervisor::uids`) and shown to the run as owned by the run's own host uid, so that files it creates land on
//! disk as the storage uid again.
//!
//! `mount_setattr(MOUNT_ATTR_IDMAP)` takes a user namespace whose maps say how: `<storage> <run> 1` for uids and
//! gids maps the on-disk owner to the run's uid. Only a process can own a new user namespace, so the init (root)
//! clones a child into one that sleeps, writes its maps, opens `/proc/<child>/ns/user` and kills and reaps it: the
//! namespace lives on through the descriptor, then through the mount. The child shares the init's memory
//! (`CLONE_VM`, nothing copied) on a small stack of its own and only ever calls `pause`; it is reaped later (see
//! [`user_namespace`]).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use super::mount;

/// Stack of the child that owns the new user namespace (it calls `pause` in a loop and nothing else).
const CHILD_STACK_BYTES: usize = 16 * 1024;

/// A user namespace mapping uid and gid `inside` to host uid and gid `outside` (one id each).
///
/// The child that made it is killed but not waited for: it dies when it next runs, which on a busy host can take a
/// scheduler tick (docs/benchmarks.md). It stays a zombie until this process waits for any
/// child (the init does before it exits) or exits. Its stack (16 KiB) stays mapped, as it may still be running on
/// it until then.
pub fn user_namespace(inside: u32, outside: u32) -> io::Result<OwnedFd> {
    user_namespace_mapping(&format!("{inside} {outside} 1\n"), false)
}

/// [`user_namespace`] for a process that reaps no stray child (the server): waits for the child it killed.
pub fn user_namespace_reaped(inside: u32, outside: u32) -> io::Result<OwnedFd> {
    user_namespace_mapping(&format!("{inside} {outside} 1\n"), true)
}

/// A user namespace whose uid and gid maps are `map` (lines of `inside outside count`); see [`user_namespace`].
/// With `reap`, the child is waited for before this returns.
fn user_namespace_mapping(map: &str, reap: bool) -> io::Result<OwnedFd> {
    extern "C" fn sleep_forever(_: *mut libc::c_void) -> libc::c_int {
        loop {
            // SAFETY: pause has no arguments and touches no memory; the parent kills this process.
            unsafe { libc::pause() };
        }
    }
    let top = super::map_stack(CHILD_STACK_BYTES)?;
    let flags = libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD;
    // SAFETY: the child runs `sleep_forever` on its own stack, which is never unmapped; it touches no other memory.
    let pid = unsafe { libc::clone(sleep_forever, top, flags, std::ptr::null_mut()) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    let result = map_and_open(pid, map);
    // SAFETY: kill of our own child, not yet reaped (so its pid cannot name another process).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    if reap {
        // SAFETY: waits for our own child, which was just killed; no memory is involved but the null status.
        while unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) } < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
    result
}

fn map_and_open(pid: libc::pid_t, map: &str) -> io::Result<OwnedFd> {
    std::fs::write(format!("/proc/{pid}/uid_map"), map)?;
    std::fs::write(format!("/proc/{pid}/gid_map"), map)?;
    let path = mount::cpath(Path::new(&format!("/proc/{pid}/ns/user"))).map_err(io::Error::from)?;
    // SAFETY: open of a NUL-terminated path; the descriptor returned is ours.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes the detached `tree` show files of on-disk owner `storage` as owned by `run` (and write them as `storage`).
/// Leaves a child to reap (see [`user_namespace`]).
pub fn map_tree(tree: &OwnedFd, storage: u32, run: u32) -> io::Result<()> {
    let userns = user_namespace(storage, run)?;
    mount::set_tree_idmap(tree, &userns).map_err(io::Error::from)
}

/// [`map_tree`] for a writable volume, whose top directory is root's and the storage gid's (mode 0770, so a run
/// writes in it through the group but cannot `chmod` it): root shows as `nobody` (65534), since the kernel lets no
/// one write an inode whose owner an idmapped mount does not map.
pub fn map_volume_tree(tree: &OwnedFd, storage: u32, run: u32) -> io::Result<()> {
    let userns = user_namespace_mapping(&format!("0 {NOBODY} 1\n{storage} {run} 1\n"), false)?;
    mount::set_tree_idmap(tree, &userns).map_err(io::Error::from)
}

/// The host's `nobody`, which no run is.
const NOBODY: u32 = 65534;

/// Whether the filesystem holding `dir` takes idmapped mounts (as root): `Err` says why not. The mount made to
/// find out is detached and dropped.
pub fn probe(dir: &Path, storage: u32, run: u32) -> io::Result<()> {
    let tree = mount::clone_tree(dir).map_err(io::Error::from)?;
    map_tree(&tree, storage, run)
}
