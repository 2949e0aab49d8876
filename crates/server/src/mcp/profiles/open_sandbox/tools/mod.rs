//! STAND-IN until branch `osb-tools` is merged (it replaces this file): the interface of open-sandbox's tools with
//! `file.read` and `browser.navigate` only, enough for the profile's frame to be tested.

use sandlot_core::ConversationId;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// What a tool may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Workspace,
    Network,
    Exec,
}

/// One tool as `mcp.capabilities` lists it.
#[derive(Debug, Clone)]
pub struct ToolInfo {
    pub name: &'static str,
    pub scope: Scope,
    pub reason: Option<&'static str>,
    pub input_schema: Value,
    pub output_schema: Value,
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    UnknownTool(String),
    InvalidParams(String),
    Tool(String),
}

/// Every tool, sorted by name.
pub fn catalogue() -> Vec<ToolInfo> {
    vec![
        ToolInfo {
            name: "browser.navigate",
            scope: Scope::Network,
            reason: Some("browser tools are not available yet"),
            input_schema: json!({"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}),
            output_schema: json!({"type":"object","properties":{"navigated":{"type":"boolean"}}}),
        },
        ToolInfo {
            name: "file.read",
            scope: Scope::Workspace,
            reason: None,
            input_schema: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
            output_schema: json!({"type":"object","properties":{"content":{"type":"string"}}}),
        },
    ]
}

/// Calls tool `name` with `arguments` in `workspace`.
pub async fn call(
    app: &crate::AppState,
    workspace: &ConversationId,
    _caller: String,
    name: &str,
    arguments: Value,
    _cancel: CancellationToken,
) -> Result<Value, ToolError> {
    match name {
        "file.read" => {
            let Some(path) = arguments.get("path").and_then(Value::as_str) else {
                return Err(ToolError::InvalidParams("path is required".into()));
            };
            let mut file = app.engine.workspaces().open(workspace, path).map_err(|e| ToolError::Tool(e.to_string()))?;
            let mut content = String::new();
            std::io::Read::read_to_string(&mut file, &mut content).map_err(|e| ToolError::Tool(e.to_string()))?;
            Ok(json!({ "content": content }))
        }
        "browser.navigate" => Err(ToolError::Tool("browser tools are not available yet".into())),
        other => Err(ToolError::UnknownTool(other.to_owned())),
    }
}
