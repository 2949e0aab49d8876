//! How every container sandlot makes is confined, a run's and a live sandbox's alike: the host config (no network,
//! no capabilities, `no-new-privileges`, a read-only root, a sized `/tmp`, memory without swap, CPU by weight and a
//! quota only under the operator's cap, pids, ulimits, an init) and the binds (the conversation at its path, the
//! volumes). One place, so the two kinds of container cannot drift apart: a live sandbox is hardened exactly as a run is, with the limits bounding the whole container.

use std::collections::HashMap;
use std::path::Path;

use bollard::models::{HostConfig, ResourcesUlimits};
use sandlot_core::{Layout, Limits, Mount};

/// Every container's CPU weight (`--cpu-shares`): Docker's default, the same for all, so none outweighs another.
const CPU_SHARES: i64 = 1024;

/// What a container is made for: its limits, where it sees the conversation, its binds and the runner's user.
pub(crate) struct Confinement<'a> {
    pub limits: &'a Limits,
    pub layout: Layout,
    /// The conversation's directory on the host, bound read-write at `layout.conversation_path()`.
    pub workspace: &'a Path,
    pub mounts: &'a [Mount],
    /// The uid:gid the container runs as (a scratch `/data` is given to it).
    pub user: (u32, u32),
}

impl Confinement<'_> {
    /// The host config every sandlot container gets.
    pub(crate) fn host_config(&self) -> HostConfig {
        let limits = self.limits;
        let memory = i64::try_from(limits.memory_mb * 1024 * 1024).unwrap_or(i64::MAX);
        let mut tmpfs =
            HashMap::from([("/tmp".to_owned(), format!("rw,nosuid,nodev,size={}m,mode=1777", limits.tmp_mb))]);
        if let Some(scratch_mb) = self.layout.scratch_data_mb(limits) {
            // Owned by the runner's user: Docker copies the image's `/data` (root's, 0755) over a `mode` option.
            // `exec` as a bind's `/data` is (Docker's tmpfs default is noexec).
            let (uid, gid) = self.user;
            tmpfs.insert(
                "/data".to_owned(),
                format!("rw,exec,nosuid,nodev,size={scratch_mb}m,uid={uid},gid={gid},mode=0755"),
            );
        }
        let file_size = i64::try_from(limits.disk_mb * 1024 * 1024).unwrap_or(i64::MAX);
        let ulimit =
            |name: &str, value: i64| ResourcesUlimits { name: Some(name.into()), soft: Some(value), hard: Some(value) };
        HostConfig {
            binds: Some(self.binds()),
            network_mode: Some("none".into()),
            readonly_rootfs: Some(true),
            tmpfs: Some(tmpfs),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            memory: Some(memory),
            memory_swap: Some(memory),
            // CPU by weight: every container the same shares (Docker's default, 1024, said outright), so busy runs
            // split the cores equally and one alone has them all; a quota only where the operator set a cap.
            cpu_shares: Some(CPU_SHARES),
            nano_cpus: limits.cpus.map(|cpus| (cpus * 1e9) as i64),
            pids_limit: Some(i64::try_from(limits.pids).unwrap_or(i64::MAX)),
            ulimits: Some(vec![
                ulimit("nofile", i64::try_from(limits.open_files).unwrap_or(1024)),
                ulimit("fsize", file_size),
                ulimit("core", 0),
            ]),
            init: Some(true),
            ..Default::default()
        }
    }

    /// The container's binds: the conversation at its path, read-write, and the mounts (beneath the scratch `/data`,
    /// validated by the engine: plain names, nothing a bind would parse), read-only unless writable. Docker mounts
    /// the scratch tmpfs before the binds beneath it (it orders mounts by depth). A bind takes no nosuid or nodev
    /// option: the container's no-new-privileges and dropped capabilities make set-uid files and device nodes in a
    /// volume useless.
    fn binds(&self) -> Vec<String> {
        let conversation = format!("{}:{}:rw", self.workspace.display(), self.layout.conversation_path());
        let mounts = self.mounts.iter().map(|m| {
            let mode = if m.read_only { "ro" } else { "rw" };
            format!("{}:{}:{mode}", m.host.display(), m.path)
        });
        std::iter::once(conversation).chain(mounts).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_config(limits: &Limits) -> HostConfig {
        let confinement =
            Confinement { limits, layout: Layout::Data, workspace: Path::new("/w"), mounts: &[], user: (10001, 10001) };
        confinement.host_config()
    }

    #[test]
    fn cpu_is_shared_by_weight_and_capped_only_by_the_operator() {
        let default = host_config(&Limits::default());
        assert_eq!((default.cpu_shares, default.nano_cpus), (Some(1024), None));
        let capped = host_config(&Limits { cpus: Some(1.5), ..Limits::default() });
        assert_eq!((capped.cpu_shares, capped.nano_cpus), (Some(1024), Some(1_500_000_000)));
    }
}
