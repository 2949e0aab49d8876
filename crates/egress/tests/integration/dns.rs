//! The sandboxes' name server: synthetic answers for allowed names, NXDOMAIN (recorded) for the rest, NOTIMP for
//! other types, nothing for an unknown peer, and never a question to any other server.

use crate::common;

use common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use sandlot_egress::Route;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

const RULES: &[&str] = &["web.test:1-65535", "*.api.test:8443", "127.0.0.0/8:1-65535"];

async fn ask_udp(from: std::net::Ipv4Addr, server: SocketAddr, name: &str, kind: RecordType) -> Option<Message> {
    let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V4(from), 0)).await.unwrap();
    socket.send_to(&question(name, kind), server).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    // Long enough for a busy machine to answer; an unknown peer waits it out.
    let received = tokio::time::timeout(Duration::from_secs(2), socket.recv(&mut buffer)).await.ok()?.unwrap();
    Some(Message::from_vec(&buffer[..received]).unwrap())
}

#[tokio::test]
async fn allowed_names_get_synthetic_addresses_and_others_nxdomain() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(RULES)).await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let server = socket.local_addr().unwrap();
    tokio::spawn(harness.responder.clone().serve_udp(socket));

    let answer = ask_udp(SANDBOX, server, "Web.Test.", RecordType::A).await.unwrap();
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    assert_eq!(answer.answers.len(), 1);
    assert_eq!(answer.answers[0].ttl, 60);
    let RData::A(address) = answer.answers[0].data.clone() else { panic!("{answer:?}") };
    assert_eq!(harness.synthetic.name(IpAddr::V4(address.0)).as_deref(), Some("web.test"));
    assert!(address.0.octets()[0] == 198 && address.0.octets()[1] == 18, "{address:?}");

    let again = ask_udp(SANDBOX, server, "web.test", RecordType::A).await.unwrap();
    assert_eq!(again.answers[0].data, answer.answers[0].data, "the same address while it is in the table");
    let wildcard = ask_udp(SANDBOX, server, "v1.api.test", RecordType::A).await.unwrap();
    assert_eq!(wildcard.answers.len(), 1);

    let aaaa = ask_udp(SANDBOX, server, "web.test", RecordType::AAAA).await.unwrap();
    assert_eq!((aaaa.metadata.response_code, aaaa.answers.len()), (ResponseCode::NoError, 0));
    let mx = ask_udp(SANDBOX, server, "web.test", RecordType::MX).await.unwrap();
    assert_eq!(mx.metadata.response_code, ResponseCode::NotImp);

    let denied = ask_udp(SANDBOX, server, "other.test", RecordType::A).await.unwrap();
    assert_eq!((denied.metadata.response_code, denied.answers.len()), (ResponseCode::NXDomain, 0));
    let exfiltration = ask_udp(SANDBOX, server, "c2VjcmV0.evil.test", RecordType::TXT).await.unwrap();
    assert_eq!(exfiltration.metadata.response_code, ResponseCode::NXDomain);
    let bare = ask_udp(SANDBOX, server, "api.test", RecordType::A).await.unwrap();
    assert_eq!(bare.metadata.response_code, ResponseCode::NXDomain, "*.api.test is not api.test");

    let records = harness.records(3).await;
    let summary: Vec<_> =
        records.iter().map(|record| (record.host.as_str(), record.port, record.route, record.allowed)).collect();
    assert_eq!(
        summary,
        vec![
            ("other.test", 53, Route::Dns, false),
            ("c2vjcmv0.evil.test", 53, Route::Dns, false),
            ("api.test", 53, Route::Dns, false)
        ]
    );
    assert_eq!(records[0].run_id.as_deref(), Some("run-1"));
    assert_eq!(internet.questions(), 0, "no question ever left for another server");
}

#[tokio::test]
async fn an_unknown_peer_gets_no_answer() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(RULES)).await;
    assert!(harness.responder.answer(IpAddr::V4(STRANGER), &question("web.test", RecordType::A)).is_none());
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let server = socket.local_addr().unwrap();
    tokio::spawn(harness.responder.clone().serve_udp(socket));
    assert!(ask_udp(STRANGER, server, "web.test", RecordType::A).await.is_none());
    assert!(ask_udp(SANDBOX, server, "web.test", RecordType::A).await.is_some(), "the sandbox does get one");
    assert!(harness.records(0).await.is_empty());
    assert_eq!(internet.questions(), 0);
}

#[tokio::test]
async fn over_tcp_too() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(RULES)).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    tokio::spawn(harness.responder.clone().serve_tcp(listener));
    let mut stream = connect_from(SANDBOX, server).await;
    for (name, code) in [("web.test", ResponseCode::NoError), ("other.test", ResponseCode::NXDomain)] {
        let message = question(name, RecordType::A);
        stream.write_u16(message.len() as u16).await.unwrap();
        stream.write_all(&message).await.unwrap();
        let length = stream.read_u16().await.unwrap();
        let mut answer = vec![0u8; usize::from(length)];
        stream.read_exact(&mut answer).await.unwrap();
        assert_eq!(Message::from_vec(&answer).unwrap().metadata.response_code, code, "{name}");
    }
    let mut stranger = connect_from(STRANGER, server).await;
    let message = question("web.test", RecordType::A);
    let _ = stranger.write_u16(message.len() as u16).await;
    let _ = stranger.write_all(&message).await;
    assert_eq!(read_all(&mut stranger).await, "", "closed unanswered");
    assert_eq!(internet.questions(), 0);
}

#[tokio::test]
async fn an_answer_leads_to_the_host_through_the_catch() {
    let internet = Internet::start().await;
    let harness = Harness::start(&internet, Setup::allow(RULES)).await;
    let message = harness.responder.answer(IpAddr::V4(SANDBOX), &question("web.test", RecordType::A)).unwrap();
    let RData::A(address) = Message::from_vec(&message).unwrap().answers[0].data.clone() else { panic!() };
    let mut stream = harness.caught_at(SocketAddr::new(IpAddr::V4(address.0), internet.http.port())).await;
    let response = get(&mut stream, "GET /via-dns HTTP/1.1", "web.test").await;
    assert!(response.ends_with("hello from /via-dns"), "{response}");
    // The proxy resolved web.test on the host: an A and an AAAA question.
    assert!((1..=2).contains(&internet.questions()), "{}", internet.questions());
}
