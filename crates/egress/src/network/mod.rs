//! The namespaces and links a leashed sandbox's traffic goes through.
//!
//! - The **gateway** ([`Gateway`]): one network namespace per server, made by the server (as root, so it belongs to
//!   the host's user namespace and no sandbox can reconfigure it). Loopback up; every synthetic address
//!   ([`SYNTHETIC`]) and every captured range is *local* in it (`ip route add local … dev lo`), so a listener on
//!   `0.0.0.0:port` there accepts a connection to any of them; forwarding is off and IPv6 is off, so nothing ever
//!   passes through it. The proxy's and the DNS responder's sockets are made inside it; their upstream connections
//!   are made by the server in its own namespace.
//! - A **link** ([`Link`]) per leashed sandbox: a new network namespace (loopback up) with one end of a veth pair
//!   (`eth0`), the other end (`sl-<n>`) in the gateway; a /31 out of [`LINKS`] between them; in the sandbox's
//!   namespace, routes to the synthetic range and the captured ranges via the gateway's end, and nothing else (every
//!   other address: "network is unreachable", at once). The sandbox's init joins that namespace instead of making
//!   its own.
//!
//! Everything is configured over netlink (rtnetlink), from short-lived threads that enter the namespace concerned
//! ([`namespace`]): a socket, netlink's included, belongs for good to the namespace its thread was in when it was
//! made. IPv4 only: the link has no IPv6 address, and an IPv6 range is refused.

mod addresses;
mod gateway;
mod link;
mod namespace;
mod netlink;
mod sysctl;

pub use gateway::Gateway;
pub use link::Link;

use ipnet::Ipv4Net;
use std::net::Ipv4Addr;

/// The addresses the DNS responder hands out for allowed names (RFC 2544's benchmarking range: never routed on
/// the internet).
pub const SYNTHETIC: &str = "198.18.0.0/15";

/// [`SYNTHETIC`], parsed.
pub const SYNTHETIC_NET: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(198, 18, 0, 0), 15);

/// The /31s of the links, gateway's end even, sandbox's end odd (shared address space, RFC 6598).
pub const LINKS: &str = "100.127.0.0/16";

/// [`LINKS`], parsed.
pub const LINKS_NET: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(100, 127, 0, 0), 16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parsed_ranges_are_the_documented_ones() {
        assert_eq!(SYNTHETIC.parse::<Ipv4Net>(), Ok(SYNTHETIC_NET));
        assert_eq!(LINKS.parse::<Ipv4Net>(), Ok(LINKS_NET));
    }
}
