//! The one place where engine errors become MCP errors.
//!
//! Bad arguments are JSON-RPC -32602 with `data {kind, trace_id, field}`; faults of sandlot are -32603 with a
//! `trace_id` (details go to the log only). A program that fails, times out or has no runner is not an error here:
//! the tool returns a result with `isError: true`.

use rmcp::ErrorData as McpError;
use sandlot_core::Error;
use serde_json::json;

/// A fresh id that ties an error the client sees to the server's log line.
pub fn trace_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

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
        Error::InvalidArgument { field, .. } => invalid_argument(field, error.to_string()),
        Error::InvalidPath { .. } => invalid_argument("path", error.to_string()),
        other => {
            let trace_id = trace_id();
            tracing::error!(trace_id, error = %other, "internal error in a tool call");
            McpError::internal_error(
                format!("internal error (trace id {trace_id})"),
                Some(json!({ "kind": "internal", "trace_id": trace_id })),
            )
        }
    }
}
