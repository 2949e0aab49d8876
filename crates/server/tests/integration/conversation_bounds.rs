//! How many conversations, and bytes of disk in them, a tenant and the server may have (docs/security.md, "Tenants"
//! and "Data root and retention"): a caller spreading over new ids is stopped at a bound, with an error naming it and
//! its setting, on every face that makes conversations; deletions and retention give the room back. The roots are
//! filled on the host before the server starts (its ledger is built from the root), with the default bounds.

use crate::common;

use std::path::Path;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::tenants::{Who, authenticator, baponi_as, token};
use http_body_util::BodyExt;
use sandlot_server::kit::AllowedHosts;
use sandlot_server::surfaces::open_sandbox;
use sandlot_server::{AppState, HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

/// Makes `count` conversations `<prefix><i>` owned by `owner` on `root`, as a server would have left them.
fn leave_conversations(root: &Path, prefix: &str, owner: &str, count: usize) {
    for i in 0..count {
        let conversation = root.join(format!("{prefix}{i}"));
        std::fs::create_dir_all(conversation.join("files")).unwrap();
        std::fs::write(conversation.join("owner"), owner).unwrap();
    }
}

fn server(root: &tempfile::TempDir) -> (AppState, axum::Router) {
    server_over(sandlot_core::Workspaces::new(root.path()))
}

fn server_over(workspaces: sandlot_core::Workspaces) -> (AppState, axum::Router) {
    let state = common::state_over(workspaces, "secret", None);
    let router = app(state.clone(), authenticator(), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (state, router)
}

fn request(method: &str, uri: &str, who: &Who, body: Value) -> Request<Body> {
    common::request(method, uri, &who.bearer, body)
}

async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// `POST /v1/conversations/{id}/uploads` as `who`: the status and the body.
async fn upload_url(router: &axum::Router, who: &Who, id: &str) -> (StatusCode, Value) {
    send(router, request("POST", &format!("/v1/conversations/{id}/uploads"), who, json!({ "path": "f.txt" }))).await
}

/// `sandbox_upload_file` as `who` over stateless /mcp: the JSON-RPC answer.
async fn upload_tool(router: &axum::Router, who: &Who, id: &str) -> Value {
    let arguments = json!({ "conversationId": id, "path": "f.txt", "content": "x" });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "sandbox_upload_file", "arguments": arguments } });
    send(router, request("POST", "/mcp", who, body)).await.1
}

/// Checks that `who`'s new conversation `id` is refused on sandlot's REST, MCP and Baponi's Files API, and its new
/// open-sandbox workspace, with an error naming `setting`, and that nothing of them was made. (codegen's tools
/// claim their workspace through the same `conversation_access::claim`.)
async fn refused_everywhere(router: &axum::Router, root: &Path, who: &Who, id: &str, setting: &str) {
    let (status, body) = upload_url(router, who, id).await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("conversation_limit")), "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.starts_with("no new conversation: ") && message.contains(setting), "{message}");
    let answer = upload_tool(router, who, id).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["data"]["field"], "conversationId", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains(setting), "{answer}");
    let files_api = json!({ "source": "thread", "id": id, "path": "f.txt", "content_length": 1 });
    let (status, body) = baponi_as(router, "/v1/files/upload_url", files_api, who).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains(setting), "{body}");
    assert!(!root.join(id).exists(), "{id} was made");
    // open-sandbox's first write makes the caller's workspace: refused the same way.
    let write = json!({ "jsonrpc": "2.0", "id": 1, "method": "file.write", "params": { "path": "x", "content": "x" } });
    let mut osb = common::request("POST", "/p/open-sandbox/mcp", &who.bearer, write);
    osb.headers_mut().insert(header::ACCEPT, header::HeaderValue::from_static("application/json"));
    let (_, answer) = send(router, osb).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(answer.to_string().contains(setting), "{answer}");
    assert!(!root.join(open_sandbox::workspace_of(who.name).unwrap().as_str()).exists());
}

/// ATTACK: a tenant spreads over new conversation ids. Its 1000th conversation (the default
/// `SANDLOT_TENANT_MAX_CONVERSATIONS`) is made, the next is refused on every face with an error naming the setting;
/// its existing conversations and other tenants' new ones still work; a deletion gives the room back. Before, every
/// new id was made.
#[tokio::test]
async fn attack_a_tenant_spreading_over_new_conversations_is_stopped_at_its_bound() {
    let root = tempfile::tempdir().unwrap();
    let limit = sandlot_core::DEFAULT_TENANT_MAX_CONVERSATIONS as usize;
    leave_conversations(root.path(), "ci-", "ci", limit - 1);
    let (_state, router) = server(&root);
    let (ci, qa) = (token("ci"), token("qa"));
    assert_eq!(upload_url(&router, &ci, "ci-last").await.0, StatusCode::OK);
    refused_everywhere(&router, root.path(), &ci, "ci-one-more", "SANDLOT_TENANT_MAX_CONVERSATIONS").await;
    // Its own conversations still take files; another tenant still makes new ones.
    assert_eq!(upload_url(&router, &ci, "ci-0").await.0, StatusCode::OK);
    assert_eq!(upload_tool(&router, &ci, "ci-1").await["result"]["isError"], false);
    assert_eq!(upload_url(&router, &qa, "qa-first").await.0, StatusCode::OK);
    // A deletion gives the room back.
    let (status, body) = send(&router, request("DELETE", "/v1/conversations/ci-0", &ci, Value::Null)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(upload_url(&router, &ci, "ci-one-more").await.0, StatusCode::OK);
    refused_everywhere(&router, root.path(), &ci, "ci-two-more", "SANDLOT_TENANT_MAX_CONVERSATIONS").await;
}

/// ATTACK: tenants together fill the root with conversations (10 tenants, 1000 each: the default
/// `SANDLOT_MAX_CONVERSATIONS`); a new tenant's new conversation is refused naming the setting, until retention
/// removes an idle one. Before, every new id was made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_tenants_together_cannot_pass_the_servers_bound() {
    let root = tempfile::tempdir().unwrap();
    let per_tenant = sandlot_core::DEFAULT_TENANT_MAX_CONVERSATIONS as usize;
    let tenants = sandlot_core::DEFAULT_MAX_CONVERSATIONS as usize / per_tenant;
    for t in 0..tenants {
        leave_conversations(root.path(), &format!("t{t}-"), &format!("tenant-{t}"), per_tenant);
    }
    let (state, router) = server(&root);
    let qa = token("qa");
    refused_everywhere(&router, root.path(), &qa, "qa-first", "SANDLOT_MAX_CONVERSATIONS").await;
    // Retention removes the one conversation unused for a day (a time to live of an hour), and the room comes back
    // for one.
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(24 * 3600);
    for dir in [root.path().join("t0-0/files"), root.path().join("t0-0")] {
        std::fs::File::open(dir).unwrap().set_modified(day_ago).unwrap();
    }
    let removed = state.engine.remove_idle_conversations(std::time::Duration::from_secs(3600)).await.unwrap();
    assert_eq!(removed.iter().map(|id| id.as_str()).collect::<Vec<_>>(), ["t0-0"]);
    assert_eq!(upload_url(&router, &qa, "qa-first").await.0, StatusCode::OK);
    refused_everywhere(&router, root.path(), &qa, "qa-second", "SANDLOT_MAX_CONVERSATIONS").await;
}

/// A tenant whose conversations hold its byte bound gets no new conversation (the bound lowered here to 64 MiB, so
/// the test need not fill the disk: the default is half of 90 % of the root filesystem's free space); what uploads
/// add is counted, and another tenant is not held back.
#[tokio::test]
async fn a_tenant_whose_conversations_hold_its_byte_bound_gets_no_new_one() {
    let root = tempfile::tempdir().unwrap();
    let bounds = sandlot_core::ConversationBounds { tenant_max_bytes: Some(64 << 20), ..Default::default() };
    let (state, router) = server_over(sandlot_core::Workspaces::with_bounds(root.path(), bounds));
    let (ci, qa) = (token("ci"), token("qa"));
    assert_eq!(upload_url(&router, &ci, "ci-a").await.0, StatusCode::OK);
    // 64 MiB uploaded into it: counted once the upload is in place.
    let url = state.files.signer.upload_url("http://test", "ci-a", "big.bin", sandlot_server::unix_now() + 60);
    let put = Request::put(url.strip_prefix("http://test").unwrap())
        .header(header::HOST, "localhost")
        .body(Body::from(vec![0u8; 64 << 20]))
        .unwrap();
    assert_eq!(send(&router, put).await.0, StatusCode::CREATED);
    refused_everywhere(&router, root.path(), &ci, "ci-b", "SANDLOT_TENANT_CONVERSATIONS_MAX_MB").await;
    assert_eq!(upload_url(&router, &qa, "qa-a").await.0, StatusCode::OK);
}

/// The default byte bound is what the conversations hold at start-up plus 90 % of the root filesystem's free space
/// then, and a tenant's is half of it.
#[test]
fn the_default_byte_bounds_come_from_the_root_filesystems_free_space() {
    let root = tempfile::tempdir().unwrap();
    leave_conversations(root.path(), "c-", "ci", 3);
    let free = || {
        let stat = available_bytes(root.path());
        stat / 100 * sandlot_core::DEFAULT_FREE_SPACE_PERCENT
    };
    let before = free();
    let budget = sandlot_core::Workspaces::new(root.path()).budget().unwrap();
    let after = free();
    let held = budget.total.bytes;
    assert_eq!(budget.total.conversations, 3);
    // Other programs on the machine write and remove files meanwhile: the free space is known to within 4 GiB.
    let slack = 4 << 30;
    let expected = (held + before.min(after)).saturating_sub(slack)..=held + before.max(after) + slack;
    assert!(expected.contains(&budget.max_bytes), "{budget:?}, expected {expected:?}");
    assert_eq!(budget.tenant_max_bytes, budget.max_bytes / 2);
}

/// Bytes an unprivileged user may still write on the filesystem of `path` (`df`'s available).
fn available_bytes(path: &Path) -> u64 {
    let output = std::process::Command::new("df").args(["--output=avail", "-B1"]).arg(path).output().unwrap();
    String::from_utf8(output.stdout).unwrap().lines().nth(1).unwrap().trim().parse().unwrap()
}
