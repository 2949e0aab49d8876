//! The Docker backend's live sandboxes against a real engine and runner-live (`scripts/build-runners.sh`): processes
//! spawned with `docker exec`, what they share (loopback, `/tmp`, background processes), signals and exits, and the
//! attack tests of a container that outlives a call: another conversation's sandbox reaches nothing of this one's,
//! nothing survives `close`, a memory bomb and a fork bomb stop at the container's default limits. They fail, not
//! skip, without the engine or the image.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandlot_core::{
    Backend, ConversationId, Language, Layout, Limits, LiveProcess, LiveSandbox, LiveSpec, Spawn, Termination,
};
use sandlot_docker::{DockerBackend, DockerConfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// A backend whose owner is a root of its own, and the conversations' directories under it.
struct Host {
    root: tempfile::TempDir,
    backend: DockerBackend,
}

impl Drop for Host {
    /// The root, if the backend made it a nosuid,nodev mount of its own, is unmounted so it can be removed; and the
    /// containers of this owner are removed, synchronously: a test that fails before `close` drops its sandbox
    /// while the runtime ends, which drops the removal task that drop spawns.
    fn drop(&mut self) {
        let owner = format!("label=sandlot.owner={}", self.root.path().display());
        let listed = std::process::Command::new("docker").args(["ps", "-aq", "--filter", &owner]).output();
        let ids: Vec<String> =
            listed.map(|o| String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect()).unwrap_or_default();
        if !ids.is_empty() {
            std::process::Command::new("docker").args(["rm", "-f"]).args(&ids).output().ok();
        }
        nix::mount::umount2(self.root.path(), nix::mount::MntFlags::MNT_DETACH).ok();
    }
}

async fn host() -> Host {
    let root = tempfile::tempdir().unwrap();
    let backend = DockerBackend::connect(DockerConfig::new(root.path().display().to_string()))
        .await
        .expect("a running Docker engine with the runner images (scripts/build-runners.sh)");
    assert!(backend.live().is_some(), "no runner-live image: run scripts/build-runners.sh");
    Host { root, backend }
}

impl Host {
    /// A live sandbox for `conversation` with the default limits (the ones the attack tests must hold with).
    async fn start(&self, conversation: &str) -> Arc<dyn LiveSandbox> {
        let workspace = self.root.path().join(conversation).join("files");
        std::fs::create_dir_all(&workspace).unwrap();
        let spec = LiveSpec {
            sandbox_id: format!("live-test-{conversation}-{}", std::process::id()),
            conversation: ConversationId::parse(conversation).unwrap(),
            limits: Limits::default(),
            workspace,
            layout: Layout::Data,
            mounts: Vec::new(),
            network: None,
        };
        self.backend.live().unwrap().start(spec).await.expect("start a live sandbox")
    }
}

fn spawn(language: Language, args: &[&str]) -> Spawn {
    Spawn { language, args: args.iter().map(|a| (*a).to_owned()).collect(), env: BTreeMap::new() }
}

fn python(code: &str) -> Spawn {
    spawn(Language::Python, &["-c", code])
}

fn bash(script: &str) -> Spawn {
    spawn(Language::Bash, &["-c", script])
}

/// Runs a process to its end with nothing on stdin: its stdout, stderr and termination. Bounded: a process that
/// never ends fails the test instead of hanging it.
async fn finish(mut process: LiveProcess) -> (String, String, Termination) {
    process.stdin.shutdown().await.unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    let all = async {
        let (a, b) = tokio::join!(process.stdout.read_to_string(&mut out), process.stderr.read_to_string(&mut err));
        a.unwrap();
        b.unwrap();
        process.handle.wait().await
    };
    let termination = tokio::time::timeout(Duration::from_secs(60), all).await.expect("the process ended");
    (out, err, termination)
}

async fn run(sandbox: &Arc<dyn LiveSandbox>, spawn: Spawn) -> (String, String, Termination) {
    finish(sandbox.spawn(spawn).await.expect("spawn")).await
}

/// The ids of the containers of one sandbox, running or not.
fn containers_of(sandbox: &Arc<dyn LiveSandbox>) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=sandlot.run={}", sandbox.id())])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

/// Host pids whose command line contains `marker`.
fn host_processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}

/// Polls `condition` until it holds or `bound` passes; whether it held.
async fn wait_for(bound: Duration, mut condition: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if condition().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    condition().await
}

#[tokio::test]
async fn python_runs_with_exact_streams_stdin_and_exit_code() {
    let host = host().await;
    let sandbox = host.start("streams").await;
    let code = "import os, sys\nprint('out', os.getuid(), os.getcwd())\nprint('err', file=sys.stderr)\nsys.exit(3)";
    assert_eq!(
        run(&sandbox, python(code)).await,
        ("out 10001 /data\n".into(), "err\n".into(), Termination::Exited { code: 3 })
    );

    let mut process = sandbox.spawn(python("import sys\nprint(sys.stdin.read().upper())")).await.unwrap();
    assert!(process.handle.pid() > 1, "the pid the container sees: {}", process.handle.pid());
    process.stdin.write_all(b"hello live").await.unwrap();
    assert_eq!(finish(process).await, ("HELLO LIVE\n".into(), String::new(), Termination::Exited { code: 0 }));

    // Dropping stdin closes it too, as a pipe's end: the process reads to the end of its input.
    let mut process = sandbox.spawn(python("import sys\nprint(len(sys.stdin.read()))")).await.unwrap();
    process.stdin.write_all(b"four").await.unwrap();
    drop(std::mem::replace(&mut process.stdin, Box::pin(tokio::io::sink())));
    assert_eq!(finish(process).await.0, "4\n");

    let mut with_env = python("import os\nprint(os.environ['GREETING'], os.environ['TMPDIR'])");
    with_env.env.insert("GREETING".into(), "hi".into());
    assert_eq!(run(&sandbox, with_env).await.0, "hi /tmp\n");
    sandbox.close().await;
}

#[tokio::test]
async fn typescript_gets_node_and_esbuild_and_bash_runs() {
    let host = host().await;
    let sandbox = host.start("languages").await;
    let strip = "const esbuild = require(process.env.SANDLOT_ESBUILD);\
        const js = esbuild.transformSync('const n: number = 6 * 7; console.log(n)', { loader: 'ts' }).code;\
        eval(js);";
    assert_eq!(
        run(&sandbox, spawn(Language::TypeScript, &["-e", strip])).await,
        ("42\n".into(), String::new(), Termination::Exited { code: 0 })
    );
    assert_eq!(run(&sandbox, spawn(Language::JavaScript, &["-e", "console.log(1 + 1)"])).await.0, "2\n");
    assert_eq!(
        run(&sandbox, bash("echo $((6 * 7)); exit 4")).await,
        ("42\n".into(), String::new(), Termination::Exited { code: 4 })
    );
    sandbox.close().await;
}

/// What one spawn starts in the background serves a later spawn over the sandbox's loopback, and /tmp is one.
#[tokio::test]
async fn a_background_server_answers_a_later_spawn_and_tmp_is_shared() {
    let host = host().await;
    let sandbox = host.start("background").await;
    let start = "echo shared > /tmp/note; cd /tmp; nohup python3 -m http.server 8765 --bind 127.0.0.1 \
        >/tmp/http.log 2>&1 & echo started";
    assert_eq!(run(&sandbox, bash(start)).await, ("started\n".into(), String::new(), Termination::Exited { code: 0 }));
    // The server takes a moment to listen: the client retries for up to 30 s (it answers in well under a second).
    let fetch = "import time, urllib.request\nfor _ in range(300):\n    try:\n        \
        print(urllib.request.urlopen('http://127.0.0.1:8765/note').read().decode(), end='')\n        break\n    \
        except OSError:\n        time.sleep(0.1)";
    assert_eq!(run(&sandbox, python(fetch)).await, ("shared\n".into(), String::new(), Termination::Exited { code: 0 }));
    let processes = sandbox.processes().await;
    let commands: Vec<&str> = processes.iter().map(|p| p.command.as_str()).collect();
    assert_eq!(commands, ["python3 -m http.server 8765 --bind 127.0.0.1"], "{processes:?}");
    assert!(processes[0].pid > 1 && processes[0].memory_bytes > 0, "{processes:?}");
    let usage = sandbox.usage().await;
    assert_eq!((usage.memory_limit_bytes, usage.pids_limit, usage.oom_kills), (256 << 20, 64, 0), "{usage:?}");
    assert!(usage.memory_bytes > 0 && usage.pids >= 3 && usage.cpu_seconds > 0.0, "{usage:?}");
    sandbox.close().await;
}

#[tokio::test]
async fn sigint_interrupts_python_and_a_group_signal_ends_it() {
    let host = host().await;
    let sandbox = host.start("signals").await;
    // `ready` inside the try, and short sleeps: CPython handles a signal that lands between its last check and the
    // start of a sleep only when the sleep ends (1 run in 150 here with one 60 s sleep), not the backend's doing.
    let code = "import sys, time\ntry:\n    print('ready', flush=True)\n    while True:\n        time.sleep(0.05)\n\
        except KeyboardInterrupt:\n    print('interrupted', flush=True)\n    sys.exit(3)";
    let mut process = sandbox.spawn(python(code)).await.unwrap();
    let mut line = String::new();
    let mut stdout = tokio::io::BufReader::new(&mut process.stdout);
    stdout.read_line(&mut line).await.unwrap();
    assert_eq!(line, "ready\n");
    process.handle.signal(nix::libc::SIGINT, false).await.unwrap();
    let started = Instant::now();
    assert_eq!(finish(process).await, ("interrupted\n".into(), String::new(), Termination::Exited { code: 3 }));
    // It sleeps forever otherwise; the bound is for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());

    // A group: bash and its sleep, both ended by one SIGTERM to the group.
    let process = sandbox.spawn(bash("sleep 60; echo not reached")).await.unwrap();
    let handle = process.handle.clone();
    assert!(
        wait_for(Duration::from_secs(20), async || sandbox.processes().await.iter().any(|p| p.command == "sleep 60"))
            .await
    );
    handle.signal(nix::libc::SIGTERM, true).await.unwrap();
    assert_eq!(finish(process).await, (String::new(), String::new(), Termination::Signaled { signal: 15 }));
    assert_eq!(handle.wait().await, Termination::Signaled { signal: 15 }, "wait again");
    handle.signal(nix::libc::SIGTERM, false).await.expect("a process that ended is no error");
    // The group's sleep may still be exiting when bash's end is read.
    assert!(wait_for(Duration::from_secs(20), async || sandbox.processes().await.is_empty()).await);

    // A group whose leader has exited: what it left in the background (in its group) still gets the signal.
    let process = sandbox.spawn(bash("sleep 70 & echo started")).await.unwrap();
    let handle = process.handle.clone();
    assert_eq!(finish(process).await, ("started\n".into(), String::new(), Termination::Exited { code: 0 }));
    assert_eq!(sandbox.processes().await.iter().map(|p| p.command.as_str()).collect::<Vec<_>>(), ["sleep 70"]);
    handle.signal(nix::libc::SIGTERM, true).await.unwrap();
    assert!(wait_for(Duration::from_secs(20), async || sandbox.processes().await.is_empty()).await);
    sandbox.close().await;
}

/// Attack: a second conversation's live container tries to reach the first one's loopback port, to see its
/// processes and to read its files (in `/data` and `/tmp`). Each attempt must fail.
#[tokio::test]
async fn another_conversations_sandbox_cannot_reach_see_or_read_this_one() {
    let host = host().await;
    let victim = host.start("victim").await;
    let start = "echo secret > /data/secret.txt; echo secret > /tmp/secret.txt; \
        nohup python3 -m http.server 8766 --bind 127.0.0.1 >/dev/null 2>&1 & \
        for i in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/8766) 2>/dev/null && break; sleep 0.1; done; echo up";
    assert_eq!(run(&victim, bash(start)).await.0, "up\n");
    let attacker = host.start("attacker").await;
    // The victim's directory on the host, and its container's processes by the pids they have in their own
    // namespace (the attacker's pid namespace is its own: pid 1 is its own init).
    let victim_dir = host.root.path().join("victim").join("files");
    let attack = format!(
        "import os, socket\ns = socket.socket()\ntry:\n    s.connect(('127.0.0.1', 8766))\n    print('connected')\n\
         except OSError as e:\n    print('refused', e.errno)\n\
         print(sorted(open(f'/proc/{{p}}/cmdline').read().split('\\0')[0] for p in os.listdir('/proc') if p.isdigit()))\n\
         print(os.listdir('/data'), os.path.exists('/tmp/secret.txt'), os.path.exists({:?}))",
        victim_dir.display().to_string()
    );
    let (out, err, _) = run(&attacker, python(&attack)).await;
    assert_eq!(out, "refused 111\n['/sbin/docker-init', 'python3', 'sleep']\n[] False False\n", "{err}");
    // And the victim's server still answers its own sandbox.
    let fetch = "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:8766/secret.txt').read())";
    assert_eq!(run(&victim, python(fetch)).await.0, "b'secret\\n'\n");
    victim.close().await;
    attacker.close().await;
}

/// Attack: a process that leaves its session (setsid) and ignores hangups (nohup) to outlive its sandbox. After
/// `close` the container and the process are gone from the host; `close` again is a no-op, spawn fails.
#[tokio::test]
async fn a_setsid_nohup_process_does_not_outlive_close() {
    let host = host().await;
    let sandbox = host.start("escape").await;
    let marker = format!("sandlot-escape-{}", std::process::id());
    let script =
        format!("setsid nohup python3 -c 'import time; time.sleep(1000)  # {marker}' >/dev/null 2>&1 & echo ok");
    assert_eq!(run(&sandbox, bash(&script)).await.0, "ok\n");
    // And a process still running in the foreground: close ends it as it ends the container, with SIGKILL.
    let foreground = sandbox.spawn(bash("sleep 1000")).await.unwrap();
    assert!(wait_for(Duration::from_secs(20), async || !host_processes_with(&marker).is_empty()).await);
    assert_eq!(containers_of(&sandbox).len(), 1);
    assert!(sandbox.is_alive());
    sandbox.close().await;
    assert!(!sandbox.is_alive());
    assert_eq!(finish(foreground).await, (String::new(), String::new(), Termination::Signaled { signal: 9 }));
    assert_eq!(containers_of(&sandbox), Vec::<String>::new());
    assert_eq!(host_processes_with(&marker), Vec::<u32>::new());
    sandbox.close().await;
    assert!(sandbox.spawn(python("print(1)")).await.is_err());
}

/// Dropping the last handle without `close` removes the container too.
#[tokio::test]
async fn dropping_the_sandbox_removes_its_container() {
    let host = host().await;
    let sandbox = host.start("dropped").await;
    let id = sandbox.id().to_owned();
    assert_eq!(containers_of(&sandbox).len(), 1);
    drop(sandbox);
    let left = || {
        let out = std::process::Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("label=sandlot.run={id}")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    // A removal takes well under a second; 20 s for a loaded machine.
    assert!(wait_for(Duration::from_secs(20), async || left() == 0).await, "the container is still there");
}

/// A live container left by a sandlot that crashed (its handle never dropped) is removed by the next start's
/// leftovers removal, as a run's container is: it carries the same labels.
#[tokio::test]
async fn a_crashed_servers_live_container_is_removed_at_the_next_start() {
    let host = host().await;
    let sandbox = host.start("crashed").await;
    assert_eq!(containers_of(&sandbox).len(), 1);
    let id = sandbox.id().to_owned();
    std::mem::forget(sandbox); // as a crash leaves it: no close, no drop
    host.backend.remove_leftovers().await;
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=sandlot.run={id}")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
}

/// A container that stops by itself (here killed from outside) leaves a sandbox that is no longer alive and
/// refuses to spawn.
#[tokio::test]
async fn a_sandbox_whose_container_stopped_is_not_alive() {
    let host = host().await;
    let sandbox = host.start("stopped").await;
    assert!(sandbox.is_alive());
    let killed = std::process::Command::new("docker").arg("kill").args(containers_of(&sandbox)).output().unwrap();
    assert!(killed.status.success(), "{killed:?}");
    // The engine reports the stop at once; 20 s for a loaded machine.
    assert!(wait_for(Duration::from_secs(20), async || !sandbox.is_alive()).await);
    assert!(sandbox.spawn(python("print(1)")).await.is_err());
    sandbox.close().await;
    assert_eq!(containers_of(&sandbox), Vec::<String>::new());
}

/// Attack: a memory bomb in the background, with the default limits (256 MiB for the whole container). The kernel
/// kills it within the limit; another background process and the sandbox keep running; a foreground bomb's wait
/// says OutOfMemory.
#[tokio::test]
async fn a_memory_bomb_is_killed_within_the_limit_and_others_keep_running() {
    let host = host().await;
    let sandbox = host.start("membomb").await;
    let start = "nohup python3 -c 'import time; time.sleep(1000)  # survivor' >/dev/null 2>&1 & \
        nohup python3 -c 'a = []\nwhile True: a.append(bytearray(8 << 20))  # bomb' >/dev/null 2>&1 & echo ok";
    assert_eq!(run(&sandbox, bash(start)).await.0, "ok\n");
    // The bomb fills 256 MiB in well under a second, and dies a moment after the kill is counted; 60 s for a loaded
    // machine. Fails if the bomb runs on (no kill) or something else is killed instead.
    let commands = async || sandbox.processes().await.into_iter().map(|p| p.command).collect::<Vec<String>>();
    let bomb_gone =
        async || sandbox.usage().await.oom_kills >= 1 && !commands().await.iter().any(|c| c.contains("# bomb"));
    assert!(wait_for(Duration::from_secs(60), bomb_gone).await, "no OOM kill, or the bomb lives on");
    let usage = sandbox.usage().await;
    assert!(usage.memory_bytes <= usage.memory_limit_bytes && usage.memory_limit_bytes == 256 << 20, "{usage:?}");
    let left = commands().await;
    assert!(left.iter().any(|c| c.contains("# survivor")), "{left:?}");
    assert!(sandbox.is_alive());
    let (_, _, termination) = run(&sandbox, python("a = []\nwhile True: a.append(bytearray(8 << 20))")).await;
    assert_eq!(termination, Termination::OutOfMemory);
    assert_eq!(run(&sandbox, python("print('still here')")).await.0, "still here\n");
    sandbox.close().await;
}

/// Attack: a fork bomb, with the default limits (64 processes and threads for the whole container): forking stops
/// at the limit, and once the bomb is ended the sandbox runs again.
#[tokio::test]
async fn a_fork_bomb_stops_at_the_pids_limit() {
    let host = host().await;
    let sandbox = host.start("forkbomb").await;
    let bomb = "import os, time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n            \
        time.sleep(600)\n            os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('stopped', e.errno)\n\
        print(n < 64)\nos.killpg(0, 9)";
    let (out, _, termination) = run(&sandbox, python(bomb)).await;
    assert_eq!((out.as_str(), termination), ("stopped 11\nTrue\n", Termination::Signaled { signal: 9 }));
    assert!(sandbox.usage().await.pids <= 64);
    assert!(wait_for(Duration::from_secs(20), async || sandbox.processes().await.is_empty()).await);
    assert_eq!(run(&sandbox, python("print('again')")).await.0, "again\n");
    sandbox.close().await;
}

/// The goal: a live container with python waiting on stdin uses under 16 MiB. Prints what it measures
/// (`cargo nextest run -p sandlot-docker live::idle --no-capture`), with the time a start and a `print(1)` take: the container's cgroup (which counts the
/// page cache of what it read) and the processes' resident memory.
#[tokio::test]
async fn idle_memory_of_a_container_with_python_waiting_on_stdin() {
    let host = host().await;
    let started = Instant::now();
    let sandbox = host.start("idle").await;
    let start_time = started.elapsed();
    let spawned = Instant::now();
    assert_eq!(run(&sandbox, python("print(1)")).await.0, "1\n");
    let print_time = spawned.elapsed();
    let process = sandbox.spawn(spawn(Language::Python, &[])).await.unwrap();
    assert!(wait_for(Duration::from_secs(20), async || sandbox.processes().await.len() == 1).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let usage = sandbox.usage().await;
    let processes = sandbox.processes().await;
    let rss: u64 = processes.iter().map(|p| p.memory_bytes).sum();
    eprintln!(
        "live sandbox: started in {start_time:?}; a spawn of python3 -c 'print(1)' to its end took {print_time:?}"
    );
    eprintln!(
        "idle live sandbox: cgroup memory {:.1} MiB, python's resident memory {:.1} MiB, {} pids ({processes:?})",
        usage.memory_bytes as f64 / 1048576.0,
        rss as f64 / 1048576.0,
        usage.pids
    );
    assert!(usage.memory_bytes < 64 << 20, "{usage:?}");
    drop(process);
    sandbox.close().await;
}

/// A browser raises the memory and pids limits of a container started with the defaults (`docker update`), and
/// never lowers them; the container then holds more processes than the default allows.
#[tokio::test]
async fn limits_are_raised_for_a_browser_never_lowered() {
    let host = host().await;
    let sandbox = host.start("raised").await;
    sandbox.raise_limits(1024, 512).await.expect("raise");
    let usage = sandbox.usage().await;
    assert_eq!((usage.memory_limit_bytes, usage.pids_limit), (1024 << 20, 512), "{usage:?}");
    sandbox.raise_limits(16, 8).await.expect("a lower value");
    let usage = sandbox.usage().await;
    assert_eq!((usage.memory_limit_bytes, usage.pids_limit), (1024 << 20, 512), "{usage:?}");
    // 100 sleepers: over the default 64, well under the raised 512.
    let started = run(&sandbox, bash("for i in $(seq 100); do sleep 600 & done; echo started")).await;
    assert_eq!(started, ("started\n".into(), String::new(), Termination::Exited { code: 0 }));
    sandbox.close().await;
}
