//! What a container around sandlot lacks for the jail, for `sandlot doctor` (docs/container.md).
//!
//! Run in a container with Docker's defaults, the jail fails at its first mount with a bare `EPERM` that names
//! neither the cause nor the flag that fixes it. This looks at what the kernel shows of the process (capabilities
//! and seccomp mode in `/proc/self/status`, the procfs mounts in `/proc/self/mountinfo`) and names each missing
//! piece with its `docker run` flag. It only reads; the probe run of `doctor` stays the judge of whether the jail
//! works (a custom seccomp profile may allow all the jail needs, say).

use super::check::{Check, CheckStatus};

/// `CAP_NET_ADMIN`: the loopback of each sandbox's network namespace, which sandlot (so the container) owns.
const CAP_NET_ADMIN: u32 = 12;
/// `CAP_SYS_ADMIN`: mounts, idmapped `/data`, the cached skeletons.
const CAP_SYS_ADMIN: u32 = 21;

/// The mark a container engine left, if any: `None` on a host (or a host made from a container image, which keeps
/// `/.dockerenv`: the marks only decide whether to say that all is well, never what is lacking).
fn container_mark() -> Option<&'static str> {
    if std::path::Path::new("/.dockerenv").exists() {
        Some("/.dockerenv")
    } else if std::path::Path::new("/run/.containerenv").exists() {
        Some("/run/.containerenv")
    } else if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        Some("KUBERNETES_SERVICE_HOST")
    } else if std::env::var_os("container").is_some_and(|v| !v.is_empty()) {
        Some("container=")
    } else {
        None
    }
}

/// The value of a `Name:\tvalue` line of `/proc/<pid>/status`.
fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':').map(str::trim))
}

/// Whether some procfs mount has nothing mounted over any of its paths. The kernel lets a user namespace mount a
/// fresh procfs (each sandbox's `/proc`) only then (`mount_too_revealing`); Docker covers parts of the container's
/// `/proc` (its masked and read-only paths).
fn uncovered_procfs(mountinfo: &str) -> bool {
    // Fields: id parent major:minor root mount-point options [optional...] - fstype source super-options.
    // Only a mount of the whole procfs counts (its root is the filesystem's root), as in the kernel's check: Docker's
    // read-only paths are procfs mounts too, of one directory each (`/sys` at `/proc/sys`).
    let mounts: Vec<(&str, &str, &str)> = mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut left = left.split_whitespace().skip(3);
            Some((left.next()?, left.next()?, right.split_whitespace().next()?))
        })
        .collect();
    mounts.iter().filter(|(root, _, fstype)| *root == "/" && *fstype == "proc").any(|(_, point, _)| {
        let prefix = format!("{}/", point.trim_end_matches('/'));
        !mounts.iter().any(|(_, other, _)| other.starts_with(&prefix))
    })
}

/// What the jail needs and this process lacks, each with the flag that grants it, from `/proc/self/status` and
/// `/proc/self/mountinfo` as text.
fn lacking(status: &str, mountinfo: &str) -> Vec<&'static str> {
    let mut lacks = Vec::new();
    let effective = status_field(status, "CapEff").and_then(|v| u64::from_str_radix(v, 16).ok()).unwrap_or(0);
    if effective & (1 << CAP_SYS_ADMIN) == 0 {
        lacks.push("CAP_SYS_ADMIN for mounts (--cap-add SYS_ADMIN)");
    }
    if effective & (1 << CAP_NET_ADMIN) == 0 {
        lacks.push("CAP_NET_ADMIN for each sandbox's loopback (--cap-add NET_ADMIN)");
    }
    if status_field(status, "Seccomp").is_some_and(|mode| mode != "0") {
        lacks.push("no seccomp filter: Docker's default refuses pivot_root (--security-opt seccomp=unconfined)");
    }
    if !uncovered_procfs(mountinfo) {
        lacks.push(
            "a /proc nothing is mounted over: Docker masks parts of it (the image's entrypoint mounts a spare one \
             with CAP_SYS_ADMIN; or --security-opt systempaths=unconfined)",
        );
    }
    lacks
}

/// The `container` line of `doctor`, for sandlot as root (the unprivileged mode needs none of these): what the
/// jail needs and this process lacks, a failure when the probe run failed too (`jail_ok` false); when nothing is
/// lacking, a line only in a container, to say so. A host's root lacks none of them.
pub fn container_check(jail_ok: bool) -> Option<Check> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let lacks = lacking(&status, &mountinfo);
    let mark = container_mark();
    let check = |status, detail| Some(Check { layer: "container", status, detail });
    let place = mark.map(|m| format!("in a container ({m} found)")).unwrap_or_else(|| "this process".to_owned());
    match (lacks.is_empty(), jail_ok) {
        (true, _) => mark.and_then(|_| {
            check(
                CheckStatus::Ok,
                format!(
                    "{place}: has what the jail needs (CAP_SYS_ADMIN, CAP_NET_ADMIN, no seccomp filter, a whole /proc)"
                ),
            )
        }),
        (false, false) => check(
            CheckStatus::Failed,
            format!("{place} lacks what the jail needs: {}; see docs/container.md", lacks.join("; ")),
        ),
        (false, true) => check(CheckStatus::Ok, format!("{place}: the probe run worked without: {}", lacks.join("; "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/self/status` lines of a process in a container with Docker's defaults.
    const DEFAULT_STATUS: &str = "Name:\tbash\nCapEff:\t00000000a80425fb\nSeccomp:\t2\nSeccomp_filters:\t1\n";
    /// The same with --cap-add SYS_ADMIN --cap-add NET_ADMIN --security-opt seccomp=unconfined.
    const GRANTED_STATUS: &str = "Name:\tbash\nCapEff:\t00000000a82435fb\nSeccomp:\t0\nSeccomp_filters:\t0\n";
    /// The procfs mounts of a Docker container: `/proc` with masked and read-only paths over it.
    const DOCKER_MOUNTINFO: &str = "\
731 730 0:86 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
733 731 0:86 /bus /proc/bus ro,nosuid,nodev,noexec,relatime - proc proc rw
737 731 0:86 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
739 731 0:90 / /proc/kcore rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
";

    #[test]
    fn docker_defaults_lack_all_four() {
        let lacks = lacking(DEFAULT_STATUS, DOCKER_MOUNTINFO);
        assert_eq!(lacks.len(), 4, "{lacks:?}");
        assert!(lacks[0].starts_with("CAP_SYS_ADMIN") && lacks[1].starts_with("CAP_NET_ADMIN"), "{lacks:?}");
        assert!(lacks[2].contains("seccomp=unconfined") && lacks[3].contains("systempaths=unconfined"), "{lacks:?}");
    }

    #[test]
    fn the_compose_privileges_and_a_spare_procfs_lack_nothing() {
        let spare =
            format!("{DOCKER_MOUNTINFO}800 25 0:95 / /run/sandlot-proc rw,nosuid,nodev,noexec - proc proc rw\n");
        assert_eq!(lacking(GRANTED_STATUS, &spare), Vec::<&str>::new());
    }

    #[test]
    fn a_procfs_is_whole_only_without_mounts_below_it() {
        assert!(!uncovered_procfs(DOCKER_MOUNTINFO));
        assert!(uncovered_procfs("22 1 0:5 / /proc rw - proc proc rw\n23 1 0:6 / /processes rw - tmpfs t rw\n"));
        assert!(!uncovered_procfs("24 1 0:7 / /tmp rw - tmpfs tmpfs rw\n"));
    }
}
