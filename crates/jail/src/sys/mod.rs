//! The raw kernel calls both sides need, each wrapped once: the new mount API ([`mount`]), idmapped mounts
//! ([`idmap`]), pidfds, stacks for `clone`, and the parent-death signal. Nothing here knows what a run is.

pub mod idmap;
pub mod mount;

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::unistd::Pid;

/// A pidfd for the process `pid` (`pidfd_open`), close-on-exec.
pub fn pidfd_open(pid: Pid) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sets this process to be killed (SIGKILL) when its parent (the thread that started it) dies.
pub fn die_with_parent() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Maps a stack of `bytes` with a guard page below it, for a `clone` that shares this process's memory; returns
/// its top (page-aligned, as the ABI wants). It is never unmapped: the child may run on it until it execs or exits.
pub fn map_stack(bytes: usize) -> std::io::Result<*mut libc::c_void> {
    let page = 4096;
    // SAFETY: a new private anonymous mapping at an address of the kernel's choice; no existing memory is touched.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes + page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the lowest page of the mapping just made becomes the guard page.
    if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(base.wrapping_byte_add(bytes + page))
}

/// Moves the calling thread off the CPU it runs on, onto the others it may use (if there are any). The kernel often
/// queues a just-forked child on its parent's CPU, where it waits for the load balancer while the parent keeps
/// running; stepping aside lets the child start at once (docs/benchmarks.md). Errors leave things as they were.
pub fn step_aside_from_this_cpu() {
    // SAFETY: an all-zero cpu_set_t is the empty set; sched_getaffinity fills a set of the size passed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return;
    }
    // SAFETY: sched_getcpu takes no arguments.
    let Ok(here) = usize::try_from(unsafe { libc::sched_getcpu() }) else { return };
    // SAFETY: CPU_ISSET, CPU_CLR and CPU_COUNT read or change bit `here` (< CPU_SETSIZE, checked first) of `set`.
    unsafe {
        if here >= libc::CPU_SETSIZE as usize || !libc::CPU_ISSET(here, &set) {
            return;
        }
        libc::CPU_CLR(here, &mut set);
        if libc::CPU_COUNT(&set) > 0 {
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
        }
    }
}
