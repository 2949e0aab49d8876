//! The audit trail: one record per connection a leashed sandbox opened or tried to open (and per name it asked
//! for that was refused), kept with the sandbox's network until its owner takes them for a run's history.
//!
//! A sandbox can try to open connections without end; the log keeps at most [`AuditLog::CAPACITY`] records and
//! counts the ones it dropped, so a flood costs the server bounded memory and is still visible.

use serde::{Deserialize, Serialize};
use std::sync::Mutex;

/// How a connection reached the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Route {
    /// `CONNECT host:port` to the proxy's port (`HTTPS_PROXY`).
    Connect,
    /// A plain-HTTP request with an absolute URL to the proxy's port (`HTTP_PROXY`).
    HttpProxy,
    /// Straight to a synthetic address, caught by the gateway: the name from TLS's SNI or HTTP's `Host`.
    Transparent,
    /// A DNS question (recorded only when refused: an allowed name's answer is no connection yet).
    Dns,
}

/// One connection, as the run's history shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionRecord {
    /// The name the sandbox asked for (SNI, `Host`, `CONNECT`'s or the DNS question's), or the address if it
    /// named none.
    pub host: String,
    pub port: u16,
    pub route: Route,
    pub allowed: bool,
    /// The rule that allowed it, or why it was refused.
    pub reason: String,
    /// Bytes from the sandbox to the host, and back.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// When it was opened, in milliseconds since the Unix epoch, and how long it lasted.
    pub started_ms: u64,
    pub duration_ms: u64,
    /// The run that was current in the sandbox when it was opened (a live sandbox serves many runs).
    pub run_id: Option<String>,
}

/// The records of one sandbox's network, oldest first.
#[derive(Default)]
pub struct AuditLog {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: Vec<ConnectionRecord>,
    dropped: u64,
}

impl AuditLog {
    /// Records kept at most until they are taken.
    pub const CAPACITY: usize = 1000;

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn record(&self, record: ConnectionRecord) {
        let mut inner = self.inner();
        if inner.records.len() >= Self::CAPACITY {
            inner.dropped += 1;
        } else {
            inner.records.push(record);
        }
    }

    /// The records so far and how many were dropped since the last take; the log starts empty again.
    pub fn take(&self) -> (Vec<ConnectionRecord>, u64) {
        let mut inner = self.inner();
        (std::mem::take(&mut inner.records), std::mem::take(&mut inner.dropped))
    }
}

/// Now, in milliseconds since the Unix epoch (`started_ms`).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(port: u16) -> ConnectionRecord {
        ConnectionRecord {
            host: "pypi.org".into(),
            port,
            route: Route::Connect,
            allowed: true,
            reason: "allow pypi.org".into(),
            bytes_sent: 0,
            bytes_received: 0,
            started_ms: 0,
            duration_ms: 0,
            run_id: None,
        }
    }

    #[test]
    fn a_flood_is_counted_not_kept() {
        let log = AuditLog::default();
        for port in 0..(AuditLog::CAPACITY as u16 + 5) {
            log.record(record(port));
        }
        let (records, dropped) = log.take();
        assert_eq!((records.len(), dropped), (AuditLog::CAPACITY, 5));
        assert_eq!(log.take(), (Vec::new(), 0));
    }
}
