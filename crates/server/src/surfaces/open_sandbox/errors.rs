//! The unified error of open-sandbox (`docs/profiles.md#open-sandbox-transports-and-errors`): every failure is a
//! JSON-RPC error whose `error.message` names its kind and whose `error.data` is `{code, message, trace_id, kind}`,
//! with a fresh trace id (32 hex digits) that also appears in sandlot's log line for the same error.

use serde_json::{Value, json};

/// What went wrong, with the JSON-RPC code and the product's `kind` of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// -32600: not a JSON-RPC 2.0 request, or an unreadable body.
    InvalidRequest,
    /// -32601: an unknown method, or `tools/call` of an unknown tool.
    MethodNotFound,
    /// -32602: bad or missing params, a path outside the workspace, a bad protocol version.
    InvalidParams,
    /// -32603: a fault of sandlot's.
    Internal,
    /// -32001: a missing or refused bearer credential.
    Unauthorized,
    /// -32003: reserved by the product; sandlot never sends it.
    Forbidden,
    /// -32010: the tool ran and failed.
    ToolError,
}

impl Kind {
    /// The JSON-RPC error code.
    pub fn code(self) -> i64 {
        match self {
            Kind::InvalidRequest => -32600,
            Kind::MethodNotFound => -32601,
            Kind::InvalidParams => -32602,
            Kind::Internal => -32603,
            Kind::Unauthorized => -32001,
            Kind::Forbidden => -32003,
            Kind::ToolError => -32010,
        }
    }

    /// `data.code` and `data.kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::InvalidRequest => "invalid_request",
            Kind::MethodNotFound => "method_not_found",
            Kind::InvalidParams => "invalid_params",
            Kind::Internal => "internal",
            Kind::Unauthorized => "unauthorized",
            Kind::Forbidden => "forbidden",
            Kind::ToolError => "tool_error",
        }
    }

    /// `error.message`.
    fn title(self) -> &'static str {
        match self {
            Kind::InvalidRequest => "invalid request",
            Kind::MethodNotFound => "method not found",
            Kind::InvalidParams => "invalid params",
            Kind::Internal => "internal error",
            Kind::Unauthorized => "unauthorized",
            Kind::Forbidden => "forbidden",
            Kind::ToolError => "tool error",
        }
    }
}

/// One failure, before it is given a trace id and sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub kind: Kind,
    /// `data.message`: what exactly was wrong.
    pub message: String,
}

impl RpcError {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    /// The JSON-RPC error response to request `id`, with a fresh trace id that is logged with the error.
    pub fn response(&self, id: Value) -> Value {
        let trace_id = new_trace_id();
        let Self { kind, message } = self;
        match kind {
            Kind::Internal => tracing::error!(trace_id, kind = kind.name(), message, "open-sandbox request failed"),
            _ => tracing::info!(trace_id, kind = kind.name(), message, "open-sandbox request failed"),
        }
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": kind.code(),
                "message": kind.title(),
                "data": { "code": kind.name(), "message": message, "trace_id": trace_id, "kind": kind.name() },
            },
        })
    }
}

/// A fresh trace id: 32 lowercase hex digits.
pub fn new_trace_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
