//! What a run may reach beyond its loopback: the server's egress policy (`sandlot_egress`), narrowed by the run's
//! own. A server without a policy gives every run loopback only, and a run cannot ask for more; with one, every run
//! is on the server's leash unless it narrows it (never widens: a connection must pass every layer).

use std::sync::Arc;

use sandlot_egress::{Leash, Policy, PolicySpec};

use crate::{Error, Result};

/// A run's `network` argument.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NetworkUse {
    /// The server's policy as it is (loopback only on a server without one).
    #[default]
    Server,
    /// The server's policy narrowed by this one. One that allows nothing leaves the run loopback only in effect
    /// (every connection is refused, and recorded).
    Narrowed(PolicySpec),
}

/// A run's network as the backend gets it: its leash, and whose run it is (for the audit trail).
#[derive(Debug, Clone)]
pub struct JobNetwork {
    pub leash: Leash,
    /// What the run asked for (a live sandbox keeps its first call's, and refuses a call that asks otherwise).
    pub asked: NetworkUse,
    pub tenant: String,
    pub conversation: String,
}

/// The leash of a run that asks for `wanted` on a server whose policy is `server`: `None`, loopback only.
pub fn leash_for(server: Option<&Arc<Policy>>, wanted: &NetworkUse) -> Result<Option<Leash>> {
    match (server, wanted) {
        (None, NetworkUse::Server) => Ok(None),
        (None, NetworkUse::Narrowed(_)) => Err(Error::invalid(
            "network",
            "this server has no egress policy, so its runs reach loopback only (an operator sets SANDLOT_EGRESS_POLICY)",
        )),
        (Some(server), NetworkUse::Server) => Ok(Some(Leash::new(server.clone()))),
        (Some(server), NetworkUse::Narrowed(spec)) => {
            let own = Policy::parse(spec).map_err(|e| Error::invalid("network", e.to_string()))?;
            Ok(Some(Leash::new(server.clone()).narrowed(Arc::new(own))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_without_a_policy_refuses_a_run_that_asks() {
        assert!(leash_for(None, &NetworkUse::Server).expect("loopback only").is_none());
        let error = leash_for(None, &NetworkUse::Narrowed(PolicySpec::default())).expect_err("refused");
        assert!(error.to_string().contains("no egress policy"), "{error}");
    }
}
