//! Workspaces derived from who calls, for the profiles whose products give each caller its own (codegen-sandbox,
//! open-sandbox): the conversation `<prefix>-<h>` or `<prefix>-<h>-<id>`, where `<h>` is the first 16 hex digits
//! of SHA-256 of the caller. Two callers never derive the same workspace, whatever id they name, and the caller's
//! name never appears on disk. (The derivation only names the workspace; its owner is checked like any
//! conversation's.)

use sandlot_core::ConversationId;
use sha2::{Digest, Sha256};

/// The longest workspace id a caller may name.
pub const MAX_WORKSPACE_ID: usize = 64;

/// The conversation that is `caller`'s workspace `named` in a profile whose workspaces are `<prefix>-<h>[-<id>]`
/// (every profile has its own prefix, so a caller's workspaces of two profiles are two).
pub fn profile_workspace(prefix: &str, caller: &str, named: Option<&str>) -> Result<ConversationId, String> {
    let digest = Sha256::digest(caller.as_bytes());
    let tenant = hex::encode(&digest[..8]);
    let id = match named {
        None => format!("{prefix}-{tenant}"),
        Some(id) => {
            let valid = !id.is_empty()
                && id.len() <= MAX_WORKSPACE_ID
                && id.starts_with(|c: char| c.is_ascii_alphanumeric())
                && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !valid {
                return Err(format!(
                    "invalid workspace {id:?}: 1 to {MAX_WORKSPACE_ID} letters, digits, '.', '_' or '-', starting \
                     with a letter or digit"
                ));
            }
            format!("{prefix}-{tenant}-{id}")
        }
    };
    ConversationId::parse(&id).map_err(|e| e.to_string())
}
