//! The leashed sandboxes' name server, over UDP and TCP on the gateway (the sandbox's `/etc/resolv.conf` names it).
//!
//! It answers only registered sandboxes (by the peer's address) and asks no other server, ever: a name the
//! sandbox's leash could allow on some port gets its synthetic address (A, TTL 60) and no IPv6 address (AAAA:
//! NOERROR, no answer, so clients fall back to IPv4 at once); any other name is NXDOMAIN, recorded in the
//! sandbox's audit trail; other question types are NOTIMP. The real address is found later by the proxy, on the
//! host, for a connection it allows; so a lookup carries nothing out of the sandbox.

use crate::audit::{ConnectionRecord, Route};
use crate::policy::normalize;
use crate::registry::{Leashed, Registry};
use crate::synthetic::Synthetic;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::{DNSClass, RData, Record, RecordType, rdata::A};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// Seconds a sandbox may keep an answer.
pub const TTL: u32 = 60;

/// How long a TCP client may stay silent before the responder closes its connection.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The responder of one server.
pub struct Responder {
    registry: Arc<Registry>,
    synthetic: Arc<Synthetic>,
}

impl Responder {
    pub fn new(registry: Arc<Registry>, synthetic: Arc<Synthetic>) -> Arc<Self> {
        Arc::new(Self { registry, synthetic })
    }

    /// Answers questions on `socket` until the task is dropped.
    pub async fn serve_udp(self: Arc<Self>, socket: UdpSocket) {
        let mut buffer = vec![0u8; 4096];
        loop {
            let (length, peer) = match socket.recv_from(&mut buffer).await {
                Ok(received) => received,
                Err(error) => {
                    tracing::debug!(%error, "dns: receive failed");
                    continue;
                }
            };
            if let Some(answer) = self.answer(peer.ip(), &buffer[..length])
                && let Err(error) = socket.send_to(&answer, peer).await
            {
                tracing::debug!(%error, %peer, "dns: send failed");
            }
        }
    }

    /// Answers questions on the connections `listener` accepts until the task is dropped.
    pub async fn serve_tcp(self: Arc<Self>, listener: TcpListener) {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::debug!(%error, "dns: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if self.registry.get(peer.ip()).is_none() {
                continue;
            }
            tokio::spawn(self.clone().serve_stream(stream, peer));
        }
    }

    async fn serve_stream(self: Arc<Self>, mut stream: TcpStream, peer: SocketAddr) {
        let mut buffer = vec![0u8; usize::from(u16::MAX)];
        loop {
            let Ok(Ok(length)) = tokio::time::timeout(TCP_IDLE, stream.read_u16()).await else { return };
            let question = &mut buffer[..usize::from(length)];
            if stream.read_exact(question).await.is_err() {
                return;
            }
            let Some(answer) = self.answer(peer.ip(), question) else { return };
            let Ok(length) = u16::try_from(answer.len()) else { return };
            if stream.write_u16(length).await.is_err() || stream.write_all(&answer).await.is_err() {
                return;
            }
        }
    }

    /// The answer to the message `question` from `peer`, or nothing (an unknown peer, a message that is no
    /// question).
    pub fn answer(&self, peer: IpAddr, question: &[u8]) -> Option<Vec<u8>> {
        let leashed = self.registry.get(peer)?;
        let message = Message::from_vec(question).ok()?;
        if message.metadata.message_type != MessageType::Query {
            return None;
        }
        let mut response = Message::response(message.metadata.id, message.metadata.op_code);
        response.metadata.recursion_desired = message.metadata.recursion_desired;
        response.metadata.recursion_available = true;
        let [query] = message.queries.as_slice() else {
            response.metadata.response_code = ResponseCode::FormErr;
            return response.to_vec().ok();
        };
        response.add_query(query.clone());
        if message.metadata.op_code != OpCode::Query || query.query_class() != DNSClass::IN {
            response.metadata.response_code = ResponseCode::NotImp;
            return response.to_vec().ok();
        }
        let name = normalize(&query.name().to_ascii());
        if !leashed.leash.names(&name) {
            refused(&leashed, name, query.query_type());
            response.metadata.response_code = ResponseCode::NXDomain;
            return response.to_vec().ok();
        }
        match query.query_type() {
            RecordType::A => {
                let address = self.synthetic.address(&name);
                response.add_answer(Record::from_rdata(query.name().clone(), TTL, RData::A(A(address))));
                metrics::counter!("sandlot_egress_dns_answers_total", "outcome" => "synthetic").increment(1);
            }
            RecordType::AAAA => {}
            _ => response.metadata.response_code = ResponseCode::NotImp,
        }
        response.to_vec().ok()
    }
}

/// Records a name the sandbox may not reach (whatever the question's type: a TXT question for a made-up name is
/// the classic way out by lookup).
fn refused(leashed: &Leashed, name: String, kind: RecordType) {
    metrics::counter!("sandlot_egress_dns_answers_total", "outcome" => "refused").increment(1);
    leashed.audit.record(ConnectionRecord {
        host: name,
        port: 53,
        route: Route::Dns,
        allowed: false,
        reason: format!("{kind} question for a name no allow rule names"),
        bytes_sent: 0,
        bytes_received: 0,
        started_ms: crate::audit::now_ms(),
        duration_ms: 0,
        run_id: leashed.owner.run_id(),
    });
}
