//! What a conversation directory costs the host's disk: allocated blocks and inodes, counted without following a
//! symlink, each inode once, and bounded so that a run cannot make the measurement itself costly or hide space
//! from its quota.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::{MAX_DEPTH, Workspaces};
use crate::{ConversationId, Error, Result};

impl Workspaces {
    /// What the conversation's directory holds on disk (see [`directory_usage`]).
    pub fn usage(&self, id: &ConversationId, max_inodes: u64) -> Result<DiskUsage> {
        let dir = self.files_dir(id);
        match crate::measure_conversation(&dir, max_inodes) {
            Ok(usage) => Ok(usage),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DiskUsage::default()),
            Err(e) => Err(Error::io("measure conversation directory", dir, e)),
        }
    }
}

/// What a conversation directory costs the host's disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes of disk allocated (`st_blocks` × 512) to every inode under the directory, itself included: regular
    /// files (their blocks, not their size: a sparse or `fallocate`d file counts what it holds), directories (their
    /// entries), symlinks (their targets) and special files. An inode with several links counts once.
    pub bytes: u64,
    /// Entries under the directory, itself not included: files, directories, symlinks, and every further link to
    /// a file (on an image: the inodes in use).
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
        // Every entry counts against the limit, each link of a file too (links are free to make: counted once,
        // they would let a run grow the tree, and this walk, without bound); blocks count once per inode.
        usage.inodes += 1;
        if usage.inodes > max_inodes {
            return Err(std::io::Error::other(format!("more than {max_inodes} files, directories and links")));
        }
        let kind = FileType::from_raw_mode(stat.st_mode);
        if kind != FileType::Directory && stat.st_nlink > 1 && !linked.insert(stat.st_ino) {
            continue; // another link to an inode already counted
        }
        usage.bytes += stat.st_blocks as u64 * 512;
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::workspaces::tests::setup;
    use crate::{FileListing, workspaces::MAX_DEPTH};

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
        // `data-again` is an entry of its own: links count against the inode limit, their blocks once.
        assert_eq!(usage, DiskUsage { bytes: blocks_of(&dir), inodes: 5 + 200 });
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
}
