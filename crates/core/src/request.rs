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
    /// Runs in the conversation's live sandbox (started when it has none) instead of a fresh one: in the language's
    /// persistent interpreter, whose variables, functions, imports (and for Bash, working directory) the next
    /// `session` call sees. With `alongside` too, the code runs as a process of its own in the live sandbox (a
    /// background shell), not in the interpreter. See `sessions`.
    pub session: bool,
    /// Cancelling it stops the run (its sandbox is killed; the outcome is `Cancelled`).
    pub cancel: tokio_util::sync::CancellationToken,
}
