//! The address a request comes from, as the failure limiter keys it: the TCP peer, or, when the peer is one of the
//! configured trusted proxies (`SANDLOT_TRUSTED_PROXIES`), the client that proxy names in the forwarded-for header
//! it is configured to set (`SANDLOT_CLIENT_IP_HEADER`: `X-Forwarded-For` or RFC 7239 `Forwarded`).
//!
//! Invariants: a header is read only when the peer itself is a trusted proxy, so a client that reaches sandlot
//! directly cannot choose its key; the chain is walked from the right (the hop the trusted proxy appended) and stops
//! at the first address that is not a trusted proxy, so a client behind the proxy cannot choose its key either by
//! putting addresses on the left. An unreadable hop stops the walk at the last trusted hop. IPv6 clients are keyed
//! by their /64 (one host usually holds a whole /64), IPv4-mapped IPv6 addresses as the IPv4 address.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use axum::http::HeaderMap;
use ipnet::IpNet;

/// One trusted proxy: an address (`10.0.0.5`, `::1`) or a network in CIDR notation (`10.0.0.0/8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrustedProxy(IpNet);

impl FromStr for TrustedProxy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Self(net.trunc()));
        }
        text.parse::<IpAddr>()
            .map(|ip| Self(IpNet::from(canonical(ip))))
            .map_err(|_| format!("{text:?} is not an IP address or a network in CIDR notation (10.0.0.0/8)"))
    }
}

impl std::fmt::Display for TrustedProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Which header a trusted proxy names the client in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClientIpHeader {
    /// `X-Forwarded-For: client, proxy1, ...` (nginx, Caddy, Traefik, HAProxy, most load balancers).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"`.
    Forwarded,
}

impl FromStr for ClientIpHeader {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Ok(Self::XForwardedFor),
            "forwarded" => Ok(Self::Forwarded),
            _ => Err(format!("{text:?} is neither x-forwarded-for nor forwarded")),
        }
    }
}

/// Finds the client address of a request.
#[derive(Debug, Clone, Default)]
pub struct ClientAddress {
    trusted: Vec<TrustedProxy>,
    header: ClientIpHeader,
}

impl ClientAddress {
    /// The peer is the client, unless it is one of `trusted`, which name the client in `header`.
    pub fn new(trusted: Vec<TrustedProxy>, header: ClientIpHeader) -> Self {
        Self { trusted, header }
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|proxy| proxy.0.contains(&ip))
    }

    /// The limiter's key of a request from `peer` with `headers`.
    pub fn key(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = canonical(peer);
        if self.is_trusted(client) {
            let hops = self.hops(headers);
            for hop in hops.iter().rev() {
                match hop {
                    Some(ip) => {
                        client = canonical(*ip);
                        if !self.is_trusted(client) {
                            break;
                        }
                    }
                    None => break,
                }
            }
        }
        bucket(client)
    }

    /// The addresses the header names, left to right over all its lines; `None` for a hop that is not an address.
    fn hops(&self, headers: &HeaderMap) -> Vec<Option<IpAddr>> {
        let name = match self.header {
            ClientIpHeader::XForwardedFor => "x-forwarded-for",
            ClientIpHeader::Forwarded => "forwarded",
        };
        let mut hops = Vec::new();
        for line in headers.get_all(name) {
            let Ok(line) = line.to_str() else {
                hops.push(None);
                continue;
            };
            for element in line.split(',') {
                hops.push(match self.header {
                    ClientIpHeader::XForwardedFor => parse_node(element),
                    ClientIpHeader::Forwarded => element
                        .split(';')
                        .filter_map(|pair| pair.split_once('='))
                        .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                        .and_then(|(_, node)| parse_node(node)),
                });
            }
        }
        hops
    }
}

/// An address as a header names it: bare, with a port, bracketed IPv6 with or without a port, maybe quoted.
/// `unknown` and obfuscated identifiers (RFC 7239) are not addresses.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    text.strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|ip| ip.parse::<Ipv6Addr>().ok())
        .map(IpAddr::V6)
}

/// IPv4-mapped IPv6 (`::ffff:10.0.0.1`, what a dual-stack listener sees) as the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The key of an address: IPv4 as is, IPv6 by its /64.
fn bucket(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn proxies(list: &[&str]) -> Vec<TrustedProxy> {
        list.iter().map(|p| p.parse().unwrap()).collect()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let resolver = ClientAddress::new(proxies(&["10.0.0.0/8"]), ClientIpHeader::XForwardedFor);
        let claims = headers(&[("x-forwarded-for", "1.2.3.4"), ("forwarded", "for=5.6.7.8")]);
        assert_eq!(resolver.key(ip("192.0.2.9"), &claims), ip("192.0.2.9"));
        assert_eq!(ClientAddress::default().key(ip("127.0.0.1"), &claims), ip("127.0.0.1"));
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() {
        let resolver = ClientAddress::new(proxies(&["10.0.0.0/8", "127.0.0.1"]), ClientIpHeader::XForwardedFor);
        let cases = [
            (vec![], "10.0.0.1"),
            (vec!["203.0.113.7"], "203.0.113.7"),
            (vec!["203.0.113.7, 10.0.0.2"], "203.0.113.7"),
            // The client wrote the left part itself: it does not count.
            (vec!["6.6.6.6, 203.0.113.7, 10.0.0.2"], "203.0.113.7"),
            (vec!["6.6.6.6", "203.0.113.7:5555"], "203.0.113.7"),
            (vec!["garbage, 10.0.0.3"], "10.0.0.3"),
            (vec!["10.0.0.4, 10.0.0.3"], "10.0.0.4"),
        ];
        for (lines, expected) in cases {
            let map = headers(&lines.iter().map(|l| ("x-forwarded-for", *l)).collect::<Vec<_>>());
            assert_eq!(resolver.key(ip("10.0.0.1"), &map), ip(expected), "{lines:?}");
        }
        // The other header is not read.
        let forwarded = headers(&[("forwarded", "for=203.0.113.7")]);
        assert_eq!(resolver.key(ip("10.0.0.1"), &forwarded), ip("10.0.0.1"));
    }

    #[test]
    fn forwarded_names_addresses_in_every_rfc_7239_form() {
        let resolver = ClientAddress::new(proxies(&["::1", "127.0.0.0/8"]), ClientIpHeader::Forwarded);
        let cases = [
            ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
            ("For=\"192.0.2.60:8080\"", "192.0.2.60"),
            ("for=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::"),
            ("for=\"[2001:db8:cafe::17]\", for=127.0.0.2", "2001:db8:cafe::"),
            ("for=unknown, for=127.0.0.2", "127.0.0.2"),
            ("for=_hidden", "::"), // the peer, ::1, by its /64
        ];
        for (line, expected) in cases {
            assert_eq!(resolver.key(ip("::1"), &headers(&[("forwarded", line)])), ip(expected), "{line}");
        }
        let xff = headers(&[("x-forwarded-for", "192.0.2.60")]);
        assert_eq!(resolver.key(ip("::1"), &xff), ip("::"));
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_64_and_mapped_ipv4_as_ipv4() {
        let resolver = ClientAddress::default();
        let none = HeaderMap::new();
        assert_eq!(resolver.key(ip("2001:db8:1:2:3:4:5:6"), &none), ip("2001:db8:1:2::"));
        assert_eq!(resolver.key(ip("::ffff:192.0.2.1"), &none), ip("192.0.2.1"));
        let mapped = ClientAddress::new(proxies(&["192.0.2.1"]), ClientIpHeader::XForwardedFor);
        let xff = headers(&[("x-forwarded-for", "198.51.100.1")]);
        assert_eq!(mapped.key(ip("::ffff:192.0.2.1"), &xff), ip("198.51.100.1"));
    }

    #[test]
    fn proxies_parse_as_addresses_or_networks() {
        assert_eq!("10.1.2.3/8".parse::<TrustedProxy>().unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(" ::1 ".parse::<TrustedProxy>().unwrap().to_string(), "::1/128");
        assert_eq!("127.0.0.1".parse::<TrustedProxy>().unwrap().to_string(), "127.0.0.1/32");
        assert!("proxy.example".parse::<TrustedProxy>().is_err());
        assert!("10.0.0.0/33".parse::<TrustedProxy>().is_err());
        assert_eq!("X-Forwarded-For".parse::<ClientIpHeader>(), Ok(ClientIpHeader::XForwardedFor));
        assert_eq!("forwarded".parse::<ClientIpHeader>(), Ok(ClientIpHeader::Forwarded));
        assert!("x-real-ip".parse::<ClientIpHeader>().is_err());
    }
}
