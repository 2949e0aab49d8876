//! A driver started in this machine's real interpreter, as a backend would start it (the args of `spawn_for`), in
//! its own process group and a temporary working directory, and the cells it ran.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

use super::super::{CellEnd, DriverGone, DriverOutput, encode_request, new_nonce, spawn_for};
use crate::{Language, Stream};

/// How long a cell may take: cells here take milliseconds; a driver that never ends a cell fails the test instead
/// of hanging it.
const CELL_DEADLINE: Duration = Duration::from_secs(20);

/// How often an interrupted cell that has not ended is sent SIGINT again.
const RESEND: Duration = Duration::from_secs(1);

/// What a cell printed and how it ended.
#[derive(Debug)]
pub(super) struct Cell {
    pub stdout: String,
    pub stderr: String,
    pub end: CellEnd,
}

impl Cell {
    /// A cell that ended with `exit_code`, not interrupted, and wrote `stdout` and `stderr`.
    pub fn expect(&self, stdout: &str, stderr: &str, exit_code: i32) {
        assert_eq!(
            (self.stdout.as_str(), self.stderr.as_str(), self.end),
            (stdout, stderr, CellEnd { exit_code, interrupted: false, exiting: false })
        );
    }
}

pub(super) struct Driver {
    child: Child,
    stdin: ChildStdin,
    output: DriverOutput,
    pid: Pid,
    _dir: tempfile::TempDir,
}

/// The interpreter a backend would start for `language`: Debian's python3 rather than a pyenv shim (a shell
/// script), node and bash from PATH.
fn program(language: Language) -> &'static str {
    match language {
        Language::Python if std::path::Path::new("/usr/bin/python3").exists() => "/usr/bin/python3",
        Language::Python => "python3",
        Language::JavaScript | Language::TypeScript => "node",
        Language::Bash => "bash",
    }
}

/// esbuild as the backend would give it in SANDLOT_ESBUILD: this machine's, under `npm root -g` (tsx's own, or a
/// global esbuild). The tests that need it fail when it is missing.
fn esbuild() -> &'static PathBuf {
    static ESBUILD: OnceLock<PathBuf> = OnceLock::new();
    ESBUILD.get_or_init(|| {
        let output = std::process::Command::new("npm").args(["root", "-g"]).output().expect("npm root -g");
        let root = PathBuf::from(String::from_utf8(output.stdout).expect("utf-8").trim());
        let candidates = [root.join("tsx/node_modules/esbuild"), root.join("esbuild")];
        candidates
            .iter()
            .find(|dir| dir.join("package.json").exists())
            .unwrap_or_else(|| panic!("no esbuild under {candidates:?}: the TypeScript tests need it"))
            .clone()
    })
}

impl Driver {
    /// Starts the driver for `language`; for TypeScript (the shared node driver), with SANDLOT_ESBUILD set.
    pub async fn start(language: Language) -> Driver {
        let spawn = spawn_for(language);
        assert_eq!(spawn.language, language);
        let dir = tempfile::tempdir().expect("tempdir");
        let mut command = Command::new(program(language));
        command
            .args(&spawn.args)
            .envs(&spawn.env)
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if language == Language::TypeScript {
            command.env("SANDLOT_ESBUILD", esbuild());
        }
        let mut child = command.spawn().expect("spawn the driver");
        let pid = Pid::from_raw(child.id().expect("pid") as i32).expect("a pid");
        let stdin = child.stdin.take().expect("stdin");
        let output = DriverOutput::new(
            Box::pin(child.stdout.take().expect("stdout")),
            Box::pin(child.stderr.take().expect("stderr")),
        );
        Driver { child, stdin, output, pid, _dir: dir }
    }

    /// The driver's working directory.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// Runs a cell.
    pub async fn run(&mut self, language: Language, code: &str) -> Cell {
        self.try_run(language, code, None).await.expect("the driver is alive")
    }

    /// Runs a cell that prints `started` and then loops: at `started` on stdout, sends SIGINT once, to the driver's
    /// process group when `group` (as the manager does for Bash), else to the driver.
    pub async fn run_interrupted(&mut self, language: Language, code: &str, group: bool) -> Cell {
        self.try_run(language, code, Some(group)).await.expect("the driver is alive")
    }

    /// Runs a cell; `interrupt` as in [`Driver::run_interrupted`].
    pub async fn try_run(
        &mut self,
        language: Language,
        code: &str,
        interrupt: Option<bool>,
    ) -> Result<Cell, DriverGone> {
        let nonce = new_nonce();
        // A driver that is gone fails the write; read_cell then says how.
        let _ = self.stdin.write_all(&encode_request(&nonce, language, code)).await;
        let _ = self.stdin.flush().await;
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let pid = self.pid;
        let send = |group: bool| {
            let sent = if group { kill_process_group(pid, Signal::INT) } else { kill_process(pid, Signal::INT) };
            sent.expect("SIGINT");
        };
        let signalled = std::sync::atomic::AtomicBool::new(false);
        let mut sink = |stream: Stream, bytes: &[u8]| {
            match stream {
                Stream::Stdout => stdout.extend_from_slice(bytes),
                Stream::Stderr => stderr.extend_from_slice(bytes),
            }
            if let Some(group) = interrupt
                && !signalled.load(std::sync::atomic::Ordering::SeqCst)
                && stdout.windows(8).any(|w| w == b"started\n")
            {
                signalled.store(true, std::sync::atomic::Ordering::SeqCst);
                send(group);
            }
        };
        // Once sent, SIGINT is sent again every second until the cell ends, as the manager should: one SIGINT can
        // be lost (a Bash cell's child forked as it arrives does not get it, and the shell waits for the child;
        // see node.js for node's case). The cells here end within milliseconds of the first one.
        let mut again = tokio::time::interval_at(tokio::time::Instant::now() + RESEND, RESEND);
        let end = {
            let read = tokio::time::timeout(CELL_DEADLINE, self.output.read_cell(&nonce, &mut sink));
            tokio::pin!(read);
            loop {
                tokio::select! {
                    end = &mut read => break end.expect("the cell ended in time")?,
                    _ = again.tick() => {
                        if let (Some(group), true) = (interrupt, signalled.load(std::sync::atomic::Ordering::SeqCst)) {
                            send(group);
                        }
                    }
                }
            }
        };
        Ok(Cell {
            stdout: String::from_utf8(stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(stderr).expect("utf-8 stderr"),
            end,
        })
    }

    /// Waits for the driver to end (after a cell ended it), and returns its exit status.
    pub async fn wait(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(CELL_DEADLINE, self.child.wait()).await.expect("the driver ended in time").expect("wait")
    }
}
