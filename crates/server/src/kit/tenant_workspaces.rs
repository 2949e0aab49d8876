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

/// The prefixes of the derived workspaces of every profile that has them.
const DERIVED_PREFIXES: [&str; 2] = ["codegen", "osb"];

/// Whether `id` is the shape of a workspace derived for a caller other than `tenant` (`<prefix>-<h>` or
/// `<prefix>-<h>-<id>` with another `<h>`): such an id belongs to its subject even before that subject first used
/// it, so no face lets another tenant make it (and plant files there). An administrator may.
pub fn derived_for_another(id: &ConversationId, tenant: &sandlot_core::Tenant) -> bool {
    if tenant.is_admin() {
        return false;
    }
    let digest = Sha256::digest(tenant.name().as_bytes());
    let own = hex::encode(&digest[..8]);
    DERIVED_PREFIXES.iter().any(|prefix| {
        let Some(rest) = id.as_str().strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else {
            return false;
        };
        let hash = rest.split('-').next().unwrap_or_default();
        hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) && hash != own
    })
}

/// [`derived_for_another`] as the engine's refusal of a run or an upload into another tenant's conversation.
pub fn refuse_derived_for_another(id: &ConversationId, tenant: &sandlot_core::Tenant) -> sandlot_core::Result<()> {
    if derived_for_another(id, tenant) {
        return Err(sandlot_core::Error::ConversationTaken { conversation: id.to_string() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_workspace_is_reserved_for_its_subject() {
        let alice = sandlot_core::Tenant::new("alice");
        let bob = sandlot_core::Tenant::new("bob");
        let of_alice = profile_workspace("codegen", "alice", Some("w")).unwrap();
        assert!(!derived_for_another(&of_alice, &alice));
        assert!(derived_for_another(&of_alice, &bob));
        assert!(derived_for_another(&profile_workspace("osb", "alice", None).unwrap(), &bob));
        assert!(!derived_for_another(&of_alice, &sandlot_core::Tenant::admin("ops")));
        for ordinary in ["codegen", "codegen-notahash", "osbx-0123456789abcdef", "my-thread"] {
            assert!(!derived_for_another(&ConversationId::parse(ordinary).unwrap(), &bob), "{ordinary}");
        }
    }
}
