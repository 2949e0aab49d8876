//! What a model's API and a model itself need from the tool surface: tool names every model API accepts (the
//! dotted ones stay callable), and, from protocol 2025-11-25 on, bad arguments as a tool result the model can read
//! and correct (SEP-1303). Through the HTTP app without a network, statelessly (the version is the
//! `MCP-Protocol-Version` header) and in a session (the version negotiated at initialize).

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{AppState, ToolNames};
use sandlot_server::{HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

fn router(names: ToolNames) -> (tempfile::TempDir, AppState, axum::Router) {
    let (root, mut state) = common::state("secret", None);
    state.tool_names = names;
    let router =
        app(state.clone(), Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, state, router)
}

/// POSTs `body` to /mcp with the given extra headers: (status, session id, the JSON-RPC message).
async fn post(router: &axum::Router, body: Value, headers: &[(&str, &str)]) -> (StatusCode, Option<String>, Value) {
    let mut request = Request::post("/mcp")
        .header(header::HOST, "localhost")
        .header(header::AUTHORIZATION, "Bearer tok")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = router.clone().oneshot(request.body(Body::from(body.to_string())).unwrap()).await.unwrap();
    let status = response.status();
    let session = response.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    // A JSON body, or an SSE stream whose last `data:` line is the answer.
    let json = text.lines().rev().find_map(|l| l.strip_prefix("data:")).unwrap_or(&text).trim().to_owned();
    let value = if json.is_empty() { Value::Null } else { serde_json::from_str(&json).unwrap_or(Value::Null) };
    (status, session, value)
}

fn list() -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" })
}

fn call(name: &str, arguments: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": name, "arguments": arguments } })
}

/// A call as a client of `version` sends it: from 2026-07-28 on, with the version and capabilities in `_meta`.
fn call_at(version: &str, name: &str, arguments: Value) -> Value {
    let mut message = call(name, arguments);
    if version >= "2026-07-28" {
        message["params"]["_meta"] = json!({ "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {} });
    }
    message
}

/// OpenAI's rule for function names (Anthropic's is the same without the length): `^[a-zA-Z0-9_-]{1,64}$`.
fn accepted_by_model_apis(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn names(listed: &Value) -> Vec<String> {
    listed["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

/// Attack on the request a framework sends to its model: a dotted tool name (`sandbox.run_code`) makes OpenAI's and
/// Anthropic's APIs refuse the whole request. By default every listed name passes their rule, each tool is listed
/// once, and the dotted names still work when called.
#[tokio::test]
async fn listed_names_pass_the_model_api_rule_and_dotted_names_stay_callable() {
    let (_root, _state, router) = router(ToolNames::default());
    let (_, _, listed) = post(&router, list(), &[]).await;
    let listed = names(&listed);
    assert_eq!(
        listed,
        ["sandbox_run_code", "sandbox_list_runners", "sandbox_upload_file", "sandbox_session", "sandbox_browser"]
    );
    assert!(listed.iter().all(|n| accepted_by_model_apis(n)), "{listed:?}");
    for name in ["sandbox.list_runners", "sandbox_list_runners"] {
        let (status, _, answer) = post(&router, call(name, json!({})), &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(answer["result"]["structuredContent"]["languages"].is_array(), "{name}: {answer}");
    }
}

/// `SANDLOT_TOOL_NAMES=dotted` lists the original spec's names instead; the underscore ones stay callable.
#[tokio::test]
async fn the_dotted_setting_lists_the_spec_names_and_keeps_the_others_callable() {
    let (_root, _state, router) = router(ToolNames::Dotted);
    let (_, _, listed) = post(&router, list(), &[]).await;
    assert_eq!(
        names(&listed),
        ["sandbox.run_code", "sandbox.list_runners", "sandbox.upload_file", "sandbox.session", "sandbox.browser"]
    );
    let (_, _, answer) = post(&router, call("sandbox_list_runners", json!({})), &[]).await;
    assert!(answer["result"]["structuredContent"]["languages"].is_array(), "{answer}");
}

/// The bad arguments a model sends, and the field each answer must name.
fn bad_arguments() -> Vec<(Value, &'static str)> {
    vec![
        (json!({ "language": "python", "code": "1" }), "conversationId"),
        (json!({ "conversationId": "a/../b", "language": "python", "code": "1" }), "conversationId"),
        (json!({ "conversationId": "c", "language": 3, "code": "1" }), "language"),
        (json!({ "conversationId": "c", "language": "python", "code": "1", "timeoutSeconds": -1 }), "timeoutSeconds"),
        (json!({ "conversationId": "c", "language": "python", "code": "1", "timeoutSeconds": 1e9 }), "timeoutSeconds"),
        (json!({ "conversationId": "c", "language": "python", "code": "1", "env": { "A": 1 } }), "env.A"),
    ]
}

/// SEP-1303: under 2025-11-25 (and later) a bad argument is a result with `isError: true` whose text names the
/// field, so the model can correct its call; an unknown tool and a malformed message stay protocol errors.
#[tokio::test]
async fn under_2025_11_25_a_bad_argument_is_an_error_result_naming_the_field() {
    let (_root, _state, router) = router(ToolNames::default());
    for version in ["2025-11-25", "2026-07-28"] {
        // 2026-07-28 clients also name the method and the tool in headers (SEP-2243), and mirror the conversation
        // id, which the tool marks `x-mcp-header`.
        for (arguments, field) in bad_arguments() {
            let mut header =
                vec![("mcp-protocol-version", version), ("mcp-method", "tools/call"), ("mcp-name", "sandbox_run_code")];
            if let Some(conversation) = arguments["conversationId"].as_str() {
                header.push(("mcp-param-conversation-id", conversation));
            }
            let (status, _, answer) =
                post(&router, call_at(version, "sandbox_run_code", arguments.clone()), &header).await;
            let result = &answer["result"];
            let text = result["content"][0]["text"].as_str().unwrap_or_default();
            assert_eq!((status, &result["isError"]), (StatusCode::OK, &json!(true)), "{version} {arguments}: {answer}");
            assert!(text.contains(field), "{version} {arguments}: {text}");
        }
        let header =
            [("mcp-protocol-version", version), ("mcp-method", "tools/call"), ("mcp-name", "sandbox_no_such_tool")];
        let (_, _, answer) = post(&router, call_at(version, "sandbox_no_such_tool", json!({})), &header).await;
        assert_eq!(answer["error"]["code"], -32602, "{version}: {answer}");
    }
}

/// Older protocol versions (and a stateless request that names none, read as 2025-03-26) keep JSON-RPC -32602.
#[tokio::test]
async fn before_2025_11_25_a_bad_argument_stays_a_32602_error() {
    let (_root, _state, router) = router(ToolNames::default());
    for version in [Some("2025-06-18"), Some("2025-03-26"), None] {
        let header: Vec<_> = version.map(|v| ("mcp-protocol-version", v)).into_iter().collect();
        for (arguments, field) in bad_arguments() {
            let (_, _, answer) = post(&router, call("sandbox_run_code", arguments.clone()), &header).await;
            let top = field.split('.').next().unwrap();
            assert_eq!(
                (answer["error"]["code"].as_i64(), answer["error"]["data"]["field"].as_str()),
                (Some(-32602), Some(top)),
                "{version:?} {arguments}: {answer}"
            );
        }
    }
}

/// In a session, the version negotiated at initialize decides.
#[tokio::test]
async fn in_a_session_the_negotiated_version_decides() {
    for (version, is_result) in [("2025-11-25", true), ("2025-06-18", false)] {
        let (_root, _state, router) = router(ToolNames::default());
        let initialize = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } });
        let (status, session, _) = post(&router, initialize, &[]).await;
        let session = session.unwrap_or_else(|| panic!("{version}: no session ({status})"));
        let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", version)];
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        post(&router, initialized, &headers).await;
        let arguments = json!({ "conversationId": "c", "code": "1" });
        let (_, _, answer) = post(&router, call("sandbox.run_code", arguments), &headers).await;
        if is_result {
            assert_eq!(answer["result"]["isError"], true, "{version}: {answer}");
            assert!(answer["result"]["content"][0]["text"].as_str().unwrap().contains("language"), "{answer}");
        } else {
            assert_eq!(answer["error"]["data"]["field"], "language", "{version}: {answer}");
        }
    }
}
