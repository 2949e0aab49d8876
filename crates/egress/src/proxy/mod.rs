//! The proxy every leashed sandbox's TCP connection ends at, on the gateway.
//!
//! Two kinds of listener ([`Proxy::serve_explicit`], [`Proxy::serve_transparent`]); the sandbox behind a
//! connection is the registered one whose link address is the peer's, and a connection from any other address is
//! closed unread. Each connection is checked against the sandbox's leash ([`upstream`]), spliced to the host
//! ([`splice`]) or handed to the credential interceptor, and recorded once when it ends ([`tracker`]), allowed or
//! not. Per sandbox: at most `Leashed::connections` at once (more are refused, not queued) and
//! `Leashed::bytes_per_second` each way for all its connections together ([`bandwidth`]).
//!
//! The gateway catches transparent connections on 80, 443 and every port the server's policy names singly, at
//! most [`MAX_TRANSPARENT_PORTS`] listeners; a port range in a rule is reachable through the explicit proxy only.

mod explicit;
mod reply;
pub mod sniff;
mod splice;
mod tracker;
mod transparent;
mod upstream;

pub use reply::VERDICT_HEADER;

use crate::intercept::Intercept;
use crate::registry::Registry;
use crate::resolver::Resolver;
use crate::synthetic::Synthetic;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// The explicit proxy's port on the gateway.
pub const EXPLICIT_PORT: u16 = 3128;

/// The most ports the gateway catches connections on (each a listener).
pub const MAX_TRANSPARENT_PORTS: usize = 64;

/// The reason of a connection over the sandbox's cap.
const CAPPED: &str = "the sandbox has as many connections open as it may";

/// The proxy of one server.
pub struct Proxy {
    registry: Arc<Registry>,
    synthetic: Arc<Synthetic>,
    resolver: Resolver,
    intercept: Option<Arc<dyn Intercept>>,
}

impl Proxy {
    pub fn new(
        registry: Arc<Registry>,
        synthetic: Arc<Synthetic>,
        resolver: Resolver,
        intercept: Option<Arc<dyn Intercept>>,
    ) -> Arc<Self> {
        Arc::new(Self { registry, synthetic, resolver, intercept })
    }

    /// Serves `listener` as the explicit proxy (`CONNECT` and absolute-URL HTTP) until the task is dropped.
    pub async fn serve_explicit(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Some((stream, _)) = accept(&listener).await else { continue };
            tokio::spawn(self.clone().explicit(stream));
        }
    }

    /// Serves `listener` as a transparent catch (the destination is each connection's local address) until the
    /// task is dropped.
    pub async fn serve_transparent(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Some((stream, destination)) = accept(&listener).await else { continue };
            tokio::spawn(self.clone().transparent(stream, destination));
        }
    }

    /// Serves one connection to the explicit proxy's port.
    pub async fn explicit(self: Arc<Self>, stream: TcpStream) {
        let Some(leashed) = stream.peer_addr().ok().and_then(|peer| self.registry.get(peer.ip())) else { return };
        explicit::serve(self, stream, leashed).await;
    }

    /// Serves one caught connection the sandbox made to `destination`.
    pub async fn transparent(self: Arc<Self>, stream: TcpStream, destination: SocketAddr) {
        let Some(leashed) = stream.peer_addr().ok().and_then(|peer| self.registry.get(peer.ip())) else { return };
        transparent::serve(self, stream, leashed, destination).await;
    }
}

/// The next connection and the address it was made to; `None` after a failure (the listener goes on).
async fn accept(listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    match listener.accept().await {
        Ok((stream, _)) => {
            let _ = stream.set_nodelay(true);
            let local = stream.local_addr().ok()?;
            Some((stream, local))
        }
        Err(error) => {
            // Out of descriptors, most likely: wait a little rather than spin.
            tracing::warn!(%error, "egress proxy: accept failed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}
