//! [`Interceptor`]: the proxy's [`Intercept`] for hosts mapped to a secret. It ends the sandbox's TLS as the host
//! (a leaf of this start's [`Ca`]), reads each HTTP/1.1 request, puts the secret in its headers or target
//! ([`rewrite`]) and forwards it over a TLS connection of its own to the host's real server, streaming bodies both
//! ways.
//!
//! Invariants: a secret goes only to the addresses the proxy resolved for its mapped host, over TLS verified as the
//! host (SNI and certificate); the sandbox must name that host (SNI, and `Host` or an absolute target when sent) or
//! is refused, so it cannot steer a secret elsewhere by fronting; a connection the sandbox opens in plain text to a
//! mapped host fails its TLS handshake and carries nothing. Logs name the host and the variable that got a secret, never a value.
//! Not supported: protocol upgrades (WebSocket) and HTTP/2 to the sandbox (ALPN offers `http/1.1` only).

use super::ca::Ca;
use super::counting::Counting;
use super::host::normalize;
use super::rewrite;
use super::spec::Credential;
use super::upstream;
use crate::intercept::{Carried, Intercept};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::ClientConfig;
use rustls::server::Acceptor;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_rustls::LazyConfigAcceptor;

/// How long the sandbox gets to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves connections to mapped hosts; made by [`super::Credentials::new`].
pub struct Interceptor {
    credentials: Vec<Arc<Credential>>,
    ca: Arc<Ca>,
    upstream: Arc<ClientConfig>,
}

impl Interceptor {
    pub(super) fn new(credentials: Vec<Arc<Credential>>, ca: Arc<Ca>, upstream: Arc<ClientConfig>) -> Self {
        Self { credentials, ca, upstream }
    }

    /// The credentials mapped to `host`.
    fn mapped(&self, host: &str) -> Vec<Arc<Credential>> {
        self.credentials.iter().filter(|credential| credential.host.matches(host)).cloned().collect()
    }
}

#[async_trait::async_trait]
impl Intercept for Interceptor {
    fn wants(&self, host: &str, _port: u16) -> bool {
        self.credentials.iter().any(|credential| credential.host.matches(host))
    }

    async fn serve(&self, client: TcpStream, host: &str, port: u16, upstream: &[SocketAddr]) -> io::Result<Carried> {
        let credentials = self.mapped(host);
        if credentials.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no credential is mapped to the host"));
        }
        let host = normalize(host);
        let _ = client.set_nodelay(true);
        let (client, counts) = Counting::new(client);
        let carried =
            || Carried { sent: counts.read.load(Ordering::Relaxed), received: counts.written.load(Ordering::Relaxed) };
        let start = within(LazyConfigAcceptor::new(Acceptor::default(), client)).await?;
        let sni = start.client_hello().server_name().map(normalize);
        if sni.as_deref() != Some(host.as_str()) {
            tracing::warn!(host = ?host, sni = ?sni, "egress: refused a connection whose TLS name is not the host's");
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "the TLS server name is not the host's"));
        }
        let config = self.ca.server_config(&host).map_err(io::Error::other)?;
        let tls = within(start.into_stream(config)).await?;
        let session = Arc::new(Session {
            host: host.clone(),
            credentials,
            addresses: upstream.to_vec(),
            config: self.upstream.clone(),
            sender: Mutex::new(None),
            requests: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        });
        let service = {
            let session = session.clone();
            hyper::service::service_fn(move |request| {
                let session = session.clone();
                async move { Ok::<_, Infallible>(session.forward(request).await) }
            })
        };
        // With a timer, hyper's default header read timeout (30 s) holds: a sandbox cannot keep a half-sent request
        // open to hold a connection of the proxy.
        let served = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .serve_connection(TokioIo::new(tls), service)
            .await;
        if let Err(error) = served {
            tracing::debug!(host = ?host, port, %error, "egress: an intercepted connection ended in error");
        }
        let carried = carried();
        tracing::info!(
            host = ?host,
            port,
            requests = session.requests.load(Ordering::Relaxed),
            with_secret = session.injected.load(Ordering::Relaxed),
            sent = carried.sent,
            received = carried.received,
            "egress: intercepted connection closed"
        );
        Ok(carried)
    }
}

/// One intercepted connection: its host, credentials and connection to the host (made at the first request, and
/// again when the host closed it).
struct Session {
    host: String,
    credentials: Vec<Arc<Credential>>,
    addresses: Vec<SocketAddr>,
    config: Arc<ClientConfig>,
    sender: Mutex<Option<SendRequest<Incoming>>>,
    requests: AtomicU64,
    injected: AtomicU64,
}

impl Session {
    async fn forward(&self, mut request: Request<Incoming>) -> Response<Body> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        // A server that hosts many names (a CDN) routes by `Host`, or by the authority of an absolute-form target:
        // either naming another host would take the secret to that host's origin.
        let host_header = request.headers().get(header::HOST).map(|value| value.as_bytes());
        let authority = request.uri().authority().map(|authority| authority.as_str().as_bytes());
        if [host_header, authority].into_iter().flatten().any(|named| !names_host(named, &self.host)) {
            tracing::warn!(host = ?self.host, "egress: refused a request whose Host is not the connection's host");
            return refusal(StatusCode::MISDIRECTED_REQUEST, "the request's Host is not the connection's host");
        }
        if request.headers().contains_key(header::UPGRADE) {
            return refusal(StatusCode::NOT_IMPLEMENTED, "protocol upgrades are not supported to this host");
        }
        strip_hop_by_hop(request.headers_mut());
        let credentials: Vec<&Credential> = self.credentials.iter().map(Arc::as_ref).collect();
        let mut injected = rewrite::request(request.headers_mut(), &credentials);
        if let Some(target) = rewrite::target(request.uri(), &credentials) {
            *request.uri_mut() = target;
            injected += 1;
        }
        if injected > 0 {
            self.injected.fetch_add(1, Ordering::Relaxed);
            let variables: Vec<&str> =
                credentials.iter().map(|credential| credential.placeholder_env.as_str()).collect();
            tracing::info!(host = ?self.host, credentials = ?variables, "egress: secret put in a request");
        }
        match self.send(request).await {
            Ok(response) => {
                let mut response = response.map(BodyExt::boxed);
                strip_hop_by_hop(response.headers_mut());
                rewrite::response(response.headers_mut(), &credentials);
                response
            }
            Err(error) => {
                tracing::warn!(host = ?self.host, %error, "egress: the host could not be reached");
                refusal(StatusCode::BAD_GATEWAY, "the host could not be reached")
            }
        }
    }

    /// Sends `request` on the connection to the host, opening one when there is none or the host closed it. A
    /// kept-alive connection the host closed while idle may still look open: hyper then gives the request back
    /// unsent, and it goes once more on a new connection.
    async fn send(&self, mut request: Request<Incoming>) -> io::Result<Response<Incoming>> {
        let mut slot = self.sender.lock().await;
        let mut retried = false;
        loop {
            let sender = match slot.take() {
                Some(open) if !open.is_closed() => open,
                _ => self.connect().await?,
            };
            let sender = slot.insert(sender);
            let error = match sender.ready().await {
                Err(error) => error,
                Ok(()) => match sender.try_send_request(request).await {
                    Ok(response) => return Ok(response),
                    Err(mut failed) => match failed.take_message() {
                        Some(unsent) => {
                            request = unsent;
                            failed.into_error()
                        }
                        None => return Err(io::Error::other(failed.into_error())),
                    },
                },
            };
            *slot = None;
            if retried {
                return Err(io::Error::other(error));
            }
            retried = true;
            tracing::debug!(host = ?self.host, %error, "egress: the connection to the host was closed; reopening it");
        }
    }

    async fn connect(&self) -> io::Result<SendRequest<Incoming>> {
        let tls = upstream::connect(&self.config, &self.host, &self.addresses).await?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(io::Error::other)?;
        let host = self.host.clone();
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(host = ?host, %error, "egress: the connection to the host ended in error");
            }
        });
        Ok(sender)
    }
}

/// Removes the headers that describe one hop, not the message (RFC 9110, 7.6.1): the sandbox's connection to the
/// interceptor and the interceptor's to the host are separate, each kept alive or closed on its own.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [header::CONNECTION, header::TE, header::TRAILER, header::PROXY_AUTHORIZATION] {
        headers.remove(name);
    }
    for name in ["keep-alive", "proxy-connection"] {
        headers.remove(name);
    }
}

/// Whether a `Host` header value names `host` (any port).
fn names_host(value: &[u8], host: &str) -> bool {
    let Ok(value) = std::str::from_utf8(value) else { return false };
    let name = match value.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => value,
    };
    normalize(name) == host
}

fn refusal(status: StatusCode, message: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(format!("sandlot egress: {message}\n"))).map_err(|never| match never {}).boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
    response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    response
}

async fn within<T>(future: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, future)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the sandbox's TLS handshake timed out"))?
}
