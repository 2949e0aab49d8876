//! The engine's live sandboxes on the native jail (`session` runs): state kept between calls, and every way a live
//! sandbox ends — idle timeout, maximum lifetime, the cap on live sandboxes, an interpreter killed by its memory
//! limit or by a deadline it ignored, an explicit close — each with no process left and the next call told why its
//! state is gone. Root only, one at a time (the `sandboxes` group).

use crate::common;

use std::time::{Duration, Instant};

use common::{Sandbox, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{Language, RunReport, RunRequest, SessionConfig, SessionUse, Termination};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "sessions",
        vec![
            ("state_persists_between_calls_in_every_language", state_persists_between_calls_in_every_language),
            ("a_timeout_interrupts_the_cell_and_keeps_the_state", a_timeout_interrupts_the_cell_and_keeps_the_state),
            (
                "an_interpreter_that_ignores_the_interrupt_is_killed",
                an_interpreter_that_ignores_the_interrupt_is_killed,
            ),
            (
                "a_memory_bomb_ends_the_interpreter_and_the_next_call_says_so",
                a_memory_bomb_ends_the_interpreter_and_the_next_call_says_so,
            ),
            (
                "a_background_process_serves_the_next_call_over_loopback",
                a_background_process_serves_the_next_call_over_loopback,
            ),
            ("idleness_ends_the_sandbox_and_everything_in_it", idleness_ends_the_sandbox_and_everything_in_it),
            ("the_lifetime_ends_the_sandbox", the_lifetime_ends_the_sandbox),
            ("the_cap_ends_the_least_recently_used_idle_sandbox", the_cap_ends_the_least_recently_used_idle_sandbox),
            ("memory_pressure_ends_idle_sandboxes", memory_pressure_ends_idle_sandboxes),
            (
                "a_tenant_that_fills_the_cap_ends_its_own_sandboxes_first",
                a_tenant_that_fills_the_cap_ends_its_own_sandboxes_first,
            ),
            ("close_and_restart_end_what_they_say", close_and_restart_end_what_they_say),
        ],
    )
}

/// A sandbox as a server runs them, its live sandboxes following `sessions`.
fn sandbox(sessions: SessionConfig) -> Sandbox {
    let mut sandbox = Sandbox::new(|_| {});
    sandbox.engine.set_sessions(sessions);
    sandbox
}

fn session(sandbox: &Sandbox, conversation: &str, language: Language, code: &str) -> RunReport {
    call(sandbox, conversation, language, code, SessionUse::Interpreter, None)
}

fn call(
    sandbox: &Sandbox,
    conversation: &str,
    language: Language,
    code: &str,
    session: SessionUse,
    timeout: Option<Duration>,
) -> RunReport {
    sandbox.run_request(RunRequest {
        conversation_id: conversation.into(),
        language: language.to_string(),
        code: code.into(),
        session,
        timeout,
        ..Default::default()
    })
}

fn stdout_is(report: &RunReport, expected: &str) -> Result<(), Failed> {
    check_eq(report.outcome.stdout.as_str(), expected, &format!("stdout of {}", describe(report)))
}

fn notice(report: &RunReport) -> String {
    report.session.as_ref().and_then(|s| s.notice.clone()).unwrap_or_default()
}

fn state_lost(report: &RunReport) -> bool {
    report.session.as_ref().is_some_and(|s| s.state_lost)
}

/// Host pids of the sandbox uids' processes whose command line contains `needle`.
fn running(needle: &str) -> Vec<i32> {
    common::sandbox_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(needle))
        })
        .collect()
}

/// The cgroup directories a host process is in (v1 hierarchies by their first controller, or v2's).
fn cgroup_dirs(pid: i32) -> Vec<std::path::PathBuf> {
    let listed = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    listed
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let hierarchy = controllers.split(',').next().unwrap_or_default().trim_start_matches("name=");
            let dir = std::path::Path::new("/sys/fs/cgroup").join(hierarchy).join(path.trim_start_matches('/'));
            (path != "/" && dir.join("cgroup.procs").exists()).then_some(dir)
        })
        .collect()
}

/// Waits up to `within` for `condition`.
fn eventually(within: Duration, condition: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < within {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    condition()
}

fn state_persists_between_calls_in_every_language() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig::default());
    let first = session(&sandbox, "persist", Language::Python, "import json\nx = 41\ndef double(n):\n    return 2 * n");
    check(first.outcome.success(), || describe(&first))?;
    let second = session(&sandbox, "persist", Language::Python, "print(json.dumps(double(x) - x + 1))\nx + 1");
    stdout_is(&second, "42\n42\n")?;
    let (a, b) = (
        first.session.clone().unwrap_or_else(|| panic!("no session")),
        second.session.clone().unwrap_or_else(|| panic!("no session")),
    );
    check_eq(b.id.as_str(), a.id.as_str(), "the same live sandbox")?;
    check_eq((a.calls, b.calls, b.state_lost), (1, 2, false), "calls counted, nothing lost")?;

    session(
        &sandbox,
        "persist",
        Language::JavaScript,
        "var greeting = 'hi'; function shout(s) { return s.toUpperCase() }",
    );
    let ts =
        session(&sandbox, "persist", Language::TypeScript, "const n: number = 2;\nconsole.log(shout(greeting), n)");
    stdout_is(&ts, "HI 2\n")?;

    session(
        &sandbox,
        "persist",
        Language::Bash,
        "cd /tmp && mkdir -p here && cd here\nCOUNT=3\nhello() { echo \"hello $1\"; }",
    );
    let bash = session(&sandbox, "persist", Language::Bash, "pwd; echo $COUNT; hello you");
    stdout_is(&bash, "/tmp/here\n3\nhello you\n")
}

fn a_timeout_interrupts_the_cell_and_keeps_the_state() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig::default());
    session(&sandbox, "interrupt", Language::Python, "x = 5");
    let looping = call(
        &sandbox,
        "interrupt",
        Language::Python,
        "while True:\n    pass",
        SessionUse::Interpreter,
        Some(Duration::from_secs(2)),
    );
    check_eq(&looping.outcome.termination, &Termination::TimedOut, "a looping cell")?;
    check(looping.outcome.stderr.contains("KeyboardInterrupt"), || describe(&looping))?;
    check(!state_lost(&looping), || format!("state kept: {}", describe(&looping)))?;
    stdout_is(&session(&sandbox, "interrupt", Language::Python, "print(x)"), "5\n")?;

    session(&sandbox, "interrupt", Language::Bash, "cd /tmp; Y=7");
    let sleeping =
        call(&sandbox, "interrupt", Language::Bash, "sleep 60", SessionUse::Interpreter, Some(Duration::from_secs(2)));
    check_eq(&sleeping.outcome.termination, &Termination::TimedOut, "a sleeping shell")?;
    stdout_is(&session(&sandbox, "interrupt", Language::Bash, "echo $PWD $Y"), "/tmp 7\n")
}

fn an_interpreter_that_ignores_the_interrupt_is_killed() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig::default());
    session(&sandbox, "stubborn", Language::Python, "x = 5");
    let code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass";
    let report =
        call(&sandbox, "stubborn", Language::Python, code, SessionUse::Interpreter, Some(Duration::from_secs(1)));
    check_eq(&report.outcome.termination, &Termination::TimedOut, "termination")?;
    check(state_lost(&report) && notice(&report).contains("did not stop"), || describe(&report))?;
    let next = session(&sandbox, "stubborn", Language::Python, "print('x' in globals())");
    stdout_is(&next, "False\n")?;
    check(state_lost(&next) && notice(&next).contains("previous call"), || notice(&next))
}

fn a_memory_bomb_ends_the_interpreter_and_the_next_call_says_so() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig::default());
    session(&sandbox, "bomb", Language::Python, "x = 5");
    let bomb =
        session(&sandbox, "bomb", Language::Python, "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))");
    check_eq(&bomb.outcome.termination, &Termination::OutOfMemory, "termination")?;
    check(state_lost(&bomb) && notice(&bomb).contains("out of memory"), || describe(&bomb))?;
    let next = session(&sandbox, "bomb", Language::Python, "print('x' in globals())");
    stdout_is(&next, "False\n")?;
    check(notice(&next).contains("out of memory"), || notice(&next))?;
    check_eq(next.session.map(|s| s.id), bomb.session.map(|s| s.id), "the same sandbox")
}

fn a_background_process_serves_the_next_call_over_loopback() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig::default());
    let start = session(
        &sandbox,
        "server",
        Language::Bash,
        "cd /tmp && echo served > index.txt && (python3 -m http.server 8000 >/dev/null 2>&1 &)",
    );
    check(start.outcome.success(), || describe(&start))?;
    let code = "import time, urllib.request\nfor _ in range(50):\n    try:\n        print(urllib.request.urlopen('http://127.0.0.1:8000/index.txt').read().decode(), end='')\n        break\n    except OSError:\n        time.sleep(0.1)";
    stdout_is(&session(&sandbox, "server", Language::Python, code), "served\n")?;
    let background = call(
        &sandbox,
        "server",
        Language::Bash,
        "curl -s http://127.0.0.1:8000/index.txt || python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/index.txt').read().decode(), end='')\"",
        SessionUse::Process,
        None,
    );
    stdout_is(&background, "served\n")
}

fn idleness_ends_the_sandbox_and_everything_in_it() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig { idle: Duration::from_secs(2), ..SessionConfig::default() });
    let first = call(
        &sandbox,
        "idle",
        Language::Bash,
        "nohup setsid sleep 1000 >/dev/null 2>&1 & echo started",
        SessionUse::Process,
        None,
    );
    stdout_is(&first, "started\n")?;
    check(eventually(Duration::from_secs(5), || !running("sleep 1000").is_empty()), || "no background sleep".into())?;
    let sleeper = *running("sleep 1000").first().ok_or("the background sleep is not running")?;
    let cgroups = cgroup_dirs(sleeper);
    check(!cgroups.is_empty(), || "the sleep is in no cgroup".into())?;
    let conversation = sandlot_core::ConversationId::parse("idle").map_err(|e| e.to_string())?;
    let ended = eventually(Duration::from_secs(20), || {
        sandbox.runtime.block_on(sandbox.engine.sessions().status(&conversation)).is_none()
            && sandbox.processes().is_empty()
    });
    check(ended, || format!("still live or processes left: {:?}", sandbox.processes()))?;
    check_eq(running("sleep 1000"), vec![], "the background sleep after the idle end")?;
    for dir in &cgroups {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        check_eq(procs.as_str(), "", &format!("{} after the idle end", dir.display()))?;
    }
    let next = session(&sandbox, "idle", Language::Python, "print(1)");
    stdout_is(&next, "1\n")?;
    check(state_lost(&next) && notice(&next).contains("idle for 2 s"), || notice(&next))
}

fn the_lifetime_ends_the_sandbox() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig { max_lifetime: Duration::from_secs(2), ..SessionConfig::default() });
    session(&sandbox, "lifetime", Language::Python, "x = 1");
    std::thread::sleep(Duration::from_secs(3));
    let next = session(&sandbox, "lifetime", Language::Python, "print('x' in globals())");
    stdout_is(&next, "False\n")?;
    check(notice(&next).contains("maximum lifetime of 2 s"), || notice(&next))
}

fn the_cap_ends_the_least_recently_used_idle_sandbox() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig { max_live: 2, ..SessionConfig::default() });
    for conversation in ["cap-a", "cap-b"] {
        session(&sandbox, conversation, Language::Python, "x = 1");
    }
    session(&sandbox, "cap-a", Language::Python, "x = 2"); // b is now the least recently used
    session(&sandbox, "cap-c", Language::Python, "x = 3");
    let statuses = sandbox.runtime.block_on(sandbox.engine.sessions().statuses());
    let mut live: Vec<_> = statuses.iter().map(|s| s.conversation.to_string()).collect();
    live.sort();
    check_eq(live, vec!["cap-a".to_owned(), "cap-c".to_owned()], "live sandboxes")?;
    let b = session(&sandbox, "cap-b", Language::Python, "print('x' in globals())");
    stdout_is(&b, "False\n")?;
    check(notice(&b).contains("make room"), || notice(&b))
}

fn close_and_restart_end_what_they_say() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig::default());
    let conversation = sandlot_core::ConversationId::parse("manage").map_err(|e| e.to_string())?;
    session(&sandbox, "manage", Language::Python, "x = 1");
    call(&sandbox, "manage", Language::Bash, "nohup sleep 1000 >/dev/null 2>&1 &", SessionUse::Process, None);
    let sessions = sandbox.engine.sessions();
    // The shell's call returns once `sleep` is forked, which may be before it has exec'd (a process mid-exec shows
    // no command line, and the exiting shell's own names `sleep 1000`): wait until `sleep` itself is listed.
    let is_sleep = |p: &sandlot_core::SandboxProcess| p.command == "sleep 1000";
    let started = eventually(Duration::from_secs(10), || {
        let status = sandbox.runtime.block_on(sessions.status(&conversation));
        status.is_some_and(|s| s.processes.iter().any(is_sleep))
    });
    check(started, || "the background sleep never showed".into())?;
    let status = sandbox.runtime.block_on(sessions.restart(&conversation)).ok_or("no live sandbox")?;
    check(status.interpreters.is_empty(), || format!("{status:?}"))?;
    check(status.processes.iter().any(is_sleep), || format!("{:?}", status.processes))?;
    let after = session(&sandbox, "manage", Language::Python, "print('x' in globals())");
    stdout_is(&after, "False\n")?;
    check(notice(&after).contains("restarted"), || notice(&after))?;
    check(sandbox.runtime.block_on(sessions.close(&conversation, "closed by a test")), || "closed".into())?;
    check(eventually(Duration::from_secs(10), || sandbox.processes().is_empty()), || {
        format!("{:?}", sandbox.processes())
    })?;
    let next = session(&sandbox, "manage", Language::Python, "print(2)");
    check(notice(&next).contains("closed by a test"), || notice(&next))
}

fn memory_pressure_ends_idle_sandboxes() -> Result<(), Failed> {
    // A floor no host meets: every idle live sandbox is under pressure, and ends at the reaper's next look.
    let sandbox = sandbox(SessionConfig { min_free_mb: u64::MAX, ..SessionConfig::default() });
    let conversation = sandlot_core::ConversationId::parse("pressure").map_err(|e| e.to_string())?;
    session(&sandbox, "pressure", Language::Python, "x = 1");
    let ended = eventually(Duration::from_secs(15), || {
        sandbox.runtime.block_on(sandbox.engine.sessions().status(&conversation)).is_none()
    });
    check(ended, || "the idle sandbox outlived the memory pressure".into())?;
    check(eventually(Duration::from_secs(10), || sandbox.processes().is_empty()), || {
        format!("{:?}", sandbox.processes())
    })?;
    let next = session(&sandbox, "pressure", Language::Python, "print('x' in globals())");
    stdout_is(&next, "False\n")?;
    check(notice(&next).contains("memory pressure"), || notice(&next))
}

fn a_tenant_that_fills_the_cap_ends_its_own_sandboxes_first() -> Result<(), Failed> {
    let sandbox = sandbox(SessionConfig { max_live: 3, ..SessionConfig::default() });
    let as_tenant = |tenant: &str, conversation: &str| {
        let request = RunRequest {
            conversation_id: conversation.into(),
            language: "python".into(),
            code: "x = 1".into(),
            session: SessionUse::Interpreter,
            ..Default::default()
        };
        let report = sandbox.runtime.block_on(sandbox.engine.run_as(&sandlot_core::Tenant::new(tenant), request, &()));
        report.map_err(|e| e.to_string())
    };
    as_tenant("bob", "bob-1")?; // bob's is the least recently used of all
    for conversation in ["mallory-1", "mallory-2", "mallory-3", "mallory-4"] {
        as_tenant("mallory", conversation)?;
    }
    let statuses = sandbox.runtime.block_on(sandbox.engine.sessions().statuses());
    let mut live: Vec<_> = statuses.iter().map(|s| s.conversation.to_string()).collect();
    live.sort();
    check_eq(live, vec!["bob-1".to_owned(), "mallory-3".to_owned(), "mallory-4".to_owned()], "live sandboxes")
}
