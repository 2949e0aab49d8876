//! The network on a leash: what a sandbox may reach beyond its loopback, and the record of what it did.
//!
//! Off unless an operator sets a policy. With one, a leashed sandbox's network namespace has a link to one place
//! only, the gateway namespace the server owns ([`network`]), where sandlot's own proxy ([`proxy`]) and DNS
//! responder ([`dns`]) listen. The sandbox resolves names only through that responder, which answers an allowed
//! name with a synthetic address ([`synthetic`]) and never asks anyone else; every TCP connection the sandbox opens
//! (through `HTTP_PROXY`, or straight to a synthetic address) ends at the proxy, which checks the [`policy`],
//! resolves the real name on the host ([`resolver`]), connects, and records the connection ([`audit`]). Nothing
//! else leaves: the sandbox has no route but the link, and the gateway namespace forwards nothing.
//!
//! [`Egress`] ties it together: one per server, started from an [`EgressConfig`]; each leashed sandbox gets a
//! [`SandboxNetwork`] from [`Egress::leash`].

pub mod audit;
pub mod bandwidth;
pub mod credentials;
pub mod dns;
pub mod intercept;
pub mod network;
pub mod policy;
pub mod proxy;
pub mod registry;
pub mod resolver;
mod service;
pub mod synthetic;

/// Where every leashed sandbox finds its proxy (port [`PROXY_PORT`]) and name server (port 53): the first
/// synthetic address, local in the gateway and routed there from every link, so the same for every sandbox (its
/// `/etc/resolv.conf` is the same file for all). The synthetic table never hands it out for a name.
pub const SERVICE_ADDRESS: std::net::Ipv4Addr = std::net::Ipv4Addr::new(198, 18, 0, 1);

/// The explicit proxy's port at [`SERVICE_ADDRESS`] (`HTTP_PROXY`, `HTTPS_PROXY`).
pub const PROXY_PORT: u16 = 3128;

pub use audit::{AuditLog, ConnectionRecord, Route};
pub use policy::{Leash, Policy, PolicyError, PolicySpec, Verdict};
pub use registry::{Leashed, Owner, Registry};
pub use service::{Egress, EgressConfig, EgressError, SandboxNetwork, environment, resolv_conf};
