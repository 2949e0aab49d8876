//! The proxy against a small internet on loopback (tests/common): CONNECT, absolute-URL HTTP and transparent
//! connections, allowed and refused, the SNI and `Host` rules, the interceptor hook, and what the audit trail says.

use crate::common;

use common::*;
use sandlot_egress::Route;
use sandlot_egress::intercept::{Carried, Intercept};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The rules of most tests: the test names on any port, and loopback opened explicitly (they all live there).
const OPEN: &[&str] = &["web.test:1-65535", "tls.test:1-65535", "secret.test:1-65535", "127.0.0.0/8:1-65535"];

#[tokio::test]
async fn connect_allowed_reaches_the_tls_host() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(OPEN)).await;
    let mut stream = harness.to_proxy().await;
    let head = connect(&mut stream, &format!("tls.test:{}", internet.tls.port())).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let name = rustls::pki_types::ServerName::try_from("tls.test").unwrap();
    let mut tls = tls_connector(&internet.tls_root).connect(name, stream).await.unwrap();
    tls.write_all(b"GET /over-tls HTTP/1.1\r\nHost: tls.test\r\n\r\n").await.unwrap();
    let response = read_all(&mut tls).await;
    assert!(response.ends_with("hello from /over-tls"), "{response}");

    let records = harness.records(1).await;
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!((record.host.as_str(), record.port, record.route), ("tls.test", internet.tls.port(), Route::Connect));
    assert!(record.allowed, "{record:?}");
    assert_eq!(record.reason, "allowed by tls.test:1-65535");
    assert_eq!(record.run_id.as_deref(), Some("run-1"));
    assert!(record.bytes_sent > 200 && record.bytes_received > 200, "a TLS handshake each way: {record:?}");
}

#[tokio::test]
async fn connect_denied_is_403_and_never_resolved() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(OPEN)).await;
    let mut stream = harness.to_proxy().await;
    let head = connect(&mut stream, "other.test:443").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let body = read_all(&mut stream).await;
    assert_eq!(body, "sandlot egress refused other.test:443: no allow rule names other.test:443\n");
    assert_eq!(internet.questions(), 0, "a refused name is not looked up on the host");
    let records = harness.records(1).await;
    assert_eq!(records.len(), 1);
    assert!(!records[0].allowed);
    assert_eq!((records[0].host.as_str(), records[0].bytes_sent), ("other.test", 0));
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_needs_an_address_rule() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(&["web.test:1-65535"])).await;
    let mut stream = harness.to_proxy().await;
    let head = connect(&mut stream, &format!("web.test:{}", internet.http.port())).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let body = read_all(&mut stream).await;
    assert!(body.contains("127.0.0.1 is loopback: only a CIDR allow rule opens it"), "{body}");
    assert!(internet.heads.lock().unwrap().is_empty(), "the host was never reached");
}

#[tokio::test]
async fn connect_to_an_address_needs_an_address_rule() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(&["web.test:1-65535"])).await;
    let mut stream = harness.to_proxy().await;
    let head = connect(&mut stream, &internet.http.to_string()).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let open = Harness::start(&internet, Setup::allow(&["127.0.0.1:1-65535"])).await;
    let mut stream = open.to_proxy().await;
    let head = connect(&mut stream, &internet.http.to_string()).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let response = get(&mut stream, "GET /by-address HTTP/1.1", "127.0.0.1").await;
    assert!(response.ends_with("hello from /by-address"), "{response}");
}

#[tokio::test]
async fn absolute_url_http_is_rewritten_and_denied_hosts_refused() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(OPEN)).await;
    let port = internet.http.port();
    let mut stream = harness.to_proxy().await;
    stream
        .write_all(
            format!(
                "GET http://web.test:{port}/page?q=1 HTTP/1.1\r\nHost: web.test:{port}\r\n\
                 Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let response = read_all(&mut stream).await;
    assert!(response.starts_with("HTTP/1.1 200") && response.ends_with("hello from /page?q=1"), "{response}");
    let heads = internet.heads.lock().unwrap().clone();
    assert_eq!(
        heads,
        vec![format!("GET /page?q=1 HTTP/1.1\r\nHost: web.test:{port}\r\nConnection: close\r\n\r\n")],
        "origin form, no proxy headers"
    );

    let mut stream = harness.to_proxy().await;
    let response = get(&mut stream, &format!("GET http://other.test:{port}/ HTTP/1.1"), "other.test").await;
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");
    assert!(response.ends_with(&format!("refused other.test:{port}: no allow rule names other.test:{port}\n")));

    let mut stream = harness.to_proxy().await;
    let response = get(&mut stream, "GET /not-absolute HTTP/1.1", "web.test").await;
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");

    let records = harness.records(3).await;
    let summary: Vec<_> = records.iter().map(|record| (record.host.as_str(), record.route, record.allowed)).collect();
    assert_eq!(
        summary,
        vec![
            ("web.test", Route::HttpProxy, true),
            ("other.test", Route::HttpProxy, false),
            ("proxy", Route::HttpProxy, false)
        ]
    );
    assert_eq!(records[0].bytes_received as usize, response_length("/page?q=1"));
}

/// The length of the test server's whole response for `path`.
fn response_length(path: &str) -> usize {
    let body = body_for(path).len();
    format!("HTTP/1.1 200 OK\r\nContent-Length: {body}\r\nConnection: close\r\n\r\n").len() + body
}

#[tokio::test]
async fn an_unknown_peer_gets_nothing() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(OPEN)).await;
    let mut stream = connect_from(STRANGER, harness.explicit).await;
    let _ = stream.write_all(b"CONNECT web.test:80 HTTP/1.1\r\n\r\n").await;
    assert_eq!(read_all(&mut stream).await, "", "closed unanswered");
    assert!(harness.records(0).await.is_empty());
}

#[tokio::test]
async fn transparent_http_by_host_and_tls_by_sni() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(OPEN)).await;

    let mut stream = harness.caught("web.test", internet.http.port()).await;
    let response = get(&mut stream, "GET /caught HTTP/1.1", "web.test").await;
    assert!(response.ends_with("hello from /caught"), "{response}");

    let stream = harness.caught("tls.test", internet.tls.port()).await;
    let name = rustls::pki_types::ServerName::try_from("tls.test").unwrap();
    let mut tls = tls_connector(&internet.tls_root).connect(name, stream).await.unwrap();
    tls.write_all(b"GET /caught-tls HTTP/1.1\r\nHost: tls.test\r\n\r\n").await.unwrap();
    assert!(read_all(&mut tls).await.ends_with("hello from /caught-tls"));

    let records = harness.records(2).await;
    let summary: Vec<_> = records.iter().map(|record| (record.host.as_str(), record.route, record.allowed)).collect();
    assert_eq!(summary, vec![("web.test", Route::Transparent, true), ("tls.test", Route::Transparent, true)]);
    assert_eq!(records[0].bytes_received as usize, response_length("/caught"));
}

#[tokio::test]
async fn transparent_names_must_match_the_synthetic_name() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(OPEN)).await;

    // Asked for web.test's address, then talks TLS to tls.test.
    let stream = harness.caught("web.test", internet.tls.port()).await;
    let name = rustls::pki_types::ServerName::try_from("tls.test").unwrap();
    assert!(tls_connector(&internet.tls_root).connect(name, stream).await.is_err(), "closed in the handshake");

    // Asked for web.test's address, then sends Host: other.test.
    let mut stream = harness.caught("web.test", internet.http.port()).await;
    let response = get(&mut stream, "GET / HTTP/1.1", "other.test").await;
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");
    assert!(response.contains("names other.test, not web.test"), "{response}");

    // A synthetic address the table does not hold.
    let stale = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 19, 0, 9)), internet.http.port());
    let mut stream = harness.caught_at(stale).await;
    assert_eq!(read_all(&mut stream).await, "");

    // A name the policy does not allow, even with a synthetic address.
    let mut stream = harness.caught("other.test", internet.http.port()).await;
    let response = get(&mut stream, "GET / HTTP/1.1", "other.test").await;
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");

    let records = harness.records(4).await;
    assert_eq!(records.len(), 4, "{records:?}");
    assert!(records.iter().all(|record| !record.allowed && record.route == Route::Transparent), "{records:?}");
    assert!(internet.heads.lock().unwrap().is_empty(), "no host was reached");
}

#[tokio::test]
async fn transparent_to_a_captured_address() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(&["127.0.0.1:1-65535"])).await;
    let mut stream = harness.caught_at(internet.http).await;
    let response = get(&mut stream, "GET /raw HTTP/1.1", "127.0.0.1").await;
    assert!(response.ends_with("hello from /raw"), "{response}");
    // Another port of the same address, not allowed.
    let other = SocketAddr::new(internet.http.ip(), 9);
    let harness = Harness::start(&internet, Setup::allow(&[&format!("127.0.0.1:{}", internet.http.port())])).await;
    let mut stream = harness.caught_at(other).await;
    let response = get(&mut stream, "GET / HTTP/1.1", "127.0.0.1").await;
    assert!(response.starts_with("HTTP/1.1 403"), "{response}");
}

/// What the fake interceptor was handed: host, port, upstream addresses, the first byte it read.
type Served = (String, u16, Vec<SocketAddr>, u8);

/// An interceptor that answers by itself and notes what it was handed.
#[derive(Default)]
struct Fake {
    served: Mutex<Vec<Served>>,
}

#[async_trait::async_trait]
impl Intercept for Fake {
    fn wants(&self, host: &str, _port: u16) -> bool {
        host == "secret.test"
    }

    async fn serve(
        &self,
        mut client: TcpStream,
        host: &str,
        port: u16,
        upstream: &[SocketAddr],
    ) -> std::io::Result<Carried> {
        let mut first = [0u8; 1];
        client.read_exact(&mut first).await?;
        self.served.lock().unwrap().push((host.to_owned(), port, upstream.to_vec(), first[0]));
        client.write_all(b"intercepted").await?;
        Ok(Carried { sent: 1, received: 11 })
    }
}

#[tokio::test]
async fn the_interceptor_gets_the_hosts_it_wants_with_the_hello_unread() {
    let internet = Internet::start().await;
    let fake = Arc::new(Fake::default());
    let mut setup = Setup::allow(OPEN);
    setup.intercept = Some(fake.clone());
    let harness = Harness::start(&internet, setup).await;
    let port = internet.tls.port();

    let mut stream = harness.to_proxy().await;
    assert!(connect(&mut stream, &format!("secret.test:{port}")).await.starts_with("HTTP/1.1 200"));
    stream.write_all(&[0x16, 3, 1]).await.unwrap();
    assert_eq!(read_all(&mut stream).await, "intercepted");

    let stream = harness.caught("secret.test", port).await;
    let name = rustls::pki_types::ServerName::try_from("secret.test").unwrap();
    assert!(tls_connector(&internet.tls_root).connect(name, stream).await.is_err());

    // Not for the interceptor: spliced to the host as usual.
    let mut stream = harness.to_proxy().await;
    assert!(connect(&mut stream, &format!("tls.test:{port}")).await.starts_with("HTTP/1.1 200"));
    let name = rustls::pki_types::ServerName::try_from("tls.test").unwrap();
    assert!(tls_connector(&internet.tls_root).connect(name, stream).await.is_ok());

    let served = fake.served.lock().unwrap().clone();
    let upstream = vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)];
    assert_eq!(
        served,
        vec![("secret.test".into(), port, upstream.clone(), 0x16), ("secret.test".into(), port, upstream, 0x16)]
    );
    let records = harness.records(3).await;
    assert_eq!((records[0].bytes_sent, records[0].bytes_received), (1, 11));
}
