//! The faces of live sandboxes through the HTTP app, over an engine whose backend keeps none (the runs themselves
//! are tests/e2e/python_v1/test_sessions.py): `sandbox_run_code`'s `session` refused naming the field, and its
//! default off there whatever `SANDLOT_SESSION_DEFAULT` says; `sandbox_session`'s bad arguments, each -32602 naming
//! its field with the server still serving; another tenant's conversation answered through `sandbox_session` and
//! `GET /v1/conversations[/{id}]` exactly as one that does not exist; the listing per tenant; and the live-sandbox
//! gauges on the metrics listener.

use crate::common;

use std::sync::Arc;

use axum::http::StatusCode;
use http_body_util::BodyExt;
use sandlot_core::{Engine, EngineConfig, SessionConfig, Signer, Workspaces};
use sandlot_server::kit::AllowedHosts;
use sandlot_server::{AppState, FileUrls, HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

use common::tenants::{Who, admin, authenticator, naming, pairs};

/// The app over a temporary root, its engine's live sandboxes configured by `sessions`, its backend without any.
fn server(sessions: SessionConfig) -> (tempfile::TempDir, AppState, axum::Router) {
    let root = tempfile::tempdir().unwrap();
    let config = EngineConfig { sessions, ..EngineConfig::default() };
    let engine = Engine::new(Arc::new(common::NoRunners), Workspaces::new(root.path()), config);
    let state = AppState {
        engine: Arc::new(engine),
        files: FileUrls { signer: Signer::new("secret"), public_base_url: "http://test".into(), ttl: None },
        shutdown: Default::default(),
        tool_names: Default::default(),
        resource_read_bytes: sandlot_server::DEFAULT_RESOURCE_READ_BYTES,
        scrub_secrets: false,
    };
    let router = app(state.clone(), authenticator(), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, state, router)
}

/// `method uri` as `who` with `body`: the status and the JSON answer (an SSE reply's last message).
async fn send(router: &axum::Router, who: &Who, method: &str, uri: &str, body: Value) -> (StatusCode, Value) {
    let response = router.clone().oneshot(common::request(method, uri, &who.bearer, body)).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, if bytes.is_empty() { Value::Null } else { common::jsonrpc_answer(&bytes) })
}

/// A stateless `tools/call` of `tool` as `who`: the JSON-RPC answer, its trace id blanked (one per call).
async fn call(router: &axum::Router, who: &Who, tool: &str, arguments: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": tool, "arguments": arguments } });
    let (status, mut answer) = send(router, who, "POST", "/mcp", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    if let Some(data) = answer.pointer_mut("/error/data/trace_id") {
        *data = Value::Null;
    }
    answer
}

/// The `field` and code of an error answer.
fn refused(answer: &Value) -> (i64, &str) {
    (
        answer["error"]["code"].as_i64().unwrap_or_default(),
        answer["error"]["data"]["field"].as_str().unwrap_or_default(),
    )
}

#[tokio::test]
async fn session_true_on_a_backend_without_live_sandboxes_is_refused_naming_session() {
    let (_root, _state, router) = server(SessionConfig::default());
    let who = admin();
    let run = json!({ "conversationId": "c", "language": "python", "code": "x = 1", "session": true });
    let answer = call(&router, &who, "sandbox_run_code", run).await;
    assert_eq!(refused(&answer), (-32602, "session"), "{answer}");
    assert_eq!(answer["error"]["message"], "invalid session: the none backend cannot keep a sandbox between calls");
    let mistyped = json!({ "conversationId": "c", "language": "python", "code": "1", "session": "yes" });
    assert_eq!(refused(&call(&router, &who, "sandbox_run_code", mistyped).await), (-32602, "session"));
    // The server keeps serving: the same call without session reaches the engine (which has no runner).
    let plain = json!({ "conversationId": "c", "language": "python", "code": "x = 1" });
    let answer = call(&router, &who, "sandbox_run_code", plain).await;
    assert_eq!(answer["result"]["structuredContent"]["output"], "no runner for language python; available: none");
    assert!(answer["result"]["structuredContent"].get("session").is_none(), "{answer}");
}

#[tokio::test]
async fn the_session_default_is_off_on_a_backend_without_live_sandboxes() {
    let (_root, state, router) = server(SessionConfig { session_default: true, ..SessionConfig::default() });
    assert!(state.engine.sessions().config().session_default && !state.engine.supports_sessions());
    let plain = json!({ "conversationId": "c", "language": "python", "code": "x = 1" });
    let answer = call(&router, &admin(), "sandbox_run_code", plain).await;
    assert_eq!(answer["result"]["structuredContent"]["output"], "no runner for language python; available: none");
}

#[tokio::test]
async fn sandbox_session_refuses_each_bad_argument_naming_it_and_keeps_serving() {
    let (_root, _state, router) = server(SessionConfig::default());
    let who = admin();
    for (arguments, field) in [
        (json!({ "action": "status" }), "conversationId"),
        (json!({ "conversationId": "c" }), "action"),
        (json!({ "conversationId": "c", "action": "reboot" }), "action"),
        (json!({ "conversationId": "c", "action": 3 }), "action"),
        (json!({ "conversationId": "a/../b", "action": "status" }), "conversationId"),
        (json!({ "conversationId": "", "action": "close" }), "conversationId"),
    ] {
        for tool in ["sandbox_session", "sandbox.session"] {
            let answer = call(&router, &who, tool, arguments.clone()).await;
            assert_eq!(refused(&answer), (-32602, field), "{tool} {arguments}: {answer}");
        }
    }
    let answer = call(&router, &who, "sandbox_session", json!({ "conversationId": "c", "action": "reboot" })).await;
    assert_eq!(answer["error"]["message"], "action: \"reboot\" is not one of status, restart, close");
    // Still serving: a good call gets its result.
    for action in ["status", "restart", "close"] {
        let answer = call(&router, &who, "sandbox_session", json!({ "conversationId": "c", "action": action })).await;
        let result = &answer["result"];
        let mut expected = json!({ "conversationId": "c", "action": action, "live": false });
        if action == "close" {
            expected["closed"] = json!(false);
        }
        assert_eq!(result["structuredContent"], expected, "{answer}");
        assert_eq!(result["content"][0]["text"], "conversation c has no live sandbox\n");
        assert_eq!(result["isError"], false);
    }
}

#[tokio::test]
async fn sandbox_session_is_listed_with_its_schemas() {
    let (_root, _state, router) = server(SessionConfig::default());
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
    let (_, listed) = send(&router, &admin(), "POST", "/mcp", body).await;
    let tool = listed["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "sandbox_session").unwrap();
    assert_eq!(tool["inputSchema"]["required"], json!(["conversationId", "action"]));
    assert_eq!(tool["outputSchema"]["required"], json!(["conversationId", "action", "live"]));
    let run_code =
        listed["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "sandbox_run_code").unwrap();
    assert_eq!(run_code["inputSchema"]["properties"]["session"]["type"], "boolean");
    assert_eq!(run_code["outputSchema"]["properties"]["session"]["required"], json!(["id", "calls", "stateLost"]));
}

/// Another tenant's conversation (made by an upload) through every face of live sandboxes: the same answer, word
/// for word but for the id, as a conversation that does not exist; nothing listed; the admin sees it.
#[tokio::test]
async fn another_tenant_s_conversation_reads_as_unknown() {
    for (a, b) in pairs() {
        let (_root, _state, router) = server(SessionConfig::default());
        let (theirs, nobody) = ("theirs-1", "nobody-1");
        let upload = json!({ "conversationId": theirs, "path": "a.txt", "content": "a" });
        let answer = call(&router, &a, "sandbox_upload_file", upload).await;
        assert_eq!(answer["result"]["isError"], false, "{answer}");

        for action in ["status", "restart", "close"] {
            let of = |id: &str| json!({ "conversationId": id, "action": action });
            let attack = call(&router, &b, "sandbox_session", of(theirs)).await;
            let missing = call(&router, &b, "sandbox_session", of(nobody)).await;
            assert_eq!(naming(&attack, theirs), naming(&missing, nobody), "{} on {action}", b.name);
            assert_eq!(attack["result"]["structuredContent"]["live"], false, "{attack}");
        }
        let (status, attack) = send(&router, &b, "GET", &format!("/v1/conversations/{theirs}"), Value::Null).await;
        let (missing_status, missing) =
            send(&router, &b, "GET", &format!("/v1/conversations/{nobody}"), Value::Null).await;
        assert_eq!((status, naming(&attack, theirs)), (missing_status, naming(&missing, nobody)));
        assert_eq!(status, StatusCode::NOT_FOUND, "{attack}");

        let (status, listed) = send(&router, &b, "GET", "/v1/conversations", Value::Null).await;
        assert_eq!((status, listed), (StatusCode::OK, json!({ "conversations": [], "truncated": false })));
        for who in [&a, &admin()] {
            let (status, listed) = send(&router, who, "GET", "/v1/conversations", Value::Null).await;
            assert_eq!(status, StatusCode::OK);
            let conversations = listed["conversations"].as_array().unwrap();
            assert_eq!(conversations.len(), 1, "{}: {listed}", who.name);
            assert_eq!(
                (&conversations[0]["conversationId"], &conversations[0]["live"]),
                (&json!(theirs), &Value::Null)
            );
            let (status, one) = send(&router, who, "GET", &format!("/v1/conversations/{theirs}"), Value::Null).await;
            assert_eq!((status, &one["conversationId"], &one["live"]), (StatusCode::OK, &json!(theirs), &Value::Null));
            assert!(one["lastUsed"].as_str().unwrap().ends_with('Z'), "{one}");
        }
    }
}

#[tokio::test]
async fn the_conversation_routes_refuse_a_bad_id_or_limit() {
    let (_root, _state, router) = server(SessionConfig::default());
    let who = admin();
    for uri in ["/v1/conversations?limit=0", "/v1/conversations?limit=501", "/v1/conversations?limit=x"] {
        let (status, answer) = send(&router, &who, "GET", uri, Value::Null).await;
        assert_eq!(
            (status, answer),
            (
                StatusCode::BAD_REQUEST,
                json!({ "error": "invalid_argument", "message": "invalid limit: must be a whole number from 1 to 500" })
            ),
            "{uri}"
        );
    }
    let (status, answer) = send(&router, &who, "GET", "/v1/conversations/.hidden", Value::Null).await;
    assert_eq!((status, &answer["error"]), (StatusCode::BAD_REQUEST, &json!("invalid_argument")), "{answer}");
    let (status, answer) = send(&router, &who, "GET", "/v1/conversations/none-yet", Value::Null).await;
    assert_eq!(
        (status, answer),
        (StatusCode::NOT_FOUND, json!({ "error": "not_found", "message": "no conversation none-yet" }))
    );
}

/// The gauges of live sandboxes are on the metrics listener from the start, at zero (the session manager moves
/// them); the recorder is this test process's own.
#[tokio::test]
async fn the_metrics_listener_shows_the_live_sandbox_gauges() {
    let (_root, state, _router) = server(SessionConfig::default());
    let handle = sandlot_server::kit::telemetry::install_prometheus("none").unwrap();
    let router = sandlot_server::kit::ops_app(state, handle, AllowedHosts::new(vec!["localhost".into()]));
    let request = axum::http::Request::get("/metrics")
        .header(axum::http::header::HOST, "127.0.0.1:9464")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    for line in [
        "# TYPE sandlot_live_sandboxes gauge",
        "sandlot_live_sandboxes 0",
        "# TYPE sandlot_live_sandbox_memory_bytes gauge",
        "sandlot_live_sandbox_memory_bytes 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
    }
}
