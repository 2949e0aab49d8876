//! A conversation's files as MCP resources: `sandlot://conversations/{conversationId}/files/{path}` (each segment of
//! `path` percent-encoded, as in download URLs), so a client reads what a run wrote with `resources/read`, over stdio
//! too, with no HTTP server.
//!
//! - `resources/list` lists the files of the most recently used conversations ([`LISTED_CONVERSATIONS`], at most
//!   [`FILES_PER_CONVERSATION`] each), [`PAGE`] at a time with a `nextCursor`, so a listing never floods a client.
//!   Its walks block ([`list`] is called on the blocking pool) and each stops at `sandlot_core::MAX_VISITED_ENTRIES`.
//! - `resources/read` gives UTF-8 text as `text` and anything else as `blob` (base64), the MIME type guessed from the
//!   name, up to the read limit (`SANDLOT_RESOURCE_READ_BYTES`); a larger file is refused with -32602 naming the limit
//!   and a signed URL that serves it whole.
//! - Invariant: the file is opened only by [`sandlot_core::Workspaces::open`], as `/files` downloads are: beneath the
//!   conversation's directory, never through a symlink (a planted one is refused, its target never read). A bad
//!   conversation id or path is -32602 naming it; a missing file -32002, as for the run resources.

use std::io::Read;

use base64::Engine as _;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use rmcp::ErrorData as McpError;
use rmcp::model::{ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use sandlot_core::{ConversationId, Error, Tenant};
use serde_json::json;

use crate::AppState;
use crate::kit::rpc_errors as errors;

/// Default of `SANDLOT_RESOURCE_READ_BYTES`: the most bytes one `resources/read` of a file returns.
pub const DEFAULT_RESOURCE_READ_BYTES: u64 = 1024 * 1024;
/// Conversations whose files `resources/list` shows: the most recently used.
pub const LISTED_CONVERSATIONS: usize = 20;
/// Files listed per conversation (by path order).
pub const FILES_PER_CONVERSATION: usize = 1000;
/// File resources per `resources/list` page.
pub const PAGE: usize = 100;

const PREFIX: &str = "sandlot://conversations/";
const FILES: &str = "files/";
const CURSOR_PREFIX: &str = "files:";
/// What a path segment keeps unencoded in a URI (the same set as download URLs).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The template.
pub fn template() -> ResourceTemplate {
    ResourceTemplate::new("sandlot://conversations/{conversationId}/files/{path}", "conversation-file")
        .with_title("A file in a conversation's /data")
        .with_description(
            "A file a run wrote in /data ({path} relative to it, each segment percent-encoded): UTF-8 text as text, \
             anything else as a base64 blob, up to SANDLOT_RESOURCE_READ_BYTES (default 1 MiB); a larger file is \
             refused with a signed URL that downloads it whole",
        )
}

/// The URI of `path` in `conversation`.
pub fn uri(conversation: &str, path: &str) -> String {
    let encoded: Vec<String> = path.split('/').map(|s| utf8_percent_encode(s, SEGMENT).to_string()).collect();
    format!("{PREFIX}{}/{FILES}{}", utf8_percent_encode(conversation, SEGMENT), encoded.join("/"))
}

/// The page of file resources after `cursor` (`None`: the first), and the cursor of the next page if there is one.
/// The cursor is an offset into the listing order (conversations newest first, then paths), so files made between
/// two pages may shift it; a listing is a view, not a snapshot.
pub fn list(
    state: &AppState,
    tenant: &Tenant,
    cursor: Option<&str>,
) -> Result<(Vec<Resource>, Option<String>), McpError> {
    let start = match cursor {
        None => 0,
        Some(cursor) => cursor.strip_prefix(CURSOR_PREFIX).and_then(|n| n.parse::<usize>().ok()).ok_or_else(|| {
            McpError::invalid_params(format!("invalid cursor {cursor:?}"), Some(json!({ "field": "cursor" })))
        })?,
    };
    let workspaces = state.engine.workspaces();
    let mut conversations = workspaces.conversations().map_err(|e| errors::from_engine(&e))?;
    // Only those the tenant may read: its own (an administrator: every one), and those no tenant owns yet.
    conversations.retain(|(conversation, _)| state.engine.check_conversation(tenant, conversation).is_ok());
    conversations.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.as_str().cmp(b.0.as_str())));
    let mut page = Vec::new();
    let mut seen = 0usize;
    for (conversation, _) in conversations.iter().take(LISTED_CONVERSATIONS) {
        let listing = workspaces.list(conversation, FILES_PER_CONVERSATION).map_err(|e| errors::from_engine(&e))?;
        for file in listing.files {
            if seen >= start {
                if page.len() == PAGE {
                    return Ok((page, Some(format!("{CURSOR_PREFIX}{seen}"))));
                }
                let mime = mime_guess::from_path(&file.path).first_or_octet_stream();
                page.push(
                    Resource::new(uri(conversation.as_str(), &file.path), file.path.clone())
                        .with_description(format!("{} bytes in conversation {}", file.size, conversation.as_str()))
                        .with_mime_type(mime.essence_str())
                        .with_size(file.size),
                );
            }
            seen += 1;
        }
    }
    Ok((page, None))
}

/// The conversation id and the (encoded) path of a file URI; `None` if `uri` names no file.
pub fn parse(uri: &str) -> Option<(&str, &str)> {
    let (conversation, rest) = uri.strip_prefix(PREFIX)?.split_once('/')?;
    Some((conversation, rest.strip_prefix(FILES)?))
}

/// Reads the file `uri` names (see [`parse`]).
pub async fn read(
    state: &AppState,
    tenant: &Tenant,
    uri: &str,
    conversation: &str,
    encoded_path: &str,
) -> Result<ReadResourceResult, McpError> {
    let id = ConversationId::parse(conversation).map_err(|e| errors::from_engine(&e))?;
    let path = percent_decode_str(encoded_path).decode_utf8().map_err(|_| {
        errors::from_engine(&Error::InvalidPath {
            path: encoded_path.to_owned(),
            message: "is not UTF-8 once percent-decoded".into(),
        })
    })?;
    let path = path.into_owned();
    let not_found = || {
        McpError::resource_not_found(
            format!("no file {path:?} in conversation {}", id.as_str()),
            Some(json!({ "uri": uri })),
        )
    };
    // Another tenant's conversation is answered exactly as a file that does not exist.
    match state.engine.check_conversation(tenant, &id) {
        Err(e) if e.is_conversation_not_found() => return Err(not_found()),
        Err(e) => return Err(errors::from_engine(&e)),
        Ok(()) => {}
    }
    let limit = state.resource_read_bytes;
    let workspaces = state.engine.workspaces().clone();
    let (read_id, read_path) = (id.clone(), path.clone());
    // Never a plain path open: `Workspaces::open` refuses a path through any symlink and anything not a regular file.
    let read = tokio::task::spawn_blocking(move || -> Result<Option<Vec<u8>>, Error> {
        let file = workspaces.open(&read_id, &read_path)?;
        let mut bytes = Vec::new();
        // One byte more than the limit tells a file that is too big (or grew while read) from one that fits.
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("read file", workspaces.files_dir(&read_id).join(&read_path), e))?;
        Ok((bytes.len() as u64 <= limit).then_some(bytes))
    })
    .await
    .map_err(|e| McpError::internal_error(format!("file read task failed: {e}"), None))?;
    let bytes = match read {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            let url = state.files.url(id.as_str(), &path);
            return Err(McpError::invalid_params(
                format!(
                    "{path:?} is larger than the {limit} bytes a resource read returns (SANDLOT_RESOURCE_READ_BYTES); \
                     download it whole from {url}"
                ),
                Some(json!({ "kind": "too_large", "field": "uri", "limit": limit, "url": url })),
            ));
        }
        Err(Error::FileNotFound { .. }) => return Err(not_found()),
        Err(e) => return Err(errors::from_engine(&e)),
    };
    let guessed = mime_guess::from_path(&path).first();
    let contents = match String::from_utf8(bytes) {
        Ok(text) => {
            let mime = guessed.map_or_else(|| "text/plain".to_owned(), |m| m.essence_str().to_owned());
            ResourceContents::text(text, uri).with_mime_type(mime)
        }
        Err(not_text) => {
            let mime = guessed.map_or_else(|| "application/octet-stream".to_owned(), |m| m.essence_str().to_owned());
            let blob = base64::engine::general_purpose::STANDARD.encode(not_text.as_bytes());
            ResourceContents::blob(blob, uri).with_mime_type(mime)
        }
    };
    Ok(ReadResourceResult::new(vec![contents]))
}
