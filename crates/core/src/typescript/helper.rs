//! The transform in a process of its own: the server's binary re-executed with [`HELPER_SUBCOMMAND`], the
//! TypeScript on its stdin, the [`JavaScript`] as JSON on its stdout.
//!
//! Why: swc parses and transforms recursively, and the code is the caller's. Nesting deep enough (a 1 MiB program of
//! parentheses) overflows any stack, and a stack overflow aborts the whole process: in the server it would end every
//! run and connection. In a helper it ends the helper, and the run fails with a message, as a syntax error does.
//! The helper runs the transform on a thread with [`HELPER_STACK_BYTES`] of stack (reserved, touched only as deep as
//! the code nests), so real programs never come near the limit; it is killed past [`HELPER_DEADLINE`].
//!
//! [`Helpers`] keeps one helper started ahead, waiting on its stdin, so a transform pays no process start: each
//! helper still serves one transform and exits.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{JavaScript, reporting, to_javascript};

/// The first argument that makes a binary the transform's helper (see [`run_helper_if_asked`]).
pub const HELPER_SUBCOMMAND: &str = "__typescript-to-javascript";

/// The helper's transform thread's stack: 256 MiB, reserved but touched only as deep as the code nests.
pub const HELPER_STACK_BYTES: usize = 256 << 20;

/// The longest a transform may take: a 1 MiB program takes tens of milliseconds.
pub const HELPER_DEADLINE: Duration = Duration::from_secs(10);

/// What a run shows when the helper did not answer: it crashed (a stack overflow), or took too long.
const HELPER_FAILED: &str = "error: this TypeScript could not be transformed to JavaScript: the transform crashed or \
    took too long (nesting thousands of levels deep?)\n";

/// A program the helper transforms before it reads its own, both ways (stripped, and transformed with a source map),
/// so that what a first transform costs a fresh process (its code paged in, the transformer's tables built) is paid
/// while it waits, not by its run.
const WARM_UP: &str = "enum Warm { Up = 1 }\nconst warm: number = Warm.Up;\n";

/// In a binary's `main`, before anything else: when the binary was started as the helper, reads the TypeScript on
/// stdin, writes the JavaScript as one line of JSON on stdout and exits; otherwise returns at once.
pub fn run_helper_if_asked() {
    if std::env::args_os().nth(1).is_none_or(|arg| arg != HELPER_SUBCOMMAND) {
        return;
    }
    // All on the transform's thread, started before the code comes: the warm-up too, so that the thread's own
    // memory (its stack, the allocator's heap of its own) is there when the code comes. Warmed up at the least
    // priority, so that it yields to the runs going on; then back to the server's (where that is allowed: as root),
    // as its transform is a run's.
    // The answer is written from that thread too, before it and its stack are let go.
    let worker = std::thread::Builder::new().stack_size(HELPER_STACK_BYTES).spawn(|| {
        let _ = rustix::process::setpriority_process(None, 19);
        to_javascript(WARM_UP);
        to_javascript("const warm: number = 1;\n");
        let _ = rustix::process::setpriority_process(None, 0);
        let mut code = String::new();
        if std::io::stdin().read_to_string(&mut code).is_err() {
            return 2; // no code could be read
        }
        let javascript = to_javascript(&code);
        // One line (JSON escapes every newline inside strings): the server takes it as soon as it ends.
        let mut out = std::io::stdout().lock();
        let written = serde_json::to_writer(&mut out, &javascript)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        if written.is_ok() { 0 } else { 1 }
    });
    std::process::exit(worker.map_or(1, |thread| thread.join().unwrap_or(1)));
}

/// Helper processes of one program (a binary whose `main` calls [`run_helper_if_asked`]), one started ahead once
/// the engine says so ([`Helpers::refill`]).
pub struct Helpers {
    program: PathBuf,
    /// The helper started ahead, waiting for its TypeScript (none before the first transform: started from within
    /// the runtime that will use it).
    waiting: Mutex<Option<tokio::process::Child>>,
}

impl Helpers {
    /// Helpers of `program`.
    pub fn new(program: PathBuf) -> Arc<Self> {
        Arc::new(Self { program, waiting: Mutex::new(None) })
    }

    /// [`to_javascript`] in the helper waiting (or in one started now if none is, or it died). Never fails: a helper
    /// that crashed, took too long or could not start gives a program that reports it.
    pub async fn to_javascript(&self, code: String) -> JavaScript {
        let waiting = self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        let alive = waiting.and_then(|mut child| matches!(child.try_wait(), Ok(None)).then_some(child));
        match alive.map_or_else(|| start(&self.program), Ok) {
            Ok(child) => to_javascript_by(child, code).await,
            Err(error) => failed(error),
        }
    }

    /// Starts, in the background, the helper the next transform takes, unless one waits. Called once the run of the
    /// last transform is over: a helper starting (and warming up) takes a core for a few milliseconds, which a run
    /// going on would wait for.
    pub fn refill(self: &Arc<Self>) {
        let helpers = Arc::clone(self);
        tokio::spawn(async move { helpers.start_next() });
    }

    fn start_next(&self) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if waiting.is_none() {
            match start(&self.program) {
                Ok(child) => *waiting = Some(child),
                Err(error) => tracing::warn!(%error, "cannot start a TypeScript transform's helper"),
            }
        }
    }
}

/// What a run shows when its helper failed.
fn failed(error: std::io::Error) -> JavaScript {
    tracing::warn!(%error, "the TypeScript transform's helper failed");
    reporting(HELPER_FAILED)
}

/// A helper of `program`, waiting for its TypeScript on its stdin.
fn start(program: &Path) -> std::io::Result<tokio::process::Child> {
    tokio::process::Command::new(program)
        .arg(HELPER_SUBCOMMAND)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
}

/// [`to_javascript`] of `code` by the helper `child`.
async fn to_javascript_by(child: tokio::process::Child, code: String) -> JavaScript {
    match exchange(child, code).await {
        Ok(javascript) => javascript,
        Err(error) => failed(error),
    }
}

async fn exchange(mut child: tokio::process::Child, code: String) -> std::io::Result<JavaScript> {
    let (mut stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => (stdin, stdout),
        _ => return Err(std::io::Error::other("the helper's pipes are missing")),
    };
    let exchange = async {
        // Written while the answer is read: neither side can fill a pipe the other does not drain.
        let write = async move {
            let written = stdin.write_all(code.as_bytes()).await;
            drop(stdin);
            written
        };
        let (mut answer, mut stdout) = (Vec::new(), tokio::io::BufReader::new(stdout));
        let (written, read) = tokio::join!(write, stdout.read_until(b'\n', &mut answer));
        written?;
        read?;
        // A whole line that parses is the helper's answer, written once its transform is done: it is not waited for
        // to exit. Anything else is a helper that failed, which its status says.
        if answer.ends_with(b"\n")
            && let Ok(javascript) = serde_json::from_slice(&answer)
        {
            tokio::spawn(async move { child.wait().await });
            return Ok(javascript);
        }
        let status = child.wait().await?;
        Err(std::io::Error::other(format!("the helper gave no answer and ended with {status}")))
    };
    match tokio::time::timeout(HELPER_DEADLINE, exchange).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::other("the helper took too long")), // killed when `child` is dropped
    }
}
