//! The host side: the native [`Backend`]. It lives in the server (or `sandlot run`), gets an init per run from its
//! [`launch::Launcher`], and owns everything that must hold even if the sandbox misbehaves: limits (cgroups, a uid
//! per run), the deadline, the disk quota, output caps and the final kill (see [`run::Run`]). It also keeps live
//! sandboxes, which stay up between calls ([`live`]).

mod ahead;
mod ahead_pool;
mod cgroup;
mod check;
mod child;
mod container;
mod doctor;
mod ending;
mod error;
mod idmapped_trees;
mod init_process;
mod launch;
mod leashed;
mod live;
mod live_build;
mod live_forked;
mod live_pool;
mod live_process;
mod live_sandbox;
mod live_state;
mod live_usage;
mod live_waiting;
mod netns_pool;
mod prepared;
mod prepared_pool;
mod processes;
mod python_template;
mod run;
mod runners;
mod spec;
mod template_child;
mod template_process;
mod uids;
mod warm_pool;
mod zygote;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use sandlot_core::{Backend, Job, Language, OutputSink, ReadinessCheck, RunOutcome, RunnerInfo, Termination};

pub use cgroup::CgroupSupport;
pub use check::{Check, CheckStatus};
pub use doctor::diagnose;
pub use error::{Error, Result};
pub use init_process::init_pipes;
pub use launch::{ForkedInit, ProcessModel};
pub use runners::{
    HostRunner, RefusedRunner, RunnerOverrides, discover_runners, find_esbuild, protected_dirs, screen_runners,
};
pub use uids::{DEFAULT_UIDS, UidRange};

use crate::protocol::{Identity, InitEvent, SkeletonRequest};
use ahead_pool::AheadPool;
pub use ahead_pool::IDLE as AHEAD_IDLE;
use ending::{Evidence, Waited};
use idmapped_trees::IdmappedTrees;
use launch::Launcher;
pub use leashed::EgressHandle;
use live_build::LiveMaker;
use live_pool::LivePool;
use netns_pool::NetnsPool;
use prepared_pool::PreparedPool;
use python_template::{PythonTemplates, TemplateSettings};
use run::{ForkFailure, ForkInto, Run};
use sandlot_egress::SandboxNetwork;
use spec::Resources;
use uids::UidLeases;

/// Name of the directory, under the conversation root, where a server's zygote mounts the cached skeleton.
pub const SKELETON_DIR_NAME: &str = ".jail-root";

/// How the native backend is set up.
#[derive(Debug, Clone)]
pub struct JailConfig {
    /// The sandlot binary, run as the zygote (servers).
    pub program: PathBuf,
    /// How runs' processes are started: a server's zygote, or a one-shot command's forked init.
    pub model: ProcessModel,
    /// Host uids (and gids) sandboxes run as when the server is root (never root itself): the first owns the
    /// conversation directories, each concurrent run leases one of the others (see `uids`).
    pub sandbox_uids: UidRange,
    /// Where the leases of those uids are held (shared by every sandlot of the host).
    pub uid_lock_dir: PathBuf,
    /// Languages to look for runners for.
    pub languages: Vec<Language>,
    pub overrides: RunnerOverrides,
    /// Ask each interpreter its version at start (costs an exec each).
    pub probe_versions: bool,
    /// Turn on `favordynmods` on the host's cgroup2 mount when the backend is made: the operator's choice, as it
    /// changes the host (see `cgroup::favor_dynamic_modifications`; `doctor` reports it).
    pub tune_cgroups: bool,
    /// Keep a conversation's network namespace from one run to its next (see `netns_pool`; servers as root only).
    pub keep_netns: bool,
    /// The conversation root (`SANDBOX_ROOT`): no runner's install prefix that holds it is bound (see
    /// `runners::screen_runners`).
    pub data_root: Option<PathBuf>,
    /// An empty directory where a server's zygote (as root) caches the read-only skeleton, in its own mount
    /// namespace; a server uses `<root>/.jail-root`. `None`: each run assembles it.
    pub skeleton_dir: Option<PathBuf>,
    /// Python runs forked from templates (servers as root), with these modules preloaded in the second one (see
    /// `python_template`); `None`: each Python run starts its interpreter.
    pub python_preload: Option<Vec<String>>,
    /// Sandboxes kept prepared per Python template (with `python_preload`; see `prepared`).
    pub prepared_sandboxes: usize,
    /// Live sandboxes kept prepared for conversations' first `session` calls (servers as root; see `live_pool`).
    pub prepared_live_sandboxes: usize,
    /// Sandboxes kept built, Node started, for conversations' next JavaScript and TypeScript runs (servers as root;
    /// see `ahead`).
    pub ahead_sandboxes: usize,
    /// The server's egress, for leashed runs (servers as root; see `leashed`); `None`: loopback only.
    pub egress: Option<EgressHandle>,
}

impl JailConfig {
    /// A server's configuration (no warm inits), every language, uids 900000-900999 on the host when root.
    pub fn new(program: PathBuf) -> Self {
        Self {
            program,
            model: ProcessModel::Server { warm_inits: 0 },
            sandbox_uids: uids::DEFAULT_UIDS,
            uid_lock_dir: PathBuf::from(uids::LOCK_DIR),
            languages: Language::ALL.to_vec(),
            overrides: RunnerOverrides::from_env(),
            probe_versions: true,
            tune_cgroups: false,
            keep_netns: false,
            data_root: None,
            skeleton_dir: None,
            python_preload: None,
            prepared_sandboxes: 0,
            prepared_live_sandboxes: 0,
            ahead_sandboxes: 0,
            egress: None,
        }
    }
}

/// The native Linux backend.
pub struct JailBackend {
    config: JailConfig,
    launcher: Launcher,
    /// Network namespaces kept between runs of a conversation (servers running as root).
    netns: Option<Arc<NetnsPool>>,
    runners: Vec<HostRunner>,
    /// Runners left out because a bind of theirs would expose too much (reported by `doctor`).
    refused: Vec<RefusedRunner>,
    cgroups: Arc<CgroupSupport>,
    /// The run uids, leased per run (as root).
    uids: Arc<UidLeases>,
    root: bool,
    /// The Python templates Python runs are forked from (servers as root, when configured).
    templates: Option<Arc<PythonTemplates>>,
    /// Sandboxes prepared for stateless Python runs (servers with templates; see `prepared`).
    prepared: Option<Arc<PreparedPool>>,
    /// The conversations' trees for prepared sandboxes (idmapped to their run uid), both pools'.
    trees: Arc<IdmappedTrees>,
    /// How live sandboxes are built (servers: a one-shot backend keeps none).
    live_maker: Option<Arc<LiveMaker>>,
    /// Live sandboxes prepared for conversations' first `session` calls (servers as root; see `live_pool`).
    live_pool: Option<Arc<LivePool>>,
    /// Sandboxes built for conversations' next Node runs (servers as root; see `ahead`).
    ahead: Option<Arc<AheadPool>>,
    /// Runs in flight now (the prepared pool builds none while the machine is busy).
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    /// Runs that have answered but whose sandbox is still being let go of (its slot, uid and network namespace).
    releasing: Arc<std::sync::atomic::AtomicUsize>,
}

impl JailBackend {
    /// Finds runners and cgroup support on this host; a server starts its zygote.
    pub fn new(config: JailConfig) -> Result<Self> {
        let found = discover_runners(&config.languages, &config.overrides, config.probe_versions);
        let protected = protected_dirs(config.data_root.as_deref());
        let (runners, refused) = screen_runners(found, &protected);
        let esbuild = find_esbuild(&runners, &protected);
        for refusal in &refused {
            tracing::warn!("{refusal}");
        }
        let cgroups = Arc::new(CgroupSupport::detect(config.tune_cgroups));
        let root = nix::unistd::geteuid().is_root();
        // Every live sandbox binds esbuild's prefixes and, with egress credentials, the sandboxes' trust bundle's
        // directory (a leashed run binds it too): the skeleton has mount points for them.
        let trust_dir =
            config.egress.as_ref().and_then(|egress| egress.0.trust_dir()).map(std::path::Path::to_path_buf);
        let esbuild_binds: Vec<PathBuf> = esbuild
            .as_ref()
            .map(|(_, binds)| binds.clone())
            .unwrap_or_default()
            .into_iter()
            .chain(trust_dir.clone())
            .collect();
        let esbuild_binds = esbuild_binds.as_slice();
        let skeleton = config
            .skeleton_dir
            .clone()
            .filter(|_| root)
            .and_then(|dir| skeleton_request(dir, live::live_binds(&runners, esbuild_binds)));
        let launcher = Launcher::new(&config.model, config.program.clone(), skeleton)?;
        let server = matches!(config.model, ProcessModel::Server { .. });
        let netns = (root && server && config.keep_netns).then(|| Arc::new(NetnsPool::default()));
        let uids = Arc::new(UidLeases::new(config.sandbox_uids, config.uid_lock_dir.clone()));
        let python = runners.iter().find(|r| r.language == Language::Python);
        let templates = match (&config.python_preload, python) {
            (Some(preload), Some(python)) if root && server => {
                let settings = TemplateSettings {
                    preload: preload.clone(),
                    env: spec::base_env(),
                    seccomp: crate::seccomp_program_bytes(),
                };
                Some(Arc::new(PythonTemplates::start(&python.program, settings)))
            }
            _ => None,
        };
        let storage_uid = config.sandbox_uids.storage();
        let trees = Arc::new(IdmappedTrees::new(storage_uid));
        let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let prepared = match (&launcher, &templates, python) {
            (Launcher::Server(inits), Some(templates), Some(python)) if config.prepared_sandboxes > 0 => {
                let builder = prepared::Builder {
                    inits: Arc::clone(inits),
                    uids: Arc::clone(&uids),
                    cgroups: Arc::clone(&cgroups),
                    templates: Arc::clone(templates),
                    runner: python.clone(),
                    storage_uid,
                    trees: Arc::clone(&trees),
                };
                Some(PreparedPool::new(builder, config.prepared_sandboxes, Arc::clone(&in_flight)))
            }
            _ => None,
        };
        let node = runners.iter().find(|r| r.language == Language::JavaScript);
        let ahead = match (&launcher, node) {
            (Launcher::Server(inits), Some(node)) if root && config.ahead_sandboxes > 0 => {
                let builder = ahead::Builder {
                    inits: Arc::clone(inits),
                    uids: Arc::clone(&uids),
                    cgroups: Arc::clone(&cgroups),
                    netns: netns.clone(),
                    storage_uid,
                    node: node.program.clone(),
                };
                Some(AheadPool::new(builder, config.ahead_sandboxes, Arc::clone(&in_flight)))
            }
            _ => None,
        };
        let live_maker = match &launcher {
            Launcher::Server(inits) => Some(Arc::new(LiveMaker {
                inits: Arc::clone(inits),
                uids: Arc::clone(&uids),
                cgroups: Arc::clone(&cgroups),
                root,
                templates: templates.clone(),
                python: python.map(|python| python.program.clone()),
                programs: live::live_programs(&runners),
                binds: live::live_binds(&runners, esbuild_binds),
                // Where live sandboxes' TypeScript loads esbuild from (see `find_esbuild`).
                esbuild: esbuild.as_ref().map(|(path, _)| path.clone()),
                owner: root.then_some((storage_uid, storage_uid)),
                storage_uid,
                egress: config.egress.clone(),
            })),
            Launcher::OneShot(..) => None,
        };
        // A prepared live sandbox is attached to its conversation by an idmapped tree (as root) and its driver forked
        // from the loaded template.
        let live_pool = match &live_maker {
            Some(maker) if root && templates.is_some() && config.prepared_live_sandboxes > 0 => {
                Some(LivePool::new(Arc::clone(maker), config.prepared_live_sandboxes))
            }
            _ => None,
        };
        Ok(Self {
            ahead,
            in_flight,
            releasing: Arc::default(),
            config,
            launcher,
            netns,
            runners,
            refused,
            cgroups,
            uids,
            root,
            templates,
            prepared,
            trees,
            live_maker,
            live_pool,
        })
    }

    /// Starts a server's warm inits now (call from within the runtime that will serve the runs).
    pub fn warm_up(&self) {
        if let Launcher::Server(pool) = &self.launcher {
            pool.refill();
        }
    }

    /// Waits until the Python templates are ready, at most `timeout`: whether they are (`true` without templates).
    /// Runs before then start their own interpreter; tests wait, to know which way their runs go.
    pub fn wait_for_templates(&self, timeout: std::time::Duration) -> bool {
        let Some(templates) = &self.templates else { return true };
        let deadline = std::time::Instant::now() + timeout;
        while !templates.all_ready() {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }

    /// Whether Python runs are forked from templates (configured, and a server as root).
    pub fn forks_python(&self) -> bool {
        self.templates.is_some()
    }

    /// Prepares sandboxes for Python runs of `limits` (a server's defaults) once the templates are ready (call from
    /// within the runtime that will serve the runs).
    pub fn prepare_for(&self, limits: &sandlot_core::Limits) {
        if let Some(pool) = &self.prepared {
            pool.prepare_for(limits);
        }
        if let Some(pool) = &self.live_pool {
            pool.prepare_for(limits);
        }
    }

    /// The host pids of the inits of the live sandboxes prepared or being prepared (see `prepared_inits`).
    pub fn prepared_live_inits(&self) -> Vec<i32> {
        self.live_pool.as_ref().map_or_else(Vec::new, |pool| pool.inits())
    }

    /// Live sandboxes prepared for conversations' first `session` calls, waiting now.
    pub fn prepared_live_ready(&self) -> usize {
        self.live_pool.as_ref().map_or(0, |pool| pool.len())
    }

    /// Sandboxes prepared for Python runs, waiting now.
    pub fn prepared_ready(&self) -> usize {
        self.prepared.as_ref().map_or(0, |pool| pool.len())
    }

    /// The host pids of the inits of the sandboxes prepared or being prepared, for stateless runs, live sandboxes
    /// and conversations' next Node runs (each the parent of its sandbox's pid 1): processes that belong to no run
    /// yet.
    pub fn prepared_inits(&self) -> Vec<i32> {
        let runs = self.prepared.as_ref().map_or_else(Vec::new, |pool| pool.inits());
        let ahead = self.ahead.as_ref().map_or_else(Vec::new, |pool| pool.inits());
        runs.into_iter().chain(self.prepared_live_inits()).chain(ahead).collect()
    }

    /// Sandboxes waiting now, Node started, for conversations' next runs (see `ahead`).
    pub fn ahead_ready(&self) -> usize {
        self.ahead.as_ref().map_or(0, |pool| pool.len())
    }

    /// Runs that have answered but whose sandbox is still being let go of; a conversation's kept network namespace
    /// is back in its pool once this is 0.
    pub fn releasing(&self) -> usize {
        self.releasing.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Warm inits waiting now.
    pub fn warm_ready(&self) -> usize {
        match &self.launcher {
            Launcher::Server(pool) => pool.len(),
            Launcher::OneShot(_) => 0,
        }
    }

    /// Gives a one-shot backend the init forked for its run (see [`crate::fork_init_for_one_shot`]).
    pub fn use_forked_init(&self, init: ForkedInit) {
        self.launcher.hand_over(init);
    }

    /// The runners found.
    pub fn host_runners(&self) -> &[HostRunner] {
        &self.runners
    }

    /// The runners found but refused (see `runners::screen_runners`).
    pub fn refused_runners(&self) -> &[RefusedRunner] {
        &self.refused
    }

    /// The host uids sandboxes run as (when root).
    pub fn sandbox_uids(&self) -> UidRange {
        self.config.sandbox_uids
    }

    /// The conversation root, if the backend was told it.
    pub fn data_root(&self) -> Option<&std::path::Path> {
        self.config.data_root.as_deref()
    }

    /// The cgroup support found.
    pub fn cgroups(&self) -> &CgroupSupport {
        &self.cgroups
    }
}

/// What to ask the zygote to cache at `dir` (created if missing): mount points for `binds`, the runners' prefixes
/// (each run binds its own runner's only, a live sandbox all of them, and esbuild's). `None` if `dir` cannot be made.
fn skeleton_request(dir: PathBuf, binds: Vec<PathBuf>) -> Option<SkeletonRequest> {
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), "no room for the sandbox's skeleton (each run assembles its own): {e}");
        return None;
    }
    Some(SkeletonRequest { dir, identity: Identity::standard(), mount_points: binds })
}

#[async_trait]
impl Backend for JailBackend {
    fn name(&self) -> &'static str {
        "native"
    }

    /// Runs die with the server (their inits have a parent-death signal); the prepared sandboxes are ended here, so
    /// that none is left exiting after the server is gone.
    async fn abort_all(&self) {
        if let Some(pool) = &self.prepared {
            pool.close().await;
        }
        if let Some(pool) = &self.live_pool {
            pool.close().await;
        }
        if let Some(pool) = &self.ahead {
            pool.close().await;
        }
    }

    /// Ends the sandbox waiting for the conversation's next run, if any.
    async fn forget_conversation(&self, workspace: &std::path::Path) {
        if let Some(pool) = &self.ahead {
            pool.forget(workspace).await;
        }
    }

    /// A crashed sandlot's sandboxes die with it (their inits have a parent-death signal and each is the pid 1 of
    /// its namespace); what can be left is cgroup slots, with a straggler at worst: those are emptied and removed.
    async fn remove_leftovers(&self) {
        let with_leftovers = self.cgroups.remove_unused_slots().await;
        if with_leftovers > 0 {
            tracing::warn!(slots = with_leftovers, "killed processes left in cgroups by an earlier sandlot");
        }
    }

    /// `jail`: an init can start (the zygote is alive, or was just restarted); `runners`: there is at least one, and
    /// every runner's interpreter is still an executable file. A few `stat`s and a `waitpid(WNOHANG)`: microseconds.
    async fn readiness(&self) -> Vec<ReadinessCheck> {
        let jail = match &self.launcher {
            Launcher::Server(pool) => match pool.zygote().ensure_alive() {
                Ok(true) => ReadinessCheck::ok("jail", "the zygote is running"),
                Ok(false) => ReadinessCheck::ok("jail", "the zygote had died and was restarted"),
                Err(e) => ReadinessCheck::failed("jail", format!("no init can start: the zygote is gone ({e})")),
            },
            Launcher::OneShot(_) => ReadinessCheck::ok("jail", "one run, with the init forked at start"),
        };
        let missing: Vec<&str> =
            self.runners.iter().filter(|r| !runners::is_executable(&r.program)).map(|r| r.language.as_str()).collect();
        let runners = if self.runners.is_empty() {
            ReadinessCheck::failed("runners", "no runner: no language can run")
        } else if !missing.is_empty() {
            ReadinessCheck::failed("runners", format!("the interpreter is gone for: {}", missing.join(", ")))
        } else {
            ReadinessCheck::ok("runners", format!("{} languages", self.runners.len()))
        };
        let mut checks = vec![jail, runners];
        if let Some(templates) = &self.templates {
            // Informational: until a template is ready, Python runs start their own interpreter (slower, not broken).
            checks.push(ReadinessCheck::ok(
                "python-template",
                match templates.all_ready() {
                    true => "ready: Python runs are forked from it",
                    false => "starting: Python runs start their own interpreter until it is ready",
                },
            ));
        }
        checks
    }

    fn runners(&self) -> Vec<RunnerInfo> {
        self.runners
            .iter()
            .map(|r| RunnerInfo {
                language: r.language,
                image: r.program.display().to_string(),
                version: r.version.clone(),
                packages: r.packages.clone(),
            })
            .collect()
    }

    /// Live sandboxes: a server's zygote clones their inits; a one-shot backend refuses them (see `live`).
    fn live(&self) -> Option<&dyn sandlot_core::LiveBackend> {
        Some(self)
    }

    fn storage_owner(&self) -> Option<(u32, u32)> {
        let storage = self.config.sandbox_uids.storage();
        self.root.then_some((storage, storage))
    }

    async fn run(&self, job: Job, sink: &dyn OutputSink) -> sandlot_core::Result<RunOutcome> {
        tracing::debug!(run_id = job.run_id, "jail run requested");
        let in_flight = Counted::count(Arc::clone(&self.in_flight));
        let outcome = self.run_counted(&job, sink).await;
        drop(in_flight);
        // The pool builds nothing while the machine is busy: once it is not, it fills up again.
        if let Some(pool) = &self.prepared {
            pool.refill();
        }
        outcome
    }
}

impl JailBackend {
    /// [`Backend::run`] of a run counted in flight.
    async fn run_counted(&self, job: &Job, sink: &dyn OutputSink) -> sandlot_core::Result<RunOutcome> {
        let runner = self
            .runners
            .iter()
            .find(|r| r.language == job.language)
            .ok_or_else(|| sandlot_core::Error::no_runner(job.language, self.runners.iter().map(|r| r.language)))?;
        match self.run_once(job, runner, sink, true).await? {
            Ok(outcome) => Ok(outcome),
            Err(ForkUnavailable(why)) => {
                // The template went away before it forked anything (nothing of the program ran): run it again,
                // starting its own interpreter.
                tracing::info!(run_id = job.run_id, "the Python template could not fork ({why}); running it anew");
                match self.run_once(job, runner, sink, false).await? {
                    Ok(outcome) => Ok(outcome),
                    Err(ForkUnavailable(why)) => Err(Error::Setup { step: "run".into(), message: why }.into()),
                }
            }
        }
    }
}

/// A forked run whose template could not fork it (gone, or not listening): nothing of the program ran.
struct ForkUnavailable(String);

impl JailBackend {
    /// One attempt at `job`: in a prepared sandbox if one fits, else in one built now; forked from a template when
    /// `may_fork` and one is ready.
    async fn run_once(
        &self,
        job: &Job,
        runner: &HostRunner,
        sink: &dyn OutputSink,
        may_fork: bool,
    ) -> sandlot_core::Result<std::result::Result<RunOutcome, ForkUnavailable>> {
        // On disk the conversation belongs to the storage uid; the run sees it as its own leased uid (idmapped).
        sandlot_core::hand_over(&job.workspace, self.storage_owner())
            .map_err(|e| Error::io(format!("hand over {}", job.workspace.display()), e))?;
        sandlot_core::hand_over_writable(&job.mounts, self.storage_owner())
            .map_err(|e| Error::io(format!("hand over the volumes of run {}", job.run_id), e))?;
        let network = leashed::network_for(self.config.egress.as_ref(), job).await?;
        let leashed_job = network.as_ref().map(|network| leashed::with_proxy_environment(job, network));
        let job = leashed_job.as_ref().unwrap_or(job);
        let prepared = if network.is_none() { self.take_prepared(job, runner, may_fork) } else { None };
        let ahead = match (&prepared, &self.ahead) {
            (None, Some(pool)) if pool.fits(job, runner) => pool.take(&job.workspace).map(|ahead| (pool, ahead)),
            _ => None,
        };
        let started = match (prepared, &self.prepared, ahead) {
            (Some(prepared), Some(pool), _) => match prepared.run(job, runner, pool.builder().trees(), sink).await {
                Ok((run, finished)) => (run, finished, None),
                Err((prepared, why)) => {
                    // Nothing of the run reached the sandbox: it runs in one built now.
                    tracing::debug!(run_id = job.run_id, "a prepared sandbox could not take the run: {why}");
                    prepared.discard();
                    self.build_and_execute(job, runner, sink, may_fork, None).await?
                }
            },
            (_, _, Some((pool, ahead))) => match ahead.run(job, runner, sink, self.netns.is_some()).await {
                Ok(started) => started,
                Err((ahead, why)) => {
                    // Nothing of the run reached it: it runs in a sandbox built now.
                    tracing::debug!(run_id = job.run_id, "an ahead sandbox could not take the run: {why}");
                    let pool = Arc::clone(pool);
                    tokio::spawn(async move { pool.end(ahead).await });
                    self.build_and_execute(job, runner, sink, may_fork, None).await?
                }
            },
            _ => self.build_and_execute(job, runner, sink, may_fork, network.as_ref()).await?,
        };
        let (run, mut finished, kept_netns) = started;
        let oom_killed = run.oom_killed(); // read before the slot is released
        let program_ended = matches!(finished, Ok(ref f) if matches!(f.waited, Waited::ProgramEnded));
        // The run's network namespace may serve the conversation's next run (not after a fork that never was).
        let netns = match &mut finished {
            Ok(f) if !matches!(f.forked, Some(Err(ForkFailure::Unavailable(_)))) => kept_netns.or(f.new_netns.take()),
            _ => None,
        };
        match self.config.model {
            ProcessModel::OneShot => run.release(program_ended, true).await,
            ProcessModel::Server { .. } => {
                // Off the run's path: a forked program says its end before its process has freed its memory, so
                // its slot drains, and its network namespace is given back, once the init (which outlives every
                // process of the sandbox) is gone.
                let (pool, workspace) = (self.netns.clone(), job.workspace.clone());
                let held = network.clone();
                let releasing = Counted::count(Arc::clone(&self.releasing));
                // The conversation's next Node run gets a sandbox built once this one's is gone (see `ahead`).
                let next = self.ahead.as_ref().filter(|pool| pool.fits(job, runner)).map(|pool| {
                    let mut next = job.clone();
                    next.code.clear();
                    next.stdin.clear();
                    (Arc::clone(pool), next, runner.clone())
                });
                tokio::spawn(run.release_then(move || {
                    if let (Some(pool), Some(netns)) = (pool, netns) {
                        pool.give_back(workspace, netns);
                    }
                    drop(held); // a leashed run's link, once nothing of the sandbox can use it
                    if let Some((pool, job, runner)) = next {
                        pool.prepare_next(&job, &runner);
                    }
                    drop(releasing);
                }));
            }
        }
        sandlot_core::marks::mark("c.released");
        let mut finished = finished?;
        match finished.forked.take() {
            Some(Ok(end)) => finished.last_event = Some(InitEvent::ProgramEnded(end)),
            Some(Err(ForkFailure::Unavailable(why))) => return Ok(Err(ForkUnavailable(why))),
            Some(Err(ForkFailure::Failed(error))) => {
                finished.last_event =
                    Some(InitEvent::SetupFailed { step: "fork from the Python template".into(), error })
            }
            None => {}
        }
        // Only a shell's 128+SIGXFSZ needs the quota's word (see `ending::termination`).
        let shell_xfsz = matches!(finished.last_event, Some(InitEvent::ProgramEnded(Termination::Exited { code }))
            if code == 128 + libc::SIGXFSZ);
        let evidence = Evidence { oom_killed, at_quota: shell_xfsz && sandlot_core::at_quota(job) };
        let termination = ending::termination(&finished.waited, finished.last_event.as_ref(), evidence)?;
        let mut outcome = RunOutcome::from_streams(termination, finished.stdout, finished.stderr, finished.duration);
        if let Some(network) = &network {
            leashed::record_connections(&mut outcome, network).await;
        }
        Ok(Ok(outcome))
    }
}

impl JailBackend {
    /// A prepared sandbox for `job` if one fits it: a stateless Python run in sandlot's layout, of a runner and
    /// environment the template serves.
    fn take_prepared(&self, job: &Job, runner: &HostRunner, may_fork: bool) -> Option<prepared::Prepared> {
        let (pool, templates) = (self.prepared.as_ref()?, self.templates.as_ref()?);
        let fits = may_fork
            && runner.program == pool.builder().runner.program
            && job.layout == sandlot_core::Layout::Data
            && job.mounts.is_empty()
            && !starts_its_own_interpreter(job);
        if !fits {
            return None;
        }
        pool.take(templates.choose(&job.code), &job.limits)
    }

    /// Builds a sandbox for `job` now and runs it there: the run, how it finished, and the conversation's kept
    /// network namespace it joined.
    async fn build_and_execute(
        &self,
        job: &Job,
        runner: &HostRunner,
        sink: &dyn OutputSink,
        may_fork: bool,
        network: Option<&Arc<SandboxNetwork>>,
    ) -> sandlot_core::Result<(Run, Result<run::Finished>, Option<std::os::fd::OwnedFd>)> {
        let uid = match self.root {
            true => Some(
                self.uids.lease().map_err(|e| Error::io(format!("lease a sandbox uid for run {}", job.run_id), e))?,
            ),
            false => None,
        };
        sandlot_core::marks::mark("c.handed_over");
        let cgroup = self
            .cgroups
            .acquire(&job.limits)
            .map_err(|e| Error::io(format!("set up cgroups for run {}", job.run_id), e))?;
        sandlot_core::marks::mark("c.cgroup");
        // A leashed run joins its link's namespace; another, its conversation's kept one if there is one.
        let kept_netns = match network {
            Some(_) => None,
            None => self.netns.as_ref().and_then(|pool| pool.take(&job.workspace)),
        };
        // As root, the workspace as this process sees it (a conversation's disk image is mounted in the server's
        // mount namespace, after the zygote made its own): held until the run ends, taken by the init.
        let workspace_tree = match self.root {
            true => Some(
                crate::sys::mount::clone_tree(&job.workspace)
                    .map_err(|e| Error::io(format!("open_tree {}", job.workspace.display()), e.into()))?,
            ),
            false => None,
        };
        let join_netns = match network {
            Some(network) => Some(NetnsPool::path_of(network.netns())),
            None => kept_netns.as_ref().map(NetnsPool::path_of),
        };
        let storage = self.config.sandbox_uids.storage();
        let resources =
            Resources::held(cgroup.as_ref(), uid.as_ref().map(|u| (u, storage)), join_netns, workspace_tree.as_ref());
        let mut spec = spec::build(job, runner, resources);
        if network.is_some()
            && let Some(dir) = self.config.egress.as_ref().and_then(|egress| egress.0.trust_dir())
        {
            spec.extra_ro_binds.push(dir.to_path_buf()); // the trust bundle the credentials' variables name
        }
        let forkable = may_fork && spec.switch_to.is_some() && !starts_its_own_interpreter(job);
        let forked = self.templates.as_deref().filter(|_| forkable).and_then(|templates| {
            let choice = templates.choose(&job.code);
            templates.can_fork(&runner.program, choice).then(|| ForkInto {
                templates,
                choice,
                cgroup_procs: cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            })
        });
        spec.forked = forked.is_some();
        let init = self.launcher.take()?;
        let (mut run, pipes) = Run::new(init, cgroup, uid);
        let capture_netns = self.netns.is_some() && spec.join_netns.is_none();
        let finished = run.execute(pipes, &spec, job, sink, capture_netns, forked).await;
        sandlot_core::marks::mark("c.executed");
        drop(workspace_tree); // held until the run ended
        Ok((run, finished, kept_netns))
    }
}

/// One in a count (runs in flight, runs being released) for as long as it lives.
struct Counted(Arc<std::sync::atomic::AtomicUsize>);

impl Counted {
    fn count(counter: Arc<std::sync::atomic::AtomicUsize>) -> Self {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(counter)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether `job` must start its own interpreter: its own `PYTHON*` variables change how one starts.
fn starts_its_own_interpreter(job: &Job) -> bool {
    job.env.keys().any(|name| name.starts_with("PYTHON"))
}
