//! MCP Apps (the `io.modelcontextprotocol/ui` extension): the `ui://` views (run, conversation) are listed and read
//! with the Apps MIME type (`text/html;profile=mcp-app`) and a CSP that declares no domain, each HTML is a
//! self-contained document that enforces its own strict policy, and the tools link a listed view in
//! `_meta.ui.resourceUri` (under either tool name form). Through the HTTP app without a network, statelessly and at
//! 2026-07-28; the run view rendered in a browser by a host is tests/e2e/browser/apps.test.js.

use crate::common;

use sandlot_server::kit::{AllowedHosts, Authenticator};
use sandlot_server::{AppState, HttpOptions, ToolNames, app};
use serde_json::{Value, json};

const MIME: &str = "text/html;profile=mcp-app";
const RUN_VIEW: &str = "ui://sandlot/run";
const CONVERSATION_VIEW: &str = "ui://sandlot/conversation";

fn router(state: &AppState) -> axum::Router {
    app(state.clone(), Authenticator::token("tok"), HttpOptions::new(AllowedHosts::new(vec!["localhost".into()])))
}

/// What every view declares: no domain to connect to or load from, and a border.
fn view_meta() -> Value {
    json!({ "ui": { "csp": { "connectDomains": [], "resourceDomains": [] }, "prefersBorder": true } })
}

async fn views(router: &axum::Router) -> Vec<Value> {
    let listed = common::mcp_result(router, "resources/list", json!({})).await;
    let resources = listed["resources"].as_array().unwrap();
    resources.iter().filter(|r| r["uri"].as_str().unwrap().starts_with("ui://")).cloned().collect()
}

#[tokio::test]
async fn the_views_are_listed_and_read_with_the_apps_mime_type_and_their_csp() {
    let (_root, state) = common::state("secret", None);
    let router = router(&state);

    let views = views(&router).await;
    let uris: Vec<&str> = views.iter().map(|v| v["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, [RUN_VIEW, CONVERSATION_VIEW]);
    for listed in &views {
        let uri = listed["uri"].as_str().unwrap();
        assert_eq!((&listed["mimeType"], &listed["_meta"]), (&json!(MIME), &view_meta()), "{uri}");

        let read = common::mcp_result(&router, "resources/read", json!({ "uri": uri })).await;
        let contents = read["contents"].as_array().unwrap();
        assert_eq!(contents.len(), 1);
        let view = &contents[0];
        assert_eq!((&view["uri"], &view["mimeType"], &view["_meta"]), (&json!(uri), &json!(MIME), &view_meta()));
        let html = view["text"].as_str().unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"), "{uri}: {html:.80}");
        assert_eq!(listed["size"], html.len(), "{uri}: the listing's size is the document's");
        // The view enforces the strictest policy itself, whatever the host adds: nothing but inline script and
        // style, and images from data: URLs (the run's images come inside the result).
        assert!(html.contains(
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; \
             style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'\">"
        ));
        // It speaks the Apps protocol to its host, and loads nothing from elsewhere.
        for needle in [
            "ui/initialize",
            "ui/notifications/initialized",
            "ui/notifications/tool-input",
            "ui/notifications/tool-result",
        ] {
            assert!(html.contains(needle), "{uri}: {needle}");
        }
        for needle in ["src=\"http", "href=\"http", "fetch(", "XMLHttpRequest", "WebSocket"] {
            assert!(!html.contains(needle), "{uri}: {needle}");
        }
    }

    // A ui:// URI that is no view is not found, as any unknown resource.
    let body =
        json!({ "jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": { "uri": "ui://sandlot/nope" } });
    let response = tower::ServiceExt::oneshot(router.clone(), common::post_mcp(&body.to_string())).await.unwrap();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    let answer = common::jsonrpc_answer(&bytes);
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
}

#[tokio::test]
async fn tools_link_a_listed_view_under_either_name_form() {
    for names in [ToolNames::Underscore, ToolNames::Dotted] {
        let (_root, mut state) = common::state("secret", None);
        state.tool_names = names;
        let router = router(&state);
        let listed: Vec<String> = views(&router).await.iter().map(|v| v["uri"].as_str().unwrap().to_owned()).collect();
        let tools = common::mcp_result(&router, "tools/list", json!({})).await;
        let tools = tools["tools"].as_array().unwrap();
        let linked: Vec<(&str, &Value)> = tools
            .iter()
            .filter(|t| t["_meta"]["ui"].is_object())
            .map(|t| (t["name"].as_str().unwrap(), &t["_meta"]))
            .collect();
        let (run_code, session) = match names {
            ToolNames::Underscore => ("sandbox_run_code", "sandbox_session"),
            ToolNames::Dotted => ("sandbox.run_code", "sandbox.session"),
        };
        let link = |uri| json!({ "ui": { "resourceUri": uri, "visibility": ["model", "app"] } });
        assert_eq!(linked, [(run_code, &link(RUN_VIEW)), (session, &link(CONVERSATION_VIEW))], "{names:?}");
        // Each linked view exists: it is listed.
        for (_, meta) in linked {
            assert!(listed.iter().any(|uri| meta["ui"]["resourceUri"] == *uri), "{listed:?}");
        }
    }
}

#[tokio::test]
async fn a_2026_07_28_client_reads_the_view_too() {
    let (_root, state) = common::state("secret", None);
    let router = router(&state);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "apps-host", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": { "io.modelcontextprotocol/ui": { "mimeTypes": [MIME] } } },
    });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "resources/read",
                       "params": { "uri": RUN_VIEW, "_meta": meta } });
    let request = axum::http::Request::post("/mcp")
        .header("host", "localhost")
        .header("authorization", "Bearer tok")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "resources/read")
        .header("mcp-name", RUN_VIEW)
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let response = tower::ServiceExt::oneshot(router, request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    let answer = common::jsonrpc_answer(&bytes);
    let view = &answer["result"]["contents"][0];
    assert_eq!((&view["mimeType"], &view["_meta"]), (&json!(MIME), &view_meta()), "{answer}");
}

#[tokio::test]
async fn the_live_output_template_is_announced() {
    let (_root, state) = common::state("secret", None);
    let router = router(&state);
    let templates = common::mcp_result(&router, "resources/templates/list", json!({})).await;
    let live = templates["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["uriTemplate"] == "sandlot://runs/{runId}/live")
        .cloned();
    assert_eq!(live.map(|t| t["mimeType"].clone()), Some(json!("application/json")));
}
