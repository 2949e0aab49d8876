//! `sandbox.list_runners {}` → `{languages: [{language, image, version, packages}]}`.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use serde_json::json;

use crate::AppState;

pub const NAME: &str = "sandbox.list_runners";

pub fn definition() -> Tool {
    let input = json!({ "type": "object", "properties": {}, "additionalProperties": false });
    let output = json!({
        "type": "object",
        "properties": {
            "languages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "language": { "type": "string" },
                        "image": { "type": "string", "description": "Docker image, or the host interpreter's path" },
                        "version": { "type": "string" },
                        "packages": {
                            "type": "object",
                            "description": "Key packages installed, name to version (Python: numpy, pandas, matplotlib)",
                            "additionalProperties": { "type": "string" }
                        }
                    },
                    "required": ["language", "image", "version"]
                }
            }
        },
        "required": ["languages"]
    });
    Tool::new(
        NAME,
        "List the languages sandbox.run_code can run here, with the interpreter or image, its version and key packages.",
        Arc::new(object(input)),
    )
    .with_title("List sandbox runners")
    .with_raw_output_schema(Arc::new(object(output)))
    .with_annotations(ToolAnnotations::new().read_only(true).destructive(false).idempotent(true).open_world(false))
}

pub fn call(state: &AppState, _arguments: JsonObject) -> Result<CallToolResult, McpError> {
    let languages: Vec<_> = state
        .engine
        .runners()
        .into_iter()
        .map(|r| json!({ "language": r.language, "image": r.image, "version": r.version, "packages": r.packages }))
        .collect();
    Ok(CallToolResult::structured(json!({ "languages": languages })))
}

/// A JSON object literal as rmcp's map type.
pub(super) fn object(value: serde_json::Value) -> rmcp::model::JsonObject {
    match value {
        serde_json::Value::Object(map) => map,
        _ => rmcp::model::JsonObject::new(),
    }
}
