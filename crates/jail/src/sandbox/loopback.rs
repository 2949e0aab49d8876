//! Bringing up `lo` in the sandbox's fresh network namespace (it starts down; nothing else is configured).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

/// Sets `lo` up and running.
pub fn bring_up() -> Result<(), Errno> {
    // SAFETY: plain socket creation; the fd is owned right after.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(Errno::last());
    }
    // SAFETY: raw is a fresh descriptor nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is a plain C struct for which all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads a valid ifreq that outlives the call.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS as libc::Ioctl, &request) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}
