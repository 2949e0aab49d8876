//! Python runs in prepared sandboxes (built before their run, the template's child already waiting in them): each is
//! still a fresh sandbox with nothing of an earlier run, sees its own conversation at `/data` and only it, is
//! confined as an exec'd run is (Landlock binding to the conversation mounted late), the pool refills after a burst,
//! a replacement is built after its run and not beside it, a prepared sandbox that died is never used, and with the
//! pool off runs go on as before. The harness keeps the server's default pool (`common::Sandbox::with_engine_config`),
//! so the jail's other tests run their Python through it too, whenever one is ready.

use crate::common;

use std::time::Duration;

use common::{PREPARED_PROBE as PREPARED, SETTLE, Sandbox, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{Language, RunRequest};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "prepared",
        vec![
            ("a_prepared_run_is_a_fresh_sandbox", a_prepared_run_is_a_fresh_sandbox),
            ("a_prepared_run_sees_its_conversation_and_no_other", a_prepared_run_sees_its_conversation_and_no_other),
            ("a_prepared_run_is_confined_as_an_execd_one", a_prepared_run_is_confined_as_an_execd_one),
            ("the_pool_refills_after_a_burst", the_pool_refills_after_a_burst),
            ("the_pool_builds_nothing_while_the_cores_are_busy", the_pool_builds_nothing_while_the_cores_are_busy),
            ("a_replacement_is_built_after_its_run_not_beside_it", a_replacement_is_built_after_its_run_not_beside_it),
            ("a_prepared_sandbox_that_died_is_never_used", a_prepared_sandbox_that_died_is_never_used),
            ("with_the_pool_off_runs_go_on_as_before", with_the_pool_off_runs_go_on_as_before),
        ],
    )
}

/// Runs `code` once the pool is full and settled; its output.
fn run_prepared(sandbox: &Sandbox, conversation: &str, code: &str) -> Result<String, Failed> {
    check(sandbox.wait_for_prepared(2), || "the pool did not fill".to_owned())?;
    std::thread::sleep(SETTLE);
    let out = run_probed(sandbox, conversation, code)?;
    check(out.starts_with("prepared\n"), || format!("the run was not prepared: {out}"))?;
    Ok(out["prepared\n".len()..].to_owned())
}

/// Runs `code` after [`PREPARED`] in `conversation` now, whatever the pool holds; its whole output.
fn run_probed(sandbox: &Sandbox, conversation: &str, code: &str) -> Result<String, Failed> {
    let report = sandbox.run(conversation, Language::Python, &format!("{PREPARED}\n{code}"));
    check(report.outcome.success(), || describe(&report))?;
    Ok(report.outcome.stdout)
}

fn a_prepared_run_is_a_fresh_sandbox() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let first = "import os, random, subprocess
os.environ['LEFT_BEHIND'] = '1'
open('/tmp/left-behind', 'w').write('x')
subprocess.Popen(['sleep', '30'], start_new_session=True)
print(random.getrandbits(64))";
    let later = "import os, random
print(os.path.exists('/tmp/left-behind'), 'LEFT_BEHIND' in os.environ)
print(sorted(p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/cmdline').read().startswith('sleep')))
print(random.getrandbits(64))";
    let first_random = run_prepared(&sandbox, "fresh", first)?;
    for conversation in ["fresh", "fresh-other"] {
        let out = run_prepared(&sandbox, conversation, later)?;
        let lines: Vec<&str> = out.lines().collect();
        check_eq(lines.first().copied(), Some("False False"), "no file or environment of the earlier run")?;
        check_eq(lines.get(1).copied(), Some("[]"), "no process of the earlier run")?;
        check(lines.get(2).is_some_and(|random| *random != first_random.trim()), || "the same random state".into())?;
    }
    Ok(())
}

fn a_prepared_run_sees_its_conversation_and_no_other() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let write = "import os\nopen('/data/mine.txt', 'w').write('a')\nprint(os.getcwd(), sorted(os.listdir('/data')))";
    check_eq(run_prepared(&sandbox, "conv-a", write)?.as_str(), "/data ['mine.txt']\n", "conversation a")?;
    let look = "import os\nprint(sorted(os.listdir('/data')), os.stat('/data').st_uid == os.getuid())";
    check_eq(run_prepared(&sandbox, "conv-b", look)?.as_str(), "[] True\n", "conversation b sees nothing of a")?;
    check_eq(run_prepared(&sandbox, "conv-a", look)?.as_str(), "['mine.txt'] True\n", "conversation a keeps its file")?;
    // On the host the file is the conversation's, owned by the storage uid as any run's (the idmap of /data).
    let written = sandbox.data_dir("conv-a").join("mine.txt");
    check_eq(std::fs::read_to_string(&written).ok().as_deref(), Some("a"), "the file on the host")?;
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&written)?);
    check_eq(owner, common::sandbox_uids().storage(), "the file's owner on the host")
}

fn a_prepared_run_is_confined_as_an_execd_one() -> Result<(), Failed> {
    let status = "import os, ctypes
wanted = ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp')
for line in open('/proc/self/status'):
    if line.split(':')[0] in wanted:
        print(' '.join(line.split()))
print(os.getcwd(), os.getsid(0) == os.getpid(), oct(os.stat('/tmp/main.py').st_mode), os.stat('/tmp/main.py').st_uid)
for path in ('/proc/self/comm', '/usr/planted', '/data/../planted'):
    try:
        open(path, 'w').write('x')
        print('wrote', path)
    except OSError as e:
        print(type(e).__name__, path)
libc = ctypes.CDLL(None, use_errno=True)
print('mount', libc.mount(b'none', b'/data', b'tmpfs', 0, None), ctypes.get_errno())
print('umount', libc.umount2(b'/data', 2), ctypes.get_errno())
print(open('/proc/self/cgroup').read().splitlines()[-1])
print(' '.join(arg for arg in open('/proc/self/cmdline').read().split(chr(0)) if arg))";
    let prepared = Sandbox::new(|_| {});
    let out = run_prepared(&prepared, "confined", status)?;
    let execd = Sandbox::with_config(|config| config.python_preload = None, |_| {});
    let report = execd.run("confined", Language::Python, &format!("{PREPARED}\n{status}"));
    check(report.outcome.success(), || describe(&report))?;
    check_eq(report.outcome.stdout.split_once('\n').map(|(_, rest)| rest), Some(out.as_str()), "the same confinement")?;
    check(out.contains("CapEff: 0000000000000000") && out.contains("Seccomp: 2"), || out.clone())?;
    check(out.contains("PermissionError /proc/self/comm"), || format!("Landlock must refuse the write: {out}"))?;
    check(out.contains("mount -1 1\n") && out.contains("umount -1 1\n"), || format!("mounts must fail: {out}"))
}

fn the_pool_refills_after_a_burst() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    check(sandbox.wait_for_prepared(2), || "the pool did not fill".to_owned())?;
    let sandbox_ref = &sandbox;
    let reports = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..8)
            .map(|n| {
                let request = RunRequest {
                    conversation_id: format!("burst-{n}"),
                    language: "python".into(),
                    code: "print(6 * 7)".into(),
                    ..RunRequest::default()
                };
                scope.spawn(move || sandbox_ref.run_request(request))
            })
            .collect();
        runs.into_iter().map(|run| run.join().expect("a run's thread")).collect::<Vec<_>>()
    });
    for report in reports {
        check_eq(report.outcome.stdout.as_str(), "42\n", &describe(&report))?;
    }
    check(sandbox.wait_for_prepared(2), || "the pool did not refill after the burst".to_owned())?;
    check_eq(run_prepared(&sandbox, "after-burst", "print('ok')")?.as_str(), "ok\n", "a run after the burst")
}

/// Under load the cores are the limit and a prepared sandbox costs more CPU than one built on the run's path (a network
/// namespace of its own): a take builds no replacement while as many runs as cores are in flight, and the pool fills
/// up again once they end.
fn the_pool_builds_nothing_while_the_cores_are_busy() -> Result<(), Failed> {
    let sandbox = Sandbox::with_config(|config| config.prepared_live_sandboxes = 0, |_| {});
    let jail = sandbox.jail.as_ref().ok_or("a native backend")?;
    let full = full_pool(&sandbox)?;
    let (taken, while_busy) = common::while_the_cores_are_busy(&sandbox, || {
        let taken = run_probed(&sandbox, "taken-while-busy", "");
        // Long enough for a replacement to be built and ready, had one been started.
        std::thread::sleep(4 * SETTLE);
        (taken, jail.prepared_ready())
    })?;
    check_eq(taken?.as_str(), "prepared\n", "the run while busy took a prepared sandbox")?;
    check_eq(while_busy, full - 1, "prepared sandboxes ready while the cores were busy")?;
    check(sandbox.wait_for_prepared(full), || "the pool did not fill up again once the cores were free".to_owned())
}

/// The pool full and settled: no build still under way (the loaded template's may finish after the bare one's). How
/// many sandboxes wait then.
fn full_pool(sandbox: &Sandbox) -> Result<usize, Failed> {
    let jail = sandbox.jail.as_ref().ok_or("a native backend")?;
    check(sandbox.wait_for_prepared(2), || "the pool did not fill".to_owned())?;
    let mut full = 0;
    while full != jail.prepared_ready() {
        full = jail.prepared_ready();
        std::thread::sleep(2 * SETTLE);
    }
    Ok(full)
}

/// A build beside a run slows it down on a small machine: a taken sandbox's replacement is built once its run ends,
/// even on idle cores.
fn a_replacement_is_built_after_its_run_not_beside_it() -> Result<(), Failed> {
    let sandbox = Sandbox::with_config(|config| config.prepared_live_sandboxes = 0, |_| {});
    let jail = sandbox.jail.as_ref().ok_or("a native backend")?;
    let full = full_pool(&sandbox)?;
    let (taken, during) = std::thread::scope(|scope| {
        let run = scope.spawn(|| run_probed(&sandbox, "long-run", "import time\ntime.sleep(6)"));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while jail.prepared_ready() == full && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Long enough for a replacement to be built and ready, had one been started with the take.
        std::thread::sleep(4 * SETTLE);
        let during = (jail.prepared_ready(), run.is_finished());
        (run.join().expect("the run's thread"), during)
    });
    check_eq(taken?.as_str(), "prepared\n", "the long run took a prepared sandbox")?;
    check_eq(during, (full - 1, false), "(sandboxes ready, the run ended) while the run went on")?;
    check(sandbox.wait_for_prepared(full), || "the pool did not fill up again once the run ended".to_owned())
}

fn a_prepared_sandbox_that_died_is_never_used() -> Result<(), Failed> {
    // No live sandbox prepared: its driver, waiting, says the same on its command line.
    let sandbox = Sandbox::with_config(|config| config.prepared_live_sandboxes = 0, |_| {});
    check(sandbox.wait_for_prepared(2), || "the pool did not fill".to_owned())?;
    // The waiting children say what they are on their command line; kill them all.
    let children: Vec<i32> = common::prepared_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.starts_with(b"sandlot: a prepared sandbox"))
        })
        .collect();
    check_eq(children.len(), 2, "two prepared children waiting")?;
    for pid in &children {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL)?;
    }
    std::thread::sleep(Duration::from_millis(100));
    for conversation in ["after-death-1", "after-death-2", "after-death-3"] {
        let report = sandbox.run(conversation, Language::Python, &format!("{PREPARED}\nprint('ran')"));
        check(report.outcome.success() && report.outcome.stdout.ends_with("ran\n"), || describe(&report))?;
    }
    check(sandbox.wait_for_prepared(2), || "the pool did not refill".to_owned())
}

fn with_the_pool_off_runs_go_on_as_before() -> Result<(), Failed> {
    let sandbox = Sandbox::with_config(|config| config.prepared_sandboxes = 0, |_| {});
    for conversation in ["off-1", "off-1", "off-2"] {
        std::thread::sleep(SETTLE);
        let report = sandbox.run(conversation, Language::Python, &format!("{PREPARED}\nprint('ran')"));
        check(report.outcome.success(), || describe(&report))?;
        check_eq(report.outcome.stdout.as_str(), "built now\nran\n", "not prepared")?;
    }
    check_eq(sandbox.jail.as_ref().map(|jail| jail.prepared_ready()), Some(0), "no sandbox prepared")
}
