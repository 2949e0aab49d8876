//! Synthetic addresses: allowed names to addresses out of [`crate::network::SYNTHETIC`] and back.
//!
//! The DNS responder answers an allowed name with its synthetic address; a connection to that address, caught by
//! the gateway, tells the proxy which name the sandbox meant. One table per server, shared by every sandbox (a
//! name's address is the same for all). Invariants: while a name is in the table it keeps its address, and an
//! address belongs to one name at a time. The table is bounded: when it is full, the address handed out least
//! recently goes to the new name, so a sandbox that still holds that old answer (past its 60 s TTL, or after
//! [`Synthetic::CAPACITY`] other names were asked for since) reaches the new name's policy check, never a
//! connection it was not allowed.

use lru::LruCache;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;

/// The table of one server.
pub struct Synthetic {
    inner: Mutex<Inner>,
    first: u32,
    capacity: usize,
}

struct Inner {
    /// Name to address offset from `first`, most recently handed out first.
    by_name: LruCache<String, u32>,
    /// Address offset to name.
    by_offset: Vec<Option<String>>,
}

impl Synthetic {
    /// Names held at most: the /15 less its first and last addresses and [`crate::SERVICE_ADDRESS`].
    pub const CAPACITY: usize = (1 << 17) - 3;

    /// The whole of [`crate::network::SYNTHETIC`].
    pub fn new() -> Self {
        Self::with_capacity(Self::CAPACITY)
    }

    /// A table of at most `capacity` names (at least 1, at most [`Synthetic::CAPACITY`]).
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, Self::CAPACITY);
        Self {
            inner: Mutex::new(Inner { by_name: LruCache::unbounded(), by_offset: Vec::new() }),
            first: u32::from(crate::SERVICE_ADDRESS) + 1, // the proxy's and the name server's own comes first
            capacity,
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The address of `name` (already normalized), handing one out if it has none.
    pub fn address(&self, name: &str) -> Ipv4Addr {
        let mut inner = self.inner();
        if let Some(offset) = inner.by_name.get(name) {
            return Ipv4Addr::from(self.first + offset);
        }
        let offset = if inner.by_offset.len() < self.capacity {
            inner.by_offset.push(None);
            (inner.by_offset.len() - 1) as u32
        } else {
            match inner.by_name.pop_lru() {
                Some((_, offset)) => offset,
                None => 0,
            }
        };
        inner.by_name.put(name.to_owned(), offset);
        inner.by_offset[offset as usize] = Some(name.to_owned());
        Ipv4Addr::from(self.first + offset)
    }

    /// The name `address` stands for, if it is a synthetic address in the table.
    pub fn name(&self, address: IpAddr) -> Option<String> {
        let IpAddr::V4(address) = address.to_canonical() else { return None };
        let offset = u32::from(address).checked_sub(self.first)?;
        self.inner().by_offset.get(offset as usize).cloned().flatten()
    }

    /// Whether `address` is in the synthetic range at all (in the table or not).
    pub fn contains(address: IpAddr) -> bool {
        match address.to_canonical() {
            IpAddr::V4(address) => address.octets()[0] == 198 && address.octets()[1] & 0xfe == 18,
            IpAddr::V6(_) => false,
        }
    }
}

impl Default for Synthetic {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_name_same_address_and_back() {
        let table = Synthetic::new();
        let pypi = table.address("pypi.org");
        let other = table.address("files.pythonhosted.org");
        assert_ne!(pypi, other);
        assert_eq!(table.address("pypi.org"), pypi);
        assert_eq!(pypi, Ipv4Addr::new(198, 18, 0, 2), "198.18.0.1 is the service address");
        assert_eq!(table.name(pypi.into()).as_deref(), Some("pypi.org"));
        assert_eq!(table.name(Ipv4Addr::new(198, 18, 0, 9).into()), None);
        assert_eq!(table.name(crate::SERVICE_ADDRESS.into()), None);
        assert_eq!(table.name(Ipv4Addr::new(10, 0, 0, 1).into()), None);
        assert!(Synthetic::contains(Ipv4Addr::new(198, 19, 255, 255).into()));
        assert!(!Synthetic::contains(Ipv4Addr::new(198, 20, 0, 0).into()));
    }

    #[test]
    fn full_table_recycles_the_least_recently_handed_out() {
        let table = Synthetic::with_capacity(2);
        let a = table.address("a.test");
        let b = table.address("b.test");
        assert_eq!(table.address("a.test"), a, "a is now the most recent");
        let c = table.address("c.test");
        assert_eq!(c, b, "b was handed out least recently");
        assert_eq!(table.name(b.into()).as_deref(), Some("c.test"));
        assert_eq!(table.name(a.into()).as_deref(), Some("a.test"));
        assert_ne!(table.address("b.test"), table.address("c.test"));
    }

    #[test]
    fn the_whole_range_fits() {
        let last = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 2)) + Synthetic::CAPACITY as u32 - 1);
        assert_eq!(last, Ipv4Addr::new(198, 19, 255, 254));
    }
}
