//! The orchestrator of one run: validate, record it, wait for its turn, prepare `/data`, run, list files, record
//! the end.

use std::sync::Arc;
use std::time::Duration;

use crate::admission::{Admission, Refusal};
use crate::history::NewRun;
use crate::ledger::Ledger;
use crate::readiness::ReadinessCache;
use crate::{
    Backend, ConversationId, Error, FileEntry, FileListing, History, Job, Language, Limits, OutputSink, Readiness,
    ReadinessCheck, Result, RunEvent, RunOutcome, RunRequest, RunnerInfo, Tenant, Termination, Workspaces,
};

/// Largest accepted `metadata` object, serialized, in bytes.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// The engine's knobs; the defaults match docs/configuration.md's tables.
/// The default of [`EngineConfig::result_text_bytes`]: 20 KiB.
pub const DEFAULT_RESULT_TEXT_BYTES: usize = 20 * 1024;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Limits of a run that asks for nothing special.
    pub limits: Limits,
    /// The longest timeout a request may ask for.
    pub max_timeout: Duration,
    /// Runs executing at once across all conversations; more wait in the queue.
    pub max_concurrent_runs: usize,
    /// Runs waiting at most; beyond, a run is refused as busy at once.
    pub max_queued: usize,
    /// The longest a run waits for its turn before it is refused as busy.
    pub queue_wait_limit: Duration,
    /// Largest accepted code (and stdin), in bytes.
    pub max_code_bytes: usize,
    /// Most files listed in a result.
    pub max_files_listed: usize,
    /// Most bytes of file paths listed in a result, all paths together (their URLs take about as much again).
    pub max_listed_path_bytes: usize,
    /// Bytes of output a tool result shows a model (as JSON, head and tail); the rest stays in the history.
    pub result_text_bytes: usize,
    /// Live sandboxes: how long they live, how many there may be (`session` runs).
    pub sessions: crate::SessionConfig,
    /// Where TypeScript becomes JavaScript: in the server, run by the JavaScript runner (the default), or by the
    /// backend's TypeScript runner.
    pub typescript: crate::TypeScriptMode,
    /// A binary that is the TypeScript transform's helper (its `main` calls
    /// [`crate::typescript::run_helper_if_asked`]; a server names itself): the transform runs there, so code that
    /// crashes it (a stack overflow) fails its run and nothing else. `None`: in a thread of this process, where such
    /// code aborts the process (for tests and embedders whose callers are trusted).
    pub typescript_helper: Option<std::path::PathBuf>,
    /// The server's egress policy and its tenants' narrowings (none by default: every run reaches loopback only;
    /// see `network`).
    pub egress: crate::EgressPolicies,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self::with(2 * std::thread::available_parallelism().map_or(1, usize::from), crate::SessionConfig::default())
    }
}

impl EngineConfig {
    /// The defaults for an engine that runs one job and exits (`sandlot run`): one place, no live sandbox, and none
    /// of the host probes the defaults make for them (the CPUs, the cgroup's CPU quota, `/proc/meminfo` twice: ~0.1
    /// ms on the path of every such run, docs/benchmarks.md).
    pub fn for_one_run() -> Self {
        Self::with(1, crate::SessionConfig::without_host_probe())
    }

    fn with(max_concurrent_runs: usize, sessions: crate::SessionConfig) -> Self {
        Self {
            limits: Limits::default(),
            max_timeout: Duration::from_secs(3600),
            max_concurrent_runs,
            max_queued: 256,
            queue_wait_limit: Duration::from_secs(60),
            max_code_bytes: 1024 * 1024,
            max_files_listed: 1000,
            max_listed_path_bytes: 64 * 1024,
            result_text_bytes: DEFAULT_RESULT_TEXT_BYTES,
            sessions,
            typescript: crate::TypeScriptMode::default(),
            typescript_helper: None,
            egress: crate::EgressPolicies::default(),
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
    /// When the run started (just before the backend got it): a listed file modified since was made or changed
    /// by the run (see `FileEntry::modified`).
    pub started_at: std::time::SystemTime,
    /// The live sandbox a `session` run ran in.
    pub session: Option<crate::SessionReport>,
}

/// Runs requests on a backend; shared by every face.
pub struct Engine {
    backend: Arc<dyn Backend>,
    workspaces: Workspaces,
    config: EngineConfig,
    admission: Admission,
    ledger: Ledger,
    readiness: ReadinessCache,
    uploads: Arc<crate::uploads::Uploads>,
    sessions: Arc<crate::Sessions>,
    /// The TypeScript transform's helpers (`config.typescript_helper`'s).
    typescript_helpers: Option<Arc<crate::typescript::Helpers>>,
}

impl Engine {
    /// An engine over `backend`, keeping conversations under `workspaces`, with no history.
    pub fn new(backend: Arc<dyn Backend>, workspaces: Workspaces, config: EngineConfig) -> Self {
        let admission = Admission::new(config.max_concurrent_runs, config.max_queued, config.queue_wait_limit);
        let (ledger, readiness, uploads) = (Ledger::new(None), ReadinessCache::default(), Default::default());
        let sessions = Arc::new(crate::Sessions::new(config.sessions.clone()));
        let typescript_helpers = config.typescript_helper.clone().map(crate::typescript::Helpers::new);
        Self { backend, workspaces, config, admission, ledger, readiness, uploads, sessions, typescript_helpers }
    }

    /// The same engine, recording every run in `history`.
    pub fn with_history(mut self, history: History) -> Self {
        self.ledger = Ledger::new(Some(history));
        self
    }

    /// Its live sandboxes follow `config` from now on; for an engine none of whose sandboxes is live yet.
    pub fn set_sessions(&mut self, config: crate::SessionConfig) {
        self.config.sessions = config.clone();
        self.sessions = Arc::new(crate::Sessions::new(config));
    }

    /// The run history, if this engine keeps one.
    pub fn history(&self) -> Option<&History> {
        self.ledger.history()
    }

    /// The runs executing now: (run id, conversation, language).
    pub fn in_flight(&self) -> Vec<(String, ConversationId, Language)> {
        self.ledger.in_flight()
    }

    /// A live feed of this node's run events from now on: for following a run this node runs.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<RunEvent> {
        self.ledger.subscribe()
    }

    /// A live feed of every node's run events (this node's alone without a shared history), each with its
    /// conversation's owner: for listeners who hear what their tenant owns.
    pub fn subscribe_owned(&self) -> tokio::sync::broadcast::Receiver<crate::OwnedEvent> {
        self.ledger.subscribe_owned()
    }

    /// The conversation directories.
    pub fn workspaces(&self) -> &Workspaces {
        &self.workspaces
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The runners of the languages runs can use: the backend's, where TypeScript's is the JavaScript runner when
    /// TypeScript is stripped in the server (whatever TypeScript runner the backend has, or none).
    pub fn runners(&self) -> Vec<RunnerInfo> {
        let mut runners = self.backend.runners();
        if self.config.typescript == crate::TypeScriptMode::Strip {
            runners.retain(|r| r.language != Language::TypeScript);
            if let Some(node) = runners.iter().find(|r| r.language == Language::JavaScript) {
                let typescript = RunnerInfo { language: Language::TypeScript, ..node.clone() };
                runners.push(typescript);
                runners.sort_by_key(|r| r.language);
            }
        }
        runners
    }

    /// The language whose runner the backend must have for a run in `language`: JavaScript for TypeScript stripped
    /// in the server (a live sandbox's cells too: see `session_code`).
    fn backend_language(&self, language: Language) -> Language {
        self.config.typescript.backend_language(language)
    }

    /// How many runs are executing now.
    pub fn active_runs(&self) -> usize {
        self.ledger.active_runs()
    }

    /// How many runs wait for their turn now.
    pub fn queued_runs(&self) -> usize {
        self.admission.waiting()
    }

    /// Kills every run still going (see [`Backend::abort_all`]) and ends every live sandbox; for a server that is
    /// about to exit.
    pub async fn abort_all(&self) {
        self.sessions.close_all("the server stopped").await;
        self.backend.abort_all().await;
    }

    /// The live sandboxes (`session` runs): their status, restart and close.
    pub fn sessions(&self) -> &crate::Sessions {
        &self.sessions
    }

    /// Whether the backend can keep a sandbox between calls (`session: true`).
    pub fn supports_sessions(&self) -> bool {
        self.backend.live().is_some()
    }

    /// Cleans up after a predecessor that crashed: runs it left in flight are marked interrupted in the history, and
    /// the sandboxes it left behind are removed ([`Backend::remove_leftovers`]). Returns the interrupted run ids.
    pub async fn recover(&self) -> Result<Vec<String>> {
        self.backend.remove_leftovers().await;
        // The conversations' budget is counted now (a walk of the root), not at the first new conversation.
        let workspaces = self.workspaces.clone();
        tokio::task::spawn_blocking(move || workspaces.budget())
            .await
            .map_err(|e| Error::io("count conversations", self.workspaces.root(), std::io::Error::other(e)))??;
        match self.history() {
            Some(history) => history.recover(),
            None => Ok(Vec::new()),
        }
    }

    /// Whether runs can start now: the backend's checks (or, for a backend without any, whether it has runners),
    /// reused for [`crate::READINESS_TTL`]; a backend that takes longer than [`crate::READINESS_TIMEOUT`] is not ready.
    pub async fn readiness(&self) -> Readiness {
        self.readiness
            .get(self.backend.name(), async {
                let checks = self.backend.readiness().await;
                if !checks.is_empty() {
                    return checks;
                }
                match self.runners().len() {
                    0 => vec![ReadinessCheck::failed("runners", "no runner: no language can run")],
                    n => vec![ReadinessCheck::ok("runners", format!("{n} languages"))],
                }
            })
            .await
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Who owns what runs may change on the host (see [`Backend::storage_owner`]).
    pub fn storage_owner(&self) -> Option<(u32, u32)> {
        self.backend.storage_owner()
    }

    /// Whether a writable volume of a run that ended holds more than its quota (a walk of each, off the async
    /// threads; one that cannot be measured is over).
    async fn volumes_over_quota(&self, mounts: Vec<crate::Mount>, limits: &Limits) -> bool {
        if mounts.iter().all(|mount| mount.read_only) {
            return false;
        }
        let limits = limits.clone();
        tokio::task::spawn_blocking(move || crate::volumes_over_quota(&mounts, &limits).unwrap_or(true))
            .await
            .unwrap_or(true)
    }

    /// The files a result lists: bounded in number and in bytes of paths. The walk blocks, so it runs on the
    /// blocking pool, never on the runtime's workers (a tree of many directories would stall every other request).
    async fn list_files(&self, conversation: &ConversationId) -> Result<FileListing> {
        let (workspaces, id) = (self.workspaces.clone(), conversation.clone());
        let (max_files, max_bytes) = (self.config.max_files_listed, self.config.max_listed_path_bytes);
        tokio::task::spawn_blocking(move || workspaces.list_within(&id, max_files, max_bytes))
            .await
            .map_err(|e| Error::io("list conversation directory", self.workspaces.files_dir(conversation), e.into()))?
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
        if let Some(metadata) = &request.metadata {
            validate_metadata(metadata)?;
        }
        if request.session.is_live() {
            if self.backend.live().is_none() {
                return Err(Error::invalid(
                    "session",
                    format!("the {} backend cannot keep a sandbox between calls", self.backend.name()),
                ));
            }
            if request.session == crate::SessionUse::Interpreter && !request.stdin.is_empty() {
                return Err(Error::invalid("stdin", "is not supported with session: true (the interpreter is shared)"));
            }
        }
        request.layout.validate()?;
        crate::mount::validate(&request.mounts, request.layout)?;
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

    /// Runs a request to its end. It waits its turn in the queue (runs of one conversation go one at a time, in
    /// arrival order); its timeout counts from its start. Dropping the future cancels the run.
    ///
    /// No tenant: no conversation owner is checked or recorded, and the run's place in the pool counts as tenant
    /// `""`'s. For the engine's single-user callers (`sandlot run`); every face that serves several tenants must
    /// use [`Engine::run_as`] instead.
    pub async fn run(&self, request: RunRequest, sink: &dyn OutputSink) -> Result<RunReport> {
        self.run_for(None, request, sink).await
    }

    /// [`Engine::run`] for `tenant`. The conversation is claimed for the tenant when it has no owner (a new one, or
    /// one made without tenants), and refused with [`Error::ConversationTaken`] when another tenant owns it (an
    /// admin may use any; see [`Engine::claim_conversation`]); a refused run is not recorded. The run's `caller` is
    /// the tenant's name when the request leaves it empty (the history gives a tenant the runs whose caller is its
    /// name), and its place in the pool is shared fairly with the other tenants' runs (see `admission`).
    pub async fn run_as(&self, tenant: &Tenant, request: RunRequest, sink: &dyn OutputSink) -> Result<RunReport> {
        self.run_for(Some(tenant), request, sink).await
    }

    async fn run_for(&self, tenant: Option<&Tenant>, request: RunRequest, sink: &dyn OutputSink) -> Result<RunReport> {
        let (conversation, language, limits, mut request) = self.validate(request)?;
        let leash = self.config.egress.leash_for(tenant.map(Tenant::name), &request.network)?;
        let backend_language = self.backend_language(language);
        if !self.backend.runners().iter().any(|r| r.language == backend_language) {
            return Err(Error::no_runner(language, self.runners().iter().map(|r| r.language)));
        }
        // Whose the run's events are: its tenant's (an admin's run: the conversation's owner); no tenant, no one's.
        let owner = match tenant {
            Some(tenant) => {
                let owner = self.workspaces.claim_owner(&conversation, tenant)?;
                if request.caller.is_empty() {
                    request.caller = tenant.name().to_owned();
                }
                Some(owner)
            }
            None => None,
        };
        let run_id = uuid::Uuid::new_v4().simple().to_string();
        let new_run = NewRun {
            id: &run_id,
            conversation: &conversation,
            caller: &request.caller,
            language,
            code: &request.code,
            metadata: request.metadata.as_ref(),
        };
        let mut entry = self.ledger.accept(new_run, owner);
        let queued_at = std::time::Instant::now();
        let pool_tenant = tenant.map_or("", Tenant::name);
        let waited = self.admission.wait_turn(&conversation, pool_tenant, request.alongside, &request.cancel).await;
        let mut turn = match waited {
            Ok(turn) => {
                metrics::histogram!(crate::run_metrics::QUEUE_WAIT).record(queued_at.elapsed().as_secs_f64());
                turn
            }
            Err(Refusal::Busy { reason, retry_after }) => {
                let error = Error::Busy { reason, retry_after };
                tracing::warn!(run_id, conversation = %conversation, %error, "run refused");
                entry.refuse(&error);
                return Err(error);
            }
            Err(Refusal::Cancelled) => {
                drop(entry); // recorded as cancelled
                let outcome = RunOutcome::empty(Termination::Cancelled, Duration::ZERO);
                let files = self.list_files(&conversation).await?;
                let started_at = std::time::SystemTime::now();
                return Ok(RunReport {
                    run_id,
                    conversation_id: conversation,
                    language,
                    limits,
                    outcome,
                    files,
                    started_at,
                    session: None,
                });
            }
        };
        // Held to the end of the run: the conversation cannot be removed meanwhile (see `delete_conversation`).
        crate::marks::mark("c.admitted");
        let (workspace, _claim) = self.claim(&conversation).await?;
        // Again with the conversation held, so it is the one the run gets: it may have been removed and made again
        // (by another tenant) while the run waited.
        if let Some(tenant) = tenant {
            match self.workspaces.claim_owner(&conversation, tenant) {
                // An admin's run goes to whoever owns the conversation now, and so do its events.
                Ok(owner) => entry.set_owner(owner),
                Err(error) => {
                    entry.fail(&error);
                    return Err(error);
                }
            }
        }
        crate::marks::mark("c.workspace");
        tracing::info!(run_id, conversation = %conversation, %language, "run started");
        entry.start();
        let (files_dir, mounts) = (workspace.clone(), request.mounts.clone());
        let helper = self.typescript_helpers.as_ref();
        let (job_language, code, es_module, env) = match (backend_language == language, request.session.is_live()) {
            (true, _) => (language, request.code, false, request.env),
            (false, false) => {
                let (code, es_module, env) = stripped(helper, request.code, request.env).await;
                (backend_language, code, es_module, env)
            }
            (false, true) => {
                let (language, code) = session_code(helper, request.code).await;
                (language, code, false, request.env)
            }
        };
        let job = Job {
            run_id: run_id.clone(),
            language: job_language,
            code,
            es_module,
            stdin: request.stdin,
            env,
            limits: limits.clone(),
            workspace,
            layout: request.layout,
            mounts: request.mounts,
            network: leash.map(|leash| crate::JobNetwork {
                leash,
                asked: request.network.clone(),
                tenant: pool_tenant.to_owned(),
                conversation: conversation.to_string(),
            }),
            cancel: request.cancel,
        };
        if request.alongside {
            turn.release_conversation(); // its place in the pool stays held to the end of the run
        }
        let started_at = std::time::SystemTime::now();
        let transformed = job.language != language;
        let (result, session) = self.execute(&conversation, pool_tenant, job, request.session, &entry.sink(sink)).await;
        if let (true, Some(helpers)) = (transformed, &self.typescript_helpers) {
            helpers.refill(); // the next TypeScript run's, started now that this one's run is over
        }
        let mut outcome = match result {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::error!(run_id, %error, "run failed");
                metrics::counter!(crate::run_metrics::BACKEND_ERRORS, "backend" => self.backend.name()).increment(1);
                entry.fail(&error);
                return Err(error);
            }
        };
        crate::marks::mark("c.backend_done");
        // One trip to the blocking pool for what the run left: whether `/data` is past its quota, what the
        // conversations' budget counts for it, and the files a result lists.
        let (workspaces, id, quota_limits) = (self.workspaces.clone(), conversation.clone(), limits.clone());
        let (max_files, max_bytes) = (self.config.max_files_listed, self.config.max_listed_path_bytes);
        let after = tokio::task::spawn_blocking(move || {
            let over_quota = crate::over_quota(&files_dir, &quota_limits);
            workspaces.remeasure(&id);
            (over_quota, workspaces.list_within(&id, max_files, max_bytes))
        })
        .await
        .map_err(|e| Error::io("list conversation directory", self.workspaces.files_dir(&conversation), e.into()));
        let (over_quota, files) = match after {
            Ok((over_quota, files)) => (over_quota, files),
            Err(error) => (false, Err(error)),
        };
        // A program that ended on its own past a quota: the kernel's `ENOSPC` on `/data`, or writes to a volume, came
        // before the watchdog's look.
        if matches!(outcome.termination, Termination::Exited { .. } | Termination::Signaled { .. })
            && (over_quota || self.volumes_over_quota(mounts, &limits).await)
        {
            outcome.termination = Termination::DiskQuotaExceeded;
        }
        self.admission.record_duration(outcome.duration);
        entry.finish(&outcome);
        let files = files?;
        tracing::info!(
            run_id,
            exit_code = outcome.exit_code(),
            termination = outcome.termination.kind(),
            duration_ms = outcome.duration.as_millis() as u64,
            files = files.files.len(),
            "run finished"
        );
        Ok(RunReport { run_id, conversation_id: conversation, language, limits, outcome, files, started_at, session })
    }

    /// Does `action` in the conversation's browser, for `tenant` (the conversation claimed or checked as a run's):
    /// Chromium in its live sandbox, started on first use. A live sandbox started here gets the limits a browser
    /// needs (`browser::browser_limits`) and `layout`, which the conversation's later session runs share. A
    /// browser's failure is `Ok(Err(..))`; an error is the engine's (no live sandboxes, another tenant's
    /// conversation, too many live sandboxes busy).
    pub async fn browser_as(
        &self,
        tenant: &Tenant,
        conversation: &ConversationId,
        layout: crate::Layout,
        action: crate::BrowserAction,
    ) -> Result<crate::BrowserResult> {
        let Some(live) = self.backend.live() else {
            return Err(Error::invalid(
                "conversationId",
                format!("the {} backend cannot keep a sandbox, so it has no browser", self.backend.name()),
            ));
        };
        // A live sandbox started here has the server's policy as it is, as a run that asks nothing of the network;
        // one already started keeps its own, and the browser uses it.
        let asked = crate::NetworkUse::Server;
        let leash = self.config.egress.leash_for(Some(tenant.name()), &asked)?;
        self.workspaces.claim_owner(conversation, tenant)?;
        // Held to the end of the action: the conversation cannot be removed meanwhile.
        let (workspace, _claim) = self.claim(conversation).await?;
        self.workspaces.claim_owner(conversation, tenant)?;
        let network = leash.map(|leash| crate::JobNetwork {
            leash,
            asked,
            tenant: tenant.name().to_owned(),
            conversation: conversation.to_string(),
        });
        let parts = crate::sessions::SandboxParts {
            conversation: conversation.clone(),
            tenant: tenant.name().to_owned(),
            conversation_dir: self.workspaces.root().join(conversation.as_str()),
            limits: crate::browser::browser_limits(&self.config.limits),
            workspace,
            layout,
            mounts: Vec::new(),
            network,
        };
        self.sessions.browser(live, parts, action).await
    }

    /// Runs a job: in a fresh sandbox, or in the conversation's live sandbox (in its interpreter, or as a process of
    /// its own).
    async fn execute(
        &self,
        conversation: &ConversationId,
        tenant: &str,
        job: Job,
        session: crate::SessionUse,
        sink: &dyn OutputSink,
    ) -> (Result<RunOutcome>, Option<crate::SessionReport>) {
        let live = match (session.is_live(), self.backend.live()) {
            (true, Some(live)) => live,
            _ => return (self.backend.run(job, sink).await, None),
        };
        let parts = crate::sessions::SandboxParts {
            conversation: conversation.clone(),
            tenant: tenant.to_owned(),
            conversation_dir: self.workspaces.root().join(conversation.as_str()),
            limits: job.limits.clone(),
            workspace: job.workspace.clone(),
            layout: job.layout,
            mounts: job.mounts.clone(),
            network: job.network.clone(),
        };
        let ran = self.sessions.run(live, job, parts, session, sink).await;
        match ran {
            Ok((outcome, report)) => (Ok(outcome), Some(report)),
            Err(error) => (Err(error), None),
        }
    }
}

/// TypeScript `code` as the JavaScript runner runs it, whether it is an ES module, and the run's environment
/// (`NODE_OPTIONS` with source maps when the code was transformed, not only stripped: see `typescript`). In the
/// `helper` process when there is one, else off the async threads (a large program takes milliseconds).
async fn stripped(
    helper: Option<&Arc<crate::typescript::Helpers>>,
    code: String,
    mut env: std::collections::BTreeMap<String, String>,
) -> (String, bool, std::collections::BTreeMap<String, String>) {
    let javascript = transform(helper, code).await;
    if javascript.source_mapped {
        let options = crate::typescript::with_source_maps(env.get("NODE_OPTIONS").map(String::as_str));
        env.insert("NODE_OPTIONS".to_owned(), options);
    }
    (javascript.code, javascript.module, env)
}

/// A TypeScript cell of a live sandbox (or its command of its own) as the JavaScript its node driver runs: stripped
/// in the server when it is a script (no `import`, `export` or top-level `await`) that parses. Otherwise the
/// TypeScript itself, which the driver converts with esbuild (module syntax to CommonJS, and its own error message),
/// as it did before the server stripped anything.
async fn session_code(helper: Option<&Arc<crate::typescript::Helpers>>, code: String) -> (Language, String) {
    let javascript = transform(helper, code.clone()).await;
    match javascript.module || javascript.failed {
        true => (Language::TypeScript, code),
        false => (Language::JavaScript, javascript.code),
    }
}

/// [`crate::typescript::to_javascript`] in a `helper` process when there are helpers, else off the async threads.
async fn transform(helper: Option<&Arc<crate::typescript::Helpers>>, code: String) -> crate::typescript::JavaScript {
    match helper {
        Some(helpers) => helpers.to_javascript(code).await,
        None => match tokio::task::spawn_blocking(move || crate::typescript::to_javascript(&code)).await {
            Ok(javascript) => javascript,
            // `to_javascript` catches the transformer's panics; a task that failed anyway is reported like them.
            Err(_) => crate::typescript::reporting("error: the TypeScript transform failed on this program\n"),
        },
    }
}

/// What [`Engine::delete_conversation`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deletion {
    /// The conversation had a directory, now removed.
    pub files_removed: bool,
    /// Runs removed from the history.
    pub runs_removed: usize,
}

impl Engine {
    /// The conversation's directory, claimed for a run ([`Workspaces::try_claim`]); waits while it is being removed
    /// (by another process on the same root: this one's removals hold the conversation's turn, which the run has).
    /// Off the async threads: a conversation's first use makes and mounts its disk image (`mkfs.ext4` and `mount`,
    /// tens of milliseconds).
    async fn claim(&self, conversation: &ConversationId) -> Result<(std::path::PathBuf, crate::Claim)> {
        loop {
            let (workspaces, id) = (self.workspaces.clone(), conversation.clone());
            let claimed = tokio::task::spawn_blocking(move || workspaces.try_claim(&id))
                .await
                .map_err(|e| Error::io("claim conversation", self.workspaces.files_dir(conversation), e.into()))??;
            if let Some(claimed) = claimed {
                return Ok(claimed);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Claims the conversation for `tenant` when it has no owner, or checks the tenant may use it: its own, or any
    /// for an admin; else [`Error::ConversationTaken`]. An admin's first use of a new id makes the admin its owner.
    /// For a face that writes into a conversation outside a run (an upload, a profile's workspace), before it
    /// writes; [`Engine::run_as`] does it itself.
    pub fn claim_conversation(&self, tenant: &Tenant, id: &ConversationId) -> Result<()> {
        self.workspaces.claim_owner(id, tenant).map(drop)
    }

    /// Checks that `tenant` may see the conversation: for a face that reads, lists, downloads or deletes, before it
    /// does. `Ok` when the tenant owns it or is an admin, and when it has no owner or does not exist (the read then
    /// finds nothing of a tenant's); [`Error::ConversationHidden`] when another tenant owns it, which the face must
    /// answer exactly as a conversation that does not exist. Records nothing.
    pub fn check_conversation(&self, tenant: &Tenant, id: &ConversationId) -> Result<()> {
        match self.workspaces.owner(id)? {
            Some(owner) if !tenant.may_use(&owner) => Err(Error::ConversationHidden { id: id.to_string() }),
            _ => Ok(()),
        }
    }

    /// The name of the tenant that owns the conversation, if any (see [`Workspaces::owner`]); for listings.
    pub fn owner_of(&self, id: &ConversationId) -> Result<Option<String>> {
        self.workspaces.owner(id)
    }

    /// Writes an uploaded file held in memory (a tool's argument) to `path` in the conversation's `/data`: an
    /// [`Engine::begin_upload`] of exactly its size, written and finished.
    pub async fn upload_file(&self, conversation: &ConversationId, path: &str, bytes: Vec<u8>) -> Result<FileEntry> {
        let mut upload = self.begin_upload(conversation, path, crate::UploadSize::Exactly(bytes.len() as u64)).await?;
        upload.write(&bytes).await?;
        let written = upload.finish().await?;
        tracing::info!(conversation = %conversation, path = %written.path, size = written.size, "file uploaded");
        Ok(written)
    }

    /// Starts an upload to `path` in the conversation's `/data` (symlink-safe, owned by the backend's storage uid;
    /// see `uploads.rs`): admitted only when what `/data` holds, plus what the conversation's uploads in flight
    /// promised, plus `size`, fits the disk quota ([`Error::QuotaExceeded`]), and when the conversation has fewer
    /// than [`crate::MAX_UPLOADS_PER_CONVERSATION`] in flight ([`Error::Busy`]). Nothing of the body is read yet.
    /// The conversation is claimed until the upload ends, so it is not removed under it; a run of it may go on
    /// meanwhile (the claim is shared) and sees the file whole or not at all.
    pub async fn begin_upload(
        &self,
        conversation: &ConversationId,
        path: &str,
        size: crate::UploadSize,
    ) -> Result<crate::Upload> {
        crate::workspaces::validate_upload_path(path)?;
        let (_files, claim) = self.claim(conversation).await?;
        let uploads = self.uploads.clone();
        let workspaces = self.workspaces.clone();
        let owner = self.backend.storage_owner();
        let limits = &self.config.limits;
        let (quota_bytes, max_inodes) = (limits.disk_mb * 1024 * 1024, limits.disk_inodes);
        let (id, path) = (conversation.clone(), path.to_owned());
        tokio::task::spawn_blocking(move || {
            crate::uploads::admit(crate::uploads::Admission {
                uploads: &uploads,
                workspaces: &workspaces,
                id: &id,
                path: &path,
                size,
                owner,
                quota_bytes,
                max_inodes,
                claim,
            })
        })
        .await
        .map_err(|e| Error::io("write file", self.workspaces.root(), std::io::Error::other(e)))?
    }

    /// Removes a conversation: its directory (every file of its `/data`) and its runs in the history. Refused with
    /// [`Error::ConversationBusy`] while a run of it is executing or waiting for its turn, in this process or in
    /// another on the same root; [`Error::ConversationNotFound`] when there was nothing to remove. A run that
    /// comes after gets a new, empty `/data`.
    ///
    /// Race-free with runs: this holds the conversation's turn (so no run of it starts here meanwhile) and an
    /// exclusive lock on its directory (which every run holds shared from before its sandbox starts to after it
    /// ended, see [`Workspaces::try_claim`]).
    pub async fn delete_conversation(&self, conversation: &ConversationId) -> Result<Deletion> {
        self.delete_unused_since(conversation, None).await
    }

    /// [`Engine::delete_conversation`]; with `unused_since`, only if the conversation was not used after it
    /// (checked once nothing can use it any more), else [`Error::ConversationBusy`].
    async fn delete_unused_since(
        &self,
        conversation: &ConversationId,
        unused_since: Option<std::time::SystemTime>,
    ) -> Result<Deletion> {
        let busy = || Error::ConversationBusy { id: conversation.to_string() };
        let Some(turn) = self.admission.try_hold(conversation) else { return Err(busy()) };
        if unused_since.is_some() && self.sessions.status(conversation).await.is_some() {
            return Err(busy()); // its live sandbox is in use, however quiet its files are
        }
        self.sessions.close(conversation, "its conversation was deleted").await;
        self.backend.forget_conversation(&self.workspaces.files_dir(conversation)).await;
        if let Some(history) = self.history() {
            if history.has_live_runs(conversation)? {
                return Err(busy());
            }
            if let Some(cutoff) = unused_since
                && history.last_activity_of(conversation)?.is_some_and(|used| used >= cutoff)
            {
                return Err(busy());
            }
        }
        let workspaces = self.workspaces.clone();
        let id = conversation.clone();
        let files_removed = tokio::task::spawn_blocking(move || {
            let removed = workspaces.remove_unused_since(&id, unused_since);
            drop(turn);
            removed
        })
        .await
        .map_err(|e| Error::io("remove conversation directory", self.workspaces.root(), std::io::Error::other(e)))??;
        let runs_removed = match self.history() {
            Some(history) => history.delete_conversation(conversation)?,
            None => 0,
        };
        if !files_removed && runs_removed == 0 {
            return Err(Error::ConversationNotFound { id: conversation.to_string() });
        }
        tracing::info!(conversation = %conversation, files_removed, runs_removed, "conversation deleted");
        Ok(Deletion { files_removed, runs_removed })
    }

    /// Removes every conversation not used for `ttl` (its directory's last use and its latest run in the history
    /// both older), skipping those with a run going or queued; returns the ids removed.
    pub async fn remove_idle_conversations(&self, ttl: Duration) -> Result<Vec<ConversationId>> {
        let workspaces = self.workspaces.clone();
        let found = tokio::task::spawn_blocking(move || workspaces.conversations())
            .await
            .map_err(|e| Error::io("list conversations", self.workspaces.root(), std::io::Error::other(e)))??;
        let history_activity = match self.history() {
            Some(history) => history.last_activity()?,
            None => Default::default(),
        };
        let now = std::time::SystemTime::now();
        let Some(cutoff) = now.checked_sub(ttl) else { return Ok(Vec::new()) };
        let mut removed = Vec::new();
        for (conversation, used) in found {
            let used = history_activity.get(conversation.as_str()).map_or(used, |&last_run| used.max(last_run));
            if used >= cutoff {
                continue;
            }
            match self.delete_unused_since(&conversation, Some(cutoff)).await {
                Ok(_) => {
                    tracing::info!(conversation = %conversation, ttl_secs = ttl.as_secs(), "idle conversation removed");
                    removed.push(conversation);
                }
                Err(Error::ConversationBusy { .. } | Error::ConversationNotFound { .. }) => {}
                Err(error) => {
                    tracing::warn!(conversation = %conversation, %error, "cannot remove an idle conversation")
                }
            }
        }
        Ok(removed)
    }
}

/// `metadata` is a JSON object of at most [`MAX_METADATA_BYTES`] serialized.
fn validate_metadata(metadata: &serde_json::Value) -> Result<()> {
    if !metadata.is_object() {
        return Err(Error::invalid("metadata", "must be a JSON object"));
    }
    let size = metadata.to_string().len();
    if size > MAX_METADATA_BYTES {
        return Err(Error::invalid("metadata", format!("is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}")));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use async_trait::async_trait;

    use super::*;

    /// Runs nothing: it writes the code to `ran` in `/data` and ends with exit code 0.
    struct Recorder;

    #[async_trait]
    impl Backend for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }

        fn runners(&self) -> Vec<RunnerInfo> {
            vec![RunnerInfo {
                language: Language::Python,
                image: "python3".into(),
                version: "3".into(),
                packages: Default::default(),
            }]
        }

        async fn run(&self, job: Job, _sink: &dyn OutputSink) -> Result<RunOutcome> {
            std::fs::write(job.workspace.join("ran"), &job.code).map_err(|e| Error::io("write", &job.workspace, e))?;
            Ok(RunOutcome::empty(Termination::Exited { code: 0 }, Duration::ZERO))
        }
    }

    fn engine(root: &std::path::Path) -> Engine {
        let history = History::open(root.join("history.db"), false).unwrap();
        Engine::new(Arc::new(Recorder), Workspaces::new(root.join("data")), EngineConfig::default())
            .with_history(history)
    }

    fn request(conversation: &str, code: &str) -> RunRequest {
        RunRequest {
            conversation_id: conversation.into(),
            language: "python".into(),
            code: code.into(),
            ..RunRequest::default()
        }
    }

    fn id(name: &str) -> ConversationId {
        ConversationId::parse(name).unwrap()
    }

    /// The file listing after every run walked the conversation on the runtime's worker thread: a tree of many
    /// directories held every other task of the server for the walk's whole time. On this single-threaded runtime a
    /// task ticking every millisecond measures it: now the walk is on the blocking pool and the ticker is never held
    /// for half the run's time (before, it was held for nearly all of it).
    #[tokio::test]
    async fn the_listing_after_a_run_does_not_hold_the_runtime() {
        let root = tempfile::tempdir_in("/dev/shm").unwrap();
        let engine = engine(root.path());
        let files = engine.workspaces().files_dir(&id("c"));
        std::fs::create_dir_all(&files).unwrap();
        for i in 0..crate::MAX_VISITED_ENTRIES {
            std::fs::create_dir(files.join(format!("d{i}"))).unwrap();
        }
        let longest = Arc::new(std::sync::Mutex::new(Duration::ZERO));
        let ticker = tokio::spawn({
            let longest = longest.clone();
            async move {
                let mut last = std::time::Instant::now();
                loop {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let mut longest = longest.lock().unwrap();
                    *longest = (*longest).max(last.elapsed());
                    last = std::time::Instant::now();
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(5)).await; // the ticker is running
        let started = std::time::Instant::now();
        let report = engine.run(request("c", "1"), &()).await.unwrap();
        let took = started.elapsed();
        tokio::time::sleep(Duration::from_millis(50)).await; // the ticker sees the last gap too
        ticker.abort();
        let longest = *longest.lock().unwrap();
        assert!(report.files.truncated, "the walk stops at MAX_VISITED_ENTRIES");
        assert!(longest < took / 2, "the runtime was held {longest:?} of the run's {took:?}");
    }

    #[tokio::test]
    async fn a_run_into_another_tenants_conversation_is_refused_and_not_recorded() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine(root.path());
        let (alice, bob, admin) = (Tenant::new("alice"), Tenant::new("bob"), Tenant::admin("root"));
        let report = engine.run_as(&alice, request("c", "alice's"), &()).await.unwrap();
        assert_eq!(engine.owner_of(&id("c")).unwrap().as_deref(), Some("alice"));
        let history = engine.history().unwrap();
        assert_eq!(history.get(&report.run_id).unwrap().unwrap().caller, "alice", "the tenant named the caller");

        let refused = engine.run_as(&bob, request("c", "bob's"), &()).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            "conversation \"c\" is not available to this caller; use another conversationId"
        );
        assert!(matches!(refused, Error::ConversationTaken { .. }), "{refused:?}");
        assert_eq!(history.list(None, 10).unwrap().len(), 1, "the refused run is not in the history");
        let files = engine.workspaces().files_dir(&id("c"));
        assert_eq!(std::fs::read_to_string(files.join("ran")).unwrap(), "alice's");

        // An admin uses it (and keeps the caller it was given); it stays alice's.
        let run = RunRequest { caller: "console".into(), ..request("c", "admin's") };
        let report = engine.run_as(&admin, run, &()).await.unwrap();
        assert_eq!(history.get(&report.run_id).unwrap().unwrap().caller, "console");
        assert_eq!(engine.owner_of(&id("c")).unwrap().as_deref(), Some("alice"));

        // Without a tenant nothing is checked or recorded.
        engine.run(request("c", "cli's"), &()).await.unwrap();
        engine.run(request("d", "cli's"), &()).await.unwrap();
        assert_eq!(engine.owner_of(&id("d")).unwrap(), None);
        // The next tenant to use it owns it.
        engine.run_as(&bob, request("d", "bob's"), &()).await.unwrap();
        assert_eq!(engine.owner_of(&id("d")).unwrap().as_deref(), Some("bob"));
    }

    #[tokio::test]
    async fn another_tenants_conversation_reads_as_missing_and_cannot_be_claimed() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine(root.path());
        let (alice, bob, admin) = (Tenant::new("alice"), Tenant::new("bob"), Tenant::admin("root"));
        engine.claim_conversation(&alice, &id("c")).unwrap();
        let missing = Error::ConversationNotFound { id: "c".into() }.to_string();
        let hidden = engine.check_conversation(&bob, &id("c")).unwrap_err();
        assert!(matches!(&hidden, Error::ConversationHidden { id } if id == "c"), "{hidden:?}");
        assert_eq!(hidden.to_string(), missing);
        engine.check_conversation(&alice, &id("c")).unwrap();
        engine.check_conversation(&admin, &id("c")).unwrap();
        // An id that does not exist, or has no owner, is no one's: the read finds nothing of a tenant's.
        engine.check_conversation(&bob, &id("never")).unwrap();
        engine.workspaces().prepare(&id("old")).unwrap();
        engine.check_conversation(&bob, &id("old")).unwrap();
        assert_eq!(engine.owner_of(&id("old")).unwrap(), None, "a check records nothing");

        let taken = engine.claim_conversation(&bob, &id("c")).unwrap_err();
        assert!(matches!(&taken, Error::ConversationTaken { conversation } if conversation == "c"), "{taken:?}");
        engine.claim_conversation(&bob, &id("old")).unwrap();
        assert_eq!(engine.owner_of(&id("old")).unwrap().as_deref(), Some("bob"));
        engine.claim_conversation(&admin, &id("old")).unwrap();
        assert_eq!(engine.owner_of(&id("old")).unwrap().as_deref(), Some("bob"));
    }

    #[tokio::test]
    async fn deleting_a_conversation_removes_its_owner() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine(root.path());
        engine.run_as(&Tenant::new("alice"), request("c", "x"), &()).await.unwrap();
        engine.delete_conversation(&id("c")).await.unwrap();
        assert_eq!(engine.owner_of(&id("c")).unwrap(), None);
        engine.run_as(&Tenant::new("bob"), request("c", "y"), &()).await.unwrap();
        assert_eq!(engine.owner_of(&id("c")).unwrap().as_deref(), Some("bob"));
    }

    #[tokio::test]
    async fn an_idle_conversation_goes_with_its_owner() {
        let root = tempfile::tempdir().unwrap();
        let engine = engine(root.path());
        engine.claim_conversation(&Tenant::new("alice"), &id("idle")).unwrap();
        let files = engine.workspaces().prepare(&id("idle")).unwrap();
        let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        for dir in [files.parent().unwrap(), files.as_path()] {
            std::fs::File::open(dir).unwrap().set_modified(an_hour_ago).unwrap();
        }
        assert_eq!(engine.remove_idle_conversations(Duration::from_secs(60)).await.unwrap(), [id("idle")]);
        assert_eq!(engine.owner_of(&id("idle")).unwrap(), None);
        engine.claim_conversation(&Tenant::new("bob"), &id("idle")).unwrap();
        assert_eq!(engine.owner_of(&id("idle")).unwrap().as_deref(), Some("bob"));
    }
}
