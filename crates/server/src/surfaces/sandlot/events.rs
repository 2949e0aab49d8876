//! `GET /mcp/events[?conversationId=]`: a Server-Sent Events stream of JSON-RPC notifications about runs
//! (`notifications/sandlot/run_started`, `notifications/sandlot/run_finished`), optionally for one conversation, with
//! a heartbeat comment every 15 s. A listener too slow to keep up loses the oldest events, never slows runs down.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio_stream::wrappers::BroadcastStream;

use crate::AppState;

/// Streams run events as they happen.
pub async fn stream(State(state): State<AppState>, Query(query): Query<HashMap<String, String>>) -> Response {
    let conversation = query.get("conversationId").cloned();
    let open = crate::kit::telemetry::event_stream_opened(); // counted until the stream is dropped
    let events = BroadcastStream::new(state.engine.subscribe()).filter_map(move |event| {
        let _open = &open;
        let conversation = conversation.clone();
        async move {
            let event = event.ok()?; // a lagging listener skips what it missed
            if conversation.as_deref().is_some_and(|c| c != event.conversation_id()) {
                return None;
            }
            let notification = serde_json::json!({ "jsonrpc": "2.0", "method": event.method(), "params": event });
            Some(Ok::<_, Infallible>(Event::default().event("message").data(notification.to_string())))
        }
    });
    let events = events.take_until(state.shutdown.clone().cancelled_owned());
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)).text("heartbeat")).into_response()
}
