//! Python runs forked from a template: a server keeps Python interpreters started once (`python_template.py`), one
//! bare and one with the preloaded modules imported, which never run code themselves. For each Python run the jail
//! builds the run's sandbox as for any run, and its pid 1, instead of starting a worker, waits; the template then
//! forks a child into that sandbox (born in its pid namespace, then into its network, user, mount, IPC and UTS
//! namespaces, cgroup, uid, limits, Landlock and seccomp, as the worker confines a program) which runs the code.
//! So a run pays a `fork` instead of an interpreter's start and its imports, and is still alone in a fresh sandbox.
//!
//! Invariants: a template is used only when it said it is ready; the run's particulars (uid, limits, environment)
//! travel in a memfd only the child reads, so the template never holds a run's data; a template that dies is
//! replaced in the background, and until then runs start their interpreter as before.

use std::io::{IoSlice, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use tokio::net::unix::pipe;

use super::template_child::{ChildSetup, ChildSpec, Forked, run_json, setup_json};
use super::template_process::Template;

/// What the server's templates are made of.
#[derive(Debug, Clone)]
pub struct TemplateSettings {
    /// Modules the second template imports before any code arrives (`numpy`, `pandas`, `matplotlib.pyplot`...);
    /// empty: only the bare template.
    pub preload: Vec<String>,
    /// The environment of a Python run before the job's own (the spec's base), which the template starts with: the
    /// interpreter reads it at start-up (stdio buffering, locale), so a forked run must share it.
    pub env: Vec<(String, String)>,
    /// The jail's seccomp program (`sock_filter`s, 8 bytes each), which each child installs last.
    pub seccomp: Vec<u8>,
}

/// The bare template and, with preloads, the loaded one, for one Python interpreter.
pub struct PythonTemplates {
    program: PathBuf,
    bare: Arc<Template>,
    loaded: Option<Arc<Template>>,
    /// The top-level names of the preloaded modules: code that mentions one runs in the loaded template.
    loaded_names: Vec<String>,
    seccomp_hex: String,
}

/// Which of the two templates a child is forked from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The bare interpreter: the cheapest fork.
    Bare,
    /// The one with the preloaded modules (the bare one when none are configured).
    Loaded,
}

/// What a run forked from a template needs from the supervisor.
pub struct ForkRequest {
    /// A pidfd of the run's pid 1 (its namespaces are the run's).
    pub pid1: OwnedFd,
    /// The program's stdin (read end), stdout and stderr (write ends).
    pub stdio: [OwnedFd; 3],
    /// The run's `cgroup.procs` files, opened as root.
    pub cgroups: Vec<std::fs::File>,
}

impl PythonTemplates {
    /// Starts the templates of `program` in the background (each is used once it says it is ready).
    pub fn start(program: &Path, settings: TemplateSettings) -> Self {
        let preload = settings.preload.join(",");
        let template = |label, preload: String| Template::start(label, program, &settings.env, preload);
        let bare = template("bare", String::new());
        let loaded = (!settings.preload.is_empty()).then(|| template("preloaded", preload));
        let loaded_names = settings
            .preload
            .iter()
            .filter_map(|module| module.split('.').next())
            .map(str::to_owned)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let seccomp_hex = settings.seccomp.iter().map(|byte| format!("{byte:02x}")).collect();
        Self { program: program.to_path_buf(), bare, loaded, loaded_names, seccomp_hex }
    }

    /// Whether every template is ready.
    pub fn all_ready(&self) -> bool {
        [Some(&self.bare), self.loaded.as_ref()].into_iter().flatten().all(|template| template.is_ready())
    }

    /// Which template a run of `code` is forked from: the loaded one when the code names one of its modules.
    pub fn choose(&self, code: &str) -> Choice {
        match self.loaded_names.iter().any(|name| mentions(code, name)) {
            true => Choice::Loaded,
            false => Choice::Bare,
        }
    }

    /// Whether there is a loaded template (some modules are preloaded).
    pub fn has_loaded(&self) -> bool {
        self.loaded.is_some()
    }

    /// Whether a process of `program` can be forked from `choice` now: that template is ready.
    pub fn can_fork(&self, program: &Path, choice: Choice) -> bool {
        program == self.program && self.template(choice).is_ready()
    }

    /// The template of `choice` (the bare one when there is no loaded one).
    fn template(&self, choice: Choice) -> &Template {
        match (&self.loaded, choice) {
            (Some(loaded), Choice::Loaded) => loaded,
            _ => &self.bare,
        }
    }

    /// Forks a child of the template of `choice` into the sandbox of `request.pid1`, to run `child`.
    pub fn fork(&self, choice: Choice, child: &ChildSpec, request: ForkRequest) -> std::io::Result<Forked> {
        self.send(choice, &run_json(child, &self.seccomp_hex), request, None).map(|(forked, _)| forked)
    }

    /// Forks a prepared sandbox's child of the template of `choice` into the sandbox of `request.pid1`: it sets
    /// itself up as `setup` says and waits for its job on `jobs` (a prepared sandbox's). With the child's status,
    /// the socket of the template that forked it, whose end says when that template is gone (see [`hung_up`]).
    pub fn prepare(
        &self,
        choice: Choice,
        setup: &ChildSetup,
        request: ForkRequest,
        jobs: OwnedFd,
    ) -> std::io::Result<(Forked, Arc<OwnedFd>)> {
        self.send(choice, &setup_json(setup, &self.seccomp_hex), request, Some(jobs))
    }

    /// Sends the template of `choice` a request: `r`, a child that runs `json`, or with `jobs`, `p`, a prepared
    /// child that waits for its job there.
    fn send(
        &self,
        choice: Choice,
        json: &[u8],
        request: ForkRequest,
        jobs: Option<OwnedFd>,
    ) -> std::io::Result<(Forked, Arc<OwnedFd>)> {
        let template = self.template(choice);
        let socket = template.socket().ok_or_else(|| std::io::Error::other("the Python template is not running"))?;
        let setup = memfd_with(json)?;
        let (status_read, status_write) = std::io::pipe()?;
        let mut fds: Vec<RawFd> = vec![setup.as_raw_fd(), status_write.as_raw_fd(), request.pid1.as_raw_fd()];
        fds.extend(request.stdio.iter().map(AsRawFd::as_raw_fd));
        fds.extend(jobs.as_ref().map(AsRawFd::as_raw_fd));
        fds.extend(request.cgroups.iter().map(AsRawFd::as_raw_fd));
        let kind: &[u8] = if jobs.is_some() { b"p" } else { b"r" };
        let sent = sendmsg::<()>(
            socket.as_raw_fd(),
            &[IoSlice::new(kind)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            None,
        );
        if let Err(e) = sent {
            template.lost(&socket);
            return Err(std::io::Error::other(format!("send a run to the Python template: {e}")));
        }
        let status = pipe::Receiver::from_owned_fd(OwnedFd::from(status_read))?;
        Ok((Forked::new(status), socket))
    }
}

/// Whether `code` has `name` as a word (an import of the module, most likely; a false match only costs a bigger
/// fork).
fn mentions(code: &str, name: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(name).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + name.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// Whether the process at the other end of a template's `socket` is gone (its end closed with it).
pub fn hung_up(socket: &OwnedFd) -> bool {
    let mut poll = libc::pollfd { fd: socket.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready != 0 && poll.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// A memfd holding `bytes`, read from its start by whoever gets it.
pub fn memfd_with(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(c"sandlot-run", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    std::io::Seek::rewind(&mut file)?;
    Ok(file.into())
}

/// What a fork into the sandbox whose pid 1 is `pid1` (on the host) needs from the host: pid 1's uid and gid, a
/// pidfd of it, and the sandbox's `cgroup.procs` files opened for writing (as root); `Err` says which failed.
pub fn sandbox_handles(pid1: i32, cgroup_procs: &[PathBuf]) -> Result<SandboxHandles, String> {
    let ids = host_ids(pid1).map_err(|e| format!("read the ids of pid 1: {e}"))?;
    let pidfd = pidfd_of(pid1).map_err(|e| format!("open a pidfd of pid 1: {e}"))?;
    let cgroups = cgroup_procs
        .iter()
        .map(|path| std::fs::OpenOptions::new().write(true).open(path))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("open the sandbox's cgroup.procs: {e}"))?;
    Ok(SandboxHandles { ids, pid1: pidfd, cgroups })
}

/// See [`sandbox_handles`].
pub struct SandboxHandles {
    pub ids: (u32, u32),
    pub pid1: OwnedFd,
    pub cgroups: Vec<std::fs::File>,
}

/// The real uid and gid of process `pid` on the host (`/proc/<pid>/status`).
fn host_ids(pid: i32) -> std::io::Result<(u32, u32)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let first = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("no {key} in /proc/{pid}/status")))
    };
    Ok((first("Uid:")?, first("Gid:")?))
}

/// A pidfd of `pid` (any process, not only a child).
pub fn pidfd_of(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_is_mentioned_as_a_word_only() {
        assert!(mentions("import pandas as pd", "pandas"));
        assert!(mentions("from numpy import array", "numpy"));
        assert!(mentions("x=1\nimport matplotlib.pyplot as plt", "matplotlib"));
        assert!(!mentions("import pandas_extra", "pandas"));
        assert!(!mentions("print('numpyish')", "numpy"));
        assert!(!mentions("print(1)", "numpy"));
    }
}
