//! Thin wrappers over the new mount API (`open_tree`, `mount_setattr`, `move_mount`) and the classic calls the
//! init needs. Detached trees let the init capture every source before it covers anything with its new root, and
//! `mount_setattr(AT_RECURSIVE)` makes a whole tree read-only, submounts included, without fighting locked flags.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A path as a C string (paths with NUL bytes cannot exist).
pub fn cpath(path: &Path) -> Result<CString, Errno> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)
}

/// A detached, recursive copy of the mount tree at `path` (like `mount --rbind`, not yet attached anywhere).
pub fn clone_tree(path: &Path) -> Result<OwnedFd, Errno> {
    let path = cpath(path)?;
    // SAFETY: open_tree takes a NUL-terminated path and flags; it returns a new fd we take ownership of.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A detached, recursive copy of the mount tree at the directory an (`O_PATH`) descriptor refers to.
pub fn clone_tree_at(fd: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: open_tree with an fd and an empty path (AT_EMPTY_PATH); returns a new fd we take ownership of.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd,
            c"".as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(tree as i32) })
}

/// Sets mount attributes on a tree (given by fd) and all its submounts.
pub fn set_tree_attributes(tree: &OwnedFd, attr_set: u64) -> Result<(), Errno> {
    set_tree_attr(tree, &MountAttr { attr_set, attr_clr: 0, propagation: 0, userns_fd: 0 })
}

/// Makes a detached tree (and its submounts) an idmapped mount through the user namespace `userns` (see
/// the `idmap` module).
pub fn set_tree_idmap(tree: &OwnedFd, userns: &OwnedFd) -> Result<(), Errno> {
    let userns_fd = userns.as_raw_fd() as u64;
    set_tree_attr(tree, &MountAttr { attr_set: MOUNT_ATTR_IDMAP, attr_clr: 0, propagation: 0, userns_fd })
}

/// `mount_setattr` on a tree given by fd, recursively.
fn set_tree_attr(tree: &OwnedFd, attr: &MountAttr) -> Result<(), Errno> {
    // SAFETY: the path is an empty C string used with AT_EMPTY_PATH; attr points to a live struct of the size
    // passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH as libc::c_uint) | AT_RECURSIVE,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// Sets mount attributes on the single mount at `path` (not its submounts).
pub fn set_mount_attributes(path: &CStr, attr_set: u64) -> Result<(), Errno> {
    let attr = MountAttr { attr_set, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: valid C string path and a live attr struct of the given size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            0 as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// Attaches a detached tree at `target` (which must exist).
pub fn attach_tree(tree: &OwnedFd, target: &Path) -> Result<(), Errno> {
    let target = cpath(target)?;
    // SAFETY: from is an fd with an empty path (F_EMPTY_PATH); target is a valid C string.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// `pivot_root(".", ".")` then detach the old root: the current directory becomes `/` and nothing of the old
/// root stays reachable.
pub fn pivot_to_current_dir() -> Result<(), Errno> {
    // SAFETY: both arguments are valid C strings.
    let rc = unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) };
    if rc < 0 {
        return Err(Errno::last());
    }
    nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH)?;
    nix::unistd::chdir("/")
}
