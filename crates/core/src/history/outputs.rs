//! What runs printed, kept beside their rows (table `run_outputs`): each stream as the run's outcome holds it, gone
//! with its run, and all of them within a budget of bytes, past which the oldest go first (their runs stay).

use rusqlite::{OptionalExtension, params};

use super::{History, Store};
use crate::Result;

/// What a finished run printed, as kept: each stream up to the output cap, and whether it was cut there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOutput {
    pub run_id: String,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

/// What the history knows of a run's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputLookup {
    /// No such run.
    UnknownRun,
    /// The run is known but its output is not kept: it is still going, it was cancelled, or its output was dropped
    /// to keep the history within its output budget.
    NotKept,
    Kept(RunOutput),
}

/// The default of [`History::with_output_budget`]: 1 GiB.
pub const DEFAULT_OUTPUT_BUDGET: u64 = 1024 * 1024 * 1024;

impl History {
    /// Sets the kept output's size from the database (after a removal, or another process's writes).
    pub(super) fn count_output_bytes(&self) -> Result<u64> {
        let bytes: i64 = match &self.store {
            Store::Sqlite(db) => db
                .connection()
                .query_row("SELECT COALESCE(SUM(bytes), 0) FROM run_outputs", [], |row| row.get(0))
                .map_err(|e| db.error("read", e))?,
            Store::Postgres(db) => db.call("read", |client| {
                client.query_one("SELECT COALESCE(SUM(bytes), 0)::BIGINT FROM run_outputs", &[])?.try_get(0)
            })?,
        };
        let bytes = bytes.max(0) as u64;
        self.output_bytes.store(bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(bytes)
    }

    /// Keeps what run `id` printed (nothing for a run that printed nothing: reading gives empty streams).
    /// Beyond the output budget, the oldest outputs are dropped (a tenth of the budget more, so that this is rare).
    pub fn store_output(&self, id: &str, outcome: &crate::RunOutcome) -> Result<()> {
        let bytes = (outcome.stdout.len() + outcome.stderr.len()) as u64;
        if bytes == 0 || bytes > self.output_budget {
            return Ok(());
        }
        match &self.store {
            Store::Sqlite(db) => db.write(
                "insert into",
                "INSERT OR REPLACE INTO run_outputs (run_id, stdout, stderr, stdout_truncated, stderr_truncated, \
                 bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    id,
                    outcome.stdout,
                    outcome.stderr,
                    outcome.stdout_truncated,
                    outcome.stderr_truncated,
                    bytes as i64
                ],
            )?,
            Store::Postgres(db) => {
                let id = id.to_owned();
                let (stdout, stderr) = (outcome.stdout.as_bytes().to_vec(), outcome.stderr.as_bytes().to_vec());
                let (stdout_truncated, stderr_truncated) = (outcome.stdout_truncated, outcome.stderr_truncated);
                db.call("insert into", move |client| {
                    // As SQLite's INSERT OR REPLACE: a replaced output is the newest (a new seq).
                    client.execute(
                        "INSERT INTO run_outputs (run_id, stdout, stderr, stdout_truncated, stderr_truncated, bytes) \
                         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (run_id) DO UPDATE SET stdout = EXCLUDED.stdout, \
                         stderr = EXCLUDED.stderr, stdout_truncated = EXCLUDED.stdout_truncated, \
                         stderr_truncated = EXCLUDED.stderr_truncated, bytes = EXCLUDED.bytes, seq = DEFAULT",
                        &[&id, &stdout, &stderr, &stdout_truncated, &stderr_truncated, &(bytes as i64)],
                    )
                })? as usize
            }
        };
        let kept = self.output_bytes.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed) + bytes;
        if kept > self.output_budget {
            self.drop_oldest_outputs()?;
        }
        Ok(())
    }

    /// Drops the oldest outputs until those kept take at most nine tenths of the budget.
    fn drop_oldest_outputs(&self) -> Result<()> {
        let target = i64::try_from(self.output_budget / 10 * 9).unwrap_or(i64::MAX);
        if self.count_output_bytes()? <= self.output_budget {
            return Ok(()); // another process's removals made room
        }
        // The newest outputs that fit in `target` stay: a window sum over the newest first.
        match &self.store {
            Store::Sqlite(db) => db.write(
                "prune",
                "DELETE FROM run_outputs WHERE rowid IN (SELECT rowid FROM (SELECT rowid, \
                 SUM(bytes) OVER (ORDER BY rowid DESC) AS newer FROM run_outputs) WHERE newer > ?1)",
                params![target],
            )?,
            Store::Postgres(db) => db.call("prune", move |client| {
                client.execute(
                    "DELETE FROM run_outputs WHERE seq IN (SELECT seq FROM (SELECT seq, \
                     (SUM(bytes) OVER (ORDER BY seq DESC))::BIGINT AS newer FROM run_outputs) AS kept \
                     WHERE newer > $1)",
                    &[&target],
                )
            })? as usize,
        };
        self.count_output_bytes().map(drop)
    }

    /// What run `id` printed. A finished run that printed nothing has empty streams.
    pub fn output(&self, id: &str) -> Result<OutputLookup> {
        let sql = "SELECT r.state, r.stdout_bytes + r.stderr_bytes, o.stdout, o.stderr, o.stdout_truncated, \
                   o.stderr_truncated FROM runs r LEFT JOIN run_outputs o ON o.run_id = r.id WHERE r.id = ";
        type Row = (String, i64, Option<String>, Option<String>, Option<bool>, Option<bool>);
        let row: Option<Row> = match &self.store {
            Store::Sqlite(db) => db
                .connection()
                .query_row(&format!("{sql}?1"), params![id], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
                })
                .optional()
                .map_err(|e| db.error("read", e))?,
            Store::Postgres(db) => {
                let id = id.to_owned();
                db.call("read", move |client| {
                    let Some(row) = client.query_opt(&format!("{sql}$1"), &[&id])? else { return Ok(None) };
                    let text = |index: usize| -> std::result::Result<Option<String>, postgres::Error> {
                        let bytes: Option<Vec<u8>> = row.try_get(index)?;
                        Ok(bytes.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
                    };
                    Ok(Some((row.try_get(0)?, row.try_get(1)?, text(2)?, text(3)?, row.try_get(4)?, row.try_get(5)?)))
                })?
            }
        };
        Ok(match row {
            None => OutputLookup::UnknownRun,
            Some((state, printed, None, ..)) if state != "finished" || printed > 0 => OutputLookup::NotKept,
            Some((_, _, stdout, stderr, stdout_truncated, stderr_truncated)) => OutputLookup::Kept(RunOutput {
                run_id: id.to_owned(),
                stdout: stdout.unwrap_or_default(),
                stderr: stderr.unwrap_or_default(),
                stdout_truncated: stdout_truncated.unwrap_or(false),
                stderr_truncated: stderr_truncated.unwrap_or(false),
            }),
        })
    }

    /// [`History::output`] for `tenant`: another tenant's run is [`OutputLookup::UnknownRun`], as a missing one is
    /// (see [`History::get_for`]).
    pub fn output_for(&self, tenant: &crate::Tenant, id: &str) -> Result<OutputLookup> {
        match self.get_for(tenant, id)? {
            Some(_) => self.output(id),
            None => Ok(OutputLookup::UnknownRun),
        }
    }

    /// Removes the outputs whose run is gone.
    pub(super) fn drop_orphan_outputs(&self) -> Result<()> {
        self.write_both("prune", "DELETE FROM run_outputs WHERE run_id NOT IN (SELECT id FROM runs)")?;
        self.count_output_bytes().map(drop)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::history::test_stores::stores;
    use crate::history::tests::{finish, new_run};
    use crate::history::{Ending, Outcome};
    use crate::{ConversationId, Tenant, Termination};

    #[test]
    fn output_is_kept_with_its_run_and_goes_with_it() {
        for store in stores() {
            let history = store.open(false);
            let c = ConversationId::parse("c").unwrap();
            for id in ["printed", "silent", "pruned"] {
                history.queued(&new_run(id, &c, "x")).unwrap();
                finish(&history, id);
            }
            let outcome = |stdout: &str| crate::RunOutcome {
                stdout: stdout.into(),
                stderr: "warn\n".into(),
                stdout_truncated: true,
                ..crate::RunOutcome::empty(Termination::Exited { code: 0 }, Duration::ZERO)
            };
            history.store_output("printed", &outcome("out\0\n")).unwrap(); // PostgreSQL's TEXT holds no NUL
            history.store_output("pruned", &outcome("old\n")).unwrap();
            history.store_output("silent", &crate::RunOutcome::empty(Termination::Cancelled, Duration::ZERO)).unwrap();
            let printed = RunOutput {
                run_id: "printed".into(),
                stdout: "out\0\n".into(),
                stderr: "warn\n".into(),
                stdout_truncated: true,
                stderr_truncated: false,
            };
            assert_eq!(history.output("printed").unwrap(), OutputLookup::Kept(printed.clone()));
            let silent = RunOutput {
                run_id: "silent".into(),
                stdout: String::new(),
                stderr: String::new(),
                stdout_truncated: false,
                stderr_truncated: false,
            };
            assert_eq!(history.output("silent").unwrap(), OutputLookup::Kept(silent));
            assert_eq!(history.output("missing").unwrap(), OutputLookup::UnknownRun);
            // The runs are `tester`'s: another tenant finds none of them.
            let (tester, other, admin) = (Tenant::new("tester"), Tenant::new("other"), Tenant::admin("root"));
            assert_eq!(history.output_for(&tester, "printed").unwrap(), OutputLookup::Kept(printed.clone()));
            assert_eq!(history.output_for(&admin, "printed").unwrap(), OutputLookup::Kept(printed.clone()));
            assert_eq!(history.output_for(&other, "printed").unwrap(), OutputLookup::UnknownRun);
            assert_eq!(history.output_for(&other, "missing").unwrap(), OutputLookup::UnknownRun);
            history.execute("UPDATE runs SET queued_at = 0 WHERE id = 'pruned'");
            assert_eq!(history.prune(Some(UNIX_EPOCH + Duration::from_secs(1)), None).unwrap(), 1);
            let left = history.number("SELECT COUNT(*) FROM run_outputs");
            assert_eq!(left, 1, "the pruned run's output went with it");
            assert_eq!(history.delete_conversation(&c).unwrap(), 2);
            let left = history.number("SELECT COUNT(*) FROM run_outputs");
            assert_eq!(left, 0);
        }
    }

    #[test]
    fn outputs_stay_within_their_budget_the_newest_kept() {
        for store in stores() {
            let history = store.open(false).with_output_budget(1000);
            let c = ConversationId::parse("c").unwrap();
            let printed = |text: &str| crate::RunOutcome {
                stdout: text.into(),
                ..crate::RunOutcome::empty(Termination::Exited { code: 0 }, Duration::ZERO)
            };
            for i in 0..10 {
                let id = format!("r{i}");
                history.queued(&new_run(&id, &c, "x")).unwrap();
                let ending = Ending {
                    outcome: Outcome::Ok,
                    exit_code: Some(0),
                    error: None,
                    duration: None,
                    stdout_bytes: 300,
                    stderr_bytes: 0,
                    truncated: false,
                };
                history.finished(&id, &ending).unwrap();
                history.store_output(&id, &printed(&"x".repeat(300))).unwrap();
            }
            let kept: Vec<bool> =
                (0..10).map(|i| matches!(history.output(&format!("r{i}")).unwrap(), OutputLookup::Kept(_))).collect();
            assert_eq!(kept, [false, false, false, false, false, false, false, true, true, true]);
            assert_eq!(history.output("r0").unwrap(), OutputLookup::NotKept, "the run stays, its output is gone");
            assert_eq!(history.count_output_bytes().unwrap(), 900);
            // An output over the whole budget is not kept at all, and evicts nothing.
            history.queued(&new_run("huge", &c, "x")).unwrap();
            history.store_output("huge", &printed(&"x".repeat(1001))).unwrap();
            assert_eq!(history.output("huge").unwrap(), OutputLookup::NotKept);
            assert_eq!(history.count_output_bytes().unwrap(), 900);
            // A server reopening the database knows what it holds.
            drop(history);
            let history = store.open(false);
            assert_eq!(history.output_bytes.load(std::sync::atomic::Ordering::Relaxed), 900);
        }
    }
}
