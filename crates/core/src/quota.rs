//! The disk quota of a conversation's `/data`, as every backend enforces it: a watchdog that measures the
//! directory while a run goes on, and checks of whether it is full (to tell a file stopped at the size limit) or
//! over its quota (a run that ends so is reported as over it).
//!
//! Where `/data` is a disk image (`disk_image.rs`) the kernel bounds it, and a measurement is one `statvfs` of its
//! filesystem's counters: no walk, whatever the tree, every [`DISK_CHECK_INTERVAL`]. Elsewhere (not root, no loop
//! devices, a conversation an older version made) the watchdog walks the tree: it counts what the host's disk
//! holds (allocated blocks of every inode, and every entry; see [`directory_usage`]), not file sizes, so sparse or
//! preallocated files, directories, symlinks and links cannot hide space; the walk stops at the inode limit, and
//! the next waits [`WALK_COST_FACTOR`] times as long as the last took, so a tree costly to walk costs the server at
//! most about 1/20 of a core per run (the walk is the server's work, outside any cgroup). What a run writes between
//! two walks is that watchdog's slack; `docs/security.md` says how large it can be.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::{DiskUsage, Job, directory_usage};

/// The shortest time between two measurements of `/data` while a run goes on.
pub const DISK_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// The wait before the next measurement is at least this many times as long as the last one took.
pub const WALK_COST_FACTOR: u32 = 20;

/// The longest wait between two measurements, however costly the walk.
const MAX_DISK_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Resolves when the job's `/data` or one of its writable volumes holds more than its quota (bytes or inodes), or can
/// no longer be measured (a directory the program made unreadable, a tree nested deeper than the walk goes): a
/// quota that cannot be checked is treated as exceeded.
///
/// `processes` lists the run's processes (host pids), whose files unlinked while open count towards a `/data` that is
/// not a disk image (see `unlinked_files.rs`); empty where the backend cannot tell.
pub async fn quota_exceeded(job: &Job, processes: &(dyn Fn() -> Vec<i32> + Sync)) {
    let mut wait = DISK_CHECK_INTERVAL;
    loop {
        tokio::time::sleep(wait).await;
        let (dir, mounts, limits) = (job.workspace.clone(), job.mounts.clone(), job.limits.clone());
        let pids = processes();
        let measured = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let over = walked_over_quota(&dir, &limits, &pids).and_then(|over| match over {
                true => Ok(true),
                false => volumes_over_quota(&mounts, &limits),
            });
            (over, started.elapsed())
        })
        .await;
        match measured {
            Ok((Ok(true), _)) => return,
            Ok((Err(e), _)) => {
                tracing::warn!(workspace = %job.workspace.display(), "/data or a writable volume is over its quota or cannot be measured, stopping the run: {e}");
                return;
            }
            Ok((Ok(false), took)) => wait = next_wait(took),
            Err(_) => {} // the blocking pool is shutting down
        }
    }
}

/// [`conversation_over_quota`], where a `/data` that is not a disk image also counts the files `pids` hold open
/// after unlinking them.
fn walked_over_quota(files: &Path, limits: &crate::Limits, pids: &[i32]) -> std::io::Result<bool> {
    if crate::disk_image::is_mounted(files)? {
        return conversation_over_quota(files, limits);
    }
    let usage = directory_usage(files, limits.disk_inodes)?;
    let held = crate::unlinked_files::unlinked_open_bytes(pids, crate::unlinked_files::device_of(files));
    Ok(usage.bytes + held > limits.disk_mb * 1024 * 1024 || usage.inodes > limits.disk_inodes)
}

/// Whether a conversation's `/data` holds more than the quota of `limits`, bytes or entries.
fn conversation_over_quota(files: &Path, limits: &crate::Limits) -> std::io::Result<bool> {
    let usage = measure_conversation(files, limits.disk_inodes)?;
    Ok(usage.bytes > limits.disk_mb * 1024 * 1024 || usage.inodes > limits.disk_inodes)
}

/// Whether a writable mount (a volume) holds more than its quota (see [`crate::Mount::quota_bytes`]): a walk of
/// its tree, bounded by the inode limit like a conversation's; one it cannot measure is over.
pub fn volumes_over_quota(mounts: &[crate::Mount], limits: &crate::Limits) -> std::io::Result<bool> {
    for mount in mounts {
        if let Some(quota) = mount.quota_bytes(limits)
            && directory_usage(&mount.host, limits.disk_inodes)?.bytes > quota
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The wait before the next measurement, when the last one took `took`.
fn next_wait(took: Duration) -> Duration {
    (took * WALK_COST_FACTOR).clamp(DISK_CHECK_INTERVAL, MAX_DISK_CHECK_INTERVAL)
}

/// What a conversation's `/data` holds: its image's counters when it is one (one `statvfs`), else a walk of the
/// tree (an error past `max_inodes` entries).
pub fn measure_conversation(files: &Path, max_inodes: u64) -> std::io::Result<DiskUsage> {
    match crate::disk_image::is_mounted(files)? {
        true => crate::disk_image::image_usage(files),
        false => directory_usage(files, max_inodes),
    }
}

/// Whether the job's `/data` is at (or over) its quota.
pub fn at_quota(job: &Job) -> bool {
    at_quota_path(&job.workspace, job.limits.disk_mb * 1024 * 1024, job.limits.disk_inodes)
}

fn at_quota_path(workspace: &Path, quota: u64, max_inodes: u64) -> bool {
    measure_conversation(workspace, max_inodes).map_or(true, |usage| usage.bytes >= quota)
}

/// Whether a conversation on a disk image holds more than its quota (bytes or inodes), when a run of it ended: the
/// kernel let it go a little past ([`crate::OVER_QUOTA_ROOM`]) and the program may have ended on `ENOSPC` before the
/// watchdog looked. Always `false` for a directory that is not an image (a walk at the end would cost what the
/// watchdog's bound avoids).
pub fn over_quota(files: &Path, limits: &crate::Limits) -> bool {
    match crate::disk_image::is_mounted(files) {
        Ok(true) => conversation_over_quota(files, limits).unwrap_or(true),
        _ => false,
    }
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
