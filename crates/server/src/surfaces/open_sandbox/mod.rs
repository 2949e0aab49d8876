//! The open-sandbox profile (docs/profiles.md): an AIO-style sandbox's MCP interface, where every tool is
//! also a JSON-RPC method of its own name, results are unwrapped, and failures are unified errors with trace ids.
//!
//! - [`dispatch`]: the one hand-rolled JSON-RPC dispatcher all transports share (the product is not MCP-standard,
//!   so rmcp's handler does not fit).
//! - [`http`]: `POST /mcp`, the one-shot `GET /mcp/sse?request=`, NDJSON `POST /mcp/stream`; [`stdio`]: newline-
//!   delimited JSON-RPC for `sandlot stdio --profile open-sandbox`.
//! - [`errors`]: the unified error (`data {code, message, trace_id, kind}`), logged with the same trace id.
//! - [`capabilities`]: the protocol versions sandlot accepts, `initialize`, `mcp.capabilities` and `tools/list`.
//! - [`tools`]: the tools (`file.*`, `shell.exec`, `code.exec`, `browser.*`), their catalogue and their calls, on
//!   the tenant's workspace mounted at `/workspace` in the sandbox.
//!
//! Each caller (sandlot's static token is `api-token`, a named token its name, a JWT its subject, stdio `stdio`) has
//! one persistent workspace: the sandlot conversation `osb-<h>` ([`workspace_of`]), whose owner the tools check as
//! any conversation's (`kit::conversation_access`): one another tenant made reads as missing and refuses writes and
//! runs.

pub mod capabilities;
pub mod dispatch;
pub mod errors;
pub mod http;
pub mod stdio;
pub mod tools;

use sandlot_core::ConversationId;

pub use capabilities::{LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
pub use http::router;

/// The prefix of the profile's workspaces (conversation ids).
pub const WORKSPACE_PREFIX: &str = "osb";

/// The workspace of `caller`: `osb-<first 16 hex digits of SHA-256(caller)>`, as codegen's tenants.
pub fn workspace_of(caller: &str) -> Result<ConversationId, String> {
    crate::kit::tenant_workspaces::profile_workspace(WORKSPACE_PREFIX, caller, None)
}
