//! What credential injection costs a request: a client on loopback asks an HTTPS host directly, then through the
//! interceptor (which ends the client's TLS, puts the secret in and opens its own TLS to the host), on a new
//! connection each time and on a kept-alive one. Prints a table with the ratios to direct.
//!
//! `cargo run --release -p sandlot-egress --example bench_credentials [REQUESTS]` (default 300 of each).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use sandlot_egress::credentials::{CredentialSpec, Credentials};
use sandlot_egress::intercept::Intercept;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The host: a test CA's certificate for `api.test`, answering `ok` to everything.
async fn start_host() -> (SocketAddr, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["api.test".to_owned()]).unwrap().signed_by(&key, &issuer).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(|_: Request<Incoming>| async {
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
            });
        }
    });
    (address, ca_pem)
}

async fn connect(address: SocketAddr, roots_pem: &str) -> Sender {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(roots_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(address).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let name = ServerName::try_from("api.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(connection);
    sender
}

async fn get(sender: &mut Sender, token: &str) {
    sender.ready().await.unwrap();
    let request = Request::get("/").header("host", "api.test").header("authorization", format!("Bearer {token}"));
    let response = sender.send_request(request.body(Full::default()).unwrap()).await.unwrap();
    assert!(response.status().is_success());
    response.into_body().collect().await.unwrap();
}

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let index = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[index].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let requests: usize = std::env::args().nth(1).map(|n| n.parse().unwrap()).unwrap_or(300);
    let (host, host_ca) = start_host().await;
    let spec = CredentialSpec {
        host: "api.test".into(),
        placeholder_env: "API_TOKEN".into(),
        secret: Some("bench-secret".into()),
        secret_env: None,
        header: None,
        format: None,
    };
    let credentials = Credentials::new(&[spec], Some(&host_ca)).unwrap();
    let placeholder = credentials.environment()[0].1.clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    let interceptor = credentials.interceptor();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let interceptor = interceptor.clone();
            tokio::spawn(async move { interceptor.serve(client, "api.test", 443, &[host]).await });
        }
    });
    let ca = credentials.ca_pem().to_owned();

    println!(
        "| request ({requests} each, ms) | direct p50 | direct p99 | intercepted p50 | intercepted p99 | p50 ratio |"
    );
    println!("|---|---|---|---|---|---|");
    for (label, fresh) in [("new connection: TCP, TLS, GET", true), ("kept-alive connection: GET", false)] {
        let mut rows = Vec::new();
        for (address, roots) in [(host, &host_ca), (proxy, &ca)] {
            // One untimed round first: the leaf certificate is made on the first connection to a host.
            let mut kept = connect(address, roots).await;
            get(&mut kept, &placeholder).await;
            let mut samples = Vec::with_capacity(requests);
            for _ in 0..requests {
                let start = Instant::now();
                if fresh {
                    let mut sender = connect(address, roots).await;
                    get(&mut sender, &placeholder).await;
                } else {
                    get(&mut kept, &placeholder).await;
                }
                samples.push(start.elapsed());
            }
            rows.push((percentile(&mut samples, 0.5), percentile(&mut samples, 0.99)));
        }
        let ((direct50, direct99), (through50, through99)) = (rows[0], rows[1]);
        println!(
            "| {label} | {direct50:.3} | {direct99:.3} | {through50:.3} | {through99:.3} | {:.2} |",
            through50 / direct50
        );
    }
}
