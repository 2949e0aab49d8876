//! One connection's audit record, made as the connection is handled and recorded when it ends (on every path:
//! the record is written when the tracker is dropped), with the connection counter.

use crate::audit::{ConnectionRecord, Route};
use crate::intercept::Carried;
use crate::registry::Leashed;
use std::sync::Arc;
use std::time::Instant;

pub struct Tracker {
    leashed: Arc<Leashed>,
    record: ConnectionRecord,
    started: Instant,
}

impl Tracker {
    /// A connection to `host:port` by `route`, refused until [`Tracker::allow`] says otherwise.
    pub fn new(leashed: Arc<Leashed>, route: Route, host: String, port: u16) -> Self {
        let run_id = leashed.owner.run_id();
        leashed.unrecorded.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let record = ConnectionRecord {
            host,
            port,
            route,
            allowed: false,
            reason: "closed before it named a host".to_owned(),
            bytes_sent: 0,
            bytes_received: 0,
            started_ms: crate::audit::now_ms(),
            duration_ms: 0,
            run_id,
        };
        Self { leashed, record, started: Instant::now() }
    }

    pub fn leashed(&self) -> &Arc<Leashed> {
        &self.leashed
    }

    pub fn host(&self) -> &str {
        &self.record.host
    }

    pub fn port(&self) -> u16 {
        self.record.port
    }

    pub fn set_route(&mut self, route: Route) {
        self.record.route = route;
    }

    pub fn set_destination(&mut self, host: String, port: u16) {
        self.record.host = host;
        self.record.port = port;
    }

    pub fn allow(&mut self, reason: String) {
        self.record.allowed = true;
        self.record.reason = reason;
    }

    pub fn refuse(&mut self, reason: String) {
        self.record.allowed = false;
        self.record.reason = reason;
    }

    /// Adds to the reason of an allowed connection what went wrong after (the host unreachable...).
    pub fn failed(&mut self, what: &str) {
        self.record.reason = format!("{}; {what}", self.record.reason);
    }

    pub fn carried(&mut self, carried: Carried) {
        self.record.bytes_sent += carried.sent;
        self.record.bytes_received += carried.received;
    }

    /// What an interceptor said it carried, or why it failed.
    pub fn intercepted(&mut self, served: std::io::Result<Carried>) {
        match served {
            Ok(carried) => self.carried(carried),
            Err(error) => self.failed(&format!("interceptor: {error}")),
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.record.duration_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let outcome = if self.record.allowed { "allowed" } else { "refused" };
        metrics::counter!("sandlot_egress_connections_total", "outcome" => outcome).increment(1);
        tracing::debug!(
            host = %self.record.host, port = self.record.port, allowed = self.record.allowed,
            reason = %self.record.reason, "egress connection"
        );
        self.leashed.audit.record(self.record.clone());
        self.leashed.unrecorded.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}
