//! Resource limits of one run.
//!
//! CPU is shared, not capped, unless the operator sets a cap: every run's group gets the same weight, so runs
//! competing for the cores get equal shares and a run alone gets the whole machine (docs/security.md, "CPU").

use std::time::Duration;

/// What one run may use. Every backend enforces all of these, or says which it cannot (`sandlot doctor`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Wall-clock deadline; the whole process tree is killed when it passes.
    pub timeout: Duration,
    /// Memory (RAM, no swap) for the whole run, in MiB.
    pub memory_mb: u64,
    /// The operator's hard CPU cap in cores (0.5 = half a core), or `None`: no cap, the run shares the cores with
    /// the others by an equal weight. The cap bounds a run even on an idle machine; fairness needs only the weight.
    pub cpus: Option<f64>,
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
            cpus: None,
            pids: 64,
            max_output_bytes: 1024 * 1024,
            tmp_mb: 64,
            disk_mb: 1024,
            disk_inodes: 100_000,
            open_files: 256,
        }
    }
}

/// The shortest deadline a request may ask for.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// A caller's number of seconds (`field` names where it came from) as a deadline of at least [`MIN_TIMEOUT`] and
/// at most `max`. Every face converts a requested timeout here: `Duration::from_secs_f64` panics on NaN, infinity
/// and anything past `u64::MAX` seconds, so no caller's float may reach it unchecked.
pub fn timeout_from_secs(field: &'static str, secs: f64, max: Duration) -> crate::Result<Duration> {
    if !secs.is_finite() || secs <= 0.0 {
        return Err(crate::Error::invalid(field, "must be a positive number of seconds"));
    }
    if secs > max.as_secs_f64() {
        // Debug prints 1e300 as "1e300", where Display writes out all 301 digits.
        let shown = if secs < 1e16 { secs.to_string() } else { format!("{secs:?}") };
        return Err(crate::Error::invalid(field, format!("is {shown} s; the limit is {} s", max.as_secs())));
    }
    // `secs` is finite and at most `max` here, so the conversion cannot fail; the fallback is never taken.
    let timeout = Duration::try_from_secs_f64(secs).unwrap_or(max);
    if timeout < MIN_TIMEOUT {
        return Err(crate::Error::invalid(field, "must be at least 1 ms"));
    }
    Ok(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_from_any_float_are_checked_never_panic() {
        let max = Duration::from_secs(3600);
        let message = |secs: f64| timeout_from_secs("t", secs, max).map_err(|e| e.to_string());
        assert_eq!(message(1.5), Ok(Duration::from_millis(1500)));
        assert_eq!(message(3600.0), Ok(max));
        assert_eq!(message(1e300), Err("invalid t: is 1e300 s; the limit is 3600 s".into()));
        assert_eq!(message(3600.25), Err("invalid t: is 3600.25 s; the limit is 3600 s".into()));
        assert_eq!(message(1e-4), Err("invalid t: must be at least 1 ms".into()));
        for bad in [0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MIN] {
            assert_eq!(message(bad), Err("invalid t: must be a positive number of seconds".into()), "{bad}");
        }
    }
}
