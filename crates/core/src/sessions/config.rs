//! How long live sandboxes live and how many there may be: `SANDLOT_SANDBOX_IDLE_SECS`, `_MAX_LIFETIME_SECS`,
//! `SANDLOT_MAX_LIVE_SANDBOXES`, `SANDLOT_SANDBOX_MIN_FREE_MB` and `SANDLOT_SESSION_DEFAULT`
//! (docs/configuration.md).

use std::time::Duration;

/// The default of [`SessionConfig::idle`]: 15 minutes.
pub const DEFAULT_SANDBOX_IDLE: Duration = Duration::from_secs(900);
/// The default of [`SessionConfig::max_lifetime`]: 4 hours.
pub const DEFAULT_SANDBOX_LIFETIME: Duration = Duration::from_secs(4 * 3600);
/// How long an interrupted call may take to end before its interpreter is killed (its state lost).
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq)]
pub struct SessionConfig {
    /// A live sandbox with no call for this long ends.
    pub idle: Duration,
    /// A live sandbox ends this long after it started, at the end of the call then running, if any.
    pub max_lifetime: Duration,
    /// Live sandboxes at once; a new one ends the least recently used idle one, or is refused when all are busy.
    pub max_live: usize,
    /// When the host's available memory falls below this, idle live sandboxes end, least recently used first.
    pub min_free_mb: u64,
    /// Whether a `sandbox_run_code` call that does not say `session` runs in the live sandbox (faces read it).
    pub session_default: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self { max_live: default_max_live(256), ..Self::without_host_probe() }
    }
}

impl SessionConfig {
    /// The defaults with the cap on live sandboxes at its floor, 4, without reading the host's memory for it.
    pub fn without_host_probe() -> Self {
        Self {
            idle: DEFAULT_SANDBOX_IDLE,
            max_lifetime: DEFAULT_SANDBOX_LIFETIME,
            max_live: 4,
            min_free_mb: 512,
            session_default: false,
        }
    }
}

/// The default cap on live sandboxes: as many as the host's memory holds at `memory_mb` each, twice over (most
/// are idle and use a fraction of their limit), at least 4 and at most 1,024.
pub fn default_max_live(memory_mb: u64) -> usize {
    let total_mb = host_memory_mb(MemField::Total).unwrap_or(4096);
    (2 * total_mb / memory_mb.max(1)).clamp(4, 1024) as usize
}

pub(crate) enum MemField {
    Total,
    Available,
}

/// `MemTotal` or `MemAvailable` of /proc/meminfo, in MiB.
pub(crate) fn host_memory_mb(field: MemField) -> Option<u64> {
    let name = match field {
        MemField::Total => "MemTotal:",
        MemField::Available => "MemAvailable:",
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|line| line.starts_with(name))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_follows_the_host_memory_within_bounds() {
        let cap = default_max_live(256);
        assert!((4..=1024).contains(&cap), "{cap}");
        assert_eq!(default_max_live(u64::MAX), 4);
        assert!(host_memory_mb(MemField::Available).is_some());
    }
}
