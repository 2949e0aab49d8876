//! The gateway namespace: where the sandboxes' links end, and where the proxy's and the DNS responder's sockets
//! listen.
//!
//! Invariants: made by this process (root), so it belongs to the host's user namespace and no sandbox can change
//! it; forwarding off, IPv6 off and pings unanswered, so a packet that reaches it is either for one of its sockets
//! or refused; no
//! route but loopback's, the links' /31s and the local ranges, so nothing made in it can reach the host or the
//! internet (the proxy's upstream connections are made in the server's own namespace).

use super::addresses::{Addresses, Slot};
use super::link::{Link, Unlink};
use super::netlink::{self, Netlink};
use super::{LINKS_NET, SYNTHETIC_NET, namespace, sysctl};
use ipnet::{IpNet, Ipv4Net};
use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth};
use rtnetlink::packet_route::route::{RouteScope, RouteType};
use rtnetlink::{LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The kernel's `local` routing table (`RT_TABLE_LOCAL`).
const TABLE_LOCAL: u32 = 255;

/// How long a new link may take to carry packets: the kernel's link watcher runs within a second of a change,
/// later only on a host too busy to run anything.
const READY_LIMIT: Duration = Duration::from_secs(10);

/// The name of the sandbox's end of its link, inside the sandbox's namespace.
pub(super) const SANDBOX_END: &str = "eth0";

/// The gateway namespace.
pub struct Gateway {
    shared: Arc<Shared>,
}

/// What a gateway's links need after it: its namespace (to delete their ends) and its addresses (to free them).
pub(super) struct Shared {
    netns: OwnedFd,
    /// The captured ranges, local here: the only ranges besides SYNTHETIC a link may route.
    captured: Vec<Ipv4Net>,
    addresses: Mutex<Addresses>,
}

impl Gateway {
    /// Makes the gateway namespace, with [`SYNTHETIC`](super::SYNTHETIC) and `captured` local in it.
    pub fn create(captured: &[IpNet]) -> io::Result<Gateway> {
        let captured = ranges(captured, "a captured range")?;
        let local = captured.clone();
        let (netns, ()) = namespace::run_in_new(|_| {
            // 0 in a new namespace, unless the host's `net.core.devconf_inherit_init_net` copies the host's.
            sysctl::set("net/ipv4/ip_forward", "0")?;
            sysctl::ipv6_off(true)?;
            // Pings to a synthetic address go unanswered, as they would on the way to a real host.
            sysctl::set("net/ipv4/icmp_echo_ignore_all", "1")?;
            netlink::block_on(async {
                let gateway = Netlink::open("the gateway")?;
                let lo = gateway.index("lo").await?;
                gateway.set_up(lo, "lo").await?;
                for range in std::iter::once(SYNTHETIC_NET).chain(local) {
                    let route = RouteMessageBuilder::<Ipv4Addr>::new()
                        .destination_prefix(range.network(), range.prefix_len())
                        .table_id(TABLE_LOCAL)
                        .kind(RouteType::Local)
                        .scope(RouteScope::Host)
                        .output_interface(lo)
                        .build();
                    gateway.add_route(route, range, "local").await?;
                }
                Ok(())
            })
        })?;
        Ok(Gateway { shared: Arc::new(Shared { netns, captured, addresses: Mutex::new(Addresses::new(LINKS_NET)) }) })
    }

    /// The gateway's network namespace.
    pub fn netns(&self) -> &OwnedFd {
        &self.shared.netns
    }

    /// A TCP listener bound to `address` inside the gateway namespace (non-blocking, for tokio; `SO_REUSEADDR`).
    pub fn tcp_listener(&self, address: SocketAddr) -> io::Result<std::net::TcpListener> {
        namespace::run_in(&self.shared.netns, || {
            // std sets SO_REUSEADDR on every listener it binds on Unix.
            let listener = std::net::TcpListener::bind(address).map_err(|error| {
                io::Error::new(error.kind(), format!("listen on {address} in the gateway: {error}"))
            })?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
    }

    /// A UDP socket bound to `address` inside the gateway namespace (non-blocking, for tokio).
    pub fn udp_socket(&self, address: SocketAddr) -> io::Result<std::net::UdpSocket> {
        namespace::run_in(&self.shared.netns, || {
            let socket = std::net::UdpSocket::bind(address)
                .map_err(|error| io::Error::new(error.kind(), format!("bind {address} in the gateway: {error}")))?;
            socket.set_nonblocking(true)?;
            Ok(socket)
        })
    }

    /// A new sandbox namespace linked to the gateway, with routes to [`SYNTHETIC`](super::SYNTHETIC) and `routes`
    /// through it. Each of `routes` must be within a captured range (elsewhere the gateway would only drop it).
    pub fn link(&self, routes: &[IpNet]) -> io::Result<Link> {
        let routes = ranges(routes, "a route")?;
        if let Some(route) =
            routes.iter().find(|route| !self.shared.captured.iter().any(|range| range.contains(*route)))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a route, {route}, is not within a range the gateway captures"),
            ));
        }
        let slot = self.shared.addresses().take().ok_or_else(|| {
            io::Error::new(io::ErrorKind::AddrNotAvailable, format!("every link address of {LINKS_NET} is in use"))
        })?;
        match self.shared.make_link(slot, &routes) {
            Ok(netns) => Ok(Link::new(slot, netns, self.shared.clone())),
            Err(error) => {
                self.shared.unlink(slot);
                Err(error)
            }
        }
    }

    /// The names of the interfaces in the gateway namespace: `lo` and the gateway's end of every link.
    pub fn interfaces(&self) -> io::Result<Vec<String>> {
        namespace::run_in(&self.shared.netns, || {
            netlink::block_on(async { Netlink::open("the gateway")?.interfaces().await })
        })
    }
}

impl Shared {
    fn addresses(&self) -> MutexGuard<'_, Addresses> {
        self.addresses.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes the sandbox's namespace and the link of `slot` to it; returns the namespace.
    fn make_link(&self, slot: Slot, routes: &[Ipv4Net]) -> io::Result<OwnedFd> {
        let name = slot.interface();
        let (gateway_end, sandbox_end) = (slot.gateway(LINKS_NET), slot.sandbox(LINKS_NET));
        let (netns, ()) = namespace::run_in_new(|sandbox_netns| {
            // The link's ends get no IPv6 address (link-local included): IPv4 only, and nothing to reach but the
            // gateway's IPv4 listeners. Loopback keeps `::1`, as in a sandbox without a leash.
            sysctl::ipv6_off(false)?;
            netlink::block_on(async {
                let sandbox = Netlink::open("the sandbox's namespace")?;
                let lo = sandbox.index("lo").await?;
                sandbox.set_up(lo, "lo").await?;

                namespace::enter(&self.netns)?;
                let gateway = Netlink::open("the gateway")?;
                // The sandbox's end is made straight in the sandbox's namespace (its name is the same in every
                // sandbox, so it must never exist in the gateway's).
                let peer = LinkUnspec::new_with_name(SANDBOX_END).setns_by_fd(sandbox_netns.as_raw_fd()).build();
                let pair = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
                    .name(name.clone())
                    .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
                    .build();
                gateway.add_link(pair, &format!("make the veth pair {name} with {SANDBOX_END} in the sandbox")).await?;
                let end = gateway.index(&name).await?;
                gateway.add_address(end, &name, gateway_end, 31).await?;
                gateway.set_up(end, &name).await?;

                let eth0 = sandbox.index(SANDBOX_END).await?;
                sandbox.add_address(eth0, SANDBOX_END, sandbox_end, 31).await?;
                sandbox.set_up(eth0, SANDBOX_END).await?;
                for range in std::iter::once(SYNTHETIC_NET).chain(routes.iter().copied()) {
                    let route = RouteMessageBuilder::<Ipv4Addr>::new()
                        .destination_prefix(range.network(), range.prefix_len())
                        .gateway(gateway_end)
                        .output_interface(eth0)
                        .build();
                    sandbox.add_route(route, range, &format!("via {gateway_end}, the gateway end of {name}")).await?;
                }
                // Both ends carry packets before the sandbox can send its first one (see `Netlink::carries`).
                gateway.wait_until_it_carries(end, &name, READY_LIMIT).await?;
                sandbox.wait_until_it_carries(eth0, SANDBOX_END, READY_LIMIT).await?;
                Ok(())
            })
        })?;
        Ok(netns)
    }
}

/// `ranges` as IPv4 networks, refused when one is IPv6 or overlaps [`LINKS`](super::LINKS) (which would make the
/// links' own addresses local in the gateway, or route them away).
fn ranges(ranges: &[IpNet], what: &str) -> io::Result<Vec<Ipv4Net>> {
    ranges
        .iter()
        .map(|range| match range.trunc() {
            IpNet::V4(range) if range.contains(&LINKS_NET) || LINKS_NET.contains(&range) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what}, {range}, overlaps the links' addresses {LINKS_NET}"),
            )),
            IpNet::V4(range) => Ok(range),
            IpNet::V6(range) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what}, {range}, is IPv6: a sandbox's link is IPv4 only"),
            )),
        })
        .collect()
}

impl Unlink for Shared {
    /// Deletes the link of `slot` (its gateway end, which takes the sandbox's end with it) if it exists, and frees
    /// the slot. A slot whose link could not be deleted is never handed out again.
    fn unlink(&self, slot: Slot) {
        let name = slot.interface();
        let deleted = namespace::run_in(&self.netns, || {
            netlink::block_on(async { Netlink::open("the gateway")?.delete_link(&name).await })
        });
        match deleted {
            Ok(_) => self.addresses().give_back(slot),
            Err(error) => tracing::warn!(%error, "a link of the gateway is left, and its address is not reused"),
        }
    }
}
