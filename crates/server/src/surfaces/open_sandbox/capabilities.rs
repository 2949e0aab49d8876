//! What open-sandbox declares: the protocol versions sandlot accepts (the seed's FR-001c), `initialize`'s result,
//! and each tool as `mcp.capabilities` and `tools/list` show it.

use serde_json::{Value, json};

use super::tools::{ToolInfo, catalogue};

/// The `protocolVersion`s `initialize` (or any request's params) may name: the MCP revisions sandlot speaks, and
/// the product's own `1.0`. Another is refused with -32602 (the version handling is in `dispatch`).
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 5] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "1.0"];

/// What `initialize` answers when the client names no version.
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";

/// `mcp.capabilities`' `protocol_version`.
const CAPABILITIES_VERSION: &str = "1.0";

/// `initialize`'s result for `version`.
pub fn initialize_result(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false } },
        "serverInfo": { "name": "open-sandbox", "version": "dev" },
    })
}

/// `mcp.capabilities`' result.
pub fn capabilities() -> Value {
    json!({ "protocol_version": CAPABILITIES_VERSION, "tools": tool_list() })
}

/// `tools/list`'s result.
pub fn tools_list() -> Value {
    json!({ "tools": tool_list() })
}

fn tool_list() -> Vec<Value> {
    catalogue().into_iter().map(tool_info).collect()
}

fn tool_info(tool: ToolInfo) -> Value {
    let mut permissions = json!({ "allow": true, "scope": tool.scope.as_str() });
    if let Some(reason) = tool.reason {
        permissions["reason"] = json!(reason);
    }
    json!({
        "name": tool.name,
        "version": "v1",
        "permissions": permissions,
        "inputSchema": tool.input_schema,
        "outputSchema": tool.output_schema,
        "schema": { "input": tool.input_schema, "output": tool.output_schema },
    })
}
