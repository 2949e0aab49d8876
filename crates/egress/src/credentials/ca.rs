//! [`Ca`]: the certificate authority of one server start, which the sandbox trusts so that the proxy can speak TLS
//! to it as the mapped hosts.
//!
//! Made at start with rcgen; its key lives in this process's memory only, is never written and dies with the
//! server, so a certificate it signed is good only against this start's sandboxes. Its name constraints permit only
//! the mapped hosts' subtrees: even with its key, no certificate it signs is valid for another name. Leaf
//! certificates (one key each) are made on demand per host the sandbox names, and kept in a bounded cache.

use super::error::Result;
use super::host::{HostPattern, normalize};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, GeneralSubtree, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use time::OffsetDateTime;

/// The host's bundle of trusted authorities (Debian's `ca-certificates`).
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Leaf certificates kept at once: a wildcard mapping lets a sandbox name any number of hosts.
const LEAVES: usize = 256;

/// How long a leaf is served before a new one is made; it is valid for [`LEAF_VALIDITY`], far longer.
const LEAF_REFRESH: Duration = Duration::from_secs(7 * 24 * 3600);
const LEAF_VALIDITY: time::Duration = time::Duration::days(90);

/// The variables that point the common clients at a trust bundle (see [`Ca::trust_bundle_pem`]): OpenSSL and
/// Python's `ssl`, `requests`, curl, Node (which adds the file to its own roots), pip, git, cargo, the AWS SDKs and
/// Deno.
pub const TRUST_VARIABLES: [&str; 9] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "AWS_CA_BUNDLE",
    "DENO_CERT",
];

/// Each of [`TRUST_VARIABLES`] set to `bundle_path`, the trust bundle's path inside the sandbox.
pub fn trust_environment(bundle_path: &str) -> Vec<(String, String)> {
    TRUST_VARIABLES.iter().map(|name| (name.to_string(), bundle_path.to_owned())).collect()
}

/// One server start's authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    provider: Arc<CryptoProvider>,
    leaves: Mutex<Leaves>,
}

#[derive(Default)]
struct Leaves {
    configs: HashMap<String, (Arc<ServerConfig>, Instant)>,
    /// Insertion order, to drop the oldest when full.
    order: VecDeque<String>,
}

impl Ca {
    /// A new authority for names in `hosts`' subtrees.
    pub fn new(hosts: &[&HostPattern], provider: Arc<CryptoProvider>) -> Result<Ca> {
        let mut id = [0u8; 8];
        getrandom::fill(&mut id)?;
        let now = OffsetDateTime::now_utc();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, "sandlot");
        params.distinguished_name.push(DnType::CommonName, format!("sandlot egress CA {}", hex::encode(id)));
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(3650);
        let mut subtrees: Vec<String> = hosts.iter().map(|host| host.subtree().to_owned()).collect();
        subtrees.sort();
        subtrees.dedup();
        if subtrees.is_empty() {
            // Nothing mapped: a subtree no name is in (RFC 6761 reserves `invalid`) rather than none, which would
            // permit every name.
            subtrees.push("invalid".to_owned());
        }
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: subtrees.into_iter().map(GeneralSubtree::DnsName).collect(),
            excluded_subtrees: Vec::new(),
        });
        let key = KeyPair::generate()?;
        let pem = params.self_signed(&key)?.pem();
        Ok(Ca { issuer: Issuer::new(params, key), pem, provider, leaves: Mutex::default() })
    }

    /// This authority's certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.pem
    }

    /// What the sandbox trusts: the host's own bundle ([`SYSTEM_BUNDLE`], when there is one) then this authority,
    /// so a sandbox still reaches hosts the proxy does not intercept.
    pub fn trust_bundle_pem(&self) -> String {
        let mut bundle = std::fs::read_to_string(Path::new(SYSTEM_BUNDLE)).unwrap_or_default();
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(&self.pem);
        bundle
    }

    /// The TLS configuration that serves `host` (ALPN `http/1.1` only: the proxy speaks HTTP/1.1).
    pub fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>> {
        let host = normalize(host);
        if let Some((config, made)) = self.lock().configs.get(&host)
            && made.elapsed() < LEAF_REFRESH
        {
            return Ok(config.clone());
        }
        let config = Arc::new(self.leaf_config(&host)?);
        let mut leaves = self.lock();
        if leaves.configs.insert(host.clone(), (config.clone(), Instant::now())).is_none() {
            leaves.order.push_back(host);
            while leaves.order.len() > LEAVES {
                if let Some(oldest) = leaves.order.pop_front() {
                    leaves.configs.remove(&oldest);
                }
            }
        }
        Ok(config)
    }

    fn leaf_config(&self, host: &str) -> Result<ServerConfig> {
        let now = OffsetDateTime::now_utc();
        let mut params = CertificateParams::new(vec![host.to_owned()])?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + LEAF_VALIDITY;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Leaves> {
        // A panic while holding the lock leaves the cache consistent (every step is one map or queue call).
        self.leaves.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use rustls::pki_types::pem::PemObject;

    fn authority(hosts: &[&str]) -> Ca {
        let patterns: Vec<HostPattern> = hosts.iter().map(|host| HostPattern::parse(host).unwrap()).collect();
        let patterns: Vec<&HostPattern> = patterns.iter().collect();
        Ca::new(&patterns, Arc::new(rustls::crypto::ring::default_provider())).unwrap()
    }

    /// Whether a client trusting `ca` alone completes a handshake with its leaf for `host`.
    async fn trusted(ca: &Ca, host: &str) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.ca_pem().as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let client = rustls::ClientConfig::builder_with_provider(ca.provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (near, far) = tokio::io::duplex(64 * 1024);
        let server = tokio_rustls::TlsAcceptor::from(ca.server_config(host).unwrap());
        let serving = tokio::spawn(async move { server.accept(far).await.is_ok() });
        let name = ServerName::try_from(host.to_owned()).unwrap();
        let connected = tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, near).await.is_ok();
        let _ = serving.await;
        connected
    }

    #[tokio::test]
    async fn leaves_are_trusted_for_mapped_names_only() {
        let ca = authority(&["api.example.com", "*.corp.test"]);
        assert!(trusted(&ca, "api.example.com").await);
        assert!(trusted(&ca, "git.corp.test").await);
        // Even signed by this authority, a leaf for another name fails: the name constraints hold it.
        assert!(!trusted(&ca, "www.example.com").await);
        assert!(!trusted(&ca, "bank.test").await);
        assert!(!trusted(&authority(&[]), "anything.test").await);
    }

    #[test]
    fn leaves_are_cached_and_the_cache_is_bounded() {
        let ca = authority(&["*.example.com"]);
        let first = ca.server_config("a.example.com").unwrap();
        assert!(Arc::ptr_eq(&first, &ca.server_config("A.example.com.").unwrap()));
        for i in 0..LEAVES {
            ca.server_config(&format!("h{i}.example.com")).unwrap();
        }
        let leaves = ca.lock();
        assert_eq!((leaves.configs.len(), leaves.order.len()), (LEAVES, LEAVES));
        assert!(!leaves.configs.contains_key("a.example.com"));
    }

    #[test]
    fn the_trust_bundle_is_the_system_bundle_then_this_authority() {
        let ca = authority(&["api.example.com"]);
        let system = std::fs::read_to_string(SYSTEM_BUNDLE).unwrap();
        let bundle = ca.trust_bundle_pem();
        assert!(bundle.starts_with(&system) && bundle.ends_with(ca.ca_pem()));
        assert!(!ca.ca_pem().contains("PRIVATE KEY"));
    }
}
