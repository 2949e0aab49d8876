//! Files a run unlinked while it still holds them open: they are in no directory, so a walk of `/data` misses their
//! blocks, which stay taken until the last descriptor closes. Where `/data` is not a disk image (whose kernel counts
//! them), the quota's watchdog adds them: every descriptor of the run's processes (`/proc/<pid>/fd`, which the
//! server may read: the processes are its own or its sandbox uids') that names a regular file with no link left on
//! `/data`'s filesystem, each inode once. The cost is bounded by the run's limits: its processes times their open
//! files.

use std::collections::HashSet;
use std::path::Path;

/// Bytes of disk held by regular files on device `dev` that have no link left and that one of `pids` holds open.
pub fn unlinked_open_bytes(pids: &[i32], dev: u64) -> u64 {
    let mut seen = HashSet::new();
    let mut bytes = 0;
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        for fd in fds.flatten() {
            // `stat` through the descriptor's link: the open file itself, deleted or not.
            let Ok(stat) = rustix::fs::stat(fd.path()) else { continue };
            let regular = rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile;
            if regular && stat.st_nlink == 0 && stat.st_dev == dev && seen.insert(stat.st_ino) {
                bytes += stat.st_blocks as u64 * 512;
            }
        }
    }
    bytes
}

/// The device of the filesystem `dir` is on (0 when it cannot be told, which matches no file).
pub fn device_of(dir: &Path) -> u64 {
    rustix::fs::stat(dir).map_or(0, |stat| stat.st_dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_unlinked_while_open_is_counted_once_and_only_on_its_device() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("held");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(&vec![1u8; 1 << 20]).unwrap();
        file.sync_all().unwrap();
        let again = std::fs::File::open(&path).unwrap();
        let me = [std::process::id() as i32];
        let dev = device_of(dir.path());
        assert_eq!(unlinked_open_bytes(&me, dev), 0, "still linked");
        std::fs::remove_file(&path).unwrap();
        let held = unlinked_open_bytes(&me, dev);
        assert!((1 << 20..2 << 20).contains(&held), "{held}");
        assert_eq!(unlinked_open_bytes(&me, dev + 1), 0, "another device");
        drop((file, again));
        assert_eq!(unlinked_open_bytes(&me, dev), 0, "closed");
    }
}
