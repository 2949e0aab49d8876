//! The Docker backend's live sandboxes (issue 31): one container per conversation that stays up between calls, made
//! from the image labelled `sandbox.live=true` (runner-live: every language's interpreter, esbuild for TypeScript).
//! The container is confined exactly as a run's (`hardening.rs`), its limits bounding everything it runs together;
//! its main process is a `sleep infinity` under Docker's init, which reaps what the conversation leaves behind. It
//! carries the run labels (`sandlot.run` = the sandbox id, `sandlot.owner`), so `abort_all` and a later start's
//! leftovers removal remove it like a run's container, and `sandlot.live` = the conversation.

mod cgroup;
mod exec;
mod host_proc;
mod sandbox;
mod stdin;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::WaitContainerOptionsBuilder;
use futures::StreamExt;
use sandlot_core::{Layout, LiveBackend, LiveSandbox, LiveSpec};

use crate::backend::{ContainerGuard, DockerBackend, OWNER_LABEL, RUN_LABEL};
use crate::hardening::Confinement;
use crate::{Error, Result};
use cgroup::Cgroup;
use sandbox::DockerSandbox;

/// The label of a live sandbox's container: its value is the conversation.
pub const LIVE_LABEL: &str = "sandlot.live";
/// Where runner-live has esbuild (runners/Dockerfile-live), given to TypeScript processes as `SANDLOT_ESBUILD`.
pub(crate) const ESBUILD_PATH: &str = "/opt/esbuild/node_modules/esbuild";
/// How long the init may take to start the sleeper (a fork and an exec: milliseconds).
const SLEEPER_BOUND: std::time::Duration = std::time::Duration::from_secs(10);
/// The container's main process: it only waits, under Docker's init.
const SLEEPER: [&str; 2] = ["sleep", "infinity"];

impl DockerBackend {
    fn live_container_body(&self, spec: &LiveSpec, image: &str) -> ContainerCreateBody {
        let user = (self.config.runner_uid, self.config.runner_gid);
        let mut env = vec!["LANG=C.UTF-8".to_owned(), "TMPDIR=/tmp".to_owned()];
        if spec.layout != Layout::Data {
            env.push(format!("HOME={}", spec.layout.conversation_path()));
        }
        let confinement = Confinement {
            limits: &spec.limits,
            layout: spec.layout,
            workspace: &spec.workspace,
            mounts: &spec.mounts,
            user,
        };
        ContainerCreateBody {
            image: Some(image.to_owned()),
            entrypoint: Some(SLEEPER.iter().map(|s| (*s).to_owned()).collect()),
            cmd: Some(Vec::new()),
            user: Some(format!("{}:{}", user.0, user.1)),
            working_dir: Some(spec.layout.conversation_path().into()),
            env: Some(env),
            labels: Some(HashMap::from([
                (RUN_LABEL.to_owned(), spec.sandbox_id.clone()),
                (OWNER_LABEL.to_owned(), self.config.owner.clone()),
                (LIVE_LABEL.to_owned(), spec.conversation.to_string()),
            ])),
            tty: Some(false),
            network_disabled: Some(true),
            host_config: Some(confinement.host_config()),
            ..Default::default()
        }
    }

    async fn start_live(&self, spec: LiveSpec) -> Result<DockerSandbox> {
        let image = self.live_image.clone().ok_or(Error::NoLiveImage)?;
        if spec.network.is_some() {
            // The server refuses an egress policy with this backend at its start: a leashed sandbox here is a bug.
            return Err(Error::Unsupported("the Docker backend has no egress: its live sandboxes have loopback only"));
        }
        self.hand_over(&spec.workspace, &spec.mounts, &format!("sandbox {}", spec.sandbox_id))?;
        let creating = self.begin_creating()?;
        let body = self.live_container_body(&spec, &image);
        let created = self
            .docker
            .create_container(None::<bollard::query_parameters::CreateContainerOptions>, body)
            .await
            .map_err(|e| Error::engine("create container", e))?;
        // From here the container is listed: `abort_all` finds it.
        drop(creating);
        let container = created.id;
        // Removes the container if this start fails or is cancelled before the sandbox owns it.
        let mut guard = ContainerGuard { docker: self.docker.clone(), id: container.clone(), armed: true };
        let init = self.started(&container).await?;
        // Signals, waits, usage and processes work on the host's pids: refuse rather than run a sandbox whose
        // processes could not be interrupted (sandlot in a container of its own needs the host's pid namespace).
        if !host_proc::in_container(init, &container) {
            return Err(Error::NoHostPids { container });
        }
        let cgroup = Cgroup::of_process(init)
            .inspect_err(|e| tracing::warn!(container, "cannot find the live sandbox's cgroup: {e}"))
            .ok();
        let sleeper = sleeper(init).await;
        guard.armed = false;
        let running = Arc::new(AtomicBool::new(true));
        let (docker, id, flag) = (self.docker.clone(), container.clone(), running.clone());
        tokio::spawn(async move {
            let options = WaitContainerOptionsBuilder::default().condition("not-running").build();
            let _ = docker.wait_container(&id, Some(options)).next().await;
            flag.store(false, Ordering::SeqCst);
        });
        Ok(DockerSandbox {
            docker: self.docker.clone(),
            sandbox_id: spec.sandbox_id,
            container,
            working_dir: spec.layout.conversation_path().to_owned(),
            user: format!("{}:{}", self.config.runner_uid, self.config.runner_gid),
            helpers: [init, sleeper],
            cgroup,
            running,
            closed: AtomicBool::new(false),
        })
    }

    /// Starts the container and returns its init's host pid.
    async fn started(&self, container: &str) -> Result<u32> {
        self.docker
            .start_container(container, None::<bollard::query_parameters::StartContainerOptions>)
            .await
            .map_err(|e| Error::engine("start container", e))?;
        let info = self
            .docker
            .inspect_container(container, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .map_err(|e| Error::engine("inspect container", e))?;
        info.state
            .and_then(|state| state.pid)
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|&pid| pid > 0)
            .ok_or_else(|| Error::SandboxEnded { sandbox: container.to_owned() })
    }
}

/// The host pid of the sleeper: the init's one child as the container starts, since nothing else runs in it yet. The
/// init forks it after the engine answers the start, so it is waited for (0 if it never shows, which only lists it
/// among the conversation's processes).
async fn sleeper(init: u32) -> u32 {
    let deadline = tokio::time::Instant::now() + SLEEPER_BOUND;
    loop {
        match host_proc::children(init).first() {
            Some(&pid) => return pid,
            None if tokio::time::Instant::now() >= deadline => {
                tracing::warn!(init, "the live sandbox's sleeper does not show");
                return 0;
            }
            None => tokio::time::sleep(std::time::Duration::from_millis(2)).await,
        }
    }
}

#[async_trait]
impl LiveBackend for DockerBackend {
    async fn start(&self, spec: LiveSpec) -> sandlot_core::Result<Arc<dyn LiveSandbox>> {
        Ok(Arc::new(self.start_live(spec).await?))
    }
}
