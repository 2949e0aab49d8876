//! Listing a conversation's files (or a volume's): every regular file beneath the directory, bounded in number and
//! in bytes of paths, walked by descriptor so that no symlink is followed and nothing deeper than the walk goes is
//! listed. A walk also examines at most [`MAX_VISITED_ENTRIES`] entries of any kind (a tree of empty directories
//! lists nothing yet costs as much as one of files; hard links cost no inode), and one a caller drives
//! ([`Workspaces::list_limited`], the file tools) stops when its caller gives up. A walk blocks: callers on an async
//! runtime run it with `spawn_blocking`.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::{MAX_DEPTH, Workspaces};
use crate::{ConversationId, Error, Result};

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

/// Most entries (files, directories, anything else) one listing examines; past them it stops, marked truncated.
pub const MAX_VISITED_ENTRIES: usize = 100_000;

/// How far a walk a caller drives may go ([`Workspaces::list_limited`]).
#[derive(Clone, Copy)]
pub struct WalkLimits<'a> {
    /// Regular files listed at most.
    pub max_files: usize,
    /// Bytes of listed paths at most.
    pub max_path_bytes: usize,
    /// Directory entries examined at most, whatever they are (files, hard links, directories, symlinks, devices).
    pub max_visited: usize,
    /// Polled at every entry; true stops the walk ([`WalkEnd::Stopped`]).
    pub stop: &'a (dyn Fn() -> bool + Sync),
}

/// Why a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEnd {
    /// Every entry was examined.
    Complete,
    /// [`WalkLimits::max_files`] or [`WalkLimits::max_path_bytes`] was reached.
    Listed,
    /// [`WalkLimits::max_visited`] entries were examined.
    Visited,
    /// [`WalkLimits::stop`] said so.
    Stopped,
}

impl Workspaces {
    /// Every regular file under the conversation's directory (symlinks and special files are skipped, never
    /// followed), at most `max_entries` of them.
    pub fn list(&self, id: &ConversationId, max_entries: usize) -> Result<FileListing> {
        self.list_within(id, max_entries, usize::MAX)
    }

    /// [`Workspaces::list`], also stopped (and marked truncated) before the listed paths would hold more than
    /// `max_path_bytes` bytes in all: a tree of long, deeply nested names must not make a listing (and the result
    /// built from it) of any size; and after [`MAX_VISITED_ENTRIES`] entries examined.
    pub fn list_within(&self, id: &ConversationId, max_entries: usize, max_path_bytes: usize) -> Result<FileListing> {
        let limits =
            WalkLimits { max_files: max_entries, max_path_bytes, max_visited: MAX_VISITED_ENTRIES, stop: &|| false };
        Ok(self.list_limited(id, &limits)?.0)
    }

    /// [`Workspaces::list_within`] for a walk a caller drives: also stopped after `limits.max_visited` entries
    /// examined or when `limits.stop` says so (then marked truncated), and saying why it ended.
    pub fn list_limited(&self, id: &ConversationId, limits: &WalkLimits<'_>) -> Result<(FileListing, WalkEnd)> {
        let Some(root) = self.open_files_dir(id)? else {
            return Ok((FileListing::default(), WalkEnd::Complete));
        };
        list_fd(root.as_fd(), limits).map_err(|e| Error::io("list conversation directory", self.files_dir(id), e))
    }
}

/// The regular files beneath `root` (see [`Workspaces::list_limited`]), sorted by path.
fn list_fd(root: BorrowedFd<'_>, limits: &WalkLimits<'_>) -> std::io::Result<(FileListing, WalkEnd)> {
    let mut listing = FileListing::default();
    let mut path_bytes = 0usize;
    let mut visited = 0usize;
    let mut end = WalkEnd::Complete;
    let mut examine = || {
        visited += 1;
        if visited > limits.max_visited {
            end = WalkEnd::Visited;
        } else if (limits.stop)() {
            end = WalkEnd::Stopped;
        }
        end == WalkEnd::Complete
    };
    let mut listed = WalkEnd::Complete;
    walk(root, Some(""), 0, &mut examine, &mut |path, size, modified| {
        // Not UTF-8, or a control character: cannot be named in a URL (see signer.rs).
        let Some(path) = path.filter(|p| !p.chars().any(char::is_control)) else { return true };
        if listing.files.len() == limits.max_files || path_bytes.saturating_add(path.len()) > limits.max_path_bytes {
            listed = WalkEnd::Listed;
            return false;
        }
        path_bytes += path.len();
        listing.files.push(FileEntry { path: path.to_owned(), size, modified });
        true
    })?;
    let end = if listed == WalkEnd::Complete { end } else { listed };
    listing.truncated = end != WalkEnd::Complete;
    listing.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((listing, end))
}

/// [`Workspaces::list_within`] for a directory that is not a conversation's (a configured volume): `dir` itself is
/// the operator's and may be a symlink; nothing below it is followed.
pub fn list_in_dir(dir: &Path, max_entries: usize, max_path_bytes: usize) -> Result<FileListing> {
    let root = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io("open directory", dir, e.into()))?;
    let limits =
        WalkLimits { max_files: max_entries, max_path_bytes, max_visited: MAX_VISITED_ENTRIES, stop: &|| false };
    list_fd(root.as_fd(), &limits).map(|(listing, _)| listing).map_err(|e| Error::io("list directory", dir, e))
}

/// What [`walk`] calls for each regular file: its path (None when not UTF-8), size and modification time; false
/// stops the walk.
type Visit<'a> = dyn FnMut(Option<&str>, u64, Option<std::time::SystemTime>) -> bool + 'a;

/// A stat's modification time (None before the epoch).
fn modified(stat: &rustix::fs::Stat) -> Option<std::time::SystemTime> {
    let secs = u64::try_from(stat.st_mtime).ok()?;
    let nanos = u32::try_from(stat.st_mtime_nsec).ok()?;
    std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(secs, nanos))
}

/// Visits every regular file under `dir` (see [`Visit`]) without following symlinks, skipping what it
/// cannot read and what is nested deeper than `MAX_DEPTH`; the path is `None` when a component is not UTF-8. The
/// visitor returns false to stop; so does `examine`, called before each entry is looked at.
fn walk(
    dir: BorrowedFd<'_>,
    prefix: Option<&str>,
    depth: usize,
    examine: &mut dyn FnMut() -> bool,
    visit: &mut Visit<'_>,
) -> std::io::Result<bool> {
    if depth > MAX_DEPTH {
        return Ok(true);
    }
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if !examine() {
            return Ok(false);
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
                if !walk(sub.as_fd(), path.as_deref(), depth + 1, examine, visit)? {
                    return Ok(false);
                }
            }
            _ => {}
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::workspaces::tests::setup;

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
    fn a_limited_walk_stops_at_its_entries_hard_links_and_directories_counted() {
        let (_tmp, ws, id, dir) = setup();
        std::fs::write(dir.join("one"), "x").unwrap();
        for i in 0..9 {
            std::fs::hard_link(dir.join("one"), dir.join(format!("link{i}"))).unwrap();
        }
        std::fs::create_dir(dir.join("empty")).unwrap();
        let limits = |max_visited| WalkLimits { max_files: 100, max_path_bytes: 1 << 20, max_visited, stop: &|| false };
        let (listing, end) = ws.list_limited(&id, &limits(11)).unwrap();
        assert_eq!((listing.files.len(), listing.truncated, end), (10, false, WalkEnd::Complete));
        let (listing, end) = ws.list_limited(&id, &limits(5)).unwrap();
        assert_eq!((listing.files.len() <= 5, listing.truncated, end), (true, true, WalkEnd::Visited));
        let stopped = WalkLimits { stop: &|| true, ..limits(100) };
        let (listing, end) = ws.list_limited(&id, &stopped).unwrap();
        assert_eq!((listing.files.len(), listing.truncated, end), (0, true, WalkEnd::Stopped));
    }

    /// A tree of empty directories lists nothing, yet its walk cost as much as one of files: past
    /// `MAX_VISITED_ENTRIES` entries of any kind the walk stops, and the listing says it was cut short.
    #[test]
    fn a_listing_stops_after_visiting_its_entry_budget() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        for i in 0..MAX_VISITED_ENTRIES {
            std::fs::create_dir(dir.path().join(format!("d{i}"))).unwrap();
        }
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        let listing = list_in_dir(dir.path(), 10, usize::MAX).unwrap();
        assert!(listing.truncated && listing.files.len() <= 1, "{listing:?}");
    }
}
