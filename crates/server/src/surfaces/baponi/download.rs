//! `files_download {source, id, path}`: a file of a thread (a conversation's directory, `/home/baponi` in its
//! runs) or of a configured volume, inline: UTF-8 text as text, PNG/JPEG/GIF/WebP as an image; anything larger
//! than 1 MiB or binary is refused with a pointer to the REST Files API.
//!
//! Invariant: files are opened only by [`sandlot_core::Workspaces::open`] or [`sandlot_core::open_in_dir`], as
//! sandlot's own `/files` downloads and `resources/read` are: beneath the root, never through a symlink. A thread's
//! through the caller's [`TenantView`]: another tenant's thread is answered exactly as a thread that does not
//! exist. Volumes are the operator's, shared by every tenant.

use std::io::Read;

use base64::Engine as _;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock};
use sandlot_core::{ConversationId, Error, Tenant};
use serde::Deserialize;
use serde_json::Value;

use super::BaponiState;
use super::execute::validate_thread_id;
use crate::kit::conversation_access::TenantView;
use crate::kit::rpc_errors as errors;

/// The most bytes returned inline.
pub const MAX_INLINE_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Source {
    Thread,
    Volume,
}

#[derive(Debug, Deserialize)]
struct DownloadArgs {
    source: Source,
    id: String,
    path: String,
}

/// The MIME type of an image Baponi returns inline, by the file's extension.
fn image_type(path: &str) -> Option<&'static str> {
    let extension = path.rsplit_once('.')?.1.to_ascii_lowercase();
    match extension.as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "webp" => Some("image/webp"),
        _ => None,
    }
}

fn use_files_api(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "{message}; download it with the REST Files API instead (POST /v1/files/download_url gives a signed URL)"
    ))])
}

/// Runs `files_download` for `tenant`.
pub async fn call(state: &BaponiState, tenant: &Tenant, arguments: Value) -> Result<CallToolResult, McpError> {
    let Value::Object(object) = &arguments else {
        return Err(errors::invalid_argument("arguments", "arguments must be a JSON object"));
    };
    for field in ["source", "id", "path"] {
        if matches!(object.get(field), None | Some(Value::Null)) {
            return Err(errors::invalid_argument(field, format!("missing required argument {field}")));
        }
    }
    let args: DownloadArgs = serde_path_to_error::deserialize(arguments).map_err(|error| {
        let path = error.path().to_string();
        let field = path.split(['.', '[']).next().filter(|f| !f.is_empty() && *f != "?").unwrap_or("arguments");
        errors::invalid_argument(field, format!("{path}: {}", error.inner()))
    })?;
    let DownloadArgs { source, id, path } = args;
    let (open_path, where_) =
        (path.clone(), format!("{} {id}", if matches!(source, Source::Thread) { "thread" } else { "volume" }));
    let opener: Box<dyn FnOnce() -> Result<std::fs::File, Error> + Send> = match source {
        Source::Thread => {
            if let Err(super::ExecuteError::Invalid { message, .. }) = validate_thread_id(&id) {
                return Err(errors::invalid_argument("id", format!("invalid thread id: {message}")));
            }
            let conversation = ConversationId::parse(&id).map_err(|e| errors::from_engine(&e))?;
            let (engine, tenant) = (state.app.engine.clone(), tenant.clone());
            Box::new(move || TenantView::new(&engine, &tenant, conversation)?.open(&open_path))
        }
        Source::Volume => {
            let Some(volume) = state.volumes.get(&id) else {
                let configured: Vec<&str> = state.volumes.0.keys().map(String::as_str).collect();
                let message = if configured.is_empty() {
                    format!("no volume {id:?}: this server has no volumes (SANDLOT_BAPONI_VOLUMES)")
                } else {
                    format!("no volume {id:?}; configured: {}", configured.join(", "))
                };
                return Err(errors::invalid_argument("id", message));
            };
            let dir = volume.path.clone();
            Box::new(move || sandlot_core::open_in_dir(&dir, &open_path))
        }
    };
    let read = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, Error> {
        let file = opener()?;
        let mut bytes = Vec::new();
        // One byte more than the limit tells a file that is too big from one that fits.
        file.take(MAX_INLINE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| Error::io("read file", "download", e))?;
        Ok(bytes)
    })
    .await
    .map_err(|e| McpError::internal_error(format!("file read task failed: {e}"), None))?;
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(Error::FileNotFound { .. }) => {
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!("no file {path:?} in {where_}"))]));
        }
        Err(e @ Error::InvalidPath { .. }) => return Err(errors::invalid_argument("path", e.to_string())),
        Err(e) => return Err(errors::from_engine(&e)),
    };
    if bytes.len() as u64 > MAX_INLINE_BYTES {
        return Ok(use_files_api(format!("{path:?} is larger than the 1 MiB files_download returns inline")));
    }
    if let Some(mime) = image_type(&path) {
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        return Ok(CallToolResult::success(vec![ContentBlock::image(data, mime)]));
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(CallToolResult::success(vec![ContentBlock::text(text)])),
        Err(_) => Ok(use_files_api(format!("{path:?} is a binary file, not text or an image"))),
    }
}
