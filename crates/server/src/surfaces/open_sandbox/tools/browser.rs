//! The browser tools of open-sandbox (`docs/profiles.md#open-sandbox-tools`: `browser.navigate`, `browser.screenshot`,
//! their underscore aliases and the extra `browser_*` tools): listed with the product's schemas and scopes, so clients
//! see the whole surface, but every call answers a tool error until sandlot has a long-lived browser per tenant and
//! controlled network egress (a later issue).

use schemars::JsonSchema;
use serde::Serialize;

use super::{Scope, ToolError, ToolInfo, info};

/// Why the browser tools do not run yet (`permissions.reason`, and the text of every call's error).
pub const REASON: &str = "browser tools are not available in sandlot yet: they need a browser per tenant and \
                          controlled network egress, which come in a later release";

#[derive(JsonSchema)]
pub struct NavigateArgs {
    /// The URL to open.
    pub url: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Navigated {
    pub navigated: bool,
}

#[derive(JsonSchema)]
pub struct ScreenshotArgs {
    /// Where the PNG goes, in the workspace (parent directories are created).
    pub path: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Screenshot {
    /// The PNG's absolute path as the sandbox sees it.
    pub path: String,
}

#[derive(JsonSchema)]
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

#[derive(JsonSchema)]
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

#[derive(JsonSchema)]
pub struct EvaluateArgs {
    /// A JavaScript expression evaluated in the page.
    pub expression: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Evaluated {
    /// The expression's value.
    pub result: serde_json::Value,
}

#[derive(JsonSchema)]
pub struct NewTabArgs {
    /// The URL the tab opens (default: a blank page).
    #[serde(default)]
    pub url: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub struct TabIndex {
    pub index: u32,
}

#[derive(JsonSchema)]
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

#[derive(JsonSchema)]
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

#[derive(JsonSchema)]
pub struct KeysArgs {
    /// The keys to press, e.g. `Enter` or `Control+A`.
    pub keys: String,
}

#[derive(Serialize, JsonSchema)]
pub struct Pressed {
    pub pressed: bool,
}

pub fn tools() -> Vec<ToolInfo> {
    let r = Some(REASON);
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
        info::<NoArgs, Downloads>("browser_get_download_list", Workspace, r),
        info::<KeysArgs, Pressed>("browser_press_key", Workspace, r),
    ]
}

/// Whether `name` is one of the browser tools.
pub fn is_browser_tool(name: &str) -> bool {
    tools().iter().any(|tool| tool.name == name)
}

/// The answer of every browser tool call.
pub fn unavailable() -> ToolError {
    ToolError::Tool(REASON.to_owned())
}
