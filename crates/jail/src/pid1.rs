//! The sandbox's pid 1: builds the filesystem, names the host, brings up loopback, writes the code, forks the
//! worker and reaps every process until the worker ends. When pid 1 exits the kernel kills everything left in the
//! pid namespace, so no background or double-forked process survives the program.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork, sethostname};

use crate::filesystem::HostTrees;
use crate::report::{Report, SetupError, Step};
use crate::spec::JailSpec;
use crate::{filesystem, loopback, worker};

/// Runs pid 1; never returns.
pub fn run(spec: &JailSpec, trees: Option<HostTrees>, parent_alive: std::io::PipeReader) -> ! {
    match prepare(spec, trees, &parent_alive) {
        Ok(()) => {}
        Err(error) => error.report_and_exit(),
    }
    // SAFETY: single-threaded process; the child only runs the worker and exits or execs.
    let worker = match unsafe { fork() } {
        Ok(ForkResult::Child) => worker::run(spec),
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => SetupError::new("fork worker", e).report_and_exit(),
    };
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == worker => {
                Report::Exited { code }.send();
                break;
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == worker => {
                Report::Signaled { signal: signal as i32 }.send();
                break;
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => SetupError::new("wait for worker", e).report_and_exit(),
        }
    }
    // SAFETY: ends pid 1 (and with it the namespace) without running destructors of the forked image.
    unsafe { libc::_exit(0) }
}

/// Whether the init that forked us is gone (its end of the liveness pipe closed).
fn parent_gone(parent_alive: &std::io::PipeReader) -> bool {
    let mut poll = libc::pollfd { fd: parent_alive.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & (libc::POLLHUP | libc::POLLIN) != 0
}

fn prepare(spec: &JailSpec, trees: Option<HostTrees>, parent_alive: &std::io::PipeReader) -> Result<(), SetupError> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } < 0 {
        return Err(SetupError::new("prctl(PR_SET_PDEATHSIG)", std::io::Error::last_os_error()));
    }
    if parent_gone(parent_alive) {
        return Err(SetupError::new("start", "the init died before the sandbox started"));
    }
    filesystem::build(spec, trees)?;
    sethostname(&spec.hostname).step(|| "sethostname".into())?;
    loopback::bring_up().step(|| "bring up loopback".into())?;
    let mut code = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&spec.code_path)
        .step(|| format!("create {}", spec.code_path.display()))?;
    code.write_all(spec.code.as_bytes()).step(|| format!("write {}", spec.code_path.display()))
}
