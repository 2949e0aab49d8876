//! The one place where engine errors become MCP errors.
//!
//! Bad arguments are JSON-RPC -32602 with `data {kind, trace_id, field}`; faults of sandlot are -32603 with a
//! `trace_id` (details go to the log only). A program that fails, times out or has no runner is not an error here:
//! the tool returns a result with `isError: true`. From protocol 2025-11-25 on (SEP-1303), bad arguments are such a
//! result too, so the model reads what to correct ([`arguments_errors_as_results`]).

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock, ProtocolVersion};
use sandlot_core::{Error, Escaped};
use serde_json::json;

/// A fresh id that ties an error the client sees to the server's log line.
pub fn trace_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The JSON-RPC code of a call refused because the server (or the conversation) is busy: a server error of
/// JSON-RPC's range, to be tried again later.
pub const BUSY: i32 = -32000;

/// -32602 for one bad argument.
pub fn invalid_argument(field: &str, message: impl Into<String>) -> McpError {
    let message = message.into();
    let trace_id = trace_id();
    // `reason`, not `message`: that key is the line's own text.
    tracing::info!(trace_id, field, reason = message, "invalid tool arguments");
    McpError::invalid_params(message, Some(json!({ "kind": "invalid_argument", "trace_id": trace_id, "field": field })))
}

/// The JSON-RPC error for an engine error that is not a normal result.
pub fn from_engine(error: &Error) -> McpError {
    match error {
        Error::InvalidArgument { .. } | Error::ConversationTaken { .. } => {
            invalid_argument(error.argument_field().unwrap_or("arguments"), error.to_string())
        }
        // Another tenant's conversation is answered exactly as one that does not exist.
        Error::ConversationNotFound { .. } | Error::ConversationHidden { .. } => {
            invalid_argument("conversationId", format!("no conversation {}", conversation_of(error)))
        }
        Error::InvalidPath { .. } => invalid_argument("path", error.to_string()),
        Error::QuotaExceeded { .. } => invalid_argument("content", error.to_string()),
        // A new conversation past a bound: the caller uses one it has, or deletes one.
        Error::ConversationLimit { .. } => invalid_argument("conversationId", error.to_string()),
        Error::Busy { .. } => {
            McpError::new(rmcp::model::ErrorCode(BUSY), error.to_string(), Some(json!({ "kind": "busy" })))
        }
        other => {
            let trace_id = trace_id();
            // An engine error's text may quote a caller's value.
            tracing::error!(trace_id, error = %Escaped(&other.to_string()), "internal error in a tool call");
            McpError::internal_error(
                format!("internal error (trace id {trace_id})"),
                Some(json!({ "kind": "internal", "trace_id": trace_id })),
            )
        }
    }
}

/// The id a not-found error names.
fn conversation_of(error: &Error) -> &str {
    match error {
        Error::ConversationNotFound { id } | Error::ConversationHidden { id } => id,
        _ => "",
    }
}

/// Whether `version` (`None`: a client that never said, read as the oldest) is `since` or later.
pub fn at_least(version: Option<&ProtocolVersion>, since: &ProtocolVersion) -> bool {
    // Versions are dates, `YYYY-MM-DD`: their text order is their order in time.
    version.is_some_and(|v| v.as_str() >= since.as_str())
}

/// The first protocol version whose clients get invalid tool arguments as a tool result (SEP-1303).
const ARGUMENT_ERRORS_AS_RESULTS_SINCE: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Under `version` (the request's, else the session's; `None` for a client that never said, read as the oldest),
/// 2025-11-25 and later: an invalid argument becomes a result with `isError: true` whose text names the field, so
/// the model that sent it can correct itself. Every other error (an unknown tool, an internal fault) and every error
/// under older versions stays a JSON-RPC error, as those clients expect.
pub fn arguments_errors_as_results(
    result: Result<CallToolResult, McpError>,
    version: Option<&ProtocolVersion>,
) -> Result<CallToolResult, McpError> {
    let new_enough = at_least(version, &ARGUMENT_ERRORS_AS_RESULTS_SINCE);
    match result {
        Err(error) if new_enough && is_invalid_argument(&error) => {
            Ok(CallToolResult::error(vec![ContentBlock::text(format!("invalid arguments: {}", error.message))]))
        }
        other => other,
    }
}

fn is_invalid_argument(error: &McpError) -> bool {
    error.data.as_ref().and_then(|data| data.get("kind")).and_then(serde_json::Value::as_str)
        == Some("invalid_argument")
}
