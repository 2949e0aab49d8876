//! What `Bash` does with a command: runs it in the workspace for the session's tenant and renders the product's
//! text (a workspace another tenant owns is refused as the engine refuses it), or hands it to [`Shells`] when it
//! asks for the background. Above both [`super::bash`] (one run) and [`super::shells`] (the
//! background shells), which never import it.

use rmcp::model::JsonObject;
use sandlot_core::{Engine, SessionUse};
use tokio_util::sync::CancellationToken;

use super::bash::{BashCall, Combined, Runner, render, request, session_use};
use super::shells::Shells;
use super::tenant::refusal;
use crate::kit::conversation_access;

/// `Bash`: runs the command (or starts it in the background) and renders the product's text (not yet scrubbed:
/// the handler scrubs every reply).
pub async fn call(
    engine: &Engine,
    shells: &Shells,
    runner: &Runner,
    arguments: &JsonObject,
    cancel: CancellationToken,
) -> Result<String, String> {
    let call = BashCall::parse(arguments)?;
    // Before a background shell is registered: a workspace another tenant owns is refused here, not in its output.
    conversation_access::admit_run(engine, &runner.tenant, &runner.workspace)
        .map_err(|error| refusal("bash: ", &runner.workspace, &error))?;
    if call.background {
        let id = shells.start(runner, &call)?;
        return Ok(format!("shell_id: {id}\nstarted in background: {}\n", call.command));
    }
    let combined = Combined::default();
    // The workspace's persistent shell: `cd` and variables carry over to the next command.
    let session = session_use(engine, SessionUse::Interpreter);
    let run = request(runner, &call.command, call.timeout_secs, session, cancel);
    match engine.run_as(&runner.tenant, run, &combined).await {
        Ok(report) => {
            let (kept, total) = combined.into_parts();
            Ok(render(&kept, total, &report.outcome.termination, call.timeout_secs))
        }
        Err(error) => Err(refusal("bash: ", &runner.workspace, &error)),
    }
}
