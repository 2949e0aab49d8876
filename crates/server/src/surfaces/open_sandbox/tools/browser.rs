//! The browser tools of open-sandbox (`docs/profiles.md#open-sandbox-tools`): `browser.navigate`,
//! `browser.screenshot`, their underscore aliases and the extra `browser_*` tools, with the product's schemas and
//! result shapes, on the tenant's browser: Chromium in its workspace's live sandbox (`sandlot_core::browser`),
//! started on first use, kept between calls, ended with the sandbox.
//!
//! A browser's failure (a navigation error such as `net::ERR_ADDRESS_UNREACHABLE`, the 15 s load timeout, a missing
//! element) is a `Tool` error naming it (-32010). A screenshot is written into the workspace like `file.write`
//! (parents made, no symlink followed, the disk quota) and its PNG is also returned, for the dispatcher's image
//! block. `browser_get_download_list` stays unavailable: downloads are not kept yet.

use sandlot_core::{BrowserAction, BrowserOutput, ConversationId, Layout, Tenant};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Called, OUTSIDE, Scope, ToolError, ToolInfo, WORKSPACE_MOUNT, info, parse, refusal, result};
use crate::AppState;
use crate::kit::conversation_access;
use crate::kit::workspace_paths as paths;

/// The largest screenshot returned as an image block too (every screenshot is written to the workspace).
const MAX_INLINE_PNG: usize = 1024 * 1024;

/// Why `browser_get_download_list` does not run (`permissions.reason`, and the text of its error).
pub const DOWNLOADS_REASON: &str = "downloads are not kept by sandlot's browser yet";

#[derive(Deserialize, JsonSchema)]
pub struct NavigateArgs {
    /// The URL to open.
    pub url: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Navigated {
    pub navigated: bool,
}

#[derive(Deserialize, JsonSchema)]
pub struct ScreenshotArgs {
    /// Where the PNG goes, in the workspace (parent directories are created).
    pub path: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Screenshot {
    /// The PNG's absolute path as the sandbox sees it.
    pub path: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct PointArgs {
    pub x: f64,
    pub y: f64,
}

#[derive(Serialize, JsonSchema)]
pub struct Clicked {
    pub clicked: bool,
}

#[derive(Serialize, JsonSchema)]
pub struct Scrolled {
    pub scrolled: bool,
}

#[derive(Deserialize, JsonSchema)]
pub struct SelectorArgs {
    /// A CSS selector.
    pub selector: String,
    pub value: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Filled {
    pub filled: bool,
}

#[derive(Serialize, JsonSchema)]
pub struct Selected {
    pub selected: bool,
}

#[derive(Deserialize, JsonSchema)]
pub struct EvaluateArgs {
    /// A JavaScript expression evaluated in the page.
    pub expression: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Evaluated {
    /// The expression's value.
    pub result: serde_json::Value,
}

#[derive(Deserialize, JsonSchema)]
pub struct NewTabArgs {
    /// The URL the tab opens (default: a blank page).
    #[serde(default)]
    pub url: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub struct TabIndex {
    pub index: u32,
}

#[derive(Deserialize, JsonSchema)]
pub struct TabArgs {
    /// The tab's index, as `browser_tab_list` gives it.
    pub index: u32,
}

#[derive(Serialize, JsonSchema)]
pub struct Switched {
    pub switched: bool,
}

#[derive(Serialize, JsonSchema)]
pub struct Closed {
    pub closed: bool,
}

#[derive(Deserialize, JsonSchema)]
pub struct NoArgs {}

#[derive(Serialize, JsonSchema)]
pub struct Tab {
    pub index: u32,
    pub url: String,
    pub title: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Tabs {
    pub tabs: Vec<Tab>,
}

#[derive(Serialize, JsonSchema)]
pub struct Downloads {
    /// The downloaded files' paths.
    pub downloads: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct KeysArgs {
    /// The keys to press, e.g. `Enter` or `Control+A`.
    pub keys: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Pressed {
    pub pressed: bool,
}

pub fn tools() -> Vec<ToolInfo> {
    let r = None;
    use Scope::{Network, Workspace};
    vec![
        info::<NavigateArgs, Navigated>("browser.navigate", Network, r),
        info::<ScreenshotArgs, Screenshot>("browser.screenshot", Workspace, r),
        info::<NavigateArgs, Navigated>("browser_navigate", Workspace, r),
        info::<ScreenshotArgs, Screenshot>("browser_screenshot", Workspace, r),
        info::<PointArgs, Clicked>("browser_click", Workspace, r),
        info::<SelectorArgs, Filled>("browser_form_input_fill", Workspace, r),
        info::<SelectorArgs, Selected>("browser_select", Workspace, r),
        info::<PointArgs, Scrolled>("browser_scroll", Workspace, r),
        info::<EvaluateArgs, Evaluated>("browser_evaluate", Workspace, r),
        info::<NewTabArgs, TabIndex>("browser_new_tab", Workspace, r),
        info::<TabArgs, Switched>("browser_switch_tab", Workspace, r),
        info::<NoArgs, Tabs>("browser_tab_list", Workspace, r),
        info::<TabArgs, Closed>("browser_close_tab", Workspace, r),
        info::<NoArgs, Downloads>("browser_get_download_list", Workspace, Some(DOWNLOADS_REASON)),
        info::<KeysArgs, Pressed>("browser_press_key", Workspace, r),
    ]
}

/// Whether `name` is one of the browser tools.
pub fn is_browser_tool(name: &str) -> bool {
    tools().iter().any(|tool| tool.name == name)
}

/// Calls the browser tool `name` for `tenant` in `workspace`'s browser.
pub async fn call(
    app: &AppState,
    tenant: &Tenant,
    workspace: &ConversationId,
    name: &str,
    arguments: Value,
    cancel: CancellationToken,
) -> Result<Called, ToolError> {
    let tool = name.trim_start_matches("browser.").trim_start_matches("browser_");
    let mut screenshot_to = None;
    let action = match tool {
        "navigate" => {
            let args: NavigateArgs = parse(arguments)?;
            BrowserAction::Navigate { url: args.url }
        }
        "screenshot" => {
            let args: ScreenshotArgs = parse(arguments)?;
            screenshot_to = Some(screenshot_path(&args.path)?);
            BrowserAction::Screenshot
        }
        "click" => {
            let PointArgs { x, y } = parse(arguments)?;
            BrowserAction::Click { x, y }
        }
        "scroll" => {
            let PointArgs { x, y } = parse(arguments)?;
            BrowserAction::Scroll { x, y }
        }
        "form_input_fill" => {
            let SelectorArgs { selector, value } = parse(arguments)?;
            BrowserAction::Fill { selector, value }
        }
        "select" => {
            let SelectorArgs { selector, value } = parse(arguments)?;
            BrowserAction::Select { selector, value }
        }
        "evaluate" => BrowserAction::Evaluate { expression: parse::<EvaluateArgs>(arguments)?.expression },
        "new_tab" => BrowserAction::NewTab { url: parse::<NewTabArgs>(arguments)?.url },
        "switch_tab" => BrowserAction::SwitchTab { index: parse::<TabArgs>(arguments)?.index as usize },
        "close_tab" => BrowserAction::CloseTab { index: parse::<TabArgs>(arguments)?.index as usize },
        "tab_list" => BrowserAction::Tabs,
        "press_key" => BrowserAction::PressKey { keys: parse::<KeysArgs>(arguments)?.keys },
        "get_download_list" => return Err(ToolError::Tool(DOWNLOADS_REASON.to_owned())),
        _ => return Err(ToolError::UnknownTool(name.to_owned())),
    };
    conversation_access::claim(&app.engine, tenant, workspace).map_err(|e| refusal("", workspace, &e))?;
    let layout = Layout::Workspace { path: WORKSPACE_MOUNT };
    // The client going away ends the wait (the action itself is bounded by the browser's own timeouts).
    let done = tokio::select! {
        done = app.engine.browser_as(tenant, workspace, layout, action) => done,
        () = cancel.cancelled() => return Err(ToolError::Tool("cancelled".to_owned())),
    };
    let output = done.map_err(|e| refusal("browser: ", workspace, &e))?.map_err(|f| ToolError::Tool(f.0))?;
    match (tool, output) {
        ("navigate", _) => Called::of(result(&Navigated { navigated: true })?),
        ("screenshot", BrowserOutput::Png(png)) => {
            let relative = screenshot_to.unwrap_or_default();
            super::file::write_file(app, workspace, &relative, png.clone(), &cancel).await?;
            let path = format!("{WORKSPACE_MOUNT}/{relative}");
            // Shown inline when it fits; a larger one is in the workspace only.
            let png = (png.len() <= MAX_INLINE_PNG).then_some(png);
            Ok(Called { result: result(&Screenshot { path })?, png })
        }
        ("click", _) => Called::of(result(&Clicked { clicked: true })?),
        ("scroll", _) => Called::of(result(&Scrolled { scrolled: true })?),
        ("form_input_fill", _) => Called::of(result(&Filled { filled: true })?),
        ("select", _) => Called::of(result(&Selected { selected: true })?),
        ("evaluate", BrowserOutput::Value(value)) => Called::of(result(&Evaluated { result: value })?),
        ("new_tab", BrowserOutput::Tab(index)) => Called::of(result(&TabIndex { index: index as u32 })?),
        ("switch_tab", _) => Called::of(result(&Switched { switched: true })?),
        ("close_tab", _) => Called::of(result(&Closed { closed: true })?),
        ("tab_list", BrowserOutput::Tabs(tabs)) => {
            let tabs =
                tabs.into_iter().map(|tab| Tab { index: tab.index as u32, url: tab.url, title: tab.title }).collect();
            Called::of(result(&Tabs { tabs })?)
        }
        ("press_key", _) => Called::of(result(&Pressed { pressed: true })?),
        (tool, output) => Err(ToolError::Tool(format!("internal error: {tool} gave {output:?}"))),
    }
}

/// The workspace-relative path a screenshot is written to.
fn screenshot_path(path: &str) -> Result<String, ToolError> {
    if path.is_empty() {
        return Err(ToolError::InvalidParams("path is required".to_owned()));
    }
    let relative = paths::relative(path).map_err(|_| ToolError::InvalidParams(OUTSIDE.to_owned()))?;
    if relative.is_empty() {
        return Err(ToolError::Tool(format!("{path} is a directory")));
    }
    Ok(relative)
}
