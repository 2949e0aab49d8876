//! What the metrics cost on the run path, measured: the updates one run makes (`sandlot_runs_total`, two
//! histograms, the in-flight gauge up and down), in a loop, with the Prometheus recorder installed and without any
//! recorder. A benchmark program, not a test: `cargo run --release -p sandlot-server --example metrics_cost`.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use sandlot_core::run_metrics;

/// The updates of one run that started, waited and ended (see `sandlot_core::run_metrics` and the engine).
fn one_run() {
    metrics::histogram!(run_metrics::QUEUE_WAIT).record(0.000_05);
    metrics::gauge!(run_metrics::RUNS_IN_FLIGHT).increment(1.0);
    metrics::counter!(run_metrics::RUNS, "outcome" => "ok", "language" => "python").increment(1);
    metrics::histogram!(run_metrics::RUN_DURATION, "language" => "python").record(0.012);
    metrics::gauge!(run_metrics::RUNS_IN_FLIGHT).decrement(1.0);
}

fn per_run(runs: u32) -> Duration {
    let started = Instant::now();
    for _ in 0..runs {
        one_run();
    }
    started.elapsed() / runs
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    const RUNS: u32 = 200_000;
    let without = per_run(RUNS);
    let handle = sandlot_server::kit::telemetry::install_prometheus("native").unwrap();
    per_run(1000); // registers the series
    let with = per_run(RUNS);
    let started = Instant::now();
    let text = handle.render();
    let render = started.elapsed();
    println!("per run: {without:?} without a recorder, {with:?} with the Prometheus recorder");
    println!("render after {RUNS} runs: {render:?} ({} bytes)", text.len());
}
