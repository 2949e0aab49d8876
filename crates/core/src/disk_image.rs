//! A conversation's files as a filesystem of their own: a sparse ext4 image per conversation, loop-mounted
//! `nosuid,nodev` on its `files` directory, so the kernel bounds what a run can hold there: blocks (of files,
//! directories, symlinks, hard links' directory entries, and files unlinked while still open) and inodes.
//!
//! Invariants: the image lives beside the directory it is mounted on (`<root>/<id>/files.img`, mode 0600, the
//! server's), never inside it; it is mounted at most once per mount namespace (an existing mount, a crashed
//! server's included, is reused: `files` on another device than `<root>/<id>` is a mount, which no sandbox can make
//! on the host); an image is made so that what users may write (`statvfs`'s `f_bavail` once empty) is at least the
//! quota plus [`OVER_QUOTA_ROOM`], and holds at least the inode limit plus that room, so a run can go past the quota
//! (and be stopped as over it) before the kernel says `ENOSPC`; an image never shrinks (a lower quota is the
//! watchdog's to enforce, see `quota.rs`), and grows, unmounted, when the quota grew. A plain `files` directory an
//! older version made, with files in it, is left as it is (the watchdog walks it); an empty one gets an image. An
//! image is made, grown, mounted and named by one thread or process at a time (an exclusive `flock` of
//! `files.img.lock` beside it): a mounted image not yet named is a crashed server's only when nobody holds that lock.
//!
//! On a root several machines share, a node mounts an image only while it holds it (`image_holds`): two kernels
//! must never mount one image read-write.
//!
//! The tools are e2fsprogs' `mkfs.ext4`, `e2fsck`, `resize2fs` and util-linux's `mount` (whose `-o loop` reuses a
//! loop device already set up for the same file, so a filesystem is never mounted through two devices at once).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::DiskUsage;

const MIB: u64 = 1024 * 1024;

/// The room an image gives past its quota, in bytes of blocks and in inodes, so that a run stopped by the kernel has
/// first gone over the quota, and ends as over it.
pub const OVER_QUOTA_ROOM: u64 = MIB;

/// The name of a conversation's image, beside its `files` directory.
pub const IMAGE_NAME: &str = "files.img";

/// The file whose `flock` serialises making, growing and mounting a conversation's image, beside it.
const LOCK_NAME: &str = "files.img.lock";

/// Inodes ext4 keeps for itself (1 to 10, the root directory's among them): what an empty image has used (its
/// `lost+found` is removed once made).
const EXT4_OWN_INODES: u64 = 10;

/// Mount options of every image: no setuid programs or devices, no zeroing of inode tables behind the server's back
/// (the image is sparse: unwritten tables read as zeros), and freed blocks given back to the host's disk.
const MOUNT_OPTIONS: &str = "loop,nosuid,nodev,noinit_itable,discard";

/// How many times an image is made or grown before the server gives up on reaching its size.
const SIZING_ATTEMPTS: u32 = 4;

/// Conversation images of a given quota: the kernel's bound on `/data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskImages {
    /// The quota, in bytes.
    quota: u64,
    /// The inode limit.
    inodes: u64,
    mkfs: PathBuf,
    e2fsck: PathBuf,
    resize2fs: PathBuf,
    mount: PathBuf,
    /// This process's holds of the images it mounted, as the node it is.
    holds: std::sync::Arc<crate::image_holds::ImageHolds>,
}

impl DiskImages {
    /// Images of `disk_mb` MiB and `inodes` inodes, when this host can make and mount them: root, loop devices,
    /// and the tools. Else why not, for `sandlot doctor` and the log (the watchdog is then the only bound).
    pub fn detect(disk_mb: u64, inodes: u64) -> Result<Self, String> {
        let images = Self::find(disk_mb, inodes)?;
        images.probe().map_err(|e| format!("no loop mount works here ({e})"))?;
        Ok(images)
    }

    /// [`DiskImages::detect`] without its probe, for when an image is known to be mounted already (loop mounts work
    /// here): a one-shot `sandlot run` into a conversation made before saves the probe's ~10 ms.
    pub fn find(disk_mb: u64, inodes: u64) -> Result<Self, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not root: no loop mounts".into());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Err("no loop devices (/dev/loop-control is missing)".into());
        }
        let images = Self {
            quota: disk_mb * MIB,
            inodes,
            mkfs: find_tool("mkfs.ext4")?,
            e2fsck: find_tool("e2fsck")?,
            resize2fs: find_tool("resize2fs")?,
            mount: find_tool("mount")?,
            holds: std::sync::Arc::new(crate::image_holds::ImageHolds::new(host_name())),
        };
        Ok(images)
    }

    /// The same images, held as the node `node` (default: the host's name) on a root several machines share.
    pub fn on_node(self, node: &str) -> Self {
        Self { holds: std::sync::Arc::new(crate::image_holds::ImageHolds::new(node)), ..self }
    }

    /// Lets this process's hold of the conversation's image go, once it is unmounted (see `image_holds`).
    pub fn release(&self, conversation: &Path) {
        self.holds.release(conversation);
    }

    /// Makes, mounts and removes a small image in a temporary directory: loop devices may be listed and still
    /// refused (a container's device rules). Tens of milliseconds.
    fn probe(&self) -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("sandlot-image-probe-{}", std::process::id()));
        let files = dir.join("files");
        std::fs::create_dir_all(&files)?;
        let small = Self { quota: MIB, inodes: 64, ..self.clone() };
        let made = small.make(&dir.join(IMAGE_NAME), &files);
        let unmounted = unmount(&files);
        let _ = std::fs::remove_dir_all(&dir);
        made.and(unmounted)
    }

    /// Mounts the conversation's image on `files` unless something is mounted there already: made on first use
    /// (when `files` is empty), grown when the quota grew. `Ok(false)` when `files` stays a plain directory (an
    /// older version's, with files in it).
    pub fn ensure_mounted(&self, files: &Path) -> std::io::Result<bool> {
        let conversation = files.parent().unwrap_or(files);
        let image = conversation.join(IMAGE_NAME);
        if is_mounted(files)? && image.exists() {
            // Mounted here, by this process or another of this node (one kernel): held by this node, unless another
            // node took it while this one's mount was left from a server that died.
            self.holds.take(conversation)?;
            return Ok(true);
        }
        // One at a time makes, grows, mounts or renames it (threads, or a server and a `sandlot run` on the same
        // root): an exclusive lock on a file of its own beside it, never on `files` (a mount changes what that
        // path opens) nor on `<root>/<id>` (runs hold that one shared for as long as they run).
        use rustix::fs::OFlags;
        let lock = rustix::fs::open(
            conversation.join(LOCK_NAME),
            OFlags::CREATE | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)?;
        self.holds.take(conversation)?;
        if is_mounted(files)? {
            // A server that crashed between mounting a new image and naming it: the mounted one is it.
            let building = image.with_extension("img.new");
            if !image.exists() && building.exists() {
                std::fs::rename(&building, &image)?;
            }
            return Ok(true);
        }
        let fresh = !image.exists();
        if fresh {
            if std::fs::read_dir(files)?.next().is_some() {
                return Ok(false);
            }
            self.make(&image, files)?;
        } else {
            self.mount_sized(&image, files)?;
        }
        Ok(true)
    }

    /// Makes a new image at `image`, sized so that its users may write at least the quota and the room past it,
    /// and mounts it on `files` (empty). Built under a temporary name, so a crash never leaves half an image.
    fn make(&self, image: &Path, files: &Path) -> std::io::Result<()> {
        let building = image.with_extension("img.new");
        let mut size = first_guess(self.quota, self.inodes);
        for _ in 0..SIZING_ATTEMPTS {
            let _ = std::fs::remove_file(&building);
            create_sparse(&building, size)?;
            self.mkfs(&building, size)?;
            self.mount(&building, files)?;
            let short = self.shortfall(files)?;
            if short == 0 {
                // The image root lists only what runs make.
                let _ = std::fs::remove_dir(files.join("lost+found"));
                std::fs::rename(&building, image)?;
                return Ok(());
            }
            unmount(files)?;
            size += short.div_ceil(MIB) * MIB;
        }
        let _ = std::fs::remove_file(&building);
        Err(std::io::Error::other(format!("cannot size an image for {} MiB", self.quota / MIB)))
    }

    /// Mounts an existing image on `files`, grown first (unmounted) if it no longer holds the quota.
    fn mount_sized(&self, image: &Path, files: &Path) -> std::io::Result<()> {
        for attempt in 0..SIZING_ATTEMPTS {
            self.mount(image, files)?;
            if attempt > 0 {
                // e2fsck made a `lost+found` again (the image root lists only what runs make).
                let _ = std::fs::remove_dir(files.join("lost+found"));
            }
            let short = self.shortfall(files)?;
            if short == 0 {
                return Ok(());
            }
            unmount(files)?;
            let size = std::fs::metadata(image)?.len() + short.div_ceil(MIB) * MIB;
            std::fs::OpenOptions::new().write(true).open(image)?.set_len(size)?;
            // Exit status 1: it corrected something (the `lost+found` it wants, say), which resize2fs then accepts.
            let checked =
                Command::new(&self.e2fsck).args(["-f", "-p"]).arg(image).stdin(std::process::Stdio::null()).output()?;
            if !matches!(checked.status.code(), Some(0 | 1)) {
                let said = String::from_utf8_lossy(&checked.stdout);
                return Err(std::io::Error::other(format!("e2fsck failed ({}): {}", checked.status, said.trim())));
            }
            run(Command::new(&self.resize2fs).arg(image), "resize2fs")?;
            tracing::info!(image = %image.display(), size, "grew a conversation's image to a larger quota");
        }
        // Still short: mounted all the same (the watchdog holds the quota; the kernel a little less room).
        self.mount(image, files)
    }

    /// How many bytes (or inodes, as bytes of a MiB each) the mounted image lacks to hold the quota and the room
    /// past it: its capacity is what is used plus what users may still write.
    fn shortfall(&self, files: &Path) -> std::io::Result<u64> {
        let stat = rustix::fs::statvfs(files)?;
        let capacity = (stat.f_blocks - stat.f_bfree + stat.f_bavail) * stat.f_frsize;
        let inodes = stat.f_files.saturating_sub(EXT4_OWN_INODES);
        let bytes_short = (self.quota + OVER_QUOTA_ROOM).saturating_sub(capacity);
        // Inodes come with space (ext4 gives each block group as many): grow by a MiB per missing inode group.
        let inodes_short = (self.inodes + 1).saturating_sub(inodes).div_ceil(64) * MIB;
        Ok(bytes_short.max(inodes_short))
    }

    fn mkfs(&self, image: &Path, size: u64) -> std::io::Result<()> {
        let groups = size.div_ceil(128 * MIB);
        // Enough for the limit past what ext4 keeps, whichever way mke2fs rounds each group's share.
        let inodes = self.inodes + EXT4_OWN_INODES + 1 + 16 * groups;
        let mut mkfs = Command::new(&self.mkfs);
        mkfs.args([
            "-q",
            "-F",
            "-t",
            "ext4",
            "-b",
            "4096",
            "-I",
            "256",
            "-m",
            "0",
            "-J",
            "size=4",
            "-O",
            "^resize_inode",
        ])
        .args(["-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-N"])
        .arg(inodes.to_string())
        .arg(image);
        run(&mut mkfs, "mkfs.ext4")
    }

    fn mount(&self, image: &Path, files: &Path) -> std::io::Result<()> {
        run(Command::new(&self.mount).args(["-t", "ext4", "-o", MOUNT_OPTIONS]).arg(image).arg(files), "mount")
    }
}

/// This host's name: the node a process is, by default, on a shared root.
fn host_name() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

/// The size to try first: the quota and its room, ext4's inode tables, journal (4 MiB) and reserve (2 %), and a
/// little per block group; [`DiskImages::make`] adds what is still missing.
fn first_guess(quota: u64, inodes: u64) -> u64 {
    let data = quota + OVER_QUOTA_ROOM;
    let groups = data.div_ceil(128 * MIB);
    let base = data + (inodes + EXT4_OWN_INODES + 1 + 16 * groups) * 256 + 4 * MIB + groups * 64 * 1024;
    (base + (base / 49).min(16 * MIB)).div_ceil(MIB) * MIB
}

/// Whether something is mounted on `files`: it is on another device than its parent (only the server mounts on
/// the host).
pub fn is_mounted(files: &Path) -> std::io::Result<bool> {
    let here = rustix::fs::lstat(files)?;
    let parent = rustix::fs::lstat(files.parent().unwrap_or(files))?;
    Ok(here.st_dev != parent.st_dev)
}

/// Detaches what is mounted on `files` (an image), if anything. Lazy: a file the server has open there, or a run of
/// another process, keeps the filesystem until it is done (the loop device then goes by itself).
pub fn unmount(files: &Path) -> std::io::Result<()> {
    match is_mounted(files) {
        Ok(true) => Ok(rustix::mount::unmount(files, rustix::mount::UnmountFlags::DETACH)?),
        Ok(false) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a mounted image holds, from its filesystem's counters (one `statvfs`, whatever the tree): the blocks in use
/// (data, directories, symlinks, and files unlinked but still open) and the inodes in use, less an empty image's.
pub fn image_usage(files: &Path) -> std::io::Result<DiskUsage> {
    let stat = rustix::fs::statvfs(files)?;
    Ok(DiskUsage {
        bytes: (stat.f_blocks - stat.f_bfree) * stat.f_frsize,
        inodes: (stat.f_files - stat.f_ffree).saturating_sub(EXT4_OWN_INODES),
    })
}

/// A new file of `size` bytes that holds no block, mode 0600.
fn create_sparse(path: &Path, size: u64) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.set_len(size)
}

/// Runs `command`; its failure names the tool and says what it printed.
fn run(command: &mut Command, tool: &str) -> std::io::Result<()> {
    let output = command.stdin(std::process::Stdio::null()).output()?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    Err(std::io::Error::other(format!("{tool} failed ({}): {}", output.status, said.trim())))
}

/// The path of an administration tool: in `PATH`, or in the system's `sbin` directories (root's `PATH` may lack them).
fn find_tool(name: &str) -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| format!("{name} not found (e2fsprogs and mount are needed)"))
}
