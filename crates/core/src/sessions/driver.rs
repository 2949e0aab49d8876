//! The interpreter drivers of live sessions and their wire protocol.
//!
//! A driver is a small program in the interpreter's own language (`drivers/python.py`, `node.js`, `bash.sh`, passed
//! in argv, never written to a file) that runs cells in one persistent interpreter. It reads requests from a private
//! descriptor (its fd 0 moved aside at start, `/dev/null` put in its place): a header line
//! `<nonce> <byte length> <language>\n`, then that many bytes of UTF-8 code. After the cell ran and its output was
//! flushed it writes `\0SANDLOT-END:<nonce>\n` to stderr, then `\0SANDLOT-END:<nonce>:<json>\n` to stdout (json:
//! `{"exit_code": n, "interrupted": bool}`); nothing else of its own goes to the streams. [`DriverOutput`] reads both
//! streams, forwards the cell's bytes and strips the markers.

use std::collections::BTreeMap;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::{Language, Spawn, Stream};

const PYTHON_DRIVER: &str = include_str!("drivers/python.py");
const NODE_DRIVER: &str = include_str!("drivers/node.js");
const BASH_DRIVER: &str = include_str!("drivers/bash.sh");

/// What every end marker starts with; the nonce follows. The NUL byte makes it unlikely in text output, and the
/// nonce (unknown to the cell's code) makes a forged one impossible by accident.
const MARKER: &[u8] = b"\0SANDLOT-END:";

/// The longest stdout end marker's JSON accepted; past it, bytes that looked like a marker are output.
const MAX_END_JSON: usize = 256;

/// The bytes asked of a stream per read.
const READ_SIZE: usize = 16 * 1024;

/// The args that start the driver of `language` (after the backend's interpreter for it). JavaScript and TypeScript
/// start the same node driver; spawned for TypeScript, the backend also sets `SANDLOT_ESBUILD`, which TypeScript
/// cells need (so a session should spawn the shared driver with `Language::TypeScript` when the backend has a
/// TypeScript runner).
pub fn spawn_for(language: Language) -> Spawn {
    let args: &[&str] = match language {
        Language::Python => &["-u", "-c", PYTHON_DRIVER],
        // --expose-internals: the driver uses node's own REPL rewriting of top-level `await` when it is there.
        Language::JavaScript | Language::TypeScript => &["--expose-internals", "-e", NODE_DRIVER],
        // The last arg is `$0`.
        Language::Bash => &["--noprofile", "--norc", "-c", BASH_DRIVER, "bash"],
    };
    Spawn { language, args: args.iter().map(|arg| (*arg).to_owned()).collect(), env: BTreeMap::new() }
}

/// The key of the driver that runs `language`'s cells: TypeScript and JavaScript share one node driver (one global
/// state), keyed `JavaScript`.
pub(crate) fn driver_language(language: Language) -> Language {
    match language {
        Language::TypeScript | Language::JavaScript => Language::JavaScript,
        other => other,
    }
}

/// A fresh nonce for a request: 32 lowercase hex digits, random.
pub(crate) fn new_nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A request for one cell, as written to the driver's stdin. `nonce` is 32 lowercase hex digits (see
/// [`new_nonce`]).
pub(crate) fn encode_request(nonce: &str, language: Language, code: &str) -> Vec<u8> {
    debug_assert!(nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    let mut request = format!("{nonce} {} {}\n", code.len(), language.as_str()).into_bytes();
    request.extend_from_slice(code.as_bytes());
    request
}

/// How a cell ended, as its driver said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct CellEnd {
    /// 0, 1 after an uncaught error, 130 when interrupted, or what the cell asked (`SystemExit(n)`,
    /// `process.exit(n)`, a Bash cell's last status).
    pub exit_code: i32,
    /// A SIGINT arrived while the cell ran.
    pub interrupted: bool,
    /// The driver ends after this cell (a Bash cell ran `exit`): its state goes with it.
    #[serde(default)]
    pub exiting: bool,
}

/// The driver is gone: a stream ended (or failed) before the cell's end marker.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DriverGone {
    #[error("the driver's {} closed before the cell ended", stream_name(*.0))]
    Closed(Stream),
    #[error("reading the driver's {}", stream_name(*.0))]
    Read(Stream, #[source] std::io::Error),
}

fn stream_name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

/// A driver's stdout and stderr. Bytes read past a cell's end marker stay here for the next cell.
pub(crate) struct DriverOutput {
    stdout: Pin<Box<dyn AsyncRead + Send>>,
    stderr: Pin<Box<dyn AsyncRead + Send>>,
    /// Bytes read and not yet forwarded: at most a partial marker while a cell runs, anything after an end.
    stdout_pending: Vec<u8>,
    stderr_pending: Vec<u8>,
    /// The cell being read, kept across calls so that a `read_cell` dropped half-way (say, in a `select!`) and
    /// called again with the same nonce loses no end marker.
    cell: Option<CellProgress>,
}

struct CellProgress {
    nonce: String,
    stdout_end: Option<CellEnd>,
    stderr_ended: bool,
}

impl DriverOutput {
    pub(crate) fn new(stdout: Pin<Box<dyn AsyncRead + Send>>, stderr: Pin<Box<dyn AsyncRead + Send>>) -> Self {
        Self { stdout, stderr, stdout_pending: Vec::new(), stderr_pending: Vec::new(), cell: None }
    }

    /// Forwards the output of the cell `nonce` to `sink` as it comes, each stream's bytes in order and without the
    /// markers, until both its end markers arrived. Both streams are read at once, neither waits on the other.
    /// Cancel-safe: called again with the same nonce, it goes on where it stopped.
    pub(crate) async fn read_cell(
        &mut self,
        nonce: &str,
        sink: &mut (dyn FnMut(Stream, &[u8]) + Send),
    ) -> Result<CellEnd, DriverGone> {
        let mut prefix = MARKER.to_vec();
        prefix.extend_from_slice(nonce.as_bytes());
        let mut stdout_buf = vec![0u8; READ_SIZE];
        let mut stderr_buf = vec![0u8; READ_SIZE];
        let Self { stdout, stderr, stdout_pending, stderr_pending, cell } = self;
        if cell.as_ref().is_some_and(|cell| cell.nonce != nonce) {
            *cell = None;
        }
        let progress =
            cell.get_or_insert_with(|| CellProgress { nonce: nonce.to_owned(), stdout_end: None, stderr_ended: false });
        loop {
            if progress.stdout_end.is_none() {
                // A stdout marker always carries its end (scan parses it).
                progress.stdout_end = forward(stdout_pending, &prefix, Stream::Stdout, sink).flatten();
            }
            if !progress.stderr_ended {
                progress.stderr_ended = forward(stderr_pending, &prefix, Stream::Stderr, sink).is_some();
            }
            if let (Some(end), true) = (progress.stdout_end, progress.stderr_ended) {
                *cell = None;
                return Ok(end);
            }
            // Both reads are cancel-safe: the one select! drops has read nothing.
            let (stream, read) = tokio::select! {
                read = stdout.read(&mut stdout_buf), if progress.stdout_end.is_none() => (Stream::Stdout, read),
                read = stderr.read(&mut stderr_buf), if !progress.stderr_ended => (Stream::Stderr, read),
            };
            match (stream, read) {
                (stream, Ok(0)) => return Err(DriverGone::Closed(stream)),
                (stream, Err(error)) => return Err(DriverGone::Read(stream, error)),
                (Stream::Stdout, Ok(n)) => stdout_pending.extend_from_slice(&stdout_buf[..n]),
                (Stream::Stderr, Ok(n)) => stderr_pending.extend_from_slice(&stderr_buf[..n]),
            }
        }
    }
}

/// Forwards what of `pending` cannot be part of the end marker `prefix` starts, and drops it from `pending`. When
/// the whole marker is there, it forwards what is before it, drops both, keeps what follows, and returns the end
/// (`Some(None)` on stderr, whose marker carries none).
fn forward(
    pending: &mut Vec<u8>,
    prefix: &[u8],
    stream: Stream,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Option<Option<CellEnd>> {
    let scan = scan(pending, prefix, stream);
    let forwardable = match scan {
        Scan::Marker { start, .. } | Scan::Hold { start } => start,
    };
    if forwardable > 0 {
        sink(stream, &pending[..forwardable]);
    }
    match scan {
        Scan::Marker { end, after, .. } => {
            pending.drain(..after);
            Some(end)
        }
        Scan::Hold { start } => {
            pending.drain(..start);
            None
        }
    }
}

/// Where the end marker is in a stream's pending bytes.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    /// The whole marker at `start..after`, with the end it carries (stdout's).
    Marker { start: usize, after: usize, end: Option<CellEnd> },
    /// No marker; bytes from `start` on may begin one (all of them output when `start` is the length).
    Hold { start: usize },
}

fn scan(bytes: &[u8], prefix: &[u8], stream: Stream) -> Scan {
    let mut from = 0;
    while let Some(offset) = bytes[from..].iter().position(|&b| b == 0) {
        let start = from + offset;
        from = start + 1;
        let rest = &bytes[start..];
        let common = rest.len().min(prefix.len());
        if rest[..common] != prefix[..common] {
            continue;
        }
        if rest.len() < prefix.len() {
            return Scan::Hold { start };
        }
        let tail = &rest[prefix.len()..];
        match (stream, tail.first()) {
            (_, None) => return Scan::Hold { start },
            (Stream::Stderr, Some(b'\n')) => return Scan::Marker { start, after: start + prefix.len() + 1, end: None },
            (Stream::Stdout, Some(b':')) => {
                let json = &tail[1..];
                match json.iter().take(MAX_END_JSON + 1).position(|&b| b == b'\n') {
                    Some(newline) => {
                        if let Ok(end) = serde_json::from_slice::<CellEnd>(&json[..newline]) {
                            let after = start + prefix.len() + 1 + newline + 1;
                            return Scan::Marker { start, after, end: Some(end) };
                        }
                    }
                    None if json.len() <= MAX_END_JSON => return Scan::Hold { start },
                    None => {}
                }
            }
            _ => {}
        }
    }
    Scan::Hold { start: bytes.len() }
}

#[cfg(test)]
mod tests;
