//! `Glob`: the workspace's files matching a glob (`*`, `?`, `[..]`, `**`; without `/` it matches base names),
//! under `path` if given, `.gitignore` honoured; newest first (then by name), at most `limit` (default 100),
//! newline-joined workspace-relative paths.

use rmcp::model::Tool;
use serde_json::json;

use super::{Call, Reply, files};
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
    files::blocking(move || {
        match files::target(&workspace, &dir) {
            files::Target::Dir => {}
            files::Target::File => return Err(format!("path is not a directory: {shown}")),
            files::Target::Missing => return Err(format!("stat path: {}", files::missing(&dir))),
        }
        let mut found: Vec<_> = files::visible_files(&workspace, &dir)?
            .into_iter()
            .filter(|file| {
                let within = if dir.is_empty() { &file.path[..] } else { &file.path[dir.len() + 1..] };
                pattern.matches(within)
            })
            .collect();
        found.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| a.path.cmp(&b.path)));
        Ok(found.into_iter().take(limit).map(|file| file.path).collect::<Vec<_>>().join("\n"))
    })
    .await
}
