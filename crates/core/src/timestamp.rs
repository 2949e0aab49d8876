//! Times as RFC 3339 text, for every time sandlot shows (a file's mtime, a run's start): never a panic. `humantime`
//! formats only years 1970 to 9999 and fails (a panic through `to_string`) outside them, and a file's mtime is the
//! sandboxed program's to set (`os.utime(path, (0, 2**40))`; tmpfs and btrfs keep it), so a time is clamped into that
//! range first: one past the year 9999 reads as its last second, one before 1970 as the epoch.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last second humantime can format: 9999-12-31T23:59:59Z.
const LAST_SECOND: u64 = 253_402_300_799;

/// `time` clamped to what humantime formats: from the epoch to the last millisecond of year 9999.
fn formattable(time: SystemTime) -> SystemTime {
    let last = UNIX_EPOCH + Duration::from_millis(LAST_SECOND * 1000 + 999);
    time.clamp(UNIX_EPOCH, last)
}

/// `time` as RFC 3339 in whole seconds (`2026-01-02T03:04:05Z`), clamped to years 1970 to 9999.
pub fn rfc3339_seconds(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(formattable(time)).to_string()
}

/// `time` as RFC 3339 with milliseconds (`2026-01-02T03:04:05.678Z`), clamped to years 1970 to 9999.
pub fn rfc3339_millis(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(formattable(time)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_outside_years_1970_to_9999_are_clamped_never_a_panic() {
        let far = UNIX_EPOCH + Duration::from_secs(1 << 40); // year 36812, what os.utime can set
        let before = UNIX_EPOCH - Duration::from_secs(1);
        let ordinary = UNIX_EPOCH + Duration::from_millis(1_767_323_045_678);
        assert_eq!(
            [rfc3339_seconds(far), rfc3339_millis(far), rfc3339_seconds(before), rfc3339_millis(ordinary)],
            ["9999-12-31T23:59:59Z", "9999-12-31T23:59:59.999Z", "1970-01-01T00:00:00Z", "2026-01-02T03:04:05.678Z"]
        );
    }
}
