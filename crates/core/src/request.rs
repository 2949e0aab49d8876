//! What a caller asks the engine to run.

use std::collections::BTreeMap;
use std::time::Duration;

/// One request to run code, as it arrives from a face. The engine validates every field.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// The conversation whose `/data` the run sees; validated as a [`crate::ConversationId`].
    pub conversation_id: String,
    /// A language name or alias; parsed as a [`crate::Language`].
    pub language: String,
    /// The source code.
    pub code: String,
    /// Bytes fed to the program's standard input (empty: immediate end of file).
    pub stdin: Vec<u8>,
    /// Extra environment variables for the program.
    pub env: BTreeMap<String, String>,
    /// Deadline; the engine's default when absent, never more than its ceiling.
    pub timeout: Option<Duration>,
    /// Who asks (the API key's name, the JWT's subject, `stdio`, `cli`); recorded in the history. Left empty,
    /// [`crate::Engine::run_as`] records its tenant's name: the history gives a tenant the runs its name asked for.
    pub caller: String,
    /// The caller's own JSON object about the run (at most 16 KiB), recorded in the history as given.
    pub metadata: Option<serde_json::Value>,
    /// Where the run sees the conversation's directory (sandlot's own: at `/data`).
    pub layout: crate::Layout,
    /// Host directories the run also sees (Baponi's volumes), checked by [`crate::Mount`]'s rules.
    pub mounts: Vec<crate::Mount>,
    /// Runs alongside the conversation's later runs instead of holding them back until it ends (it still waits for
    /// its own turn, and takes a place in the pool): codegen-sandbox's background shells, which outlive their call.
    /// Such runs of one tenant hold at most half the pool's places (at least one).
    pub alongside: bool,
    /// Whether it runs in the conversation's live sandbox (started when it has none) instead of a fresh one, and how.
    pub session: SessionUse,
    /// What it may reach beyond its loopback: the server's egress policy, or that narrowed (see `network`).
    pub network: crate::NetworkUse,
    /// Cancelling it stops the run (its sandbox is killed; the outcome is `Cancelled`).
    pub cancel: tokio_util::sync::CancellationToken,
}

/// Where a run executes: a fresh sandbox, or the conversation's live sandbox (see `sessions`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SessionUse {
    /// A fresh sandbox, for this run alone (the default).
    #[default]
    Off,
    /// The language's persistent interpreter in the live sandbox: its variables, functions and imports (for Bash,
    /// its working directory too) are the next `Interpreter` run's. Python, JavaScript, TypeScript, Bash.
    Interpreter,
    /// A process of its own in the live sandbox (`python3 -c`, `node -e`, `bash -c`): it sees the sandbox's files,
    /// `/tmp`, loopback and processes, and what it leaves running stays. Python, JavaScript, Bash.
    Process,
}

impl SessionUse {
    /// Whether the run uses the live sandbox.
    pub fn is_live(self) -> bool {
        self != SessionUse::Off
    }
}
