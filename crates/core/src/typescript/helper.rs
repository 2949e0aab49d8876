//! The transform in a process of its own: the server's binary re-executed with [`HELPER_SUBCOMMAND`], the
//! TypeScript on its stdin, the [`JavaScript`] as JSON on its stdout.
//!
//! Why: swc parses and transforms recursively, and the code is the caller's. Nesting deep enough (a 1 MiB program of
//! parentheses) overflows any stack, and a stack overflow aborts the whole process: in the server it would end every
//! run and connection. In a helper it ends the helper, and the run fails with a message, as a syntax error does.
//! The helper runs the transform on a thread with [`HELPER_STACK_BYTES`] of stack (reserved, touched only as deep as
//! the code nests), so real programs never come near the limit; it is killed past [`HELPER_DEADLINE`].

use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// In a binary's `main`, before anything else: when the binary was started as the helper, reads the TypeScript on
/// stdin, writes the JavaScript as JSON on stdout and exits; otherwise returns at once.
pub fn run_helper_if_asked() {
    if std::env::args_os().nth(1).is_none_or(|arg| arg != HELPER_SUBCOMMAND) {
        return;
    }
    let mut code = String::new();
    if std::io::stdin().read_to_string(&mut code).is_err() {
        std::process::exit(2);
    }
    let worker = std::thread::Builder::new().stack_size(HELPER_STACK_BYTES).spawn(move || to_javascript(&code));
    let Ok(Ok(javascript)) = worker.map(|thread| thread.join()) else {
        std::process::exit(1);
    };
    let written = serde_json::to_writer(std::io::stdout().lock(), &javascript);
    let flushed = std::io::stdout().flush();
    std::process::exit(if written.is_ok() && flushed.is_ok() { 0 } else { 1 });
}

/// [`to_javascript`] in a helper process started from `program` (a binary whose `main` calls
/// [`run_helper_if_asked`]). Never fails: a helper that crashed, took too long or could not start gives a program
/// that reports it.
pub async fn to_javascript_in_helper(program: &Path, code: String) -> JavaScript {
    match in_helper(program, code).await {
        Ok(javascript) => javascript,
        Err(error) => {
            tracing::warn!(%error, "the TypeScript transform's helper failed");
            reporting(HELPER_FAILED)
        }
    }
}

async fn in_helper(program: &Path, code: String) -> std::io::Result<JavaScript> {
    let mut child = tokio::process::Command::new(program)
        .arg(HELPER_SUBCOMMAND)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let (mut stdin, mut stdout) = match (child.stdin.take(), child.stdout.take()) {
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
        let mut answer = Vec::new();
        let (written, read) = tokio::join!(write, stdout.read_to_end(&mut answer));
        written?;
        read?;
        let status = child.wait().await?;
        match status.success() {
            true => serde_json::from_slice(&answer).map_err(std::io::Error::other),
            false => Err(std::io::Error::other(format!("the helper ended with {status}"))),
        }
    };
    match tokio::time::timeout(HELPER_DEADLINE, exchange).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::other("the helper took too long")), // killed when `child` is dropped
    }
}
