//! Baponi's Files API (`docs/profiles.md#baponi-rest-and-files-api`), over sandlot's conversations and signed URLs:
//! - `POST /v1/files/list {source, id, path?}` → `{files: [{name, path, size, modified, is_directory}], truncated}`:
//!   the regular files of the thread under `path` (a directory, or one file), recursively, sorted by path;
//! - `POST /v1/files/download_url {source, id, path}` → a SignedUrl `{url, method: "GET", headers: [], expires_at}`
//!   to sandlot's own `GET /files/...` (symlink-safe reads, ranges), for an existing file only;
//! - `POST /v1/files/upload_url {source, id, path, content_length, content_type?}` → a SignedUrl
//!   `{url, method: "PUT", headers: [{name: "Content-Type", value}], expires_at}` to `PUT /files/...?op=put`
//!   (upload signature, symlink-safe write within the conversation's quota).
//!
//! `source: "thread"` is the conversation of that id (the directory a Baponi run sees at `/home/baponi`), as the
//! caller's tenant sees it: `list` and `download_url` read through its `TenantView`, so another tenant's thread is
//! answered exactly as a thread that does not exist (no files; 404), and a URL is signed only for a file found
//! there; `upload_url` first claims the thread (its first user becomes its owner; another tenant's is a 400 naming
//! `id`), then signs. `source: "volume"` a configured volume (what runs see at `/data/<slug>`; the operator's,
//! shared by every tenant), 404 when none of that name is: its URLs are `volume_files`' (their own signing scopes),
//! and `upload_url` is 403 `forbidden` for a read-only one.
//! Errors are Baponi's `{error, message}`: 400 `validation_error` naming the field, 403 `forbidden`, 404
//! `not_found`, 500 `internal_error`.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandlot_core::{ConversationId, Error, rfc3339_seconds};
use serde::Deserialize;
use serde_json::json;

use super::rest::{RestState, invalid, parse_body, refuse, tenant_of};
use super::volume_files;
use crate::kit::conversation_access::{self, TenantView};
use crate::kit::{Caller, MAX_UPLOAD_BYTES, UPLOAD_URL_TTL};
use crate::state::unix_now;

/// Lifetime of a download URL when the server's file URLs do not expire (`SANDLOT_FILE_URL_TTL` unset): Baponi's
/// SignedUrl always has an `expires_at`.
const DOWNLOAD_URL_TTL: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// What the three routes are about: a thread (a conversation) or a volume.
#[derive(Deserialize)]
struct Location {
    source: String,
    id: String,
}

/// What a location names.
#[derive(Clone)]
enum Target {
    Thread(ConversationId),
    Volume { slug: String, volume: super::Volume },
}

impl Location {
    /// The conversation of a thread, or a configured volume (404 when none of that name is); another source is
    /// 400.
    fn target(&self, volumes: &super::Volumes) -> Result<Target, Box<Response>> {
        match self.source.as_str() {
            "thread" => ConversationId::parse(&self.id)
                .map(Target::Thread)
                .map_err(|error| Box::new(invalid(&format!("id: {error}")))),
            "volume" if let Some(volume) = volumes.get(&self.id) => {
                Ok(Target::Volume { slug: self.id.clone(), volume: volume.clone() })
            }
            "volume" => {
                let message = format!("no volume {:?} is configured", self.id);
                Err(Box::new(refuse(StatusCode::NOT_FOUND, "not_found", &message)))
            }
            other => Err(Box::new(invalid(&format!("source: must be \"thread\" or \"volume\", not {other:?}")))),
        }
    }
}

fn internal(error: &Error) -> Response {
    tracing::error!(%error, "files API failed");
    refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "cannot read the thread's files")
}

fn expires_at(expires: u64) -> String {
    rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(expires))
}

#[derive(Deserialize)]
struct ListRequest {
    #[serde(flatten)]
    location: Location,
    #[serde(default)]
    path: Option<String>,
}

/// `POST /v1/files/list`.
pub async fn list(State(rest): State<RestState>, caller: Option<Extension<Caller>>, body: Bytes) -> Response {
    let state = &rest.baponi.app;
    let request: ListRequest = match parse_body(&body) {
        Ok(request) => request,
        Err(response) => return *response,
    };
    let target = match request.location.target(&rest.baponi.volumes) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    let prefix = request.path.as_deref().unwrap_or("").trim_matches('/').to_owned();
    if !prefix.is_empty()
        && let Err(error) = sandlot_core::validate_upload_path(&prefix)
    {
        return invalid(&format!("path: {error}"));
    }
    let (engine, tenant) = (state.engine.clone(), tenant_of(caller));
    let max = state.engine.config().max_files_listed;
    let max_bytes = state.engine.config().max_listed_path_bytes;
    let listed = tokio::task::spawn_blocking(move || match target {
        Target::Thread(conversation) => TenantView::new(&engine, &tenant, conversation)?.list_within(max, max_bytes),
        Target::Volume { volume, .. } => sandlot_core::list_in_dir(&volume.path, max, max_bytes),
    })
    .await;
    let listing = match listed {
        Ok(Ok(listing)) => listing,
        Ok(Err(error)) => return internal(&error),
        Err(error) => {
            tracing::error!(%error, "files API list task failed");
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "cannot read the thread's files");
        }
    };
    let under = |path: &str| {
        prefix.is_empty() || path == prefix || path.strip_prefix(prefix.as_str()).is_some_and(|r| r.starts_with('/'))
    };
    let files: Vec<_> = listing
        .files
        .iter()
        .filter(|file| under(&file.path))
        .map(|file| {
            json!({
                "name": file.path.rsplit('/').next().unwrap_or(&file.path),
                "path": file.path,
                "size": file.size,
                "modified": file.modified.map(rfc3339_seconds),
                "is_directory": false,
            })
        })
        .collect();
    axum::Json(json!({ "files": files, "truncated": listing.truncated })).into_response()
}

#[derive(Deserialize)]
struct DownloadRequest {
    #[serde(flatten)]
    location: Location,
    path: String,
}

/// `POST /v1/files/download_url`.
pub async fn download_url(State(rest): State<RestState>, caller: Option<Extension<Caller>>, body: Bytes) -> Response {
    let state = &rest.baponi.app;
    let request: DownloadRequest = match parse_body(&body) {
        Ok(request) => request,
        Err(response) => return *response,
    };
    let target = match request.location.target(&rest.baponi.volumes) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    if let Err(error) = sandlot_core::validate_upload_path(&request.path) {
        return invalid(&format!("path: {error}"));
    }
    // Only a file that can be served gets a URL: the same symlink-safe open as the download itself, of the thread as
    // the caller sees it (the signed URL itself is the only authority of the download).
    let (engine, tenant) = (state.engine.clone(), tenant_of(caller));
    let path = request.path.clone();
    let (opening, source) = (target.clone(), request.location.source.clone());
    let opened = tokio::task::spawn_blocking(move || match opening {
        Target::Thread(id) => TenantView::new(&engine, &tenant, id)?.open(&path),
        Target::Volume { volume, .. } => sandlot_core::open_in_dir(&volume.path, &path),
    })
    .await;
    match opened {
        Ok(Ok(_file)) => {}
        Ok(Err(Error::FileNotFound { .. } | Error::InvalidPath { .. })) => {
            let message = format!("no file {:?} in {source} {:?}", request.path, request.location.id);
            return refuse(StatusCode::NOT_FOUND, "not_found", &message);
        }
        Ok(Err(error)) => return internal(&error),
        Err(error) => {
            tracing::error!(%error, "files API open task failed");
            return refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "cannot read the thread's files");
        }
    }
    let expires = unix_now().saturating_add(state.files.ttl.unwrap_or(DOWNLOAD_URL_TTL).as_secs());
    let url = match &target {
        Target::Thread(conversation) => {
            state.files.signer.url(&state.files.public_base_url, conversation.as_str(), &request.path, Some(expires))
        }
        Target::Volume { slug, .. } => volume_files::download_url(&rest.baponi, slug, &request.path, expires),
    };
    axum::Json(json!({ "url": url, "method": "GET", "headers": [], "expires_at": expires_at(expires) })).into_response()
}

#[derive(Deserialize)]
struct UploadRequest {
    #[serde(flatten)]
    location: Location,
    path: String,
    content_length: u64,
    #[serde(default)]
    content_type: Option<String>,
}

/// `POST /v1/files/upload_url`.
pub async fn upload_url(State(rest): State<RestState>, caller: Option<Extension<Caller>>, body: Bytes) -> Response {
    let state = &rest.baponi.app;
    let request: UploadRequest = match parse_body(&body) {
        Ok(request) => request,
        Err(response) => return *response,
    };
    let target = match request.location.target(&rest.baponi.volumes) {
        Ok(target) => target,
        Err(response) => return *response,
    };
    if let Target::Volume { slug, volume } = &target
        && !volume.writable
    {
        let message = format!("volume {slug:?} is read-only (configure it with :rw to upload)");
        return refuse(StatusCode::FORBIDDEN, "forbidden", &message);
    }
    if let Err(error) = sandlot_core::validate_upload_path(&request.path) {
        return invalid(&format!("path: {error}"));
    }
    if request.content_length > MAX_UPLOAD_BYTES as u64 {
        return invalid(&format!("content_length: at most {MAX_UPLOAD_BYTES} bytes on this server"));
    }
    let content_type = request.content_type.unwrap_or_else(|| "application/octet-stream".to_owned());
    if content_type.is_empty() || content_type.len() > 255 || content_type.chars().any(|c| c.is_control()) {
        return invalid("content_type: must be a MIME type of at most 255 characters");
    }
    // The thread is the caller's before anything may be written into it (the signed URL is the upload's only
    // authority).
    if let Target::Thread(conversation) = &target {
        match conversation_access::claim(&state.engine, &tenant_of(caller), conversation) {
            Ok(()) => {}
            Err(Error::ConversationTaken { .. }) => {
                let id = &request.location.id;
                return invalid(&format!("id: thread {id:?} is not available to this caller; use another id"));
            }
            Err(error @ Error::ConversationLimit { .. }) => return invalid(&format!("id: {error}")),
            Err(error) => return internal(&error),
        }
    }
    let expires = unix_now().saturating_add(UPLOAD_URL_TTL.as_secs());
    let url = match &target {
        Target::Thread(conversation) => {
            state.files.signer.upload_url(&state.files.public_base_url, conversation.as_str(), &request.path, expires)
        }
        Target::Volume { slug, .. } => volume_files::upload_url(&rest.baponi, slug, &request.path, expires),
    };
    axum::Json(json!({
        "url": url,
        "method": "PUT",
        "headers": [{ "name": "Content-Type", "value": content_type }],
        "expires_at": expires_at(expires),
    }))
    .into_response()
}
