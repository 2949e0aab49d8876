//! sandlot-core: everything about a run that does not depend on how it is isolated or how it was asked for.
//!
//! A face (CLI, MCP, REST) builds a [`RunRequest`] and hands it to the [`Engine`], which validates it, prepares the
//! conversation's workspace, and drives a [`Backend`] (the native jail, Docker, ...) to produce a [`RunOutcome`].
//! Every run is accounted for in a ledger: the runs in flight, a live event feed and the SQLite run history; and
//! counted in [`run_metrics`] for whoever installed a `metrics` recorder.
//! No HTTP, no MCP and no `unsafe` live here.

mod admission;
mod backend;
pub mod browser;
mod conversation_id;
mod disk_image;
mod engine;
mod error;
mod events;
mod history;
mod image_holds;
mod language;
mod layout;
mod ledger;
mod limits;
mod live;
mod log_text;
pub mod marks;
mod mount;
mod network;
mod outcome;
mod output;
mod private_dir;
mod quota;
mod readiness;
mod removal;
mod request;
mod retention;
pub mod run_metrics;
mod scrub;
mod sessions;
mod signer;
mod state_dir;
mod stop;
mod tenant;
mod timestamp;
pub mod typescript;
mod unlinked_files;
mod uploads;
mod workspaces;

pub use backend::{Backend, Job, RunnerInfo};
pub use browser::{BrowserAction, BrowserFailure, BrowserOutput, BrowserResult, BrowserTab};
pub use conversation_id::ConversationId;
pub use disk_image::{DiskImages, IMAGE_NAME, OVER_QUOTA_ROOM, is_mounted as image_is_mounted};
pub use engine::{DEFAULT_RESULT_TEXT_BYTES, Deletion, Engine, EngineConfig, MAX_METADATA_BYTES, RunReport};
pub use error::{Error, Result};
pub use events::{EVENT_BUFFER, RunEvent};
pub use history::{
    DEFAULT_OUTPUT_BUDGET, History, MAX_LISTED_RUNS, NetworkTrail, Outcome, OutputLookup, RunOutput, RunRecord,
    hold_lease,
};
pub use language::Language;
pub use layout::Layout;
pub use ledger::OwnedEvent;
pub use limits::{Limits, MIN_TIMEOUT, timeout_from_secs};
pub use live::{LiveBackend, LiveProcess, LiveSandbox, LiveSpec, ProcessHandle, SandboxProcess, SandboxUsage, Spawn};
pub use log_text::Escaped;
pub use mount::{MAX_MOUNTS, Mount, hand_over_writable};
pub use network::{EgressPolicies, JobNetwork, NetworkUse};
pub use outcome::{RunOutcome, Termination};
pub use output::{
    CapturedStream, Excerpt, OutputChunk, OutputSink, Stream, cut_marker, head_and_tail, json_len, json_prefix,
    json_suffix,
};
pub use quota::{
    DISK_CHECK_INTERVAL, WALK_COST_FACTOR, at_quota, measure_conversation, over_quota, quota_exceeded,
    volumes_over_quota,
};
pub use readiness::{READINESS_TIMEOUT, READINESS_TTL, Readiness, ReadinessCheck};
pub use request::{RunRequest, SessionUse};
pub use retention::{Retention, keep_tidy};
pub use sandlot_egress::{ConnectionRecord, PolicySpec};
pub use scrub::{SECRET_PATTERNS, scrub_secrets};
pub use sessions::config::{DEFAULT_SANDBOX_IDLE, DEFAULT_SANDBOX_LIFETIME, default_max_live};
pub use sessions::driver::spawn_for as session_driver_spawn;
pub use sessions::{InterpreterStatus, SessionConfig, SessionReport, SessionStatus, Sessions};
pub use signer::Signer;
pub use state_dir::{STATE_DIR_NAME, StateDir};
pub use stop::{Stop, stop_reason};
pub use tenant::Tenant;
pub use timestamp::{rfc3339_millis, rfc3339_seconds};
pub use typescript::TypeScriptMode;
pub use uploads::{MAX_UPLOADS_PER_CONVERSATION, Upload, UploadSize};
pub use workspaces::{
    Budgeted, Claim, ConversationBounds, DEFAULT_FREE_SPACE_PERCENT, DEFAULT_MAX_CONVERSATIONS,
    DEFAULT_TENANT_MAX_CONVERSATIONS, DiskUsage, FileEntry, FileListing, MAX_VISITED_ENTRIES, PendingFile, Spent,
    WalkEnd, WalkLimits, Workspaces, create_in_dir, directory_usage, hand_over, hold_conversation, list_in_dir,
    open_in_dir, validate_relative_path, validate_upload_path, write_in_dir,
};
