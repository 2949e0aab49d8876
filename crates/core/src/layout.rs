//! Where a run sees its conversation's directory: the workspace layout a face (a drop-in profile) asks for.
//!
//! sandlot's own layout puts the conversation at `/data`, which is also the working directory. A profile may put it
//! elsewhere (Baponi: `/home/baponi`) and give the run an empty scratch working directory at `/data` instead, which
//! vanishes with the run. Either way exactly one host directory is writable and persists: the conversation's.

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
}

impl Layout {
    /// The path inside the sandbox where the conversation's directory is mounted.
    pub fn conversation_path(self) -> &'static str {
        match self {
            Layout::Data => "/data",
            Layout::Home { path } => path,
        }
    }

    /// Whether `/data` is a scratch directory of the run's own rather than the conversation's.
    pub fn scratch_data(self) -> bool {
        matches!(self, Layout::Home { .. })
    }
}
