//! How a run ended, in sandlot's one vocabulary ([`Termination`]): from how the supervisor's wait ended, the init's
//! last event, and what the cgroup and the quota say. Pure, so every case is tested without a sandbox.

use std::process::ExitStatus;

use sandlot_core::{Stop, Termination};

use super::error::Error;
use crate::protocol::InitEvent;

/// How the supervisor's wait for a run ended.
#[derive(Debug)]
pub enum Waited {
    /// Pid 1 sent [`InitEvent::ProgramEnded`] (every other process of the run is dead and reaped by then).
    ProgramEnded,
    /// The init exited without that event: a setup failure, or a crash.
    InitExited(ExitStatus),
    /// sandlot stopped the run: its deadline passed, or its caller cancelled it.
    Stopped(Stop),
}

/// What else is known when the run is over.
#[derive(Debug, Default, Clone, Copy)]
pub struct Evidence {
    /// The run's memory cgroup counted an OOM kill.
    pub oom_killed: bool,
    /// The conversation's `/data` is at its quota.
    pub at_quota: bool,
}

/// The run's [`Termination`], or the supervisor's error when the sandbox never ran the program. A program killed by
/// `RLIMIT_FSIZE` (the quota as the largest file) shows as SIGXFSZ, or, through a shell, as the shell's exit code
/// 128+SIGXFSZ with `/data` at its quota.
pub fn termination(waited: &Waited, last_event: Option<&InitEvent>, evidence: Evidence) -> Result<Termination, Error> {
    if let Waited::Stopped(stop) = waited {
        return Ok(stop.termination());
    }
    let xfsz = libc::SIGXFSZ;
    Ok(match last_event {
        Some(InitEvent::ProgramEnded(Termination::Exited { code })) if *code == 128 + xfsz && evidence.at_quota => {
            Termination::DiskQuotaExceeded
        }
        Some(InitEvent::ProgramEnded(Termination::Signaled { signal }))
            if *signal == libc::SIGKILL && evidence.oom_killed =>
        {
            Termination::OutOfMemory
        }
        Some(InitEvent::ProgramEnded(Termination::Signaled { signal })) if *signal == xfsz => {
            Termination::DiskQuotaExceeded
        }
        Some(InitEvent::ProgramEnded(termination)) => termination.clone(),
        Some(InitEvent::SetupFailed { step, error }) => {
            return Err(Error::Setup { step: step.clone(), message: error.clone() });
        }
        _ if evidence.oom_killed => Termination::OutOfMemory,
        _ => {
            let status = match waited {
                Waited::InitExited(status) => status.to_string(),
                _ => "still running".into(),
            };
            return Err(Error::NoReport { status });
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn ended(termination: Termination) -> Option<InitEvent> {
        Some(InitEvent::ProgramEnded(termination))
    }

    fn of(event: Option<InitEvent>, evidence: Evidence) -> Result<Termination, Error> {
        termination(&Waited::ProgramEnded, event.as_ref(), evidence)
    }

    const NONE: Evidence = Evidence { oom_killed: false, at_quota: false };
    const OOM: Evidence = Evidence { oom_killed: true, at_quota: false };
    const FULL: Evidence = Evidence { oom_killed: false, at_quota: true };

    #[test]
    fn the_programs_own_end_is_passed_on() {
        assert_eq!(of(ended(Termination::Exited { code: 3 }), NONE).unwrap(), Termination::Exited { code: 3 });
        assert_eq!(of(ended(Termination::Signaled { signal: 15 }), OOM).unwrap(), Termination::Signaled { signal: 15 });
    }

    #[test]
    fn a_sigkill_with_an_oom_kill_counted_is_out_of_memory() {
        assert_eq!(of(ended(Termination::Signaled { signal: 9 }), OOM).unwrap(), Termination::OutOfMemory);
        assert_eq!(of(ended(Termination::Signaled { signal: 9 }), NONE).unwrap(), Termination::Signaled { signal: 9 });
        assert_eq!(of(None, OOM).unwrap(), Termination::OutOfMemory, "killed before its end was reported");
    }

    #[test]
    fn sigxfsz_is_the_disk_quota_directly_or_through_a_shell_at_quota() {
        let xfsz = libc::SIGXFSZ;
        assert_eq!(of(ended(Termination::Signaled { signal: xfsz }), NONE).unwrap(), Termination::DiskQuotaExceeded);
        let shell = ended(Termination::Exited { code: 128 + xfsz });
        assert_eq!(of(shell.clone(), FULL).unwrap(), Termination::DiskQuotaExceeded);
        assert_eq!(of(shell, NONE).unwrap(), Termination::Exited { code: 128 + xfsz }, "not at quota: the code");
    }

    #[test]
    fn a_stop_wins_over_everything_else() {
        let stopped = Waited::Stopped(Stop::Deadline);
        let event = ended(Termination::Exited { code: 0 });
        assert_eq!(termination(&stopped, event.as_ref(), OOM).unwrap(), Termination::TimedOut);
        assert_eq!(termination(&Waited::Stopped(Stop::Cancelled), None, NONE).unwrap(), Termination::Cancelled);
    }

    #[test]
    fn a_failed_setup_or_a_silent_init_is_an_error_naming_why() {
        let failed = Some(InitEvent::SetupFailed { step: "pivot_root".into(), error: "EPERM".into() });
        assert!(of(failed, NONE).unwrap_err().to_string().contains("pivot_root: EPERM"));
        let crashed = Waited::InitExited(ExitStatus::from_raw(9));
        let started = InitEvent::Pid1Started { pid: 7 };
        let error = termination(&crashed, Some(&started), NONE).unwrap_err().to_string();
        assert!(error.contains("without a report") && error.contains("signal: 9"), "{error}");
    }
}
