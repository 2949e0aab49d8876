//! The JSON body of an HTTP error outside JSON-RPC: `{"error": <kind>, "message": <what was wrong>}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// `status` with `{"error": kind, "message": message}`.
pub fn rest_error(status: StatusCode, kind: &str, message: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": kind, "message": message }))).into_response()
}
