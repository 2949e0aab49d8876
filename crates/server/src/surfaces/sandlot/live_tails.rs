//! The output of runs in flight, readable while they run as `sandlot://runs/{runId}/live`: what the MCP Apps run
//! view polls through its host (which can proxy `resources/read` but forwards no progress notification), since
//! `sandlot://runs/{runId}/output` exists only once a run has ended.
//!
//! - One task per handler family follows the engine's run events, started before the first call of the family runs
//!   (so it sees that call's output from its first byte); it keeps, per run that started and has not ended, the
//!   last [`TAIL_BYTES`] of its output in order (older chunks dropped and counted), and forgets the run when it ends.
//!   Runs in flight are bounded by the engine's concurrency, so the map is too; after a lag (events missed) it keeps
//!   only the runs the engine still has in flight.
//! - A tenant reads only the runs it may read in the history (another's answers as an unknown run).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::ErrorData as McpError;
use rmcp::model::{ReadResourceResult, ResourceContents, ResourceTemplate};
use sandlot_core::{RunEvent, Stream, Tenant};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::AppState;
use crate::kit::rpc_errors as errors;

/// The most output bytes kept per run in flight (its newest).
pub const TAIL_BYTES: usize = 64 * 1024;

const PREFIX: &str = "sandlot://runs/";
const SUFFIX: &str = "/live";

/// One run's newest output.
#[derive(Default)]
struct Tail {
    /// Chunks in order, consecutive ones of a stream joined.
    chunks: VecDeque<(Stream, String)>,
    bytes: usize,
    dropped: u64,
}

impl Tail {
    fn push(&mut self, stream: Stream, data: &str) {
        match self.chunks.back_mut() {
            Some((last, text)) if *last == stream => text.push_str(data),
            _ => self.chunks.push_back((stream, data.to_owned())),
        }
        self.bytes += data.len();
        while self.bytes > TAIL_BYTES {
            let Some((_, front)) = self.chunks.front_mut() else { break };
            let excess = self.bytes - TAIL_BYTES;
            if front.len() <= excess {
                self.bytes -= front.len();
                self.dropped += front.len() as u64;
                self.chunks.pop_front();
            } else {
                let mut cut = excess;
                while !front.is_char_boundary(cut) {
                    cut += 1;
                }
                front.drain(..cut);
                self.bytes -= cut;
                self.dropped += cut as u64;
            }
        }
    }
}

/// The tails of the runs in flight, shared by a handler and its sessions.
#[derive(Default)]
pub struct LiveTails {
    runs: Arc<Mutex<HashMap<String, Tail>>>,
    started: OnceLock<()>,
}

impl LiveTails {
    /// Starts following the engine's run events, once (needs a Tokio runtime).
    pub fn start(&self, state: &AppState) {
        self.started.get_or_init(|| {
            let mut events = state.engine.subscribe();
            let (runs, engine) = (self.runs.clone(), state.engine.clone());
            tokio::spawn(async move {
                loop {
                    let event = match events.recv().await {
                        Ok(event) => event,
                        Err(RecvError::Lagged(_)) => {
                            let in_flight: Vec<String> = engine.in_flight().into_iter().map(|(id, ..)| id).collect();
                            lock(&runs).retain(|id, _| in_flight.contains(id));
                            continue;
                        }
                        Err(RecvError::Closed) => break,
                    };
                    let mut runs = lock(&runs);
                    match event {
                        RunEvent::Started { run_id, .. } => {
                            runs.insert(run_id, Tail::default());
                        }
                        RunEvent::Output { run_id, stream, data, .. } => {
                            if let Some(tail) = runs.get_mut(&run_id) {
                                tail.push(stream, &data);
                            }
                        }
                        RunEvent::Finished { run_id, .. } | RunEvent::Failed { run_id, .. } => {
                            runs.remove(&run_id);
                        }
                    }
                }
            });
        });
    }

    /// Reads `sandlot://runs/{runId}/live`, or `None` when `uri` is not such a URI.
    pub fn read(&self, state: &AppState, tenant: &Tenant, uri: &str) -> Option<Result<ReadResourceResult, McpError>> {
        let run_id = uri.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
        Some(self.read_run(state, tenant, uri, run_id))
    }

    fn read_run(
        &self,
        state: &AppState,
        tenant: &Tenant,
        uri: &str,
        run_id: &str,
    ) -> Result<ReadResourceResult, McpError> {
        let not_found = |what: String| McpError::resource_not_found(what, Some(json!({ "uri": uri })));
        let history =
            state.engine.history().ok_or_else(|| McpError::internal_error("this server keeps no run history", None))?;
        let record = history
            .get_for(tenant, run_id)
            .map_err(|e| errors::from_engine(&e))?
            .ok_or_else(|| not_found(format!("no run {run_id:?} in the history")))?;
        let body = match lock(&self.runs).get(run_id) {
            Some(tail) => {
                let chunks: Vec<_> =
                    tail.chunks.iter().map(|(stream, text)| json!({ "stream": stream, "text": text })).collect();
                json!({ "runId": run_id, "state": "running", "chunks": chunks, "droppedBytes": tail.dropped })
            }
            // Queued, or just started (its first event not seen yet): nothing printed so far.
            None if matches!(record.state.as_str(), "queued" | "running") => {
                json!({ "runId": run_id, "state": record.state.as_str(), "chunks": [], "droppedBytes": 0 })
            }
            None => {
                return Err(not_found(format!(
                    "run {run_id:?} is not in flight; what it printed is sandlot://runs/{run_id}/output"
                )));
            }
        };
        let mut body = body;
        if state.scrub_secrets
            && let Some(chunks) = body["chunks"].as_array_mut()
        {
            for chunk in chunks {
                let text = chunk["text"].as_str().unwrap_or_default();
                chunk["text"] = sandlot_core::scrub_secrets(text).into_owned().into();
            }
        }
        let text = serde_json::to_string(&body).unwrap_or_default();
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri).with_mime_type("application/json")]))
    }
}

/// The template.
pub fn template() -> ResourceTemplate {
    ResourceTemplate::new("sandlot://runs/{runId}/live", "run-live-output")
        .with_title("A run's output while it runs")
        .with_description(
            "{runId, state, chunks: [{stream, text}], droppedBytes}: the newest 64 KiB of what a queued or running \
             run printed, in order; once it ended, read sandlot://runs/{runId}/output",
        )
        .with_mime_type("application/json")
}

fn lock(runs: &Mutex<HashMap<String, Tail>>) -> std::sync::MutexGuard<'_, HashMap<String, Tail>> {
    runs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeps_the_newest_bytes_in_order_and_counts_the_rest() {
        let mut tail = Tail::default();
        tail.push(Stream::Stdout, "a\n");
        tail.push(Stream::Stdout, "b\n");
        tail.push(Stream::Stderr, "oops\n");
        let chunks: Vec<_> = tail.chunks.iter().map(|(s, t)| (*s, t.as_str())).collect();
        assert_eq!(chunks, [(Stream::Stdout, "a\nb\n"), (Stream::Stderr, "oops\n")]);
        tail.push(Stream::Stdout, &"é".repeat(TAIL_BYTES / 2 + 1));
        assert!(tail.bytes <= TAIL_BYTES, "{}", tail.bytes);
        assert_eq!(tail.dropped as usize + tail.bytes, 4 + 5 + TAIL_BYTES + 2);
        assert_eq!(tail.chunks.len(), 1, "the older chunks are gone whole");
        assert!(tail.chunks[0].1.chars().all(|c| c == 'é'), "cut at a character's boundary");
    }
}
