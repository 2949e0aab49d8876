//! The tool catalogue of the default profile (the names of the original spec), one file per tool family.
//! Every tool can also be called by its underscore name (`sandbox_run_code`) for clients whose model APIs refuse
//! dots in tool names.

mod arguments;
mod list_runners;
mod result_files;
mod run_code;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, Tool};

use crate::AppState;

/// The tools, each under its dotted and its underscore name; built once (their schemas never change).
pub fn catalogue() -> &'static [Tool] {
    static CATALOGUE: std::sync::OnceLock<Vec<Tool>> = std::sync::OnceLock::new();
    CATALOGUE.get_or_init(|| {
        let mut tools = Vec::new();
        for tool in [run_code::definition(), list_runners::definition()] {
            let mut alias = tool.clone();
            alias.name = underscore_name(&tool.name).into();
            tools.push(tool);
            tools.push(alias);
        }
        tools
    })
}

/// `sandbox.run_code` → `sandbox_run_code`.
fn underscore_name(name: &str) -> String {
    name.replace('.', "_")
}

/// The dotted name of a tool called by either spelling.
fn canonical_name(name: &str) -> &str {
    [run_code::NAME, list_runners::NAME].into_iter().find(|tool| underscore_name(tool) == name).unwrap_or(name)
}

/// Runs the tool called `name` (either spelling) for `caller` (recorded in the run history).
/// `sink` receives the run's output as it comes (for live output); cancelling `cancel` stops the run.
pub async fn call(
    state: &AppState,
    name: &str,
    arguments: JsonObject,
    caller: String,
    sink: &dyn sandlot_core::OutputSink,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<CallToolResult, McpError> {
    match canonical_name(name) {
        run_code::NAME => run_code::call(state, arguments, caller, sink, cancel).await,
        list_runners::NAME => list_runners::call(state, arguments),
        _ => Err(McpError::invalid_params(
            format!("unknown tool {name:?}; available: {}, {}", run_code::NAME, list_runners::NAME),
            Some(serde_json::json!({ "kind": "unknown_tool", "trace_id": super::errors::trace_id(), "field": "name" })),
        )),
    }
}
