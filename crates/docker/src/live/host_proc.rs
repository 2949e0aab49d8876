//! A live sandbox's processes as the host's `/proc` shows them: a host pid to the pid the container sees (the last
//! `NSpid`), its command line, CPU time and resident memory, and its children. sandlot runs beside dockerd in the
//! host's pid namespace (it binds host paths into containers), so every process of a container is visible here. A
//! process can end between two reads: every reading is an `Option`.

use sandlot_core::SandboxProcess;

/// The longest command line reported, in bytes.
const COMMAND_BYTES: usize = 256;

/// The pid `host_pid` has in its innermost pid namespace (the container's).
pub(crate) fn namespace_pid(host_pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// Whether the host pid `host_pid` is a process of the container `container` (its id in the process's cgroup
/// paths, as both cgroup drivers name them): false when sandlot does not see the host's pids (it runs in a pid
/// namespace of its own), where the number is another process or none.
pub(crate) fn in_container(host_pid: u32, container: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{host_pid}/cgroup")).is_ok_and(|cgroups| cgroups.contains(container))
}

/// The process group of `host_pid`, as the host numbers it (field 5 of its stat).
pub(crate) fn process_group(host_pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{host_pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(2)?.parse().ok()
}

/// The direct children of `host_pid` (of its main thread), as host pids.
pub(crate) fn children(host_pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{host_pid}/task/{host_pid}/children"))
        .map(|text| text.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// The process `host_pid` as the sandbox sees it; `None` for one that is exiting or a zombie (ended, waiting for the
/// init to reap it).
pub(crate) fn process(host_pid: u32) -> Option<SandboxProcess> {
    let pid = namespace_pid(host_pid)?;
    let stat = std::fs::read_to_string(format!("/proc/{host_pid}/stat")).ok()?;
    if matches!(stat.rsplit_once(')')?.1.split_whitespace().next(), Some("Z" | "X")) {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).ok()?;
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let cmdline = std::fs::read(format!("/proc/{host_pid}/cmdline")).ok()?;
    if cmdline.is_empty() {
        return None; // exiting: its memory, command line included, is already released
    }
    let mut command = String::from_utf8_lossy(&cmdline).replace('\0', " ").trim_end().to_owned();
    if command.len() > COMMAND_BYTES {
        let cut = (0..=COMMAND_BYTES).rev().find(|&i| command.is_char_boundary(i)).unwrap_or(0);
        command.truncate(cut);
    }
    Some(SandboxProcess { pid, command, cpu_seconds: cpu_seconds(host_pid)?, memory_bytes: rss_kib * 1024 })
}

/// User and system CPU time of `host_pid` (fields 14 and 15 of its stat, after the command's closing parenthesis).
fn cpu_seconds(host_pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{host_pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After ")": state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100);
    Some(ticks as f64 / per_second as f64)
}
