//! Credential injection end to end on loopback: a test CA and an HTTPS "host" that records what it is sent, the
//! interceptor serving a connection as the proxy hands it over, and a sandbox-side client that trusts this start's
//! authority. Checks that the host gets the secret, that the sandbox side never sees it (responses, logs,
//! environment), that other hosts get the placeholder as it is, and that misdirection is refused.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use sandlot_egress::credentials::{CredentialSpec, Credentials, PLACEHOLDER_PREFIX, trust_environment};
use sandlot_egress::intercept::{Carried, Intercept};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const SECRET: &str = "ghp_TEST_s3cret_value_1234";
const OTHER_SECRET: &str = "other-secret-5678";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA of the test's own, as a public authority would be for the real host.
struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl TestCa {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Self { issuer: Issuer::new(params, key), pem }
    }

    fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let params = CertificateParams::new(names.iter().map(|name| name.to_string()).collect::<Vec<_>>()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        Arc::new(config)
    }
}

/// What the host was sent: each request's method, target (path and query) and headers (sorted).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// The mapped host's real server on loopback: `/echo-body` answers the body it got, `/reflect` puts the request's
/// `Authorization` in a response header (a host that echoes the secret), anything else answers `ok`.
async fn start_host(config: Arc<rustls::ServerConfig>) -> (SocketAddr, Log) {
    start_host_with(config, true).await
}

/// [`start_host`], closing each connection after one answer unless `keep_alive`.
async fn start_host_with(config: Arc<rustls::ServerConfig>, keep_alive: bool) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let seen = log.clone();
    tokio::spawn(async move {
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let seen = seen.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(request, &seen)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(keep_alive)
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (address, log)
}

fn answer(request: Request<Incoming>, seen: &Log) -> Response<BoxBody<Bytes, hyper::Error>> {
    let mut headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(name, value)| (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    headers.sort();
    let target = request.uri().path_and_query().map_or("", |target| target.as_str()).to_owned();
    seen.lock().unwrap().push(Seen { method: request.method().to_string(), path: target, headers });
    match request.uri().path() {
        "/echo-body" => Response::new(request.into_body().boxed()),
        "/reflect" => {
            let echoed = request.headers().get("authorization").cloned();
            let mut response = Response::new(full("reflected"));
            if let Some(value) = echoed {
                response.headers_mut().insert("x-reflect", value);
            }
            response
        }
        _ => Response::new(full("ok")),
    }
}

fn full(text: &'static str) -> BoxBody<Bytes, hyper::Error> {
    Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed()
}

fn spec(host: &str, variable: &str, secret: &str, header: Option<(&str, &str)>) -> CredentialSpec {
    CredentialSpec {
        host: host.into(),
        placeholder_env: variable.into(),
        secret: Some(secret.into()),
        secret_env: None,
        header: header.map(|(name, _)| name.into()),
        format: header.map(|(_, format)| format.into()),
    }
}

/// The proxy's part: accept one connection from the sandbox and hand it to the interceptor for `host` at `upstream`.
async fn intercept(
    credentials: &Credentials,
    host: &str,
    upstream: SocketAddr,
) -> (SocketAddr, JoinHandle<io::Result<Carried>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let interceptor = credentials.interceptor();
    let host = host.to_owned();
    let served = tokio::spawn(async move {
        let (client, _) = listener.accept().await?;
        interceptor.serve(client, &host, 443, &[upstream]).await
    });
    (address, served)
}

/// The sandbox's part: TLS to the proxy as `sni`, trusting what the sandbox is given to trust.
async fn sandbox_tls(
    credentials: &Credentials,
    proxy: SocketAddr,
    sni: &str,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(credentials.ca_pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(proxy).await?;
    let name = ServerName::try_from(sni.to_owned()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn http_client(tls: tokio_rustls::client::TlsStream<TcpStream>) -> Sender {
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(connection);
    sender
}

/// Sends one request; the response's status, headers (as text) and body.
async fn send(sender: &mut Sender, request: Request<Full<Bytes>>) -> (StatusCode, String, Vec<u8>) {
    sender.ready().await.unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let headers = format!("{:?}", response.headers());
    let body = response.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, headers, body)
}

fn get(host: &str, path: &str, headers: &[(&str, &str)]) -> Request<Full<Bytes>> {
    let mut request = Request::get(path).header("host", host);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Full::default()).unwrap()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle.as_bytes())
}

/// Everything a test's code logs, at every level, from every crate.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_host_gets_the_secret_and_the_sandbox_never_sees_it() {
    // The tests run on one thread (tokio's current-thread runtime): the subscriber set here sees every task's logs.
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber =
        tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE).with_writer(move || writer.clone()).finish();
    let _logging = tracing::subscriber::set_default(subscriber);

    let ca = TestCa::new();
    let (upstream, seen) = start_host(ca.server_config(&["api.test"])).await;
    let specs = [
        spec("api.test", "GITHUB_TOKEN", SECRET, Some(("Authorization", "Bearer {secret}"))),
        spec("api.test", "API_KEY", OTHER_SECRET, None),
    ];
    let credentials = Credentials::new(&specs, Some(&ca.pem)).unwrap();
    let environment = credentials.environment();
    assert_eq!(environment.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(), ["GITHUB_TOKEN", "API_KEY"]);
    for (_, placeholder) in &environment {
        assert!(placeholder.starts_with(PLACEHOLDER_PREFIX), "{placeholder}");
    }
    let key = environment[1].1.clone();

    let (proxy, served) = intercept(&credentials, "api.test", upstream).await;
    let mut sender = http_client(sandbox_tls(&credentials, proxy, "api.test").await.unwrap()).await;
    // Three requests on one connection: the configured header replaces what the sandbox sent, and the other
    // placeholder becomes its secret wherever it is (header values, the query).
    let mut responses = Vec::new();
    for path in ["/one", &format!("/two?key={key}"), "/reflect"] {
        let headers =
            [("authorization", "Bearer forged"), ("x-api-key", key.as_str()), ("x-quoted", &format!("k={key};"))];
        responses.push(send(&mut sender, get("api.test", path, &headers)).await);
    }
    drop(sender);
    let carried = served.await.unwrap().unwrap();

    let headers = vec![
        ("authorization".to_owned(), format!("Bearer {SECRET}")),
        ("host".to_owned(), "api.test".to_owned()),
        ("x-api-key".to_owned(), OTHER_SECRET.to_owned()),
        ("x-quoted".to_owned(), format!("k={OTHER_SECRET};")),
    ];
    let expected: Vec<Seen> = ["/one", &format!("/two?key={OTHER_SECRET}"), "/reflect"]
        .iter()
        .map(|path| Seen { method: "GET".into(), path: path.to_string(), headers: headers.clone() })
        .collect();
    assert_eq!(*seen.lock().unwrap(), expected);

    // The sandbox's side: statuses and bodies as the host answered, the echoed secret put back to its placeholder.
    assert_eq!(
        responses.iter().map(|(status, _, body)| (*status, body.clone())).collect::<Vec<_>>(),
        [(StatusCode::OK, b"ok".to_vec()), (StatusCode::OK, b"ok".to_vec()), (StatusCode::OK, b"reflected".to_vec())]
    );
    let (_, reflected_headers, _) = &responses[2];
    assert!(
        reflected_headers.contains(&format!("\"x-reflect\": \"Bearer {}\"", environment[0].1)),
        "{reflected_headers}"
    );
    for (_, headers, body) in &responses {
        for secret in [SECRET, OTHER_SECRET] {
            assert!(!headers.contains(secret) && !contains(body, secret), "{headers}");
        }
    }
    assert!(carried.sent > 0 && carried.received > 0, "{carried:?}");

    // Nowhere else the sandbox could look: its variables, its trust store, the logs.
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("secret put in a request"), "{logs}");
    assert!(logs.contains("GITHUB_TOKEN") && logs.contains("api.test"), "{logs}");
    for secret in [SECRET, OTHER_SECRET] {
        assert!(!logs.contains(secret), "{logs}");
        assert!(!format!("{environment:?}").contains(secret));
        assert!(!credentials.trust_bundle_pem().contains(secret));
        assert!(!format!("{specs:?}").contains(secret), "{specs:?}");
    }
}

#[tokio::test]
async fn other_hosts_are_not_intercepted_and_get_placeholders_as_they_are() {
    let ca = TestCa::new();
    let (upstream, seen) = start_host(ca.server_config(&["api.test"])).await;
    let specs = [
        spec("api.test", "API_TOKEN", SECRET, None),
        spec("*.other.test", "OTHER_TOKEN", OTHER_SECRET, Some(("x-token", "{secret}"))),
    ];
    let credentials = Credentials::new(&specs, Some(&ca.pem)).unwrap();
    let interceptor = credentials.interceptor();
    let wanted: Vec<bool> = [
        ("api.test", 443),
        ("API.test.", 8443),
        ("api.test", 80),
        ("x.other.test", 443),
        ("other.test", 443),
        ("unmapped.test", 443),
        ("api.test.evil", 443),
    ]
    .iter()
    .map(|(host, port)| interceptor.wants(host, *port))
    .collect();
    assert_eq!(wanted, [true, true, true, true, false, false, false]);

    // Handed an unmapped host anyway, the interceptor serves nothing.
    let (client, _) = loopback_pair().await;
    let error = interceptor.serve(client, "unmapped.test", 443, &[upstream]).await.unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);

    // On api.test, the other host's placeholder goes through as it is, and its header is not set.
    let other = credentials.environment()[1].1.clone();
    let (proxy, served) = intercept(&credentials, "api.test", upstream).await;
    let mut sender = http_client(sandbox_tls(&credentials, proxy, "api.test").await.unwrap()).await;
    let (status, _, _) =
        send(&mut sender, get("api.test:443", "/", &[("authorization", &format!("token {other}"))])).await;
    drop(sender);
    served.await.unwrap().unwrap();
    assert_eq!(status, StatusCode::OK);
    let headers =
        vec![("authorization".to_owned(), format!("token {other}")), ("host".to_owned(), "api.test:443".to_owned())];
    assert_eq!(*seen.lock().unwrap(), [Seen { method: "GET".into(), path: "/".into(), headers }]);
}

async fn loopback_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (server, _) = listener.accept().await.unwrap();
    (server, client)
}

#[tokio::test]
async fn a_tls_name_other_than_the_host_is_refused() {
    let ca = TestCa::new();
    let (upstream, seen) = start_host(ca.server_config(&["api.test", "other.test"])).await;
    let specs = [spec("api.test", "API_TOKEN", SECRET, None), spec("other.test", "OTHER_TOKEN", OTHER_SECRET, None)];
    let credentials = Credentials::new(&specs, Some(&ca.pem)).unwrap();
    let (proxy, served) = intercept(&credentials, "api.test", upstream).await;
    assert!(sandbox_tls(&credentials, proxy, "other.test").await.is_err());
    assert_eq!(served.await.unwrap().unwrap_err().kind(), io::ErrorKind::PermissionDenied);
    assert_eq!(*seen.lock().unwrap(), []);
}

#[tokio::test]
async fn a_host_header_other_than_the_host_is_refused() {
    let ca = TestCa::new();
    let (upstream, seen) = start_host(ca.server_config(&["api.test"])).await;
    let credentials = Credentials::new(&[spec("api.test", "API_TOKEN", SECRET, None)], Some(&ca.pem)).unwrap();
    let placeholder = credentials.environment()[0].1.clone();
    let (proxy, served) = intercept(&credentials, "api.test", upstream).await;
    let mut sender = http_client(sandbox_tls(&credentials, proxy, "api.test").await.unwrap()).await;
    let (status, _, body) = send(&mut sender, get("evil.test", "/", &[("authorization", &placeholder)])).await;
    drop(sender);
    served.await.unwrap().unwrap();
    let misdirected = (
        StatusCode::MISDIRECTED_REQUEST,
        b"sandlot egress: the request's Host is not the connection's host\n".to_vec(),
    );
    assert_eq!((status, body), misdirected);
    // The same with the right Host and another host in an absolute-form target.
    let (proxy, served) = intercept(&credentials, "api.test", upstream).await;
    let mut sender = http_client(sandbox_tls(&credentials, proxy, "api.test").await.unwrap()).await;
    let request = get("api.test", "https://evil.test/", &[("authorization", &placeholder)]);
    let (status, _, body) = send(&mut sender, request).await;
    drop(sender);
    served.await.unwrap().unwrap();
    assert_eq!((status, body), misdirected);
    assert_eq!(*seen.lock().unwrap(), []);
}

#[tokio::test]
async fn plain_text_to_a_mapped_host_carries_nothing() {
    let ca = TestCa::new();
    let (upstream, seen) = start_host(ca.server_config(&["api.test"])).await;
    let credentials = Credentials::new(&[spec("api.test", "API_TOKEN", SECRET, None)], Some(&ca.pem)).unwrap();
    let placeholder = credentials.environment()[0].1.clone();
    let (proxy, served) = intercept(&credentials, "api.test", upstream).await;
    let mut tcp = TcpStream::connect(proxy).await.unwrap();
    let request = format!("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: {placeholder}\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    assert!(served.await.unwrap().is_err());
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer).await;
    assert!(!contains(&answer, SECRET));
    assert_eq!(*seen.lock().unwrap(), []);
}

#[tokio::test]
async fn a_host_whose_certificate_is_not_trusted_gets_nothing() {
    // The host's server is signed by a CA the interceptor was not told to trust: a man in the middle.
    let ca = TestCa::new();
    let (upstream, seen) = start_host(ca.server_config(&["api.test"])).await;
    let credentials = Credentials::new(&[spec("api.test", "API_TOKEN", SECRET, None)], None).unwrap();
    let placeholder = credentials.environment()[0].1.clone();
    let (proxy, served) = intercept(&credentials, "api.test", upstream).await;
    let mut sender = http_client(sandbox_tls(&credentials, proxy, "api.test").await.unwrap()).await;
    let (status, _, body) = send(&mut sender, get("api.test", "/", &[("authorization", &placeholder)])).await;
    drop(sender);
    served.await.unwrap().unwrap();
    assert_eq!((status, body), (StatusCode::BAD_GATEWAY, b"sandlot egress: the host could not be reached\n".to_vec()));
    assert_eq!(*seen.lock().unwrap(), []);
}

#[tokio::test]
async fn large_bodies_pass_intact_both_ways() {
    let ca = TestCa::new();
    let (upstream, _) = start_host(ca.server_config(&["api.test"])).await;
    let credentials = Credentials::new(&[spec("api.test", "API_TOKEN", SECRET, None)], Some(&ca.pem)).unwrap();
    let (proxy, served) = intercept(&credentials, "api.test", upstream).await;
    let mut sender = http_client(sandbox_tls(&credentials, proxy, "api.test").await.unwrap()).await;
    // 3 MiB and a bit, of bytes that repeat only every 251: a lost, doubled or reordered chunk shows.
    let body: Vec<u8> = (0..(3 << 20) + 12_345).map(|i: u32| (i % 251) as u8).collect();
    let request =
        Request::post("/echo-body").header("host", "api.test").body(Full::new(Bytes::from(body.clone()))).unwrap();
    let (status, _, echoed) = send(&mut sender, request).await;
    drop(sender);
    let carried = served.await.unwrap().unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(echoed == body, "{} bytes back for {}", echoed.len(), body.len());
    let size = body.len() as u64;
    assert!(carried.sent > size && carried.received > size, "{carried:?}");
}

#[test]
fn bad_specs_give_clear_errors() {
    let good = spec("api.test", "API_TOKEN", SECRET, None);
    let with = |change: &dyn Fn(&mut CredentialSpec)| {
        let mut spec = good.clone();
        change(&mut spec);
        spec
    };
    let lookup = |name: &str| (name == "SERVER_TOKEN").then(|| "from-the-environment".to_owned());
    let cases = [
        (with(&|s| s.host = "10.0.0.1".into()), "credential 0 (\"10.0.0.1\"): the host must be a name, not an address"),
        (
            with(&|s| s.host = "a b".into()),
            "credential 0 (\"a b\"): the host is not a valid name (`name.example` or `*.example`)",
        ),
        (
            with(&|s| s.placeholder_env = "1X".into()),
            "credential 0 (\"api.test\"): placeholder_env \"1X\" is not a variable name (letters, digits, `_`, not starting with a digit)",
        ),
        (with(&|s| s.secret = None), "credential 0 (\"api.test\"): no secret: give `secret` or `secret_env`"),
        (
            with(&|s| s.secret_env = Some("SERVER_TOKEN".into())),
            "credential 0 (\"api.test\"): give `secret` or `secret_env`, not both",
        ),
        (
            with(&|s| {
                s.secret = None;
                s.secret_env = Some("MISSING_TOKEN".into());
            }),
            "credential 0 (\"api.test\"): secret_env \"MISSING_TOKEN\" is not set in the server's environment",
        ),
        (with(&|s| s.secret = Some(String::new())), "credential 0 (\"api.test\"): the secret is empty"),
        (
            with(&|s| s.secret = Some(format!("{SECRET}\r\nX-Evil: 1"))),
            "credential 0 (\"api.test\"): the secret contains a control character (CR, LF, NUL or another)",
        ),
        (
            with(&|s| s.header = Some("Bad Header".into())),
            "credential 0 (\"api.test\"): header \"Bad Header\" is not a valid header name",
        ),
        (
            with(&|s| s.format = Some("Bearer {secret}".into())),
            "credential 0 (\"api.test\"): `format` without `header`",
        ),
        (
            with(&|s| {
                s.header = Some("Authorization".into());
                s.format = Some("Bearer".into());
            }),
            "credential 0 (\"api.test\"): format has no {secret}",
        ),
    ];
    for (bad, message) in cases {
        let error = Credentials::with_lookup(&[bad], None, &lookup).err().expect(message);
        assert_eq!(error.to_string(), message);
        assert!(!error.to_string().contains(SECRET));
    }
    let twice = [good.clone(), with(&|s| s.host = "other.test".into())];
    assert_eq!(
        Credentials::with_lookup(&twice, None, &lookup).err().unwrap().to_string(),
        "credential 1 (\"other.test\"): placeholder_env \"API_TOKEN\" is used by an earlier credential"
    );
    assert_eq!(
        Credentials::with_lookup(std::slice::from_ref(&good), Some("not a certificate"), &lookup)
            .err()
            .unwrap()
            .to_string(),
        "extra upstream roots: no certificate in the PEM"
    );
    // From the operator's JSON: unknown fields are refused, `secret_env` is read at start.
    let json = r#"[{"host": "api.test", "placeholder_env": "T", "secret_env": "SERVER_TOKEN", "header": "Authorization", "format": "Bearer {secret}"}]"#;
    let specs: Vec<CredentialSpec> = serde_json::from_str(json).unwrap();
    assert!(Credentials::with_lookup(&specs, None, &lookup).is_ok());
    let typo = r#"{"host": "api.test", "placeholder_env": "T", "secret": "x", "headr": "Authorization"}"#;
    let error = serde_json::from_str::<CredentialSpec>(typo).unwrap_err().to_string();
    assert!(error.starts_with("unknown field `headr`"), "{error}");
}

/// Real clients in the sandbox's place (OpenSSL's curl, Python's `ssl`, Node's `https`), with the environment a
/// sandbox is given (placeholders, trust variables) and no option of their own:
/// each one's request reaches the host with the secret in place of the placeholder.
#[tokio::test]
async fn real_clients_trust_the_bundle_and_their_token_reaches_the_host() {
    let ca = TestCa::new();
    let (upstream, seen) = start_host(ca.server_config(&["api.test"])).await;
    let credentials = Credentials::new(&[spec("api.test", "API_TOKEN", SECRET, None)], Some(&ca.pem)).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let interceptor = credentials.interceptor();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let interceptor = interceptor.clone();
            tokio::spawn(async move { interceptor.serve(client, "api.test", 443, &[upstream]).await });
        }
    });
    let files = tempfile::tempdir().unwrap();
    let bundle = files.path().join("bundle.pem");
    std::fs::write(&bundle, credentials.trust_bundle_pem()).unwrap();

    let curl = format!(
        r#"curl -sS --fail --resolve api.test:{port}:127.0.0.1 -H "Authorization: Bearer $API_TOKEN" https://api.test:{port}/curl"#
    );
    let python = format!(
        r#"
import http.client, os, socket, ssl
class Connection(http.client.HTTPSConnection):
    def connect(self):
        self.sock = self._context.wrap_socket(socket.create_connection(("127.0.0.1", {port})), server_hostname="api.test")
connection = Connection("api.test", {port}, context=ssl.create_default_context())
connection.request("GET", "/python", headers={{"Authorization": "Bearer " + os.environ["API_TOKEN"]}})
print(connection.getresponse().read().decode(), end="")
"#
    );
    let node = format!(
        r#"
const request = require("https").request({{host: "127.0.0.1", port: {port}, servername: "api.test", path: "/node",
    headers: {{host: "api.test", authorization: "Bearer " + process.env.API_TOKEN}}}}, (response) => {{
  response.setEncoding("utf8");
  let body = "";
  response.on("data", (chunk) => body += chunk);
  response.on("end", () => process.stdout.write(body));
}});
request.end();
"#
    );
    let clients: [(&str, &[&str]); 3] =
        [("sh", &["-c", &curl]), ("python3", &["-c", &python]), ("node", &["-e", &node])];
    for (program, args) in clients {
        let output = tokio::process::Command::new(program)
            .args(args)
            .envs(credentials.environment())
            .envs(trust_environment(bundle.to_str().unwrap()))
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{program}: {stderr}");
        assert_eq!(output.stdout, b"ok", "{program}: {stderr}");
    }
    // A 2 MiB upload from curl (which asks `Expect: 100-continue` past 1 MiB) comes back intact.
    let upload = files.path().join("upload");
    let body: Vec<u8> = (0..2u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&upload, &body).unwrap();
    let output = tokio::process::Command::new("curl")
        .envs(trust_environment(bundle.to_str().unwrap()))
        .args(["-sS", "--fail", "--resolve", &format!("api.test:{port}:127.0.0.1"), "--data-binary"])
        .arg(format!("@{}", upload.display()))
        .arg(format!("https://api.test:{port}/echo-body"))
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.stdout == body, "{} bytes back", output.stdout.len());
    seen.lock().unwrap().retain(|seen| seen.path != "/echo-body");

    let authorizations: Vec<(String, Option<String>)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|seen| {
            let authorization = seen.headers.iter().find(|(name, _)| name == "authorization");
            (seen.path.clone(), authorization.map(|(_, value)| value.clone()))
        })
        .collect();
    let expected = ["/curl", "/python", "/node"].map(|path| (path.to_owned(), Some(format!("Bearer {SECRET}"))));
    assert_eq!(authorizations, expected);
}

#[tokio::test]
async fn a_host_that_closes_its_connections_is_reconnected_and_hop_headers_stay_on_their_hop() {
    let ca = TestCa::new();
    let (upstream, seen) = start_host_with(ca.server_config(&["api.test"]), false).await;
    let credentials = Credentials::new(&[spec("api.test", "API_TOKEN", SECRET, None)], Some(&ca.pem)).unwrap();
    let placeholder = credentials.environment()[0].1.clone();
    let (proxy, served) = intercept(&credentials, "api.test", upstream).await;
    let mut sender = http_client(sandbox_tls(&credentials, proxy, "api.test").await.unwrap()).await;
    // The host answers `Connection: close` and closes; the sandbox's connection stays open for the next request.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let headers = [("authorization", placeholder.as_str()), ("connection", "keep-alive, x-hop"), ("x-hop", "1")];
        let (status, response_headers, body) = send(&mut sender, get("api.test", "/", &headers)).await;
        assert!(!response_headers.contains("connection"), "{response_headers}");
        statuses.push((status, body));
    }
    drop(sender);
    served.await.unwrap().unwrap();
    assert_eq!(statuses, vec![(StatusCode::OK, b"ok".to_vec()); 3]);
    let headers = vec![("authorization".to_owned(), SECRET.to_owned()), ("host".to_owned(), "api.test".to_owned())];
    let one = Seen { method: "GET".into(), path: "/".into(), headers };
    assert_eq!(*seen.lock().unwrap(), vec![one; 3]);
}
