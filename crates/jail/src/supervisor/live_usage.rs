//! What a live sandbox uses and runs, read on the host: its cgroup's counters ([`usage`]) and its processes from
//! `/proc` ([`processes`]). The sandbox's processes are its cgroup's members (only what pid 1 starts joins it, so
//! sandlot's own init and pid 1 are never among them); without cgroups, the processes of pid 1's pid namespace but
//! pid 1.
//!
//! CPU time comes from the cgroup on v2 (`cpu.stat`). A v1 `cpu` group does not count it: there it is what the
//! processes still running used, with what their reaped children used, plus what pid 1 reaped (every process of the
//! sandbox ends as a child of pid 1 or of another of its processes); only what a process's children left unreaped
//! when they ended unwaited (`SIGCHLD` ignored) is missed.

use sandlot_core::{SandboxProcess, SandboxUsage};

use super::cgroup::RunCgroup;
use super::processes::run_processes;

/// Longest command line reported, in bytes.
const COMMAND_BYTES: usize = 256;

/// The sandbox's usage now: `cgroup`'s counters, or without one the processes' resident memory against `limits`.
/// `reaped_elsewhere`: CPU seconds of its processes that pid 1 did not reap (forked ones), which a v1 cgroup misses.
pub fn usage(
    cgroup: Option<&RunCgroup>,
    pid1: i32,
    limits: &sandlot_core::Limits,
    reaped_elsewhere: f64,
) -> SandboxUsage {
    let pids = sandbox_pids(cgroup, pid1);
    let cpu_of_processes = || {
        let running: f64 =
            pids.iter().filter_map(|pid| stat_of(*pid)).map(|s| s.cpu_seconds + s.children_seconds).sum();
        let reaped_by_pid1 = if pid1 > 0 { stat_of(pid1).map_or(0.0, |s| s.children_seconds) } else { 0.0 };
        running + reaped_by_pid1 + reaped_elsewhere
    };
    match cgroup.map(RunCgroup::usage) {
        Some(counters) => SandboxUsage {
            memory_bytes: counters.memory_bytes,
            memory_limit_bytes: counters.memory_limit_bytes,
            pids: counters.pids,
            pids_limit: counters.pids_limit,
            cpu_seconds: counters.cpu_usec.map_or_else(cpu_of_processes, |usec| usec as f64 / 1e6),
            oom_kills: counters.oom_kills,
        },
        None => SandboxUsage {
            memory_bytes: pids.iter().filter_map(|pid| stat_of(*pid)).map(|s| s.rss_bytes).sum(),
            memory_limit_bytes: limits.memory_mb * 1024 * 1024,
            pids: pids.len() as u64,
            pids_limit: limits.pids,
            cpu_seconds: cpu_of_processes(),
            oom_kills: 0,
        },
    }
}

/// The sandbox's processes now, as `ps` would show them from inside.
pub fn processes(cgroup: Option<&RunCgroup>, pid1: i32) -> Vec<SandboxProcess> {
    let mut processes: Vec<SandboxProcess> = sandbox_pids(cgroup, pid1)
        .into_iter()
        .filter_map(|pid| {
            let stat = stat_of(pid)?;
            Some(SandboxProcess {
                pid: sandbox_pid(pid)?,
                command: command_line(pid),
                cpu_seconds: stat.cpu_seconds,
                memory_bytes: stat.rss_bytes,
            })
        })
        .collect();
    processes.sort_by_key(|process| process.pid);
    processes
}

/// Host pids of the sandbox's processes, pid 1 left out.
fn sandbox_pids(cgroup: Option<&RunCgroup>, pid1: i32) -> Vec<i32> {
    let mut pids = run_processes(cgroup, pid1);
    pids.retain(|pid| *pid != pid1);
    pids
}

/// What `/proc/<pid>/stat` and `statm` say of a process.
struct Stat {
    /// Its own CPU time (every thread's).
    cpu_seconds: f64,
    /// What the children it reaped used.
    children_seconds: f64,
    rss_bytes: u64,
}

fn stat_of(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) as f64;
    // SAFETY: sysconf takes an integer and returns one.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
    let resident_pages = statm.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Some(Stat {
        cpu_seconds: (ticks(14) + ticks(15)) / per_second,
        children_seconds: (ticks(16) + ticks(17)) / per_second,
        rss_bytes: resident_pages * page,
    })
}

/// A process's pid in the innermost pid namespace it is in (the last field of `NSpid`): the sandbox's.
fn sandbox_pid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|line| line.strip_prefix("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// A process's command line, arguments joined by spaces, cut to [`COMMAND_BYTES`] (on a character boundary).
fn command_line(pid: i32) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).replace('\0', " ");
    cut(text.trim_end(), COMMAND_BYTES).to_owned()
}

fn cut(text: &str, bytes: usize) -> &str {
    if text.len() <= bytes {
        return text;
    }
    let mut end = bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_cut_on_a_character_boundary() {
        assert_eq!(cut("python3 -c pass", 256), "python3 -c pass");
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(cut(&"x".repeat(300), 256).len(), 256);
    }

    #[test]
    fn this_process_reads_as_one() {
        let me = std::process::id() as i32;
        assert!(stat_of(me).is_some_and(|stat| stat.rss_bytes > 0));
        assert!(sandbox_pid(me).is_some());
        assert!(!command_line(me).is_empty());
    }
}
