//! Conversation directories on the host: creation, claims and removal; their owners, listing, usage, reads and
//! uploads (in the submodules, each for one job).
//!
//! Layout: `<root>/<conversationId>/files` is what a run sees at `/data`; as root it is the mount of
//! `<root>/<conversationId>/files.img` (see `disk_image`), made on first use. Everything here walks and opens with
//! file descriptors and `O_NOFOLLOW`/`RESOLVE_BENEATH`, so a symlink a sandboxed program planted is never followed
//! out of the conversation, even if the tree changes while it is read.

mod budget;
mod listing;
mod owner;
mod safe_open;
mod usage;
mod write;

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::{ConversationId, Error, Result};

pub use budget::{
    Budgeted, ConversationBounds, DEFAULT_FREE_SPACE_PERCENT, DEFAULT_MAX_CONVERSATIONS,
    DEFAULT_TENANT_MAX_CONVERSATIONS, Spent,
};
pub use listing::{FileEntry, FileListing, MAX_VISITED_ENTRIES, WalkEnd, WalkLimits, list_in_dir};
pub use safe_open::{open_in_dir, validate_relative_path};
pub use usage::{DiskUsage, directory_usage};
pub use write::{PendingFile, create_in_dir, validate_upload_path, write_in_dir};

/// Deepest directory nesting that is walked. Measuring a deeper tree is an error (so a quota is never bypassed by
/// nesting); listing stops there.
const MAX_DEPTH: usize = 128;

/// The root under which every conversation's directory lives.
#[derive(Debug, Clone)]
pub struct Workspaces {
    root: PathBuf,
    /// The conversations' count and bytes against their bounds, shared by every clone.
    budget: std::sync::Arc<budget::Budget>,
    /// Each conversation's files on an image of their own (the kernel's bound on `/data`), when the host allows.
    images: Option<crate::DiskImages>,
}

impl Workspaces {
    /// Workspaces under `root` (created on first use), conversations bounded by the default
    /// [`ConversationBounds`]. A relative `root` (`--root ./data`) is
    /// made absolute against the current directory now, because the sandbox's init and Docker resolve paths from
    /// elsewhere.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self::with_bounds(root, ConversationBounds::default())
    }

    /// [`Workspaces::new`] with conversations bounded by `bounds` (see [`Workspaces::create_conversation`]).
    pub fn with_bounds(root: impl Into<PathBuf>, bounds: ConversationBounds) -> Self {
        Self::bounded_by(root, Some(bounds))
    }

    /// Workspaces whose conversations are not counted nor bounded: for `sandlot run`, the operator's one run on
    /// its own root, which must not walk the root to count it.
    pub fn unbounded(root: impl Into<PathBuf>) -> Self {
        Self::bounded_by(root, None)
    }

    fn bounded_by(root: impl Into<PathBuf>, bounds: Option<ConversationBounds>) -> Self {
        let root = root.into();
        Self {
            root: std::path::absolute(&root).unwrap_or(root),
            budget: std::sync::Arc::new(budget::Budget::new(bounds)),
            images: None,
        }
    }

    /// The same workspaces, each conversation's `files` a mount of its own disk image (see `disk_image`).
    pub fn with_images(self, images: crate::DiskImages) -> Self {
        Self { images: Some(images), ..self }
    }

    /// Whether conversations get disk images.
    pub fn has_images(&self) -> bool {
        self.images.is_some()
    }

    /// Unmounts every conversation's image that no run holds now (at shutdown; a held one stays mounted, and the
    /// next server reuses it). Returns how many were unmounted.
    pub fn unmount_images(&self) -> usize {
        let Ok(conversations) = self.conversations() else { return 0 };
        conversations.iter().filter(|(id, _)| self.unmount_image(id)).count()
    }

    /// Unmounts the conversation's image unless a run holds it (of this process or another on the root); whether
    /// it did. The next use mounts it again.
    pub fn unmount_image(&self, id: &ConversationId) -> bool {
        let conversation = self.root.join(id.as_str());
        let Ok(Locked::Held(_lock)) =
            lock_conversation(&conversation, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        else {
            return false;
        };
        let files = self.files_dir(id);
        if !crate::disk_image::is_mounted(&files).unwrap_or(false) {
            return false;
        }
        match crate::disk_image::unmount(&files) {
            Ok(()) => {
                if let Some(images) = &self.images {
                    images.release(&conversation);
                }
                true
            }
            Err(error) => {
                tracing::warn!(%error, files = %files.display(), "cannot unmount a conversation's image");
                false
            }
        }
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
        self.create_conversation(id, None)?;
        let dir = self.files_dir(id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .or_else(|e| if e.kind() == std::io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) })
            .map_err(|e| Error::io("create conversation directory", &dir, e))?;
        if let Some(images) = &self.images {
            images.ensure_mounted(&dir).map_err(|e| match e.kind() {
                // Another node sharing this root has it mounted: the call belongs there (or comes back once that
                // node is gone).
                std::io::ErrorKind::ResourceBusy => Error::Busy {
                    reason: format!("conversation {id}: {e}"),
                    retry_after: std::time::Duration::from_secs(5),
                },
                _ => Error::io("mount conversation image", &dir, e),
            })?;
        }
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
        // `None`: removed between `prepare` and here, or being removed: try again.
        let Some(dir) = lock_shared(&self.root.join(id.as_str()))? else { return Ok(None) };
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
        // Its image first (the image file goes with the directory; a file the server still reads keeps it until
        // then).
        crate::disk_image::unmount(&conversation.join("files"))
            .map_err(|e| Error::io("unmount conversation image", &conversation, e))?;
        if let Some(images) = &self.images {
            images.release(&conversation);
        }
        // A run of another process may make `files` again while this empties the directory (it then waits for
        // the lock, and tries again once the directory is gone): empty it until it can be removed.
        let mut attempts = 0;
        loop {
            crate::removal::empty_directory(dir.as_fd())
                .map_err(|e| Error::io("remove conversation directory", &conversation, e))?;
            match std::fs::remove_dir(&conversation) {
                Ok(()) => {
                    self.budget_forget(id);
                    return Ok(true);
                }
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
}

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

/// Gives a conversation directory to the uid a backend runs code as (`owner`, when the server may change owners,
/// that is as root) and makes it private to that owner (mode 0700, never world-writable).
pub fn hand_over(dir: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    }
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
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
    let Some(dir) = open_conversation_dir(conversation)? else { return Ok(Locked::Missing) };
    match rustix::fs::flock(&dir, lock) {
        Ok(()) => Ok(Locked::Held(dir)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(Locked::Busy),
        Err(e) => Err(Error::io("lock conversation directory", conversation, e.into())),
    }
}

/// A shared hold on the conversation whose files directory is `files` (a run's [`crate::Job::workspace`] in
/// sandlot's layout), as a run's [`Claim`] holds it but without marking it used: while it is kept the conversation
/// is neither removed nor its disk image unmounted. `None` when the conversation is gone or being removed. For a
/// backend that keeps a sandbox ready for a conversation's next run, which lets go when the engine asks (see
/// [`crate::Backend::forget_conversation`]).
pub fn hold_conversation(files: &Path) -> Result<Option<OwnedFd>> {
    match files.parent() {
        Some(conversation) if files.file_name().is_some_and(|name| name == "files") => lock_shared(conversation),
        _ => Ok(None),
    }
}

/// A shared lock on `conversation` (`<root>/<id>`), if it can be had now and is on the directory at that path
/// (the lock may be on one removed while this waited for it).
fn lock_shared(conversation: &Path) -> Result<Option<OwnedFd>> {
    let dir = match lock_conversation(conversation, rustix::fs::FlockOperation::NonBlockingLockShared)? {
        Locked::Held(dir) => dir,
        Locked::Missing | Locked::Busy => return Ok(None),
    };
    let held = rustix::fs::fstat(&dir).map_err(|e| Error::io("stat conversation", conversation, e.into()))?;
    match rustix::fs::stat(conversation) {
        Ok(now) if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) => Ok(Some(dir)),
        Ok(_) | Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(Error::io("stat conversation", conversation, e.into())),
    }
}

/// Opens `<root>/<id>` without following a symlink; `None` when there is none.
fn open_conversation_dir(conversation: &Path) -> Result<Option<OwnedFd>> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::open(conversation, flags, Mode::empty()) {
        Ok(dir) => Ok(Some(dir)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(Error::io("open conversation directory", conversation, e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root in a temporary directory with one prepared conversation: (the temporary directory, the workspaces,
    /// the conversation, its files directory).
    pub(super) fn setup() -> (tempfile::TempDir, Workspaces, ConversationId, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(tmp.path());
        let id = ConversationId::parse("conv").unwrap();
        let dir = ws.prepare(&id).unwrap();
        (tmp, ws, id, dir)
    }

    #[test]
    fn a_relative_root_is_made_absolute_against_the_current_directory() {
        let ws = Workspaces::new("sandlot-data");
        assert_eq!(ws.root(), std::env::current_dir().unwrap().join("sandlot-data"));
    }
}
