//! How runs share the CPU: by default every run's cgroup has the same weight and no quota, so a run alone has every
//! core and busy runs split them; an operator's cap (`Limits::cpus`) still caps; and a run that keeps every core
//! busy with many processes cannot starve a run beside it (docs/security.md, "CPU").

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Sandbox, check, check_eq, describe, wait_for};
use libtest_mimic::Failed;
use sandlot_core::{RunRequest, Termination};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "cpu",
        vec![
            ("a_run_is_weighted_and_uncapped_by_default", a_run_is_weighted_and_uncapped_by_default),
            ("an_operator_cap_caps_the_run", an_operator_cap_caps_the_run),
            ("a_cpu_hog_does_not_starve_a_concurrent_run", a_cpu_hog_does_not_starve_a_concurrent_run),
        ],
    )
}

/// Python that writes `/data/before` and waits for `/data/go-before`, spends `busy_seconds` of CPU, then does the
/// same with `after`: the test reads the run's cgroup around the busy part. Each wait gives up after 60 s.
fn busy_between_handshakes(busy_seconds: f64) -> String {
    format!(
        "import os, time\ndef wait(name):\n    open('/data/' + name, 'w').close()\n    start = time.monotonic()\n\
         \x20   while not os.path.exists('/data/go-' + name) and time.monotonic() - start < 60:\n        time.sleep(0.01)\n\
         wait('before')\nstart = time.process_time()\nwhile time.process_time() - start < {busy_seconds}:\n    pass\n\
         wait('after')\nprint('done')"
    )
}

/// The host's `cpu` cgroup directory of process `pid` (v1: in the hierarchy whose controllers include `cpu`).
fn cpu_cgroup_of(pid: i32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let mount = match controllers {
            "" => "/sys/fs/cgroup".to_owned(),
            list if list.split(',').any(|c| c == "cpu") => format!("/sys/fs/cgroup/{list}"),
            _ => return None,
        };
        path.contains("/sandlot/").then(|| PathBuf::from(format!("{mount}{path}")))
    })
}

/// A run's CPU settings as the host shows them: weight and quota (v2: `cpu.weight` and `cpu.max`; v1: `cpu.shares`
/// and `cpu.cfs_quota_us`), and whether it was throttled while busy (`nr_throttled` of `cpu.stat` moved: the counter
/// is the slot's since it was made, and slots are reused).
#[derive(Debug, PartialEq)]
struct CpuSettings {
    weight: String,
    quota: String,
    throttled: bool,
}

/// Runs [`busy_between_handshakes`] in `conversation` and reads its [`CpuSettings`] meanwhile.
fn cpu_settings_of_a_run(sandbox: &Sandbox, conversation: &str, busy_seconds: f64) -> Result<CpuSettings, Failed> {
    let data = sandbox.data_dir(conversation);
    let request = RunRequest {
        conversation_id: conversation.into(),
        language: "python".into(),
        code: busy_between_handshakes(busy_seconds),
        ..RunRequest::default()
    };
    let (report, settings) = sandbox.runtime.block_on(async {
        let read = tokio::task::spawn_blocking(move || {
            let settings = read_settings(&data);
            // Let the program end whatever happened (it gives up waiting after 60 s anyway).
            for name in ["go-before", "go-after"] {
                std::fs::write(data.join(name), "").unwrap();
            }
            settings
        });
        let (report, settings) = tokio::join!(sandbox.engine.run(request, &()), read);
        (report, settings.unwrap())
    });
    let report = report?;
    check_eq(report.outcome.stdout.as_str(), "done\n", &describe(&report))?;
    settings
}

fn read_settings(data: &Path) -> Result<CpuSettings, Failed> {
    wait_for(&data.join("before"))?;
    let pids = common::program_processes();
    let dir = pids.iter().find_map(|pid| cpu_cgroup_of(*pid)).ok_or("the program is in no cpu cgroup of sandlot")?;
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).map(|text| text.trim().to_owned());
    let throttled = || -> Result<u64, Failed> {
        let stat = read("cpu.stat")?;
        let count = stat.lines().find_map(|line| line.strip_prefix("nr_throttled ")).ok_or("no nr_throttled")?;
        Ok(count.parse()?)
    };
    let v2 = dir.join("cpu.weight").exists();
    let (weight, quota) =
        if v2 { (read("cpu.weight")?, read("cpu.max")?) } else { (read("cpu.shares")?, read("cpu.cfs_quota_us")?) };
    let before = throttled()?;
    std::fs::write(data.join("go-before"), "")?;
    wait_for(&data.join("after"))?;
    Ok(CpuSettings { weight, quota, throttled: throttled()? > before })
}

/// With the default limits the run's group has the kernel's default weight, every run's, and no quota: a busy run
/// alone is never throttled.
fn a_run_is_weighted_and_uncapped_by_default() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let settings = cpu_settings_of_a_run(&sandbox, "weighted", 0.5)?;
    let (weight, quota) = if settings.weight == "100" { ("100", "max 100000") } else { ("1024", "-1") };
    let expected = CpuSettings { weight: weight.into(), quota: quota.into(), throttled: false };
    check_eq(settings, expected, "the run's cpu weight and quota")
}

/// An operator's cap is written as a quota, and a busy program is throttled by it. A later run with the default
/// limits (in the same slot when nothing else took it meanwhile) finds no quota left behind.
fn an_operator_cap_caps_the_run() -> Result<(), Failed> {
    let capped = Sandbox::new(|limits| limits.cpus = Some(0.25));
    // 0.3 s of CPU at a quarter of a core spans at least 12 periods of 100 ms, most of them throttled.
    let settings = cpu_settings_of_a_run(&capped, "capped", 0.3)?;
    let v2 = settings.weight == "100";
    let (weight, quota) = if v2 { ("100", "25000 100000") } else { ("1024", "25000") };
    let expected = CpuSettings { weight: weight.into(), quota: quota.into(), throttled: true };
    check_eq(settings, expected, "the capped run's cpu weight and quota")?;
    drop(capped);
    let uncapped = Sandbox::new(|_| {});
    let settings = cpu_settings_of_a_run(&uncapped, "uncapped", 0.3)?;
    let quota = if v2 { "max 100000" } else { "-1" };
    check_eq((settings.quota.as_str(), settings.throttled), (quota, false), "the next run's quota")
}

/// Processes the hog starts: its run's every pid but a few. Without per-run weights (each process weighing the same
/// on the host) they would leave the victim about 2/61 of a core on two cores.
const HOG_PROCESSES: usize = 60;

/// A run keeping every core busy with [`HOG_PROCESSES`] processes, and a victim beside it with the default
/// configuration: the victim's group weighs what the hog's does, so while it computes it gets about half the
/// cores (at least a third of one core even with a busy task per core outside sandlot, on 2 cores).
fn a_cpu_hog_does_not_starve_a_concurrent_run() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| limits.timeout = Duration::from_secs(120));
    let hog_code = format!(
        "import os, time\nfor _ in range({HOG_PROCESSES}):\n    if os.fork() == 0:\n        while True:\n            pass\n\
         open('/data/hogging', 'w').close()\nstart = time.monotonic()\n\
         while not os.path.exists('/data/stop') and time.monotonic() - start < 100:\n    time.sleep(0.05)\nprint('stopped')"
    );
    // A fixed piece of work: the share of a core the victim got while doing it, its CPU time over its wall time.
    let victim_code = "import time\nwall, cpu = time.monotonic(), time.process_time()\n\
                       total = sum(i * i for i in range(3 * 10**6))\n\
                       print(round((time.process_time() - cpu) / (time.monotonic() - wall), 3))";
    let hog_data = sandbox.data_dir("hog");
    let (hog, victim) = sandbox.runtime.block_on(async {
        let request = |conversation: &str, code: &str| RunRequest {
            conversation_id: conversation.into(),
            language: "python".into(),
            code: code.into(),
            ..RunRequest::default()
        };
        let beside = async {
            let hogging = hog_data.join("hogging");
            let started = tokio::task::spawn_blocking(move || wait_for(&hogging)).await.unwrap();
            let victim = match started {
                Ok(()) => sandbox.engine.run(request("victim", victim_code), &()).await.map_err(Failed::from),
                Err(e) => Err(e),
            };
            std::fs::write(hog_data.join("stop"), "").unwrap();
            victim
        };
        tokio::join!(sandbox.engine.run(request("hog", &hog_code), &()), beside)
    });
    let (hog, victim) = (hog?, victim?);
    check_eq(hog.outcome.stdout.as_str(), "stopped\n", &describe(&hog))?;
    check_eq(victim.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&victim))?;
    let share: f64 = victim.outcome.stdout.trim().parse().map_err(|_| describe(&victim))?;
    // Fair weights give the victim about half a core or more; a bound of a tenth still holds with several busy
    // tasks beside sandlot, while a hog weighing by its processes would leave the victim ~0.03.
    check(share >= 0.1, || format!("the victim got {share} of a core beside the hog"))
}
