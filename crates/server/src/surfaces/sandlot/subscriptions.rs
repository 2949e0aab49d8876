//! `subscriptions/listen` (protocol 2026-07-28): the run events `GET /mcp/events` carries, for clients of the
//! revision that has no GET stream.
//!
//! A client subscribes to resources: `sandlot://runs` (every run it may see) or `sandlot://runs/{runId}` (one run),
//! and gets `notifications/resources/updated` for that URI on each of the run's events (start, output, end), with
//! the event itself in `_meta["sandlot/runEvent"]` as `/mcp/events` sends it (`{"method", "params"}`).
//! `resourcesListChanged` is sent when a run starts (the run history, listed by `resources/list`, has one more).
//! Other URIs and notification types are left out of the acknowledgment, as the revision asks. A tenant hears of its
//! own conversations' runs only (an administrator, of all); with a shared (PostgreSQL) history, those of every node
//! (relayed between the nodes). A listener too slow to keep up loses the oldest events; runs never wait for it.
//!
//! Sessions of the earlier revisions get the same updates with `resources/subscribe` (the capability both share),
//! on the session's stream, until `resources/unsubscribe` or the session's end ([`LegacySubscriptions`]).

use rmcp::model::{
    MetaObject, NotificationMetaObject, ResourceUpdatedNotification, ResourceUpdatedNotificationParam,
    ServerNotification, SubscriptionFilter,
};
use rmcp::service::{Peer, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer};
use sandlot_core::RunEvent;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::events::hears;
use crate::AppState;
use crate::kit::Caller;

/// The URI of every run's events.
pub const ALL_RUNS: &str = "sandlot://runs";
/// The `_meta` key of the run event an update is about.
pub const EVENT_META: &str = "sandlot/runEvent";

/// Most `resources/subscribe` URIs one session holds at once.
const MAX_LEGACY_SUBSCRIPTIONS: usize = 32;

/// What of `requested` sandlot honours: run URIs and the resource list's changes.
pub fn accepted(requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
    let uris: Vec<String> =
        requested.resource_subscriptions.iter().flatten().filter(|uri| is_run_uri(uri)).cloned().collect();
    let mut accepted = SubscriptionFilter::new();
    if requested.resources_list_changed == Some(true) {
        accepted.resources_list_changed = Some(true);
    }
    if !uris.is_empty() {
        accepted.resource_subscriptions = Some(uris);
    }
    Some(accepted)
}

/// Whether `uri` names runs sandlot sends updates of.
fn is_run_uri(uri: &str) -> bool {
    uri == ALL_RUNS || run_of(uri).is_some()
}

/// The run id of a `sandlot://runs/{runId}` URI.
fn run_of(uri: &str) -> Option<&str> {
    let id = uri.strip_prefix("sandlot://runs/")?;
    (!id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric())).then_some(id)
}

/// Sends the caller's run events until the client closes the subscription or the server shuts down.
pub async fn listen(state: &AppState, caller: Caller, context: SubscriptionContext) {
    let accepted = context.accepted().clone();
    let uris = accepted.resource_subscriptions.clone().unwrap_or_default();
    let list_changed = accepted.resources_list_changed == Some(true);
    let ended = context.request_context().ct.clone();
    let sink = context.sink().clone();
    for_each_event(state, &caller, &ended, |event| {
        let (sink, uris) = (sink.clone(), uris.clone());
        async move {
            if list_changed && matches!(event, RunEvent::Started { .. }) {
                sink.notify_resource_list_changed().await.map_err(drop)?;
            }
            for uri in uris.iter().filter(|uri| concerns(uri, &event)) {
                sink.send(updated(uri, &event)).await.map_err(drop)?;
            }
            Ok(())
        }
    })
    .await;
}

/// Whether an update of `uri` is sent for `event`.
fn concerns(uri: &str, event: &RunEvent) -> bool {
    uri == ALL_RUNS || run_of(uri) == Some(event.run_id())
}

/// Calls `send` with each run event `caller` may see until `ended`, the server's shutdown, or a failed send.
async fn for_each_event<F, S>(state: &AppState, caller: &Caller, ended: &CancellationToken, mut send: S)
where
    S: FnMut(RunEvent) -> F,
    F: Future<Output = Result<(), ()>>,
{
    let tenant = caller.tenant();
    let mut events = state.engine.subscribe_owned();
    loop {
        let event = tokio::select! {
            () = ended.cancelled() => return,
            () = state.shutdown.cancelled() => return,
            event = events.recv() => event,
        };
        let owned = match event {
            Ok(owned) => owned,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        if hears(&tenant, &owned) && send(owned.event).await.is_err() {
            return;
        }
    }
}

/// A session's `resources/subscribe` URIs (protocol versions before 2026-07-28), each ended by its
/// `resources/unsubscribe` or by the session's end.
#[derive(Clone, Default)]
pub struct LegacySubscriptions(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, CancellationToken>>>);

impl LegacySubscriptions {
    fn table(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, CancellationToken>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts sending updates of `uri` to the session's `peer` until unsubscribed or `session_end`.
    pub fn subscribe(
        &self,
        state: &AppState,
        caller: Caller,
        uri: String,
        peer: Peer<RoleServer>,
        session_end: &CancellationToken,
    ) -> Result<(), McpError> {
        if !is_run_uri(&uri) {
            let message = format!("cannot subscribe to {uri}: only {ALL_RUNS} and {ALL_RUNS}/{{runId}} have updates");
            return Err(McpError::invalid_params(message, Some(serde_json::json!({ "uri": uri }))));
        }
        let ended = session_end.child_token();
        {
            let mut table = self.table();
            if table.contains_key(&uri) {
                return Ok(());
            }
            if table.len() >= MAX_LEGACY_SUBSCRIPTIONS {
                let message = format!("at most {MAX_LEGACY_SUBSCRIPTIONS} subscriptions per session");
                return Err(McpError::invalid_params(message, None));
            }
            table.insert(uri.clone(), ended.clone());
        }
        let (state, table) = (state.clone(), self.clone());
        tokio::spawn(async move {
            for_each_event(&state, &caller, &ended, |event| {
                let (peer, uri) = (peer.clone(), uri.clone());
                async move {
                    // A session that ended without a word (idle, its stream gone) ends its subscriptions at the next
                    // event of any run.
                    if peer.is_transport_closed() {
                        return Err(());
                    }
                    if !concerns(&uri, &event) {
                        return Ok(());
                    }
                    let ServerNotification::ResourceUpdatedNotification(notification) = updated(&uri, &event) else {
                        return Ok(());
                    };
                    peer.send_notification(ServerNotification::ResourceUpdatedNotification(notification))
                        .await
                        .map_err(drop)
                }
            })
            .await;
            table.table().remove(&uri);
        });
        Ok(())
    }

    /// Ends the updates of `uri`, if the session had them.
    pub fn unsubscribe(&self, uri: &str) {
        if let Some(ended) = self.table().remove(uri) {
            ended.cancel();
        }
    }
}

/// Whether `context` is a Streamable HTTP request outside a session, which has no stream to send updates on after
/// its response.
pub fn sessionless(context: &RequestContext<RoleServer>) -> bool {
    context.extensions.get::<axum::http::request::Parts>().is_some_and(|parts| {
        !parts.headers.contains_key("mcp-session-id") && parts.uri.path().trim_end_matches('/').ends_with("/mcp")
    })
}

/// `notifications/resources/updated` for `uri`, carrying `event`.
fn updated(uri: &str, event: &RunEvent) -> ServerNotification {
    let mut notification = ResourceUpdatedNotification::new(ResourceUpdatedNotificationParam::new(uri));
    let mut meta = rmcp::model::JsonObject::new();
    meta.insert(EVENT_META.to_owned(), serde_json::json!({ "method": event.method(), "params": event }));
    notification.extensions.insert(NotificationMetaObject(MetaObject(meta)));
    ServerNotification::ResourceUpdatedNotification(notification)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_run_uris_and_the_list_are_accepted() {
        let mut requested = SubscriptionFilter::new();
        requested.tools_list_changed = Some(true);
        requested.resources_list_changed = Some(true);
        requested.resource_subscriptions = Some(vec![
            ALL_RUNS.to_owned(),
            "sandlot://runs/0123abc".to_owned(),
            "sandlot://runs/../x".to_owned(),
            "file:///etc/passwd".to_owned(),
        ]);
        let accepted = accepted(&requested).expect("a filter");
        assert_eq!(accepted.tools_list_changed, None, "sandlot's tools never change");
        assert_eq!(accepted.resources_list_changed, Some(true));
        assert_eq!(accepted.resource_subscriptions, Some(vec![ALL_RUNS.to_owned(), "sandlot://runs/0123abc".into()]));
    }
}
