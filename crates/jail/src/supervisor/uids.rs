//! The host uids sandboxes run as when sandlot is root: a range (`SANDLOT_SANDBOX_UIDS`, `900000-900999` by
//! default) whose first uid, the **storage uid**, owns every conversation directory on disk, and whose others are
//! leased one per concurrent run ([`UidLeases`]). Two runs at the same time never share a host uid, so per-user
//! kernel limits (inotify instances, user namespaces, ...) are per run, and a run's processes can reach nothing of
//! another's, even outside their namespaces. A run's `/data` is an idmapped mount (see [`crate::sys::idmap`]): the run's
//! uid inside, the storage uid on disk, so the files of a conversation stay usable by its next run, whatever uid
//! that one gets.
//!
//! A lease is an exclusive `flock` on `/run/sandlot/uids/<uid>`, shared by every sandlot on the host (a server and
//! `sandlot run` never hand out the same uid); the run's init takes a reference of its own to the lock (as it does
//! for the cgroup slot's), so the uid stays leased until the last process of the run is gone.

use std::fs::File;
use std::io;
use std::ops::RangeInclusive;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where the leases' lock files are (root only; not visible in any sandbox).
pub const LOCK_DIR: &str = "/run/sandlot/uids";

/// The default range: the old single sandbox uid (900000) is its storage uid, so conversation directories made
/// before ranges existed keep their owner.
pub const DEFAULT_UIDS: UidRange = UidRange { first: 900_000, last: 900_999 };

/// How many uids a range named by its first uid alone has.
const DEFAULT_COUNT: u32 = 1000;

/// A range of host uids (the same numbers serve as gids): `first` is the storage uid, the rest are run uids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    first: u32,
    last: u32,
}

impl UidRange {
    /// `first..=last`; refused: uid 0, fewer than two uids (the storage uid and one for runs), and `u32::MAX`
    /// (which is -1, "no uid", to the kernel).
    pub fn new(first: u32, last: u32) -> Result<Self, String> {
        if first == 0 {
            return Err("the sandbox uids must not include 0 (root)".into());
        }
        if last == u32::MAX {
            return Err(format!("{last} is not a valid uid"));
        }
        if last <= first {
            return Err(format!("{first}-{last} must hold at least two uids: the storage uid and one for runs"));
        }
        Ok(Self { first, last })
    }

    /// The range of `DEFAULT_COUNT` uids starting at `first`.
    pub fn starting_at(first: u32) -> Result<Self, String> {
        let last =
            first.checked_add(DEFAULT_COUNT - 1).ok_or_else(|| format!("{first} + {DEFAULT_COUNT} overflows"))?;
        Self::new(first, last)
    }

    /// `FIRST-LAST`, or `FIRST` alone for a range of 1000.
    pub fn parse(text: &str) -> Result<Self, String> {
        let number =
            |s: &str| s.trim().parse::<u32>().map_err(|_| format!("{text:?} is not a uid range like 900000-900999"));
        match text.split_once('-') {
            Some((first, last)) => Self::new(number(first)?, number(last)?),
            None => Self::starting_at(number(text)?),
        }
    }

    /// The uid (and gid) that owns conversation directories on disk; no run runs as it while its `/data` is
    /// idmapped.
    pub fn storage(&self) -> u32 {
        self.first
    }

    /// The uids leased to runs.
    pub fn run_uids(&self) -> RangeInclusive<u32> {
        self.first + 1..=self.last
    }

    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    /// A user or group of the host (`/etc/passwd`, `/etc/group`) whose id is in the range, named; sandboxes would
    /// otherwise run as, or own the files of, a real account.
    pub fn host_account_inside(&self) -> Option<String> {
        for (file, what) in [("/etc/passwd", "user"), ("/etc/group", "group")] {
            let Ok(text) = std::fs::read_to_string(file) else { continue };
            for line in text.lines() {
                let mut fields = line.split(':');
                let (Some(name), Some(id)) = (fields.next(), fields.nth(1)) else { continue };
                if id.parse::<u32>().is_ok_and(|id| self.contains(id)) {
                    return Some(format!("{what} {name} ({id}, {file})"));
                }
            }
        }
        None
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// Hands out the run uids of a range, one per concurrent run, across every process of the host.
#[derive(Debug)]
pub struct UidLeases {
    range: UidRange,
    dir: PathBuf,
    dir_made: AtomicBool,
}

impl UidLeases {
    pub fn new(range: UidRange, dir: PathBuf) -> Self {
        Self { range, dir, dir_made: AtomicBool::new(false) }
    }

    /// The lowest run uid nobody holds, held until the lease is dropped (and the run's init, which shares the
    /// lock, is gone). Each uid tried costs an `open` and a `flock` of a file on `/run` (a few µs).
    pub fn lease(&self) -> io::Result<UidLease> {
        if !self.dir_made.load(Ordering::Relaxed) {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
            self.dir_made.store(true, Ordering::Relaxed);
        }
        for uid in self.range.run_uids() {
            let lock = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(self.dir.join(uid.to_string()))?;
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(UidLease { uid, lock });
            }
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(error);
            }
        }
        Err(io::Error::other(format!(
            "all {} sandbox uids of {} are in use",
            self.range.run_uids().count(),
            self.range
        )))
    }
}

/// A run uid, leased while this lives.
#[derive(Debug)]
pub struct UidLease {
    uid: u32,
    lock: File,
}

impl UidLease {
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The descriptor holding the lease; the run's init takes a reference of its own to it.
    pub fn lock_fd(&self) -> std::os::fd::RawFd {
        self.lock.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_parsed_and_checked() {
        assert_eq!(UidRange::parse("900000-900999"), Ok(DEFAULT_UIDS));
        assert_eq!(UidRange::parse("900000"), Ok(DEFAULT_UIDS));
        assert_eq!(UidRange::parse("5-6").map(|r| (r.storage(), r.run_uids())), Ok((5, 6..=6)));
        assert!(UidRange::parse("0-10").unwrap_err().contains("root"));
        assert!(UidRange::parse("7-7").unwrap_err().contains("at least two"));
        assert!(UidRange::parse("4294967000").unwrap_err().contains("overflows"));
        assert!(UidRange::parse("10-4294967295").unwrap_err().contains("not a valid uid"));
        assert!(UidRange::parse("ten").is_err());
    }

    #[test]
    fn a_range_over_a_host_account_is_named() {
        assert_eq!(UidRange::new(1, 10).unwrap().host_account_inside().map(|s| s.starts_with("user ")), Some(true));
        assert_eq!(DEFAULT_UIDS.host_account_inside(), None);
    }

    #[test]
    fn concurrent_leases_get_distinct_uids_and_a_dropped_one_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let leases = UidLeases::new(UidRange::new(100, 102).unwrap(), dir.path().join("uids"));
        let a = leases.lease().unwrap();
        let b = leases.lease().unwrap();
        assert_eq!((a.uid(), b.uid()), (101, 102));
        assert!(leases.lease().unwrap_err().to_string().contains("all 2 sandbox uids of 100-102 are in use"));
        // Another process's leases (another open file description) count too.
        let other = UidLeases::new(UidRange::new(100, 102).unwrap(), dir.path().join("uids"));
        assert!(other.lease().is_err());
        drop(a);
        assert_eq!(other.lease().unwrap().uid(), 101);
    }
}
