//! Who owns a run's row: the server process that accepted it, named `<pid>:<start time>` (the start time tells a
//! reused pid apart), and `@<hostname>` after it when the history is shared by many machines (PostgreSQL). Crash
//! recovery marks interrupted only the runs of a process of this machine that is gone: another machine's processes
//! cannot be seen from here, so their runs are left alone (and count as live) whatever state they are in.

/// What is known of a row's owner from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owner {
    /// A process of this machine that still runs (this one, or another server on the same root).
    Alive,
    /// A process of this machine that is gone: its unfinished runs were interrupted.
    Gone,
    /// A process of another machine: alive or not, it is that machine's to recover.
    Elsewhere,
}

/// This process as rows name it; with this machine's name when `shared` (a history many machines use).
pub(super) fn this_process(shared: bool) -> String {
    let process = process_identity(std::process::id()).unwrap_or_default();
    match shared {
        true => format!("{process}@{}", hostname()),
        false => process,
    }
}

/// What is known of the owner a row names.
pub(super) fn of(server: &str) -> Owner {
    let (process, host) = match server.split_once('@') {
        Some((process, host)) => (process, Some(host)),
        None => (server, None),
    };
    if host.is_some_and(|host| host != hostname()) {
        return Owner::Elsewhere;
    }
    let Some(pid) = process.split(':').next().and_then(|pid| pid.parse::<u32>().ok()) else { return Owner::Gone };
    match process_identity(pid).as_deref() == Some(process) {
        true => Owner::Alive,
        false => Owner::Gone,
    }
}

/// `<pid>:<start time>` of a process, from `/proc/<pid>/stat`.
fn process_identity(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces, inside parentheses); start time is field 22.
    let after_name = &stat[stat.rfind(')')? + 2..];
    let start_time = after_name.split_whitespace().nth(19)?;
    Some(format!("{pid}:{start_time}"))
}

/// This machine's name (its UTS namespace's: a container's own).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|name| name.trim().to_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_named_by_pid_and_start_time_and_its_machine_when_shared() {
        let me = this_process(false);
        assert!(me.starts_with(&format!("{}:", std::process::id())), "{me}");
        assert_eq!(of(&me), Owner::Alive);
        assert_eq!(this_process(true), format!("{me}@{}", hostname()));
        assert_eq!(of(&this_process(true)), Owner::Alive);
        assert_eq!(of(&format!("{}:0", std::process::id())), Owner::Gone, "a reused pid is another process");
        assert_eq!(of(&format!("{}:0@{}", std::process::id(), hostname())), Owner::Gone);
        assert_eq!(of("not a process"), Owner::Gone);
        assert_eq!(of(&format!("{me}@another-machine")), Owner::Elsewhere, "alive here, but not this machine's");
        assert_eq!(of("4194999:1@another-machine"), Owner::Elsewhere);
    }
}
