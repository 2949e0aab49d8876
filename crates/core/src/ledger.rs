//! The engine's account of runs: the table of runs executing now, the live event feeds and the history database,
//! and the run metrics (`run_metrics`). A [`RunEntry`] follows one run from acceptance to its end and writes each
//! step to all of them;
//! if it is dropped before the run ended (its caller went away, or cancelled it), it records the run as cancelled,
//! so no run is ever left unaccounted for.
//!
//! Two feeds: this node's runs' events (for those who follow a run they started), and every node's, each with its
//! conversation's owner (for the listeners of `/mcp/events` and subscriptions, who hear what their tenant owns).
//! With a shared (PostgreSQL) history, the second also carries the other nodes' runs, through the history's relay.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::history::{Ending, NewRun, Outcome, Relay, Relayed};
use crate::{
    ConversationId, EVENT_BUFFER, Error, History, Language, OutputChunk, OutputSink, RunEvent, RunOutcome, Stream,
    Termination,
};

/// A run event with the owner of its conversation (the tenant whose name it is; `None` for a conversation made
/// without tenants), from this node or, with a shared history, another.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedEvent {
    pub owner: Option<Arc<str>>,
    pub event: RunEvent,
}

/// Where runs are accounted for; owned by the engine.
pub struct Ledger {
    history: Option<History>,
    /// This node's runs' events. Each feed is made for its first listener: its buffer of [`EVENT_BUFFER`] events is
    /// no small allocation, and most engines (`sandlot run`'s, say) never have a listener.
    events: OnceLock<broadcast::Sender<RunEvent>>,
    /// Every node's runs' events, with their owners (shared with the relay's listening thread).
    owned_events: Arc<OnceLock<broadcast::Sender<OwnedEvent>>>,
    /// This node's end of the relay, with a shared history.
    relay: Option<Relay>,
    /// Runs executing now: run id → (conversation, language).
    in_flight: Mutex<HashMap<String, (ConversationId, Language)>>,
}

impl Ledger {
    /// A ledger writing to `history` when there is one (and relaying events through it when it is shared).
    pub fn new(history: Option<History>) -> Self {
        let owned_events: Arc<OnceLock<broadcast::Sender<OwnedEvent>>> = Arc::default();
        let feed = Arc::downgrade(&owned_events);
        let deliver = Box::new(move |relayed: Relayed| {
            if let Some(events) = feed.upgrade().as_deref().and_then(OnceLock::get) {
                let _ = events.send(OwnedEvent { owner: relayed.owner.map(Arc::from), event: relayed.event });
            }
        });
        let feed = Arc::downgrade(&owned_events);
        let listening = Box::new(move || feed.upgrade().is_some_and(|events| listened(&events).is_some()));
        let relay = history.as_ref().and_then(|history| match history.relay(deliver, listening) {
            Ok(relay) => relay,
            Err(error) => {
                tracing::error!(%error, "cannot relay run events between nodes: each node's listeners hear its runs");
                None
            }
        });
        Self { history, events: OnceLock::new(), owned_events, relay, in_flight: Mutex::default() }
    }

    /// The history database, if this engine keeps one.
    pub fn history(&self) -> Option<&History> {
        self.history.as_ref()
    }

    /// A live feed of this node's run events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.events.get_or_init(|| broadcast::channel(EVENT_BUFFER).0).subscribe()
    }

    /// A live feed of every node's run events, with their owners, from now on.
    pub fn subscribe_owned(&self) -> broadcast::Receiver<OwnedEvent> {
        let events = self.owned_events.get_or_init(|| broadcast::channel(EVENT_BUFFER).0).subscribe();
        if let Some(relay) = &self.relay {
            relay.say_listening(); // the other nodes relay their runs' output from now on
        }
        events
    }

    fn in_flight_table(&self) -> std::sync::MutexGuard<'_, HashMap<String, (ConversationId, Language)>> {
        self.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The runs executing now: (run id, conversation, language).
    pub fn in_flight(&self) -> Vec<(String, ConversationId, Language)> {
        let table = self.in_flight_table();
        table.iter().map(|(id, (conversation, language))| (id.clone(), conversation.clone(), *language)).collect()
    }

    /// How many runs are executing now.
    pub fn active_runs(&self) -> usize {
        self.in_flight_table().len()
    }

    /// Sends `event` of a conversation `owner` owns to both feeds and the other nodes (nobody listening is fine).
    fn announce(&self, owner: Option<&Arc<str>>, event: RunEvent) {
        if let Some(relay) = &self.relay {
            relay.publish(owner.map(|owner| &**owner), &event);
        }
        if let Some(events) = listened(&self.owned_events) {
            let _ = events.send(OwnedEvent { owner: owner.cloned(), event: event.clone() });
        }
        if let Some(events) = self.events.get() {
            let _ = events.send(event);
        }
    }

    /// Whether anyone may hear an event's output now: a listener of either feed, or another node's.
    fn has_listeners(&self) -> bool {
        self.relay.as_ref().is_some_and(Relay::others_listen)
            || listened(&self.events).is_some()
            || listened(&self.owned_events).is_some()
    }

    /// Opens the entry of a run just accepted (recorded as queued) in a conversation `owner` owns.
    pub fn accept<'a>(&'a self, run: NewRun<'_>, owner: Option<String>) -> RunEntry<'a> {
        if let Some(history) = &self.history {
            log_failure(history.queued(&run));
        }
        RunEntry {
            ledger: self,
            owner: owner.map(Arc::from),
            run_id: run.id.to_owned(),
            conversation: run.conversation.clone(),
            language: run.language,
            started: None,
            stdout_bytes: AtomicU64::new(0),
            stderr_bytes: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            ended: false,
        }
    }
}

/// The feed's sender, when the feed was made and someone listens to it now.
fn listened<T>(feed: &OnceLock<broadcast::Sender<T>>) -> Option<&broadcast::Sender<T>> {
    feed.get().filter(|events| events.receiver_count() > 0)
}

fn log_failure(result: crate::Result<()>) {
    if let Err(error) = result {
        tracing::error!(%error, "cannot record a run in the history");
    }
}

/// One run's entry in the ledger, from acceptance to its end.
pub struct RunEntry<'a> {
    ledger: &'a Ledger,
    owner: Option<Arc<str>>,
    run_id: String,
    conversation: ConversationId,
    language: Language,
    started: Option<Instant>,
    stdout_bytes: AtomicU64,
    stderr_bytes: AtomicU64,
    seq: AtomicU64,
    ended: bool,
}

impl RunEntry<'_> {
    /// The conversation's owner, as found once the run holds the conversation (before it starts).
    pub fn set_owner(&mut self, owner: String) {
        self.owner = Some(Arc::from(owner));
    }

    /// The run got its turn: it is executing from now on.
    pub fn start(&mut self) {
        self.started = Some(Instant::now());
        crate::run_metrics::run_started();
        if let Some(history) = &self.ledger.history {
            log_failure(history.started(&self.run_id));
        }
        self.ledger.in_flight_table().insert(self.run_id.clone(), (self.conversation.clone(), self.language));
        self.ledger.announce(
            self.owner.as_ref(),
            RunEvent::Started {
                run_id: self.run_id.clone(),
                conversation_id: self.conversation.to_string(),
                language: self.language,
            },
        );
    }

    /// A sink that passes output on to `caller` and to event listeners, counting it for the history.
    pub fn sink<'s>(&'s self, caller: &'s dyn OutputSink) -> impl OutputSink + 's {
        move |chunk: OutputChunk| {
            let counter = match chunk.stream {
                Stream::Stdout => &self.stdout_bytes,
                Stream::Stderr => &self.stderr_bytes,
            };
            counter.fetch_add(chunk.data.len() as u64, Ordering::Relaxed);
            if self.ledger.has_listeners() {
                self.ledger.announce(
                    self.owner.as_ref(),
                    RunEvent::Output {
                        run_id: self.run_id.clone(),
                        conversation_id: self.conversation.to_string(),
                        stream: chunk.stream,
                        seq: self.seq.fetch_add(1, Ordering::Relaxed),
                        data: String::from_utf8_lossy(&chunk.data).into_owned(),
                    },
                );
            }
            caller.output(chunk);
        }
    }

    fn ending(&self, outcome: Outcome, exit_code: Option<i32>, error: Option<String>, truncated: bool) -> Ending {
        Ending {
            outcome,
            exit_code,
            error,
            duration: self.started.map(|started| started.elapsed()),
            stdout_bytes: self.stdout_bytes.load(Ordering::Relaxed),
            stderr_bytes: self.stderr_bytes.load(Ordering::Relaxed),
            truncated,
        }
    }

    fn end(&mut self, ending: &Ending) {
        self.ended = true;
        crate::run_metrics::run_ended(ending.outcome, self.language, ending.duration);
        self.ledger.in_flight_table().remove(&self.run_id);
        if let Some(history) = &self.ledger.history {
            log_failure(history.finished(&self.run_id, ending));
        }
    }

    /// The run ended with `outcome`.
    pub fn finish(mut self, outcome: &RunOutcome) {
        let ending =
            self.ending(Outcome::of(&outcome.termination), Some(outcome.exit_code()), None, outcome.truncated());
        if let Some(history) = &self.ledger.history {
            // Before the end is recorded: whoever sees the run finished finds its output.
            log_failure(history.store_output(&self.run_id, outcome));
            log_failure(history.store_connections(&self.run_id, outcome));
        }
        self.end(&ending);
        let event = RunEvent::finished(&self.run_id, self.conversation.as_str(), self.language, outcome);
        self.ledger.announce(self.owner.as_ref(), event);
    }

    /// sandlot could not run it.
    pub fn fail(mut self, error: &Error) {
        self.end(&self.ending(Outcome::Internal, None, Some(error.to_string()), false));
        self.ledger.announce(
            self.owner.as_ref(),
            RunEvent::Failed {
                run_id: self.run_id.clone(),
                conversation_id: self.conversation.to_string(),
                language: self.language,
                error: error.to_string(),
            },
        );
    }

    /// It never got its turn: the server was busy.
    pub fn refuse(mut self, error: &Error) {
        self.end(&self.ending(Outcome::Busy, None, Some(error.to_string()), false));
    }
}

impl Drop for RunEntry<'_> {
    /// A run whose entry is dropped before it ended was cancelled: its caller cancelled the request or went away
    /// (dropping the backend's future kills the sandbox). That is recorded and announced.
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        tracing::info!(run_id = self.run_id, conversation = %self.conversation, "run cancelled");
        let ending = self.ending(Outcome::Cancelled, Some(Termination::Cancelled.exit_code()), None, false);
        self.end(&ending);
        if self.started.is_some() {
            let outcome = RunOutcome::empty(Termination::Cancelled, ending.duration.unwrap_or(Duration::ZERO));
            let event = RunEvent::finished(&self.run_id, self.conversation.as_str(), self.language, &outcome);
            self.ledger.announce(self.owner.as_ref(), event);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::history::test_stores::{TestStore, stores};

    fn new_run<'a>(id: &'a str, conversation: &'a ConversationId) -> NewRun<'a> {
        NewRun { id, conversation, caller: "alice", language: Language::Bash, code: "echo", metadata: None }
    }

    /// Runs `id` in `conversation` of `owner` on `ledger`: started, printing `output`, finished.
    fn run(ledger: &Ledger, id: &str, conversation: &str, owner: &str, output: &str) {
        let conversation = ConversationId::parse(conversation).unwrap();
        let mut entry = ledger.accept(new_run(id, &conversation), Some(owner.to_owned()));
        entry.start();
        entry.sink(&()).output(OutputChunk { stream: Stream::Stdout, data: output.as_bytes().to_vec() });
        entry.finish(&RunOutcome::empty(Termination::Exited { code: 0 }, Duration::from_millis(5)));
    }

    /// What `events` has heard of run `id`, in order, until its end or `seconds`: (owner, event).
    fn heard(events: &mut broadcast::Receiver<OwnedEvent>, id: &str, seconds: u64) -> Vec<OwnedEvent> {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut heard = Vec::new();
        while Instant::now() < deadline {
            match events.try_recv() {
                Ok(owned) if owned.event.run_id() == id => {
                    let end = matches!(owned.event, RunEvent::Finished { .. });
                    heard.push(owned);
                    if end {
                        break;
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(10)),
                Err(error) => panic!("{error}"),
            }
        }
        heard
    }

    fn output_of(events: &[OwnedEvent]) -> String {
        let pieces = events.iter().filter_map(|owned| match &owned.event {
            RunEvent::Output { data, .. } => Some(data.as_str()),
            _ => None,
        });
        pieces.collect()
    }

    #[test]
    fn this_nodes_runs_reach_the_owned_feed_with_their_owner() {
        for store in stores() {
            let ledger = Ledger::new(Some(store.open(false)));
            let mut events = ledger.subscribe_owned();
            run(&ledger, "r1", "c1", "alice", "hello\n");
            let heard = heard(&mut events, "r1", 20);
            let kinds: Vec<&str> = heard.iter().map(|owned| owned.event.method()).collect();
            let expected = ["run_started", "run_output", "run_finished"].map(|m| format!("notifications/sandlot/{m}"));
            assert_eq!(kinds, expected, "{}", store.name());
            assert!(heard.iter().all(|owned| owned.owner.as_deref() == Some("alice")), "{}", store.name());
            assert_eq!(output_of(&heard), "hello\n", "{}", store.name());
            // Its own runs come once: the relay does not hand a node its own notifications back.
            std::thread::sleep(Duration::from_millis(500));
            assert!(events.try_recv().is_err(), "{}: heard twice", store.name());
        }
    }

    /// Two nodes on one PostgreSQL history: each hears the other's runs, with their owners and all their output
    /// (a chunk larger than a notification arrives in pieces).
    #[test]
    fn a_shared_history_relays_each_nodes_runs_to_the_other() {
        let Some(store) = TestStore::postgres_only() else { return };
        let (one, two) = (Ledger::new(Some(store.open(false))), Ledger::new(Some(store.open(false))));
        let (mut heard_by_one, mut heard_by_two) = (one.subscribe_owned(), two.subscribe_owned());
        // The listeners connect as their ledgers are made, and each node says it has listeners once connected:
        // until a run's output reaches the other node, it may not have.
        warm_up(&one, &mut heard_by_two);
        warm_up(&two, &mut heard_by_one);
        let large = "\u{1}x".repeat(10_000);
        run(&one, "from-one", "c1", "alice", &large);
        run(&two, "from-two", "c2", "bob", "two\n");
        let at_two = heard(&mut heard_by_two, "from-one", 20);
        assert_eq!(at_two.last().map(|owned| owned.event.method()), Some("notifications/sandlot/run_finished"));
        assert!(at_two.iter().all(|owned| owned.owner.as_deref() == Some("alice")));
        assert!(at_two.iter().filter(|owned| owned.event.method().ends_with("run_output")).count() > 1, "one piece");
        let relayed = output_of(&at_two);
        assert!(relayed == large, "{} bytes relayed of {}", relayed.len(), large.len());
        let at_one = heard(&mut heard_by_one, "from-two", 20);
        assert_eq!(at_one.len(), 3, "{at_one:?}");
        assert!(at_one.iter().all(|owned| owned.owner.as_deref() == Some("bob")));
        // This node's feed of its own runs hears none of the other's.
        let mut own = two.subscribe();
        run(&one, "later", "c1", "alice", "");
        assert!(!heard(&mut heard_by_two, "later", 20).is_empty());
        assert!(own.try_recv().is_err(), "another node's run on this node's own feed");
    }

    /// Runs on `from` until one's output reaches `to`, for at most 20 s: a node that connected after the other said
    /// it has listeners hears so again within `HELLO_EVERY` (5 s).
    fn warm_up(from: &Ledger, to: &mut broadcast::Receiver<OwnedEvent>) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let id = format!("warm{}", uuid::Uuid::new_v4().simple());
            run(from, &id, "warm", "alice", "warm\n");
            if output_of(&heard(to, &id, 1)) == "warm\n" {
                return;
            }
            assert!(Instant::now() < deadline, "no run's output ever reached the other node");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Everything sent on the relay's channel, heard by a connection of the test's own.
    struct Channel {
        heard: Arc<Mutex<Vec<String>>>,
        stop: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Channel {
        fn listen(store: &TestStore) -> Self {
            let config: postgres::Config = store.url().unwrap().parse().unwrap();
            let (heard, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(std::sync::atomic::AtomicBool::new(false)));
            let (listening, ready) = std::sync::mpsc::channel();
            let (into, stopped) = (heard.clone(), stop.clone());
            std::thread::spawn(move || {
                use postgres::fallible_iterator::FallibleIterator;
                let mut client = config.connect(postgres::NoTls).unwrap();
                client.batch_execute("LISTEN sandlot_run_events").unwrap();
                listening.send(()).unwrap();
                while !stopped.load(Ordering::Relaxed) {
                    let mut notifications = client.notifications();
                    if let Ok(Some(notification)) = notifications.timeout_iter(Duration::from_millis(100)).next() {
                        into.lock().unwrap().push(notification.payload().to_owned());
                    }
                }
            });
            ready.recv().unwrap();
            Self { heard, stop }
        }

        fn any(&self, needle: &str) -> bool {
            self.heard.lock().unwrap().iter().any(|payload| payload.contains(needle))
        }
    }

    impl Drop for Channel {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// A run's output goes to the database only while another node has listeners; its start and end always do.
    #[test]
    fn output_is_relayed_only_while_another_node_listens() {
        let Some(store) = TestStore::postgres_only() else { return };
        let (one, two) = (Ledger::new(Some(store.open(false))), Ledger::new(Some(store.open(false))));
        let channel = Channel::listen(&store);
        run(&one, "quiet", "c1", "alice", "nobody-hears-this\n");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !channel.any(r#""runId":"quiet""#) || !channel.any(r#""event":"finished""#) {
            assert!(Instant::now() < deadline, "the run's start and end were not relayed");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!channel.any("nobody-hears-this"), "output relayed with no listener on any other node");
        // A listener on two: one relays its runs' output from now on (once two's word has reached it).
        let mut heard_by_two = two.subscribe_owned();
        warm_up(&one, &mut heard_by_two);
        run(&one, "loud", "c1", "alice", "someone-hears-this\n");
        assert_eq!(output_of(&heard(&mut heard_by_two, "loud", 20)), "someone-hears-this\n");
        assert!(channel.any("someone-hears-this"));
    }
}
