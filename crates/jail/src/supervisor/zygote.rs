//! The server's handle on its zygote (see `sandbox::zygote`): starts it, asks it for inits, and starts a new one
//! when it has died.
//!
//! A zygote and the inits it clones die with the thread that started the zygote (their parent-death signal follows
//! the thread, not the process). So one keeper thread, made with the handle and living as long as it, starts every
//! zygote: whatever thread builds the backend or asks for an init, nothing dies before the backend does.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, mpsc};

use nix::sys::socket::{AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, recv, send, sendmsg, socketpair};

use super::error::{Error, Result};
use crate::protocol::{MAX_SETUP_BYTES, ZYGOTE_READY, ZYGOTE_SUBCOMMAND, ZygoteSetup, decode_clone_reply};

/// A zygote process and its socket.
struct Running {
    channel: OwnedFd,
    process: std::process::Child,
}

/// What the keeper thread is asked: start a zygote, and answer on the enclosed channel.
type StartRequest = mpsc::Sender<Result<Running>>;

/// A server's zygote, started again whenever it is found dead.
pub struct Zygote {
    current: Mutex<Option<Running>>,
    keeper: Mutex<mpsc::Sender<StartRequest>>,
}

impl Zygote {
    /// Starts the keeper thread and the first zygote (`program` run as [`ZYGOTE_SUBCOMMAND`], set up with `setup`).
    pub fn start(program: PathBuf, setup: ZygoteSetup) -> Result<Self> {
        let (keeper, requests) = mpsc::channel::<StartRequest>();
        std::thread::Builder::new()
            .name("sandlot-zygote-keeper".into())
            .spawn(move || {
                for reply in requests {
                    let _ = reply.send(start_one(&program, &setup));
                }
            })
            .map_err(|e| Error::io("start the zygote's keeper thread", e))?;
        let zygote = Self { current: Mutex::new(None), keeper: Mutex::new(keeper) };
        let first = zygote.start_one()?;
        *zygote.current() = Some(first);
        Ok(zygote)
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Has the keeper thread start a zygote.
    fn start_one(&self) -> Result<Running> {
        let (reply, answer) = mpsc::channel();
        let keeper = self.keeper.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
        let gone = || Error::io("start a zygote", std::io::Error::other("the keeper thread is gone"));
        keeper.send(reply).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }

    /// Whether the current zygote is alive; if it is not, starts another. `Ok(false)`: it had died and was replaced.
    pub fn ensure_alive(&self) -> Result<bool> {
        let mut current = self.current();
        if current.as_mut().is_some_and(|running| matches!(running.process.try_wait(), Ok(None))) {
            return Ok(true);
        }
        if let Some(mut dead) = current.take() {
            let _ = dead.process.wait();
        }
        tracing::warn!("the jail zygote was gone; starting another");
        *current = Some(self.start_one()?);
        Ok(false)
    }

    /// Has the zygote clone an init holding `fds` (stdin, stdout, stderr, events: the init's ends); returns its pid.
    /// A zygote found dead is replaced, once.
    pub fn clone_init(&self, fds: &[OwnedFd; 4]) -> Result<i32> {
        match self.try_clone_init(fds) {
            Ok(cloned) => Ok(cloned),
            Err(e) if self.ensure_alive().is_ok_and(|alive| !alive) => {
                tracing::debug!("the zygote died ({e}); asking its replacement");
                self.try_clone_init(fds)
            }
            Err(e) => Err(e),
        }
    }

    fn try_clone_init(&self, fds: &[OwnedFd; 4]) -> Result<i32> {
        let current = self.current();
        let Some(running) = current.as_ref() else {
            return Err(Error::io("clone an init", std::io::Error::other("no zygote")));
        };
        let raw = fds.each_ref().map(|fd| fd.as_raw_fd());
        let channel = running.channel.as_raw_fd();
        sendmsg::<()>(channel, &[IoSlice::new(&[1])], &[ControlMessage::ScmRights(&raw)], MsgFlags::MSG_NOSIGNAL, None)
            .map_err(|e| Error::io("send a request to the zygote", e.into()))?;
        let mut reply = [0u8; 4];
        let length =
            recv(channel, &mut reply, MsgFlags::empty()).map_err(|e| Error::io("read the zygote's reply", e.into()))?;
        if length != reply.len() {
            return Err(Error::io("read the zygote's reply", std::io::ErrorKind::UnexpectedEof.into()));
        }
        decode_clone_reply(reply).map_err(|e| Error::io("clone an init in the zygote", e))
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        if let Some(mut running) = self.current().take() {
            let _ = running.process.kill();
            let _ = running.process.wait();
        }
    }
}

/// Starts `program __jail-zygote` and sets it up; a skeleton it cannot cache is a warning (runs assemble their own).
fn start_one(program: &Path, setup: &ZygoteSetup) -> Result<Running> {
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
    let channel = ours.as_raw_fd();
    let message = serde_json::to_vec(setup).map_err(|e| Error::io("encode the zygote's setup", e.into()))?;
    send(channel, &message, MsgFlags::MSG_NOSIGNAL).map_err(|e| Error::io("set up the zygote", e.into()))?;
    let mut reply = vec![0u8; MAX_SETUP_BYTES];
    let length = recv(channel, &mut reply, MsgFlags::empty())
        .map_err(|e| Error::io("read the zygote's setup reply", e.into()))?;
    let ready = &reply[..length] == ZYGOTE_READY;
    if length == 0 {
        return Err(Error::io("set up the zygote", std::io::Error::other("it exited before replying")));
    }
    if !ready && setup.skeleton.is_some() {
        let why = String::from_utf8_lossy(&reply[..length]);
        tracing::warn!("the jail zygote could not cache the sandbox's skeleton (each run assembles its own): {why}");
    }
    Ok(Running { channel: ours, process })
}
