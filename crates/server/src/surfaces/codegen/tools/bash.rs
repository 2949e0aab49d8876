//! `Bash` (`docs/profiles.md#codegen-sandbox-bash-and-scrubbing`): the descriptor, word for word the product's; the
//! work is in [`crate::surfaces::codegen::bash`].

use rmcp::model::Tool;
use serde_json::json;

use super::{Call, Reply};
use crate::surfaces::codegen::bash::{DEFAULT_TIMEOUT_SECS, MAX_TIMEOUT_SECS, Runner};
use crate::surfaces::codegen::command;

const DESCRIPTION: &str = "Run a shell command in the workspace via bash -c. Runs from the workspace root (use `cd subdir && ...` to move); stdin is closed; env is inherited from the server. Returns combined stdout+stderr, capped at 100 KiB with a '... (output truncated, N bytes elided)' marker — late output such as the last few lines of a build log may be elided. A trailing 'exit: N' line is emitted for non-zero exits. A 'timed out after Ns' marker is emitted on timeout (exit code 124), and the entire process group is killed so backgrounded children do not survive. A small set of dangerous tokens (sudo, su, shutdown, reboot, halt, poweroff, chroot, mount, umount, mkfs) at plausible command positions are rejected before the command runs.";

pub fn tool() -> Tool {
    super::tool(
        "Bash",
        DESCRIPTION,
        json!({
            "command": {"type": "string", "description": "Shell command to run."},
            "description": {"type": "string", "description": "5-10 word description of what this command does. Recorded for agent context; does not affect execution."},
            "timeout": {"type": "number", "description": format!("Timeout in seconds. Default {DEFAULT_TIMEOUT_SECS}, clamped to a maximum of {MAX_TIMEOUT_SECS}.")},
            "run_in_background": {"type": "boolean", "description": "If true, spawn the command in the background and return a shell_id immediately. Use BashOutput to poll and KillShell to terminate."}
        }),
        &["command", "description"],
    )
}

pub async fn call(call: Call) -> Reply {
    let runner = Runner { tenant: call.tenant.caller.clone(), workspace: call.workspace()? };
    let state = &call.state;
    command::call(&state.app.engine, &state.shells, &runner, &call.arguments, call.cancel.clone()).await
}
