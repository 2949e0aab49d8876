//! One Python template interpreter of a server (see `python_template`): started as `python -c` with the template's
//! source and its socket to the supervisor on fd 3; used once it says it is ready; what it writes on stderr logged in
//! the server's format; replaced whenever it ends, after a delay that grows while it never gets ready.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, recv, socketpair};

/// The template's program, run with `python -c`.
const TEMPLATE_SOURCE: &str = include_str!("python_template.py");
/// How long a template may take to import its modules before it is given up on (and tried again).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The wait before a dead template is replaced, so that one that cannot start does not spin; doubled after each
/// template that never got ready, up to [`MAX_RESTART_DELAY`].
const RESTART_DELAY: Duration = Duration::from_secs(2);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(300);

/// One template interpreter.
pub struct Template {
    label: &'static str,
    program: PathBuf,
    env: Vec<(String, String)>,
    preload: String,
    /// The socket of the running template once it is ready.
    ready: Mutex<Option<Arc<OwnedFd>>>,
}

impl Template {
    /// A template of `program` that imports `preload` (comma-separated) with `env`, started now and kept running on
    /// a thread of its own.
    pub fn start(label: &'static str, program: &Path, env: &[(String, String)], preload: String) -> Arc<Self> {
        let template = Arc::new(Self {
            label,
            program: program.to_path_buf(),
            env: env.to_vec(),
            preload,
            ready: Mutex::new(None),
        });
        Self::keep_running(template.clone());
        template
    }

    /// The socket of the running template, once it said it is ready.
    pub fn socket(&self) -> Option<Arc<OwnedFd>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn is_ready(&self) -> bool {
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
    pub fn lost(&self, socket: &Arc<OwnedFd>) {
        let mut ready = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        if ready.as_ref().is_some_and(|current| Arc::ptr_eq(current, socket)) {
            *ready = None;
        }
    }
}

fn io(e: nix::errno::Errno) -> std::io::Error {
    e.into()
}
