//! The audit trail lists exactly the connections a sandbox made, allowed or refused, with their byte counts and
//! the run that was current when each was opened.

use crate::common;

use common::*;
use hickory_proto::rr::RecordType;
use sandlot_egress::{ConnectionRecord, Route};
use std::net::IpAddr;
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn every_connection_once_with_its_bytes_and_run() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(&["web.test:1-65535", "127.0.0.0/8:1-65535"])).await;
    let port = internet.http.port();

    // A tunnel carrying one request, byte counts known exactly.
    let mut stream = harness.to_proxy().await;
    assert!(connect(&mut stream, &format!("web.test:{port}")).await.starts_with("HTTP/1.1 200"));
    let request = "GET /counted HTTP/1.1\r\nHost: web.test\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let response = read_all(&mut stream).await;
    drop(stream);
    // Each record is taken before the next connection: the order is then the order they were made in, though a
    // record is written when its connection ends on the proxy's side, a moment after the client saw it end.
    let mut records = harness.records(1).await;

    harness.leashed.owner.set_run_id(Some("run-2".to_owned()));
    // A refused CONNECT, a refused name, a caught connection.
    let mut stream = harness.to_proxy().await;
    assert!(connect(&mut stream, "other.test:443").await.starts_with("HTTP/1.1 403"));
    drop(stream);
    records.extend(harness.records(1).await);
    assert!(harness.responder.answer(IpAddr::V4(SANDBOX), &question("leak.other.test", RecordType::A)).is_some());
    records.extend(harness.records(1).await);
    let mut stream = harness.caught("web.test", port).await;
    let caught = get(&mut stream, "GET /caught HTTP/1.1", "web.test").await;
    drop(stream);
    // An allowed name answered by the name server is no connection: not recorded.
    harness.responder.answer(IpAddr::V4(SANDBOX), &question("web.test", RecordType::A)).unwrap();

    records.extend(harness.records(1).await);
    // Nothing more comes.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    records.extend(harness.leashed.audit.take().0);
    let caught_request = "GET /caught HTTP/1.1\r\nHost: web.test\r\nUser-Agent: test\r\n\r\n";
    let expected = [
        ("web.test", port, Route::Connect, true, request.len(), response.len(), "run-1"),
        ("other.test", 443, Route::Connect, false, 0, 0, "run-2"),
        ("leak.other.test", 53, Route::Dns, false, 0, 0, "run-2"),
        ("web.test", port, Route::Transparent, true, caught_request.len(), caught.len(), "run-2"),
    ];
    let actual: Vec<_> = records
        .iter()
        .map(|record: &ConnectionRecord| {
            (
                record.host.as_str(),
                record.port,
                record.route,
                record.allowed,
                record.bytes_sent as usize,
                record.bytes_received as usize,
                record.run_id.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(actual, expected);
    assert!(records.iter().all(|record| record.started_ms > 1_700_000_000_000), "{records:?}");
    assert_eq!(harness.leashed.audit.take(), (Vec::new(), 0), "taken once");
}
