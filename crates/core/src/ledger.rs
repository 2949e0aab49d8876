//! The engine's account of runs: the table of runs executing now, the live event feed (`/mcp/events`) and the
//! history database, and the run metrics (`run_metrics`). A [`RunEntry`] follows one run from acceptance to its end
//! and writes each step to all of them;
//! if it is dropped before the run ended (its caller went away, or cancelled it), it records the run as cancelled,
//! so no run is ever left unaccounted for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::history::{Ending, NewRun, Outcome};
use crate::{
    ConversationId, EVENT_BUFFER, Error, History, Language, OutputChunk, OutputSink, RunEvent, RunOutcome, Stream,
    Termination,
};

/// Where runs are accounted for; owned by the engine.
pub struct Ledger {
    history: Option<History>,
    /// The live feed, made for its first listener: its buffer of [`EVENT_BUFFER`] events is no small allocation,
    /// and most engines (`sandlot run`'s, say) never have a listener.
    events: OnceLock<broadcast::Sender<RunEvent>>,
    /// Runs executing now: run id → (conversation, language).
    in_flight: Mutex<HashMap<String, (ConversationId, Language)>>,
}

impl Ledger {
    /// A ledger writing to `history` when there is one.
    pub fn new(history: Option<History>) -> Self {
        Self { history, events: OnceLock::new(), in_flight: Mutex::default() }
    }

    /// The history database, if this engine keeps one.
    pub fn history(&self) -> Option<&History> {
        self.history.as_ref()
    }

    /// A live feed of run events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.events.get_or_init(|| broadcast::channel(EVENT_BUFFER).0).subscribe()
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

    fn announce(&self, event: RunEvent) {
        if let Some(events) = self.events.get() {
            let _ = events.send(event); // nobody listening is fine
        }
    }

    /// Whether anyone listens to the live feed now.
    fn has_listeners(&self) -> bool {
        self.events.get().is_some_and(|events| events.receiver_count() > 0)
    }

    /// Opens the entry of a run just accepted (recorded as queued).
    pub fn accept<'a>(&'a self, run: NewRun<'_>) -> RunEntry<'a> {
        if let Some(history) = &self.history {
            log_failure(history.queued(&run));
        }
        RunEntry {
            ledger: self,
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

fn log_failure(result: crate::Result<()>) {
    if let Err(error) = result {
        tracing::error!(%error, "cannot record a run in the history");
    }
}

/// One run's entry in the ledger, from acceptance to its end.
pub struct RunEntry<'a> {
    ledger: &'a Ledger,
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
    /// The run got its turn: it is executing from now on.
    pub fn start(&mut self) {
        self.started = Some(Instant::now());
        crate::run_metrics::run_started();
        if let Some(history) = &self.ledger.history {
            log_failure(history.started(&self.run_id));
        }
        self.ledger.in_flight_table().insert(self.run_id.clone(), (self.conversation.clone(), self.language));
        self.ledger.announce(RunEvent::Started {
            run_id: self.run_id.clone(),
            conversation_id: self.conversation.to_string(),
            language: self.language,
        });
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
                self.ledger.announce(RunEvent::Output {
                    run_id: self.run_id.clone(),
                    conversation_id: self.conversation.to_string(),
                    stream: chunk.stream,
                    seq: self.seq.fetch_add(1, Ordering::Relaxed),
                    data: String::from_utf8_lossy(&chunk.data).into_owned(),
                });
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
        self.ledger.announce(event);
    }

    /// sandlot could not run it.
    pub fn fail(mut self, error: &Error) {
        self.end(&self.ending(Outcome::Internal, None, Some(error.to_string()), false));
        self.ledger.announce(RunEvent::Failed {
            run_id: self.run_id.clone(),
            conversation_id: self.conversation.to_string(),
            language: self.language,
            error: error.to_string(),
        });
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
            self.ledger.announce(event);
        }
    }
}
