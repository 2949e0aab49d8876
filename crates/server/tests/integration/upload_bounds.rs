//! What an upload may cost the server, attacked with the default configuration: its memory (bodies stream to the
//! file), the conversation's quota (refused on `Content-Length` before the body is read; concurrent uploads and a
//! run's writes never pass it together) and the uploads in flight per conversation. Signed `PUT /files/...` through
//! the HTTP app without a network; `/data` is filled on the host with `fallocate`, which takes real blocks at once.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{AppState, HttpOptions, app};
use serde_json::Value;
use tower::ServiceExt;

const MIB: u64 = 1024 * 1024;

/// The default quota of a conversation's `/data` (`SANDLOT_DISK_MB`), in MiB.
fn quota_mib(state: &AppState) -> u64 {
    state.engine.config().limits.disk_mb
}

fn router() -> (tempfile::TempDir, AppState, axum::Router) {
    let (root, state) = common::state("secret", None);
    let router =
        app(state.clone(), Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, state, router)
}

/// A signed `PUT` of `body` to `path` in `conversation`, with `Content-Length` when `length` is given (as every
/// HTTP/1.1 client sends for a body of known size).
fn signed_put(state: &AppState, conversation: &str, path: &str, length: Option<u64>, body: Body) -> Request<Body> {
    let far = sandlot_server::unix_now() + 3600;
    let url = state.files.signer.upload_url("http://test", conversation, path, far);
    let mut request = Request::put(url.strip_prefix("http://test").unwrap()).header(header::HOST, "localhost");
    if let Some(length) = length {
        request = request.header(header::CONTENT_LENGTH, length);
    }
    request.body(body).unwrap()
}

async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// A body of `bytes` bytes in 64 KiB chunks of one static buffer, made as it is read (the test never holds it);
/// `polled` is set when the server first reads it.
fn generated_body(bytes: u64, polled: Arc<AtomicBool>) -> Body {
    static CHUNK: [u8; 64 * 1024] = [7; 64 * 1024];
    let chunks = bytes.div_ceil(CHUNK.len() as u64);
    Body::from_stream(futures::stream::iter(0..chunks).map(move |i| {
        polled.store(true, Ordering::SeqCst);
        let size = (bytes - i * CHUNK.len() as u64).min(CHUNK.len() as u64) as usize;
        Ok::<_, std::io::Error>(Bytes::from_static(&CHUNK[..size]))
    }))
}

/// The bytes of the held bodies: zeros the test's memory holds once (and only the pages read).
static ZEROS: [u8; 64 * 1024 * 1024] = [0; 64 * 1024 * 1024];

/// A body that sends `bytes` bytes once `release` is notified, and nothing before; `waiting` counts the bodies the
/// server started to read.
fn held_body(bytes: usize, release: Arc<tokio::sync::Notify>, waiting: Arc<AtomicUsize>) -> Body {
    let stream = futures::stream::once(async move {
        let released = release.notified();
        waiting.fetch_add(1, Ordering::SeqCst);
        released.await;
        Ok::<_, std::io::Error>(Bytes::from_static(&ZEROS[..bytes]))
    });
    Body::from_stream(stream)
}

use futures::StreamExt as _;

/// Takes `mib` MiB of real blocks in `dir` (what a run's files would hold), at once.
fn fill(dir: &Path, name: &str, mib: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let status =
        std::process::Command::new("fallocate").args(["-l", &format!("{mib}M")]).arg(dir.join(name)).status().unwrap();
    assert!(status.success(), "fallocate failed");
}

/// Blocks `dir` holds on disk, every file under it, in bytes.
fn used(dir: &Path) -> u64 {
    sandlot_core::directory_usage(dir, u64::MAX).unwrap().bytes
}

/// Waits (at most 20 s, however busy the machine) until `dir` holds `count` temporary upload files.
async fn wait_for_uploads_in_flight(dir: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let in_flight = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".sandlot-upload-"))
                    .count()
            })
            .unwrap_or(0);
        if in_flight == count {
            return;
        }
        assert!(Instant::now() < deadline, "{in_flight} uploads in flight, not {count}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// ATTACK: an upload larger than what is left of the quota, and one larger than an upload may be, are refused on
/// their `Content-Length`, before a byte of the body is read (before, the server read 64 MiB into memory first).
#[tokio::test]
async fn attack_an_upload_over_the_quota_is_refused_before_its_body_is_read() {
    let (root, state, router) = router();
    let files = root.path().join("c/files");
    fill(&files, "runs-left-this", quota_mib(&state) - 24);
    for (length, kind) in [(64 * MIB, "quota_exceeded"), (64 * MIB + 1, "payload_too_large")] {
        let polled = Arc::new(AtomicBool::new(false));
        let request = signed_put(&state, "c", "big.bin", Some(length), generated_body(length, polled.clone()));
        let (status, body) = send(&router, request).await;
        assert_eq!((status, body["error"].as_str()), (StatusCode::PAYLOAD_TOO_LARGE, Some(kind)), "{body}");
        assert!(!polled.load(Ordering::SeqCst), "the body of a refused upload was read");
    }
    assert!(!files.join("big.bin").exists());
    // What fits still goes in.
    let polled = Arc::new(AtomicBool::new(false));
    let (status, body) = send(&router, signed_put(&state, "c", "ok.bin", Some(MIB), generated_body(MIB, polled))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// ATTACK: six 60 MiB uploads, each fitting what is left of the quota (100 MiB) but not two together, go at once (with
/// and without `Content-Length`); exactly one is written and `/data` stays within the quota (before, several were).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_concurrent_uploads_cannot_pass_the_quota_together() {
    let (root, state, router) = router();
    let quota = quota_mib(&state) * MIB;
    for (conversation, declared) in [("sized", true), ("chunked", false)] {
        let files = root.path().join(conversation).join("files");
        fill(&files, "runs-left-this", quota_mib(&state) - 100);
        // Each on a task of its own, its body held until every upload has either started to read it or been
        // answered, then all released at once: they race as closely as they can.
        let (release, waiting) = (Arc::new(tokio::sync::Notify::new()), Arc::new(AtomicUsize::new(0)));
        let uploads: Vec<_> = (0..6)
            .map(|i| {
                let length = declared.then_some(60 * MIB);
                let body = held_body(60 * MIB as usize, release.clone(), waiting.clone());
                let request = signed_put(&state, conversation, &format!("part-{i}.bin"), length, body);
                let router = router.clone();
                tokio::spawn(async move { send(&router, request).await })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        while waiting.load(Ordering::SeqCst) + uploads.iter().filter(|u| u.is_finished()).count() < uploads.len() {
            assert!(Instant::now() < deadline, "the uploads never all started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        release.notify_waiters();
        let answers: Vec<_> = futures::future::join_all(uploads).await.into_iter().map(Result::unwrap).collect();
        let statuses: Vec<StatusCode> = answers.iter().map(|(status, _)| *status).collect();
        let created = statuses.iter().filter(|s| **s == StatusCode::CREATED).count();
        // The others are over the quota (413), or past the uploads a conversation may have in flight (429).
        let refused =
            statuses.iter().filter(|s| [StatusCode::PAYLOAD_TOO_LARGE, StatusCode::TOO_MANY_REQUESTS].contains(s));
        assert_eq!((created, refused.count()), (1, 5), "{conversation}: {answers:?}");
        assert!(used(&files) <= quota, "{conversation}: /data holds {} bytes, over {quota}", used(&files));
    }
}

/// ATTACK: a run fills `/data` while an upload is in flight (both fit alone, not together); the upload is refused
/// when it would be put in place, so the pair never passes the quota (before, it was written, over the quota).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_an_upload_and_a_run_cannot_pass_the_quota_together() {
    let (root, state, router) = router();
    let quota = quota_mib(&state) * MIB;
    let files = root.path().join("c/files");
    fill(&files, "earlier", quota_mib(&state) - 24);
    let release = Arc::new(tokio::sync::Notify::new());
    let body = held_body(16 * MIB as usize, release.clone(), Arc::new(AtomicUsize::new(0)));
    let request = signed_put(&state, "c", "up.bin", Some(16 * MIB), body);
    let upload = tokio::spawn({
        let router = router.clone();
        async move { send(&router, request).await }
    });
    wait_for_uploads_in_flight(&files, 1).await;
    // The run writes 16 MiB of its own meanwhile.
    fill(&files, "written-by-a-run", 16);
    release.notify_one();
    let (status, body) = upload.await.unwrap();
    assert_eq!((status, body["error"].as_str()), (StatusCode::PAYLOAD_TOO_LARGE, Some("quota_exceeded")), "{body}");
    assert!(!files.join("up.bin").exists());
    assert!(used(&files) <= quota, "/data holds {} bytes, over {quota}", used(&files));
}

/// ATTACK: more uploads into one conversation at once than it may have in flight; the one past the bound is
/// refused at once with 429 and `Retry-After`, and the others finish (before, every one was taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_more_uploads_at_once_than_a_conversation_may_have_are_refused() {
    let (root, state, router) = router();
    let files = root.path().join("c/files");
    let limit = sandlot_core::MAX_UPLOADS_PER_CONVERSATION;
    let release = Arc::new(tokio::sync::Notify::new());
    let held: Vec<_> = (0..limit)
        .map(|i| {
            let body = held_body(MIB as usize, release.clone(), Arc::new(AtomicUsize::new(0)));
            let request = signed_put(&state, "c", &format!("f{i}"), Some(MIB), body);
            let router = router.clone();
            tokio::spawn(async move { send(&router, request).await })
        })
        .collect();
    wait_for_uploads_in_flight(&files, limit).await;
    let response = router.clone().oneshot(signed_put(&state, "c", "one-more", Some(1), Body::from("x"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["error"], "busy", "{body}");
    assert!(!files.join("one-more").exists());
    release.notify_waiters();
    for upload in held {
        let (status, body) = upload.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    // With the others done, the conversation takes uploads again.
    assert_eq!(
        send(&router, signed_put(&state, "c", "one-more", Some(1), Body::from("x"))).await.0,
        StatusCode::CREATED
    );
}

/// The process's peak resident memory so far (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// ATTACK: eight 64 MiB uploads at once (the largest an upload may be, each into its own conversation, within its
/// quota) cost the server little memory: the bodies stream to their files. Before, each was held twice (~1 GiB of
/// peak memory); the bound, 128 MiB, leaves room for the runtime's and the files' buffers on a busy machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_64_mib_uploads_keep_the_servers_memory_bounded() {
    let (root, state, router) = router();
    let before = peak_rss();
    let uploads = (0..8).map(|i| {
        let body = generated_body(64 * MIB, Arc::new(AtomicBool::new(false)));
        send(&router, signed_put(&state, &format!("c{i}"), "big.bin", Some(64 * MIB), body))
    });
    for (status, body) in futures::future::join_all(uploads).await {
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let grown = peak_rss().saturating_sub(before);
    assert!(grown < 128 * MIB, "the peak resident memory grew by {} MiB", grown / MIB);
    assert_eq!(std::fs::metadata(root.path().join("c7/files/big.bin")).unwrap().len(), 64 * MIB);
}
