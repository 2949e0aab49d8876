//! The one JSON-RPC dispatcher every transport of open-sandbox shares: a request in, its response out (`None` for a
//! notification). Tools are methods of their own names, results are not wrapped in MCP's envelope except by
//! `tools/call`, and every failure is a unified error ([`RpcError`]).

use base64::Engine as _;
use sandlot_core::{ConversationId, Tenant};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::capabilities::{self, LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use super::errors::{Kind, RpcError};
use super::tools::{self, ToolError};

/// Who a request comes from: the workspace of an authenticated caller, or why the caller was refused (answered to
/// every request, each with its own trace id).
#[derive(Clone)]
pub struct Session {
    pub app: crate::AppState,
    pub identity: Result<Identity, String>,
    /// Cancelled when the client goes away or the server shuts down.
    pub cancel: CancellationToken,
}

/// An authenticated caller's tenant and its workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The owner of the workspace and of the runs it makes.
    pub tenant: Tenant,
    pub workspace: ConversationId,
}

impl Identity {
    /// `tenant` working in its open-sandbox workspace.
    pub fn of(tenant: Tenant) -> Result<Self, String> {
        let workspace = super::workspace_of(tenant.name())?;
        Ok(Self { tenant, workspace })
    }
}

/// The response to the JSON text of one request; `None` for a notification. Text that is not JSON is -32600, as
/// the product answers an unreadable body.
pub async fn dispatch_text(session: &Session, text: &str) -> Option<Value> {
    match serde_json::from_str::<Value>(text) {
        Ok(request) => dispatch(session, request).await,
        Err(e) => Some(RpcError::new(Kind::InvalidRequest, format!("invalid JSON: {e}")).response(Value::Null)),
    }
}

/// The response to `request`; `None` for a notification (no `id`, or `id: null`), which is not acted on.
pub async fn dispatch(session: &Session, request: Value) -> Option<Value> {
    let Value::Object(request) = request else {
        return Some(RpcError::new(Kind::InvalidRequest, "not a JSON-RPC request object").response(Value::Null));
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let notification = id.is_null();
    match answer(session, &request).await {
        Ok(_) if notification => None,
        Ok(result) => Some(json!({ "jsonrpc": "2.0", "id": id, "result": result })),
        // A notification's failure is answered only when the caller was refused (so it learns why).
        Err(error) if notification && error.kind != Kind::Unauthorized => {
            tracing::debug!(message = error.message, "open-sandbox notification refused");
            None
        }
        Err(error) => Some(error.response(id)),
    }
}

async fn answer(session: &Session, request: &Map<String, Value>) -> Result<Value, RpcError> {
    let identity = session.identity.as_ref().map_err(|why| RpcError::new(Kind::Unauthorized, why.clone()))?;
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(RpcError::new(Kind::InvalidRequest, "jsonrpc must be \"2.0\""));
    }
    let method = match request.get("method") {
        Some(Value::String(method)) if !method.is_empty() => method.as_str(),
        _ => return Err(RpcError::new(Kind::InvalidRequest, "method is required")),
    };
    let params = match request.get("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(params @ Value::Object(_)) => params.clone(),
        Some(_) => return Err(RpcError::new(Kind::InvalidParams, "params must be an object")),
    };
    let version = protocol_version(&params)?;
    if request.get("id").is_none_or(Value::is_null) {
        // Notifications (notifications/initialized, cancellations) need nothing from a stateless server.
        return Ok(Value::Null);
    }
    match method {
        "initialize" => Ok(capabilities::initialize_result(version.unwrap_or(LATEST_PROTOCOL_VERSION))),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(capabilities::tools_list()),
        "mcp.capabilities" => Ok(capabilities::capabilities()),
        "tools/call" => {
            let name = match params.get("name") {
                Some(Value::String(name)) if !name.is_empty() => name.as_str(),
                _ => return Err(RpcError::new(Kind::InvalidParams, "name is required")),
            };
            let arguments = match params.get("arguments") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(arguments @ Value::Object(_)) => arguments.clone(),
                Some(_) => return Err(RpcError::new(Kind::InvalidParams, "arguments must be an object")),
            };
            let called = call_tool(session, identity, name, arguments).await?;
            let result = called.result;
            // The product's wire: the result three times, the text block its JSON (clients that read only text,
            // as the MCP spec asks a server to serve, see it there); each tool bounds its result (1 MiB as JSON).
            // A screenshot's PNG follows as an image block.
            let mut content = vec![json!({ "type": "text", "text": result.to_string() })];
            if let Some(png) = called.png {
                let data = base64::engine::general_purpose::STANDARD.encode(png);
                content.push(json!({ "type": "image", "data": data, "mimeType": "image/png" }));
            }
            Ok(json!({ "content": content, "structuredContent": result, "result": result }))
        }
        tool => {
            call_tool(session, identity, tool, params).await.map(|called| called.result).map_err(|error| {
                match error.kind {
                    Kind::MethodNotFound => RpcError::new(Kind::MethodNotFound, format!("method not found: {tool}")),
                    _ => error,
                }
            })
        }
    }
}

async fn call_tool(
    session: &Session,
    identity: &Identity,
    name: &str,
    arguments: Value,
) -> Result<tools::Called, RpcError> {
    let cancel = session.cancel.child_token();
    tools::call(&session.app, &identity.tenant, &identity.workspace, name, arguments, cancel).await.map_err(|error| {
        match error {
            ToolError::UnknownTool(name) => RpcError::new(Kind::MethodNotFound, format!("unknown tool: {name}")),
            ToolError::InvalidParams(message) => RpcError::new(Kind::InvalidParams, message),
            ToolError::Tool(message) => RpcError::new(Kind::ToolError, message),
        }
    })
}

/// The `protocolVersion` (or `protocol_version`) of `params`, checked on every method: present, it must be a
/// non-empty string sandlot supports.
fn protocol_version(params: &Value) -> Result<Option<&str>, RpcError> {
    let Some(value) = params.get("protocolVersion").or_else(|| params.get("protocol_version")) else {
        return Ok(None);
    };
    match value {
        Value::String(version) if !version.is_empty() => {
            if SUPPORTED_PROTOCOL_VERSIONS.contains(&version.as_str()) {
                Ok(Some(version))
            } else {
                Err(RpcError::new(
                    Kind::InvalidParams,
                    format!(
                        "unsupported protocol version {version:?}; supported: {}",
                        SUPPORTED_PROTOCOL_VERSIONS.join(", ")
                    ),
                ))
            }
        }
        other => {
            Err(RpcError::new(Kind::InvalidParams, format!("protocolVersion must be a non-empty string, not {other}")))
        }
    }
}
