//! The egress policy: which hosts, addresses and ports a sandbox may reach.
//!
//! Rules are strings: `pypi.org` (that name), `*.pythonhosted.org` (any name under it, not itself),
//! `10.0.0.0/8` or `10.1.2.3` (addresses), `[2001:db8::/32]` (IPv6, in brackets), each with an optional `:port`
//! or `:port-port` (no port: 80 and 443). Names compare case-insensitively, a trailing dot ignored. Deny wins over
//! allow; nothing is allowed that no allow rule names. A [`Leash`] is the server's policy narrowed by a tenant's
//! or a run's: a connection passes only if every layer allows it, so a run can narrow but never widen.
//!
//! Besides the rules, some addresses are never reached by a name ([`special`]): loopback and the private ranges
//! open only to a CIDR allow rule that covers the address (so a name that resolves into the host's own network,
//! DNS rebinding, is refused); link-local (cloud metadata), unspecified, multicast, broadcast and sandlot's own
//! link and synthetic ranges never open at all.

use ipnet::IpNet;
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

/// What a rule names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// Exactly this name (lower case, no trailing dot).
    Name(String),
    /// Any name ending in `.suffix`, not the suffix itself.
    Suffix(String),
    /// Addresses.
    Net(IpNet),
}

/// Which ports a rule names: without one, the web's two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ports {
    Web,
    Range(u16, u16),
}

impl Ports {
    fn contains(self, port: u16) -> bool {
        match self {
            Ports::Web => port == 80 || port == 443,
            Ports::Range(low, high) => (low..=high).contains(&port),
        }
    }

    /// The ports where whether this rule matches can change, in ascending order: every port from one of them up
    /// to the next one is matched alike.
    fn edges(self) -> Vec<u32> {
        match self {
            Ports::Web => vec![80, 81, 443, 444],
            Ports::Range(low, high) => vec![u32::from(low), u32::from(high) + 1],
        }
    }
}

#[derive(Clone, Debug)]
struct Rule {
    text: String,
    target: Target,
    ports: Ports,
}

impl Rule {
    fn parse(text: &str) -> Result<Rule, PolicyError> {
        let bad = |why: &str| PolicyError(format!("rule {text:?}: {why}"));
        let rule = text.trim();
        if rule.is_empty() {
            return Err(bad("empty"));
        }
        if rule.contains("://") {
            return Err(bad("a host, not a URL: no scheme"));
        }
        if rule.chars().any(char::is_whitespace) {
            return Err(bad("no spaces inside a rule"));
        }
        let (host, port) = if let Some(rest) = rule.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or_else(|| bad("an IPv6 '[' without its ']'"))?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or_else(|| bad("only ':port' may follow ']'"))?),
            };
            let net = parse_net(inside).ok_or_else(|| bad("not an IPv6 address or range inside the brackets"))?;
            if !matches!(net, IpNet::V6(_)) {
                return Err(bad("brackets are for IPv6 only"));
            }
            (HostPart::Net(net), port)
        } else {
            let (host, port) = match rule.matches(':').count() {
                0 => (rule, None),
                1 => rule.split_once(':').map(|(host, port)| (host, Some(port))).ok_or_else(|| bad("unreachable"))?,
                _ => return Err(bad("an IPv6 address goes in brackets: [2001:db8::1]:443")),
            };
            (HostPart::Text(host), port)
        };
        let ports = match port {
            None => Ports::Web,
            Some(port) => parse_ports(port).ok_or_else(|| bad("a port is 1-65535, a range low-high"))?,
        };
        let target = match host {
            HostPart::Net(net) => Target::Net(net),
            HostPart::Text(host) if host.contains('/') || host.parse::<IpAddr>().is_ok() => {
                let net = parse_net(host).ok_or_else(|| bad("not an address or CIDR range (no paths in a rule)"))?;
                Target::Net(net)
            }
            HostPart::Text(host) => {
                let (wild, name) = match host.strip_prefix("*.") {
                    Some(suffix) => (true, suffix),
                    None => (false, host),
                };
                let name = normalize(name);
                if name.contains('*') {
                    return Err(bad("'*' only as a whole first label: *.example.com"));
                }
                if !valid_name(&name) {
                    return Err(bad("not a host name (letters, digits, '-', '_' and dots)"));
                }
                if wild { Target::Suffix(name) } else { Target::Name(name) }
            }
        };
        Ok(Rule { text: rule.to_owned(), target, ports })
    }

    fn matches_name(&self, host: &str, port: u16) -> bool {
        self.ports.contains(port)
            && match &self.target {
                Target::Name(name) => name == host,
                Target::Suffix(suffix) => {
                    host.len() > suffix.len() + 1
                        && host.ends_with(suffix.as_str())
                        && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
                }
                Target::Net(_) => false,
            }
    }

    fn matches_address(&self, address: IpAddr, port: u16) -> bool {
        self.ports.contains(port) && matches!(&self.target, Target::Net(net) if net.contains(&address))
    }
}

enum HostPart<'a> {
    Net(IpNet),
    Text(&'a str),
}

fn parse_net(text: &str) -> Option<IpNet> {
    if text.contains('/') {
        let net: IpNet = text.parse().ok()?;
        // `10.1.2.3/8` is most likely a mistake for `10.0.0.0/8`: say so rather than guess.
        (net.trunc() == net).then_some(net)
    } else {
        text.parse::<IpAddr>().ok().map(IpNet::from)
    }
}

fn parse_ports(text: &str) -> Option<Ports> {
    let port = |text: &str| text.parse::<u16>().ok().filter(|port| *port != 0);
    match text.split_once('-') {
        None => port(text).map(|port| Ports::Range(port, port)),
        Some((low, high)) => {
            let (low, high) = (port(low)?, port(high)?);
            (low <= high).then_some(Ports::Range(low, high))
        }
    }
}

fn valid_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        })
}

/// A name as rules compare it: lower case, without the root's trailing dot.
pub fn normalize(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// A parsed policy.
#[derive(Debug)]
pub struct Policy {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

impl Policy {
    /// Parses every rule, or says which one is wrong and why.
    pub fn parse(spec: &PolicySpec) -> Result<Policy, PolicyError> {
        let rules = |texts: &[String]| texts.iter().map(|text| Rule::parse(text)).collect::<Result<Vec<_>, _>>();
        Ok(Policy { allow: rules(&spec.allow)?, deny: rules(&spec.deny)? })
    }

    /// Whether the policy allows nothing at all.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty()
    }

    /// The address ranges allow rules name: the gateway captures them, so a sandbox can connect to them directly.
    pub fn captured(&self) -> Vec<IpNet> {
        let mut nets: Vec<IpNet> = self
            .allow
            .iter()
            .filter_map(|rule| match rule.target {
                Target::Net(net) => Some(net),
                _ => None,
            })
            .collect();
        nets.sort();
        nets.dedup();
        nets
    }

    /// 80, 443 and every port an allow rule names singly: the ports the gateway catches connections on
    /// (ranges are reached through the explicit proxy only).
    pub fn single_ports(&self) -> Vec<u16> {
        let mut ports = vec![80, 443];
        ports.extend(self.allow.iter().filter_map(|rule| match rule.ports {
            Ports::Range(low, high) if low == high => Some(low),
            _ => None,
        }));
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// This layer's word on one connection (see [`Leash::check`]).
    fn check(&self, host: Option<&str>, address: Option<IpAddr>, port: u16) -> Verdict {
        let by_name = |rule: &&Rule| host.is_some_and(|host| rule.matches_name(host, port));
        let by_address = |rule: &&Rule| address.is_some_and(|address| rule.matches_address(address, port));
        if let Some(rule) = self.deny.iter().find(|rule| by_name(rule) || by_address(rule)) {
            return Verdict::refused(format!("denied by {}", rule.text));
        }
        let rule = match (host, address) {
            (Some(host), _) => match self.allow.iter().find(by_name) {
                Some(rule) => rule,
                None => return Verdict::refused(format!("no allow rule names {host}:{port}")),
            },
            (None, Some(address)) => match self.allow.iter().find(by_address) {
                Some(rule) => rule,
                None => return Verdict::refused(format!("no allow rule names {address}:{port}")),
            },
            (None, None) => return Verdict::refused("no destination".to_owned()),
        };
        if let Some(address) = address
            && let Some(range) = special(address)
        {
            if !range.opens {
                return Verdict::refused(format!("{address} is {}: never reachable", range.what));
            }
            if !self.allow.iter().any(|rule| by_address(&rule)) {
                return Verdict::refused(format!("{address} is {}: only a CIDR allow rule opens it", range.what));
            }
        }
        Verdict { allowed: true, reason: format!("allowed by {}", rule.text) }
    }

    /// Whether some connection to `host` on `port` may be allowed, the address not yet known.
    fn names(&self, host: &str, port: u16) -> bool {
        self.allow.iter().any(|rule| rule.matches_name(host, port))
            && !self.deny.iter().any(|rule| rule.matches_name(host, port))
    }

    fn edges(&self) -> impl Iterator<Item = u32> + '_ {
        self.allow.iter().chain(&self.deny).flat_map(|rule| rule.ports.edges())
    }
}

/// A range a name never reaches, and whether an explicit CIDR allow rule opens it.
pub struct Special {
    pub what: &'static str,
    pub opens: bool,
}

/// Whether `address` is in a range the proxy treats apart (see the module's doc).
pub fn special(address: IpAddr) -> Option<Special> {
    const RANGES: &[(&str, &str, bool)] = &[
        ("127.0.0.0/8", "loopback", true),
        ("::1/128", "loopback", true),
        ("10.0.0.0/8", "private", true),
        ("172.16.0.0/12", "private", true),
        ("192.168.0.0/16", "private", true),
        ("fc00::/7", "private", true),
        (crate::network::LINKS, "sandlot's links", false),
        ("100.64.0.0/10", "private (shared address space)", true),
        (crate::network::SYNTHETIC, "sandlot's synthetic range", false),
        ("169.254.0.0/16", "link-local", false),
        ("fe80::/10", "link-local", false),
        ("0.0.0.0/8", "unspecified", false),
        ("::/128", "unspecified", false),
        ("224.0.0.0/4", "multicast", false),
        ("ff00::/8", "multicast", false),
        ("255.255.255.255/32", "broadcast", false),
        ("240.0.0.0/4", "reserved", false),
    ];
    let address = address.to_canonical();
    RANGES.iter().find_map(|(net, what, opens)| {
        let net: IpNet = net.parse().ok()?;
        net.contains(&address).then_some(Special { what, opens: *opens })
    })
}

/// What a policy says of one destination, and why (the rule, for the audit trail).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub reason: String,
}

impl Verdict {
    fn refused(reason: String) -> Self {
        Self { allowed: false, reason }
    }
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
    ///
    /// With a name, an allow rule must name it (before the name is resolved, `address` is `None`; then each
    /// address it resolves to is checked again); without one, an address rule must cover the address. Every
    /// layer must allow; a refusal says which layer when it is not the server's.
    pub fn check(&self, host: Option<&str>, address: Option<IpAddr>, port: u16) -> Verdict {
        let host = host.map(normalize);
        let address = address.map(|address| address.to_canonical());
        let mut allowed = None;
        for (layer, policy) in self.layers.iter().enumerate() {
            let verdict = policy.check(host.as_deref(), address, port);
            if !verdict.allowed {
                return match layer {
                    0 => verdict,
                    _ => Verdict::refused(format!("narrowed: {}", verdict.reason)),
                };
            }
            allowed.get_or_insert(verdict);
        }
        allowed.unwrap_or_else(|| Verdict::refused("no policy".to_owned()))
    }

    /// Whether a connection to `host` may be allowed on some port: what the DNS responder asks before it answers
    /// a name.
    pub fn names(&self, host: &str) -> bool {
        let host = normalize(host);
        let mut edges: Vec<u32> = self.layers.iter().flat_map(|policy| policy.edges()).collect();
        edges.sort_unstable();
        edges.dedup();
        // Whether a port is allowed changes only at an edge, so the edges stand for every port.
        edges
            .into_iter()
            .filter_map(|edge| u16::try_from(edge).ok())
            .any(|port| self.layers.iter().all(|policy| policy.names(&host, port)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn policy(allow: &[&str], deny: &[&str]) -> Arc<Policy> {
        let strings = |rules: &[&str]| rules.iter().map(|rule| (*rule).to_owned()).collect();
        let spec = PolicySpec { allow: strings(allow), deny: strings(deny) };
        Arc::new(Policy::parse(&spec).unwrap_or_else(|error| panic!("{error}")))
    }

    fn error(rule: &str) -> String {
        match Policy::parse(&PolicySpec { allow: vec![rule.to_owned()], deny: vec![] }) {
            Ok(_) => panic!("{rule:?} parsed"),
            Err(error) => error.0,
        }
    }

    fn ip(text: &str) -> Option<IpAddr> {
        text.parse().ok()
    }

    #[test]
    fn bad_rules_say_why() {
        for (rule, why) in [
            ("", "empty"),
            ("   ", "empty"),
            ("https://pypi.org", "no scheme"),
            ("pypi.org/simple", "not an address or CIDR"),
            ("pypi.org:0", "a port is"),
            ("pypi.org:65536", "a port is"),
            ("pypi.org:http", "a port is"),
            ("pypi.org:443-80", "a port is"),
            ("pypi.org:", "a port is"),
            ("py*.org", "'*' only"),
            ("a.*.org", "'*' only"),
            ("*", "'*' only"),
            ("*.", "not a host name"),
            ("pypi..org", "not a host name"),
            ("py pi.org", "no spaces"),
            ("pypi.org:80:81", "brackets"),
            ("2001:db8::1", "brackets"),
            ("[2001:db8::1", "without its"),
            ("[10.0.0.1]", "IPv6 only"),
            ("[2001:db8::1]443", "only ':port'"),
            ("[nonsense]", "not an IPv6"),
            ("10.0.0.0/33", "not an address or CIDR"),
            ("10.1.2.3/8", "not an address or CIDR"),
            ("bad_chär.org", "not a host name"),
        ] {
            let message = error(rule);
            assert!(message.contains(why), "{rule:?}: {message}");
            assert!(message.contains(&format!("{rule:?}")), "{rule:?}: {message}");
        }
    }

    #[test]
    fn names_match_exactly_or_below_a_wildcard() {
        let leash = Leash::new(policy(&["pypi.org", "*.pythonhosted.org"], &[]));
        let allowed = |host: &str, port| leash.check(Some(host), None, port).allowed;
        assert!(allowed("pypi.org", 443));
        assert!(allowed("PyPI.org.", 80));
        assert!(!allowed("pypi.org", 22));
        assert!(!allowed("www.pypi.org", 443));
        assert!(!allowed("evilpypi.org", 443));
        assert!(allowed("files.pythonhosted.org", 443));
        assert!(allowed("a.b.pythonhosted.org", 443));
        assert!(!allowed("pythonhosted.org", 443));
        assert!(!allowed("xpythonhosted.org", 443));
        assert!(!leash.check(None, ip("151.101.0.223"), 443).allowed, "an address needs an address rule");
        assert_eq!(leash.check(Some("pypi.org"), None, 443).reason, "allowed by pypi.org");
        assert_eq!(leash.check(Some("x.org"), None, 443).reason, "no allow rule names x.org:443");
    }

    #[test]
    fn ports_and_ranges() {
        let leash = Leash::new(policy(&["git.test:22", "api.test:8000-8999", "[2001:db8::/32]:443"], &[]));
        assert!(leash.check(Some("git.test"), None, 22).allowed);
        assert!(!leash.check(Some("git.test"), None, 443).allowed);
        assert!(leash.check(Some("api.test"), None, 8000).allowed);
        assert!(leash.check(Some("api.test"), None, 8999).allowed);
        assert!(!leash.check(Some("api.test"), None, 9000).allowed);
        assert!(leash.check(None, ip("2001:db8::5"), 443).allowed);
        assert!(!leash.check(None, ip("2001:db9::5"), 443).allowed);
        assert_eq!(leash.layers[0].single_ports(), vec![22, 80, 443]);
        assert_eq!(leash.layers[0].captured(), vec!["2001:db8::/32".parse::<IpNet>().ok().unwrap_or_default()]);
    }

    #[test]
    fn deny_beats_allow() {
        let leash = Leash::new(policy(&["*.example.com", "203.0.113.0/24"], &["secret.example.com", "203.0.113.7"]));
        assert!(leash.check(Some("www.example.com"), None, 443).allowed);
        let verdict = leash.check(Some("SECRET.example.com"), None, 443);
        assert_eq!(verdict, Verdict { allowed: false, reason: "denied by secret.example.com".into() });
        assert!(leash.check(None, ip("203.0.113.6"), 80).allowed);
        assert!(!leash.check(None, ip("203.0.113.7"), 80).allowed);
        // A name allowed, resolving to a denied address.
        assert!(!leash.check(Some("www.example.com"), ip("203.0.113.7"), 443).allowed);
        assert!(!Leash::new(policy(&[], &[])).check(Some("example.com"), None, 443).allowed);
    }

    #[test]
    fn narrowing_never_widens() {
        let server = Leash::new(policy(&["*.example.com", "pypi.org:443"], &["bad.example.com"]));
        let run = server.narrowed(policy(&["a.example.com", "bad.example.com", "pypi.org", "other.org"], &[]));
        assert!(run.check(Some("a.example.com"), None, 443).allowed);
        assert!(!run.check(Some("b.example.com"), None, 443).allowed, "the run does not name it");
        assert!(!run.check(Some("bad.example.com"), None, 443).allowed, "the server denies it");
        assert!(!run.check(Some("pypi.org"), None, 80).allowed, "the server allows 443 only");
        assert!(run.check(Some("pypi.org"), None, 443).allowed);
        assert!(!run.check(Some("other.org"), None, 443).allowed, "the server does not name it");
        assert_eq!(
            run.check(Some("b.example.com"), None, 443).reason,
            "narrowed: no allow rule names b.example.com:443"
        );
        // Exhaustively on a few names and ports: nothing the server refuses is allowed once narrowed.
        for host in ["a.example.com", "b.example.com", "bad.example.com", "pypi.org", "other.org", "x"] {
            for port in [22, 80, 443, 8080] {
                if run.check(Some(host), None, port).allowed {
                    assert!(server.check(Some(host), None, port).allowed, "{host}:{port}");
                }
            }
        }
        assert!(!run.names("other.org"));
        assert!(run.names("a.example.com"));
    }

    #[test]
    fn special_addresses_need_an_address_rule_or_never_open() {
        let by_name = Leash::new(policy(&["web.test", "*.test"], &[]));
        let verdict = by_name.check(Some("web.test"), ip("127.0.0.1"), 443);
        assert!(!verdict.allowed);
        assert_eq!(verdict.reason, "127.0.0.1 is loopback: only a CIDR allow rule opens it");
        assert!(!by_name.check(Some("web.test"), ip("10.1.2.3"), 443).allowed);
        assert!(!by_name.check(Some("web.test"), ip("::ffff:192.168.1.1"), 443).allowed);
        assert!(by_name.check(Some("web.test"), ip("93.184.216.34"), 443).allowed);

        let opened = Leash::new(policy(&["web.test", "127.0.0.0/8", "169.254.0.0/16", "198.18.0.0/15"], &[]));
        assert!(opened.check(Some("web.test"), ip("127.0.0.1"), 443).allowed);
        assert!(opened.check(None, ip("127.0.0.2"), 80).allowed);
        let metadata = opened.check(None, ip("169.254.169.254"), 80);
        assert_eq!(metadata.reason, "169.254.169.254 is link-local: never reachable");
        assert!(!opened.check(None, ip("198.18.0.1"), 80).allowed);
        assert!(!opened.check(None, ip("0.0.0.0"), 80).allowed);
        assert!(!opened.check(Some("web.test"), Some(IpAddr::V4(Ipv4Addr::BROADCAST)), 80).allowed);
    }

    #[test]
    fn names_answers_for_any_allowed_port() {
        let leash = Leash::new(policy(&["git.test:22", "*.api.test:8000-8999", "web.test"], &["web.test:80"]));
        assert!(leash.names("git.test"));
        assert!(leash.names("v1.api.test"));
        assert!(leash.names("web.test"), "443 is still allowed");
        assert!(!leash.names("api.test"));
        assert!(!leash.names("other.test"));
        let all_denied = Leash::new(policy(&["web.test"], &["web.test:1-65535"]));
        assert!(!all_denied.names("web.test"));
        let narrowed = leash.narrowed(policy(&["git.test:23"], &[]));
        assert!(!narrowed.names("git.test"), "22 and 23 never meet");
    }
}
