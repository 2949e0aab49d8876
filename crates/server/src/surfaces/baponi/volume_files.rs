//! Signed URLs to Baponi's volumes, the Files API's `source: "volume"`: `GET` (download) and `PUT` (upload, only to
//! a `:rw` volume) at `<profile>/v1/volumes/{slug}/{path}?exp=&sig=`, served without the API key (the signature is
//! the authority, as for sandlot's `/files`).
//!
//! The signatures are scoped ([`sandlot_core::Signer::sign_scoped`]): a download scope and an upload scope of their
//! own, so a thread's URL never reaches a volume (nor a volume's URL a thread), and a download URL never uploads.
//! Reads and writes go beneath the volume's directory, never through a symlink below it
//! ([`sandlot_core::open_in_dir`], [`sandlot_core::write_in_dir`]).

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sandlot_core::Error;

use super::BaponiState;
use super::rest::refuse;
use crate::kit::{InFlightSlot, copy_body, serve_file};
use crate::state::unix_now;

/// The scope of a volume's download URL.
const GET_SCOPE: &str = "baponi-volume-get";
/// The scope of a volume's upload URL.
const PUT_SCOPE: &str = "baponi-volume-put";

/// The route, relative to the profile's base.
pub const ROUTE: &str = "/v1/volumes/{slug}/{*path}";

/// The absolute URL of the route's start, under the profile's `/p/baponi` prefix (always served).
fn route_url(state: &BaponiState) -> String {
    let base = state.app.files.public_base_url.trim_end_matches('/');
    format!("{base}{}/v1/volumes", super::PREFIX)
}

/// A download URL of `slug/path`, valid until `expires`.
pub fn download_url(state: &BaponiState, slug: &str, path: &str, expires: u64) -> String {
    state.app.files.signer.scoped_url(&route_url(state), GET_SCOPE, slug, path, expires)
}

/// An upload URL of `slug/path`, valid until `expires`.
pub fn upload_url(state: &BaponiState, slug: &str, path: &str, expires: u64) -> String {
    state.app.files.signer.scoped_url(&route_url(state), PUT_SCOPE, slug, path, expires)
}

/// Checks the URL's signature for `scope`: 403 when it is missing, bad or expired.
fn verify(state: &BaponiState, scope: &str, slug: &str, path: &str, query: &HashMap<String, String>) -> bool {
    let (Some(Ok(expires)), Some(signature)) = (query.get("exp").map(|e| e.parse::<u64>()), query.get("sig")) else {
        return false;
    };
    state.app.files.signer.verify_scoped(scope, slug, path, expires, signature, unix_now())
}

fn forbidden() -> Response {
    refuse(StatusCode::FORBIDDEN, "forbidden", "invalid or expired signature")
}

fn not_found() -> Response {
    refuse(StatusCode::NOT_FOUND, "not_found", "no such file")
}

/// `GET <profile>/v1/volumes/{slug}/{path}`: the file (ranges as `/files`), 403 bad signature, 404 missing.
pub async fn download(
    State(state): State<BaponiState>,
    Path((slug, path)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    slot: InFlightSlot,
    headers: HeaderMap,
) -> Response {
    if !verify(&state, GET_SCOPE, &slug, &path, &query) {
        return forbidden();
    }
    slot.admit(); // the signature is the credential
    let Some(volume) = state.volumes.get(&slug) else { return not_found() };
    let (dir, name) = (volume.path.clone(), path.clone());
    match tokio::task::spawn_blocking(move || sandlot_core::open_in_dir(&dir, &name)).await {
        Ok(Ok(file)) => serve_file(file, &path, &headers).await,
        Ok(Err(Error::FileNotFound { .. } | Error::InvalidPath { .. })) => not_found(),
        Ok(Err(error)) => {
            tracing::error!(%error, "volume download failed");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "cannot read the file")
        }
        Err(error) => {
            tracing::error!(%error, "volume download task failed");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "cannot read the file")
        }
    }
}

/// `PUT <profile>/v1/volumes/{slug}/{path}`: writes the body (at most [`crate::kit::MAX_UPLOAD_BYTES`], streamed) to a `:rw` volume;
/// 201 `{path, size}`, 403 bad signature or a read-only volume, 400 a bad path (one through a symlink included).
pub async fn upload(
    State(state): State<BaponiState>,
    Path((slug, path)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    slot: InFlightSlot,
    body: Body,
) -> Response {
    // Checked before a byte of the body is read: a bad URL is answered at once, its body never read.
    if !verify(&state, PUT_SCOPE, &slug, &path, &query) {
        return forbidden();
    }
    slot.admit(); // the signature is the credential
    let Some(volume) = state.volumes.get(&slug).filter(|volume| volume.writable) else {
        return refuse(StatusCode::FORBIDDEN, "forbidden", "the volume is not writable");
    };
    let owner = state.app.engine.storage_owner();
    let dir = volume.path.clone();
    let (name, opened) =
        (path.clone(), tokio::task::spawn_blocking(move || sandlot_core::create_in_dir(&dir, &path, owner)));
    let (pending, file) = match opened.await {
        Ok(Ok(opened)) => opened,
        Ok(Err(error)) => return volume_refused(&error),
        Err(error) => return volume_refused(&Error::io("write file", name, std::io::Error::other(error))),
    };
    // Streamed to the file, never whole in memory.
    let mut file = tokio::fs::File::from_std(file);
    let copied = copy_body(body, &mut file).await;
    let flushed = tokio::io::AsyncWriteExt::flush(&mut file).await;
    let size = file.metadata().await.map(|m| m.len());
    match (copied, flushed, size) {
        (Err(Ok(response)), _, _) => response,
        (Err(Err(error)), _, _) => volume_refused(&error),
        (Ok(()), Err(error), _) | (Ok(()), Ok(()), Err(error)) => volume_refused(&Error::io("write file", name, error)),
        (Ok(()), Ok(()), Ok(size)) => {
            drop(file.into_std().await);
            match tokio::task::spawn_blocking(move || pending.commit(size)).await {
                Ok(Ok(written)) => {
                    let body = serde_json::json!({ "path": written.path, "size": written.size });
                    (StatusCode::CREATED, axum::Json(body)).into_response()
                }
                Ok(Err(error)) => volume_refused(&error),
                Err(error) => volume_refused(&Error::io("write file", name, std::io::Error::other(error))),
            }
        }
    }
}

/// The answer to a volume upload that failed: 400 a bad path, else 500 (logged).
fn volume_refused(error: &Error) -> Response {
    match error {
        Error::InvalidPath { .. } => refuse(StatusCode::BAD_REQUEST, "validation_error", &error.to_string()),
        error => {
            tracing::error!(%error, "volume upload failed");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "cannot write the file")
        }
    }
}
