//! `GET /mcp/events[?conversationId=]`: a Server-Sent Events stream of JSON-RPC notifications about runs
//! (`notifications/sandlot/run_started`, `notifications/sandlot/run_finished`), optionally for one conversation, with
//! a heartbeat comment every 15 s. A listener too slow to keep up loses the oldest events, never slows runs down.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Extension, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio_stream::wrappers::BroadcastStream;

use sandlot_core::{ConversationId, Engine, Tenant};

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
    let visible = Arc::new(Visible::new(caller.tenant(), state.engine.clone()));
    let events = BroadcastStream::new(state.engine.subscribe()).filter_map(move |event| {
        let _open = &open;
        let conversation = conversation.clone();
        let visible = visible.clone();
        async move {
            let event = event.ok()?; // a lagging listener skips what it missed
            if conversation.as_deref().is_some_and(|c| c != event.conversation_id()) {
                return None;
            }
            if !visible.allows(event.conversation_id()) {
                return None;
            }
            let notification = serde_json::json!({ "jsonrpc": "2.0", "method": event.method(), "params": event });
            Some(Ok::<_, Infallible>(Event::default().event("message").data(notification.to_string())))
        }
    });
    let events = events.take_until(state.shutdown.clone().cancelled_owned());
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)).text("heartbeat")).into_response()
}

/// Which conversations' events a tenant sees: those it owns (an administrator: all). A conversation's owner is read
/// once per stream; it is set at the conversation's first use, before any of its runs starts.
pub(super) struct Visible {
    tenant: Tenant,
    engine: Arc<Engine>,
    known: Mutex<HashMap<String, bool>>,
}

impl Visible {
    pub(super) fn new(tenant: Tenant, engine: Arc<Engine>) -> Self {
        Self { tenant, engine, known: Mutex::default() }
    }

    pub(super) fn allows(&self, conversation: &str) -> bool {
        if self.tenant.is_admin() {
            return true;
        }
        let mut known = self.known.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(allowed) = known.get(conversation) {
            return *allowed;
        }
        let owner = ConversationId::parse(conversation).ok().and_then(|id| self.engine.owner_of(&id).ok().flatten());
        let allowed = owner.is_some_and(|owner| owner == self.tenant.name());
        if known.len() < 4096 {
            known.insert(conversation.to_owned(), allowed);
        }
        allowed
    }
}
