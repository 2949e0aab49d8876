//! Resource limits of one run.

use std::time::Duration;

/// What one run may use. Every backend enforces all of these, or says which it cannot (`sandlot doctor`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Wall-clock deadline; the whole process tree is killed when it passes.
    pub timeout: Duration,
    /// Memory (RAM, no swap) for the whole run, in MiB.
    pub memory_mb: u64,
    /// CPU quota in cores (0.5 = half a core).
    pub cpus: f64,
    /// Maximum number of processes and threads alive at once.
    pub pids: u64,
    /// Bytes kept per output stream; the rest is dropped and the stream marked truncated.
    pub max_output_bytes: usize,
    /// Size of the sandbox's private `/tmp`, in MiB.
    pub tmp_mb: u64,
    /// Space the conversation's `/data` may hold, in MiB (also the largest single file): allocated blocks of every
    /// file, directory and symlink.
    pub disk_mb: u64,
    /// Files, directories and symlinks the conversation's `/data` may hold.
    pub disk_inodes: u64,
    /// Open files per process.
    pub open_files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            memory_mb: 256,
            cpus: 0.5,
            pids: 64,
            max_output_bytes: 1024 * 1024,
            tmp_mb: 64,
            disk_mb: 1024,
            disk_inodes: 100_000,
            open_files: 256,
        }
    }
}
