//! Cgroups for one run, on cgroup v2 or on v1/hybrid hosts (like ours), written directly to cgroupfs.
//!
//! The supervisor creates `sandlot/<run>` in each hierarchy it uses, writes the limits, and passes the
//! `cgroup.procs` files to the init, which joins them before creating its namespaces (so the sandbox's cgroup
//! namespace is rooted there). After the run it reads the OOM counter, kills stragglers and removes the groups.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandlot_core::Limits;

/// Root of the cgroup mounts.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Name of sandlot's parent group in each hierarchy.
const PARENT: &str = "sandlot";
const CPU_PERIOD_US: u64 = 100_000;

/// What this host lets sandlot do with cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupSupport {
    /// Unified hierarchy with the memory, pids and cpu controllers.
    V2 { parent: PathBuf },
    /// v1 controllers (also hybrid hosts, whose unified hierarchy has no controllers).
    V1 { memory: PathBuf, pids: PathBuf, cpu: PathBuf },
    /// Not root, or no usable hierarchy: only rlimits apply.
    Unavailable { reason: String },
}

impl CgroupSupport {
    /// Looks at the host; creates sandlot's parent groups when they are usable. With `tune`, turns on the
    /// `favordynmods` option of the cgroup2 mount (see [`favor_dynamic_modifications`]).
    pub fn detect(tune: bool) -> Self {
        if !nix::unistd::geteuid().is_root() {
            return Self::Unavailable { reason: "not running as root".into() };
        }
        if tune && let Err(e) = favor_dynamic_modifications() {
            tracing::warn!("cannot enable favordynmods on the cgroup2 mount (each run pays ~6 ms more): {e}");
        }
        let root = Path::new(CGROUP_ROOT);
        if let Ok(controllers) = std::fs::read_to_string(root.join("cgroup.controllers")) {
            return Self::detect_v2(root, &controllers);
        }
        let (memory, pids, cpu) = (root.join("memory"), root.join("pids"), root.join("cpu"));
        for controller in [&memory, &pids, &cpu] {
            if !controller.join("cgroup.procs").exists() {
                return Self::Unavailable { reason: format!("no v1 controller at {}", controller.display()) };
            }
        }
        let (memory, pids, cpu) = (memory.join(PARENT), pids.join(PARENT), cpu.join(PARENT));
        for dir in [&memory, &pids, &cpu] {
            if let Err(e) = std::fs::create_dir_all(dir) {
                return Self::Unavailable { reason: format!("cannot create {}: {e}", dir.display()) };
            }
        }
        Self::V1 { memory, pids, cpu }
    }

    fn detect_v2(root: &Path, controllers: &str) -> Self {
        let wanted = ["memory", "pids", "cpu"];
        if let Some(missing) = wanted.iter().find(|c| !controllers.split_whitespace().any(|have| have == **c)) {
            return Self::Unavailable { reason: format!("cgroup v2 without the {missing} controller") };
        }
        let parent = root.join(PARENT);
        let enable = "+memory +pids +cpu";
        let setup = std::fs::write(root.join("cgroup.subtree_control"), enable)
            .and_then(|()| std::fs::create_dir_all(&parent))
            .and_then(|()| std::fs::write(parent.join("cgroup.subtree_control"), enable));
        match setup {
            Ok(()) => Self::V2 { parent },
            Err(e) => {
                Self::Unavailable { reason: format!("cannot delegate controllers under {}: {e}", parent.display()) }
            }
        }
    }

    /// A short description for `sandlot doctor`.
    pub fn describe(&self) -> String {
        match self {
            Self::V2 { parent } => format!("cgroup v2 (memory, pids, cpu) under {}", parent.display()),
            Self::V1 { memory, .. } => {
                format!("cgroup v1 (memory, pids, cpu) under {}", memory.parent().unwrap_or(memory).display())
            }
            Self::Unavailable { reason } => format!("unavailable: {reason}"),
        }
    }

    /// Creates the groups of one run with its limits.
    pub fn create(&self, run_id: &str, limits: &Limits) -> std::io::Result<Option<RunCgroup>> {
        let memory = (limits.memory_mb * 1024 * 1024).to_string();
        let quota = ((limits.cpus * CPU_PERIOD_US as f64) as u64).max(1000);
        let group = match self {
            Self::Unavailable { .. } => return Ok(None),
            Self::V2 { parent } => {
                let dir = parent.join(run_id);
                let group = RunCgroup { oom_file: dir.join("memory.events"), dirs: vec![dir.clone()] };
                std::fs::create_dir(&dir)?;
                write(&dir, "memory.max", &memory)?;
                write(&dir, "memory.swap.max", "0")?;
                // On OOM, kill the whole run rather than one process of it.
                write(&dir, "memory.oom.group", "1")?;
                write(&dir, "pids.max", &limits.pids.to_string())?;
                write(&dir, "cpu.max", &format!("{quota} {CPU_PERIOD_US}"))?;
                group
            }
            Self::V1 { memory: mem_parent, pids, cpu } => {
                let dirs = vec![mem_parent.join(run_id), pids.join(run_id), cpu.join(run_id)];
                let group = RunCgroup { oom_file: dirs[0].join("memory.oom_control"), dirs: dirs.clone() };
                for dir in &dirs {
                    std::fs::create_dir(dir)?;
                }
                write(&dirs[0], "memory.limit_in_bytes", &memory)?;
                if dirs[0].join("memory.memsw.limit_in_bytes").exists() {
                    write(&dirs[0], "memory.memsw.limit_in_bytes", &memory)?;
                }
                write(&dirs[1], "pids.max", &limits.pids.to_string())?;
                write(&dirs[2], "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                write(&dirs[2], "cpu.cfs_quota_us", &quota.to_string())?;
                group
            }
        };
        Ok(Some(group))
    }
}

/// The cgroup2 mount point and its superblock options, from `/proc/self/mountinfo`.
fn cgroup2_mount() -> Option<(PathBuf, String)> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        if right.next()? != "cgroup2" {
            return None;
        }
        let options = right.nth(1)?.to_owned();
        let mount_point = left.split_whitespace().nth(4)?;
        mount_point.starts_with(CGROUP_ROOT).then(|| (PathBuf::from(mount_point), options))
    })
}

/// Whether the cgroup2 mount has `favordynmods` (None: no cgroup2 mount).
pub fn favordynmods_enabled() -> Option<bool> {
    cgroup2_mount().map(|(_, options)| options.split(',').any(|o| o == "favordynmods"))
}

/// Moving a process into a cgroup takes a global lock whose writer waits for an RCU grace period: about 6 ms on
/// our machines, on every run, for v1 and v2 alike. The cgroup2 mount option `favordynmods` (Linux 6.0+) makes
/// that lock favour writers: the move then costs ~0.1 ms, at the price of slightly costlier fork and exit. The
/// lock is global, so the option on the cgroup2 mount helps v1 hierarchies too. This remounts the cgroup2 mount
/// with its current options plus `favordynmods`; it is a no-op when the option is already on.
pub fn favor_dynamic_modifications() -> std::io::Result<()> {
    let Some((mount_point, options)) = cgroup2_mount() else { return Ok(()) };
    if options.split(',').any(|o| o == "favordynmods") {
        return Ok(());
    }
    let kept: Vec<&str> = options.split(',').filter(|o| *o != "rw" && *o != "ro").collect();
    let data = if kept.is_empty() { "favordynmods".to_owned() } else { format!("{},favordynmods", kept.join(",")) };
    nix::mount::mount(None::<&str>, &mount_point, None::<&str>, nix::mount::MsFlags::MS_REMOUNT, Some(data.as_str()))?;
    tracing::info!(mount = %mount_point.display(), "enabled favordynmods on the cgroup2 mount");
    Ok(())
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(dir.join(file), value)
        .map_err(|e| std::io::Error::new(e.kind(), format!("write {value} to {}: {e}", dir.join(file).display())))
}

/// The cgroups of one run.
#[derive(Debug)]
pub struct RunCgroup {
    dirs: Vec<PathBuf>,
    oom_file: PathBuf,
}

impl RunCgroup {
    /// The `cgroup.procs` files the init must join.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Whether the kernel's OOM killer fired in this group.
    pub fn oom_killed(&self) -> bool {
        let Ok(text) = std::fs::read_to_string(&self.oom_file) else { return false };
        text.lines().any(|line| {
            let mut parts = line.split_whitespace();
            matches!(parts.next(), Some("oom_kill" | "oom_group_kill"))
                && parts.next().and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n > 0)
        })
    }

    /// SIGKILLs every process still in the group.
    pub fn kill_all(&self) {
        for procs in self.procs_files() {
            let Ok(text) = std::fs::read_to_string(&procs) else { continue };
            for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        }
    }

    /// Kills what is left and removes the groups (retrying while the kernel finishes tearing processes down).
    pub async fn remove(self) {
        for attempt in 0..50 {
            self.kill_all();
            let mut remaining = false;
            for dir in &self.dirs {
                if dir.exists() && std::fs::remove_dir(dir).is_err() {
                    remaining = true;
                }
            }
            if !remaining {
                return;
            }
            tokio::time::sleep(Duration::from_millis(if attempt < 10 { 2 } else { 20 })).await;
        }
        tracing::warn!(dirs = ?self.dirs, "could not remove a run's cgroups");
    }
}
