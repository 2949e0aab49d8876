//! The tool catalogue of the default profile, one file per tool family.
//!
//! Each tool has two names: the underscore one (`sandbox_run_code`), which every model API accepts (OpenAI's and
//! Anthropic's require `^[a-zA-Z0-9_-]{1,64}$` and refuse the whole request otherwise), and the original spec's
//! dotted one (`sandbox.run_code`). `tools/list` lists each tool once, under the form [`ToolNames`] chooses
//! (underscore by default); both forms are always callable.

mod browser;
mod list_runners;
mod result_files;
mod run_code;
mod run_code_args;
mod run_code_output;
mod run_result;
mod session;
mod upload_file;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, Tool};

use crate::AppState;
pub use crate::state::ToolNames;

/// The tools under the names `names` chooses; built once per form (their schemas never change).
pub fn catalogue(names: ToolNames) -> &'static [Tool] {
    static CATALOGUES: std::sync::OnceLock<[Vec<Tool>; 2]> = std::sync::OnceLock::new();
    let [underscore, dotted] = CATALOGUES.get_or_init(|| {
        let dotted: Vec<Tool> = [
            run_code::definition(),
            list_runners::definition(),
            upload_file::definition(),
            session::definition(),
            browser::definition(),
        ]
        .into_iter()
        .map(mirrored_conversation)
        .collect();
        let underscore = dotted
            .iter()
            .map(|tool| {
                let mut tool = tool.clone();
                tool.name = underscore_name(&tool.name).into();
                // A description names the other tool as it is listed.
                tool.description = tool
                    .description
                    .as_ref()
                    .map(|d| d.replace(run_code::NAME, &underscore_name(run_code::NAME)).into());
                tool.description = tool
                    .description
                    .as_ref()
                    .map(|d| d.replace(upload_file::NAME, &underscore_name(upload_file::NAME)).into());
                tool
            })
            .collect();
        [underscore, dotted]
    });
    match names {
        ToolNames::Underscore => underscore,
        ToolNames::Dotted => dotted,
    }
}

/// The header a 2026-07-28 client mirrors `conversationId` into (`Mcp-Param-Conversation-Id`), so a plain load
/// balancer can route a conversation's calls to one machine. An id is plain ASCII by its pattern, so the header
/// never needs the Base64 form; rmcp refuses a call whose header and argument differ.
pub const CONVERSATION_HEADER: &str = "Conversation-Id";

/// `tool` with its `conversationId` parameter (a top-level string, when it has one) marked `x-mcp-header`.
fn mirrored_conversation(mut tool: Tool) -> Tool {
    let mut schema = (*tool.input_schema).clone();
    let property = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
        .and_then(|properties| properties.get_mut("conversationId"))
        .and_then(serde_json::Value::as_object_mut);
    if let Some(property) = property {
        property.insert("x-mcp-header".to_owned(), CONVERSATION_HEADER.into());
        tool.input_schema = std::sync::Arc::new(schema);
    }
    tool
}

/// Whether a call of the tool called `name` (either form) may become a task: those that run code or drive a
/// browser, which can take minutes. Listing runners and uploading a file answer at once.
pub fn runs_as_task(name: &str) -> bool {
    [RUN_CODE, SESSION, BROWSER].iter().any(|dotted| name == *dotted || name == underscore_name(dotted))
}

/// The tool called `name` in either form, under that name.
pub fn find(name: &str) -> Option<Tool> {
    [ToolNames::Underscore, ToolNames::Dotted].into_iter().flat_map(catalogue).find(|t| t.name == name).cloned()
}

/// The name `tools/list` shows for the tool whose dotted name is `dotted`.
pub fn listed_name(dotted: &str, names: ToolNames) -> String {
    match names {
        ToolNames::Underscore => underscore_name(dotted),
        ToolNames::Dotted => dotted.to_owned(),
    }
}

/// The dotted names of the tools named in the server's instructions.
pub const RUN_CODE: &str = run_code::NAME;
pub const LIST_RUNNERS: &str = list_runners::NAME;
pub const UPLOAD_FILE: &str = upload_file::NAME;
pub const SESSION: &str = session::NAME;
pub const BROWSER: &str = browser::NAME;

/// `sandbox.run_code` → `sandbox_run_code`.
fn underscore_name(name: &str) -> String {
    name.replace('.', "_")
}

/// The dotted name of a tool called by either spelling.
fn canonical_name(name: &str) -> &str {
    [run_code::NAME, list_runners::NAME, upload_file::NAME, session::NAME, browser::NAME]
        .into_iter()
        .find(|tool| underscore_name(tool) == name)
        .unwrap_or(name)
}

/// Runs the tool called `name` (either spelling) for `caller` (recorded in the run history).
/// `sink` receives the run's output as it comes (for live output); cancelling `cancel` stops the run.
pub async fn call(
    state: &AppState,
    name: &str,
    arguments: JsonObject,
    caller: crate::kit::Caller,
    sink: &dyn sandlot_core::OutputSink,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<CallToolResult, McpError> {
    match canonical_name(name) {
        run_code::NAME => run_code::call(state, arguments, caller, sink, cancel).await,
        list_runners::NAME => list_runners::call(state, arguments),
        upload_file::NAME => upload_file::call(state, arguments, &caller).await,
        session::NAME => session::call(state, arguments, &caller).await,
        browser::NAME => browser::call(state, arguments, &caller).await,
        _ => {
            let available: Vec<&str> = catalogue(state.tool_names).iter().map(|t| t.name.as_ref()).collect();
            Err(McpError::invalid_params(
                format!("unknown tool {name:?}; available: {}", available.join(", ")),
                Some(
                    serde_json::json!({ "kind": "unknown_tool", "trace_id": crate::kit::rpc_errors::trace_id(), "field": "name" }),
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tool's `outputSchema` is the one derived from the type its `structuredContent` is serialized from: a
    /// hand-written schema (or a tool without a typed result) fails here. That the results are valid against these
    /// schemas is `tests/integration/output_schemas.rs`.
    #[test]
    fn every_output_schema_is_derived_from_the_result_type() {
        for names in [ToolNames::Underscore, ToolNames::Dotted] {
            for tool in catalogue(names) {
                let derived = match canonical_name(&tool.name) {
                    run_code::NAME => crate::kit::schema::output_schema_of::<run_code_output::RunCodeOutput>(),
                    list_runners::NAME => crate::kit::schema::output_schema_of::<list_runners::ListRunnersOutput>(),
                    upload_file::NAME => crate::kit::schema::output_schema_of::<upload_file::UploadFileOutput>(),
                    session::NAME => crate::kit::schema::output_schema_of::<session::SessionToolOutput>(),
                    browser::NAME => crate::kit::schema::output_schema_of::<browser::BrowserToolOutput>(),
                    other => panic!("{other} has no result type to derive its output schema from"),
                };
                assert_eq!(tool.output_schema.as_deref(), Some(&derived), "{}", tool.name);
            }
        }
    }

    /// What a client that validates results needs of a schema: an object at the top, every nested type inlined
    /// (no `$ref`), no `null` type (results skip absent fields), no Rust integer format (Ajv warns of each).
    #[test]
    fn output_schemas_are_self_contained_objects() {
        let tool = find(RUN_CODE).unwrap();
        let schema = tool.output_schema.unwrap();
        assert_eq!(schema["type"], "object");
        let text = serde_json::to_string(&schema).unwrap();
        assert!(!text.contains("$ref") && !text.contains("$defs") && !text.contains("null"), "{text}");
        assert!(!text.contains("\"format\""), "{text}");
        assert_eq!(
            schema["required"],
            serde_json::json!([
                "success",
                "output",
                "stdout",
                "stderr",
                "exitCode",
                "timedOut",
                "truncated",
                "durationMs",
                "files",
                "filesTruncated"
            ])
        );
        assert_eq!(schema["properties"]["files"]["items"]["required"], serde_json::json!(["name", "url", "size"]));
    }
}
