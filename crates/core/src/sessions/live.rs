//! One live sandbox and its interpreters: when it counts as idle or expired, its calls, its end.
//!
//! The interpreters are behind an async lock held for a whole cell, so a restart waits for the call in progress;
//! a snapshot of them (for status reports, which must not wait for a call) is refreshed after each change.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use super::call::{self, Driver};
use super::{InterpreterStatus, SandboxParts, SessionConfig, SessionReport, SessionStatus, driver, marker};
use crate::browser::{Browser, BrowserAction, BrowserFailure, BrowserResult};
use crate::{ConversationId, Job, Language, LiveBackend, LiveSandbox, LiveSpec, OutputSink, Result, RunOutcome};

pub(crate) struct Live {
    id: String,
    conversation: ConversationId,
    tenant: String,
    conversation_dir: PathBuf,
    boot: String,
    sandbox: Arc<dyn LiveSandbox>,
    /// What its first call asked of the network (`None`: loopback only); kept for its life.
    network: Option<crate::NetworkUse>,
    /// Its limits: those it was started with, or raised for a browser (`browser::browser_limits`).
    limits: Mutex<crate::Limits>,
    started_at: SystemTime,
    started: Instant,
    /// When its last call ended (or it started), both clocks.
    last_used: Mutex<(Instant, SystemTime)>,
    /// Calls running in it now (a cell, or a background command).
    busy: AtomicUsize,
    calls: AtomicU64,
    closed: AtomicBool,
    interpreters: tokio::sync::Mutex<Interpreters>,
    snapshot: Mutex<Vec<InterpreterStatus>>,
    /// Its browser, once a browser call started one; behind an async lock held for a whole action.
    browser: tokio::sync::Mutex<Option<Browser>>,
}

#[derive(Default)]
struct Interpreters {
    /// One per driver language (`driver::driver_language`).
    drivers: HashMap<Language, Driver>,
    /// Why a language's previous interpreter is gone, told by its next call.
    lost: HashMap<Language, String>,
    /// OOM kills of the sandbox already accounted to an interpreter's end.
    oom_kills_seen: u64,
}

/// Decrements `busy` when dropped, so a call that is cancelled mid-way still counts as ended.
struct BusyGuard<'a>(&'a AtomicUsize);

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Live {
    pub async fn start(
        backend: &dyn LiveBackend,
        conversation: &ConversationId,
        parts: SandboxParts,
        boot: &str,
    ) -> Result<Self> {
        let id = format!("s-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let limits = Mutex::new(parts.limits.clone());
        let network = parts.network.as_ref().map(|network| network.asked.clone());
        let spec = LiveSpec {
            sandbox_id: id.clone(),
            conversation: conversation.clone(),
            limits: parts.limits,
            workspace: parts.workspace,
            layout: parts.layout,
            mounts: parts.mounts,
            network: parts.network,
        };
        let sandbox = backend.start(spec).await?;
        tracing::info!(session = id, conversation = %conversation, "live sandbox started");
        let live = Self {
            id,
            conversation: conversation.clone(),
            tenant: parts.tenant,
            conversation_dir: parts.conversation_dir,
            boot: boot.to_owned(),
            sandbox,
            network,
            limits,
            started_at: SystemTime::now(),
            started: Instant::now(),
            last_used: Mutex::new((Instant::now(), SystemTime::now())),
            busy: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            interpreters: Default::default(),
            snapshot: Mutex::default(),
            browser: tokio::sync::Mutex::default(),
        };
        live.note(None);
        Ok(live)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Refuses a call that asks for another network than the sandbox was started with: a live sandbox keeps its
    /// first call's leash (its namespace and link were made for it).
    pub fn check_network(&self, wanted: Option<&crate::JobNetwork>) -> crate::Result<()> {
        let wanted = wanted.map(|network| &network.asked);
        if wanted == self.network.as_ref() {
            return Ok(());
        }
        Err(crate::Error::invalid(
            "network",
            "the conversation's live sandbox keeps the network its first call had; close it (sandbox_session \
             close) to start one with another",
        ))
    }

    /// The sandbox's egress network, when it is on a leash.
    pub fn sandbox_egress(&self) -> Option<Arc<sandlot_egress::SandboxNetwork>> {
        self.sandbox.egress()
    }

    pub fn conversation(&self) -> &ConversationId {
        &self.conversation
    }

    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    pub fn sandbox_alive(&self) -> bool {
        !self.closed.load(Ordering::SeqCst) && self.sandbox.is_alive()
    }

    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst) > 0
    }

    pub fn last_used(&self) -> Instant {
        self.last_used.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Alive, not idle past the timeout (a busy one never is) and not past its lifetime.
    pub fn is_usable(&self, config: &SessionConfig) -> bool {
        self.sandbox_alive()
            && (self.is_busy() || self.last_used().elapsed() < config.idle)
            && self.started.elapsed() < config.max_lifetime
    }

    /// Why [`Live::is_usable`] is false, in the words a later call's notice uses.
    pub fn end_reason(&self, config: &SessionConfig) -> String {
        if self.closed.load(Ordering::SeqCst) {
            "closed".into()
        } else if !self.sandbox.is_alive() {
            "its sandbox ended by itself".into()
        } else if self.started.elapsed() >= config.max_lifetime {
            format!("it reached its maximum lifetime of {} s", config.max_lifetime.as_secs())
        } else {
            format!("idle for {} s", config.idle.as_secs())
        }
    }

    /// Ends the sandbox and notes why; true for the call that ended it.
    pub async fn close(&self, reason: &str) -> bool {
        if self.closed.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.sandbox.close().await;
        self.note(Some(reason));
        tracing::info!(session = self.id, conversation = %self.conversation, reason, "live sandbox ended");
        true
    }

    fn note(&self, ended: Option<&str>) {
        let note = marker::Marker {
            session: self.id.clone(),
            boot: self.boot.clone(),
            calls: ended.map(|_| self.calls.load(Ordering::SeqCst)),
            ended: ended.map(Into::into),
        };
        marker::write(&self.conversation_dir, &note);
    }

    fn begin(&self) -> BusyGuard<'_> {
        self.busy.fetch_add(1, Ordering::SeqCst);
        BusyGuard(&self.busy)
    }

    fn end_call(&self) -> u64 {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = (Instant::now(), SystemTime::now());
        self.calls.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// A cell in the language's interpreter, started first when there is none.
    pub async fn call(&self, job: Job, sink: &dyn OutputSink) -> Result<(RunOutcome, SessionReport)> {
        let _busy = self.begin();
        let mut interpreters = self.interpreters.lock().await;
        let key = driver::driver_language(job.language);
        let mut notice = interpreters.lost.remove(&key);
        if let std::collections::hash_map::Entry::Vacant(vacant) = interpreters.drivers.entry(key) {
            vacant.insert(Driver::start(self.sandbox.as_ref(), key).await?);
            self.refresh_snapshot(&interpreters);
        }
        let driver = interpreters.drivers.get_mut(&key).ok_or_else(|| crate::Error::invalid("language", "none"))?;
        let cell = call::run_cell(driver, &job, sink).await;
        let mut termination = cell.termination;
        if let Some(gone) = cell.gone {
            interpreters.drivers.remove(&key);
            let usage = self.sandbox.usage().await;
            let out_of_memory = usage.oom_kills > interpreters.oom_kills_seen;
            interpreters.oom_kills_seen = usage.oom_kills;
            if out_of_memory && !gone.interrupted {
                termination = crate::Termination::OutOfMemory;
            }
            let memory_mb = self.limits.lock().unwrap_or_else(|e| e.into_inner()).memory_mb;
            let cause = gone.cause(key, out_of_memory, memory_mb, &termination);
            let state = state_words(key);
            interpreters
                .lost
                .insert(key, format!("in the previous call {cause}, losing its {state}; this call ran in a new one"));
            let lost = format!("{cause}; its {state} are lost and the next call starts a new one");
            notice = Some(match notice {
                Some(earlier) => format!("{earlier}; then {lost}"),
                None => lost,
            });
        }
        self.refresh_snapshot(&interpreters);
        drop(interpreters);
        let calls = self.end_call();
        let outcome = crate::RunOutcome::from_streams(termination, cell.stdout, cell.stderr, cell.duration);
        Ok((outcome, self.report(calls, notice)))
    }

    /// A command as a process of its own (see `Sessions::run_process`).
    pub async fn run_process(&self, job: Job, sink: &dyn OutputSink) -> Result<(RunOutcome, SessionReport)> {
        let _busy = self.begin();
        let outcome = call::run_process(self.sandbox.as_ref(), &job, sink).await?;
        let calls = self.end_call();
        Ok((outcome, self.report(calls, None)))
    }

    fn report(&self, calls: u64, notice: Option<String>) -> SessionReport {
        SessionReport { id: self.id.clone(), calls, started_at: self.started_at, state_lost: notice.is_some(), notice }
    }

    /// An action in the sandbox's browser, started first when it has none (or its own has exited).
    pub async fn browser(&self, action: BrowserAction) -> BrowserResult {
        let _busy = self.begin();
        let mut browser = self.browser.lock().await;
        self.make_room_for_a_browser().await?;
        if browser.as_ref().is_some_and(|browser| !browser.is_alive()) {
            tracing::info!(session = self.id, "the browser had exited: a new one starts");
            *browser = None;
        }
        if browser.is_none() {
            *browser = Some(Browser::start(self.sandbox.as_ref()).await?);
            tracing::info!(session = self.id, conversation = %self.conversation, "browser started");
        }
        let mut result = match browser.as_mut() {
            Some(browser) => browser.perform(action.clone()).await,
            None => Err(BrowserFailure("the browser did not start".into())),
        };
        // A browser that died before the action (killed from inside the sandbox, crashed) is noticed by the action
        // itself: its pages are gone anyway, so a new one starts and the action runs once more, there.
        if result.is_err() && browser.as_ref().is_some_and(|browser| !browser.is_alive()) {
            tracing::info!(session = self.id, "the browser had exited: a new one starts");
            let mut fresh = Browser::start(self.sandbox.as_ref()).await?;
            result = fresh.perform(action).await;
            *browser = Some(fresh);
        }
        drop(browser);
        self.end_call();
        result
    }

    /// Raises the sandbox's memory and process limits to what a browser needs, when they are below (a sandbox
    /// started by a code call has the server's limits); a backend that cannot is told in the failure.
    async fn make_room_for_a_browser(&self) -> std::result::Result<(), BrowserFailure> {
        let limits = self.limits.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if crate::browser::too_small_for_a_browser(&limits).is_none() {
            return Ok(());
        }
        let wanted = crate::browser::browser_limits(&limits);
        match self.sandbox.raise_limits(wanted.memory_mb, wanted.pids).await {
            Ok(()) => {
                tracing::info!(
                    session = self.id,
                    memory_mb = wanted.memory_mb,
                    pids = wanted.pids,
                    "live sandbox's limits raised for a browser"
                );
                let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
                (limits.memory_mb, limits.pids) = (wanted.memory_mb, wanted.pids);
                Ok(())
            }
            Err(error) => {
                let why = crate::browser::too_small_for_a_browser(&limits).unwrap_or_default();
                Err(BrowserFailure(format!("{why} ({error})")))
            }
        }
    }

    /// Kills every interpreter (not the processes they started) and the browser; their next calls say why their
    /// state is gone.
    pub async fn restart_interpreters(&self, reason: &str) {
        if let Some(browser) = self.browser.lock().await.take() {
            browser.kill().await;
        }
        let mut interpreters = self.interpreters.lock().await;
        let drivers: Vec<_> = interpreters.drivers.drain().collect();
        for (language, driver) in drivers {
            driver.kill().await;
            let state = state_words(language);
            interpreters
                .lost
                .insert(language, format!("the {language} interpreter was {reason}: its {state} are gone"));
        }
        self.refresh_snapshot(&interpreters);
    }

    fn refresh_snapshot(&self, interpreters: &Interpreters) {
        let mut statuses: Vec<_> = interpreters.drivers.iter().map(|(language, d)| d.status(*language)).collect();
        statuses.sort_by_key(|status| status.language.to_string());
        *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = statuses;
    }

    pub async fn usage(&self) -> crate::SandboxUsage {
        self.sandbox.usage().await
    }

    pub async fn status(&self, config: &SessionConfig) -> SessionStatus {
        let (last_used, last_used_at) = *self.last_used.lock().unwrap_or_else(|e| e.into_inner());
        let idle_left = config.idle.saturating_sub(last_used.elapsed());
        let life_left = config.max_lifetime.saturating_sub(self.started.elapsed());
        let (processes, usage) = (self.sandbox.processes().await, self.sandbox.usage().await);
        let interpreters = self.snapshot.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let now = SystemTime::now();
        SessionStatus {
            id: self.id.clone(),
            conversation: self.conversation.clone(),
            started_at: self.started_at,
            last_used: last_used_at,
            calls: self.calls.load(Ordering::SeqCst),
            busy: self.is_busy(),
            idle_ends_at: now + if self.is_busy() { config.idle } else { idle_left.min(life_left) },
            ends_at: now + life_left,
            interpreters,
            processes,
            usage,
        }
    }
}

/// What an interpreter of `language` keeps between calls, for the notices that say it is lost.
fn state_words(language: Language) -> &'static str {
    match language {
        Language::Bash => "working directory, variables and functions",
        _ => "variables, functions and imports",
    }
}
