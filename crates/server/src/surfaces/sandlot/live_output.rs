//! Live output over MCP: while code runs, its output is sent to the caller
//! - as `notifications/progress` when the `tools/call` carried a progress token (progress = output bytes so far,
//!   message = the text), and
//! - as `notifications/message` when a logging level lets them through: stdout at level `info`, stderr at
//!   `warning`, with `data: {stream, text}` and logger `sandlot`. The level is the request's own
//!   (`_meta["io.modelcontextprotocol/logLevel"]`, SEP-2575), else, before protocol 2026-07-28, the one the session
//!   set with `logging/setLevel` ([`log_level_of_request`]).
//!
//! A notification carries whole lines, not the program's writes as they came (`"tick"`, `" "`, `"1\n"`): output is
//! gathered per stream until a line ends; a line still unfinished [`PARTIAL_LINE_WAIT`] after its first byte goes
//! out as it is (a prompt, a progress bar), and at most [`MAX_MESSAGE_BYTES`] go in one notification (a longer text
//! is split, at a line end when there is one). Nothing is dropped, and the order of the two streams is kept.
//!
//! One task sends them in order, and all of them go out before the tool's result. The output waits for it in a
//! [`live_chunks`](crate::kit::live_chunks) queue, bounded however slowly the client reads.
#![allow(deprecated)] // MCP logging is deprecated by SEP-2577, but clients of earlier protocol versions use it

use rmcp::RoleServer;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    RequestMetaObject,
};
use rmcp::service::Peer;
use sandlot_core::{OutputChunk, OutputSink, Stream};
use std::time::Duration;

use crate::kit::live_chunks::{LiveSender, live_chunks};

/// Longest text in one notification; a longer one is split.
const MAX_MESSAGE_BYTES: usize = 4096;

/// How long the start of a line waits for its end before it is sent alone.
const PARTIAL_LINE_WAIT: Duration = Duration::from_millis(50);

/// Where live output goes for one call.
pub struct Listeners {
    /// The call's progress token, if it sent one.
    pub progress: Option<ProgressToken>,
    /// The level of log messages this call gets, if any ([`log_level_of_request`]).
    pub log_level: Option<LoggingLevel>,
}

/// The logging level of one request: the one its `_meta` asks for (`io.modelcontextprotocol/logLevel`), for this
/// request only, whatever the session set; without it, the session's (`logging/setLevel`), but only under a protocol
/// before 2026-07-28 (`version`: the request's, else the session's), which has no session level and whose server
/// MUST NOT send `notifications/message` for a request that did not ask.
pub fn log_level_of_request(
    meta: &RequestMetaObject,
    version: Option<&ProtocolVersion>,
    session: Option<LoggingLevel>,
) -> Option<LoggingLevel> {
    let per_request_only = crate::kit::rpc_errors::at_least(version, &ProtocolVersion::V_2026_07_28);
    meta.log_level().or(if per_request_only { None } else { session })
}

/// A sink that hands chunks to the task sending the notifications.
pub struct LiveOutputSink {
    chunks: LiveSender,
}

impl OutputSink for LiveOutputSink {
    fn output(&self, chunk: OutputChunk) {
        self.chunks.output(chunk);
    }
}

/// Starts forwarding to `peer`, or returns None when nobody listens. Drop the sink, then await the handle, to flush
/// before the result.
pub fn forward(peer: Peer<RoleServer>, listeners: Listeners) -> Option<(LiveOutputSink, tokio::task::JoinHandle<()>)> {
    if listeners.progress.is_none() && listeners.log_level.is_none() {
        return None;
    }
    let (chunks, mut received) = live_chunks();
    let task = tokio::spawn(async move {
        let mut sender = Sender { peer, listeners, bytes: 0 };
        let mut lines = Lines::default();
        loop {
            let chunk = match lines.deadline {
                Some(deadline) => tokio::select! {
                    chunk = received.recv() => chunk,
                    () = tokio::time::sleep_until(deadline) => {
                        // A line unfinished for too long goes out as it is.
                        if sender.send_all(lines.take_all()).await.is_err() {
                            return;
                        }
                        continue;
                    }
                },
                None => received.recv().await,
            };
            let Some(chunk) = chunk else {
                let _ = sender.send_all(lines.take_all()).await; // the run ended: the rest goes out
                return;
            };
            if sender.send_all(lines.push(chunk)).await.is_err() {
                return; // the client is gone; the run's own end is handled elsewhere
            }
        }
    });
    Some((LiveOutputSink { chunks }, task))
}

/// Output gathered into whole lines, of one stream at a time.
#[derive(Default)]
struct Lines {
    stream: Option<Stream>,
    pending: Vec<u8>,
    /// When the pending (unfinished) line must go out anyway.
    deadline: Option<tokio::time::Instant>,
}

impl Lines {
    /// Adds `chunk`; returns what is ready to send: what was pending of the other stream, then every finished line.
    fn push(&mut self, chunk: OutputChunk) -> Vec<(Stream, Vec<u8>)> {
        let mut ready = Vec::new();
        if self.stream.is_some_and(|stream| stream != chunk.stream) {
            ready = self.take_all();
        }
        self.stream = Some(chunk.stream);
        self.pending.extend_from_slice(&chunk.data);
        if let Some(last) = self.pending.iter().rposition(|&b| b == b'\n') {
            let rest = self.pending.split_off(last + 1);
            ready.push((chunk.stream, std::mem::replace(&mut self.pending, rest)));
            self.deadline = None;
        }
        if self.pending.len() >= MAX_MESSAGE_BYTES {
            ready.push((chunk.stream, std::mem::take(&mut self.pending)));
            self.deadline = None;
        }
        if !self.pending.is_empty() && self.deadline.is_none() {
            self.deadline = Some(tokio::time::Instant::now() + PARTIAL_LINE_WAIT);
        }
        ready
    }

    /// Everything pending, finished or not.
    fn take_all(&mut self) -> Vec<(Stream, Vec<u8>)> {
        self.deadline = None;
        match self.stream {
            Some(stream) if !self.pending.is_empty() => vec![(stream, std::mem::take(&mut self.pending))],
            _ => Vec::new(),
        }
    }
}

/// Sends texts as notifications to the listeners of one call.
struct Sender {
    peer: Peer<RoleServer>,
    listeners: Listeners,
    /// Output bytes sent so far (the progress value).
    bytes: u64,
}

impl Sender {
    async fn send_all(&mut self, texts: Vec<(Stream, Vec<u8>)>) -> Result<(), rmcp::service::ServiceError> {
        for (stream, data) in texts {
            for piece in pieces(&data, MAX_MESSAGE_BYTES) {
                self.send(stream, piece).await?;
            }
        }
        Ok(())
    }

    async fn send(&mut self, stream: Stream, data: &[u8]) -> Result<(), rmcp::service::ServiceError> {
        self.bytes += data.len() as u64;
        let text = String::from_utf8_lossy(data).into_owned();
        if let Some(token) = &self.listeners.progress {
            let mut notification = ProgressNotificationParam::new(token.clone(), self.bytes as f64);
            notification.message = Some(text.clone());
            self.peer.notify_progress(notification).await?;
        }
        let level = match stream {
            Stream::Stdout => LoggingLevel::Info,
            Stream::Stderr => LoggingLevel::Warning,
        };
        if self.listeners.log_level.is_some_and(|threshold| severity(level) >= severity(threshold)) {
            let data = serde_json::json!({ "stream": stream, "text": text });
            let message = LoggingMessageNotificationParam::new(level, data).with_logger("sandlot");
            self.peer.notify_logging_message(message).await?;
        }
        Ok(())
    }
}

/// `data` in pieces of at most `max` bytes, each ending at its last line end when it has one, else before a UTF-8
/// character that would not fit.
fn pieces(mut data: &[u8], max: usize) -> Vec<&[u8]> {
    let mut pieces = Vec::new();
    while data.len() > max {
        let window = &data[..max];
        let mut end = match window.iter().rposition(|&b| b == b'\n') {
            Some(last) => last + 1,
            // Back to a character's first byte (at most 3 continuation bytes), unless that leaves nothing.
            None => (max.saturating_sub(3)..=max).rev().find(|&i| data[i] & 0xC0 != 0x80).unwrap_or(max),
        };
        if end == 0 {
            end = max;
        }
        pieces.push(&data[..end]);
        data = &data[end..];
    }
    if !data.is_empty() {
        pieces.push(data);
    }
    pieces
}

/// RFC 5424 order, lowest first.
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(stream: Stream, data: &str) -> OutputChunk {
        OutputChunk { stream, data: data.as_bytes().to_vec() }
    }

    fn texts(ready: Vec<(Stream, Vec<u8>)>) -> Vec<(Stream, String)> {
        ready.into_iter().map(|(s, d)| (s, String::from_utf8(d).unwrap())).collect()
    }

    #[tokio::test]
    async fn tiny_writes_become_whole_lines_in_stream_order() {
        let mut lines = Lines::default();
        assert_eq!(texts(lines.push(chunk(Stream::Stdout, "tick"))), []);
        assert!(lines.deadline.is_some(), "an unfinished line waits at most PARTIAL_LINE_WAIT");
        assert_eq!(texts(lines.push(chunk(Stream::Stdout, " "))), []);
        assert_eq!(texts(lines.push(chunk(Stream::Stdout, "1\ntick 2"))), [(Stream::Stdout, "tick 1\n".into())]);
        // The other stream: the unfinished line goes first, so the order of the two streams is kept.
        assert_eq!(
            texts(lines.push(chunk(Stream::Stderr, "oops\n"))),
            [(Stream::Stdout, "tick 2".into()), (Stream::Stderr, "oops\n".into())]
        );
        assert_eq!(lines.deadline, None);
        assert_eq!(texts(lines.push(chunk(Stream::Stderr, "a\nb\nc"))), [(Stream::Stderr, "a\nb\n".into())]);
        assert_eq!(texts(lines.take_all()), [(Stream::Stderr, "c".into())]);
        assert_eq!(texts(lines.take_all()), []);
    }

    #[test]
    fn a_request_s_own_level_wins_and_2026_requests_get_logs_only_when_they_ask() {
        let asking: RequestMetaObject =
            serde_json::from_value(serde_json::json!({ "io.modelcontextprotocol/logLevel": "warning" })).unwrap();
        let silent = RequestMetaObject::default();
        let (old, new) = (ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28);
        let session = Some(LoggingLevel::Debug);
        let cases = [
            (log_level_of_request(&asking, Some(&new), None), Some(LoggingLevel::Warning)),
            (log_level_of_request(&asking, Some(&old), session), Some(LoggingLevel::Warning)),
            (log_level_of_request(&asking, None, None), Some(LoggingLevel::Warning)),
            (log_level_of_request(&silent, Some(&new), session), None),
            (log_level_of_request(&silent, Some(&new), None), None),
            (log_level_of_request(&silent, Some(&old), session), session),
            (log_level_of_request(&silent, None, session), session),
            (log_level_of_request(&silent, Some(&old), None), None),
        ];
        assert_eq!(cases.map(|(got, _)| got), cases.map(|(_, want)| want));
    }

    #[test]
    fn long_texts_are_split_at_line_ends_or_before_a_character() {
        assert_eq!(pieces(b"ab\ncd\nef", 4), [&b"ab\n"[..], b"cd\n", b"ef"]);
        assert_eq!(pieces(b"abcdefghij", 4), [&b"abcd"[..], b"efgh", b"ij"]);
        let crabs = "🦀🦀🦀".as_bytes(); // 4 bytes each
        assert_eq!(pieces(crabs, 6), [&crabs[..4], &crabs[4..8], &crabs[8..]]);
        assert_eq!(pieces(b"", 4), Vec::<&[u8]>::new());
    }
}
