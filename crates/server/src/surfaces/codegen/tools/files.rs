//! What the file tools share: opening a workspace file through the session tenant's `TenantView` of the workspace
//! (`sandlot_core::Workspaces` beneath it: no symlink followed, `O_NONBLOCK` and the type checked on the descriptor,
//! so a FIFO or device never blocks; another tenant's workspace reads as one that does not exist), the texts of its
//! errors (which name the path as the agent gave it, never the host's directories), blocking work that stops when
//! the call is dropped, and glob matchers.

use std::fs::File;

use globset::{GlobBuilder, GlobMatcher};
use sandlot_core::Error;
use tokio_util::sync::CancellationToken;

use crate::kit::conversation_access::TenantView;
use crate::kit::workspace_paths::WORKSPACE_MOUNT;

/// The tool text of a failure to open or write `shown` (the path as the agent gave it; `relative` in the
/// workspace), in codegen-sandbox's words where it has them (`stat: stat /workspace/x: no such file or directory`,
/// `path is a directory: x`). An I/O failure says what failed on `shown`, not on the host's path.
pub fn error_text(shown: &str, relative: &str, error: &Error) -> String {
    match error {
        Error::FileNotFound { .. } => format!("stat: {}", missing(relative)),
        Error::InvalidPath { message, .. } if message == "is a directory" => format!("path is a directory: {shown}"),
        Error::InvalidPath { message, .. } if message.contains("symlink") => format!("resolve path: {shown} {message}"),
        Error::InvalidPath { message, .. } => format!("{shown} {message}"),
        Error::Io { action, source, .. } => format!("{action} {shown}: {source}"),
        other => other.to_string(),
    }
}

/// Go's `stat` error for a missing workspace path, as the agent sees the path in the sandbox.
pub fn missing(relative: &str) -> String {
    let absolute =
        if relative.is_empty() { WORKSPACE_MOUNT.to_owned() } else { format!("{WORKSPACE_MOUNT}/{relative}") };
    format!("stat {absolute}: no such file or directory")
}

/// What a directory argument (`path` of Glob and Grep) names.
pub enum Target {
    /// A directory, or nothing to tell it from one (a directory behind a symlink lists nothing).
    Dir,
    File,
    Missing,
}

/// What `relative` is in the workspace (never following a symlink).
pub fn target(workspace: &TenantView, relative: &str) -> Target {
    if relative.is_empty() {
        return Target::Dir;
    }
    match workspace.open_file(relative) {
        Ok(_) => Target::File,
        Err(Error::FileNotFound { .. }) => Target::Missing,
        Err(_) => Target::Dir,
    }
}

/// Opens the regular file `relative` of the workspace for reading; `Err` is the tool's text.
pub fn open(workspace: &TenantView, relative: &str, shown: &str) -> Result<File, String> {
    if relative.is_empty() {
        return Err(format!("path is a directory: {shown}"));
    }
    workspace.open_file(relative).map_err(|e| error_text(shown, relative, &e))
}

/// Runs blocking file work off the async threads, handing it a token that is cancelled when `cancel` is (the client
/// cancelled the request) or when this future is dropped (the session closed): long work (a walk, a search) polls
/// it and stops, instead of going on for nobody on the blocking pool.
pub async fn blocking<T: Send + 'static>(
    cancel: &CancellationToken,
    work: impl FnOnce(CancellationToken) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let token = cancel.child_token();
    let guard = token.clone().drop_guard();
    let result = tokio::task::spawn_blocking(move || work(token)).await.map_err(|e| format!("internal error: {e}"));
    drop(guard);
    result?
}

/// A glob as codegen-sandbox matches it: `*`, `?` and `[..]` within one path segment, `**` across them; a glob
/// without `/` matches the base name.
pub struct Pattern {
    matcher: GlobMatcher,
    base_name_only: bool,
}

impl Pattern {
    pub fn new(glob: &str) -> Result<Self, String> {
        let matcher = GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid glob {glob:?}: {e}"))?
            .compile_matcher();
        Ok(Self { matcher, base_name_only: !glob.contains('/') })
    }

    /// Whether `path` (relative to where the search starts) matches.
    pub fn matches(&self, path: &str) -> bool {
        let candidate = if self.base_name_only { path.rsplit('/').next().unwrap_or(path) } else { path };
        self.matcher.is_match(candidate)
    }
}
