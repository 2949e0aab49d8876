//! `GET /files/{conversationId}/{path}?exp=&sig=`: signed downloads of files in a conversation's `/data`.
//! 403 for a bad or expired signature, 404 for a missing file or one reached through a symlink (the read never
//! follows one: `Workspaces::open`). A single `Range: bytes=` range gets 206 (or 416 when unsatisfiable).

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandlot_core::{ConversationId, Error, FileEntry, Upload, UploadSize};

use crate::AppState;
use crate::state::unix_now;

fn refuse(status: StatusCode, message: &str) -> Response {
    let error = match status {
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::RANGE_NOT_SATISFIABLE => "range_not_satisfiable",
        _ => "internal",
    };
    super::rest_error::rest_error(status, error, message)
}

/// A satisfiable single byte range of a file of `length` bytes: `Ok(None)` for no `Range` header (or one that is
/// not a plain `bytes=` range, which is ignored as RFC 9110 allows), `Err(())` for an unsatisfiable one.
fn byte_range(headers: &HeaderMap, length: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = headers.get(header::RANGE).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("bytes="))
    else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None); // multiple ranges: serve the whole file
    }
    let Some((start, end)) = spec.trim().split_once('-') else { return Ok(None) };
    let range = match (start.parse::<u64>(), end.parse::<u64>()) {
        (Ok(start), Ok(end)) if start <= end => (start, end.min(length.saturating_sub(1))),
        (Ok(start), Err(_)) if end.is_empty() => (start, length.saturating_sub(1)),
        (Err(_), Ok(suffix)) if start.is_empty() && suffix > 0 => {
            (length.saturating_sub(suffix), length.saturating_sub(1))
        }
        _ => return Ok(None),
    };
    if length == 0 || range.0 >= length { Err(()) } else { Ok(Some(range)) }
}

/// Streams the file (or the requested byte range) if the URL's signature is valid.
pub async fn download(
    State(state): State<AppState>,
    Path((conversation_id, path)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    slot: super::InFlightSlot,
    request_headers: HeaderMap,
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
    slot.admit(); // the signature is the credential
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
    serve_file(file, &path, &request_headers).await
}

/// The response of a signed download of `file` (named `path`): the file, or the byte range the request asks for,
/// with its MIME type, and headers that keep an untrusted HTML or SVG file from running as this server's page.
pub async fn serve_file(file: std::fs::File, path: &str, request_headers: &HeaderMap) -> Response {
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    let range = match byte_range(request_headers, length) {
        Ok(range) => range,
        Err(()) => {
            let mut response = refuse(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
            response.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{length}")).unwrap_or(HeaderValue::from_static("bytes */0")),
            );
            return response;
        }
    };
    let mut file = tokio::fs::File::from_std(file);
    let (status, sent) = match range {
        Some((start, end)) => {
            if let Err(e) = tokio::io::AsyncSeekExt::seek(&mut file, std::io::SeekFrom::Start(start)).await {
                tracing::error!(error = %e, "seek in a download failed");
                return refuse(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the file");
            }
            (StatusCode::PARTIAL_CONTENT, end - start + 1)
        }
        None => (StatusCode::OK, length),
    };
    let stream = tokio_util::io::ReaderStream::new(tokio::io::AsyncReadExt::take(file, sent));
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(mime.as_ref()) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(sent));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Some((start, end)) = range
        && let Ok(value) = HeaderValue::from_str(&format!("bytes {start}-{end}/{length}"))
    {
        headers.insert(header::CONTENT_RANGE, value);
    }
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // A file a sandbox wrote is untrusted: if it is HTML or SVG, it renders in an opaque origin with no script,
    // never as a page of this server's origin.
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'none'; sandbox"));
    response
}

/// The answer to an upload whose body could not be read (413 too large, 408 too slow, 400 broken), in the shape of
/// every signed route's errors (`{"error", "message"}`).
pub fn upload_unread(error: &axum::Error) -> Response {
    let error = super::BodyError::of(error);
    let (kind, message) = match &error {
        super::BodyError::TooLarge => ("payload_too_large", format!("an upload is at most {MAX_UPLOAD_BYTES} bytes")),
        super::BodyError::TooSlow(why) => ("request_timeout", why.clone()),
        super::BodyError::Broken(why) => ("bad_request", why.clone()),
    };
    super::rest_error::rest_error(error.status(), kind, &message)
}

/// The largest body a signed upload URL takes; the conversation's disk quota may refuse less.
pub const MAX_UPLOAD_BYTES: usize = 64 * 1024 * 1024;

/// How long a signed upload URL stays valid.
pub const UPLOAD_URL_TTL: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// `PUT /files/{conversationId}/{path}?exp=&sig=&op=put`: writes the body to the file if the URL's signature is a
/// valid, unexpired upload signature ([`sandlot_core::Signer::verify_upload`]; a download signature never is).
/// 201 `{path, size}`; 403 bad or expired signature; 400 a bad path (one through a symlink included); 413 a body
/// over [`MAX_UPLOAD_BYTES`] or over the conversation's quota, refused on its `Content-Length` before a byte of it is
/// read; 429 when the conversation has as many uploads in flight as it may, or no new conversation may be made. The
/// body streams to the file ([`sandlot_core::Engine::begin_upload`]), never whole in memory.
pub async fn upload(
    State(state): State<AppState>,
    Path((conversation_id, path)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    slot: super::InFlightSlot,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let (Some(Ok(expires)), Some(signature), Some("put")) =
        (query.get("exp").map(|e| e.parse::<u64>()), query.get("sig"), query.get("op").map(String::as_str))
    else {
        return refuse(StatusCode::FORBIDDEN, "not an upload URL: exp, sig and op=put are required");
    };
    // Checked before a byte of the body is read: a bad URL is answered at once, its body never read.
    if !state.files.signer.verify_upload(&conversation_id, &path, expires, signature, unix_now()) {
        return refuse(StatusCode::FORBIDDEN, "invalid or expired signature");
    }
    slot.admit(); // the signature is the credential
    let Ok(id) = ConversationId::parse(&conversation_id) else {
        return refuse(StatusCode::FORBIDDEN, "invalid conversation id");
    };
    let size = match upload_size(&headers) {
        Ok(size) => size,
        Err(response) => return *response,
    };
    let written = match state.engine.begin_upload(&id, &path, size).await {
        Ok(upload) => stream_body(upload, body).await,
        Err(error) => Err(upload_refused(&error)),
    };
    match written {
        Ok(written) => {
            tracing::info!(conversation = %id, path = %written.path, size = written.size, "file uploaded");
            (StatusCode::CREATED, axum::Json(serde_json::json!({ "path": written.path, "size": written.size })))
                .into_response()
        }
        Err(response) => response,
    }
}

/// How large an upload says it is: its `Content-Length` (413 at once past [`MAX_UPLOAD_BYTES`], 400 unreadable),
/// else at most [`MAX_UPLOAD_BYTES`].
fn upload_size(headers: &HeaderMap) -> Result<UploadSize, Box<Response>> {
    let Some(value) = headers.get(header::CONTENT_LENGTH) else {
        return Ok(UploadSize::AtMost(MAX_UPLOAD_BYTES as u64));
    };
    match value.to_str().ok().and_then(|v| v.parse::<u64>().ok()) {
        Some(length) if length > MAX_UPLOAD_BYTES as u64 => Err(Box::new(super::rest_error::rest_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            &format!("an upload is at most {MAX_UPLOAD_BYTES} bytes; Content-Length says {length}"),
        ))),
        Some(length) => Ok(UploadSize::Exactly(length)),
        None => Err(Box::new(super::rest_error::rest_error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Content-Length is not a number of bytes",
        ))),
    }
}

/// Streams `body` into `upload` chunk by chunk and finishes it: the file as written, or the response that refuses
/// it (the body's own failures through [`upload_unread`]).
async fn stream_body(mut upload: Upload, body: Body) -> Result<FileEntry, Response> {
    copy_body(body, &mut upload).await.map_err(|error| error.unwrap_or_else(|error| upload_refused(&error)))?;
    upload.finish().await.map_err(|error| upload_refused(&error))
}

/// Where an upload's body goes, a chunk at a time.
pub(crate) trait ChunkSink {
    async fn put(&mut self, chunk: &[u8]) -> sandlot_core::Result<()>;
}

impl ChunkSink for Upload {
    async fn put(&mut self, chunk: &[u8]) -> sandlot_core::Result<()> {
        self.write(chunk).await
    }
}

impl ChunkSink for tokio::fs::File {
    async fn put(&mut self, chunk: &[u8]) -> sandlot_core::Result<()> {
        tokio::io::AsyncWriteExt::write_all(self, chunk)
            .await
            .map_err(|e| Error::io("write file", std::path::PathBuf::new(), e))
    }
}

/// Copies `body`, at most [`MAX_UPLOAD_BYTES`], into `sink` without holding more than a chunk of it: the body's
/// failure as its response (`Err(Ok)`, see [`upload_unread`]), or the sink's error (`Err(Err)`).
pub(crate) async fn copy_body(body: Body, sink: &mut impl ChunkSink) -> Result<(), Result<Response, Error>> {
    use futures::StreamExt;
    let mut chunks = Body::new(http_body_util::Limited::new(body, MAX_UPLOAD_BYTES)).into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|error| Ok(upload_unread(&error)))?;
        sink.put(&chunk).await.map_err(Err)?;
    }
    Ok(())
}

/// The answer to an upload the engine refused: 400 a bad path, 413 over the quota, 429 too many uploads in flight or
/// no new conversation, else 500 (logged).
fn upload_refused(error: &Error) -> Response {
    let rest = super::rest_error::rest_error;
    match error {
        Error::InvalidPath { .. } => rest(StatusCode::BAD_REQUEST, "invalid_argument", &error.to_string()),
        Error::QuotaExceeded { .. } => rest(StatusCode::PAYLOAD_TOO_LARGE, "quota_exceeded", &error.to_string()),
        Error::Busy { retry_after, .. } => {
            let mut response = rest(StatusCode::TOO_MANY_REQUESTS, "busy", &error.to_string());
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after.as_secs().max(1)));
            response
        }
        Error::ConversationLimit { .. } => {
            rest(StatusCode::TOO_MANY_REQUESTS, "conversation_limit", &error.to_string())
        }
        error => {
            tracing::error!(%error, "file upload failed");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, "cannot write the file")
        }
    }
}
