//! `sandbox.browser {conversationId, action, ...}`: the conversation's browser, Chromium in its live sandbox
//! (`sandlot_core::browser`), started on first use and kept between calls (the page, cookies, storage) until the
//! live sandbox ends. Actions: `navigate {url}` (returns after the page's load event, 15 s at most), `screenshot
//! {path?}` (a PNG of the 1280x800 viewport, written under /data, default `screenshots/<time>.png`, and returned as
//! an image block), `click {x, y}`, `scroll {x, y}`, `type {text}`, `fill {selector, value}`, `select {selector,
//! value}`, `evaluate {expression}`, `press_key {keys}`, `new_tab {url?}`, `switch_tab {index}`, `close_tab
//! {index}`, `tabs`.
//!
//! A browser's failure (a navigation error such as `net::ERR_ADDRESS_UNREACHABLE`, a missing element) is a result
//! with `isError`, in words for the model; a bad argument is -32602 naming its field; another tenant's
//! conversation is refused as for a run.

use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use sandlot_core::{BrowserAction, BrowserOutput, ConversationId, Layout};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::AppState;
use crate::kit::Caller;
use crate::kit::conversation_access;
use crate::kit::rpc_errors::{self as errors, invalid_argument};

pub const NAME: &str = "sandbox.browser";

/// The actions, as the `action` argument names them.
const ACTIONS: [&str; 13] = [
    "navigate",
    "screenshot",
    "click",
    "scroll",
    "type",
    "fill",
    "select",
    "evaluate",
    "press_key",
    "new_tab",
    "switch_tab",
    "close_tab",
    "tabs",
];

/// What a model sends.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrowserArgs {
    /// The conversation whose browser this is (the same id as for sandbox_run_code).
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"))]
    pub conversation_id: String,
    /// What to do: navigate {url}; screenshot {path?}; click {x, y}; scroll {x, y}; type {text}; fill {selector,
    /// value}; select {selector, value}; evaluate {expression}; press_key {keys}; new_tab {url?}; switch_tab
    /// {index}; close_tab {index}; tabs.
    #[schemars(schema_with = "action_schema")]
    pub action: String,
    /// navigate, new_tab: the URL to open.
    pub url: Option<String>,
    /// screenshot: where the PNG goes, relative to /data (default screenshots/<time>.png).
    pub path: Option<String>,
    /// click: the point in the 1280x800 viewport; scroll: pixels to scroll by.
    pub x: Option<f64>,
    pub y: Option<f64>,
    /// type: text typed into the focused element.
    pub text: Option<String>,
    /// fill, select: a CSS selector.
    pub selector: Option<String>,
    /// fill: the value typed; select: the option's value.
    pub value: Option<String>,
    /// evaluate: a JavaScript expression run in the page (a promise is awaited); its JSON value is returned.
    pub expression: Option<String>,
    /// press_key: a key or chord, e.g. Enter, Tab, Control+A.
    pub keys: Option<String>,
    /// switch_tab, close_tab: the tab's index, as tabs lists it.
    pub index: Option<u32>,
}

fn action_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "enum": ACTIONS })
}

/// A tab as `tabs` lists it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TabView {
    pub index: u32,
    pub url: String,
    pub title: String,
    /// The tab actions go to.
    pub current: bool,
}

/// What `sandbox.browser` returns.
#[derive(Debug, Default, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrowserToolOutput {
    pub conversation_id: String,
    /// The action done.
    pub action: String,
    /// screenshot: the PNG's path, relative to /data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// screenshot: its size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// screenshot: its signed download URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// evaluate: the expression's JSON value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// new_tab: the new tab's index (now the current tab).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// tabs: every tab.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tabs: Option<Vec<TabView>>,
}

fn input_schema() -> Arc<JsonObject> {
    static SCHEMA: OnceLock<Arc<JsonObject>> = OnceLock::new();
    SCHEMA.get_or_init(|| Arc::new(crate::kit::schema::input_schema_of::<BrowserArgs>())).clone()
}

pub fn definition() -> Tool {
    Tool::new(
        NAME,
        "Drive the conversation's web browser (headless Chromium in its live sandbox, with the sandbox's network: \
         loopback only unless the server allows more). The page stays between calls. navigate {url} waits for the \
         page to load; screenshot {path?} saves a PNG of the 1280x800 viewport under /data and shows it; click \
         {x, y}; scroll {x, y}; type {text}; fill {selector, value}; select {selector, value}; evaluate \
         {expression} returns its JSON value; press_key {keys}; new_tab {url?}; switch_tab {index}; close_tab \
         {index}; tabs.",
        input_schema(),
    )
    .with_title("Use the browser")
    .with_raw_output_schema(Arc::new(crate::kit::schema::output_schema_of::<BrowserToolOutput>()))
    .with_annotations(ToolAnnotations::new().read_only(false).destructive(false).idempotent(false).open_world(true))
}

/// `field` of the arguments, or -32602 naming it.
fn required<T>(value: Option<T>, field: &'static str, action: &str) -> Result<T, McpError> {
    value.ok_or_else(|| invalid_argument(field, format!("action {action} needs {field}")))
}

/// Parses a call's arguments into the conversation, the action and a screenshot's path; a bad one is -32602
/// naming its field.
fn parse(arguments: &JsonObject) -> Result<(ConversationId, BrowserArgs, BrowserAction), McpError> {
    for field in ["conversationId", "action"] {
        if matches!(arguments.get(field), None | Some(Value::Null)) {
            return Err(invalid_argument(field, format!("missing required argument {field}")));
        }
    }
    let args: BrowserArgs = serde_path_to_error::deserialize(Value::Object(arguments.clone())).map_err(|error| {
        let path = error.path().to_string();
        let field = path.split(['.', '[']).next().filter(|f| !f.is_empty() && *f != "?").unwrap_or("arguments");
        invalid_argument(field, format!("{path}: {}", error.inner()))
    })?;
    let conversation = ConversationId::parse(&args.conversation_id).map_err(|e| errors::from_engine(&e))?;
    let a = args.action.as_str();
    let action = match a {
        "navigate" => BrowserAction::Navigate { url: required(args.url.clone(), "url", a)? },
        "screenshot" => BrowserAction::Screenshot,
        "click" => BrowserAction::Click { x: required(args.x, "x", a)?, y: required(args.y, "y", a)? },
        "scroll" => BrowserAction::Scroll { x: args.x.unwrap_or(0.0), y: args.y.unwrap_or(0.0) },
        "type" => BrowserAction::Type { text: required(args.text.clone(), "text", a)? },
        "fill" => BrowserAction::Fill {
            selector: required(args.selector.clone(), "selector", a)?,
            value: required(args.value.clone(), "value", a)?,
        },
        "select" => BrowserAction::Select {
            selector: required(args.selector.clone(), "selector", a)?,
            value: required(args.value.clone(), "value", a)?,
        },
        "evaluate" => BrowserAction::Evaluate { expression: required(args.expression.clone(), "expression", a)? },
        "press_key" => BrowserAction::PressKey { keys: required(args.keys.clone(), "keys", a)? },
        "new_tab" => BrowserAction::NewTab { url: args.url.clone() },
        "switch_tab" => BrowserAction::SwitchTab { index: required(args.index, "index", a)? as usize },
        "close_tab" => BrowserAction::CloseTab { index: required(args.index, "index", a)? as usize },
        "tabs" => BrowserAction::Tabs,
        other => {
            return Err(invalid_argument("action", format!("action: {other:?} is not one of {}", ACTIONS.join(", "))));
        }
    };
    Ok((conversation, args, action))
}

pub async fn call(state: &AppState, arguments: JsonObject, caller: &Caller) -> Result<CallToolResult, McpError> {
    let (conversation, args, action) = parse(&arguments)?;
    let tenant = caller.tenant();
    conversation_access::claim(&state.engine, &tenant, &conversation).map_err(|e| errors::from_engine(&e))?;
    let done = state
        .engine
        .browser_as(&tenant, &conversation, Layout::default(), action)
        .await
        .map_err(|e| errors::from_engine(&e))?;
    let output = match done {
        Ok(output) => output,
        Err(failure) => return Ok(CallToolResult::error(vec![ContentBlock::text(format!("{failure}\n"))])),
    };
    let mut result = BrowserToolOutput {
        conversation_id: conversation.to_string(),
        action: args.action.clone(),
        ..Default::default()
    };
    let mut blocks = Vec::new();
    let text = match output {
        BrowserOutput::Png(png) => {
            let path = args.path.clone().unwrap_or_else(default_screenshot_path);
            let written = state
                .engine
                .upload_file(&conversation, &path, png.clone())
                .await
                .map_err(|e| errors::from_engine(&e))?;
            let inline = written.size <= super::result_files::MAX_IMAGE_BYTES;
            if inline {
                blocks.push(ContentBlock::image(base64::engine::general_purpose::STANDARD.encode(&png), "image/png"));
            }
            let text = match inline {
                true => format!("screenshot saved to /data/{} ({} bytes)\n", written.path, written.size),
                false => format!(
                    "screenshot saved to /data/{} ({} bytes, too large to show here: download it from url)\n",
                    written.path, written.size
                ),
            };
            result.url = Some(state.files.url(conversation.as_str(), &written.path));
            result.size = Some(written.size);
            result.path = Some(written.path);
            text
        }
        BrowserOutput::Value(value) => {
            let text = format!("{value}\n");
            result.result = Some(value);
            text
        }
        BrowserOutput::Tab(index) => {
            result.index = Some(index as u32);
            format!("opened tab {index}\n")
        }
        BrowserOutput::Tabs(tabs) => {
            let text: String = tabs
                .iter()
                .map(|t| format!("{}{} {} {}\n", if t.current { "*" } else { " " }, t.index, t.url, t.title))
                .collect();
            let tabs = tabs
                .into_iter()
                .map(|t| TabView { index: t.index as u32, url: t.url, title: t.title, current: t.current })
                .collect();
            result.tabs = Some(tabs);
            text
        }
        BrowserOutput::Done => match &args.url {
            Some(url) if args.action == "navigate" => format!("loaded {url}\n"),
            _ => format!("{} done\n", args.action),
        },
    };
    blocks.insert(0, ContentBlock::text(text));
    let mut call_result = CallToolResult::success(blocks);
    call_result.structured_content = Some(crate::kit::schema::structured(&result));
    Ok(call_result)
}

/// `screenshots/<UTC time to the millisecond>.png`.
fn default_screenshot_path() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("screenshots/{}.png", now.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn arguments(value: Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_bad_argument_names_its_field() {
        let field = |value| parse(&arguments(value)).unwrap_err().data.unwrap()["field"].clone();
        assert_eq!(field(json!({ "action": "tabs" })), "conversationId");
        assert_eq!(field(json!({ "conversationId": "c" })), "action");
        assert_eq!(field(json!({ "conversationId": "c", "action": "fly" })), "action");
        assert_eq!(field(json!({ "conversationId": "c", "action": "navigate" })), "url");
        assert_eq!(field(json!({ "conversationId": "c", "action": "click", "x": 1 })), "y");
        let (_, _, action) =
            parse(&arguments(json!({ "conversationId": "c", "action": "navigate", "url": "http://a/" }))).unwrap();
        assert_eq!(action, BrowserAction::Navigate { url: "http://a/".into() });
    }

    #[test]
    fn the_schema_offers_every_action() {
        let schema = input_schema();
        assert_eq!(schema["properties"]["action"]["enum"], json!(ACTIONS));
        assert_eq!(schema["required"], json!(["conversationId", "action"]));
    }
}
