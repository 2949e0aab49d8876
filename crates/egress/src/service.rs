//! [`Egress`]: the proxy, the DNS responder and the gateway of one server, and what each leashed sandbox gets.
//! (Skeleton: the egress-proxy helper implements it; the signatures are the contract.)

use crate::audit::ConnectionRecord;
use crate::policy::{Leash, Policy, PolicySpec};
use crate::registry::Owner;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// How the operator configured egress.
#[derive(Clone, Debug, Default)]
pub struct EgressConfig {
    /// The server's policy; every leash is this, narrowed.
    pub policy: PolicySpec,
    /// Where the proxy resolves names on the host: `None`, the host's own resolver configuration.
    pub nameservers: Option<Vec<SocketAddr>>,
    /// Connections open at once per sandbox.
    pub max_connections: usize,
    /// Bytes per second each way per sandbox (0: no cap).
    pub bytes_per_second: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("invalid egress policy: {0}")]
    Policy(#[from] crate::policy::PolicyError),
    #[error("egress network: {0}")]
    Network(#[from] std::io::Error),
}

/// One server's egress.
pub struct Egress {}

impl Egress {
    /// Makes the gateway, starts the proxy and the DNS responder on the current tokio runtime.
    pub async fn start(_config: EgressConfig) -> Result<Arc<Egress>, EgressError> {
        todo!("egress-proxy helper")
    }

    /// The server's policy, to narrow with a tenant's or a run's.
    pub fn policy(&self) -> Arc<Policy> {
        todo!("egress-proxy helper")
    }

    /// A network for one sandbox on `leash` (blocking: it talks to the kernel; call it off async threads).
    pub fn leash(&self, _leash: Leash, _owner: Owner) -> Result<SandboxNetwork, EgressError> {
        todo!("egress-proxy helper")
    }
}

/// What a leashed sandbox gets. Dropping it unregisters the sandbox and removes its link.
pub struct SandboxNetwork {}

impl SandboxNetwork {
    /// The namespace the sandbox's init joins.
    pub fn netns(&self) -> &OwnedFd {
        todo!("egress-proxy helper")
    }

    /// The gateway's address: the sandbox's proxy (`http://<it>:3128`) and name server.
    pub fn gateway(&self) -> Ipv4Addr {
        todo!("egress-proxy helper")
    }

    /// The proxy variables every run in the sandbox gets (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`, lower case too).
    pub fn environment(&self) -> Vec<(String, String)> {
        todo!("egress-proxy helper")
    }

    /// The sandbox's `/etc/resolv.conf`.
    pub fn resolv_conf(&self) -> String {
        todo!("egress-proxy helper")
    }

    /// Says which run is now running in the sandbox (records made from here on name it).
    pub fn set_run(&self, _run_id: Option<String>) {
        todo!("egress-proxy helper")
    }

    /// The connections recorded since the last take, and how many were dropped (see [`crate::audit::AuditLog`]).
    pub fn take_connections(&self) -> (Vec<ConnectionRecord>, u64) {
        todo!("egress-proxy helper")
    }
}
