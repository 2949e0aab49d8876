//! The transform in a process of its own: the server's binary re-executed with [`HELPER_SUBCOMMAND`], the
//! TypeScript on its stdin, the [`JavaScript`] as JSON on its stdout.
//!
//! Why: swc parses and transforms recursively, and the code is the caller's. Nesting deep enough (a 1 MiB program of
//! parentheses) overflows any stack, and a stack overflow aborts the whole process: in the server it would end every
//! run and connection. In a helper it ends the helper, and the run fails with a message, as a syntax error does.
//! The helper runs the transform on a thread with [`HELPER_STACK_BYTES`] of stack (reserved, touched only as deep as
//! the code nests), so real programs never come near the limit; it is killed past [`HELPER_DEADLINE`].
//!
//! [`Helpers`] keeps one helper started ahead, waiting on its stdin, so a transform pays no process start, and a
//! helper serves one transform after another (a request and an answer each, one line of JSON), so a transform costs a
//! round trip. A helper is let go (and exits) after [`HELPER_TRANSFORMS`] transforms, after a program larger than
//! [`HELPER_KEPT_AFTER_BYTES`] (so that the stack and heap a large program made it touch are not kept), and when it
//! failed: it crashed, took too long, or its run was cancelled. A transform runs no code: a helper keeps nothing of one
//! program that the next could reach.

use std::io::{BufRead, Write};
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

/// Transforms one helper serves before it is let go (bounds what it may accumulate).
pub const HELPER_TRANSFORMS: usize = 1000;

/// A helper that transformed a program larger than this is let go after it.
pub const HELPER_KEPT_AFTER_BYTES: usize = 64 * 1024;

/// What a run shows when the helper did not answer: it crashed (a stack overflow), or took too long.
const HELPER_FAILED: &str = "error: this TypeScript could not be transformed to JavaScript: the transform crashed or \
    took too long (nesting thousands of levels deep?)\n";

/// A program the helper transforms before it reads its own, both ways (stripped, and transformed with a source map),
/// so that what a first transform costs a fresh process (its code paged in, the transformer's tables built) is paid
/// while it waits, not by its run.
const WARM_UP: &str = "enum Warm { Up = 1 }\nconst warm: number = Warm.Up;\n";

/// In a binary's `main`, before anything else: when the binary was started as the helper, reads each TypeScript
/// program on stdin (one line: the program as a JSON string), writes its JavaScript as one line of JSON on stdout, and
/// exits when stdin ends; otherwise returns at once.
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
        let mut out = std::io::stdout().lock();
        for line in std::io::stdin().lock().lines() {
            let Ok(code) = line.map_err(drop).and_then(|line| serde_json::from_str::<String>(&line).map_err(drop))
            else {
                return 2; // no program could be read
            };
            let javascript = to_javascript(&code);
            // One line (JSON escapes every newline inside strings): the server takes it as soon as it ends.
            let written = serde_json::to_writer(&mut out, &javascript)
                .map_err(std::io::Error::from)
                .and_then(|()| out.write_all(b"\n"))
                .and_then(|()| out.flush());
            if written.is_err() {
                return 1;
            }
        }
        0
    });
    std::process::exit(worker.map_or(1, |thread| thread.join().unwrap_or(1)));
}

/// Helper processes of one program (a binary whose `main` calls [`run_helper_if_asked`]), one started ahead once
/// the engine says so ([`Helpers::refill`]).
pub struct Helpers {
    program: PathBuf,
    /// The helper waiting for a program (none before the first transform: started from within the runtime that will
    /// use it; none while it transforms).
    waiting: Mutex<Option<Helper>>,
}

/// A helper process and its pipes.
struct Helper {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
    /// Transforms it served.
    served: usize,
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
        let alive = waiting.and_then(|mut helper| matches!(helper.child.try_wait(), Ok(None)).then_some(helper));
        let mut helper = match alive.map_or_else(|| start(&self.program), Ok) {
            Ok(helper) => helper,
            Err(error) => return failed(error),
        };
        let large = code.len() > HELPER_KEPT_AFTER_BYTES;
        // Dropped (and so killed) on failure, and when this future is (the run was cancelled).
        match tokio::time::timeout(HELPER_DEADLINE, exchange(&mut helper, code)).await {
            Ok(Ok(javascript)) => {
                helper.served += 1;
                if !large && helper.served < HELPER_TRANSFORMS {
                    let mut waiting = self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    if waiting.is_none() {
                        *waiting = Some(helper);
                    }
                }
                javascript
            }
            Ok(Err(error)) => failed(error),
            Err(_) => failed(std::io::Error::other("the helper took too long")),
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
                Ok(helper) => *waiting = Some(helper),
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

/// A helper of `program`, waiting for its first program on its stdin.
fn start(program: &Path) -> std::io::Result<Helper> {
    let mut child = tokio::process::Command::new(program)
        .arg(HELPER_SUBCOMMAND)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => {
            Ok(Helper { child, stdin, stdout: tokio::io::BufReader::new(stdout), served: 0 })
        }
        _ => Err(std::io::Error::other("the helper's pipes are missing")),
    }
}

/// `code` transformed by `helper`: its request written while its answer is read (neither side can fill a pipe the
/// other does not drain). A whole line that parses is the answer; anything else is a helper that failed, which its
/// status says.
async fn exchange(helper: &mut Helper, code: String) -> std::io::Result<JavaScript> {
    let mut request = serde_json::to_vec(&code).map_err(std::io::Error::from)?;
    request.push(b'\n');
    let stdin = &mut helper.stdin;
    let write = async move {
        stdin.write_all(&request).await?;
        stdin.flush().await
    };
    let mut answer = Vec::new();
    let (written, read) = tokio::join!(write, helper.stdout.read_until(b'\n', &mut answer));
    written?;
    read?;
    if answer.ends_with(b"\n")
        && let Ok(javascript) = serde_json::from_slice(&answer)
    {
        return Ok(javascript);
    }
    let status = helper.child.wait().await?;
    Err(std::io::Error::other(format!("the helper gave no answer and ended with {status}")))
}
