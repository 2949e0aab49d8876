//! Network namespaces pinned on disk from one `sandlot run` to the next run of the same conversation.
//!
//! A server keeps a conversation's network namespace in memory for its next run ([`crate::netns_pool`]). A one-shot
//! command has no memory between runs, and making a namespace costs ~0.4–0.5 ms of kernel CPU (the sysctl tables
//! of IPv4, IPv6 and conntrack are registered for each one) plus its asynchronous tear-down after the run. So, as
//! root, `sandlot run` pins the namespace its init made with a bind mount of the namespace file at
//! `<dir>/<key>` (`/run/sandlot/netns` by default; the key is a hash of the conversation's directory), and the next
//! run of that conversation joins it instead of making one.
//!
//! The namespace is the same one a server keeps: made by the init while still root, so it belongs to the host's
//! user namespace and nothing in a sandbox can reconfigure it; it has only loopback, up. What a run can leave in it
//! for a later run of the same conversation is what [`crate::netns_pool`] lists: TCP connections still closing
//! (`TIME_WAIT`) and counters, nothing that needs a process. Unlike a server, two `sandlot run`s of one
//! conversation at the same time share it, as they share `/data`. Never two conversations: the key names one
//! conversation directory. The directory is a private mount of its own (pins made there do not propagate to other
//! mount namespaces), mode 0700; at most [`CAPACITY`] namespaces are pinned, the oldest pins are dropped first
//! (each pin costs every run a little, see there).

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use sha2::{Digest, Sha256};

/// Where `sandlot run` pins namespaces unless told otherwise.
pub const DEFAULT_DIR: &str = "/run/sandlot/netns";

/// Namespaces pinned at most; pinning one more unpins the oldest. Each pin is a mount in the host's mount
/// namespace, which every run copies twice (its staging and its own mount namespace) and then tears down: ~3 µs per
/// pin per run (64 pins cost ~0.2 ms per run, docs/benchmarks.md). A few recent conversations are what a command
/// line works with.
pub const CAPACITY: usize = 8;

/// The directory of pinned namespaces.
#[derive(Debug, Clone)]
pub struct PinnedNetns {
    dir: PathBuf,
    capacity: usize,
}

impl PinnedNetns {
    /// Pins under [`DEFAULT_DIR`] if this process is root (pinning and joining need it), else `None`.
    pub fn when_root() -> Option<Self> {
        nix::unistd::geteuid().is_root().then(|| Self::new(DEFAULT_DIR))
    }

    /// Pins under `dir` (made when the first namespace is pinned), at most [`CAPACITY`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into(), capacity: CAPACITY }
    }

    /// The same, pinning at most `capacity` namespaces.
    pub fn with_capacity(self, capacity: usize) -> Self {
        Self { capacity, ..self }
    }

    /// Where the namespace of the conversation whose directory is `workspace` is pinned.
    pub fn path_for(&self, workspace: &Path) -> PathBuf {
        let digest = Sha256::digest(workspace.as_os_str().as_encoded_bytes());
        self.dir.join(hex::encode(&digest[..16]))
    }

    /// The pinned namespace of `workspace`'s conversation, if there is one.
    pub fn find(&self, workspace: &Path) -> Option<PathBuf> {
        let path = self.path_for(workspace);
        is_namespace_file(&path).then_some(path)
    }

    /// Pins `netns` (an open network namespace file) for `workspace`'s conversation, unless one is pinned for it
    /// already (two first runs at once), and unpins the oldest pins beyond the capacity.
    pub fn pin(&self, workspace: &Path, netns: &OwnedFd) -> std::io::Result<()> {
        let _lock = self.lock()?;
        self.make_private_mount()?;
        let target = self.path_for(workspace);
        if is_namespace_file(&target) {
            return Ok(());
        }
        File::options().write(true).create(true).truncate(false).mode(0o600).open(&target)?;
        let source = format!("/proc/self/fd/{}", netns.as_raw_fd());
        mount(Some(source.as_str()), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>)?;
        self.unpin_beyond_capacity()
    }

    /// Every pin, oldest first.
    pub fn pinned(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut pins = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if let Some(mount_id) = namespace_mount_id(&path) {
                pins.push((mount_id, path));
            }
        }
        pins.sort();
        Ok(pins.into_iter().map(|(_, path)| path).collect())
    }

    fn unpin_beyond_capacity(&self) -> std::io::Result<()> {
        let pins = self.pinned()?;
        for path in pins.iter().take(pins.len().saturating_sub(self.capacity)) {
            umount2(path, MntFlags::MNT_DETACH)?;
            std::fs::remove_file(path)?;
        }
        Ok(())
    }

    /// Serializes pinning between commands (a lock file beside the directory).
    fn lock(&self) -> std::io::Result<Flock<File>> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
        let mut name = self.dir.file_name().unwrap_or_default().to_owned();
        name.push(".lock");
        let file =
            File::options().write(true).create(true).truncate(false).mode(0o600).open(self.dir.with_file_name(name))?;
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e.into())
    }

    /// Makes the directory a mount of its own with private propagation, once: pins made in it then stay in the
    /// host's mount namespace (where `/` may be shared, as under systemd).
    fn make_private_mount(&self) -> std::io::Result<()> {
        let parent = self.dir.parent().unwrap_or(Path::new("/"));
        if mount_id(&self.dir)? != mount_id(parent)? {
            return Ok(());
        }
        mount(Some(&self.dir), &self.dir, None::<&str>, MsFlags::MS_BIND, None::<&str>)?;
        mount(None::<&str>, &self.dir, None::<&str>, MsFlags::MS_PRIVATE, None::<&str>)?;
        Ok(())
    }
}

/// Whether `path` is a namespace file (a pin), not the empty file under it.
fn is_namespace_file(path: &Path) -> bool {
    nix::sys::statfs::statfs(path).is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
}

/// The unique id (never reused, increasing) of the mount at `path` when it is a pin.
fn namespace_mount_id(path: &Path) -> Option<u64> {
    is_namespace_file(path).then(|| mount_id(path).ok()).flatten()
}

/// The unique id of the mount `path` is on (`STATX_MNT_ID_UNIQUE`, Linux 6.8; the reusable id before).
fn mount_id(path: &Path) -> std::io::Result<u64> {
    const STATX_MNT_ID_UNIQUE: u32 = 0x4000;
    let file = File::options().read(true).custom_flags(libc::O_PATH).open(path)?;
    // SAFETY: an all-zero statx is a valid output buffer.
    let mut stat: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: statx on an open descriptor with an empty path, writing into `stat`, which outlives the call.
    let rc = unsafe {
        libc::statx(
            file.as_fd().as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_MNT_ID | STATX_MNT_ID_UNIQUE,
            &mut stat,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stat.stx_mnt_id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A new network namespace, made by a thread of its own (a thread may change its own network namespace).
    fn new_netns() -> OwnedFd {
        std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare (the jail's tests run as root)");
            OwnedFd::from(File::open("/proc/thread-self/ns/net").unwrap())
        })
        .join()
        .unwrap()
    }

    fn inode(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().ino()
    }

    #[test]
    fn pins_one_namespace_per_conversation_and_drops_the_oldest_beyond_capacity() {
        let tmp = tempfile::tempdir().unwrap();
        let pins = PinnedNetns::new(tmp.path().join("netns")).with_capacity(2);
        let (a, b, c) = (Path::new("/root/a/files"), Path::new("/root/b/files"), Path::new("/root/c/files"));
        assert_eq!(pins.find(a), None);
        let (first, second) = (new_netns(), new_netns());
        pins.pin(a, &first).unwrap();
        pins.pin(a, &second).unwrap(); // a second first run: the pin stays
        let pinned_a = pins.find(a).expect("a is pinned");
        assert_eq!(inode(&pinned_a), std::fs::metadata(format!("/proc/self/fd/{}", first.as_raw_fd())).unwrap().ino());
        pins.pin(b, &new_netns()).unwrap();
        pins.pin(c, &new_netns()).unwrap();
        assert_eq!(pins.find(a), None, "the oldest pin is dropped beyond the capacity");
        assert!(!pinned_a.exists(), "its mount point is removed");
        assert_eq!(pins.pinned().unwrap(), vec![pins.path_for(b), pins.path_for(c)]);
        assert_ne!(inode(&pins.find(b).unwrap()), inode(&pins.find(c).unwrap()));

        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let dir = pins.dir.to_str().unwrap();
        let own = mountinfo.lines().find(|line| line.split(' ').nth(4) == Some(dir)).expect("a mount of its own");
        assert!(!own.contains("shared:"), "{own}");
        for pin in pins.pinned().unwrap().iter().chain([&pins.dir]) {
            umount2(pin, MntFlags::MNT_DETACH).unwrap();
        }
    }

    #[test]
    fn an_empty_file_left_where_a_pin_was_is_not_a_pin() {
        let tmp = tempfile::tempdir().unwrap();
        let pins = PinnedNetns::new(tmp.path());
        let workspace = Path::new("/root/x/files");
        File::create(pins.path_for(workspace)).unwrap();
        assert_eq!(pins.find(workspace), None);
        assert_eq!(pins.pinned().unwrap(), Vec::<PathBuf>::new());
    }
}
