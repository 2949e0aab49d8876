//! A Node started ahead of a conversation's next run. Node cannot fork, and its threads start before any code of
//! ours could enter a Landlock domain, so a Node waiting for an unknown run cannot later take a conversation's
//! `/data` the way a forked Python child does (a Landlock rule binds to what is mounted when it is added). What can
//! be known ahead is the conversation: after a JavaScript or TypeScript run ends, the server builds the sandbox that
//! conversation's next run of the same kind would get, exactly as that run's path builds it (its `/data`, limits,
//! uid, cgroup slot, kept network namespace, confinement), and starts Node in it with a preload
//! (`node_ahead.js`) that waits on its stdin. The next run sends its code and environment there, and Node loads
//! the code as its main module: the run pays no interpreter start.
//!
//! Invariants: an ahead sandbox serves one run of its conversation and is never reused; it holds the conversation
//! as a run does (a shared lock: neither removed nor its image unmounted meanwhile), and lets go when asked or
//! when idle too long; it is used only for a run whose spec, built on the path, would equal its own but for the
//! code (the same environment too), and only while its `/data` is still the directory at the conversation's path.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sandlot_core::{Job, Layout, OutputSink};

use super::cgroup::CgroupSupport;
use super::error::{Error, Result};
use super::netns_pool::NetnsPool;
use super::run::{Finished, Run};
use super::runners::HostRunner;
use super::spec::{self, Resources};
use super::uids::UidLeases;
use super::warm_pool::WarmPool;
use crate::protocol::JailSpec;
use crate::sys::mount::clone_tree;

/// The preload Node runs before its main module (see `node_ahead.js`).
const PRELOAD: &str = include_str!("node_ahead.js");
/// Where pid 1 writes the preload, as it writes a run's code (the preload removes it once its run came).
const PRELOAD_PATH: &str = "/tmp/.sandlot-ahead.js";

/// What building an ahead sandbox takes: the server's inits, uids, cgroups and kept network namespaces.
pub struct Builder {
    pub inits: Arc<WarmPool>,
    pub uids: Arc<UidLeases>,
    pub cgroups: Arc<CgroupSupport>,
    pub netns: Option<Arc<NetnsPool>>,
    pub storage_uid: u32,
    /// The JavaScript runner's Node: JavaScript, and TypeScript stripped in the server, run on it.
    pub node: PathBuf,
}

/// A sandbox built for its conversation's next run, Node waiting in it.
pub struct Ahead {
    run: Run,
    pipes: super::init_process::InitPipes,
    /// The spec its run must have, built on the path, but for the code and resources (see [`shape`]).
    shape: JailSpec,
    /// The conversation's files directory, and its device and inode when the sandbox got it.
    workspace: PathBuf,
    identity: (u64, u64),
    /// The detached tree the init mounted at `/data`, and the hold on the conversation: both until the run ends.
    tree: OwnedFd,
    hold: OwnedFd,
    /// The conversation's kept network namespace it joined, given back when it ends.
    kept_netns: Option<OwnedFd>,
    pub built: Instant,
}

/// What a run through an ahead sandbox leaves to the caller: the run, how it finished, and the kept network
/// namespace it joined; or the sandbox back, unused, with why.
pub type Taken = std::result::Result<(Run, Result<Finished>, Option<OwnedFd>), (Ahead, String)>;

impl Builder {
    /// Whether a run of `job` by `runner` may be served by an ahead sandbox (and may leave one for its next run): a
    /// stateless run on this Node in sandlot's layout, with no volumes and no network.
    pub fn fits(&self, job: &Job, runner: &HostRunner) -> bool {
        runner.program == self.node && job.layout == Layout::Data && job.mounts.is_empty() && job.network.is_none()
    }

    /// Builds the sandbox `job`'s conversation's next run of its kind would get, Node started in it; tells
    /// `started` its init's pid as soon as it has one. `Ok(None)`: the conversation is gone or being removed.
    pub async fn build(&self, job: &Job, runner: &HostRunner, started: impl FnOnce(i32)) -> Result<Option<Ahead>> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |e: std::io::Error| Error::io(what.clone(), e)
        };
        let Some(hold) = sandlot_core::hold_conversation(&job.workspace)
            .map_err(|e| Error::io("hold a conversation", std::io::Error::other(e.to_string())))?
        else {
            return Ok(None);
        };
        let tree = clone_tree(&job.workspace).map_err(|e| io("open_tree a conversation")(e.into()))?;
        let identity = identity_of(&tree).map_err(io("stat a conversation's tree"))?;
        let uid = self.uids.lease().map_err(io("lease a sandbox uid for an ahead sandbox"))?;
        let cgroup = self.cgroups.acquire(&job.limits).map_err(io("set up cgroups for an ahead sandbox"))?;
        let kept_netns = self.netns.as_ref().and_then(|pool| pool.take(&job.workspace));
        let join_netns = kept_netns.as_ref().map(NetnsPool::path_of);
        let resources = Resources::held(cgroup.as_ref(), Some((&uid, self.storage_uid)), join_netns, Some(&tree));
        // Node starts with the run's environment (so with its `NODE_*` variables, which change how Node starts), the
        // preload first among its options.
        let mut spec = spec::build(job, runner, resources);
        spec.code = PRELOAD.to_owned();
        spec.code_path = PathBuf::from(PRELOAD_PATH);
        let preload = format!("--require {PRELOAD_PATH}");
        match spec.env.iter_mut().find(|(name, _)| name == "NODE_OPTIONS") {
            Some((_, options)) => *options = format!("{preload} {options}"),
            None => spec.env.push(("NODE_OPTIONS".into(), preload)),
        }
        let give_back = |kept_netns: Option<OwnedFd>| {
            if let (Some(pool), Some(netns)) = (&self.netns, kept_netns) {
                pool.give_back(job.workspace.clone(), netns);
            }
        };
        let init = match self.inits.take() {
            Ok(init) => init,
            Err(e) => {
                give_back(kept_netns);
                return Err(e);
            }
        };
        let (mut run, mut pipes) = Run::new(init, cgroup, Some(uid));
        started(run.init_pid());
        // Node starts at the least CPU weight, so that its start yields to the runs going on (its run restores it).
        let sent = match run.set_background(true) {
            Ok(()) => run.send_spec(&mut pipes, &spec).await,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            run.end().await;
            give_back(kept_netns);
            return Err(e);
        }
        let shape = shape(&spec::build(job, runner, Resources::default()));
        let workspace = job.workspace.clone();
        Ok(Some(Ahead { run, pipes, shape, workspace, identity, tree, hold, kept_netns, built: Instant::now() }))
    }

    /// Ends `ahead` unused, once every process of it is gone; gives its kept network namespace back.
    pub async fn end(&self, ahead: Ahead) {
        let Ahead { run, workspace, kept_netns, tree, hold, .. } = ahead;
        run.end().await;
        if let (Some(pool), Some(netns)) = (&self.netns, kept_netns) {
            pool.give_back(workspace, netns);
        }
        drop((tree, hold));
    }
}

impl Ahead {
    /// Its conversation's files directory.
    pub fn workspace(&self) -> &std::path::Path {
        &self.workspace
    }

    /// Its init's pid on the host.
    pub fn init_pid(&self) -> i32 {
        self.run.init_pid()
    }

    /// Runs `job` by `runner` in it, if it is the sandbox `job` would get and is still alive.
    pub async fn run(mut self, job: &Job, runner: &HostRunner, sink: &dyn OutputSink, capture_netns: bool) -> Taken {
        let expected = spec::build(job, runner, Resources::default());
        if shape(&expected) != self.shape {
            return Err((self, "its run's spec differs".into()));
        }
        match std::fs::metadata(&job.workspace) {
            Ok(now) if (now.dev(), now.ino()) == self.identity => {}
            _ => return Err((self, "its conversation's directory is no longer the one it has".into())),
        }
        if !self.run.is_alive() {
            return Err((self, "it died while it waited".into()));
        }
        if let Err(e) = self.run.set_background(false) {
            return Err((self, e.to_string()));
        }
        let input = match run_input(&expected) {
            Ok(input) => input,
            Err(e) => return Err((self, format!("encode its run: {e}"))),
        };
        let Self { mut run, pipes, kept_netns, tree, hold, .. } = self;
        let finished =
            run.execute_sent(pipes, input, &expected, job, sink, capture_netns && kept_netns.is_none()).await;
        drop((tree, hold)); // held until the run ended
        Ok((run, finished, kept_netns))
    }
}

/// The device and inode of the tree's root.
fn identity_of(tree: &OwnedFd) -> std::io::Result<(u64, u64)> {
    let stat = std::fs::File::from(tree.try_clone()?).metadata()?;
    Ok((stat.dev(), stat.ino()))
}

/// What of a run's spec an ahead sandbox was built for: all but its code (which its run sends). Its environment
/// too: Node started with it, and reads some of it only then (`NODE_OPTIONS`, `NODE_PATH`, ...).
fn shape(spec: &JailSpec) -> JailSpec {
    JailSpec { code: String::new(), ..spec.clone() }
}

/// What the preload reads on fd 0 before the run's own input: a 10-digit length, then the run's main module
/// path, code and environment as JSON.
fn run_input(spec: &JailSpec) -> serde_json::Result<Vec<u8>> {
    let json = serde_json::to_vec(&serde_json::json!({
        "file": spec.code_path,
        "code": spec.code,
        "env": spec.env,
    }))?;
    let mut input = format!("{:010}", json.len()).into_bytes();
    input.extend(json);
    Ok(input)
}
