//! [`Egress`]: the proxy, the DNS responder and the gateway of one server, and what each leashed sandbox gets.
//!
//! Started once per server when the operator sets a policy: the gateway namespace (capturing the synthetic range
//! and the address ranges the policy allows), the explicit proxy on [`EXPLICIT_PORT`], a transparent catch on
//! each of the policy's single ports (80, 443 and the ports rules name, at most [`MAX_TRANSPARENT_PORTS`]), the
//! name server on 53 (UDP and TCP), all inside the gateway and served on the current tokio runtime until the
//! [`Egress`] is dropped.

use crate::audit::ConnectionRecord;
use crate::credentials::{CredentialSpec, Credentials};
use crate::dns::Responder;
use crate::intercept::Intercept;
use crate::network::{Gateway, Link};
use crate::policy::{Leash, Policy, PolicySpec};
use crate::proxy::{EXPLICIT_PORT, MAX_TRANSPARENT_PORTS, Proxy};
use crate::registry::{Leashed, Owner, Registry};
use crate::resolver::Resolver;
use crate::synthetic::Synthetic;
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use tokio::task::AbortHandle;

/// The name server's port on the gateway.
pub const DNS_PORT: u16 = 53;

/// How the operator configured egress.
#[derive(Clone)]
pub struct EgressConfig {
    /// The server's policy; every leash is this, narrowed.
    pub policy: PolicySpec,
    /// Where the proxy resolves names on the host: `None`, the host's own resolver configuration.
    pub nameservers: Option<Vec<SocketAddr>>,
    /// Connections open at once per sandbox (default 64).
    pub max_connections: usize,
    /// Bytes per second each way per sandbox (0: no cap).
    pub bytes_per_second: u64,
    /// Credential injection: connections to the hosts it wants go to it instead of being spliced. Made from
    /// `credentials` when they are given.
    pub intercept: Option<Arc<dyn Intercept>>,
    /// Hosts mapped to secrets (see [`crate::credentials`]): a sandbox gets placeholders and trusts this start's
    /// authority, the proxy puts the secrets in on requests to those hosts only.
    pub credentials: Vec<CredentialSpec>,
    /// Authorities (PEM) the proxy trusts for those hosts' servers besides the system's.
    pub upstream_roots_pem: Option<String>,
    /// A directory of the host's for the sandboxes' trust bundle (the system's authorities and this start's), which
    /// the backend binds read-only at the same path in every leashed sandbox. Needed with `credentials`.
    pub trust_dir: Option<std::path::PathBuf>,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            policy: PolicySpec::default(),
            nameservers: None,
            max_connections: 64,
            bytes_per_second: 0,
            intercept: None,
            credentials: Vec::new(),
            upstream_roots_pem: None,
            trust_dir: None,
        }
    }
}

impl std::fmt::Debug for EgressConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("EgressConfig")
            .field("policy", &self.policy)
            .field("nameservers", &self.nameservers)
            .field("max_connections", &self.max_connections)
            .field("bytes_per_second", &self.bytes_per_second)
            .field("intercept", &self.intercept.is_some())
            .field("credentials", &self.credentials.len())
            .field("trust_dir", &self.trust_dir)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("invalid egress policy: {0}")]
    Policy(#[from] crate::policy::PolicyError),
    #[error("egress network: {0}")]
    Network(#[from] std::io::Error),
    #[error("egress credentials: {0}")]
    Credentials(#[from] crate::credentials::CredentialError),
    #[error("egress credentials: {0}")]
    TrustBundle(String),
}

/// One server's egress.
pub struct Egress {
    policy: Arc<Policy>,
    captured: Vec<IpNet>,
    registry: Arc<Registry>,
    gateway: Gateway,
    max_connections: usize,
    bytes_per_second: u64,
    /// What every leashed sandbox's processes get besides the proxy variables: the credentials' placeholders and
    /// where the trust bundle is.
    sandbox_environment: Vec<(String, String)>,
    trust_dir: Option<std::path::PathBuf>,
    tasks: Vec<AbortHandle>,
}

impl Egress {
    /// Makes the gateway, starts the proxy and the DNS responder on the current tokio runtime.
    pub async fn start(config: EgressConfig) -> Result<Arc<Egress>, EgressError> {
        let policy = Arc::new(Policy::parse(&config.policy)?);
        let captured = policy.captured();
        let gateway = Gateway::create(&captured)?;
        let registry = Arc::new(Registry::default());
        let synthetic = Arc::new(Synthetic::new());
        let resolver = Resolver::new(config.nameservers.as_deref())?;
        let (intercept, sandbox_environment) = credentials(&config)?;
        let proxy = Proxy::new(registry.clone(), synthetic.clone(), resolver, intercept);
        let responder = Responder::new(registry.clone(), synthetic);
        let any = |port| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
        let tcp = |port| -> std::io::Result<tokio::net::TcpListener> {
            tokio::net::TcpListener::from_std(gateway.tcp_listener(any(port))?)
        };
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(proxy.clone().serve_explicit(tcp(EXPLICIT_PORT)?)).abort_handle());
        for port in transparent_ports(&policy) {
            tasks.push(tokio::spawn(proxy.clone().serve_transparent(tcp(port)?)).abort_handle());
        }
        // Bound to the service address, not 0.0.0.0: a UDP answer must come from the address it was asked at, and
        // one bound to any address would answer from the link's.
        let service = SocketAddr::new(crate::SERVICE_ADDRESS.into(), DNS_PORT);
        let udp = tokio::net::UdpSocket::from_std(gateway.udp_socket(service)?)?;
        tasks.push(tokio::spawn(responder.clone().serve_udp(udp)).abort_handle());
        tasks.push(tokio::spawn(responder.serve_tcp(tcp(DNS_PORT)?)).abort_handle());
        Ok(Arc::new(Egress {
            policy,
            captured,
            registry,
            gateway,
            max_connections: config.max_connections,
            bytes_per_second: config.bytes_per_second,
            sandbox_environment,
            trust_dir: config.trust_dir.filter(|_| !config.credentials.is_empty()),
            tasks,
        }))
    }

    /// The directory holding the sandboxes' trust bundle, to bind read-only at the same path in every leashed
    /// sandbox; `None` without credentials.
    pub fn trust_dir(&self) -> Option<&std::path::Path> {
        self.trust_dir.as_deref()
    }

    /// The server's policy, to narrow with a tenant's or a run's.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.clone()
    }

    /// A network for one sandbox on `leash` (blocking: it talks to the kernel; call it off async threads).
    pub fn leash(&self, leash: Leash, owner: Owner) -> Result<SandboxNetwork, EgressError> {
        let link = self.gateway.link(&self.captured)?;
        let leashed = Arc::new(Leashed::new(leash, owner, self.max_connections, self.bytes_per_second));
        self.registry.insert(IpAddr::V4(link.sandbox), leashed.clone());
        let environment = self.sandbox_environment.clone();
        Ok(SandboxNetwork { link, leashed, registry: self.registry.clone(), environment })
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The interceptor and the sandboxes' extra variables for `config`'s credentials (none: the configured
/// interceptor, if any, and no variable). Writes the trust bundle into `trust_dir`.
fn credentials(config: &EgressConfig) -> Result<(Option<Arc<dyn Intercept>>, Vec<(String, String)>), EgressError> {
    if config.credentials.is_empty() {
        return Ok((config.intercept.clone(), Vec::new()));
    }
    let credentials = Credentials::new(&config.credentials, config.upstream_roots_pem.as_deref())?;
    let dir = config.trust_dir.as_ref().ok_or_else(|| EgressError::TrustBundle("no directory for the trust bundle".into()))?;
    let bundle = dir.join(TRUST_BUNDLE);
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)))
        .and_then(|()| std::fs::write(&bundle, credentials.trust_bundle_pem()))
        .and_then(|()| std::fs::set_permissions(&bundle, std::os::unix::fs::PermissionsExt::from_mode(0o644)));
    written.map_err(|e| EgressError::TrustBundle(format!("write {}: {e}", bundle.display())))?;
    let mut variables = credentials.environment();
    variables.extend(crate::credentials::trust_environment(&bundle.to_string_lossy()));
    let intercept: Arc<dyn Intercept> = credentials.interceptor();
    Ok((Some(intercept), variables))
}

/// The trust bundle's file name in `trust_dir`.
pub const TRUST_BUNDLE: &str = "ca-bundle.pem";

/// The ports the gateway catches: the policy's single ports less the proxy's and the name server's own, at most
/// [`MAX_TRANSPARENT_PORTS`] (80 and 443 always among them; past the cap, the lowest others; a warning says so).
pub fn transparent_ports(policy: &Policy) -> Vec<u16> {
    let mut ports: Vec<u16> =
        policy.single_ports().into_iter().filter(|port| *port != EXPLICIT_PORT && *port != DNS_PORT).collect();
    if ports.len() > MAX_TRANSPARENT_PORTS {
        tracing::warn!(
            ports = ports.len(),
            cap = MAX_TRANSPARENT_PORTS,
            "egress: more single ports than the gateway catches; the rest are reachable through the proxy only"
        );
        let others: Vec<u16> = ports.iter().copied().filter(|port| *port != 80 && *port != 443).collect();
        ports = vec![80, 443];
        ports.extend(others.into_iter().take(MAX_TRANSPARENT_PORTS - 2));
        ports.sort_unstable();
    }
    ports
}

/// What a leashed sandbox gets. Dropping it unregisters the sandbox and removes its link.
pub struct SandboxNetwork {
    link: Link,
    leashed: Arc<Leashed>,
    registry: Arc<Registry>,
    /// Besides the proxy variables (see [`Egress`]'s `sandbox_environment`).
    environment: Vec<(String, String)>,
}

impl SandboxNetwork {
    /// The namespace the sandbox's init joins.
    pub fn netns(&self) -> &OwnedFd {
        self.link.netns()
    }

    /// The gateway's address: the sandbox's proxy (`http://<it>:3128`) and name server.
    pub fn gateway(&self) -> Ipv4Addr {
        self.link.gateway
    }

    /// The proxy variables every run in the sandbox gets (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`, lower case too),
    /// at [`crate::SERVICE_ADDRESS`], the same for every sandbox.
    pub fn environment(&self) -> Vec<(String, String)> {
        let mut variables = environment(crate::SERVICE_ADDRESS);
        variables.extend(self.environment.iter().cloned());
        variables
    }

    /// The sandbox's `/etc/resolv.conf` (the jail's skeleton holds the same: [`crate::SERVICE_ADDRESS`]).
    pub fn resolv_conf(&self) -> String {
        resolv_conf(crate::SERVICE_ADDRESS)
    }

    /// Waits until none of the sandbox's connections is open (at most `limit`): a run's last connections are
    /// recorded when they close, which is after its processes are gone.
    pub async fn settle(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.leashed.open_connections() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Says which run is now running in the sandbox (records made from here on name it).
    pub fn set_run(&self, run_id: Option<String>) {
        self.leashed.owner.set_run_id(run_id);
    }

    /// The connections recorded since the last take, and how many were dropped (see [`crate::audit::AuditLog`]).
    pub fn take_connections(&self) -> (Vec<ConnectionRecord>, u64) {
        self.leashed.audit.take()
    }

    /// The sandbox as the proxy sees it (its leash, owner, audit trail).
    pub fn leashed(&self) -> &Arc<Leashed> {
        &self.leashed
    }
}

impl Drop for SandboxNetwork {
    fn drop(&mut self) {
        // Unregistered before the link goes (the fields drop after this), so the address is never found while
        // another sandbox could get it.
        self.registry.remove(IpAddr::V4(self.link.sandbox));
    }
}

/// The proxy variables for a sandbox whose gateway is `gateway`. Only HTTP and HTTPS: `ALL_PROXY` would send
/// other protocols to an HTTP proxy that cannot speak them.
pub fn environment(gateway: Ipv4Addr) -> Vec<(String, String)> {
    let proxy = format!("http://{gateway}:{EXPLICIT_PORT}");
    let no_proxy = "localhost,127.0.0.1,::1".to_owned();
    [("HTTP_PROXY", &proxy), ("HTTPS_PROXY", &proxy), ("NO_PROXY", &no_proxy)]
        .into_iter()
        .flat_map(|(name, value)| [(name.to_owned(), value.clone()), (name.to_ascii_lowercase(), value.clone())])
        .collect()
}

/// The `/etc/resolv.conf` of a sandbox whose gateway is `gateway`: its name server, every name absolute.
pub fn resolv_conf(gateway: Ipv4Addr) -> String {
    format!("nameserver {gateway}\noptions ndots:0\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_variables_and_resolv_conf() {
        let gateway = Ipv4Addr::new(100, 127, 0, 0);
        let environment = environment(gateway);
        let get = |name: &str| environment.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str());
        for name in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"] {
            assert_eq!(get(name), Some("http://100.127.0.0:3128"), "{name}");
        }
        assert_eq!(get("NO_PROXY"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(get("no_proxy"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(get("ALL_PROXY"), None);
        assert_eq!(resolv_conf(gateway), "nameserver 100.127.0.0\noptions ndots:0\n");
    }

    #[test]
    fn transparent_ports_are_capped() {
        let many: Vec<String> = (1000..1100).map(|port| format!("host.test:{port}")).collect();
        let policy = Policy::parse(&PolicySpec { allow: many, deny: vec![] }).unwrap();
        let ports = transparent_ports(&policy);
        assert_eq!(ports.len(), MAX_TRANSPARENT_PORTS);
        assert!(ports.contains(&80) && ports.contains(&443));
        let proxy_port =
            Policy::parse(&PolicySpec { allow: vec!["a.test:3128".into(), "a.test:53".into()], deny: vec![] }).unwrap();
        assert_eq!(transparent_ports(&proxy_port), vec![80, 443]);
    }
}
