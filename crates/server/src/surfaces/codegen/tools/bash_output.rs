//! `BashOutput {shell_id}` (`docs/profiles.md#codegen-sandbox-bash-and-scrubbing`): a background shell's status and
//! whole buffers.

use rmcp::model::Tool;
use serde_json::json;

use super::{Call, Reply};

const DESCRIPTION: &str = "Return the current stdout, stderr, and status of a background shell started via Bash with run_in_background=true. Each call returns the FULL captured buffer (up to 1 MiB per stream); agents should grep client-side for specifics.";

pub fn tool() -> Tool {
    super::tool("BashOutput", DESCRIPTION, shell_id_schema(), &["shell_id"])
}

/// The input properties of `BashOutput` and `KillShell`.
pub fn shell_id_schema() -> serde_json::Value {
    json!({ "shell_id": {"type": "string", "description": "Shell identifier returned by Bash in background mode."} })
}

pub async fn call(call: Call) -> Reply {
    let id = call.required_str("shell_id").and_then(non_empty)?;
    call.state.shells.output(&call.tenant.caller, id)
}

/// `shell_id is required` for an empty id too, as the product says.
pub fn non_empty(id: &str) -> Result<&str, String> {
    if id.is_empty() { Err("shell_id is required".into()) } else { Ok(id) }
}
