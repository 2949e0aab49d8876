//! Extra host directories a face mounts into its runs (Baponi's volumes): each at a path of its own beneath the
//! run's scratch `/data`, read-only unless it says otherwise. The conversation's directory stays the only one the engine manages;
//! these belong to the operator, who configured them.

use std::path::PathBuf;

/// At most this many extra mounts in one run.
pub const MAX_MOUNTS: usize = 32;

/// One host directory bound into a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The host directory (absolute; the operator's, so it may itself be a symlink; nothing below it is followed
    /// out of the sandbox).
    pub host: PathBuf,
    /// Where the run sees it: absolute, plain names, strictly beneath a scratch `/data` (see [`validate`]).
    pub path: String,
    /// The run may not write it (a read-only mount, whatever the files' modes say).
    pub read_only: bool,
    /// The most a writable mount may hold, in MiB (allocated blocks, as the conversation's `/data` is measured);
    /// `None`: the conversation's quota (`Limits::disk_mb`). A run that makes it hold more is stopped as over its
    /// quota (see `quota.rs`).
    pub quota_mb: Option<u64>,
}

impl Mount {
    /// The most this mount may hold, in bytes, for a run of `limits`; `None` for a read-only one.
    pub fn quota_bytes(&self, limits: &crate::Limits) -> Option<u64> {
        (!self.read_only).then(|| self.quota_mb.unwrap_or(limits.disk_mb) * 1024 * 1024)
    }
}

/// Checks `mounts` for a run of `layout` (see [`Mount::path`]); the engine refuses a run with a bad one before
/// anything is created. A mount path is strictly beneath `/data`, and only in a layout where `/data` is the run's
/// own scratch directory (so it shadows no system directory, nor the conversation's directory, nor the host's: the
/// mount point is made in the run's scratch), and no mount is another's or beneath it.
pub fn validate(mounts: &[Mount], layout: crate::Layout) -> crate::Result<()> {
    if mounts.len() > MAX_MOUNTS {
        return Err(crate::Error::invalid("mounts", format!("{} mounts; at most {MAX_MOUNTS}", mounts.len())));
    }
    for (index, mount) in mounts.iter().enumerate() {
        let refuse = |why: String| Err(crate::Error::invalid("mounts", format!("mount path {:?} {why}", mount.path)));
        if !mount.host.is_absolute() {
            return refuse(format!("has a host directory {:?} that is not absolute", mount.host));
        }
        let Some(segments) = plain_segments(&mount.path) else {
            return refuse("must be `/` and plain names of letters, digits, `.`, `_` and `-` (no `.` or `..`)".into());
        };
        if segments[0] != "data" || segments.len() < 2 {
            return refuse("is not beneath /data".into());
        }
        if !layout.scratch_data() {
            return refuse("is beneath /data, which is the conversation's directory in this layout".into());
        }
        if let Some(other) = mounts[..index].iter().find(|other| nested(&mount.path, &other.path)) {
            return refuse(format!("overlaps the mount at {:?}", other.path));
        }
    }
    Ok(())
}

/// Opens the directory of each writable mount to the uid a backend runs code as (`owner`, when the server may
/// change owners), and to no one else: root's, group `owner`'s gid (a sandbox gid, which no host user has), mode
/// 0770, so runs write in it through the group but, not its owner, cannot `chmod` it open for the host's other
/// users to plant files that every later run reads. The files already there keep their owners and modes, and
/// read-only mounts are left as they are.
pub fn hand_over_writable(mounts: &[Mount], owner: Option<(u32, u32)>) -> std::io::Result<()> {
    let Some((_, gid)) = owner else { return Ok(()) };
    for mount in mounts.iter().filter(|mount| !mount.read_only) {
        std::os::unix::fs::chown(&mount.host, Some(0), Some(gid))?;
        std::fs::set_permissions(&mount.host, std::os::unix::fs::PermissionsExt::from_mode(0o770))?;
    }
    Ok(())
}

/// The names of an absolute path of plain names (`[A-Za-z0-9._-]`, not `.` or `..`), or `None`.
fn plain_segments(path: &str) -> Option<Vec<&str>> {
    let names: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let plain = |name: &&str| {
        !name.is_empty()
            && !matches!(*name, "." | "..")
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    names.iter().all(plain).then_some(names)
}

/// Whether one of two absolute plain paths is the other or beneath it.
fn nested(a: &str, b: &str) -> bool {
    let beneath = |inner: &str, outer: &str| inner.strip_prefix(outer).is_some_and(|rest| rest.starts_with('/'));
    a == b || beneath(a, b) || beneath(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    const HOME: Layout = Layout::Home { path: "/home/baponi" };

    fn mount(path: &str) -> Mount {
        Mount { host: "/srv/volume".into(), path: path.into(), read_only: true, quota_mb: None }
    }

    #[test]
    fn a_mount_path_is_plain_and_beneath_the_scratch_data() {
        for path in ["/data/docs", "/data/a.b_c-1", "/data/x/y"] {
            assert!(validate(&[mount(path)], HOME).is_ok(), "{path}");
        }
        for path in [
            "",
            "/",
            "data/docs",
            "/data",
            "/mnt/docs",
            "/proc/x",
            "/sys",
            "/dev/shm",
            "/etc/docs",
            "/usr/local/docs",
            "/lib64/x",
            "/tmp/docs",
            "/home/baponi",
            "/home/baponi/docs",
            "/data/../etc",
            "/data/./x",
            "/data/..",
            "/data//x",
            "/data/x/",
            "/data/a:b",
            "/data/a,b",
            "/data/a b",
        ] {
            match validate(&[mount(path)], HOME) {
                Err(crate::Error::InvalidArgument { field: "mounts", .. }) => {}
                other => panic!("{path:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn only_where_data_is_scratch_and_never_twice() {
        assert!(validate(&[mount("/data/docs")], Layout::Data).is_err());
        assert!(validate(&[mount("/data/docs"), mount("/data/docs/x")], HOME).is_err());
        assert!(validate(&[mount("/data/docs"), mount("/data/docs")], HOME).is_err());
        assert!(validate(&[mount("/data/docs"), mount("/data/docs2")], HOME).is_ok());
        let relative = Mount { host: "srv".into(), ..mount("/data/docs") };
        assert!(validate(&[relative], HOME).is_err());
        assert!(validate(&vec![mount("/data/x"); MAX_MOUNTS + 1], HOME).is_err());
        assert!(validate(&[], Layout::Data).is_ok());
    }
}
