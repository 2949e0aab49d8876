//! Tenants and their workspaces. A tenant is the authenticated caller (`api-token` for sandlot's static token, a
//! named token's name, the subject of a JWT; an admin is marked so by sandlot's auth); each has one default
//! workspace and any number of named ones (`?workspace=<id>` on the SSE URL, or a tool's `workspace` argument). A
//! workspace is the sandlot conversation `codegen-<h>` or `codegen-<h>-<id>`, where `<h>` is the first 16 hex digits
//! of SHA-256 of the caller: two callers never derive the same workspace, whatever id they name, and the caller's
//! name never appears on disk. Its owner is still checked as any conversation's (`kit::conversation_access`): a
//! workspace another tenant made (an admin, another face, a version without tenants) reads as one that does not
//! exist, and is [`not_available`] to writes and runs.

use sandlot_core::ConversationId;

use crate::kit::tenant_workspaces::profile_workspace;

/// Who a session works for, and its default workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// The authenticated caller that opened the session: the owner of the workspaces it makes, of its runs (in the
    /// history) and of its background shells.
    pub caller: sandlot_core::Tenant,
    /// The workspace the session's tools use unless one names another.
    pub workspace: ConversationId,
}

impl Tenant {
    /// `caller`'s tenant working in its workspace `named` (its default one when `None`); `Err` says why `named`
    /// is not a workspace id.
    pub fn new(caller: sandlot_core::Tenant, named: Option<&str>) -> Result<Self, String> {
        let workspace = workspace_of(caller.name(), named)?;
        Ok(Self { caller, workspace })
    }

    /// The workspace a tool's `workspace` argument names (the session's when absent or empty).
    pub fn workspace(&self, named: Option<&str>) -> Result<ConversationId, String> {
        match named {
            None | Some("") => Ok(self.workspace.clone()),
            Some(id) => workspace_of(self.caller.name(), Some(id)),
        }
    }
}

/// The conversation that is `caller`'s workspace `named`.
pub fn workspace_of(caller: &str, named: Option<&str>) -> Result<ConversationId, String> {
    profile_workspace("codegen", caller, named)
}

/// The tool text of a write or a run into a workspace another tenant owns: an argument to change, as a bad
/// `workspace` is.
pub fn not_available(workspace: &ConversationId) -> String {
    format!("invalid workspace: {workspace} is not available to this caller; use another workspace")
}

/// The tool text of an engine error about the workspace: [`not_available`] for another tenant's, else its own
/// words after `prefix` (the tool's).
pub fn refusal(prefix: &str, workspace: &ConversationId, error: &sandlot_core::Error) -> String {
    match error {
        sandlot_core::Error::ConversationTaken { .. } => not_available(workspace),
        other => format!("{prefix}{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_never_share_a_workspace() {
        let a = workspace_of("alice", Some("w")).unwrap();
        let b = workspace_of("bob", Some("w")).unwrap();
        assert_ne!(a, b);
        assert_eq!(workspace_of("alice", Some("w")).unwrap(), a);
        assert_ne!(workspace_of("alice", None).unwrap(), a);
        assert!(a.as_str().starts_with("codegen-") && a.as_str().ends_with("-w"));
    }

    #[test]
    fn refuses_bad_workspace_ids() {
        for bad in ["", "../x", "a/b", ".hidden", &"x".repeat(65)] {
            assert!(workspace_of("alice", Some(bad)).is_err(), "{bad:?}");
        }
    }
}
