//! Tenants of sandlot's own surface, by attack: with two named static tokens and two JWT subjects on one server,
//! every tenant tries another's conversation through each face that takes one (files as resources, the upload
//! tool, signed upload URLs, deletion, the resource listing) and another's session (Streamable HTTP, legacy SSE),
//! and gets exactly the answer an id that does not exist gets. An administrator sees everything; each tenant still
//! sees its own. The run faces (which need a runner) are attacked end to end in tests/e2e/python_v1/test_tenancy.py.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use sandlot_server::kit::{AllowedHosts, Authenticator, Credentials, JwtSettings};
use sandlot_server::{AppState, HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

const CI: &str = "ci-token-0123456789";
const OPS: &str = "ops-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";

fn jwt_for(subject: &str) -> String {
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
    let key = jsonwebtoken::EncodingKey::from_secret(b"jwt-secret");
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &json!({"sub": subject, "exp": exp}), &key).unwrap()
}

/// The four tenants' credentials: two named tokens, two JWT subjects.
fn tenants() -> [(&'static str, String); 4] {
    [("ci", CI.to_owned()), ("ops", OPS.to_owned()), ("alice", jwt_for("alice")), ("bob", jwt_for("bob"))]
}

fn server() -> (tempfile::TempDir, AppState, axum::Router) {
    let (root, state) = common::state("secret", None);
    let settings = JwtSettings { secret: Some("jwt-secret".into()), ..JwtSettings::default() };
    let credentials = Credentials::jwt(&settings)
        .unwrap()
        .with_tokens(vec![("ci".into(), CI.into()), ("ops".into(), OPS.into()), ("root".into(), ADMIN.into())])
        .unwrap();
    let auth = Authenticator::new(credentials).with_admins(["root".to_owned()]);
    let router = app(state.clone(), auth, HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, state, router)
}

use common::request;

async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    let json = text.lines().rev().find_map(|l| l.strip_prefix("data:")).unwrap_or(&text).trim().to_owned();
    let value = serde_json::from_str(&json).unwrap_or(Value::String(text.into_owned()));
    (status, value)
}

/// A stateless JSON-RPC call as `token`; the answer with every trace id blanked (they differ per call).
async fn rpc(router: &axum::Router, token: &str, method: &str, params: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let (_, mut answer) = send(router, request("POST", "/mcp", token, body)).await;
    blank_trace_ids(&mut answer);
    answer
}

fn blank_trace_ids(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                if key == "trace_id" {
                    *inner = Value::Null;
                } else {
                    blank_trace_ids(inner);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(blank_trace_ids),
        _ => {}
    }
}

/// `victim` uploads `secret.txt` into `conversation` (which makes it the owner).
async fn plant(router: &axum::Router, victim: &str, conversation: &str) {
    let arguments = json!({ "conversationId": conversation, "path": "secret.txt", "content": "victim's\n" });
    let answer =
        rpc(router, victim, "tools/call", json!({ "name": "sandbox_upload_file", "arguments": arguments })).await;
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    assert!(answer["result"].is_object(), "{answer}");
}

fn listed_uris(answer: &Value) -> Vec<String> {
    answer["result"]["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap().to_owned()).collect()
}

/// The same request for the victim's conversation and for one that does not exist, with the id replaced, must
/// get the same answer.
fn same_as_missing(victims: &Value, missing: &Value, victim_id: &str, missing_id: &str) {
    let shown = victims.to_string().replace(victim_id, missing_id);
    assert_eq!(shown, missing.to_string(), "another tenant's {victim_id} must look like {missing_id}");
}

#[tokio::test]
async fn no_tenant_reads_lists_writes_or_deletes_anothers_conversation() {
    let (root, _state, router) = server();
    let all = tenants();
    for (victim_name, victim) in &all {
        let conversation = format!("conv-of-{victim_name}");
        plant(&router, victim, &conversation).await;
        for (attacker_name, attacker) in all.iter().filter(|(name, _)| name != victim_name) {
            let missing = format!("none-{attacker_name}");
            let file = |id: &str| json!({ "uri": format!("sandlot://conversations/{id}/files/secret.txt") });
            // Read a file as a resource.
            let read = rpc(&router, attacker, "resources/read", file(&conversation)).await;
            let read_missing = rpc(&router, attacker, "resources/read", file(&missing)).await;
            same_as_missing(&read, &read_missing, &conversation, &missing);
            assert!(!read.to_string().contains("victim's"), "{read}");
            // List: nothing of the victim's.
            let listed = rpc(&router, attacker, "resources/list", json!({})).await;
            assert!(listed_uris(&listed).iter().all(|uri| !uri.contains(&conversation)), "{listed}");
            // The conversation's runs resource answers as a missing conversation's.
            let runs = |id: &str| json!({ "uri": format!("sandlot://conversations/{id}/runs") });
            let runs_read = rpc(&router, attacker, "resources/read", runs(&conversation)).await;
            let runs_missing = rpc(&router, attacker, "resources/read", runs(&missing)).await;
            same_as_missing(&runs_read, &runs_missing, &conversation, &missing);
            // Write into it: refused, naming the conversation.
            let upload = json!({ "name": "sandbox_upload_file", "arguments": {
                "conversationId": conversation, "path": "planted.txt", "content": "x" } });
            let answer = rpc(&router, attacker, "tools/call", upload).await;
            assert_eq!(answer["error"]["data"]["field"], "conversationId", "{answer}");
            // A signed upload URL for it: refused.
            let (status, body) = send(
                &router,
                request(
                    "POST",
                    &format!("/v1/conversations/{conversation}/uploads"),
                    attacker,
                    json!({"path": "p.txt"}),
                ),
            )
            .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
            // Delete it: 404 exactly as a missing one.
            let deleted =
                send(&router, request("DELETE", &format!("/v1/conversations/{conversation}"), attacker, Value::Null))
                    .await;
            let deleted_missing =
                send(&router, request("DELETE", &format!("/v1/conversations/{missing}"), attacker, Value::Null)).await;
            assert_eq!(deleted.0, StatusCode::NOT_FOUND);
            same_as_missing(&deleted.1, &deleted_missing.1, &conversation, &missing);
        }
        // Nothing was planted, and the victim's file is still there and still readable by the victim.
        let files = root.path().join(&conversation).join("files");
        assert_eq!(std::fs::read_dir(&files).unwrap().count(), 1);
        let own = rpc(
            &router,
            victim,
            "resources/read",
            json!({ "uri": format!("sandlot://conversations/{conversation}/files/secret.txt") }),
        )
        .await;
        assert_eq!(own["result"]["contents"][0]["text"], "victim's\n", "{own}");
        let listed = rpc(&router, victim, "resources/list", json!({})).await;
        assert!(listed_uris(&listed).contains(&format!("sandlot://conversations/{conversation}/files/secret.txt")));
    }
    // The administrator sees every tenant's files.
    let listed = rpc(&router, ADMIN, "resources/list", json!({})).await;
    for (name, _) in &all {
        assert!(listed_uris(&listed).contains(&format!("sandlot://conversations/conv-of-{name}/files/secret.txt")));
    }
}

#[tokio::test]
async fn a_workspace_derived_for_another_caller_cannot_be_made_by_anyone_else() {
    let (_root, _state, router) = server();
    let alices_codegen = sandlot_server::surfaces::codegen::tenant::workspace_of("alice", None).unwrap();
    let upload = json!({ "name": "sandbox_upload_file", "arguments": {
        "conversationId": alices_codegen.as_str(), "path": "planted.txt", "content": "x" } });
    let answer = rpc(&router, &jwt_for("bob"), "tools/call", upload.clone()).await;
    assert_eq!(answer["error"]["data"]["field"], "conversationId", "{answer}");
    let answer = rpc(&router, &jwt_for("alice"), "tools/call", upload).await;
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    assert!(answer["result"].is_object(), "{answer}");
}

#[tokio::test]
async fn a_streamable_http_session_serves_only_the_tenant_that_opened_it() {
    let (_root, _state, router) = server();
    let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } });
    let response = router.clone().oneshot(request("POST", "/mcp", CI, initialize)).await.unwrap();
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
    let with_session = |token: &str, id: &str| {
        let mut request = request("POST", "/mcp", token, list.clone());
        request.headers_mut().insert("mcp-session-id", id.parse().unwrap());
        request.headers_mut().insert("mcp-protocol-version", "2025-06-18".parse().unwrap());
        request
    };
    let (status, _) = send(&router, with_session(CI, &session)).await;
    assert_eq!(status, StatusCode::OK, "the opener uses its session");
    let others = send(&router, with_session(OPS, &session)).await;
    let unknown = send(&router, with_session(OPS, "00000000-0000-0000-0000-000000000000")).await;
    assert_eq!(others, unknown, "another tenant's session is an unknown session");
    assert_ne!(others.0, StatusCode::OK);
    // Nor can another tenant end it: its DELETE is answered as one of an unknown session, and changes nothing.
    let delete = |id: &str| {
        let mut delete = request("DELETE", "/mcp", OPS, Value::Null);
        delete.headers_mut().insert("mcp-session-id", id.parse().unwrap());
        delete
    };
    let deleted = send(&router, delete(&session)).await;
    assert_eq!(deleted, send(&router, delete("00000000-0000-0000-0000-000000000000")).await);
    assert_eq!(send(&router, with_session(CI, &session)).await.0, StatusCode::OK, "still the opener's");
}

#[tokio::test]
async fn a_legacy_sse_session_takes_messages_only_from_the_tenant_that_opened_it() {
    let (_root, _state, router) = server();
    let open = router.clone().oneshot(request("GET", "/sse", CI, Value::Null)).await.unwrap();
    assert_eq!(open.status(), StatusCode::OK);
    let mut body = open.into_body().into_data_stream();
    let first = futures::StreamExt::next(&mut body).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&first).into_owned();
    let endpoint = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap().trim().to_owned();
    let message = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let answer = |token: &'static str, uri: String| {
        let router = router.clone();
        let message = message.clone();
        async move {
            let response = router.oneshot(request("POST", &uri, token, message)).await.unwrap();
            (response.status(), response.into_body().collect().await.unwrap().to_bytes())
        }
    };
    let unknown = endpoint.split("sessionId=").next().unwrap().to_owned() + "sessionId=no-such-session";
    assert_eq!(answer(OPS, endpoint.clone()).await, answer(OPS, unknown).await);
    assert_eq!(answer(CI, endpoint).await.0, StatusCode::ACCEPTED);
}
