//! codegen-sandbox's tools (docs/profiles.md: the file tools table and "codegen-sandbox: Bash and scrubbing").
//! **To add a tool:** write `tools/<name>.rs` with `pub fn tool() -> Tool` (name, description, input schema) and
//! `pub async fn call(call: Call) -> Reply`, then add one line to [`registry`]. A tool's reply is its one
//! TextContent: `Ok` a result, `Err` an `isError` result (every user-caused failure, as mcp-go's tools do; a missing
//! argument too, e.g. `file_path is required`).

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{CodegenState, Tenant};
use crate::kit::conversation_access::{self, TenantView};

mod bash;
mod bash_output;
mod edit;
mod files;
mod glob;
mod grep;
mod kill_shell;
mod read;
mod visible;
mod write;

/// A tool's reply: its text, or the text of an `isError` result.
pub type Reply = Result<String, String>;

/// One call of a tool: what it may use and its arguments.
pub struct Call {
    pub state: CodegenState,
    /// The session's tenant (and its default workspace).
    pub tenant: Tenant,
    pub arguments: JsonObject,
    /// Cancelled when the client cancels the request.
    pub cancel: CancellationToken,
}

/// A registered tool: how it is listed and how it is called.
pub struct Entry {
    pub tool: Tool,
    pub call: fn(Call) -> BoxFuture<'static, Reply>,
}

/// Every tool of the profile, in the order `tools/list` shows them. The one place a tool is registered.
pub fn registry() -> Vec<Entry> {
    vec![
        Entry { tool: read::tool(), call: |call| Box::pin(read::call(call)) },
        Entry { tool: write::tool(), call: |call| Box::pin(write::call(call)) },
        Entry { tool: edit::tool(), call: |call| Box::pin(edit::call(call)) },
        Entry { tool: glob::tool(), call: |call| Box::pin(glob::call(call)) },
        Entry { tool: grep::tool(), call: |call| Box::pin(grep::call(call)) },
        Entry { tool: bash::tool(), call: |call| Box::pin(bash::call(call)) },
        Entry { tool: bash_output::tool(), call: |call| Box::pin(bash_output::call(call)) },
        Entry { tool: kill_shell::tool(), call: |call| Box::pin(kill_shell::call(call)) },
    ]
}

/// The description of every `file_path` argument.
pub const FILE_PATH: &str = "Absolute path (/workspace/...) or path relative to the workspace root";

/// A tool with mcp-go's default annotations (readOnly false, destructive true, idempotent false, openWorld true)
/// whose input schema is an object of `properties` (plus the optional `workspace` every tool takes).
pub fn tool(name: &'static str, description: &'static str, properties: Value, required: &[&str]) -> Tool {
    let mut properties = properties;
    if let Some(properties) = properties.as_object_mut() {
        let workspace = serde_json::json!({ "type": "string", "description": "Workspace id (multi-workspace mode)" });
        properties.insert("workspace".into(), workspace);
    }
    let schema = serde_json::json!({ "type": "object", "properties": properties, "required": required });
    let schema = Arc::new(schema.as_object().cloned().unwrap_or_default());
    Tool::new(name, description, schema)
        .with_annotations(ToolAnnotations::new().read_only(false).destructive(true).idempotent(false).open_world(true))
}

impl Call {
    /// The string argument `name`, maybe empty; `Err("<name> is required")` when absent (or not a string).
    pub fn required_str(&self, name: &str) -> Result<&str, String> {
        self.arguments.get(name).and_then(Value::as_str).ok_or_else(|| format!("{name} is required"))
    }

    /// The string argument `name`; `Err("<name> is required")` when absent or empty (paths, patterns).
    pub fn nonempty_str(&self, name: &str) -> Result<&str, String> {
        self.required_str(name).ok().filter(|value| !value.is_empty()).ok_or_else(|| format!("{name} is required"))
    }

    /// The string argument `name`, if given.
    pub fn optional_str(&self, name: &str) -> Option<&str> {
        self.arguments.get(name).and_then(Value::as_str)
    }

    /// The number argument `name` (JSON numbers; whole part), if given.
    pub fn optional_int(&self, name: &str) -> Option<i64> {
        self.arguments.get(name).and_then(Value::as_f64).map(|n| n as i64)
    }

    /// The boolean argument `name`, `false` when absent.
    pub fn flag(&self, name: &str) -> bool {
        self.arguments.get(name).and_then(Value::as_bool).unwrap_or(false)
    }

    /// The workspace this call works in: the session's, or the one its `workspace` argument names (of the same
    /// tenant).
    pub fn workspace(&self) -> Result<sandlot_core::ConversationId, String> {
        self.tenant.workspace(self.optional_str("workspace"))
    }

    /// The workspace this call reads, as the session's tenant may see it: one another tenant owns reads as one
    /// that does not exist.
    pub fn view(&self) -> Result<TenantView, String> {
        TenantView::new(&self.state.app.engine, &self.tenant.caller, self.workspace()?).map_err(|e| e.to_string())
    }

    /// Claims `workspace` for the session's tenant before a tool writes into it (making it, when new, the tenant's);
    /// `Err` is the tool's text ([`super::tenant::not_available`] for another tenant's).
    pub fn claim(&self, workspace: &sandlot_core::ConversationId) -> Result<(), String> {
        conversation_access::claim(&self.state.app.engine, &self.tenant.caller, workspace)
            .map_err(|error| super::tenant::refusal("", workspace, &error))
    }
}
