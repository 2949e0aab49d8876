//! Credentials that never enter the sandbox. An operator maps a host to a secret ([`CredentialSpec`]); the sandbox
//! gets a variable holding a placeholder drawn at server start ([`Credentials::environment`]) and trusts this
//! start's authority ([`Credentials::trust_bundle_pem`]); the proxy hands connections to mapped hosts to the
//! [`Interceptor`], which ends their TLS, puts the secret in place of the placeholder (or in a configured header)
//! on requests to that host only, and forwards them to the host's real server.
//!
//! So the secret is in the server's memory and on the wire to its host, and nowhere a sandbox can read: not in its
//! environment, files or `/proc`, and not in requests to any other host (those carry the placeholder as it is).

mod ca;
mod counting;
mod error;
mod host;
mod interceptor;
mod rewrite;
mod secret;
mod spec;
mod upstream;

pub use ca::{Ca, SYSTEM_BUNDLE, TRUST_VARIABLES, trust_environment};
pub use error::{CredentialError, Result};
pub use host::HostPattern;
pub use interceptor::Interceptor;
pub use spec::{CredentialSpec, PLACEHOLDER_PREFIX, SECRET_MARK};

use spec::Credential;
use std::collections::HashSet;
use std::sync::Arc;

/// One server start's credentials: the interceptor for the proxy, and what every leashed sandbox gets.
pub struct Credentials {
    interceptor: Arc<Interceptor>,
    ca: Arc<Ca>,
    environment: Vec<(String, String)>,
}

impl Credentials {
    /// Checks `specs`, reading each `secret_env` from the server's environment, and makes this start's authority.
    /// `extra_upstream_roots_pem` are authorities trusted for the hosts' own servers besides the system's.
    pub fn new(specs: &[CredentialSpec], extra_upstream_roots_pem: Option<&str>) -> Result<Credentials> {
        Self::with_lookup(specs, extra_upstream_roots_pem, &|name| std::env::var(name).ok())
    }

    /// [`Credentials::new`], reading `secret_env` variables through `lookup` instead of the environment.
    pub fn with_lookup(
        specs: &[CredentialSpec],
        extra_upstream_roots_pem: Option<&str>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Credentials> {
        let mut variables = HashSet::new();
        let mut credentials = Vec::with_capacity(specs.len());
        for (index, spec) in specs.iter().enumerate() {
            let credential = Credential::resolve(index, spec, lookup)?;
            if !variables.insert(credential.placeholder_env.clone()) {
                return Err(CredentialError::Spec {
                    index,
                    host: spec.host.clone(),
                    reason: format!("placeholder_env {:?} is used by an earlier credential", spec.placeholder_env),
                });
            }
            credentials.push(Arc::new(credential));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let hosts: Vec<&HostPattern> = credentials.iter().map(|credential| &credential.host).collect();
        let ca = Arc::new(Ca::new(&hosts, provider.clone())?);
        let upstream = upstream::client_config(provider, extra_upstream_roots_pem)?;
        let environment = credentials
            .iter()
            .map(|credential| (credential.placeholder_env.clone(), credential.placeholder.clone()))
            .collect();
        let interceptor = Arc::new(Interceptor::new(credentials, ca.clone(), upstream));
        Ok(Credentials { interceptor, ca, environment })
    }

    /// The interceptor the proxy consults for every connection.
    pub fn interceptor(&self) -> Arc<Interceptor> {
        self.interceptor.clone()
    }

    /// The variables every leashed sandbox gets: each credential's `placeholder_env` and its placeholder.
    pub fn environment(&self) -> Vec<(String, String)> {
        self.environment.clone()
    }

    /// This start's authority (PEM).
    pub fn ca_pem(&self) -> &str {
        self.ca.ca_pem()
    }

    /// The sandbox's trust store: the host's bundle, then this start's authority (see [`Ca::trust_bundle_pem`]).
    pub fn trust_bundle_pem(&self) -> String {
        self.ca.trust_bundle_pem()
    }
}
