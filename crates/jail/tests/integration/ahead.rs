//! Node runs in ahead sandboxes (built for a conversation's next JavaScript or TypeScript run once its last one is
//! over, Node already started and waiting in them): the run is still a fresh sandbox with nothing of an earlier
//! run, its input, environment and module exactly a built run's, confined as a built run is; a sandbox serves its
//! own conversation only, and only a run of its shape; one whose Node died is never used; deleting the
//! conversation lets it go; an idle one ends; with the pool off runs go on as before. The harness keeps the
//! server's default pool (`common::Sandbox::with_engine_config`), so the jail's other tests run their Node through
//! it too, whenever one is ready.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{SETTLE, Sandbox, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{ConversationId, Language, RunRequest};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "ahead",
        vec![
            ("a_next_run_served_ahead_is_a_fresh_sandbox", a_next_run_served_ahead_is_a_fresh_sandbox),
            ("an_ahead_run_is_the_run_a_built_one_is", an_ahead_run_is_the_run_a_built_one_is),
            ("an_ahead_run_is_confined_as_a_built_one", an_ahead_run_is_confined_as_a_built_one),
            ("an_ahead_sandbox_serves_its_own_conversation_only", an_ahead_sandbox_serves_its_own_conversation_only),
            (
                "a_waiting_sandbox_yields_the_cpu_and_its_run_does_not",
                a_waiting_sandbox_yields_the_cpu_and_its_run_does_not,
            ),
            ("a_run_of_another_shape_is_not_served_ahead", a_run_of_another_shape_is_not_served_ahead),
            ("typescript_is_served_ahead_too", typescript_is_served_ahead_too),
            ("an_ahead_sandbox_whose_node_died_is_never_used", an_ahead_sandbox_whose_node_died_is_never_used),
            ("deleting_the_conversation_lets_its_sandbox_go", deleting_the_conversation_lets_its_sandbox_go),
            ("an_idle_ahead_sandbox_ends", an_idle_ahead_sandbox_ends),
            ("a_full_pool_lets_the_longest_waiting_go", a_full_pool_lets_the_longest_waiting_go),
            ("nothing_is_built_ahead_while_the_cores_are_busy", nothing_is_built_ahead_while_the_cores_are_busy),
            ("with_the_pool_off_runs_go_on_as_before", with_the_pool_off_runs_go_on_as_before),
        ],
    )
}

/// JavaScript that prints whether its Node was started ahead of its run ("ahead": it has been up for longer than
/// a run's start takes) or for it ("built now").
const AHEAD_PROBE: &str = "console.log(process.uptime() > 0.2 ? 'ahead' : 'built now');";

/// Waits until an ahead sandbox is ready and settled (its Node waiting, older than the probe's bound).
fn wait_for_ahead(sandbox: &Sandbox) -> Result<(), Failed> {
    let jail = sandbox.jail.as_ref().expect("a native backend");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while jail.ahead_ready() == 0 {
        check(std::time::Instant::now() < deadline, || "no sandbox was built ahead".into())?;
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(SETTLE);
    Ok(())
}

/// Runs `request`'s code after the probe; whether it ran ahead, and the rest of its output.
fn run_probed(sandbox: &Sandbox, mut request: RunRequest) -> Result<(bool, String), Failed> {
    request.code = format!("{AHEAD_PROBE}\n{}", request.code);
    let report = sandbox.run_request(request);
    check(report.outcome.success(), || describe(&report))?;
    let (probe, rest) = report.outcome.stdout.split_once('\n').unwrap_or_default();
    Ok((probe == "ahead", rest.to_owned()))
}

fn js(conversation: &str, code: &str) -> RunRequest {
    RunRequest {
        conversation_id: conversation.into(),
        language: Language::JavaScript.as_str().into(),
        code: code.into(),
        ..RunRequest::default()
    }
}

/// Runs `code` in `conversation` twice (the second run once the sandbox built for it waits): the two outputs.
fn built_then_ahead(sandbox: &Sandbox, conversation: &str, code: &str) -> Result<(String, String), Failed> {
    let (ahead, built) = run_probed(sandbox, js(conversation, code))?;
    check(!ahead, || "a conversation's first run was served ahead".into())?;
    wait_for_ahead(sandbox)?;
    let (ahead, served) = run_probed(sandbox, js(conversation, code))?;
    check(ahead, || format!("the next run was not served ahead: {served}"))?;
    Ok((built, served))
}

fn a_next_run_served_ahead_is_a_fresh_sandbox() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let first = "const fs = require('fs'), cp = require('child_process');
fs.writeFileSync('/tmp/left-behind', 'x');
cp.spawn('sleep', ['30'], { detached: true, stdio: 'ignore' }).unref();
console.log(Math.random());";
    let later = "const fs = require('fs');
console.log(fs.readdirSync('/tmp').sort().join(','));
const sleeping = fs.readdirSync('/proc').filter((p) => /^[0-9]+$/.test(p))
  .filter((p) => { try { return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').startsWith('sleep'); } catch { return false; } });
console.log(JSON.stringify(sleeping));
console.log(Math.random());";
    let (first_ahead, first_random) = run_probed(&sandbox, js("fresh", first))?;
    check(!first_ahead, || "the conversation's first run was served ahead".into())?;
    wait_for_ahead(&sandbox)?;
    let (ahead, out) = run_probed(&sandbox, js("fresh", later))?;
    check(ahead, || format!("not served ahead: {out}"))?;
    let lines: Vec<&str> = out.lines().collect();
    check_eq(lines.first().copied(), Some("main.js"), "/tmp holds the run's code only")?;
    check_eq(lines.get(1).copied(), Some("[]"), "no process of the earlier run")?;
    check(lines.get(2).is_some_and(|random| *random != first_random.trim()), || "the same random state".into())
}

fn an_ahead_run_is_the_run_a_built_one_is() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    // What a program can see of how it was started: its arguments, options, environment, main module, input, and
    // its output streams' flags before it first writes (a Node started ahead has made its streams already).
    let code = "const fs = require('fs');
const flags = [1, 2].map((fd) => fs.readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8').split('\\n')[1]);
console.log(JSON.stringify([process.argv, process.execArgv, process.env, require.main === module, __filename,
  module.id, Object.keys(require.cache), process.cwd(), process.title, flags]));
console.log(fs.readFileSync(0).toString('hex'));";
    let request = |conversation: &str| RunRequest {
        stdin: b"line one\nline two\0\xff\xfe".to_vec(),
        env: BTreeMap::from([("GREETING".into(), "hello".into())]),
        ..js(conversation, code)
    };
    let (ahead, built) = run_probed(&sandbox, request("same-a"))?;
    check(!ahead, || "a first run was served ahead".into())?;
    wait_for_ahead(&sandbox)?;
    let (ahead, served) = run_probed(&sandbox, request("same-a"))?;
    check(ahead, || format!("not served ahead: {served}"))?;
    check_eq(served.as_str(), built.as_str(), "what the program sees")?;
    check(built.contains("\"GREETING\":\"hello\"") && !built.contains("NODE_OPTIONS"), || built.clone())?;
    check(built.ends_with(&format!("{}\n", hex(b"line one\nline two\0\xff\xfe"))), || built.clone())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn an_ahead_run_is_confined_as_a_built_one() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "const fs = require('fs'), cp = require('child_process');
const wanted = ['Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'];
for (const line of fs.readFileSync('/proc/self/status', 'utf8').split('\\n')) {
  if (wanted.includes(line.split(':')[0])) console.log(line.split(/\\s+/).join(' '));
}
const main = fs.statSync('/tmp/main.js');
console.log(process.cwd(), (main.mode & 0o7777).toString(8), main.uid, process.getuid());
for (const path of ['/proc/self/comm', '/usr/planted', '/data/../planted', '/data/mine']) {
  try { fs.writeFileSync(path, 'x'); console.log('wrote', path); } catch (e) { console.log(e.code, path); }
}
console.log(cp.execFileSync('sh', ['-c', 'mount -t tmpfs none /data 2>&1; echo $?']).toString().trim().split('\\n').pop());
console.log(fs.readFileSync('/proc/self/cgroup', 'utf8').trim().split('\\n').pop());
console.log(fs.readFileSync('/proc/self/cmdline', 'utf8').split('\\0').filter(Boolean).join(' '));";
    let (built, served) = built_then_ahead(&sandbox, "confined", code)?;
    check_eq(served.as_str(), built.as_str(), "the same confinement")?;
    check(built.contains("CapEff: 0000000000000000") && built.contains("Seccomp: 2"), || built.clone())?;
    check(built.contains("EACCES /proc/self/comm"), || format!("Landlock must refuse the write: {built}"))?;
    check(built.contains("wrote /data/mine"), || format!("/data must be writable: {built}"))?;
    check(!built.contains("wrote /usr") && !built.contains("wrote /data/.."), || built.clone())
}

fn an_ahead_sandbox_serves_its_own_conversation_only() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let write = "require('fs').writeFileSync('/data/mine.txt', 'a'); console.log('wrote');";
    let look = "const fs = require('fs'); console.log(fs.readdirSync('/data').sort().join(',') || '-');";
    check_eq(run_probed(&sandbox, js("own-a", write))?, (false, "wrote\n".into()), "conversation a's first run")?;
    wait_for_ahead(&sandbox)?;
    // Another conversation's run is built now, and sees nothing of a; a's sandbox still waits for a.
    check_eq(run_probed(&sandbox, js("own-b", look))?, (false, "-\n".into()), "conversation b")?;
    wait_for_ahead(&sandbox)?;
    check_eq(run_probed(&sandbox, js("own-a", look))?, (true, "mine.txt\n".into()), "conversation a's next run")?;
    check_eq(run_probed(&sandbox, js("own-b", look))?, (true, "-\n".into()), "conversation b's next run")
}

/// The CPU weight of the cgroup `pid` is in, on the host (`cpu.weight` on v2, `cpu.shares` on v1).
fn cpu_weight_of(pid: i32) -> Option<u64> {
    let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    groups.lines().find_map(|line| {
        let (controllers, path) = line.split_once(':')?.1.split_once(':')?;
        let (dir, file) = match controllers {
            "" => (format!("/sys/fs/cgroup{path}"), "cpu.weight"),
            c if c.split(',').any(|c| c == "cpu") => (format!("/sys/fs/cgroup/{c}{path}"), "cpu.shares"),
            _ => return None,
        };
        std::fs::read_to_string(format!("{dir}/{file}")).ok()?.trim().parse().ok()
    })
}

fn a_waiting_sandbox_yields_the_cpu_and_its_run_does_not() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let (built, _) = run_probed(&sandbox, js("weight", "console.log(1)"))?;
    check(!built, || "a first run was served ahead".into())?;
    wait_for_ahead(&sandbox)?;
    let node = waiting_nodes();
    check_eq(node.len(), 1, "one Node waiting")?;
    let waiting = cpu_weight_of(node[0]);
    check(matches!(waiting, Some(1 | 2)), || format!("a waiting sandbox's weight: {waiting:?}"))?;
    // Its run holds on (two seconds) while its weight is read: a run's, as every run has, once the run has it.
    let running = std::thread::scope(|scope| {
        let run = scope.spawn(|| run_probed(&sandbox, js("weight", "setTimeout(() => console.log('done'), 2000);")));
        let mut weight = cpu_weight_of(node[0]);
        while !matches!(weight, Some(100 | 1024)) && !run.is_finished() {
            std::thread::sleep(Duration::from_millis(10));
            weight = cpu_weight_of(node[0]);
        }
        (run.join().expect("the run's thread"), weight)
    });
    check_eq(running.0?, (true, "done\n".into()), "the run")?;
    check(matches!(running.1, Some(100 | 1024)), || format!("its run's weight: {:?}", running.1))
}

fn a_run_of_another_shape_is_not_served_ahead() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    check_eq(run_probed(&sandbox, js("shape", "console.log(1)"))?, (false, "1\n".into()), "the first run")?;
    wait_for_ahead(&sandbox)?;
    // Another timeout (so another CPU limit): its sandbox is not the one built; it is let go, and the run's own
    // leaves one of its shape.
    let shorter = RunRequest { timeout: Some(Duration::from_secs(5)), ..js("shape", "console.log(2)") };
    check_eq(run_probed(&sandbox, shorter)?, (false, "2\n".into()), "a run of another timeout")?;
    // Another environment (Node reads some of it only as it starts): built now, and the next run with the same
    // environment served ahead, Node started with the run's options.
    let options = |code: &str| RunRequest {
        env: BTreeMap::from([("NODE_OPTIONS".into(), "--max-old-space-size=64".into())]),
        ..js("shape", code)
    };
    let heap = "console.log(process.env.NODE_OPTIONS, require('v8').getHeapStatistics().heap_size_limit >> 20);";
    wait_for_ahead(&sandbox)?;
    let (ahead, built) = run_probed(&sandbox, options(heap))?;
    check(!ahead, || "a run with other variables was served ahead".into())?;
    check(built.starts_with("--max-old-space-size=64 "), || built.clone())?;
    wait_for_ahead(&sandbox)?;
    check_eq(run_probed(&sandbox, options(heap))?, (true, built), "the next run with the same variables")
}

fn typescript_is_served_ahead_too() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let ts = |conversation: &str, code: &str| RunRequest {
        conversation_id: conversation.into(),
        language: Language::TypeScript.as_str().into(),
        code: format!("{AHEAD_PROBE}\n{code}"),
        ..RunRequest::default()
    };
    // Types stripped in place; and an enum, transformed, which runs with source maps (`NODE_OPTIONS`): its error
    // names the TypeScript's line either way.
    let stripped = "const n: number = 6 * 7; console.log(n);";
    let transformed = "enum One { A = 1 }\nconsole.log(One.A);\nconsole.log(new Error('where').stack.split('\\n')[1]);";
    for (conversation, code) in [("typed", stripped), ("typed-enum", transformed)] {
        let first = sandbox.run_request(ts(conversation, code));
        check(first.outcome.stdout.starts_with("built now\n"), || describe(&first))?;
        check(code == stripped || first.outcome.stdout.contains("main.ts:4"), || describe(&first))?;
        wait_for_ahead(&sandbox)?;
        let next = sandbox.run_request(ts(conversation, code));
        let expected = first.outcome.stdout.replacen("built now", "ahead", 1);
        check_eq(next.outcome.stdout.as_str(), expected.as_str(), &describe(&next))?;
    }
    Ok(())
}

/// The Nodes waiting in ahead sandboxes.
fn waiting_nodes() -> Vec<i32> {
    common::prepared_processes()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| line.starts_with(b"/usr/bin/node"))
        })
        .collect()
}

fn an_ahead_sandbox_whose_node_died_is_never_used() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    check_eq(run_probed(&sandbox, js("died", "console.log(1)"))?, (false, "1\n".into()), "the first run")?;
    wait_for_ahead(&sandbox)?;
    let nodes = waiting_nodes();
    check_eq(nodes.len(), 1, "one Node waiting")?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(nodes[0]), nix::sys::signal::Signal::SIGKILL)?;
    std::thread::sleep(Duration::from_millis(200));
    check_eq(run_probed(&sandbox, js("died", "console.log(2)"))?, (false, "2\n".into()), "the run after")
}

fn deleting_the_conversation_lets_its_sandbox_go() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let write = "require('fs').writeFileSync('/data/kept.txt', 'a'); console.log('wrote');";
    check_eq(run_probed(&sandbox, js("deleted", write))?, (false, "wrote\n".into()), "the first run")?;
    wait_for_ahead(&sandbox)?;
    let id = ConversationId::parse("deleted").expect("id");
    let deleted = sandbox.runtime.block_on(sandbox.engine.delete_conversation(&id));
    check(deleted.is_ok(), || format!("the conversation could not be deleted: {deleted:?}"))?;
    check_eq(sandbox.jail.as_ref().map(|jail| jail.ahead_ready()), Some(0), "no sandbox waits for it")?;
    check_eq(waiting_nodes(), vec![], "Nodes waiting")?;
    // Made again, the conversation is empty, and its first run built now.
    let look = "console.log(require('fs').readdirSync('/data').join(',') || '-');";
    check_eq(run_probed(&sandbox, js("deleted", look))?, (false, "-\n".into()), "the conversation made again")
}

fn an_idle_ahead_sandbox_ends() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    check_eq(run_probed(&sandbox, js("idle", "console.log(1)"))?, (false, "1\n".into()), "the first run")?;
    wait_for_ahead(&sandbox)?;
    let jail = sandbox.jail.as_ref().expect("a native backend");
    let deadline = std::time::Instant::now() + sandlot_jail::AHEAD_IDLE + Duration::from_secs(30);
    while jail.ahead_ready() > 0 {
        check(std::time::Instant::now() < deadline, || "the idle sandbox was kept".into())?;
        std::thread::sleep(Duration::from_millis(100));
    }
    check_eq(run_probed(&sandbox, js("idle", "console.log(2)"))?, (false, "2\n".into()), "the run after")
}

/// The conversations whose sandboxes wait, by the file each one's first run left in its `/data` (seen through the
/// waiting Node's root).
fn conversations_waiting() -> Vec<String> {
    let mut names: Vec<String> = waiting_nodes()
        .into_iter()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/root/data")).ok())
        .flat_map(|entries| entries.flatten().map(|entry| entry.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    names
}

/// Under load the cores are the limit: a Node run that ends while as many runs as cores are in flight leaves no
/// sandbox built ahead; one that ends on an idle machine does.
fn nothing_is_built_ahead_while_the_cores_are_busy() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let jail = sandbox.jail.as_ref().ok_or("a native backend")?;
    let (ran, ready) = common::while_the_cores_are_busy(&sandbox, || {
        let ran = run_probed(&sandbox, js("busy", "console.log('ran')"));
        // Long enough for a sandbox to be built ahead, had one been started.
        std::thread::sleep(4 * SETTLE);
        (ran, jail.ahead_ready())
    })?;
    check_eq(ran?, (false, "ran\n".to_owned()), "the run while busy")?;
    check_eq(ready, 0, "sandboxes built ahead while the cores were busy")?;
    check_eq(run_probed(&sandbox, js("busy", "console.log('ran')"))?, (false, "ran\n".to_owned()), "the next run")?;
    wait_for_ahead(&sandbox)?;
    check_eq(jail.ahead_ready(), 1, "sandboxes built ahead once the cores were free")
}

fn a_full_pool_lets_the_longest_waiting_go() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {}); // the server's default: 4
    let names = ["full-1", "full-2", "full-3", "full-4", "full-5"];
    for (n, conversation) in names.into_iter().enumerate() {
        let mark = format!("require('fs').writeFileSync('/data/{conversation}', ''); console.log(1);");
        check_eq(run_probed(&sandbox, js(conversation, &mark))?, (false, "1\n".into()), conversation)?;
        // Each waits for its sandbox, so the order they were built in is the order of the runs.
        let expected: Vec<String> = names[n.saturating_sub(3)..=n].iter().map(|name| (*name).to_owned()).collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while conversations_waiting() != expected {
            check(std::time::Instant::now() < deadline, || format!("waiting: {:?}", conversations_waiting()))?;
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    std::thread::sleep(SETTLE);
    // The first conversation's went when the fifth's came; the others wait.
    check_eq(run_probed(&sandbox, js("full-1", "console.log(2)"))?, (false, "2\n".into()), "the first conversation")?;
    check_eq(run_probed(&sandbox, js("full-5", "console.log(2)"))?, (true, "2\n".into()), "the fifth conversation")
}

fn with_the_pool_off_runs_go_on_as_before() -> Result<(), Failed> {
    let sandbox = Sandbox::with_config(|config| config.ahead_sandboxes = 0, |_| {});
    for conversation in ["off-1", "off-1", "off-2"] {
        std::thread::sleep(SETTLE);
        check_eq(run_probed(&sandbox, js(conversation, "console.log('ran')"))?, (false, "ran\n".into()), "built")?;
    }
    check_eq(sandbox.jail.as_ref().map(|jail| jail.ahead_ready()), Some(0), "no sandbox built ahead")
}
