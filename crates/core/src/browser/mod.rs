//! A browser per conversation: Chromium in the conversation's live sandbox, driven by the server over the DevTools
//! protocol.
//!
//! The browser starts on a conversation's first browser call ([`crate::Engine::browser_as`]), inside its live
//! sandbox (started then if it has none), as one more of its processes: under its limits, on its network (loopback
//! only unless an egress policy says more), with its profile in the sandbox's `/tmp`. It stays between calls (the
//! page, its cookies and storage) and dies with the sandbox: close, idle, lifetime, the server's end; a
//! `sandbox_session restart` ends it too. Two conversations never share one: separate sandboxes, processes and
//! profiles.
//!
//! - `chromium.rs`: the command line, the one place Chromium's flags are made.
//! - `cdp.rs`: the DevTools protocol over the browser's pipe.
//! - `session.rs`: [`Browser`]: started, its tabs, each [`BrowserAction`].
//! - `keys.rs`: key names to key events.
//!
//! A browser's failure (a navigation error, a missing element, a browser that will not start) is a
//! [`BrowserFailure`], a result the faces show, not an engine error.

mod cdp;
pub mod chromium;
mod keys;
mod session;

use std::time::Duration;

pub(crate) use session::Browser;

use crate::Limits;

/// How long a navigation may take to reach the page's `load` event (the open-sandbox product's 15 s).
pub const NAVIGATION_TIMEOUT: Duration = Duration::from_secs(15);

/// What a sandbox needs for a browser, at least: Chromium is 110 to 120 processes and threads and 170 to 320 MiB
/// with one simple page (docs/configuration.md, "The browser").
pub const BROWSER_MEMORY_MB: u64 = 1024;
pub const BROWSER_PIDS: u64 = 512;
pub const BROWSER_TMP_MB: u64 = 256;

/// The limits of a live sandbox started for a browser: the server's, raised to what Chromium needs.
pub fn browser_limits(base: &Limits) -> Limits {
    Limits {
        memory_mb: base.memory_mb.max(BROWSER_MEMORY_MB),
        pids: base.pids.max(BROWSER_PIDS),
        tmp_mb: base.tmp_mb.max(BROWSER_TMP_MB),
        ..base.clone()
    }
}

/// Why a sandbox's memory and process limits are too small for a browser, if they are (its `/tmp`, sized when it
/// started, is not asked for: a page or two fit the default 64 MiB).
pub fn too_small_for_a_browser(limits: &Limits) -> Option<String> {
    let wanted = browser_limits(limits);
    (wanted.memory_mb > limits.memory_mb || wanted.pids > limits.pids).then(|| {
        format!(
            "this conversation's live sandbox has limits too small for a browser ({} MiB of memory, {} processes; a \
             browser needs {BROWSER_MEMORY_MB} and {BROWSER_PIDS}): close it (sandbox_session close) and call the \
             browser first, or raise the server's limits",
            limits.memory_mb, limits.pids
        )
    })
}

/// One thing to do in the conversation's browser, on its current tab.
#[derive(Debug, Clone, PartialEq)]
pub enum BrowserAction {
    /// Opens `url` and waits for its `load` event ([`NAVIGATION_TIMEOUT`]).
    Navigate { url: String },
    /// A PNG of the viewport.
    Screenshot,
    /// A left click at the viewport's point.
    Click { x: f64, y: f64 },
    /// Scrolls the page by this many pixels.
    Scroll { x: f64, y: f64 },
    /// Types text into the focused element.
    Type { text: String },
    /// Sets the value of the first element `selector` matches (an input, a text area), as typing would.
    Fill { selector: String, value: String },
    /// Chooses the option of value `value` in the `<select>` `selector` matches.
    Select { selector: String, value: String },
    /// A JavaScript expression's value (JSON; a promise is awaited).
    Evaluate { expression: String },
    /// A key, or a chord such as `Control+A`.
    PressKey { keys: String },
    /// A new tab, made the current one, at `url` (loaded) or blank.
    NewTab { url: Option<String> },
    /// Makes tab `index` the current one.
    SwitchTab { index: usize },
    /// Closes tab `index` (the last one is replaced by a blank tab).
    CloseTab { index: usize },
    /// The tabs.
    Tabs,
}

/// A tab as the browser tools list it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BrowserTab {
    pub index: usize,
    pub url: String,
    pub title: String,
    /// Whether it is the tab actions go to.
    pub current: bool,
}

/// What an action gave.
#[derive(Debug, Clone, PartialEq)]
pub enum BrowserOutput {
    /// Done, nothing to show (navigate, click, scroll, type, fill, select, press, switch, close).
    Done,
    /// The screenshot's PNG.
    Png(Vec<u8>),
    /// An expression's value.
    Value(serde_json::Value),
    /// The new tab's index.
    Tab(usize),
    Tabs(Vec<BrowserTab>),
}

/// Why an action failed, in a sentence for the model (e.g. `navigation to http://x/ failed: net::ERR_...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserFailure(pub String);

impl std::fmt::Display for BrowserFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An action's result: an output, or the browser's failure.
pub type BrowserResult = std::result::Result<BrowserOutput, BrowserFailure>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_limits_are_raised_for_a_browser_and_larger_ones_kept() {
        let base = Limits::default();
        let raised = browser_limits(&base);
        assert_eq!((raised.memory_mb, raised.pids, raised.tmp_mb), (1024, 512, 256));
        assert_eq!(raised.timeout, base.timeout);
        assert!(too_small_for_a_browser(&base).is_some());
        assert_eq!(too_small_for_a_browser(&raised), None);
        let big = Limits { memory_mb: 4096, pids: 2048, tmp_mb: 1024, ..base };
        assert_eq!(browser_limits(&big), big);
    }
}
