//! The server's metrics and the Prometheus recorder. The engine counts runs and the queue
//! ([`sandlot_core::run_metrics`]); the faces count what only they see, where it happens: MCP sessions open (the
//! handler of a session holds a [`GaugeGuard`]), event streams open (`surfaces/sandlot/events.rs`), failed authentications
//! (`kit/auth.rs`). [`install_prometheus`] installs the recorder `sandlot serve` renders at `/metrics` on its
//! metrics listener (`kit/ops.rs`); without it every update is a no-op.

use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use sandlot_core::run_metrics;

/// Gauge, label `transport` (`streamable_http`, `legacy_sse`): MCP sessions open now.
pub const SESSIONS_OPEN: &str = "sandlot_mcp_sessions_open";
/// Gauge: `/mcp/events` streams open now.
pub const EVENT_STREAMS_OPEN: &str = "sandlot_event_streams_open";
/// Counter, label `reason` (`missing`, `malformed`, `rejected`, `rate_limited`): requests refused by the bearer
/// check. `missing`: no `Authorization` header; `malformed`: not `Bearer <credential>`; `rejected`: a wrong token or
/// an invalid JWT; `rate_limited`: refused with 429 before the credential was looked at.
pub const AUTH_FAILURES: &str = "sandlot_auth_failures_total";
/// Gauge, labels `version` and `backend`, always 1.
pub const BUILD_INFO: &str = "sandlot_build_info";

/// The `transport` label values of [`SESSIONS_OPEN`].
pub const TRANSPORTS: [&str; 2] = ["streamable_http", "legacy_sse"];
/// The `reason` label values of [`AUTH_FAILURES`].
pub const AUTH_FAILURE_REASONS: [&str; 4] = ["missing", "malformed", "rejected", "rate_limited"];

/// How often the recorder's histograms are drained between scrapes (so samples do not pile up in memory).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder for the whole process (true histograms with the buckets of
/// [`run_metrics`]), describes every series and gives each its zero, and starts the recorder's upkeep on the
/// current runtime. Call once, before the engine takes runs.
pub fn install_prometheus(backend: &'static str) -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(run_metrics::RUN_DURATION.into()), run_metrics::RUN_DURATION_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(run_metrics::QUEUE_WAIT.into()), run_metrics::QUEUE_WAIT_BUCKETS)?
        .install_recorder()?;
    run_metrics::describe(backend);
    describe(backend);
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            ticks.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// Describes the server's series and gives each known label set its zero.
fn describe(backend: &'static str) {
    use metrics::{Unit, describe_counter, describe_gauge};
    describe_gauge!(SESSIONS_OPEN, Unit::Count, "MCP sessions open now, by transport.");
    describe_gauge!(EVENT_STREAMS_OPEN, Unit::Count, "/mcp/events streams open now.");
    describe_counter!(AUTH_FAILURES, Unit::Count, "Requests refused by the bearer check, by reason.");
    describe_gauge!(BUILD_INFO, "The running sandlot: version and backend (always 1).");
    for transport in TRANSPORTS {
        metrics::gauge!(SESSIONS_OPEN, "transport" => transport).set(0.0);
    }
    metrics::gauge!(EVENT_STREAMS_OPEN).set(0.0);
    for reason in AUTH_FAILURE_REASONS {
        metrics::counter!(AUTH_FAILURES, "reason" => reason).increment(0);
    }
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "backend" => backend).set(1.0);
}

/// One more of a gauge while it lives: incremented when made, decremented when dropped (a session's handler, an
/// event stream), so the gauge cannot drift whichever way the thing ends.
pub struct GaugeGuard(metrics::Gauge);

impl GaugeGuard {
    /// Counts one more in `gauge`.
    pub fn new(gauge: metrics::Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// A refused authentication, by reason (one of [`AUTH_FAILURE_REASONS`]).
pub fn auth_failed(reason: &'static str) {
    metrics::counter!(AUTH_FAILURES, "reason" => reason).increment(1);
}

/// A guard counting one open session of `transport` (one of [`TRANSPORTS`]).
pub fn session_opened(transport: &'static str) -> GaugeGuard {
    GaugeGuard::new(metrics::gauge!(SESSIONS_OPEN, "transport" => transport))
}

/// A guard counting one open `/mcp/events` stream.
pub fn event_stream_opened() -> GaugeGuard {
    GaugeGuard::new(metrics::gauge!(EVENT_STREAMS_OPEN))
}
