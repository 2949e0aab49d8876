//! The engine's metrics, recorded through the `metrics` facade where each thing happens: runs and their durations
//! in the ledger (`RunEntry`), the queue in `admission`, backend errors in `Engine::run`. The names follow
//! Prometheus' conventions (a `sandlot_` prefix, the unit in the name, `_total` on counters).
//!
//! The engine only records; a face installs a recorder (`sandlot serve` with a metrics address installs the
//! Prometheus exporter). Without one (`sandlot run`, `stdio`, tests) every call is a no-op: one load of the global
//! recorder. With one, a counter or gauge update is a lookup in a sharded map and an atomic add, a histogram sample
//! a push onto a lock-free bucket: well under a microsecond, against the milliseconds a run costs (docs/operations.md
//! gives the measurement).

use crate::{Language, Outcome};

/// Counter, labels `outcome` (the history's outcome: `ok`, `error`, `timeout`, `oom`, `cancelled`, `busy`,
/// `internal`) and `language`: runs that ended, counted once each when their history row is closed.
pub const RUNS: &str = "sandlot_runs_total";
/// Histogram, label `language`, seconds: from a run's start (it got its turn) to its end; runs that never
/// started (busy, cancelled while queued) have none.
pub const RUN_DURATION: &str = "sandlot_run_duration_seconds";
/// Gauge: runs executing now.
pub const RUNS_IN_FLIGHT: &str = "sandlot_runs_in_flight";
/// Gauge: runs waiting for their turn now.
pub const QUEUE_DEPTH: &str = "sandlot_queue_depth";
/// Histogram, seconds: how long each run that got its turn waited for it (0 for most on an idle server).
pub const QUEUE_WAIT: &str = "sandlot_queue_wait_seconds";
/// Counter, label `reason` (`queue_full`, `wait_limit`, `shutting_down`): runs refused as busy.
pub const BUSY_REFUSALS: &str = "sandlot_busy_refusals_total";
/// Counter, label `backend`: runs the backend could not run (a fault of sandlot or its host, not of the code).
pub const BACKEND_ERRORS: &str = "sandlot_backend_errors_total";

/// Gauge: live sandboxes now (`session` calls' sandboxes, kept between calls).
pub const LIVE_SANDBOXES: &str = "sandlot_live_sandboxes";
/// Gauge, bytes: memory the live sandboxes use together (their cgroups), refreshed every few seconds.
pub const LIVE_SANDBOX_MEMORY: &str = "sandlot_live_sandbox_memory_bytes";

/// The `reason` label values of [`BUSY_REFUSALS`].
pub const BUSY_REASONS: [&str; 3] = ["queue_full", "wait_limit", "shutting_down"];

/// Bounds of the buckets of [`RUN_DURATION`], in seconds: from a fast jail run (a few ms) to the longest timeouts.
pub const RUN_DURATION_BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];
/// Bounds of the buckets of [`QUEUE_WAIT`], in seconds: up to the default wait limit (60 s).
pub const QUEUE_WAIT_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The outcomes a run can end with in this process (`interrupted` is only written by a later server's recovery).
const OUTCOMES: [Outcome; 7] =
    [Outcome::Ok, Outcome::Error, Outcome::Timeout, Outcome::Oom, Outcome::Cancelled, Outcome::Busy, Outcome::Internal];

/// Describes the engine's series to the installed recorder and gives every known label set its zero, so a scrape
/// shows each series from the start (`rate()` and alerts need the zero). Call once, after installing a recorder.
pub fn describe(backend: &str) {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(RUNS, Unit::Count, "Runs that ended, by outcome and language.");
    describe_histogram!(RUN_DURATION, Unit::Seconds, "Time from a run's start to its end, by language.");
    describe_gauge!(RUNS_IN_FLIGHT, Unit::Count, "Runs executing now.");
    describe_gauge!(QUEUE_DEPTH, Unit::Count, "Runs waiting for their turn now.");
    describe_gauge!(LIVE_SANDBOXES, Unit::Count, "Live sandboxes now (kept between a conversation's session calls).");
    describe_gauge!(LIVE_SANDBOX_MEMORY, Unit::Bytes, "Memory the live sandboxes use together.");
    describe_histogram!(QUEUE_WAIT, Unit::Seconds, "Time a run waited in the queue before its start.");
    describe_counter!(BUSY_REFUSALS, Unit::Count, "Runs refused as busy (queue full, wait limit passed), by reason.");
    describe_counter!(BACKEND_ERRORS, Unit::Count, "Runs the backend failed to run (not the code's failures).");
    for language in Language::ALL {
        for outcome in OUTCOMES {
            metrics::counter!(RUNS, "outcome" => outcome.as_str(), "language" => language.as_str()).increment(0);
        }
    }
    for reason in BUSY_REASONS {
        metrics::counter!(BUSY_REFUSALS, "reason" => reason).increment(0);
    }
    metrics::counter!(BACKEND_ERRORS, "backend" => backend.to_owned()).increment(0);
    metrics::gauge!(RUNS_IN_FLIGHT).set(0.0);
    metrics::gauge!(QUEUE_DEPTH).set(0.0);
    metrics::gauge!(LIVE_SANDBOXES).set(0.0);
    metrics::gauge!(LIVE_SANDBOX_MEMORY).set(0.0);
}

/// A run ended: counted by outcome and language, its duration recorded if it started.
pub(crate) fn run_ended(outcome: Outcome, language: Language, duration: Option<std::time::Duration>) {
    metrics::counter!(RUNS, "outcome" => outcome.as_str(), "language" => language.as_str()).increment(1);
    if let Some(duration) = duration {
        metrics::histogram!(RUN_DURATION, "language" => language.as_str()).record(duration.as_secs_f64());
        metrics::gauge!(RUNS_IN_FLIGHT).decrement(1.0);
    }
}

/// A run started executing.
pub(crate) fn run_started() {
    metrics::gauge!(RUNS_IN_FLIGHT).increment(1.0);
}
