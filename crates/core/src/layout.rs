//! Where a run sees its conversation's directory: the workspace layout a face (a drop-in profile) asks for.
//!
//! sandlot's own layout puts the conversation at `/data`, which is also the working directory. A profile may put it
//! elsewhere (Baponi: `/home/baponi`) and give the run an empty scratch working directory at `/data` instead, which
//! vanishes with the run. A profile whose programs work in their own directory (codegen-sandbox: `/workspace`) puts
//! the conversation there and makes it the working directory; `/data` is then the empty read-only directory of the
//! sandbox's root. Either way exactly one host directory is writable and persists: the conversation's.

/// The layout of one run's filesystem, as far as the conversation's directory goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// The conversation's directory at `/data`, the working directory.
    #[default]
    Data,
    /// The conversation's directory at `path` (absolute, not `/data`, not under a system directory); the working
    /// directory is `/data`, an empty scratch directory (in memory, counted in the run's memory limit) that ends
    /// with the run.
    Home { path: &'static str },
    /// The conversation's directory at `path` (as for `Home`), which is also the working directory; no scratch:
    /// `/data` is an empty read-only directory.
    Workspace { path: &'static str },
}

impl Layout {
    /// The path inside the sandbox where the conversation's directory is mounted.
    pub fn conversation_path(self) -> &'static str {
        match self {
            Layout::Data => "/data",
            Layout::Home { path } | Layout::Workspace { path } => path,
        }
    }

    /// The run's working directory inside the sandbox.
    pub fn working_dir(self) -> &'static str {
        match self {
            Layout::Data | Layout::Home { .. } => "/data",
            Layout::Workspace { path } => path,
        }
    }

    /// Whether `/data` is a scratch directory of the run's own rather than the conversation's.
    pub fn scratch_data(self) -> bool {
        matches!(self, Layout::Home { .. })
    }

    /// The size of the scratch `/data` of a run with `limits`, in MiB, when it has one: the disk quota, but at most
    /// half the memory limit (the scratch is memory, counted in the run's memory limit, so filling it ends in "no
    /// space left" while the program still has memory to report it), and at least 1.
    pub fn scratch_data_mb(self, limits: &crate::Limits) -> Option<u64> {
        self.scratch_data().then(|| limits.disk_mb.min(limits.memory_mb / 2).max(1))
    }

    /// Checks that the conversation's path is one a sandbox can mount it at without hiding or shadowing what it
    /// needs: absolute, plain segments of `[A-Za-z0-9._-]` (no `.` or `..`; nothing a Docker bind would parse),
    /// not `/`, not `/data` or under it, not under a system directory (`/proc`, `/sys`, `/dev`, `/etc`, `/usr`,
    /// `/bin`, `/sbin`, `/lib*`, `/tmp`). The engine refuses a run with another layout before anything is created.
    pub fn validate(self) -> crate::Result<()> {
        let (Layout::Home { path } | Layout::Workspace { path }) = self else { return Ok(()) };
        let refuse = |why: &str| Err(crate::Error::invalid("layout", format!("conversation path {path:?} {why}")));
        let Some(relative) = path.strip_prefix('/') else { return refuse("is not absolute") };
        let segments: Vec<&str> = relative.split('/').collect();
        let plain = |s: &&str| {
            !s.is_empty()
                && *s != "."
                && *s != ".."
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !segments.iter().all(plain) {
            return refuse("must be `/` and plain names of letters, digits, `.`, `_` and `-` (no `.` or `..`)");
        }
        let first = segments[0];
        if RESERVED.contains(&first) {
            return refuse(&format!("is under /{first}, which the sandbox needs for itself"));
        }
        Ok(())
    }
}

/// First segments a home path may not have: `/data` (the scratch) and the system directories every sandbox has.
const RESERVED: &[&str] =
    &["data", "proc", "sys", "dev", "etc", "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "tmp"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_path_must_be_absolute_plain_and_outside_system_dirs() {
        for path in ["/home/baponi", "/workspace", "/home/a.b_c-1", "/root/x", "/opt/work", "/library"] {
            assert!(Layout::Home { path }.validate().is_ok(), "{path}");
            assert!(Layout::Workspace { path }.validate().is_ok(), "{path}");
        }
        for path in [
            "",
            "/",
            "home/baponi",
            "/data",
            "/data/x",
            "/proc",
            "/proc/1",
            "/sys/x",
            "/dev/shm",
            "/etc/baponi",
            "/usr/local/x",
            "/bin/x",
            "/sbin",
            "/lib",
            "/lib64/x",
            "/libx32",
            "/tmp",
            "/tmp/x",
            "/home/",
            "//home",
            "/home/../etc",
            "/home/./x",
            "/home/a:b",
            "/home/a,b",
            "/home/a b",
            "/home/\u{0}",
        ] {
            for layout in [Layout::Home { path }, Layout::Workspace { path }] {
                match layout.validate() {
                    Err(crate::Error::InvalidArgument { field: "layout", .. }) => {}
                    other => panic!("{path:?}: {other:?}"),
                }
            }
        }
        assert!(Layout::Data.validate().is_ok());
    }

    #[test]
    fn the_scratch_is_the_quota_at_most_half_the_memory() {
        let limits = |disk_mb, memory_mb| crate::Limits { disk_mb, memory_mb, ..crate::Limits::default() };
        let home = Layout::Home { path: "/home/baponi" };
        assert_eq!(
            [
                home.scratch_data_mb(&limits(16, 256)),
                home.scratch_data_mb(&limits(1024, 64)),
                home.scratch_data_mb(&limits(8, 1))
            ],
            [Some(16), Some(32), Some(1)]
        );
        assert_eq!(Layout::Data.scratch_data_mb(&limits(16, 256)), None);
        assert_eq!(Layout::Workspace { path: "/workspace" }.scratch_data_mb(&limits(16, 256)), None);
    }

    #[test]
    fn the_working_directory_is_data_except_in_the_workspace_layout() {
        let layouts = [Layout::Data, Layout::Home { path: "/home/baponi" }, Layout::Workspace { path: "/workspace" }];
        assert_eq!(layouts.map(Layout::working_dir), ["/data", "/data", "/workspace"]);
        assert_eq!(layouts.map(Layout::conversation_path), ["/data", "/home/baponi", "/workspace"]);
    }
}
