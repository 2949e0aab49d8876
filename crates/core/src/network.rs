//! What a run may reach beyond its loopback: the server's egress policy (`sandlot_egress`), narrowed by its
//! tenant's (when the operator set one) and by the run's own. A server without a policy gives every run loopback
//! only, and a run cannot ask for more; with one, every run is on the server's leash, each narrowing a layer more
//! (never a widening: a connection must pass every layer).

use std::collections::BTreeMap;
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

/// A server's egress policies: its own, and the narrowings of it it gives some tenants.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicies {
    /// `None`: every run reaches loopback only.
    pub server: Option<Arc<Policy>>,
    /// By tenant name (a token's name, a JWT's subject): a layer under the server's policy for that tenant's runs,
    /// live sandboxes and browsers. A tenant not named here has the server's policy as it is.
    pub tenants: BTreeMap<String, Arc<Policy>>,
}

impl EgressPolicies {
    /// The leash of a run of `tenant` (`None`: the engine's single-user callers) that asks for `wanted`: `None`,
    /// loopback only.
    pub fn leash_for(&self, tenant: Option<&str>, wanted: &NetworkUse) -> Result<Option<Leash>> {
        let Some(server) = &self.server else {
            return match wanted {
                NetworkUse::Server => Ok(None),
                NetworkUse::Narrowed(_) => Err(Error::invalid(
                    "network",
                    "this server has no egress policy, so its runs reach loopback only (an operator sets \
                     SANDLOT_EGRESS_POLICY)",
                )),
            };
        };
        let mut leash = Leash::new(server.clone());
        if let Some(own) = tenant.and_then(|tenant| self.tenants.get(tenant)) {
            leash = leash.narrowed(own.clone());
        }
        if let NetworkUse::Narrowed(spec) = wanted {
            let own = Policy::parse(spec).map_err(|e| Error::invalid("network", e.to_string()))?;
            leash = leash.narrowed(Arc::new(own));
        }
        Ok(Some(leash))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> Arc<Policy> {
        let spec = PolicySpec { allow: allow.iter().map(|rule| (*rule).to_owned()).collect(), deny: Vec::new() };
        Arc::new(Policy::parse(&spec).expect("a valid policy"))
    }

    #[test]
    fn a_server_without_a_policy_refuses_a_run_that_asks() {
        let none = EgressPolicies::default();
        assert!(none.leash_for(Some("t"), &NetworkUse::Server).expect("loopback only").is_none());
        let error = none.leash_for(None, &NetworkUse::Narrowed(PolicySpec::default())).expect_err("refused");
        assert!(error.to_string().contains("no egress policy"), "{error}");
    }

    #[test]
    fn a_tenant_policy_narrows_that_tenants_runs_only() {
        let policies = EgressPolicies {
            server: Some(policy(&["a.test", "b.test"])),
            tenants: BTreeMap::from([("narrow".to_owned(), policy(&["a.test", "c.test"]))]),
        };
        let allowed = |tenant: Option<&str>, wanted: &NetworkUse, host: &str| {
            let leash = policies.leash_for(tenant, wanted).expect("valid").expect("leashed");
            leash.check(Some(host), None, 443).allowed
        };
        let server = NetworkUse::Server;
        assert!(allowed(Some("narrow"), &server, "a.test"));
        assert!(!allowed(Some("narrow"), &server, "b.test"), "the tenant's layer refuses what it does not name");
        assert!(!allowed(Some("narrow"), &server, "c.test"), "and cannot widen the server's");
        assert!(allowed(Some("other"), &server, "b.test"), "another tenant has the server's policy");
        assert!(allowed(None, &server, "b.test"));
        let run = NetworkUse::Narrowed(PolicySpec { allow: vec!["b.test".to_owned()], deny: Vec::new() });
        assert!(!allowed(Some("narrow"), &run, "b.test"), "a run cannot widen its tenant's");
        assert!(!allowed(Some("narrow"), &run, "a.test"), "and narrows it further");
    }
}
