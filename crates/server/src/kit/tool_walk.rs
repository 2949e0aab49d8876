//! The one walk of a workspace the file tools make (codegen's `Glob` and `Grep`, open-sandbox's `file.list`): over a
//! tree the sandbox controls, in the server, which has no memory or CPU limit, so it is bounded by files listed, the
//! bytes of their paths and the entries examined (hard links and empty directories cost no disk, so the quota does
//! not bound them), and it stops when the call is cancelled (the client left, or the future was dropped).

use sandlot_core::{Error, FileListing, WalkEnd, WalkLimits};
use tokio_util::sync::CancellationToken;

use super::conversation_access::TenantView;

/// Regular files one walk lists at most.
pub const MAX_FILES: usize = 100_000;
/// Bytes of listed paths at most.
pub const MAX_PATH_BYTES: usize = 16 * 1024 * 1024;
/// Directory entries one walk examines at most, whatever they are.
pub const MAX_VISITED: usize = sandlot_core::MAX_VISITED_ENTRIES;

/// The files of `workspace` (see [`TenantView::list_limited`]) within this module's bounds, stopped when `cancel` is;
/// `Err` is the error's text (an I/O failure without the host's path).
pub fn walk(workspace: &TenantView, cancel: &CancellationToken) -> Result<(FileListing, WalkEnd), String> {
    let stop = || cancel.is_cancelled();
    let limits =
        WalkLimits { max_files: MAX_FILES, max_path_bytes: MAX_PATH_BYTES, max_visited: MAX_VISITED, stop: &stop };
    let walked = workspace.list_limited(&limits).map_err(|error| match error {
        Error::Io { action, source, .. } => format!("{action}: {source}"),
        other => other.to_string(),
    })?;
    if walked.1 == WalkEnd::Stopped {
        return Err("cancelled".to_owned());
    }
    Ok(walked)
}

/// The line a result ends with when its walk stopped short, `None` when it saw everything.
pub fn cut_line(end: WalkEnd) -> Option<String> {
    match end {
        WalkEnd::Complete => None,
        WalkEnd::Listed => Some(format!(
            "[walk cut: the workspace holds more than {MAX_FILES} files or {} MiB of paths; later files were not seen]",
            MAX_PATH_BYTES >> 20
        )),
        WalkEnd::Visited => Some(format!(
            "[walk cut: {MAX_VISITED} directory entries examined, the limit of one call; later files were not seen]"
        )),
        WalkEnd::Stopped => Some("[walk cut: cancelled]".to_owned()),
    }
}
