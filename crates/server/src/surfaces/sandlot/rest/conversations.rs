//! Conversations over REST: `DELETE /v1/conversations/{conversationId}` removes one, its files (every file of its
//! `/data`) and its runs in the history, through [`sandlot_core::Engine::delete_conversation`].
//!
//! 200 `{"conversationId", "filesRemoved", "runsRemoved"}`; 400 for an invalid id; 404 when there is nothing of it;
//! 409 while a run of it is executing or waiting for its turn (a deletion never cancels a run: the caller cancels
//! the run, or tries again when it ended).

use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandlot_core::{ConversationId, Error};

use crate::AppState;
use crate::kit::conversation_access;
use crate::kit::{Caller, rest_error};

/// `DELETE /v1/conversations/{conversationId}`.
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(conversation): Path<String>,
) -> Response {
    let conversation = match super::path_conversation(&conversation) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    // Another tenant's conversation is answered exactly as one that does not exist.
    if let Err(error) = state.engine.check_conversation(&caller.tenant(), &conversation) {
        return refusal(&conversation, error);
    }
    match state.engine.delete_conversation(&conversation).await {
        Ok(deletion) => axum::Json(serde_json::json!({
            "conversationId": conversation.as_str(),
            "filesRemoved": deletion.files_removed,
            "runsRemoved": deletion.runs_removed,
        }))
        .into_response(),
        Err(error) => refusal(&conversation, error),
    }
}

/// The answer to a deletion the engine refused.
fn refusal(conversation: &ConversationId, error: Error) -> Response {
    match error {
        Error::ConversationBusy { .. } => rest_error(StatusCode::CONFLICT, "conflict", &error.to_string()),
        error if error.is_conversation_not_found() => {
            rest_error(StatusCode::NOT_FOUND, "not_found", &error.to_string())
        }
        error => {
            tracing::error!(conversation = %conversation, %error, "cannot delete a conversation");
            rest_error(StatusCode::INTERNAL_SERVER_ERROR, "internal", "cannot delete the conversation")
        }
    }
}

/// `POST /v1/conversations/{conversationId}/uploads {path}` → 200 `{url, method: "PUT", path, expiresAt}`: a signed
/// URL that lets whoever holds it `PUT` one file at `path` in the conversation's `/data` for
/// [`crate::kit::UPLOAD_URL_TTL`] (see `files::upload`). 400 for an invalid id or path; 429 when the id is new and
/// no new conversation may be made (a bound of `sandlot_core::ConversationBounds`).
pub async fn upload_url(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(conversation): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let conversation = match super::path_conversation(&conversation) {
        Ok(id) => id,
        Err(refused) => return *refused,
    };
    #[derive(serde::Deserialize)]
    struct UploadRequest {
        path: String,
    }
    let request: UploadRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => {
            return rest_error(StatusCode::BAD_REQUEST, "invalid_argument", &format!("invalid body: {error}"));
        }
    };
    if let Err(error) = sandlot_core::validate_upload_path(&request.path) {
        return rest_error(StatusCode::BAD_REQUEST, "invalid_argument", &error.to_string());
    }
    // The URL is signed only for the conversation's owner (the caller, who becomes it if the id is new).
    let tenant = caller.tenant();
    match conversation_access::claim(&state.engine, &tenant, &conversation) {
        Ok(()) => {}
        Err(error @ Error::ConversationLimit { .. }) => {
            return rest_error(StatusCode::TOO_MANY_REQUESTS, "conversation_limit", &error.to_string());
        }
        Err(error) => return rest_error(StatusCode::BAD_REQUEST, "invalid_argument", &error.to_string()),
    }
    let expires = crate::state::unix_now().saturating_add(crate::kit::UPLOAD_URL_TTL.as_secs());
    let url =
        state.files.signer.upload_url(&state.files.public_base_url, conversation.as_str(), &request.path, expires);
    axum::Json(serde_json::json!({ "url": url, "method": "PUT", "path": request.path, "expiresAt": expires }))
        .into_response()
}
