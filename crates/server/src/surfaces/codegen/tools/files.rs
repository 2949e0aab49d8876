//! What the file tools share: opening a workspace file through the session tenant's `TenantView` of the workspace
//! (`sandlot_core::Workspaces` beneath it: no symlink followed, `O_NONBLOCK` and the type checked on the descriptor,
//! so a FIFO or device never blocks; another tenant's workspace reads as one that does not exist), the texts of its
//! errors, the workspace's files with `.gitignore` applied, and glob matchers.

use std::fs::File;

use globset::{GlobBuilder, GlobMatcher};
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use sandlot_core::{Error, FileEntry};

use crate::kit::conversation_access::TenantView;
use crate::kit::workspace_paths::WORKSPACE_MOUNT;

/// Files a Glob or Grep walks at most, and the bytes of their paths.
const MAX_FILES: usize = 100_000;
const MAX_PATH_BYTES: usize = 64 * 1024 * 1024;
/// The largest `.gitignore` read.
const MAX_GITIGNORE_BYTES: u64 = 1024 * 1024;

/// The tool text of a failure to open `shown` (the path as the agent gave it; `relative` in the workspace), in
/// codegen-sandbox's words where it has them (`stat: stat /workspace/x: no such file or directory`, `path is a
/// directory: x`).
pub fn error_text(shown: &str, relative: &str, error: &Error) -> String {
    match error {
        Error::FileNotFound { .. } => format!("stat: {}", missing(relative)),
        Error::InvalidPath { message, .. } if message == "is a directory" => format!("path is a directory: {shown}"),
        Error::InvalidPath { message, .. } if message.contains("symlink") => format!("resolve path: {shown} {message}"),
        Error::InvalidPath { message, .. } => format!("{shown} {message}"),
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

/// Runs blocking file work off the async threads.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|e| format!("internal error: {e}"))?
}

/// The regular files under `dir` (workspace-relative, `""` for the whole workspace) that ripgrep would search:
/// none that a `.gitignore` of the workspace ignores (ripgrep's rules: the deepest `.gitignore` that has a say
/// wins; honoured outside git too), no hidden file and nothing in a hidden directory. Listed by file descriptors without following a symlink (`Workspaces::list_within`).
pub fn visible_files(workspace: &TenantView, dir: &str) -> Result<Vec<FileEntry>, String> {
    let listing = workspace.list_within(MAX_FILES, MAX_PATH_BYTES).map_err(|e| e.to_string())?;
    let mut ignores: Vec<(String, Gitignore)> = Vec::new();
    for entry in &listing.files {
        let Some(parent) = entry.path.strip_suffix(".gitignore") else { continue };
        if !(parent.is_empty() || parent.ends_with('/')) {
            continue;
        }
        let parent = parent.trim_end_matches('/').to_owned();
        let Ok(file) = workspace.open_file(&entry.path) else { continue };
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_GITIGNORE_BYTES), &mut text);
        let mut builder = GitignoreBuilder::new(&parent);
        for line in text.lines() {
            let _ = builder.add_line(None, line);
        }
        if let Ok(gitignore) = builder.build() {
            ignores.push((parent, gitignore));
        }
    }
    // Deepest first.
    ignores.sort_by_key(|(parent, _)| std::cmp::Reverse(parent.matches('/').count() + usize::from(!parent.is_empty())));
    let under =
        |path: &str, dir: &str| dir.is_empty() || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'));
    let ignored = |path: &str| {
        for (parent, gitignore) in &ignores {
            if !under(path, parent) {
                continue;
            }
            match gitignore.matched_path_or_any_parents(path, false) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    };
    let hidden = |path: &str| path.split('/').any(|segment| segment.starts_with('.'));
    Ok(listing.files.into_iter().filter(|f| under(&f.path, dir) && !hidden(&f.path) && !ignored(&f.path)).collect())
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
