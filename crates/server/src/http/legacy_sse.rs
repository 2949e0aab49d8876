//! The legacy HTTP+SSE transport of MCP 2024-11-05, which rmcp no longer ships, built on rmcp's sink/stream
//! transport: `GET /sse` opens a session and sends `event: endpoint` with the root-relative path
//! `/message?sessionId=<id>`; `POST /message?sessionId=<id>` answers 202 and the reply comes on the stream as
//! `event: message`. The same pair is served at `/mcp/sse` and `/mcp/message`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use rmcp::ServiceExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::sink_stream::SinkStreamTransport;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::PollSender;

use super::jsonrpc::{error_response, read_message};
use crate::mcp::SandlotMcp;

/// Messages buffered per direction and session.
const CHANNEL_CAPACITY: usize = 64;

/// The open legacy sessions: where to deliver a POSTed message.
#[derive(Clone)]
pub struct LegacySessions {
    handler: SandlotMcp,
    max_sessions: usize,
    shutdown: tokio_util::sync::CancellationToken,
    senders: Arc<Mutex<HashMap<String, mpsc::Sender<ClientJsonRpcMessage>>>>,
}

impl LegacySessions {
    /// No session yet; each will be served by a clone of `handler`.
    pub fn new(handler: SandlotMcp, shutdown: tokio_util::sync::CancellationToken, max_sessions: usize) -> Self {
        Self { handler, max_sessions, shutdown, senders: Arc::default() }
    }

    fn senders(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<ClientJsonRpcMessage>>> {
        self.senders.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Removes a session when its event stream is dropped (the client went away), cancelling its runs.
struct SessionGuard {
    id: String,
    sessions: LegacySessions,
    closed: tokio_util::sync::CancellationToken,
    /// Counts the session in `sandlot_mcp_sessions_open` while its stream lives.
    _open: crate::telemetry::GaugeGuard,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.closed.cancel();
        self.sessions.senders().remove(&self.id);
        tracing::debug!(session = self.id, "legacy SSE session closed");
    }
}

/// `GET /sse` and `GET /mcp/sse`: the message path is a sibling of the SSE path (under the same prefix).
pub async fn open(State(sessions): State<LegacySessions>, request: Request) -> Response {
    let path = request.uri().path();
    let sibling = match path.trim_end_matches('/') {
        "/mcp/sse" => "/mcp/message",
        _ => "/message",
    };
    // Under a prefix (`/p/sandlot` when another profile has the root), the message path keeps it.
    let original = request.extensions().get::<axum::extract::OriginalUri>().map(|uri| uri.path());
    let prefix = original.and_then(|original| original.strip_suffix(path)).unwrap_or("");
    let message_path = format!("{prefix}{sibling}");
    if sessions.senders().len() >= sessions.max_sessions {
        let message = format!("too many open SSE sessions (at most {}); retry later", sessions.max_sessions);
        return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    }
    let id = uuid::Uuid::new_v4().to_string();
    let (to_server, from_client) = mpsc::channel::<ClientJsonRpcMessage>(CHANNEL_CAPACITY);
    let (to_client, from_server) = mpsc::channel::<ServerJsonRpcMessage>(CHANNEL_CAPACITY);
    sessions.senders().insert(id.clone(), to_server);
    let caller = request.extensions().get::<super::Caller>().map_or_else(|| "anonymous".into(), |c| c.0.clone());
    let closed = tokio_util::sync::CancellationToken::new();
    let handler = sessions.handler.for_caller(caller).ending_with(closed.clone());
    let session = id.clone();
    tokio::spawn(async move {
        let transport = SinkStreamTransport::new(PollSender::new(to_client), ReceiverStream::new(from_client));
        match handler.serve(transport).await {
            Ok(service) => {
                let _ = service.waiting().await;
            }
            Err(e) => tracing::info!(session, "legacy SSE session ended before initialize: {e}"),
        }
    });
    let shutdown = sessions.shutdown.clone();
    let _open = crate::telemetry::session_opened("legacy_sse");
    let guard = SessionGuard { id: id.clone(), sessions, closed, _open };
    let endpoint = Event::default().event("endpoint").data(format!("{message_path}?sessionId={id}"));
    let messages = ReceiverStream::new(from_server).map(move |message| {
        let _alive = &guard; // the session lives as long as its stream
        let data = serde_json::to_string(&message).unwrap_or_default();
        Ok::<_, Infallible>(Event::default().event("message").data(data))
    });
    let stream: std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>> = Box::pin(
        futures::stream::once(async move { Ok(endpoint) }).chain(messages).take_until(shutdown.cancelled_owned()),
    );
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

/// `POST /message?sessionId=` (or `session_id`): hands the message to the session; the reply goes on its stream.
/// The message carries this POST's request parts, as rmcp's Streamable HTTP service does: the handler finds the
/// caller and the request's span (with its request id) there.
pub async fn post(
    State(sessions): State<LegacySessions>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let Some(id) = query.get("sessionId").or_else(|| query.get("session_id")) else {
        return (StatusCode::BAD_REQUEST, "missing sessionId").into_response();
    };
    let Some(sender) = sessions.senders().get(id).cloned() else {
        return (StatusCode::NOT_FOUND, "unknown or closed session").into_response();
    };
    let (_bytes, object) = match read_message(body).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let id_value = object.get("id").cloned().unwrap_or(Value::Null);
    let mut message: ClientJsonRpcMessage = match serde_json::from_value(Value::Object(object)) {
        Ok(message) => message,
        Err(e) => {
            return error_response(StatusCode::BAD_REQUEST, id_value, -32600, &format!("invalid request: {e}"));
        }
    };
    message.insert_extension(parts);
    if sender.send(message).await.is_err() {
        return (StatusCode::NOT_FOUND, "session closed").into_response();
    }
    StatusCode::ACCEPTED.into_response()
}
