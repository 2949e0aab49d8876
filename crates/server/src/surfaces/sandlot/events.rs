//! `GET /mcp/events[?conversationId=]`: a Server-Sent Events stream of JSON-RPC notifications about runs
//! (`notifications/sandlot/run_started`, `notifications/sandlot/run_finished`), optionally for one conversation, with
//! a heartbeat comment every 15 s. A listener too slow to keep up loses the oldest events, never slows runs down.
//! With a shared (PostgreSQL) history it hears every node's runs, relayed; a tenant hears those its name owns.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio_stream::wrappers::BroadcastStream;

use sandlot_core::{OwnedEvent, Tenant};

use crate::AppState;
use crate::kit::Caller;

/// Streams run events as they happen.
pub async fn stream(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let conversation = query.get("conversationId").cloned();
    let open = crate::kit::telemetry::event_stream_opened(); // counted until the stream is dropped
    let tenant = caller.tenant();
    let events = BroadcastStream::new(state.engine.subscribe_owned()).filter_map(move |owned| {
        let _open = &open;
        let conversation = conversation.clone();
        let heard = owned.as_ref().is_ok_and(|owned| hears(&tenant, owned));
        async move {
            let event = owned.ok()?.event; // a lagging listener skips what it missed
            if conversation.as_deref().is_some_and(|c| c != event.conversation_id()) || !heard {
                return None;
            }
            let notification = serde_json::json!({ "jsonrpc": "2.0", "method": event.method(), "params": event });
            Some(Ok::<_, Infallible>(Event::default().event("message").data(notification.to_string())))
        }
    });
    let events = events.take_until(state.shutdown.clone().cancelled_owned());
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)).text("heartbeat")).into_response()
}

/// Whether `tenant` hears `event`: one of a conversation its name owns (an administrator hears all).
pub(super) fn hears(tenant: &Tenant, event: &OwnedEvent) -> bool {
    tenant.is_admin() || event.owner.as_deref() == Some(tenant.name())
}
