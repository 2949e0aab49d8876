//! How a live sandbox is built (see `live`), from what the backend shares with its pool of prepared live sandboxes
//! (`live_pool`), which builds them in background tasks: [`LiveMaker`] holds it all, owned.
//!
//! A sandbox is built for a conversation (its workspace handed over to the storage owner and cloned into the spec),
//! or prepared: sandlot's layout, no volumes, no workspace (`JailSpec::prepared`, `/data` left empty until
//! `LiveJail::attach`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use sandlot_core::{Language, LiveSpec};

use super::cgroup::CgroupSupport;
use super::error::{Error, Result};
use super::init_process::LiveInit;
use super::live_forked::LiveFork;
use super::live_sandbox::LiveJail;
use super::live_state::{Held, LiveParts, LiveState};
use super::python_template::PythonTemplates;
use super::spec::{self, Resources};
use super::uids::UidLeases;
use super::warm_pool::WarmPool;

/// What building a live sandbox takes.
pub struct LiveMaker {
    /// The server's inits (their zygote clones a live sandbox's).
    pub inits: Arc<WarmPool>,
    pub uids: Arc<UidLeases>,
    pub cgroups: Arc<CgroupSupport>,
    /// The server runs as root (uid leases, the workspace's tree).
    pub root: bool,
    /// The Python templates and the Python runner's program, when Python processes are forked.
    pub templates: Option<Arc<PythonTemplates>>,
    pub python: Option<PathBuf>,
    /// What each language's processes exec.
    pub programs: BTreeMap<Language, PathBuf>,
    /// The server's egress, for leashed live sandboxes (see `leashed`).
    pub egress: Option<super::EgressHandle>,
    /// Every runner's prefixes (and esbuild's).
    pub binds: Vec<PathBuf>,
    pub esbuild: Option<PathBuf>,
    /// Who the conversations' files are handed over to (as root).
    pub owner: Option<(u32, u32)>,
    pub storage_uid: u32,
}

impl LiveMaker {
    /// Builds the live sandbox of `live` (prepared: `live`'s workspace and mounts are not used, see the module's
    /// header), and waits until it is ready; tells `started` its init's host pid as soon as it has one. Also the
    /// sandbox's run uid (as root).
    pub async fn build(
        &self,
        live: LiveSpec,
        prepared: bool,
        started: impl FnOnce(i32),
    ) -> Result<(LiveJail, Option<u32>)> {
        if self.programs.is_empty() {
            return Err(Error::io("start a live sandbox", std::io::Error::other("no runner")));
        }
        if !prepared {
            sandlot_core::hand_over(&live.workspace, self.owner)
                .map_err(|e| Error::io(format!("hand over {}", live.workspace.display()), e))?;
            sandlot_core::hand_over_writable(&live.mounts, self.owner)
                .map_err(|e| Error::io(format!("hand over the volumes of live sandbox {}", live.sandbox_id), e))?;
        }
        let uid = match self.root {
            true => Some(
                self.uids
                    .lease()
                    .map_err(|e| Error::io(format!("lease a sandbox uid for live sandbox {}", live.sandbox_id), e))?,
            ),
            false => None,
        };
        let cgroup = self
            .cgroups
            .acquire_for(&live.limits, false)
            .map_err(|e| Error::io(format!("set up cgroups for live sandbox {}", live.sandbox_id), e))?;
        let workspace_tree = match self.root && !prepared {
            true => Some(
                crate::sys::mount::clone_tree(&live.workspace)
                    .map_err(|e| Error::io(format!("open_tree {}", live.workspace.display()), e.into()))?,
            ),
            false => None,
        };
        // A leashed sandbox joins the namespace of its link (made for it, gone with it); a prepared one has none.
        let network = match (&live.network, prepared) {
            (Some(wanted), false) => Some(super::leashed::leash(self.egress.as_ref(), wanted).await?),
            _ => None,
        };
        let join_netns = network.as_ref().map(|network| super::netns_pool::NetnsPool::path_of(network.netns()));
        let resources = Resources::held(
            cgroup.as_ref(),
            uid.as_ref().map(|u| (u, self.storage_uid)),
            join_netns,
            workspace_tree.as_ref(),
        );
        let jail_spec = match prepared {
            true => spec::build_prepared_live(&live.limits, self.binds.clone(), resources),
            false => spec::build_live(&live, self.binds.clone(), resources),
        };
        let fork = match (&self.templates, &self.python, &uid) {
            (Some(templates), Some(python), Some(_)) => Some(LiveFork {
                templates: Arc::clone(templates),
                program: python.clone(),
                rlimits: jail_spec.rlimits.clone(),
                landlock: jail_spec.landlock,
                home: jail_spec.home.clone(),
                cgroup_procs: cgroup.as_ref().map(|c| c.procs_files()).unwrap_or_default(),
            }),
            _ => None,
        };
        let run_uid = uid.as_ref().map(|u| u.uid());
        let LiveInit { process, channel, events } = LiveInit::from_zygote(self.inits.zygote())?;
        started(process.pid().as_raw());
        let init = crate::sys::pidfd_open(process.pid()).map_err(|e| Error::io("open a pidfd for the init", e))?;
        let state = LiveState::new(LiveParts {
            id: live.sandbox_id,
            limits: live.limits,
            programs: self.programs.clone(),
            env: with_proxy_variables(jail_spec.env.clone(), network.as_deref()),
            esbuild: self.esbuild.clone(),
            channel,
            init,
            held: Held { cgroup, uid, workspace_tree, network },
        });
        Ok((LiveJail::start(state, process, events, &jail_spec, fork).await?, run_uid))
    }
}

/// `env` with the proxy variables of `network` (see `leashed`) where it does not set them itself.
fn with_proxy_variables(
    mut env: Vec<(String, String)>,
    network: Option<&sandlot_egress::SandboxNetwork>,
) -> Vec<(String, String)> {
    for (name, value) in network.map(|network| network.environment()).unwrap_or_default() {
        if !env.iter().any(|(set, _)| *set == name) {
            env.push((name, value));
        }
    }
    env
}
