//! The server's egress (`sandlot_egress`), started from `SANDLOT_EGRESS_*` before the backend, which leashes runs
//! with it. Every setting is checked here, so a wrong policy stops the server at its start with the rule named.

use std::collections::BTreeMap;
use std::sync::Arc;

use sandlot_egress::credentials::CredentialSpec;
use sandlot_egress::{Egress, EgressConfig, Policy, PolicySpec};

use crate::cli::{BackendKind, EgressArgs};

/// The server's egress, or `None` when no policy is set.
pub async fn start(args: &EgressArgs, backend: BackendKind) -> anyhow::Result<Option<Arc<Egress>>> {
    let Some(policy) = &args.egress_policy else {
        if args.egress_tenant_policies.is_some() {
            anyhow::bail!("SANDLOT_EGRESS_TENANT_POLICIES narrows SANDLOT_EGRESS_POLICY, which is not set");
        }
        return Ok(None);
    };
    if backend != BackendKind::Native {
        anyhow::bail!("SANDLOT_EGRESS_POLICY needs the native backend: the Docker backend's runs have loopback only");
    }
    if !rustix::process::geteuid().is_root() {
        anyhow::bail!("SANDLOT_EGRESS_POLICY needs a server running as root (it makes network namespaces and links)");
    }
    let upstream_roots_pem = match &args.egress_upstream_ca {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("SANDLOT_EGRESS_UPSTREAM_CA: cannot read {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let config = EgressConfig {
        policy: parse_policy(policy)?,
        nameservers: (!args.egress_nameservers.is_empty()).then(|| args.egress_nameservers.clone()),
        max_connections: usize::try_from(args.egress_max_connections).unwrap_or(usize::MAX),
        bytes_per_second: args.egress_bytes_per_second,
        credentials: match &args.egress_credentials {
            Some(value) => parse_credentials(value)?,
            None => Vec::new(),
        },
        upstream_roots_pem,
        // Per server process: two servers on one host each bind their own into their sandboxes.
        trust_dir: Some(format!("/run/sandlot/egress-{}", std::process::id()).into()),
        ..EgressConfig::default()
    };
    let egress = Egress::start(config).await.map_err(|e| anyhow::anyhow!("SANDLOT_EGRESS_POLICY: {e}"))?;
    Ok(Some(egress))
}

/// The policies of a server with `egress`: its own, and its tenants' from `SANDLOT_EGRESS_TENANT_POLICIES`.
pub fn policies(args: &EgressArgs, egress: Option<&Egress>) -> anyhow::Result<sandlot_core::EgressPolicies> {
    let tenants = match &args.egress_tenant_policies {
        Some(value) => parse_tenant_policies(value)?,
        None => BTreeMap::new(),
    };
    Ok(sandlot_core::EgressPolicies { server: egress.map(Egress::policy), tenants })
}

/// Each tenant's policy, checked as the server's is: a wrong rule names its tenant.
fn parse_tenant_policies(value: &str) -> anyhow::Result<BTreeMap<String, Arc<Policy>>> {
    let text = inline_or_file("SANDLOT_EGRESS_TENANT_POLICIES", value)?;
    let specs: BTreeMap<String, PolicySpec> = serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "SANDLOT_EGRESS_TENANT_POLICIES: expected {{\"<tenant>\": {{\"allow\": [...], \"deny\": [...]}}, ...}}: {e}"
        )
    })?;
    specs
        .into_iter()
        .map(|(tenant, spec)| match Policy::parse(&spec) {
            Ok(policy) => Ok((tenant, Arc::new(policy))),
            Err(e) => Err(anyhow::anyhow!("SANDLOT_EGRESS_TENANT_POLICIES: tenant {tenant:?}: {e}")),
        })
        .collect()
}

/// The credentials as JSON, inline or from `@<path>`.
fn parse_credentials(value: &str) -> anyhow::Result<Vec<CredentialSpec>> {
    let text = inline_or_file("SANDLOT_EGRESS_CREDENTIALS", value)?;
    serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "SANDLOT_EGRESS_CREDENTIALS: expected [{{\"host\", \"placeholder_env\", \"secret\" or \"secret_env\", ...}}]: {e}"
        )
    })
}

/// `value`, or the file it names as `@<path>`.
fn inline_or_file(variable: &str, value: &str) -> anyhow::Result<String> {
    match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{variable}: cannot read {path}: {e}")),
        None => Ok(value.to_owned()),
    }
}

/// The policy as JSON, inline or from `@<path>`.
fn parse_policy(value: &str) -> anyhow::Result<PolicySpec> {
    let text = inline_or_file("SANDLOT_EGRESS_POLICY", value)?;
    serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("SANDLOT_EGRESS_POLICY: expected {{\"allow\": [...], \"deny\": [...]}}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_json_inline_or_in_a_file() {
        let inline = parse_policy(r#"{"allow": ["pypi.org"]}"#).expect("inline");
        assert_eq!(inline.allow, vec!["pypi.org".to_owned()]);
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), r#"{"allow": ["*.pythonhosted.org"], "deny": ["bad.example"]}"#).expect("write");
        let from_file = parse_policy(&format!("@{}", file.path().display())).expect("file");
        assert_eq!(from_file.deny, vec!["bad.example".to_owned()]);
        let error = parse_policy(r#"{"allow": "pypi.org"}"#).expect_err("not a list");
        assert!(error.to_string().contains("SANDLOT_EGRESS_POLICY"), "{error}");
        assert!(parse_policy(r#"{"alow": []}"#).is_err(), "unknown fields are refused");
    }

    #[test]
    fn tenant_policies_are_checked_rule_by_rule() {
        let policies = parse_tenant_policies(r#"{"alice": {"allow": ["pypi.org"]}, "bob": {}}"#).expect("valid");
        assert_eq!(policies.keys().collect::<Vec<_>>(), ["alice", "bob"]);
        let error = parse_tenant_policies(r#"{"alice": {"allow": ["pypi.org:99999"]}}"#).expect_err("a bad port");
        assert!(error.to_string().contains("tenant \"alice\""), "{error}");
        assert!(parse_tenant_policies(r#"["pypi.org"]"#).is_err(), "an object of tenants");
    }
}
