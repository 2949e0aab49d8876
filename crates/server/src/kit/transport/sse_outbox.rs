//! What a legacy SSE session has answered and its client has not read yet: the queue from the session's rmcp service
//! to its event stream, bounded in bytes ([`MAX_QUEUED_BYTES`], each message counted as its JSON plus
//! [`MESSAGE_OVERHEAD`], so many small ones count too).
//!
//! A POST is answered 202 at once and its answer goes on the stream, so a client that never reads its stream would
//! have every answer kept until the stream closed (rmcp holds each unsent one in a task of its own: +116 MB from 200
//! reads of a 512 KiB file). The sink never waits: an answer that does not fit means the stream is not draining, and
//! the outbox closes instead. It drops what it holds, ends the stream, fails the send (rmcp then ends the session)
//! and cancels [`Outbox::not_draining`], on which the transport forgets the session and answers its later POSTs with
//! a clear error.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use rmcp::model::ServerJsonRpcMessage;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Most bytes of answers one legacy SSE stream may hold unread before it is closed: several of the largest answers
/// (a result is under 1 MiB, a resource read at most `SANDLOT_RESOURCE_READ_BYTES` as base64).
pub const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// What each queued message counts beyond its JSON (its allocation and queue slot), so that many tiny messages are
/// bounded too.
pub const MESSAGE_OVERHEAD: usize = 64;

/// The answers waiting for the stream, and whether the outbox still takes any.
#[derive(Default)]
struct Queue {
    messages: VecDeque<String>,
    bytes: usize,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the stream when a message is queued or the outbox closes.
    ready: Notify,
    not_draining: CancellationToken,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One session's outbox: [`Outbox::sink`] for its rmcp service, [`Outbox::next`] for its event stream.
#[derive(Clone, Default)]
pub struct Outbox {
    shared: Arc<Shared>,
}

/// The sink's error: the stream did not drain, so the session is over.
#[derive(Debug, thiserror::Error)]
#[error("the event stream did not drain: more than {MAX_QUEUED_BYTES} bytes of answers were waiting")]
pub struct NotDraining;

impl Outbox {
    /// Cancelled when the outbox closed because its stream did not drain.
    pub fn not_draining(&self) -> CancellationToken {
        self.shared.not_draining.clone()
    }

    /// The sink the session's rmcp service sends its messages to.
    pub fn sink(&self) -> OutboxSink {
        OutboxSink { outbox: self.clone() }
    }

    /// The next message's JSON, once there is one; None once the outbox has closed.
    pub async fn next(&self) -> Option<String> {
        loop {
            {
                let mut queue = self.shared.queue();
                if let Some(message) = queue.messages.pop_front() {
                    queue.bytes -= message.len() + MESSAGE_OVERHEAD;
                    return Some(message);
                }
                if queue.closed {
                    return None;
                }
            }
            // A notification sent between the check above and this wait is kept as a permit, never lost.
            self.shared.ready.notified().await;
        }
    }

    /// Queues `message`, or closes the outbox when it does not fit.
    fn push(&self, message: &ServerJsonRpcMessage) -> Result<(), NotDraining> {
        let json = serde_json::to_string(message).unwrap_or_default();
        let mut queue = self.shared.queue();
        if queue.closed {
            return Err(NotDraining);
        }
        let cost = json.len() + MESSAGE_OVERHEAD;
        if queue.bytes + cost > MAX_QUEUED_BYTES {
            *queue = Queue { closed: true, ..Queue::default() }; // what it held is dropped now
            drop(queue);
            self.shared.not_draining.cancel();
            self.shared.ready.notify_one();
            return Err(NotDraining);
        }
        queue.bytes += cost;
        queue.messages.push_back(json);
        drop(queue);
        self.shared.ready.notify_one();
        Ok(())
    }
}

/// The rmcp side of an [`Outbox`]: never waits; a message that does not fit fails with [`NotDraining`].
pub struct OutboxSink {
    outbox: Outbox,
}

impl futures::Sink<ServerJsonRpcMessage> for OutboxSink {
    type Error = NotDraining;

    fn poll_ready(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), NotDraining>> {
        Poll::Ready(if self.outbox.shared.queue().closed { Err(NotDraining) } else { Ok(()) })
    }

    fn start_send(self: Pin<&mut Self>, message: ServerJsonRpcMessage) -> Result<(), NotDraining> {
        self.outbox.push(&message)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), NotDraining>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), NotDraining>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::SinkExt;
    use rmcp::model::{JsonRpcMessage, NumberOrString, ServerResult};

    fn answer(id: i64, text_bytes: usize) -> ServerJsonRpcMessage {
        let result = ServerResult::CustomResult(rmcp::model::CustomResult(serde_json::json!("x".repeat(text_bytes))));
        JsonRpcMessage::response(result, NumberOrString::Number(id))
    }

    #[tokio::test]
    async fn answers_wait_in_order_until_the_stream_falls_too_far_behind_then_it_closes() {
        let outbox = Outbox::default();
        let mut sink = outbox.sink();
        sink.send(answer(1, 10)).await.unwrap();
        sink.send(answer(2, 10)).await.unwrap();
        assert!(outbox.next().await.unwrap().contains("\"id\":1"));
        assert!(outbox.next().await.unwrap().contains("\"id\":2"));
        // Unread answers of 1 MiB each: the one that does not fit closes the outbox.
        let sent = (0..32).take_while(|id| futures::executor::block_on(sink.send(answer(*id, 1 << 20))).is_ok());
        assert_eq!(sent.count(), 15, "16 MiB hold 15 answers of 1 MiB and their JSON");
        assert!(outbox.not_draining().is_cancelled());
        assert_eq!(outbox.next().await, None, "what it held is dropped and the stream ends");
        assert!(sink.send(answer(99, 1)).await.is_err());
    }
}
