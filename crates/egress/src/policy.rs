//! The egress policy: which hosts, addresses and ports a sandbox may reach. (Skeleton: the egress-proxy helper
//! implements it; the signatures are the contract.)
//!
//! Rules are strings: `pypi.org` (that name), `*.pythonhosted.org` (any name under it, not itself),
//! `10.0.0.0/8` (addresses), each with an optional `:port` or `:port-port` (no port: 80 and 443). Deny wins over
//! allow; nothing is allowed that no allow rule names. A [`Leash`] is the server's policy narrowed by a tenant's
//! or a run's: a connection passes only if every layer allows it, so a run can narrow but never widen.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::Arc;

/// A policy as written: in the server's configuration (JSON), or a run's `network` argument.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
}

/// A parsed policy.
#[derive(Debug)]
pub struct Policy {}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

impl Policy {
    /// Parses every rule, or says which one is wrong and why.
    pub fn parse(_spec: &PolicySpec) -> Result<Policy, PolicyError> {
        todo!("egress-proxy helper")
    }
}

/// What a policy says of one destination, and why (the rule, for the audit trail).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub reason: String,
}

/// The server's policy, narrowed by zero or more others.
#[derive(Clone, Debug)]
pub struct Leash {
    pub layers: Vec<Arc<Policy>>,
}

impl Leash {
    pub fn new(server: Arc<Policy>) -> Self {
        Self { layers: vec![server] }
    }

    /// This leash narrowed by `policy`.
    pub fn narrowed(&self, policy: Arc<Policy>) -> Self {
        let mut layers = self.layers.clone();
        layers.push(policy);
        Self { layers }
    }

    /// Whether a connection to `host` (a name, when the sandbox named one) at `address` (when known) and `port`
    /// may be made.
    pub fn check(&self, _host: Option<&str>, _address: Option<IpAddr>, _port: u16) -> Verdict {
        todo!("egress-proxy helper")
    }
}
