//! Conversations and their live sandboxes over REST, for operators and the playground:
//! `GET /v1/conversations?limit=` → `{"conversations": [{conversationId, lastUsed, live}], "truncated"}`, the
//! caller's tenant's conversations (an admin's: every one), most recently used first (`limit` 1–500, default 100);
//! `GET /v1/conversations/{conversationId}` → one of them. `live` is the live sandbox ([`LiveView`]: id, startedAt,
//! lastUsed, calls, busy, the times it ends, interpreters, processes, usage against limits) or `null`.
//!
//! 400 for a bad id or limit; 404 for a conversation that does not exist, and alike for another tenant's (the same
//! body, so the two cannot be told apart).

use std::collections::HashMap;
use std::time::SystemTime;

use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandlot_core::{ConversationId, Error, Tenant, rfc3339_seconds};
use serde_json::{Value, json};

use super::super::live_view::LiveView;
use crate::AppState;
use crate::kit::tenant_workspaces::derived_for_another;
use crate::kit::{Caller, rest_error};

/// Conversations listed when `limit` is not given, and the most a listing holds.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 500;

fn internal(error: &Error) -> Response {
    tracing::error!(%error, "cannot list conversations");
    rest_error(StatusCode::INTERNAL_SERVER_ERROR, "internal", "cannot list conversations")
}

fn not_found(conversation: &ConversationId) -> Response {
    rest_error(StatusCode::NOT_FOUND, "not_found", &format!("no conversation {conversation}"))
}

/// Whether `tenant` lists the conversation whose owner is `owner`: its own; an admin every one. A conversation
/// without an owner (made before tenants, or by `sandlot run`) is an admin's alone, so no tenant learns its id.
fn listed_for(tenant: &Tenant, conversation: &ConversationId, owner: Option<&str>) -> bool {
    tenant.is_admin() || (owner == Some(tenant.name()) && !derived_for_another(conversation, tenant))
}

/// One conversation as listed.
async fn entry(state: &AppState, conversation: &ConversationId, last_used: SystemTime) -> Value {
    let live = state.engine.sessions().status(conversation).await.map(|status| LiveView::of(&status));
    json!({ "conversationId": conversation.as_str(), "lastUsed": rfc3339_seconds(last_used), "live": live })
}

/// `GET /v1/conversations`.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let limit = match query.get("limit").map(|limit| limit.parse::<usize>()) {
        None => DEFAULT_LIMIT,
        Some(Ok(limit)) if (1..=MAX_LIMIT).contains(&limit) => limit,
        Some(_) => {
            let message = format!("invalid limit: must be a whole number from 1 to {MAX_LIMIT}");
            return rest_error(StatusCode::BAD_REQUEST, "invalid_argument", &message);
        }
    };
    let tenant = caller.tenant();
    let workspaces = state.engine.workspaces().clone();
    // A walk of the root and an owner file per conversation: off the async threads.
    let found = tokio::task::spawn_blocking(move || -> sandlot_core::Result<Vec<(ConversationId, SystemTime)>> {
        let mut found = Vec::new();
        for (conversation, used) in workspaces.conversations()? {
            if listed_for(&tenant, &conversation, workspaces.owner(&conversation)?.as_deref()) {
                found.push((conversation, used));
            }
        }
        found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.as_str().cmp(b.0.as_str())));
        Ok(found)
    })
    .await;
    let found = match found {
        Ok(Ok(found)) => found,
        Ok(Err(error)) => return internal(&error),
        Err(error) => return internal(&Error::io("list conversations", "", std::io::Error::other(error))),
    };
    let truncated = found.len() > limit;
    let mut conversations = Vec::with_capacity(found.len().min(limit));
    for (conversation, used) in found.iter().take(limit) {
        conversations.push(entry(&state, conversation, *used).await);
    }
    axum::Json(json!({ "conversations": conversations, "truncated": truncated })).into_response()
}

/// `GET /v1/conversations/{conversationId}`.
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(conversation): Path<String>,
) -> Response {
    let conversation = match super::path_conversation(&conversation) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    let tenant = caller.tenant();
    // Another tenant's conversation is answered exactly as one that does not exist.
    let hidden = derived_for_another(&conversation, &tenant)
        || match state.engine.check_conversation(&tenant, &conversation) {
            Ok(()) => false,
            Err(Error::ConversationHidden { .. }) => true,
            Err(error) => return internal(&error),
        };
    if hidden {
        return not_found(&conversation);
    }
    let dir = state.engine.workspaces().root().join(conversation.as_str());
    let used = tokio::task::spawn_blocking(move || {
        std::fs::symlink_metadata(dir).ok().filter(|meta| meta.is_dir()).and_then(|meta| meta.modified().ok())
    })
    .await
    .ok()
    .flatten();
    match used {
        Some(used) => axum::Json(entry(&state, &conversation, used).await).into_response(),
        None => not_found(&conversation),
    }
}
