//! Python runs forked from the server's templates: each is still a fresh sandbox (no file, process, environment,
//! random state or memory of an earlier run), preloaded modules start pristine in every run, the child holds
//! nothing of its template, a dead template is replaced, and with templates off Python runs as it always did.
//! The jail's other tests run their Python through the bare template too (see `common::Sandbox::in_root`).

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Sandbox, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{Language, Termination};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "templates",
        vec![
            ("a_forked_run_is_a_fresh_sandbox", a_forked_run_is_a_fresh_sandbox),
            (
                "a_run_finds_nothing_of_an_earlier_run_in_its_memory",
                a_run_finds_nothing_of_an_earlier_run_in_its_memory,
            ),
            ("preloaded_modules_start_pristine_in_every_run", preloaded_modules_start_pristine_in_every_run),
            ("a_forked_run_holds_nothing_of_its_template", a_forked_run_holds_nothing_of_its_template),
            ("a_forked_run_is_confined_as_an_execd_one", a_forked_run_is_confined_as_an_execd_one),
            ("python_behaves_as_python_file_does", python_behaves_as_python_file_does),
            ("a_dead_template_is_replaced", a_dead_template_is_replaced),
            ("a_program_on_its_status_pipe_ends_only_its_own_run", a_program_on_its_status_pipe_ends_only_its_own_run),
            (
                "with_templates_off_python_starts_its_own_interpreter",
                with_templates_off_python_starts_its_own_interpreter,
            ),
        ],
    )
}

/// Code that says whether it runs in a child of a template: its parent, the template, is outside its pid namespace
/// (an exec'd program's parent is pid 1).
const FORKED: &str = "import os as _os\nprint('forked' if _os.getppid() == 0 else 'execd')";

fn run_ok(sandbox: &Sandbox, conversation: &str, code: &str) -> Result<String, Failed> {
    let report = sandbox.run(conversation, Language::Python, code);
    check(report.outcome.success(), || describe(&report))?;
    Ok(report.outcome.stdout)
}

fn a_forked_run_is_a_fresh_sandbox() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let first = format!(
        "{FORKED}
import os, random, subprocess
os.environ['LEFT_BEHIND'] = '1'
open('/tmp/left-behind', 'w').write('x')
subprocess.Popen(['sleep', '30'], start_new_session=True)
print(random.getrandbits(64))"
    );
    let later = format!(
        "{FORKED}
import os, random
print(os.path.exists('/tmp/left-behind'), 'LEFT_BEHIND' in os.environ)
print(sorted(p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{{p}}/cmdline').read().startswith('sleep')))
print(random.getrandbits(64))"
    );
    let out = run_ok(&sandbox, "fresh", &first)?;
    let mut lines = out.lines();
    check_eq(lines.next(), Some("forked"), "the first run is forked")?;
    let first_random = lines.next().unwrap_or_default().to_owned();
    for conversation in ["fresh", "fresh-other"] {
        let out = run_ok(&sandbox, conversation, &later)?;
        let lines: Vec<&str> = out.lines().collect();
        check_eq(lines.first().copied(), Some("forked"), "the later run is forked")?;
        check_eq(lines.get(1).copied(), Some("False False"), "no file or environment of the earlier run")?;
        check_eq(lines.get(2).copied(), Some("[]"), "no process of the earlier run")?;
        check(lines.get(3).is_some_and(|random| *random != first_random), || "the same random state".to_owned())?;
    }
    Ok(())
}

fn a_run_finds_nothing_of_an_earlier_run_in_its_memory() -> Result<(), Failed> {
    // The template never holds a run's particulars (they reach only the child), so a later run, which starts as a
    // copy of the template's memory, cannot find an earlier run's environment or code in its own.
    let sandbox = Sandbox::new(|_| {});
    let secret = format!("tok{}", "5eb1a7ce0ffee0ddba11c0c0a5eed00d0"); // "tok" and 33 hex digits
    let mut env = BTreeMap::new();
    env.insert("THE_SECRET".to_owned(), secret.clone());
    let holder = format!("{FORKED}\nkept = '{secret}'\nimport os\nprint(os.environ['THE_SECRET'] == kept)");
    let report = sandbox.run_with("memory-a", Language::Python, &holder, Vec::new(), env);
    check_eq(report.outcome.stdout.as_str(), "forked\nTrue\n", &describe(&report))?;
    // The scanner's pattern does not match itself; it reads every readable private mapping of its own memory.
    let scanner = format!(
        r#"{FORKED}
import re
pattern = re.compile(rb"tok[0-9a-f]{{33}}")
found = set()
with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:
    for line in maps:
        fields = line.split()
        if 'r' not in fields[1] or (len(fields) > 5 and fields[5].startswith('[v')):
            continue
        start, end = (int(x, 16) for x in fields[0].split('-'))
        try:
            mem.seek(start)
            found.update(m.decode() for m in pattern.findall(mem.read(end - start)))
        except OSError:
            pass
print(sorted(found))"#
    );
    let out = run_ok(&sandbox, "memory-b", &scanner)?;
    check_eq(out.as_str(), "forked\n[]\n", "the later run found the earlier run's secret")
}

fn preloaded_modules_start_pristine_in_every_run() -> Result<(), Failed> {
    let sandbox = Sandbox::with_config(|config| config.python_preload = Some(vec!["decimal".into()]), |_| {});
    let change = format!(
        "{FORKED}
import sys
print('decimal' in sys.modules)
import decimal
decimal.getcontext().prec = 5
decimal.LEFT_BEHIND = True
print(decimal.Decimal(1) / 3)"
    );
    check_eq(run_ok(&sandbox, "pristine", &change)?.as_str(), "forked\nTrue\n0.33333\n", "the changing run")?;
    let look = format!(
        "{FORKED}
import decimal
print(decimal.getcontext().prec, hasattr(decimal, 'LEFT_BEHIND'))"
    );
    check_eq(run_ok(&sandbox, "pristine", &look)?.as_str(), "forked\n28 False\n", "a later run")?;
    // Code that names no preloaded module is forked from the bare template.
    let bare = format!("{FORKED}\nimport sys\nprint('dec' + 'imal' in sys.modules)");
    check_eq(run_ok(&sandbox, "pristine", &bare)?.as_str(), "forked\nFalse\n", "a run without the module")
}

fn a_forked_run_holds_nothing_of_its_template() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = format!(
        "{FORKED}
import os
print(sorted(os.listdir('/proc/self/fd')))
print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
print(os.getppid())"
    );
    let out = run_ok(&sandbox, "nothing", &code)?;
    // Descriptors 0-2, 3 (the write end of its own status pipe, close-on-exec: it says its end there) and the one
    // listing them; itself (pid 2: pid 1 is hidden) and no other process, no parent.
    check_eq(out.as_str(), "forked\n['0', '1', '2', '3', '4']\n[2]\n0\n", "what the run sees")
}

fn a_forked_run_is_confined_as_an_execd_one() -> Result<(), Failed> {
    let status = "import os
wanted = ('Uid', 'Gid', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp')
for line in open('/proc/self/status'):
    if line.split(':')[0] in wanted:
        print(' '.join(line.split()))
print(os.getcwd(), os.getsid(0) == os.getpid())
for path in ('/usr/planted', '/etc/planted'):
    try:
        open(path, 'w')
        print('wrote', path)
    except OSError as e:
        print(type(e).__name__)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print('unshare', libc.unshare(0x10000000), ctypes.get_errno())
print(open('/proc/self/cgroup').read().splitlines()[-1])
print(' '.join(arg for arg in open('/proc/self/cmdline').read().split(chr(0)) if arg))";
    let forked = Sandbox::new(|_| {});
    let execd = Sandbox::with_config(|config| config.python_preload = None, |_| {});
    let mut seen = Vec::new();
    for sandbox in [&forked, &execd] {
        let report = sandbox.run("confined", Language::Python, &format!("{FORKED}\n{status}"));
        check(report.outcome.success(), || describe(&report))?;
        seen.push(report.outcome.stdout);
    }
    check(seen[0].starts_with("forked\n") && seen[1].starts_with("execd\n"), || format!("{seen:?}"))?;
    check_eq(seen[0].split_once('\n').map(|(_, rest)| rest), seen[1].split_once('\n').map(|(_, rest)| rest), "same")?;
    check(seen[0].contains("CapEff: 0000000000000000") && seen[0].contains("Seccomp: 2"), || seen[0].clone())?;
    check(seen[0].contains("unshare -1 1\n"), || format!("unshare must fail with EPERM: {}", seen[0]))
}

fn python_behaves_as_python_file_does() -> Result<(), Failed> {
    // Tracebacks name the file and leave out the template's frames; sys.exit, uncaught exceptions, syntax errors,
    // atexit, threads and KeyboardInterrupt end the run as `python <file>` would.
    let forked = Sandbox::new(|_| {});
    let execd = Sandbox::with_config(|config| config.python_preload = None, |_| {});
    let cases = [
        "import sys\nprint(sys.argv, __name__, __file__)\nsys.exit(3)",
        "def f():\n    raise ValueError('no')\nf()",
        "print('a'\n",
        "import sys\nsys.exit('bye')",
        "import atexit, threading, time\natexit.register(lambda: print('atexit'))\nthreading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()",
        "raise KeyboardInterrupt",
        "import sys\nprint(sys.flags.isolated, sys.path[0], sys.stdout.line_buffering, sys.stdout.encoding)",
    ];
    for code in cases {
        let a = forked.run("behave", Language::Python, code);
        let b = execd.run("behave", Language::Python, code);
        check_eq(&a.outcome.termination, &b.outcome.termination, code)?;
        check_eq(&a.outcome.stdout, &b.outcome.stdout, code)?;
        check_eq(&a.outcome.stderr, &b.outcome.stderr, code)?;
    }
    Ok(())
}

fn a_dead_template_is_replaced() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    check_eq(run_ok(&sandbox, "replaced", FORKED)?.as_str(), "forked\n", "before")?;
    let templates = common::children_running("sandlot's Python template");
    check(!templates.is_empty(), || "no template process found".to_owned())?;
    for pid in &templates {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
    }
    // Once they are dead (a zombie's descriptors are closed): a run whose child a template forked before it died
    // cannot learn its end, so runs from here on must not use those children.
    let dead = |pid: &i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !templates.iter().all(dead) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // Runs go on while there is none (each starts its interpreter), then are forked again from the new one.
    let mut forked_again = false;
    for _ in 0..100 {
        let out = run_ok(&sandbox, "replaced", FORKED)?;
        check(out == "forked\n" || out == "execd\n", || out.clone())?;
        if out == "forked\n" && common::children_running("sandlot's Python template") != templates {
            forked_again = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    check(forked_again, || "runs were not forked from a new template".to_owned())
}

fn a_program_on_its_status_pipe_ends_only_its_own_run() -> Result<(), Failed> {
    // A forked run's program holds the pipe on which its process says its end (descriptor 3). Words other than an
    // end are ignored; a false end ends its own run early, with the code it chose, and nothing of it is left.
    let sandbox = Sandbox::new(|_| {});
    let noise = "import os\nos.write(3, b'f fake failure\\nnonsense\\np 1\\nw\\nx 999\\n')\nprint('still')";
    let report = sandbox.run("status", Language::Python, noise);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
    check_eq(report.outcome.stdout.as_str(), "still\n", "the run went on")?;
    let early =
        "import os, subprocess, time\nsubprocess.Popen(['sleep', '300'])\nos.write(3, b'x 7\\n')\ntime.sleep(300)";
    let started = std::time::Instant::now();
    let report = sandbox.run("status", Language::Python, early);
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 7 }, &describe(&report))?;
    check(started.elapsed() < Duration::from_secs(60), || format!("ended after {:?}", started.elapsed()))?;
    // Killed with the run, they may take a moment to be gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !common::program_processes().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = common::program_processes();
    check(left.is_empty(), || format!("processes of the run left: {left:?}"))
}

fn with_templates_off_python_starts_its_own_interpreter() -> Result<(), Failed> {
    let sandbox = Sandbox::with_config(|config| config.python_preload = None, |_| {});
    let out = run_ok(&sandbox, "off", &format!("{FORKED}\nimport sys\nprint(sys.argv)"))?;
    check_eq(out.as_str(), "execd\n['/tmp/main.py']\n", "a run with templates off")?;
    check(common::children_running("sandlot's Python template").is_empty(), || "a template runs".to_owned())
}
