//! The proxy's counters (`sandlot_egress_connections_total{outcome}`, `sandlot_egress_bytes_total{direction}`),
//! read through a debugging recorder installed for this test's process.

use crate::common;

use common::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn connections_and_bytes_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(&["web.test:1-65535", "127.0.0.0/8:1-65535"])).await;

    let mut stream = harness.to_proxy().await;
    assert!(connect(&mut stream, &format!("web.test:{}", internet.http.port())).await.starts_with("HTTP/1.1 200"));
    let request = "GET /metered HTTP/1.1\r\nHost: web.test\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let response = read_all(&mut stream).await;
    let mut refused = harness.to_proxy().await;
    assert!(connect(&mut refused, "other.test:443").await.starts_with("HTTP/1.1 403"));
    assert_eq!(harness.records(2).await.len(), 2);

    // One snapshot: taking one resets the counters.
    let snapshot = snapshotter.snapshot().into_vec();
    let counter = |name: &str, label: (&str, &str)| {
        snapshot.iter().find_map(|(key, _, _, value)| {
            let key = key.key();
            let labelled = key.labels().any(|found| (found.key(), found.value()) == label);
            match value {
                DebugValue::Counter(count) if key.name() == name && labelled => Some(*count),
                _ => None,
            }
        })
    };
    assert_eq!(counter("sandlot_egress_connections_total", ("outcome", "allowed")), Some(1));
    assert_eq!(counter("sandlot_egress_connections_total", ("outcome", "refused")), Some(1));
    assert_eq!(counter("sandlot_egress_bytes_total", ("direction", "sent")), Some(request.len() as u64));
    assert_eq!(counter("sandlot_egress_bytes_total", ("direction", "received")), Some(response.len() as u64));
}
