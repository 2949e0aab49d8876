//! The supervisor: the native [`Backend`]. It lives in the server (or `sandlot run`), starts one init per run,
//! and owns everything that must hold even if the sandbox misbehaves: limits, the deadline, the disk quota,
//! output caps and the final kill.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sandlot_core::{
    Backend, CapturedStream, Job, Language, Layout, OutputChunk, OutputSink, ReadinessCheck, RunOutcome, RunnerInfo,
    Stop, Stream, Termination, stop_reason,
};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::cgroup::{CgroupSupport, RunCgroup};
use crate::filesystem::Identity;
use crate::host_uids::{UidLease, UidLeases, UidRange};
use crate::launcher::{InitPipes, InitProcess, InitStarter, Prefork};
use crate::netns_pool::NetnsPool;
use crate::pinned_netns::PinnedNetns;
use crate::report::Report;
use crate::root_template::TemplateRequest;
use crate::runners::{HostRunner, RefusedRunner, RunnerOverrides, discover_runners, protected_dirs, screen_runners};
use crate::spec::{HomeMount, JailSpec, RlimitSpec, SlotLock, VolumeMount};
use crate::warm_pool::WarmPool;
use crate::{Error, Result};

/// The hidden subcommand that makes the sandlot binary act as the init.
pub const INIT_SUBCOMMAND: &str = "__jail-init";

/// How long the init may take to reap the sandbox after its pid 1 was killed.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// How long output may keep flowing after the init is gone (it cannot: everything died with pid 1).
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// How the native backend is set up.
#[derive(Debug, Clone)]
pub struct JailConfig {
    /// The sandlot binary, re-executed as the init.
    pub init_program: PathBuf,
    /// Host uids (and gids) sandboxes run as when the server is root (never root itself): the first owns the
    /// conversation directories, each concurrent run leases one of the others (see `host_uids`).
    pub sandbox_uids: UidRange,
    /// Where the leases of those uids are held (shared by every sandlot of the host).
    pub uid_lock_dir: PathBuf,
    /// Languages to look for runners for.
    pub languages: Vec<Language>,
    pub overrides: RunnerOverrides,
    /// Ask each interpreter its version at start (costs an exec each).
    pub probe_versions: bool,
    /// Turn on `favordynmods` on the cgroup2 mount (6 ms less per run; see `cgroup::favor_dynamic_modifications`)
    /// when the backend is made.
    pub tune_cgroups: bool,
    /// The same, but only once a run's spec has been sent: a one-shot command checks while its init builds the
    /// sandbox (the check, ~0.15 ms, then costs the run nothing; the worker joins the run's cgroups ~0.7 ms later).
    pub tune_cgroups_after_spec: bool,
    /// Inits kept started and waiting for a run (0: each run starts its own); see `warm_pool`.
    pub warm_inits: usize,
    /// Start a zygote that clones each init instead of exec'ing the binary for each (see `zygote`); for servers.
    /// The zygote dies with the thread that creates the backend, which must live as long as the backend.
    pub zygote: bool,
    /// Keep a conversation's network namespace from one run to its next (see `netns_pool`; as root only).
    pub keep_netns: bool,
    /// Where a one-shot command (`sandlot run`, as root) pins the network namespace its init made, for the
    /// conversation's next run (see `pinned_netns`); `None`: never.
    pub pinned_netns: Option<PinnedNetns>,
    /// The conversation root (`SANDBOX_ROOT`): no runner's install prefix that holds it is bound (see
    /// `runners::screen_runners`).
    pub data_root: Option<PathBuf>,
    /// An empty directory where the zygote (as root) assembles the sandbox's read-only skeleton once, in its own
    /// mount namespace (see `root_template`); a server uses `<root>/.jail-root`. `None`: each run assembles it.
    pub root_template_dir: Option<PathBuf>,
}

impl JailConfig {
    /// Every language, this binary as the init, uids/gids 900000-900999 on the host when root.
    pub fn new(init_program: PathBuf) -> Self {
        Self {
            init_program,
            sandbox_uids: crate::host_uids::DEFAULT_UIDS,
            uid_lock_dir: PathBuf::from(crate::host_uids::LOCK_DIR),
            languages: Language::ALL.to_vec(),
            overrides: RunnerOverrides::from_env(),
            probe_versions: true,
            tune_cgroups: true,
            tune_cgroups_after_spec: false,
            warm_inits: 0,
            zygote: false,
            keep_netns: false,
            pinned_netns: None,
            data_root: None,
            root_template_dir: None,
        }
    }
}

/// The native Linux backend.
pub struct JailBackend {
    config: JailConfig,
    /// An init forked ahead of time by a one-shot command, used by the next run.
    prefork: std::sync::Mutex<Option<Prefork>>,
    /// Inits started ahead of time by a server.
    warm: Arc<WarmPool>,
    /// Network namespaces kept between runs of a conversation (servers running as root).
    netns: Option<NetnsPool>,
    runners: Vec<HostRunner>,
    /// Runners left out because a bind of theirs would expose too much (reported by `doctor`).
    refused: Vec<RefusedRunner>,
    cgroups: CgroupSupport,
    /// The run uids, leased per run (as root).
    uids: UidLeases,
    root: bool,
}

impl JailBackend {
    /// Finds runners and cgroup support on this host.
    pub fn new(config: JailConfig) -> Self {
        let found = discover_runners(&config.languages, &config.overrides, config.probe_versions);
        let (runners, refused) = screen_runners(found, &protected_dirs(config.data_root.as_deref()));
        for refusal in &refused {
            tracing::warn!("{refusal}");
        }
        let cgroups = CgroupSupport::detect(config.tune_cgroups);
        let program = config.init_program.clone();
        let root = nix::unistd::geteuid().is_root();
        let starter = if config.zygote {
            let template =
                config.root_template_dir.clone().filter(|_| root).and_then(|dir| template_request(dir, &runners));
            InitStarter::with_zygote(program, template)
        } else {
            InitStarter::exec(program)
        };
        let warm = WarmPool::new(starter, config.warm_inits);
        let netns = (root && config.keep_netns).then(NetnsPool::default);
        let uids = UidLeases::new(config.sandbox_uids, config.uid_lock_dir.clone());
        Self { config, runners, refused, cgroups, uids, root, prefork: Default::default(), warm, netns }
    }

    /// Starts the warm inits now (call from within the runtime that will serve the runs).
    pub fn warm_up(&self) {
        self.warm.refill();
    }

    /// Warm inits waiting now.
    pub fn warm_ready(&self) -> usize {
        self.warm.len()
    }

    /// Gives the backend an init forked ahead of time; the next run uses it instead of starting one.
    pub fn use_prefork(&self, prefork: Prefork) {
        *self.prefork.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(prefork);
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

    fn spec(
        &self,
        job: &Job,
        runner: &HostRunner,
        cgroup: Option<&RunCgroup>,
        uid: Option<&UidLease>,
        netns: Option<&OwnedFd>,
    ) -> JailSpec {
        let code_path = PathBuf::from(format!("/tmp/main.{}", job.language.file_extension()));
        let mut env: BTreeMap<String, String> = [
            ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            ("HOME", "/tmp"),
            ("TMPDIR", "/tmp"),
            ("USER", "sandbox"),
            ("LANG", "C.UTF-8"),
            ("PYTHONUNBUFFERED", "1"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
            ("NO_COLOR", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let home = (job.layout != Layout::Data).then(|| {
            let path = job.layout.conversation_path();
            env.insert("HOME".into(), path.into()); // the conversation's home: Baponi's `~` persists
            HomeMount { path: path.into(), scratch_mb: job.layout.scratch_data_mb(&job.limits) }
        });
        env.extend(job.env.clone());
        let mut args = runner.args.clone();
        args.push(code_path.to_string_lossy().into_owned());
        let limits = &job.limits;
        let identity = Identity::standard();
        JailSpec {
            program: runner.program.clone(),
            args,
            code_path,
            code: job.code.clone(),
            env: env.into_iter().collect(),
            workspace: job.workspace.clone(),
            home,
            volumes: volume_mounts(&job.mounts),
            extra_ro_binds: runner.extra_ro_binds.clone(),
            cgroup_procs: cgroup.map(RunCgroup::procs_files).unwrap_or_default(),
            slot_lock: cgroup.map(|c| SlotLock { holder_pid: std::process::id(), fd: c.lock_fd() }),
            switch_to: uid.map(|lease| (lease.uid(), lease.uid())),
            storage_id: uid.map(|_| self.config.sandbox_uids.storage()),
            uid_lock: uid.map(|lease| SlotLock { holder_pid: std::process::id(), fd: lease.lock_fd() }),
            join_netns: netns.map(NetnsPool::path_of),
            sandbox_uid: identity.uid,
            sandbox_gid: identity.gid,
            hostname: identity.hostname,
            tmp_mb: limits.tmp_mb,
            rlimits: RlimitSpec {
                open_files: limits.open_files,
                file_size_bytes: limits.disk_mb * 1024 * 1024,
                cpu_seconds: limits.timeout.as_secs() + 1,
                processes: cgroup.is_none().then_some(limits.pids),
                data_bytes: cgroup.is_none().then_some(limits.memory_mb * 1024 * 1024),
            },
            landlock: true,
            root_template: None, // set once the init is known (see `execute`)
        }
    }
}

/// What to ask the zygote to assemble at `dir` (created if missing) for these runners (empty mount points for their
/// prefixes, which each run binds for its own runner); `None` if `dir` cannot be made.
/// The engine's mounts of a job, as the init binds them.
fn volume_mounts(mounts: &[sandlot_core::Mount]) -> Vec<VolumeMount> {
    mounts
        .iter()
        .map(|m| VolumeMount { host: m.host.clone(), path: m.path.clone().into(), read_only: m.read_only })
        .collect()
}

fn template_request(dir: PathBuf, runners: &[HostRunner]) -> Option<TemplateRequest> {
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), "no room for the sandbox's root skeleton (each run assembles its own): {e}");
        return None;
    }
    // Mount points only: a runner's prefix is bound in that runner's runs, never in another language's.
    let mut mount_points: Vec<PathBuf> = runners.iter().flat_map(|r| r.extra_ro_binds.iter().cloned()).collect();
    mount_points.sort();
    mount_points.dedup();
    Some(TemplateRequest { dir, identity: Identity::standard(), mount_points })
}

/// How the waiting ended: pid 1 reported the program's end (having killed and reaped every other process of the
/// run first), the init exited without that report (a setup failure), or sandlot stopped the run.
enum Ending {
    Reported,
    InitExited(std::process::ExitStatus),
    Stopped(Stop),
}

#[async_trait]
impl Backend for JailBackend {
    fn name(&self) -> &'static str {
        "native"
    }

    /// A crashed sandlot's sandboxes die with it (their inits have a parent-death signal and each is the pid 1 of
    /// its namespace); what can be left is cgroup slots, with a straggler at worst: those are emptied and removed.
    async fn remove_leftovers(&self) {
        let with_leftovers = self.cgroups.remove_unused_slots().await;
        if with_leftovers > 0 {
            tracing::warn!(slots = with_leftovers, "killed processes left in cgroups by an earlier sandlot");
        }
    }

    /// `jail`: an init can start (the zygote is alive, or the binary inits are exec'd from is there); `runners`:
    /// there is at least one, and every runner's interpreter is still an executable file. A few `stat`s and a
    /// `waitpid(WNOHANG)`: microseconds.
    async fn readiness(&self) -> Vec<ReadinessCheck> {
        let starter = self.warm.starter();
        let exec_works = || crate::runners::is_executable(starter.program());
        let jail = match starter.zygote_alive() {
            Some(true) => ReadinessCheck::ok("jail", "the zygote is running"),
            Some(false) if exec_works() => ReadinessCheck::ok("jail", "the zygote is gone; inits are exec'd (slower)"),
            None if exec_works() => ReadinessCheck::ok("jail", "inits are exec'd"),
            _ => ReadinessCheck::failed("jail", "no init can start: the zygote is gone and the binary is missing"),
        };
        let missing: Vec<&str> = self
            .runners
            .iter()
            .filter(|r| !crate::runners::is_executable(&r.program))
            .map(|r| r.language.as_str())
            .collect();
        let runners = if self.runners.is_empty() {
            ReadinessCheck::failed("runners", "no runner: no language can run")
        } else if !missing.is_empty() {
            ReadinessCheck::failed("runners", format!("the interpreter is gone for: {}", missing.join(", ")))
        } else {
            ReadinessCheck::ok("runners", format!("{} languages", self.runners.len()))
        };
        vec![jail, runners]
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

    fn storage_owner(&self) -> Option<(u32, u32)> {
        let storage = self.config.sandbox_uids.storage();
        self.root.then_some((storage, storage))
    }

    async fn run(&self, job: Job, sink: &dyn OutputSink) -> sandlot_core::Result<RunOutcome> {
        tracing::debug!(run_id = job.run_id, "jail run requested");
        let runner = self
            .runners
            .iter()
            .find(|r| r.language == job.language)
            .ok_or_else(|| sandlot_core::Error::no_runner(job.language, self.runners.iter().map(|r| r.language)))?;
        // On disk the conversation belongs to the storage uid; the run sees it as its own leased uid (idmapped).
        sandlot_core::hand_over(&job.workspace, self.storage_owner())
            .map_err(|e| Error::io(format!("hand over {}", job.workspace.display()), e))?;
        sandlot_core::hand_over_writable(&job.mounts, self.storage_owner())
            .map_err(|e| Error::io(format!("hand over the volumes of run {}", job.run_id), e))?;
        let uid = match self.root {
            true => Some(
                self.uids.lease().map_err(|e| Error::io(format!("lease a sandbox uid for run {}", job.run_id), e))?,
            ),
            false => None,
        };
        let cgroup = self
            .cgroups
            .acquire(&job.limits)
            .map_err(|e| Error::io(format!("set up cgroups for run {}", job.run_id), e))?;
        tracing::debug!(run_id = job.run_id, "cgroup ready");
        let kept_netns = self.netns.as_ref().and_then(|pool| pool.take(&job.workspace));
        let spec = self.spec(&job, runner, cgroup.as_ref(), uid.as_ref(), kept_netns.as_ref());
        let prefork = self.prefork.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
        let one_shot = prefork.is_some();
        let result = self.execute(spec, &job, sink, cgroup.as_ref(), prefork).await;
        let oom = cgroup.as_ref().is_some_and(RunCgroup::oom_killed);
        match cgroup {
            // The command exits next, and the init holds the slot until it has exited: nothing can reuse the slot
            // before every process of the run is gone (and the next run's `acquire` kills what is left).
            Some(cgroup) if one_shot && matches!(result, Ok((Ending::Reported, ..))) => drop(cgroup),
            Some(cgroup) => {
                cgroup.release().await;
                tracing::debug!(run_id = job.run_id, "cgroup released");
            }
            None => {}
        }
        drop(uid); // the init holds the lease on until it is gone
        let (ending, reports, stdout, stderr, duration, new_netns) = result?;
        // Every process of the program is gone (pid 1 killed and reaped them before its report, or the init has
        // been reaped): the run's network namespace may serve the conversation's next run.
        if let (Some(pool), Some(netns)) = (&self.netns, kept_netns.or(new_netns)) {
            pool.give_back(job.workspace.clone(), netns);
        }
        // A program killed by RLIMIT_FSIZE (the quota as the largest file) shows as SIGXFSZ, or, when a shell ran
        // it, as the shell's exit code 128+SIGXFSZ with /data at its quota.
        let termination = match ending {
            Ending::Stopped(stop) => stop.termination(),
            Ending::Reported | Ending::InitExited(_) => {
                let last = reports.iter().rev().find(|r| !matches!(r, Report::Started { .. }));
                match last {
                    Some(Report::Exited { code }) if *code == 128 + libc::SIGXFSZ && sandlot_core::at_quota(&job) => {
                        Termination::DiskQuotaExceeded
                    }
                    Some(Report::Exited { code }) => Termination::Exited { code: *code },
                    Some(Report::Signaled { signal }) if oom && *signal == libc::SIGKILL => Termination::OutOfMemory,
                    Some(Report::Signaled { signal }) if *signal == libc::SIGXFSZ => Termination::DiskQuotaExceeded,
                    Some(Report::Signaled { signal }) => Termination::Signaled { signal: *signal },
                    Some(Report::SetupFailed { step, error }) => {
                        return Err(Error::Setup { step: step.clone(), message: error.clone() }.into());
                    }
                    _ if oom => Termination::OutOfMemory,
                    _ => {
                        let status = match ending {
                            Ending::InitExited(status) => status.to_string(),
                            _ => "still running".into(),
                        };
                        return Err(Error::NoReport { status }.into());
                    }
                }
            }
        };
        Ok(RunOutcome::from_streams(termination, stdout, stderr, duration))
    }
}

/// How the run ended, the init's reports, the output, the duration, and the network namespace the init created
/// (when the backend keeps them; one it pins is pinned as soon as the init has reported).
type Execution = (Ending, Vec<Report>, CapturedStream, CapturedStream, Duration, Option<OwnedFd>);

impl JailBackend {
    async fn execute(
        &self,
        mut spec: JailSpec,
        job: &Job,
        sink: &dyn OutputSink,
        cgroup: Option<&RunCgroup>,
        prefork: Option<Prefork>,
    ) -> Result<Execution> {
        let started = Instant::now();
        let one_shot = prefork.is_some();
        // A one-shot command pins the namespace its init makes, unless the init joined a pinned one.
        let pin_new_netns =
            self.root && self.config.pinned_netns.is_some() && prefork.as_ref().is_some_and(|p| !p.joins_pinned());
        let (mut init, pipes) = match prefork {
            Some(prefork) => InitProcess::adopt(prefork)?,
            None => self.warm.take()?,
        };
        spec.root_template = init.root_template().filter(|t| t.fits(&spec)).map(|t| t.dir().to_owned());
        let InitPipes { mut stdin, stdout, stderr, reports } = pipes;
        // The frame in one write: a second would wake the init a second time.
        let spec_json = serde_json::to_vec(&spec).map_err(|e| Error::io("encode spec", e.into()))?;
        let mut frame = (spec_json.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&spec_json);

        let tune_cgroups = self.root && self.config.tune_cgroups_after_spec;
        let feed = async move {
            // The program may exit without reading its input; a broken pipe then is not an error.
            let _ = stdin.write_all(&frame).await;
            if tune_cgroups && let Err(e) = crate::cgroup::favor_dynamic_modifications() {
                tracing::warn!("cannot enable favordynmods on the cgroup2 mount (each run pays ~6 ms more): {e}");
            }
            let _ = stdin.write_all(&job.stdin).await;
        };
        let init_pid = AtomicI32::new(0);
        // The namespace is captured through the init's pid, which names the init only until it is reaped: the
        // waiting below sets `reaped` as soon as it has, and both run in this one task, one after the other.
        let (init_os_pid, reaped) = (init.pid(), AtomicBool::new(false));
        let capture_netns = (self.netns.is_some() && spec.join_netns.is_none()) || pin_new_netns;
        let pins = self.config.pinned_netns.as_ref().filter(|_| pin_new_netns);
        // Pid 1's last report (the program's exit status) ends the run: it comes after every process of the run
        // is dead and reaped. The init's own exit (tearing down the namespaces) is not waited for.
        let program_ended = tokio::sync::Notify::new();
        let read_reports = async {
            let mut lines = BufReader::new(reports).lines();
            let mut all = Vec::new();
            let mut netns = None;
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str::<Report>(&line) {
                    Ok(report) => {
                        tracing::debug!(
                            run_id = job.run_id,
                            report = %report,
                            elapsed_us = started.elapsed().as_micros() as u64,
                            "jail report"
                        );
                        if let Report::Started { init_pid: pid } = report {
                            init_pid.store(pid, Ordering::SeqCst);
                            if let Some(os_pid) =
                                init_os_pid.filter(|_| capture_netns && !reaped.load(Ordering::SeqCst))
                            {
                                netns = NetnsPool::capture(os_pid)
                                    .inspect_err(|e| tracing::debug!("network namespace not kept: {e}"))
                                    .ok();
                                // Pinned now, while the program runs, rather than after it: it costs a few mount
                                // operations. (A server's pool takes it back only once the run is over.)
                                if let (Some(pins), Some(new)) = (pins, &netns) {
                                    if let Err(e) = pins.pin(&job.workspace, new) {
                                        tracing::debug!("network namespace not pinned: {e}");
                                    }
                                    netns = None;
                                }
                            }
                        }
                        let last = matches!(report, Report::Exited { .. } | Report::Signaled { .. });
                        all.push(report);
                        if last {
                            program_ended.notify_one();
                            break;
                        }
                    }
                    Err(e) => tracing::warn!(%e, line, "unreadable report from the jail init"),
                }
            }
            (all, netns)
        };
        let cap = job.limits.max_output_bytes;
        let read_stdout = read_capped(stdout, Stream::Stdout, cap, sink);
        let read_stderr = read_capped(stderr, Stream::Stderr, cap, sink);
        let wait = async {
            let ending = tokio::select! {
                status = init.wait() => {
                    reaped.store(true, Ordering::SeqCst);
                    match status {
                        Ok(status) => return Ok(Ending::InitExited(status)),
                        Err(e) => return Err(Error::io("wait for jail init", e)),
                    }
                },
                () = program_ended.notified() => {
                    reaped.store(true, Ordering::SeqCst); // no capture through the pid from here on
                    return Ok(Ending::Reported);
                },
                stop = stop_reason(job, job.limits.timeout) => Ending::Stopped(stop),
            };
            reaped.store(true, Ordering::SeqCst); // not yet, but soon: no capture from here on
            kill_tree(init_pid.load(Ordering::SeqCst), &mut init);
            if tokio::time::timeout(KILL_GRACE, init.wait()).await.is_err() {
                // Should not happen; make sure nothing survives anyway.
                tracing::warn!(run_id = job.run_id, "jail init still alive after killing pid 1");
                init.kill();
                if let Some(cgroup) = cgroup {
                    cgroup.kill_all();
                }
                init.wait().await.map_err(|e| Error::io("wait for jail init", e))?;
            }
            Ok(ending)
        };
        let everything = async { tokio::join!(feed, read_reports, read_stdout, read_stderr, wait) };
        let backstop = job.limits.timeout + KILL_GRACE + DRAIN_GRACE;
        let ((), (reports, netns), stdout, stderr, ending) = match tokio::time::timeout(backstop, everything).await {
            Ok(results) => results,
            Err(_) => {
                if let Some(cgroup) = cgroup {
                    cgroup.kill_all();
                }
                return Err(Error::io("jail did not finish after its deadline", std::io::ErrorKind::TimedOut.into()));
            }
        };
        tracing::debug!(run_id = job.run_id, elapsed_us = started.elapsed().as_micros() as u64, "jail finished");
        let ending = ending?;
        if matches!(ending, Ending::Reported) {
            init.finish_in_background(one_shot);
        }
        Ok((ending, reports, stdout, stderr, started.elapsed(), netns))
    }
}

/// SIGKILLs the sandbox's pid 1: the kernel then kills everything in its pid namespace, and the init (its parent)
/// reaps it and exits, so when the init is gone nothing of the run is left, not even a zombie. Before pid 1 is
/// known, the init itself is killed (pid 1 dies with it through its parent-death signal).
fn kill_tree(init_pid: i32, init: &mut InitProcess) {
    if init_pid > 0 {
        let _ = kill(Pid::from_raw(init_pid), Signal::SIGKILL);
    } else {
        init.kill();
    }
}

/// Reads a stream to its end, keeping and forwarding at most `cap` bytes; the excess is read and dropped.
async fn read_capped(
    mut pipe: impl AsyncRead + Unpin,
    stream: Stream,
    cap: usize,
    sink: &dyn OutputSink,
) -> CapturedStream {
    let mut captured = CapturedStream::new(cap);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => return captured,
            Ok(n) => {
                let kept = captured.push(&buffer[..n]);
                if !kept.is_empty() {
                    sink.output(OutputChunk { stream, data: kept.to_vec() });
                }
            }
        }
    }
}
