//! `Grep`: searches the workspace's files (or one file, or a directory, `path`) for a Rust regex with ripgrep's
//! crates: `path:line:text` (content, the default), `path` (files_with_matches) or `path:count` (count), paths
//! workspace-relative and sorted; `.gitignore` honoured, binary files skipped, `glob` filters the files searched,
//! `head_limit` keeps the first lines. No match is an empty text, not an error.
//!
//! It runs in the server over files the sandbox wrote, so every cost is bounded: the pattern compiles within
//! [`REGEX_BYTES`] (a 17-byte pattern could take 100 MiB of program and 1 GiB of DFA cache under the engine's
//! defaults; over it is a clear error), a line is held within [`LINE_BYTES`], one call reads [`READ_BYTES`] at most
//! and each file once however many hard links name it, the walk is `visible::visible_files`'s, the result is within
//! `kit::result_budget`, and the search stops when the call is cancelled. What was cut is said in a last line.

use std::collections::HashSet;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use rmcp::model::Tool;
use serde_json::json;

use super::{Call, Reply, files, visible};
use crate::kit::result_budget::{ResultBudget, TOOL_RESULT_BYTES};
use crate::kit::workspace_paths as paths;

/// The compiled program of a pattern at most, and its lazy DFA's cache.
pub const REGEX_BYTES: usize = 4 * 1024 * 1024;
/// The memory a searched line may take (a longer line skips its file).
pub const LINE_BYTES: usize = 2 * 1024 * 1024;
/// Bytes one call reads at most, over every file it searches.
pub const READ_BYTES: u64 = 128 * 1024 * 1024;

pub fn tool() -> Tool {
    super::tool(
        "Grep",
        "Search file contents with a Rust regular expression (ripgrep). output_mode: content (path:line:text, the \
         default), files_with_matches (paths) or count (path:count). Honours .gitignore.",
        json!({
            "pattern": { "type": "string", "description": "Rust regular expression" },
            "path": { "type": "string", "description": "File or directory to search (default: the workspace root)" },
            "glob": { "type": "string", "description": "Only search files matching this glob, e.g. *.rs" },
            "case_insensitive": { "type": "boolean", "description": "Ignore case (default false)" },
            "output_mode": { "type": "string", "enum": ["content", "files_with_matches", "count"], "description": "What to return (default content)" },
            "head_limit": { "type": "number", "description": "Return at most this many lines" },
        }),
        &["pattern"],
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    Files,
    Count,
}

pub async fn call(call: Call) -> Reply {
    let pattern = call.nonempty_str("pattern")?;
    let mode = match call.optional_str("output_mode").unwrap_or("content") {
        "content" | "" => Mode::Content,
        "files_with_matches" => Mode::Files,
        "count" => Mode::Count,
        other => return Err(format!("unknown output_mode: {other} (valid: content, files_with_matches, count)")),
    };
    let matcher = matcher(pattern, call.flag("case_insensitive"))?;
    let filter = call.optional_str("glob").filter(|g| !g.is_empty()).map(files::Pattern::new).transpose()?;
    let target = paths::relative(call.optional_str("path").unwrap_or(""))?;
    let head_limit = call.optional_int("head_limit").filter(|l| *l > 0).map(|l| l as usize);
    let workspace = call.view()?;
    files::blocking(&call.cancel, move |cancel| {
        // A file named directly is searched as it is (even hidden or ignored, as ripgrep does); else the
        // directory's visible files.
        let single = match files::target(&workspace, &target) {
            files::Target::File => true,
            files::Target::Dir => false,
            files::Target::Missing => return Err(format!("stat path: {}", files::missing(&target))),
        };
        let (candidates, mut cut): (Vec<String>, Vec<String>) = if single {
            (vec![target.clone()], Vec::new())
        } else {
            let visible = visible::visible_files(&workspace, &target, &cancel)?;
            (visible.files.into_iter().map(|f| f.path).collect(), visible.cut)
        };
        let mut lines: Vec<String> = Vec::new();
        let mut budget = ResultBudget::tool();
        let mut read_left = READ_BYTES;
        let mut seen = HashSet::new();
        let mut too_long = 0usize;
        let full = |lines: &Vec<String>| head_limit.is_some_and(|limit| lines.len() >= limit);
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .heap_limit(Some(LINE_BYTES))
            .build();
        for path in candidates {
            if full(&lines) || budget.is_cut() {
                break;
            }
            if cancel.is_cancelled() {
                return Err("cancelled".to_owned());
            }
            if filter.as_ref().is_some_and(|filter| !filter.matches(&path)) {
                continue;
            }
            // Opened again beneath the workspace (no symlink, no FIFO wait): what was listed may have changed.
            let Ok(file) = workspace.open_file(&path) else { continue };
            // Hard links are free: each file is read once, whatever names it.
            if file.metadata().is_ok_and(|meta| !seen.insert((meta.dev(), meta.ino()))) {
                continue;
            }
            if read_left == 0 {
                cut.push(format!(
                    "[search cut: {} MiB read, the limit of one call; {path} and later files were not searched]",
                    READ_BYTES >> 20
                ));
                break;
            }
            let mut reader = file.take(read_left);
            let mut count = 0usize;
            let searched = searcher.search_reader(
                &matcher,
                &mut reader,
                Lossy(|number, line| {
                    count += 1;
                    if mode == Mode::Content {
                        let line = format!("{path}:{number}:{}\n", line.trim_end_matches(['\n', '\r']));
                        if full(&lines) || !budget.take(&line) {
                            return Ok(false);
                        }
                        lines.push(line);
                    }
                    Ok(mode != Mode::Files)
                }),
            );
            read_left = reader.limit();
            if searched.is_err() {
                too_long += 1;
                continue;
            }
            if count == 0 || mode == Mode::Content {
                continue;
            }
            let line = if mode == Mode::Files { format!("{path}\n") } else { format!("{path}:{count}\n") };
            if budget.take(&line) {
                lines.push(line);
            }
        }
        if let Some(limit) = head_limit {
            lines.truncate(limit);
        }
        if budget.is_cut() {
            cut.push(format!(
                "[cut: the result reached the {} KiB it holds; narrow the search or use head_limit]",
                TOOL_RESULT_BYTES >> 10
            ));
        }
        if too_long > 0 {
            cut.push(format!(
                "[{too_long} file(s) not searched: a line longer than {} MiB, or unreadable]",
                LINE_BYTES >> 20
            ));
        }
        // ripgrep's output: every line ends in a newline.
        Ok(lines.into_iter().chain(cut.into_iter().map(|line| line + "\n")).collect())
    })
    .await
}

/// The pattern compiled within [`REGEX_BYTES`]; `Err` is the tool's text (too large: what to do about it).
fn matcher(pattern: &str, case_insensitive: bool) -> Result<RegexMatcher, String> {
    RegexMatcherBuilder::new()
        .case_insensitive(case_insensitive)
        .size_limit(REGEX_BYTES)
        .dfa_size_limit(REGEX_BYTES)
        .build(pattern)
        .map_err(|e| {
            if e.to_string().contains("size limit") {
                format!(
                    "grep: the pattern is too large once compiled (over {} MiB); use fewer or smaller repetitions, \
                     or ASCII classes ((?-u)\\w)",
                    REGEX_BYTES >> 20
                )
            } else {
                format!("grep: {e}")
            }
        })
}
