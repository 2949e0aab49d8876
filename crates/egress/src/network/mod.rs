//! The namespaces and links a leashed sandbox's traffic goes through. (Skeleton: the egress-network helper
//! implements it; the signatures are the contract.)
//!
//! - The **gateway**: one network namespace per server, made by the server (as root, so it belongs to the host's
//!   user namespace and no sandbox can reconfigure it). Loopback up; every synthetic address ([`SYNTHETIC`]) and
//!   every captured range is *local* in it (`ip route add local … dev lo`), so a listener on `0.0.0.0:port`
//!   there accepts a connection to any of them; forwarding is off, so nothing ever passes through it. The proxy's
//!   and the DNS responder's sockets are made inside it; their upstream connections are made by the server in its
//!   own namespace.
//! - A **link** per leashed sandbox: a new network namespace (loopback up) with one end of a veth pair, the other
//!   end in the gateway; a /31 out of [`LINKS`] between them; in the sandbox's namespace, routes to the synthetic
//!   range and the captured ranges via the gateway's end, and nothing else (every other address: "network is
//!   unreachable", at once). The sandbox's init joins that namespace instead of making its own.

use ipnet::IpNet;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;

/// The addresses the DNS responder hands out for allowed names (RFC 2544's benchmarking range: never routed on
/// the internet).
pub const SYNTHETIC: &str = "198.18.0.0/15";

/// The /31s of the links, gateway's end even, sandbox's end odd (shared address space, RFC 6598).
pub const LINKS: &str = "100.127.0.0/16";

/// The gateway namespace.
pub struct Gateway {}

impl Gateway {
    /// Makes the gateway namespace, with [`SYNTHETIC`] and `captured` local in it.
    pub fn create(_captured: &[IpNet]) -> io::Result<Gateway> {
        todo!("egress-network helper")
    }

    /// A TCP listener bound to `address` inside the gateway namespace (non-blocking, for tokio).
    pub fn tcp_listener(&self, _address: SocketAddr) -> io::Result<std::net::TcpListener> {
        todo!("egress-network helper")
    }

    /// A UDP socket bound to `address` inside the gateway namespace (non-blocking, for tokio).
    pub fn udp_socket(&self, _address: SocketAddr) -> io::Result<std::net::UdpSocket> {
        todo!("egress-network helper")
    }

    /// A new sandbox namespace linked to the gateway, with routes to [`SYNTHETIC`] and `routes` through it.
    pub fn link(&self, _routes: &[IpNet]) -> io::Result<Link> {
        todo!("egress-network helper")
    }
}

/// One sandbox's namespace and its link; dropping it removes the link (the namespace lives on while a process or
/// a descriptor holds it, with loopback only).
pub struct Link {
    /// The sandbox's end of the link: how the proxy knows the sandbox.
    pub sandbox: Ipv4Addr,
    /// The gateway's end: the sandbox's proxy and name server.
    pub gateway: Ipv4Addr,
    netns: OwnedFd,
}

impl Link {
    /// The sandbox's network namespace (an init joins it through `/proc/<server>/fd/<fd>`).
    pub fn netns(&self) -> &OwnedFd {
        &self.netns
    }
}
