//! What the metrics cost on the run path, measured: the updates one run makes (`sandlot_runs_total`, two
//! histograms, the in-flight gauge up and down), in a loop, with the Prometheus recorder installed and without any
//! recorder. Ignored by default (it measures, it asserts only a generous bound); run it with
//! `cargo test -p sandlot-server --test metrics_cost -- --ignored --nocapture`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

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

#[tokio::test]
#[ignore = "a measurement; run it by hand"]
async fn the_updates_of_one_run_cost_well_under_a_microsecond_each() {
    const RUNS: u32 = 200_000;
    let without = per_run(RUNS);
    let handle = sandlot_server::telemetry::install_prometheus("native").unwrap();
    per_run(1000); // registers the series
    let with = per_run(RUNS);
    let started = Instant::now();
    let text = handle.render();
    let render = started.elapsed();
    println!("per run: {without:?} without a recorder, {with:?} with the Prometheus recorder");
    println!("render after {RUNS} runs: {render:?} ({} bytes)", text.len());
    assert!(with < Duration::from_micros(50), "{with:?} per run");
}
