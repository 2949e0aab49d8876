//! `sandbox.list_runners {}` → `{languages: [{language, image, version, packages}]}`: the engine's runners as
//! [`ListRunnersOutput`], the type the tool's `outputSchema` is derived from.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use sandlot_core::RunnerInfo;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

use crate::AppState;

pub const NAME: &str = "sandbox.list_runners";

/// What `sandbox.list_runners` returns.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListRunnersOutput {
    /// The languages sandbox.run_code can run here.
    pub languages: Vec<RunnerInfo>,
}

pub fn definition() -> Tool {
    let input = json!({ "type": "object", "properties": {}, "additionalProperties": false });
    Tool::new(
        NAME,
        "List the languages sandbox.run_code can run here, with the interpreter or image, its version and key packages.",
        Arc::new(object(input)),
    )
    .with_title("List sandbox runners")
    .with_raw_output_schema(Arc::new(crate::kit::schema::output_schema_of::<ListRunnersOutput>()))
    .with_annotations(ToolAnnotations::new().read_only(true).destructive(false).idempotent(true).open_world(false))
}

pub fn call(state: &AppState, _arguments: JsonObject) -> Result<CallToolResult, McpError> {
    let output = ListRunnersOutput { languages: state.engine.runners() };
    Ok(CallToolResult::structured(crate::kit::schema::structured(&output)))
}

/// A JSON object literal as rmcp's map type.
pub(super) fn object(value: serde_json::Value) -> rmcp::model::JsonObject {
    match value {
        serde_json::Value::Object(map) => map,
        _ => rmcp::model::JsonObject::new(),
    }
}
