//! `Edit`: replaces `old_string` by `new_string` in a file that was Read first: exactly one match, or every match
//! with `replace_all`; saved atomically as `Write` does. The edited file's size is computed before it is built and
//! refused past 16 MiB (`kit::file_limits`) (16 MiB of `a` with `replace_all` of `a` by 128 bytes would be a 2 GiB string).

use std::io::Read as _;

use rmcp::model::Tool;
use serde_json::json;

use super::{Call, Reply, files, write};
use crate::kit::file_limits;
use crate::kit::workspace_paths as paths;

/// The largest file Edit rewrites.
const MAX_BYTES: u64 = file_limits::MAX_FILE_BYTES;

pub fn tool() -> Tool {
    super::tool(
        "Edit",
        "Replace old_string with new_string in a file that was Read first. old_string must match exactly once \
         unless replace_all is true.",
        json!({
            "file_path": { "type": "string", "description": super::FILE_PATH },
            "old_string": { "type": "string", "description": "The exact text to replace" },
            "new_string": { "type": "string", "description": "The text to put in its place" },
            "replace_all": { "type": "boolean", "description": "Replace every occurrence (default false)" },
        }),
        &["file_path", "old_string", "new_string"],
    )
}

pub async fn call(call: Call) -> Reply {
    let file_path = call.nonempty_str("file_path")?.to_owned();
    let old = call.required_str("old_string")?.to_owned();
    if old.is_empty() {
        return Err("old_string must be non-empty".to_owned());
    }
    let new = call.required_str("new_string")?.to_owned();
    let replace_all = call.flag("replace_all");
    let workspace = call.view()?;
    let relative = paths::relative(&file_path)?;
    let reads = call.state.reads.clone();
    let text = {
        let (workspace, relative, file_path) = (workspace.clone(), relative.clone(), file_path.clone());
        files::blocking(&call.cancel, move |_| {
            // As codegen-sandbox: a missing file or a directory is said before the missing Read.
            let file = files::open(&workspace, &relative, &file_path)?;
            if !reads.contains(workspace.id(), &relative) {
                return Err(format!("refusing to edit {file_path}: Read it first"));
            }
            let mut bytes = Vec::new();
            file.take(MAX_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("read: {e}"))?;
            if bytes.len() as u64 > MAX_BYTES {
                return Err(format!("{file_path} is larger than 16 MiB"));
            }
            String::from_utf8(bytes).map_err(|_| format!("{file_path} is not UTF-8 text"))
        })
        .await?
    };
    let matches = text.matches(old.as_str()).count();
    if matches == 0 {
        return Err(format!("old_string not found in {file_path}"));
    }
    if matches > 1 && !replace_all {
        return Err(format!(
            "old_string matched {matches} times in {file_path}; add context to make it unique or set replace_all=true"
        ));
    }
    let size = file_limits::replaced_size(text.len(), matches, old.len(), new.len());
    if let Some(refusal) = file_limits::refuse_replaced_size(&file_path, size) {
        return Err(refusal);
    }
    let edited = text.replace(old.as_str(), &new);
    write::save(&call, workspace.id(), &relative, &file_path, edited.into_bytes()).await?;
    Ok(format!("replaced {matches} occurrence(s) in {file_path}"))
}
