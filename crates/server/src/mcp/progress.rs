//! Live output as MCP progress: when a `tools/call` carries a progress token, every output chunk of the run is sent
//! to the caller as `notifications/progress` while the code runs (progress = output bytes so far, message = the
//! chunk), and all of them are delivered before the tool's result.

use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use sandlot_core::{OutputChunk, OutputSink};
use tokio::sync::mpsc;

/// Longest progress message; a longer chunk is cut (the whole output is in the result).
const MAX_MESSAGE_BYTES: usize = 4096;

/// A sink that forwards chunks to a task sending them as progress notifications.
pub struct ProgressSink {
    chunks: mpsc::UnboundedSender<OutputChunk>,
}

impl OutputSink for ProgressSink {
    fn output(&self, chunk: OutputChunk) {
        let _ = self.chunks.send(chunk);
    }
}

/// Starts forwarding to `peer` under `token`; drop the sink, then await the handle, to flush before the result.
pub fn forward(peer: Peer<RoleServer>, token: ProgressToken) -> (ProgressSink, tokio::task::JoinHandle<()>) {
    let (chunks, mut received) = mpsc::unbounded_channel::<OutputChunk>();
    let task = tokio::spawn(async move {
        let mut bytes = 0u64;
        while let Some(chunk) = received.recv().await {
            bytes += chunk.data.len() as u64;
            let mut text = String::from_utf8_lossy(&chunk.data).into_owned();
            if text.len() > MAX_MESSAGE_BYTES {
                let cut = (0..=MAX_MESSAGE_BYTES).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
                text.truncate(cut);
            }
            let mut notification = ProgressNotificationParam::new(token.clone(), bytes as f64);
            notification.message = Some(text);
            if peer.notify_progress(notification).await.is_err() {
                return; // the client is gone; the run's own end is handled elsewhere
            }
        }
    });
    (ProgressSink { chunks }, task)
}
