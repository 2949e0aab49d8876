//! [`CredentialSpec`]: one credential as the operator writes it (JSON), and [`Credential`], the same checked, with
//! its secret resolved and its per-start placeholder drawn.
//!
//! The sandbox sees `placeholder_env=<placeholder>`, a random token drawn at every server start; the secret itself
//! lives only in the server. Every check happens here, at start, so a running proxy never meets a bad credential:
//! the secret is not empty and makes a valid header value (no CR, LF or other control byte), the header is a valid
//! name, the variable a valid name.

use super::error::{CredentialError, Result};
use super::host::HostPattern;
use super::secret::Secret;
use http::{HeaderName, HeaderValue};
use serde::Deserialize;
use std::fmt;

/// Where a format puts the secret.
pub const SECRET_MARK: &str = "{secret}";

/// What every placeholder starts with, so one is recognisable in a log or a trace.
pub const PLACEHOLDER_PREFIX: &str = "sandlot-placeholder-";

/// One host's secret, as configured: `{"host": "api.github.com", "placeholder_env": "GITHUB_TOKEN",
/// "secret_env": "GITHUB_TOKEN", "header": "Authorization", "format": "Bearer {secret}"}`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialSpec {
    /// `name` or `*.suffix`: the requests that get the secret.
    pub host: String,
    /// The variable the sandbox gets, holding the placeholder.
    pub placeholder_env: String,
    /// The secret itself; or else
    #[serde(default)]
    pub secret: Option<String>,
    /// the variable of the server's own environment that holds it (read at start).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// A header set on every request to the host, replacing what the sandbox sent.
    #[serde(default)]
    pub header: Option<String>,
    /// The header's value, with `{secret}` where the secret goes (default: the secret alone).
    #[serde(default)]
    pub format: Option<String>,
}

impl fmt::Debug for CredentialSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialSpec")
            .field("host", &self.host)
            .field("placeholder_env", &self.placeholder_env)
            .field("secret", &self.secret.as_ref().map(|_| "..."))
            .field("secret_env", &self.secret_env)
            .field("header", &self.header)
            .field("format", &self.format.as_ref().map(|_| "..."))
            .finish()
    }
}

/// A checked credential, ready for the proxy.
#[derive(Debug)]
pub struct Credential {
    pub host: HostPattern,
    pub placeholder_env: String,
    /// What the sandbox sees instead of the secret.
    pub placeholder: String,
    pub secret: Secret,
    /// The header set on every request, and its value (marked sensitive).
    pub header: Option<(HeaderName, HeaderValue)>,
}

impl Credential {
    /// Checks `spec` (the `index`th in the operator's list), reading `secret_env` through `lookup`.
    pub fn resolve(index: usize, spec: &CredentialSpec, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Credential> {
        let fail = |reason: String| CredentialError::Spec { index, host: spec.host.clone(), reason };
        let host = HostPattern::parse(&spec.host).map_err(fail)?;
        if !is_variable_name(&spec.placeholder_env) {
            return Err(fail(format!(
                "placeholder_env {:?} is not a variable name (letters, digits, `_`, not starting with a digit)",
                spec.placeholder_env
            )));
        }
        let secret = match (&spec.secret, &spec.secret_env) {
            (Some(secret), None) => secret.clone(),
            (None, Some(name)) => lookup(name)
                .ok_or_else(|| fail(format!("secret_env {name:?} is not set in the server's environment")))?,
            (Some(_), Some(_)) => return Err(fail("give `secret` or `secret_env`, not both".into())),
            (None, None) => return Err(fail("no secret: give `secret` or `secret_env`".into())),
        };
        if secret.is_empty() {
            return Err(fail("the secret is empty".into()));
        }
        // A header value may hold no control byte but tab; CR and LF would split the request.
        if secret.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(fail("the secret contains a control character (CR, LF, NUL or another)".into()));
        }
        let header = match (&spec.header, &spec.format) {
            (None, None) => None,
            (None, Some(_)) => return Err(fail("`format` without `header`".into())),
            (Some(name), format) => {
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| fail(format!("header {name:?} is not a valid header name")))?;
                let format = format.as_deref().unwrap_or(SECRET_MARK);
                if !format.contains(SECRET_MARK) {
                    return Err(fail(format!("format has no {SECRET_MARK}")));
                }
                let mut value = HeaderValue::from_bytes(format.replace(SECRET_MARK, &secret).as_bytes())
                    .map_err(|_| fail("format makes an invalid header value".into()))?;
                value.set_sensitive(true);
                Some((name, value))
            }
        };
        let mut random = [0u8; 16];
        getrandom::fill(&mut random)?;
        Ok(Credential {
            host,
            placeholder_env: spec.placeholder_env.clone(),
            placeholder: format!("{PLACEHOLDER_PREFIX}{}", hex::encode(random)),
            secret: Secret::new(secret.into_bytes()),
            header,
        })
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
