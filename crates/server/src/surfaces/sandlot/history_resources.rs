//! The run history as MCP resources: `sandlot://runs/{runId}` (one run's record),
//! `sandlot://runs/{runId}/output` (what it printed as kept: each stream up to `SANDLOT_MAX_OUTPUT_BYTES`, its first
//! and last halves when longer, where a tool result shows only a head and a tail) and `sandlot://conversations/{conversationId}/runs` (a conversation's
//! newest runs), announced as resource templates. `resources/list` lists the newest runs. Contents are JSON, the
//! same as `GET /v1/runs`, `GET /v1/runs/{runId}` and `GET /v1/runs/{runId}/output` serve. A tenant reads and lists
//! only its own runs; another tenant's run id is answered as one that does not exist.

use rmcp::ErrorData as McpError;
use rmcp::model::{ListResourcesResult, ReadResourceResult, Resource, ResourceContents, ResourceTemplate};
use sandlot_core::{ConversationId, History, OutputLookup, RunRecord, Tenant};
use serde_json::json;

use crate::AppState;
use crate::kit::rpc_errors as errors;

const RUN_PREFIX: &str = "sandlot://runs/";
const CONVERSATION_PREFIX: &str = "sandlot://conversations/";
const CONVERSATION_SUFFIX: &str = "/runs";
const OUTPUT_SUFFIX: &str = "/output";
/// Runs in `resources/list` and in a conversation's resource.
const LISTED_RUNS: usize = 50;

/// Why a known run's output cannot be read.
pub fn not_kept(run_id: &str) -> String {
    format!(
        "the output of run {run_id:?} is not kept: the run is still going or was cancelled, or its output was \
         dropped to keep the history within SANDLOT_HISTORY_OUTPUT_MB"
    )
}

/// The three templates.
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new("sandlot://runs/{runId}/output", "run-output")
            .with_title("A run's whole output")
            .with_description(
                "{runId, stdout, stderr, stdoutTruncated, stderrTruncated}: everything the run printed that sandlot \
                 kept, where a tool result holds only a head and a tail",
            )
            .with_mime_type("application/json"),
        ResourceTemplate::new("sandlot://runs/{runId}", "run")
            .with_title("A run")
            .with_description("One run from the history: who ran what, when, how it ended")
            .with_mime_type("application/json"),
        ResourceTemplate::new("sandlot://conversations/{conversationId}/runs", "conversation-runs")
            .with_title("A conversation's runs")
            .with_description("The newest 50 runs of a conversation, newest first")
            .with_mime_type("application/json"),
    ]
}

fn history(state: &AppState) -> Result<&History, McpError> {
    state.engine.history().ok_or_else(|| McpError::internal_error("this server keeps no run history", None))
}

/// The newest runs, as resources.
pub fn list(state: &AppState, tenant: &Tenant) -> Result<ListResourcesResult, McpError> {
    let runs = history(state)?.list_for(tenant, None, LISTED_RUNS).map_err(|e| errors::from_engine(&e))?;
    let resources = runs
        .iter()
        .map(|run| {
            let outcome = run.outcome.map_or(run.state.as_str(), |o| o.as_str());
            Resource::new(format!("{RUN_PREFIX}{}", run.id), format!("run {}", run.id))
                .with_description(format!("{} in {}, {outcome}, {}", run.language, run.conversation_id, run.queued_at))
                .with_mime_type("application/json")
        })
        .collect();
    Ok(ListResourcesResult::with_all_items(resources))
}

/// Reads `sandlot://runs/{id}` or `sandlot://conversations/{id}/runs`.
pub fn read(state: &AppState, tenant: &Tenant, uri: &str) -> Result<ReadResourceResult, McpError> {
    let not_found = |what: String| McpError::resource_not_found(what, Some(json!({ "uri": uri })));
    let body = if let Some(run_id) = uri.strip_prefix(RUN_PREFIX).and_then(|rest| rest.strip_suffix(OUTPUT_SUFFIX)) {
        match history(state)?.output_for(tenant, run_id).map_err(|e| errors::from_engine(&e))? {
            OutputLookup::Kept(mut output) => {
                if state.scrub_secrets {
                    output.stdout = sandlot_core::scrub_secrets(&output.stdout).into_owned();
                    output.stderr = sandlot_core::scrub_secrets(&output.stderr).into_owned();
                }
                json!(output)
            }
            OutputLookup::UnknownRun => return Err(not_found(format!("no run {run_id:?} in the history"))),
            OutputLookup::NotKept => return Err(not_found(not_kept(run_id))),
        }
    } else if let Some(run_id) = uri.strip_prefix(RUN_PREFIX) {
        let record: RunRecord = history(state)?
            .get_for(tenant, run_id)
            .map_err(|e| errors::from_engine(&e))?
            .ok_or_else(|| not_found(format!("no run {run_id:?} in the history")))?;
        json!(record)
    } else if let Some(id) = uri.strip_prefix(CONVERSATION_PREFIX).and_then(|r| r.strip_suffix(CONVERSATION_SUFFIX)) {
        let conversation = ConversationId::parse(id).map_err(|e| errors::from_engine(&e))?;
        let runs =
            history(state)?.list_for(tenant, Some(&conversation), LISTED_RUNS).map_err(|e| errors::from_engine(&e))?;
        json!({ "conversationId": conversation.as_str(), "runs": runs })
    } else {
        return Err(not_found(format!(
            "unknown resource {uri:?}; expected sandlot://runs/{{runId}}, sandlot://runs/{{runId}}/output sandlot://conversations/{{conversationId}}/runs or sandlot://conversations/{{conversationId}}/files/{{path}}"
        )));
    };
    let text = serde_json::to_string_pretty(&body).unwrap_or_default();
    Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri).with_mime_type("application/json")]))
}
