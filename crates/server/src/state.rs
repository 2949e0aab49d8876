//! What every request handler shares: the engine and how file URLs are signed.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandlot_core::{Engine, Signer};

/// How download URLs for files in `/data` are made.
#[derive(Debug, Clone)]
pub struct FileUrls {
    pub signer: Signer,
    /// Base of the URLs, e.g. `http://127.0.0.1:8080`.
    pub public_base_url: String,
    /// Lifetime of a URL; `None` gives the spec's non-expiring form.
    pub ttl: Option<Duration>,
}

impl FileUrls {
    /// A signed URL for `path` in `conversation_id`, valid for the configured time from now.
    pub fn url(&self, conversation_id: &str, path: &str) -> String {
        let expires = self.ttl.map(|ttl| unix_now().saturating_add(ttl.as_secs()));
        self.signer.url(&self.public_base_url, conversation_id, path, expires)
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Shared by every face.
#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    pub files: FileUrls,
    /// Cancelled when the server shuts down: event streams and sessions end with it.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Which name of each tool `tools/list` shows (`SANDLOT_TOOL_NAMES`).
    pub tool_names: ToolNames,
    /// The most bytes one `resources/read` of a file returns (`SANDLOT_RESOURCE_READ_BYTES`).
    pub resource_read_bytes: u64,
    /// Whether `sandbox_run_code` results and `sandlot://runs/{id}/output` have secret shapes replaced by
    /// `[REDACTED:<name>]` (`SANDLOT_SCRUB_SECRETS`; [`sandlot_core::scrub_secrets`]). The history keeps what ran.
    pub scrub_secrets: bool,
}

/// Which name of each tool `tools/list` shows (`SANDLOT_TOOL_NAMES`); the other stays callable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolNames {
    /// `sandbox_run_code`: accepted by every model API.
    #[default]
    Underscore,
    /// `sandbox.run_code`: the original spec's names, for clients that look for them.
    Dotted,
}
