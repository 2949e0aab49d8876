//! Baponi's NDJSON event streams (a live `execute`, an execution's output replay): each event with the next `seq`,
//! live output followed from the engine's events, keepalives in silences.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use sandlot_core::{RunEvent, Stream};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

/// Silence after which a stream sends a `keepalive` event.
pub(super) const KEEPALIVE: Duration = Duration::from_secs(15);

/// An NDJSON response being written: each event gets the next `seq`; those at or below `after` are skipped.
pub(super) struct Ndjson {
    lines: mpsc::Sender<Result<Bytes, Infallible>>,
    seq: u64,
    after: u64,
}

impl Ndjson {
    /// The writer and the streaming response it feeds.
    pub(super) fn channel(after: u64) -> (Self, Response) {
        let (lines, receiver) = mpsc::channel(64);
        let mut response = Response::new(Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver)));
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
        (Self { lines, seq: 0, after }, response)
    }

    /// Sends `event` (an object) with the next `seq`; a client that went away is ignored.
    pub(super) async fn send(&mut self, mut event: Value) {
        self.seq += 1;
        if self.seq <= self.after {
            return;
        }
        if let Value::Object(fields) = &mut event {
            fields.insert("seq".into(), self.seq.into());
        }
        let mut line = event.to_string().into_bytes();
        line.push(b'\n');
        let _ = self.lines.send(Ok(Bytes::from(line))).await;
    }
}

/// Forwards the output of run `run_id` from the engine's events until it ends (true) or the events stop (false),
/// with keepalives meanwhile.
pub(super) async fn follow(
    out: &mut Ndjson,
    mut events: tokio::sync::broadcast::Receiver<RunEvent>,
    run_id: &str,
) -> bool {
    let mut keepalive = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(RunEvent::Finished { run_id: id, .. } | RunEvent::Failed { run_id: id, .. }) if id == run_id => return true,
                Ok(event) => {
                    if let Some(output) = output_event(&event, run_id) {
                        out.send(output).await;
                        keepalive.reset();
                    }
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return false,
            },
            _ = keepalive.tick() => out.send(json!({ "type": "keepalive" })).await,
        }
    }
}

/// The text of a live output event, as the NDJSON `output` event carries it.
pub(super) fn output_event(event: &RunEvent, run: &str) -> Option<Value> {
    match event {
        RunEvent::Output { run_id, stream, data, .. } if run_id == run => {
            let stream = match stream {
                Stream::Stdout => "stdout",
                Stream::Stderr => "stderr",
            };
            Some(json!({ "type": "output", "stream": stream, "data": data }))
        }
        _ => None,
    }
}
