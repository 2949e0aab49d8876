//! Conversation directories on the host: creation, listing and safe reads.
//!
//! Layout: `<root>/<conversationId>/files` is what a run sees at `/data`. Everything here walks and opens with
//! file descriptors and `O_NOFOLLOW`/`RESOLVE_BENEATH`, so a symlink a sandboxed program planted is never followed
//! out of the conversation, even if the tree changes while it is read.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};

use crate::private_dir::create_private_dir;
use crate::{ConversationId, Error, Result};

/// Deepest directory nesting that is walked. Measuring a deeper tree is an error (so a quota is never bypassed by
/// nesting); listing stops there.
const MAX_DEPTH: usize = 128;

/// A regular file in a conversation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileEntry {
    /// Path relative to `/data`, with `/` separators.
    pub path: String,
    pub size: u64,
    /// Last modification, for telling the files a run made or changed (not serialized: a listing's wire form is
    /// path and size).
    #[serde(skip)]
    pub modified: Option<std::time::SystemTime>,
}

/// The files of a conversation, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileListing {
    pub files: Vec<FileEntry>,
    /// More files exist than were listed.
    pub truncated: bool,
}

/// The root under which every conversation's directory lives.
#[derive(Debug, Clone)]
pub struct Workspaces {
    root: PathBuf,
}

impl Workspaces {
    /// Workspaces under `root` (created on first use). A relative `root` (`--root ./data`) is
    /// made absolute against the current directory now, because the sandbox's init and Docker resolve paths from
    /// elsewhere.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self { root: std::path::absolute(&root).unwrap_or(root) }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/<id>/files`, whether or not it exists.
    pub fn files_dir(&self, id: &ConversationId) -> PathBuf {
        self.root.join(id.as_str()).join("files")
    }

    /// Creates the conversation's files directory if needed and returns it. `<root>/<id>` is made private to the
    /// server's user (mode 0700, also when an older version made it), so no other host user, the sandbox uids
    /// included, can reach `files` below it: a setuid program or a secret a run leaves there is out of their reach.
    /// Sandboxes get `files` from the server (the jail opens it as root; Docker's engine binds it).
    pub fn prepare(&self, id: &ConversationId) -> Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let conversation = self.root.join(id.as_str());
        create_private_dir(&conversation, "create conversation directory", "make conversation directory private")?;
        let dir = self.files_dir(id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .or_else(|e| if e.kind() == std::io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) })
            .map_err(|e| Error::io("create conversation directory", &dir, e))?;
        Ok(dir)
    }

    /// Prepares the conversation's directory and claims it for one run: a shared `flock` on `<root>/<id>`, held
    /// until the [`Claim`] is dropped, which also marks the conversation used then (its directory's mtime, which
    /// [`Workspaces::conversations`] reads for idle expiry). `None` when the conversation is being removed (by
    /// this process or another on the same root, which holds the lock exclusively): the caller tries again, and
    /// then finds it gone and gets a new, empty one. Invariant: while a claim is held, [`Workspaces::remove`]
    /// refuses the conversation, so a run never has its `/data` removed under it. Costs four system calls.
    pub fn try_claim(&self, id: &ConversationId) -> Result<Option<(PathBuf, Claim)>> {
        let files = self.prepare(id)?;
        let conversation = self.root.join(id.as_str());
        let dir = match lock_conversation(&conversation, rustix::fs::FlockOperation::NonBlockingLockShared)? {
            Locked::Held(dir) => dir,
            // Removed between `prepare` and here, or being removed: try again.
            Locked::Missing | Locked::Busy => return Ok(None),
        };
        // The lock may be on a directory that was removed while this waited for it: it must still be the one at
        // the path.
        let held = rustix::fs::fstat(&dir).map_err(|e| Error::io("stat conversation", &conversation, e.into()))?;
        match rustix::fs::stat(&conversation) {
            Ok(now) if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) => {}
            Ok(_) | Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(Error::io("stat conversation", &conversation, e.into())),
        }
        let claim = Claim { dir };
        claim.touch();
        Ok(Some((files, claim)))
    }

    /// Removes the conversation's directory and everything in it, unless a run holds it ([`Workspaces::try_claim`];
    /// then [`Error::ConversationBusy`]). `false` when there was none. Nothing is followed out of it: symlinks are
    /// removed, never resolved, and a tree the sandbox made hard to remove (directories without permissions,
    /// nested thousands deep) is taken apart with a bounded number of open descriptors. Blocking; the caller also
    /// holds the conversation's turn in this process, so none of its runs starts meanwhile.
    pub fn remove(&self, id: &ConversationId) -> Result<bool> {
        self.remove_unused_since(id, None)
    }

    /// [`Workspaces::remove`]; with `unused_since`, only if the conversation was not used after it (checked with the
    /// lock held, so a run of another process that used it meanwhile is seen), else [`Error::ConversationBusy`].
    pub fn remove_unused_since(
        &self,
        id: &ConversationId,
        unused_since: Option<std::time::SystemTime>,
    ) -> Result<bool> {
        let conversation = self.root.join(id.as_str());
        let dir = match lock_conversation(&conversation, rustix::fs::FlockOperation::NonBlockingLockExclusive)? {
            Locked::Held(dir) => dir,
            Locked::Missing => return Ok(false),
            Locked::Busy => return Err(Error::ConversationBusy { id: id.to_string() }),
        };
        if let Some(cutoff) = unused_since
            && Self::last_use(&dir).is_none_or(|used| used >= cutoff)
        {
            return Err(Error::ConversationBusy { id: id.to_string() });
        }
        // A run of another process may make `files` again while this empties the directory (it then waits for
        // the lock, and tries again once the directory is gone): empty it until it can be removed.
        let mut attempts = 0;
        loop {
            crate::removal::empty_directory(dir.as_fd())
                .map_err(|e| Error::io("remove conversation directory", &conversation, e))?;
            match std::fs::remove_dir(&conversation) {
                Ok(()) => return Ok(true),
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTEMPTY.raw_os_error()) && attempts < 10 => {
                    attempts += 1;
                }
                Err(e) => return Err(Error::io("remove conversation directory", &conversation, e)),
            }
        }
    }

    /// Every conversation directory under the root, with when it was last used: the later of the mtimes of
    /// `<root>/<id>` (set when a run's claim ends) and of `<root>/<id>/files` (an entry made or removed at its top).
    /// Names that are not conversation ids (the server's `.sandlot`, the jail's template) are skipped.
    pub fn conversations(&self) -> Result<Vec<(ConversationId, std::time::SystemTime)>> {
        let mut found = Vec::new();
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(Error::io("list conversations", &self.root, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("list conversations", &self.root, e))?;
            let Some(id) = entry.file_name().to_str().and_then(|name| ConversationId::parse(name).ok()) else {
                continue;
            };
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let Ok(dir) = rustix::fs::open(entry.path(), flags, Mode::empty()) else { continue };
            if let Some(used) = Self::last_use(&dir) {
                found.push((id, used));
            }
        }
        Ok(found)
    }

    /// When the conversation whose directory `dir` is was last used (see [`Workspaces::conversations`]).
    fn last_use(dir: &OwnedFd) -> Option<std::time::SystemTime> {
        let mtime = |stat: &rustix::fs::Stat| {
            std::time::UNIX_EPOCH + std::time::Duration::new(stat.st_mtime.max(0) as u64, stat.st_mtime_nsec as u32)
        };
        let used = mtime(&rustix::fs::fstat(dir).ok()?);
        match rustix::fs::statat(dir, "files", AtFlags::SYMLINK_NOFOLLOW) {
            Ok(files) => Some(used.max(mtime(&files))),
            Err(_) => Some(used),
        }
    }

    fn open_files_dir(&self, id: &ConversationId) -> Result<Option<OwnedFd>> {
        let dir = self.files_dir(id);
        match rustix::fs::open(
            &dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(Error::io("open conversation directory", &dir, e.into())),
        }
    }

    /// Every regular file under the conversation's directory (symlinks and special files are skipped, never
    /// followed), at most `max_entries` of them.
    pub fn list(&self, id: &ConversationId, max_entries: usize) -> Result<FileListing> {
        self.list_within(id, max_entries, usize::MAX)
    }

    /// [`Workspaces::list`], also stopped (and marked truncated) before the listed paths would hold more than
    /// `max_path_bytes` bytes in all: a tree of long, deeply nested names must not make a listing (and the result
    /// built from it) of any size.
    pub fn list_within(&self, id: &ConversationId, max_entries: usize, max_path_bytes: usize) -> Result<FileListing> {
        let Some(root) = self.open_files_dir(id)? else {
            return Ok(FileListing::default());
        };
        list_fd(root.as_fd(), max_entries, max_path_bytes)
            .map_err(|e| Error::io("list conversation directory", self.files_dir(id), e))
    }

    /// What the conversation's directory holds on disk (see [`directory_usage`]).
    pub fn usage(&self, id: &ConversationId, max_inodes: u64) -> Result<DiskUsage> {
        let dir = self.files_dir(id);
        match directory_usage(&dir, max_inodes) {
            Ok(usage) => Ok(usage),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DiskUsage::default()),
            Err(e) => Err(Error::io("measure conversation directory", dir, e)),
        }
    }

    /// Opens a regular file of the conversation for reading. `path` is relative to `/data`; it must not be
    /// absolute, contain `..`, empty or `.` segments, or pass through any symlink.
    pub fn open(&self, id: &ConversationId, path: &str) -> Result<File> {
        self.open_file(id, path).map_err(|e| not_a_file_is_missing(path, e))
    }

    /// [`Workspaces::open`], telling a path that is there but not a regular file ([`Error::InvalidPath`] "is a
    /// directory" or "is not a regular file": a FIFO, a device, a socket) from a missing one. Nothing blocks: the
    /// file is opened with `O_NONBLOCK` and its type checked on the descriptor, so a FIFO is never waited on.
    pub fn open_file(&self, id: &ConversationId, path: &str) -> Result<File> {
        validate_relative_path(path)?;
        let not_found = || Error::FileNotFound { path: path.to_owned() };
        let root = self.open_files_dir(id)?.ok_or_else(not_found)?;
        open_beneath(&root, &self.files_dir(id), path)
    }

    /// Writes `bytes` to `path` in the conversation's `/data` (an upload), creating the directories on the way, and
    /// returns the file as listed. Invariants: nothing is written outside `<root>/<id>/files`, whatever a run
    /// planted there: every existing component is opened with `O_NOFOLLOW` relative to its parent's descriptor
    /// (a symlink, or anything not a directory, is refused, never resolved); the file is written under a fresh name
    /// (`O_CREAT | O_EXCL`, which never follows a symlink) and then renamed over `path`, so an existing symlink or
    /// hard link at `path` is replaced, never written through, and a run that reads `path` meanwhile sees the old
    /// or the new content, never a half. The upload is refused when the directory's usage plus `bytes` (rounded up
    /// to 4 KiB blocks) would exceed `quota_bytes`, or one more inode would exceed `max_inodes`. New directories
    /// (mode 0755) and the file (0644) are given to `owner` when set (the uid the backend's runs own `/data` as;
    /// see [`hand_over`]), so a run can read, change and remove them.
    pub fn write(
        &self,
        id: &ConversationId,
        path: &str,
        bytes: &[u8],
        owner: Option<(u32, u32)>,
        quota_bytes: u64,
        max_inodes: u64,
    ) -> Result<FileEntry> {
        validate_upload_path(path)?;
        let files = self.prepare(id)?;
        let usage =
            directory_usage(&files, max_inodes).map_err(|e| Error::io("measure conversation directory", &files, e))?;
        let needed = (bytes.len() as u64).div_ceil(4096) * 4096;
        if usage.bytes.saturating_add(needed) > quota_bytes || usage.inodes.saturating_add(1) > max_inodes {
            return Err(Error::QuotaExceeded {
                path: path.to_owned(),
                used: usage.bytes,
                size: bytes.len() as u64,
                quota: quota_bytes,
            });
        }
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let top = rustix::fs::open(&files, dir_flags, Mode::empty())
            .map_err(|e| Error::io("open conversation directory", files.join(path), e.into()))?;
        write_beneath(top, &files, path, bytes, owner)
    }
}

/// The regular files beneath `root` (see [`Workspaces::list_within`]), sorted by path.
fn list_fd(root: BorrowedFd<'_>, max_entries: usize, max_path_bytes: usize) -> std::io::Result<FileListing> {
    let mut listing = FileListing::default();
    let mut path_bytes = 0usize;
    walk(root, Some(""), 0, &mut |path, size, modified| {
        // Not UTF-8, or a control character: cannot be named in a URL (see signer.rs).
        let Some(path) = path.filter(|p| !p.chars().any(char::is_control)) else { return true };
        if listing.files.len() == max_entries || path_bytes.saturating_add(path.len()) > max_path_bytes {
            listing.truncated = true;
            return false;
        }
        path_bytes += path.len();
        listing.files.push(FileEntry { path: path.to_owned(), size, modified });
        true
    })?;
    listing.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(listing)
}

/// [`Workspaces::list_within`] for a directory that is not a conversation's (a configured volume): `dir` itself is
/// the operator's and may be a symlink; nothing below it is followed.
pub fn list_in_dir(dir: &Path, max_entries: usize, max_path_bytes: usize) -> Result<FileListing> {
    let root = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io("open directory", dir, e.into()))?;
    list_fd(root.as_fd(), max_entries, max_path_bytes).map_err(|e| Error::io("list directory", dir, e))
}

/// [`Workspaces::write`] without the quota, beneath any directory `files` (a conversation's, or a writable volume,
/// which is the operator's and may itself be a symlink): the same invariants below it.
pub fn write_in_dir(files: &Path, path: &str, bytes: &[u8], owner: Option<(u32, u32)>) -> Result<FileEntry> {
    validate_upload_path(path)?;
    let top = rustix::fs::open(files, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io("open directory", files, e.into()))?;
    write_beneath(top, files, path, bytes, owner)
}

/// Writes `bytes` at `path` beneath the open directory `top` (its host path `files`, for messages); see
/// [`Workspaces::write`] for the invariants.
fn write_beneath(top: OwnedFd, files: &Path, path: &str, bytes: &[u8], owner: Option<(u32, u32)>) -> Result<FileEntry> {
    let through_symlink =
        || Error::InvalidPath { path: path.to_owned(), message: "goes through a symlink or a non-directory".into() };
    let io = |action: &'static str, e: rustix::io::Errno| Error::io(action, files.join(path), e.into());
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = top;
    let (parents, name) = path.rsplit_once('/').map_or(("", path), |(p, n)| (p, n));
    for component in parents.split('/').filter(|c| !c.is_empty()) {
        let sub = match rustix::fs::openat(&dir, component, dir_flags, Mode::empty()) {
            Ok(sub) => sub,
            Err(rustix::io::Errno::NOENT) => {
                match rustix::fs::mkdirat(&dir, component, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(io("create directory", e)),
                }
                // Opened again with O_NOFOLLOW: a symlink a run put there meanwhile is refused here.
                let sub = rustix::fs::openat(&dir, component, dir_flags, Mode::empty()).map_err(|e| match e {
                    rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => through_symlink(),
                    e => io("open directory", e),
                })?;
                if let Some((uid, gid)) = owner {
                    rustix::fs::fchown(
                        &sub,
                        Some(rustix::fs::Uid::from_raw(uid)),
                        Some(rustix::fs::Gid::from_raw(gid)),
                    )
                    .map_err(|e| io("give directory to the sandbox", e))?;
                }
                sub
            }
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => return Err(through_symlink()),
            Err(e) => return Err(io("open directory", e)),
        };
        dir = sub;
    }
    let temp = format!(
        ".sandlot-upload-{}-{}",
        std::process::id(),
        UPLOAD_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let file_flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir, temp.as_str(), file_flags, Mode::from_raw_mode(0o644))
        .map_err(|e| io("create file", e))?;
    let written = (|| {
        use std::io::Write;
        let mut file = File::from(fd);
        if let Some((uid, gid)) = owner {
            rustix::fs::fchown(&file, Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid)))?;
        }
        // The mode is set explicitly: the process umask must not make the file unreadable to runs.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(0o644))?;
        file.write_all(bytes)?;
        rustix::fs::renameat(&dir, temp.as_str(), &dir, name)?;
        Ok::<_, std::io::Error>(())
    })();
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(&dir, temp.as_str(), AtFlags::empty());
        return Err(match e.raw_os_error().map(rustix::io::Errno::from_raw_os_error) {
            Some(rustix::io::Errno::ISDIR | rustix::io::Errno::NOTEMPTY) => {
                Error::InvalidPath { path: path.to_owned(), message: "is a directory".into() }
            }
            _ => Error::io("write file", files.join(path), e),
        });
    }
    Ok(FileEntry { path: path.to_owned(), size: bytes.len() as u64, modified: None })
}

/// Makes the temporary names of concurrent uploads of this process distinct.
static UPLOAD_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A run's hold on its conversation ([`Workspaces::try_claim`]): a shared lock on `<root>/<id>`. Dropping it marks
/// the conversation used now and releases the lock.
#[derive(Debug)]
pub struct Claim {
    dir: OwnedFd,
}

impl Claim {
    /// Sets the directory's mtime to now: the conversation's last use.
    fn touch(&self) {
        let now = rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_NOW };
        let times = rustix::fs::Timestamps { last_access: now, last_modification: now };
        if let Err(error) = rustix::fs::futimens(&self.dir, &times) {
            tracing::warn!(%error, "cannot mark a conversation used");
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.touch();
    }
}

/// Opens a regular file at `path` beneath the directory `root` (its host path `dir`, for messages) for reading:
/// `path` must be relative, without `..`, empty or `.` segments, and pass through no symlink.
fn open_beneath(root: &OwnedFd, dir: &Path, path: &str) -> Result<File> {
    let not_found = || Error::FileNotFound { path: path.to_owned() };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let fd = match rustix::fs::openat2(root, path, flags, Mode::empty(), resolve) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Err(not_found()),
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::XDEV) => {
            return Err(Error::InvalidPath { path: path.to_owned(), message: "goes through a symlink".into() });
        }
        Err(e) => return Err(Error::io("open file", dir.join(path), e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| Error::io("stat file", dir.join(path), e.into()))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(File::from(fd)),
        FileType::Directory => Err(Error::InvalidPath { path: path.to_owned(), message: IS_DIRECTORY.into() }),
        _ => Err(Error::InvalidPath { path: path.to_owned(), message: NOT_REGULAR.into() }),
    }
}

/// The messages of [`Workspaces::open_file`] for a path that is not a regular file.
const IS_DIRECTORY: &str = "is a directory";
const NOT_REGULAR: &str = "is not a regular file";

/// A download's view of [`open_beneath`]'s errors: what is not a regular file is not found.
fn not_a_file_is_missing(path: &str, error: Error) -> Error {
    match error {
        Error::InvalidPath { message, .. } if message == IS_DIRECTORY || message == NOT_REGULAR => {
            Error::FileNotFound { path: path.to_owned() }
        }
        e => e,
    }
}

/// [`Workspaces::open`] for a directory that is not a conversation's (a configured volume): a regular file at
/// `path` beneath `dir`, never through a symlink below it (`dir` itself is the operator's and may be one).
pub fn open_in_dir(dir: &Path, path: &str) -> Result<File> {
    validate_relative_path(path)?;
    let root = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io("open directory", dir, e.into()))?;
    open_beneath(&root, dir, path).map_err(|e| not_a_file_is_missing(path, e))
}

/// Gives a conversation directory to the uid a backend runs code as (`owner`, when the server may change owners,
/// that is as root) and makes it private to that owner (mode 0700, never world-writable).
pub fn hand_over(dir: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    }
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
}

/// What a conversation directory costs the host's disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes of disk allocated (`st_blocks` × 512) to every inode under the directory, itself included: regular
    /// files (their blocks, not their size: a sparse or `fallocate`d file counts what it holds), directories (their
    /// entries), symlinks (their targets) and special files. An inode with several links counts once.
    pub bytes: u64,
    /// Inodes under the directory, itself not included.
    pub inodes: u64,
}

/// What `dir` holds on disk, without following symlinks. A directory that cannot be opened, a tree nested deeper
/// than the walk goes, or more than `max_inodes` inodes is an error, so a run cannot hide space from the quota by
/// making its tree unmeasurable; the walk stops there, which also bounds what one measurement costs.
pub fn directory_usage(dir: &Path, max_inodes: u64) -> std::io::Result<DiskUsage> {
    let root =
        rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let mut usage = DiskUsage { bytes: rustix::fs::fstat(&root)?.st_blocks as u64 * 512, inodes: 0 };
    let mut linked = std::collections::HashSet::new();
    measure(root.as_fd(), 0, max_inodes, &mut linked, &mut usage)?;
    Ok(usage)
}

/// Adds every inode under `dir` to `usage` (see [`directory_usage`]); `linked` holds the inode numbers of the
/// multiply-linked files already counted.
fn measure(
    dir: BorrowedFd<'_>,
    depth: usize,
    max_inodes: u64,
    linked: &mut std::collections::HashSet<u64>,
    usage: &mut DiskUsage,
) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(std::io::Error::other(format!("directories nested deeper than {MAX_DEPTH}")));
    }
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        let kind = FileType::from_raw_mode(stat.st_mode);
        if kind != FileType::Directory && stat.st_nlink > 1 && !linked.insert(stat.st_ino) {
            continue; // another link to an inode already counted
        }
        usage.inodes += 1;
        usage.bytes += stat.st_blocks as u64 * 512;
        if usage.inodes > max_inodes {
            return Err(std::io::Error::other(format!("more than {max_inodes} files and directories")));
        }
        if kind == FileType::Directory {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let sub = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                Ok(sub) => sub,
                Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => continue,
                Err(e) => return Err(e.into()),
            };
            measure(sub.as_fd(), depth + 1, max_inodes, linked, usage)?;
        }
    }
    Ok(())
}

/// Checks the shape of a path an upload names (relative to `/data`, no `..`, empty or `.` segment, no control
/// character), before anything is signed or written.
pub fn validate_upload_path(path: &str) -> Result<()> {
    validate_relative_path(path)?;
    if path.split('/').any(|segment| segment.len() > 255) {
        return Err(Error::InvalidPath {
            path: path.to_owned(),
            message: "has a segment longer than 255 bytes".into(),
        });
    }
    Ok(())
}

/// Checks the shape of a path relative to a conversation's `/data`.
pub(crate) fn validate_relative_path(path: &str) -> Result<()> {
    let invalid = |message: &str| Err(Error::InvalidPath { path: path.to_owned(), message: message.to_owned() });
    if path.is_empty() {
        return invalid("is empty");
    }
    if path.len() > 4096 {
        return invalid("is longer than 4096 bytes");
    }
    if path.starts_with('/') {
        return invalid("is absolute");
    }
    if path.chars().any(char::is_control) {
        return invalid("contains a control character");
    }
    for segment in path.split('/') {
        match segment {
            "" => return invalid("has an empty segment"),
            "." | ".." => return invalid("has a '.' or '..' segment"),
            _ => {}
        }
    }
    Ok(())
}

/// Visits every regular file under `dir` as (relative path, size) without following symlinks, skipping what it
/// cannot read and what is nested deeper than `MAX_DEPTH`; the path is `None` when a component is not UTF-8. The
/// visitor returns false to stop.
/// What [`walk`] calls for each regular file: its path (None when not UTF-8), size and modification time; false
/// stops the walk.
type Visit<'a> = dyn FnMut(Option<&str>, u64, Option<std::time::SystemTime>) -> bool + 'a;

/// A stat's modification time (None before the epoch).
fn modified(stat: &rustix::fs::Stat) -> Option<std::time::SystemTime> {
    let secs = u64::try_from(stat.st_mtime).ok()?;
    let nanos = u32::try_from(stat.st_mtime_nsec).ok()?;
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(secs, nanos))
}

fn walk(dir: BorrowedFd<'_>, prefix: Option<&str>, depth: usize, visit: &mut Visit<'_>) -> std::io::Result<bool> {
    if depth > MAX_DEPTH {
        return Ok(true);
    }
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let path = match (prefix, name.to_str()) {
            (Some(""), Ok(name)) => Some(name.to_owned()),
            (Some(prefix), Ok(name)) => Some(format!("{prefix}/{name}")),
            _ => None,
        };
        let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile if !visit(path.as_deref(), stat.st_size as u64, modified(&stat)) => return Ok(false),
            FileType::RegularFile => {}
            FileType::Directory => {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let sub = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
                    Ok(sub) => sub,
                    Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => continue,
                    Err(rustix::io::Errno::ACCESS) => continue,
                    Err(e) => return Err(e.into()),
                };
                if !walk(sub.as_fd(), path.as_deref(), depth + 1, visit)? {
                    return Ok(false);
                }
            }
            _ => {}
        }
    }
    Ok(true)
}

/// What [`lock_conversation`] found.
enum Locked {
    /// The conversation directory, opened and locked as asked (the lock goes with the descriptor).
    Held(OwnedFd),
    /// No such directory.
    Missing,
    /// Another holder's lock is in the way.
    Busy,
}

/// Opens `<root>/<id>` without following a symlink and takes `lock` on it (shared for a run's claim, exclusive for
/// a removal), without waiting.
fn lock_conversation(conversation: &Path, lock: rustix::fs::FlockOperation) -> Result<Locked> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = match rustix::fs::open(conversation, flags, Mode::empty()) {
        Ok(dir) => dir,
        Err(rustix::io::Errno::NOENT) => return Ok(Locked::Missing),
        Err(e) => return Err(Error::io("open conversation directory", conversation, e.into())),
    };
    match rustix::fs::flock(&dir, lock) {
        Ok(()) => Ok(Locked::Held(dir)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(Locked::Busy),
        Err(e) => Err(Error::io("lock conversation directory", conversation, e.into())),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::fs::symlink;

    use super::*;

    fn setup() -> (tempfile::TempDir, Workspaces, ConversationId, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(tmp.path());
        let id = ConversationId::parse("conv").unwrap();
        let dir = ws.prepare(&id).unwrap();
        (tmp, ws, id, dir)
    }

    #[test]
    fn lists_files_recursively_and_skips_symlinks() {
        let (_tmp, ws, id, dir) = setup();
        std::fs::write(dir.join("b.txt"), "bb").unwrap();
        std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
        std::fs::write(dir.join("sub/deeper/a name.txt"), "a").unwrap();
        symlink("/etc/passwd", dir.join("leak")).unwrap();
        symlink("/etc", dir.join("etc-dir")).unwrap();
        let mut listing = ws.list(&id, 1000).unwrap();
        assert!(listing.files.iter().all(|f| f.modified.is_some()), "{listing:?}");
        listing.files.iter_mut().for_each(|f| f.modified = None);
        assert_eq!(
            listing,
            FileListing {
                files: vec![
                    FileEntry { path: "b.txt".into(), size: 2, modified: None },
                    FileEntry { path: "sub/deeper/a name.txt".into(), size: 1, modified: None },
                ],
                truncated: false,
            }
        );
        assert_eq!(ws.usage(&id, 100).unwrap().inodes, 6);
    }

    #[test]
    fn usage_counts_what_listing_cannot_name() {
        use std::os::unix::ffi::OsStrExt;
        let (_tmp, ws, id, dir) = setup();
        let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
        std::fs::create_dir(dir.join(odd)).unwrap();
        std::fs::write(dir.join(odd).join("hidden.bin"), vec![1u8; 10]).unwrap();
        assert_eq!(ws.list(&id, 10).unwrap(), FileListing::default());
        assert_eq!(ws.usage(&id, 100).unwrap().inodes, 2);
    }

    /// Allocated blocks of every inode under `dir` (and `dir`), each inode once, as `directory_usage` should count.
    fn blocks_of(dir: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let mut seen = std::collections::HashSet::new();
        let mut bytes = std::fs::symlink_metadata(dir).unwrap().blocks() * 512;
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    stack.push(path);
                } else if !seen.insert(meta.ino()) {
                    continue;
                }
                bytes += meta.blocks() * 512;
            }
        }
        bytes
    }

    #[test]
    fn usage_counts_the_blocks_of_every_inode_not_file_sizes() {
        let (_tmp, ws, id, dir) = setup();
        // A sparse file: a large size, almost no blocks.
        std::fs::File::create(dir.join("sparse")).unwrap().set_len(1 << 30).unwrap();
        std::fs::write(dir.join("data"), vec![7u8; 100_000]).unwrap();
        std::fs::hard_link(dir.join("data"), dir.join("data-again")).unwrap();
        // A symlink whose target is too long to live in the inode, and a directory with many long entries.
        symlink("t".repeat(3000), dir.join("long-link")).unwrap();
        std::fs::create_dir(dir.join("names")).unwrap();
        for i in 0..200 {
            std::fs::create_dir(dir.join("names").join(format!("{i:0>200}"))).unwrap();
        }
        let usage = ws.usage(&id, 1000).unwrap();
        assert_eq!(usage, DiskUsage { bytes: blocks_of(&dir), inodes: 4 + 200 });
        assert!(usage.bytes < 1 << 24, "the sparse file's size was counted: {usage:?}");
        assert!(usage.bytes >= 100_000, "the data was missed: {usage:?}");
    }

    #[test]
    fn measuring_more_inodes_than_allowed_is_an_error() {
        let (_tmp, ws, id, dir) = setup();
        for i in 0..11 {
            std::fs::write(dir.join(format!("f{i}")), "").unwrap();
        }
        assert_eq!(ws.usage(&id, 11).unwrap().inodes, 11);
        assert!(ws.usage(&id, 10).is_err());
    }

    #[test]
    fn measuring_a_tree_too_deep_to_walk_is_an_error() {
        let (_tmp, ws, id, dir) = setup();
        let deep = (0..=MAX_DEPTH + 1).fold(dir.clone(), |path, _| path.join("d"));
        std::fs::create_dir_all(&deep).unwrap();
        assert!(ws.usage(&id, 1000).is_err());
        assert_eq!(ws.list(&id, 10).unwrap(), FileListing::default());
    }

    #[test]
    fn listing_stops_at_the_cap_with_a_flag() {
        let (_tmp, ws, id, dir) = setup();
        for i in 0..5 {
            std::fs::write(dir.join(format!("f{i}")), "x").unwrap();
        }
        let listing = ws.list(&id, 3).unwrap();
        assert_eq!(listing.files.len(), 3);
        assert!(listing.truncated);
    }

    #[test]
    fn missing_conversation_lists_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(tmp.path());
        let id = ConversationId::parse("never").unwrap();
        assert_eq!(ws.list(&id, 10).unwrap(), FileListing::default());
    }

    #[test]
    fn a_relative_root_is_made_absolute_against_the_current_directory() {
        let ws = Workspaces::new("sandlot-data");
        assert_eq!(ws.root(), std::env::current_dir().unwrap().join("sandlot-data"));
    }

    #[test]
    fn open_reads_files_but_never_through_symlinks() {
        let (_tmp, ws, id, dir) = setup();
        std::fs::create_dir(dir.join("d")).unwrap();
        std::fs::write(dir.join("d/ok.txt"), "hello").unwrap();
        symlink("/etc/passwd", dir.join("leak")).unwrap();
        symlink("/etc", dir.join("etcdir")).unwrap();
        symlink("d", dir.join("inner")).unwrap();
        let mut text = String::new();
        ws.open(&id, "d/ok.txt").unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "hello");
        for path in ["leak", "etcdir/passwd", "inner/ok.txt"] {
            let err = ws.open(&id, path).unwrap_err();
            assert!(matches!(err, Error::InvalidPath { .. }), "{path}: {err}");
        }
        assert!(matches!(ws.open(&id, "d").unwrap_err(), Error::FileNotFound { .. }));
        assert!(matches!(ws.open(&id, "nope").unwrap_err(), Error::FileNotFound { .. }));
    }

    #[test]
    fn a_listing_stops_at_its_byte_budget() {
        let (_tmp, ws, id, dir) = setup();
        for name in ["aaaa", "bbbb", "cccc"] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let listing = ws.list_within(&id, 10, 8).unwrap();
        assert_eq!((listing.files.len(), listing.truncated), (2, true));
        let listing = ws.list_within(&id, 10, 12).unwrap();
        assert_eq!((listing.files.len(), listing.truncated), (3, false));
    }

    #[test]
    fn malformed_paths_are_rejected_before_any_lookup() {
        let (_tmp, ws, id, _dir) = setup();
        let cases = [
            ("", "is empty"),
            ("/etc/passwd", "is absolute"),
            ("../x", "has a '.' or '..' segment"),
            ("a/../../x", "has a '.' or '..' segment"),
            ("a//b", "has an empty segment"),
            ("a\0b", "contains a control character"),
            ("P\n1000", "contains a control character"),
            ("a\u{85}b", "contains a control character"),
        ];
        for (path, message) in cases {
            match ws.open(&id, path).unwrap_err() {
                Error::InvalidPath { message: m, .. } => assert_eq!(m, message, "{path:?}"),
                other => panic!("{path:?}: {other}"),
            }
        }
    }

    const QUOTA: u64 = 1 << 30;

    /// Every path under `dir`, symlinks not followed, with the content of each regular file.
    fn snapshot(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    stack.push(path.clone());
                }
                let content = meta.is_file().then(|| std::fs::read(&path).unwrap());
                found.push((path, content));
            }
        }
        found.sort();
        found
    }

    #[test]
    fn write_creates_directories_and_replaces_files_atomically() {
        let (_tmp, ws, id, dir) = setup();
        assert_eq!(
            ws.write(&id, "a/b/c.csv", b"x,y\n1,2\n", None, QUOTA, 100).unwrap(),
            FileEntry { path: "a/b/c.csv".into(), size: 8, modified: None }
        );
        assert_eq!(std::fs::read(dir.join("a/b/c.csv")).unwrap(), b"x,y\n1,2\n");
        ws.write(&id, "a/b/c.csv", b"new", None, QUOTA, 100).unwrap();
        assert_eq!(std::fs::read(dir.join("a/b/c.csv")).unwrap(), b"new");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dir.join("a/b/c.csv")).unwrap().permissions().mode() & 0o777, 0o644);
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.join("a/b")).unwrap().count(), 1);
        // A directory in the way is refused, not replaced.
        let err = ws.write(&id, "a/b", b"x", None, QUOTA, 100).unwrap_err();
        assert!(matches!(err, Error::InvalidPath { .. }), "{err}");
        assert_eq!(std::fs::read_dir(dir.join("a/b")).unwrap().count(), 1);
    }

    #[test]
    fn write_refuses_malformed_paths_and_what_exceeds_the_quota() {
        let (_tmp, ws, id, dir) = setup();
        let long = "n".repeat(256);
        for path in ["", "/etc/x", "../x", "a/../x", "a//b", "a\0b", "a\nb", ".", long.as_str()] {
            let err = ws.write(&id, path, b"x", None, QUOTA, 100).unwrap_err();
            assert!(matches!(err, Error::InvalidPath { .. }), "{path:?}: {err}");
        }
        std::fs::write(dir.join("big"), vec![1u8; 64 * 1024]).unwrap();
        let err = ws.write(&id, "more", &vec![2u8; 64 * 1024], None, 100 * 1024, 100).unwrap_err();
        assert!(matches!(err, Error::QuotaExceeded { .. }), "{err}");
        assert!(!dir.join("more").exists());
        ws.write(&id, "small", b"fits", None, 100 * 1024, 100).unwrap();
        let err = ws.write(&id, "one-more", b"x", None, QUOTA, 2).unwrap_err();
        assert!(matches!(err, Error::QuotaExceeded { .. }), "{err}");
    }

    /// ATTACK: a run plants symlinks in `/data` pointing at the host's `/etc`, at `/`, and at another
    /// conversation's files; uploads through them are refused and nothing changes outside the conversation.
    #[test]
    fn attack_uploads_through_planted_symlinks_write_nothing_outside() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(tmp.path().join("root"));
        let id = ConversationId::parse("victim-run").unwrap();
        let other = ConversationId::parse("other").unwrap();
        let dir = ws.prepare(&id).unwrap();
        let other_dir = ws.prepare(&other).unwrap();
        std::fs::write(other_dir.join("secret"), "other's").unwrap();
        // A stand-in for the host's /etc and /, so the assertions can see every byte of them.
        let host = tmp.path().join("host");
        std::fs::create_dir_all(host.join("etc")).unwrap();
        std::fs::create_dir_all(host.join("tmp")).unwrap();
        std::fs::write(host.join("etc/passwd"), "root:x:0:0").unwrap();
        symlink(host.join("etc"), dir.join("link")).unwrap();
        symlink(&host, dir.join("dir")).unwrap();
        symlink("../../other/files", dir.join("x")).unwrap();
        symlink("/etc", dir.join("etc")).unwrap();
        symlink(host.join("etc/passwd"), dir.join("passwd")).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        symlink(&host, dir.join("sub/up")).unwrap();
        let host_before = snapshot(&host);
        let other_before = snapshot(&other_dir);
        for path in ["link/passwd", "dir/tmp/evil", "x/f", "x/secret", "etc/passwd", "sub/up/tmp/evil", "link/new/f"] {
            let err = ws.write(&id, path, b"pwned", None, QUOTA, 1000).unwrap_err();
            assert!(matches!(err, Error::InvalidPath { .. }), "{path}: {err}");
        }
        // A symlink as the last component is replaced by the file, never written through.
        ws.write(&id, "passwd", b"mine", None, QUOTA, 1000).unwrap();
        assert!(std::fs::symlink_metadata(dir.join("passwd")).unwrap().is_file());
        assert_eq!(snapshot(&host), host_before);
        assert_eq!(snapshot(&other_dir), other_before);
        assert_eq!(std::fs::read_to_string(host.join("etc/passwd")).unwrap(), "root:x:0:0");
        assert!(!std::path::Path::new("/etc/evil").exists() && !std::path::Path::new("/tmp/evil").exists());
    }
}
