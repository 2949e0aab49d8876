//! The zygote: a small single-threaded process that a server starts once, and that clones the init of each run.
//!
//! Starting an init by re-executing the sandlot binary costs about a millisecond of CPU per run (the `execve`,
//! relocating the static binary, and glibc's start-up, whose `cpuid` instructions each exit to the hypervisor on a
//! VM). The zygote pays that once: it is exec'd at start-up with an empty environment (so its memory holds nothing
//! of the server's), then waits on a socket. For each init the server sends it the init's four pipe ends (stdin,
//! stdout, stderr, report) with `SCM_RIGHTS`; the zygote clones itself with `CLONE_PARENT`, so the init is a
//! child of the server (which waits for and signals it through a pidfd, [`PidfdChild`]), and replies with its pid.
//! The clone puts the pipes on fds 0–2 and becomes the init ([`crate::init::run_main`]), exactly as an exec'd
//! init would be.
//!
//! Its first message from the server is a setup: optionally a [`TemplateRequest`], for which the zygote assembles
//! the sandbox's read-only skeleton once, in a mount namespace of its own that its inits share
//! ([`crate::root_template`]). It replies with an empty message, or with why it could not.
//!
//! The zygote dies with the server (parent-death signal, and end of file on its socket). If it is gone, the
//! server falls back to exec'ing each init ([`crate::launcher::InitStarter`]).

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::Mutex;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recv, recvmsg, send, sendmsg,
    socketpair,
};
use nix::unistd::Pid;

use crate::launcher::{InitPipes, InitProcess};
use crate::pidfd_child::PidfdChild;
use crate::root_template::{RootTemplate, TemplateRequest};
use crate::{Error, Result};

/// The hidden subcommand that makes the sandlot binary act as the zygote.
pub const ZYGOTE_SUBCOMMAND: &str = "__jail-zygote";

/// The zygote's end of the socket is its standard input.
const CHANNEL_FD: RawFd = 0;
/// Descriptors sent with each request: the init's stdin, stdout, stderr and report pipe.
const FDS_PER_INIT: usize = 4;
/// Largest setup message (a [`TemplateRequest`] as JSON) and reply.
const MAX_SETUP_BYTES: usize = 64 * 1024;

/// The server's handle on a running zygote.
pub struct Zygote {
    channel: Mutex<OwnedFd>,
    process: Mutex<std::process::Child>,
    template: Option<RootTemplate>,
}

impl Zygote {
    /// Starts `program __jail-zygote`, and has it assemble the skeleton `template` asks for. The zygote and every
    /// init it clones die when the calling thread does (parent-death signal), so call this from a thread that
    /// lives as long as the server (its main thread). A skeleton it cannot assemble is a warning: its inits then
    /// assemble their own.
    pub fn start(program: &Path, template: Option<TemplateRequest>) -> Result<Self> {
        let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
            .map_err(|e| Error::io("create the zygote's socket", e.into()))?;
        let process = std::process::Command::new(program)
            .arg(ZYGOTE_SUBCOMMAND)
            .env_clear()
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::io(format!("start the zygote ({})", program.display()), e))?;
        let mut zygote = Self { channel: Mutex::new(ours), process: Mutex::new(process), template: None };
        let channel = zygote.channel.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()).as_raw_fd();
        let setup = serde_json::to_vec(&template).map_err(|e| Error::io("encode the zygote's setup", e.into()))?;
        send(channel, &setup, MsgFlags::MSG_NOSIGNAL).map_err(|e| Error::io("set up the zygote", e.into()))?;
        let mut reply = vec![0u8; MAX_SETUP_BYTES];
        let length = recv(channel, &mut reply, MsgFlags::empty())
            .map_err(|e| Error::io("read the zygote's setup reply", e.into()))?;
        match (template, length) {
            (Some(request), 0) => zygote.template = Some(RootTemplate::assembled(request)),
            (Some(_), _) => tracing::warn!(
                "the jail zygote could not assemble the sandbox's root once (each run assembles its own): {}",
                String::from_utf8_lossy(&reply[..length])
            ),
            (None, _) => {}
        }
        Ok(zygote)
    }

    /// Whether the zygote process is still running (reaps it if it is not).
    pub fn is_alive(&self) -> bool {
        matches!(self.process.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).try_wait(), Ok(None))
    }

    /// Has the zygote clone a new init, waiting for its spec on its standard input.
    pub fn clone_init(&self) -> Result<(InitProcess, InitPipes)> {
        let pipe = || std::io::pipe().map_err(|e| Error::io("create init pipes", e));
        let (stdin_read, stdin_write) = pipe()?;
        let (stdout_read, stdout_write) = pipe()?;
        let (stderr_read, stderr_write) = pipe()?;
        let (reports_read, reports_write) = pipe()?;
        let fds =
            [stdin_read.as_raw_fd(), stdout_write.as_raw_fd(), stderr_write.as_raw_fd(), reports_write.as_raw_fd()];
        let pid = {
            let channel = self.channel.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            sendmsg::<()>(
                channel.as_raw_fd(),
                &[IoSlice::new(&[1])],
                &[ControlMessage::ScmRights(&fds)],
                MsgFlags::MSG_NOSIGNAL,
                None,
            )
            .map_err(|e| Error::io("send a request to the zygote", e.into()))?;
            let mut reply = [0u8; 4];
            let length = recv(channel.as_raw_fd(), &mut reply, MsgFlags::empty())
                .map_err(|e| Error::io("read the zygote's reply", e.into()))?;
            if length != reply.len() {
                return Err(Error::io("read the zygote's reply", std::io::ErrorKind::UnexpectedEof.into()));
            }
            i32::from_le_bytes(reply)
        };
        if pid <= 0 {
            return Err(Error::io("clone an init in the zygote", std::io::Error::from_raw_os_error(-pid)));
        }
        drop((stdin_read, stdout_write, stderr_write, reports_write));
        let child = PidfdChild::open(Pid::from_raw(pid)).map_err(|e| Error::io("open a pidfd for the init", e))?;
        let pipes = InitPipes::from_std(stdin_write, stdout_read, stderr_read, reports_read)?;
        Ok((InitProcess::cloned(child).with_root_template(self.template.clone()), pipes))
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        let process = self.process.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        let _ = process.kill();
        let _ = process.wait();
    }
}

/// Entry point of the zygote; never returns.
pub fn run_main() -> ! {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    let reply = set_up();
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
        let reply = match <[OwnedFd; FDS_PER_INIT]>::try_from(fds) {
            Err(_) => -(Errno::EINVAL as i32),
            Ok(fds) => match clone_as_sibling() {
                Ok(0) => become_init(fds),
                Ok(pid) => pid,
                Err(errno) => -(errno as i32),
            },
        };
        if send(CHANNEL_FD, &reply.to_le_bytes(), MsgFlags::MSG_NOSIGNAL).is_err() {
            std::process::exit(1);
        }
    }
}

/// Reads the setup message and carries it out; returns the reply: empty, or what went wrong.
fn set_up() -> String {
    let mut setup = vec![0u8; MAX_SETUP_BYTES];
    let length = match recv(CHANNEL_FD, &mut setup, MsgFlags::empty()) {
        Ok(length) => length,
        Err(_) => std::process::exit(1),
    };
    match serde_json::from_slice::<Option<TemplateRequest>>(&setup[..length]) {
        Ok(Some(request)) => match crate::root_template::assemble(&request) {
            Ok(()) => String::new(),
            Err(e) => format!("{}: {}", e.step, e.error),
        },
        Ok(None) => String::new(),
        Err(e) => format!("unreadable setup: {e}"),
    }
}

/// Reads one request: the descriptors it carries, or `None` at end of file.
fn receive_request() -> nix::Result<Option<Vec<OwnedFd>>> {
    let mut byte = [0u8; 1];
    let mut buffer = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; FDS_PER_INIT]);
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

/// Clones this process as a sibling: the child's parent is the zygote's parent, the server.
///
/// This is a raw `clone` with no new stack, which behaves like `fork` in a single-threaded process. One thing
/// glibc's `fork` would also do is refresh the thread id it caches for `raise` and `pthread_kill`; the init calls
/// neither (its own children are made with glibc's `fork`, which sets theirs).
fn clone_as_sibling() -> nix::Result<i32> {
    let flags = (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: clone without CLONE_VM gives the child its own copy of this single-threaded process's memory, so
    // it may continue on the same stack, exactly as after fork.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    Errno::result(pid).map(|pid| pid as i32)
}

/// In the clone: moves the pipes to fds 0–2 (replacing the socket), keeps the report pipe, and runs the init.
fn become_init(fds: [OwnedFd; FDS_PER_INIT]) -> ! {
    let [stdin, stdout, stderr, report] = fds;
    for (fd, target) in [(&stdin, 0), (&stdout, 1), (&stderr, 2)] {
        // SAFETY: dup2 on descriptors this process owns; the received ones are all above 2.
        if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
            // SAFETY: ends the clone without running destructors of the zygote's image.
            unsafe { libc::_exit(126) }
        }
    }
    drop((stdin, stdout, stderr));
    crate::init::run_main(report.into_raw_fd())
}
