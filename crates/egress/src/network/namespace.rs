//! Work done inside a network namespace, in a thread of its own.
//!
//! A thread may change its own network namespace (`unshare`, `setns`) without touching the rest of the process;
//! what it makes there (sockets, netlink's included) stays in that namespace for good. So each step runs in a
//! short-lived thread that enters the namespace, does its work and ends; the namespace lives on through the
//! descriptor of `/proc/thread-self/ns/net` (and through every socket made in it).

use nix::sched::{CloneFlags, setns, unshare};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// Runs `work` in a new thread that is in the network namespace `netns`, and returns what it returns.
pub(super) fn run_in<T: Send>(netns: &OwnedFd, work: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    run(|| {
        enter(netns)?;
        work()
    })
}

/// Makes a new network namespace in a new thread, runs `work` there with the namespace's descriptor, and returns
/// the descriptor and what `work` returned. The namespace belongs to this process's user namespace (the host's,
/// for a server running as root).
pub(super) fn run_in_new<T: Send>(work: impl FnOnce(&OwnedFd) -> io::Result<T> + Send) -> io::Result<(OwnedFd, T)> {
    run(|| {
        unshare(CloneFlags::CLONE_NEWNET).map_err(|errno| step("make a network namespace", errno))?;
        let netns = std::fs::File::open("/proc/thread-self/ns/net")
            .map(OwnedFd::from)
            .map_err(|error| io::Error::new(error.kind(), format!("open the new network namespace: {error}")))?;
        let result = work(&netns)?;
        Ok((netns, result))
    })
}

/// Moves the calling thread into the network namespace `netns`. Only for a thread made by [`run_in`] or
/// [`run_in_new`], which ends with its work.
pub(super) fn enter(netns: &OwnedFd) -> io::Result<()> {
    setns(netns.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|errno| step("enter a network namespace", errno))
}

fn run<T: Send>(work: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("sandlot-netns".into())
            .spawn_scoped(scope, work)?
            .join()
            .map_err(|_| io::Error::other("a network namespace thread panicked"))?
    })
}

fn step(what: &str, errno: nix::errno::Errno) -> io::Error {
    let error = io::Error::from(errno);
    io::Error::new(error.kind(), format!("{what}: {error}"))
}
