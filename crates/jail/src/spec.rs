//! What the supervisor tells the init: everything needed to build one sandbox, serialised as JSON.
//!
//! Wire format on the init's standard input: a little-endian `u32` length, the JSON of [`JailSpec`], then the bytes
//! of the program's own standard input until end of file. An init that `sandlot run` forks first reads one more
//! frame before the spec, in the same form: the JSON of [`HeadStart`].

use std::path::PathBuf;

/// What an init forked by `sandlot run` is told first, as soon as the command has parsed its arguments (see
/// [`crate::Prefork::announce`]): the rest of what it can do ahead of the spec.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HeadStart {
    /// The conversation's pinned network namespace, to join instead of making one (see `pinned_netns`).
    pub join_netns: Option<PathBuf>,
}

/// The sandbox to build and the program to run in it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JailSpec {
    /// Interpreter to exec (an absolute path that is visible inside the jail).
    pub program: PathBuf,
    /// Its arguments, not counting argv[0].
    pub args: Vec<String>,
    /// Where the code is written inside the jail (under `/tmp`).
    pub code_path: PathBuf,
    pub code: String,
    /// The whole environment of the program.
    pub env: Vec<(String, String)>,
    /// Host directory mounted read-write at `/data`, or at `home.path`.
    pub workspace: PathBuf,
    /// The Home or Workspace layout (see `sandlot_core::Layout`): the workspace at another path, and `/data` a
    /// scratch tmpfs of the run's own (Home) or nothing (Workspace). `None`, sandlot's layout, leaves the spec's JSON as it was before layouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<HomeMount>,
    /// Host directories bound beneath the Home layout's scratch `/data` (Baponi's volumes; validated by the
    /// engine, see `sandlot_core::Mount`). Empty leaves the spec's JSON as it was before volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
    /// Host directories mounted read-only at the same path (interpreter prefixes outside the system dirs).
    pub extra_ro_binds: Vec<PathBuf>,
    /// The run's `cgroup.procs` files: the init opens them as root, the worker joins them (writes `0`) just before
    /// the program starts.
    pub cgroup_procs: Vec<PathBuf>,
    /// The supervisor's descriptor holding the run's cgroup slot, which the init (as root) takes a reference of
    /// its own to: the slot stays taken until the init, the last process of the run, is gone.
    pub slot_lock: Option<SlotLock>,
    /// Host uid/gid the init switches to before creating namespaces (only when started as root): the run's own,
    /// leased for it (see `host_uids`).
    pub switch_to: Option<(u32, u32)>,
    /// The storage uid (and gid) that owns the workspace on disk: `/data` is an idmapped mount showing it as
    /// `switch_to` (see `idmap`). If the filesystem refuses idmapped mounts, the init runs the program as the
    /// storage uid instead.
    pub storage_id: Option<u32>,
    /// The supervisor's descriptor holding the lease of the `switch_to` uid, which the init (as root) takes a
    /// reference of its own to: the uid stays leased until the init, the last process of the run, is gone.
    pub uid_lock: Option<SlotLock>,
    /// A network namespace to join (a path the init opens while still root) instead of creating one; only with
    /// `switch_to`. See `netns_pool`.
    pub join_netns: Option<PathBuf>,
    /// Uid and gid of the program inside the sandbox.
    pub sandbox_uid: u32,
    pub sandbox_gid: u32,
    pub hostname: String,
    pub tmp_mb: u64,
    pub rlimits: RlimitSpec,
    /// Apply Landlock when the kernel has it.
    pub landlock: bool,
    /// Where the read-only skeleton of the root is already assembled, in the init's mount namespace (a zygote's
    /// clone; see `root_template`); `None`: pid 1 assembles it.
    pub root_template: Option<PathBuf>,
}

/// Where a run of the Home or Workspace layout sees its workspace, and the size of its scratch `/data`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HomeMount {
    /// Absolute, validated by the engine (`Layout::validate`): not `/data`, not under a system directory.
    pub path: PathBuf,
    /// The Home layout: size of the scratch tmpfs at `/data`, in MiB (memory of the run's cgroup: its pages are
    /// charged to the writer), the working directory. `None`, the Workspace layout: no scratch (`/data` is the
    /// root's empty read-only directory) and `path` is the working directory.
    pub scratch_mb: Option<u64>,
}

/// One host directory a run sees at `path`, read-only unless `read_only` is false.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VolumeMount {
    pub host: PathBuf,
    pub path: PathBuf,
    pub read_only: bool,
}

/// A descriptor of another process: the supervisor's lock on the run's cgroup slot (see `cgroup`) or on its uid
/// (see `host_uids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SlotLock {
    pub holder_pid: u32,
    pub fd: i32,
}

/// Per-process rlimits set on the program; `None` leaves the limit as inherited.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RlimitSpec {
    pub open_files: u64,
    pub file_size_bytes: u64,
    pub cpu_seconds: u64,
    /// Processes per user in the sandbox's user namespace (the fallback for a pids cgroup).
    pub processes: Option<u64>,
    /// Data segment bytes (the fallback for a memory cgroup).
    pub data_bytes: Option<u64>,
}
