//! Live output over MCP: while code runs, every output chunk is sent to the caller
//! - as `notifications/progress` when the `tools/call` carried a progress token (progress = output bytes so far,
//!   message = the chunk), and
//! - as `notifications/message` when the client set a logging level (`logging/setLevel`) that lets them through:
//!   stdout at level `info`, stderr at `warning`, with `data: {stream, text}` and logger `sandlot`.
//!
//! One task sends them in order, and all of them go out before the tool's result.
#![allow(deprecated)] // MCP logging is deprecated by SEP-2577, but clients of earlier protocol versions use it

use rmcp::RoleServer;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use sandlot_core::{OutputChunk, OutputSink, Stream};
use tokio::sync::mpsc;

/// Longest text in one notification; a longer chunk is cut (the whole output is in the result).
const MAX_MESSAGE_BYTES: usize = 4096;

/// Where live output goes for one call.
pub struct Listeners {
    /// The call's progress token, if it sent one.
    pub progress: Option<ProgressToken>,
    /// The session's logging level, if the client set one.
    pub log_level: Option<LoggingLevel>,
}

/// A sink that hands chunks to the task sending the notifications.
pub struct LiveOutputSink {
    chunks: mpsc::UnboundedSender<OutputChunk>,
}

impl OutputSink for LiveOutputSink {
    fn output(&self, chunk: OutputChunk) {
        let _ = self.chunks.send(chunk);
    }
}

/// Starts forwarding to `peer`, or returns None when nobody listens. Drop the sink, then await the handle, to flush
/// before the result.
pub fn forward(peer: Peer<RoleServer>, listeners: Listeners) -> Option<(LiveOutputSink, tokio::task::JoinHandle<()>)> {
    if listeners.progress.is_none() && listeners.log_level.is_none() {
        return None;
    }
    let (chunks, mut received) = mpsc::unbounded_channel::<OutputChunk>();
    let task = tokio::spawn(async move {
        let mut bytes = 0u64;
        while let Some(chunk) = received.recv().await {
            bytes += chunk.data.len() as u64;
            let text = capped_text(&chunk.data);
            if let Some(token) = &listeners.progress {
                let mut notification = ProgressNotificationParam::new(token.clone(), bytes as f64);
                notification.message = Some(text.clone());
                if peer.notify_progress(notification).await.is_err() {
                    return; // the client is gone; the run's own end is handled elsewhere
                }
            }
            let level = match chunk.stream {
                Stream::Stdout => LoggingLevel::Info,
                Stream::Stderr => LoggingLevel::Warning,
            };
            if listeners.log_level.is_some_and(|threshold| severity(level) >= severity(threshold)) {
                let data = serde_json::json!({ "stream": chunk.stream, "text": text });
                let message = LoggingMessageNotificationParam::new(level, data).with_logger("sandlot");
                if peer.notify_logging_message(message).await.is_err() {
                    return;
                }
            }
        }
    });
    Some((LiveOutputSink { chunks }, task))
}

/// The chunk as text (invalid UTF-8 replaced), cut at [`MAX_MESSAGE_BYTES`] on a character boundary.
fn capped_text(data: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(data).into_owned();
    if text.len() > MAX_MESSAGE_BYTES {
        let cut = (0..=MAX_MESSAGE_BYTES).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.truncate(cut);
    }
    text
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
