//! The run history over REST: `GET /v1/runs?conversationId=&limit=` (newest first; `limit` 1–500, default 50)
//! → `{"runs": [record]}`, `GET /v1/runs/{runId}` → one record, and `GET /v1/runs/{runId}/output` → what the run
//! printed as kept (`{runId, stdout, stderr, stdoutTruncated, stderrTruncated}`, each stream up to
//! `SANDLOT_MAX_OUTPUT_BYTES`, its first and last halves when longer; a tool result shows only a head and a tail); 404 when the run is unknown or its output is
//! not kept (still running, cancelled, or dropped to keep the history within `SANDLOT_HISTORY_OUTPUT_MB`). A record is [`sandlot_core::RunRecord`]
//! (camelCase JSON), the same as the MCP resources serve. 400 for a bad parameter, 404 for an unknown run.

use std::collections::HashMap;

use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandlot_core::{ConversationId, Error, MAX_LISTED_RUNS, OutputLookup};

use crate::AppState;
use crate::kit::{Caller, rest_error};

/// Runs listed when `limit` is not given.
const DEFAULT_LIMIT: usize = 50;

fn no_history() -> Response {
    rest_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "this server keeps no run history")
}

fn internal(error: &Error) -> Response {
    tracing::error!(%error, "cannot read the run history");
    rest_error(StatusCode::INTERNAL_SERVER_ERROR, "internal", "cannot read the run history")
}

/// `GET /v1/runs`.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let conversation = match query.get("conversationId").filter(|id| !id.is_empty()) {
        None => None,
        Some(id) => match ConversationId::parse(id) {
            Ok(id) => Some(id),
            Err(error) => return rest_error(StatusCode::BAD_REQUEST, "invalid_argument", &error.to_string()),
        },
    };
    let limit = match query.get("limit").map(|limit| limit.parse::<usize>()) {
        None => DEFAULT_LIMIT,
        Some(Ok(limit)) if (1..=MAX_LISTED_RUNS).contains(&limit) => limit,
        Some(_) => {
            let message = format!("invalid limit: must be a whole number from 1 to {MAX_LISTED_RUNS}");
            return rest_error(StatusCode::BAD_REQUEST, "invalid_argument", &message);
        }
    };
    let Some(history) = state.engine.history() else { return no_history() };
    match history.list_for(&caller.tenant(), conversation.as_ref(), limit) {
        Ok(runs) => axum::Json(serde_json::json!({ "runs": runs })).into_response(),
        Err(error) => internal(&error),
    }
}

/// `GET /v1/runs/{runId}`.
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
) -> Response {
    let Some(history) = state.engine.history() else { return no_history() };
    match history.get_for(&caller.tenant(), &run_id) {
        Ok(Some(run)) => axum::Json(run).into_response(),
        Ok(None) => rest_error(StatusCode::NOT_FOUND, "not_found", &format!("no run {run_id:?} in the history")),
        Err(error) => internal(&error),
    }
}

/// `GET /v1/runs/{runId}/output`.
pub async fn output(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
) -> Response {
    let Some(history) = state.engine.history() else { return no_history() };
    match history.output_for(&caller.tenant(), &run_id) {
        Ok(OutputLookup::Kept(output)) => axum::Json(output).into_response(),
        Ok(OutputLookup::UnknownRun) => {
            rest_error(StatusCode::NOT_FOUND, "not_found", &format!("no run {run_id:?} in the history"))
        }
        Ok(OutputLookup::NotKept) => {
            rest_error(StatusCode::NOT_FOUND, "not_found", &crate::surfaces::sandlot::output_not_kept(&run_id))
        }
        Err(error) => internal(&error),
    }
}
