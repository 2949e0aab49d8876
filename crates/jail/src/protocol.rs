//! Everything the supervisor and the sandbox side say to each other, and nothing else: the one module (with
//! `sys`) both sides import.
//!
//! - **An init's descriptors.** Whoever starts an init (the zygote, or `sandlot run`'s fork) gives it four: fd 0 carries
//!   one [`frame`] holding the [`JailSpec`] as JSON, then the program's standard input until end of file; fds 1 and 2
//!   are the program's stdout and stderr; [`EVENTS_FD`] carries [`InitEvent`]s back, one JSON object a line.
//! - **The zygote's socket** (a `SOCK_SEQPACKET` pair, the zygote's end on its fd 0): first a [`ZygoteSetup`] as JSON,
//!   answered by [`ZYGOTE_READY`] or the reason it failed; then, per init, one byte with an init's four descriptors
//!   (`SCM_RIGHTS`), answered by [`encode_clone_reply`].
//! - **A live sandbox** ([`JailSpec::resident`]): fd 0 of its init is a unix stream socket instead of a pipe. After
//!   the spec, it carries [`LiveRequest`] frames to the sandbox's pid 1, an `Exec`'s three standard streams passed
//!   with it (`SCM_RIGHTS`); pid 1 answers on [`EVENTS_FD`] (`SandboxReady`, then `ProcessStarted` or
//!   `ProcessFailed`, and `ProcessEnded`, per request id).

use std::path::PathBuf;

use sandlot_core::Termination;

/// The hidden subcommand that makes the sandlot binary act as the zygote.
pub const ZYGOTE_SUBCOMMAND: &str = "__jail-zygote";

/// The descriptor on which an init sends its [`InitEvent`]s (0–2 are the program's standard streams).
pub const EVENTS_FD: i32 = 3;

/// Largest spec an init accepts (code is capped well below this by the engine).
pub const MAX_SPEC_BYTES: usize = 64 * 1024 * 1024;

/// Largest [`LiveRequest`] frame pid 1 accepts (an environment and arguments).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Largest [`ZygoteSetup`] message, and the zygote's reply to it.
pub const MAX_SETUP_BYTES: usize = 64 * 1024;

/// The zygote's reply to a setup it carried out (any other reply says why it could not).
pub const ZYGOTE_READY: &[u8] = b"ready";

/// `bytes` as one frame: a little-endian `u32` length, then the bytes.
pub fn frame(bytes: &[u8]) -> Vec<u8> {
    let mut framed = (bytes.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(bytes);
    framed
}

/// Reads one [`frame`] of at most `max` bytes.
pub fn read_frame(reader: &mut impl std::io::Read, max: usize) -> std::io::Result<Vec<u8>> {
    let mut length = [0u8; 4];
    reader.read_exact(&mut length)?;
    let length = u32::from_le_bytes(length) as usize;
    if length > max {
        return Err(std::io::Error::other(format!("a frame of {length} bytes is over the limit of {max}")));
    }
    let mut bytes = vec![0u8; length];
    reader.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// The sandbox to build and the program to run in it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JailSpec {
    /// Interpreter to exec (an absolute path that is visible inside the jail).
    pub program: PathBuf,
    /// Its arguments, not counting `argv[0]`.
    pub args: Vec<String>,
    /// Where the code is written inside the jail (under `/tmp`).
    pub code_path: PathBuf,
    pub code: String,
    /// The whole environment of the program.
    pub env: Vec<(String, String)>,
    /// Host directory mounted read-write at `/data`, or at `home.path`.
    pub workspace: PathBuf,
    /// A detached copy of the workspace's mount tree the supervisor made in its own mount namespace (as root), for
    /// `pidfd_getfd`: the init uses it instead of opening `workspace` in its namespace, which does not see the
    /// mounts the server made since its zygote started (a conversation's disk image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_tree: Option<HeldLock>,
    /// The Home or Workspace layout (see `sandlot_core::Layout`); `None`: sandlot's own (the workspace at `/data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<HomeMount>,
    /// Host directories bound beneath the Home layout's scratch `/data` (Baponi's volumes, validated by the engine).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
    /// Host directories mounted read-only at the same path (interpreter prefixes outside the system dirs).
    pub extra_ro_binds: Vec<PathBuf>,
    /// The run's `cgroup.procs` files: the init opens them as root, the worker joins them just before the exec.
    pub cgroup_procs: Vec<PathBuf>,
    /// The supervisor's lock on the run's cgroup slot, which the init takes a reference of its own to: the slot stays
    /// taken until the init, the last process of the run, is gone.
    pub slot_lock: Option<HeldLock>,
    /// Host uid/gid the init switches to before creating namespaces (only when started as root): leased for the run.
    pub switch_to: Option<(u32, u32)>,
    /// The storage uid that owns the workspace on disk: `/data` is idmapped from it to `switch_to`. Where idmapped
    /// mounts are refused, the program runs as the storage uid instead.
    pub storage_id: Option<u32>,
    /// The supervisor's lock on the lease of `switch_to`, referenced by the init like `slot_lock`.
    pub uid_lock: Option<HeldLock>,
    /// A network namespace to join (a path the init opens while still root) instead of making one; only with
    /// `switch_to`.
    pub join_netns: Option<PathBuf>,
    /// Uid and gid of the program inside the sandbox.
    pub sandbox_uid: u32,
    pub sandbox_gid: u32,
    pub hostname: String,
    pub tmp_mb: u64,
    pub rlimits: RlimitSpec,
    /// Apply Landlock when the kernel has it.
    pub landlock: bool,
    /// A live sandbox: pid 1 builds the filesystem, reports `SandboxReady` and then starts a process per
    /// [`LiveRequest::Exec`] on fd 0 (a socket) until that closes or it is killed; `program`, `args` and `code` are
    /// unused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resident: bool,
    /// A run forked from a Python template: pid 1 builds the filesystem and writes the code as for any run, starts
    /// no worker, reports [`InitEvent::SandboxReady`] and waits (reaping) until its fd 0 closes, which the supervisor
    /// does once the template's child, which ran the code, has ended; then it ends the run as usual.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forked: bool,
    /// A prepared sandbox (with `forked`), built before its run is known: it has no workspace (`workspace` is empty,
    /// `workspace_tree` `None`) and no code. Pid 1 builds the rest, leaves `/data` the root's empty directory and
    /// waits as a forked run's does; the template's child it then gets attaches the conversation there and writes
    /// the code once the run comes (see `supervisor::prepared`). Only sandlot's own layout is prepared.
    pub prepared: bool,
}

/// What the supervisor asks a live sandbox's pid 1, one [`frame`] of JSON each on the init's fd 0 (a socket).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum LiveRequest {
    /// Start `program` with `args` and exactly `env`, confined as a run's program is, its stdin, stdout and stderr
    /// the three descriptors sent with the frame (`SCM_RIGHTS`, in that order).
    Exec { id: u64, program: PathBuf, args: Vec<String>, env: Vec<(String, String)> },
    /// Send `signal` to the process `Exec` `id` started (to its process group when `group`); nothing if it ended.
    Signal { id: u64, signal: i32, group: bool },
    /// A prepared live sandbox's conversation: the one descriptor sent with the frame is its tree, which pid 1 mounts
    /// at `/data` before it enters its Landlock domain (so that the domain's `/data` rule binds to it), answered by
    /// [`InitEvent::Attached`]. Pid 1 refuses it in a sandbox that is not prepared, or attached already.
    Attach,
}

/// Where a run of the Home or Workspace layout sees its workspace, and the size of its scratch `/data`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HomeMount {
    /// Absolute, validated by the engine (`Layout::validate`): not `/data`, not under a system directory.
    pub path: PathBuf,
    /// The Home layout: size of the scratch tmpfs at `/data`, in MiB, which is the working directory. `None`, the
    /// Workspace layout: no scratch (`/data` is the root's empty read-only directory), `path` is the working directory.
    pub scratch_mb: Option<u64>,
}

/// One host directory a run sees at `path`, read-only unless `read_only` is false.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VolumeMount {
    pub host: PathBuf,
    pub path: PathBuf,
    pub read_only: bool,
}

/// A descriptor held by another process (the supervisor's lock on a cgroup slot or uid lease, or a detached mount
/// tree), for `pidfd_getfd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldLock {
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

/// What an init tells its supervisor, in order: pid 1 started, then the program's end or why the setup failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum InitEvent {
    /// The sandbox's pid 1 exists; this is its pid on the host (killing it kills the whole sandbox).
    Pid1Started { pid: i32 },
    /// The program ended ([`Termination::Exited`] or [`Termination::Signaled`]), and every other process of the
    /// run has been killed and reaped.
    ProgramEnded(Termination),
    /// Building the sandbox failed at this step.
    SetupFailed { step: String, error: String },
    /// A live sandbox is built: pid 1 waits for [`LiveRequest`]s.
    SandboxReady,
    /// A live sandbox's process of request `id` runs, as `pid` in the sandbox.
    ProcessStarted { id: u64, pid: i32 },
    /// A live sandbox's process of request `id` could not start: the step that failed.
    ProcessFailed { id: u64, step: String, error: String },
    /// A live sandbox's process of request `id` ended ([`Termination::Exited`] or [`Termination::Signaled`]).
    ProcessEnded { id: u64, termination: Termination },
    /// A prepared live sandbox's pid 1 mounted its conversation at `/data` and entered its Landlock domain: it
    /// serves `Exec`s from now on.
    Attached,
}

impl InitEvent {
    /// The event as its line on the wire.
    pub fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// [`InitEvent::Pid1Started`]'s line for `pid`, written into `buffer` without allocating: the init sends it while
/// pid 1 shares its memory (see `sandbox::pid1::start`).
pub fn pid1_started_line(pid: i32, buffer: &mut [u8; 64]) -> &[u8] {
    use std::io::Write;
    let mut rest = &mut buffer[..];
    let _ = writeln!(rest, r#"{{"event":"pid1_started","pid":{pid}}}"#);
    let length = 64 - rest.len();
    &buffer[..length]
}

/// A log field's view of an event: words, not Rust's debug text.
impl std::fmt::Display for InitEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitEvent::Pid1Started { pid } => write!(f, "pid 1 started, host pid {pid}"),
            InitEvent::ProgramEnded(termination) => write!(f, "program ended: {termination:?}"),
            InitEvent::SetupFailed { step, error } => write!(f, "setup failed at {step}: {error}"),
            InitEvent::SandboxReady => write!(f, "live sandbox ready"),
            InitEvent::ProcessStarted { id, pid } => write!(f, "process {id} started, pid {pid} in the sandbox"),
            InitEvent::ProcessFailed { id, step, error } => write!(f, "process {id} failed at {step}: {error}"),
            InitEvent::ProcessEnded { id, termination } => write!(f, "process {id} ended: {termination:?}"),
            InitEvent::Attached => write!(f, "conversation attached"),
        }
    }
}

/// The first message to a zygote: what to prepare before cloning any init.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ZygoteSetup {
    /// Assemble the read-only skeleton once, here, for every init (see `sandbox::mounts`).
    pub skeleton: Option<SkeletonRequest>,
}

/// Where and for whom the skeleton is cached (by a zygote for all its inits, or by `sandlot run`'s init for itself).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SkeletonRequest {
    /// An existing, empty directory; the skeleton is mounted on it in a mount namespace of the cacher's own only.
    pub dir: PathBuf,
    pub identity: Identity,
    /// Empty directories in the skeleton, for what a run binds there: interpreter prefixes outside the system dirs
    /// (each bound only in its runner's runs).
    pub mount_points: Vec<PathBuf>,
}

impl SkeletonRequest {
    /// Whether a run of `spec` may use this skeleton (the init asks): the same sandbox user, and a mount point for
    /// every bind it needs (its runner's prefixes, its home path in the Home layout); the skeleton is read-only, so a
    /// run that needs another mount point has pid 1 assemble its own.
    pub fn fits(&self, spec: &JailSpec) -> bool {
        Identity::of(spec) == self.identity
            && spec.extra_ro_binds.iter().all(|dir| self.mount_points.contains(dir))
            && spec.home.as_ref().is_none_or(|home| self.mount_points.contains(&home.path))
    }
}

/// Who the sandbox's user is, for the generated `/etc` files: the part of a [`JailSpec`] the skeleton depends on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub hostname: String,
}

impl Identity {
    pub fn of(spec: &JailSpec) -> Self {
        Self { uid: spec.sandbox_uid, gid: spec.sandbox_gid, hostname: spec.hostname.clone() }
    }

    /// The sandbox user every run of sandlot has (uid and gid 1000, host name `sandlot`).
    pub fn standard() -> Self {
        Self { uid: 1000, gid: 1000, hostname: "sandlot".into() }
    }
}

/// The zygote's answer to a clone request: the new init's pid, or the errno of the failed clone.
pub fn encode_clone_reply(result: Result<i32, i32>) -> [u8; 4] {
    match result {
        Ok(pid) => pid.to_le_bytes(),
        Err(errno) => (-errno).to_le_bytes(),
    }
}

/// Reads [`encode_clone_reply`]'s answer.
pub fn decode_clone_reply(reply: [u8; 4]) -> Result<i32, std::io::Error> {
    match i32::from_le_bytes(reply) {
        pid if pid > 0 => Ok(pid),
        errno => Err(std::io::Error::from_raw_os_error(-errno)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    pub(crate) fn spec() -> JailSpec {
        JailSpec {
            program: "/usr/bin/python3".into(),
            args: vec!["/tmp/main.py".into()],
            code_path: "/tmp/main.py".into(),
            code: "print(1)".into(),
            env: vec![("HOME".into(), "/tmp".into())],
            workspace: "/srv/conversations/a/files".into(),
            workspace_tree: None,
            home: None,
            volumes: vec![],
            extra_ro_binds: vec![],
            cgroup_procs: vec![],
            slot_lock: None,
            switch_to: Some((900_001, 900_001)),
            storage_id: Some(900_000),
            uid_lock: Some(HeldLock { holder_pid: 7, fd: 9 }),
            join_netns: None,
            sandbox_uid: 1000,
            sandbox_gid: 1000,
            hostname: "sandlot".into(),
            tmp_mb: 64,
            rlimits: RlimitSpec {
                open_files: 256,
                file_size_bytes: 1 << 30,
                cpu_seconds: 31,
                processes: None,
                data_bytes: None,
            },
            landlock: true,
            resident: false,
            forked: false,
            prepared: false,
        }
    }

    #[test]
    fn a_spec_survives_its_frame() {
        let mut spec = spec();
        spec.home = Some(HomeMount { path: "/home/user".into(), scratch_mb: Some(16) });
        spec.volumes = vec![VolumeMount { host: "/srv/v".into(), path: "/data/v".into(), read_only: true }];
        let json = serde_json::to_vec(&spec).unwrap();
        let mut wire = frame(&json);
        wire.extend_from_slice(b"the program's stdin");
        let mut reader = &wire[..];
        let read: JailSpec = serde_json::from_slice(&read_frame(&mut reader, MAX_SPEC_BYTES).unwrap()).unwrap();
        assert_eq!(read, spec);
        assert_eq!(reader, b"the program's stdin", "the program's input follows the frame untouched");
    }

    #[test]
    fn live_requests_round_trip_and_runs_leave_resident_off_the_wire() {
        for request in [
            LiveRequest::Exec {
                id: 1,
                program: "/usr/bin/python3".into(),
                args: vec!["-c".into(), "print(1)".into()],
                env: vec![("A".into(), "1".into())],
            },
            LiveRequest::Signal { id: 1, signal: 2, group: true },
            LiveRequest::Attach,
        ] {
            let json = serde_json::to_vec(&request).unwrap();
            assert_eq!(serde_json::from_slice::<LiveRequest>(&json).unwrap(), request);
        }
        assert!(!serde_json::to_string(&spec()).unwrap().contains("resident"));
        let mut live = spec();
        live.resident = true;
        let json = serde_json::to_vec(&live).unwrap();
        assert_eq!(serde_json::from_slice::<JailSpec>(&json).unwrap(), live);
    }

    #[test]
    fn a_frame_over_the_limit_or_cut_short_is_refused() {
        let wire = frame(&[7u8; 100]);
        assert!(read_frame(&mut &wire[..], 99).unwrap_err().to_string().contains("over the limit"));
        assert!(read_frame(&mut &wire[..50], 100).is_err());
    }

    #[test]
    fn sandlots_layout_leaves_home_and_volumes_off_the_wire() {
        let json = serde_json::to_string(&spec()).unwrap();
        assert!(!json.contains("home") && !json.contains("volumes"), "{json}");
    }

    #[test]
    fn init_events_round_trip_as_lines() {
        for event in [
            InitEvent::Pid1Started { pid: 4242 },
            InitEvent::ProgramEnded(Termination::Exited { code: 3 }),
            InitEvent::ProgramEnded(Termination::Signaled { signal: 9 }),
            InitEvent::SetupFailed { step: "pivot_root".into(), error: "EPERM".into() },
            InitEvent::SandboxReady,
            InitEvent::ProcessStarted { id: 7, pid: 12 },
            InitEvent::ProcessFailed { id: 8, step: "exec".into(), error: "ENOENT".into() },
            InitEvent::ProcessEnded { id: 7, termination: Termination::Signaled { signal: 2 } },
        ] {
            let line = event.to_line();
            assert_eq!(line.last(), Some(&b'\n'));
            assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1, "one line");
            assert_eq!(serde_json::from_slice::<InitEvent>(&line).unwrap(), event);
        }
        let ended = String::from_utf8(InitEvent::ProgramEnded(Termination::Exited { code: 0 }).to_line()).unwrap();
        assert_eq!(ended.trim(), r#"{"event":"program_ended","kind":"exited","code":0}"#);
    }

    #[test]
    fn the_pid1_started_line_written_without_allocating_is_the_events_own() {
        for pid in [1, 4242, i32::MAX] {
            let mut buffer = [0u8; 64];
            assert_eq!(pid1_started_line(pid, &mut buffer), InitEvent::Pid1Started { pid }.to_line().as_slice());
        }
    }

    #[test]
    fn clone_replies_carry_a_pid_or_an_errno() {
        assert_eq!(decode_clone_reply(encode_clone_reply(Ok(31337))).unwrap(), 31337);
        let error = decode_clone_reply(encode_clone_reply(Err(libc::EAGAIN))).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EAGAIN));
        assert!(decode_clone_reply([0; 4]).is_err(), "pid 0 is no init");
    }

    #[test]
    fn the_zygote_setup_round_trips() {
        let setup = ZygoteSetup {
            skeleton: Some(SkeletonRequest {
                dir: "/srv/.jail-root".into(),
                identity: Identity::standard(),
                mount_points: vec!["/opt/pyenv".into()],
            }),
        };
        let json = serde_json::to_vec(&setup).unwrap();
        assert!(json.len() < MAX_SETUP_BYTES);
        assert_eq!(serde_json::from_slice::<ZygoteSetup>(&json).unwrap(), setup);
    }

    #[test]
    fn a_skeleton_fits_runs_whose_binds_it_has_mount_points_for() {
        let request = SkeletonRequest {
            dir: "/srv/.jail-root".into(),
            identity: Identity::standard(),
            mount_points: vec!["/opt/pyenv".into()],
        };
        let mut spec = spec();
        assert!(request.fits(&spec));
        spec.extra_ro_binds = vec!["/opt/pyenv".into()];
        assert!(request.fits(&spec));
        spec.extra_ro_binds = vec!["/opt/node".into()];
        assert!(!request.fits(&spec), "no mount point for another prefix");
        spec.extra_ro_binds.clear();
        spec.home = Some(HomeMount { path: "/home/user".into(), scratch_mb: None });
        assert!(!request.fits(&spec), "no mount point for the home path");
        spec.home = None;
        spec.hostname = "other".into();
        assert!(!request.fits(&spec), "another identity");
    }
}
