//! The host pids of a run's processes, for the quota's watchdog (files they hold open after unlinking them count
//! towards a `/data` that is not a disk image): the members of the run's cgroup, which only the program's processes
//! join; without cgroups, the processes in the pid namespace of the run's pid 1 (a scan of `/proc`).

use super::cgroup::RunCgroup;

/// The run's processes now; empty before pid 1 has been reported (without cgroups) or when none can be read.
pub fn run_processes(cgroup: Option<&RunCgroup>, pid1: i32) -> Vec<i32> {
    let mut pids: Vec<i32> = match cgroup {
        Some(cgroup) => cgroup
            .procs_files()
            .iter()
            .filter_map(|procs| std::fs::read_to_string(procs).ok())
            .flat_map(|text| text.lines().filter_map(|line| line.parse().ok()).collect::<Vec<i32>>())
            .collect(),
        None if pid1 > 0 => in_pid_namespace_of(pid1),
        None => Vec::new(),
    };
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The processes in the pid namespace of `pid`.
fn in_pid_namespace_of(pid: i32) -> Vec<i32> {
    let namespace = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let Some(wanted) = namespace(&pid.to_string()) else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()))
        .filter(|pid| namespace(&pid.to_string()).as_ref() == Some(&wanted))
        .collect()
}
