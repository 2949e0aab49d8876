//! Baponi's `POST /v1/sandbox/execute` (`docs/profiles.md#baponi-rest-and-files-api`), on the execution core both faces
//! share ([`super::execute`]):
//! - JSON: 200 `{success, stdout, stderr, exit_code, error}` once the run ended; `error` is null for an exit (any
//!   code), else `timeout`, `memory_limit_exceeded`, `disk_quota_exceeded` or `cancelled`;
//! - `Accept: application/x-ndjson`: the run's events as they happen, one JSON object a line with increasing `seq`
//!   from 1: `status` (`running`, with the `trace_id`), `output` (`stdout`/`stderr` chunks, as the sandbox printed
//!   them), `keepalive` every 15 s of silence, and the `result` last. The run goes on if the client goes away
//!   (reconnect with `/v1/executions/{trace_id}/output`).
//!
//! 400 `validation_error` naming the field (another tenant's thread is an invalid `thread_id`, checked before the
//! execution is registered or the thread marked busy), 409 `conflict` when the thread has an execution running, 503
//! `unavailable` (with `Retry-After`) when sandlot's queue is full. Webhook mode (`Prefer: respond-async`) is not
//! served: 400.

use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandlot_core::{RunEvent, RunReport, Stream, Termination};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::ndjson::{KEEPALIVE, Ndjson};
use super::rest::{RestState, invalid, refuse, tenant_of};
use super::{ExecuteError, trace_id};
use crate::kit::Caller;
use crate::kit::live_chunks::live_chunks;

/// Baponi's status of a finished run.
fn status(report: &RunReport) -> &'static str {
    match report.outcome.termination {
        Termination::Exited { code: 0 } => "success",
        Termination::TimedOut => "timeout",
        Termination::OutOfMemory => "oom",
        Termination::Cancelled => "cancelled",
        _ => "failed",
    }
}

/// The SandboxResult of a finished run.
fn result(report: &RunReport) -> Value {
    let outcome = &report.outcome;
    let error = match outcome.termination {
        Termination::Exited { .. } | Termination::Signaled { .. } => None,
        Termination::TimedOut => Some("timeout"),
        Termination::OutOfMemory => Some("memory_limit_exceeded"),
        Termination::DiskQuotaExceeded => Some("disk_quota_exceeded"),
        Termination::Cancelled => Some("cancelled"),
    };
    json!({
        "success": outcome.success(),
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "exit_code": outcome.exit_code(),
        "error": error,
    })
}

fn result_event(report: &RunReport) -> Value {
    json!({
        "type": "result",
        "trace_id": trace_id(&report.run_id),
        "status": status(report),
        "result": result(report),
        "output_truncated": report.outcome.truncated(),
    })
}

fn internal() -> Response {
    refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "the execution failed inside sandlot")
}

/// An execution that did not run, as Baponi's HTTP error.
fn refusal(error: ExecuteError) -> Response {
    match error {
        ExecuteError::Invalid { .. } => invalid(&error.to_string()),
        ExecuteError::ThreadBusy { .. } => refuse(StatusCode::CONFLICT, "conflict", &error.to_string()),
        ExecuteError::Engine(sandlot_core::Error::Busy { retry_after, .. }) => {
            let mut response = refuse(StatusCode::SERVICE_UNAVAILABLE, "unavailable", &error.to_string());
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after.as_secs().max(1)));
            response
        }
        ExecuteError::Engine(sandlot_core::Error::NoRunner { .. }) => invalid(&format!("language: {error}")),
        ExecuteError::Engine(error) => {
            tracing::error!(%error, "baponi execution failed");
            internal()
        }
    }
}

/// `POST /v1/sandbox/execute`.
pub async fn execute(
    State(rest): State<RestState>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    if header(header::HeaderName::from_static("prefer")).contains("respond-async") {
        return invalid("Prefer: respond-async (webhook mode) is not supported by this server");
    }
    let arguments: Value = match serde_json::from_slice(&body) {
        Ok(arguments) => arguments,
        Err(error) => return invalid(&format!("invalid body: {error}")),
    };
    let args = match super::parse(arguments) {
        Ok(args) => args,
        Err(error) => return refusal(error),
    };
    let tenant = tenant_of(caller);
    if let Err(error) = super::execute::admit(&rest.baponi, &tenant, &args) {
        return refusal(error);
    }
    let conversation = args.thread_id.clone().unwrap_or_else(super::execute::ephemeral_conversation);
    let cancel = CancellationToken::new();
    if !header(header::ACCEPT).contains("application/x-ndjson") {
        let _registered = rest.register(&conversation, cancel.clone());
        return match super::execute::execute_as(&rest.baponi, args, &tenant, &(), cancel, conversation).await {
            Ok(report) => axum::Json(result(&report)).into_response(),
            Err(error) => refusal(error),
        };
    }
    // Streaming: the response starts once the run has (so a busy thread or a bad request is still an HTTP error).
    let mut events = rest.baponi.app.engine.subscribe();
    let (chunks_in, mut chunks) = live_chunks(); // bounded however slowly the client reads
    let running = rest.clone();
    let ephemeral = conversation.clone();
    let mut task = tokio::spawn(async move {
        let _registered = running.register(&ephemeral, cancel.clone());
        super::execute::execute_as(&running.baponi, args, &tenant, &chunks_in, cancel, ephemeral).await
    });
    let run_id = loop {
        tokio::select! {
            // Events first: a run that started and already ended has its `Started` waiting here.
            biased;
            event = events.recv() => match event {
                Ok(RunEvent::Started { run_id, conversation_id, .. }) if conversation_id == conversation => break run_id,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return internal(),
            },
            joined = &mut task => return match joined {
                // Ended without starting (cancelled while it waited for its turn): its result alone.
                Ok(Ok(report)) => {
                    let (mut out, body) = Ndjson::channel(0);
                    tokio::spawn(async move { out.send(result_event(&report)).await });
                    body
                }
                Ok(Err(error)) => refusal(error),
                Err(_) => internal(),
            },
        }
    };
    drop(events);
    let trace = trace_id(&run_id);
    let (mut out, body) = Ndjson::channel(0);
    tokio::spawn(async move {
        out.send(json!({ "type": "status", "trace_id": trace, "status": "running" })).await;
        let mut keepalive = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
        loop {
            tokio::select! {
                chunk = chunks.recv() => match chunk {
                    Some(chunk) => {
                        let stream = match chunk.stream {
                            Stream::Stdout => "stdout",
                            Stream::Stderr => "stderr",
                        };
                        let data = String::from_utf8_lossy(&chunk.data).into_owned();
                        out.send(json!({ "type": "output", "stream": stream, "data": data })).await;
                        keepalive.reset();
                    }
                    None => break,
                },
                _ = keepalive.tick() => out.send(json!({ "type": "keepalive" })).await,
            }
        }
        match task.await {
            Ok(Ok(report)) => out.send(result_event(&report)).await,
            Ok(Err(error)) => {
                tracing::error!(%error, "baponi streamed execution failed");
                let result =
                    json!({ "success": false, "stdout": "", "stderr": "", "exit_code": -1, "error": "internal_error" });
                out.send(json!({ "type": "result", "trace_id": trace, "status": "failed", "result": result })).await;
            }
            Err(error) => tracing::error!(%error, "baponi streamed execution task failed"),
        }
    });
    body
}
