//! The sandbox side: everything that runs in the processes of a run, none of it in the server.
//!
//! An init is always made the same way, by [`fork_init`] in a single-threaded process: the zygote, for a server
//! ([`zygote`]), or `sandlot run` at the start of its `main`. The clone puts the four descriptors of
//! [`crate::protocol`] in place and becomes the [`init`], which builds the namespaces, forks the sandbox's
//! [`pid1`] (which builds what is mounted, [`mounts`]), whose [`worker`] confines itself ([`capabilities`],
//! [`rlimits`], [`landlock`], [`seccomp`]) and execs the program. They speak to the supervisor only through
//! [`events`]; the init and pid 1 both drop their copies of the program's streams with [`stdio`]. A live
//! sandbox's pid 1 ([`resident`]) starts a worker per process the supervisor asks for, until the sandbox ends.

mod capabilities;
mod events;
mod init;
mod landlock;
mod loopback;
mod mounts;
mod pid1;
mod resident;
mod rlimits;
pub mod seccomp;
mod stdio;
mod worker;
pub mod zygote;

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;

pub use init::Maker;

use crate::protocol::EVENTS_FD;

/// The descriptors of a new init, in the order of their numbers: stdin (spec, then the program's input), stdout,
/// stderr, events.
pub type InitFds = [OwnedFd; 4];

/// Clones this single-threaded process into a new init holding `fds`, made by `maker` (a zygote's clone is a
/// sibling: its parent is the zygote's parent, the server). Returns the init's pid; the clone never returns.
///
/// This is a raw `clone` with no new stack, which behaves like `fork` in a single-threaded process (glibc's `fork`
/// would also refresh the thread id it caches for `raise`, which the init never calls).
pub fn fork_init(fds: InitFds, maker: Maker) -> Result<i32, Errno> {
    let sibling = matches!(maker, Maker::Zygote { .. });
    let flags = if sibling { libc::CLONE_PARENT | libc::SIGCHLD } else { libc::SIGCHLD } as libc::c_ulong;
    // SAFETY: clone without CLONE_VM gives the child its own copy of this single-threaded process's memory, so it
    // may continue on the same stack, exactly as after fork.
    let pid = Errno::result(unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) })?;
    if pid != 0 {
        return Ok(pid as i32);
    }
    // In the clone: the four descriptors are first moved above their targets (one may sit on a target number), then
    // onto 0-3, and every other descriptor is closed (the parent's ends of the same pipes, which would keep the
    // program's stdin open, say). `dup2` clears close-on-exec: the program inherits 0-2, and the worker marks
    // everything from 3 up close-on-exec before the exec.
    let mut high = [-1; 4];
    for (slot, fd) in high.iter_mut().zip(&fds) {
        // SAFETY: fcntl duplicates a descriptor this process owns to a number of at least 10.
        *slot = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    }
    drop(fds);
    for (target, fd) in (0..=EVENTS_FD).zip(high) {
        // SAFETY: dup2 and close on descriptors this process owns.
        if fd < 0 || unsafe { libc::dup2(fd, target) } < 0 || unsafe { libc::close(fd) } < 0 {
            // SAFETY: ends the clone without running destructors of its parent's image.
            unsafe { libc::_exit(126) }
        }
    }
    let close = |first: u32, last: u32| {
        // SAFETY: close_range on descriptor numbers; no memory is involved.
        unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    };
    // The step log of the `phases` feature stays open (see `sandlot_core::marks`); without the feature none is.
    match sandlot_core::marks::raw_fd().map(|fd| fd as u32).filter(|&fd| fd > EVENTS_FD as u32 + 1) {
        Some(fd) => {
            close(EVENTS_FD as u32 + 1, fd - 1);
            close(fd + 1, u32::MAX);
        }
        None => close(EVENTS_FD as u32 + 1, u32::MAX),
    }
    init::main(maker)
}
