//! The proxy's side toward a mapped host: TLS to the host's own server, verified as any client would (the host's
//! system roots, plus roots the operator adds, such as a test CA), with SNI the host's name.

use super::error::{CredentialError, Result};
use rustls::ClientConfig;
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// How long one address gets to accept the connection, and then the TLS handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The client configuration for every mapped host: system roots plus `extra_roots_pem`, ALPN `http/1.1`.
pub fn client_config(provider: Arc<CryptoProvider>, extra_roots_pem: Option<&str>) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    // Unreadable system certificates are skipped (as every TLS client does); an extra root that does not parse is
    // the operator's mistake and an error.
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(pem) = extra_roots_pem {
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|error| CredentialError::Roots(error.to_string()))?;
            roots.add(cert).map_err(|error| CredentialError::Roots(error.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(CredentialError::Roots("no certificate in the PEM".into()));
        }
    }
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TLS connection to `host` at the first of `addresses` that answers.
pub async fn connect(
    config: &Arc<ClientConfig>,
    host: &str,
    addresses: &[SocketAddr],
) -> io::Result<TlsStream<TcpStream>> {
    let name =
        ServerName::try_from(host.to_owned()).map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address for the host");
    for address in addresses {
        let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(error)) => {
                last = error;
                continue;
            }
            Err(_) => {
                last = io::Error::new(io::ErrorKind::TimedOut, format!("connecting to {address} timed out"));
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let handshake = TlsConnector::from(config.clone()).connect(name.clone(), tcp);
        return match tokio::time::timeout(CONNECT_TIMEOUT, handshake).await {
            Ok(result) => result,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "the host's TLS handshake timed out")),
        };
    }
    Err(last)
}
