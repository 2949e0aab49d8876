//! Who is behind a connection: the proxy and the DNS responder know a sandbox only by the address of its end of
//! the link (each sandbox has its own, see [`crate::network`]), and look it up here.
//!
//! Invariant: an address is registered only while its link exists, and a link's address is never another
//! sandbox's while it is registered, so a lookup can never find the wrong sandbox.

use crate::audit::AuditLog;
use crate::bandwidth::Bandwidth;
use crate::policy::Leash;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, RwLock};

/// Whose sandbox it is, for the audit trail and the metrics.
#[derive(Debug)]
pub struct Owner {
    pub tenant: String,
    pub conversation: String,
    /// The run now running in the sandbox (a live sandbox's changes from call to call).
    run_id: Mutex<Option<String>>,
}

impl Owner {
    pub fn new(tenant: impl Into<String>, conversation: impl Into<String>) -> Self {
        Self { tenant: tenant.into(), conversation: conversation.into(), run_id: Mutex::new(None) }
    }

    pub fn run_id(&self) -> Option<String> {
        self.run_id.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    pub fn set_run_id(&self, run_id: Option<String>) {
        *self.run_id.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = run_id;
    }
}

/// One leashed sandbox, as the proxy and the DNS responder see it.
pub struct Leashed {
    pub leash: Leash,
    pub owner: Owner,
    pub audit: AuditLog,
    /// Connections open at once through the proxy, at most (the rest are refused and recorded).
    pub connections: Arc<tokio::sync::Semaphore>,
    /// Bytes per second each way, for all of the sandbox's connections together (0: no cap).
    pub bytes_per_second: u64,
    /// The buckets that hold the sandbox to `bytes_per_second`.
    pub bandwidth: Bandwidth,
    /// Connections whose record is not written yet (see `proxy::tracker`).
    pub(crate) unrecorded: std::sync::atomic::AtomicUsize,
}

impl Leashed {
    /// A sandbox on `leash` with at most `max_connections` open at once and `bytes_per_second` each way.
    pub fn new(leash: Leash, owner: Owner, max_connections: usize, bytes_per_second: u64) -> Self {
        Self {
            leash,
            owner,
            audit: AuditLog::default(),
            connections: Arc::new(tokio::sync::Semaphore::new(max_connections)),
            bytes_per_second,
            bandwidth: Bandwidth::new(bytes_per_second),
            unrecorded: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Connections opened and not yet recorded.
    pub fn open_connections(&self) -> usize {
        self.unrecorded.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The leashed sandboxes, by the address of their end of the link.
#[derive(Default)]
pub struct Registry {
    by_address: RwLock<HashMap<IpAddr, Arc<Leashed>>>,
}

impl Registry {
    pub fn insert(&self, address: IpAddr, leashed: Arc<Leashed>) {
        self.by_address.write().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(address, leashed);
    }

    pub fn remove(&self, address: IpAddr) {
        self.by_address.write().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&address);
    }

    /// The sandbox whose end of the link is `peer`; `None` for any other address (nothing is served to it).
    pub fn get(&self, peer: IpAddr) -> Option<Arc<Leashed>> {
        self.by_address.read().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&peer).cloned()
    }
}
