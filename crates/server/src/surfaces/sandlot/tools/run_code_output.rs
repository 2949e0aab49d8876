//! The `structuredContent` of `sandbox.run_code` as one Rust type. Every result (a run, a refused run, a busy
//! server) is a [`RunCodeOutput`] serialized, and the tool's `outputSchema` is derived from it with schemars
//! (`schema::output_schema_of`), so what a client validates against and what the server sends cannot drift.

use sandlot_core::Outcome;
use schemars::JsonSchema;
use serde::Serialize;

/// What `sandbox.run_code` returns, field for field as `docs/mcp.md` describes it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunCodeOutput {
    /// The program exited with code 0.
    pub success: bool,
    /// stdout, then stderr, then sandlot's diagnostic if any.
    pub output: String,
    pub stdout: String,
    pub stderr: String,
    /// The program's exit code; -1 when no run happened.
    pub exit_code: i32,
    pub timed_out: bool,
    pub truncated: bool,
    pub duration_ms: u64,
    pub files: Vec<ResultFile>,
    pub files_truncated: bool,
    /// The run's id in the history (sandlot://runs/{runId}); absent when no run was accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// How the run ended; absent for a missing runner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The server was too busy to queue the run; retry later. Only ever `true` (absent otherwise).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    /// With busy: when to retry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// The live sandbox the run used (`session: true`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionInfo>,
}

/// What a `session` run's result says about the conversation's live sandbox.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The live sandbox's id: a new id means a new sandbox, with nothing of the earlier one's state.
    pub id: String,
    /// Calls the live sandbox has served, this one included.
    pub calls: u64,
    /// The state of earlier session calls (variables, imports, processes) is gone: `notice` says why.
    pub state_lost: bool,
    /// Why the state was lost, in a sentence; absent when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

impl SessionInfo {
    pub fn of(report: &sandlot_core::SessionReport) -> Self {
        Self {
            id: report.id.clone(),
            calls: report.calls,
            state_lost: report.state_lost,
            notice: report.notice.clone().filter(|_| report.state_lost),
        }
    }
}

/// A file under `/data` after the run.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResultFile {
    /// Its path relative to /data.
    pub name: String,
    /// Its signed download URL.
    pub url: String,
    pub size: u64,
}

impl RunCodeOutput {
    /// A result where no run happened (no runner, busy): `output` says why.
    pub fn failure(output: String) -> Self {
        Self {
            success: false,
            output,
            stdout: String::new(),
            stderr: String::new(),
            exit_code: -1,
            timed_out: false,
            truncated: false,
            duration_ms: 0,
            files: Vec::new(),
            files_truncated: false,
            run_id: None,
            outcome: None,
            busy: false,
            retry_after_seconds: None,
            session: None,
        }
    }
}
