//! What a sandbox sees: one list of what is mounted, one assembler, built by pid 1 in its fresh mount namespace.
//!
//! Two parts:
//! - the read-only **skeleton** ([`assemble_skeleton`]): a small tmpfs root with the system dirs bound read-only,
//!   generated `/etc` files and a minimal `/dev`. It is the same for every run of a server, so a server's zygote
//!   caches it ([`cache_skeleton`]): it assembles it once, in a mount namespace of its own that its inits share, and
//!   each run clones it with one `open_tree` instead of some sixty mount calls. Otherwise pid 1 assembles it per run.
//!   Every host source is captured as a detached mount tree before anything is covered, so later mounts cannot
//!   hide it.
//! - the run's own mounts ([`build`]): a sized `/tmp` and `/dev/shm`, the conversation at `/data` (in the Home
//!   layout at its home path, with a sized scratch tmpfs at `/data`; in the Workspace layout at its path, with
//!   nothing at `/data`), its volumes, a fresh `/proc`. `pivot_root` makes the result `/`, the old root is detached,
//!   and `/` itself is read-only.
//!
//! The cached skeleton changes nothing a sandbox can see, except that the host files under `/etc` it shares
//! (`ld.so.cache`, `localtime`, `ssl/openssl.cnf`) are those of the server's start. Both its tmpfs are read-only at
//! the superblock, which belongs to the host's user namespace: no sandbox can write to what every sandbox shares.
//! The zygote's mount namespace is a slave of the host's: nothing mounted there reaches the host, and mounts made on
//! the host later reach it only where the host's mounts are shared (so runs get their workspace, a conversation's
//! disk image, as a tree the supervisor cloned).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MsFlags, mount};
use nix::sys::stat::{Mode, SFlag};

use nix::sched::{CloneFlags, unshare};

use super::events::{SetupError, Step};
use crate::protocol::{Identity, JailSpec, SkeletonRequest};
use crate::sys::mount::{
    MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, attach_tree, clone_tree, clone_tree_at,
    cpath, pivot_to_current_dir, set_mount_attributes, set_tree_attributes,
};

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
/// Attributes of `/dev`: read-only, but its device nodes work (it has no others: nothing can make one there).
const DEV_READ_ONLY: u64 = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
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

/// Mounts a tmpfs on `target`, an existing directory.
fn mount_tmpfs(target: &Path, options: &str, flags: MsFlags) -> Result<(), SetupError> {
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(options))
        .step(|| format!("mount tmpfs {}", target.display()))
}

/// Generated `/etc` files: just enough identity for the sandbox user.
fn write_etc(etc: &Path, identity: &Identity) -> Result<(), SetupError> {
    let (uid, gid, hostname) = (identity.uid, identity.gid, &identity.hostname);
    let files = [
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:/tmp:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        ("group", format!("root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n")),
        ("hostname", format!("{hostname}\n")),
        ("hosts", format!("127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost {hostname}\n")),
        ("nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n".to_owned()),
        // sandlot's own name server for a leashed sandbox; unreachable ("network is unreachable", at once) from a
        // sandbox with loopback only, which so resolves nothing but `hosts`.
        (
            "resolv.conf",
            format!("nameserver {}\noptions ndots:0 timeout:2 attempts:2\n", sandlot_egress::SERVICE_ADDRESS),
        ),
    ];
    for (name, content) in files {
        std::fs::write(etc.join(name), content).step(|| format!("write /etc/{name}"))?;
    }
    Ok(())
}

/// The trees that come from outside the system dirs: the conversation, interpreter prefixes, volumes and the
/// zygote's skeleton. When the init starts as root it captures them before switching to the sandbox uid, which may not be
/// allowed to traverse to them (a pyenv build under `/root`, a conversation root of mode 0700); otherwise pid 1
/// captures them by path.
pub struct HostTrees {
    /// `None` in a prepared sandbox: the conversation comes with its run (see `JailSpec::prepared`).
    workspace: Option<OwnedFd>,
    /// The workspace is an idmapped mount: its storage owner shows as the run's uid (see [`crate::sys::idmap`]).
    pub idmapped: bool,
    extra_ro_binds: Vec<(PathBuf, OwnedFd)>,
    skeleton: Option<OwnedFd>,
    /// The spec's volumes, at their paths inside the sandbox.
    volumes: Vec<(PathBuf, OwnedFd)>,
}

impl HostTrees {
    /// Clones the trees of `spec`'s workspace (never through a symlink; idmapped from the storage uid to the run's
    /// when the spec names both, see [`crate::sys::idmap`]), the cached `skeleton` that fits it if any, its extra
    /// binds (its runner's prefixes, bound on the skeleton's mount points) and its volumes, with their attributes.
    ///
    /// `workspace`: the tree the supervisor cloned in its own mount namespace (see `JailSpec::workspace_tree`), used
    /// as it is; else the workspace is opened here by path.
    pub fn capture(spec: &JailSpec, workspace: Option<OwnedFd>, skeleton: Option<&Path>) -> Result<Self, SetupError> {
        let skeleton = match skeleton {
            Some(dir) => Some(clone_tree(dir).step(|| format!("open_tree {}", dir.display()))?),
            None => None,
        };
        let extra_ro_binds = capture_read_only(&spec.extra_ro_binds)?;
        if spec.prepared {
            // The supervisor idmaps the conversation's tree when the run comes, as for the volumes it has none of.
            return Ok(Self { workspace: None, idmapped: true, extra_ro_binds, skeleton, volumes: vec![] });
        }
        let workspace = match workspace {
            Some(tree) => tree,
            None => {
                let directory = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&spec.workspace)
                    .step(|| format!("open {}", spec.workspace.display()))?;
                clone_tree_at(directory.as_raw_fd()).step(|| format!("open_tree {}", spec.workspace.display()))?
            }
        };
        set_tree_attributes(&workspace, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV).step(|| "mount_setattr /data".into())?;
        // A filesystem without idmapped mounts leaves `idmapped` false: the init then runs the program as the
        // storage uid (see `init::build_and_wait`).
        let idmapped = match (spec.storage_id, spec.switch_to) {
            (Some(storage), Some((run, _))) if storage != run => {
                crate::sys::idmap::map_tree(&workspace, storage, run).is_ok()
            }
            _ => false,
        };
        let volumes = capture_volumes(spec, idmapped)?;
        Ok(Self { workspace: Some(workspace), idmapped, extra_ro_binds, skeleton, volumes })
    }
}

/// Clones of the spec's volumes: nosuid, nodev, read-only unless the volume is writable (the attribute is locked
/// for the sandbox: it has no capability to change it), idmapped like the workspace when it is (a filesystem
/// without idmapped mounts leaves a volume's owners as they are).
fn capture_volumes(spec: &JailSpec, idmapped: bool) -> Result<Vec<(PathBuf, OwnedFd)>, SetupError> {
    let mut trees = Vec::new();
    for volume in &spec.volumes {
        let tree = clone_tree(&volume.host).step(|| format!("open_tree {}", volume.host.display()))?;
        let attributes = if volume.read_only { READ_ONLY } else { MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
        set_tree_attributes(&tree, attributes).step(|| format!("mount_setattr {}", volume.host.display()))?;
        if let (true, Some(storage), Some((run, _))) = (idmapped, spec.storage_id, spec.switch_to) {
            let _ = match volume.read_only {
                true => crate::sys::idmap::map_tree(&tree, storage, run),
                false => crate::sys::idmap::map_volume_tree(&tree, storage, run),
            };
        }
        trees.push((volume.path.clone(), tree));
    }
    Ok(trees)
}

/// Binds the volumes at their paths beneath the scratch `/data`, on mount points made there.
fn attach_volumes(volumes: &[(PathBuf, OwnedFd)]) -> Result<(), SetupError> {
    for (path, tree) in volumes {
        let target = staged(&path.to_string_lossy());
        std::fs::create_dir_all(&target).step(|| format!("mkdir {}", path.display()))?;
        attach_tree(tree, &target).step(|| format!("move_mount {}", path.display()))?;
    }
    Ok(())
}

/// Read-only clones of host directories, to bind at the same paths.
fn capture_read_only(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, OwnedFd)>, SetupError> {
    let mut trees = Vec::new();
    for dir in dirs {
        let tree = clone_tree(dir).step(|| format!("open_tree {}", dir.display()))?;
        set_tree_attributes(&tree, READ_ONLY).step(|| format!("mount_setattr {}", dir.display()))?;
        trees.push((dir.clone(), tree));
    }
    Ok(trees)
}

/// Assembles at `root` (an existing directory) the read-only skeleton of a sandbox's filesystem: a small tmpfs
/// with the system dirs, the shared `/etc` files and `extra_ro_binds` bound read-only, the generated `/etc` files,
/// a read-only `/dev` with host device nodes bound in, and the empty mount points the run fills (`/tmp`, `/data`,
/// `/proc`, `/dev/shm`, and `mount_points`, where a run binds its runner's prefixes). The root tmpfs itself stays
/// writable: the caller makes it read-only when it is done.
pub fn assemble_skeleton(
    root: &Path,
    identity: &Identity,
    extra_ro_binds: Vec<(PathBuf, OwnedFd)>,
    mount_points: &[PathBuf],
) -> Result<(), SetupError> {
    let under = |path: &str| root.join(path.trim_start_matches('/'));
    // Capture every host source before the tmpfs covers anything.
    let mut sources = Vec::new();
    for dir in SYSTEM_DIRS.iter().chain(ETC_SHARED) {
        if let Some(source) = capture(Path::new(dir), READ_ONLY)? {
            sources.push((under(dir), source, Path::new(dir).is_dir()));
        }
    }
    for (dir, tree) in extra_ro_binds {
        sources.push((under(&dir.to_string_lossy()), Source::Tree(tree), true));
    }
    sandlot_core::marks::mark("s.captured");
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_tmpfs(root, "size=2m,nr_inodes=4096,mode=0755", nosuid_nodev)?;
    for dir in ["/etc", "/proc", "/data", "/root", "/tmp", "/dev"] {
        std::fs::create_dir_all(under(dir)).step(|| format!("mkdir {dir}"))?;
    }
    for (target, source, is_dir) in sources {
        place(source, &target, is_dir)?;
    }
    for dir in mount_points {
        let target = under(&dir.to_string_lossy());
        std::fs::create_dir_all(&target).step(|| format!("mkdir {}", target.display()))?;
    }
    sandlot_core::marks::mark("s.placed");
    write_etc(&under("/etc"), identity)?;
    sandlot_core::marks::mark("s.etc");

    // /dev: a small tmpfs with the host's device nodes, and the usual symlinks.
    mount_tmpfs(&under("/dev"), "size=64k,nr_inodes=64,mode=0755", MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC)?;
    for name in DEVICES {
        add_device(name, &under("/dev").join(name))?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, under("/dev").join(link)).step(|| format!("symlink /dev/{link}"))?;
    }
    std::fs::create_dir(under("/dev/shm")).step(|| "mkdir /dev/shm".into())?;
    let dev = cpath(&under("/dev")).step(|| "/dev path".into())?;
    set_mount_attributes(&dev, DEV_READ_ONLY).step(|| "make /dev read-only".into())
}

/// Reproduces the host's device `/dev/<name>` at `target`: as a device node like the host's when this process may
/// make one (root in the host's user namespace), else as a bind of the host's node (a user namespace may not make
/// device nodes; making them is the faster of the two, see docs/benchmarks.md). A device the host lacks is left out.
fn add_device(name: &str, target: &Path) -> Result<(), SetupError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let host = Path::new("/dev").join(name);
    let Ok(meta) = std::fs::symlink_metadata(&host) else { return Ok(()) };
    if !meta.file_type().is_char_device() {
        return Ok(());
    }
    let permissions = meta.mode() & 0o777;
    match nix::sys::stat::mknod(target, SFlag::S_IFCHR, Mode::from_bits_truncate(permissions), meta.rdev()) {
        // The umask took bits off: set the host's permissions (0666 for most), so the sandbox user may use it.
        Ok(()) => std::fs::set_permissions(target, std::fs::Permissions::from_mode(permissions))
            .step(|| format!("chmod /dev/{name}")),
        Err(Errno::EPERM) => match capture(&host, MOUNT_ATTR_NOSUID)? {
            Some(source) => place(source, target, false),
            None => Ok(()),
        },
        Err(e) => Err(SetupError::new(format!("mknod /dev/{name}"), e)),
    }
}

/// Builds the whole filesystem and pivots into it. On return the process's root is the sandbox's.
///
/// With a cached skeleton among `trees` the read-only skeleton is a clone of it; otherwise it is assembled here.
pub fn build(spec: &JailSpec, trees: Option<HostTrees>) -> Result<(), SetupError> {
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .step(|| "make / private".into())?;

    // 1. The host trees of this run, before the new root covers anything (the workspace may be under /tmp).
    let HostTrees { workspace: data, extra_ro_binds, skeleton, volumes, .. } = match trees {
        Some(trees) => trees,
        None => HostTrees::capture(spec, None, None)?,
    };
    sandlot_core::marks::mark("p.private");

    // 2. The read-only skeleton at the staging point.
    let staging = Path::new(STAGING);
    match skeleton {
        Some(skeleton) => {
            attach_tree(&skeleton, staging).step(|| format!("move_mount {STAGING}"))?;
            // The runner's own prefixes, on the mount points the skeleton has for them (see `SkeletonRequest::fits`).
            for (dir, tree) in extra_ro_binds {
                let target = staged(&dir.to_string_lossy());
                attach_tree(&tree, &target).step(|| format!("move_mount {}", target.display()))?;
            }
        }
        None => {
            let home_mount_point = spec.home.as_ref().map(|home| std::slice::from_ref(&home.path)).unwrap_or(&[]);
            assemble_skeleton(staging, &Identity::of(spec), extra_ro_binds, home_mount_point)?;
            seal(staging)?;
        }
    }

    sandlot_core::marks::mark("p.skeleton");
    // 3. The run's own writable places: /dev/shm, /tmp and /data (in the Home layout a scratch tmpfs, and the
    // conversation at the home path, on the mount point the skeleton has for it).
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let shm_options = format!("size={}m,nr_inodes=1024,mode=1777", spec.tmp_mb.min(64));
    mount_tmpfs(&staged("/dev/shm"), &shm_options, nosuid_nodev)?;
    let tmp_options = format!("size={}m,nr_inodes=16384,mode=1777", spec.tmp_mb);
    mount_tmpfs(&staged("/tmp"), &tmp_options, nosuid_nodev)?;
    match (&spec.home, data) {
        // A prepared sandbox leaves /data empty until its run comes.
        (None, None) => {}
        (None, Some(data)) => attach_tree(&data, &staged("/data")).step(|| "move_mount /data".into())?,
        (Some(_), None) => return Err(SetupError::new("move_mount /data", "a prepared sandbox has sandlot's layout")),
        (Some(home), Some(data)) => {
            // The Workspace layout has no scratch: /data stays the read-only root's empty directory.
            if let Some(scratch_mb) = home.scratch_mb {
                let scratch_options = format!("size={scratch_mb}m,nr_inodes=16384,mode=1777");
                mount_tmpfs(&staged("/data"), &scratch_options, nosuid_nodev)?;
            }
            let target = staged(&home.path.to_string_lossy());
            attach_tree(&data, &target).step(|| format!("move_mount {}", home.path.display()))?;
            attach_volumes(&volumes)?;
        }
    }

    sandlot_core::marks::mark("p.tmpfs_data");
    // 4. A fresh /proc for the new pid namespace, with the kernel knobs read-only.
    let proc_dir = staged("/proc");
    // `hidepid=invisible`: a process the reader may not ptrace has no directory at all. That hides pid 1 (it keeps
    // capabilities the program lacks), whose command line, environment, memory map, executable and cgroup are those
    // of the process it was cloned from on the host: `sandlot run`'s, or the server's zygote's.
    mount(Some("proc"), &proc_dir, Some("proc"), nosuid_nodev | MsFlags::MS_NOEXEC, Some("hidepid=invisible"))
        .step(|| "mount /proc".into())?;
    for name in PROC_READ_ONLY {
        let path = proc_dir.join(name);
        if path.exists() {
            let tree = clone_tree(&path).step(|| format!("open_tree /proc/{name}"))?;
            set_tree_attributes(&tree, READ_ONLY).step(|| format!("mount_setattr /proc/{name}"))?;
            attach_tree(&tree, &path).step(|| format!("move_mount /proc/{name}"))?;
        }
    }

    sandlot_core::marks::mark("p.proc");
    // 5. Switch roots; nothing of the host's root stays reachable; the root itself becomes read-only.
    nix::unistd::chdir(STAGING).step(|| "chdir to new root".into())?;
    pivot_to_current_dir().step(|| "pivot_root".into())?;
    sandlot_core::marks::mark("p.pivoted");
    set_mount_attributes(c"/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        .step(|| "make / read-only".into())?;
    nix::sys::stat::umask(Mode::from_bits_truncate(0o022));
    Ok(())
}

/// In the zygote: moves it to a mount namespace of its own (a slave of the host's) and assembles the skeleton
/// `request` describes at its directory, read-only; every init the zygote clones shares it.
pub fn cache_skeleton(request: &SkeletonRequest) -> Result<(), SetupError> {
    unshare(CloneFlags::CLONE_NEWNS).step(|| "unshare mount namespace".into())?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .step(|| "make / a slave".into())?;
    assemble_skeleton(&request.dir, &request.identity, vec![], &request.mount_points)?;
    seal(&request.dir)
}

/// Makes an assembled skeleton read-only down to its two tmpfs superblocks (a cached one's belong to the host's user
/// namespace: no sandbox can make them writable again, whatever it does to its own copies of the mounts). The run's
/// own mounts still go on its empty mount points.
fn seal(dir: &Path) -> Result<(), SetupError> {
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let dev_flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC; // its device nodes must work
    for (path, flags) in [(dir.join("dev"), dev_flags), (dir.to_owned(), nosuid_nodev)] {
        mount(None::<&str>, &path, None::<&str>, MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | flags, None::<&str>)
            .step(|| format!("remount {} read-only", path.display()))?;
    }
    Ok(())
}
