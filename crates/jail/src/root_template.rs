//! The sandbox's read-only skeleton, assembled ahead of the run: once per server, by its zygote, or by the init that
//! `sandlot run` forks, while the command prepares the run ([`assemble_detached`]).
//!
//! Every run of a server gets the same read-only skeleton ([`crate::filesystem::assemble_skeleton`]: the system
//! dirs bound read-only, generated `/etc` files, `/dev`). Assembling it costs pid 1 some sixty mount calls and two
//! tmpfs that the kernel later tears down again: about 0.45 ms of CPU per run, measured inside pid 1. So a server's
//! zygote, when it starts, moves to a mount namespace of its own and assembles the skeleton there once, at a
//! directory the server names (`<root>/.jail-root`, empty on the host). Its inits are clones of the zygote and
//! share that namespace; each init clones the skeleton with one recursive `open_tree` while it is still root
//! (the sandbox uid may not be allowed to reach the directory), and its pid 1 attaches it as the new root and
//! adds the run's own mounts (`/tmp`, `/dev/shm`, `/data`, `/proc`).
//!
//! What this changes for a sandbox: nothing it can see, except that the host files under `/etc` it shares
//! (`ld.so.cache`, `localtime`, `ssl/openssl.cnf`) are the ones of the server's start; a file the host replaces
//! later reaches sandboxes after a restart. Both tmpfs of the skeleton are read-only at the superblock, which
//! belongs to the host's user namespace: no sandbox can write to what every sandbox shares.
//!
//! The zygote's mount namespace is a slave of the host's: mounts made on the host later still reach it (a
//! conversation root on a disk mounted after the start), and nothing the zygote mounts reaches the host. It dies
//! with the zygote and its last init.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};

use crate::filesystem::{Identity, STAGING, assemble_skeleton};
use crate::mount_api::clone_tree;
use crate::report::{SetupError, Step};
use crate::spec::JailSpec;

/// Name of the directory, under the conversation root, where a server's zygote mounts the skeleton.
pub const TEMPLATE_DIR_NAME: &str = ".jail-root";

/// What a server asks its zygote to assemble.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TemplateRequest {
    /// An existing, empty directory; the skeleton is mounted on it in the zygote's mount namespace only.
    pub dir: PathBuf,
    pub identity: Identity,
    /// Interpreter prefixes outside the system dirs, for every runner the server found: empty directories in the
    /// skeleton, on which a run of that runner binds its prefix (never a run of another).
    pub mount_points: Vec<PathBuf>,
}

/// A skeleton the zygote has assembled, usable by the inits it clones.
#[derive(Debug, Clone, PartialEq)]
pub struct RootTemplate {
    request: TemplateRequest,
}

impl RootTemplate {
    /// The template a zygote assembled for `request`.
    pub fn assembled(request: TemplateRequest) -> Self {
        Self { request }
    }

    /// Where the skeleton is mounted in the namespace of the zygote's inits.
    pub fn dir(&self) -> &Path {
        &self.request.dir
    }

    /// Whether a run of `spec` may use this skeleton: same sandbox user, and a mount point for every bind it needs
    /// (its runner's prefixes, its home path in the Home layout; a skeleton without one is read-only, so such a run
    /// assembles its own).
    pub fn fits(&self, spec: &JailSpec) -> bool {
        Identity::of(spec) == self.request.identity
            && spec.extra_ro_binds.iter().all(|dir| self.request.mount_points.contains(dir))
            && spec.home.as_ref().is_none_or(|home| self.request.mount_points.contains(&home.path))
    }
}

/// In the zygote: moves it to a mount namespace of its own (a slave of the host's) and assembles the skeleton at
/// `request.dir`, read-only.
pub fn assemble(request: &TemplateRequest) -> Result<(), SetupError> {
    enter_own_mount_namespace()?;
    assemble_read_only(&request.dir, &request.identity, &request.mount_points)
}

/// The standard skeleton assembled ahead by [`assemble_detached`].
pub struct DetachedSkeleton {
    /// The skeleton, as a detached tree.
    pub tree: OwnedFd,
    /// The mount namespace it was assembled in, with the staging mounts still in it: kept until this process
    /// exits, because tearing it down waits for an RCU grace period (~0.1 ms), which is then off the run's path.
    pub staging_namespace: OwnedFd,
}

/// In an init forked by `sandlot run`, before its spec comes: assembles the standard skeleton (no interpreter
/// prefixes), read-only, as a detached tree. It is assembled at the staging point `/tmp` in a mount namespace of
/// its own and cloned; then the init goes back to the host's mount namespace, where every host path is reachable
/// for the rest of the setup. On failure the init is back there too (or, if it cannot go back, the staging point
/// is unmounted), and its pid 1 assembles the skeleton per run.
pub fn assemble_detached() -> Result<DetachedSkeleton, SetupError> {
    let host_namespace = std::fs::File::open("/proc/self/ns/mnt").step(|| "open the host's mount namespace".into())?;
    enter_own_mount_namespace()?;
    let staging = Path::new(STAGING);
    let assembled = assemble_read_only(staging, &Identity::standard(), &[])
        .and_then(|()| clone_tree(staging).step(|| format!("open_tree {STAGING}")))
        .and_then(|tree| {
            let namespace = std::fs::File::open("/proc/self/ns/mnt").step(|| "open the staging namespace".into())?;
            Ok(DetachedSkeleton { tree, staging_namespace: namespace.into() })
        });
    // Whether or not it worked: nothing may stay mounted over the host's /tmp where the init goes on.
    if setns(&host_namespace, CloneFlags::CLONE_NEWNS).is_err() {
        let _ = umount2(staging, MntFlags::MNT_DETACH);
    }
    assembled
}

/// Whether the standard skeleton suits a run of `spec`: its sandbox user, no interpreter prefix to bind and no
/// home path (it has no mount point for either).
pub fn standard_fits(spec: &JailSpec) -> bool {
    Identity::of(spec) == Identity::standard() && spec.extra_ro_binds.is_empty() && spec.home.is_none()
}

/// Leaves the host's mount namespace for a copy of it that is a slave of it: mounts made on the host later still
/// arrive, and nothing mounted here reaches the host.
fn enter_own_mount_namespace() -> Result<(), SetupError> {
    unshare(CloneFlags::CLONE_NEWNS).step(|| "unshare mount namespace".into())?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .step(|| "make / a slave".into())
}

/// Assembles the skeleton at `dir` and makes it read-only down to the two tmpfs superblocks, which belong to the
/// host's user namespace: no sandbox can make them writable again, whatever it does to its own copies of the mounts.
fn assemble_read_only(dir: &Path, identity: &Identity, mount_points: &[PathBuf]) -> Result<(), SetupError> {
    assemble_skeleton(dir, identity, vec![], mount_points)?;
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let dev_flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC; // its device nodes must work
    for (path, flags) in [(dir.join("dev"), dev_flags), (dir.to_owned(), nosuid_nodev)] {
        mount(None::<&str>, &path, None::<&str>, MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | flags, None::<&str>)
            .step(|| format!("remount {} read-only", path.display()))?;
    }
    Ok(())
}
