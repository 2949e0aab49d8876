//! `KillShell {shell_id}` (`docs/profiles.md#codegen-sandbox-bash-and-scrubbing`): kills a background shell's sandbox
//! and forgets it.

use rmcp::model::Tool;

use super::bash_output::{non_empty, shell_id_schema};
use super::{Call, Reply};

const DESCRIPTION: &str = "Kill a background shell started via Bash with run_in_background=true. Sends SIGKILL to the shell's process group (catches backgrounded children) and removes it from the registry. Subsequent BashOutput calls for the killed shell return 'unknown shell_id'.";

pub fn tool() -> Tool {
    super::tool("KillShell", DESCRIPTION, shell_id_schema(), &["shell_id"])
}

pub async fn call(call: Call) -> Reply {
    let id = call.required_str("shell_id").and_then(non_empty)?;
    call.state.shells.kill(&call.tenant.caller, id).await
}
