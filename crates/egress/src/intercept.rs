//! The hook between the proxy and credential injection: for a host an operator mapped to a secret, the proxy
//! hands the sandbox's connection to an [`Intercept`] instead of splicing it to the host.

use std::net::SocketAddr;
use tokio::net::TcpStream;

/// What a connection through an [`Intercept`] carried: bytes from the sandbox, and to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    pub sent: u64,
    pub received: u64,
}

#[async_trait::async_trait]
pub trait Intercept: Send + Sync {
    /// Whether connections to `host:port` go through [`Intercept::serve`].
    fn wants(&self, host: &str, port: u16) -> bool;

    /// Serves the sandbox's connection `client` (its first bytes, a TLS ClientHello, still unread) for `host`,
    /// talking to the host at `upstream` (addresses already resolved and checked against the policy).
    async fn serve(
        &self,
        client: TcpStream,
        host: &str,
        port: u16,
        upstream: &[SocketAddr],
    ) -> std::io::Result<Carried>;
}
