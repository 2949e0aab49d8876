//! `Glob`: the workspace's files matching a glob (`*`, `?`, `[..]`, `**`; without `/` it matches base names),
//! under `path` if given, `.gitignore` honoured; newest first (then by name), at most `limit` (default 100),
//! newline-joined workspace-relative paths, within the result's byte budget (`kit::result_budget`), then a line for
//! each thing cut short (the walk, ignore files, the budget).

use rmcp::model::Tool;
use serde_json::json;

use super::{Call, Reply, files, visible};
use crate::kit::result_budget::{ResultBudget, TOOL_RESULT_BYTES};
use crate::kit::workspace_paths as paths;

const DEFAULT_LIMIT: i64 = 100;

pub fn tool() -> Tool {
    super::tool(
        "Glob",
        "Find files by glob pattern (`*`, `?`, `[...]`, `**`). A pattern without `/` matches file names anywhere. \
         Honours .gitignore. Returns paths relative to the workspace, newest first.",
        json!({
            "pattern": { "type": "string", "description": "Glob pattern, e.g. **/*.rs" },
            "path": { "type": "string", "description": "Directory to search in (default: the workspace root)" },
            "limit": { "type": "number", "description": "Paths to return at most (default 100)" },
        }),
        &["pattern"],
    )
}

pub async fn call(call: Call) -> Reply {
    let pattern = files::Pattern::new(call.nonempty_str("pattern")?)?;
    let dir = paths::relative(call.optional_str("path").unwrap_or(""))?;
    let limit = call.optional_int("limit").filter(|l| *l > 0).unwrap_or(DEFAULT_LIMIT) as usize;
    let workspace = call.view()?;
    let shown = call.optional_str("path").unwrap_or("").to_owned();
    files::blocking(&call.cancel, move |cancel| {
        match files::target(&workspace, &dir) {
            files::Target::Dir => {}
            files::Target::File => return Err(format!("path is not a directory: {shown}")),
            files::Target::Missing => return Err(format!("stat path: {}", files::missing(&dir))),
        }
        let visible = visible::visible_files(&workspace, &dir, &cancel)?;
        let mut found: Vec<_> = visible
            .files
            .into_iter()
            .filter(|file| {
                let within = if dir.is_empty() { &file.path[..] } else { &file.path[dir.len() + 1..] };
                pattern.matches(within)
            })
            .collect();
        found.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| a.path.cmp(&b.path)));
        let mut budget = ResultBudget::tool();
        let mut lines: Vec<String> = Vec::new();
        for file in found.into_iter().take(limit) {
            if !budget.take(&file.path) || !budget.take("\n") {
                let kept = lines.len();
                lines.push(format!("[cut: {kept} paths shown, the {} KiB a result holds]", TOOL_RESULT_BYTES >> 10));
                break;
            }
            lines.push(file.path);
        }
        lines.extend(visible.cut);
        Ok(lines.join("\n"))
    })
    .await
}
