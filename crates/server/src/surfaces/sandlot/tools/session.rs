//! `sandbox.session {conversationId, action: "status" | "restart" | "close"}`: the conversation's live sandbox (the
//! one `sandbox.run_code` with `session: true` keeps between calls). `status` reports it ([`LiveView`]: times,
//! interpreters, processes, usage against limits) or `{live: false}`; `restart` kills its interpreters (the next
//! session call starts fresh ones; files and background processes stay); `close` ends it and every process in it.
//! The result is a [`SessionToolOutput`] (the `outputSchema` is derived from it) and a short text.
//!
//! Another tenant's conversation reads exactly as one without a live sandbox, and is never restarted or closed: the
//! conversation is checked for the caller's tenant before the engine is asked anything.

use std::sync::{Arc, OnceLock};

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use sandlot_core::{ConversationId, Error, Tenant};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::live_view::LiveView;
use crate::AppState;
use crate::kit::Caller;
use crate::kit::rpc_errors::{self as errors, invalid_argument};
use crate::kit::tenant_workspaces::derived_for_another;

pub const NAME: &str = "sandbox.session";

/// What a model sends.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionArgs {
    /// The conversation whose live sandbox this is about.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"))]
    pub conversation_id: String,
    /// status: report the live sandbox; restart: kill its interpreters (variables go, files and background
    /// processes stay); close: end it and every process in it.
    #[schemars(schema_with = "action_schema")]
    pub action: String,
}

/// `action`: the names [`Action::ALL`] holds, inline (a client's validator need not resolve a `$ref`).
fn action_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = Action::ALL.iter().map(|action| action.as_str()).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Status,
    Restart,
    Close,
}

impl Action {
    const ALL: [Action; 3] = [Action::Status, Action::Restart, Action::Close];

    fn as_str(self) -> &'static str {
        match self {
            Action::Status => "status",
            Action::Restart => "restart",
            Action::Close => "close",
        }
    }
}

/// What `sandbox.session` returns.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionToolOutput {
    pub conversation_id: String,
    /// The action done.
    pub action: String,
    /// The conversation has a live sandbox now (after the action).
    pub live: bool,
    /// With close: a live sandbox was ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed: Option<bool>,
    /// The live sandbox, when there is one.
    #[serde(flatten)]
    pub sandbox: Option<LiveView>,
}

fn input_schema() -> Arc<JsonObject> {
    static SCHEMA: OnceLock<Arc<JsonObject>> = OnceLock::new();
    SCHEMA.get_or_init(|| Arc::new(crate::kit::schema::input_schema_of::<SessionArgs>())).clone()
}

pub fn definition() -> Tool {
    Tool::new(
        NAME,
        "Report, restart or close the conversation's live sandbox (the one sandbox.run_code uses with session: true). \
         status lists its interpreters, processes and usage; restart clears the interpreters' variables (files and \
         background processes stay); close ends it and every process in it.",
        input_schema(),
    )
    .with_title("Manage the live sandbox")
    .with_raw_output_schema(Arc::new(crate::kit::schema::output_schema_of::<SessionToolOutput>()))
    .with_annotations(ToolAnnotations::new().read_only(false).destructive(true).idempotent(false).open_world(false))
    // MCP Apps: a host that renders them shows the conversation view; others ignore it.
    .with_meta(super::super::app_views::tool_meta(super::super::app_views::CONVERSATION_VIEW))
}

/// Parses a call's arguments; a bad one is -32602 naming its field.
fn parse(arguments: &JsonObject) -> Result<(ConversationId, Action), McpError> {
    for field in ["conversationId", "action"] {
        if matches!(arguments.get(field), None | Some(Value::Null)) {
            return Err(invalid_argument(field, format!("missing required argument {field}")));
        }
    }
    let args: SessionArgs = serde_path_to_error::deserialize(Value::Object(arguments.clone())).map_err(|error| {
        let path = error.path().to_string();
        let field = path.split(['.', '[']).next().filter(|f| !f.is_empty() && *f != "?").unwrap_or("arguments");
        invalid_argument(field, format!("{path}: {}", error.inner()))
    })?;
    let conversation = ConversationId::parse(&args.conversation_id).map_err(|e| errors::from_engine(&e))?;
    let action = Action::ALL.into_iter().find(|action| action.as_str() == args.action).ok_or_else(|| {
        invalid_argument("action", format!("action: {:?} is not one of status, restart, close", args.action))
    })?;
    Ok((conversation, action))
}

/// Whether `tenant` may see the conversation's live sandbox: its own (or any, for an admin). Another tenant's, and
/// another tenant's derived workspace, are answered as a conversation without one.
fn visible(state: &AppState, tenant: &Tenant, conversation: &ConversationId) -> Result<bool, McpError> {
    if derived_for_another(conversation, tenant) {
        return Ok(false);
    }
    match state.engine.check_conversation(tenant, conversation) {
        Ok(()) => Ok(true),
        Err(Error::ConversationHidden { .. }) => Ok(false),
        Err(error) => Err(errors::from_engine(&error)),
    }
}

pub async fn call(state: &AppState, arguments: JsonObject, caller: &Caller) -> Result<CallToolResult, McpError> {
    let (conversation, action) = parse(&arguments)?;
    let visible = visible(state, &caller.tenant(), &conversation)?;
    let sessions = state.engine.sessions();
    let (status, closed) = match (visible, action) {
        (false, Action::Close) => (None, Some(false)),
        (false, _) => (None, None),
        (true, Action::Status) => (sessions.status(&conversation).await, None),
        (true, Action::Restart) => (sessions.restart(&conversation).await, None),
        (true, Action::Close) => (None, Some(sessions.close(&conversation, "closed by sandbox_session").await)),
    };
    let sandbox = status.as_ref().map(LiveView::of);
    let text = match (&sandbox, action, closed) {
        (_, Action::Close, Some(true)) => {
            format!("closed the live sandbox of conversation {conversation}: every process in it ended\n")
        }
        (None, _, _) => format!("conversation {conversation} has no live sandbox\n"),
        (Some(view), Action::Restart, _) => format!(
            "restarted: the interpreters were killed (their variables are gone; files and background processes \
             stay)\n{}",
            view.text()
        ),
        (Some(view), _, _) => view.text(),
    };
    let output = SessionToolOutput {
        conversation_id: conversation.to_string(),
        action: action.as_str().to_owned(),
        live: sandbox.is_some(),
        closed,
        sandbox,
    };
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(crate::kit::schema::structured(&output));
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(value: Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_bad_argument_names_its_field() {
        let field = |value| parse(&arguments(value)).unwrap_err().data.unwrap()["field"].clone();
        assert_eq!(field(serde_json::json!({ "action": "status" })), "conversationId");
        assert_eq!(field(serde_json::json!({ "conversationId": "c" })), "action");
        assert_eq!(field(serde_json::json!({ "conversationId": "c", "action": "reboot" })), "action");
        assert_eq!(field(serde_json::json!({ "conversationId": "../x", "action": "close" })), "conversationId");
        let (conversation, action) =
            parse(&arguments(serde_json::json!({ "conversationId": "c", "action": "restart" }))).unwrap();
        assert_eq!((conversation.as_str(), action), ("c", Action::Restart));
    }

    #[test]
    fn the_schema_offers_the_three_actions() {
        let schema = input_schema();
        assert_eq!(schema["properties"]["action"]["enum"], serde_json::json!(["status", "restart", "close"]));
        assert_eq!(schema["required"], serde_json::json!(["conversationId", "action"]));
    }

    /// The live sandbox's fields sit beside `live` (absent without one), each nested type inlined.
    #[test]
    fn the_output_schema_flattens_the_sandbox() {
        let schema = crate::kit::schema::output_schema_of::<SessionToolOutput>();
        assert_eq!(schema["required"], serde_json::json!(["conversationId", "action", "live"]));
        let properties = schema["properties"].as_object().unwrap();
        for field in ["id", "startedAt", "idleEndsAt", "secondsLeft", "interpreters", "processes", "usage", "closed"] {
            assert!(properties.contains_key(field), "{field}: {schema:?}");
        }
        assert_eq!(
            properties["processes"]["items"]["required"],
            serde_json::json!(["pid", "command", "cpuSeconds", "memoryBytes"])
        );
        let text = serde_json::to_string(&schema).unwrap();
        assert!(!text.contains("$ref") && !text.contains("null"), "{text}");
    }
}
