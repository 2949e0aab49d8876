//! Reading a file of a conversation (or of a volume) without following a symlink: the path's shape is checked
//! first, then the file is opened beneath the directory's descriptor with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`,
//! and only a regular file is handed out.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

use super::Workspaces;
use crate::{ConversationId, Error, Result};

impl Workspaces {
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

/// The longest name of one path segment (`NAME_MAX`).
const MAX_SEGMENT_BYTES: usize = 255;

/// Checks the shape of a path relative to a conversation's `/data`, as every read does first: a read of a conversation
/// that does not exist gives this error, else [`Error::FileNotFound`].
pub fn validate_relative_path(path: &str) -> Result<()> {
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
            // No file system names one (`ENAMETOOLONG`): the caller's mistake, never the server's fault.
            _ if segment.len() > MAX_SEGMENT_BYTES => return invalid("has a segment longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::workspaces::tests::setup;

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
    fn malformed_paths_are_rejected_before_any_lookup() {
        let (_tmp, ws, id, _dir) = setup();
        let long = format!("d/{}/f", "x".repeat(256));
        let cases = [
            ("", "is empty"),
            ("/etc/passwd", "is absolute"),
            ("../x", "has a '.' or '..' segment"),
            ("a/../../x", "has a '.' or '..' segment"),
            ("a//b", "has an empty segment"),
            ("a\0b", "contains a control character"),
            ("P\n1000", "contains a control character"),
            ("a\u{85}b", "contains a control character"),
            (long.as_str(), "has a segment longer than 255 bytes"),
        ];
        for (path, message) in cases {
            match ws.open(&id, path).unwrap_err() {
                Error::InvalidPath { message: m, .. } => assert_eq!(m, message, "{path:?}"),
                other => panic!("{path:?}: {other}"),
            }
        }
    }
}
