//! Live sandboxes of the native jail (`LiveBackend`): a sandbox that stays up between calls, what its processes share
//! (one `/tmp`, one loopback, background processes), signals and ends; and the attacks on what it must never share
//! with another conversation's sandbox, or leave behind once closed. See docs/security.md, "Live sandboxes".

use crate::common;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{check, check_eq};
use libtest_mimic::Failed;
use sandlot_core::{
    ConversationId, Language, Layout, Limits, LiveProcess, LiveSandbox, LiveSpec, Spawn, Termination, Workspaces,
};
use sandlot_jail::{CgroupSupport, JailBackend, JailConfig, ProcessModel};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The variable that makes the test binary an unprivileged server keeping one live sandbox; its value is the
/// conversation root (see [`unprivileged_child`]).
const UNPRIVILEGED_CHILD: &str = "SANDLOT_TEST_LIVE_UNPRIVILEGED";

/// In the test binary re-executed as the unprivileged server of `an_unprivileged_server_keeps_a_live_sandbox`...:
/// that job, then exit. Called after the zygote's check (the child's backend re-executes this binary as one).
pub fn serve_unprivileged_child_if_asked() {
    if let Some(root) = std::env::var_os(UNPRIVILEGED_CHILD) {
        unprivileged_child(root.into())
    }
}

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "live",
        vec![
            ("python_runs_and_its_output_is_read", python_runs_and_its_output_is_read),
            ("an_interpreter_keeps_its_state_between_inputs", an_interpreter_keeps_its_state_between_inputs),
            ("a_background_server_answers_a_later_spawn", a_background_server_answers_a_later_spawn),
            ("tmp_is_shared_between_spawns", tmp_is_shared_between_spawns),
            ("a_writer_to_a_closed_pipe_dies_of_sigpipe", a_writer_to_a_closed_pipe_dies_of_sigpipe),
            ("spawns_signal_and_reach_each_others_processes", spawns_signal_and_reach_each_others_processes),
            ("sigint_gives_a_keyboard_interrupt", sigint_gives_a_keyboard_interrupt),
            ("a_group_signal_reaches_the_whole_group", a_group_signal_reaches_the_whole_group),
            ("processes_and_usage_are_the_sandboxs", processes_and_usage_are_the_sandboxs),
            ("typescript_gets_node_and_esbuild", typescript_gets_node_and_esbuild),
            (
                "a_missing_program_fails_to_start_and_the_sandbox_lives_on",
                a_missing_program_fails_to_start_and_the_sandbox_lives_on,
            ),
            ("an_idle_python_costs_little_host_memory", an_idle_python_costs_little_host_memory),
            ("a_one_shot_backend_refuses_live_sandboxes", a_one_shot_backend_refuses_live_sandboxes),
            ("an_unprivileged_server_keeps_live_sandboxes", an_unprivileged_server_keeps_live_sandboxes),
            ("live_sandboxes_cannot_see_or_signal_each_other", live_sandboxes_cannot_see_or_signal_each_other),
            ("live_sandboxes_cannot_reach_each_others_loopback", live_sandboxes_cannot_reach_each_others_loopback),
            ("live_sandboxes_cannot_read_each_others_files", live_sandboxes_cannot_read_each_others_files),
            ("nothing_of_a_sandbox_outlives_close", nothing_of_a_sandbox_outlives_close),
            ("dropping_the_last_handle_ends_the_sandbox", dropping_the_last_handle_ends_the_sandbox),
            ("a_sandbox_whose_pid_1_dies_ends_and_is_released", a_sandbox_whose_pid_1_dies_ends_and_is_released),
            ("pid_1_outlives_its_processes_attacks", pid_1_outlives_its_processes_attacks),
            ("a_background_memory_bomb_is_oom_killed_alone", a_background_memory_bomb_is_oom_killed_alone),
            ("a_background_fork_bomb_hits_pids_max", a_background_fork_bomb_hits_pids_max),
            ("limits_are_raised_for_a_browser_never_lowered", limits_are_raised_for_a_browser_never_lowered),
            ("a_live_sandbox_shares_cpu_by_weight_without_a_cap", a_live_sandbox_shares_cpu_by_weight_without_a_cap),
        ],
    )
}

/// A bound on any one step that takes milliseconds when idle: far above what a loaded 2-core machine needs, far
/// below "never".
const PATIENCE: Duration = Duration::from_secs(60);

/// A native backend as a server has it (a zygote, the cached skeleton, as root), its conversations in `root`.
struct Live {
    /// Removed at the end of the test.
    _root: tempfile::TempDir,
    backend: Arc<JailBackend>,
    workspaces: Workspaces,
    runtime: tokio::runtime::Runtime,
}

impl Live {
    fn new() -> Self {
        assert!(nix::unistd::geteuid().is_root(), "the jail tests need root (run scripts/test.sh as root)");
        let root = tempfile::tempdir().expect("temp root");
        let mut config = JailConfig::new(std::env::current_exe().expect("test binary"));
        config.sandbox_uids = common::sandbox_uids();
        config.probe_versions = false;
        config.model = ProcessModel::Server { warm_inits: 0 };
        config.keep_netns = true; // as a server: live sandboxes must still never join a kept namespace
        config.skeleton_dir = Some(root.path().join(sandlot_jail::SKELETON_DIR_NAME));
        config.data_root = Some(root.path().to_owned());
        config.python_preload = Some(vec![]); // Python `-c` processes forked from the template, as a server's are
        let backend = Arc::new(JailBackend::new(config).expect("the native backend"));
        assert!(backend.wait_for_templates(PATIENCE), "the Python template did not start");
        let workspaces = Workspaces::new(root.path());
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
        Self { _root: root, backend, workspaces, runtime }
    }

    /// Runs `future` to its end, failing after [`PATIENCE`].
    fn block<T>(&self, future: impl Future<Output = T>) -> T {
        self.runtime.block_on(async { tokio::time::timeout(PATIENCE, future).await.expect("took too long") })
    }

    /// A live sandbox for `conversation` with default limits.
    fn start(&self, conversation: &str) -> Arc<dyn LiveSandbox> {
        self.start_with(conversation, Limits::default())
    }

    fn start_with(&self, conversation: &str, limits: Limits) -> Arc<dyn LiveSandbox> {
        let id = ConversationId::parse(conversation).expect("id");
        let workspace = self.workspaces.prepare(&id).expect("workspace");
        let spec = LiveSpec {
            sandbox_id: format!("live-{conversation}"),
            conversation: id,
            limits,
            workspace,
            layout: Layout::Data,
            mounts: vec![],
            network: None,
        };
        let live = sandlot_core::Backend::live(&*self.backend).expect("the native backend keeps live sandboxes");
        self.block(live.start(spec)).expect("a live sandbox")
    }

    fn spawn(&self, sandbox: &Arc<dyn LiveSandbox>, language: Language, args: &[&str]) -> LiveProcess {
        let spawn = Spawn { language, args: args.iter().map(|a| a.to_string()).collect(), env: BTreeMap::new() };
        self.block(sandbox.spawn(spawn)).expect("spawn")
    }

    /// Runs `args` to its end with no input; its end, stdout and stderr.
    fn run(&self, sandbox: &Arc<dyn LiveSandbox>, language: Language, args: &[&str]) -> Ran {
        let process = self.spawn(sandbox, language, args);
        self.block(finish(process))
    }

    fn bash(&self, sandbox: &Arc<dyn LiveSandbox>, script: &str) -> Ran {
        self.run(sandbox, Language::Bash, &["-c", script])
    }

    fn close(&self, sandbox: &Arc<dyn LiveSandbox>) {
        self.block(sandbox.close());
    }
}

/// How a process ended and what it wrote.
#[derive(Debug)]
struct Ran {
    termination: Termination,
    stdout: String,
    stderr: String,
}

/// Closes the process's input, waits for its end and reads its output: to its end, or what came until a few
/// seconds after the process ended (something it left in the background may hold its output open).
async fn finish(process: LiveProcess) -> Ran {
    let LiveProcess { stdin, mut stdout, mut stderr, handle } = process;
    drop(stdin);
    let collect = |buffer: Arc<Mutex<Vec<u8>>>, mut stream: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>| {
        tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = stream.read(&mut chunk).await {
                buffer.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        })
    };
    let (out, err) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let readers = [collect(out.clone(), std::mem::replace(&mut stdout, Box::pin(tokio::io::empty()))), {
        collect(err.clone(), std::mem::replace(&mut stderr, Box::pin(tokio::io::empty())))
    }];
    let termination = handle.wait().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), futures_join(readers)).await;
    let text = |buffer: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&buffer.lock().unwrap()).into_owned();
    Ran { termination, stdout: text(&out), stderr: text(&err) }
}

async fn futures_join(readers: [tokio::task::JoinHandle<()>; 2]) {
    for reader in readers {
        let _ = reader.await;
    }
}

fn exited(code: i32) -> Termination {
    Termination::Exited { code }
}

/// Polls `condition` every 50 ms until it holds, for up to [`PATIENCE`].
fn eventually(what: &str, mut condition: impl FnMut() -> bool) -> Result<(), Failed> {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        check(Instant::now() < deadline, || format!("{what}: not within {PATIENCE:?}"))?;
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Host pids whose command line contains `marker`.
fn host_pids_running(marker: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if pid != std::process::id() as i32 && String::from_utf8_lossy(&cmdline).contains(marker) {
            pids.push(pid);
        }
    }
    pids
}

/// Writes `line` to a process's stdin and reads one line of its stdout.
async fn ask(
    stdin: &mut std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    stdout: &mut BufReader<std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>>,
    line: &str,
) -> String {
    stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let mut answer = String::new();
    stdout.read_line(&mut answer).await.unwrap();
    answer
}

/// Python that evaluates each line of its input and prints the result, keeping its variables.
const REPL: &str = "import sys\nscope = {}\nfor line in sys.stdin:\n    try:\n        print(eval(line, scope), flush=True)\n    except SyntaxError:\n        exec(line, scope)\n        print('ok', flush=True)\n";

fn python_runs_and_its_output_is_read() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("py-output");
    let spawn = Spawn {
        language: Language::Python,
        args: vec![
            "-c".into(),
            "import os, sys; print(6 * 7, os.getcwd(), os.environ['GREETING']); print('err', file=sys.stderr)".into(),
        ],
        env: BTreeMap::from([("GREETING".into(), "hello".into())]),
    };
    let process = live.block(sandbox.spawn(spawn))?;
    let ran = live.block(finish(process));
    check_eq(ran.termination, exited(0), "termination")?;
    check_eq(ran.stdout.as_str(), "42 /data hello\n", "stdout")?;
    check_eq(ran.stderr.as_str(), "err\n", "stderr")?;
    live.close(&sandbox);
    Ok(())
}

fn an_interpreter_keeps_its_state_between_inputs() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("repl");
    let LiveProcess { mut stdin, stdout, handle, .. } = live.spawn(&sandbox, Language::Python, &["-c", REPL]);
    let mut stdout = BufReader::new(stdout);
    let answers = live.block(async {
        let a = ask(&mut stdin, &mut stdout, "x = 20").await;
        let b = ask(&mut stdin, &mut stdout, "x * 2 + 2").await;
        (a, b)
    });
    check_eq(answers, ("ok\n".to_owned(), "42\n".to_owned()), "answers")?;
    drop(stdin);
    check_eq(live.block(handle.wait()), exited(0), "end at end of input")?;
    live.close(&sandbox);
    Ok(())
}

fn a_background_server_answers_a_later_spawn() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("background");
    let started = live.bash(&sandbox, "python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & echo started");
    check_eq((started.termination, started.stdout.as_str()), (exited(0), "started\n"), "the starter")?;
    let client = "import time, urllib.request\nfor _ in range(600):\n    try:\n        print(urllib.request.urlopen('http://127.0.0.1:8000/').status)\n        break\n    except OSError:\n        time.sleep(0.1)\n";
    let ran = live.run(&sandbox, Language::Python, &["-c", client]);
    check_eq((ran.termination, ran.stdout.as_str()), (exited(0), "200\n"), &format!("the client: {}", ran.stderr))?;
    live.close(&sandbox);
    Ok(())
}

/// A process starts with every signal at its default action: a writer to a closed pipe dies of SIGPIPE, as on any
/// shell (sandlot's own processes, Rust programs, ignore it; `execve` would pass that on).
fn a_writer_to_a_closed_pipe_dies_of_sigpipe() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("sigpipe");
    let ran = live.bash(
        &sandbox,
        "yes | head -1; echo ${PIPESTATUS[@]}; while :; do echo x; done | head -1; grep SigIgn /proc/self/status",
    );
    check_eq(ran.stdout.as_str(), "y\n141 0\nx\nSigIgn:\t0000000000000000\n", &ran.stderr)?;
    live.close(&sandbox);
    Ok(())
}

fn tmp_is_shared_between_spawns() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("tmp");
    let wrote = live.bash(&sandbox, "echo kept > /tmp/note");
    check_eq(wrote.termination, exited(0), "write")?;
    let read = live.run(&sandbox, Language::Python, &["-c", "print(open('/tmp/note').read(), end='')"]);
    check_eq((read.termination, read.stdout.as_str()), (exited(0), "kept\n"), "read")?;
    live.close(&sandbox);
    Ok(())
}

/// Everything inside a sandbox is shared between its processes, whichever spawn started them: a later one signals
/// what an earlier one left running, and reaches its abstract unix socket (Landlock's scopes, which fence a run's
/// program off from what is outside its domain, are one domain for the whole sandbox).
fn spawns_signal_and_reach_each_others_processes() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("shared");
    let server = "import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0sandlot-live-test')\ns.listen()\nopen('/tmp/listening', 'w').close()\nc, _ = s.accept()\nc.sendall(b'hello')\nimport time\ntime.sleep(600)";
    let started = live
        .bash(&sandbox, &format!("python3 -c \"{server}\" >/dev/null 2>&1 & echo $! > /tmp/server.pid; echo started"));
    check_eq(started.stdout.as_str(), "started\n", "the server")?;
    let client = "import os, socket, time\nwhile not os.path.exists('/tmp/listening'): time.sleep(0.05)\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0sandlot-live-test')\nprint(s.recv(5).decode())";
    let reached = live.run(&sandbox, Language::Python, &["-c", client]);
    check_eq((reached.termination, reached.stdout.as_str()), (exited(0), "hello\n"), &reached.stderr)?;
    let killed = live.bash(&sandbox, "kill -TERM $(cat /tmp/server.pid) && echo killed");
    check_eq((killed.termination, killed.stdout.as_str()), (exited(0), "killed\n"), &killed.stderr)?;
    live.close(&sandbox);
    Ok(())
}

fn sigint_gives_a_keyboard_interrupt() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("sigint");
    let script = "import time\nprint('ready', flush=True)\ntime.sleep(600)";
    let LiveProcess { stdout, stderr, handle, .. } = live.spawn(&sandbox, Language::Python, &["-c", script]);
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    live.block(stdout.read_line(&mut line))?;
    check_eq(line.as_str(), "ready\n", "ready")?;
    live.block(handle.signal(libc::SIGINT, false))?;
    let termination = live.block(handle.wait());
    let mut stderr_text = String::new();
    live.block(BufReader::new(stderr).read_to_string(&mut stderr_text))?;
    check(stderr_text.contains("KeyboardInterrupt"), || format!("no KeyboardInterrupt: {stderr_text}"))?;
    // Python ends an uncaught KeyboardInterrupt by killing itself with SIGINT.
    check_eq(termination.clone(), Termination::Signaled { signal: libc::SIGINT }, "termination")?;
    check_eq(live.block(handle.wait()), termination, "a second wait")?;
    live.block(handle.signal(libc::SIGINT, false))?; // an ended process: no error
    live.close(&sandbox);
    Ok(())
}

fn a_group_signal_reaches_the_whole_group() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("group");
    let marker = "group-signal-marker";
    // The marker is an argument of each sleeper, but not in the shell's own command line (built from `$M`).
    let sleeper = "python3 -c 'import time; time.sleep(600)' \"$M-marker\"";
    let script = format!("M=group-signal; {sleeper} & {sleeper} & echo ready; wait");
    let LiveProcess { stdout, handle, .. } = live.spawn(&sandbox, Language::Bash, &["-c", &script]);
    let mut line = String::new();
    live.block(BufReader::new(stdout).read_line(&mut line))?;
    check_eq(line.as_str(), "ready\n", "ready")?;
    eventually("both sleeps started", || host_pids_running(marker).len() == 2)?;
    live.block(handle.signal(libc::SIGTERM, true))?;
    check_eq(live.block(handle.wait()), Termination::Signaled { signal: libc::SIGTERM }, "the shell")?;
    eventually("the group's sleeps gone", || host_pids_running(marker).is_empty())?;
    live.close(&sandbox);
    Ok(())
}

fn processes_and_usage_are_the_sandboxs() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("usage");
    let LiveProcess { mut stdin, stdout, handle, .. } = live.spawn(&sandbox, Language::Python, &["-c", REPL]);
    let mut stdout = BufReader::new(stdout);
    check_eq(live.block(ask(&mut stdin, &mut stdout, "1 + 1")), "2\n".to_owned(), "the interpreter is up")?;
    let processes = live.block(sandbox.processes());
    check_eq(processes.len(), 1, &format!("one process: {processes:?}"))?;
    check_eq(processes[0].pid, handle.pid(), "its pid in the sandbox")?;
    check(processes[0].command.contains("python3 -c import sys"), || format!("{processes:?}"))?;
    check(processes[0].memory_bytes > 1024 * 1024, || format!("{processes:?}"))?;
    let usage = live.block(sandbox.usage());
    let limits = Limits::default();
    check_eq((usage.memory_limit_bytes, usage.pids_limit), (limits.memory_mb << 20, limits.pids), "limits")?;
    check(usage.memory_bytes > 0 && usage.pids >= 1 && usage.oom_kills == 0, || format!("{usage:?}"))?;
    // CPU: a busy second counts (a bound well below what one second of work costs on any machine).
    let busy = live.run(
        &sandbox,
        Language::Python,
        &["-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 1: pass"],
    );
    check_eq(busy.termination, exited(0), "busy")?;
    let usage = live.block(sandbox.usage());
    check(usage.cpu_seconds >= 0.9, || format!("one busy second not counted: {usage:?}"))?;
    drop(stdin);
    check_eq(live.block(handle.wait()), exited(0), "the reader")?;
    live.close(&sandbox);
    check_eq(live.block(sandbox.usage()), Default::default(), "a closed sandbox uses nothing")?;
    Ok(())
}

fn typescript_gets_node_and_esbuild() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("typescript");
    let script = "const esbuild = require(process.env.SANDLOT_ESBUILD);\n\
        const { code } = esbuild.transformSync('const n: number = 42; console.log(n)', { loader: 'ts' });\n\
        eval(code); console.log(process.release.name)";
    let ran = live.run(&sandbox, Language::TypeScript, &["-e", script]);
    check_eq((ran.termination, ran.stdout.as_str()), (exited(0), "42\nnode\n"), &ran.stderr)?;
    live.close(&sandbox);
    Ok(())
}

fn a_missing_program_fails_to_start_and_the_sandbox_lives_on() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("missing");
    let spawn = Spawn { language: Language::Python, args: vec![], env: BTreeMap::from([("A\0B".into(), "x".into())]) };
    let error = live.block(sandbox.spawn(spawn)).err().map(|e| e.to_string()).unwrap_or_default();
    check(error.contains("NUL"), || format!("a bad environment was not refused: {error:?}"))?;
    check(sandbox.is_alive(), || "the sandbox died".into())?;
    let ran = live.bash(&sandbox, "echo still here");
    check_eq(ran.stdout.as_str(), "still here\n", "after the failure")?;
    live.close(&sandbox);
    Ok(())
}

/// The host memory an idle live sandbox costs with a Python interpreter waiting on stdin: its cgroup's charge (the
/// interpreter, `/tmp`) plus what sandlot's own processes of the sandbox (the init and pid 1, which share one address
/// space) add outside it, as their proportional set size. The goal of issue 31 is under 16 MiB.
fn an_idle_python_costs_little_host_memory() -> Result<(), Failed> {
    let live = Live::new();
    let started = Instant::now();
    let sandbox = live.start("idle");
    let start = started.elapsed();
    let spawned = Instant::now();
    let LiveProcess { stdin, handle, .. } =
        live.spawn(&sandbox, Language::Python, &["-c", "import sys; sys.stdin.read()"]);
    let spawn = spawned.elapsed();
    std::thread::sleep(Duration::from_secs(1)); // the interpreter's start-up done
    let usage = live.block(sandbox.usage());
    let own: Vec<i32> =
        common::sandbox_processes().into_iter().filter(|pid| !common::program_processes().contains(pid)).collect();
    check_eq(own.len(), 2, "the init and pid 1")?;
    let pss = |pid: i32| -> u64 {
        let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        rollup
            .lines()
            .find_map(|l| l.strip_prefix("Pss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    let rss = |pid: i32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    // The init and pid 1 share one address space: counted once.
    let (own_pss, own_rss) = (pss(own[0]), rss(own[0]));
    let total = usage.memory_bytes + own_pss;
    eprintln!(
        "idle live sandbox with python3 waiting: cgroup {} KiB + init/pid 1 PSS {} KiB (RSS {} KiB) = {} KiB",
        usage.memory_bytes / 1024,
        own_pss / 1024,
        own_rss / 1024,
        total / 1024
    );
    check(total < 16 * 1024 * 1024, || format!("an idle sandbox costs {} KiB", total / 1024))?;
    drop(stdin);
    live.block(handle.wait());
    let closed = Instant::now();
    live.close(&sandbox);
    eprintln!("start {start:?}, spawn (to the exec) {spawn:?}, close {:?}", closed.elapsed());
    Ok(())
}

fn a_one_shot_backend_refuses_live_sandboxes() -> Result<(), Failed> {
    let live = Live::new();
    let mut config = JailConfig::new(std::env::current_exe()?);
    config.sandbox_uids = common::sandbox_uids();
    config.probe_versions = false;
    config.model = ProcessModel::OneShot;
    let one_shot = JailBackend::new(config)?;
    let id = ConversationId::parse("one-shot")?;
    let spec = LiveSpec {
        sandbox_id: "live-one-shot".into(),
        conversation: id.clone(),
        limits: Limits::default(),
        workspace: live.workspaces.prepare(&id)?,
        layout: Layout::Data,
        mounts: vec![],
        network: None,
    };
    let started = live.block(sandlot_core::Backend::live(&one_shot).ok_or("no live backend")?.start(spec));
    let error = started.err().map(|e| e.to_string()).unwrap_or_default();
    check(error.contains("one-shot backend (sandlot run) keeps no live sandbox"), || format!("{error:?}"))
}

/// A server that is not root (no cgroups, no leased uid: its own uid, user namespaces only) keeps live sandboxes
/// too: a child of the test binary running as a plain uid starts one, whose background server answers a later
/// spawn over its own loopback, and closes it; nothing of that uid is left.
fn an_unprivileged_server_keeps_live_sandboxes() -> Result<(), Failed> {
    use std::os::unix::process::CommandExt;
    let uid = common::unprivileged_uid();
    let root = tempfile::tempdir()?;
    std::fs::set_permissions(root.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let files = root.path().join("unprivileged/files");
    std::fs::create_dir_all(&files)?;
    for dir in [root.path().join("unprivileged"), files] {
        std::os::unix::fs::chown(dir, Some(uid), Some(uid))?;
    }
    let output = std::process::Command::new(std::env::current_exe()?)
        .env(UNPRIVILEGED_CHILD, root.path())
        .uid(uid)
        .gid(uid)
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let answer = stdout.lines().last().unwrap_or_default();
    check_eq(
        answer,
        "uid 1000, served 200, listed true, counted true, alive after close false",
        &format!("the child ({}): {stderr}", output.status),
    )?;
    eventually("no process of the child's uid", || common::processes_of_uid(uid).is_empty())
}

/// In the child, as a plain uid: a server's backend over `root` keeps a live sandbox; prints what its processes
/// said (one line) and exits.
fn unprivileged_child(root: std::path::PathBuf) -> ! {
    let answer = unprivileged_live_sandbox(root).unwrap_or_else(|e| format!("failed: {e}"));
    println!("{answer}");
    std::process::exit(0)
}

fn unprivileged_live_sandbox(root: std::path::PathBuf) -> Result<String, Box<dyn std::error::Error>> {
    let mut config = JailConfig::new(std::env::current_exe()?);
    config.probe_versions = false;
    config.model = ProcessModel::Server { warm_inits: 0 };
    config.data_root = Some(root.clone());
    let backend = JailBackend::new(config)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let spec = LiveSpec {
            sandbox_id: "live-unprivileged".into(),
            conversation: ConversationId::parse("unprivileged")?,
            limits: Limits::default(),
            workspace: root.join("unprivileged/files"),
            layout: Layout::Data,
            mounts: vec![],
            network: None,
        };
        let live = sandlot_core::Backend::live(&backend).ok_or("no live sandboxes")?;
        let sandbox = tokio::time::timeout(PATIENCE, live.start(spec)).await??;
        let spawn = |language, args: &[&str]| Spawn {
            language,
            args: args.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::new(),
        };
        let script = "python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & id -u";
        let first = finish(sandbox.spawn(spawn(Language::Bash, &["-c", script])).await?).await;
        let client = "import time, urllib.request\nfor _ in range(600):\n    try:\n        print(urllib.request.urlopen('http://127.0.0.1:8000/').status)\n        break\n    except OSError:\n        time.sleep(0.1)\n";
        let second = finish(sandbox.spawn(spawn(Language::Python, &["-c", client])).await?).await;
        // Without a cgroup: the processes from the pid namespace, their resident memory against the limit.
        let listed = sandbox.processes().await.iter().any(|p| p.command.contains("http.server"));
        let usage = sandbox.usage().await;
        let counted = usage.pids >= 1 && usage.memory_bytes > 0 && usage.memory_limit_bytes == 256 << 20;
        tokio::time::timeout(PATIENCE, sandbox.close()).await?;
        Ok(format!(
            "uid {}, served {}, listed {listed}, counted {counted}, alive after close {}",
            first.stdout.trim(),
            second.stdout.trim(),
            sandbox.is_alive()
        ))
    })
}

fn live_sandboxes_cannot_see_or_signal_each_other() -> Result<(), Failed> {
    let live = Live::new();
    let (a, b) = (live.start("victim"), live.start("attacker"));
    // The victim's target is its fourth process, so that the attacker's shell (its first, pid 2) is not it.
    for _ in 0..3 {
        live.bash(&a, "true");
    }
    let marker = "victim-marker-7f3a";
    let victim = live.spawn(&a, Language::Python, &["-c", &format!("import time; time.sleep(600)  # {marker}")]);
    // Pid 1 reports a start once the exec began, which may be before the new image shows its command line.
    eventually("the victim on the host", || host_pids_running(marker).len() == 1)?;
    let host_pid = host_pids_running(marker)[0];
    let sandbox_pid = victim.handle.pid();
    let script = format!(
        "kill -9 {sandbox_pid} {host_pid}; echo killed=$?; \
         grep -l '[{first}]{rest}' /proc/[0-9]*/cmdline 2>/dev/null | wc -l; ls /proc | grep -c '^[0-9]'",
        first = &marker[..1],
        rest = &marker[1..],
    );
    let ran = live.bash(&b, &script);
    check_eq(ran.termination, exited(0), &ran.stderr)?;
    let lines: Vec<&str> = ran.stdout.lines().collect();
    check_eq(lines.first().copied(), Some("killed=1"), &format!("the kill: {}{}", ran.stdout, ran.stderr))?;
    check_eq(lines.get(1).copied(), Some("0"), "the victim's command line, seen from the attacker")?;
    // The attacker's /proc: its shell, and the ls and grep of the pipeline (pid 1 is hidden).
    check(lines.get(2).and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| n <= 3), || ran.stdout.clone())?;
    check(a.is_alive(), || "the victim's sandbox died".into())?;
    check(std::path::Path::new(&format!("/proc/{host_pid}")).exists(), || "the victim was killed".into())?;
    let processes = live.block(a.processes());
    check(processes.iter().any(|p| p.pid == sandbox_pid), || format!("the victim is gone: {processes:?}"))?;
    live.close(&a);
    live.close(&b);
    check_eq(live.block(victim.handle.wait()), Termination::Signaled { signal: libc::SIGKILL }, "killed by close")?;
    Ok(())
}

fn live_sandboxes_cannot_reach_each_others_loopback() -> Result<(), Failed> {
    let live = Live::new();
    let (a, b) = (live.start("listener"), live.start("prober"));
    let started = live.bash(&a, "python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & echo started");
    check_eq(started.termination, exited(0), "the listener")?;
    let probe = "import socket, sys, time\nhost = sys.argv[1]\nfor _ in range(600):\n    try:\n        socket.create_connection((host, 8000), timeout=2).close(); print('connected'); break\n    except OSError as e:\n        err = e\n        if sys.argv[2] == 'once': print('refused', type(e).__name__); break\n        time.sleep(0.1)\n";
    let own = live.run(&a, Language::Python, &["-c", probe, "127.0.0.1", "retry"]);
    check_eq(own.stdout.as_str(), "connected\n", "its own loopback")?;
    let other = live.run(&b, Language::Python, &["-c", probe, "127.0.0.1", "once"]);
    check_eq(other.stdout.as_str(), "refused ConnectionRefusedError\n", "the other's loopback")?;
    // And the other may listen on the same port: it is another loopback.
    let same_port = live
        .bash(&b, "python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 8000)); print(\"bound\")'");
    check_eq(same_port.stdout.as_str(), "bound\n", "the same port elsewhere")?;
    // Three network namespaces, the host's and one per sandbox; and a host uid per sandbox.
    let waiting_b = live.spawn(&b, Language::Python, &["-c", "import sys; sys.stdin.read()  # prober-netns"]);
    eventually("the prober on the host", || host_pids_running("prober-netns").len() == 1)?;
    let (pid_a, pid_b) = (host_pids_running("http.server")[0], host_pids_running("prober-netns")[0]);
    let netns = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap().display().to_string();
    let (in_a, in_b, host) = (netns(pid_a), netns(pid_b), netns(std::process::id() as i32));
    check(in_a != in_b && in_a != host && in_b != host, || format!("{in_a} {in_b} {host}"))?;
    let uid = |pid: i32| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{pid}")).unwrap().uid()
    };
    check(uid(pid_a) != uid(pid_b), || format!("both sandboxes run as host uid {}", uid(pid_a)))?;
    drop(waiting_b);
    live.close(&a);
    live.close(&b);
    Ok(())
}

fn live_sandboxes_cannot_read_each_others_files() -> Result<(), Failed> {
    let live = Live::new();
    let (a, b) = (live.start("owner"), live.start("snoop"));
    let secret = "SECRET-5d21c9";
    let wrote = live.bash(
        &a,
        &format!(
            "echo {secret} > /data/secret.txt; echo {secret} > /tmp/secret.txt; echo {secret} > /dev/shm/secret.txt"
        ),
    );
    check_eq(wrote.termination, exited(0), &wrote.stderr)?;
    let owner_data = live.workspaces.files_dir(&ConversationId::parse("owner")?);
    let script = format!(
        "cat /data/secret.txt /tmp/secret.txt /dev/shm/secret.txt {owner}/secret.txt /proc/*/root/tmp/secret.txt 2>&1; \
         grep -rs {secret} /data /tmp /dev/shm /run /var /home /root /srv 2>/dev/null; echo done",
        owner = owner_data.display()
    );
    let ran = live.bash(&b, &script);
    check(ran.stdout.ends_with("done\n"), || format!("the snoop did not finish: {}{}", ran.stdout, ran.stderr))?;
    check(!ran.stdout.contains(secret) && !ran.stderr.contains(secret), || format!("leaked: {}", ran.stdout))?;
    // The owner still reads its own.
    let own = live.bash(&a, "cat /data/secret.txt /tmp/secret.txt");
    check_eq(own.stdout, format!("{secret}\n{secret}\n"), "the owner's files")?;
    live.close(&a);
    live.close(&b);
    Ok(())
}

/// What a sandbox holds on the host, found through one of its processes: namespaces and cgroup directories.
fn namespaces_of(pid: i32) -> Vec<String> {
    ["mnt", "net", "pid_for_children", "ipc", "uts"]
        .iter()
        .filter_map(|ns| std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).ok())
        .map(|link| link.display().to_string())
        .collect()
}

/// Host pids of processes in any of `namespaces`, or holding one open.
fn holders_of(namespaces: &[String]) -> Vec<i32> {
    let mut holders = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let links = ["ns/mnt", "ns/net", "ns/pid", "ns/ipc", "ns/uts"]
            .iter()
            .map(|ns| entry.path().join(ns))
            .chain(std::fs::read_dir(entry.path().join("fd")).into_iter().flatten().flatten().map(|fd| fd.path()));
        if links.filter_map(|link| std::fs::read_link(link).ok()).any(|l| namespaces.contains(&l.display().to_string()))
        {
            holders.push(pid);
        }
    }
    holders
}

/// The cgroup directories (v1 or v2) a host process is in, under sandlot's parent.
fn sandlot_cgroups_of(pid: i32) -> Vec<std::path::PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            if !path.starts_with("/sandlot/") {
                return None;
            }
            let base = match controllers {
                "" => "/sys/fs/cgroup".to_owned(),
                list => format!("/sys/fs/cgroup/{}", list.split(',').find(|c| ["memory", "pids", "cpu"].contains(c))?),
            };
            Some(std::path::PathBuf::from(format!("{base}{path}")))
        })
        .collect()
}

fn nothing_of_a_sandbox_outlives_close() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("escape");
    let marker = "escape-marker-91b";
    let script = format!(
        "(setsid nohup python3 -c 'import time; time.sleep(900)' {marker} >/dev/null 2>&1 &); \
         (nohup bash -c 'trap \"\" HUP TERM INT; while :; do sleep 1; done # {marker}' >/dev/null 2>&1 &); \
         setsid -f python3 -c 'import os, time\nif os.fork(): os._exit(0)\nos.setsid()\ntime.sleep(900)  # {marker}' >/dev/null 2>&1; \
         echo started"
    );
    let ran = live.bash(&sandbox, &script);
    check_eq((ran.termination, ran.stdout.as_str()), (exited(0), "started\n"), &ran.stderr)?;
    // Pages of /tmp and /dev/shm, charged to the sandbox's memory cgroup until their tmpfs are gone.
    let filled =
        live.bash(&sandbox, "head -c 48M /dev/zero > /tmp/fill && head -c 8M /dev/zero > /dev/shm/fill && echo filled");
    check_eq(filled.stdout.as_str(), "filled\n", &filled.stderr)?;
    eventually("the escapees running", || host_pids_running(marker).len() >= 3)?;
    let escapee = host_pids_running(marker)[0];
    let namespaces = namespaces_of(escapee);
    check_eq(namespaces.len(), 5, "the escapee's namespaces")?;
    let cgroups = sandlot_cgroups_of(escapee);
    check(!cgroups.is_empty(), || "the escapee is in no cgroup of sandlot".into())?;
    check(!common::sandbox_processes().is_empty(), || "no process of the sandbox's uid".into())?;
    live.close(&sandbox);
    check(!sandbox.is_alive(), || "alive after close".into())?;
    check_eq(common::sandbox_processes(), vec![], "processes of the sandbox's uids after close")?;
    check_eq(host_pids_running(marker), vec![], "the escapees after close")?;
    check_eq(holders_of(&namespaces), vec![], "processes in or holding the sandbox's namespaces")?;
    for dir in &cgroups {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        check_eq(procs.as_str(), "", &format!("{} after close", dir.display()))?;
    }
    // The slot is free: its lock (a flock of its first directory) can be taken.
    let first = std::fs::File::open(&cgroups[0])?;
    // SAFETY: flock on a descriptor this test owns.
    let locked = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&first), libc::LOCK_EX | libc::LOCK_NB) };
    check_eq(locked, 0, "the slot's lock is free")?;
    drop(first);
    // And it holds no page of the sandbox's tmpfs: the next sandbox or run that takes it starts from nothing.
    let free = CgroupSupport::detect(false).shmem_of_free_slots();
    let slot = free.iter().find(|(dir, _)| cgroups.contains(dir)).ok_or("the sandbox's slot is not free")?;
    check(slot.1 < 4 << 20, || {
        format!("the free slot {} still holds {} bytes of tmpfs pages", slot.0.display(), slot.1)
    })?;
    // Closed is closed: again at once, and nothing starts.
    let again = Instant::now();
    live.close(&sandbox);
    check(again.elapsed() < Duration::from_secs(1), || "a second close waited".into())?;
    let spawn = Spawn { language: Language::Bash, args: vec!["-c".into(), "true".into()], env: BTreeMap::new() };
    check(live.block(sandbox.spawn(spawn)).is_err(), || "a closed sandbox started a process".into())?;
    Ok(())
}

fn dropping_the_last_handle_ends_the_sandbox() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("dropped");
    let marker = "dropped-marker-c4";
    let sleeper = format!("python3 -c 'import time; time.sleep(900)' {marker}");
    let ran = live.bash(&sandbox, &format!("setsid nohup {sleeper} >/dev/null 2>&1 & echo started"));
    check_eq(ran.stdout.as_str(), "started\n", "started")?;
    eventually("the sleeper running", || host_pids_running(marker).len() == 1)?;
    drop(sandbox);
    eventually("every process of the sandbox gone", || common::sandbox_processes().is_empty())
}

/// A sandbox also ends by itself, when its pid 1 dies (here killed from the host): it says so, its processes ended
/// with it, and what it held is released without a `close`.
fn a_sandbox_whose_pid_1_dies_ends_and_is_released() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("pid1-dies");
    let LiveProcess { stdin: _stdin, handle, .. } =
        live.spawn(&sandbox, Language::Python, &["-c", "import sys; sys.stdin.read()"]);
    // Sandlot's own processes of the sandbox: the init and its child, pid 1.
    let own: Vec<i32> =
        common::sandbox_processes().into_iter().filter(|pid| !common::program_processes().contains(pid)).collect();
    let parent = |pid: &i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok())
    };
    let pid1 = *own.iter().find(|pid| parent(pid).is_some_and(|p| own.contains(&p))).ok_or("no pid 1")?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid1), nix::sys::signal::Signal::SIGKILL)?;
    check_eq(live.block(handle.wait()), Termination::Signaled { signal: libc::SIGKILL }, "its process")?;
    eventually("the sandbox ended", || !sandbox.is_alive())?;
    eventually("every process of the sandbox gone", || common::sandbox_processes().is_empty())?;
    let spawn = Spawn { language: Language::Bash, args: vec!["-c".into(), "true".into()], env: BTreeMap::new() };
    check(live.block(sandbox.spawn(spawn)).is_err(), || "an ended sandbox started a process".into())?;
    check_eq(live.block(sandbox.usage()), Default::default(), "an ended sandbox uses nothing")?;
    live.close(&sandbox); // nothing left to do, at once
    Ok(())
}

/// A live sandbox's pid 1 is in the sandbox's Landlock domain (one for all its processes), so Landlock's signal
/// scoping does not fence it off: the kernel does (a pid namespace's init gets no signal from inside it that it
/// does not handle; pid 1 handles none, and reads SIGCHLD only to reap), seccomp refuses `ptrace`, and `/proc`
/// hides it. Every attack on it fails and the sandbox serves the next spawn.
fn pid_1_outlives_its_processes_attacks() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("pid1");
    let script = "for s in KILL STOP TERM INT HUP SEGV CHLD USR1; do kill -s $s 1 2>/dev/null; done; \
        python3 -c 'import ctypes; print(\"ptrace\", ctypes.CDLL(None).ptrace(16, 1, 0, 0))'; \
        cat /proc/1/environ 2>/dev/null | wc -c; kill -9 -1; echo survived";
    let ran = live.bash(&sandbox, script);
    // `kill -9 -1` reaches every process but the caller and pid 1: none here.
    check_eq(ran.stdout.as_str(), "ptrace -1\n0\nsurvived\n", &format!("the attacker: {ran:?}"))?;
    check(sandbox.is_alive(), || "the sandbox died".into())?;
    let after = live.bash(&sandbox, "echo still serving");
    check_eq(after.stdout.as_str(), "still serving\n", "a later spawn")?;
    live.close(&sandbox);
    Ok(())
}

fn a_background_memory_bomb_is_oom_killed_alone() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("memory-bomb");
    let LiveProcess { mut stdin, stdout, handle: survivor, .. } = live.spawn(&sandbox, Language::Python, &["-c", REPL]);
    let mut stdout = BufReader::new(stdout);
    check_eq(live.block(ask(&mut stdin, &mut stdout, "1 + 1")), "2\n".to_owned(), "before")?;
    let bomb = "hog = []\nwhile True: hog.append(b'x' * (8 << 20))";
    let started = live.bash(&sandbox, &format!("nohup python3 -c \"{bomb}\" >/dev/null 2>&1 & echo started"));
    check_eq(started.stdout.as_str(), "started\n", "the bomb")?;
    let limit = Limits::default().memory_mb << 20;
    let mut peak = 0;
    eventually("an OOM kill", || {
        let usage = live.block(sandbox.usage());
        peak = peak.max(usage.memory_bytes);
        usage.oom_kills >= 1
    })?;
    check(peak <= limit, || format!("the sandbox used {peak} bytes over its limit of {limit}"))?;
    // The bomb is gone; the sandbox and its other process live on.
    eventually("the bomb gone", || live.block(sandbox.processes()).iter().all(|p| !p.command.contains("hog")))?;
    check(sandbox.is_alive(), || "the sandbox died".into())?;
    check_eq(live.block(ask(&mut stdin, &mut stdout, "2 + 2")), "4\n".to_owned(), "the survivor after")?;
    // A bomb the sandbox's caller started itself is reported as out of memory.
    let direct = live.run(&sandbox, Language::Python, &["-c", bomb]);
    check_eq(direct.termination, Termination::OutOfMemory, "a spawned bomb's end")?;
    drop(stdin);
    check_eq(live.block(survivor.wait()), exited(0), "the survivor's end")?;
    live.close(&sandbox);
    Ok(())
}

fn a_background_fork_bomb_hits_pids_max() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("fork-bomb");
    let started = live.bash(&sandbox, "nohup bash -c 'bomb() { bomb | bomb & }; bomb' >/dev/null 2>&1 & echo started");
    check_eq(started.stdout.as_str(), "started\n", "the bomb")?;
    let limit = Limits::default().pids;
    eventually("the bomb at the pids limit", || live.block(sandbox.usage()).pids + 2 >= limit)?;
    for _ in 0..10 {
        let usage = live.block(sandbox.usage());
        check(usage.pids <= limit, || format!("{usage:?}"))?;
        let processes = live.block(sandbox.processes()).len() as u64;
        check(processes <= limit, || format!("{processes} processes"))?;
        std::thread::sleep(Duration::from_millis(100));
    }
    // Closing ends it, however many it keeps forking.
    live.close(&sandbox);
    check_eq(common::sandbox_processes(), vec![], "processes after close")
}

/// A browser raises the memory and process limits of a sandbox started with the defaults (what a browser needs,
/// `sandlot_core::browser`): its cgroup's limits grow, and the sandbox can then hold more processes than the default
/// allows; a lower value leaves them as they are.
fn limits_are_raised_for_a_browser_never_lowered() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("raised");
    let defaults = Limits::default();
    let usage = live.block(sandbox.usage());
    check_eq((usage.memory_limit_bytes, usage.pids_limit), (defaults.memory_mb << 20, defaults.pids), "before")?;
    live.block(sandbox.raise_limits(1024, 512)).map_err(|e| format!("raise: {e}"))?;
    let usage = live.block(sandbox.usage());
    check_eq((usage.memory_limit_bytes, usage.pids_limit), (1024 << 20, 512), "raised")?;
    live.block(sandbox.raise_limits(16, 8)).map_err(|e| format!("lower: {e}"))?;
    let usage = live.block(sandbox.usage());
    check_eq((usage.memory_limit_bytes, usage.pids_limit), (1024 << 20, 512), "never lowered")?;
    // 100 sleepers: over the default 64, well under the raised 512.
    let started = live.bash(&sandbox, "for i in $(seq 100); do sleep 600 & done; echo started");
    check_eq((started.termination, started.stdout.as_str()), (exited(0), "started\n"), "100 processes")?;
    live.close(&sandbox);
    check_eq(common::sandbox_processes(), vec![], "processes after close")
}

/// A live sandbox's cgroup gets a run's CPU weight and, with the default limits, no quota: busy, it gets a run's
/// share of the cores and no more, however many processes it keeps busy (docs/security.md, "CPU").
fn a_live_sandbox_shares_cpu_by_weight_without_a_cap() -> Result<(), Failed> {
    let live = Live::new();
    let sandbox = live.start("cpu-weight");
    let marker = "cpu-weight-marker-4d1";
    let _sleeper =
        live.spawn(&sandbox, Language::Python, &["-c", &format!("import time; time.sleep(600)  # {marker}")]);
    eventually("the sleeper running", || !host_pids_running(marker).is_empty())?;
    let dirs = sandlot_cgroups_of(host_pids_running(marker)[0]);
    let read = |dir: &std::path::Path, file: &str| std::fs::read_to_string(dir.join(file)).map(|t| t.trim().to_owned());
    let settings = if let Some(v2) = dirs.iter().find(|dir| dir.join("cpu.weight").exists()) {
        (read(v2, "cpu.weight")?, read(v2, "cpu.max")?)
    } else {
        let v1 = dirs.iter().find(|dir| dir.join("cpu.shares").exists()).ok_or("the sandbox is in no cpu cgroup")?;
        (read(v1, "cpu.shares")?, read(v1, "cpu.cfs_quota_us")?)
    };
    let expected = if settings.0 == "100" { ("100", "max 100000") } else { ("1024", "-1") };
    live.close(&sandbox);
    check_eq((settings.0.as_str(), settings.1.as_str()), expected, "the live sandbox's cpu weight and quota")
}
