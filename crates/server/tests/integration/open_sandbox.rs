//! The open-sandbox profile's frame through `sandlot_server::app`: its three HTTP transports (`POST /mcp` as JSON or one SSE
//! frame, the one-shot `GET /mcp/sse?request=`, NDJSON on `POST /mcp/stream`), `initialize`'s version rules,
//! `mcp.capabilities`, the unified errors (fresh 32-hex trace ids) and its auth: every failure is HTTP 200 with one
//! -32001 error (id `null`: the body is never read), for sandlot's static token and for each wrong JWT.

use crate::common;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use sandlot_server::kit::{AllowedHosts, Authenticator, Credentials, JwtSettings};
use sandlot_server::surfaces::open_sandbox;
use sandlot_server::{HttpOptions, app};
use serde_json::{Value, json};
use tower::ServiceExt;

const BASE: &str = "/p/open-sandbox";

fn router_with(auth: Authenticator) -> (tempfile::TempDir, sandlot_server::AppState, axum::Router) {
    let (root, state) = common::state("s", None);
    let router = app(state.clone(), auth, HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])));
    (root, state, router)
}

fn router() -> (tempfile::TempDir, sandlot_server::AppState, axum::Router) {
    router_with(Authenticator::token("tok"))
}

fn request(
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: &str,
    accept: &str,
    body: &str,
) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(format!("{BASE}{path}")).header(header::HOST, "localhost");
    if let Some(token) = token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if !content_type.is_empty() {
        builder = builder.header(header::CONTENT_TYPE, content_type);
    }
    if !accept.is_empty() {
        builder = builder.header(header::ACCEPT, accept);
    }
    builder.body(Body::from(body.to_owned())).unwrap()
}

async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, String, String) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type =
        response.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, content_type, String::from_utf8(body.to_vec()).unwrap())
}

/// `POST /mcp` of `body` as JSON with the test token: the JSON-RPC answer.
async fn rpc(router: &axum::Router, body: Value) -> Value {
    rpc_as(router, "tok", body).await
}

/// [`rpc`] with the bearer credential `bearer`.
async fn rpc_as(router: &axum::Router, bearer: &str, body: Value) -> Value {
    let json = "application/json";
    let (status, content_type, text) =
        send(router, request("POST", "/mcp", Some(bearer), json, json, &body.to_string())).await;
    assert_eq!((status, content_type.as_str()), (StatusCode::OK, "application/json"), "{text}");
    serde_json::from_str(&text).unwrap()
}

/// Checks `answer` is the unified error `code`/`kind` for request `id` and returns its detail message.
fn unified_error(answer: &Value, id: Value, code: i64, kind: &str) -> String {
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(answer["id"], id, "{answer}");
    assert!(answer.get("result").is_none(), "{answer}");
    let error = &answer["error"];
    assert_eq!(error["code"], code, "{answer}");
    assert_eq!(error["message"], kind.replace('_', " ").replace("internal", "internal error"), "{answer}");
    let data = &error["data"];
    assert_eq!(data["code"], kind, "{answer}");
    assert_eq!(data["kind"], kind, "{answer}");
    let trace = data["trace_id"].as_str().unwrap();
    assert!(trace.len() == 32 && trace.chars().all(|c| c.is_ascii_hexdigit()), "{trace}");
    assert_eq!(data.as_object().unwrap().len(), 4, "{answer}");
    data["message"].as_str().unwrap().to_owned()
}

/// Puts `content` at `path` in the workspace of `caller`.
fn plant(root: &tempfile::TempDir, caller: &str, path: &str, content: &str) {
    let workspace = open_sandbox::workspace_of(caller).unwrap();
    let dir = root.path().join(workspace.as_str()).join("files");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(path), content).unwrap();
}

#[tokio::test]
async fn post_mcp_answers_json_or_one_sse_frame_and_202_for_notifications() {
    let (root, _state, router) = router();
    plant(&root, "api-token", "hello.txt", "hi there\n");
    let call = json!({"jsonrpc":"2.0","id":7,"method":"file.read","params":{"path":"hello.txt"}});
    assert_eq!(rpc(&router, call.clone()).await, json!({"jsonrpc":"2.0","id":7,"result":{"content":"hi there\n"}}));

    let (status, content_type, text) = send(
        &router,
        request(
            "POST",
            "/mcp",
            Some("tok"),
            "application/json",
            "application/json, text/event-stream",
            &call.to_string(),
        ),
    )
    .await;
    assert_eq!((status, content_type.as_str()), (StatusCode::OK, "text/event-stream"));
    assert_eq!(
        text,
        format!("event: message\ndata: {}\n\n", json!({"jsonrpc":"2.0","id":7,"result":{"content":"hi there\n"}}))
    );

    for notification in [
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":null,"method":"tools/list"}),
    ] {
        let (status, _, text) = send(
            &router,
            request("POST", "/mcp", Some("tok"), "application/json", "application/json", &notification.to_string()),
        )
        .await;
        assert_eq!((status, text.as_str()), (StatusCode::ACCEPTED, ""), "{notification}");
    }
}

#[tokio::test]
async fn other_http_methods_on_mcp_get_405_with_an_app_error() {
    let (_root, _state, router) = router();
    for method in ["GET", "PUT", "DELETE"] {
        let (status, content_type, text) = send(&router, request(method, "/mcp", Some("tok"), "", "", "")).await;
        assert_eq!((status, content_type.as_str()), (StatusCode::METHOD_NOT_ALLOWED, "application/json"));
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["code"], "method_not_allowed");
        assert_eq!(body["message"], format!("method {method} not allowed on /mcp"));
        assert_eq!(body["trace_id"].as_str().unwrap().len(), 32);
    }
}

#[tokio::test]
async fn tools_call_wraps_the_result_and_methods_return_it_raw() {
    let (root, _state, router) = router();
    plant(&root, "api-token", "a.txt", "A");
    let answer = rpc(
        &router,
        json!({"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"file.read","arguments":{"path":"a.txt"}}}),
    )
    .await;
    let result = json!({"content":"A"});
    assert_eq!(
        answer,
        json!({"jsonrpc":"2.0","id":"x","result":{
            "content":[{"type":"text","text":result.to_string()}],
            "structuredContent":result,
            "result":result,
        }})
    );
}

#[tokio::test]
async fn attack_a_sparse_16_mib_file_is_answered_within_its_budget_never_three_times() {
    let (root, _state, router) = router();
    let workspace = open_sandbox::workspace_of("api-token").unwrap();
    let dir = root.path().join(workspace.as_str()).join("files");
    std::fs::create_dir_all(&dir).unwrap();
    // 16 MiB of NUL bytes that take no disk: 96 MiB as JSON, which the answer carried three times (304 MiB).
    std::fs::File::create(dir.join("sparse")).unwrap().set_len(16 << 20).unwrap();
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file.read","arguments":{"path":"sparse"}}});
    let json = "application/json";
    let (status, _, text) = send(&router, request("POST", "/mcp", Some("tok"), json, json, &body.to_string())).await;
    assert_eq!(status, StatusCode::OK);
    // The result three times, as the product sends it (structuredContent, result, and the text block's JSON,
    // escaped once more), each within the 1 MiB budget: about 3.2 MiB, where it was 304 MiB.
    assert!(text.len() < 7 * 1024 * 1024 / 2, "{} bytes", text.len());
    let answer: Value = serde_json::from_str(&text).unwrap();
    let text_block = answer["result"]["structuredContent"].to_string();
    assert_eq!(answer["result"]["content"], json!([{"type": "text", "text": text_block}]));
    assert_eq!(answer["result"]["structuredContent"]["truncated"], true);
    assert_eq!(answer["result"]["structuredContent"], answer["result"]["result"]);
}

#[tokio::test]
async fn one_shot_sse_get_answers_one_frame_or_missing_request() {
    let (root, _state, router) = router();
    plant(&root, "api-token", "b.txt", "B");
    let call = json!({"jsonrpc":"2.0","id":1,"method":"file.read","params":{"path":"b.txt"}}).to_string();
    let query: String = url_encode(&call);
    let (status, content_type, text) =
        send(&router, request("GET", &format!("/mcp/sse?request={query}"), Some("tok"), "", "", "")).await;
    assert_eq!((status, content_type.as_str()), (StatusCode::OK, "text/event-stream"));
    assert_eq!(text, format!("event: message\ndata: {}\n\n", json!({"jsonrpc":"2.0","id":1,"result":{"content":"B"}})));

    let (status, _, text) = send(&router, request("GET", "/mcp/sse", Some("tok"), "", "", "")).await;
    assert_eq!(status, StatusCode::OK);
    let answer = common::jsonrpc_answer(text.as_bytes());
    assert_eq!(unified_error(&answer, Value::Null, -32600, "invalid_request"), "missing request");
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn ndjson_stream_answers_one_line_per_request_line() {
    let (root, _state, router) = router();
    plant(&root, "api-token", "c.txt", "C");
    let body = [
        json!({"jsonrpc":"2.0","id":1,"method":"file.read","params":{"path":"c.txt"}}).to_string(),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string(),
        String::new(),
        json!({"jsonrpc":"2.0","id":2,"method":"no.such"}).to_string(),
        "{not json".to_owned(),
    ]
    .join("\n");
    for content_type in ["application/x-ndjson", "application/jsonl"] {
        let (status, got_type, text) =
            send(&router, request("POST", "/mcp/stream", Some("tok"), content_type, "", &body)).await;
        assert_eq!((status, got_type.as_str()), (StatusCode::OK, "application/x-ndjson"));
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], json!({"jsonrpc":"2.0","id":1,"result":{"content":"C"}}));
        assert_eq!(unified_error(&lines[1], json!(2), -32601, "method_not_found"), "method not found: no.such");
        unified_error(&lines[2], Value::Null, -32600, "invalid_request");
    }
    // Another content type: one request, one JSON answer.
    let single = json!({"jsonrpc":"2.0","id":3,"method":"file.read","params":{"path":"c.txt"}}).to_string();
    let (status, got_type, text) =
        send(&router, request("POST", "/mcp/stream", Some("tok"), "application/json", "", &single)).await;
    assert_eq!((status, got_type.as_str()), (StatusCode::OK, "application/json"));
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"jsonrpc":"2.0","id":3,"result":{"content":"C"}}));
}

#[tokio::test]
async fn capabilities_list_every_tool_with_version_and_permissions() {
    let (_root, _state, router) = router();
    let answer = rpc(&router, json!({"jsonrpc":"2.0","id":1,"method":"mcp.capabilities"})).await;
    let result = &answer["result"];
    assert_eq!(result["protocol_version"], "1.0");
    let tools = result["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert!(names.contains(&"file.read") && names.contains(&"browser.navigate"), "{names:?}");
    for tool in tools {
        assert_eq!(tool["version"], "v1", "{tool}");
        assert_eq!(tool["permissions"]["allow"], true, "{tool}");
        assert!(["workspace", "network", "exec"].contains(&tool["permissions"]["scope"].as_str().unwrap()), "{tool}");
        assert_eq!(tool["schema"], json!({"input": tool["inputSchema"], "output": tool["outputSchema"]}), "{tool}");
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    let read = tools.iter().find(|t| t["name"] == "file.read").unwrap();
    assert_eq!(read["permissions"], json!({"allow":true,"scope":"workspace"}));
    let navigate = tools.iter().find(|t| t["name"] == "browser.navigate").unwrap();
    assert_eq!(navigate["permissions"]["scope"], "network");
    assert!(navigate["permissions"].get("reason").is_none(), "{navigate}");
    let downloads = tools.iter().find(|t| t["name"] == "browser_get_download_list").unwrap();
    assert!(downloads["permissions"]["reason"].is_string(), "{downloads}");

    let listed = rpc(&router, json!({"jsonrpc":"2.0","id":2,"method":"tools/list"})).await;
    assert_eq!(listed["result"], json!({"tools": result["tools"]}));
}

#[tokio::test]
async fn unknown_methods_tools_and_bad_requests_get_unified_errors() {
    let (_root, _state, router) = router();
    let first = rpc(&router, json!({"jsonrpc":"2.0","id":1,"method":"nope"})).await;
    assert_eq!(unified_error(&first, json!(1), -32601, "method_not_found"), "method not found: nope");
    let second = rpc(&router, json!({"jsonrpc":"2.0","id":1,"method":"nope"})).await;
    assert_ne!(first["error"]["data"]["trace_id"], second["error"]["data"]["trace_id"]);

    let unknown_tool =
        rpc(&router, json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"nope","arguments":{}}}))
            .await;
    assert_eq!(unified_error(&unknown_tool, json!(2), -32601, "method_not_found"), "unknown tool: nope");
    let no_name = rpc(&router, json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}})).await;
    unified_error(&no_name, json!(3), -32602, "invalid_params");
    let browser =
        rpc(&router, json!({"jsonrpc":"2.0","id":4,"method":"browser.navigate","params":{"url":"http://x"}})).await;
    unified_error(&browser, json!(4), -32010, "tool_error");
    let bad_version = rpc(&router, json!({"jsonrpc":"1.0","id":5,"method":"tools/list"})).await;
    unified_error(&bad_version, json!(5), -32600, "invalid_request");
    let no_method = rpc(&router, json!({"jsonrpc":"2.0","id":6})).await;
    unified_error(&no_method, json!(6), -32600, "invalid_request");

    let (status, _, text) =
        send(&router, request("POST", "/mcp", Some("tok"), "application/json", "application/json", "{oops")).await;
    assert_eq!(status, StatusCode::OK);
    unified_error(&serde_json::from_str(&text).unwrap(), Value::Null, -32600, "invalid_request");
}

#[tokio::test]
async fn initialize_echoes_supported_versions_and_refuses_others() {
    let (_root, _state, router) = router();
    for version in open_sandbox::SUPPORTED_PROTOCOL_VERSIONS {
        let answer = rpc(
            &router,
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":version,"capabilities":{}}}),
        )
        .await;
        assert_eq!(
            answer,
            json!({"jsonrpc":"2.0","id":1,"result":{
                "protocolVersion":version,
                "capabilities":{"tools":{"listChanged":false}},
                "serverInfo":{"name":"open-sandbox","version":"dev"},
            }})
        );
    }
    let snake =
        rpc(&router, json!({"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocol_version":"2025-03-26"}}))
            .await;
    assert_eq!(snake["result"]["protocolVersion"], "2025-03-26");
    let absent = rpc(&router, json!({"jsonrpc":"2.0","id":3,"method":"initialize","params":{}})).await;
    assert_eq!(absent["result"]["protocolVersion"], open_sandbox::LATEST_PROTOCOL_VERSION);

    for (method, params) in [
        ("initialize", json!({"protocolVersion":""})),
        ("initialize", json!({"protocolVersion":5})),
        ("tools/list", json!({"protocol_version":""})),
        ("mcp.capabilities", json!({"protocolVersion":null})),
    ] {
        let answer = rpc(&router, json!({"jsonrpc":"2.0","id":4,"method":method,"params":params})).await;
        let message = unified_error(&answer, json!(4), -32602, "invalid_params");
        assert!(message.starts_with("protocolVersion must be a non-empty string"), "{message}");
    }
    let answer =
        rpc(&router, json!({"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}))
            .await;
    let message = unified_error(&answer, json!(5), -32602, "invalid_params");
    assert_eq!(
        message,
        format!(
            "unsupported protocol version \"1999-01-01\"; supported: {}",
            open_sandbox::SUPPORTED_PROTOCOL_VERSIONS.join(", ")
        )
    );
}

/// A refused credential is answered from the headers, before the body is read: one -32001 error with id `null`
/// (the request's id is in the unread body) in the transport's shape, HTTP 200, and the connection closes.
#[tokio::test]
async fn missing_or_wrong_token_is_http_200_with_unauthorized() {
    let (_root, _state, router) = router();
    let body = json!({"jsonrpc":"2.0","id":9,"method":"tools/list"}).to_string();
    let requests = |token| {
        [
            ("application/json", request("POST", "/mcp", token, "application/json", "application/json", &body)),
            ("text/event-stream", request("POST", "/mcp", token, "application/json", "text/event-stream", &body)),
            ("text/event-stream", request("GET", "/mcp/sse?request=%7B%7D", token, "", "", "")),
            ("application/json", request("POST", "/mcp/stream", token, "application/json", "", &body)),
            (
                "application/x-ndjson",
                request("POST", "/mcp/stream", token, "application/x-ndjson", "", &format!("{body}\n{body}\n")),
            ),
        ]
    };
    for token in [None, Some("wrong")] {
        for (shape, request) in requests(token) {
            let response = router.clone().oneshot(request).await.unwrap();
            let head =
                |name| response.headers().get(name).map(|v: &header::HeaderValue| v.to_str().unwrap().to_owned());
            let head = (response.status(), head(header::CONTENT_TYPE), head(header::CONNECTION));
            assert_eq!(head, (StatusCode::OK, Some(shape.to_owned()), Some("close".to_owned())));
            let text = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
            let answers: Vec<Value> = match shape {
                "application/x-ndjson" => text.lines().map(|line| serde_json::from_str(line).unwrap()).collect(),
                _ => vec![common::jsonrpc_answer(text.as_bytes())],
            };
            assert_eq!(answers.len(), 1, "{text}");
            let message = unified_error(&answers[0], Value::Null, -32001, "unauthorized");
            let expected = if token.is_none() { "missing Authorization header" } else { "invalid bearer token" };
            assert!(message.starts_with(expected), "{message}");
        }
    }
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

#[tokio::test]
async fn jwt_failures_are_http_200_with_unauthorized_and_the_subject_picks_the_workspace() {
    let settings = JwtSettings {
        secret: Some("shared-secret".into()),
        audience: Some("sandlot".into()),
        issuer: Some("https://issuer.example".into()),
        ..JwtSettings::default()
    };
    let (root, _state, router) = router_with(Authenticator::new(Credentials::jwt(&settings).unwrap()));
    plant(&root, "alice", "mine.txt", "alice's");
    let sign = |claims: &Value, secret: &str| {
        encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    };
    let claims = |sub: &str, aud: &str, iss: &str, exp: i64| json!({"sub":sub,"aud":aud,"iss":iss,"exp":now() + exp});
    let read = json!({"jsonrpc":"2.0","id":1,"method":"file.read","params":{"path":"mine.txt"}}).to_string();
    let post = |token: Option<String>| {
        request("POST", "/mcp", token.as_deref(), "application/json", "application/json", &read)
    };

    let alice = sign(&claims("alice", "sandlot", "https://issuer.example", 300), "shared-secret");
    let (status, _, text) = send(&router, post(Some(alice))).await;
    assert_eq!(
        (status, serde_json::from_str::<Value>(&text).unwrap()["result"].clone()),
        (StatusCode::OK, json!({"content":"alice's"}))
    );
    // Bob's workspace is another one.
    let bob = sign(&claims("bob", "sandlot", "https://issuer.example", 300), "shared-secret");
    let (_, _, text) = send(&router, post(Some(bob))).await;
    unified_error(&serde_json::from_str(&text).unwrap(), json!(1), -32010, "tool_error");

    let unsigned = {
        use base64::Engine as _;
        let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!(
            "{}.{}.",
            b64(json!({"alg":"none","typ":"JWT"})),
            b64(claims("alice", "sandlot", "https://issuer.example", 300))
        )
    };
    let cases = [
        (Some(sign(&claims("alice", "sandlot", "https://issuer.example", 300), "other-secret")), "InvalidSignature"),
        (Some(sign(&claims("alice", "other", "https://issuer.example", 300), "shared-secret")), "InvalidAudience"),
        (Some(sign(&claims("alice", "sandlot", "https://evil.example", 300), "shared-secret")), "InvalidIssuer"),
        (Some(sign(&claims("alice", "sandlot", "https://issuer.example", -600), "shared-secret")), "ExpiredSignature"),
        (Some(unsigned), "invalid token"),
        (None, "missing Authorization header"),
    ];
    for (token, why) in cases {
        let (status, _, text) = send(&router, post(token)).await;
        assert_eq!(status, StatusCode::OK);
        let message = unified_error(&serde_json::from_str(&text).unwrap(), Value::Null, -32001, "unauthorized");
        assert!(message.contains(why), "{message} / {why}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tenants (docs/security.md, "Tenants"): for two JWT subjects and two named tokens. A workspace another tenant
// made (here the admin, who may use any id) reads to its subject as one that does not exist and refuses its writes
// and runs; a tenant's workspace is its own through the other profiles' faces too, and the admin's.

/// The answer of `method` with `params` as `who`, without the trace id of an error (fresh for every error).
async fn tool_as(router: &axum::Router, who: &common::tenants::Who, method: &str, params: Value) -> Value {
    let mut answer = rpc_as(router, &who.bearer, json!({"jsonrpc":"2.0","id":1,"method":method,"params":params})).await;
    if let Some(data) = answer.pointer_mut("/error/data").and_then(Value::as_object_mut) {
        data.remove("trace_id");
    }
    answer
}

#[tokio::test]
async fn a_workspace_another_tenant_made_reads_as_missing_and_refuses_writes_and_runs() {
    use common::tenants::{admin, authenticator, pairs};
    let (root, _state, router) = router_with(authenticator());
    for (a, b) in pairs() {
        // The admin makes B's workspace first and leaves a file there; A's workspace does not exist yet.
        let of_b = open_sandbox::workspace_of(b.name).unwrap();
        let upload = json!({ "source": "thread", "id": of_b.as_str(), "path": "planted.txt", "content_length": 4 });
        let (status, signed) = common::tenants::baponi_as(&router, "/v1/files/upload_url", upload, &admin()).await;
        assert_eq!(status, StatusCode::OK, "{signed}");
        let url = signed["url"].as_str().unwrap().strip_prefix("http://test").unwrap().to_owned();
        let put = Request::put(url).header(header::HOST, "localhost").body(Body::from("abcd")).unwrap();
        assert_eq!(send(&router, put).await.0, StatusCode::CREATED);

        for (method, params) in [
            ("file.read", json!({"path": "planted.txt"})),
            ("file.list", json!({})),
            ("file.list", json!({"path": "sub"})),
            ("file.search", json!({"path": "planted.txt", "query": "a"})),
            ("file.replace", json!({"path": "planted.txt", "search": "a", "replace": "b"})),
        ] {
            let of_b = tool_as(&router, &b, method, params.clone()).await;
            assert_eq!(of_b, tool_as(&router, &a, method, params).await, "{method}");
        }
        let refused = |id: i64| {
            let message = format!("workspace {of_b} is not available to this caller");
            json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"invalid params","data":{"code":"invalid_params","message":message,"kind":"invalid_params"}}})
        };
        assert_eq!(tool_as(&router, &b, "file.write", json!({"path": "x.txt", "content": "x"})).await, refused(1));
        assert_eq!(tool_as(&router, &b, "shell.exec", json!({"command": "ls"})).await, refused(1));
        assert_eq!(
            tool_as(&router, &b, "code.exec", json!({"runtime": "python", "args": ["-c", "1"]})).await,
            refused(1)
        );
        let files = root.path().join(of_b.as_str()).join("files");
        assert_eq!(std::fs::read_dir(files).unwrap().count(), 1, "B wrote nothing there");
        // A's own workspace is A's to write.
        let written = tool_as(&router, &a, "file.write", json!({"path": "x.txt", "content": "x"})).await;
        assert_eq!(written, json!({"jsonrpc":"2.0","id":1,"result":{"path":"/workspace/x.txt"}}));
    }
}

#[tokio::test]
async fn an_open_sandbox_workspace_is_its_tenants_through_the_other_profiles_too() {
    let (_root, _state, router) = router_with(common::tenants::authenticator());
    for (a, b) in common::tenants::pairs() {
        let written = tool_as(&router, &a, "file.write", json!({"path": "notes.txt", "content": "A's"})).await;
        assert_eq!(written["result"], json!({"path": "/workspace/notes.txt"}));
        let of_a = open_sandbox::workspace_of(a.name).unwrap();
        common::tenants::hidden_through_baponi(&router, of_a.as_str(), "notes.txt", &b).await;
        let read = tool_as(&router, &a, "file.read", json!({"path": "notes.txt"})).await;
        assert_eq!(read["result"], json!({"content": "A's"}));
    }
}

/// The seed's User Story 1 on the file tools, over each HTTP transport: write → read → search → replace → read,
/// and a path outside the workspace refused with the unified error.
#[tokio::test]
async fn file_scenario_over_every_http_transport() {
    let (_root, _state, router) = router();
    let steps = |file: &str| {
        vec![
            (
                json!({"method":"file.write","params":{"path":file,"content":"alpha\nbeta alpha\n"}}),
                json!({"path":format!("/workspace/{file}")}),
            ),
            (json!({"method":"file.read","params":{"path":file}}), json!({"content":"alpha\nbeta alpha\n"})),
            (json!({"method":"file.search","params":{"path":file,"query":"beta"}}), json!({"matches":["beta alpha"]})),
            (
                json!({"method":"file.replace","params":{"path":file,"search":"alpha","replace":"gamma"}}),
                json!({"count":2}),
            ),
            (json!({"method":"file.read","params":{"path":file}}), json!({"content":"gamma\nbeta gamma\n"})),
        ]
    };
    let with_id = |mut request: Value, id: usize| {
        request["jsonrpc"] = json!("2.0");
        request["id"] = json!(id);
        request
    };
    // POST /mcp
    for (id, (request, result)) in steps("post.txt").into_iter().enumerate() {
        assert_eq!(rpc(&router, with_id(request, id)).await, json!({"jsonrpc":"2.0","id":id,"result":result}));
    }
    // GET /mcp/sse, one request each
    for (id, (request, result)) in steps("sse.txt").into_iter().enumerate() {
        let query = url_encode(&with_id(request, id).to_string());
        let (_, _, text) = send(&router, request_sse(&query)).await;
        assert_eq!(common::jsonrpc_answer(text.as_bytes()), json!({"jsonrpc":"2.0","id":id,"result":result}));
    }
    // POST /mcp/stream, all in one body
    let steps = steps("stream.txt");
    let body: String =
        steps.iter().enumerate().map(|(id, (request, _))| format!("{}\n", with_id(request.clone(), id))).collect();
    let (_, _, text) =
        send(&router, request("POST", "/mcp/stream", Some("tok"), "application/x-ndjson", "", &body)).await;
    let answers: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let expected: Vec<Value> = steps
        .into_iter()
        .enumerate()
        .map(|(id, (_, result))| json!({"jsonrpc":"2.0","id":id,"result":result}))
        .collect();
    assert_eq!(answers, expected);

    for path in ["../escape.txt", "/etc/passwd", "/workspace/../x"] {
        let answer = rpc(&router, json!({"jsonrpc":"2.0","id":1,"method":"file.read","params":{"path":path}})).await;
        assert_eq!(
            unified_error(&answer, json!(1), -32602, "invalid_params"),
            "path must be within workspace",
            "{path}"
        );
    }
}

fn request_sse(query: &str) -> Request<Body> {
    request("GET", &format!("/mcp/sse?request={query}"), Some("tok"), "", "", "")
}
