//! `GET /files/{conversationId}/{path}?exp=&sig=`: signed downloads of files in a conversation's `/data`.
//! 403 for a bad or expired signature, 404 for a missing file or one reached through a symlink (the read never
//! follows one: `Workspaces::open`).

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandlot_core::{ConversationId, Error};

use crate::AppState;
use crate::state::unix_now;

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": status.canonical_reason(), "message": message }))).into_response()
}

/// Streams the file if the URL's signature is valid.
pub async fn download(
    State(state): State<AppState>,
    Path((conversation_id, path)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let expires = match query.get("exp").map(|e| e.parse::<u64>()) {
        None => None,
        Some(Ok(exp)) => Some(exp),
        Some(Err(_)) => return refuse(StatusCode::FORBIDDEN, "exp must be unix seconds"),
    };
    let Some(signature) = query.get("sig") else {
        return refuse(StatusCode::FORBIDDEN, "missing signature");
    };
    if !state.files.signer.verify(&conversation_id, &path, expires, signature, unix_now()) {
        return refuse(StatusCode::FORBIDDEN, "invalid or expired signature");
    }
    let Ok(id) = ConversationId::parse(&conversation_id) else {
        return refuse(StatusCode::NOT_FOUND, "no such file");
    };
    let workspaces = state.engine.workspaces().clone();
    let opened = tokio::task::spawn_blocking(move || workspaces.open(&id, &path).map(|f| (f, path))).await;
    let (file, path) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(Error::FileNotFound { .. } | Error::InvalidPath { .. })) => {
            return refuse(StatusCode::NOT_FOUND, "no such file");
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "file download failed");
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the file");
        }
        Err(e) => {
            tracing::error!(error = %e, "file download task failed");
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the file");
        }
    };
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mime = mime_guess::from_path(&path).first_or_octet_stream();
    let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file));
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(mime.as_ref()) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}
