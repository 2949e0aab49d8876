//! Leases of the nodes that share a history (PostgreSQL, table `nodes`): every node writes its row (its owner name,
//! `pid:start@host`) when it connects and again every [`HEARTBEAT`]. A node whose row is older than [`NODE_LEASE`]
//! by the database's clock is lost: the first node to find it marks its unfinished runs interrupted and drops its
//! row. That is how the runs of a node that died for good end; another machine's processes cannot be seen from here
//! (`owner`), so a start's [`History::recover`] leaves them alone.
//!
//! A node that was only cut off writes its row again when it is back, and a run it then ends gets its true ending
//! (a run's end overwrites an interruption). Owners with no row (a sandlot from before leases) are never marked.
//! SQLite's history belongs to one machine, whose processes a start sees in /proc: there these calls do nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{History, Store};
use crate::{Engine, Result};

/// How often a node writes its row, and looks for lost nodes.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// How long a node's row stays good: six heartbeats, so a node is lost only after half a minute of silence.
pub const NODE_LEASE: Duration = Duration::from_secs(30);

/// The database's clock in milliseconds since the epoch, as the rows keep time (the nodes' clocks may differ).
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";

/// The error a lost node's runs are ended with.
const LOST: &str = "the node running it stopped renewing its lease in the shared history (it died or was cut off)";

impl History {
    /// Writes this node's row in a shared history (nothing in SQLite).
    pub fn heartbeat(&self) -> Result<()> {
        let Store::Postgres(db) = &self.store else { return Ok(()) };
        let name = self.server.clone();
        let sql = format!(
            "INSERT INTO nodes (name, seen_at) VALUES ($1, {NOW_MS}) ON CONFLICT (name) DO UPDATE SET seen_at = \
             EXCLUDED.seen_at"
        );
        db.call("renew the lease in", move |client| client.execute(&sql, &[&name])).map(drop)
    }

    /// Ends the unfinished runs of every node whose row is older than `lease` as interrupted, drops those rows, and
    /// returns the runs' ids (none in SQLite). Nodes sweeping at once each take other lost nodes, or none.
    pub fn recover_lost_nodes(&self, lease: Duration) -> Result<Vec<String>> {
        let Store::Postgres(db) = &self.store else { return Ok(Vec::new()) };
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        db.call("recover lost nodes in", move |client| {
            let mut transaction = client.transaction()?;
            let lost: Vec<String> = transaction
                .query(
                    &format!("SELECT name FROM nodes WHERE seen_at < {NOW_MS} - $1 FOR UPDATE SKIP LOCKED"),
                    &[&lease_ms],
                )?
                .iter()
                .map(|row| row.try_get(0))
                .collect::<std::result::Result<_, _>>()?;
            if lost.is_empty() {
                return Ok(Vec::new());
            }
            let ended = transaction
                .query(
                    &format!(
                        "UPDATE runs SET state = 'finished', outcome = 'interrupted', finished_at = {NOW_MS}, \
                         error = $2 WHERE server = ANY($1) AND state <> 'finished' RETURNING id"
                    ),
                    &[&lost, &LOST],
                )?
                .iter()
                .map(|row| row.try_get(0))
                .collect::<std::result::Result<Vec<String>, _>>()?;
            transaction.execute("DELETE FROM nodes WHERE name = ANY($1)", &[&lost])?;
            transaction.commit()?;
            Ok(ended)
        })
    }
}

/// Holds this node's lease in a shared history until `stop` is cancelled: renews it every [`HEARTBEAT`] and ends the
/// runs of the nodes whose leases ran out. Does nothing for a history of one machine (SQLite) or none.
pub async fn hold_lease(engine: Arc<Engine>, stop: CancellationToken) {
    if !engine.history().is_some_and(History::is_shared) {
        return;
    }
    loop {
        let round = engine.clone();
        // A node that cannot renew its own lease (the database unreachable) does not judge others' either: one warning
        // per round, not two.
        let ended = tokio::task::spawn_blocking(move || {
            let Some(history) = round.history() else { return Ok(Vec::new()) };
            history.heartbeat()?;
            history.recover_lost_nodes(NODE_LEASE)
        })
        .await;
        match ended {
            Ok(Ok(ids)) => {
                for run_id in ids {
                    tracing::warn!(run_id, "run interrupted: the node running it lost its lease");
                }
            }
            Ok(Err(error)) => tracing::warn!(%error, "cannot hold this node's lease in the run history"),
            Err(error) => tracing::warn!(%error, "the lease's round failed"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(HEARTBEAT) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConversationId;
    use crate::history::Outcome;
    use crate::history::test_stores::{self, TestStore};
    use crate::history::tests::{finish, new_run};

    /// Runs `ids` of `owner`, unfinished, in `history`.
    fn unfinished(history: &History, owner: &str, ids: &[&str]) {
        let conversation = ConversationId::parse("c").unwrap();
        for id in ids {
            history.queued(&new_run(id, &conversation, "x")).unwrap();
            history.execute(&format!("UPDATE runs SET server = '{owner}' WHERE id = '{id}'"));
        }
    }

    fn outcome(history: &History, id: &str) -> Option<Outcome> {
        history.get(id).unwrap().unwrap().outcome
    }

    #[test]
    fn a_node_whose_lease_ran_out_has_its_runs_interrupted_and_no_other() {
        let Some(store) = TestStore::postgres_only() else { return };
        let history = store.open(false);
        history.heartbeat().unwrap();
        // This node's run, a live node's, a lost node's (two), and one of an owner with no lease (an older sandlot).
        unfinished(&history, &history.server.clone(), &["ours"]);
        unfinished(&history, "11:1@live-machine", &["live"]);
        unfinished(&history, "22:1@lost-machine", &["lost-running", "lost-queued"]);
        unfinished(&history, "33:1@old-machine", &["unleased"]);
        history.started("lost-running").unwrap();
        history.execute(&format!("INSERT INTO nodes (name, seen_at) VALUES ('11:1@live-machine', {NOW_MS} - 1000)"));
        history.execute(&format!("INSERT INTO nodes (name, seen_at) VALUES ('22:1@lost-machine', {NOW_MS} - 31000)"));

        let mut ended = history.recover_lost_nodes(NODE_LEASE).unwrap();
        ended.sort();
        assert_eq!(ended, ["lost-queued", "lost-running"]);
        for id in ["lost-queued", "lost-running"] {
            let run = history.get(id).unwrap().unwrap();
            assert_eq!(run.outcome, Some(Outcome::Interrupted), "{id}");
            assert!(run.error.as_deref().is_some_and(|error| error.contains("lease")), "{:?}", run.error);
        }
        for id in ["ours", "live", "unleased"] {
            assert_eq!(outcome(&history, id), None, "{id} is not a lost node's");
        }
        assert_eq!(history.number("SELECT COUNT(*) FROM nodes WHERE name = '22:1@lost-machine'"), 0);
        assert_eq!(history.number("SELECT COUNT(*) FROM nodes"), 2, "this node's and the live one's stay");
        assert_eq!(history.recover_lost_nodes(NODE_LEASE).unwrap(), Vec::<String>::new(), "once");
    }

    #[test]
    fn a_node_cut_off_and_back_renews_its_lease_and_its_runs_end_truly() {
        let Some(store) = TestStore::postgres_only() else { return };
        let (this, other) = (store.open(false), store.open(false));
        this.heartbeat().unwrap();
        unfinished(&this, &this.server.clone(), &["cut-off"]);
        this.execute(&format!("UPDATE nodes SET seen_at = {NOW_MS} - 60000"));

        // Another node finds the lease run out and ends the run; this node is back, renews, and ends it truly.
        assert_eq!(other.recover_lost_nodes(NODE_LEASE).unwrap(), ["cut-off"]);
        this.heartbeat().unwrap();
        assert_eq!(other.recover_lost_nodes(NODE_LEASE).unwrap(), Vec::<String>::new());
        finish(&this, "cut-off");
        assert_eq!(outcome(&this, "cut-off"), Some(Outcome::Ok));
        assert_eq!(this.number("SELECT COUNT(*) FROM nodes"), 1);
    }

    #[test]
    fn a_history_of_one_machine_holds_no_lease() {
        for store in test_stores::stores().into_iter().filter(|store| store.name() == "sqlite") {
            let history = store.open(false);
            assert!(!history.is_shared());
            history.heartbeat().unwrap();
            unfinished(&history, "4194999:1", &["gone"]);
            assert_eq!(history.recover_lost_nodes(Duration::ZERO).unwrap(), Vec::<String>::new());
            assert_eq!(outcome(&history, "gone"), None, "a start's recovery is SQLite's");
        }
    }
}
