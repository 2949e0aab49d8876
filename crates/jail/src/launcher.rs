//! Starting the init, the three ways a supervisor can:
//! - [`crate::zygote::Zygote::clone_init`]: a server has its zygote clone each init ([`InitStarter`]). The server
//!   cannot fork the init itself: it is multi-threaded, and a forked copy of a multi-threaded process may only
//!   call async-signal-safe functions.
//! - [`InitProcess::exec`]: re-execute the sandlot binary with [`crate::INIT_SUBCOMMAND`]; a server without a
//!   zygote does this.
//! - [`Prefork::start`]: a one-shot command (`sandlot run`) forks its init at the start of `main`, while it still has
//!   a single thread, and hands it to the backend ([`crate::JailBackend::use_prefork`]). The init then costs a fork
//!   instead of a fork, an exec and a second program start-up.
//!
//! Either way the init gets the same pipes: the spec and the program's stdin on fd 0 (for a preforked init, after
//! the frame of [`Prefork::announce`]), the program's stdout and stderr on fds 1 and 2, and the report pipe.

use std::io::{PipeReader, PipeWriter};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use nix::unistd::{ForkResult, Pid, fork};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

use crate::cpu_placement::{self, CpuSet};
use crate::pidfd_child::PidfdChild;
use crate::root_template::{RootTemplate, TemplateRequest};
use crate::spec::HeadStart;
use crate::zygote::Zygote;
use crate::{Error, INIT_SUBCOMMAND, Result};

/// Held while an init is spawned with an inheritable report pipe (see [`InitProcess::exec`]).
static SPAWN_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// An init forked before the process started any thread, waiting for its spec.
#[derive(Debug)]
pub struct Prefork {
    pid: Pid,
    stdin: PipeWriter,
    stdout: PipeReader,
    stderr: PipeReader,
    reports: PipeReader,
    /// The [`HeadStart`] has been sent (see [`Prefork::announce`]).
    announced: bool,
    /// The init was told to join the conversation's pinned network namespace.
    joins_pinned: bool,
}

impl Prefork {
    /// Tells the init the rest of what it can do before its spec: which pinned network namespace to join, if any.
    /// The init waits for this, the first frame on its standard input, before it enters a network namespace: call
    /// it as soon as the arguments are parsed. Only the first call counts; adopting the init announces
    /// [`HeadStart::default`] if nothing was announced.
    pub fn announce(&mut self, head_start: &HeadStart) {
        if std::mem::replace(&mut self.announced, true) {
            return;
        }
        self.joins_pinned = head_start.join_netns.is_some();
        let json = serde_json::to_vec(head_start).unwrap_or_default();
        let mut frame = (json.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&json);
        // A failed write (the init is gone) shows when the spec is sent.
        let _ = std::io::Write::write_all(&mut self.stdin, &frame);
    }

    /// Whether the init was told to join a pinned network namespace (so it makes no new one to pin).
    pub fn joins_pinned(&self) -> bool {
        self.joins_pinned
    }

    /// Forks the init now. Call it only while the process has a single thread (before any async runtime).
    pub fn start() -> std::io::Result<Self> {
        let (stdin_read, stdin_write) = std::io::pipe()?;
        let (stdout_read, stdout_write) = std::io::pipe()?;
        let (stderr_read, stderr_write) = std::io::pipe()?;
        let (reports_read, reports_write) = std::io::pipe()?;
        let cpus = CpuSet::allowed();
        // SAFETY: the caller guarantees a single thread, so the child may run arbitrary code after fork.
        match unsafe { fork() }? {
            ForkResult::Child => {
                for (from, to) in
                    [(stdin_read.as_raw_fd(), 0), (stdout_write.as_raw_fd(), 1), (stderr_write.as_raw_fd(), 2)]
                {
                    // SAFETY: dup2 on descriptors this process owns.
                    if unsafe { libc::dup2(from, to) } < 0 {
                        // SAFETY: ends the forked child without running the parent's destructors.
                        unsafe { libc::_exit(126) }
                    }
                }
                drop((stdin_read, stdin_write, stdout_read, stdout_write, stderr_read, stderr_write, reports_read));
                crate::init::run_main_ahead(reports_write.into_raw_fd(), cpus)
            }
            ForkResult::Parent { child } => {
                if let Some(cpus) = &cpus {
                    cpu_placement::move_off_this_cpu(child.as_raw(), cpus);
                }
                Ok(Self {
                    pid: child,
                    stdin: stdin_write,
                    stdout: stdout_read,
                    stderr: stderr_read,
                    reports: reports_read,
                    announced: false,
                    joins_pinned: false,
                })
            }
        }
    }
}

enum Process {
    Spawned(tokio::process::Child),
    Cloned(PidfdChild),
}

/// The supervisor's ends of a running init's pipes.
pub struct InitPipes {
    pub stdin: Box<dyn AsyncWrite + Unpin + Send>,
    pub stdout: Box<dyn AsyncRead + Unpin + Send>,
    pub stderr: Box<dyn AsyncRead + Unpin + Send>,
    pub reports: pipe::Receiver,
}

impl InitPipes {
    /// The supervisor's ends of an init's pipes, made asynchronous (call within the runtime).
    pub fn from_std(stdin: PipeWriter, stdout: PipeReader, stderr: PipeReader, reports: PipeReader) -> Result<Self> {
        let adopt = |e| Error::io("watch the init's pipes", e);
        let receiver = |reader: PipeReader| pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(adopt);
        Ok(Self {
            stdin: Box::new(pipe::Sender::from_owned_fd(OwnedFd::from(stdin)).map_err(adopt)?),
            stdout: Box::new(receiver(stdout)?),
            stderr: Box::new(receiver(stderr)?),
            reports: receiver(reports)?,
        })
    }
}

/// A running init, to wait for or kill.
pub struct InitProcess {
    process: Process,
    /// The skeleton assembled in the init's mount namespace, when a zygote with one cloned it.
    root_template: Option<RootTemplate>,
}

impl InitProcess {
    /// Starts `program __jail-init <report fd>`.
    ///
    /// The child inherits the report pipe's write end because that one descriptor is made inheritable just for the
    /// spawn, under [`SPAWN_LOCK`], so no other init spawned at the same moment inherits it too. That keeps the
    /// command free of a `pre_exec` hook, so the standard library starts it with `posix_spawn` (a vfork that shares
    /// the server's memory) rather than `fork`, which would copy the page tables of the whole server for each run.
    pub fn exec(program: &Path) -> Result<(Self, InitPipes)> {
        let _spawning = SPAWN_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (report_reader, report_writer) = std::io::pipe().map_err(|e| Error::io("create report pipe", e))?;
        let report_fd = report_writer.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns; it only clears its close-on-exec flag.
        if unsafe { libc::fcntl(report_fd, libc::F_SETFD, 0) } < 0 {
            return Err(Error::io("make the report pipe inheritable", std::io::Error::last_os_error()));
        }
        let mut command = tokio::process::Command::new(program);
        command
            .arg(INIT_SUBCOMMAND)
            .arg(report_fd.to_string())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| Error::io(format!("start {}", program.display()), e))?;
        drop(report_writer);
        drop(_spawning);
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Error::io("take init pipes", std::io::ErrorKind::BrokenPipe.into()));
        };
        let pipes = InitPipes {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            reports: pipe::Receiver::from_owned_fd(OwnedFd::from(report_reader))
                .map_err(|e| Error::io("watch report pipe", e))?,
        };
        Ok((Self { process: Process::Spawned(child), root_template: None }, pipes))
    }

    /// Adopts a preforked init.
    pub fn adopt(mut prefork: Prefork) -> Result<(Self, InitPipes)> {
        prefork.announce(&HeadStart::default());
        let child = PidfdChild::open(prefork.pid).map_err(|e| Error::io("open a pidfd for the preforked init", e))?;
        let pipes = InitPipes::from_std(prefork.stdin, prefork.stdout, prefork.stderr, prefork.reports)?;
        Ok((Self::cloned(child), pipes))
    }

    /// An init that is a child of this process, started by a fork or by the zygote.
    pub fn cloned(child: PidfdChild) -> Self {
        Self { process: Process::Cloned(child), root_template: None }
    }

    /// The same init, noting the skeleton assembled in its mount namespace.
    pub fn with_root_template(self, root_template: Option<RootTemplate>) -> Self {
        Self { root_template, ..self }
    }

    /// The skeleton assembled in the init's mount namespace, if any.
    pub fn root_template(&self) -> Option<&RootTemplate> {
        self.root_template.as_ref()
    }

    /// The init's pid, until it has been reaped.
    pub fn pid(&self) -> Option<u32> {
        match &self.process {
            Process::Spawned(child) => child.id(),
            Process::Cloned(child) => child.is_unreaped().then(|| child.pid().as_raw() as u32),
        }
    }

    /// Waits for the init to exit. Cancel-safe: waiting again after a cancelled wait picks up the same result.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match &mut self.process {
            Process::Spawned(child) => child.wait().await,
            Process::Cloned(child) => child.wait().await,
        }
    }

    /// Whether the init is still running (not yet exited or killed).
    pub fn is_alive(&mut self) -> bool {
        match &mut self.process {
            Process::Spawned(child) => matches!(child.try_wait(), Ok(None)),
            Process::Cloned(child) => child.is_alive(),
        }
    }

    /// Lets the init finish exiting on its own once its pid 1 has reported the program's end: a server reaps it in
    /// the background. A one-shot command (`sandlot run`, whose preforked init is its child), which exits next,
    /// leaves it instead of waiting for the kernel to tear its namespaces down: it dies with the command (its
    /// parent-death signal), and the host's init reaps it, as every orphan. Nothing of the program is left by
    /// then, and neither process is in the run's cgroups.
    pub fn finish_in_background(mut self, one_shot: bool) {
        match self.process {
            Process::Cloned(child) if one_shot => child.abandon(),
            _ => {
                tokio::spawn(async move {
                    let _ = self.wait().await;
                });
            }
        }
    }

    /// SIGKILLs the init.
    pub fn kill(&mut self) {
        match &mut self.process {
            Process::Spawned(child) => {
                let _ = child.start_kill();
            }
            Process::Cloned(child) => child.kill(),
        }
    }
}

/// Starts inits: cloned by the zygote when there is one and it is alive, else exec'd.
pub struct InitStarter {
    program: PathBuf,
    zygote: Option<Zygote>,
}

impl InitStarter {
    /// A starter that execs `program` for every init.
    pub fn exec(program: PathBuf) -> Self {
        Self { program, zygote: None }
    }

    /// A starter that has a zygote (started now, see [`Zygote::start`], assembling `template`) clone each init;
    /// if the zygote cannot be started it execs them instead.
    pub fn with_zygote(program: PathBuf, template: Option<TemplateRequest>) -> Self {
        let zygote = Zygote::start(&program, template)
            .inspect_err(|e| tracing::warn!("no jail zygote, every init will be exec'd: {e}"))
            .ok();
        Self { program, zygote }
    }

    /// Whether a zygote clones the inits: `None` without one (every init is exec'd), else whether it is alive.
    pub fn zygote_alive(&self) -> Option<bool> {
        self.zygote.as_ref().map(Zygote::is_alive)
    }

    /// The program exec'd for an init when no zygote clones it.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// A new init, waiting for its spec.
    pub fn start(&self) -> Result<(InitProcess, InitPipes)> {
        if let Some(zygote) = &self.zygote {
            match zygote.clone_init() {
                Ok(started) => return Ok(started),
                Err(e) => tracing::warn!("the jail zygote failed ({e}); exec'ing the init instead"),
            }
        }
        InitProcess::exec(&self.program)
    }
}
