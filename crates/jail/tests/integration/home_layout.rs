//! The Home layout (Baponi's): the conversation's directory at `/home/baponi`, and `/data` an empty scratch
//! directory of the run's own. Each test tries, from inside the sandbox, to break one promise of that layout, and
//! asserts it holds (docs/security.md, "The Home layout").

use crate::common;

use common::{Sandbox, check, check_eq, check_not_on_host, describe};
use libtest_mimic::Failed;
use sandlot_core::{Error as CoreError, Language, Layout, RunReport, RunRequest, Termination};

const HOME: Layout = Layout::Home { path: "/home/baponi" };

pub fn trials() -> Vec<libtest_mimic::Trial> {
    common::trials(
        "home_layout",
        vec![
            (
                "home_persists_and_scratch_data_is_gone_in_the_next_run",
                home_persists_and_scratch_data_is_gone_in_the_next_run,
            ),
            ("a_home_run_writes_only_home_data_tmp_and_shm", a_home_run_writes_only_home_data_tmp_and_shm),
            ("a_symlink_planted_in_home_reaches_nothing_outside", a_symlink_planted_in_home_reaches_nothing_outside),
            ("filling_scratch_data_stops_at_its_size", filling_scratch_data_stops_at_its_size),
            ("a_home_path_under_a_system_dir_is_refused", a_home_path_under_a_system_dir_is_refused),
        ],
    )
}

fn run_home(sandbox: &Sandbox, conversation: &str, language: Language, code: &str) -> RunReport {
    sandbox.run_in(HOME, conversation, language, code)
}

fn home_persists_and_scratch_data_is_gone_in_the_next_run() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "pwd; echo $HOME; echo scratch > /data/scratch.txt; echo kept > /home/baponi/kept.txt; ls -A /data; \
                printf '#!/bin/sh\\necho ran\\n' > /data/s.sh; chmod +x /data/s.sh; /data/s.sh";
    let first = run_home(&sandbox, "home", Language::Bash, code);
    check_eq(first.outcome.stdout.as_str(), "/data\n/home/baponi\nscratch.txt\nran\n", &describe(&first))?;
    let names: Vec<&str> = first.files.files.iter().map(|f| f.path.as_str()).collect();
    check_eq(names, vec!["kept.txt"], "files the result lists")?;

    let second =
        run_home(&sandbox, "home", Language::Bash, "ls -A /data; cat /home/baponi/kept.txt; ls -A /home/baponi");
    check_eq(second.outcome.stdout.as_str(), "kept\nkept.txt\n", &describe(&second))?;
    let host = sandbox.data_dir("home");
    check_eq(std::fs::read_to_string(host.join("kept.txt"))?.as_str(), "kept\n", "the host's copy")?;
    check(!host.join("scratch.txt").exists(), || "the scratch file reached the conversation's directory".into())
}

fn a_home_run_writes_only_home_data_tmp_and_shm() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let marker = format!("sandlot-home-attack-{}", std::process::id());
    let dirs = [
        "/",
        "/home",
        "/etc",
        "/usr/bin",
        "/root",
        "/bin",
        "/lib",
        "/dev",
        "/proc/sys/kernel",
        "/home/baponi",
        "/data",
        "/tmp",
        "/dev/shm",
    ];
    let code = format!(
        r#"{probe}
import os
for d in ["/home/other", "/opt"]:
    try:
        os.mkdir(d)
        print(d, "MADE")
    except OSError:
        print(d, "refused")
"#,
        probe = common::write_probe(&dirs, &marker)
    );
    let report = run_home(&sandbox, "home", Language::Python, &code);
    let expected = "/ refused\n/home refused\n/etc refused\n/usr/bin refused\n/root refused\n/bin refused\n/lib refused\n\
                    /dev refused\n/proc/sys/kernel refused\n/home/baponi WROTE\n/data WROTE\n/tmp WROTE\n/dev/shm WROTE\n\
                    /home/other refused\n/opt refused\n";
    check_eq(report.outcome.stdout.as_str(), expected, &describe(&report))?;
    check_not_on_host(&marker, &["/", "/home", "/etc", "/usr/bin", "/root"])?;
    check(sandbox.data_dir("home").join(&marker).exists(), || "the /home/baponi write did not reach the host".into())
}

/// A run leaves symlinks to `/`, `/etc` and a host file in the conversation's directory; the next run follows
/// them and lands in its own sandbox (read-only, the host's files absent), and the server never follows them.
fn a_symlink_planted_in_home_reaches_nothing_outside() -> Result<(), Failed> {
    let secret_dir = tempfile::tempdir()?;
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret")?;
    let sandbox = Sandbox::new(|_| {});
    let plant = format!(
        "ln -s / /home/baponi/root; ln -s /etc /home/baponi/etc; ln -s {} /home/baponi/leak; echo real > /home/baponi/real.txt",
        secret.display()
    );
    let first = run_home(&sandbox, "home", Language::Bash, &plant);
    check_eq(first.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&first))?;
    let follow = format!(
        r#"
for path in ["/home/baponi/leak", "/home/baponi/root{secret}", "/home/baponi/root/etc/shadow", "/home/baponi/etc/shadow"]:
    try:
        print(path, "READ", open(path).read())
    except OSError as e:
        print(path, type(e).__name__)
for path in ["/home/baponi/root/etc/pwned", "/home/baponi/etc/pwned", "/home/baponi/root/pwned", "/home/baponi/root/usr/pwned"]:
    try:
        open(path, "w").write("x")
        print(path, "WROTE")
    except OSError as e:
        print(path, "refused")
"#,
        secret = secret.display()
    );
    let second = run_home(&sandbox, "home", Language::Python, &follow);
    let expected = format!(
        "/home/baponi/leak FileNotFoundError\n/home/baponi/root{secret} FileNotFoundError\n\
         /home/baponi/root/etc/shadow FileNotFoundError\n/home/baponi/etc/shadow FileNotFoundError\n\
         /home/baponi/root/etc/pwned refused\n/home/baponi/etc/pwned refused\n/home/baponi/root/pwned refused\n\
         /home/baponi/root/usr/pwned refused\n",
        secret = secret.display()
    );
    check_eq(second.outcome.stdout.as_str(), expected.as_str(), &describe(&second))?;
    let names: Vec<&str> = second.files.files.iter().map(|f| f.path.as_str()).collect();
    check_eq(names, vec!["real.txt"], "listed files")?;
    common::check_server_refuses(&sandbox, "home", &["leak", "root/etc/passwd", "etc/passwd"])
}

/// The scratch `/data` is a tmpfs of at most the disk quota and half the memory limit (it is memory, counted in
/// the run's memory cgroup): filling it fails with ENOSPC at that size, the run ends normally, and nothing of it
/// reaches the host's disk or outlives the run.
fn filling_scratch_data_stops_at_its_size() -> Result<(), Failed> {
    // (disk quota, memory limit, expected size of /data): the quota binds, then half the memory.
    for (disk_mb, memory_mb, size_mb) in [(16, 256, 16), (1024, 64, 32)] {
        let sandbox = Sandbox::new(|limits| {
            limits.disk_mb = disk_mb;
            limits.memory_mb = memory_mb;
        });
        let code = "dd if=/dev/zero of=/data/fill bs=1M count=100 2>&1; echo exit=$?; du -m /data/fill | cut -f1";
        let report = run_home(&sandbox, "fill", Language::Bash, code);
        let out = &report.outcome.stdout;
        check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
        // Past the quota, `RLIMIT_FSIZE` (the quota too) may stop `dd` before the tmpfs is full.
        let stopped =
            out.contains("No space left on device") || report.outcome.stderr.contains("File size limit exceeded");
        check(stopped && !out.contains("exit=0\n"), || describe(&report))?;
        check(out.ends_with(&format!("\n{size_mb}\n")) || out.ends_with(&format!("\n{}\n", size_mb - 1)), || {
            format!("/data held other than {size_mb} MiB\n{}", describe(&report))
        })?;
        let usage = sandlot_core::directory_usage(&sandbox.data_dir("fill"), u64::MAX)?;
        check_eq(usage.inodes, 0, "files in the conversation's directory")?;
        let next = run_home(&sandbox, "fill", Language::Bash, "ls -A /data; echo done");
        check_eq(next.outcome.stdout.as_str(), "done\n", &describe(&next))?;
    }
    Ok(())
}

fn a_home_path_under_a_system_dir_is_refused() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    for path in ["/etc/baponi", "/data", "/", "home/baponi", "/tmp/x", "/lib64/x", "/proc/1"] {
        let request = RunRequest {
            conversation_id: "refused".into(),
            language: "bash".into(),
            code: "echo ran".into(),
            layout: Layout::Home { path },
            ..RunRequest::default()
        };
        match sandbox.runtime.block_on(sandbox.engine.run(request, &())) {
            Err(CoreError::InvalidArgument { field: "layout", .. }) => {}
            other => return Err(format!("{path}: expected an invalid layout, got {other:?}").into()),
        }
    }
    check(!sandbox.data_dir("refused").exists(), || "a refused run created its conversation".into())
}
