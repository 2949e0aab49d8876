//! The connections a leashed run made (its egress audit trail, see `network`), kept beside its row (table
//! `run_connections`, one JSON document per run) and gone with it. Runs without any keep nothing here.

use rusqlite::params;

use super::{History, Store};
use crate::{ConnectionRecord, Result};

/// A run's audit trail as the history shows it: every connection, and how many more there were than the trail
/// keeps (`sandlot_egress::AuditLog::CAPACITY`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NetworkTrail {
    pub connections: Vec<ConnectionRecord>,
    pub dropped: u64,
}

impl History {
    /// Keeps the connections of run `id` (nothing for a run that made none).
    pub fn store_connections(&self, id: &str, outcome: &crate::RunOutcome) -> Result<()> {
        if outcome.connections.is_empty() && outcome.connections_dropped == 0 {
            return Ok(());
        }
        let trail = NetworkTrail { connections: outcome.connections.clone(), dropped: outcome.connections_dropped };
        let json = serde_json::to_string(&trail).unwrap_or_default();
        match &self.store {
            Store::Sqlite(db) => db.write(
                "insert into",
                "INSERT OR REPLACE INTO run_connections (run_id, trail) VALUES (?1, ?2)",
                params![id, json],
            )?,
            Store::Postgres(db) => {
                let id = id.to_owned();
                db.call("insert into", move |client| {
                    client.execute(
                        "INSERT INTO run_connections (run_id, trail) VALUES ($1, $2) \
                         ON CONFLICT (run_id) DO UPDATE SET trail = EXCLUDED.trail",
                        &[&id, &json],
                    )
                })? as usize
            }
        };
        Ok(())
    }

    /// Removes the trails whose run is gone.
    pub(super) fn drop_orphan_connections(&self) -> Result<()> {
        self.write_both("prune", "DELETE FROM run_connections WHERE run_id NOT IN (SELECT id FROM runs)").map(drop)
    }
}

/// A trail as read back.
pub(super) fn parse(json: Option<String>) -> Option<NetworkTrail> {
    json.and_then(|text| serde_json::from_str(&text).ok())
}
