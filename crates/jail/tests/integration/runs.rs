//! What the jail must do for ordinary programs: every language, stdin, exit codes, signals, deadlines, live
//! output, files that persist across runs of a conversation, and a clear error for a missing runner.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Sandbox, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{Engine, EngineConfig, Language, OutputChunk, RunRequest, Stream, Termination, Workspaces};
use sandlot_jail::{CgroupSupport, JailBackend, JailConfig, ProcessModel};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "runs",
        vec![
            ("every_language_runs", every_language_runs),
            ("stdin_reaches_the_program", stdin_reaches_the_program),
            ("exit_codes_are_passed_on", exit_codes_are_passed_on),
            ("signals_are_reported", signals_are_reported),
            ("deadline_kills_and_reports_a_timeout", deadline_kills_and_reports_a_timeout),
            ("output_is_streamed_while_the_program_runs", output_is_streamed_while_the_program_runs),
            ("files_persist_across_runs_of_a_conversation", files_persist_across_runs_of_a_conversation),
            ("missing_runner_lists_the_available_ones", missing_runner_lists_the_available_ones),
            ("a_one_shot_backend_runs_only_with_its_forked_init", a_one_shot_backend_runs_only_with_its_forked_init),
            ("invalid_requests_are_refused_before_running", invalid_requests_are_refused_before_running),
            ("an_oom_is_not_blamed_on_the_next_run", an_oom_is_not_blamed_on_the_next_run),
            ("concurrent_runs_get_their_own_limits", concurrent_runs_get_their_own_limits),
            ("the_program_alone_is_in_its_cgroups", the_program_alone_is_in_its_cgroups),
            (
                "a_free_cgroup_slot_never_holds_a_finished_runs_tmpfs",
                a_free_cgroup_slot_never_holds_a_finished_runs_tmpfs,
            ),
            ("warm_inits_serve_runs_and_are_replaced", warm_inits_serve_runs_and_are_replaced),
            ("without_idmapped_mounts_runs_use_the_storage_uid", without_idmapped_mounts_runs_use_the_storage_uid),
            (
                "the_zygote_clones_inits_and_is_replaced_when_it_dies",
                the_zygote_clones_inits_and_is_replaced_when_it_dies,
            ),
            ("cancelling_a_run_kills_it_at_once", cancelling_a_run_kills_it_at_once),
        ],
    )
}

fn every_language_runs() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let cases = [
        (Language::Python, "import sys\nprint('py', sys.version_info[0])"),
        (Language::JavaScript, "const n = [1, 2, 3].reduce((a, b) => a + b); console.log('js', n)"),
        (
            Language::TypeScript,
            "const n: number = 6;\ninterface P { x: number }\nconst p: P = { x: n };\nconsole.log('ts', p.x)",
        ),
        (Language::Bash, "echo bash $((2 * 3))"),
    ];
    let expected = ["py 3\n", "js 6\n", "ts 6\n", "bash 6\n"];
    for ((language, code), expected) in cases.iter().zip(expected) {
        let report = sandbox.run("langs", *language, code);
        check(report.outcome.success(), || format!("{language}: {}", describe(&report)))?;
        check_eq(report.outcome.stdout.as_str(), expected, language.as_str())?;
    }
    Ok(())
}

fn stdin_reaches_the_program() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "import sys\ndata = sys.stdin.read()\nprint(len(data), data.upper())";
    let report = sandbox.run_with("stdin", Language::Python, code, b"hello sandbox".to_vec(), Default::default());
    check_eq(report.outcome.stdout.as_str(), "13 HELLO SANDBOX\n", &describe(&report))
}

fn exit_codes_are_passed_on() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let report = sandbox.run("codes", Language::Bash, "echo out; echo err >&2; exit 7");
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 7 }, "termination")?;
    check_eq((report.outcome.stdout.as_str(), report.outcome.stderr.as_str()), ("out\n", "err\n"), "streams")?;
    let report = sandbox.run("codes", Language::Python, "raise SystemExit(3)");
    check_eq(report.outcome.exit_code(), 3, "python exit code")
}

fn signals_are_reported() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let report = sandbox.run("signals", Language::Bash, "kill -TERM $$");
    check_eq(report.outcome.termination.clone(), Termination::Signaled { signal: 15 }, &describe(&report))?;
    check_eq(report.outcome.exit_code(), 143, "exit code")
}

fn deadline_kills_and_reports_a_timeout() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.timeout = Duration::from_millis(1500));
    let start = Instant::now();
    let report = sandbox.run("deadline", Language::Python, "import time\nprint('start', flush=True)\ntime.sleep(60)");
    let elapsed = start.elapsed();
    check_eq(report.outcome.termination.clone(), Termination::TimedOut, &describe(&report))?;
    check_eq(report.outcome.stdout.as_str(), "start\n", "output before the deadline")?;
    // Generous for a loaded machine; without the deadline the run would take its 60 s.
    check(elapsed < Duration::from_secs(30), || format!("the run took {elapsed:?} for a 1.5 s deadline"))
}

fn output_is_streamed_while_the_program_runs() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.timeout = Duration::from_secs(120));
    let chunks: Arc<Mutex<Vec<OutputChunk>>> = Arc::default();
    // A handshake rather than timing: the program prints its first line, then waits (up to 60 s) for the file the
    // sink makes once that line has reached it. Live output unblocks it at once; output held back until the end
    // would reach the sink only after the program gave up waiting, which it then says.
    let go = sandbox.data_dir("stream").join("go");
    let sink = {
        let (chunks, go) = (chunks.clone(), go.clone());
        move |chunk: OutputChunk| {
            let mut chunks = chunks.lock().unwrap();
            chunks.push(chunk);
            let stdout: Vec<u8> =
                chunks.iter().filter(|c| c.stream == Stream::Stdout).flat_map(|c| c.data.iter().copied()).collect();
            if stdout.starts_with(b"first\n") && !go.exists() {
                std::fs::write(&go, "").unwrap();
            }
        }
    };
    let request = RunRequest {
        conversation_id: "stream".into(),
        language: "python".into(),
        code: "import os, sys, time\nprint('first')\nprint('oops', file=sys.stderr)\nstart = time.monotonic()\n\
               while not os.path.exists('/data/go') and time.monotonic() - start < 60:\n    time.sleep(0.01)\n\
               print('second' if os.path.exists('/data/go') else 'nothing came while I ran')"
            .into(),
        ..RunRequest::default()
    };
    let report = sandbox.runtime.block_on(sandbox.engine.run(request, &sink))?;
    let chunks = chunks.lock().unwrap();
    // "oops" and its newline, on stderr.
    let stderr: Vec<u8> =
        chunks.iter().filter(|c| c.stream == Stream::Stderr).flat_map(|c| c.data.iter().copied()).collect();
    check_eq(stderr.as_slice(), b"oops\n".as_slice(), "stderr chunks")?;
    check_eq(report.outcome.stderr.as_str(), "oops\n", "stderr")?;
    check_eq(report.outcome.stdout.as_str(), "first\nsecond\n", "stdout")
}

fn files_persist_across_runs_of_a_conversation() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "import os\nn = int(open('count').read()) if os.path.exists('count') else 0\nopen('count', 'w').write(str(n + 1))\nos.makedirs('out/deep', exist_ok=True)\nopen('out/deep/r.txt', 'w').write('x' * n)\nprint(n + 1)";
    let first = sandbox.run("persist", Language::Python, code);
    let second = sandbox.run("persist", Language::Python, code);
    check_eq((first.outcome.stdout.as_str(), second.outcome.stdout.as_str()), ("1\n", "2\n"), "counts")?;
    let files: Vec<(String, u64)> = second.files.files.iter().map(|f| (f.path.clone(), f.size)).collect();
    check_eq(files, vec![("count".into(), 1), ("out/deep/r.txt".into(), 1)], "files after the second run")
}

fn missing_runner_lists_the_available_ones() -> Result<(), Failed> {
    let mut config = JailConfig::new(std::env::current_exe()?);
    config.languages = vec![Language::Python, Language::Bash];
    config.probe_versions = false;
    let root = tempfile::tempdir()?;
    let engine =
        Engine::new(Arc::new(JailBackend::new(config)?), Workspaces::new(root.path()), EngineConfig::default());
    let request = RunRequest {
        conversation_id: "c".into(),
        language: "javascript".into(),
        code: "console.log(1)".into(),
        ..RunRequest::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let error = runtime.block_on(engine.run(request, &())).unwrap_err();
    check_eq(error.to_string().as_str(), "no runner for language javascript; available: python, bash", "error")
}

/// A one-shot backend has no zygote: a run without the init its command forked is a clear error, not a hang.
fn a_one_shot_backend_runs_only_with_its_forked_init() -> Result<(), Failed> {
    let mut config = JailConfig::new(std::env::current_exe()?);
    config.model = ProcessModel::OneShot;
    config.languages = vec![Language::Bash];
    config.probe_versions = false;
    config.sandbox_uids = common::sandbox_uids();
    let root = tempfile::tempdir()?;
    let engine =
        Engine::new(Arc::new(JailBackend::new(config)?), Workspaces::new(root.path()), EngineConfig::default());
    let request = RunRequest {
        conversation_id: "c".into(),
        language: "bash".into(),
        code: "true".into(),
        ..RunRequest::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let error = runtime.block_on(engine.run(request, &())).unwrap_err().to_string();
    check(error.contains("a one-shot backend runs once, with a forked init"), || error.clone())
}

fn invalid_requests_are_refused_before_running() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let cases = [
        ("../etc", "python", "print(1)", "invalid conversationId: must start with a letter or digit"),
        (
            "a/b",
            "python",
            "print(1)",
            "invalid conversationId: must contain only letters, digits, '.', '_' and '-' (found '/')",
        ),
        (
            "ok",
            "cobol",
            "x",
            "invalid language: unknown language \"cobol\"; expected one of python, typescript, javascript, bash",
        ),
        ("ok", "python", "  ", "invalid code: must not be empty"),
    ];
    for (conversation, language, code, message) in cases {
        let request = RunRequest {
            conversation_id: conversation.into(),
            language: language.into(),
            code: code.into(),
            ..RunRequest::default()
        };
        let error = sandbox.runtime.block_on(sandbox.engine.run(request, &())).unwrap_err();
        check_eq(error.to_string().as_str(), message, conversation)?;
    }
    check(!sandbox.root.path().join("..").join("etc").join("files").exists(), || "a directory was created".into())
}

fn an_oom_is_not_blamed_on_the_next_run() -> Result<(), Failed> {
    // Cgroup slots are reused: the OOM counter must be read against its value when the run took the slot.
    let sandbox = Sandbox::new(|limits| limits.memory_mb = 64);
    let first = sandbox.run("oom", Language::Python, "hog = 'x' * (512 * 1024 * 1024)");
    check_eq(first.outcome.termination.clone(), Termination::OutOfMemory, &describe(&first))?;
    let second = sandbox.run("oom", Language::Bash, "kill -KILL $$");
    check_eq(second.outcome.termination.clone(), Termination::Signaled { signal: 9 }, &describe(&second))
}

fn concurrent_runs_get_their_own_limits() -> Result<(), Failed> {
    // Three runs at once, each allowed 8 processes: each can start 4 sleepers, none is charged for the others'.
    let sandbox = Sandbox::new(|limits| limits.pids = 8);
    let code = "for i in 1 2 3 4; do sleep 2 & done; sleep 0.5; echo ok; wait";
    let reports = sandbox.runtime.block_on(async {
        let run = |conversation: &'static str| {
            let request = RunRequest {
                conversation_id: conversation.into(),
                language: "bash".into(),
                code: code.into(),
                ..RunRequest::default()
            };
            sandbox.engine.run(request, &())
        };
        tokio::join!(run("par-1"), run("par-2"), run("par-3"))
    });
    for report in [reports.0?, reports.1?, reports.2?] {
        check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
        check_eq(report.outcome.stdout.as_str(), "ok\n", "stdout")?;
    }
    Ok(())
}

fn the_program_alone_is_in_its_cgroups() -> Result<(), Failed> {
    // Allowed 4 processes, the program has all 4 (the jail's own init and pid 1 are not in its cgroups), and its
    // cgroup namespace is rooted at its own group.
    let sandbox = Sandbox::new(|limits| limits.pids = 4);
    let code = "import os, time
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    children.append(pid)
print('3 children')
try:
    if os.fork() == 0:
        os._exit(0)
    print('a 4th child')
except BlockingIOError:
    print('no 4th child')
lines = open('/proc/self/cgroup').read().split()
outside = [l for l in lines if (':pids:' in l or ':memory:' in l or l.startswith('0::')) and not l.endswith(':/')]
print('cgroup paths:', outside or 'all /')
";
    let report = sandbox.run("cgroups", Language::Python, code);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
    check_eq(report.outcome.stdout.as_str(), "3 children\nno 4th child\ncgroup paths: all /\n", "stdout")
}

fn a_free_cgroup_slot_never_holds_a_finished_runs_tmpfs() -> Result<(), Failed> {
    // The pages of a run's /tmp and /dev/shm are charged to its memory cgroup and, without swap, cannot be
    // reclaimed: were its slot free before they are gone, they would count against the next run that takes it.
    // Right after each run, every free slot (one whose lock this test can take) must be without them.
    let sandbox = Sandbox::new(|_| {});
    let code = "for path, mb in (('/tmp/fill', 48), ('/dev/shm/fill', 8)):
    with open(path, 'wb') as f:
        f.write(b'x' * (mb << 20))
print('filled')";
    for _ in 0..5 {
        let report = sandbox.run("tmpfs-charge", Language::Python, code);
        check_eq(report.outcome.stdout.as_str(), "filled\n", &describe(&report))?;
        for (slot, shmem) in CgroupSupport::detect(false).shmem_of_free_slots() {
            check(shmem < 4 << 20, || {
                format!("free slot {} still holds {shmem} bytes of tmpfs pages", slot.display())
            })?;
        }
    }
    Ok(())
}

fn warm_inits_serve_runs_and_are_replaced() -> Result<(), Failed> {
    let mut config = JailConfig::new(std::env::current_exe()?);
    config.languages = vec![Language::Python, Language::Bash];
    config.probe_versions = false;
    config.model = ProcessModel::Server { warm_inits: 2 };
    config.sandbox_uids = common::sandbox_uids();
    let root = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let backend = Arc::new(JailBackend::new(config)?);
        backend.warm_up();
        let engine = Engine::new(backend.clone(), Workspaces::new(root.path()), EngineConfig::default());
        for _ in 0..50 {
            if backend.warm_ready() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        check_eq(backend.warm_ready(), 2, "warm inits after warm-up")?;
        for i in 0..4 {
            let request = RunRequest {
                conversation_id: format!("warm-{i}"),
                language: "bash".into(),
                code: format!("echo run {i}; echo $$"),
                ..RunRequest::default()
            };
            let report = engine.run(request, &()).await?;
            check_eq(
                report.outcome.stdout.as_str(),
                format!("run {i}\n2\n").as_str(),
                "a warm init runs like a fresh one",
            )?;
        }
        for _ in 0..50 {
            if backend.warm_ready() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        check_eq(backend.warm_ready(), 2, "warm inits after four runs")
    })
}

fn the_zygote_clones_inits_and_is_replaced_when_it_dies() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let zygotes = common::zygote_family(true);
    check_eq(zygotes.len(), 1, "zygotes started by the backend")?;
    // The sandbox hides its pid 1 from the program (`hidepid`), so the init is told apart from the host while the
    // run sleeps: a clone of the zygote has the zygote's command line (and a pipe, not a socket, on its stdin).
    let inits_during_a_run = || {
        // The run signals it is running and waits (up to 60 s) to be let go: the inits are counted in between, as
        // long as a loaded machine needs to start the run.
        let (ready, done) = (sandbox.data_dir("zygote").join("ready"), sandbox.data_dir("zygote").join("done"));
        let _ = (std::fs::remove_file(&ready), std::fs::remove_file(&done));
        std::thread::scope(|scope| {
            let code = "touch /data/ready; for i in $(seq 3000); do [ -e /data/done ] && break; sleep 0.02; done";
            let run = scope.spawn(|| sandbox.run("zygote", Language::Bash, code));
            let waited = common::wait_for(&ready);
            let clones = common::zygote_family(false).len();
            let _ = std::fs::write(&done, ""); // lets the run go (if it got as far as making /data)
            let report = run.join().expect("run");
            waited.map(|()| (clones, report))
        })
    };
    let (clones, report) = inits_during_a_run()?;
    check(report.outcome.success(), || describe(&report))?;
    check(clones >= 1, || "the sandbox's init should be a clone of the zygote".into())?;

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(zygotes[0]), nix::sys::signal::Signal::SIGKILL)?;
    std::thread::sleep(Duration::from_millis(100));
    let report = sandbox.run("zygote", Language::Bash, "true");
    check(report.outcome.success(), || format!("a run after the zygote died: {}", describe(&report)))?;
    let replacements: Vec<i32> = common::zygote_family(true).into_iter().filter(|pid| *pid != zygotes[0]).collect();
    check_eq(replacements.len(), 1, "zygotes after the first died")?;
    let (clones, report) = inits_during_a_run()?;
    check(report.outcome.success(), || format!("a run after the zygote died: {}", describe(&report)))?;
    check(clones >= 1, || "the next init should be a clone of the new zygote".into())
}

fn cancelling_a_run_kills_it_at_once() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.timeout = Duration::from_secs(60));
    let cancel = tokio_util::sync::CancellationToken::new();
    let request = RunRequest {
        conversation_id: "cancel".into(),
        language: "bash".into(),
        code: "(setsid sleep 600 &); sleep 600".into(),
        cancel: cancel.clone(),
        ..RunRequest::default()
    };
    let canceller = cancel.clone();
    sandbox.runtime.spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let report = sandbox.runtime.block_on(sandbox.engine.run(request, &()))?;
    check_eq(report.outcome.termination.clone(), Termination::Cancelled, &describe(&report))?;
    // Cancelled 0.5 s in: milliseconds later on an idle machine, seconds at worst on a loaded one, never the 600 s.
    check(started.elapsed() < Duration::from_secs(10), || format!("cancelled after {:?}", started.elapsed()))?;
    let left = common::sandbox_processes();
    check(left.is_empty(), || format!("processes left after cancelling: {left:?}"))
}

/// Where the conversation root's filesystem takes no idmapped mounts (ramfs), a run falls back to the storage uid:
/// it works, and its files belong to the storage uid; `doctor` reports it (`MISSING sandbox uids`).
fn without_idmapped_mounts_runs_use_the_storage_uid() -> Result<(), Failed> {
    let outer = tempfile::tempdir()?;
    let ramfs = outer.path().join("ramfs");
    std::fs::create_dir(&ramfs)?;
    nix::mount::mount(Some("ramfs"), &ramfs, Some("ramfs"), nix::mount::MsFlags::empty(), None::<&str>)?;
    let result = (|| {
        let sandbox = Sandbox::in_root(tempfile::tempdir_in(&ramfs)?, |_| {}, |_| {});
        // A conversation an older version made (files in a plain directory) stays on the root's filesystem; a new
        // one would get an ext4 image of its own, which has idmapped mounts.
        std::fs::create_dir_all(sandbox.data_dir("ramfs"))?;
        std::fs::write(sandbox.data_dir("ramfs").join("old"), "")?;
        let report = sandbox.run(
            "ramfs",
            Language::Bash,
            "cat /proc/self/uid_map | tr -s ' '; echo kept > /data/f; cat /data/f",
        );
        let expected = format!(" 1000 {} 1\nkept\n", common::storage_uid());
        check_eq(report.outcome.stdout.as_str(), expected.as_str(), &describe(&report))?;
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(sandbox.data_dir("ramfs").join("f"))?);
        check_eq(owner, common::storage_uid(), "owner of the file on the host")?;
        let doctor = sandbox.runtime.block_on(async {
            let mut config = JailConfig::new(std::env::current_exe()?);
            config.languages = vec![Language::Bash];
            config.sandbox_uids = common::sandbox_uids();
            config.data_root = Some(sandbox.root.path().to_owned());
            Ok::<_, Failed>(sandlot_jail::diagnose(&JailBackend::new(config)?).await)
        })?;
        let uids = doctor.iter().find(|c| c.layer == "sandbox uids").ok_or("no sandbox uids line")?;
        check_eq(uids.status, sandlot_jail::CheckStatus::Missing, &uids.detail)
    })();
    nix::mount::umount2(&ramfs, nix::mount::MntFlags::MNT_DETACH)?;
    result
}
