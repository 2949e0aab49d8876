//! Live sandboxes prepared for a conversation's first `session` call (built before the conversation is known, the
//! Python driver already forked and waiting): the call is served by one, which sees its own conversation at `/data`
//! and only it, its processes are confined as those of a live sandbox built on the call's path (Landlock binding to
//! the conversation attached late, for the driver forked ahead and for the processes pid 1 execs), the pool refills
//! after a take, and with the pool off sessions go on as before. See docs/security.md, "Live sandboxes".

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use common::{PREPARED_PROBE as PREPARED, SETTLE, Sandbox, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{Language, RunReport, RunRequest, SessionUse};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "live_prepared",
        vec![
            (
                "a_first_call_is_prepared_and_sees_only_its_conversation",
                a_first_call_is_prepared_and_sees_only_its_conversation,
            ),
            ("a_prepared_session_is_confined_as_one_built_now", a_prepared_session_is_confined_as_one_built_now),
            ("the_live_pool_refills_after_a_take", the_live_pool_refills_after_a_take),
            (
                "a_replacement_is_built_after_the_first_call_not_beside_it",
                a_replacement_is_built_after_the_first_call_not_beside_it,
            ),
            (
                "a_first_call_of_another_language_lets_the_driver_go",
                a_first_call_of_another_language_lets_the_driver_go,
            ),
            ("with_the_live_pool_off_sessions_go_on_as_before", with_the_live_pool_off_sessions_go_on_as_before),
        ],
    )
}

fn session(sandbox: &Sandbox, conversation: &str, language: Language, code: &str) -> RunReport {
    sandbox.run_request(RunRequest {
        conversation_id: conversation.into(),
        language: language.to_string(),
        code: code.into(),
        session: SessionUse::Interpreter,
        ..Default::default()
    })
}

/// The first session call of `conversation` once the live pool is full and settled: its output after the
/// [`PREPARED`] line, which it checks says `expected`.
fn first_call(sandbox: &Sandbox, conversation: &str, code: &str, expected: &str) -> Result<String, Failed> {
    if expected == "prepared" {
        check(sandbox.wait_for_prepared_live(1), || "the live pool did not fill".to_owned())?;
    }
    std::thread::sleep(SETTLE);
    let report = session(sandbox, conversation, Language::Python, &format!("{PREPARED}\n{code}"));
    check(report.outcome.success(), || describe(&report))?;
    let out = report.outcome.stdout;
    let rest = out.strip_prefix(&format!("{expected}\n"));
    check(rest.is_some(), || format!("the session was not {expected}: {out}"))?;
    Ok(rest.unwrap_or_default().to_owned())
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn a_first_call_is_prepared_and_sees_only_its_conversation() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let jail = sandbox.jail.clone().expect("a native backend");
    for (conversation, file) in [("mine", "mine.txt"), ("other", "other.txt")] {
        let report = sandbox.run(conversation, Language::Python, &format!("open('/data/{file}', 'w').write('x')"));
        check(report.outcome.success(), || describe(&report))?;
    }
    check(sandbox.wait_for_prepared_live(1), || "the live pool did not fill".to_owned())?;
    let waiting = jail.prepared_live_inits();
    let listing = "import os
print(sorted(name for name in os.listdir('/data') if name.endswith('.txt')))
print(os.getcwd())
written = open('/data/written.txt', 'w').write('y')";
    let out = first_call(&sandbox, "mine", listing, "prepared")?;
    check_eq(out.as_str(), "['mine.txt']\n/data\n", "its conversation's files, and only them")?;
    // The sandbox that served the call was the pool's: its init lives on, out of the pool.
    let taken: Vec<i32> = waiting.iter().copied().filter(|init| !jail.prepared_live_inits().contains(init)).collect();
    check(taken.len() == 1 && alive(taken[0]), || format!("the pool's sandbox {waiting:?} did not serve the call"))?;
    let written = sandbox.data_dir("mine").join("written.txt");
    let owner = std::fs::metadata(&written).map(|meta| meta.uid());
    check_eq(owner.ok(), Some(common::storage_uid()), "a file it writes is the conversation's, the storage uid's")?;
    check(!sandbox.data_dir("other").join("written.txt").exists(), || "written elsewhere".to_owned())?;
    // A later call is the same interpreter, in the same conversation.
    let later = session(&sandbox, "mine", Language::Python, "print(open('/data/written.txt').read())");
    check_eq(later.outcome.stdout.as_str(), "y\n", "the same conversation later")
}

fn a_prepared_session_is_confined_as_one_built_now() -> Result<(), Failed> {
    let status = "import os, ctypes
wanted = ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp')
for line in open('/proc/self/status'):
    if line.split(':')[0] in wanted:
        print(' '.join(line.split()))
print(os.getcwd(), os.getsid(0) == os.getpid())
for path in ('/data/file', '/tmp/file', '/proc/self/comm', '/usr/planted', '/data/../planted'):
    try:
        open(path, 'w').write('x')
        print('wrote', path)
    except OSError as e:
        print(type(e).__name__, path)
libc = ctypes.CDLL(None, use_errno=True)
print('mount', libc.mount(b'none', b'/data', b'tmpfs', 0, None), ctypes.get_errno())
print('umount', libc.umount2(b'/data', 2), ctypes.get_errno())
print(open('/proc/self/cgroup').read().splitlines()[-1])";
    // What pid 1 execs (the Bash driver) is confined by pid 1's domain, entered once the conversation was attached.
    let shell = "for path in /data/shell /tmp/shell /proc/self/comm /usr/planted; do
  if (echo x > $path) 2>/dev/null; then echo wrote $path; else echo refused $path; fi
done";
    let prepared = Sandbox::new(|_| {});
    let out = first_call(&prepared, "confined", status, "prepared")?;
    let shell_out = session(&prepared, "confined", Language::Bash, shell);
    let built = Sandbox::with_config(|config| config.prepared_live_sandboxes = 0, |_| {});
    check_eq(first_call(&built, "confined", status, "built now")?, out.clone(), "the same confinement")?;
    let built_shell = session(&built, "confined", Language::Bash, shell);
    check_eq(&shell_out.outcome.stdout, &built_shell.outcome.stdout, "the same confinement of exec'd processes")?;
    check(out.contains("wrote /data/file\nwrote /tmp/file\n"), || format!("/data and /tmp are writable: {out}"))?;
    check(out.contains("CapEff: 0000000000000000") && out.contains("Seccomp: 2"), || out.clone())?;
    check(out.contains("PermissionError /proc/self/comm"), || format!("Landlock must refuse the write: {out}"))?;
    check(out.contains("mount -1 1\n") && out.contains("umount -1 1\n"), || format!("mounts must fail: {out}"))?;
    check_eq(
        shell_out.outcome.stdout.as_str(),
        "wrote /data/shell\nwrote /tmp/shell\nrefused /proc/self/comm\nrefused /usr/planted\n",
        "pid 1's domain binds to the attached conversation",
    )
}

fn the_live_pool_refills_after_a_take() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    for round in 0..3 {
        let out = first_call(&sandbox, &format!("refill-{round}"), "print('ran')", "prepared")?;
        check_eq(out.as_str(), "ran\n", "a prepared first call")?;
    }
    check(sandbox.wait_for_prepared_live(1), || "the live pool did not refill".to_owned())
}

/// A build beside a conversation's first call slows it down on a small machine: the taken sandbox's replacement is
/// built once that call has ended.
fn a_replacement_is_built_after_the_first_call_not_beside_it() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let jail = sandbox.jail.as_ref().ok_or("a native backend")?;
    check(sandbox.wait_for_prepared_live(1), || "the live pool did not fill".to_owned())?;
    let (out, during) = std::thread::scope(|scope| {
        let call =
            scope.spawn(|| first_call(&sandbox, "long-first", "import time\ntime.sleep(6)\nprint('ran')", "prepared"));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while jail.prepared_live_ready() == 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Long enough for a replacement to be built and ready, had one been started with the take.
        std::thread::sleep(4 * SETTLE);
        let during = (jail.prepared_live_ready(), jail.prepared_live_inits().len(), call.is_finished());
        (call.join().expect("the call's thread"), during)
    });
    check_eq(out?.as_str(), "ran\n", "the long first call")?;
    check_eq(during, (0, 0, false), "(ready, being built, the call ended) while the first call went on")?;
    check(sandbox.wait_for_prepared_live(1), || "the live pool did not refill after the first call".to_owned())
}

fn a_first_call_of_another_language_lets_the_driver_go() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    check(sandbox.wait_for_prepared_live(1), || "the live pool did not fill".to_owned())?;
    let report = session(&sandbox, "shell-first", Language::Bash, "echo ran");
    check_eq(report.outcome.stdout.as_str(), "ran\n", "a first Bash call")?;
    // The Python driver forked ahead is let go (its job socket closed, it exits): no Python process is left in the
    // conversation's sandbox (the pool's new one is left out of `sandbox_processes`). A bound far above the
    // milliseconds its exit takes; it fails if the driver lingers.
    let drivers = || {
        common::sandbox_processes().into_iter().any(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("_sandlot_driver"))
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while drivers() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    check(!drivers(), || "the prepared driver still runs".to_owned())?;
    let python = session(&sandbox, "shell-first", Language::Python, "print(6 * 7)");
    check_eq(python.outcome.stdout.as_str(), "42\n", "a later Python call forks its driver then")
}

fn with_the_live_pool_off_sessions_go_on_as_before() -> Result<(), Failed> {
    let sandbox = Sandbox::with_config(|config| config.prepared_live_sandboxes = 0, |_| {});
    let out = first_call(&sandbox, "off", "x = 41\nprint('ran')", "built now")?;
    check_eq(out.as_str(), "ran\n", "a first call built on its path")?;
    let later = session(&sandbox, "off", Language::Python, "print(x + 1)");
    check_eq(later.outcome.stdout.as_str(), "42\n", "the state kept")?;
    check_eq(sandbox.jail.as_ref().map(|jail| jail.prepared_live_ready()), Some(0), "no live sandbox prepared")
}
