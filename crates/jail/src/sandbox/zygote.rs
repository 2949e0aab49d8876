//! The zygote: a small single-threaded process a server starts once (the sandlot binary run with
//! [`crate::protocol::ZYGOTE_SUBCOMMAND`], with an empty environment, so its memory holds nothing of the server's), that clones the
//! init of each run. Starting an init this way costs a clone instead of an `execve`, relocating the binary and
//! libc's start-up (docs/benchmarks.md).
//!
//! It reads its [`ZygoteSetup`] first (caching the skeleton, [`super::mounts::cache_skeleton`]), then for each
//! request clones an init with the four descriptors it carries, as a sibling (`CLONE_PARENT`: the init is a child of
//! the server, which waits for and signals it through a pidfd), and replies with its pid. It dies with the server
//! (parent-death signal, and end of file on its socket).

use std::io::IoSliceMut;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{ControlMessageOwned, MsgFlags, recv, recvmsg, send};

use super::{Maker, fork_init};
use crate::protocol::{MAX_SETUP_BYTES, SkeletonRequest, ZYGOTE_READY, ZygoteSetup, encode_clone_reply};

/// The zygote's end of its socket is its standard input.
const CHANNEL_FD: RawFd = 0;

/// Entry point of the zygote; never returns.
pub fn main() -> ! {
    if crate::sys::die_with_parent().is_err() {
        std::process::exit(1);
    }
    let (cached, reply) = set_up();
    if send(CHANNEL_FD, reply.as_bytes(), MsgFlags::MSG_NOSIGNAL).is_err() {
        std::process::exit(1);
    }
    loop {
        let fds = match receive_request() {
            Ok(Some(fds)) => fds,
            // The server closed its end: it is gone, and so is the zygote's purpose.
            Ok(None) => std::process::exit(0),
            Err(Errno::EINTR) => continue,
            Err(_) => std::process::exit(1),
        };
        let reply = match <[OwnedFd; 4]>::try_from(fds) {
            Err(_) => Err(Errno::EINVAL as i32),
            Ok(fds) => fork_init(fds, Maker::Zygote { skeleton: cached.clone() }).map_err(|errno| errno as i32),
        };
        if send(CHANNEL_FD, &encode_clone_reply(reply), MsgFlags::MSG_NOSIGNAL).is_err() {
            std::process::exit(1);
        }
    }
}

/// Reads the setup message and carries it out; returns the skeleton cached and the reply: [`ZYGOTE_READY`], or what
/// went wrong.
fn set_up() -> (Option<SkeletonRequest>, String) {
    let ready = String::from_utf8_lossy(ZYGOTE_READY).into_owned();
    let mut setup = vec![0u8; MAX_SETUP_BYTES];
    let length = match recv(CHANNEL_FD, &mut setup, MsgFlags::empty()) {
        Ok(length) => length,
        Err(_) => std::process::exit(1),
    };
    match serde_json::from_slice::<ZygoteSetup>(&setup[..length]) {
        Ok(ZygoteSetup { skeleton: Some(request) }) => match super::mounts::cache_skeleton(&request) {
            Ok(()) => (Some(request), ready),
            Err(e) => (None, format!("{}: {}", e.step, e.error)),
        },
        Ok(ZygoteSetup { skeleton: None }) => (None, ready),
        Err(e) => (None, format!("unreadable setup: {e}")),
    }
}

/// Reads one request: the descriptors it carries, or `None` at end of file.
fn receive_request() -> nix::Result<Option<Vec<OwnedFd>>> {
    let mut byte = [0u8; 1];
    let mut buffer = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let message = recvmsg::<()>(CHANNEL_FD, &mut buffer, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for control in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = control {
            // SAFETY: the kernel just installed these descriptors in this process; nothing else owns them.
            fds.extend(received.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
        }
    }
    if message.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some(fds))
}
