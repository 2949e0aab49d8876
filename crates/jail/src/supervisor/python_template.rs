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
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, recv, sendmsg, socketpair};
use sandlot_core::Termination;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe;

use crate::protocol::{HomeMount, RlimitSpec};

/// The template's program, run with `python -c`.
const TEMPLATE_SOURCE: &str = include_str!("python_template.py");
/// How long a template may take to import its modules before it is given up on (and tried again).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The wait before a dead template is replaced, so that one that cannot start does not spin; doubled after each
/// template that never got ready, up to [`MAX_RESTART_DELAY`].
const RESTART_DELAY: Duration = Duration::from_secs(2);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(300);

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

struct Template {
    label: &'static str,
    program: PathBuf,
    env: Vec<(String, String)>,
    preload: String,
    /// The socket of the running template once it is ready.
    ready: Mutex<Option<Arc<OwnedFd>>>,
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

/// What a child runs: a file of the sandbox, as `python <file>` does, or code, as `python -c <code>` does.
pub enum Program<'a> {
    File(&'a Path),
    Code(&'a str),
}

/// How a child confines itself, and what it runs.
pub struct ChildSpec<'a> {
    /// The host uid and gid of the sandbox's pid 1, which the child takes.
    pub ids: (u32, u32),
    pub rlimits: &'a RlimitSpec,
    pub landlock: bool,
    /// Landlock's scopes (no signal to, no abstract socket of, a process outside the child's domain): a run is
    /// alone in its sandbox; a live sandbox's processes must reach each other, and the others are in pid 1's domain.
    pub scoped: bool,
    pub home: Option<&'a HomeMount>,
    /// The whole environment.
    pub env: &'a [(String, String)],
    pub program: Program<'a>,
    /// The command line it shows (`/proc/<pid>/cmdline`): the exec'd equivalent's.
    pub command: Vec<String>,
}

/// A run's child of a template, as the template reports it.
pub struct Forked {
    status: BufReader<pipe::Receiver>,
}

impl PythonTemplates {
    /// Starts the templates of `program` in the background (each is used once it says it is ready).
    pub fn start(program: &Path, settings: TemplateSettings) -> Self {
        let preload = settings.preload.join(",");
        let template = |label, preload: String| {
            let template = Arc::new(Template {
                label,
                program: program.to_path_buf(),
                env: settings.env.clone(),
                preload,
                ready: Mutex::new(None),
            });
            Template::keep_running(template.clone());
            template
        };
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
        let template = self.template(choice);
        let socket = template.ready.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let socket = socket.ok_or_else(|| std::io::Error::other("the Python template is not running"))?;
        let run = self.run_json(child);
        let setup = memfd_with(&run)?;
        let (status_read, status_write) = std::io::pipe()?;
        let mut fds: Vec<RawFd> = vec![setup.as_raw_fd(), status_write.as_raw_fd(), request.pid1.as_raw_fd()];
        fds.extend(request.stdio.iter().map(AsRawFd::as_raw_fd));
        fds.extend(request.cgroups.iter().map(AsRawFd::as_raw_fd));
        let sent = sendmsg::<()>(
            socket.as_raw_fd(),
            &[IoSlice::new(b"r")],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            None,
        );
        if let Err(e) = sent {
            template.lost(&socket);
            return Err(std::io::Error::other(format!("send a run to the Python template: {e}")));
        }
        let status = pipe::Receiver::from_owned_fd(OwnedFd::from(status_read))?;
        Ok(Forked { status: BufReader::new(status) })
    }

    /// The run as the child reads it (see `python_template.py`).
    fn run_json(&self, child: &ChildSpec) -> Vec<u8> {
        let (uid, gid) = child.ids;
        let home = child.home;
        let cwd = match home {
            Some(home) if home.scratch_mb.is_none() => home.path.clone(),
            _ => PathBuf::from("/data"),
        };
        let mut writable: Vec<PathBuf> = ["/data", "/tmp", "/dev/shm"].into_iter().map(PathBuf::from).collect();
        writable.extend(home.map(|home| home.path.clone()));
        let (program, argv, path0) = match child.program {
            Program::File(path) => {
                let dir = path.parent().unwrap_or(Path::new("/"));
                (serde_json::json!({ "file": path }), vec![path.to_string_lossy().into_owned()], dir.to_owned())
            }
            Program::Code(code) => (serde_json::json!({ "code": code }), vec!["-c".to_owned()], PathBuf::new()),
        };
        let run = serde_json::json!({
            "uid": uid,
            "gid": gid,
            "cwd": cwd,
            "rlimits": rlimits(child.rlimits),
            "landlock": child.landlock,
            "scoped": child.scoped,
            "writable": writable,
            "env": child.env,
            "program": program,
            "argv": argv,
            "command": child.command,
            "path0": path0,
            "seccomp": self.seccomp_hex,
        });
        run.to_string().into_bytes()
    }
}

/// The limits of `rlimits::apply`, by the names of Python's `resource` module (infinity is its -1).
fn rlimits(spec: &RlimitSpec) -> Vec<(&'static str, i64, i64)> {
    let value = |v: u64| if v == u64::MAX { -1 } else { v.min(i64::MAX as u64) as i64 };
    let mut limits = vec![
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_NOFILE", value(spec.open_files), value(spec.open_files)),
        ("RLIMIT_FSIZE", value(spec.file_size_bytes), value(spec.file_size_bytes)),
        ("RLIMIT_CPU", value(spec.cpu_seconds), value(spec.cpu_seconds.saturating_add(1))),
    ];
    if let Some(processes) = spec.processes {
        limits.push(("RLIMIT_NPROC", value(processes), value(processes)));
    }
    if let Some(bytes) = spec.data_bytes {
        limits.push(("RLIMIT_DATA", value(bytes), value(bytes)));
    }
    limits
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

/// A memfd holding `bytes`, read from its start by whoever gets it.
fn memfd_with(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(c"sandlot-run", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    std::io::Seek::rewind(&mut file)?;
    Ok(file.into())
}

impl Forked {
    /// The child's host pid, once forked; `Err` with the template's reason if it could not be.
    pub async fn started(&mut self) -> Result<u32, String> {
        match self.next().await {
            Some(('p', pid)) => pid.parse().map_err(|_| format!("the Python template said {pid:?}")),
            Some(('f', why)) => Err(why),
            Some((_, line)) => Err(format!("the Python template said {line:?}")),
            None => Err("the Python template is gone".into()),
        }
    }

    /// How the child ended and the CPU seconds it used; `Err` with its reason if its setup failed.
    pub async fn ended(&mut self) -> Result<(Termination, f64), String> {
        let mut failure = None;
        loop {
            let end = self.next().await;
            let (number, cpu) = match &end {
                Some((_, rest)) => {
                    let mut fields = rest.split_whitespace();
                    (fields.next().and_then(|n| n.parse().ok()), fields.next().and_then(|c| c.parse().ok()))
                }
                None => (None, None),
            };
            let cpu = cpu.unwrap_or(0.0);
            match (end, number) {
                (Some(('f', why)), _) => failure = Some(why),
                (Some(('e', _)), Some(code)) if failure.is_none() => return Ok((Termination::Exited { code }, cpu)),
                (Some(('s', _)), Some(signal)) if failure.is_none() => {
                    return Ok((Termination::Signaled { signal }, cpu));
                }
                (Some(_), _) => return Err(failure.unwrap_or_else(|| "the Python template said nonsense".into())),
                (None, _) => return Err(failure.unwrap_or_else(|| "the Python template is gone".into())),
            }
        }
    }

    async fn next(&mut self) -> Option<(char, String)> {
        let mut line = String::new();
        match self.status.read_line(&mut line).await {
            Ok(0) | Err(_) => None,
            Ok(_) => {
                let line = line.trim_end();
                let kind = line.chars().next()?;
                Some((kind, line.get(2..).unwrap_or_default().to_owned()))
            }
        }
    }
}

impl Template {
    fn is_ready(&self) -> bool {
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Runs the template on a thread of its own, and replaces it whenever it ends.
    fn keep_running(template: Arc<Self>) {
        let spawned =
            std::thread::Builder::new().name(format!("python-template-{}", template.label)).spawn(move || {
                let mut delay = RESTART_DELAY;
                loop {
                    let (was_ready, ended) = template.run_once();
                    if let Err(e) = ended {
                        tracing::warn!(template = template.label, "the Python template ended: {e}");
                    }
                    delay = if was_ready { RESTART_DELAY } else { (delay * 2).min(MAX_RESTART_DELAY) };
                    std::thread::sleep(delay);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no Python template (runs start their interpreter): {e}");
        }
    }

    /// Starts the template, waits until it is ready, serves with it until it exits: whether it got ready, and how
    /// it ended.
    fn run_once(&self) -> (bool, std::io::Result<()>) {
        let mut was_ready = false;
        let ended = self.start_and_serve(&mut was_ready);
        (was_ready, ended)
    }

    fn start_and_serve(&self, was_ready: &mut bool) -> std::io::Result<()> {
        let (ours, theirs) =
            socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).map_err(io)?;
        let theirs_raw = theirs.as_raw_fd();
        let mut command = Command::new(&self.program);
        command
            .arg("-c")
            .arg(TEMPLATE_SOURCE)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("SANDLOT_TEMPLATE_PRELOAD", &self.preload)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: between fork and exec the closure only calls dup2 (async-signal-safe) on a descriptor it owns.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(theirs_raw, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let mut child = command.spawn()?;
        drop(theirs);
        if let Some(stderr) = child.stderr.take() {
            self.log_lines_of(stderr);
        }
        let result = self.serve(ours, &mut child, was_ready);
        let _ = child.kill();
        let status = child.wait()?;
        result.and(Err(std::io::Error::other(format!("it exited ({status})"))))
    }

    fn serve(&self, socket: OwnedFd, child: &mut std::process::Child, was_ready: &mut bool) -> std::io::Result<()> {
        let timeout = nix::sys::time::TimeVal::new(READY_TIMEOUT.as_secs() as i64, 0);
        nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::ReceiveTimeout, &timeout).map_err(io)?;
        let mut ready = [0u8; 8];
        let length = recv(socket.as_raw_fd(), &mut ready, MsgFlags::empty()).map_err(io)?;
        if &ready[..length] != b"ready" {
            return Err(std::io::Error::other("it did not say it was ready"));
        }
        tracing::info!(template = self.label, pid = child.id(), "Python template ready");
        *was_ready = true;
        let socket = Arc::new(socket);
        *self.ready.lock().unwrap_or_else(|e| e.into_inner()) = Some(socket.clone());
        let ended = child.wait();
        self.lost(&socket);
        ended.map(|_| ())
    }

    /// Logs what the template writes on its stderr, a line per event, so that the server's log keeps its format: an
    /// `info: ` line (a module it could not preload) as info, anything else (a traceback) as a warning.
    fn log_lines_of(&self, stderr: std::process::ChildStderr) {
        let label = self.label;
        let reader = std::thread::Builder::new().name(format!("python-template-{label}-stderr")).spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                match line.strip_prefix("info: ") {
                    Some(info) => tracing::info!(template = label, "{}", sandlot_core::Escaped(info)),
                    None => tracing::warn!(template = label, "{}", sandlot_core::Escaped(&line)),
                }
            }
        });
        if let Err(e) = reader {
            tracing::warn!(template = label, "the template's stderr is not logged: {e}");
        }
    }

    /// Stops using `socket` (its template is gone or broken).
    fn lost(&self, socket: &Arc<OwnedFd>) {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        if ready.as_ref().is_some_and(|current| Arc::ptr_eq(current, socket)) {
            *ready = None;
        }
    }
}

fn io(e: nix::errno::Errno) -> std::io::Error {
    e.into()
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

    #[test]
    fn infinite_limits_are_pythons_minus_one() {
        let spec = RlimitSpec {
            open_files: 256,
            file_size_bytes: u64::MAX,
            cpu_seconds: u64::MAX,
            processes: Some(64),
            data_bytes: None,
        };
        let limits = rlimits(&spec);
        assert!(limits.contains(&("RLIMIT_FSIZE", -1, -1)));
        assert!(limits.contains(&("RLIMIT_CPU", -1, -1)));
        assert!(limits.contains(&("RLIMIT_NOFILE", 256, 256)));
        assert!(limits.contains(&("RLIMIT_NPROC", 64, 64)));
    }
}
