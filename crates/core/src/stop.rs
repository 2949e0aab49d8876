//! Why sandlot stops a run that has not ended on its own: its deadline passed, its `/data` outgrew the quota, or
//! its caller cancelled it. Every backend waits for its sandbox against [`stop_reason`].

use std::time::Duration;

use crate::{Job, Termination, quota_exceeded};

/// A reason to kill a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Deadline,
    DiskQuota,
    Cancelled,
}

impl Stop {
    /// How a run stopped for this reason ended.
    pub fn termination(self) -> Termination {
        match self {
            Stop::Deadline => Termination::TimedOut,
            Stop::DiskQuota => Termination::DiskQuotaExceeded,
            Stop::Cancelled => Termination::Cancelled,
        }
    }
}

/// Resolves with the first reason to stop `job`: `deadline` from now, the disk quota, or its cancellation.
/// `processes` lists the run's host pids, for the quota (see [`quota_exceeded`]).
pub async fn stop_reason(job: &Job, deadline: Duration, processes: &(dyn Fn() -> Vec<i32> + Sync)) -> Stop {
    tokio::select! {
        () = tokio::time::sleep(deadline) => Stop::Deadline,
        () = quota_exceeded(job, processes) => Stop::DiskQuota,
        () = job.cancel.cancelled() => Stop::Cancelled,
    }
}
