//! The supervisor's handle on one init: the process (a [`PidfdChild`]) and its pipes, however it was started; or,
//! for a live sandbox ([`LiveInit`]), its socket and its events.

use std::io::{PipeReader, PipeWriter};
use std::os::fd::OwnedFd;

use nix::unistd::Pid;
use tokio::net::unix::pipe;

use super::child::PidfdChild;
use super::error::{Error, Result};
use super::zygote::Zygote;

/// The supervisor's ends of an init's descriptors, before the runtime watches them.
#[derive(Debug)]
pub struct InitEnds {
    stdin: PipeWriter,
    stdout: PipeReader,
    stderr: PipeReader,
    events: PipeReader,
}

/// Four pipes for a new init: its ends (stdin, stdout, stderr, events, the order of their numbers in the init) and
/// the supervisor's.
pub fn init_pipes() -> std::io::Result<([OwnedFd; 4], InitEnds)> {
    let (stdin_read, stdin) = std::io::pipe()?;
    let (stdout, stdout_write) = std::io::pipe()?;
    let (stderr, stderr_write) = std::io::pipe()?;
    let (events, events_write) = std::io::pipe()?;
    let theirs = [stdin_read.into(), stdout_write.into(), stderr_write.into(), events_write.into()];
    Ok((theirs, InitEnds { stdin, stdout, stderr, events }))
}

/// The supervisor's ends of a running init's pipes, watched by the runtime.
pub struct InitPipes {
    pub stdin: pipe::Sender,
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    pub events: pipe::Receiver,
}

/// An init waiting for its spec (or running it): the process and its pipes.
pub struct Init {
    pub process: PidfdChild,
    pub pipes: InitPipes,
}

impl Init {
    /// Adopts the child `pid` of this process, whose ends are `ends` (call within the runtime).
    pub fn adopt(pid: i32, ends: InitEnds) -> Result<Self> {
        let process = PidfdChild::open(Pid::from_raw(pid)).map_err(|e| Error::io("open a pidfd for the init", e))?;
        let watch = |e| Error::io("watch the init's pipes", e);
        let receiver = |reader: PipeReader| pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(watch);
        let pipes = InitPipes {
            stdin: pipe::Sender::from_owned_fd(OwnedFd::from(ends.stdin)).map_err(watch)?,
            stdout: receiver(ends.stdout)?,
            stderr: receiver(ends.stderr)?,
            events: receiver(ends.events)?,
        };
        Ok(Self { process, pipes })
    }

    /// A new init, cloned by `zygote` now.
    pub fn from_zygote(zygote: &Zygote) -> Result<Self> {
        let (theirs, ours) = init_pipes().map_err(|e| Error::io("create init pipes", e))?;
        let pid = zygote.clone_init(&theirs)?;
        drop(theirs);
        Self::adopt(pid, ours)
    }
}

/// A live sandbox's init, cloned by the zygote: its fd 0 is a unix stream socket (the spec, then `LiveRequest`s with
/// the descriptors they pass), fds 1 and 2 are `/dev/null` (it has no program of its own), fd 3 its events.
pub struct LiveInit {
    pub process: PidfdChild,
    pub channel: tokio::net::UnixStream,
    pub events: pipe::Receiver,
}

impl LiveInit {
    /// A new live init, cloned by `zygote` now (call within the runtime).
    pub fn from_zygote(zygote: &Zygote) -> Result<Self> {
        let setup = |e| Error::io("create a live init's descriptors", e);
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(setup)?;
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null").map_err(setup)?;
        let (events, events_write) = std::io::pipe().map_err(setup)?;
        let fds: [OwnedFd; 4] =
            [theirs.into(), null.try_clone().map_err(setup)?.into(), null.into(), events_write.into()];
        let pid = zygote.clone_init(&fds)?;
        drop(fds);
        let process = PidfdChild::open(Pid::from_raw(pid)).map_err(|e| Error::io("open a pidfd for the init", e))?;
        let watch = |e| Error::io("watch a live init's descriptors", e);
        ours.set_nonblocking(true).map_err(watch)?;
        Ok(Self {
            process,
            channel: tokio::net::UnixStream::from_std(ours).map_err(watch)?,
            events: pipe::Receiver::from_owned_fd(OwnedFd::from(events)).map_err(watch)?,
        })
    }
}
