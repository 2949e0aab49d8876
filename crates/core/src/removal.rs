//! Taking apart a conversation's directory tree, whatever a sandboxed program left in it.
//!
//! `std::fs::remove_dir_all` holds one open directory per level of nesting and gives up on a directory it cannot
//! read: a run could make its conversation impossible to remove with `chmod 000` on a directory (when the server
//! is not root) or a chain of directories nested thousands deep (more descriptors than a `stdio` server may open).
//! [`empty_directory`] holds at most two directories open at any time: it unlinks what it can in the top
//! directory, and for each subdirectory that is not empty it makes it accessible to its owner and moves its entries
//! up to the top (a rename within one filesystem), so every tree flattens level by level until nothing is left.
//!
//! Invariant: nothing is ever followed. Entries are unlinked or renamed by name relative to an open directory;
//! directories are opened with `O_NOFOLLOW`; a symlink, even to a directory, is unlinked like a file. The caller
//! holds the conversation exclusively (no run of it goes on), so nothing changes the tree meanwhile.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

/// Removes everything inside `dir` (which stays).
pub fn empty_directory(dir: BorrowedFd<'_>) -> std::io::Result<()> {
    let mut hoisted = 0u64;
    loop {
        let names = entries(dir)?;
        if names.is_empty() {
            return Ok(());
        }
        for name in names {
            match rustix::fs::unlinkat(dir, &name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => continue,
                Err(Errno::ISDIR | Errno::PERM) => {}
                Err(e) => return Err(e.into()),
            }
            // A directory (unlinkat refuses one with EISDIR, or EPERM on some filesystems): remove it if it is
            // empty, else move its entries up into `dir`; the next round removes it.
            match rustix::fs::unlinkat(dir, &name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(Errno::NOTEMPTY | Errno::EXIST | Errno::ACCESS | Errno::PERM) => {
                    hoist_entries(dir, &name, &mut hoisted)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The names in `dir`, `.` and `..` left out.
fn entries(dir: BorrowedFd<'_>) -> std::io::Result<Vec<CString>> {
    let mut names = Vec::new();
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// Moves every entry of the subdirectory `name` of `top` up into `top`, under fresh names; its files are unlinked
/// instead. The subdirectory and the directories moved are first given mode 0700 (a program may have taken every
/// permission away, and moving a directory to another parent needs write permission on it).
fn hoist_entries(top: BorrowedFd<'_>, name: &CStr, hoisted: &mut u64) -> std::io::Result<()> {
    let stat = rustix::fs::statat(top, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return Ok(()); // replaced meanwhile; the next round sees what it is
    }
    let _ = rustix::fs::chmodat(top, name, Mode::RWXU, AtFlags::empty());
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let sub = rustix::fs::openat(top, name, flags, Mode::empty())?;
    for child in entries(sub.as_fd())? {
        match rustix::fs::unlinkat(&sub, &child, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => continue,
            Err(Errno::ISDIR | Errno::PERM) => {}
            Err(e) => return Err(e.into()),
        }
        if rustix::fs::unlinkat(&sub, &child, AtFlags::REMOVEDIR).is_ok() {
            continue;
        }
        let _ = rustix::fs::chmodat(&sub, &child, Mode::RWXU, AtFlags::empty());
        loop {
            *hoisted += 1;
            let fresh = CString::new(format!(".sandlot-removing-{hoisted}")).map_err(std::io::Error::other)?;
            match rustix::fs::renameat_with(&sub, &child, top, &fresh, RenameFlags::NOREPLACE) {
                Ok(()) | Err(Errno::NOENT) => break,
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn open(path: &std::path::Path) -> std::os::fd::OwnedFd {
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn removes_a_tree_and_follows_no_symlink_out_of_it() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("keep")).unwrap();
        std::fs::write(outside.join("keep/file"), "kept").unwrap();
        let top = tmp.path().join("top");
        std::fs::create_dir_all(top.join("a/b/c")).unwrap();
        std::fs::write(top.join("a/b/c/f"), "x").unwrap();
        std::fs::write(top.join("a/g"), "x").unwrap();
        symlink(&outside, top.join("a/b/link-to-dir")).unwrap();
        symlink(outside.join("keep/file"), top.join("link-to-file")).unwrap();
        empty_directory(open(&top).as_fd()).unwrap();
        assert_eq!(std::fs::read_dir(&top).unwrap().count(), 0);
        assert_eq!(std::fs::read_to_string(outside.join("keep/file")).unwrap(), "kept");
    }

    #[test]
    fn removes_directories_without_permissions_and_deep_chains() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("top");
        // 1500 levels: more than a `stdio` server's 1024 descriptors, far more than a recursive walk should hold.
        std::fs::create_dir(&top).unwrap();
        // Made level by level with a relative path: the whole path is longer than PATH_MAX.
        let base = open(&top);
        let mut current = base;
        for _ in 0..1500 {
            rustix::fs::mkdirat(&current, "d", Mode::RWXU).unwrap();
            rustix::fs::openat(&current, "f", OFlags::CREATE | OFlags::WRONLY, Mode::RUSR).unwrap();
            current = rustix::fs::openat(&current, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        }
        std::fs::create_dir_all(top.join("locked/inner")).unwrap();
        std::fs::write(top.join("locked/inner/f"), "x").unwrap();
        std::fs::set_permissions(top.join("locked/inner"), std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::set_permissions(top.join("locked"), std::fs::Permissions::from_mode(0o000)).unwrap();
        empty_directory(open(&top).as_fd()).unwrap();
        assert_eq!(std::fs::read_dir(&top).unwrap().count(), 0);
    }
}
