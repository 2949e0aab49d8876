//! The [`JailSpec`] of one run: what the job asks for, with what the supervisor got for it (a cgroup slot, a uid,
//! a kept network namespace); and of a live sandbox ([`build_live`]), which runs no program of its own. Pure:
//! nothing here touches the host.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use sandlot_core::{Job, Layout, Limits, LiveSpec};

use super::cgroup::RunCgroup;
use super::runners::HostRunner;
use super::uids::UidLease;
use crate::protocol::{HeldLock, HomeMount, Identity, JailSpec, RlimitSpec, VolumeMount};

/// What the supervisor holds for a run, as the spec names it.
#[derive(Debug, Default, Clone)]
pub struct Resources {
    /// The cgroup slot's `cgroup.procs` files and its lock; `None` without cgroups.
    pub cgroup: Option<(Vec<PathBuf>, HeldLock)>,
    /// The leased host uid and its lock, and the storage uid (as root).
    pub uid: Option<(u32, HeldLock, u32)>,
    /// The conversation's kept network namespace.
    pub join_netns: Option<PathBuf>,
    /// A detached copy of the workspace's mount tree, made in the supervisor's mount namespace (as root).
    pub workspace_tree: Option<HeldLock>,
}

impl Resources {
    /// What this process holds for a sandbox, as its spec names it: the cgroup slot, the leased uid (with the
    /// storage uid), the network namespace to join and the workspace's detached tree. The init takes references of
    /// its own through these descriptors, so they must stay open until it has started.
    pub fn held(
        cgroup: Option<&RunCgroup>,
        uid: Option<(&UidLease, u32)>,
        join_netns: Option<PathBuf>,
        workspace_tree: Option<&OwnedFd>,
    ) -> Self {
        let holder_pid = std::process::id();
        Self {
            cgroup: cgroup.map(|c| (c.procs_files(), HeldLock { holder_pid, fd: c.lock_fd() })),
            uid: uid.map(|(u, storage)| (u.uid(), HeldLock { holder_pid, fd: u.lock_fd() }, storage)),
            join_netns,
            workspace_tree: workspace_tree.map(|tree| HeldLock { holder_pid, fd: tree.as_raw_fd() }),
        }
    }
}

/// The environment every program starts with, before the layout's and the job's own.
const BASE_ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("HOME", "/tmp"),
    ("TMPDIR", "/tmp"),
    ("USER", "sandbox"),
    ("LANG", "C.UTF-8"),
    ("PYTHONUNBUFFERED", "1"),
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("NO_COLOR", "1"),
];

/// The environment every program starts with (a Python template's too, which must start as a run's interpreter).
pub fn base_env() -> Vec<(String, String)> {
    BASE_ENV.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// The spec of `job` run by `runner` with `resources`. Without a cgroup slot, rlimits stand in for the pids and
/// memory limits.
pub fn build(job: &Job, runner: &HostRunner, resources: Resources) -> JailSpec {
    let extension = if job.es_module { "mjs" } else { job.language.file_extension() };
    let code_path = PathBuf::from(format!("/tmp/main.{extension}"));
    let mut env: BTreeMap<String, String> = BASE_ENV.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let home = home_mount(job.layout, &job.limits);
    if let Some(home) = &home {
        env.insert("HOME".into(), home.path.to_string_lossy().into_owned()); // the conversation's home: Baponi's `~` persists
    }
    env.extend(job.env.clone());
    let mut args = runner.args.clone();
    args.push(code_path.to_string_lossy().into_owned());
    let limits = &job.limits;
    let identity = Identity::standard();
    let no_cgroup = resources.cgroup.is_none();
    let (cgroup_procs, slot_lock) = resources.cgroup.map_or((vec![], None), |(procs, lock)| (procs, Some(lock)));
    JailSpec {
        program: runner.program.clone(),
        args,
        code_path,
        code: job.code.clone(),
        env: env.into_iter().collect(),
        workspace: job.workspace.clone(),
        workspace_tree: resources.workspace_tree,
        home,
        volumes: volume_mounts(&job.mounts),
        extra_ro_binds: runner.extra_ro_binds.clone(),
        cgroup_procs,
        slot_lock,
        switch_to: resources.uid.map(|(uid, _, _)| (uid, uid)),
        storage_id: resources.uid.map(|(_, _, storage)| storage),
        uid_lock: resources.uid.map(|(_, lock, _)| lock),
        join_netns: resources.join_netns,
        sandbox_uid: identity.uid,
        sandbox_gid: identity.gid,
        hostname: identity.hostname,
        tmp_mb: limits.tmp_mb,
        rlimits: rlimits(limits, limits.timeout.as_secs() + 1, no_cgroup),
        landlock: true,
        resident: false,
        forked: false,
        prepared: false,
    }
}

/// The spec of a prepared sandbox (see `prepared`) for Python runs of `limits` by `runner`: a forked run's, in
/// sandlot's layout, with no workspace and no code yet.
pub fn build_prepared(runner: &HostRunner, limits: &Limits, resources: Resources) -> JailSpec {
    let placeholder = Job {
        run_id: String::new(),
        language: runner.language,
        code: String::new(),
        es_module: false,
        stdin: vec![],
        env: BTreeMap::new(),
        limits: limits.clone(),
        workspace: PathBuf::new(),
        layout: Layout::Data,
        mounts: vec![],
        network: None,
        cancel: Default::default(),
    };
    JailSpec { forked: true, prepared: true, ..build(&placeholder, runner, resources) }
}

/// The spec of the live sandbox `live` with `resources`, every runner's prefixes in `binds` (it serves every
/// language). Its processes' environment is [`live_environment`]'s, sent with each; the per-process CPU limit is
/// off (an interpreter may live for hours; the sandbox's cgroup weight shares the cores fairly with the runs, and
/// the operator's cap, if set, bounds its rate), the rest are a run's.
pub fn build_live(live: &LiveSpec, binds: Vec<PathBuf>, resources: Resources) -> JailSpec {
    JailSpec {
        workspace: live.workspace.clone(),
        ..build_live_parts(&live.limits, live.layout, &live.mounts, binds, resources)
    }
}

/// A live sandbox's spec but its workspace (empty).
fn build_live_parts(
    limits: &Limits,
    layout: Layout,
    mounts: &[sandlot_core::Mount],
    binds: Vec<PathBuf>,
    resources: Resources,
) -> JailSpec {
    let identity = Identity::standard();
    let no_cgroup = resources.cgroup.is_none();
    let (cgroup_procs, slot_lock) = resources.cgroup.map_or((vec![], None), |(procs, lock)| (procs, Some(lock)));
    JailSpec {
        program: PathBuf::new(),
        args: vec![],
        code_path: PathBuf::new(),
        code: String::new(),
        env: live_environment(layout),
        workspace: PathBuf::new(),
        workspace_tree: resources.workspace_tree,
        home: home_mount(layout, limits),
        volumes: volume_mounts(mounts),
        extra_ro_binds: binds,
        cgroup_procs,
        slot_lock,
        switch_to: resources.uid.map(|(uid, _, _)| (uid, uid)),
        storage_id: resources.uid.map(|(_, _, storage)| storage),
        uid_lock: resources.uid.map(|(_, lock, _)| lock),
        // A leashed sandbox's link namespace (see `leashed`), else none: its loopback is its own, never a kept one
        // (the live maker passes no other).
        join_netns: resources.join_netns,
        sandbox_uid: identity.uid,
        sandbox_gid: identity.gid,
        hostname: identity.hostname,
        tmp_mb: limits.tmp_mb,
        rlimits: rlimits(limits, libc::RLIM_INFINITY, no_cgroup),
        landlock: true,
        resident: true,
        forked: false,
        prepared: false,
    }
}

/// The spec of a prepared live sandbox (see `live_pool`) of `limits`: a live sandbox's in sandlot's layout with no
/// volumes, and no workspace until its conversation is attached.
pub fn build_prepared_live(limits: &Limits, binds: Vec<PathBuf>, resources: Resources) -> JailSpec {
    let mut spec = build_live_parts(limits, Layout::Data, &[], binds, resources);
    spec.prepared = true;
    spec
}

/// A run's or a live sandbox's rlimits: `cpu_seconds` per process; without a cgroup slot, rlimits stand in for
/// the pids and memory limits.
fn rlimits(limits: &sandlot_core::Limits, cpu_seconds: u64, no_cgroup: bool) -> RlimitSpec {
    RlimitSpec {
        open_files: limits.open_files,
        file_size_bytes: limits.disk_mb * 1024 * 1024,
        cpu_seconds,
        processes: no_cgroup.then_some(limits.pids),
        data_bytes: no_cgroup.then_some(limits.memory_mb * 1024 * 1024),
    }
}

/// The volumes (Baponi's) as the sandbox binds them.
fn volume_mounts(mounts: &[sandlot_core::Mount]) -> Vec<VolumeMount> {
    mounts
        .iter()
        .map(|m| VolumeMount { host: m.host.clone(), path: m.path.clone().into(), read_only: m.read_only })
        .collect()
}

/// The environment every process of a live sandbox starts with, before its own: a run's, with `HOME` at the
/// conversation in the Home and Workspace layouts.
pub fn live_environment(layout: Layout) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = BASE_ENV.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    if layout != Layout::Data {
        env.insert("HOME".into(), layout.conversation_path().into());
    }
    env.into_iter().collect()
}

/// Where a layout other than sandlot's own puts the conversation, and its scratch `/data`.
fn home_mount(layout: Layout, limits: &Limits) -> Option<HomeMount> {
    (layout != Layout::Data)
        .then(|| HomeMount { path: layout.conversation_path().into(), scratch_mb: layout.scratch_data_mb(limits) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use sandlot_core::{Language, Limits};

    use super::*;

    fn job(layout: Layout) -> Job {
        Job {
            run_id: "r1".into(),
            language: Language::Python,
            code: "print(1)".into(),
            es_module: false,
            stdin: vec![],
            env: BTreeMap::from([("HOME".into(), "/elsewhere".into()), ("A".into(), "1".into())]),
            limits: Limits::default(),
            workspace: "/srv/c/files".into(),
            layout,
            mounts: vec![],
            network: None,
            cancel: Default::default(),
        }
    }

    fn runner() -> HostRunner {
        HostRunner {
            language: Language::Python,
            program: "/usr/bin/python3".into(),
            args: vec!["-I".into()],
            version: String::new(),
            packages: BTreeMap::new(),
            extra_ro_binds: vec!["/opt/py".into()],
        }
    }

    #[test]
    fn without_a_cgroup_rlimits_stand_in_for_pids_and_memory() {
        let job = job(Layout::Data);
        let spec = build(&job, &runner(), Resources::default());
        assert_eq!(spec.rlimits.processes, Some(job.limits.pids));
        assert_eq!(spec.rlimits.data_bytes, Some(job.limits.memory_mb * 1024 * 1024));
        assert_eq!((spec.switch_to, spec.storage_id, spec.slot_lock), (None, None, None));
        let lock = HeldLock { holder_pid: 1, fd: 5 };
        let held = Resources {
            cgroup: Some((vec!["/sys/fs/cgroup/sandlot/slot-0/cgroup.procs".into()], lock)),
            uid: Some((900_002, lock, 900_000)),
            join_netns: Some("/proc/1/fd/9".into()),
            workspace_tree: None,
        };
        let spec = build(&job, &runner(), held);
        assert_eq!((spec.rlimits.processes, spec.rlimits.data_bytes), (None, None));
        assert_eq!((spec.switch_to, spec.storage_id), (Some((900_002, 900_002)), Some(900_000)));
        assert_eq!(spec.cgroup_procs.len(), 1);
        assert_eq!(spec.join_netns.as_deref(), Some(std::path::Path::new("/proc/1/fd/9")));
    }

    #[test]
    fn the_program_gets_the_code_path_and_the_jobs_environment_last() {
        let spec = build(&job(Layout::Data), &runner(), Resources::default());
        assert_eq!(spec.args, ["-I", "/tmp/main.py"]);
        assert_eq!(spec.code_path, std::path::Path::new("/tmp/main.py"));
        let env: BTreeMap<_, _> = spec.env.into_iter().collect();
        assert_eq!(env["HOME"], "/elsewhere", "the job's own environment wins");
        assert_eq!(env["PYTHONUNBUFFERED"], "1");
        assert_eq!(spec.home, None);
        assert_eq!(spec.extra_ro_binds, [std::path::PathBuf::from("/opt/py")]);
    }

    #[test]
    fn the_home_layout_moves_the_workspace_and_home() {
        let mut job = job(Layout::Home { path: "/home/user" });
        job.env.clear();
        let spec = build(&job, &runner(), Resources::default());
        let home = spec.home.unwrap();
        assert_eq!(home.path, std::path::Path::new("/home/user"));
        assert!(home.scratch_mb.is_some(), "the Home layout has a scratch /data");
        assert!(spec.env.contains(&("HOME".into(), "/home/user".into())));
    }

    #[test]
    fn a_live_spec_is_resident_joins_the_namespace_it_is_given_and_binds_all() {
        let live = LiveSpec {
            sandbox_id: "s1".into(),
            conversation: sandlot_core::ConversationId::parse("c1").unwrap(),
            limits: Limits::default(),
            workspace: "/srv/c/files".into(),
            layout: Layout::Home { path: "/home/user" },
            mounts: vec![],
            network: None,
        };
        let lock = HeldLock { holder_pid: 1, fd: 5 };
        let held = Resources {
            cgroup: Some((vec!["/sys/fs/cgroup/sandlot/slot-0/cgroup.procs".into()], lock)),
            uid: Some((900_002, lock, 900_000)),
            join_netns: Some("/proc/1/fd/9".into()),
            workspace_tree: None,
        };
        let binds = vec![PathBuf::from("/opt/node"), PathBuf::from("/opt/py")];
        let spec = build_live(&live, binds.clone(), held);
        assert!(spec.resident);
        assert_eq!(spec.join_netns.as_deref(), Some(std::path::Path::new("/proc/1/fd/9")), "the link's, when leashed");
        assert_eq!(spec.extra_ro_binds, binds);
        assert_eq!(spec.rlimits.cpu_seconds, libc::RLIM_INFINITY);
        assert_eq!((spec.rlimits.processes, spec.rlimits.data_bytes), (None, None));
        assert_eq!(spec.home.unwrap().path, std::path::Path::new("/home/user"));
        assert!(spec.env.contains(&("HOME".into(), "/home/user".into())));
        assert_eq!(spec.env, live_environment(live.layout));
    }
}
