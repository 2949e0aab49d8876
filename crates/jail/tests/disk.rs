//! Attacks on the host through a conversation's `/data`: space hidden from the quota in what a size does not show
//! (directories, symlink targets), inodes, the server's own cost of measuring a tree, and a setuid program left
//! for the host's other users.
//! See docs/security.md, "Disk quota".

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Sandbox, check, check_eq, describe};
use libtest_mimic::Failed;
use sandlot_core::{Language, Termination};

fn main() {
    common::main(vec![
        (
            "symlink_targets_and_directories_count_towards_the_quota",
            symlink_targets_and_directories_count_towards_the_quota,
        ),
        ("empty_files_count_towards_the_inode_limit", empty_files_count_towards_the_inode_limit),
        ("measuring_a_huge_tree_costs_the_server_little_cpu", measuring_a_huge_tree_costs_the_server_little_cpu),
        ("a_setuid_file_in_data_is_out_of_other_users_reach", a_setuid_file_in_data_is_out_of_other_users_reach),
    ]);
}

/// Symlinks with 4000-byte targets and directories with long entries take a block each but have no file size:
/// 40,000 of them hold ~160 MiB. Under an 8 MiB quota the run is stopped, and what is left is near the quota.
fn symlink_targets_and_directories_count_towards_the_quota() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| {
        limits.disk_mb = 8;
        limits.timeout = Duration::from_secs(60);
    });
    let code = r#"
import os
target = "t" * 4000
os.makedirs("/data/links", exist_ok=True)
for i in range(40000):
    os.symlink(target, f"/data/links/{i}")
    if i % 100 == 0:
        os.mkdir(f"/data/d{i:0>200}")
print("done")
"#;
    let report = sandbox.run("attack", Language::Python, code);
    check_eq(report.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&report))?;
    let held = sandlot_core::directory_usage(&sandbox.data_dir("attack"), u64::MAX)?.bytes;
    check(held < 48 << 20, || format!("/data holds {held} bytes of disk under an 8 MiB quota"))
}

/// Empty files take no block but an inode each; past the inode limit the run is stopped.
fn empty_files_count_towards_the_inode_limit() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| {
        limits.disk_inodes = 1000;
        limits.timeout = Duration::from_secs(60);
    });
    let code = "import itertools\nfor i in itertools.count():\n    open(f'/data/f{i}', 'w').close()\n    if i > 200000: break\nprint('done')";
    let report = sandbox.run("attack", Language::Python, code);
    check_eq(report.outcome.termination.clone(), Termination::DiskQuotaExceeded, &describe(&report))?;
    let inodes = std::fs::read_dir(sandbox.data_dir("attack"))?.count();
    check(inodes < 200_000, || format!("the run made {inodes} files under a limit of 1000"))
}

/// CPU time this process has used (user + system), from `/proc/self/stat`.
fn own_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 1000 / 100) // USER_HZ is 100 on Linux
}

/// 200,000 files in `/data` (they take a 65 ms walk here): a run that sleeps 8 s used to cost the server (this test
/// process, which hosts the engine) two thirds of a core in walks every 250 ms; now the walk's interval grows with
/// its cost.
fn measuring_a_huge_tree_costs_the_server_little_cpu() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|limits| {
        limits.disk_inodes = 300_000;
        limits.timeout = Duration::from_secs(60);
    });
    let warm = sandbox.run("attack", Language::Bash, "true");
    check_eq(warm.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&warm))?;
    let data = sandbox.data_dir("attack");
    for d in 0..200 {
        let dir = data.join(format!("d{d}"));
        std::fs::create_dir(&dir)?;
        for f in 0..1000 {
            std::fs::File::create(dir.join(f.to_string()))?;
        }
    }
    let (cpu, wall) = (own_cpu_time(), Instant::now());
    let report = sandbox.run("attack", Language::Bash, "sleep 8");
    let (cpu, wall) = (own_cpu_time() - cpu, wall.elapsed());
    check_eq(report.outcome.termination.clone(), Termination::Exited { code: 0 }, &describe(&report))?;
    // Before: ~0.66 of a core. The bound (a fifth of a core) leaves room for a slow, loaded machine.
    check(cpu < wall / 5, || format!("the server used {cpu:?} of CPU during a {wall:?} idle run"))
}

/// Runs `command` on the host as an unprivileged user (uid and gid 65534, no groups); its exit code and output.
pub fn as_other_user(command: &str) -> (i32, String) {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", command])
        .output()
        .expect("setpriv");
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

/// A run copies bash into `/data` and tries to make it setuid and setgid (a backdoor for the host's local users,
/// who would run it as the sandbox uid). `/data` is mounted nosuid,nodev, and no other host user can reach the
/// conversation's directory, to run the copy or even list it.
fn a_setuid_file_in_data_is_out_of_other_users_reach() -> Result<(), Failed> {
    let sandbox = Sandbox::new(|_| {});
    let code = "cp /bin/bash /data/sh; chmod 6755 /data/sh; chmod 755 /data; grep ' /data ' /proc/self/mountinfo";
    let report = sandbox.run("attack", Language::Bash, code);
    let mount_options = report.outcome.stdout.split_whitespace().nth(5).unwrap_or_default().to_owned();
    check(mount_options.split(',').any(|o| o == "nosuid") && mount_options.split(',').any(|o| o == "nodev"), || {
        format!("/data is mounted {mount_options:?}\n{}", describe(&report))
    })?;
    let data = sandbox.data_dir("attack");
    check(data.join("sh").exists(), || format!("the copy was not made\n{}", describe(&report)))?;
    for command in [format!("ls {}", data.display()), format!("{}/sh -p -c id", data.display())] {
        let (code, output) = as_other_user(&command);
        check(code != 0 && output.contains("Permission denied"), || {
            format!("another host user ran `{command}`: exit {code}\n{output}")
        })?;
    }
    Ok(())
}
