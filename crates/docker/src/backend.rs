//! The Docker [`Backend`]: discovery of runner images, and one hardened container per run.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder, ListImagesOptionsBuilder,
    RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures::StreamExt;
use sandlot_core::{
    Backend, CapturedStream, Job, Language, Layout, OutputChunk, OutputSink, ReadinessCheck, RunOutcome, RunnerInfo,
    Stop, Stream, Termination, stop_reason,
};
use tokio::io::AsyncWriteExt;

use crate::hardening::Confinement;
use crate::{Error, Result};

/// The label every container of a run carries (its value is the run id).
pub const RUN_LABEL: &str = "sandlot.run";
/// The label naming the sandlot instance that made a container (its value is [`DockerConfig::owner`]), so an
/// instance removes only its own leftovers, never the running containers of another sandlot on the same engine.
pub const OWNER_LABEL: &str = "sandlot.owner";

/// How the Docker backend runs containers.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// The uid:gid the runner images run as (the conversation directory is given to it).
    pub runner_uid: u32,
    pub runner_gid: u32,
    /// Who owns the containers: sandlot uses its conversation root (canonical path).
    pub owner: String,
}

impl DockerConfig {
    /// Containers owned by `owner`, run as uid/gid 10001 (the runner images' user).
    pub fn new(owner: impl Into<String>) -> Self {
        Self { runner_uid: 10001, runner_gid: 10001, owner: owner.into() }
    }
}

/// A runner image for one language.
#[derive(Debug, Clone)]
struct Runner {
    language: Language,
    image: String,
    version: String,
    /// Its `sandbox.packages` label, read (see [`packages_label`]).
    packages: BTreeMap<String, String>,
}

/// The label a runner image lists its key packages in: `name==version` pins separated by whitespace
/// (scripts/build-runners.sh writes scripts/python-env.sh's pins on runner-python, whose build checks them).
const PACKAGES_LABEL: &str = "sandbox.packages";

/// The packages of a [`PACKAGES_LABEL`] value, name → version; a word that is no `name==version` pin is left out.
fn packages_label(value: &str) -> BTreeMap<String, String> {
    value
        .split_whitespace()
        .filter_map(|pin| pin.split_once("=="))
        .filter(|(name, version)| !name.is_empty() && !version.is_empty())
        .map(|(name, version)| (name.to_owned(), version.to_owned()))
        .collect()
}

/// How long [`DockerBackend::abort_all`] keeps removing and waiting for this sandlot's containers to be gone.
const ABORT_BOUND: Duration = Duration::from_secs(30);
/// Between two listings of the containers still there while aborting.
const ABORT_POLL: Duration = Duration::from_millis(100);

/// The Docker backend.
pub struct DockerBackend {
    pub(crate) docker: Docker,
    pub(crate) config: DockerConfig,
    runners: Vec<Runner>,
    /// The live sandboxes' image (labelled `sandbox.live=true`), found at start; without it there are none.
    pub(crate) live_image: Option<String>,
    /// Set by [`Backend::abort_all`]: no container is created after it (the process is about to exit).
    closing: AtomicBool,
    /// Container creations under way: their containers may not be listed yet, so `abort_all` waits for them.
    creating: AtomicUsize,
}

/// Counts one container creation under way for as long as it lives (see [`DockerBackend::creating`]).
pub(crate) struct Creating<'a>(&'a AtomicUsize);

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl DockerBackend {
    /// Connects (honouring `DOCKER_HOST`), negotiates the API version and finds the runner images.
    pub async fn connect(config: DockerConfig) -> Result<Self> {
        // DOCKER_HOST as the docker CLI reads it (unix://, tcp:// or http://), else the local socket.
        let docker = Docker::connect_with_defaults()
            .map_err(|e| Error::engine("connect", e))?
            .negotiate_version()
            .await
            .map_err(|e| Error::engine("negotiate the API version", e))?;
        Ok(Self {
            runners: discover(&docker).await?,
            live_image: crate::live_image::find_image(&docker).await?,
            docker,
            config,
            closing: AtomicBool::new(false),
            creating: AtomicUsize::new(0),
        })
    }

    /// The engine's version, for `sandlot doctor`.
    pub async fn engine_version(&self) -> Result<String> {
        let version = self.docker.version().await.map_err(|e| Error::engine("version", e))?;
        Ok(format!("{} (API {})", version.version.unwrap_or_default(), version.api_version.unwrap_or_default()))
    }

    async fn remove(&self, id: &str) {
        remove_container(&self.docker, id).await;
    }

    /// Counts a container creation under way, or refuses it once [`Backend::abort_all`] ran. The count must be held
    /// until the container is created (listed), so `abort_all` finds it or waits for it.
    pub(crate) fn begin_creating(&self) -> Result<Creating<'_>> {
        // SeqCst pairs with `abort_all`: this counts the creation, then reads `closing`; it sets `closing`, then
        // reads the count. Either this sees `closing` and creates nothing, or `abort_all` waits for the creation.
        self.creating.fetch_add(1, Ordering::SeqCst);
        let creating = Creating(&self.creating);
        if self.closing.load(Ordering::SeqCst) {
            return Err(Error::ShuttingDown);
        }
        Ok(creating)
    }

    /// Gives the conversation's directory and the writable volumes to the runner's user (as root), and makes sure
    /// the conversation is bound nosuid,nodev. `what` names the run or sandbox in errors.
    pub(crate) fn hand_over(
        &self,
        workspace: &std::path::Path,
        mounts: &[sandlot_core::Mount],
        what: &str,
    ) -> Result<()> {
        let owner = self.storage_owner();
        sandlot_core::hand_over(workspace, owner)
            .map_err(|e| Error::Io { action: format!("hand over {}", workspace.display()), source: e })?;
        sandlot_core::hand_over_writable(mounts, owner)
            .map_err(|e| Error::Io { action: format!("hand over the volumes of {what}"), source: e })?;
        // `<root>/<id>/files`: the root's mount gives the bind its flags (only root may mount; see nosuid_root.rs),
        // unless it is a disk image's mount, which has them.
        if let Some(root) = workspace.parent().and_then(std::path::Path::parent)
            && owner.is_some()
            && !crate::nosuid_root::is_nosuid_nodev(workspace)
        {
            crate::ensure_nosuid_nodev(root)
                .map_err(|e| Error::Io { action: format!("mount {} nosuid,nodev", root.display()), source: e })?;
        }
        Ok(())
    }

    /// The ids of every container of this sandlot (its owner label), whatever their state, "removing" included.
    async fn owned_containers(&self) -> Result<Vec<String>> {
        let owner = format!("{OWNER_LABEL}={}", self.config.owner);
        let filters = HashMap::from([("label", vec![RUN_LABEL, owner.as_str()])]);
        let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        let containers =
            self.docker.list_containers(Some(options)).await.map_err(|e| Error::engine("list containers", e))?;
        Ok(containers.into_iter().filter_map(|c| c.id).collect())
    }

    fn container_body(&self, job: &Job, image: &str) -> ContainerCreateBody {
        let mut env = vec![format!("SANDLOT_CODE_BYTES={}", job.code.len())];
        if job.es_module {
            env.push("SANDLOT_EXT=mjs".to_owned()); // the entrypoint's file name: node runs it as an ES module
        }
        // The Home layout: the conversation at its path (also HOME), and a scratch tmpfs of its own at /data. The
        // Workspace layout: the conversation at its path (also HOME and the working directory), /data the image's
        // (read-only with the rootfs).
        if job.layout != Layout::Data {
            env.push(format!("HOME={}", job.layout.conversation_path()));
        }
        if job.layout.working_dir() != "/data" {
            env.push(format!("SANDLOT_WORKDIR={}", job.layout.working_dir())); // the entrypoint's `cd`
        }
        env.extend(job.env.iter().map(|(k, v)| format!("{k}={v}")));
        let host = Confinement {
            limits: &job.limits,
            layout: job.layout,
            workspace: &job.workspace,
            mounts: &job.mounts,
            user: (self.config.runner_uid, self.config.runner_gid),
        }
        .host_config();
        ContainerCreateBody {
            image: Some(image.to_owned()),
            user: Some(format!("{}:{}", self.config.runner_uid, self.config.runner_gid)),
            working_dir: Some(job.layout.working_dir().into()),
            env: Some(env),
            labels: Some(HashMap::from([
                (RUN_LABEL.to_owned(), job.run_id.clone()),
                (OWNER_LABEL.to_owned(), self.config.owner.clone()),
            ])),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(true),
            tty: Some(false),
            network_disabled: Some(true),
            host_config: Some(host),
            ..Default::default()
        }
    }
}

/// Images labelled `sandbox.runner=true`, one per language (the most recently created wins).
async fn discover(docker: &Docker) -> Result<Vec<Runner>> {
    let filters = HashMap::from([("label", vec!["sandbox.runner=true"])]);
    let options = ListImagesOptionsBuilder::default().filters(&filters).build();
    let mut images = docker.list_images(Some(options)).await.map_err(|e| Error::engine("list images", e))?;
    images.sort_by_key(|image| std::cmp::Reverse(image.created));
    let mut runners: Vec<Runner> = Vec::new();
    for image in images {
        let Some(language) = image.labels.get("sandbox.language").and_then(|l| l.parse::<Language>().ok()) else {
            continue;
        };
        if runners.iter().any(|r| r.language == language) {
            continue;
        }
        let name = image.repo_tags.first().cloned().unwrap_or_else(|| image.id.clone());
        let version = image.labels.get("sandbox.version").cloned().unwrap_or_else(|| name.clone());
        let packages = image.labels.get(PACKAGES_LABEL).map(|v| packages_label(v)).unwrap_or_default();
        runners.push(Runner { language, image: name, version, packages });
    }
    runners.sort_by_key(|r| r.language);
    Ok(runners)
}

/// Force-removes a container (and its anonymous volumes). A container already gone, or whose removal another request
/// has under way (409), is not an error here: whoever must know it is gone lists the containers afterwards.
pub(crate) async fn remove_container(docker: &Docker, id: &str) {
    let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => {}
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404 | 409, .. }) => {}
        Err(e) => tracing::warn!(container = id, "cannot remove container: {e}"),
    }
}

/// Removes a container if the future that made it is dropped before it removed it or handed it on (a cancelled run,
/// a cancelled start of a live sandbox).
pub(crate) struct ContainerGuard {
    pub(crate) docker: Docker,
    pub(crate) id: String,
    pub(crate) armed: bool,
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (docker, id) = (self.docker.clone(), self.id.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // A server that exits waits for this removal in `abort_all` (which lists what is left), since the
            // runtime drops this task when the process ends.
            runtime.spawn(async move { remove_container(&docker, &id).await });
        }
    }
}

/// How the waiting ended: the container exited (with this status), or sandlot stopped the run.
enum Ending {
    Exited(i64),
    Stopped(Stop),
}

#[async_trait]
impl Backend for DockerBackend {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn runners(&self) -> Vec<RunnerInfo> {
        self.runners
            .iter()
            .map(|r| RunnerInfo {
                language: r.language,
                image: r.image.clone(),
                version: r.version.clone(),
                packages: r.packages.clone(),
            })
            .collect()
    }

    /// Removes every container of this owner that a crashed predecessor left behind, at a server's start.
    async fn remove_leftovers(&self) {
        let containers = match self.owned_containers().await {
            Ok(containers) => containers,
            Err(e) => {
                tracing::warn!("cannot look for containers left behind: {e}");
                return;
            }
        };
        for id in containers {
            tracing::warn!(container = id, "removing a container of this sandlot");
            self.remove(&id).await;
        }
    }

    /// `engine`: the engine answers a ping; `runners`: there is at least one, and every runner image found at start
    /// is still there (one listing of the labelled images). Two requests on the engine's socket: a few milliseconds.
    /// The engine's own error text goes to the log only (it can name the socket or a host).
    async fn readiness(&self) -> Vec<ReadinessCheck> {
        if let Err(e) = self.docker.ping().await {
            tracing::debug!("readiness: the Docker engine does not answer: {e}");
            return vec![
                ReadinessCheck::failed("engine", "the Docker engine does not answer"),
                ReadinessCheck::failed("runners", "unknown: the engine does not answer"),
            ];
        }
        let engine = ReadinessCheck::ok("engine", "the Docker engine answers");
        let filters = HashMap::from([("label", vec!["sandbox.runner=true"])]);
        let options = ListImagesOptionsBuilder::default().filters(&filters).build();
        let images = match self.docker.list_images(Some(options)).await {
            Ok(images) => images,
            Err(e) => {
                tracing::debug!("readiness: cannot list the runner images: {e}");
                return vec![engine, ReadinessCheck::failed("runners", "the engine cannot list the runner images")];
            }
        };
        let present = |image: &str| images.iter().any(|i| i.id == image || i.repo_tags.iter().any(|t| t == image));
        let missing: Vec<&str> =
            self.runners.iter().filter(|r| !present(&r.image)).map(|r| r.language.as_str()).collect();
        let runners = if self.runners.is_empty() {
            ReadinessCheck::failed("runners", "no runner image: no language can run")
        } else if !missing.is_empty() {
            ReadinessCheck::failed("runners", format!("the runner image is gone for: {}", missing.join(", ")))
        } else {
            ReadinessCheck::ok("runners", format!("{} languages", self.runners.len()))
        };
        vec![engine, runners]
    }

    /// Containers outlive this process: before it exits, remove every container of this owner and wait until none
    /// is listed any more (a removal that another request, such as a cancelled run's, has under way counts only once
    /// it is done), within [`ABORT_BOUND`]. No container is created from the start of this on.
    async fn abort_all(&self) {
        // SeqCst pairs with `run`: it counts its creation, then reads `closing`; this sets `closing`, then reads the
        // count. Either the run sees `closing` and creates nothing, or this sees the creation and waits for it.
        self.closing.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + ABORT_BOUND;
        let mut asked = std::collections::HashSet::new();
        loop {
            let creating = self.creating.load(Ordering::SeqCst);
            match self.owned_containers().await {
                Ok(containers) if containers.is_empty() && creating == 0 => return,
                Ok(containers) => {
                    for id in containers {
                        // Ask once per container; after that, wait for the removal under way.
                        if asked.insert(id.clone()) {
                            tracing::warn!(container = id, "removing the container of a run still going");
                            self.remove(&id).await;
                        }
                    }
                }
                Err(e) => tracing::warn!("cannot list this sandlot's containers: {e}"),
            }
            if Instant::now() >= deadline {
                tracing::error!(bound_secs = ABORT_BOUND.as_secs(), "containers of this sandlot are still there");
                return;
            }
            tokio::time::sleep(ABORT_POLL).await;
        }
    }

    fn live(&self) -> Option<&dyn sandlot_core::LiveBackend> {
        self.live_image.is_some().then_some(self as &dyn sandlot_core::LiveBackend)
    }

    fn storage_owner(&self) -> Option<(u32, u32)> {
        nix::unistd::geteuid().is_root().then_some((self.config.runner_uid, self.config.runner_gid))
    }

    async fn run(&self, job: Job, sink: &dyn OutputSink) -> sandlot_core::Result<RunOutcome> {
        let runner = self
            .runners
            .iter()
            .find(|r| r.language == job.language)
            .ok_or_else(|| sandlot_core::Error::no_runner(job.language, self.runners.iter().map(|r| r.language)))?;
        if job.network.is_some() {
            // The server refuses an egress policy with this backend at its start: a leashed job here is a bug.
            return Err(sandlot_core::Error::invalid("network", "the Docker backend has no egress: loopback only"));
        }
        self.hand_over(&job.workspace, &job.mounts, &format!("run {}", job.run_id))?;
        let started = Instant::now();
        let creating = self.begin_creating()?;
        let created = self
            .docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                self.container_body(&job, &runner.image),
            )
            .await
            .map_err(|e| Error::engine("create container", e))?;
        let id = created.id;
        let mut guard = ContainerGuard { docker: self.docker.clone(), id: id.clone(), armed: true };
        // From here the container is listed: `abort_all` finds it.
        drop(creating);
        let result = self.execute(&id, &job, sink, started).await;
        let oom = match &result {
            Ok((Ending::Exited(_), ..)) => self
                .docker
                .inspect_container(&id, None::<bollard::query_parameters::InspectContainerOptions>)
                .await
                .ok()
                .and_then(|info| info.state)
                .and_then(|state| state.oom_killed)
                .unwrap_or(false),
            _ => false,
        };
        self.remove(&id).await;
        guard.armed = false;
        let (ending, stdout, stderr) = result?;
        let termination = match ending {
            Ending::Stopped(stop) => stop.termination(),
            Ending::Exited(_) if oom => Termination::OutOfMemory,
            // A file stopped at the fsize ulimit (= the disk quota): SIGXFSZ, as the native jail reports it.
            Ending::Exited(code) if code == 128 + 25 && sandlot_core::at_quota(&job) => Termination::DiskQuotaExceeded,
            // The init (tini) reports a signal as 128+N; the entrypoint execs the interpreter.
            Ending::Exited(code) if code > 128 && code < 160 => Termination::Signaled { signal: (code - 128) as i32 },
            Ending::Exited(code) => Termination::Exited { code: code as i32 },
        };
        Ok(RunOutcome::from_streams(termination, stdout, stderr, started.elapsed()))
    }
}

impl DockerBackend {
    async fn execute(
        &self,
        id: &str,
        job: &Job,
        sink: &dyn OutputSink,
        started: Instant,
    ) -> Result<(Ending, CapturedStream, CapturedStream)> {
        let options =
            AttachContainerOptionsBuilder::default().stdin(true).stdout(true).stderr(true).stream(true).build();
        let attached = self.docker.attach_container(id, Some(options)).await.map_err(|e| Error::engine("attach", e))?;
        self.docker
            .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
            .await
            .map_err(|e| Error::engine("start container", e))?;
        let mut input = attached.input;
        let mut output = attached.output;
        let feed = async move {
            // The program may exit without reading; a broken pipe is not an error. The half-close is stdin's end.
            let _ = input.write_all(job.code.as_bytes()).await;
            let _ = input.write_all(&job.stdin).await;
            let _ = input.shutdown().await;
        };
        let cap = job.limits.max_output_bytes;
        let read = async {
            let (mut stdout, mut stderr) = (CapturedStream::new(cap), CapturedStream::new(cap));
            while let Some(Ok(chunk)) = output.next().await {
                let (captured, stream, message) = match chunk {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        (&mut stdout, Stream::Stdout, message)
                    }
                    LogOutput::StdErr { message } => (&mut stderr, Stream::Stderr, message),
                    LogOutput::StdIn { .. } => continue,
                };
                let kept = captured.push(&message);
                if !kept.is_empty() {
                    sink.output(OutputChunk { stream, data: kept.to_vec() });
                }
            }
            // The tail is known only now: it goes out after the head, as the kept text has it.
            for (captured, stream) in [(&stdout, Stream::Stdout), (&stderr, Stream::Stderr)] {
                let rest = captured.rest();
                if !rest.is_empty() {
                    sink.output(OutputChunk { stream, data: rest });
                }
            }
            (stdout, stderr)
        };
        let wait = async {
            let options = WaitContainerOptionsBuilder::default().condition("not-running").build();
            let mut waiter = self.docker.wait_container(id, Some(options));
            let deadline = job.limits.timeout.saturating_sub(started.elapsed());
            tokio::select! {
                status = waiter.next() => match status {
                    Some(Ok(response)) => Ending::Exited(response.status_code),
                    Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ending::Exited(code),
                    _ => Ending::Exited(-1),
                },
                // The container's processes are the engine's to list: a /data that is not an image (the server is
                // not root) misses what they hold unlinked (docs/security.md).
                stop = stop_reason(job, deadline, &Vec::new) => Ending::Stopped(stop),
            }
        };
        let ((), (stdout, stderr), ending) = tokio::join!(feed, read, async {
            let ending = wait.await;
            if !matches!(ending, Ending::Exited(_)) {
                let options = KillContainerOptionsBuilder::default().signal("SIGKILL").build();
                let _ = self.docker.kill_container(id, Some(options)).await;
            }
            ending
        });
        Ok((ending, stdout, stderr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packages_label_reads_pins_and_leaves_other_words_out() {
        let packages = packages_label(" numpy==2.2.6  pandas==2.2.3\nmatplotlib==3.10.3 scipy ==1 x== ");
        let expected: BTreeMap<String, String> = [("matplotlib", "3.10.3"), ("numpy", "2.2.6"), ("pandas", "2.2.3")]
            .into_iter()
            .map(|(name, version)| (name.to_owned(), version.to_owned()))
            .collect();
        assert_eq!(packages, expected);
    }
}
