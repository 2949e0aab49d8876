//! open-sandbox's tools (`docs/profiles.md#open-sandbox-tools`), independent of the transport that calls them: the
//! [`catalogue`] (name, permission scope, input and output schema of each tool, sorted by name) and [`call`], which
//! runs one tool on the tenant's workspace (a sandlot conversation, mounted at [`WORKSPACE_MOUNT`] in the sandbox)
//! and answers the raw result or a [`ToolError`] the profile turns into its unified error.
//!
//! - [`file`]: `file.read`, `file.write`, `file.list`, `file.search`, `file.replace` on the workspace's host
//!   directory, through `sandlot_core::Workspaces` (no symlink followed) as the codegen profile's file tools.
//! - [`exec`]: `shell.exec` and `code.exec`, a run in the jail through `Engine::run_as`, argv not a shell string.
//!
//! Every tool works for the caller's tenant: reads through its `TenantView` of the workspace (another tenant's reads
//! as a workspace that does not exist), writes and runs once the workspace is the tenant's (another tenant's is
//! [`not_available`], invalid params).
//! - [`browser`]: the browser tools, on Chromium in the workspace's live sandbox (`sandlot_core::browser`).
//!
//! **To add a tool:** give it a row in its family's `tools()` and an arm in its family's `call`.

pub mod browser;
pub mod exec;
pub mod file;

use sandlot_core::{ConversationId, Tenant};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::AppState;

/// Where the workspace is in the sandbox: absolute paths must be under it.
pub use crate::kit::workspace_paths::WORKSPACE_MOUNT;

/// The message of every path argument that leaves the workspace (lexically, or through a symlink).
pub const OUTSIDE: &str = "path must be within workspace";

/// What a tool touches, as `mcp.capabilities` declares it (`permissions.scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Workspace,
    Network,
    Exec,
}

impl Scope {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Workspace => "workspace",
            Scope::Network => "network",
            Scope::Exec => "exec",
        }
    }
}

/// One tool as the catalogue lists it.
#[derive(Debug, Clone)]
pub struct ToolInfo {
    pub name: &'static str,
    pub scope: Scope,
    /// Why the tool is limited, when it is (`permissions.reason`).
    pub reason: Option<&'static str>,
    pub input_schema: Value,
    pub output_schema: Value,
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// No tool of that name.
    UnknownTool(String),
    /// The arguments are wrong: a missing or mistyped field, a path outside the workspace.
    InvalidParams(String),
    /// The tool ran and failed: a missing file, an unsupported runtime, a browser failure.
    Tool(String),
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolError::UnknownTool(name) => write!(f, "unknown tool: {name}"),
            ToolError::InvalidParams(message) | ToolError::Tool(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ToolError {}

/// Every tool of the profile, sorted by name (the browser tools included).
pub fn catalogue() -> Vec<ToolInfo> {
    let mut tools: Vec<ToolInfo> = file::tools().into_iter().chain(exec::tools()).chain(browser::tools()).collect();
    tools.sort_by(|a, b| a.name.cmp(b.name));
    tools
}

/// What a tool call gave: its result object, and a screenshot's PNG (which the MCP wire also shows as an image).
#[derive(Debug, Clone, PartialEq)]
pub struct Called {
    pub result: Value,
    pub png: Option<Vec<u8>>,
}

impl Called {
    fn of(result: Value) -> Result<Self, ToolError> {
        Ok(Self { result, png: None })
    }
}

/// Calls the tool `name` with `arguments` in `workspace` (the tenant's conversation) for `tenant` (its owner, and
/// the owner of the runs it makes); `cancel` ends a run when the client goes away.
pub async fn call(
    app: &AppState,
    tenant: &Tenant,
    workspace: &ConversationId,
    name: &str,
    arguments: Value,
    cancel: CancellationToken,
) -> Result<Called, ToolError> {
    if let Some(tool) = name.strip_prefix("file.") {
        return Called::of(file::call(app, tenant, workspace, tool, arguments, &cancel).await?);
    }
    match name {
        "shell.exec" | "code.exec" => Called::of(exec::call(app, tenant, workspace, name, arguments, cancel).await?),
        _ if browser::is_browser_tool(name) => browser::call(app, tenant, workspace, name, arguments, cancel).await,
        _ => Err(ToolError::UnknownTool(name.to_owned())),
    }
}

/// The error of a write or a run into a workspace another tenant owns: invalid params, as the engine refuses it.
pub fn not_available(workspace: &ConversationId) -> ToolError {
    ToolError::InvalidParams(format!("workspace {workspace} is not available to this caller"))
}

/// The error of an engine refusal about the workspace: [`not_available`] for another tenant's, else a tool error
/// in the engine's words after `prefix`.
fn refusal(prefix: &str, workspace: &ConversationId, error: &sandlot_core::Error) -> ToolError {
    match error {
        sandlot_core::Error::ConversationTaken { .. } => not_available(workspace),
        // A new workspace past a bound of the conversations: what to change is the caller's, not the server's.
        error @ sandlot_core::Error::ConversationLimit { .. } => ToolError::InvalidParams(error.to_string()),
        other => ToolError::Tool(format!("{prefix}{other}")),
    }
}

/// `arguments` parsed into `T` (a missing object is an empty one); `Err` names what is wrong.
fn parse<T: serde::de::DeserializeOwned>(arguments: Value) -> Result<T, ToolError> {
    let arguments = if arguments.is_null() { Value::Object(Default::default()) } else { arguments };
    serde_json::from_value(arguments).map_err(|e| ToolError::InvalidParams(e.to_string()))
}

/// A catalogue row whose schemas come from the Rust types of the arguments and the result.
fn info<I: schemars::JsonSchema + std::any::Any, O: schemars::JsonSchema>(
    name: &'static str,
    scope: Scope,
    reason: Option<&'static str>,
) -> ToolInfo {
    ToolInfo {
        name,
        scope,
        reason,
        input_schema: Value::Object(crate::kit::schema::input_schema_of::<I>()),
        output_schema: Value::Object(crate::kit::schema::output_schema_of::<O>()),
    }
}

/// `value` as a result object.
fn result<T: serde::Serialize>(value: &T) -> Result<Value, ToolError> {
    serde_json::to_value(value).map_err(|e| ToolError::Tool(format!("internal error: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_is_sorted_and_complete() {
        let names: Vec<&str> = catalogue().iter().map(|tool| tool.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        for name in ["file.read", "file.write", "shell.exec", "code.exec", "browser.navigate", "browser_press_key"] {
            assert!(names.contains(&name), "{name}");
        }
        assert_eq!(names.len(), 22);
    }

    #[test]
    fn every_schema_is_an_object_schema() {
        for tool in catalogue() {
            assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
            assert_eq!(tool.output_schema["type"], "object", "{}", tool.name);
        }
    }
}
