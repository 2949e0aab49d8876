//! Baponi's REST twin under `/p/baponi` (`docs/profiles.md#baponi-rest-and-files-api`), raw HTTP through the app: the
//! Files API (list, signed download and upload URLs that sandlot's `/files` then serves), `POST /v1/sandbox/execute`
//! (JSON and NDJSON) and `/v1/executions` (status, cancel, output replay) over a scripted backend with a run history,
//! and their errors. The official SDK against the real binary is in tests/e2e/baponi.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

fn router() -> (tempfile::TempDir, axum::Router) {
    let (root, state) = common::state("secret", None);
    let router = app(state, Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, router)
}

async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes))))
}

fn post(path: &str, body: &Value) -> Request<Body> {
    post_as(path, body, "tok")
}

fn post_as(path: &str, body: &Value, bearer: &str) -> Request<Body> {
    Request::post(format!("/p/baponi{path}"))
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {bearer}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// The path and query of a URL of the test app (`http://test/...`).
fn local(url: &Value) -> String {
    url.as_str().unwrap().strip_prefix("http://test").unwrap().to_owned()
}

fn write(root: &std::path::Path, thread: &str, path: &str, bytes: &[u8]) {
    let file = root.join(thread).join("files").join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, bytes).unwrap();
}

#[tokio::test]
async fn files_list_gives_the_threads_files_under_a_path() {
    let (root, router) = router();
    write(root.path(), "t1", "report.csv", b"a,b\n");
    write(root.path(), "t1", "out/chart.png", b"png!");
    write(root.path(), "t1", "out/deep/x.txt", b"x");
    write(root.path(), "t1", "outside.txt", b"no");

    let (status, body) = send(&router, post("/v1/files/list", &json!({ "source": "thread", "id": "t1" }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let paths: Vec<_> = body["files"].as_array().unwrap().iter().map(|f| f["path"].clone()).collect();
    assert_eq!(paths, [json!("out/chart.png"), json!("out/deep/x.txt"), json!("outside.txt"), json!("report.csv")]);

    let (status, body) =
        send(&router, post("/v1/files/list", &json!({ "source": "thread", "id": "t1", "path": "out/" }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let files = body["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{body}");
    let first = &files[0];
    assert_eq!(
        (&first["name"], &first["path"], &first["size"], &first["is_directory"]),
        (&json!("chart.png"), &json!("out/chart.png"), &json!(4), &json!(false))
    );
    assert!(first["modified"].as_str().unwrap().ends_with('Z'), "{first}");

    let (status, body) = send(&router, post("/v1/files/list", &json!({ "source": "thread", "id": "nobody" }))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({ "files": [], "truncated": false })));
}

#[tokio::test]
async fn a_download_url_serves_the_file_and_an_upload_url_writes_one() {
    let (root, router) = router();
    write(root.path(), "t2", "data.json", b"{\"n\": 1}");

    let (status, signed) =
        send(&router, post("/v1/files/download_url", &json!({ "source": "thread", "id": "t2", "path": "data.json" })))
            .await;
    assert_eq!(status, StatusCode::OK, "{signed}");
    assert_eq!((&signed["method"], &signed["headers"]), (&json!("GET"), &json!([])));
    assert!(signed["expires_at"].as_str().unwrap().ends_with('Z'), "{signed}");
    let download = Request::get(local(&signed["url"])).header(header::HOST, "localhost").body(Body::empty()).unwrap();
    let response = router.clone().oneshot(download).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.into_body().collect().await.unwrap().to_bytes().as_ref(), b"{\"n\": 1}");

    let request = json!({ "source": "thread", "id": "t2", "path": "in/up.txt", "content_length": 5, "content_type": "text/plain" });
    let (status, signed) = send(&router, post("/v1/files/upload_url", &request)).await;
    assert_eq!(status, StatusCode::OK, "{signed}");
    assert_eq!(
        (&signed["method"], &signed["headers"]),
        (&json!("PUT"), &json!([{ "name": "Content-Type", "value": "text/plain" }]))
    );
    let upload = Request::put(local(&signed["url"]))
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("hello"))
        .unwrap();
    let (status, written) = send(&router, upload).await;
    assert_eq!((status, written), (StatusCode::CREATED, json!({ "path": "in/up.txt", "size": 5 })));
    assert_eq!(std::fs::read(root.path().join("t2/files/in/up.txt")).unwrap(), b"hello");
}

#[tokio::test]
async fn files_api_errors_are_baponis() {
    let (_root, router) = router();
    let cases = [
        ("/v1/files/download_url", json!({ "source": "thread", "id": "t3", "path": "missing.txt" }), 404, "not_found"),
        ("/v1/files/download_url", json!({ "source": "volume", "id": "shared", "path": "a.txt" }), 404, "not_found"),
        (
            "/v1/files/download_url",
            json!({ "source": "thread", "id": "t3", "path": "../etc/passwd" }),
            400,
            "validation_error",
        ),
        ("/v1/files/download_url", json!({ "source": "disk", "id": "t3", "path": "a.txt" }), 400, "validation_error"),
        ("/v1/files/download_url", json!({ "source": "thread", "id": "t3" }), 400, "validation_error"),
        ("/v1/files/list", json!({ "source": "thread", "id": "../x" }), 400, "validation_error"),
        (
            "/v1/files/upload_url",
            json!({ "source": "thread", "id": "t3", "path": "a", "content_length": 1u64 << 40 }),
            400,
            "validation_error",
        ),
        (
            "/v1/files/upload_url",
            json!({ "source": "thread", "id": "t3", "path": "/abs", "content_length": 1 }),
            400,
            "validation_error",
        ),
    ];
    for (path, request, status, kind) in cases {
        let (got, body) = send(&router, post(path, &request)).await;
        assert_eq!((got.as_u16(), &body["error"]), (status, &json!(kind)), "{path} {request}: {body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    }
    let (_, body) = send(&router, post("/v1/files/download_url", &json!({ "source": "thread", "id": "t3" }))).await;
    assert!(body["message"].as_str().unwrap().contains("path"), "the missing field is named: {body}");

    let anonymous = Request::post("/p/baponi/v1/files/list")
        .header(header::HOST, "localhost")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "source": "thread", "id": "t3" }).to_string()))
        .unwrap();
    let (status, body) = send(&router, anonymous).await;
    assert_eq!((status, &body["error"]), (StatusCode::UNAUTHORIZED, &json!("unauthorized")));
}

#[tokio::test]
async fn attack_a_download_url_for_a_planted_symlink_is_not_given() {
    let (root, router) = router();
    write(root.path(), "t4", "ok.txt", b"ok");
    std::os::unix::fs::symlink("/etc/passwd", root.path().join("t4/files/passwd")).unwrap();
    let (status, body) =
        send(&router, post("/v1/files/download_url", &json!({ "source": "thread", "id": "t4", "path": "passwd" })))
            .await;
    assert_eq!((status, &body["error"]), (StatusCode::NOT_FOUND, &json!("not_found")));
    let (_, body) = send(&router, post("/v1/files/list", &json!({ "source": "thread", "id": "t4" }))).await;
    let paths: Vec<_> = body["files"].as_array().unwrap().iter().map(|f| f["path"].clone()).collect();
    assert_eq!(paths, [json!("ok.txt")], "a symlink is never listed");
}

/// A router with the volumes `docs` (read-only) and `work` (`:rw`).
fn volume_router() -> (tempfile::TempDir, tempfile::TempDir, tempfile::TempDir, axum::Router) {
    volume_router_with("rw")
}

/// [`volume_router`] with `work` of mode `work_mode` (`rw:1`: a quota of 1 MiB).
fn volume_router_with(work_mode: &str) -> (tempfile::TempDir, tempfile::TempDir, tempfile::TempDir, axum::Router) {
    let (root, state) = common::state("secret", None);
    let (docs, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let text = format!("docs={},work={}:{work_mode}", docs.path().display(), work.path().display());
    let settings = sandlot_server::surfaces::Settings {
        baponi_volumes: sandlot_server::surfaces::baponi::Volumes::parse(&text).unwrap(),
    };
    let options =
        HttpOptions { profile_settings: settings, ..HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])) };
    (root, docs, work, app(state, Authenticator::token("tok"), options))
}

fn get(url: &str) -> Request<Body> {
    Request::get(url).header(header::HOST, "localhost").body(Body::empty()).unwrap()
}

fn put(url: &str, body: &'static str) -> Request<Body> {
    Request::put(url).header(header::HOST, "localhost").body(Body::from(body)).unwrap()
}

#[tokio::test]
async fn volumes_are_listed_downloaded_and_uploaded_to_when_rw_through_their_own_urls() {
    let (_root, docs, work, router) = volume_router();
    std::fs::create_dir(docs.path().join("guides")).unwrap();
    std::fs::write(docs.path().join("guides/start.md"), "# start").unwrap();
    std::fs::write(docs.path().join("readme.md"), "# docs").unwrap();
    let (status, body) = send(&router, post("/v1/files/list", &json!({ "source": "volume", "id": "docs" }))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed: Vec<_> =
        body["files"].as_array().unwrap().iter().map(|f| (f["path"].clone(), f["size"].clone())).collect();
    assert_eq!(listed, [(json!("guides/start.md"), json!(7)), (json!("readme.md"), json!(6))]);
    let under = json!({ "source": "volume", "id": "docs", "path": "guides" });
    let (_, body) = send(&router, post("/v1/files/list", &under)).await;
    assert_eq!(body["files"].as_array().unwrap().len(), 1, "{body}");

    let request = json!({ "source": "volume", "id": "docs", "path": "readme.md" });
    let (status, signed) = send(&router, post("/v1/files/download_url", &request)).await;
    assert_eq!((status, &signed["method"], &signed["headers"]), (StatusCode::OK, &json!("GET"), &json!([])));
    let url = local(&signed["url"]);
    assert!(url.starts_with("/p/baponi/v1/volumes/docs/readme.md?exp="), "{url}");
    assert_eq!(send(&router, get(&url)).await, (StatusCode::OK, json!("# docs")));

    let upload = json!({ "source": "volume", "id": "docs", "path": "new.txt", "content_length": 2 });
    let (status, body) = send(&router, post("/v1/files/upload_url", &upload)).await;
    assert_eq!((status, &body["error"]), (StatusCode::FORBIDDEN, &json!("forbidden")), "{body}");

    let upload = json!({ "source": "volume", "id": "work", "path": "out/new.txt", "content_length": 2 });
    let (status, signed) = send(&router, post("/v1/files/upload_url", &upload)).await;
    assert_eq!((status, &signed["method"]), (StatusCode::OK, &json!("PUT")), "{signed}");
    let (status, written) = send(&router, put(&local(&signed["url"]), "hi")).await;
    assert_eq!((status, written), (StatusCode::CREATED, json!({ "path": "out/new.txt", "size": 2 })));
    assert_eq!(std::fs::read(work.path().join("out/new.txt")).unwrap(), b"hi");
}

/// A writable volume's quota holds for uploads as for runs: with the volume full, a signed upload is refused with
/// 413 `quota_exceeded` and writes nothing (it had no quota but the 64 MiB per upload).
#[tokio::test]
async fn an_upload_past_a_volumes_quota_is_refused() {
    let (_root, _docs, work, router) = volume_router_with("rw:1");
    std::fs::write(work.path().join("full.bin"), vec![7u8; 1 << 20]).unwrap();
    let upload = json!({ "source": "volume", "id": "work", "path": "more.txt", "content_length": 2 });
    let (_, signed) = send(&router, post("/v1/files/upload_url", &upload)).await;
    let (status, body) = send(&router, put(&local(&signed["url"]), "hi")).await;
    assert_eq!((status, &body["error"]), (StatusCode::PAYLOAD_TOO_LARGE, &json!("quota_exceeded")), "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.starts_with("more.txt: the file would take the volume over its quota ("), "{message}");
    assert!(!work.path().join("more.txt").exists());
}

/// A signature of one kind never serves another: a volume's download URL neither uploads nor reaches the thread of
/// the same name through `/files`, and a thread's URLs never reach a volume.
#[tokio::test]
async fn attack_a_url_of_one_scope_never_serves_another() {
    let (root, docs, work, router) = volume_router();
    std::fs::write(docs.path().join("a.txt"), "volume").unwrap();
    write(root.path(), "work", "a.txt", b"thread");
    let volume_get = json!({ "source": "volume", "id": "work", "path": "a.txt" });
    std::fs::write(work.path().join("a.txt"), "volume").unwrap();
    let (_, signed) = send(&router, post("/v1/files/download_url", &volume_get)).await;
    let url = local(&signed["url"]);
    let query = url.split_once('?').unwrap().1;
    assert_eq!(send(&router, put(&url, "x")).await.0, StatusCode::FORBIDDEN, "a download URL uploads");
    assert_eq!(send(&router, get(&format!("/files/work/a.txt?{query}"))).await.0, StatusCode::FORBIDDEN);
    let (_, signed) =
        send(&router, post("/v1/files/download_url", &json!({ "source": "thread", "id": "work", "path": "a.txt" })))
            .await;
    let thread_query = local(&signed["url"]).split_once('?').unwrap().1.to_owned();
    let reached = send(&router, get(&format!("/p/baponi/v1/volumes/work/a.txt?{thread_query}"))).await;
    assert_eq!(reached.0, StatusCode::FORBIDDEN, "a thread's URL reached a volume");
    let upload = json!({ "source": "thread", "id": "work", "path": "b.txt", "content_length": 1 });
    let (_, signed) = send(&router, post("/v1/files/upload_url", &upload)).await;
    let thread_put = local(&signed["url"]).split_once('?').unwrap().1.to_owned();
    let written = send(&router, put(&format!("/p/baponi/v1/volumes/work/b.txt?{thread_put}"), "x")).await;
    assert_eq!(written.0, StatusCode::FORBIDDEN, "a thread's upload URL wrote to a volume");
    assert!(!work.path().join("b.txt").exists());
    let unsigned = send(&router, get("/p/baponi/v1/volumes/docs/a.txt?exp=99999999999&sig=00")).await;
    assert_eq!(unsigned.0, StatusCode::FORBIDDEN);
}

/// Symlinks in a volume (a run may plant them in a `:rw` one) are never listed, given a URL, or written through.
#[tokio::test]
async fn attack_a_symlink_in_a_volume_is_never_followed() {
    let (_root, _docs, work, router) = volume_router();
    std::fs::write(work.path().join("ok.txt"), "ok").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", work.path().join("passwd")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), work.path().join("out")).unwrap();
    let (_, body) = send(&router, post("/v1/files/list", &json!({ "source": "volume", "id": "work" }))).await;
    let paths: Vec<_> = body["files"].as_array().unwrap().iter().map(|f| f["path"].clone()).collect();
    assert_eq!(paths, [json!("ok.txt")], "a symlink is never listed");
    let request = json!({ "source": "volume", "id": "work", "path": "passwd" });
    let (status, body) = send(&router, post("/v1/files/download_url", &request)).await;
    assert_eq!((status, &body["error"]), (StatusCode::NOT_FOUND, &json!("not_found")));
    let upload = json!({ "source": "volume", "id": "work", "path": "out/x.txt", "content_length": 1 });
    let (_, signed) = send(&router, post("/v1/files/upload_url", &upload)).await;
    let (status, _) = send(&router, put(&local(&signed["url"]), "x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(!outside.path().join("x.txt").exists(), "an upload went through a symlink");
}

/// A backend that "runs" code by a tiny script: `print X` prints X to stdout, `fail` writes to stderr and exits 3,
/// `sleep` waits (printing `tick`) until cancelled or 20 s, `timeout` times out.
struct Scripted;

#[async_trait::async_trait]
impl sandlot_core::Backend for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn runners(&self) -> Vec<sandlot_core::RunnerInfo> {
        [sandlot_core::Language::Python, sandlot_core::Language::Bash]
            .map(|language| sandlot_core::RunnerInfo {
                language,
                image: "scripted".into(),
                version: "1".into(),
                packages: Default::default(),
            })
            .to_vec()
    }
    async fn run(
        &self,
        job: sandlot_core::Job,
        sink: &dyn sandlot_core::OutputSink,
    ) -> sandlot_core::Result<sandlot_core::RunOutcome> {
        use sandlot_core::{OutputChunk, RunOutcome, Stream, Termination};
        let mut outcome = RunOutcome::empty(Termination::Exited { code: 0 }, std::time::Duration::from_millis(5));
        if let Some(text) = job.code.strip_prefix("print ") {
            outcome.stdout = format!("{text}\n");
            sink.output(OutputChunk { stream: Stream::Stdout, data: outcome.stdout.clone().into_bytes() });
        } else if job.code == "fail" {
            outcome.stderr = "bad".into();
            sink.output(OutputChunk { stream: Stream::Stderr, data: b"bad".to_vec() });
            outcome.termination = Termination::Exited { code: 3 };
        } else if job.code == "timeout" {
            outcome.termination = Termination::TimedOut;
        } else if job.code == "sleep" {
            sink.output(OutputChunk { stream: Stream::Stdout, data: b"tick\n".to_vec() });
            outcome.stdout = "tick\n".into();
            tokio::select! {
                _ = job.cancel.cancelled() => outcome.termination = Termination::Cancelled,
                _ = tokio::time::sleep(std::time::Duration::from_secs(20)) => {}
            }
        }
        Ok(outcome)
    }
}

fn running_router() -> (tempfile::TempDir, axum::Router) {
    running_router_with(Authenticator::token("tok"))
}

/// A router over the scripted backend and a run history, taking the credentials `auth` checks.
fn running_router_with(auth: Authenticator) -> (tempfile::TempDir, axum::Router) {
    let (root, mut state) = common::state("secret", None);
    let history = sandlot_core::History::open(root.path().join("history.db"), false).unwrap();
    let engine = sandlot_core::Engine::new(
        std::sync::Arc::new(Scripted),
        sandlot_core::Workspaces::new(root.path()),
        sandlot_core::EngineConfig::default(),
    )
    .with_history(history);
    state.engine = std::sync::Arc::new(engine);
    let router = app(state, auth, HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, router)
}

fn ndjson(path: &str, body: &Value) -> Request<Body> {
    let mut request = post(path, body);
    request.headers_mut().insert(header::ACCEPT, "application/x-ndjson".parse().unwrap());
    request
}

/// The NDJSON lines of a whole response.
async fn lines(router: &axum::Router, request: Request<Body>) -> (StatusCode, Vec<Value>) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    (status, text.lines().map(|line| serde_json::from_str(line).unwrap()).collect())
}

#[tokio::test]
async fn execute_answers_baponis_result() {
    let (_root, router) = running_router();
    let cases = [
        (
            json!({ "code": "print hi", "language": "python" }),
            json!({ "success": true, "stdout": "hi\n", "stderr": "", "exit_code": 0, "error": null }),
        ),
        (
            json!({ "code": "fail", "thread_id": "t-ok" }),
            json!({ "success": false, "stdout": "", "stderr": "bad", "exit_code": 3, "error": null }),
        ),
        (
            json!({ "code": "timeout", "language": "bash" }),
            json!({ "success": false, "stdout": "", "stderr": "", "exit_code": 124, "error": "timeout" }),
        ),
    ];
    for (request, expected) in cases {
        let (status, body) = send(&router, post("/v1/sandbox/execute", &request)).await;
        assert_eq!((status, body), (StatusCode::OK, expected), "{request}");
    }
}

#[tokio::test]
async fn execute_errors_name_the_field_and_refuse_webhooks() {
    let (_root, router) = running_router();
    for (request, field) in [
        (json!({ "language": "python" }), "code"),
        (json!({ "code": "x", "language": "ruby" }), "language"),
        (json!({ "code": "x", "timeout": 0 }), "timeout"),
        (json!({ "code": "x", "thread_id": "../x" }), "thread_id"),
        (json!({ "code": "x", "env_vars": { "PATH": "/x" } }), "env_vars"),
        (json!({ "code": "x", "metadata": { "-bad": "v" } }), "metadata"),
    ] {
        let (status, body) = send(&router, post("/v1/sandbox/execute", &request)).await;
        assert_eq!((status, &body["error"]), (StatusCode::BAD_REQUEST, &json!("validation_error")), "{request}");
        assert!(body["message"].as_str().unwrap().starts_with(field), "{request}: {body}");
    }
    let mut webhook = post("/v1/sandbox/execute", &json!({ "code": "print x", "webhook_url": "https://hook.example" }));
    webhook.headers_mut().insert("prefer", "respond-async".parse().unwrap());
    let (status, body) = send(&router, webhook).await;
    assert_eq!((status, &body["error"]), (StatusCode::BAD_REQUEST, &json!("validation_error")));
}

#[tokio::test]
async fn streaming_sends_status_output_and_result_and_the_status_is_kept() {
    let (_root, router) = running_router();
    let (status, events) = lines(&router, ndjson("/v1/sandbox/execute", &json!({ "code": "print hi" }))).await;
    assert_eq!(status, StatusCode::OK);
    let trace = events[0]["trace_id"].as_str().unwrap().to_owned();
    assert!(trace.starts_with("trc_") && trace.len() == 24, "{trace}");
    let result = json!({ "success": true, "stdout": "hi\n", "stderr": "", "exit_code": 0, "error": null });
    assert_eq!(
        events,
        [
            json!({ "type": "status", "trace_id": trace, "status": "running", "seq": 1 }),
            json!({ "type": "output", "stream": "stdout", "data": "hi\n", "seq": 2 }),
            json!({ "type": "result", "trace_id": trace, "status": "success", "result": result, "output_truncated": false, "seq": 3 }),
        ]
    );

    let get = |path: String| {
        Request::get(path)
            .header(header::HOST, "localhost")
            .header(header::AUTHORIZATION, "Bearer tok")
            .body(Body::empty())
            .unwrap()
    };
    let (status, execution) = send(&router, get(format!("/p/baponi/v1/executions/{trace}"))).await;
    assert_eq!(status, StatusCode::OK, "{execution}");
    assert_eq!(
        (
            &execution["status"],
            &execution["exit_code"],
            &execution["stdout"],
            &execution["stderr"],
            &execution["error"]
        ),
        (&json!("success"), &json!(0), &json!("hi\n"), &json!(""), &json!(null))
    );
    assert!(execution["created_at"].is_string() && execution["completed_at"].is_string(), "{execution}");

    let (_, replay) = lines(&router, get(format!("/p/baponi/v1/executions/{trace}/output"))).await;
    assert_eq!(replay, events, "an ended execution's replay is its stream again");
    let (_, tail) = lines(&router, get(format!("/p/baponi/v1/executions/{trace}/output?after_seq=2"))).await;
    assert_eq!(tail, events[2..]);

    let (status, body) = send(&router, get("/p/baponi/v1/executions/trc_00000000000000000000".into())).await;
    assert_eq!((status, &body["error"]), (StatusCode::NOT_FOUND, &json!("not_found")));
}

#[tokio::test]
async fn a_busy_thread_is_409_and_cancel_stops_the_running_execution() {
    let (_root, router) = running_router();
    let response = router
        .clone()
        .oneshot(ndjson("/v1/sandbox/execute", &json!({ "code": "sleep", "thread_id": "busy" })))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let status: Value = serde_json::from_slice(&first).unwrap();
    let trace = status["trace_id"].as_str().unwrap().to_owned();

    for request in [
        post("/v1/sandbox/execute", &json!({ "code": "print x", "thread_id": "busy" })),
        ndjson("/v1/sandbox/execute", &json!({ "code": "print x", "thread_id": "busy" })),
    ] {
        let (status, refused) = send(&router, request).await;
        assert_eq!((status, &refused["error"]), (StatusCode::CONFLICT, &json!("conflict")), "{refused}");
    }

    let (status, cancelled) = send(&router, post(&format!("/v1/executions/{trace}/cancel"), &json!({}))).await;
    assert_eq!((status, cancelled), (StatusCode::OK, json!({ "trace_id": trace, "status": "cancelled" })));
    let rest = body.collect().await.unwrap().to_bytes();
    let last: Value = serde_json::from_str(String::from_utf8_lossy(&rest).lines().last().unwrap()).unwrap();
    assert_eq!(
        (&last["type"], &last["status"], &last["result"]["error"]),
        (&json!("result"), &json!("cancelled"), &json!("cancelled"))
    );
    let (status, again) = send(&router, post(&format!("/v1/executions/{trace}/cancel"), &json!({}))).await;
    assert_eq!((status, again), (StatusCode::OK, json!({ "trace_id": trace, "status": "cancelled" })));
}

// ---------------------------------------------------------------------------------------------------------------
// Tenants (docs/security.md, "Tenants"): for two JWT subjects and for two named tokens, B finds nothing of A's: a
// thread of A's answers B exactly as a thread that does not exist, and a trace id of A's as an unknown one; A still
// sees its own, and the admin sees A's.

fn get_as(path: &str, bearer: &str) -> Request<Body> {
    Request::get(format!("/p/baponi{path}"))
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, format!("Bearer {bearer}"))
        .body(Body::empty())
        .unwrap()
}

/// `status` and `body` as one JSON value with every `id` written `<id>` (see `common::tenants::naming`).
fn answer(status: StatusCode, body: &Value, id: &str) -> String {
    common::tenants::naming(&json!({ "status": status.as_u16(), "body": body }), id)
}

#[tokio::test]
async fn another_tenants_thread_is_a_thread_that_does_not_exist_to_the_files_api() {
    use common::tenants::{admin, authenticator, pairs};
    let (root, router) = running_router_with(authenticator());
    for (a, b) in pairs() {
        let thread = format!("{}-files", a.name);
        let missing = format!("{}-never-used", b.name);
        // A's upload makes the thread A's.
        let upload = json!({ "source": "thread", "id": thread, "path": "in/a.txt", "content_length": 5 });
        let (status, signed) = send(&router, post_as("/v1/files/upload_url", &upload, &a.bearer)).await;
        assert_eq!(status, StatusCode::OK, "{signed}");
        let put = Request::put(local(&signed["url"]))
            .header(header::HOST, "localhost")
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(Body::from("hello"))
            .unwrap();
        assert_eq!(send(&router, put).await.0, StatusCode::CREATED);

        // B lists, and asks to download, A's thread as a thread that does not exist.
        for (route, request) in [
            ("/v1/files/list", json!({ "source": "thread" })),
            ("/v1/files/list", json!({ "source": "thread", "path": "in" })),
            ("/v1/files/download_url", json!({ "source": "thread", "path": "in/a.txt" })),
        ] {
            let with_id = |id: &str| {
                let mut request = request.clone();
                request["id"] = json!(id);
                request
            };
            let (status, of_a) = send(&router, post_as(route, &with_id(&thread), &b.bearer)).await;
            let (missing_status, of_nobody) = send(&router, post_as(route, &with_id(&missing), &b.bearer)).await;
            assert_eq!(
                answer(status, &of_a, &thread),
                answer(missing_status, &of_nobody, &missing),
                "{route} {request}"
            );
        }
        let (status, listed) =
            send(&router, post_as("/v1/files/list", &json!({ "source": "thread", "id": thread }), &b.bearer)).await;
        assert_eq!((status, listed), (StatusCode::OK, json!({ "files": [], "truncated": false })));

        // B cannot write into it: no upload URL is signed.
        let upload = json!({ "source": "thread", "id": thread, "path": "planted.txt", "content_length": 1 });
        let (status, refused) = send(&router, post_as("/v1/files/upload_url", &upload, &b.bearer)).await;
        let message = format!("id: thread {thread:?} is not available to this caller; use another id");
        assert_eq!(
            (status, refused),
            (StatusCode::BAD_REQUEST, json!({ "error": "validation_error", "message": message }))
        );

        // A sees its own; the admin sees A's and gets a URL that serves the file.
        for who in [&a, &admin()] {
            let (status, listed) =
                send(&router, post_as("/v1/files/list", &json!({ "source": "thread", "id": thread }), &who.bearer))
                    .await;
            let paths: Vec<_> = listed["files"].as_array().unwrap().iter().map(|f| f["path"].clone()).collect();
            assert_eq!((status, paths), (StatusCode::OK, vec![json!("in/a.txt")]), "{}", who.name);
        }
        let request = json!({ "source": "thread", "id": thread, "path": "in/a.txt" });
        let (status, signed) = send(&router, post_as("/v1/files/download_url", &request, &admin().bearer)).await;
        assert_eq!(status, StatusCode::OK, "{signed}");
        let download =
            Request::get(local(&signed["url"])).header(header::HOST, "localhost").body(Body::empty()).unwrap();
        let response = router.clone().oneshot(download).await.unwrap();
        assert_eq!(response.into_body().collect().await.unwrap().to_bytes().as_ref(), b"hello");
    }
    assert!(!root.path().join("qa-never-used").exists() && !root.path().join("bob-never-used").exists());
}

#[tokio::test]
async fn another_tenants_derived_workspace_is_neither_read_nor_planted_through_the_files_api() {
    use common::tenants::{authenticator, pairs};
    use sandlot_server::kit::tenant_workspaces::profile_workspace;
    let (root, router) = running_router_with(authenticator());
    for (a, b) in pairs() {
        for prefix in ["codegen", "osb"] {
            let of_a = profile_workspace(prefix, a.name, None).unwrap().to_string();
            // Before A ever used it, B can make it no more than after.
            let upload = json!({ "source": "thread", "id": of_a, "path": "plant.txt", "content_length": 1 });
            let (status, refused) = send(&router, post_as("/v1/files/upload_url", &upload, &b.bearer)).await;
            assert_eq!((status, &refused["error"]), (StatusCode::BAD_REQUEST, &json!("validation_error")), "{refused}");
            assert!(!root.path().join(&of_a).exists(), "{of_a}: a refused upload URL makes nothing");
            // A's own workspace, once A wrote there, lists nothing to B.
            let upload = json!({ "source": "thread", "id": of_a, "path": "mine.txt", "content_length": 2 });
            let (status, signed) = send(&router, post_as("/v1/files/upload_url", &upload, &a.bearer)).await;
            assert_eq!(status, StatusCode::OK, "{signed}");
            let put =
                Request::put(local(&signed["url"])).header(header::HOST, "localhost").body(Body::from("hi")).unwrap();
            assert_eq!(send(&router, put).await.0, StatusCode::CREATED);
            let list = json!({ "source": "thread", "id": of_a });
            let (status, listed) = send(&router, post_as("/v1/files/list", &list, &b.bearer)).await;
            assert_eq!((status, listed), (StatusCode::OK, json!({ "files": [], "truncated": false })), "{of_a}");
        }
    }
}

/// The trace id of the execution whose NDJSON stream this is: its first line's.
async fn first_trace(body: &mut Body) -> String {
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let status: Value = serde_json::from_slice(&first).unwrap();
    status["trace_id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn trace_ids_are_whole_and_name_only_the_callers_own_executions() {
    use common::tenants::{admin, authenticator, pairs};
    let (_root, router) = running_router_with(authenticator());
    let unknown = format!("trc_{}", "A".repeat(20));
    for (a, b) in pairs() {
        let mut stream = ndjson("/v1/sandbox/execute", &json!({ "code": "print hi" }));
        stream.headers_mut().insert(header::AUTHORIZATION, format!("Bearer {}", a.bearer).parse().unwrap());
        let (status, events) = lines(&router, stream).await;
        assert_eq!(status, StatusCode::OK);
        let trace = events[0]["trace_id"].as_str().unwrap().to_owned();
        assert!(trace.starts_with("trc_") && trace.len() == 24, "{trace}");

        // B gets for A's trace id exactly what it gets for an unknown one, on every route.
        let routes = |trace: &str| {
            [
                get_as(&format!("/v1/executions/{trace}"), &b.bearer),
                get_as(&format!("/v1/executions/{trace}/output"), &b.bearer),
                post_as(&format!("/v1/executions/{trace}/cancel"), &json!({}), &b.bearer),
            ]
        };
        for (of_a, of_nobody) in routes(&trace).into_iter().zip(routes(&unknown)) {
            let (status, body) = send(&router, of_a).await;
            let (unknown_status, unknown_body) = send(&router, of_nobody).await;
            assert_eq!(answer(status, &body, &trace), answer(unknown_status, &unknown_body, &unknown));
            assert_eq!((status, &body["error"]), (StatusCode::NOT_FOUND, &json!("not_found")));
        }

        // A finds its own by the whole id, never by a prefix; the admin finds A's.
        let (status, own) = send(&router, get_as(&format!("/v1/executions/{trace}"), &a.bearer)).await;
        assert_eq!((status, &own["status"], &own["stdout"]), (StatusCode::OK, &json!("success"), &json!("hi\n")));
        let prefix = &trace[..20];
        let (status, body) = send(&router, get_as(&format!("/v1/executions/{prefix}"), &a.bearer)).await;
        let message = format!("no execution {prefix:?}");
        assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({ "error": "not_found", "message": message })));
        let (status, seen) = send(&router, get_as(&format!("/v1/executions/{trace}"), &admin().bearer)).await;
        assert_eq!((status, seen), (StatusCode::OK, own));
    }
}

#[tokio::test]
async fn another_tenants_running_execution_is_unknown_and_cannot_be_cancelled() {
    use common::tenants::{admin, authenticator, pairs};
    let (_root, router) = running_router_with(authenticator());
    for (a, b) in pairs() {
        let thread = format!("{}-long", a.name);
        let mut stream = ndjson("/v1/sandbox/execute", &json!({ "code": "sleep", "thread_id": thread }));
        stream.headers_mut().insert(header::AUTHORIZATION, format!("Bearer {}", a.bearer).parse().unwrap());
        let response = router.clone().oneshot(stream).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let trace = first_trace(&mut body).await;
        let unknown = format!("trc_{}", "_".repeat(20));

        let cancel = |trace: &str, bearer: &str| post_as(&format!("/v1/executions/{trace}/cancel"), &json!({}), bearer);
        let (status, refused) = send(&router, cancel(&trace, &b.bearer)).await;
        let (unknown_status, unknown_body) = send(&router, cancel(&unknown, &b.bearer)).await;
        assert_eq!(answer(status, &refused, &trace), answer(unknown_status, &unknown_body, &unknown));
        let (status, body_b) = send(&router, get_as(&format!("/v1/executions/{trace}"), &b.bearer)).await;
        assert_eq!((status, &body_b["error"]), (StatusCode::NOT_FOUND, &json!("not_found")));
        // B's run into A's thread is refused as a bad thread_id, not as busy: the thread is not B's to know about.
        let request = json!({ "code": "print x", "thread_id": thread });
        let (status, refused) = send(&router, post_as("/v1/sandbox/execute", &request, &b.bearer)).await;
        let message = format!("thread_id: thread {thread:?} is not available to this caller; use another thread_id");
        assert_eq!(
            (status, refused),
            (StatusCode::BAD_REQUEST, json!({ "error": "validation_error", "message": message }))
        );

        // Still running for A; the admin may cancel it.
        let (status, own) = send(&router, get_as(&format!("/v1/executions/{trace}"), &a.bearer)).await;
        assert_eq!((status, &own["status"]), (StatusCode::OK, &json!("running")));
        let (status, cancelled) = send(&router, cancel(&trace, &admin().bearer)).await;
        assert_eq!((status, cancelled), (StatusCode::OK, json!({ "trace_id": trace, "status": "cancelled" })));
        let rest = body.collect().await.unwrap().to_bytes();
        let last: Value = serde_json::from_str(String::from_utf8_lossy(&rest).lines().last().unwrap()).unwrap();
        assert_eq!((&last["type"], &last["status"]), (&json!("result"), &json!("cancelled")));
    }
}

/// A run can set a file's mtime past the year 9999 (`os.utime(path, (0, 2**40))`; tmpfs and btrfs keep it), which
/// humantime cannot format: the listing clamps it to the last second of 9999, and lists it again for the next caller.
/// The root is on tmpfs (`/dev/shm`): ext4 caps an mtime at the year 2446.
#[tokio::test]
async fn attack_a_file_modified_after_the_year_9999_is_listed_not_a_panic() {
    let (root, state) = common::state_in(tempfile::tempdir_in("/dev/shm").unwrap(), "secret", None);
    let router = app(state, Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    write(root.path(), "t9", "future.txt", b"x");
    let file = std::fs::File::options().write(true).open(root.path().join("t9/files/future.txt")).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1 << 40)).unwrap();
    for attempt in 0..2 {
        let (status, body) = send(&router, post("/v1/files/list", &json!({ "source": "thread", "id": "t9" }))).await;
        assert_eq!(status, StatusCode::OK, "attempt {attempt}: {body}");
        assert_eq!(body["files"][0]["modified"], json!("9999-12-31T23:59:59Z"), "attempt {attempt}: {body}");
    }
}
