//! `Grep`: searches the workspace's files (or one file, or a directory, `path`) for a Rust regex with ripgrep's
//! crates: `path:line:text` (content, the default), `path` (files_with_matches) or `path:count` (count), paths
//! workspace-relative and sorted; `.gitignore` honoured, binary files skipped, `glob` filters the files searched,
//! `head_limit` keeps the first lines. No match is an empty text, not an error.

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use rmcp::model::Tool;
use serde_json::json;

use super::{Call, Reply, files};
use crate::kit::workspace_paths as paths;

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
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(call.flag("case_insensitive"))
        .build(pattern)
        .map_err(|e| format!("grep: {e}"))?;
    let filter = call.optional_str("glob").filter(|g| !g.is_empty()).map(files::Pattern::new).transpose()?;
    let target = paths::relative(call.optional_str("path").unwrap_or(""))?;
    let head_limit = call.optional_int("head_limit").filter(|l| *l > 0).map(|l| l as usize);
    let workspace = call.view()?;
    files::blocking(move || {
        // A file named directly is searched as it is (even hidden or ignored, as ripgrep does); else the
        // directory's visible files.
        let single = match files::target(&workspace, &target) {
            files::Target::File => true,
            files::Target::Dir => false,
            files::Target::Missing => return Err(format!("stat path: {}", files::missing(&target))),
        };
        let candidates: Vec<String> = if single {
            vec![target.clone()]
        } else {
            files::visible_files(&workspace, &target)?.into_iter().map(|f| f.path).collect()
        };
        let mut lines: Vec<String> = Vec::new();
        let full = |lines: &Vec<String>| head_limit.is_some_and(|limit| lines.len() >= limit);
        let mut searcher = SearcherBuilder::new().binary_detection(BinaryDetection::quit(0)).line_number(true).build();
        for path in candidates {
            if full(&lines) {
                break;
            }
            if filter.as_ref().is_some_and(|filter| !filter.matches(&path)) {
                continue;
            }
            // Opened again beneath the workspace (no symlink, no FIFO wait): what was listed may have changed.
            let Ok(file) = workspace.open_file(&path) else { continue };
            let mut count = 0usize;
            let mut found = Vec::new();
            let searched = searcher.search_file(
                &matcher,
                &file,
                Lossy(|number, line| {
                    count += 1;
                    if mode == Mode::Content {
                        found.push(format!("{path}:{number}:{}", line.trim_end_matches(['\n', '\r'])));
                    }
                    Ok(mode != Mode::Files)
                }),
            );
            if searched.is_err() || count == 0 {
                continue;
            }
            match mode {
                Mode::Content => lines.extend(found),
                Mode::Files => lines.push(path),
                Mode::Count => lines.push(format!("{path}:{count}")),
            }
        }
        if let Some(limit) = head_limit {
            lines.truncate(limit);
        }
        // ripgrep's output: every line ends in a newline.
        Ok(lines.into_iter().map(|line| line + "\n").collect())
    })
    .await
}
