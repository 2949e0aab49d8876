//! The sandbox's filesystem, built by its pid 1 inside the fresh mount namespace.
//!
//! Every host source is first captured as a detached mount tree (so later mounts cannot hide it), then a tmpfs
//! root is assembled: read-only system dirs, generated `/etc` files, a minimal `/dev`, a fresh `/proc`, a sized
//! `/tmp`, and the conversation at `/data`. `pivot_root` makes it `/`, the old root is detached, and `/` itself is
//! made read-only.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sys::stat::Mode;

use crate::mount_api;
use crate::mount_api::{
    MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, attach_tree, clone_tree, clone_tree_at,
    pivot_to_current_dir, set_mount_attributes, set_tree_attributes,
};
use crate::report::{SetupError, Step};
use crate::spec::JailSpec;

/// Host directories shared read-only with every sandbox (a symlink, as on merged-/usr systems, is recreated).
const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];
/// Host files and dirs under `/etc` that programs need to start and that hold no secrets.
const ETC_SHARED: &[&str] =
    &["/etc/ld.so.cache", "/etc/alternatives", "/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/localtime"];
/// Device nodes bound from the host.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
/// Parts of `/proc` that are remounted read-only (as bubblewrap does).
const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// Attributes of every read-only tree.
const READ_ONLY: u64 = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
/// Where the new root is assembled before the pivot (hidden from the host: the mount namespace is private).
const STAGING: &str = "/tmp";

/// A host path to reproduce in the sandbox.
enum Source {
    Tree(OwnedFd),
    Symlink(PathBuf),
}

/// Captures `path` as a read-only tree, or as a symlink to recreate; `None` when it does not exist.
fn capture(path: &Path, attributes: u64) -> Result<Option<Source>, SetupError> {
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(None),
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(path).step(|| format!("readlink {}", path.display()))?;
            Ok(Some(Source::Symlink(target)))
        }
        Ok(_) => {
            let tree = clone_tree(path).step(|| format!("open_tree {}", path.display()))?;
            set_tree_attributes(&tree, attributes).step(|| format!("mount_setattr {}", path.display()))?;
            Ok(Some(Source::Tree(tree)))
        }
    }
}

/// Places a captured source at `target` (a path under the staging root).
fn place(source: Source, target: &Path, is_dir: bool) -> Result<(), SetupError> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).step(|| format!("mkdir {}", parent.display()))?;
    }
    match source {
        Source::Symlink(link) => {
            std::os::unix::fs::symlink(&link, target).step(|| format!("symlink {}", target.display()))
        }
        Source::Tree(tree) => {
            if is_dir {
                std::fs::create_dir_all(target).step(|| format!("mkdir {}", target.display()))?;
            } else {
                std::fs::write(target, b"").step(|| format!("create {}", target.display()))?;
            }
            attach_tree(&tree, target).step(|| format!("move_mount {}", target.display()))
        }
    }
}

fn staged(path: &str) -> PathBuf {
    Path::new(STAGING).join(path.trim_start_matches('/'))
}

fn mount_tmpfs(target: &Path, options: &str, flags: MsFlags) -> Result<(), SetupError> {
    std::fs::create_dir_all(target).step(|| format!("mkdir {}", target.display()))?;
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(options))
        .step(|| format!("mount tmpfs {}", target.display()))
}

/// Generated `/etc` files: just enough identity for the sandbox user.
fn write_etc(spec: &JailSpec) -> Result<(), SetupError> {
    let etc = staged("/etc");
    let (uid, gid) = (spec.sandbox_uid, spec.sandbox_gid);
    let files = [
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:/tmp:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        ("group", format!("root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n")),
        ("hostname", format!("{}\n", spec.hostname)),
        ("hosts", format!("127.0.0.1\tlocalhost {0}\n::1\tlocalhost ip6-localhost {0}\n", spec.hostname)),
        ("nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n".to_owned()),
        ("resolv.conf", "# no network in the sandbox\n".to_owned()),
    ];
    for (name, content) in files {
        std::fs::write(etc.join(name), content).step(|| format!("write /etc/{name}"))?;
    }
    Ok(())
}

/// The trees that come from outside the system dirs: the conversation and interpreter prefixes. When the init starts
/// as root it captures them before switching to the sandbox uid, which may not be allowed to traverse to them
/// (a pyenv build under `/root`, say); otherwise pid 1 captures them by path.
pub struct HostTrees {
    workspace: OwnedFd,
    extra_ro_binds: Vec<(PathBuf, OwnedFd)>,
}

impl HostTrees {
    /// Clones the trees of `spec`'s workspace (never through a symlink) and extra binds, with their attributes.
    pub fn capture(spec: &JailSpec) -> Result<Self, SetupError> {
        let directory = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&spec.workspace)
            .step(|| format!("open {}", spec.workspace.display()))?;
        let workspace =
            clone_tree_at(directory.as_raw_fd()).step(|| format!("open_tree {}", spec.workspace.display()))?;
        set_tree_attributes(&workspace, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV).step(|| "mount_setattr /data".into())?;
        let mut extra_ro_binds = Vec::new();
        for dir in &spec.extra_ro_binds {
            let tree = clone_tree(dir).step(|| format!("open_tree {}", dir.display()))?;
            set_tree_attributes(&tree, READ_ONLY).step(|| format!("mount_setattr {}", dir.display()))?;
            extra_ro_binds.push((dir.clone(), tree));
        }
        Ok(Self { workspace, extra_ro_binds })
    }
}

/// Builds the whole filesystem and pivots into it. On return the process's root is the sandbox's.
pub fn build(spec: &JailSpec, trees: Option<HostTrees>) -> Result<(), SetupError> {
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .step(|| "make / private".into())?;

    // 1. Capture every host source before anything is covered.
    let read_only = READ_ONLY;
    let mut sources = Vec::new();
    for dir in SYSTEM_DIRS.iter().chain(ETC_SHARED) {
        if let Some(source) = capture(Path::new(dir), read_only)? {
            let is_dir = Path::new(dir).is_dir();
            sources.push((staged(dir), source, is_dir));
        }
    }
    let HostTrees { workspace: data, extra_ro_binds } = match trees {
        Some(trees) => trees,
        None => HostTrees::capture(spec)?,
    };
    for (dir, tree) in extra_ro_binds {
        sources.push((staged(&dir.to_string_lossy()), Source::Tree(tree), true));
    }
    let mut devices = Vec::new();
    for name in DEVICES {
        let host = Path::new("/dev").join(name);
        if let Some(source) = capture(&host, MOUNT_ATTR_NOSUID)? {
            devices.push((staged("/dev").join(name), source));
        }
    }

    // 2. The new root.
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_tmpfs(Path::new(STAGING), "size=2m,nr_inodes=4096,mode=0755", nosuid_nodev)?;
    for dir in ["/etc", "/proc", "/data", "/root"] {
        std::fs::create_dir_all(staged(dir)).step(|| format!("mkdir {dir}"))?;
    }
    for (target, source, is_dir) in sources {
        place(source, &target, is_dir)?;
    }
    write_etc(spec)?;

    // 3. /dev: a small tmpfs with host device nodes bound in, and the usual symlinks.
    mount_tmpfs(&staged("/dev"), "size=64k,nr_inodes=64,mode=0755", nosuid_nodev | MsFlags::MS_NOEXEC)?;
    for (target, source) in devices {
        place(source, &target, false)?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, staged("/dev").join(link)).step(|| format!("symlink /dev/{link}"))?;
    }
    let shm_options = format!("size={}m,nr_inodes=1024,mode=1777", spec.tmp_mb.min(64));
    mount_tmpfs(&staged("/dev/shm"), &shm_options, nosuid_nodev)?;
    let dev = mount_api::cpath(&staged("/dev")).step(|| "/dev path".into())?;
    set_mount_attributes(&dev, READ_ONLY).step(|| "make /dev read-only".into())?;

    // 4. /tmp and /data.
    let tmp_options = format!("size={}m,nr_inodes=16384,mode=1777", spec.tmp_mb);
    mount_tmpfs(&staged("/tmp"), &tmp_options, nosuid_nodev)?;
    attach_tree(&data, &staged("/data")).step(|| "move_mount /data".into())?;

    // 5. A fresh /proc for the new pid namespace, with the kernel knobs read-only.
    let proc_dir = staged("/proc");
    mount(Some("proc"), &proc_dir, Some("proc"), nosuid_nodev | MsFlags::MS_NOEXEC, None::<&str>)
        .step(|| "mount /proc".into())?;
    for name in PROC_READ_ONLY {
        let path = proc_dir.join(name);
        if path.exists() {
            let tree = clone_tree(&path).step(|| format!("open_tree /proc/{name}"))?;
            set_tree_attributes(&tree, read_only).step(|| format!("mount_setattr /proc/{name}"))?;
            attach_tree(&tree, &path).step(|| format!("move_mount /proc/{name}"))?;
        }
    }

    // 6. Switch roots; nothing of the host's root stays reachable; the root itself becomes read-only.
    nix::unistd::chdir(STAGING).step(|| "chdir to new root".into())?;
    pivot_to_current_dir().step(|| "pivot_root".into())?;
    set_mount_attributes(c"/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        .step(|| "make / read-only".into())?;
    nix::sys::stat::umask(Mode::from_bits_truncate(0o022));
    Ok(())
}
