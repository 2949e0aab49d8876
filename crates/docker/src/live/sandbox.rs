//! A live sandbox of the Docker backend: one running container whose main process only waits, under Docker's init.
//! Each spawn is a `docker exec` in it; what a process starts in the background stays in the container (its init
//! adopts and reaps orphans) until the container is removed, which kills every process in it (the pid namespace
//! ends with its init). The container is removed by `close`, when the last handle is dropped (by a task), by
//! `abort_all` at a server's exit, or at the next start as a leftover (its labels).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use sandlot_core::{Language, LiveProcess, LiveSandbox, SandboxProcess, SandboxUsage, Spawn};

use super::cgroup::Cgroup;
use super::{ESBUILD_PATH, exec, host_proc};
use crate::backend::remove_container;

/// How long `close` waits for a removal another request has under way.
const CLOSE_BOUND: Duration = Duration::from_secs(30);

/// A running live container.
pub(crate) struct DockerSandbox {
    pub(crate) docker: Docker,
    pub(crate) sandbox_id: String,
    pub(crate) container: String,
    pub(crate) working_dir: String,
    /// `uid:gid`, the container's user, named again for each exec.
    pub(crate) user: String,
    /// Host pids of Docker's init (the container's pid 1) and of the command that only waits, its child: neither
    /// is the conversation's.
    pub(crate) helpers: [u32; 2],
    pub(crate) cgroup: Option<Cgroup>,
    /// Cleared when the container stops by itself (a task waits for it) or is closed.
    pub(crate) running: Arc<AtomicBool>,
    pub(crate) closed: AtomicBool,
}

/// The interpreter a language's processes start (found on the image's `PATH`; python3 is the scientific
/// environment's). TypeScript runs on node, with esbuild at hand (`SANDLOT_ESBUILD`).
fn interpreter(language: Language) -> &'static str {
    match language {
        Language::Python => "python3",
        Language::JavaScript | Language::TypeScript => "node",
        Language::Bash => "bash",
    }
}

fn exec_env(spawn: &Spawn) -> Vec<String> {
    let mut env: BTreeMap<&str, &str> = BTreeMap::new();
    if spawn.language == Language::TypeScript {
        env.insert("SANDLOT_ESBUILD", ESBUILD_PATH);
    }
    env.extend(spawn.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

#[async_trait]
impl LiveSandbox for DockerSandbox {
    fn id(&self) -> &str {
        &self.sandbox_id
    }

    async fn spawn(&self, spawn: Spawn) -> sandlot_core::Result<LiveProcess> {
        if !self.is_alive() {
            return Err(crate::Error::SandboxEnded { sandbox: self.sandbox_id.clone() }.into());
        }
        let cmd = std::iter::once(interpreter(spawn.language).to_owned()).chain(spawn.args.iter().cloned()).collect();
        let process = exec::start(
            &self.docker,
            &self.container,
            cmd,
            exec_env(&spawn),
            (&self.working_dir, &self.user),
            self.cgroup.clone(),
        )
        .await?;
        Ok(process)
    }

    async fn usage(&self) -> SandboxUsage {
        self.cgroup.as_ref().map(Cgroup::usage).unwrap_or_default()
    }

    async fn processes(&self) -> Vec<SandboxProcess> {
        let Some(cgroup) = &self.cgroup else { return Vec::new() };
        let mut processes: Vec<SandboxProcess> = cgroup
            .host_pids()
            .into_iter()
            .filter(|pid| !self.helpers.contains(pid))
            .filter_map(host_proc::process)
            .collect();
        processes.sort_by_key(|p| p.pid);
        processes
    }

    fn is_alive(&self) -> bool {
        !self.closed.load(Ordering::SeqCst) && self.running.load(Ordering::SeqCst)
    }

    /// `docker update` of the container's memory (and memory+swap, kept equal: no swap) and pids limits, each only
    /// when it is below what is asked.
    async fn raise_limits(&self, memory_mb: u64, pids: u64) -> sandlot_core::Result<()> {
        let options = None::<bollard::query_parameters::InspectContainerOptions>;
        let inspected = self
            .docker
            .inspect_container(&self.container, options)
            .await
            .map_err(|e| crate::Error::engine("inspect a live container", e))?;
        let host = inspected.host_config.unwrap_or_default();
        let memory = i64::try_from(memory_mb * 1024 * 1024).unwrap_or(i64::MAX);
        let pids = i64::try_from(pids).unwrap_or(i64::MAX);
        let mut update = bollard::models::ContainerUpdateBody::default();
        if host.memory.is_some_and(|current| current > 0 && current < memory) {
            (update.memory, update.memory_swap) = (Some(memory), Some(memory));
        }
        if host.pids_limit.is_some_and(|current| current > 0 && current < pids) {
            update.pids_limit = Some(pids);
        }
        if update.memory.is_none() && update.pids_limit.is_none() {
            return Ok(());
        }
        self.docker
            .update_container(&self.container, update)
            .await
            .map_err(|e| crate::Error::engine("raise a live container's limits", e).into())
    }

    async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        remove_container(&self.docker, &self.container).await;
        // Another request (a drop's task, abort_all) may have the removal under way: wait until it is done.
        let deadline = tokio::time::Instant::now() + CLOSE_BOUND;
        loop {
            let inspected = self
                .docker
                .inspect_container(&self.container, None::<bollard::query_parameters::InspectContainerOptions>)
                .await;
            match inspected {
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => break,
                _ if tokio::time::Instant::now() >= deadline => {
                    tracing::error!(container = self.container, "the live sandbox's container is still there");
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        self.running.store(false, Ordering::SeqCst);
    }
}

impl Drop for DockerSandbox {
    /// The last handle gone without `close`: the container is removed by a task (a server that exits removes it
    /// in `abort_all`, which lists what is left, since the runtime drops this task when the process ends).
    fn drop(&mut self) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let (docker, container) = (self.docker.clone(), self.container.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { remove_container(&docker, &container).await });
        }
    }
}
