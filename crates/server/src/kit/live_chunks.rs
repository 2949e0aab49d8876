//! The queue between a run's output sink, which the backend calls as it reads the program's output and which cannot
//! wait, and the task forwarding that output to a live listener (MCP notifications, an NDJSON stream), which waits
//! for a client that may read slowly or not at all. An unbounded channel of chunks grew with every write the program
//! made: a program writing a byte at a time, alternating stdout and stderr, queued a chunk (some 50 bytes of memory)
//! per byte. Here a chunk joins the queued one before it when both are of the same stream, so the queue holds the
//! output's bytes (which the capture bounds: at most `SANDLOT_MAX_OUTPUT_BYTES` a stream reach a sink) in at most
//! [`MAX_QUEUED_CHUNKS`] chunks. Past that many (the streams alternating faster than the listener reads), a chunk
//! joins the last queued chunk of its stream: nothing is dropped, and the order between the two streams is kept
//! only that coarsely while the listener is that far behind.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use sandlot_core::{OutputChunk, OutputSink};
use tokio::sync::Notify;

/// Most chunks the queue holds; see the module's documentation.
pub const MAX_QUEUED_CHUNKS: usize = 1024;

#[derive(Default)]
struct Queue {
    chunks: VecDeque<OutputChunk>,
    /// The sender is gone: once the queue is empty, nothing more comes.
    ended: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the receiver when a chunk is queued or the sender is gone.
    ready: Notify,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The sink side: give it to the run; drop it when the run is over.
pub struct LiveSender {
    shared: Arc<Shared>,
}

/// The forwarding side.
pub struct LiveReceiver {
    shared: Arc<Shared>,
}

/// A queue of live output: the sink for the run, and the receiver for the task that forwards it.
pub fn live_chunks() -> (LiveSender, LiveReceiver) {
    let shared = Arc::new(Shared::default());
    (LiveSender { shared: shared.clone() }, LiveReceiver { shared })
}

impl OutputSink for LiveSender {
    fn output(&self, chunk: OutputChunk) {
        let mut queue = self.shared.queue();
        let full = queue.chunks.len() >= MAX_QUEUED_CHUNKS;
        let joined = match queue.chunks.back_mut() {
            Some(last) if last.stream == chunk.stream => Some(last),
            _ if full => queue.chunks.iter_mut().rev().find(|queued| queued.stream == chunk.stream),
            _ => None,
        };
        match joined {
            Some(queued) => queued.data.extend_from_slice(&chunk.data),
            None => queue.chunks.push_back(chunk),
        }
        drop(queue);
        self.shared.ready.notify_one();
    }
}

impl Drop for LiveSender {
    fn drop(&mut self) {
        self.shared.queue().ended = true;
        self.shared.ready.notify_one();
    }
}

impl LiveReceiver {
    /// The next chunk (all the output of one stream queued in a row, joined), or None once the sender is gone and
    /// everything was taken. Cancel-safe: a chunk is taken only when it is returned.
    pub async fn recv(&mut self) -> Option<OutputChunk> {
        loop {
            {
                let mut queue = self.shared.queue();
                if let Some(chunk) = queue.chunks.pop_front() {
                    return Some(chunk);
                }
                if queue.ended {
                    return None;
                }
            }
            // A notification sent between the check above and this wait is kept as a permit, never lost.
            self.shared.ready.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandlot_core::Stream;

    fn chunk(stream: Stream, data: &[u8]) -> OutputChunk {
        OutputChunk { stream, data: data.to_vec() }
    }

    #[tokio::test]
    async fn chunks_of_one_stream_in_a_row_are_joined_and_the_order_of_streams_kept() {
        let (sender, mut receiver) = live_chunks();
        for piece in [&b"a"[..], b"b", b"c"] {
            sender.output(chunk(Stream::Stdout, piece));
        }
        sender.output(chunk(Stream::Stderr, b"oops"));
        sender.output(chunk(Stream::Stdout, b"d"));
        drop(sender);
        let mut received = Vec::new();
        while let Some(chunk) = receiver.recv().await {
            received.push(chunk);
        }
        let expected = [chunk(Stream::Stdout, b"abc"), chunk(Stream::Stderr, b"oops"), chunk(Stream::Stdout, b"d")];
        assert_eq!(received, expected);
    }

    /// A program writing a byte at a time to alternating streams, to a listener that does not read: the queue holds
    /// at most MAX_QUEUED_CHUNKS chunks (an unbounded channel held one per byte), and every byte of each stream.
    #[tokio::test]
    async fn alternating_single_bytes_to_a_stuck_listener_queue_a_bounded_number_of_chunks() {
        let (sender, mut receiver) = live_chunks();
        for i in 0..200_000usize {
            let stream = if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr };
            sender.output(chunk(stream, &[b'0' + (i % 10) as u8]));
        }
        assert!(sender.shared.queue().chunks.len() <= MAX_QUEUED_CHUNKS + 1, "{}", sender.shared.queue().chunks.len());
        drop(sender);
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(chunk) = receiver.recv().await {
            match chunk.stream {
                Stream::Stdout => stdout.extend(chunk.data),
                Stream::Stderr => stderr.extend(chunk.data),
            }
        }
        let digits = |first: usize| (0..100_000).map(|n| b'0' + ((first + 2 * n) % 10) as u8).collect::<Vec<_>>();
        assert_eq!((stdout, stderr), (digits(0), digits(1)));
    }
}
