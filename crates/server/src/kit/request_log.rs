//! One log line per HTTP request, with a request id, from tower-http's layers: `SetRequestIdLayer` gives every
//! request an `x-request-id` (a UUID, or the caller's own when it is a short token), `TraceLayer` opens a `request`
//! span carrying `method`, `path` (never the query, which may hold a signature) and `request_id`, and logs `request`
//! with `status` and `duration_ms` in it once the response is ready; `PropagateRequestIdLayer` returns the id in the
//! response's `x-request-id`. Credentials and bodies are never logged.
//!
//! The span is also put in the request's extensions ([`RequestSpan`]): work the request starts elsewhere (a tool
//! call, which rmcp runs in its own task) is instrumented with it, so a run's lines carry the request's id.
//!
//! What a caller sent is logged through [`Escaped`], here and in every surface: tracing's text format writes a `%`
//! field as it is, so a newline in it would start a forged log line. hyper and the id check below already keep
//! control characters out of the method, the path and the id; the escape keeps the line whole without relying on
//! them.

use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Response};
use sandlot_core::Escaped;
use tower::ServiceBuilder;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

/// The header of the request id.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// The longest request id taken from a caller; a longer one, or one with other characters than letters, digits
/// and `-_.:`, is replaced by a fresh UUID (ids end up in every line of the request).
const MAX_CALLER_ID: usize = 64;

/// The span of the HTTP request that made this one (in a request's extensions).
#[derive(Debug, Clone)]
pub struct RequestSpan(pub tracing::Span);

/// `router` behind the request-id, trace and propagation layers (outermost first: the id is set before the span
/// opens, and the span is current when the request is marked with it).
pub fn around(router: Router) -> Router {
    let trace = TraceLayer::new_for_http()
        .make_span_with(span)
        .on_request(())
        .on_response(log)
        .on_body_chunk(())
        .on_eos(())
        .on_failure(());
    router.layer(
        ServiceBuilder::new()
            .layer(axum::middleware::map_request(drop_unusable_id))
            .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
            .layer(trace)
            .layer(PropagateRequestIdLayer::new(REQUEST_ID))
            .layer(axum::middleware::map_request(remember_span)),
    )
}

fn usable(id: &HeaderValue) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_CALLER_ID
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Removes a caller's request id that is too long or has odd characters, so a fresh one is made.
async fn drop_unusable_id(mut request: Request) -> Request {
    if request.headers().get(&REQUEST_ID).is_some_and(|id| !usable(id)) {
        request.headers_mut().remove(&REQUEST_ID);
    }
    request
}

fn span<B>(request: &axum::http::Request<B>) -> tracing::Span {
    let id = request.headers().get(&REQUEST_ID).and_then(|id| id.to_str().ok()).unwrap_or_default();
    tracing::info_span!(
        "request",
        method = %Escaped(request.method().as_str()),
        path = %Escaped(request.uri().path()),
        request_id = %Escaped(id)
    )
}

fn log<B>(response: &Response<B>, latency: Duration, _span: &tracing::Span) {
    tracing::info!(status = response.status().as_u16(), duration_ms = latency.as_millis() as u64, "request");
}

async fn remember_span(mut request: Request) -> Request {
    request.extensions_mut().insert(RequestSpan(tracing::Span::current()));
    request
}
