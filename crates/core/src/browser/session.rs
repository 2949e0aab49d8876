//! [`Browser`]: one Chromium process in a live sandbox, its tabs, and the actions of the browser tools.
//!
//! Each tab is a page target attached in flat mode (its commands and events carry its session id), with page
//! lifecycle events on, so a navigation waits for the `load` event of its own loader, not a page's earlier one.
//! Chromium's stderr is drained into a short tail, told when it will not start or dies. The process is killed when
//! the browser is dropped or ended; what it left dies with the sandbox.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use super::cdp::Cdp;
use super::{BrowserAction, BrowserFailure, BrowserOutput, BrowserResult, BrowserTab, NAVIGATION_TIMEOUT, chromium};
use crate::{LiveSandbox, ProcessHandle};

/// How long Chromium may take to answer its first command (about a second when idle; a loaded machine is slower).
const START_PATIENCE: Duration = Duration::from_secs(60);
/// How long any other command may take.
const COMMAND_PATIENCE: Duration = Duration::from_secs(30);
/// How long stopping a page that did not load in time may take.
const STOP_PATIENCE: Duration = Duration::from_secs(5);
/// The largest value `evaluate` returns, as JSON (the faces' results hold 1 MiB).
const MAX_VALUE_BYTES: usize = 512 * 1024;
/// Characters of a tab's URL and title listed (a page sets both).
const MAX_TAB_TEXT: usize = 2048;
/// Bytes of Chromium's stderr kept to explain a failure.
const STDERR_TAIL: usize = 4096;
const SIGKILL: i32 = 9;

struct Tab {
    target: String,
    session: String,
}

pub(crate) struct Browser {
    cdp: Cdp,
    process: Arc<dyn ProcessHandle>,
    stderr: Arc<Mutex<Vec<u8>>>,
    tabs: Vec<Tab>,
    current: usize,
}

fn failure(message: impl Into<String>) -> BrowserFailure {
    BrowserFailure(message.into())
}

impl Browser {
    /// Starts Chromium in `sandbox` and attaches to its first tab.
    pub async fn start(sandbox: &dyn LiveSandbox) -> Result<Self, BrowserFailure> {
        let process = sandbox
            .spawn(chromium::spawn(sandbox.egress().is_some()))
            .await
            .map_err(|e| failure(format!("the browser did not start: {e}")))?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(drain_tail(process.stderr, Arc::clone(&stderr)));
        let cdp = Cdp::new(process.stdin, process.stdout);
        let mut browser = Self { cdp, process: process.handle, stderr, tabs: Vec::new(), current: 0 };
        match browser.first_tab().await {
            Ok(()) => Ok(browser),
            Err(error) => {
                browser.kill().await;
                Err(failure(format!("the browser did not start: {}{}", error.0, browser.stderr_words())))
            }
        }
    }

    async fn first_tab(&mut self) -> Result<(), BrowserFailure> {
        let targets = self.cdp.call(None, "Target.getTargets", json!({}), START_PATIENCE).await.map_err(failure)?;
        let page = targets["targetInfos"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|target| target["type"] == "page")
            .and_then(|target| target["targetId"].as_str())
            .map(str::to_owned);
        let target = match page {
            Some(target) => target,
            None => self.create_target("about:blank").await?,
        };
        let tab = self.attach(target).await?;
        self.tabs.push(tab);
        Ok(())
    }

    async fn create_target(&self, url: &str) -> Result<String, BrowserFailure> {
        let created = self.browser_call("Target.createTarget", json!({ "url": url })).await?;
        created["targetId"].as_str().map(str::to_owned).ok_or_else(|| failure("the browser made no tab"))
    }

    async fn attach(&self, target: String) -> Result<Tab, BrowserFailure> {
        let attached =
            self.browser_call("Target.attachToTarget", json!({ "targetId": target, "flatten": true })).await?;
        let session = attached["sessionId"].as_str().map(str::to_owned).ok_or_else(|| failure("no page session"))?;
        let tab = Tab { target, session };
        self.page_call(&tab, "Page.enable", json!({})).await?;
        self.page_call(&tab, "Page.setLifecycleEventsEnabled", json!({ "enabled": true })).await?;
        // The window's size includes what headless Chromium counts as its frame: the viewport is set exactly.
        let (width, height) = chromium::VIEWPORT;
        let metrics = json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false });
        self.page_call(&tab, "Emulation.setDeviceMetricsOverride", metrics).await?;
        Ok(tab)
    }

    /// Whether Chromium still answers (its pipe is open).
    pub fn is_alive(&self) -> bool {
        self.cdp.is_open()
    }

    /// Kills Chromium (its process group: the renderers and helpers it started).
    pub async fn kill(&self) {
        let _ = self.process.signal(SIGKILL, true).await;
    }

    fn stderr_words(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&tail);
        let last: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).rev().take(3).collect();
        if last.is_empty() {
            String::new()
        } else {
            format!(" (its last words: {})", last.into_iter().rev().collect::<Vec<_>>().join(" | "))
        }
    }

    async fn browser_call(&self, method: &str, params: Value) -> Result<Value, BrowserFailure> {
        self.cdp.call(None, method, params, COMMAND_PATIENCE).await.map_err(|e| failure(format!("{method}: {e}")))
    }

    async fn page_call(&self, tab: &Tab, method: &str, params: Value) -> Result<Value, BrowserFailure> {
        self.cdp
            .call(Some(&tab.session), method, params, COMMAND_PATIENCE)
            .await
            .map_err(|e| failure(format!("{method}: {e}")))
    }

    fn tab(&self) -> Result<&Tab, BrowserFailure> {
        self.tabs.get(self.current).ok_or_else(|| failure("the browser has no tab"))
    }

    /// Does `action` on the current tab.
    pub async fn perform(&mut self, action: BrowserAction) -> BrowserResult {
        match action {
            BrowserAction::Navigate { url } => {
                let tab = self.tab()?;
                self.navigate(tab, &url).await.map(|()| BrowserOutput::Done)
            }
            BrowserAction::Screenshot => {
                let shot = self.page_call(self.tab()?, "Page.captureScreenshot", json!({ "format": "png" })).await?;
                let data = shot["data"].as_str().ok_or_else(|| failure("the browser sent no screenshot"))?;
                let png = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .map_err(|e| failure(format!("the browser's screenshot is not base64: {e}")))?;
                Ok(BrowserOutput::Png(png))
            }
            BrowserAction::Click { x, y } => {
                let tab = self.tab()?;
                for (kind, buttons) in [("mouseMoved", 0), ("mousePressed", 1), ("mouseReleased", 0)] {
                    let mut event = json!({ "type": kind, "x": x, "y": y, "buttons": buttons });
                    if kind != "mouseMoved" {
                        event["button"] = json!("left");
                        event["clickCount"] = json!(1);
                    }
                    self.page_call(tab, "Input.dispatchMouseEvent", event).await?;
                }
                Ok(BrowserOutput::Done)
            }
            BrowserAction::Scroll { x, y } => {
                self.evaluate(&format!("window.scrollBy({x}, {y})")).await.map(|_| BrowserOutput::Done)
            }
            BrowserAction::Type { text } => {
                self.page_call(self.tab()?, "Input.insertText", json!({ "text": text })).await?;
                Ok(BrowserOutput::Done)
            }
            BrowserAction::Fill { selector, value } => self.set_value(&selector, &value, false).await,
            BrowserAction::Select { selector, value } => self.set_value(&selector, &value, true).await,
            BrowserAction::Evaluate { expression } => {
                let value = self.evaluate(&expression).await?;
                let size = serde_json::to_string(&value).map_or(0, |json| json.len());
                if size > MAX_VALUE_BYTES {
                    return Err(failure(format!(
                        "the expression's value is {size} bytes as JSON; at most {MAX_VALUE_BYTES} are returned"
                    )));
                }
                Ok(BrowserOutput::Value(value))
            }
            BrowserAction::PressKey { keys } => {
                let press = super::keys::parse(&keys).map_err(failure)?;
                let tab = self.tab()?;
                self.page_call(tab, "Input.dispatchKeyEvent", press.down).await?;
                self.page_call(tab, "Input.dispatchKeyEvent", press.up).await?;
                Ok(BrowserOutput::Done)
            }
            BrowserAction::NewTab { url } => {
                let target = self.create_target("about:blank").await?;
                let tab = self.attach(target).await?;
                self.tabs.push(tab);
                self.current = self.tabs.len() - 1;
                if let Some(url) = url {
                    self.navigate(self.tab()?, &url).await?;
                }
                Ok(BrowserOutput::Tab(self.current))
            }
            BrowserAction::SwitchTab { index } => {
                let tab = self.tabs.get(index).ok_or_else(|| self.no_tab(index))?;
                self.browser_call("Target.activateTarget", json!({ "targetId": tab.target })).await?;
                self.current = index;
                Ok(BrowserOutput::Done)
            }
            BrowserAction::CloseTab { index } => {
                if index >= self.tabs.len() {
                    return Err(self.no_tab(index));
                }
                if self.tabs.len() == 1 {
                    let target = self.create_target("about:blank").await?;
                    let tab = self.attach(target).await?;
                    self.tabs.push(tab);
                }
                let tab = self.tabs.remove(index);
                self.browser_call("Target.closeTarget", json!({ "targetId": tab.target })).await?;
                if self.current > index || self.current >= self.tabs.len() {
                    self.current = self.current.saturating_sub(1);
                }
                Ok(BrowserOutput::Done)
            }
            BrowserAction::Tabs => {
                let mut tabs = Vec::new();
                for (index, tab) in self.tabs.iter().enumerate() {
                    let info = self.browser_call("Target.getTargetInfo", json!({ "targetId": tab.target })).await?;
                    let info = &info["targetInfo"];
                    tabs.push(BrowserTab {
                        index,
                        url: cut(info["url"].as_str().unwrap_or_default()),
                        title: cut(info["title"].as_str().unwrap_or_default()),
                        current: index == self.current,
                    });
                }
                Ok(BrowserOutput::Tabs(tabs))
            }
        }
    }

    fn no_tab(&self, index: usize) -> BrowserFailure {
        failure(format!("no tab {index}: the browser has {} (browser_tab_list lists them)", self.tabs.len()))
    }

    /// Opens `url` in `tab` and waits for its `load` event, at most [`NAVIGATION_TIMEOUT`] in all; a page still
    /// loading then is stopped.
    async fn navigate(&self, tab: &Tab, url: &str) -> Result<(), BrowserFailure> {
        match tokio::time::timeout(NAVIGATION_TIMEOUT, self.navigate_and_load(tab, url)).await {
            Ok(navigated) => navigated,
            Err(_) => {
                let _ = self.cdp.call(Some(&tab.session), "Page.stopLoading", json!({}), STOP_PATIENCE).await;
                Err(failure(format!(
                    "navigation to {url} timed out: the page did not finish loading in {} s",
                    NAVIGATION_TIMEOUT.as_secs()
                )))
            }
        }
    }

    async fn navigate_and_load(&self, tab: &Tab, url: &str) -> Result<(), BrowserFailure> {
        let exited = || failure(format!("navigation to {url} failed: the browser has exited"));
        let mut events = self.cdp.events();
        // The caller's timeout bounds it: this patience is never what ends it.
        let patience = NAVIGATION_TIMEOUT + STOP_PATIENCE;
        // The document's response, to tell the egress proxy's refusal of a plain-HTTP page from the page itself.
        self.cdp
            .call(Some(&tab.session), "Network.enable", json!({}), patience)
            .await
            .map_err(|e| failure(format!("navigation to {url} failed: {e}")))?;
        let navigated = self
            .cdp
            .call(Some(&tab.session), "Page.navigate", json!({ "url": url }), patience)
            .await
            .map_err(|e| failure(format!("navigation to {url} failed: {e}")))?;
        if let Some(error) = navigated["errorText"].as_str().filter(|error| !error.is_empty()) {
            return Err(failure(format!("navigation to {url} failed: {error}")));
        }
        // No loader: a navigation within the document (a fragment), which has no load event.
        let Some(loader) = navigated["loaderId"].as_str() else { return Ok(()) };
        let mut refused = None;
        loop {
            // Woken every second to notice a browser that exited (the event channel outlives it).
            let event = match tokio::time::timeout(Duration::from_secs(1), events.recv()).await {
                Err(_) if !self.cdp.is_open() => return Err(exited()),
                Err(_) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => continue,
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return Err(exited()),
                Ok(Ok(event)) => event,
            };
            if event.session.as_deref() != Some(tab.session.as_str()) || event.params["loaderId"] != loader {
                continue;
            }
            if event.method == "Network.responseReceived" && event.params["type"] == "Document" {
                refused = egress_verdict(&event.params["response"]);
            }
            if event.method == "Page.lifecycleEvent" && event.params["name"] == "load" {
                return match refused {
                    Some(words) => Err(failure(format!("navigation to {url} failed: {words}"))),
                    None => Ok(()),
                };
            }
        }
    }

    /// The value of `expression` in the current tab (JSON; `undefined` is `null`), or its exception.
    async fn evaluate(&self, expression: &str) -> Result<Value, BrowserFailure> {
        let params = json!({ "expression": expression, "returnByValue": true, "awaitPromise": true });
        let evaluated = self.page_call(self.tab()?, "Runtime.evaluate", params).await?;
        if let Some(exception) = evaluated.get("exceptionDetails") {
            let words = exception["exception"]["description"]
                .as_str()
                .or_else(|| exception["text"].as_str())
                .unwrap_or("an exception");
            return Err(failure(format!("the expression threw: {words}")));
        }
        Ok(evaluated["result"].get("value").cloned().unwrap_or(Value::Null))
    }

    /// Sets an input's (or with `select`, a `<select>`'s) value as a user would, with `input` and `change` events.
    async fn set_value(&self, selector: &str, value: &str, select: bool) -> BrowserResult {
        let (selector_json, value_json) = (Value::String(selector.to_owned()), Value::String(value.to_owned()));
        let script = format!(
            "(() => {{ const el = document.querySelector({selector_json}); if (!el) return 'none'; \
             if ({select} && el.tagName !== 'SELECT') return 'not a select'; \
             if ({select} && ![...el.options].some(o => o.value === {value_json})) return 'no option'; \
             el.focus(); el.value = {value_json}; \
             el.dispatchEvent(new Event('input', {{bubbles: true}})); \
             el.dispatchEvent(new Event('change', {{bubbles: true}})); return 'ok'; }})()"
        );
        match self.evaluate(&script).await?.as_str() {
            Some("ok") => Ok(BrowserOutput::Done),
            Some("none") => Err(failure(format!("no element matches the selector {selector:?}"))),
            Some("not a select") => Err(failure(format!("the element {selector:?} is not a <select>"))),
            Some("no option") => Err(failure(format!("the <select> {selector:?} has no option of value {value:?}"))),
            _ => Err(failure("the page did not set the value")),
        }
    }
}

impl Drop for Browser {
    /// Its pipe closes with it, and Chromium exits on that; the kill makes sure.
    fn drop(&mut self) {
        let process = Arc::clone(&self.process);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = process.signal(SIGKILL, true).await;
            });
        }
    }
}

/// `text` cut to [`MAX_TAB_TEXT`] characters, `…` marking a cut.
fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_TAB_TEXT) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Reads Chromium's stderr to its end, keeping the last [`STDERR_TAIL`] bytes.
async fn drain_tail(mut stderr: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>, tail: Arc<Mutex<Vec<u8>>>) {
    let mut chunk = vec![0u8; 8192];
    while let Ok(read) = stderr.read(&mut chunk).await {
        if read == 0 {
            return;
        }
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.extend_from_slice(&chunk[..read]);
        let excess = tail.len().saturating_sub(STDERR_TAIL);
        tail.drain(..excess);
    }
}

/// The egress proxy's own answer in a document's `response` (CDP's `Network.Response`): its one-line reason, or
/// `None` for a host's page.
fn egress_verdict(response: &Value) -> Option<String> {
    let headers = response["headers"].as_object()?;
    let verdict = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case(sandlot_egress::proxy::VERDICT_HEADER))?;
    let status = response["status"].as_u64().unwrap_or(0);
    Some(format!("the egress proxy {} it (HTTP {status})", verdict.1.as_str().unwrap_or("refused")))
}
