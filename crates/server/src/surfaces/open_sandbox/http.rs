//! open-sandbox's HTTP transports, relative to the profile's base
//! (`docs/profiles.md#open-sandbox-transports-and-errors`), all stateless:
//! - `POST /mcp`: one request; the answer as JSON, or as one `event: message` SSE frame when `Accept` names
//!   `text/event-stream`; 202 with an empty body for a notification; other HTTP methods 405 with an app error.
//! - `GET /mcp/sse?request=<urlencoded JSON-RPC>`: one request, answered as one SSE frame.
//! - `POST /mcp/stream`: NDJSON (`application/x-ndjson`, `application/jsonl`, ...) in and out, one answer line per
//!   request line, each written as soon as it is ready; another content type is one request answered as JSON.
//!
//! Every request presents sandlot's bearer credential (a static token, or a JWT in JWT mode), checked by the kit's
//! gate from the headers before the body is read. A refusal is not an HTTP 401 but, as the product's clients
//! expect, HTTP 200 with a -32001 unified error ([`refuse`]): one answer with id `null` (the body, and so the
//! request's id, is never read) in the shape the transport answers in (JSON, an SSE frame, one NDJSON line), and
//! the connection closes. The NDJSON stream is a stream for the gate: capped per caller, its body exempt from the
//! body pace, and ended when the credential expires.

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
use crate::kit::{Caller, Denial, Gate, Opens, Refusal};

/// The largest request (a body, or one NDJSON line).
const MAX_REQUEST_BYTES: usize = crate::kit::jsonrpc::MAX_BODY_BYTES;

#[derive(Clone)]
struct Served {
    app: AppState,
}

/// The routes of the profile's HTTP transports, behind `gate` (other methods on `/mcp` get their 405 without it).
pub fn router(app: AppState, gate: &Gate) -> Router {
    let gate = gate.rendering(refuse).opening(opens);
    Router::new()
        .route("/mcp", post(post_mcp).fallback(method_not_allowed))
        .route("/mcp/sse", get(one_shot))
        .route("/mcp/stream", post(stream))
        .with_state(Served { app })
        .route_layer(axum::middleware::from_fn_with_state(gate, crate::kit::require_bearer))
}

/// The NDJSON stream is a stream of requests over time; every other request is one exchange.
fn opens(request: &Request) -> Opens {
    if request.uri().path().ends_with("/mcp/stream") && is_ndjson(request.headers()) {
        Opens::DuplexStream
    } else {
        Opens::Exchange
    }
}

/// The gate's refusal of a credential as the product's clients expect it: HTTP 200 with one -32001 unified error
/// (id `null`: the body is unread) in the transport's shape. Too many streams is the kit's 429.
fn refuse(denial: &Denial, request: &Request) -> Response {
    let message = match denial {
        Denial::Credential(Refusal::Unauthorized(message)) => message.clone(),
        Denial::Credential(Refusal::TooMany(retry)) => {
            format!("too many wrong credentials from this address; retry in {retry} s")
        }
        Denial::TooManyStreams { .. } => return crate::kit::render_denial(denial, request),
    };
    let answer = RpcError::new(Kind::Unauthorized, message).response(Value::Null);
    let path = request.uri().path();
    if path.ends_with("/mcp/stream") {
        if is_ndjson(request.headers()) {
            let line = format!("{answer}\n");
            return ([(header::CONTENT_TYPE, "application/x-ndjson")], line).into_response();
        }
        return json_response(&answer);
    }
    if path.ends_with("/mcp/sse") || accepts_sse(request.headers()) {
        sse_frame(&answer)
    } else {
        json_response(&answer)
    }
}

impl Served {
    /// The session of one HTTP request (its caller, whom the gate let in); its token is cancelled when the request's
    /// future is dropped.
    fn session(&self, request: &axum::http::request::Parts) -> (Session, tokio_util::sync::DropGuard) {
        let identity = match request.extensions.get::<Caller>() {
            Some(caller) => Identity::of(caller.tenant()),
            None => Err("missing credential".to_owned()),
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
    // The credential's expiry ends the stream: no request is read after it, and the runs of those in progress are
    // cancelled (the gate ends the response then too).
    let expiry = parts.extensions.get::<Caller>().and_then(crate::kit::expiry_of);
    let cancel: CancellationToken = session.cancel.clone();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            tokio::select! {
                () = crate::kit::expired(expiry) => cancel.cancel(),
                () = cancel.cancelled() => {}
            }
        }
    });
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        // Lives as long as the answers are wanted: a client that goes away cancels the runs of its requests.
        let _guard = guard;
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
                None => match tokio::select! { chunk = body.next() => Some(chunk), () = cancel.cancelled() => None } {
                    Some(Some(Ok(chunk))) => {
                        pending.extend_from_slice(&chunk);
                        continue;
                    }
                    // The end of the body: its last line may lack its newline.
                    Some(Some(Err(_)) | None) => {
                        finished = true;
                        std::mem::take(&mut pending)
                    }
                    // Shutdown, or the credential expired: nothing more is read or answered.
                    None => break,
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
