//! MCP Apps (the `io.modelcontextprotocol/ui` extension): sandlot's views as `ui://` resources, which a host that
//! renders MCP Apps shows in a sandboxed iframe beside the result of the tool that links them (`_meta.ui.resourceUri`
//! on the tool, [`tool_meta`]): [`RUN_VIEW`], a `sandbox_run_code` call (its live output, then the result: output,
//! exit status, images, the files with image and CSV previews), and [`CONVERSATION_VIEW`], a `sandbox_session` call
//! (the live sandbox, and the conversation's runs with their code and output).
//!
//! - Invariants: every view is one self-contained HTML document embedded in the binary (`assets/apps/`), with its
//!   script and style inline; it loads nothing from anywhere, and its `_meta.ui.csp` declares no domain (so the
//!   host's strictest policy applies), which its own `<meta>` CSP repeats. It reads the server only through its
//!   host (`resources/read` proxied by the host), so it has the caller's access and no more.
//! - The views are the same for every caller (no data in them): listed and read without a tenant check.
//! - What the views share (`theme.css`, `bridge.js`: the host's theme, the postMessage JSON-RPC) is written once and
//!   put in each where it says `/* sandlot:theme.css */` or `/* sandlot:bridge.js */`, once per process.
//! - Only additive for hosts without Apps: a tool's `_meta` and a few listed resources; results are unchanged.

use rmcp::model::{MetaObject, ReadResourceResult, Resource, ResourceContents};
use serde_json::json;

/// The MIME type of an MCP App's HTML.
pub const MIME_TYPE: &str = "text/html;profile=mcp-app";
/// The view of a `sandbox_run_code` call.
pub const RUN_VIEW: &str = "ui://sandlot/run";
/// The view of a `sandbox_session` call: the conversation's live sandbox and history.
pub const CONVERSATION_VIEW: &str = "ui://sandlot/conversation";

/// One view: its URI, name, title, description and HTML (before the shared parts are put in, [`View::html`]).
struct View {
    uri: &'static str,
    name: &'static str,
    title: &'static str,
    description: &'static str,
    template: &'static str,
}

/// The style every view includes.
const THEME: &str = include_str!("../../../assets/apps/theme.css");
/// The script every view includes, inside its closure.
const BRIDGE: &str = include_str!("../../../assets/apps/bridge.js");

impl View {
    /// The whole document: the template with the shared style and script in their places.
    fn html(&self) -> &'static str {
        static DOCUMENTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let documents = DOCUMENTS.get_or_init(|| {
            VIEWS
                .iter()
                .map(|view| {
                    view.template
                        .replace("/* sandlot:theme.css */", THEME.trim_end())
                        .replace("  /* sandlot:bridge.js */", BRIDGE.trim_end())
                })
                .collect()
        });
        let index = VIEWS.iter().position(|view| view.uri == self.uri).unwrap_or_default();
        documents.get(index).map_or("", String::as_str)
    }
}

const VIEWS: [View; 2] = [
    View {
        uri: RUN_VIEW,
        name: "run-view",
        title: "A run of sandbox_run_code",
        description: "MCP Apps view of a sandbox_run_code call: its live output while it runs, then the output, exit \
                      status, images and the files of /data with image and CSV previews",
        template: include_str!("../../../assets/apps/run.html"),
    },
    View {
        uri: CONVERSATION_VIEW,
        name: "conversation-view",
        title: "A conversation's live sandbox and runs",
        description: "MCP Apps view of a sandbox_session call: the conversation's live sandbox (interpreters, \
                      processes, usage) and its runs, each with its code and output",
        template: include_str!("../../../assets/apps/conversation.html"),
    },
];

/// `_meta.ui` of a view's listing and content: a CSP that declares no domain (nothing loaded from anywhere, no
/// connection), and a border requested.
fn view_meta() -> MetaObject {
    let meta = json!({ "ui": { "csp": { "connectDomains": [], "resourceDomains": [] }, "prefersBorder": true } });
    MetaObject(meta.as_object().cloned().unwrap_or_default())
}

/// `_meta` of a tool whose results `uri` renders (visible to the model and to the view).
pub fn tool_meta(uri: &str) -> MetaObject {
    let meta = json!({ "ui": { "resourceUri": uri, "visibility": ["model", "app"] } });
    MetaObject(meta.as_object().cloned().unwrap_or_default())
}

/// The views, as `resources/list` shows them.
pub fn list() -> Vec<Resource> {
    VIEWS
        .iter()
        .map(|view| {
            Resource::new(view.uri, view.name)
                .with_title(view.title)
                .with_description(view.description)
                .with_mime_type(MIME_TYPE)
                .with_size(view.html().len() as u64)
                .with_meta(view_meta())
        })
        .collect()
}

/// The view `uri` names, with its metadata; `None` for a URI that is not a view.
pub fn read(uri: &str) -> Option<ReadResourceResult> {
    let view = VIEWS.iter().find(|view| view.uri == uri)?;
    let contents = ResourceContents::text(view.html(), view.uri).with_mime_type(MIME_TYPE).with_meta(view_meta());
    Some(ReadResourceResult::new(vec![contents]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view loads nothing from elsewhere: no `src`/`href` to a URL, no fetch or socket in its script.
    #[test]
    fn views_are_self_contained() {
        for view in &VIEWS {
            for needle in ["src=\"http", "href=\"http", "src=\"//", "fetch(", "WebSocket", "XMLHttpRequest", "@import"]
            {
                assert!(!view.html().contains(needle), "{} contains {needle}", view.uri);
            }
            assert!(view.html().starts_with("<!DOCTYPE html>"), "{}", view.uri);
            // The shared parts are in, each once.
            assert!(!view.html().contains("sandlot:theme.css") && !view.html().contains("sandlot:bridge.js"));
            assert_eq!(view.html().matches("function applyContext").count(), 1, "{}", view.uri);
            assert_eq!(view.html().matches("--color-background-primary, #ffffff").count(), 1, "{}", view.uri);
        }
    }
}
