//! Uploads: writing a file into a conversation's `/data` (or a writable volume) beneath the directory's descriptor,
//! never through a symlink or hard link a run planted, replaced atomically ([`PendingFile`]: a temporary file beside
//! the path, renamed over it), within the conversation's disk quota.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::{Workspaces, directory_usage, validate_relative_path};
use crate::{ConversationId, Error, FileEntry, Result};

impl Workspaces {
    /// Writes `bytes` to `path` in the conversation's `/data` (an upload), creating the directories on the way, and
    /// returns the file as listed. Invariants: nothing is written outside `<root>/<id>/files`, whatever a run
    /// planted there: every existing component is opened with `O_NOFOLLOW` relative to its parent's descriptor
    /// (a symlink, or anything not a directory, is refused, never resolved); the file is written under a fresh name
    /// (`O_CREAT | O_EXCL`, which never follows a symlink) and then renamed over `path`, so an existing symlink or
    /// hard link at `path` is replaced, never written through, and a run that reads `path` meanwhile sees the old
    /// or the new content, never a half. The upload is refused when the directory's usage plus `bytes` (rounded up
    /// to 4 KiB blocks) would exceed `quota_bytes`, or one more inode would exceed `max_inodes`. New directories
    /// (mode 0755) and the file (0644) are given to `owner` when set (the uid the backend's runs own `/data` as;
    /// see [`hand_over`](super::hand_over)), so a run can read, change and remove them. The quota check is not
    /// serialised with other uploads: the engine's go through `Engine::begin_upload` (`uploads.rs`), which is.
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
        use std::io::Write;
        let (pending, mut file) = self.create_upload(id, path, owner)?;
        file.write_all(bytes).map_err(|e| Error::io("write file", files.join(path), e))?;
        pending.commit(bytes.len() as u64)
    }

    /// The start of an upload to `path` in the conversation's `/data`, with the invariants of
    /// [`Workspaces::write`] but no quota (the caller's, see `Engine::begin_upload`): the directories on the way are
    /// made, and an empty temporary file beside `path` is returned to be written, then committed.
    pub fn create_upload(
        &self,
        id: &ConversationId,
        path: &str,
        owner: Option<(u32, u32)>,
    ) -> Result<(PendingFile, File)> {
        validate_upload_path(path)?;
        let files = self.prepare(id)?;
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let top = rustix::fs::open(&files, dir_flags, Mode::empty())
            .map_err(|e| Error::io("open conversation directory", files.join(path), e.into()))?;
        create_beneath(top, &files, path, owner)
    }
}

/// [`Workspaces::write`] without the quota, beneath any directory `files` (a conversation's, or a writable volume,
/// which is the operator's and may itself be a symlink): the same invariants below it.
pub fn write_in_dir(files: &Path, path: &str, bytes: &[u8], owner: Option<(u32, u32)>) -> Result<FileEntry> {
    validate_upload_path(path)?;
    let top = rustix::fs::open(files, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io("open directory", files, e.into()))?;
    write_beneath(top, files, path, bytes, owner)
}

/// The start of an upload beneath `files` without a quota, as [`write_in_dir`] writes: the temporary file to write
/// and what renames it over `path`.
pub fn create_in_dir(files: &Path, path: &str, owner: Option<(u32, u32)>) -> Result<(PendingFile, File)> {
    validate_upload_path(path)?;
    let top = rustix::fs::open(files, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| Error::io("open directory", files, e.into()))?;
    create_beneath(top, files, path, owner)
}

/// Writes `bytes` at `path` beneath the open directory `top` (its host path `files`, for messages); see
/// [`Workspaces::write`] for the invariants.
fn write_beneath(top: OwnedFd, files: &Path, path: &str, bytes: &[u8], owner: Option<(u32, u32)>) -> Result<FileEntry> {
    use std::io::Write;
    let (pending, mut file) = create_beneath(top, files, path, owner)?;
    file.write_all(bytes).map_err(|e| Error::io("write file", files.join(path), e))?;
    pending.commit(bytes.len() as u64)
}

/// A file being uploaded: written under a fresh temporary name beside `path`, renamed over it by
/// [`PendingFile::commit`], removed if dropped before.
#[derive(Debug)]
pub struct PendingFile {
    /// The directory the file goes in, opened without following a symlink.
    dir: OwnedFd,
    temp: String,
    name: String,
    /// The path relative to `files`, and `files` itself (for messages).
    path: String,
    files: std::path::PathBuf,
    committed: bool,
}

impl PendingFile {
    /// Renames the temporary file over `path` (replacing a file or symlink there, never writing through it): the
    /// upload, `size` bytes, becomes visible whole.
    pub fn commit(mut self, size: u64) -> Result<FileEntry> {
        if let Err(e) = rustix::fs::renameat(&self.dir, self.temp.as_str(), &self.dir, self.name.as_str()) {
            return Err(match e {
                rustix::io::Errno::ISDIR | rustix::io::Errno::NOTEMPTY => {
                    Error::InvalidPath { path: self.path.clone(), message: "is a directory".into() }
                }
                e => Error::io("write file", self.files.join(&self.path), e.into()),
            });
        }
        self.committed = true;
        Ok(FileEntry { path: self.path.clone(), size, modified: None })
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = rustix::fs::unlinkat(&self.dir, self.temp.as_str(), AtFlags::empty());
        }
    }
}

/// Creates the directories on the way to `path` beneath `top` and an empty temporary file beside it (given to
/// `owner`, mode 0644): the file to write, and what renames it over `path` (see [`Workspaces::write`] for the
/// invariants).
pub fn create_beneath(
    top: OwnedFd,
    files: &Path,
    path: &str,
    owner: Option<(u32, u32)>,
) -> Result<(PendingFile, File)> {
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
    let pending = PendingFile {
        dir,
        temp,
        name: name.to_owned(),
        path: path.to_owned(),
        files: files.to_path_buf(),
        committed: false,
    };
    let file = File::from(fd);
    let given = (|| {
        if let Some((uid, gid)) = owner {
            rustix::fs::fchown(&file, Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid)))?;
        }
        // The mode is set explicitly: the process umask must not make the file unreadable to runs.
        rustix::fs::fchmod(&file, Mode::from_raw_mode(0o644))
    })();
    given.map_err(|e| io("create file", e))?;
    Ok((pending, file))
}

/// Makes the temporary names of concurrent uploads of this process distinct.
static UPLOAD_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    use super::*;
    use crate::workspaces::tests::setup;

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
