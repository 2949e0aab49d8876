//! open-sandbox's HTTP transports, relative to the profile's base
//! (`docs/profiles.md#open-sandbox-transports-and-errors`), all stateless:
//! - `POST /mcp`: one request; the answer as JSON, or as one `event: message` SSE frame when `Accept` names
//!   `text/event-stream`; 202 with an empty body for a notification; other HTTP methods 405 with an app error.
//! - `GET /mcp/sse?request=<urlencoded JSON-RPC>`: one request, answered as one SSE frame.
//! - `POST /mcp/stream`: NDJSON (`application/x-ndjson`, `application/jsonl`, ...) in and out, one answer line per
//!   request line, each written as soon as it is ready; another content type is one request answered as JSON.
//!
//! Every request presents sandlot's bearer credential (the static token, or a JWT in JWT mode); a refusal is not an
//! HTTP 401 but, as the product's clients expect, HTTP 200 with a -32001 unified error for each request.

use std::collections::HashMap;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::dispatch::{Identity, Session, dispatch_text};
use super::errors::{Kind, RpcError, new_trace_id};
use crate::AppState;
use crate::kit::{Authenticator, Refusal};

/// The largest request (a body, or one NDJSON line).
const MAX_REQUEST_BYTES: usize = crate::kit::jsonrpc::MAX_BODY_BYTES;

#[derive(Clone)]
struct Served {
    app: AppState,
    auth: Authenticator,
}

/// The routes of the profile's HTTP transports.
pub fn router(app: AppState, auth: Authenticator) -> Router {
    Router::new()
        .route("/mcp", post(post_mcp).fallback(method_not_allowed))
        .route("/mcp/sse", get(one_shot))
        .route("/mcp/stream", post(stream))
        .with_state(Served { app, auth })
}

impl Served {
    /// The session of one HTTP request; its token is cancelled when the request's future is dropped.
    fn session(&self, request: &axum::http::request::Parts) -> (Session, tokio_util::sync::DropGuard) {
        let identity = match self.auth.authenticate(&request.headers, &request.extensions) {
            Ok(caller) => {
                crate::kit::InFlightSlot::of(&request.extensions).admit();
                Identity::of(caller.tenant())
            }
            Err(Refusal::Unauthorized(message)) => Err(message),
            Err(Refusal::TooMany(retry)) => {
                Err(format!("too many wrong credentials from this address; retry in {retry} s"))
            }
        };
        let cancel = self.app.shutdown.child_token();
        let guard = cancel.clone().drop_guard();
        (Session { app: self.app.clone(), identity, cancel }, guard)
    }
}

fn json_response(answer: &Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], answer.to_string()).into_response()
}

fn sse_frame(answer: &Value) -> Response {
    let frame = format!("event: message\ndata: {answer}\n\n");
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], frame).into_response()
}

fn accepts_sse(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|v| v.to_str().is_ok_and(|v| v.contains("text/event-stream")))
}

async fn read_body(body: Body) -> Result<Bytes, Value> {
    axum::body::to_bytes(body, MAX_REQUEST_BYTES).await.map_err(|error| {
        let why = match crate::kit::BodyError::of(&error) {
            crate::kit::BodyError::TooLarge => format!("at most {MAX_REQUEST_BYTES} bytes"),
            crate::kit::BodyError::TooSlow(why) | crate::kit::BodyError::Broken(why) => why,
        };
        RpcError::new(Kind::InvalidRequest, format!("unreadable body ({why})")).response(Value::Null)
    })
}

/// The answer to one request body, or `None` for a notification.
async fn answer_body(served: &Served, request: Request) -> Option<Value> {
    let (parts, body) = request.into_parts();
    let (session, _guard) = served.session(&parts);
    let bytes = match read_body(body).await {
        Ok(bytes) => bytes,
        Err(answer) => return Some(answer),
    };
    dispatch_text(&session, &String::from_utf8_lossy(&bytes)).await
}

async fn post_mcp(State(served): State<Served>, request: Request) -> Response {
    let sse = accepts_sse(request.headers());
    match answer_body(&served, request).await {
        None => StatusCode::ACCEPTED.into_response(),
        Some(answer) if sse => sse_frame(&answer),
        Some(answer) => json_response(&answer),
    }
}

async fn method_not_allowed(method: Method) -> Response {
    let trace_id = new_trace_id();
    let message = format!("method {method} not allowed on /mcp");
    tracing::info!(trace_id, message, "open-sandbox request refused");
    let body = json!({ "code": "method_not_allowed", "message": message, "trace_id": trace_id });
    let mut response = (StatusCode::METHOD_NOT_ALLOWED, axum::Json(body)).into_response();
    response.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("POST"));
    response
}

async fn one_shot(
    State(served): State<Served>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let (parts, _body) = request.into_parts();
    let (session, _guard) = served.session(&parts);
    let answer = match query.get("request") {
        None => Some(RpcError::new(Kind::InvalidRequest, "missing request").response(Value::Null)),
        Some(text) => dispatch_text(&session, text).await,
    };
    match answer {
        None => StatusCode::ACCEPTED.into_response(),
        Some(answer) => sse_frame(&answer),
    }
}

fn is_ndjson(headers: &HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        let essence = v.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        matches!(
            essence.as_str(),
            "application/x-ndjson" | "application/ndjson" | "application/jsonl" | "application/x-jsonlines"
        )
    })
}

async fn stream(State(served): State<Served>, request: Request) -> Response {
    if !is_ndjson(request.headers()) {
        return match answer_body(&served, request).await {
            None => StatusCode::ACCEPTED.into_response(),
            Some(answer) => json_response(&answer),
        };
    }
    let (parts, body) = request.into_parts();
    let (session, guard) = served.session(&parts);
    if let (Ok(_), Some(pace)) = (&session.identity, crate::kit::BodyPace::of(&parts.extensions)) {
        pace.exempt(); // a stream of requests over time: it may idle between them
    }
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        // Lives as long as the answers are wanted: a client that goes away cancels the runs of its requests.
        let _guard = guard;
        let cancel: CancellationToken = session.cancel.clone();
        let mut body = body.into_data_stream();
        let mut pending: Vec<u8> = Vec::new();
        let mut finished = false;
        while !finished {
            let line = match pending.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    line
                }
                None if pending.len() > MAX_REQUEST_BYTES => {
                    let error =
                        RpcError::new(Kind::InvalidRequest, format!("request line over {MAX_REQUEST_BYTES} bytes"));
                    let _ = sender.send(Ok(Bytes::from(format!("{}\n", error.response(Value::Null))))).await;
                    break;
                }
                None => match tokio::select! { chunk = body.next() => chunk, () = cancel.cancelled() => None } {
                    Some(Ok(chunk)) => {
                        pending.extend_from_slice(&chunk);
                        continue;
                    }
                    Some(Err(_)) | None => {
                        finished = true;
                        std::mem::take(&mut pending)
                    }
                },
            };
            let text = String::from_utf8_lossy(&line);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let Some(answer) = dispatch_text(&session, text).await else {
                continue;
            };
            if sender.send(Ok(Bytes::from(format!("{answer}\n")))).await.is_err() {
                break;
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(receiver));
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}
