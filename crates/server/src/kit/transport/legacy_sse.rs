//! The legacy HTTP+SSE transport of MCP 2024-11-05, which rmcp no longer ships, built on rmcp's sink/stream
//! transport: `GET /sse` opens a session and sends `event: endpoint` with the root-relative path
//! `/message?sessionId=<id>`; `POST /message?sessionId=<id>` answers 202 and the reply comes on the stream as
//! `event: message`. The same pair is served at `/mcp/sse` and `/mcp/message`.
//!
//! Generic over the rmcp handler ([`SessionFactory`] makes one per session from the opening request), so a profile
//! serves its own handler under its prefix (the endpoint event then says `<prefix>/message?sessionId=`), with the
//! answers to bad POSTs of its product ([`Style`]).
//!
//! What a session's stream has not sent yet is bounded in bytes ([`super::sse_outbox`]): a client that never reads
//! its stream has the session closed, and its later POSTs are answered that it was closed for not draining.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use rmcp::ServiceExt;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::sink_stream::SinkStreamTransport;
use sandlot_core::Escaped;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::sse_outbox::{MAX_QUEUED_BYTES, Outbox};
use crate::kit::jsonrpc::{error_response, read_message, typed};

/// Makes the rmcp handler of one legacy session from the request that opened it (its caller is in the request's
/// extensions), ending the session's work when `closed` is cancelled. An `Err` is answered instead of a stream.
pub trait SessionFactory: Clone + Send + Sync + 'static {
    type Handler: rmcp::ServerHandler;
    fn for_session(
        &self,
        request: &Request,
        closed: tokio_util::sync::CancellationToken,
    ) -> Result<Self::Handler, Box<Response>>;
}

/// How the transport answers what is not a good POST, and whether it sends keep-alives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// sandlot's own: 400/404 with a plain-text reason, keep-alive comments every 15 s.
    Sandlot,
    /// mcp-go's `SSEServer` (codegen-sandbox, `docs/profiles.md#codegen-sandbox-transport-workspace-and-file-tools`):
    /// every refusal is 400 with a JSON-RPC error (-32602 "Missing sessionId" / "Invalid session ID", -32700, -32600
    /// for a method other than POST), `Access-Control-Allow-Origin: *` on the stream, no keep-alives.
    McpGo,
}

/// Where a session's POSTed messages go, and the tenant that opened it.
type Inbox = (mpsc::Sender<ClientJsonRpcMessage>, String);

/// Messages buffered from the client's POSTs to its session.
const CHANNEL_CAPACITY: usize = 64;

/// How many sessions closed for not draining are remembered, to answer their POSTs with why.
const REMEMBERED_NOT_DRAINING: usize = 1024;

/// The open legacy sessions: where to deliver a POSTed message.
#[derive(Clone)]
pub struct LegacySessions<F: SessionFactory> {
    handler: F,
    style: Style,
    max_sessions: usize,
    shutdown: tokio_util::sync::CancellationToken,
    /// Each session's inbox, and the tenant that opened it (only it may post there).
    senders: Arc<Mutex<HashMap<String, Inbox>>>,
    /// The latest sessions closed because their stream did not drain, with their tenant.
    not_draining: Arc<Mutex<std::collections::VecDeque<(String, String)>>>,
}

impl<F: SessionFactory> LegacySessions<F> {
    /// No session yet; each will be served by a handler `handler` makes.
    pub fn new(handler: F, shutdown: tokio_util::sync::CancellationToken, max_sessions: usize) -> Self {
        let (senders, not_draining) = (Arc::default(), Arc::default());
        Self { handler, style: Style::Sandlot, max_sessions, shutdown, senders, not_draining }
    }

    /// The same sessions answering in `style`.
    pub fn with_style(self, style: Style) -> Self {
        Self { style, ..self }
    }

    fn senders(&self) -> std::sync::MutexGuard<'_, HashMap<String, Inbox>> {
        self.senders.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn not_draining(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<(String, String)>> {
        self.not_draining.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Forgets the session `id`, closed because its stream did not drain, and remembers why for its POSTs.
    fn close_not_draining(&self, id: &str) {
        let Some((_, tenant)) = self.senders().remove(id) else { return };
        tracing::warn!(session = id, "legacy SSE session closed: its stream did not drain");
        let mut remembered = self.not_draining();
        if remembered.len() == REMEMBERED_NOT_DRAINING {
            remembered.pop_front();
        }
        remembered.push_back((id.to_owned(), tenant));
    }

    /// Whether `tenant`'s session `id` was closed because its stream did not drain.
    fn was_not_draining(&self, id: &str, tenant: &str) -> bool {
        self.not_draining().iter().any(|(closed, owner)| closed == id && owner == tenant)
    }
}

/// Removes a session when its event stream is dropped (the client went away), cancelling its runs.
struct SessionGuard<F: SessionFactory> {
    id: String,
    sessions: LegacySessions<F>,
    closed: tokio_util::sync::CancellationToken,
    /// Counts the session in `sandlot_mcp_sessions_open` while its stream lives.
    _open: crate::kit::telemetry::GaugeGuard,
}

impl<F: SessionFactory> Drop for SessionGuard<F> {
    fn drop(&mut self) {
        self.closed.cancel();
        self.sessions.senders().remove(&self.id);
        tracing::debug!(session = self.id, "legacy SSE session closed");
    }
}

/// `GET /sse` and `GET /mcp/sse`: the message path is a sibling of the SSE path (under the same prefix).
pub async fn open<F: SessionFactory>(State(sessions): State<LegacySessions<F>>, request: Request) -> Response {
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
    let closed = tokio_util::sync::CancellationToken::new();
    let handler = match sessions.handler.for_session(&request, closed.clone()) {
        Ok(handler) => handler,
        Err(response) => return *response,
    };
    let id = uuid::Uuid::new_v4().to_string();
    let (to_server, from_client) = mpsc::channel::<ClientJsonRpcMessage>(CHANNEL_CAPACITY);
    let outbox = Outbox::default();
    sessions.senders().insert(id.clone(), (to_server, crate::kit::Caller::of(request.extensions()).name));
    let (watched, not_draining, session_closed) = (sessions.clone(), outbox.not_draining(), closed.clone());
    let session = id.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = not_draining.cancelled() => {
                watched.close_not_draining(&session);
                session_closed.cancel();
            }
            () = session_closed.cancelled() => {}
        }
    });
    let session = id.clone();
    let sink = outbox.sink();
    tokio::spawn(async move {
        let transport = SinkStreamTransport::new(sink, ReceiverStream::new(from_client));
        match handler.serve(transport).await {
            Ok(service) => {
                let _ = service.waiting().await;
            }
            // The error may quote what the client sent (a method it made up).
            Err(e) => {
                tracing::info!(session, "legacy SSE session ended before initialize: {}", Escaped(&e.to_string()))
            }
        }
    });
    let shutdown = sessions.shutdown.clone();
    let style = sessions.style;
    let _open = crate::kit::telemetry::session_opened("legacy_sse");
    let guard = SessionGuard { id: id.clone(), sessions, closed, _open };
    let endpoint = Event::default().event("endpoint").data(format!("{message_path}?sessionId={id}"));
    let queued = futures::stream::unfold(outbox, |outbox| async move { Some((outbox.next().await?, outbox)) });
    let messages = queued.map(move |data| {
        let _alive = &guard; // the session lives as long as its stream
        Ok::<_, Infallible>(Event::default().event("message").data(data))
    });
    let stream: std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>> = Box::pin(
        futures::stream::once(async move { Ok(endpoint) }).chain(messages).take_until(shutdown.cancelled_owned()),
    );
    match style {
        Style::Sandlot => {
            Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
        }
        Style::McpGo => {
            let mut response = Sse::new(stream).into_response();
            response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
            response
        }
    }
}

/// `POST /message?sessionId=` (or `session_id`): hands the message to the session; the reply goes on its stream.
/// The message carries this POST's request parts, as rmcp's Streamable HTTP service does: the handler finds the
/// caller and the request's span (with its request id) there.
pub async fn post<F: SessionFactory>(
    State(sessions): State<LegacySessions<F>>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let mcp_go = sessions.style == Style::McpGo;
    let refuse = |status: StatusCode, code: i64, go_message: &str, message: &'static str| {
        if mcp_go {
            error_response(StatusCode::BAD_REQUEST, Value::Null, code, go_message)
        } else {
            (status, message).into_response()
        }
    };
    if request.method() != Method::POST {
        return refuse(StatusCode::METHOD_NOT_ALLOWED, -32600, "Method not allowed", "use POST");
    }
    let (parts, body) = request.into_parts();
    let Some(id) = query.get("sessionId").or_else(|| query.get("session_id")) else {
        return refuse(StatusCode::BAD_REQUEST, -32602, "Missing sessionId", "missing sessionId");
    };
    // Another tenant's session is answered exactly as one that does not exist.
    let tenant = crate::kit::Caller::of(&parts.extensions).name;
    let Some(sender) =
        sessions.senders().get(id).filter(|(_, owner)| *owner == tenant).map(|(sender, _)| sender.clone())
    else {
        if sessions.was_not_draining(id, &tenant) {
            let message = format!(
                "session closed: its event stream did not drain (more than {MAX_QUEUED_BYTES} bytes of answers were \
                 waiting unread); open a new one"
            );
            return match mcp_go {
                true => error_response(StatusCode::BAD_REQUEST, Value::Null, -32602, &message),
                false => (StatusCode::GONE, message).into_response(),
            };
        }
        return refuse(StatusCode::NOT_FOUND, -32602, "Invalid session ID", "unknown or closed session");
    };
    let (bytes, object) = match read_message(body).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let mut message = match typed(&bytes, &object) {
        Ok(message) => message,
        Err(response) => return *response,
    };
    message.insert_extension(parts);
    if sender.send(message).await.is_err() {
        return refuse(StatusCode::NOT_FOUND, -32602, "Invalid session ID", "session closed");
    }
    StatusCode::ACCEPTED.into_response()
}
