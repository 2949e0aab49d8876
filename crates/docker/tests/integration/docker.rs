//! The Docker backend against a real engine and the runner images (`scripts/build-runners.sh`; `scripts/test.sh`
//! starts dockerd and builds them): the run and attack tests that apply to containers. They fail, not skip, when the
//! engine or the images are missing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlot_core::{Engine, EngineConfig, Layout, Limits, RunReport, RunRequest, Termination, Workspaces};
use sandlot_docker::{DockerBackend, DockerConfig};

struct Sandbox {
    _root: tempfile::TempDir,
    engine: Engine,
}

impl Drop for Sandbox {
    /// The conversations' images are unmounted (as a server does at shutdown), and the root, if the backend made it
    /// a mount of its own (nosuid,nodev, for a plain conversation directory), so the directory can be removed.
    fn drop(&mut self) {
        self.engine.workspaces().unmount_images();
        nix::mount::umount2(self._root.path(), nix::mount::MntFlags::MNT_DETACH).ok();
    }
}

async fn sandbox(adjust: impl FnOnce(&mut Limits)) -> Sandbox {
    let root = tempfile::tempdir().unwrap();
    let backend = DockerBackend::connect(DockerConfig::new(root.path().display().to_string()))
        .await
        .expect("a running Docker engine with the runner images (scripts/build-runners.sh)");
    let languages: Vec<String> =
        sandlot_core::Backend::runners(&backend).iter().map(|r| r.language.to_string()).collect();
    assert_eq!(
        languages,
        ["python", "typescript", "javascript", "bash"],
        "runner images missing: run scripts/build-runners.sh"
    );
    let mut config = EngineConfig::default();
    config.limits.timeout = Duration::from_secs(20);
    adjust(&mut config.limits);
    // As a server makes them by default: each conversation on a disk image of its own (as root).
    let workspaces = match sandlot_core::DiskImages::detect(config.limits.disk_mb, config.limits.disk_inodes) {
        Ok(images) => Workspaces::new(root.path()).with_images(images),
        Err(_) => Workspaces::new(root.path()),
    };
    Sandbox { engine: Engine::new(Arc::new(backend), workspaces, config), _root: root }
}

async fn run(sandbox: &Sandbox, conversation: &str, language: &str, code: &str) -> RunReport {
    let request = RunRequest {
        conversation_id: conversation.into(),
        language: language.into(),
        code: code.into(),
        ..RunRequest::default()
    };
    sandbox.engine.run(request, &()).await.expect("run")
}

/// Containers still there for one run (other tests run at the same time, so only this run's count).
fn containers_left(report: &RunReport) -> usize {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=sandlot.run={}", report.run_id)])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[tokio::test]
async fn every_language_runs_with_exact_streams_and_exit_codes() {
    let sandbox = sandbox(|_| {}).await;
    let cases = [
        (
            "python",
            "import sys\nprint('py out')\nprint('py err', file=sys.stderr)\nsys.exit(3)",
            "py out\n",
            "py err\n",
            3,
        ),
        ("javascript", "console.log('js', [1, 2].length); process.exit(0)", "js 2\n", "", 0),
        ("typescript", "const n: number = 6 * 7;\nconsole.log(n)", "42\n", "", 0),
        ("bash", "echo out; echo err >&2; exit 5", "out\n", "err\n", 5),
    ];
    for (language, code, stdout, stderr, exit) in cases {
        let report = run(&sandbox, "langs", language, code).await;
        let outcome = &report.outcome;
        assert_eq!(
            (outcome.stdout.as_str(), outcome.stderr.as_str(), outcome.termination.clone()),
            (stdout, stderr, Termination::Exited { code: exit }),
            "{language}"
        );
    }
}

#[tokio::test]
async fn runs_as_non_root_without_network() {
    let sandbox = sandbox(|_| {}).await;
    let code = "import os, socket\nprint(os.getuid(), os.getgid())\nprint(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\ntry:\n    socket.getaddrinfo('example.com', 80)\n    print('dns works')\nexcept OSError:\n    print('no dns')\ntry:\n    open('/etc/evil', 'w')\nexcept OSError as e:\n    print('read-only root', e.errno)";
    let report = run(&sandbox, "net", "python", code).await;
    assert_eq!(report.outcome.stdout, "10001 10001\n['lo']\nno dns\nread-only root 30\n", "{report:?}");
}

#[tokio::test]
async fn files_persist_and_conversations_are_separate() {
    let sandbox = sandbox(|_| {}).await;
    run(&sandbox, "conv-a", "bash", "echo one > /data/note.txt").await;
    let again = run(&sandbox, "conv-a", "bash", "cat /data/note.txt; echo two >> /data/note.txt").await;
    assert_eq!(again.outcome.stdout, "one\n");
    assert_eq!(again.files.files.iter().map(|f| (f.path.as_str(), f.size)).collect::<Vec<_>>(), [("note.txt", 8)]);
    let other = run(&sandbox, "conv-b", "bash", "ls -A /data; ls /data/.. | grep -c conv- || true").await;
    assert_eq!(other.outcome.stdout, "0\n");
}

#[tokio::test]
async fn stdin_reaches_the_program() {
    let sandbox = sandbox(|_| {}).await;
    let request = RunRequest {
        conversation_id: "stdin".into(),
        language: "python".into(),
        code: "import sys\nprint(sys.stdin.read().upper())".into(),
        stdin: b"hello container".to_vec(),
        ..RunRequest::default()
    };
    let report = sandbox.engine.run(request, &()).await.unwrap();
    assert_eq!(report.outcome.stdout, "HELLO CONTAINER\n");
}

/// runner-python carries the scientific environment of scripts/python-env.sh (issue 20, item 5): the backend reports
/// exactly its pins as the runner's packages (the image's `sandbox.packages` label, which its build checks), numpy
/// and pandas import at those versions, and `plt.show()` saves the figure where the server returns it as an image
/// (the end-to-end test `test_plots_come_back_as_images_through_the_docker_backend` decodes it). Fails against a bare
/// image: run scripts/build-runners.sh.
#[tokio::test]
async fn runner_python_has_the_scientific_stack_and_plt_show_saves_figures() {
    let sandbox = sandbox(|_| {}).await;
    let pins = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/python-env.sh"))
        .arg("--pins")
        .output()
        .expect("scripts/python-env.sh --pins");
    let pins: std::collections::BTreeMap<String, String> = String::from_utf8(pins.stdout)
        .unwrap()
        .split_whitespace()
        .map(|pin| pin.split_once("==").map(|(n, v)| (n.to_owned(), v.to_owned())).unwrap())
        .collect();
    assert_eq!(pins.keys().collect::<Vec<_>>(), ["matplotlib", "numpy", "pandas"]);
    let python = sandbox.engine.runners().into_iter().find(|r| r.language.as_str() == "python").unwrap();
    assert_eq!(python.packages, pins, "runner-python without the scientific stack: run scripts/build-runners.sh");

    let code = "import numpy as np, pandas as pd, matplotlib.pyplot as plt\n\
        print(np.__version__, pd.__version__, int(np.arange(4).sum()))\n\
        plt.figure(figsize=(4, 3), dpi=100)\nplt.plot(np.arange(4))\nplt.show()\n";
    let report = run(&sandbox, "plots", "python", code).await;
    let outcome = &report.outcome;
    // stderr empty: matplotlib found the font cache built with the environment, no rebuild in the run.
    assert_eq!(
        (outcome.stdout.as_str(), outcome.stderr.as_str(), outcome.termination.clone()),
        (format!("{} {} 6\n", pins["numpy"], pins["pandas"]).as_str(), "", Termination::Exited { code: 0 }),
    );
    let files: Vec<&str> = report.files.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(files, [".sandlot/figures/figure-1.png"]);
}

#[tokio::test]
async fn deadline_kills_the_container_and_nothing_is_left() {
    let sandbox = sandbox(|limits| limits.timeout = Duration::from_secs(2)).await;
    let started = Instant::now();
    let report = run(&sandbox, "deadline", "bash", "echo start; (sleep 600 &); sleep 600").await;
    assert_eq!(report.outcome.termination, Termination::TimedOut);
    assert_eq!(report.outcome.stdout, "start\n");
    // Generous for a loaded machine (container start and removal take seconds there), far below the 600 s sleep.
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(containers_left(&report), 0);
}

/// A run that prints 3.2 MB and then its answer keeps the answer with the default cap (the first and last 512 KiB of
/// each stream, a marker line between them), and live listeners get exactly the kept text; before the ring, the
/// first 1 MiB only was kept and `LAST-LINE` was lost.
#[tokio::test]
async fn the_last_line_of_a_long_output_is_kept() {
    let sandbox = sandbox(|_| {}).await;
    let code = "for i in range(50000):\n    print(f'line {i:06d} ' + 'x' * 51)\nprint('LAST-LINE')";
    let printed = (0..50_000).map(|i| format!("line {i:06} {}\n", "x".repeat(51))).collect::<String>() + "LAST-LINE\n";
    let half = 512 * 1024;
    let cut = sandlot_core::cut_marker((printed.len() - 2 * half) as u64, half, half);
    let expected = format!("{}{cut}{}", &printed[..half], &printed[printed.len() - half..]);
    let live = std::sync::Mutex::new(Vec::new());
    let sink = |chunk: sandlot_core::OutputChunk| live.lock().unwrap().extend_from_slice(&chunk.data);
    let request = RunRequest {
        conversation_id: "long".into(),
        language: "python".into(),
        code: code.into(),
        ..RunRequest::default()
    };
    let report = sandbox.engine.run(request, &sink).await.expect("run");
    assert_eq!(report.outcome.termination, Termination::Exited { code: 0 });
    assert!(report.outcome.stdout_truncated);
    assert!(report.outcome.stdout == expected, "kept {} bytes, ending {:?}", report.outcome.stdout.len(), {
        let kept = &report.outcome.stdout;
        &kept[kept.len().saturating_sub(80)..]
    });
    let live = String::from_utf8(live.into_inner().unwrap()).unwrap();
    assert!(live == expected, "live listeners got {} bytes, not the {} kept", live.len(), expected.len());
}

#[tokio::test]
async fn memory_and_pids_limits_hold() {
    let sandbox = sandbox(|limits| {
        limits.memory_mb = 64;
        limits.pids = 32;
        limits.timeout = Duration::from_secs(5);
    })
    .await;
    let report = run(&sandbox, "limits", "python", "hog = 'x' * (512 * 1024 * 1024)\nprint('survived')").await;
    assert_eq!(report.outcome.termination, Termination::OutOfMemory, "{report:?}");
    let report = run(&sandbox, "limits", "bash", "bomb() { bomb | bomb & }; bomb; sleep 30").await;
    assert_eq!(report.outcome.termination, Termination::TimedOut);
    assert!(report.outcome.stderr.contains("Resource temporarily unavailable"), "{}", report.outcome.stderr);
    assert_eq!(containers_left(&report), 0);
}

#[tokio::test]
async fn a_file_past_the_quota_ends_the_run_as_disk_quota_exceeded() {
    let sandbox = sandbox(|limits| limits.disk_mb = 8).await;
    let report = run(&sandbox, "quota", "bash", "dd if=/dev/zero of=/data/big bs=1M count=64 2>/dev/null").await;
    assert_eq!(report.outcome.termination, Termination::DiskQuotaExceeded, "{report:?}");
    assert_eq!(containers_left(&report), 0);
}

#[tokio::test]
async fn cancelling_a_run_removes_its_container() {
    let sandbox = sandbox(|_| {}).await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let request = RunRequest {
        conversation_id: "cancel".into(),
        language: "bash".into(),
        code: "sleep 600".into(),
        cancel: cancel.clone(),
        ..RunRequest::default()
    };
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let report = sandbox.engine.run(request, &()).await.unwrap();
    assert_eq!(report.outcome.termination, Termination::Cancelled);
    // Generous for a loaded machine, far below the 600 s sleep.
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert_eq!(containers_left(&report), 0);
}

/// Containers of one sandlot instance (its owner label is its root), whatever their state.
fn containers_of(owner: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=sandlot.owner={owner}")])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect()
}

/// A server that exits has removed its containers. At shutdown a run's container may be under removal already (its
/// run was cancelled, or its future dropped when its client went away, and the run's guard asked for the removal)
/// just as the server aborts what is left: the engine then answers `abort_all`'s own request with a conflict (409,
/// removal already in progress) at once, and an `abort_all` that took that for done let the process exit with the
/// container still there. `abort_all` must return only once no container of this sandlot is listed any more.
#[tokio::test]
async fn abort_all_returns_once_no_container_is_left() {
    for round in 0..3 {
        // A new instance each round: after abort_all a backend takes no new run.
        let sandbox = sandbox(|limits| limits.timeout = Duration::from_secs(600)).await;
        let owner = sandbox._root.path().display().to_string();
        let request = RunRequest {
            conversation_id: "abort".into(),
            language: "bash".into(),
            code: "sleep 600".into(),
            ..RunRequest::default()
        };
        let run = sandbox.engine.run(request, &());
        tokio::pin!(run);
        // Drive the run until its container is running (generous: container start-up on a loaded machine).
        let deadline = Instant::now() + Duration::from_secs(60);
        let running = loop {
            let running = running_containers_of(&owner);
            if !running.is_empty() {
                break running;
            }
            assert!(Instant::now() < deadline, "round {round}: the run's container never ran");
            tokio::select! {
                report = &mut run => panic!("round {round}: the run ended: {report:?}"),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        };
        // Another removal under way first (as a cancelled run's own, over its own connection), then the abort.
        let docker = bollard::Docker::connect_with_defaults().expect("docker");
        let id = running[0].clone();
        let other = tokio::spawn(async move {
            let options = bollard::query_parameters::RemoveContainerOptionsBuilder::default().force(true).build();
            docker.remove_container(&id, Some(options)).await
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        sandbox.engine.abort_all().await;
        let left = containers_of(&owner);
        let _ = other.await;
        assert_eq!(left, Vec::<String>::new(), "round {round}: containers left when abort_all returned");
    }
}

/// The running containers of one sandlot instance.
fn running_containers_of(owner: &str) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["ps", "-q", "--filter", &format!("label=sandlot.owner={owner}")])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect()
}

/// Runs `command` on the host as an unprivileged user (uid and gid 65534, no groups); its exit code and output.
fn as_other_user(command: &str) -> (i32, String) {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", command])
        .output()
        .expect("setpriv");
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), output)
}

/// A run copies bash into `/data` and makes it setuid and setgid: `/data` is mounted nosuid,nodev in the container,
/// and no other host user can reach the conversation's directory to run the copy.
#[tokio::test]
async fn a_setuid_file_in_data_is_inert_and_out_of_other_users_reach() {
    let sandbox = sandbox(|_| {}).await;
    let code = "cp /bin/bash /data/sh; chmod 6755 /data/sh; chmod 755 /data; grep ' /data ' /proc/self/mountinfo";
    let report = run(&sandbox, "setuid", "bash", code).await;
    let options = report.outcome.stdout.split_whitespace().nth(5).unwrap_or_default().to_owned();
    let options: Vec<&str> = options.split(',').collect();
    assert!(options.contains(&"nosuid") && options.contains(&"nodev"), "{options:?} {report:?}");
    let data = sandbox.engine.workspaces().files_dir(&sandlot_core::ConversationId::parse("setuid").unwrap());
    assert!(data.join("sh").exists(), "{report:?}");
    for command in [format!("ls {}", data.display()), format!("{}/sh -p -c id", data.display())] {
        let (code, output) = as_other_user(&command);
        assert!(code != 0 && output.contains("Permission denied"), "another user ran `{command}`: {code} {output}");
    }
}

/// Symlink targets and directory entries take blocks but have no file size: they count towards the quota.
#[tokio::test]
async fn symlink_targets_and_directories_count_towards_the_quota() {
    let sandbox = sandbox(|limits| limits.disk_mb = 8).await;
    let code = "import os\nfor i in range(40000):\n    os.symlink('t' * 4000, f'/data/l{i}')\nprint('done')";
    let report = run(&sandbox, "links", "python", code).await;
    assert_eq!(report.outcome.termination, Termination::DiskQuotaExceeded, "{report:?}");
    let data = sandbox.engine.workspaces().files_dir(&sandlot_core::ConversationId::parse("links").unwrap());
    let held = sandlot_core::directory_usage(&data, u64::MAX).unwrap().bytes;
    assert!(held < 48 << 20, "/data holds {held} bytes under an 8 MiB quota");
}

/// Files unlinked while open are in no directory, where no walk finds them; the container's bind of `/data` is the
/// conversation's disk image, whose kernel counts them: thirty files of 7 MiB stop a little past an 8 MiB quota
/// (220,200,960 bytes before). And the bind names no host path: its root in `mountinfo` is the image's `/`.
#[tokio::test]
async fn unlinked_open_files_count_towards_the_quota() {
    let sandbox = sandbox(|limits| limits.disk_mb = 8).await;
    let mount_root =
        "print([l.split()[3] for l in open('/proc/self/mountinfo') if l.split()[4] == '/data'], flush=True)";
    let code = format!("{mount_root}\n{}", include_str!("../../../jail/tests/integration/common/unlinked_writer.py"));
    let report = run(&sandbox, "unlinked", "python", &code).await;
    let stdout = &report.outcome.stdout;
    assert!(stdout.starts_with("['/']\n"), "/data's mount root names a host path: {report:?}");
    let written: u64 = stdout.lines().find_map(|l| l.strip_prefix("written ")).and_then(|n| n.parse().ok()).unwrap();
    assert!(written <= 9 << 20, "unlinked files held {written} bytes under an 8 MiB quota: {report:?}");
    assert_eq!(report.outcome.termination, Termination::DiskQuotaExceeded, "{report:?}");
}

const HOME: Layout = Layout::Home { path: "/home/baponi" };

async fn run_home(sandbox: &Sandbox, conversation: &str, language: &str, code: &str) -> RunReport {
    run_in(sandbox, HOME, conversation, language, code).await
}

async fn run_in(sandbox: &Sandbox, layout: Layout, conversation: &str, language: &str, code: &str) -> RunReport {
    let request = RunRequest {
        conversation_id: conversation.into(),
        language: language.into(),
        code: code.into(),
        layout,
        ..RunRequest::default()
    };
    sandbox.engine.run(request, &()).await.expect("run")
}

/// The Workspace layout: the conversation at `/workspace` is the working directory (and `HOME`) and persists;
/// `/data` is the image's read-only directory; a symlink planted to `/` leads the next run into its own read-only
/// container.
#[tokio::test]
async fn workspace_layout_works_in_the_workspace_and_writes_only_there_and_tmp() {
    let sandbox = sandbox(|_| {}).await;
    let workspace = Layout::Workspace { path: "/workspace" };
    let code = "pwd; echo $HOME; (echo x > /data/x) 2>/dev/null || echo data-refused; echo kept > kept.txt; \
                ln -s / root; ln -s /etc etc";
    let first = run_in(&sandbox, workspace, "ws", "bash", code).await;
    assert_eq!(first.outcome.stdout, "/workspace\n/workspace\ndata-refused\n", "{first:?}");
    let code = "cat /workspace/kept.txt; for d in / /etc /usr/bin /root root etc root/usr /data /workspace /tmp; do \
                (echo x > $d/marker) 2>/dev/null && echo $d WROTE || echo $d refused; done";
    let second = run_in(&sandbox, workspace, "ws", "bash", code).await;
    let expected = "kept\n/ refused\n/etc refused\n/usr/bin refused\n/root refused\nroot refused\netc refused\n\
                    root/usr refused\n/data refused\n/workspace WROTE\n/tmp WROTE\n";
    assert_eq!(second.outcome.stdout, expected, "{second:?}");
    assert_eq!(containers_left(&second), 0);
}

/// The Home layout: the conversation at `/home/baponi` (also `HOME`) persists; `/data`, the working directory, is
/// an empty scratch tmpfs of the run's own.
#[tokio::test]
async fn home_layout_persists_home_and_scratches_data() {
    let sandbox = sandbox(|_| {}).await;
    let code = "pwd; echo $HOME; echo scratch > /data/scratch.txt; echo kept > /home/baponi/kept.txt; ls -A /data; \
                printf '#!/bin/sh\\necho ran\\n' > /data/s.sh; chmod +x /data/s.sh; /data/s.sh";
    let first = run_home(&sandbox, "home", "bash", code).await;
    assert_eq!(first.outcome.stdout, "/data\n/home/baponi\nscratch.txt\nran\n", "{first:?}");
    assert_eq!(first.files.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["kept.txt"]);
    let second = run_home(&sandbox, "home", "bash", "ls -A /data; cat /home/baponi/kept.txt; ls -A /home/baponi").await;
    assert_eq!(second.outcome.stdout, "kept\nkept.txt\n", "{second:?}");
    assert_eq!(containers_left(&second), 0);
}

/// A Home run writes under `/home/baponi`, `/data`, `/tmp` and nowhere else; a symlink it plants to `/` leads the
/// next run into its own read-only container.
#[tokio::test]
async fn home_layout_writes_only_home_data_and_tmp() {
    let sandbox = sandbox(|_| {}).await;
    run_home(&sandbox, "home", "bash", "ln -s / /home/baponi/root; ln -s /etc /home/baponi/etc").await;
    let code = r#"
import errno
for d in ["/", "/home", "/etc", "/usr/bin", "/root", "/home/baponi/root", "/home/baponi/etc", "/home/baponi/root/usr", "/home/baponi", "/data", "/tmp"]:
    try:
        open(d.rstrip("/") + "/marker", "w").write("x")
        print(d, "WROTE")
    except OSError as e:
        print(d, "refused" if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT) else errno.errorcode[e.errno])
"#;
    let report = run_home(&sandbox, "home", "python", code).await;
    let expected = "/ refused\n/home refused\n/etc refused\n/usr/bin refused\n/root refused\n/home/baponi/root refused\n\
                    /home/baponi/etc refused\n/home/baponi/root/usr refused\n/home/baponi WROTE\n/data WROTE\n/tmp WROTE\n";
    assert_eq!(report.outcome.stdout, expected, "{report:?}");
}

/// The scratch `/data` has a size (the disk quota, at most half the memory limit, in the container's memory):
/// 32 MiB under a 64 MiB memory limit; filling it fails with ENOSPC there, and the next run finds it empty again.
#[tokio::test]
async fn home_layout_scratch_data_stops_at_its_size() {
    let sandbox = sandbox(|limits| limits.memory_mb = 64).await;
    let code = "dd if=/dev/zero of=/data/fill bs=1M count=100 2>&1; echo exit=$?; du -m /data/fill | cut -f1";
    let report = run_home(&sandbox, "fill", "bash", code).await;
    let out = &report.outcome.stdout;
    assert_eq!(report.outcome.termination, Termination::Exited { code: 0 }, "{report:?}");
    assert!(out.contains("No space left on device") && out.contains("exit=1\n"), "{report:?}");
    assert!(out.ends_with("\n32\n") || out.ends_with("\n31\n"), "{report:?}");
    let next = run_home(&sandbox, "fill", "bash", "ls -A /data; echo done").await;
    assert_eq!(next.outcome.stdout, "done\n", "{next:?}");
}

/// A writable volume's directory is root's and the runner's group's, mode 0770: the container writes in it, but
/// cannot `chmod` it open for the host's other users (it could before: it owned it), who can neither list it nor
/// plant a file in it. And a volume over its quota stops the run.
#[tokio::test]
async fn a_writable_volume_stays_out_of_other_users_reach_and_within_its_quota() {
    let sandbox = sandbox(|_| {}).await;
    let work = tempfile::tempdir().unwrap();
    let mounts = |quota_mb| {
        vec![sandlot_core::Mount { host: work.path().into(), path: "/data/work".into(), read_only: false, quota_mb }]
    };
    let request = |code: &str, quota_mb| RunRequest {
        conversation_id: "volumes".into(),
        language: "bash".into(),
        code: code.into(),
        layout: HOME,
        mounts: mounts(quota_mb),
        ..RunRequest::default()
    };
    let code = "echo mine > /data/work/mine.txt && cat /data/work/mine.txt; chmod 0777 /data/work 2>/dev/null || echo chmod refused";
    let report = sandbox.engine.run(request(code, None), &()).await.expect("run");
    assert_eq!(report.outcome.stdout, "mine\nchmod refused\n", "{report:?}");
    for command in [format!("ls {}", work.path().display()), format!("touch {}/planted", work.path().display())] {
        let (code, output) = as_other_user(&command);
        assert!(code != 0 && output.contains("Permission denied"), "another user ran `{command}`: {code} {output}");
    }
    let fill = "head -c 42M /dev/zero > /data/work/big; echo done";
    let report = sandbox.engine.run(request(fill, Some(8)), &()).await.expect("run");
    assert_eq!(report.outcome.termination, Termination::DiskQuotaExceeded, "{report:?}");
}

/// Volumes: binds beneath the scratch `/data`, read-only unless writable; a symlink planted in a writable one leads
/// the next run into its own container.
#[tokio::test]
async fn volumes_are_bound_read_only_unless_writable() {
    use std::os::unix::fs::PermissionsExt;
    let sandbox = sandbox(|_| {}).await;
    let (docs, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::set_permissions(docs.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(docs.path().join("readme.md"), "# docs\n").unwrap();
    std::fs::set_permissions(docs.path().join("readme.md"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let mounts = vec![
        sandlot_core::Mount { host: docs.path().into(), path: "/data/docs".into(), read_only: true, quota_mb: None },
        sandlot_core::Mount { host: work.path().into(), path: "/data/work".into(), read_only: false, quota_mb: None },
    ];
    let request = |code: &str| RunRequest {
        conversation_id: "volumes".into(),
        language: "bash".into(),
        code: code.into(),
        layout: HOME,
        mounts: mounts.clone(),
        ..RunRequest::default()
    };
    let code = "cat /data/docs/readme.md; echo x > /data/docs/readme.md 2>/dev/null || echo refused; \
                touch /data/docs/new 2>/dev/null || echo refused; echo y > /data/work/out.txt && echo wrote; \
                ln -s /etc /data/work/etc";
    let report = sandbox.engine.run(request(code), &()).await.expect("run");
    assert_eq!(report.outcome.stdout, "# docs\nrefused\nrefused\nwrote\n", "{report:?}");
    assert_eq!(std::fs::read_to_string(docs.path().join("readme.md")).unwrap(), "# docs\n");
    assert_eq!(std::fs::read_to_string(work.path().join("out.txt")).unwrap(), "y\n");
    let report = sandbox.engine.run(request("echo z > /data/work/etc/pwned 2>/dev/null || echo refused"), &()).await;
    assert_eq!(report.expect("run").outcome.stdout, "refused\n");
}

/// A `session` call: `code` in the conversation's live container, in the language's persistent interpreter (or, with
/// `SessionUse::Process`, as a process of its own there).
async fn session(
    sandbox: &Sandbox,
    conversation: &str,
    language: &str,
    code: &str,
    session: sandlot_core::SessionUse,
    timeout: Option<Duration>,
) -> RunReport {
    let request = RunRequest {
        conversation_id: conversation.into(),
        language: language.into(),
        code: code.into(),
        session,
        timeout,
        ..RunRequest::default()
    };
    sandbox.engine.run(request, &()).await.expect("run")
}

#[tokio::test]
async fn a_live_container_keeps_interpreters_processes_and_loopback_between_calls() {
    use sandlot_core::SessionUse::{Interpreter, Process};
    let sandbox = sandbox(|_| {}).await;
    let run = |language, code| session(&sandbox, "live", language, code, Interpreter, None);
    run("python", "import json\nx = 41").await;
    let python = run("python", "print(json.dumps(x + 1))\nx").await;
    assert_eq!(python.outcome.stdout, "42\n41\n", "{python:?}");
    run("javascript", "var greeting = 'hi'").await;
    let typescript = run("typescript", "const n: number = 2;\nconsole.log(greeting, n)").await;
    assert_eq!(typescript.outcome.stdout, "hi 2\n", "{typescript:?}");
    run("bash", "cd /tmp && echo served > index.txt && COUNT=3").await;
    let bash = run("bash", "pwd; echo $COUNT").await;
    assert_eq!(bash.outcome.stdout, "/tmp\n3\n", "{bash:?}");
    let started = session(
        &sandbox,
        "live",
        "bash",
        "cd /tmp && nohup python3 -m http.server 8000 >/dev/null 2>&1 &",
        Process,
        None,
    )
    .await;
    assert!(started.outcome.success(), "{started:?}");
    let fetch = "import time, urllib.request\nfor _ in range(50):\n    try:\n        print(urllib.request.urlopen('http://127.0.0.1:8000/index.txt').read().decode(), end='')\n        break\n    except OSError:\n        time.sleep(0.1)";
    let fetched = run("python", fetch).await;
    assert_eq!(fetched.outcome.stdout, "served\n", "{fetched:?}");
    let report = fetched.session.expect("a session report");
    assert_eq!((report.calls, report.state_lost), (8, false), "{report:?}");
    // Another conversation's live container reaches nothing of this one's loopback.
    let other =
        session(&sandbox, "other", "python", fetch.replace("range(50)", "range(3)").as_str(), Interpreter, None).await;
    assert_eq!(other.outcome.stdout, "", "{other:?}");
    let conversation = sandlot_core::ConversationId::parse("live").unwrap();
    assert!(sandbox.engine.sessions().close(&conversation, "closed by a test").await);
    let next = run("python", "print('x' in globals())").await;
    assert_eq!(next.outcome.stdout, "False\n", "{next:?}");
    assert!(next.session.and_then(|s| s.notice).is_some_and(|n| n.contains("closed by a test")));
    sandbox.engine.sessions().close_all("the test ended").await;
}

#[tokio::test]
async fn a_live_container_interrupts_a_timeout_and_survives_a_memory_bomb() {
    use sandlot_core::SessionUse::Interpreter;
    let sandbox = sandbox(|_| {}).await;
    session(&sandbox, "bounded", "python", "x = 5", Interpreter, None).await;
    let looping =
        session(&sandbox, "bounded", "python", "while True:\n    pass", Interpreter, Some(Duration::from_secs(2)))
            .await;
    assert_eq!(looping.outcome.termination, Termination::TimedOut, "{looping:?}");
    let kept = session(&sandbox, "bounded", "python", "print(x)", Interpreter, None).await;
    assert_eq!(kept.outcome.stdout, "5\n", "{kept:?}");
    let bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))";
    let bombed = session(&sandbox, "bounded", "python", bomb, Interpreter, None).await;
    assert_eq!(bombed.outcome.termination, Termination::OutOfMemory, "{bombed:?}");
    let next = session(&sandbox, "bounded", "python", "print('x' in globals())", Interpreter, None).await;
    assert_eq!(next.outcome.stdout, "False\n", "{next:?}");
    let notice = next.session.and_then(|s| s.notice).unwrap_or_default();
    assert!(notice.contains("out of memory"), "{notice}");
    sandbox.engine.sessions().close_all("the test ended").await;
}
