//! A sandbox's caps: connections open at once (more are refused, not queued) and bytes per second each way,
//! shared by all its connections.

use crate::common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

const OPEN: &[&str] = &["web.test:1-65535", "127.0.0.0/8:1-65535"];

#[tokio::test]
async fn connections_over_the_cap_are_refused_until_one_ends() {
    let internet = Internet::start().await;
    let mut setup = Setup::allow(OPEN);
    setup.max_connections = 2;
    let harness = Harness::start(&internet, setup).await;
    let target = format!("web.test:{}", internet.http.port());

    // Two tunnels held open (the host waits for a request on each).
    let mut first = harness.to_proxy().await;
    assert!(connect(&mut first, &target).await.starts_with("HTTP/1.1 200"));
    let mut second = harness.to_proxy().await;
    assert!(connect(&mut second, &target).await.starts_with("HTTP/1.1 200"));

    let mut third = harness.to_proxy().await;
    let head = connect(&mut third, &target).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(read_all(&mut third).await.contains("as many connections open as it may"));
    let mut caught = harness.caught("web.test", internet.http.port()).await;
    assert_eq!(get(&mut caught, "GET / HTTP/1.1", "web.test").await, "", "a caught one is closed");

    // One tunnel ends; a new connection gets through (its permit is released when the proxy's task ends: poll,
    // for up to 10 s on a busy machine, where an idle one takes milliseconds).
    let response = get(&mut first, "GET /done HTTP/1.1", "web.test").await;
    assert!(response.ends_with("hello from /done"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = harness.to_proxy().await;
        if connect(&mut again, &target).await.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the cap never freed a place");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(second);
}

/// Downloads `size` bytes from the test server through a CONNECT tunnel.
async fn download(harness: &Harness, internet: &Internet, size: usize) -> usize {
    let mut stream = harness.to_proxy().await;
    assert!(connect(&mut stream, &format!("web.test:{}", internet.http.port())).await.starts_with("HTTP/1.1 200"));
    stream.write_all(format!("GET /big/{size} HTTP/1.1\r\nHost: web.test\r\n\r\n").as_bytes()).await.unwrap();
    read_all(&mut stream).await.len()
}

#[tokio::test]
async fn bandwidth_is_capped_for_all_connections_together() {
    const RATE: u64 = 256 * 1024;
    let internet = Internet::start().await;
    let mut setup = Setup::allow(OPEN);
    setup.bytes_per_second = RATE;
    let harness = Harness::start(&internet, setup).await;

    // 768 KiB at 256 KiB/s: about 2.9 s (the bucket starts with a tenth of a second's bytes). The bound is a
    // lower one, which a busy machine cannot break; without the cap it takes milliseconds.
    let started = Instant::now();
    let received = download(&harness, &internet, 768 * 1024).await;
    let elapsed = started.elapsed();
    assert!(received > 768 * 1024, "{received}");
    assert!(elapsed >= Duration::from_secs(2), "768 KiB in {elapsed:?} at 256 KiB/s");
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");

    // Two at once share the cap: 2 × 384 KiB take as long as 768 KiB.
    let started = Instant::now();
    let (a, b) = tokio::join!(download(&harness, &internet, 384 * 1024), download(&harness, &internet, 384 * 1024));
    let elapsed = started.elapsed();
    assert!(a > 384 * 1024 && b > 384 * 1024);
    assert!(elapsed >= Duration::from_secs(2), "2 × 384 KiB in {elapsed:?} at 256 KiB/s");

    // Without a cap, the same download is not held back (a generous bound: seconds, where it takes milliseconds).
    let free = Harness::start(&internet, Setup::allow(OPEN)).await;
    let started = Instant::now();
    download(&free, &internet, 768 * 1024).await;
    assert!(started.elapsed() < Duration::from_secs(2), "{:?} without a cap", started.elapsed());
}
