//! Checks every MCP endpoint applies to a POSTed body before the protocol library sees it, with the JSON-RPC
//! error each failure gets. A body that passes is one rmcp can type (it reads it the same way), so rmcp never answers
//! a request itself with its HTTP 415: a message it cannot type (an id of 1.5, a key twice) is -32600 here.

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Map, Value, json};

/// Largest request body accepted on an MCP endpoint.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A JSON-RPC error response with an HTTP status.
pub fn error_response(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } });
    (status, axum::Json(body)).into_response()
}

/// Reads a body of at most [`MAX_BODY_BYTES`] and checks it is one JSON-RPC 2.0 message: 413 when too large, 408
/// when too slow ([`BodyLimits`](super::BodyLimits)), -32700 when it is not JSON, -32600 when it is not a message
/// (batches included) or not one rmcp can type ([`typed`]).
pub async fn read_message(body: Body) -> Result<(Bytes, Map<String, Value>), Response> {
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(error) => {
            let error = super::BodyError::of(&error);
            let message = match &error {
                super::BodyError::TooLarge => "request body is over 1 MiB".to_owned(),
                super::BodyError::TooSlow(why) | super::BodyError::Broken(why) => why.clone(),
            };
            return Err(error_response(error.status(), Value::Null, -32600, &message));
        }
    };
    let message: Value = serde_json::from_slice(&bytes)
        .map_err(|e| error_response(StatusCode::BAD_REQUEST, Value::Null, -32700, &format!("parse error: {e}")))?;
    let Value::Object(object) = message else {
        let what = if message.is_array() { "batches are not supported" } else { "not a JSON-RPC message" };
        return Err(error_response(StatusCode::BAD_REQUEST, Value::Null, -32600, &format!("invalid request: {what}")));
    };
    let is_message = object.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && (object.get("method").is_some_and(Value::is_string)
            || object.contains_key("result")
            || object.contains_key("error"));
    if !is_message {
        let id = object.get("id").cloned().unwrap_or(Value::Null);
        return Err(error_response(StatusCode::BAD_REQUEST, id, -32600, "invalid request: not a JSON-RPC 2.0 message"));
    }
    typed(&bytes, &object).map_err(|response| *response)?;
    Ok((bytes, object))
}

/// `bytes` as rmcp reads a POSTed body (`serde_json::from_slice` into a `ClientJsonRpcMessage`, which refuses a
/// fractional id and a key given twice), or -32600 saying why; the error's id is the request's when it is one a
/// JSON-RPC id can be (a string or an integer), else null.
pub fn typed(bytes: &[u8], object: &Map<String, Value>) -> Result<ClientJsonRpcMessage, Box<Response>> {
    serde_json::from_slice(bytes).map_err(|error| {
        let id = object.get("id").filter(|id| id.is_string() || id.is_i64() || id.is_u64()).cloned();
        let message = format!("invalid request: {error}");
        Box::new(error_response(StatusCode::BAD_REQUEST, id.unwrap_or(Value::Null), -32600, &message))
    })
}
