//! [`HostPattern`]: the host a credential is mapped to, `api.example.com` (that name) or `*.example.com` (any name
//! under it, not itself), as the policy reads its rules. Names compare without case and without a final dot, the
//! way DNS does; an address literal is not a name (a TLS client sends no name for it, so no certificate could
//! be made for it by name).

use std::net::IpAddr;

/// A name, or every name under a suffix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    /// The suffix without its `*.`; matches `x.<suffix>`, `y.x.<suffix>`, not `<suffix>`.
    Under(String),
}

impl HostPattern {
    /// Parses `name` or `*.suffix`, or says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (wildcard, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let name = normalize(name);
        if name.is_empty() {
            return Err("the host is empty".into());
        }
        if name.parse::<IpAddr>().is_ok() {
            return Err("the host must be a name, not an address".into());
        }
        let valid_label = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if name.len() > 253 || !name.split('.').all(valid_label) {
            return Err("the host is not a valid name (`name.example` or `*.example`)".into());
        }
        Ok(if wildcard { Self::Under(name) } else { Self::Exact(name) })
    }

    /// Whether `host` (as the sandbox named it) is this pattern's.
    pub fn matches(&self, host: &str) -> bool {
        let host = normalize(host);
        match self {
            Self::Exact(name) => host == *name,
            Self::Under(suffix) => {
                host.strip_suffix(suffix.as_str()).is_some_and(|head| head.len() > 1 && head.ends_with('.'))
            }
        }
    }

    /// The DNS subtree this pattern lies in: what the CA's name constraint permits.
    pub fn subtree(&self) -> &str {
        match self {
            Self::Exact(name) | Self::Under(name) => name,
        }
    }
}

/// A name as DNS compares it: lower case, no final dot.
pub fn normalize(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_names_match_themselves_only() {
        let pattern = HostPattern::parse("API.Example.com.").unwrap();
        assert_eq!(pattern, HostPattern::Exact("api.example.com".into()));
        assert!(pattern.matches("api.example.com"));
        assert!(pattern.matches("Api.Example.COM."));
        assert!(!pattern.matches("x.api.example.com"));
        assert!(!pattern.matches("example.com"));
        assert!(!pattern.matches("api.example.com.evil"));
    }

    #[test]
    fn wildcards_match_names_under_the_suffix_not_itself() {
        let pattern = HostPattern::parse("*.example.com").unwrap();
        assert!(pattern.matches("a.example.com"));
        assert!(pattern.matches("b.a.example.com"));
        assert!(!pattern.matches("example.com"));
        assert!(!pattern.matches("badexample.com"));
        assert!(!pattern.matches(".example.com"));
    }

    #[test]
    fn addresses_and_junk_are_not_names() {
        for bad in ["", "*.", "10.0.0.1", "::1", "a..b", "-a.b", "a b", "a/b", "*.*.b", "a:443"] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
