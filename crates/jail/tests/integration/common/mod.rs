//! Shared by the jail's integration tests: a harness whose binary doubles as the jail init, and a sandbox
//! (engine + native backend over a temporary root) to run code in.
//!
//! These tests need root (cgroups, a dedicated sandbox uid); `scripts/test.sh` runs them as root. Without root
//! they fail rather than skip, so a CI that lost its privileges cannot pass silently.

mod child_backend;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};
use sandlot_core::{ConversationId, Engine, EngineConfig, Language, Limits, RunReport, RunRequest, Workspaces};
use sandlot_jail::{JailBackend, JailConfig, ProcessModel, UidRange};

/// The host uids the sandboxes of this test process run as: 16 of them, unique per process (nextest runs each test
/// in its own process, several at once), so a test can look for leftovers of its own runs only.
pub fn sandbox_uids() -> UidRange {
    let first = 1_100_000 + (std::process::id() % 400_000) * 16;
    UidRange::new(first, first + 15).expect("a valid range")
}

/// The storage uid of [`sandbox_uids`]: the owner of conversation directories on disk.
pub fn storage_uid() -> u32 {
    sandbox_uids().storage()
}

/// The host uid the unprivileged launch paths run their child as: unique per test process (like [`sandbox_uids`],
/// and outside every such range), so a test finds the leftovers of its own runs only, whatever runs beside it.
pub fn unprivileged_uid() -> u32 {
    1_800_000_000 + std::process::id() % 400_000
}

/// One named test.
pub type Test = (&'static str, fn() -> Result<(), Failed>);

/// One named test to run on a launch path (see [`LaunchPath`]).
pub type PathTest = (&'static str, fn(LaunchPath) -> Result<(), Failed>);

/// The tests of one module as trials named `module::test`.
pub fn trials(module: &str, tests: Vec<Test>) -> Vec<Trial> {
    tests.into_iter().map(|(name, test)| Trial::test(format!("{module}::{name}"), test)).collect()
}

/// What the test binary is when the jail re-executes it: the jail init or zygote, the TypeScript transform's helper
/// (as the server's binary is, `EngineConfig::typescript_helper`), or a child running one job on a one-shot or
/// unprivileged path (before any thread exists). Each serves and exits; otherwise this returns.
pub fn serve_if_re_executed() {
    sandlot_jail::run_hidden_subcommand();
    sandlot_core::typescript::run_helper_if_asked();
    child_backend::serve_if_child();
}

/// Runs `trials` as libtest does (filters, `--list`, `--exact`: what nextest asks) and exits.
pub fn run(trials: Vec<Trial>) -> ! {
    libtest_mimic::run(&Arguments::from_args(), trials).exit()
}

/// How a sandbox's runs are started: a process model (see `sandlot_jail::ProcessModel`) as root or unprivileged.
///
/// `ServerRoot` is the backend in this process. The others run each job in a child of the test binary
/// ([`child_backend`]): one-shot must fork its init while single-threaded, which the test process is not, and
/// unprivileged needs a process that is not root. `ServerUnprivileged` is also a child per job, each with its own
/// zygote (`warm_inits: 0`): a long-lived child serving many jobs would only add a protocol, while every run still
/// goes through the unprivileged server path (the zygote's clone, no cgroups, no leased uid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchPath {
    ServerRoot,
    OneShotRoot,
    ServerUnprivileged,
    OneShotUnprivileged,
}

impl LaunchPath {
    pub const ALL: [LaunchPath; 4] =
        [Self::ServerRoot, Self::OneShotRoot, Self::ServerUnprivileged, Self::OneShotUnprivileged];

    /// The suffix of a test's name on this path (`name::one_shot_root`); `None` for the server as root, whose
    /// tests keep their plain names.
    pub fn suffix(self) -> Option<&'static str> {
        match self {
            Self::ServerRoot => None,
            Self::OneShotRoot => Some("one_shot_root"),
            Self::ServerUnprivileged => Some("server_unprivileged"),
            Self::OneShotUnprivileged => Some("one_shot_unprivileged"),
        }
    }

    /// Whether runs on this path are root's: cgroups, leased host uids, an idmapped `/data`.
    pub fn is_root(self) -> bool {
        matches!(self, Self::ServerRoot | Self::OneShotRoot)
    }

    /// Whether a conversation's network namespace is kept for its next run (a server, as root, with `keep_netns`).
    pub fn keeps_netns(self) -> bool {
        self == Self::ServerRoot
    }
}

/// An engine over the native backend with its own temporary conversation root.
pub struct Sandbox {
    pub root: tempfile::TempDir,
    pub engine: Engine,
    pub runtime: tokio::runtime::Runtime,
    pub path: LaunchPath,
    /// The native backend, when the sandbox made it itself (as root).
    pub jail: Option<Arc<JailBackend>>,
}

impl Sandbox {
    /// A sandbox whose runs start on `path`, with default limits changed by `adjust`.
    pub fn on(path: LaunchPath, adjust: impl FnOnce(&mut Limits)) -> Self {
        let (model, caller) = match path {
            LaunchPath::ServerRoot => return Self::new(adjust),
            LaunchPath::OneShotRoot => (child_backend::ChildModel::OneShot, None),
            LaunchPath::ServerUnprivileged => (child_backend::ChildModel::Server, Some(unprivileged_uid())),
            LaunchPath::OneShotUnprivileged => (child_backend::ChildModel::OneShot, Some(unprivileged_uid())),
        };
        assert!(nix::unistd::geteuid().is_root(), "the jail tests need root (run scripts/test.sh as root)");
        let root = tempfile::tempdir().expect("temp root");
        // The unprivileged child must reach the conversations below the root (each is handed to it).
        std::fs::set_permissions(root.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let backend = Arc::new(child_backend::ChildBackend::new(model, caller, root.path().to_owned()));
        Self::with_backend(root, backend, path, |config| adjust(&mut config.limits))
    }

    /// A sandbox with default limits changed by `adjust`.
    pub fn new(adjust: impl FnOnce(&mut Limits)) -> Self {
        Self::with_config(|_| {}, adjust)
    }

    /// A sandbox whose backend configuration is changed by `configure`, and default limits by `adjust`.
    pub fn with_config(configure: impl FnOnce(&mut JailConfig), adjust: impl FnOnce(&mut Limits)) -> Self {
        Self::in_root(tempfile::tempdir().expect("temp root"), configure, adjust)
    }

    /// A sandbox whose conversations live in `root`.
    pub fn in_root(
        root: tempfile::TempDir,
        configure: impl FnOnce(&mut JailConfig),
        adjust: impl FnOnce(&mut Limits),
    ) -> Self {
        Self::with_engine_config(root, configure, |config| adjust(&mut config.limits))
    }

    /// A sandbox whose conversations live in `root`, its backend configured by `configure` and its engine by
    /// `engine` (after the tests' default timeout is set).
    pub fn with_engine_config(
        root: tempfile::TempDir,
        configure: impl FnOnce(&mut JailConfig),
        engine: impl FnOnce(&mut EngineConfig),
    ) -> Self {
        assert!(nix::unistd::geteuid().is_root(), "the jail tests need root (run scripts/test.sh as root)");
        let mut config = JailConfig::new(std::env::current_exe().expect("test binary"));
        config.sandbox_uids = sandbox_uids();
        config.probe_versions = false;
        config.model = ProcessModel::Server { warm_inits: 0 }; // as a server runs them
        config.keep_netns = true;
        config.skeleton_dir = Some(root.path().join(sandlot_jail::SKELETON_DIR_NAME));
        config.data_root = Some(root.path().to_owned());
        config.python_preload = Some(vec![]); // Python runs forked from a template, as a server's are
        config.prepared_sandboxes = 2; // and from its prepared sandboxes, as a server's default
        config.prepared_live_sandboxes = 1; // a conversation's first session call too
        config.ahead_sandboxes = 4; // and conversations' next Node runs
        configure(&mut config);
        let backend = Arc::new(JailBackend::new(config).expect("the native backend"));
        assert!(backend.wait_for_templates(Duration::from_secs(60)), "the Python template did not start");
        let mut sandbox = Self::with_backend(root, Arc::clone(&backend) as _, LaunchPath::ServerRoot, engine);
        let limits = sandbox.engine.config().limits.clone();
        sandbox.runtime.block_on(async { backend.prepare_for(&limits) });
        JAILS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(Arc::downgrade(&backend));
        sandbox.jail = Some(backend);
        sandbox
    }

    /// Waits until `count` sandboxes are prepared for Python runs (at most a minute): whether they are.
    pub fn wait_for_prepared(&self, count: usize) -> bool {
        self.wait_for_pool(count, JailBackend::prepared_ready)
    }

    /// Waits until `count` live sandboxes are prepared for first session calls (at most a minute): whether they are.
    pub fn wait_for_prepared_live(&self, count: usize) -> bool {
        self.wait_for_pool(count, JailBackend::prepared_live_ready)
    }

    /// Waits until every finished run's sandbox is let go of (at most a minute), so a conversation's kept network
    /// namespace is back for its next run: whether they are.
    pub fn wait_until_released(&self) -> bool {
        self.wait_for_pool(1, |jail| usize::from(jail.releasing() == 0))
    }

    /// Waits until `ready` says at least `count` (at most a minute): whether it does.
    fn wait_for_pool(&self, count: usize, ready: fn(&JailBackend) -> usize) -> bool {
        let Some(jail) = &self.jail else { return false };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while ready(jail) < count {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// A sandbox over `backend`, whose conversations live in `root`.
    fn with_backend(
        root: tempfile::TempDir,
        backend: Arc<dyn sandlot_core::Backend>,
        path: LaunchPath,
        configure: impl FnOnce(&mut EngineConfig),
    ) -> Self {
        let mut engine_config = EngineConfig::default();
        engine_config.limits.timeout = Duration::from_secs(10);
        engine_config.typescript_helper = Some(std::env::current_exe().expect("test binary"));
        configure(&mut engine_config);
        let engine = Engine::new(backend, workspaces(root.path(), &engine_config.limits), engine_config);
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
        Self { root, engine, runtime, path, jail: None }
    }

    /// Pids of host processes of this sandbox's runs (their init and pid 1 included): the leased uids as root, the
    /// child's uid unprivileged.
    pub fn processes(&self) -> Vec<i32> {
        if self.path.is_root() { sandbox_processes() } else { processes_of_uid(unprivileged_uid()) }
    }

    /// [`Sandbox::processes`] without the jail's own processes (see [`program_processes`]).
    pub fn program_processes(&self) -> Vec<i32> {
        without_jail_processes(self.processes())
    }

    /// Runs `code` in `conversation`.
    pub fn run(&self, conversation: &str, language: Language, code: &str) -> RunReport {
        self.run_with(conversation, language, code, Vec::new(), BTreeMap::new())
    }

    /// Runs `code` with standard input and extra environment.
    pub fn run_with(
        &self,
        conversation: &str,
        language: Language,
        code: &str,
        stdin: Vec<u8>,
        env: BTreeMap<String, String>,
    ) -> RunReport {
        let request = RunRequest {
            conversation_id: conversation.into(),
            language: language.as_str().into(),
            code: code.into(),
            stdin,
            env,
            ..RunRequest::default()
        };
        self.run_request(request)
    }

    /// Runs `code` with the conversation seen through `layout`.
    pub fn run_in(
        &self,
        layout: sandlot_core::Layout,
        conversation: &str,
        language: Language,
        code: &str,
    ) -> RunReport {
        let request = RunRequest {
            conversation_id: conversation.into(),
            language: language.as_str().into(),
            code: code.into(),
            layout,
            ..RunRequest::default()
        };
        self.run_request(request)
    }

    /// Runs a whole request (its layout, say) to its end.
    pub fn run_request(&self, request: RunRequest) -> RunReport {
        self.runtime.block_on(self.engine.run(request, &())).expect("run")
    }

    /// The host directory of a conversation's `/data`.
    pub fn data_dir(&self, conversation: &str) -> PathBuf {
        self.engine.workspaces().files_dir(&ConversationId::parse(conversation).expect("id"))
    }
}

impl Drop for Sandbox {
    /// The conversations' images are unmounted (as a server does at shutdown), so the temporary root can go.
    fn drop(&mut self) {
        if let Some(jail) = &self.jail {
            // Its sandboxes kept for conversations' next runs hold their conversations: ended first.
            self.runtime.block_on(sandlot_core::Backend::abort_all(jail.as_ref()));
        }
        self.engine.workspaces().unmount_images();
    }
}

/// The conversation directories under `root` as a server makes them by default: each on a disk image of its own
/// when the host allows (as root), else plain directories.
pub fn workspaces(root: &std::path::Path, limits: &Limits) -> Workspaces {
    match sandlot_core::DiskImages::detect(limits.disk_mb, limits.disk_inodes) {
        Ok(images) => Workspaces::new(root).with_images(images),
        Err(_) => Workspaces::new(root),
    }
}

/// Runs `command` on the host as an unprivileged user (uid and gid 65534, no groups); its exit code and output.
pub fn as_other_user(command: &str) -> (i32, String) {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", command])
        .output()
        .expect("setpriv");
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

/// Pids of this process's children whose command line contains `needle`.
pub fn children_running(needle: &str) -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if parent == Some(me.as_str()) && String::from_utf8_lossy(&cmdline).contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

/// Pids of this process's zygotes (`zygote`) or of the inits they cloned (which share the zygote's command line):
/// only a zygote reads a socket on its standard input.
pub fn zygote_family(zygote: bool) -> Vec<i32> {
    let needle = sandlot_jail::protocol::ZYGOTE_SUBCOMMAND;
    children_running(needle)
        .into_iter()
        .filter(|pid| {
            let stdin = std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap_or_default();
            stdin.to_string_lossy().starts_with("socket:") == zygote
        })
        .collect()
}

/// How long a pool waits, full, before a test's run: a prepared process is at least this old when its run comes.
pub const SETTLE: Duration = Duration::from_millis(400);

/// Python that prints whether its process was prepared: forked [`SETTLE`] ahead of its run ("prepared"), where one
/// forked or started for the run is a few milliseconds old ("built now").
pub const PREPARED_PROBE: &str = "import os as _os, time as _time
_age = _time.clock_gettime(_time.CLOCK_BOOTTIME) - int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19]) / _os.sysconf('SC_CLK_TCK')
print('prepared' if _age > 0.2 else 'built now')";

/// Pids of host processes running as one of this test process's sandbox uids, but those of sandboxes prepared for
/// runs to come (see [`prepared_processes`]). The prepared ones are found after the scan: a pool refills as runs end,
/// so a sandbox may be built while a test looks, and its processes must not pass for a run's. (Found before the scan,
/// a child forked in between was in the scan and not among them.)
pub fn sandbox_processes() -> Vec<i32> {
    let uids = sandbox_uids();
    let running = processes_where(|uid| uids.contains(uid));
    let prepared = prepared_processes();
    running.into_iter().filter(|pid| !prepared.contains(pid)).collect()
}

/// The native backends this test process's sandboxes made (see [`prepared_processes`]).
static JAILS: Mutex<Vec<Weak<JailBackend>>> = Mutex::new(Vec::new());

/// Pids of the processes of every sandbox prepared or being prepared by a backend of this test process (for stateless
/// runs, and live sandboxes for first session calls): its init, the init's children, and every process in its
/// sandbox's pid namespace (a prepared live sandbox's waiting driver too). They belong to no run yet.
pub fn prepared_processes() -> std::collections::HashSet<i32> {
    let jails: Vec<Arc<JailBackend>> =
        JAILS.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter().filter_map(Weak::upgrade).collect();
    let mut pids = std::collections::HashSet::new();
    let mut namespaces = std::collections::HashSet::new();
    for init in jails.iter().flat_map(|jail| jail.prepared_inits()) {
        pids.insert(init);
        let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).unwrap_or_default();
        pids.extend(children.split_whitespace().filter_map(|pid| pid.parse::<i32>().ok()));
        if let Ok(namespace) = std::fs::read_link(format!("/proc/{init}/ns/pid_for_children")) {
            namespaces.insert(namespace);
        }
    }
    if !namespaces.is_empty() {
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
            if std::fs::read_link(entry.path().join("ns/pid")).is_ok_and(|namespace| namespaces.contains(&namespace)) {
                pids.insert(pid);
            }
        }
    }
    pids
}

/// Pids of host processes running as `uid`.
pub fn processes_of_uid(uid: u32) -> Vec<i32> {
    processes_where(|real| real == uid)
}

/// Pids of host processes whose real uid passes `wanted`.
fn processes_where(wanted: impl Fn(u32) -> bool) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let real_uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|u| u.parse::<u32>().ok());
        if real_uid.is_some_and(&wanted) {
            pids.push(pid);
        }
    }
    pids
}

/// Like [`sandbox_processes`], but without the jail's own init and pid 1 (copies of this test binary, so named
/// like it), which may still be exiting when a run has returned: pid 1 ends every process of the program, and the
/// program's cgroups are empty, before it reports the program's exit.
pub fn program_processes() -> Vec<i32> {
    without_jail_processes(sandbox_processes())
}

/// `pids` without copies of this test binary (the jail's init and pid 1, a child backend's child).
fn without_jail_processes(pids: Vec<i32>) -> Vec<i32> {
    let own_name = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    pids.into_iter()
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|name| name != own_name))
        .collect()
}

/// Waits until `path` exists on the host (a run signalling it got somewhere), for up to 60 s: a handshake instead
/// of a guessed sleep, so a loaded machine only makes it slower.
pub fn wait_for(path: &std::path::Path) -> Result<(), Failed> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        check(std::time::Instant::now() < deadline, || format!("{} never appeared", path.display()))?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Runs `during` while as many runs are in flight as the machine has cores, what the prepared and ahead pools call
/// busy: Bash runs, one conversation each, that wait for a file the host writes once `during` is done (each gives up
/// after 20 s). Fails if a held run did not start or did not end well.
pub fn while_the_cores_are_busy<T>(sandbox: &Sandbox, during: impl FnOnce() -> T) -> Result<T, Failed> {
    let cores = std::thread::available_parallelism().map_or(2, |cores| cores.get());
    let hold = "touch /data/started; for _ in $(seq 400); do [ -e /data/go ] && exit 0; sleep 0.05; done; exit 3";
    let conversations: Vec<String> = (0..cores).map(|n| format!("held-{n}")).collect();
    std::thread::scope(|scope| {
        let held: Vec<_> = conversations
            .iter()
            .map(|conversation| scope.spawn(move || sandbox.run(conversation, Language::Bash, hold)))
            .collect();
        let started = conversations.iter().try_for_each(|c| wait_for(&sandbox.data_dir(c).join("started")));
        let result = started.map(|()| during());
        for conversation in &conversations {
            let _ = std::fs::write(sandbox.data_dir(conversation).join("go"), "");
        }
        for run in held {
            let report = run.join().map_err(|_| "a held run's thread panicked")?;
            check(report.outcome.success(), || format!("a held run: {}", describe(&report)))?;
        }
        result
    })
}

/// Fails the test with a message when `condition` is false.
pub fn check(condition: bool, message: impl FnOnce() -> String) -> Result<(), Failed> {
    if condition { Ok(()) } else { Err(message().into()) }
}

/// Fails if a file named `marker` exists in any of the host's `dirs` (a sandbox's write that escaped to the host).
pub fn check_not_on_host(marker: &str, dirs: &[&str]) -> Result<(), Failed> {
    for dir in dirs {
        let path = std::path::Path::new(dir).join(marker);
        check(!path.exists(), || format!("{} appeared on the host", path.display()))?;
    }
    Ok(())
}

/// Fails unless the two values are equal, showing both.
pub fn check_eq<T: PartialEq + std::fmt::Debug>(actual: T, expected: T, what: &str) -> Result<(), Failed> {
    check(actual == expected, || format!("{what}:\n  actual:   {actual:?}\n  expected: {expected:?}"))
}

/// The run's output for failure messages.
pub fn describe(report: &RunReport) -> String {
    format!(
        "termination {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        report.outcome.termination, report.outcome.stdout, report.outcome.stderr
    )
}

/// A bash script that prints, each after a `== <path>` line, what `/proc` shows of the sandbox's mounts and of its
/// pid 1 (or the error reading it).
pub const PROC_LEAK_SCRIPT: &str = "for f in /proc/self/mountinfo /proc/self/mounts /proc/self/mountstats /proc/self/cgroup \
    /proc/1/cgroup /proc/1/cmdline /proc/1/environ /proc/1/maps /proc/1/mountinfo /proc/1/status; do \
    echo \"== $f\"; tr '\\0' ' ' < $f 2>&1; echo; done; echo '== /proc/1/exe'; readlink /proc/1/exe 2>&1; \
    echo '== /proc/1/cwd'; readlink /proc/1/cwd 2>&1; true";

/// The cgroup paths of this process that name something (not `/`): the server's cgroup, in a test.
pub fn own_cgroup_paths() -> Vec<String> {
    std::fs::read_to_string("/proc/self/cgroup")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .filter(|path| *path != "/")
        .map(str::to_owned)
        .collect()
}

/// Fails if the output of [`PROC_LEAK_SCRIPT`] contains any of `needles` or a cgroup path of this process (`/data`'s
/// line in `mountinfo` included: on its disk image the mount's root is `/`, not its host path).
pub fn check_no_host_layout(output: &str, needles: &[&str]) -> Result<(), Failed> {
    check(output.contains("== /proc/1/exe"), || format!("the script did not finish:\n{output}"))?;
    let cgroups = own_cgroup_paths();
    let needles: Vec<&str> = needles.iter().copied().chain(cgroups.iter().map(String::as_str)).collect();
    let mut section = "";
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("== ") {
            section = name;
            continue;
        }
        if let Some(needle) = needles.iter().find(|n| line.contains(**n)) {
            return Err(format!("{section} shows {needle:?}: {line}\n--- all ---\n{output}").into());
        }
    }
    Ok(())
}

/// Python that tries to create `<dir>/<marker>` in each of `dirs` and prints, a line each, `<dir> WROTE` or
/// `<dir> refused` (read-only, denied or missing; another errno by its name).
pub fn write_probe(dirs: &[&str], marker: &str) -> String {
    format!(
        r#"
import errno
for d in {dirs:?}:
    path = d.rstrip("/") + "/{marker}"
    try:
        with open(path, "w") as f:
            f.write("x")
        print(d, "WROTE")
    except OSError as e:
        refused = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT)
        print(d, "refused" if e.errno in refused else errno.errorcode[e.errno])
"#
    )
}

/// Checks that the server refuses to open each of `paths` (planted symlinks, say) in `conversation`'s directory:
/// none is readable through `Workspaces::open`.
pub fn check_server_refuses(sandbox: &Sandbox, conversation: &str, paths: &[&str]) -> Result<(), Failed> {
    use std::io::Read;
    let id = ConversationId::parse(conversation)?;
    for path in paths {
        match sandbox.engine.workspaces().open(&id, path) {
            Err(sandlot_core::Error::InvalidPath { .. }) => {}
            Ok(mut file) => {
                let mut leaked = String::new();
                file.read_to_string(&mut leaked)?;
                return Err(format!("{path} was readable by the server: {leaked:.60}").into());
            }
            Err(other) => return Err(format!("{path}: unexpected {other}").into()),
        }
    }
    Ok(())
}
