//! `Write`: creates or replaces a workspace file atomically (a temporary file renamed over it, parents created;
//! `Engine::upload_file`, so the conversation's disk quota applies and nothing is written through a symlink), once
//! the workspace is claimed for the session's tenant (another tenant's is refused). Refuses to overwrite an
//! existing file that was not Read or Written before.

use rmcp::model::Tool;
use serde_json::json;

use super::{Call, Reply, files};
use crate::kit::workspace_paths as paths;

pub fn tool() -> Tool {
    super::tool(
        "Write",
        "Write a file in the workspace, creating parent directories. An existing file must be Read first.",
        json!({
            "file_path": { "type": "string", "description": super::FILE_PATH },
            "content": { "type": "string", "description": "The whole new content of the file" },
        }),
        &["file_path", "content"],
    )
}

pub async fn call(call: Call) -> Reply {
    let file_path = call.nonempty_str("file_path")?.to_owned();
    let content = call.required_str("content")?.to_owned();
    let workspace = call.view()?;
    let relative = paths::relative(&file_path)?;
    let exists = {
        let (workspace, relative, file_path) = (workspace.clone(), relative.clone(), file_path.clone());
        files::blocking(&call.cancel, move |_| match files::open(&workspace, &relative, &file_path) {
            Ok(_) => Ok(true),
            Err(_) if matches!(workspace.open_file(&relative), Err(sandlot_core::Error::FileNotFound { .. })) => {
                Ok(false)
            }
            Err(text) => Err(text),
        })
        .await?
    };
    if exists && !call.state.reads.contains(workspace.id(), &relative) {
        return Err(format!("refusing to overwrite {file_path}: Read it first"));
    }
    save(&call, workspace.id(), &relative, &file_path, content.clone().into_bytes()).await?;
    Ok(format!("wrote {} bytes to {file_path}", content.len()))
}

/// Writes `bytes` to `relative` (shown as `shown`) atomically, once the workspace is the session tenant's, and
/// marks it as seen.
pub async fn save(
    call: &Call,
    workspace: &sandlot_core::ConversationId,
    relative: &str,
    shown: &str,
    bytes: Vec<u8>,
) -> Result<(), String> {
    call.claim(workspace)?;
    call.state
        .app
        .engine
        .upload_file(workspace, relative, bytes)
        .await
        .map_err(|e| files::error_text(shown, relative, &e))?;
    call.state.reads.mark(workspace, relative);
    Ok(())
}
