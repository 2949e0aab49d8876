//! What the history forgets, and what retention asks it first: whether a conversation has live runs and when it was
//! last used; its finished runs removed with the conversation, or pruned by age and count.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::params;

use super::owner::{self, Owner};
use super::{History, Store, unix_ms};
use crate::{ConversationId, Result};

impl History {
    /// Whether a run of `conversation` is queued or running in a process that is still alive (this one, or
    /// another server on the same root), or in another machine's (which cannot be seen from here).
    pub fn has_live_runs(&self, conversation: &ConversationId) -> Result<bool> {
        let servers: Vec<String> = match &self.store {
            Store::Sqlite(db) => db
                .connection()
                .prepare_cached("SELECT server FROM runs WHERE conversation_id = ?1 AND state != 'finished'")
                .and_then(|mut statement| {
                    statement.query_map(params![conversation.as_str()], |row| row.get::<_, String>(0))?.collect()
                })
                .map_err(|e| db.error("read", e))?,
            Store::Postgres(db) => {
                let conversation = conversation.to_string();
                db.call("read", move |client| {
                    client
                        .query(
                            "SELECT server FROM runs WHERE conversation_id = $1 AND state <> 'finished'",
                            &[&conversation],
                        )?
                        .iter()
                        .map(|row| row.try_get(0))
                        .collect()
                })?
            }
        };
        Ok(servers.iter().any(|server| owner::of(server) != Owner::Gone))
    }

    /// Removes the finished runs of `conversation`; returns how many. Runs not yet finished stay: they are of a
    /// run that got in after the conversation was removed, and will use a new, empty one.
    pub fn delete_conversation(&self, conversation: &ConversationId) -> Result<usize> {
        let removed = match &self.store {
            Store::Sqlite(db) => db.write(
                "delete from",
                "DELETE FROM runs WHERE conversation_id = ?1 AND state = 'finished'",
                params![conversation.as_str()],
            )?,
            Store::Postgres(db) => {
                let conversation = conversation.to_string();
                db.call("delete from", move |client| {
                    client
                        .execute("DELETE FROM runs WHERE conversation_id = $1 AND state = 'finished'", &[&conversation])
                })? as usize
            }
        };
        self.drop_orphan_outputs()?;
        self.drop_orphan_connections()?;
        Ok(removed)
    }

    /// When each conversation in the history was last used: its latest queue, start or end time.
    pub fn last_activity(&self) -> Result<std::collections::HashMap<String, SystemTime>> {
        let rows: Vec<(String, i64)> = match &self.store {
            Store::Sqlite(db) => db
                .connection()
                .prepare_cached(&format!("SELECT conversation_id, {LAST_USE} FROM runs GROUP BY conversation_id"))
                .and_then(|mut statement| {
                    statement.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?.collect()
                })
                .map_err(|e| db.error("read", e))?,
            Store::Postgres(db) => db.call("read", |client| {
                let sql = format!("SELECT conversation_id, {PG_LAST_USE} FROM runs GROUP BY conversation_id");
                client.query(&sql, &[])?.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?))).collect()
            })?,
        };
        Ok(rows.into_iter().map(|(id, ms)| (id, UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))).collect())
    }

    /// When `conversation` was last used according to the history, if it has runs there.
    pub fn last_activity_of(&self, conversation: &ConversationId) -> Result<Option<SystemTime>> {
        let ms: Option<i64> = match &self.store {
            Store::Sqlite(db) => db
                .connection()
                .prepare_cached(&format!("SELECT {LAST_USE} FROM runs WHERE conversation_id = ?1"))
                .and_then(|mut statement| statement.query_row(params![conversation.as_str()], |row| row.get(0)))
                .map_err(|e| db.error("read", e))?,
            Store::Postgres(db) => {
                let conversation = conversation.to_string();
                db.call("read", move |client| {
                    let sql = format!("SELECT {PG_LAST_USE} FROM runs WHERE conversation_id = $1");
                    client.query_one(&sql, &[&conversation])?.try_get(0)
                })?
            }
        };
        Ok(ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)))
    }

    /// Removes finished runs queued before `older_than`, then the oldest finished runs beyond the newest
    /// `max_runs`; returns how many went. Runs not yet finished are never removed.
    pub fn prune(&self, older_than: Option<SystemTime>, max_runs: Option<u64>) -> Result<usize> {
        let mut removed = 0;
        if let Some(cutoff) = older_than {
            let cutoff = unix_ms(cutoff);
            removed += match &self.store {
                Store::Sqlite(db) => {
                    db.write("prune", "DELETE FROM runs WHERE state = 'finished' AND queued_at < ?1", params![cutoff])?
                }
                Store::Postgres(db) => db.call("prune", move |client| {
                    client.execute("DELETE FROM runs WHERE state = 'finished' AND queued_at < $1", &[&cutoff])
                })? as usize,
            };
        }
        if let Some(max_runs) = max_runs {
            let kept = i64::try_from(max_runs).unwrap_or(i64::MAX);
            removed += match &self.store {
                Store::Sqlite(db) => db.write(
                    "prune",
                    "DELETE FROM runs WHERE state = 'finished' AND rowid IN \
                     (SELECT rowid FROM runs ORDER BY queued_at DESC, rowid DESC LIMIT -1 OFFSET ?1)",
                    params![kept],
                )?,
                Store::Postgres(db) => db.call("prune", move |client| {
                    client.execute(
                        "DELETE FROM runs WHERE state = 'finished' AND seq IN \
                         (SELECT seq FROM runs ORDER BY queued_at DESC, seq DESC OFFSET $1)",
                        &[&kept],
                    )
                })? as usize,
            };
        }
        if removed > 0 {
            self.drop_orphan_outputs()?;
            self.drop_orphan_connections()?;
        }
        Ok(removed)
    }
}

/// A conversation's last use, over its runs: the latest of their queue, start and end times.
const LAST_USE: &str = "MAX(MAX(queued_at, COALESCE(started_at, 0), COALESCE(finished_at, 0)))";
/// [`LAST_USE`] in PostgreSQL's words.
const PG_LAST_USE: &str = "MAX(GREATEST(queued_at, COALESCE(started_at, 0), COALESCE(finished_at, 0)))";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_stores::stores;
    use crate::history::tests::{finish, ids, new_run};

    #[test]
    fn pruning_removes_old_and_excess_finished_runs_only() {
        for store in stores() {
            let history = store.open(false);
            let c = ConversationId::parse("c").unwrap();
            for id in ["old1", "old2", "new1", "new2", "new3", "running"] {
                history.queued(&new_run(id, &c, "x")).unwrap();
                if id != "running" {
                    finish(&history, id);
                }
            }
            let day_ms = 24 * 3600 * 1000;
            let now = unix_ms(SystemTime::now());
            for (id, age_days) in [("old1", 40), ("old2", 31), ("running", 50)] {
                history.execute(&format!("UPDATE runs SET queued_at = {} WHERE id = '{id}'", now - age_days * day_ms));
            }
            let cutoff = SystemTime::now() - Duration::from_secs(30 * 24 * 3600);
            assert_eq!(history.prune(Some(cutoff), None).unwrap(), 2);
            assert_eq!(ids(history.list(None, 10).unwrap()), ["new3", "new2", "new1", "running"]);
            // At most two: the oldest finished beyond the newest two go, the unfinished one stays whatever its age.
            assert_eq!(history.prune(None, Some(2)).unwrap(), 1);
            assert_eq!(ids(history.list(None, 10).unwrap()), ["new3", "new2", "running"]);
            assert_eq!(history.prune(Some(cutoff), Some(2)).unwrap(), 0);
        }
    }

    #[test]
    fn deleting_a_conversation_keeps_other_conversations_and_unfinished_runs() {
        for store in stores() {
            let history = store.open(false);
            let (a, b) = (ConversationId::parse("a").unwrap(), ConversationId::parse("b").unwrap());
            for (id, conversation) in [("a1", &a), ("a2", &a), ("b1", &b)] {
                history.queued(&new_run(id, conversation, "x")).unwrap();
                finish(&history, id);
            }
            history.queued(&new_run("a-queued", &a, "x")).unwrap();
            assert!(history.has_live_runs(&a).unwrap());
            assert!(!history.has_live_runs(&b).unwrap());
            let activity = history.last_activity().unwrap();
            assert_eq!(
                activity.keys().map(String::as_str).collect::<std::collections::BTreeSet<_>>(),
                ["a", "b"].into()
            );
            assert_eq!(history.last_activity_of(&b).unwrap(), Some(activity["b"]));
            assert_eq!(history.last_activity_of(&ConversationId::parse("none").unwrap()).unwrap(), None);
            assert_eq!(history.delete_conversation(&a).unwrap(), 2);
            assert_eq!(ids(history.list(None, 10).unwrap()), ["a-queued", "b1"]);
        }
    }

    #[test]
    fn a_run_of_another_machine_counts_as_live_and_one_of_a_gone_process_does_not() {
        for store in stores() {
            let history = store.open(false);
            let (here, there) = (ConversationId::parse("here").unwrap(), ConversationId::parse("there").unwrap());
            history.queued(&new_run("gone", &here, "x")).unwrap();
            history.queued(&new_run("elsewhere", &there, "x")).unwrap();
            history.execute("UPDATE runs SET server = '4194999:1' WHERE id = 'gone'");
            history.execute("UPDATE runs SET server = '4194999:1@another-machine' WHERE id = 'elsewhere'");
            assert!(!history.has_live_runs(&here).unwrap(), "{}: its process is gone", store.name());
            assert!(
                history.has_live_runs(&there).unwrap(),
                "{}: another machine's, which cannot be seen",
                store.name()
            );
        }
    }
}
