//! The disk quota of a conversation's `/data`, as every backend enforces it: a watchdog that measures the
//! directory while a run goes on, and a check of whether it is full (to tell a file stopped at the size limit).

use std::path::Path;
use std::time::Duration;

use crate::{Job, directory_usage};

/// How often `/data` is measured while a run goes on.
pub const DISK_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Resolves when the job's `/data` holds more than its quota, or can no longer be measured (a directory the program
/// made unreadable, a tree nested deeper than the walk goes): a quota that cannot be checked is treated as exceeded.
pub async fn quota_exceeded(job: &Job) {
    let quota = job.limits.disk_mb * 1024 * 1024;
    loop {
        tokio::time::sleep(DISK_CHECK_INTERVAL).await;
        let dir = job.workspace.clone();
        match tokio::task::spawn_blocking(move || directory_usage(&dir)).await {
            Ok(Ok((bytes, _))) if bytes > quota => return,
            Ok(Err(e)) => {
                tracing::warn!(workspace = %job.workspace.display(), "cannot measure /data, stopping the run: {e}");
                return;
            }
            _ => {}
        }
    }
}

/// Whether the job's `/data` is at (or over) its quota.
pub fn at_quota(job: &Job) -> bool {
    at_quota_path(&job.workspace, job.limits.disk_mb * 1024 * 1024)
}

fn at_quota_path(workspace: &Path, quota: u64) -> bool {
    directory_usage(workspace).is_ok_and(|(bytes, _)| bytes >= quota)
}
