//! The files of a workspace that ripgrep would search, as `Glob` and `Grep` list them: one bounded walk
//! (`kit::tool_walk`: files, path bytes and entries examined, stopped when the call is cancelled), then ripgrep's
//! rules: no hidden file and nothing in a hidden directory, and none that a `.gitignore` ignores (the deepest one
//! with a say wins; honoured outside git too; an ignored directory hides everything below it, and its own
//! `.gitignore` is not read). Ignore files are the sandbox's, and compiling their patterns costs the server memory
//! and time (100,000 patterns took 800 MiB), so one walk reads them within a budget in all ([`IGNORE_BYTES`],
//! [`IGNORE_PATTERNS`]; the rest are not applied and the result says so); it builds one matcher per directory and
//! decides each directory once, so the cost is (files + directories) × the ignore files above each.

use std::collections::HashMap;
use std::io::Read as _;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use sandlot_core::FileEntry;
use tokio_util::sync::CancellationToken;

use crate::kit::conversation_access::TenantView;
use crate::kit::tool_walk;

/// Bytes of `.gitignore` files one walk reads at most, in all.
pub const IGNORE_BYTES: u64 = 256 * 1024;
/// Patterns (lines that are neither blank nor comments) of `.gitignore` files one walk compiles at most, in all.
pub const IGNORE_PATTERNS: usize = 2_000;

/// What a walk found: the visible files, sorted by path, and a line for each thing cut short.
pub struct Visible {
    pub files: Vec<FileEntry>,
    pub cut: Vec<String>,
}

/// The visible regular files under `dir` (workspace-relative, `""` for the whole workspace); `Err` is the tool's text.
pub fn visible_files(workspace: &TenantView, dir: &str, cancel: &CancellationToken) -> Result<Visible, String> {
    let (listing, end) = tool_walk::walk(workspace, cancel)?;
    let mut cut: Vec<String> = tool_walk::cut_line(end).into_iter().collect();
    let mut rules = Rules::default();
    let mut ignore_files: Vec<&FileEntry> = listing.files.iter().filter(|f| is_ignore_file(&f.path)).collect();
    ignore_files.sort_by_key(|f| f.path.matches('/').count());
    let (mut bytes_left, mut patterns_left, mut skipped) = (IGNORE_BYTES, IGNORE_PATTERNS, 0usize);
    for file in ignore_files {
        let parent = parent_of(&file.path);
        // Ancestors' matchers are all loaded (shallower first): a directory ripgrep would not enter is not read.
        if rules.dir_ignored(parent) {
            continue;
        }
        if cancel.is_cancelled() {
            return Err("cancelled".to_owned());
        }
        let Some(text) = read_within(workspace, &file.path, bytes_left) else {
            skipped += 1;
            continue;
        };
        let patterns: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).collect();
        if patterns.len() > patterns_left {
            skipped += 1;
            continue;
        }
        bytes_left -= text.len() as u64;
        patterns_left -= patterns.len();
        let mut builder = GitignoreBuilder::new(parent);
        for line in patterns {
            let _ = builder.add_line(None, line);
        }
        if let Ok(gitignore) = builder.build() {
            rules.matchers.insert(parent.to_owned(), gitignore);
        }
    }
    if skipped > 0 {
        cut.push(format!(
            "[.gitignore cut: {skipped} ignore file(s) not applied, past the {} KiB and {IGNORE_PATTERNS} patterns one \
             call reads]",
            IGNORE_BYTES >> 10
        ));
    }
    let under = |path: &str| dir.is_empty() || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'));
    let mut files = Vec::new();
    for file in listing.files {
        if under(&file.path) && !rules.dir_ignored(parent_of(&file.path)) && !rules.decides_ignored(&file.path, false) {
            files.push(file);
        }
    }
    Ok(Visible { files, cut })
}

/// Whether `path` is a `.gitignore`.
fn is_ignore_file(path: &str) -> bool {
    path == ".gitignore" || path.ends_with("/.gitignore")
}

/// The directory of `path` (`""` at the top).
fn parent_of(path: &str) -> &str {
    path.rfind('/').map_or("", |slash| &path[..slash])
}

/// The text of `path` if it takes at most `budget` bytes; `None` when it does not, or cannot be read.
fn read_within(workspace: &TenantView, path: &str, budget: u64) -> Option<String> {
    let file = workspace.open_file(path).ok()?;
    let mut bytes = Vec::new();
    file.take(budget + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > budget {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// One walk's ignore rules: a matcher per directory that has a `.gitignore`, and each directory's verdict once
/// decided.
#[derive(Default)]
struct Rules {
    matchers: HashMap<String, Gitignore>,
    ignored_dirs: HashMap<String, bool>,
}

impl Rules {
    /// Whether the directory `dir` (`""`: the top) is hidden or ignored, itself or through a parent.
    fn dir_ignored(&mut self, dir: &str) -> bool {
        if dir.is_empty() {
            return false;
        }
        if let Some(&ignored) = self.ignored_dirs.get(dir) {
            return ignored;
        }
        let ignored = self.dir_ignored(parent_of(dir)) || self.decides_ignored(dir, true);
        self.ignored_dirs.insert(dir.to_owned(), ignored);
        ignored
    }

    /// Whether `path` itself is hidden, or ignored by the deepest `.gitignore` above it that has a say.
    fn decides_ignored(&self, path: &str, is_dir: bool) -> bool {
        if path.rsplit('/').next().is_some_and(|name| name.starts_with('.')) {
            return true;
        }
        let mut ancestor = path;
        while !ancestor.is_empty() {
            ancestor = parent_of(ancestor);
            let Some(gitignore) = self.matchers.get(ancestor) else { continue };
            match gitignore.matched(path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}
