//! Run events: what the engine announces as runs start, print and finish, for live listeners (`/mcp/events`). Slow
//! listeners miss events rather than slow the engine down (a bounded broadcast channel).

use std::time::Duration;

use crate::{Language, RunOutcome, Stream, Termination};

/// Events kept for a listener that has not read them yet; older ones are dropped for it.
pub const EVENT_BUFFER: usize = 1024;

/// Something that happened to a run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run got its turn and its sandbox is being started.
    Started {
        #[serde(rename = "runId")]
        run_id: String,
        #[serde(rename = "conversationId")]
        conversation_id: String,
        language: Language,
    },
    /// A chunk of the run's output, as it was read (`seq` counts a run's chunks from 0).
    Output {
        #[serde(rename = "runId")]
        run_id: String,
        #[serde(rename = "conversationId")]
        conversation_id: String,
        stream: Stream,
        seq: u64,
        /// The bytes as text (invalid UTF-8 replaced).
        data: String,
    },
    /// The run ended (however it ended).
    Finished {
        #[serde(rename = "runId")]
        run_id: String,
        #[serde(rename = "conversationId")]
        conversation_id: String,
        language: Language,
        success: bool,
        #[serde(rename = "exitCode")]
        exit_code: i32,
        termination: Termination,
        #[serde(rename = "durationMs")]
        duration_ms: u64,
    },
    /// sandlot could not run it (a fault of the backend, not of the code).
    Failed {
        #[serde(rename = "runId")]
        run_id: String,
        #[serde(rename = "conversationId")]
        conversation_id: String,
        language: Language,
        error: String,
    },
}

impl RunEvent {
    /// The conversation the event belongs to.
    pub fn conversation_id(&self) -> &str {
        match self {
            RunEvent::Started { conversation_id, .. }
            | RunEvent::Output { conversation_id, .. }
            | RunEvent::Finished { conversation_id, .. }
            | RunEvent::Failed { conversation_id, .. } => conversation_id,
        }
    }

    /// The run the event belongs to.
    pub fn run_id(&self) -> &str {
        match self {
            RunEvent::Started { run_id, .. }
            | RunEvent::Output { run_id, .. }
            | RunEvent::Finished { run_id, .. }
            | RunEvent::Failed { run_id, .. } => run_id,
        }
    }

    /// The JSON-RPC notification method that carries it.
    pub fn method(&self) -> &'static str {
        match self {
            RunEvent::Started { .. } => "notifications/sandlot/run_started",
            RunEvent::Output { .. } => "notifications/sandlot/run_output",
            RunEvent::Finished { .. } | RunEvent::Failed { .. } => "notifications/sandlot/run_finished",
        }
    }

    pub(crate) fn finished(run_id: &str, conversation_id: &str, language: Language, outcome: &RunOutcome) -> Self {
        RunEvent::Finished {
            run_id: run_id.to_owned(),
            conversation_id: conversation_id.to_owned(),
            language,
            success: outcome.success(),
            exit_code: outcome.exit_code(),
            termination: outcome.termination.clone(),
            duration_ms: duration_ms(outcome.duration),
        }
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
