//! The orchestrator of one run: validate, lock the conversation, take a permit, prepare `/data`, run, list files.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::{
    Backend, ConversationId, EVENT_BUFFER, Error, FileListing, Job, Language, Limits, OutputSink, Result, RunEvent,
    RunOutcome, RunRequest, RunnerInfo, Workspaces,
};

/// The engine's knobs; the defaults match DESIGN.md's table.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Limits of a run that asks for nothing special.
    pub limits: Limits,
    /// The longest timeout a request may ask for.
    pub max_timeout: Duration,
    /// Runs executing at once across all conversations; more wait for a permit.
    pub max_concurrent_runs: usize,
    /// Largest accepted code (and stdin), in bytes.
    pub max_code_bytes: usize,
    /// Most files listed in a result.
    pub max_files_listed: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_timeout: Duration::from_secs(3600),
            max_concurrent_runs: 8,
            max_code_bytes: 1024 * 1024,
            max_files_listed: 1000,
        }
    }
}

/// What a finished run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub run_id: String,
    pub conversation_id: ConversationId,
    pub language: Language,
    pub limits: Limits,
    pub outcome: RunOutcome,
    /// Every file in `/data` after the run.
    pub files: FileListing,
}

/// Runs requests on a backend; shared by every face.
pub struct Engine {
    backend: Arc<dyn Backend>,
    workspaces: Workspaces,
    config: EngineConfig,
    permits: Semaphore,
    conversations: Mutex<HashMap<ConversationId, Weak<tokio::sync::Mutex<()>>>>,
    events: tokio::sync::broadcast::Sender<RunEvent>,
    /// Runs executing now: run id → (conversation, language).
    in_flight: Mutex<HashMap<String, (ConversationId, Language)>>,
}

/// Removes a run from the in-flight table however its future ends (finished, failed or dropped). A run whose future
/// is dropped before it ended was cancelled (its caller went away or cancelled the request; dropping the backend's
/// future kills the sandbox): that is logged and announced as a `Cancelled` end.
struct InFlight<'a> {
    engine: &'a Engine,
    run_id: String,
    conversation: ConversationId,
    language: Language,
    started: std::time::Instant,
    ended: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.engine.in_flight_table().remove(&self.run_id);
        if !self.ended {
            tracing::info!(run_id = self.run_id, conversation = %self.conversation, "run cancelled");
            let outcome = RunOutcome {
                termination: crate::Termination::Cancelled,
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
                duration: self.started.elapsed(),
            };
            let event = RunEvent::finished(&self.run_id, self.conversation.as_str(), self.language, &outcome);
            let _ = self.engine.events.send(event);
        }
    }
}

impl Engine {
    /// An engine over `backend`, keeping conversations under `workspaces`.
    pub fn new(backend: Arc<dyn Backend>, workspaces: Workspaces, config: EngineConfig) -> Self {
        let permits = Semaphore::new(config.max_concurrent_runs.max(1));
        let (events, _) = tokio::sync::broadcast::channel(EVENT_BUFFER);
        let (conversations, in_flight) = (Mutex::new(HashMap::new()), Mutex::new(HashMap::new()));
        Self { backend, workspaces, config, permits, conversations, events, in_flight }
    }

    fn in_flight_table(&self) -> std::sync::MutexGuard<'_, HashMap<String, (ConversationId, Language)>> {
        self.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The runs executing now: (run id, conversation, language).
    pub fn in_flight(&self) -> Vec<(String, ConversationId, Language)> {
        let table = self.in_flight_table();
        table.iter().map(|(id, (conversation, language))| (id.clone(), conversation.clone(), *language)).collect()
    }

    /// A live feed of run events from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<RunEvent> {
        self.events.subscribe()
    }

    /// The conversation directories.
    pub fn workspaces(&self) -> &Workspaces {
        &self.workspaces
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The backend's runners.
    pub fn runners(&self) -> Vec<RunnerInfo> {
        self.backend.runners()
    }

    /// How many runs are executing now.
    pub fn active_runs(&self) -> usize {
        self.in_flight_table().len()
    }

    /// Kills every run still going (see [`Backend::abort_all`]); for a server that is about to exit.
    pub async fn abort_all(&self) {
        self.backend.abort_all().await;
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Validates a request into a job's parts without running anything.
    fn validate(&self, request: RunRequest) -> Result<(ConversationId, Language, Limits, RunRequest)> {
        let conversation = ConversationId::parse(&request.conversation_id)?;
        let language: Language = request.language.parse()?;
        if request.code.trim().is_empty() {
            return Err(Error::invalid("code", "must not be empty"));
        }
        if request.code.len() > self.config.max_code_bytes {
            return Err(Error::invalid(
                "code",
                format!("is {} bytes; the limit is {}", request.code.len(), self.config.max_code_bytes),
            ));
        }
        if request.stdin.len() > self.config.max_code_bytes {
            return Err(Error::invalid(
                "stdin",
                format!("is {} bytes; the limit is {}", request.stdin.len(), self.config.max_code_bytes),
            ));
        }
        for (name, value) in &request.env {
            validate_env(name, value)?;
        }
        let mut limits = self.config.limits.clone();
        if let Some(timeout) = request.timeout {
            if timeout.is_zero() {
                return Err(Error::invalid("timeoutSeconds", "must be positive"));
            }
            if timeout > self.config.max_timeout {
                return Err(Error::invalid(
                    "timeoutSeconds",
                    format!("is {} s; the limit is {} s", timeout.as_secs_f64(), self.config.max_timeout.as_secs()),
                ));
            }
            limits.timeout = timeout;
        }
        Ok((conversation, language, limits, request))
    }

    fn conversation_lock(&self, id: &ConversationId) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.conversations.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        map.retain(|_, weak| weak.strong_count() > 0);
        if let Some(lock) = map.get(id).and_then(Weak::upgrade) {
            return lock;
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(id.clone(), Arc::downgrade(&lock));
        lock
    }

    /// Runs a request to its end. Runs of one conversation happen one at a time, in arrival order.
    pub async fn run(&self, request: RunRequest, sink: &dyn OutputSink) -> Result<RunReport> {
        let (conversation, language, limits, request) = self.validate(request)?;
        let runners = self.backend.runners();
        if !runners.iter().any(|r| r.language == language) {
            return Err(Error::no_runner(language, runners.iter().map(|r| r.language)));
        }
        let lock = self.conversation_lock(&conversation);
        let _turn = lock.lock().await;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::Backend { backend: self.backend.name(), message: "engine is shutting down".into() })?;
        let workspace = self.workspaces.prepare(&conversation)?;
        let run_id = uuid::Uuid::new_v4().simple().to_string();
        tracing::info!(run_id, conversation = %conversation, %language, "run started");
        self.in_flight_table().insert(run_id.clone(), (conversation.clone(), language));
        let mut in_flight = InFlight {
            engine: self,
            run_id: run_id.clone(),
            conversation: conversation.clone(),
            language,
            started: std::time::Instant::now(),
            ended: false,
        };
        let _ = self.events.send(RunEvent::Started {
            run_id: run_id.clone(),
            conversation_id: conversation.to_string(),
            language,
        });
        let job = Job {
            run_id: run_id.clone(),
            language,
            code: request.code,
            stdin: request.stdin,
            env: request.env,
            limits: limits.clone(),
            workspace,
            cancel: request.cancel,
        };
        let result = self.backend.run(job, sink).await;
        in_flight.ended = true;
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::error!(run_id, %error, "run failed");
                let _ = self.events.send(RunEvent::Failed {
                    run_id: run_id.clone(),
                    conversation_id: conversation.to_string(),
                    language,
                    error: error.to_string(),
                });
                return Err(error);
            }
        };
        let _ = self.events.send(RunEvent::finished(&run_id, conversation.as_str(), language, &outcome));
        let files = self.workspaces.list(&conversation, self.config.max_files_listed)?;
        tracing::info!(
            run_id,
            exit_code = outcome.exit_code(),
            termination = ?outcome.termination,
            duration_ms = outcome.duration.as_millis() as u64,
            files = files.files.len(),
            "run finished"
        );
        Ok(RunReport { run_id, conversation_id: conversation, language, limits, outcome, files })
    }
}

/// Environment variable names are `[A-Za-z_][A-Za-z0-9_]*`; values have no NUL byte.
fn validate_env(name: &str, value: &str) -> Result<()> {
    let valid_name = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid_name {
        return Err(Error::invalid("env", format!("{name:?} is not a valid variable name")));
    }
    if value.contains('\0') {
        return Err(Error::invalid("env", format!("the value of {name} contains a NUL byte")));
    }
    Ok(())
}
