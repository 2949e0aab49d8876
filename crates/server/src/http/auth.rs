//! Bearer-token authentication for `/mcp`: `Authorization: Bearer <MCP_API_TOKEN>`, compared in constant time.
//! A missing or wrong token gets 401 with `{"error":"unauthorized","message":...}`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// The token every protected request must present.
#[derive(Clone)]
pub struct BearerToken(Arc<String>);

impl BearerToken {
    /// A token; it must not be empty.
    pub fn new(token: impl Into<String>) -> Self {
        Self(Arc::new(token.into()))
    }

    fn matches(&self, presented: &str) -> bool {
        presented.as_bytes().ct_eq(self.0.as_bytes()).into()
    }
}

fn unauthorized(message: &str) -> Response {
    let body = serde_json::json!({ "error": "unauthorized", "message": message });
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Lets the request through only with the right bearer token.
pub async fn require_bearer(State(token): State<BearerToken>, request: Request, next: Next) -> Response {
    let Some(value) = request.headers().get(header::AUTHORIZATION) else {
        return unauthorized("missing Authorization header (expected: Bearer <token>)");
    };
    let presented = value.to_str().ok().and_then(|v| {
        let (scheme, token) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    });
    match presented {
        Some(presented) if token.matches(presented) => next.run(request).await,
        Some(_) => unauthorized("invalid bearer token"),
        None => unauthorized("Authorization must be: Bearer <token>"),
    }
}
