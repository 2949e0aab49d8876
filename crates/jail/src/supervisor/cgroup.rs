//! Cgroups for one run, on cgroup v2 or on v1/hybrid hosts (like ours), written directly to cgroupfs.
//!
//! The supervisor takes a slot `sandlot/slot-<n>` in each hierarchy it uses (see [`CgroupSupport::acquire`]),
//! writes the run's limits, and passes the `cgroup.procs` files to the init, which opens them as root; the worker
//! joins them through those descriptors just before the program starts (so only the program is in them, and its
//! cgroup namespace is rooted there). After the run it reads the OOM counter, kills stragglers and frees the slot.
//!
//! CPU: every slot gets the same weight and, unless the operator set a cap, no quota. The slots are siblings under
//! one parent, so busy runs share the cores equally whatever their number of threads, and a run alone uses them all.
//! Both files are written on every take: a slot is reused, by this process or another sandlot with other settings.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandlot_core::Limits;

/// Root of the cgroup mounts.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Name of sandlot's parent group in each hierarchy.
const PARENT: &str = "sandlot";
const CPU_PERIOD_US: u64 = 100_000;
/// Every run's CPU weight: the kernel's default for a group (`cpu.weight` on v2, `cpu.shares` on v1), so a run
/// weighs what any other group or nice-0 task beside sandlot's parent does, and all runs weigh the same.
const CPU_WEIGHT_V2: u32 = 100;
const CPU_SHARES_V1: u32 = 1024;
/// The weight of a sandbox built ahead of its run while it waits (see [`RunCgroup::set_background`]): the least
/// there is, so its start yields to every run.
const BACKGROUND_WEIGHT_V2: u32 = 1;
const BACKGROUND_SHARES_V1: u32 = 2;
/// Most runs with cgroups at once on one host.
const MAX_SLOTS: usize = 1024;

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
    /// `favordynmods` option of the cgroup2 mount (see `favor_dynamic_modifications`).
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

    /// The groups of one slot, and the file holding their OOM counter.
    fn slot_dirs(&self, slot: usize) -> Option<(Vec<PathBuf>, PathBuf)> {
        let name = format!("slot-{slot}");
        match self {
            Self::Unavailable { .. } => None,
            Self::V2 { parent } => {
                let dir = parent.join(&name);
                Some((vec![dir.clone()], dir.join("memory.events")))
            }
            Self::V1 { memory, pids, cpu } => {
                let dirs = vec![memory.join(&name), pids.join(&name), cpu.join(&name)];
                let oom = dirs[0].join("memory.oom_control");
                Some((dirs, oom))
            }
        }
    }

    /// Removes every slot nobody holds, killing what a crashed sandlot left running in it first; slots held by
    /// live runs (of this or another sandlot process) are left alone. Returns how many slots still had processes.
    pub async fn remove_unused_slots(&self) -> usize {
        let mut with_leftovers = 0;
        for slot in 0..MAX_SLOTS {
            let Some((dirs, oom_file)) = self.slot_dirs(slot) else { return 0 };
            let Ok(Some(lock)) = lock_slot(&dirs[0]) else { continue }; // held by a live run, or gone
            let group = RunCgroup { dirs, oom_file, oom_baseline: 0, lock };
            if group.kill_all() {
                with_leftovers += 1;
                tracing::warn!(slot, "killing processes a crashed sandlot left in its cgroup");
            }
            // A crashed server's sandboxes are still being torn down by the kernel when its successor starts.
            if group.drain(Duration::from_secs(10)).await {
                for dir in &group.dirs {
                    if let Err(e) = remove_empty_group(dir).await {
                        tracing::warn!(dir = %dir.display(), "cannot remove a leftover cgroup: {e}");
                    }
                }
            }
        }
        with_leftovers
    }

    /// The tmpfs pages (`shmem` in `memory.stat`) charged to each free slot's memory group, by slot directory: what
    /// a run that took the slot now would find charged to it already and could not reclaim. A slot is free when
    /// its lock can be taken; it is held only while its group is read. The tests check this is ~0 after runs.
    #[cfg(feature = "testing")]
    pub fn shmem_of_free_slots(&self) -> Vec<(PathBuf, u64)> {
        let mut free = Vec::new();
        for slot in 0..MAX_SLOTS {
            let Some((dirs, _)) = self.slot_dirs(slot) else { break };
            let Ok(Some(_lock)) = lock_slot(&dirs[0]) else { continue }; // held by a run, or never made
            let Ok(stat) = std::fs::read_to_string(dirs[0].join("memory.stat")) else { continue };
            let shmem = stat.lines().find_map(|line| line.strip_prefix("shmem ")?.trim().parse::<u64>().ok());
            free.push((dirs[0].clone(), shmem.unwrap_or(0)));
        }
        free
    }

    /// Takes a free slot (creating it the first time) and writes the run's limits into it.
    ///
    /// Groups are reused rather than created and removed per run: `mkdir` and `rmdir` of a memory cgroup are slow
    /// (docs/benchmarks.md). A slot is held with an exclusive `flock` on its first directory, so concurrent
    /// runs, in this process or in other sandlot processes (`sandlot run`), never share one; the lock dies with
    /// its holder, so a crashed run's slot is free again (its stragglers are killed when it is taken).
    pub fn acquire(&self, limits: &Limits) -> std::io::Result<Option<RunCgroup>> {
        self.acquire_for(limits, true)
    }

    /// [`CgroupSupport::acquire`], saying what an OOM kill takes on cgroup v2: the whole group (`kill_group`, a run:
    /// it ends as out of memory anyway), or only the process the kernel picks (a live sandbox, whose other
    /// processes live on). Cgroup v1 always takes one process.
    pub fn acquire_for(&self, limits: &Limits, kill_group: bool) -> std::io::Result<Option<RunCgroup>> {
        for slot in 0..MAX_SLOTS {
            let Some((dirs, oom_file)) = self.slot_dirs(slot) else { return Ok(None) };
            for dir in &dirs {
                match std::fs::create_dir(dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
            }
            let Some(lock) = lock_slot(&dirs[0])? else { continue }; // held by another run
            let mut group = RunCgroup { dirs, oom_file, oom_baseline: 0, lock };
            // Processes still in the slot, or still exiting (they count against its pids limit until they are
            // gone): those of a sandlot that stopped, whose lock died with it. The slot is left for later.
            if group.kill_all() || group.usage().pids > 0 {
                continue;
            }
            group.write_limits(self, limits, kill_group)?;
            group.oom_baseline = group.oom_count();
            return Ok(Some(group));
        }
        Err(std::io::Error::other(format!("all {MAX_SLOTS} cgroup slots are busy")))
    }
}

/// Removes an empty group, retrying while the kernel still counts exiting tasks in it (EBUSY).
async fn remove_empty_group(dir: &Path) -> std::io::Result<()> {
    let mut attempts = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempts < 100 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            result => return result,
        }
    }
}

/// The cgroup2 mount point and its superblock options, from `/proc/self/mountinfo`.
///
/// Read line by line and left at the first cgroup2 mount: the kernel writes the file as it is read, a few µs per
/// mount, and a host with a conversation image mounted per conversation lists hundreds (187 took ~450 µs to read
/// whole, on every `sandlot run` that asks for the tuning); the cgroup mounts come early, with the system's.
fn cgroup2_mount() -> Option<(PathBuf, String)> {
    use std::io::BufRead;
    let mountinfo = std::io::BufReader::new(std::fs::File::open("/proc/self/mountinfo").ok()?);
    mountinfo.lines().map_while(Result::ok).find_map(|line| {
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

/// Moving a process into a cgroup takes a global lock whose writer waits for an RCU grace period, on every run, for
/// v1 and v2 alike. The cgroup2 mount option `favordynmods` (Linux 6.0+) makes that lock favour writers, at the
/// price of slightly costlier fork and exit (docs/benchmarks.md has both figures). The
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

/// Bounds the kernel's socket buffers of a v1 memory group by `bytes`.
///
/// cgroup v2 charges socket buffers to `memory.max`. v1 keeps them in a counter of their own, `memory.kmem.tcp`,
/// which the kernel starts using for a group only when its limit is first written: until then a run's sockets are
/// charged to no group, and one run held 768 MiB of TCP buffers over its own loopback under a 64 MiB limit, out of
/// the host-wide TCP budget (`net.ipv4.tcp_mem`). The limit is written when the slot is set up, before the program
/// joins the group, so every socket of the run is charged (a socket is tied to a group when it is created; one
/// created before the first write would never be). Beyond the limit, sends wait and received packets are dropped
/// until buffers drain; nothing is killed. Socket buffers count apart from `memory.limit_in_bytes` on v1, so a run
/// can hold up to twice its memory limit in all. Kernels without the file (not built with v1 memory accounting)
/// are skipped, as with `memsw`.
///
/// The write fails with `EBUSY` when the group's sockets hold more than `bytes` already: sockets of an earlier run
/// of the slot still closing (a connection's unsent data outlives its process for a while). Their charge shows the
/// counter in use, so an earlier run set a limit, which stays; the run goes on under it.
fn limit_socket_memory(memory_dir: &Path, bytes: u64) -> std::io::Result<()> {
    const FILE: &str = "memory.kmem.tcp.limit_in_bytes";
    match std::fs::write(memory_dir.join(FILE), bytes.to_string()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            tracing::warn!(dir = %memory_dir.display(), "socket buffers of an earlier run exceed this run's limit; the earlier limit stays");
            Ok(())
        }
        Err(e) => {
            Err(std::io::Error::new(e.kind(), format!("write {bytes} to {}: {e}", memory_dir.join(FILE).display())))
        }
    }
}

/// What a slot's groups use, as [`RunCgroup::usage`] reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    pub memory_bytes: u64,
    pub memory_limit_bytes: u64,
    pub pids: u64,
    pub pids_limit: u64,
    /// CPU time of every process that ran in the group (`None` where the hierarchy does not count it: v1).
    pub cpu_usec: Option<u64>,
    pub oom_kills: u64,
}

/// The cgroups of one run: a slot held for the run's duration.
#[derive(Debug)]
pub struct RunCgroup {
    dirs: Vec<PathBuf>,
    oom_file: PathBuf,
    /// The OOM counter when the run took the slot.
    oom_baseline: u64,
    /// The slot's lock, released when the run lets go of the slot (and the run's init, which shares it, is gone).
    lock: std::fs::File,
}

impl RunCgroup {
    fn write_limits(&self, support: &CgroupSupport, limits: &Limits, kill_group: bool) -> std::io::Result<()> {
        let memory = limits.memory_mb * 1024 * 1024;
        // The operator's cap as microseconds per period, at least 1 ms; `None`: no quota.
        let quota = limits.cpus.map(|cpus| ((cpus * CPU_PERIOD_US as f64) as u64).max(1000));
        match support {
            CgroupSupport::Unavailable { .. } => {}
            CgroupSupport::V2 { .. } => {
                let dir = &self.dirs[0];
                write(dir, "memory.max", &memory.to_string())?;
                write(dir, "memory.swap.max", "0")?;
                // On OOM, kill the whole run rather than one process of it (a live sandbox: the one the kernel picks).
                write(dir, "memory.oom.group", if kill_group { "1" } else { "0" })?;
                write(dir, "pids.max", &limits.pids.to_string())?;
                write(dir, "cpu.weight", &CPU_WEIGHT_V2.to_string())?;
                let quota = quota.map_or_else(|| "max".to_owned(), |quota| quota.to_string());
                write(dir, "cpu.max", &format!("{quota} {CPU_PERIOD_US}"))?;
            }
            CgroupSupport::V1 { .. } => {
                let (memory_dir, pids_dir, cpu_dir) = (&self.dirs[0], &self.dirs[1], &self.dirs[2]);
                // memory+swap must never be below memory: raise it first when growing, lower it last when shrinking.
                let has_memsw = memory_dir.join("memory.memsw.limit_in_bytes").exists();
                let current = std::fs::read_to_string(memory_dir.join("memory.limit_in_bytes"))
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(u64::MAX);
                if has_memsw && memory > current {
                    write(memory_dir, "memory.memsw.limit_in_bytes", &memory.to_string())?;
                }
                write(memory_dir, "memory.limit_in_bytes", &memory.to_string())?;
                if has_memsw && memory <= current {
                    write(memory_dir, "memory.memsw.limit_in_bytes", &memory.to_string())?;
                }
                limit_socket_memory(memory_dir, memory)?;
                write(pids_dir, "pids.max", &limits.pids.to_string())?;
                write(cpu_dir, "cpu.shares", &CPU_SHARES_V1.to_string())?;
                write(cpu_dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                let quota = quota.map_or_else(|| "-1".to_owned(), |quota| quota.to_string());
                write(cpu_dir, "cpu.cfs_quota_us", &quota)?;
            }
        }
        Ok(())
    }

    /// Gives the group the least CPU weight (`background`: a sandbox started ahead of its run, whose start must not
    /// slow the runs going on) or a run's again.
    pub fn set_background(&self, background: bool) -> std::io::Result<()> {
        match self.dirs.as_slice() {
            [dir] => {
                let weight = if background { BACKGROUND_WEIGHT_V2 } else { CPU_WEIGHT_V2 };
                write(dir, "cpu.weight", &weight.to_string())
            }
            [_, _, cpu_dir] => {
                let shares = if background { BACKGROUND_SHARES_V1 } else { CPU_SHARES_V1 };
                write(cpu_dir, "cpu.shares", &shares.to_string())
            }
            _ => Ok(()),
        }
    }

    /// Raises the memory limit to `memory` bytes and the process limit to `pids` where they are below, never lowering
    /// either: a live sandbox given room for a browser. One directory is a v2 group; three are v1's memory, pids
    /// and cpu groups (see [`CgroupSupport::acquire_for`]).
    pub fn raise(&self, memory: u64, pids: u64) -> std::io::Result<()> {
        let read = |dir: &Path, file: &str| {
            std::fs::read_to_string(dir.join(file)).ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(u64::MAX)
        };
        let (memory_dir, pids_dir, memory_file) = match self.dirs.as_slice() {
            [dir] => (dir, dir, "memory.max"),
            [memory_dir, pids_dir, ..] => (memory_dir, pids_dir, "memory.limit_in_bytes"),
            [] => return Ok(()),
        };
        if read(memory_dir, memory_file) < memory {
            // v1: memory+swap must never be below memory, so it grows first.
            if memory_file == "memory.limit_in_bytes" && memory_dir.join("memory.memsw.limit_in_bytes").exists() {
                write(memory_dir, "memory.memsw.limit_in_bytes", &memory.to_string())?;
            }
            write(memory_dir, memory_file, &memory.to_string())?;
            if memory_file == "memory.limit_in_bytes" {
                limit_socket_memory(memory_dir, memory)?;
            }
        }
        if read(pids_dir, "pids.max") < pids {
            write(pids_dir, "pids.max", &pids.to_string())?;
        }
        Ok(())
    }

    /// The descriptor that holds the slot's lock; the run's init takes a reference of its own to it.
    pub fn lock_fd(&self) -> std::os::fd::RawFd {
        self.lock.as_raw_fd()
    }

    /// The `cgroup.procs` files the program joins (the init opens them as root, the worker writes to them).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// The kernel's count of OOM kills in this group since it was created.
    pub fn oom_count(&self) -> u64 {
        let Ok(text) = std::fs::read_to_string(&self.oom_file) else { return 0 };
        text.lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                matches!(parts.next(), Some("oom_kill" | "oom_group_kill"))
                    .then(|| parts.next()?.parse::<u64>().ok())?
            })
            .sum()
    }

    /// Whether the kernel's OOM killer fired in this group during the run.
    pub fn oom_killed(&self) -> bool {
        self.oom_count() > self.oom_baseline
    }

    /// OOM kills in this group since the slot was taken.
    pub fn oom_kills(&self) -> u64 {
        self.oom_count().saturating_sub(self.oom_baseline)
    }

    /// What the group uses now, against its limits (zeros for what cannot be read).
    pub fn usage(&self) -> CgroupUsage {
        let number = |dir: &Path, file: &str| -> u64 {
            let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
            match text.trim() {
                "max" => u64::MAX,
                value => value.parse().unwrap_or(0),
            }
        };
        let field = |dir: &Path, file: &str, name: &str| -> Option<u64> {
            let text = std::fs::read_to_string(dir.join(file)).ok()?;
            text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        };
        match self.dirs.as_slice() {
            [v2] => CgroupUsage {
                memory_bytes: number(v2, "memory.current"),
                memory_limit_bytes: number(v2, "memory.max"),
                pids: number(v2, "pids.current"),
                pids_limit: number(v2, "pids.max"),
                cpu_usec: field(v2, "cpu.stat", "usage_usec"),
                oom_kills: self.oom_kills(),
            },
            [memory, pids, ..] => CgroupUsage {
                memory_bytes: number(memory, "memory.usage_in_bytes"),
                memory_limit_bytes: number(memory, "memory.limit_in_bytes"),
                pids: number(pids, "pids.current"),
                pids_limit: number(pids, "pids.max"),
                cpu_usec: None, // v1's cpu controller does not count it (cpuacct does, a hierarchy sandlot leaves alone)
                oom_kills: self.oom_kills(),
            },
            [] => CgroupUsage::default(),
        }
    }

    /// SIGKILLs every process still in the group (all at once through `cgroup.kill` on cgroup v2, then one by one
    /// as listed); returns whether there was any.
    pub fn kill_all(&self) -> bool {
        if let [v2] = self.dirs.as_slice() {
            let _ = std::fs::write(v2.join("cgroup.kill"), "1"); // Linux 5.14 and later
        }
        let mut found = false;
        for procs in self.procs_files() {
            let Ok(text) = std::fs::read_to_string(&procs) else { continue };
            for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                found = true;
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        }
        found
    }

    /// Kills what is left, retrying while the kernel finishes tearing processes down, for at most `patience`;
    /// false if some remain.
    async fn drain(&self, patience: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + patience;
        for attempt in 0.. {
            if !self.kill_all() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(if attempt < 10 { 2 } else { 20 })).await;
        }
        false
    }

    /// Kills what is left, then frees the slot.
    pub async fn release(self) {
        if !self.drain(Duration::from_secs(1)).await {
            let dirs: Vec<String> = self.dirs.iter().map(|dir| dir.display().to_string()).collect();
            tracing::warn!(dirs = dirs.join(","), "processes are still in a run's cgroup; its slot stays taken");
            std::mem::forget(self); // keep the lock: nobody may reuse a group that still has processes
        }
    }
}

/// Takes the lock of the slot whose first group is `dir` (an exclusive `flock`, without waiting): `None` if another
/// run holds it. The lock lasts as long as the returned file (and any duplicate of its descriptor).
fn lock_slot(dir: &Path) -> std::io::Result<Option<std::fs::File>> {
    let lock = std::fs::File::open(dir)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(lock));
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(None),
        _ => Err(error),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A group over `dirs` holding `files` (name, content) in each, as the kernel would show them.
    fn group(dirs: usize, files: &[(&str, &str)]) -> (tempfile::TempDir, RunCgroup) {
        let root = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (0..dirs).map(|n| root.path().join(n.to_string())).collect();
        for dir in &dirs {
            std::fs::create_dir(dir).unwrap();
            for (name, content) in files {
                std::fs::write(dir.join(name), content).unwrap();
            }
        }
        let oom_file = dirs[0].join(if dirs.len() == 1 { "memory.events" } else { "memory.oom_control" });
        let lock = std::fs::File::open(&dirs[0]).unwrap();
        let group = RunCgroup { dirs, oom_file, oom_baseline: 1, lock };
        (root, group)
    }

    #[test]
    fn usage_reads_cgroup_v2_counters() {
        let (_root, group) = group(
            1,
            &[
                ("memory.current", "9437184\n"),
                ("memory.max", "max\n"),
                ("pids.current", "3\n"),
                ("pids.max", "64\n"),
                ("cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"),
                ("memory.events", "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n"),
            ],
        );
        let expected = CgroupUsage {
            memory_bytes: 9_437_184,
            memory_limit_bytes: u64::MAX,
            pids: 3,
            pids_limit: 64,
            cpu_usec: Some(2_500_000),
            oom_kills: 1, // two since the group was made, one of them before the slot was taken
        };
        assert_eq!(group.usage(), expected);
    }

    #[test]
    fn usage_reads_cgroup_v1_counters_without_cpu() {
        let (_root, group) = group(
            3,
            &[
                ("memory.usage_in_bytes", "1048576\n"),
                ("memory.limit_in_bytes", "268435456\n"),
                ("pids.current", "5\n"),
                ("pids.max", "max\n"),
                ("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n"),
            ],
        );
        let expected = CgroupUsage {
            memory_bytes: 1_048_576,
            memory_limit_bytes: 268_435_456,
            pids: 5,
            pids_limit: u64::MAX,
            cpu_usec: None,
            oom_kills: 3,
        };
        assert_eq!(group.usage(), expected);
    }
}
