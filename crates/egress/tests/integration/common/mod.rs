//! A small internet on loopback for the proxy's and the name server's tests: a name server that answers the test
//! names (and counts every question it gets), a plain HTTP server and a TLS one (rcgen's certificate for
//! `tls.test`), and a proxy whose only sandbox is the address 127.0.0.2 (clients bind it before they connect).
//!
//! Everything is on 127.0.0.1, so every policy here allows `127.0.0.0/8` explicitly: a name that resolves to
//! loopback is refused otherwise (`policy::special`).

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{RData, Record, RecordType, rdata::A};
use sandlot_egress::dns::Responder;
use sandlot_egress::proxy::Proxy;
use sandlot_egress::resolver::Resolver;
use sandlot_egress::synthetic::Synthetic;
use sandlot_egress::{ConnectionRecord, Leash, Leashed, Owner, Policy, PolicySpec, Registry};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};

/// The sandbox's address.
pub const SANDBOX: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// An address no sandbox has.
pub const STRANGER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);

/// Names the test name server knows, all on 127.0.0.1.
pub const NAMES: &[&str] = &["web.test", "tls.test", "other.test", "secret.test", "denied.test"];

pub struct Internet {
    pub nameserver: SocketAddr,
    pub questions: Arc<AtomicUsize>,
    /// The names the name server was asked for, in order.
    pub asked: Arc<std::sync::Mutex<Vec<String>>>,
    pub http: SocketAddr,
    pub tls: SocketAddr,
    pub tls_root: rustls::pki_types::CertificateDer<'static>,
    /// The same certificate in PEM, for clients that read a file.
    pub tls_root_pem: String,
    /// Request heads the HTTP server received, in order.
    pub heads: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Internet {
    pub async fn start() -> Internet {
        let questions = Arc::new(AtomicUsize::new(0));
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let nameserver = nameserver(questions.clone(), asked.clone()).await;
        let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let http = http_server(heads.clone()).await;
        let (tls, tls_root, tls_root_pem) = tls_server().await;
        Internet { nameserver, questions, asked, http, tls, tls_root, tls_root_pem, heads }
    }

    pub fn questions(&self) -> usize {
        self.questions.load(Ordering::SeqCst)
    }

    /// The distinct names the name server was asked for, sorted.
    pub fn asked(&self) -> Vec<String> {
        let mut names = self.asked.lock().unwrap().clone();
        names.sort();
        names.dedup();
        names
    }
}

/// A name server on 127.0.0.1 (UDP) that answers [`NAMES`] with 127.0.0.1 and anything else NXDOMAIN.
async fn nameserver(questions: Arc<AtomicUsize>, asked: Arc<std::sync::Mutex<Vec<String>>>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let address = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        loop {
            let Ok((length, peer)) = socket.recv_from(&mut buffer).await else { continue };
            questions.fetch_add(1, Ordering::SeqCst);
            let Ok(question) = Message::from_vec(&buffer[..length]) else { continue };
            let mut answer = Message::response(question.metadata.id, question.metadata.op_code);
            answer.metadata.recursion_desired = question.metadata.recursion_desired;
            answer.metadata.recursion_available = true;
            answer.add_queries(question.queries.clone());
            for query in &question.queries {
                let name = query.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
                asked.lock().unwrap().push(name.clone());
                if !NAMES.contains(&name.as_str()) {
                    answer.metadata.response_code = ResponseCode::NXDomain;
                } else if query.query_type() == RecordType::A {
                    answer.add_answer(Record::from_rdata(query.name().clone(), 60, RData::A(A(Ipv4Addr::LOCALHOST))));
                }
            }
            let _ = socket.send_to(&answer.to_vec().unwrap(), peer).await;
        }
    });
    address
}

/// Reads one request head from `stream`.
pub async fn read_head(stream: &mut (impl AsyncReadExt + Unpin)) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// The body the HTTP server answers `path` with: `/big/N` is N bytes of `x`, anything else `hello from <path>`.
pub fn body_for(path: &str) -> Vec<u8> {
    match path.strip_prefix("/big/").and_then(|size| size.parse::<usize>().ok()) {
        Some(size) => vec![b'x'; size],
        None => format!("hello from {path}").into_bytes(),
    }
}

async fn respond(
    stream: &mut (impl AsyncReadExt + AsyncWriteExt + Unpin),
    heads: Option<&std::sync::Mutex<Vec<String>>>,
) {
    let head = read_head(stream).await;
    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
    if let Some(heads) = heads {
        heads.lock().unwrap().push(head);
    }
    let body = body_for(&path);
    let response = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
}

async fn http_server(heads: Arc<std::sync::Mutex<Vec<String>>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { continue };
            let heads = heads.clone();
            tokio::spawn(async move { respond(&mut stream, Some(&heads)).await });
        }
    });
    address
}

async fn tls_server() -> (SocketAddr, rustls::pki_types::CertificateDer<'static>, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["tls.test".to_owned()]).unwrap();
    let pem = certified.cert.pem();
    let certificate = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certificate.clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(stream).await {
                    respond(&mut tls, None).await;
                }
            });
        }
    });
    (address, certificate, pem)
}

/// A TLS client that trusts only `root`.
pub fn tls_connector(root: &rustls::pki_types::CertificateDer<'static>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Options of the test's proxy.
pub struct Setup {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub max_connections: usize,
    pub bytes_per_second: u64,
    pub intercept: Option<Arc<dyn sandlot_egress::intercept::Intercept>>,
}

impl Setup {
    pub fn allow(rules: &[&str]) -> Setup {
        Setup {
            allow: rules.iter().map(|rule| (*rule).to_owned()).collect(),
            deny: Vec::new(),
            max_connections: 64,
            bytes_per_second: 0,
            intercept: None,
        }
    }
}

/// A proxy with one sandbox ([`SANDBOX`]), its explicit port served on 127.0.0.1.
pub struct Harness {
    pub proxy: Arc<Proxy>,
    pub synthetic: Arc<Synthetic>,
    pub responder: Arc<Responder>,
    pub leashed: Arc<Leashed>,
    pub explicit: SocketAddr,
}

impl Harness {
    pub async fn start(internet: &Internet, setup: Setup) -> Harness {
        let spec = PolicySpec { allow: setup.allow, deny: setup.deny };
        let leash = Leash::new(Arc::new(Policy::parse(&spec).unwrap()));
        let registry = Arc::new(Registry::default());
        let leashed = Arc::new(Leashed::new(
            leash,
            Owner::new("tenant", "conversation"),
            setup.max_connections,
            setup.bytes_per_second,
        ));
        leashed.owner.set_run_id(Some("run-1".to_owned()));
        registry.insert(IpAddr::V4(SANDBOX), leashed.clone());
        let synthetic = Arc::new(Synthetic::new());
        let resolver = Resolver::new(Some(&[internet.nameserver])).unwrap();
        let proxy = Proxy::new(registry.clone(), synthetic.clone(), resolver, setup.intercept);
        let responder = Responder::new(registry.clone(), synthetic.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let explicit = listener.local_addr().unwrap();
        tokio::spawn(proxy.clone().serve_explicit(listener));
        Harness { proxy, synthetic, responder, leashed, explicit }
    }

    /// A connection from the sandbox's address to the explicit proxy.
    pub async fn to_proxy(&self) -> TcpStream {
        connect_from(SANDBOX, self.explicit).await
    }

    /// A connection from the sandbox to `name:port` as the gateway would catch it: to a listener standing in for
    /// the capture, handed to the proxy as made to the name's synthetic address.
    pub async fn caught(&self, name: &str, port: u16) -> TcpStream {
        let destination = SocketAddr::new(IpAddr::V4(self.synthetic.address(name)), port);
        self.caught_at(destination).await
    }

    /// As [`Harness::caught`], to any destination address.
    pub async fn caught_at(&self, destination: SocketAddr) -> TcpStream {
        let capture = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = connect_from(SANDBOX, capture.local_addr().unwrap()).await;
        let (stream, _) = capture.accept().await.unwrap();
        tokio::spawn(self.proxy.clone().transparent(stream, destination));
        client
    }

    /// The audit records so far, waiting (a few seconds at most) until there are `count`: a record is written
    /// when the proxy's side of the connection ends, which may be just after the client saw its end.
    pub async fn records(&self, count: usize) -> Vec<ConnectionRecord> {
        let mut records = Vec::new();
        for _ in 0..500 {
            records.extend(self.leashed.audit.take().0);
            if records.len() >= count {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        records
    }
}

pub async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// Everything `stream` sends until it closes.
pub async fn read_all(stream: &mut (impl AsyncReadExt + Unpin)) -> String {
    let mut all = Vec::new();
    let _ = stream.read_to_end(&mut all).await;
    String::from_utf8_lossy(&all).into_owned()
}

/// A plain HTTP GET through `stream` (request line as given), and the whole response.
pub async fn get(stream: &mut TcpStream, request_line: &str, host: &str) -> String {
    let request = format!("{request_line}\r\nHost: {host}\r\nUser-Agent: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    read_all(stream).await
}

/// `CONNECT target` on `stream`: the proxy's response head.
pub async fn connect(stream: &mut TcpStream, target: &str) -> String {
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    read_head(stream).await
}

/// A message of type `kind` for `name`, as a sandbox's resolver sends it.
pub fn question(name: &str, kind: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.metadata.message_type = MessageType::Query;
    message.add_query(hickory_proto::op::Query::query(hickory_proto::rr::Name::from_ascii(name).unwrap(), kind));
    message.to_vec().unwrap()
}
