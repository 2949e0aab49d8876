//! A live sandbox's pid 1, once its filesystem is built (`JailSpec::resident`): it reports `SandboxReady`, then
//! serves [`LiveRequest`]s from the supervisor on fd 0 (a unix stream socket) until that closes or it is killed.
//!
//! - `Exec`: a worker per request, started as a run's is ([`worker::spawn`]: new session, the sandbox's cgroups,
//!   rlimits, capabilities dropped, `no_new_privs`, Landlock, seccomp), its standard streams the three descriptors
//!   that came with the frame; answered by `ProcessStarted` (its pid here) or `ProcessFailed`. The Landlock domain
//!   is pid 1's, entered once before the first request and inherited: one domain for the whole sandbox, so its
//!   processes may signal each other and reach each other's abstract sockets whichever request started them (a
//!   domain per process would fence them off from each other), and none may reach anything outside the sandbox.
//! - `Attach` (a prepared sandbox, `JailSpec::prepared`, built before its conversation was known): the tree sent
//!   with the frame is mounted at `/data`, and only then is the Landlock domain entered, so that its rule for
//!   `/data` binds to that conversation; answered by `Attached`. Until then every `Exec` is refused (a process
//!   would run unconfined by Landlock, with no conversation), and so is a second `Attach` (one sandbox serves one
//!   conversation). A failed attach ends the sandbox.
//! - `Signal`: `kill` of a process it started, or of its process group. Pid 1 is the parent of every process it
//!   started and reaps them, so a pid it signals is still that process, or its unreaped zombie.
//! - Every orphan of the sandbox is its child too: it reaps them all (SIGCHLD read from a signalfd, so it sleeps in
//!   `poll` while nothing happens) and reports `ProcessEnded` for those it started.
//!
//! Nothing ends a process when another ends: what a process leaves running stays until the sandbox ends. The
//! sandbox ends with this process (the kernel kills every process of the pid namespace), which exits when the
//! supervisor closes the socket, and dies with the init (parent-death signal), which dies with the supervisor.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IoSliceMut, Read};
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
use sandlot_core::Termination;

use super::events::{self, SetupError};
use super::landlock;
use super::worker::{self, ProgramToStart};
use crate::protocol::{InitEvent, JailSpec, LiveRequest, MAX_REQUEST_BYTES};
use crate::sys::mount::attach_tree;

/// The supervisor's socket: the init's fd 0, inherited.
const CHANNEL_FD: RawFd = 0;

/// A process started for a request: its pid here, and whether it still runs (an ended one's process group may
/// live on, so a group signal still reaches it).
struct Started {
    pid: i32,
    running: bool,
}

/// Serves the supervisor's requests until it closes the socket; never returns.
pub fn serve(spec: &JailSpec, cgroups: &[File]) -> ! {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None) {
        SetupError::new("block SIGCHLD", e).report_and_exit()
    }
    let children = match SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
        Ok(children) => children,
        Err(e) => SetupError::new("signalfd", e).report_and_exit(),
    };
    // A prepared sandbox enters its domain when its conversation is attached (see the module's header).
    let mut attached = !spec.prepared;
    if attached {
        enter_landlock(spec);
    }
    events::send(&InitEvent::SandboxReady);
    let mut started: BTreeMap<u64, Started> = BTreeMap::new();
    loop {
        reap(&mut started);
        let mut watched = [
            libc::pollfd { fd: CHANNEL_FD, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: children.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds, no timeout.
        if unsafe { libc::poll(watched.as_mut_ptr(), 2, -1) } < 0 {
            continue; // EINTR: nothing is lost, the loop reaps and polls again
        }
        if watched[1].revents != 0 {
            while let Ok(Some(_)) = children.read_signal() {}
        }
        if watched[0].revents != 0 {
            match read_request() {
                Ok(Some((LiveRequest::Attach, streams))) => attach(spec, streams, &mut attached),
                Ok(Some((LiveRequest::Exec { id, .. }, _))) if !attached => {
                    let error = "the sandbox has no conversation yet".into();
                    events::send(&InitEvent::ProcessFailed { id, step: "start a process".into(), error });
                }
                Ok(Some((request, streams))) => handle(spec, cgroups, request, streams, &mut started),
                // The supervisor closed the socket (or broke the protocol): the sandbox ends with this process.
                // SAFETY: ends pid 1 without running destructors of the image it was cloned from.
                Ok(None) | Err(_) => unsafe { libc::_exit(0) },
            }
        }
    }
}

/// Enters the sandbox's Landlock domain, which every process started from now on inherits; a failure ends the
/// sandbox. Pid 1 has CAP_SYS_ADMIN in the sandbox's user namespace, which Landlock asks of a process without
/// `no_new_privs` (the crate sets that too). Pid 1 opens no file from then on; what it holds stays usable.
fn enter_landlock(spec: &JailSpec) {
    if spec.landlock
        && let Err(e) = landlock::apply(spec.home.as_ref().map(|home| home.path.as_path()))
    {
        SetupError::new("landlock", e).report_and_exit()
    }
}

/// Mounts the conversation's tree (the one descriptor in `streams`) at `/data`, then enters Landlock. Refused (the
/// sandbox goes on as it was) when it is attached already; a failure to mount ends the sandbox.
fn attach(spec: &JailSpec, streams: Vec<OwnedFd>, attached: &mut bool) {
    if *attached {
        let error = "the sandbox is attached to a conversation already".into();
        events::send(&InitEvent::SetupFailed { step: "attach /data".into(), error });
        return;
    }
    let [tree] = match <[OwnedFd; 1]>::try_from(streams) {
        Ok(tree) => tree,
        Err(streams) => {
            SetupError::new("attach /data", format!("{} descriptors instead of 1", streams.len())).report_and_exit()
        }
    };
    if let Err(e) = attach_tree(&tree, Path::new("/data")) {
        SetupError::new("move_mount /data", e).report_and_exit()
    }
    drop(tree);
    enter_landlock(spec);
    *attached = true;
    events::send(&InitEvent::Attached);
}

fn handle(
    spec: &JailSpec,
    cgroups: &[File],
    request: LiveRequest,
    streams: Vec<OwnedFd>,
    started: &mut BTreeMap<u64, Started>,
) {
    match request {
        LiveRequest::Exec { id, program, args, env } => {
            let stdio = match <[OwnedFd; 3]>::try_from(streams) {
                Ok(stdio) => stdio,
                Err(streams) => {
                    let error = format!("{} descriptors instead of 3", streams.len());
                    events::send(&InitEvent::ProcessFailed { id, step: "receive the standard streams".into(), error });
                    return;
                }
            };
            let failure = Cell::new(None);
            let program = ProgramToStart {
                spec,
                program: &program,
                args: &args,
                env: &env,
                cgroups,
                stdio: Some(stdio.each_ref().map(AsRawFd::as_raw_fd)),
                failure: Some(&failure),
                landlocked: spec.landlock,
            };
            let spawned = worker::spawn(&program);
            drop(stdio); // the process has its own copies now
            let event = match (spawned, failure.take()) {
                (Ok(pid), None) => {
                    let pid = pid.as_raw();
                    // An ended process's pid given again: its old group signals must not reach the new process.
                    started.retain(|_, old| old.pid != pid);
                    started.insert(id, Started { pid, running: true });
                    InitEvent::ProcessStarted { id, pid }
                }
                // The worker exited (126) before its exec; reaped as any other child.
                (Ok(_), Some(SetupError { step, error })) => InitEvent::ProcessFailed { id, step, error },
                (Err(e), _) => InitEvent::ProcessFailed { id, step: "start the worker".into(), error: e.to_string() },
            };
            events::send(&event);
        }
        LiveRequest::Attach => {} // answered by `attach`
        LiveRequest::Signal { id, signal, group } => {
            if let Some(process) = started.get(&id)
                && (process.running || group)
            {
                let target = if group { -process.pid } else { process.pid };
                // SAFETY: kill with integers only; a process that is gone gives ESRCH, which is no error here.
                unsafe { libc::kill(target, signal) };
            }
        }
    }
}

/// Reaps every child that has ended (the processes it started, and every orphan of the sandbox), reporting the
/// end of those it started.
fn reap(started: &mut BTreeMap<u64, Started>) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out-pointer; WNOHANG never blocks.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            if pid < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return; // none ended (0), or no child at all (ECHILD)
        }
        let termination = if libc::WIFEXITED(status) {
            Termination::Exited { code: libc::WEXITSTATUS(status) }
        } else if libc::WIFSIGNALED(status) {
            Termination::Signaled { signal: libc::WTERMSIG(status) }
        } else {
            continue;
        };
        if let Some((&id, process)) = started.iter_mut().find(|(_, process)| process.pid == pid && process.running) {
            process.running = false;
            events::send(&InitEvent::ProcessEnded { id, termination });
        }
    }
}

/// Reads one request and the descriptors sent with it; `None` once the supervisor closed the socket.
///
/// The supervisor sends each frame in one `sendmsg`, its descriptors with its first bytes: the first read takes
/// them, the rest of the frame is read as plain bytes (it carries none).
fn read_request() -> std::io::Result<Option<(LiveRequest, Vec<OwnedFd>)>> {
    let mut header = [0u8; 4];
    let (got, streams) = {
        let mut buffer = [IoSliceMut::new(&mut header)];
        let mut space = nix::cmsg_space!([RawFd; 3]);
        let message = recvmsg::<()>(CHANNEL_FD, &mut buffer, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
        let mut streams = Vec::new();
        for control in message.cmsgs()? {
            if let ControlMessageOwned::ScmRights(received) = control {
                // SAFETY: the kernel just installed these descriptors in this process; nothing else owns them.
                streams.extend(received.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
        (message.bytes, streams)
    };
    if got == 0 {
        return Ok(None);
    }
    // SAFETY: fd 0 is the supervisor's socket, open for this process's life; ManuallyDrop never closes it.
    let mut channel = ManuallyDrop::new(unsafe { File::from_raw_fd(CHANNEL_FD) });
    channel.read_exact(&mut header[got..])?;
    let length = u32::from_le_bytes(header) as usize;
    if length > MAX_REQUEST_BYTES {
        return Err(std::io::Error::other(format!("a request of {length} bytes")));
    }
    let mut body = vec![0u8; length];
    channel.read_exact(&mut body)?;
    let request = serde_json::from_slice(&body).map_err(std::io::Error::other)?;
    Ok(Some((request, streams)))
}
