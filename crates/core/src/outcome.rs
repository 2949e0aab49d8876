//! How a run ended, and what it printed.

use std::time::Duration;

/// Why the program stopped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Termination {
    /// The program exited on its own with this code.
    Exited { code: i32 },
    /// The program was killed by a signal it did not catch (not by sandlot).
    Signaled { signal: i32 },
    /// The deadline passed; sandlot killed the whole process tree.
    TimedOut,
    /// The run hit its memory limit and the kernel's OOM killer stopped it.
    OutOfMemory,
    /// `/data` grew past its quota; sandlot killed the run.
    DiskQuotaExceeded,
    /// The run was cancelled by its caller.
    Cancelled,
}

impl Termination {
    /// The shell-style exit code: the program's own, 128+N for signal N, 124 for a timeout (as `timeout(1)`),
    /// 137 for out of memory (SIGKILL), 125 for a full disk quota, 130 when cancelled.
    pub fn exit_code(&self) -> i32 {
        match self {
            Termination::Exited { code } => *code,
            Termination::Signaled { signal } => 128 + signal,
            Termination::TimedOut => 124,
            Termination::OutOfMemory => 137,
            Termination::DiskQuotaExceeded => 125,
            Termination::Cancelled => 130,
        }
    }

    /// The kind's name, as serialized (`exited`, `signaled`, `timed_out`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Termination::Exited { .. } => "exited",
            Termination::Signaled { .. } => "signaled",
            Termination::TimedOut => "timed_out",
            Termination::OutOfMemory => "out_of_memory",
            Termination::DiskQuotaExceeded => "disk_quota_exceeded",
            Termination::Cancelled => "cancelled",
        }
    }

    /// A one-line explanation for anything but a normal exit, to append to the output.
    pub fn diagnostic(&self, timeout: Duration) -> Option<String> {
        match self {
            Termination::Exited { .. } => None,
            Termination::Signaled { signal } => Some(format!("killed by signal {signal}")),
            Termination::TimedOut => Some(format!("timed out after {} s; the run was killed", timeout.as_secs_f64())),
            Termination::OutOfMemory => Some("out of memory: the run hit its memory limit and was killed".into()),
            Termination::DiskQuotaExceeded => Some("disk quota exceeded: /data grew past its limit".into()),
            Termination::Cancelled => Some("cancelled".into()),
        }
    }
}

/// The result of running a program, whatever it did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunOutcome {
    pub termination: Termination,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration: Duration,
    /// The connections the run opened or tried beyond its loopback (a leashed run's audit trail, see `network`),
    /// and how many more there were than the trail keeps.
    pub connections: Vec<crate::ConnectionRecord>,
    pub connections_dropped: u64,
}

impl RunOutcome {
    /// An outcome with no output (a run cancelled before it printed anything).
    pub fn empty(termination: Termination, duration: Duration) -> Self {
        Self {
            termination,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            duration,
            connections: Vec::new(),
            connections_dropped: 0,
        }
    }

    /// The outcome of a program that ended this way, with what was kept of its two streams.
    pub fn from_streams(
        termination: Termination,
        stdout: crate::CapturedStream,
        stderr: crate::CapturedStream,
        duration: Duration,
    ) -> Self {
        Self {
            termination,
            stdout_truncated: stdout.truncated(),
            stderr_truncated: stderr.truncated(),
            stdout: stdout.into_text(),
            stderr: stderr.into_text(),
            duration,
            connections: Vec::new(),
            connections_dropped: 0,
        }
    }

    /// True only for exit code 0.
    pub fn success(&self) -> bool {
        self.termination == Termination::Exited { code: 0 }
    }

    /// See [`Termination::exit_code`].
    pub fn exit_code(&self) -> i32 {
        self.termination.exit_code()
    }

    /// Whether either stream was cut.
    pub fn truncated(&self) -> bool {
        self.stdout_truncated || self.stderr_truncated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_shell_conventions() {
        assert_eq!(Termination::Exited { code: 3 }.exit_code(), 3);
        assert_eq!(Termination::Signaled { signal: 9 }.exit_code(), 137);
        assert_eq!(Termination::TimedOut.exit_code(), 124);
    }

    #[test]
    fn kinds_are_the_serialized_tags() {
        let all = [
            Termination::Exited { code: 0 },
            Termination::Signaled { signal: 9 },
            Termination::TimedOut,
            Termination::OutOfMemory,
            Termination::DiskQuotaExceeded,
            Termination::Cancelled,
        ];
        for termination in all {
            let serialized = serde_json::to_value(&termination).unwrap_or_default();
            assert_eq!(serialized["kind"], termination.kind(), "{termination:?}");
        }
    }
}
