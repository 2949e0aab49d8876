//! The one execution path of Baponi's two faces (MCP `sandbox_execute` and REST `POST /v1/sandbox/execute`):
//! its arguments and their validation (`docs/profiles.md#baponi-mcp`), and the run itself.
//!
//! - A thread is a sandlot conversation: `thread_id` X is conversation X, mounted at `/home/baponi`
//!   ([`Layout::Home`]), so files written through sandlot's own tools in conversation X are there, and back.
//! - Without `thread_id` nothing persists: the run gets a fresh conversation that is removed after it, also when
//!   it fails or is cancelled (its removal is owned by a guard, not by the happy path).
//! - One execution per thread at a time: a second one while the first runs gets [`ExecuteError::ThreadBusy`] at
//!   once (REST answers 409, MCP an error), rather than queueing as sandlot's own tools do.
//! - `metadata` goes to the run history as given; `env_vars` into the run's environment.
//! - A thread belongs to the tenant that first used it (`Engine::run_as`): another tenant's thread, or another
//!   tenant's derived workspace (`kit::conversation_access`), is refused as an invalid `thread_id` before anything
//!   is marked or run, so it is never reported busy either.
//! - A run is named to Baponi clients by a trace id (`super::trace_ids`).

use std::collections::BTreeMap;

use sandlot_core::{ConversationId, Layout, OutputSink, RunReport, RunRequest, Tenant};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::BaponiState;
use crate::kit::conversation_access;

/// Where a thread's directory is mounted in the sandbox.
pub const HOME: &str = "/home/baponi";
/// The layout of every Baponi run.
pub const LAYOUT: Layout = Layout::Home { path: HOME };
/// Longest `code`, in bytes (Baponi's 1 MB body and code limit).
pub const MAX_CODE_BYTES: usize = 1_000_000;
/// Timeout bounds, in seconds.
pub const TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1..=3600;
/// Longest `thread_id`.
pub const MAX_THREAD_ID: usize = 128;
/// Most `metadata` keys, longest key, longest string value.
pub const MAX_METADATA_KEYS: usize = 10;
pub const MAX_METADATA_KEY: usize = 40;
pub const MAX_METADATA_STRING: usize = 256;
/// Most `env_vars`, longest name, longest value, most bytes of names and values together.
pub const MAX_ENV_VARS: usize = 50;
pub const MAX_ENV_NAME: usize = 128;
pub const MAX_ENV_VALUE: usize = 4096;
pub const MAX_ENV_TOTAL: usize = 64 * 1024;
/// Variables a request may not set: the sandbox's own.
const RESERVED_NAMES: [&str; 20] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "TMP",
    "TEMP",
    "PWD",
    "OLDPWD",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "USER",
    "LOGNAME",
    "HOSTNAME",
    "IFS",
    "ENV",
    "BASH_ENV",
    "SHLVL",
    "NODE_OPTIONS",
    "NODE_PATH",
];
/// Prefixes of reserved variables (`_` cannot pass the name pattern anyway; kept to say so).
const RESERVED_PREFIXES: [&str; 7] = ["BAPONI_", "NSJAIL_", "LD_", "LC_", "XDG_", "PYTHON", "_"];
/// Prefix of the conversations of runs without a thread.
const EPHEMERAL_PREFIX: &str = "baponi-ephemeral-";

/// Baponi's languages, and the sandlot language each runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BaponiLanguage {
    Python,
    Node,
    Bash,
}

impl BaponiLanguage {
    /// The sandlot language name.
    pub fn sandlot(self) -> &'static str {
        match self {
            BaponiLanguage::Python => "python",
            BaponiLanguage::Node => "javascript",
            BaponiLanguage::Bash => "bash",
        }
    }
}

/// The arguments of one execution (MCP `sandbox_execute`, REST `POST /v1/sandbox/execute`). Unknown fields are
/// ignored (the REST face's `sub_paths` and `webhook_url` are its own business).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
pub struct ExecuteArgs {
    /// Code to execute.
    pub code: String,
    /// Programming language; `python` when omitted.
    #[serde(default)]
    pub language: Option<BaponiLanguage>,
    /// Execution timeout in seconds (1–3600); the server's default when omitted.
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Persistent thread id: files written to /home/baponi persist across calls with the same thread_id.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// Arbitrary key-value metadata attached to the execution record.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Environment variables injected into the sandbox.
    #[serde(default)]
    pub env_vars: Option<BTreeMap<String, String>>,
}

/// Why an execution did not run (a run that fails is a normal [`RunReport`]).
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// An argument breaks a rule; `field` is the top-level argument's name.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// Another execution of the thread is running.
    #[error("thread {thread_id} is busy: another execution of it is running")]
    ThreadBusy { thread_id: String },
    /// The engine refused or failed (no runner, queue full, internal fault).
    #[error(transparent)]
    Engine(sandlot_core::Error),
}

impl ExecuteError {
    fn invalid(field: &str, message: impl Into<String>) -> Self {
        ExecuteError::Invalid { field: field.to_owned(), message: message.into() }
    }
}

/// Parses arguments given as JSON (a tool call's `arguments`, a REST body), then [`validate`]s them. A wrong type
/// or a missing `code` is an [`ExecuteError::Invalid`] naming the field.
pub fn parse(arguments: Value) -> Result<ExecuteArgs, ExecuteError> {
    let Value::Object(object) = arguments else {
        return Err(ExecuteError::invalid("arguments", "must be a JSON object"));
    };
    if matches!(object.get("code"), None | Some(Value::Null)) {
        return Err(ExecuteError::invalid("code", "missing required argument code"));
    }
    if let Some(Value::String(language)) = object.get("language")
        && !["python", "node", "bash"].contains(&language.as_str())
    {
        return Err(ExecuteError::invalid("language", format!("must be python, node or bash, not {language:?}")));
    }
    if let Some(timeout) = object.get("timeout").filter(|t| !t.is_null())
        && !timeout.as_u64().is_some_and(|t| TIMEOUT_RANGE.contains(&t))
    {
        return Err(ExecuteError::invalid("timeout", format!("must be an integer from 1 to 3600, not {timeout}")));
    }
    let args: ExecuteArgs = serde_path_to_error::deserialize(Value::Object(object)).map_err(|error| {
        let path = error.path().to_string();
        let field = path.split(['.', '[']).next().filter(|f| !f.is_empty() && *f != "?").unwrap_or("arguments");
        ExecuteError::invalid(field, format!("{path}: {}", error.inner()))
    })?;
    validate(&args)?;
    Ok(args)
}

/// Checks every rule of `sandbox_execute`'s arguments (`docs/profiles.md#baponi-mcp`); the error names the first field
/// that breaks one.
pub fn validate(args: &ExecuteArgs) -> Result<(), ExecuteError> {
    if args.code.is_empty() {
        return Err(ExecuteError::invalid("code", "must not be empty"));
    }
    if args.code.len() > MAX_CODE_BYTES {
        return Err(ExecuteError::invalid(
            "code",
            format!("is {} bytes; the limit is {MAX_CODE_BYTES}", args.code.len()),
        ));
    }
    if let Some(timeout) = args.timeout
        && !TIMEOUT_RANGE.contains(&timeout)
    {
        return Err(ExecuteError::invalid("timeout", format!("must be from 1 to 3600 seconds, not {timeout}")));
    }
    if let Some(thread_id) = &args.thread_id {
        validate_thread_id(thread_id)?;
    }
    if let Some(metadata) = &args.metadata {
        validate_metadata(metadata)?;
    }
    if let Some(env_vars) = &args.env_vars {
        validate_env_vars(env_vars)?;
    }
    Ok(())
}

/// `^[a-zA-Z0-9][a-zA-Z0-9_-]*$`, at most 128 characters.
pub fn validate_thread_id(thread_id: &str) -> Result<(), ExecuteError> {
    let invalid = |message: &str| Err(ExecuteError::invalid("thread_id", message));
    if thread_id.is_empty() {
        return invalid("must not be empty");
    }
    if thread_id.len() > MAX_THREAD_ID {
        return invalid("must be at most 128 characters");
    }
    if !thread_id.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return invalid("must start with a letter or digit");
    }
    if !thread_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return invalid("must contain only letters, digits, '_' and '-'");
    }
    Ok(())
}

fn validate_metadata(metadata: &Map<String, Value>) -> Result<(), ExecuteError> {
    let invalid = |message: String| Err(ExecuteError::invalid("metadata", message));
    if metadata.len() > MAX_METADATA_KEYS {
        return invalid(format!("has {} keys; at most {MAX_METADATA_KEYS} are allowed", metadata.len()));
    }
    for (key, value) in metadata {
        let pattern = key.starts_with(|c: char| c.is_ascii_alphanumeric())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !pattern {
            return invalid(format!("key {key:?} must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$"));
        }
        if key.len() > MAX_METADATA_KEY {
            return invalid(format!("key {key:?} is longer than {MAX_METADATA_KEY} characters"));
        }
        if let Value::String(text) = value
            && text.chars().count() > MAX_METADATA_STRING
        {
            return invalid(format!("the value of {key:?} is longer than {MAX_METADATA_STRING} characters"));
        }
    }
    Ok(())
}

fn validate_env_vars(env_vars: &BTreeMap<String, String>) -> Result<(), ExecuteError> {
    let invalid = |message: String| Err(ExecuteError::invalid("env_vars", message));
    if env_vars.len() > MAX_ENV_VARS {
        return invalid(format!("has {} variables; at most {MAX_ENV_VARS} are allowed", env_vars.len()));
    }
    let mut total = 0usize;
    for (name, value) in env_vars {
        let pattern = name.starts_with(|c: char| c.is_ascii_uppercase())
            && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !pattern {
            return invalid(format!("name {name:?} must match ^[A-Z][A-Z0-9_]*$"));
        }
        if name.len() > MAX_ENV_NAME {
            return invalid(format!("name {name:?} is longer than {MAX_ENV_NAME} characters"));
        }
        if is_reserved(name) {
            return invalid(format!("{name} is a reserved name"));
        }
        if value.len() > MAX_ENV_VALUE {
            return invalid(format!("the value of {name} is longer than {MAX_ENV_VALUE} bytes"));
        }
        if value.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')) {
            return invalid(format!("the value of {name} contains a control character"));
        }
        total += name.len() + value.len();
    }
    if total > MAX_ENV_TOTAL {
        return invalid(format!("names and values are {total} bytes together; the limit is {MAX_ENV_TOTAL}"));
    }
    Ok(())
}

fn is_reserved(name: &str) -> bool {
    RESERVED_NAMES.contains(&name) || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p)) || name.ends_with("_PROXY")
}

/// Checks that `tenant` may run in the thread `args` names (none: a fresh conversation, always): another tenant's
/// is [`ExecuteError::Invalid`] `thread_id`, as the engine would refuse the run. For a face that must know before
/// it marks anything (REST registers an execution for `/cancel`); [`execute`] checks it too.
pub fn admit(state: &BaponiState, tenant: &Tenant, args: &ExecuteArgs) -> Result<(), ExecuteError> {
    let Some(thread_id) = &args.thread_id else {
        return Ok(());
    };
    let conversation = ConversationId::parse(thread_id).map_err(from_engine)?;
    conversation_access::admit_run(&state.app.engine, tenant, &conversation).map_err(from_engine)
}

/// Runs one execution for `tenant` to its end (see the module's rules). Output goes to `sink` as it comes; cancelling `cancel`
/// stops the run (its report then says cancelled).
pub async fn execute(
    state: &BaponiState,
    args: ExecuteArgs,
    tenant: &Tenant,
    sink: &dyn OutputSink,
    cancel: CancellationToken,
) -> Result<RunReport, ExecuteError> {
    execute_as(state, args, tenant, sink, cancel, ephemeral_conversation()).await
}

/// A fresh conversation id for a run without a thread.
pub fn ephemeral_conversation() -> String {
    format!("{EPHEMERAL_PREFIX}{}", uuid::Uuid::new_v4().simple())
}

/// [`execute`], where a run without a thread gets the conversation `ephemeral` (from [`ephemeral_conversation`]):
/// for a face that must know it before the run starts (REST streaming follows the run's events by conversation).
pub async fn execute_as(
    state: &BaponiState,
    args: ExecuteArgs,
    tenant: &Tenant,
    sink: &dyn OutputSink,
    cancel: CancellationToken,
    ephemeral: String,
) -> Result<RunReport, ExecuteError> {
    validate(&args)?;
    if let Some(timeout) = args.timeout {
        let ceiling = state.app.engine.config().max_timeout.as_secs();
        if timeout > ceiling {
            return Err(ExecuteError::invalid(
                "timeout",
                format!("is {timeout} s; this server allows at most {ceiling} s"),
            ));
        }
    }
    // Before the busy mark: another tenant's thread is refused, not reported busy.
    admit(state, tenant, &args)?;
    // Held until the run has ended: the thread's busy mark, or the removal of the ephemeral conversation.
    let (conversation_id, _hold) = match &args.thread_id {
        Some(thread_id) => (thread_id.clone(), Hold::Thread(state.claim_thread(thread_id)?)),
        None => {
            let id = ephemeral;
            let conversation = ConversationId::parse(&id).map_err(ExecuteError::Engine)?;
            (id, Hold::Ephemeral(Ephemeral { state: state.clone(), conversation }))
        }
    };
    let request = RunRequest {
        conversation_id,
        language: args.language.unwrap_or(BaponiLanguage::Python).sandlot().to_owned(),
        code: args.code,
        stdin: Vec::new(),
        env: args.env_vars.unwrap_or_default(),
        timeout: args.timeout.map(std::time::Duration::from_secs),
        caller: tenant.name().to_owned(),
        metadata: args.metadata.map(Value::Object),
        layout: LAYOUT,
        mounts: state.volumes.mounts(),
        alongside: false,
        session: Default::default(),
        network: Default::default(),
        cancel,
    };
    state.app.engine.run_as(tenant, request, sink).await.map_err(from_engine)
}

/// An engine error, with its argument names turned into Baponi's; another tenant's thread is an invalid
/// `thread_id`.
fn from_engine(error: sandlot_core::Error) -> ExecuteError {
    match error {
        sandlot_core::Error::ConversationTaken { conversation } => ExecuteError::Invalid {
            field: "thread_id".to_owned(),
            message: format!("thread {conversation:?} is not available to this caller; use another thread_id"),
        },
        sandlot_core::Error::InvalidArgument { field, message } => {
            let field = match field {
                "timeoutSeconds" => "timeout",
                "env" => "env_vars",
                "conversationId" => "thread_id",
                other => other,
            };
            ExecuteError::Invalid { field: field.to_owned(), message }
        }
        error @ sandlot_core::Error::ConversationLimit { .. } => {
            ExecuteError::Invalid { field: "thread_id".to_owned(), message: error.to_string() }
        }
        other => ExecuteError::Engine(other),
    }
}

/// What an execution holds until it ends.
enum Hold {
    Thread(#[allow(dead_code)] ThreadClaim),
    Ephemeral(#[allow(dead_code)] Ephemeral),
}

/// A thread marked busy; unmarked when dropped.
pub(super) struct ThreadClaim {
    pub(super) busy: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    pub(super) thread_id: String,
}

impl Drop for ThreadClaim {
    fn drop(&mut self) {
        self.busy.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&self.thread_id);
    }
}

/// The conversation of a run without a thread: removed when dropped (after the run, whether it finished, failed
/// or was cancelled with its future dropped). The removal waits, a bounded while, for the sandbox to let go of it.
struct Ephemeral {
    state: BaponiState,
    conversation: ConversationId,
}

impl Drop for Ephemeral {
    fn drop(&mut self) {
        let workspaces = self.state.app.engine.workspaces().clone();
        let conversation = self.conversation.clone();
        let remove = move || {
            for attempt in 0..50u32 {
                match workspaces.remove(&conversation) {
                    Ok(_) => return,
                    Err(sandlot_core::Error::ConversationBusy { .. }) if attempt < 49 => {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    Err(error) => {
                        tracing::warn!(conversation = %conversation, %error, "ephemeral conversation not removed");
                        return;
                    }
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field_of(arguments: Value) -> String {
        match parse(arguments) {
            Err(ExecuteError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid argument, got {other:?}"),
        }
    }

    #[test]
    fn parses_every_field() {
        let args = parse(json!({
            "code": "print(1)", "language": "node", "timeout": 5, "thread_id": "t-1",
            "metadata": {"run.id": 3}, "env_vars": {"API_KEY": "x"}, "webhook_url": "ignored"
        }))
        .unwrap();
        let expected = ExecuteArgs {
            code: "print(1)".into(),
            language: Some(BaponiLanguage::Node),
            timeout: Some(5),
            thread_id: Some("t-1".into()),
            metadata: Some(json!({"run.id": 3}).as_object().unwrap().clone()),
            env_vars: Some(BTreeMap::from([("API_KEY".to_owned(), "x".to_owned())])),
        };
        assert_eq!(args, expected);
    }

    #[test]
    fn each_rule_names_its_field() {
        let long = "a".repeat(129);
        let cases = [
            (json!({}), "code"),
            (json!({"code": ""}), "code"),
            (json!({"code": 5}), "code"),
            (json!({"code": "x".repeat(MAX_CODE_BYTES + 1)}), "code"),
            (json!({"code": "x", "language": "ruby"}), "language"),
            (json!({"code": "x", "timeout": 0}), "timeout"),
            (json!({"code": "x", "timeout": 3601}), "timeout"),
            (json!({"code": "x", "timeout": 1.5}), "timeout"),
            (json!({"code": "x", "thread_id": "-a"}), "thread_id"),
            (json!({"code": "x", "thread_id": "a.b"}), "thread_id"),
            (json!({"code": "x", "thread_id": long}), "thread_id"),
            (json!({"code": "x", "metadata": "text"}), "metadata"),
            (json!({"code": "x", "metadata": {"-k": 1}}), "metadata"),
            (json!({"code": "x", "metadata": {"k".repeat(41): 1}}), "metadata"),
            (json!({"code": "x", "metadata": {"k": "v".repeat(257)}}), "metadata"),
            (
                json!({"code": "x", "metadata": (0..11).map(|i| (format!("k{i}"), json!(i))).collect::<Map<_, _>>()}),
                "metadata",
            ),
            (json!({"code": "x", "env_vars": {"lower": "v"}}), "env_vars"),
            (json!({"code": "x", "env_vars": {"A": 1}}), "env_vars"),
            (json!({"code": "x", "env_vars": {"PATH": "/x"}}), "env_vars"),
            (json!({"code": "x", "env_vars": {"LD_PRELOAD": "/x"}}), "env_vars"),
            (json!({"code": "x", "env_vars": {"PYTHONPATH": "/x"}}), "env_vars"),
            (json!({"code": "x", "env_vars": {"HTTPS_PROXY": "x"}}), "env_vars"),
            (json!({"code": "x", "env_vars": {"BAPONI_X": "x"}}), "env_vars"),
            (json!({"code": "x", "env_vars": {"A": "v\u{1}"}}), "env_vars"),
            (json!({"code": "x", "env_vars": {"A": "v".repeat(4097)}}), "env_vars"),
            (json!({"code": "x", "env_vars": {format!("A{}", "B".repeat(128)): "v"}}), "env_vars"),
            (
                json!({"code": "x", "env_vars": (0..51).map(|i| (format!("V{i}"), json!("v"))).collect::<Map<_, _>>()}),
                "env_vars",
            ),
            (
                json!({"code": "x", "env_vars": (0..20).map(|i| (format!("V{i}"), json!("v".repeat(4000)))).collect::<Map<_, _>>()}),
                "env_vars",
            ),
        ];
        for (arguments, field) in cases {
            assert_eq!(field_of(arguments.clone()), field, "{arguments:.80}");
        }
    }

    #[test]
    fn allowed_values_pass() {
        let env: Map<String, Value> = (0..50).map(|i| (format!("V{i}"), json!("a\tb\nc\r"))).collect();
        parse(json!({"code": "x", "timeout": 3600, "env_vars": env, "metadata": {"a.b-c_d": "v".repeat(256)}}))
            .unwrap();
    }
}
