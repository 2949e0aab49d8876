//! Run events between the nodes of one PostgreSQL history, so that `GET /mcp/events` and run subscriptions on any
//! node hear the runs of every node. Each node publishes its runs' events with `NOTIFY` on the channel
//! [`CHANNEL`] (in batches, from a thread and a connection of their own: a run only queues its event) and listens
//! on it (`LISTEN`, on another connection), handing the other nodes' events to its feed.
//!
//! Best effort, as the feed itself is: a node whose queue is full (the database is slow or unreachable) drops events
//! rather than slow its runs down, and a listener misses what was sent while it was connecting again. Each event
//! travels with its conversation's owner, which is what decides who may hear it on the other side (a conversation
//! id names different conversations on nodes that do not share a root). A notification carries less than 8000
//! bytes: a larger output chunk is relayed as several `Output` events with the same `seq`, in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;

use super::link::{self, Link};
use crate::{Error, Result, RunEvent};

/// The `LISTEN`/`NOTIFY` channel.
pub const CHANNEL: &str = "sandlot_run_events";
/// Events queued for publishing at most; past it, new ones are dropped.
const QUEUE: usize = 4096;
/// Events sent in one statement at most.
const BATCH: usize = 256;
/// A notification's payload is under this many bytes (PostgreSQL refuses 8000 and more).
const MAX_PAYLOAD: usize = 7900;
/// How often the listener looks up from the connection (to notice that its relay was dropped).
const POLL: Duration = Duration::from_millis(500);
/// The longest wait between attempts to connect the listener again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A listening connection is probed after this long without traffic, so that a lost one is noticed.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);

/// An event of another node, with its conversation's owner there.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Relayed {
    pub owner: Option<String>,
    pub event: RunEvent,
}

/// What receives the other nodes' events.
pub type Deliver = Box<dyn Fn(Relayed) + Send>;

/// What goes over the channel.
#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    /// The relay that sent it: a node hears its own notifications too, and skips them.
    origin: String,
    /// Which piece of an output chunk, from 0. It also keeps the pieces' payloads apart: PostgreSQL delivers a
    /// payload sent twice in one transaction once.
    #[serde(default, skip_serializing_if = "is_zero")]
    piece: usize,
    #[serde(flatten)]
    relayed: Relayed,
}

/// This node's end of the relay; dropping it stops both threads.
pub struct Relay {
    origin: String,
    outbox: mpsc::SyncSender<String>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// Starts publishing and listening on the database `config` names (`location` for the log).
    pub(super) fn start(config: postgres::Config, location: String, node: String, deliver: Deliver) -> Result<Self> {
        let origin = format!("{node}/{}", uuid::Uuid::new_v4().simple());
        let (outbox, queue) = mpsc::sync_channel::<String>(QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let mut listening = link::with_defaults(config.clone());
        listening.keepalives(true).keepalives_idle(KEEPALIVE_IDLE);
        let listener = Listener {
            config: listening,
            tls: link::tls()?,
            location: location.clone(),
            origin: origin.clone(),
            deliver,
            stop: stop.clone(),
        };
        let publisher = Link::new(config, location)?;
        let thread = |name: &str| std::thread::Builder::new().name(name.into());
        let cannot = |e: std::io::Error| Error::History { message: format!("cannot start the event relay: {e}") };
        thread("sandlot-relay-out").spawn(move || publish(publisher, queue)).map_err(cannot)?;
        thread("sandlot-relay-in").spawn(move || listener.run()).map_err(cannot)?;
        Ok(Self { origin, outbox, stop })
    }

    /// Queues `event` for the other nodes (dropped when the queue is full).
    pub fn publish(&self, owner: Option<&str>, event: &RunEvent) {
        for payload in payloads(&self.origin, owner, event) {
            if self.outbox.try_send(payload).is_err() {
                metrics::counter!("sandlot_event_relay_dropped_total").increment(1);
                return;
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The notifications that carry `event`: one, or for a large output chunk, one per piece of it.
fn payloads(origin: &str, owner: Option<&str>, event: &RunEvent) -> Vec<String> {
    let envelope = |event: RunEvent, piece: usize| {
        let relayed = Relayed { owner: owner.map(str::to_owned), event };
        serde_json::to_string(&Envelope { origin: origin.to_owned(), piece, relayed }).unwrap_or_default()
    };
    let whole = envelope(event.clone(), 0);
    if whole.len() < MAX_PAYLOAD {
        return vec![whole];
    }
    let RunEvent::Output { run_id, conversation_id, stream, seq, data } = event else {
        tracing::warn!(run_id = event.run_id(), bytes = whole.len(), "a run event too large to relay");
        return Vec::new();
    };
    // Escaping can make a byte of output six in JSON: pieces small enough for the worst case (and room for the
    // piece's number).
    let room = MAX_PAYLOAD.saturating_sub(whole.len() - serde_json::to_string(data).unwrap_or_default().len() + 32);
    let piece = (room / 6).max(64);
    let mut pieces = Vec::new();
    let mut rest = data.as_str();
    while !rest.is_empty() {
        let mut end = piece.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (head, tail) = rest.split_at(end);
        let data = head.to_owned();
        let event = RunEvent::Output {
            run_id: run_id.clone(),
            conversation_id: conversation_id.clone(),
            stream: *stream,
            seq: *seq,
            data,
        };
        pieces.push(envelope(event, pieces.len()));
        rest = tail;
    }
    pieces
}

fn is_zero(piece: &usize) -> bool {
    *piece == 0
}

/// Sends queued notifications, many per statement, until the relay is dropped.
fn publish(mut link: Link, queue: mpsc::Receiver<String>) {
    let sql = format!("SELECT pg_notify('{CHANNEL}', payload) FROM unnest($1::text[]) AS payload");
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match queue.try_recv() {
                Ok(payload) => batch.push(payload),
                Err(_) => break,
            }
        }
        if let Err(error) = link.run("relay events through", &mut |session| session.execute(&sql, &[&batch])) {
            metrics::counter!("sandlot_event_relay_dropped_total").increment(batch.len() as u64);
            tracing::debug!(%error, events = batch.len(), "run events not relayed");
        }
    }
}

/// The listening end: a connection that only listens, made again whenever it is lost.
struct Listener {
    config: postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    location: String,
    origin: String,
    deliver: Deliver,
    stop: Arc<AtomicBool>,
}

impl Listener {
    fn run(self) {
        let mut backoff = Duration::from_millis(200);
        while !self.stop.load(Ordering::Relaxed) {
            match self.listen() {
                Ok(()) => return,
                Err(error) => {
                    tracing::debug!(database = %self.location, %error, "the event relay's listener reconnects");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Listens until the relay is dropped (`Ok`) or the connection fails.
    fn listen(&self) -> std::result::Result<(), postgres::Error> {
        let mut client = self.config.connect(self.tls.clone())?;
        client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let mut notifications = client.notifications();
            let mut waiting = notifications.timeout_iter(POLL);
            let Some(notification) = waiting.next()? else { continue };
            match serde_json::from_str::<Envelope>(notification.payload()) {
                Ok(envelope) if envelope.origin != self.origin => (self.deliver)(envelope.relayed),
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, "an event on the relay's channel that is not one"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Language, Stream};

    fn output(data: &str) -> RunEvent {
        RunEvent::Output {
            run_id: "r".into(),
            conversation_id: "c".into(),
            stream: Stream::Stdout,
            seq: 7,
            data: data.into(),
        }
    }

    fn parse(payload: &str) -> Relayed {
        serde_json::from_str::<Envelope>(payload).unwrap().relayed
    }

    #[test]
    fn an_event_is_one_notification_with_its_owner() {
        let started = RunEvent::Started { run_id: "r".into(), conversation_id: "c".into(), language: Language::Python };
        let sent = payloads("node/1", Some("alice"), &started);
        assert_eq!(sent.len(), 1);
        assert_eq!(parse(&sent[0]), Relayed { owner: Some("alice".into()), event: started });
    }

    #[test]
    fn a_large_output_chunk_is_pieces_under_the_limit_that_make_it_whole() {
        // Control bytes are six bytes each in JSON, and a multi-byte character must not be cut.
        let data = "\u{1}é".repeat(20_000);
        let sent = payloads("node/1", None, &output(&data));
        assert!(sent.len() > 1);
        // PostgreSQL delivers a payload sent twice in one transaction once: no two pieces may be alike.
        let distinct: std::collections::HashSet<&String> = sent.iter().collect();
        assert_eq!(distinct.len(), sent.len(), "pieces alike");
        let mut joined = String::new();
        for payload in &sent {
            assert!(payload.len() < 8000, "{} bytes", payload.len());
            let RunEvent::Output { seq, data, .. } = parse(payload).event else { panic!("not output") };
            assert_eq!(seq, 7);
            joined.push_str(&data);
        }
        assert_eq!(joined, data);
    }
}
