//! The disk quota of a conversation's `/data`, as every backend enforces it: a watchdog that measures the
//! directory while a run goes on, and a check of whether it is full (to tell a file stopped at the size limit).
//!
//! The watchdog counts what the host's disk holds (allocated blocks of every inode, and inodes; see
//! [`directory_usage`]), not file sizes, so sparse or preallocated files, directories and symlinks cannot hide
//! space. It measures at most every [`DISK_CHECK_INTERVAL`], and waits [`WALK_COST_FACTOR`] times as long as the
//! last walk took before the next, so a tree that is costly to walk costs the server at most about 1/20 of a core
//! per run (the walk is the server's work, outside any cgroup). What a run writes between two measurements is the
//! watchdog's slack; `docs/security.md` says how large it can be, and what the kernel's project quota adds.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::{Job, directory_usage};

/// The shortest time between two measurements of `/data` while a run goes on.
pub const DISK_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// The wait before the next measurement is at least this many times as long as the last one took.
pub const WALK_COST_FACTOR: u32 = 20;

/// The longest wait between two measurements, however costly the walk.
const MAX_DISK_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Resolves when the job's `/data` holds more than its quota (bytes or inodes), or can no longer be measured (a
/// directory the program made unreadable, a tree nested deeper than the walk goes): a quota that cannot be checked
/// is treated as exceeded.
pub async fn quota_exceeded(job: &Job) {
    let quota = job.limits.disk_mb * 1024 * 1024;
    let mut wait = DISK_CHECK_INTERVAL;
    loop {
        tokio::time::sleep(wait).await;
        let dir = job.workspace.clone();
        let max_inodes = job.limits.disk_inodes;
        let measured = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            (directory_usage(&dir, max_inodes), started.elapsed())
        })
        .await;
        match measured {
            Ok((Ok(usage), _)) if usage.bytes > quota => return,
            Ok((Err(e), _)) => {
                tracing::warn!(workspace = %job.workspace.display(), "/data is over its quota or cannot be measured, stopping the run: {e}");
                return;
            }
            Ok((Ok(_), took)) => wait = next_wait(took),
            Err(_) => {} // the blocking pool is shutting down
        }
    }
}

/// The wait before the next measurement, when the last one took `took`.
fn next_wait(took: Duration) -> Duration {
    (took * WALK_COST_FACTOR).clamp(DISK_CHECK_INTERVAL, MAX_DISK_CHECK_INTERVAL)
}

/// Whether the job's `/data` is at (or over) its quota.
pub fn at_quota(job: &Job) -> bool {
    at_quota_path(&job.workspace, job.limits.disk_mb * 1024 * 1024, job.limits.disk_inodes)
}

fn at_quota_path(workspace: &Path, quota: u64, max_inodes: u64) -> bool {
    directory_usage(workspace, max_inodes).map_or(true, |usage| usage.bytes >= quota)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_costly_walk_waits_twenty_times_as_long_within_bounds() {
        assert_eq!(next_wait(Duration::from_millis(1)), DISK_CHECK_INTERVAL);
        assert_eq!(next_wait(Duration::from_millis(100)), Duration::from_secs(2));
        assert_eq!(next_wait(Duration::from_secs(3)), MAX_DISK_CHECK_INTERVAL);
    }
}
