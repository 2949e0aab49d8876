//! Baponi's executions over REST (`docs/profiles.md#baponi-rest-and-files-api`), read from sandlot's run history:
//! - `GET /v1/executions/{trace_id}` → `{trace_id, status, exit_code, stdout, stderr, error, duration_ms,
//!   delivery_mode, created_at, completed_at}`; `status` is `queued`, `running`, `success`, `failed`, `timeout`,
//!   `oom` or `cancelled`;
//! - `POST /v1/executions/{trace_id}/cancel` → `{trace_id, status}`: cancels an execution this REST face started
//!   (its sandbox is killed); for one that has ended, says how it ended;
//! - `GET /v1/executions/{trace_id}/output?after_seq=N` → NDJSON: an ended execution's events again (status, its
//!   stdout, its stderr, result), those after `seq` N; a running one's from now on, to its result.
//!
//! A trace id is `trc_` + the whole run id ([`super::trace_id`]), found only whole and only among the caller's own
//! runs ([`super::run_id_of`], `History::get_for`, `History::output_for`): 404 `not_found` for an unknown one and
//! for another tenant's alike (an admin's caller sees every run), 503 when the server keeps no history.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sandlot_core::{Outcome, OutputLookup, RunOutput, RunRecord, Tenant};
use serde_json::{Value, json};

use super::BaponiState;
use super::ndjson::{Ndjson, follow};
use super::rest::{RestState, refuse, tenant_of};
use crate::kit::Caller;

/// Baponi's status of a recorded run.
fn status(record: &RunRecord) -> &'static str {
    match record.outcome {
        None if record.state == "queued" => "queued",
        None => "running",
        Some(Outcome::Ok) => "success",
        Some(Outcome::Timeout) => "timeout",
        Some(Outcome::Oom) => "oom",
        Some(Outcome::Cancelled) => "cancelled",
        Some(Outcome::Error | Outcome::Busy | Outcome::Interrupted | Outcome::Internal) => "failed",
    }
}

/// Baponi's machine-readable `error` of a recorded run (sandlot's own names where Baponi has none).
fn error_code(outcome: Option<Outcome>) -> Option<&'static str> {
    match outcome? {
        Outcome::Ok | Outcome::Error => None,
        Outcome::Timeout => Some("timeout"),
        Outcome::Oom => Some("memory_limit_exceeded"),
        Outcome::Cancelled => Some("cancelled"),
        Outcome::Busy => Some("busy"),
        Outcome::Interrupted => Some("interrupted"),
        Outcome::Internal => Some("internal_error"),
    }
}

/// The SandboxResult of an ended run (`exit_code` -1 when it never ran).
fn result_of(record: &RunRecord, output: Option<&RunOutput>) -> Value {
    json!({
        "success": record.outcome == Some(Outcome::Ok),
        "stdout": output.map_or("", |o| o.stdout.as_str()),
        "stderr": output.map_or("", |o| o.stderr.as_str()),
        "exit_code": record.exit_code.unwrap_or(-1),
        "error": error_code(record.outcome),
    })
}

/// The run a trace id names, if it is `tenant`'s, with its record and kept output.
fn lookup(
    state: &BaponiState,
    tenant: &Tenant,
    trace_id: &str,
) -> Result<(String, RunRecord, Option<RunOutput>), Box<Response>> {
    let not_found = || Box::new(refuse(StatusCode::NOT_FOUND, "not_found", &format!("no execution {trace_id:?}")));
    let Some(history) = state.app.engine.history() else {
        return Err(Box::new(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "this server keeps no execution history",
        )));
    };
    let internal = |error: sandlot_core::Error| {
        tracing::error!(%error, "cannot read the run history");
        Box::new(refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "cannot read the execution history"))
    };
    let run_id = super::run_id_of(state, tenant, trace_id).map_err(internal)?.ok_or_else(not_found)?;
    let record = history.get_for(tenant, &run_id).map_err(internal)?.ok_or_else(not_found)?;
    let output = match history.output_for(tenant, &run_id).map_err(internal)? {
        OutputLookup::Kept(output) => Some(output),
        OutputLookup::UnknownRun | OutputLookup::NotKept => None,
    };
    Ok((run_id, record, output))
}

/// `GET /v1/executions/{trace_id}`.
pub async fn get(
    State(rest): State<RestState>,
    caller: Option<Extension<Caller>>,
    Path(trace_id): Path<String>,
) -> Response {
    let (_, record, output) = match lookup(&rest.baponi, &tenant_of(caller), &trace_id) {
        Ok(found) => found,
        Err(response) => return *response,
    };
    axum::Json(json!({
        "trace_id": trace_id,
        "status": status(&record),
        "exit_code": record.exit_code,
        "stdout": output.as_ref().map(|o| &o.stdout),
        "stderr": output.as_ref().map(|o| &o.stderr),
        "error": error_code(record.outcome),
        "duration_ms": record.duration_ms.unwrap_or(0),
        "delivery_mode": "inline",
        "created_at": record.queued_at,
        "completed_at": record.finished_at,
    }))
    .into_response()
}

/// `POST /v1/executions/{trace_id}/cancel`.
pub async fn cancel(
    State(rest): State<RestState>,
    caller: Option<Extension<Caller>>,
    Path(trace_id): Path<String>,
) -> Response {
    let (run_id, record, _) = match lookup(&rest.baponi, &tenant_of(caller), &trace_id) {
        Ok(found) => found,
        Err(response) => return *response,
    };
    if record.outcome.is_some() {
        return axum::Json(json!({ "trace_id": trace_id, "status": status(&record) })).into_response();
    }
    let token = rest.table().get(&record.conversation_id).cloned();
    // The token is the execution's only if the run going in that conversation is this one.
    let this_run =
        rest.baponi.app.engine.in_flight().iter().any(|(id, _, _)| *id == run_id) || record.state == "queued";
    match token {
        Some(token) if this_run => {
            token.cancel();
            axum::Json(json!({ "trace_id": trace_id, "status": "cancelled" })).into_response()
        }
        _ => refuse(
            StatusCode::CONFLICT,
            "conflict",
            &format!("execution {trace_id} was not started through this REST API and cannot be cancelled here"),
        ),
    }
}

/// `GET /v1/executions/{trace_id}/output`.
pub async fn output(
    State(rest): State<RestState>,
    caller: Option<Extension<Caller>>,
    Path(trace_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let after = match query.get("after_seq").map(|s| s.parse::<u64>()) {
        None => 0,
        Some(Ok(after)) => after,
        Some(Err(_)) => return super::rest::invalid("after_seq: must be a whole number"),
    };
    // Subscribed before the lookup, so a run that ends in between is not missed.
    let events = rest.baponi.app.engine.subscribe();
    let tenant = tenant_of(caller);
    let (run_id, record, output) = match lookup(&rest.baponi, &tenant, &trace_id) {
        Ok(found) => found,
        Err(response) => return *response,
    };
    let (mut out, body) = Ndjson::channel(after);
    if record.outcome.is_some() {
        tokio::spawn(async move {
            // As the live stream went: `running`, the output, the result.
            out.send(json!({ "type": "status", "trace_id": trace_id, "status": "running" })).await;
            for (stream, text) in
                [("stdout", output.as_ref().map(|o| &o.stdout)), ("stderr", output.as_ref().map(|o| &o.stderr))]
            {
                if let Some(text) = text.filter(|t| !t.is_empty()) {
                    out.send(json!({ "type": "output", "stream": stream, "data": text })).await;
                }
            }
            let truncated = output.as_ref().is_some_and(|o| o.stdout_truncated || o.stderr_truncated);
            let result = result_of(&record, output.as_ref());
            out.send(json!({ "type": "result", "trace_id": trace_id, "status": status(&record), "result": result, "output_truncated": truncated })).await;
        });
    } else {
        let state = rest.baponi.clone();
        tokio::spawn(async move {
            out.send(json!({ "type": "status", "trace_id": trace_id, "status": status(&record) })).await;
            let ended = follow(&mut out, events, &run_id).await;
            if ended && let Ok((_, record, output)) = lookup(&state, &tenant, &trace_id) {
                let truncated = output.as_ref().is_some_and(|o| o.stdout_truncated || o.stderr_truncated);
                let result = result_of(&record, output.as_ref());
                out.send(json!({ "type": "result", "trace_id": trace_id, "status": status(&record), "result": result, "output_truncated": truncated })).await;
            }
        });
    }
    body
}
