//! `/data` without setuid or devices in containers. Docker binds a conversation directory with the flags of the
//! mount it lies on and has no option to add `nosuid`/`nodev` to a bind, so, as root, the backend makes the
//! conversation root a mount of its own with both flags (a bind onto itself), once per host boot; every bind of a
//! directory under it then carries them, and a setuid file a run leaves in `/data` is inert in later containers and
//! on the host. A conversation on its own disk image needs none of it: the image is mounted `nosuid,nodev`.

use std::path::Path;
use std::sync::Mutex;

use nix::mount::{MsFlags, mount};
use nix::sys::statvfs::{FsFlags, statvfs};

/// Held while checking and mounting, so two runs starting together do not stack two mounts.
static MOUNTING: Mutex<()> = Mutex::new(());

/// Whether `dir` is on a `nosuid,nodev` mount already (a conversation's disk image is).
pub fn is_nosuid_nodev(dir: &Path) -> bool {
    statvfs(dir).is_ok_and(|stat| stat.flags().contains(FsFlags::ST_NOSUID | FsFlags::ST_NODEV))
}

/// Makes `root` a `nosuid,nodev` mount unless it already is one. Returns whether it mounted.
pub fn ensure_nosuid_nodev(root: &Path) -> std::io::Result<bool> {
    let _guard = MOUNTING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let flags = statvfs(root)?.flags();
    if flags.contains(FsFlags::ST_NOSUID | FsFlags::ST_NODEV) {
        return Ok(false);
    }
    // Recursive, so the conversations' disk images mounted below stay in sight.
    mount(Some(root), root, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)?;
    let remount = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let read_only = if flags.contains(FsFlags::ST_RDONLY) { MsFlags::MS_RDONLY } else { MsFlags::empty() };
    mount(None::<&str>, root, None::<&str>, remount | read_only, None::<&str>)?;
    tracing::info!(root = %root.display(), "made the conversation root a nosuid,nodev mount for Docker's binds");
    Ok(true)
}
