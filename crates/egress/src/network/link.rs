//! One leashed sandbox's network namespace and its link to the gateway.
//!
//! Invariant: while a `Link` lives, its addresses are its own (no other link of the same gateway has them); when
//! it drops, the gateway's end of its veth pair is deleted (the sandbox's end goes with it) before the addresses
//! are handed out again. The namespace itself lives on while a process or a descriptor holds it, with loopback
//! only.

use super::addresses::Slot;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// What removes a link when it drops: its gateway's (the link knows no more of it).
pub(super) trait Unlink: Send + Sync {
    /// Deletes the link of `slot` and frees the slot.
    fn unlink(&self, slot: Slot);
}

/// One sandbox's namespace and its link; dropping it removes the link (the namespace lives on while a process or
/// a descriptor holds it, with loopback only).
pub struct Link {
    /// The sandbox's end of the link: how the proxy knows the sandbox.
    pub sandbox: Ipv4Addr,
    /// The gateway's end: the sandbox's proxy and name server.
    pub gateway: Ipv4Addr,
    netns: OwnedFd,
    slot: Slot,
    owner: Arc<dyn Unlink>,
}

impl Link {
    pub(super) fn new(slot: Slot, netns: OwnedFd, owner: Arc<dyn Unlink>) -> Link {
        Link { sandbox: slot.sandbox(super::LINKS_NET), gateway: slot.gateway(super::LINKS_NET), netns, slot, owner }
    }

    /// The sandbox's network namespace (an init joins it through `/proc/<server>/fd/<fd>`).
    pub fn netns(&self) -> &OwnedFd {
        &self.netns
    }

    /// The name of the gateway's end of the link, in the gateway namespace (`sl-<n>`); the sandbox's end is `eth0`
    /// in the sandbox's.
    pub fn interface(&self) -> String {
        self.slot.interface()
    }
}

impl Drop for Link {
    /// Blocks until the link is deleted (a few milliseconds; docs/benchmarks.md).
    fn drop(&mut self) {
        self.owner.unlink(self.slot);
    }
}
