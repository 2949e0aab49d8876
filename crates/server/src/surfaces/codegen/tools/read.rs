//! `Read`: a workspace file as `cat -n` without padding (`"%d\t%s\n"` per line), from `offset` (1-based) for
//! `limit` lines (default 2000); marks the file as read for `Write` and `Edit`. Whatever `limit` the caller
//! chose, the text stops at the result's byte budget (`kit::result_budget`, counted as the lines are read) with a
//! last line saying where to read on.

use std::io::{BufRead, BufReader, Read as _};

use rmcp::model::Tool;
use serde_json::json;

use super::{Call, Reply, files};
use crate::kit::result_budget::{ResultBudget, TOOL_RESULT_BYTES};
use crate::kit::workspace_paths as paths;

/// Lines longer than this fail the read (as mcp-go's scanner does).
const MAX_LINE: u64 = 1024 * 1024;
const DEFAULT_LIMIT: i64 = 2000;

pub fn tool() -> Tool {
    super::tool(
        "Read",
        "Read a file from the workspace. Returns its lines numbered like `cat -n` (line number, tab, text). Use \
         offset and limit to read part of a long file.",
        json!({
            "file_path": { "type": "string", "description": super::FILE_PATH },
            "offset": { "type": "number", "description": "1-based line to start from (default 1)" },
            "limit": { "type": "number", "description": "Lines to read at most (default 2000)" },
        }),
        &["file_path"],
    )
}

pub async fn call(call: Call) -> Reply {
    let file_path = call.nonempty_str("file_path")?.to_owned();
    let offset = call.optional_int("offset").unwrap_or(1).max(1) as usize;
    let limit = call.optional_int("limit").filter(|l| *l > 0).unwrap_or(DEFAULT_LIMIT) as usize;
    let workspace = call.view()?;
    let relative = paths::relative(&file_path)?;
    let (text, (workspace, relative)) = files::blocking(&call.cancel, move |cancel| {
        let file = files::open(&workspace, &relative, &file_path)?;
        Ok((numbered(file, offset, limit, &file_path, &cancel)?, (workspace, relative)))
    })
    .await?;
    call.state.reads.mark(workspace.id(), &relative);
    Ok(text)
}

/// Lines `offset..offset + limit` of `file`, numbered, within the result's budget; stopped when `cancel` is (the
/// lines before `offset` are read too, as many as the file holds).
fn numbered(
    file: std::fs::File,
    offset: usize,
    limit: usize,
    shown: &str,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<String, String> {
    let mut reader = BufReader::new(file);
    let mut text = String::new();
    let mut budget = ResultBudget::tool();
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let read = (&mut reader).take(MAX_LINE + 1).read_until(b'\n', &mut line).map_err(|e| format!("read: {e}"))?;
        if read == 0 {
            break;
        }
        if line.len() as u64 > MAX_LINE {
            return Err(format!("read: line {} of {shown} is longer than 1 MiB", number + 1));
        }
        number += 1;
        if number.is_multiple_of(4096) && cancel.is_cancelled() {
            return Err("cancelled".to_owned());
        }
        if number >= offset.saturating_add(limit) {
            break;
        }
        if number >= offset {
            let content = line.strip_suffix(b"\n").unwrap_or(&line);
            let content = content.strip_suffix(b"\r").unwrap_or(content);
            let numbered = format!("{number}\t{}\n", String::from_utf8_lossy(content));
            if !budget.take(&numbered) {
                text.push_str(&format!(
                    "[cut: the result reached the {} KiB it holds; read on with offset={number}]\n",
                    TOOL_RESULT_BYTES >> 10
                ));
                return Ok(text);
            }
            text.push_str(&numbered);
        }
    }
    if number > 0 && offset > number {
        return Err(format!("read: offset {offset} exceeds line count {number}"));
    }
    Ok(text)
}
