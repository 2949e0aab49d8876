//! The /31s of [`LINKS`](super::LINKS), handed out to links and taken back.
//!
//! Invariant: a slot is never handed out while it is in use (so no two live links share an address, and no
//! sandbox can be mistaken for another by its address); a freed slot is handed out again, the lowest first, so
//! the addresses in use stay few and low however many links come and go.

use ipnet::Ipv4Net;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// One /31: slot `n` is the `n`-th pair of the range, gateway's end even, sandbox's end odd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot(pub(super) u32);

impl Slot {
    /// The gateway's end of the slot's /31 in `range`.
    pub(super) fn gateway(self, range: Ipv4Net) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(range.network()) + 2 * self.0)
    }

    /// The sandbox's end of the slot's /31 in `range`.
    pub(super) fn sandbox(self, range: Ipv4Net) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(range.network()) + 2 * self.0 + 1)
    }

    /// The name of the gateway's end of the link: `sl-<n>` (at most 15 bytes, the kernel's limit).
    pub(super) fn interface(self) -> String {
        format!("sl-{}", self.0)
    }
}

/// The slots of a range: those never used, and those freed.
#[derive(Debug)]
pub(super) struct Addresses {
    range: Ipv4Net,
    /// Slots at and above this one have never been handed out.
    fresh: u32,
    freed: BTreeSet<u32>,
}

impl Addresses {
    pub(super) fn new(range: Ipv4Net) -> Self {
        Self { range, fresh: 0, freed: BTreeSet::new() }
    }

    /// A slot no live link has, or `None` when every one is in use.
    pub(super) fn take(&mut self) -> Option<Slot> {
        if let Some(slot) = self.freed.pop_first() {
            return Some(Slot(slot));
        }
        let capacity = (1u64 << (32 - u32::from(self.range.prefix_len()))) / 2;
        if u64::from(self.fresh) >= capacity {
            return None;
        }
        self.fresh += 1;
        Some(Slot(self.fresh - 1))
    }

    /// Gives `slot` back, for a later link. Call only once nothing uses its addresses any more.
    pub(super) fn give_back(&mut self, slot: Slot) {
        debug_assert!(slot.0 < self.fresh && !self.freed.contains(&slot.0));
        self.freed.insert(slot.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Ipv4Net {
        text.parse().unwrap()
    }

    #[test]
    fn a_slot_is_an_even_gateway_and_the_odd_sandbox_next_to_it() {
        let links = range("100.127.0.0/16");
        assert_eq!(
            (Slot(0).gateway(links), Slot(0).sandbox(links), Slot(0).interface()),
            (Ipv4Addr::new(100, 127, 0, 0), Ipv4Addr::new(100, 127, 0, 1), "sl-0".to_string())
        );
        assert_eq!(
            (Slot(32767).gateway(links), Slot(32767).sandbox(links), Slot(32767).interface()),
            (Ipv4Addr::new(100, 127, 255, 254), Ipv4Addr::new(100, 127, 255, 255), "sl-32767".to_string())
        );
    }

    #[test]
    fn slots_in_use_are_never_handed_out_and_freed_ones_are_reused_lowest_first() {
        let mut addresses = Addresses::new(range("100.127.0.0/16"));
        let taken: Vec<u32> = (0..5).filter_map(|_| addresses.take()).map(|slot| slot.0).collect();
        assert_eq!(taken, vec![0, 1, 2, 3, 4]);
        addresses.give_back(Slot(3));
        addresses.give_back(Slot(1));
        let again: Vec<u32> = (0..3).filter_map(|_| addresses.take()).map(|slot| slot.0).collect();
        assert_eq!(again, vec![1, 3, 5]);
    }

    #[test]
    fn a_full_range_hands_out_nothing_until_a_slot_is_freed() {
        let mut addresses = Addresses::new(range("100.127.0.0/30"));
        assert_eq!((addresses.take(), addresses.take(), addresses.take()), (Some(Slot(0)), Some(Slot(1)), None));
        addresses.give_back(Slot(0));
        assert_eq!(addresses.take(), Some(Slot(0)));
    }
}
