//! Conversations over REST: `DELETE /v1/conversations/{conversationId}` removes one, its files (every file of its
//! `/data`) and its runs in the history, through [`sandlot_core::Engine::delete_conversation`].
//!
//! 200 `{"conversationId", "filesRemoved", "runsRemoved"}`; 400 for an invalid id; 404 when there is nothing of it;
//! 409 while a run of it is executing or waiting for its turn (a deletion never cancels a run: the caller cancels
//! the run, or tries again when it ended).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandlot_core::{ConversationId, Error};

use super::rest_error::rest_error;
use crate::AppState;

/// `DELETE /v1/conversations/{conversationId}`.
pub async fn delete(State(state): State<AppState>, Path(conversation): Path<String>) -> Response {
    let conversation = match ConversationId::parse(&conversation) {
        Ok(id) => id,
        Err(error) => return rest_error(StatusCode::BAD_REQUEST, "invalid_argument", &error.to_string()),
    };
    match state.engine.delete_conversation(&conversation).await {
        Ok(deletion) => axum::Json(serde_json::json!({
            "conversationId": conversation.as_str(),
            "filesRemoved": deletion.files_removed,
            "runsRemoved": deletion.runs_removed,
        }))
        .into_response(),
        Err(error @ Error::ConversationBusy { .. }) => rest_error(StatusCode::CONFLICT, "conflict", &error.to_string()),
        Err(error @ Error::ConversationNotFound { .. }) => {
            rest_error(StatusCode::NOT_FOUND, "not_found", &error.to_string())
        }
        Err(error) => {
            tracing::error!(conversation = %conversation, %error, "cannot delete a conversation");
            rest_error(StatusCode::INTERNAL_SERVER_ERROR, "internal", "cannot delete the conversation")
        }
    }
}
