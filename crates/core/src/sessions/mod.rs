//! Live sandboxes: a conversation's sandbox kept between its `session` calls, and its persistent interpreters.
//!
//! [`Sessions`] keeps at most one live sandbox per conversation (a backend's [`crate::LiveSandbox`]), started by its
//! first `session` call and ended by idleness, its maximum lifetime, an explicit close, the host's memory pressure or
//! the cap on live sandboxes (least recently used idle ones first), or the server's shutdown. In it, each language
//! has one driver (`driver.rs`): the language's interpreter running a small loop that takes a cell of code at a
//! time and keeps its globals. A call's deadline or cancellation interrupts the cell (SIGINT); an interpreter that
//! does not stop in [`config::INTERRUPT_GRACE`] is killed and its state is said lost. Calls of one conversation reach
//! here one at a time (the engine's admission gives a conversation one turn at a time), but background commands
//! (`alongside`) and the tools that report, restart or close a sandbox may come at any time.
//!
//! Nothing of a live sandbox survives the server: `marker.rs` notes in the conversation's directory which server
//! started it and how it ended, so the next call can say why the state is gone.

mod call;
pub mod config;
pub(crate) mod driver;
mod live;
mod marker;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::{
    ConversationId, Error, Job, Language, LiveBackend, OutputSink, Result, RunOutcome, SandboxProcess, SandboxUsage,
};
pub use config::SessionConfig;
use live::Live;

/// What a `session` call's result says about the live sandbox it ran in.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionReport {
    /// The live sandbox's id.
    pub id: String,
    /// Calls it has served, this one included.
    pub calls: u64,
    /// When it started.
    pub started_at: SystemTime,
    /// Whether this call found state lost: the sandbox or the language's interpreter is new although an earlier
    /// one existed (a restart of the server, the sandbox's end, an interpreter killed), or this call's interpreter
    /// had to be killed.
    pub state_lost: bool,
    /// Why, in a sentence for the model, when `state_lost`.
    pub notice: Option<String>,
}

/// One language's interpreter in a live sandbox.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct InterpreterStatus {
    /// `python`, `javascript` (also TypeScript's) or `bash`.
    pub language: Language,
    /// Its pid as the sandbox sees it.
    pub pid: u32,
    /// Cells it has run.
    pub calls: u64,
}

/// A live sandbox now, for `sandbox_session`, `/v1/conversations` and `/metrics`.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionStatus {
    pub id: String,
    pub conversation: ConversationId,
    pub started_at: SystemTime,
    pub last_used: SystemTime,
    /// Calls served.
    pub calls: u64,
    /// Whether a call runs in it now.
    pub busy: bool,
    /// When it ends unless used again (idle timeout), and at the latest (maximum lifetime).
    pub idle_ends_at: SystemTime,
    pub ends_at: SystemTime,
    pub interpreters: Vec<InterpreterStatus>,
    pub processes: Vec<SandboxProcess>,
    pub usage: SandboxUsage,
}

/// A conversation's place for its live sandbox: empty until one starts, or once it ended.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Live>>>>;

/// The live sandboxes of one engine.
pub struct Sessions {
    config: SessionConfig,
    /// This server process's id, noted with each sandbox it starts.
    boot: String,
    /// One slot per conversation that has or is starting a live sandbox; a slot's lock is held while its sandbox
    /// starts, so a conversation never gets two.
    slots: Mutex<HashMap<ConversationId, Slot>>,
    reaper: std::sync::Once,
}

/// What a live sandbox is started with, besides its conversation: the parts of a job that describe the sandbox.
pub(crate) struct SandboxParts {
    pub conversation: ConversationId,
    /// The tenant whose run starts it (`""` without tenants).
    pub tenant: String,
    /// `<root>/<id>`, where the conversation's session note is kept.
    pub conversation_dir: PathBuf,
    pub limits: crate::Limits,
    pub workspace: PathBuf,
    pub layout: crate::Layout,
    pub mounts: Vec<crate::Mount>,
    /// What the sandbox may reach beyond its loopback: its first call's leash, kept for its life.
    pub network: Option<crate::JobNetwork>,
}

/// How long a leashed sandbox's call waits, at most, for the connections still open at its end to be recorded.
const EGRESS_SETTLE: std::time::Duration = std::time::Duration::from_millis(250);

impl Sessions {
    pub fn new(config: SessionConfig) -> Self {
        Self {
            config,
            boot: uuid::Uuid::new_v4().simple().to_string(),
            slots: Mutex::default(),
            reaper: std::sync::Once::new(),
        }
    }

    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// The conversation's live sandbox, started when it has none (or its own has ended); with the notice of lost
    /// state when an earlier one existed, and whether it was started now (its first call is the caller's: see
    /// [`LiveBackend::first_call_ended`]).
    async fn live(
        self: &Arc<Self>,
        backend: &dyn LiveBackend,
        conversation: &ConversationId,
        parts: SandboxParts,
    ) -> Result<(Arc<Live>, Option<String>, bool)> {
        self.start_reaper();
        let slot = self.slot(conversation);
        let mut slot = slot.lock().await;
        if let Some(live) = slot.as_ref() {
            if live.is_usable(&self.config) {
                live.check_network(parts.network.as_ref())?;
                return Ok((live.clone(), None, false));
            }
            let reason = live.end_reason(&self.config);
            live.close(&reason).await;
        }
        self.make_room(conversation).await?;
        let previous = marker::read(&parts.conversation_dir);
        let notice = marker::lost_state_notice(previous.as_ref(), &self.boot);
        let live = Arc::new(Live::start(backend, conversation, parts, &self.boot).await?);
        *slot = Some(live.clone());
        metrics::gauge!(crate::run_metrics::LIVE_SANDBOXES).increment(1.0);
        Ok((live, notice, true))
    }

    fn slot(&self, conversation: &ConversationId) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(conversation.clone()).or_default().clone()
    }

    /// Every live sandbox now (not those starting).
    fn all(&self) -> Vec<Arc<Live>> {
        let slots: Vec<_> = self.slots.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        slots.iter().filter_map(|slot| slot.try_lock().ok().and_then(|live| live.clone())).collect()
    }

    fn find(&self, conversation: &ConversationId) -> Option<Arc<Live>> {
        let slot = self.slots.lock().unwrap_or_else(|e| e.into_inner()).get(conversation).cloned()?;
        slot.try_lock().ok().and_then(|live| live.clone()).filter(|live| live.sandbox_alive())
    }

    /// Below the cap on live sandboxes before one more starts: ends the least recently used idle one of the tenant
    /// that holds the most (so a tenant that starts many ends its own first, not another's), or refuses as busy
    /// when every live sandbox has a call running.
    async fn make_room(&self, starting: &ConversationId) -> Result<()> {
        loop {
            let live: Vec<_> =
                self.all().into_iter().filter(|l| l.sandbox_alive() && l.conversation() != starting).collect();
            if live.len() < self.config.max_live {
                return Ok(());
            }
            let idle: Vec<_> = live.iter().filter(|l| !l.is_busy()).collect();
            let mut held: HashMap<&str, usize> = HashMap::new();
            for l in &idle {
                *held.entry(l.tenant()).or_default() += 1;
            }
            let oldest = idle
                .iter()
                .max_by_key(|l| (held.get(l.tenant()).copied().unwrap_or(0), std::cmp::Reverse(l.last_used())));
            let Some(oldest) = oldest else {
                return Err(Error::Busy {
                    reason: format!("all {} live sandboxes are running calls", self.config.max_live),
                    retry_after: Duration::from_secs(5),
                });
            };
            let reason =
                format!("ended to make room: the server keeps at most {} live sandboxes", self.config.max_live);
            self.end(oldest, &reason).await;
        }
    }

    async fn end(&self, live: &Live, reason: &str) {
        if live.close(reason).await {
            metrics::gauge!(crate::run_metrics::LIVE_SANDBOXES).decrement(1.0);
        }
        // The slot goes when it holds this sandbox and no call is starting another in it.
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let stale = slots.get(live.conversation()).is_some_and(|slot| {
            slot.try_lock().is_ok_and(|held| held.as_ref().is_none_or(|held| held.id() == live.id()))
        });
        if stale {
            slots.remove(live.conversation());
        }
    }

    /// Runs the job in the conversation's live sandbox: a cell of the language's persistent interpreter, or with
    /// [`crate::SessionUse::Process`] a process of its own (to its end, its deadline or its cancellation; what it
    /// starts in the background stays).
    pub(crate) async fn run(
        self: &Arc<Self>,
        backend: &dyn LiveBackend,
        job: Job,
        parts: SandboxParts,
        how: crate::SessionUse,
        sink: &dyn OutputSink,
    ) -> Result<(RunOutcome, SessionReport)> {
        let conversation = parts.conversation.clone();
        let (live, sandbox_notice, started) = self.live(backend, &conversation, parts).await?;
        let egress = live.sandbox_egress();
        if let Some(network) = &egress {
            network.set_run(Some(job.run_id.clone()));
        }
        let called = match how {
            crate::SessionUse::Process => live.run_process(job, sink).await,
            _ => live.call(job, sink).await,
        };
        if started {
            backend.first_call_ended();
        }
        let (mut outcome, mut report) = called?;
        if let Some(network) = &egress {
            // What the call opened and has closed (a connection closed as the call ended is recorded within a
            // moment); one its background processes keep open is recorded when it closes, with the call that
            // opened it, in a later call's trail.
            network.settle(EGRESS_SETTLE).await;
            let (connections, dropped) = network.take_connections();
            outcome.connections = connections;
            outcome.connections_dropped = dropped;
        }
        if let Some(notice) = sandbox_notice {
            report.state_lost = true;
            report.notice = Some(match report.notice.take() {
                Some(more) => format!("{notice}; {more}"),
                None => notice,
            });
        }
        if !live.is_usable(&self.config) {
            self.end(&live, &live.end_reason(&self.config)).await;
        }
        Ok((outcome, report))
    }

    /// An action in the conversation's browser, in its live sandbox (started with `parts` when it has none).
    pub(crate) async fn browser(
        self: &Arc<Self>,
        backend: &dyn LiveBackend,
        parts: SandboxParts,
        action: crate::BrowserAction,
    ) -> Result<crate::BrowserResult> {
        let conversation = parts.conversation.clone();
        let (live, _, started) = self.live(backend, &conversation, parts).await?;
        let result = live.browser(action).await;
        if started {
            backend.first_call_ended();
        }
        if !live.is_usable(&self.config) {
            self.end(&live, &live.end_reason(&self.config)).await;
        }
        Ok(result)
    }

    /// The conversation's live sandbox now, if it has one.
    pub async fn status(&self, conversation: &ConversationId) -> Option<SessionStatus> {
        Some(self.find(conversation)?.status(&self.config).await)
    }

    /// Every live sandbox now.
    pub async fn statuses(&self) -> Vec<SessionStatus> {
        let mut statuses = Vec::new();
        for live in self.all().into_iter().filter(|live| live.sandbox_alive()) {
            statuses.push(live.status(&self.config).await);
        }
        statuses
    }

    /// Kills the conversation's interpreters (the next call starts fresh ones; the sandbox, its files and its
    /// background processes stay). Waits for a call in progress to end. `None` when it has no live sandbox.
    pub async fn restart(&self, conversation: &ConversationId) -> Option<SessionStatus> {
        let live = self.find(conversation)?;
        live.restart_interpreters("restarted by sandbox_session").await;
        Some(live.status(&self.config).await)
    }

    /// Ends the conversation's live sandbox, every process in it. False when it had none.
    pub async fn close(&self, conversation: &ConversationId, reason: &str) -> bool {
        let Some(live) = self.find(conversation) else { return false };
        self.end(&live, reason).await;
        true
    }

    /// Ends every live sandbox (the server stops).
    pub async fn close_all(&self, reason: &str) {
        for live in self.all() {
            self.end(&live, reason).await;
        }
    }

    /// Ends the sandboxes past their idle timeout or lifetime, and the least recently used idle ones while the
    /// host's available memory is below the floor; refreshes the gauges.
    pub async fn reap(&self) {
        let all = self.all();
        let mut memory = 0;
        for live in &all {
            if !live.is_busy() && !live.is_usable(&self.config) {
                self.end(live, &live.end_reason(&self.config)).await;
            } else {
                memory += live.usage().await.memory_bytes;
            }
        }
        metrics::gauge!(crate::run_metrics::LIVE_SANDBOX_MEMORY).set(memory as f64);
        let mut idle: Vec<_> = self.all().into_iter().filter(|live| !live.is_busy()).collect();
        idle.sort_by_key(|live| live.last_used());
        for live in idle {
            let available = config::host_memory_mb(config::MemField::Available).unwrap_or(u64::MAX);
            if available >= self.config.min_free_mb {
                break;
            }
            let reason = format!("ended under memory pressure: the host had {available} MiB available");
            self.end(&live, &reason).await;
        }
    }

    /// Starts the task that calls [`Sessions::reap`] every few seconds, once, on the runtime of the first call. It
    /// holds only a weak reference: it ends with the engine.
    fn start_reaper(self: &Arc<Self>) {
        self.reaper.call_once(|| {
            let weak = Arc::downgrade(self);
            let period = (self.config.idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(5));
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(period);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    let Some(sessions) = weak.upgrade() else { return };
                    sessions.reap().await;
                }
            });
        });
    }
}
