//! Run events between the nodes of one PostgreSQL history, so that `GET /mcp/events` and run subscriptions on any
//! node hear the runs of every node. Each node publishes its runs' events with `NOTIFY` on the channel
//! [`CHANNEL`] (in batches, from a thread and a connection of their own: a run only queues its event) and listens
//! on it (`LISTEN`, on another connection), handing the other nodes' events to its feed.
//!
//! Best effort, as the feed itself is: a node whose queue is full (the database is slow or unreachable) drops events
//! rather than slow its runs down, and a listener misses what was sent while it was connecting again. Each event
//! travels with its conversation's owner, which is what decides who may hear it on the other side (a conversation
//! id names different conversations on nodes that do not share a root). A notification carries less than 8000
//! bytes: a larger output chunk is relayed as several `Output` events with the same `seq`, in order. A batch whose
//! connection was lost as it was sent is sent again on a new one (as every query of the history is), so an event may
//! rarely be heard twice.
//!
//! Output is relayed only while some other node has listeners: a node with listeners says so on the channel (see
//! [`Hello`]), and the others publish their runs' output for [`HELLO_TTL`] after they last heard it. Starts and ends are always relayed (a run's two
//! events, small), so a stream opened on one node sees the other nodes' runs start and end at once, and their output
//! once its node's first message has reached them (milliseconds).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

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
/// The first wait before the listener connects again.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between attempts to connect the listener again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A listening connection is probed after this long without traffic, so that a lost one is noticed.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// How often a node with listeners says so again.
pub const HELLO_EVERY: Duration = Duration::from_secs(5);
/// How long a node's `listening` message makes the others relay output.
pub const HELLO_TTL: Duration = Duration::from_secs(12);

/// An event of another node, with its conversation's owner there.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Relayed {
    pub owner: Option<String>,
    pub event: RunEvent,
}

/// What receives the other nodes' events.
pub type Deliver = Box<dyn Fn(Relayed) + Send>;
/// Whether this node has listeners of other nodes' events now.
pub type Listening = Box<dyn Fn() -> bool + Send>;

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

/// What a node says of its listeners: when one comes and every [`HELLO_EVERY`] while any does (`listening`), and
/// whenever its listening connection is made (`joined`), which nodes with listeners answer at once, so that a node
/// that joins late need not wait for their next word.
#[derive(serde::Serialize, serde::Deserialize)]
struct Hello {
    origin: String,
    listening: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    joined: bool,
}

/// This node's end of the relay; dropping it stops both threads.
pub struct Relay {
    origin: String,
    /// Each event's notifications, queued together: an event goes whole or not at all.
    outbox: mpsc::SyncSender<Vec<String>>,
    /// Until when another node is known to have listeners.
    others_listen_until: Arc<Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// Starts publishing and listening on the database `config` names (`location` for the log).
    pub(super) fn start(
        mut config: postgres::Config,
        location: String,
        node: String,
        deliver: Deliver,
        listening: Listening,
    ) -> Result<Self> {
        // Told apart from the history's connection in `pg_stat_activity`, unless the URL names them all.
        if config.get_application_name().is_none() {
            config.application_name("sandlot-relay");
        }
        let origin = format!("{node}/{}", uuid::Uuid::new_v4().simple());
        let (outbox, queue) = mpsc::sync_channel::<Vec<String>>(QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let others_listen_until = Arc::new(Mutex::new(None));
        let mut listener_config = link::with_defaults(config.clone());
        listener_config.keepalives(true).keepalives_idle(KEEPALIVE_IDLE);
        let listener = Listener {
            config: listener_config,
            tls: link::tls()?,
            location: location.clone(),
            origin: origin.clone(),
            deliver,
            listening,
            outbox: outbox.clone(),
            others_listen_until: others_listen_until.clone(),
            stop: stop.clone(),
        };
        let publisher = Link::new(config, location)?;
        let thread = |name: &str| std::thread::Builder::new().name(name.into());
        let cannot = |e: std::io::Error| Error::History { message: format!("cannot start the event relay: {e}") };
        thread("sandlot-relay-out").spawn(move || publish(publisher, queue)).map_err(cannot)?;
        thread("sandlot-relay-in").spawn(move || listener.run()).map_err(cannot)?;
        Ok(Self { origin, outbox, others_listen_until, stop })
    }

    /// Queues `event` for the other nodes (dropped when the queue is full); output only while one of them listens.
    pub fn publish(&self, owner: Option<&str>, event: &RunEvent) {
        if matches!(event, RunEvent::Output { .. }) && !self.others_listen() {
            return;
        }
        let payloads = payloads(&self.origin, owner, event);
        if payloads.is_empty() || self.outbox.try_send(payloads).is_err() {
            metrics::counter!("sandlot_event_relay_dropped_total").increment(1);
        }
    }
}

impl Relay {
    /// Tells the other nodes that this one has listeners, now (a listener just came).
    pub fn say_listening(&self) {
        let _ = self.outbox.try_send(vec![hello(&self.origin)]);
    }

    /// Whether another node is known to have listeners.
    pub fn others_listen(&self) -> bool {
        lock(&self.others_listen_until).is_some_and(|until| Instant::now() < until)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The payload of a `listening` message of `origin`.
fn hello(origin: &str) -> String {
    serde_json::to_string(&Hello { origin: origin.to_owned(), listening: true, joined: false }).unwrap_or_default()
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The notifications that carry `event`: one, or for a large output chunk, one per piece of it; none (logged) for
/// an event that cannot fit (an owner's name of kilobytes).
fn payloads(origin: &str, owner: Option<&str>, event: &RunEvent) -> Vec<String> {
    let envelope = |event: RunEvent, piece: usize| {
        let relayed = Relayed { owner: owner.map(str::to_owned), event };
        serde_json::to_string(&Envelope { origin: origin.to_owned(), piece, relayed }).unwrap_or_default()
    };
    let whole = envelope(event.clone(), 0);
    if whole.len() < MAX_PAYLOAD {
        return vec![whole];
    }
    let too_large = || {
        tracing::warn!(run_id = event.run_id(), bytes = whole.len(), "a run event too large to relay");
        Vec::new()
    };
    let RunEvent::Output { run_id, conversation_id, stream, seq, data } = event else { return too_large() };
    let piece_of = |data: &str, piece: usize| {
        let event = RunEvent::Output {
            run_id: run_id.clone(),
            conversation_id: conversation_id.clone(),
            stream: *stream,
            seq: *seq,
            data: data.to_owned(),
        };
        envelope(event, piece)
    };
    // Room for a piece's data as JSON writes it, beside the rest of the envelope (with a piece number of 20 digits).
    let Some(room) = MAX_PAYLOAD.checked_sub(piece_of("", usize::MAX).len()).filter(|room| *room >= 64) else {
        return too_large();
    };
    let mut pieces = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (at, c) in data.char_indices() {
        let escaped = escaped_len(c);
        if used + escaped > room {
            pieces.push(piece_of(&data[start..at], pieces.len()));
            (start, used) = (at, 0);
        }
        used += escaped;
    }
    pieces.push(piece_of(&data[start..], pieces.len()));
    pieces
}

/// The bytes `c` takes in a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

fn is_zero(piece: &usize) -> bool {
    *piece == 0
}

/// Sends queued notifications, many per statement, until the relay is dropped.
fn publish(mut link: Link, queue: mpsc::Receiver<Vec<String>>) {
    let sql = format!("SELECT pg_notify('{CHANNEL}', payload) FROM unnest($1::text[]) AS payload");
    while let Ok(first) = queue.recv() {
        let mut batch = first;
        while batch.len() < BATCH {
            match queue.try_recv() {
                Ok(payloads) => batch.extend(payloads),
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
    listening: Listening,
    outbox: mpsc::SyncSender<Vec<String>>,
    others_listen_until: Arc<Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
}

impl Listener {
    fn run(self) {
        let mut backoff = FIRST_BACKOFF;
        let mut lost = false;
        while !self.stop.load(Ordering::Relaxed) {
            let mut connected = false;
            match self.listen(&mut connected) {
                Ok(()) => return,
                Err(error) => {
                    if connected {
                        backoff = FIRST_BACKOFF;
                    }
                    if !lost || connected {
                        tracing::warn!(database = %self.location, %error, "the event relay lost its listening \
                            connection: other nodes' run events are not heard until it is made again");
                    }
                    lost = true;
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Listens until the relay is dropped (`Ok`) or the connection fails; `connected` says whether it listened.
    fn listen(&self, connected: &mut bool) -> std::result::Result<(), postgres::Error> {
        let mut client = self.config.connect(self.tls.clone())?;
        client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
        *connected = true;
        tracing::debug!(database = %self.location, "the event relay listens");
        let listening = (self.listening)();
        let joined = Hello { origin: self.origin.clone(), listening, joined: true };
        let _ = self.outbox.try_send(vec![serde_json::to_string(&joined).unwrap_or_default()]);
        let mut said_hello = listening.then(Instant::now);
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            if (self.listening)() && said_hello.is_none_or(|at| at.elapsed() >= HELLO_EVERY) {
                let _ = self.outbox.try_send(vec![hello(&self.origin)]);
                said_hello = Some(Instant::now());
            }
            let mut notifications = client.notifications();
            let mut waiting = notifications.timeout_iter(POLL);
            let Some(notification) = waiting.next()? else { continue };
            self.heard(notification.payload());
        }
    }

    /// Hands on another node's event, or notes that another node listens.
    fn heard(&self, payload: &str) {
        match serde_json::from_str::<Envelope>(payload) {
            Ok(envelope) if envelope.origin != self.origin => (self.deliver)(envelope.relayed),
            Ok(_) => {}
            Err(_) => match serde_json::from_str::<Hello>(payload) {
                Ok(word) if word.origin != self.origin => {
                    if word.listening {
                        *lock(&self.others_listen_until) = Some(Instant::now() + HELLO_TTL);
                    }
                    if word.joined && (self.listening)() {
                        let _ = self.outbox.try_send(vec![hello(&self.origin)]);
                    }
                }
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, "a message on the relay's channel that is not one"),
            },
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

    #[test]
    fn pieces_are_as_large_as_a_notification_allows_and_an_event_that_cannot_fit_is_dropped() {
        // 64 KiB of plain text: nine pieces of under 7,900 bytes, not the fifty a worst-case size would make.
        let sent = payloads("node/1", Some("alice"), &output(&"z".repeat(65_536)));
        assert!(sent.len() <= 10, "{:?}", sent.iter().map(String::len).collect::<Vec<_>>());
        assert!(sent.iter().all(|payload| payload.len() < MAX_PAYLOAD));
        // Every escape serde_json writes, counted as written.
        let escapes: String =
            ['"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{1}', '\u{1f}', 'é', '€', '😀'].iter().collect();
        for c in escapes.chars() {
            assert_eq!(escaped_len(c), serde_json::to_string(&c.to_string()).unwrap().len() - 2, "{c:?}");
        }
        // An owner's name of kilobytes leaves no room: not relayed, and nothing sent that PostgreSQL would refuse.
        assert!(payloads("node/1", Some(&"o".repeat(8000)), &output("x")).is_empty());
    }
}
