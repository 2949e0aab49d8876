//! An init, a child of the supervisor's process: forked by `sandlot run` before its runtime started, or cloned by
//! the zygote as a sibling of itself. It is watched through a pidfd:
//! readable once the process has exited, then reaped with `waitid(P_PIDFD)`, and signalled with
//! `pidfd_send_signal`, so a recycled pid can never be hit.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A child of this process, known by its pidfd.
#[derive(Debug)]
pub struct PidfdChild {
    pid: Pid,
    pidfd: OwnedFd,
    /// Set once reaped; later waits return it again.
    status: Option<ExitStatus>,
    /// Left to exit and be reaped on its own (see [`PidfdChild::abandon`]).
    abandoned: bool,
}

impl PidfdChild {
    /// Opens a pidfd for `pid`, which must be a child of this process that has not been reaped.
    pub fn open(pid: Pid) -> std::io::Result<Self> {
        Ok(Self { pid, pidfd: crate::sys::pidfd_open(pid)?, status: None, abandoned: false })
    }

    /// The child's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Reaps the child if it has exited; `None` while it runs.
    fn try_reap(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        // SAFETY: siginfo_t is a plain C struct for which all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own pidfd with a valid out-pointer.
        let rc = unsafe {
            libc::waitid(libc::P_PIDFD, self.pidfd.as_raw_fd() as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG)
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: waitid filled `info` (si_pid is 0 when the child has not exited yet).
        let (pid, code, value) = unsafe { (info.si_pid(), info.si_code, info.si_status()) };
        if pid == 0 {
            return Ok(None);
        }
        let status = match code {
            libc::CLD_EXITED => ExitStatus::from_raw((value & 0xff) << 8),
            _ => ExitStatus::from_raw(value & 0x7f),
        };
        self.status = Some(status);
        Ok(Some(status))
    }

    /// Waits for the child to exit and reaps it. Cancel-safe: a later call picks up the same result.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        // SAFETY: the pidfd stays open and the same for the life of `watch`: `self` owns it, and only drops it with
        // itself, which cannot happen while this method borrows it.
        let watch = unsafe { AsyncFd::register_with_interest(self.pidfd.as_raw_fd(), Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        loop {
            if let Some(status) = self.try_reap()? {
                return Ok(status);
            }
            watch.readable().await?.clear_ready();
        }
    }

    /// Whether the child is still running.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.try_reap(), Ok(None))
    }

    /// Lets go of the child without killing or reaping it: for a process that exits next, leaving the child to
    /// the host's init.
    pub fn abandon(mut self) {
        self.abandoned = true;
    }

    /// SIGKILLs the child (a no-op once it has exited).
    pub fn kill(&self) {
        if self.status.is_none() {
            // SAFETY: pidfd_send_signal on our own pidfd, no siginfo, no flags.
            unsafe { libc::syscall(libc::SYS_pidfd_send_signal, self.pidfd.as_raw_fd(), libc::SIGKILL, 0usize, 0u32) };
        }
    }
}

impl Drop for PidfdChild {
    /// A child dropped before it was reaped (and not abandoned) is killed and reaped by a short-lived thread, so it
    /// does not stay a zombie for the life of the server.
    fn drop(&mut self) {
        if self.status.is_some() || self.abandoned {
            return;
        }
        self.kill();
        let Ok(pidfd) = self.pidfd.try_clone() else { return };
        let reaper = std::thread::Builder::new().name("sandlot-reaper".into()).spawn(move || {
            // SAFETY: siginfo_t is a plain C struct for which all-zero is a valid value.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: a blocking waitid on a pidfd we own, with a valid out-pointer.
            unsafe { libc::waitid(libc::P_PIDFD, pidfd.as_raw_fd() as libc::id_t, &mut info, libc::WEXITED) };
        });
        if let Err(e) = reaper {
            tracing::warn!(pid = self.pid.as_raw(), "cannot reap a dropped jail init: {e}");
        }
    }
}
