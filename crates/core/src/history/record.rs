//! The rows of runs: what a run's row holds ([`RunRecord`], [`Outcome`]), written when the run is queued, when it
//! starts and when it ends, and read back one at a time or newest first.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{OptionalExtension, params};
use sha2::{Digest, Sha256};

use super::{History, Store, unix_ms};
use crate::{ConversationId, Language, Result, Tenant, Termination};

/// Most runs one listing returns.
pub const MAX_LISTED_RUNS: usize = 500;

/// How a run ended, as the history records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Exit code 0.
    Ok,
    /// A non-zero exit, a signal, or a full disk quota.
    Error,
    Timeout,
    Oom,
    /// Cancelled by its caller, or its caller went away.
    Cancelled,
    /// Refused because the queue was full or the wait too long; it never ran.
    Busy,
    /// In flight when the server stopped without finishing it (a crash, `kill -9`).
    Interrupted,
    /// sandlot could not run it (a fault of the backend, not of the code).
    Internal,
}

impl Outcome {
    /// The outcome of a run that ended this way.
    pub fn of(termination: &Termination) -> Self {
        match termination {
            Termination::Exited { code: 0 } => Self::Ok,
            Termination::Exited { .. } | Termination::Signaled { .. } | Termination::DiskQuotaExceeded => Self::Error,
            Termination::TimedOut => Self::Timeout,
            Termination::OutOfMemory => Self::Oom,
            Termination::Cancelled => Self::Cancelled,
        }
    }

    /// The lowercase name stored and shown (`ok`, `timeout`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::Oom => "oom",
            Self::Cancelled => "cancelled",
            Self::Busy => "busy",
            Self::Interrupted => "interrupted",
            Self::Internal => "internal",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        [
            Self::Ok,
            Self::Error,
            Self::Timeout,
            Self::Oom,
            Self::Cancelled,
            Self::Busy,
            Self::Interrupted,
            Self::Internal,
        ]
        .into_iter()
        .find(|o| o.as_str() == name)
    }
}

/// One run as the history holds it; serialized for `/v1/runs` and the MCP resources.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub id: String,
    pub conversation_id: String,
    /// Who asked: the API key's name, the JWT's subject, `stdio` or `cli`.
    pub caller: String,
    pub language: String,
    pub code_bytes: u64,
    pub code_sha256: String,
    /// The code, when the server stores it.
    pub code: Option<String>,
    /// The caller's `metadata` object, as given.
    pub metadata: Option<serde_json::Value>,
    /// `queued`, `running` or `finished`.
    pub state: String,
    /// Set once finished.
    pub outcome: Option<Outcome>,
    pub exit_code: Option<i32>,
    /// Why a busy or internal run did not run.
    pub error: Option<String>,
    /// RFC 3339 times (UTC, milliseconds).
    pub queued_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_ms: Option<u64>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub truncated: bool,
    /// A leashed run's connections (its egress audit trail); absent for a run that made none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<super::connections::NetworkTrail>,
}

/// What is known of a run when it is accepted.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    pub id: &'a str,
    pub conversation: &'a ConversationId,
    pub caller: &'a str,
    pub language: Language,
    pub code: &'a str,
    pub metadata: Option<&'a serde_json::Value>,
}

/// How a run ended, for [`History::finished`].
#[derive(Debug, Clone)]
pub struct Ending {
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub duration: Option<Duration>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub truncated: bool,
}

impl History {
    /// Records a run that was just accepted (queued).
    pub fn queued(&self, run: &NewRun<'_>) -> Result<()> {
        let sha256 = hex::encode(Sha256::digest(run.code.as_bytes()));
        let metadata = run.metadata.map(serde_json::Value::to_string);
        let code = self.store_code.then_some(run.code);
        let (queued_at, code_bytes) = (unix_ms(SystemTime::now()), run.code.len() as i64);
        match &self.store {
            Store::Sqlite(db) => db.write(
                "insert into",
                "INSERT INTO runs (id, conversation_id, caller, server, language, code_bytes, code_sha256, code, \
                 metadata, state, queued_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'queued', ?10)",
                params![
                    run.id,
                    run.conversation.as_str(),
                    run.caller,
                    self.server,
                    run.language.as_str(),
                    code_bytes,
                    sha256,
                    code,
                    metadata,
                    queued_at,
                ],
            ),
            Store::Postgres(db) => {
                let (id, conversation, caller) =
                    (run.id.to_owned(), run.conversation.to_string(), run.caller.to_owned());
                let (server, language) = (self.server.clone(), run.language.as_str());
                let code = code.map(|code| code.as_bytes().to_vec());
                db.call("insert into", move |client| {
                    // Again after a lost connection: the row may be there already, and is the same.
                    client.execute(
                        "INSERT INTO runs (id, conversation_id, caller, server, language, code_bytes, code_sha256, \
                         code, metadata, state, queued_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10) \
                         ON CONFLICT (id) DO NOTHING",
                        &[
                            &id,
                            &conversation,
                            &caller,
                            &server,
                            &language,
                            &code_bytes,
                            &sha256,
                            &code,
                            &metadata,
                            &queued_at,
                        ],
                    )
                })
                .map(|rows| rows as usize)
            }
        }
        .map(drop)
    }

    /// Records that the run got its turn.
    pub fn started(&self, id: &str) -> Result<()> {
        let now = unix_ms(SystemTime::now());
        match &self.store {
            Store::Sqlite(db) => {
                db.write("update", "UPDATE runs SET state = 'running', started_at = ?2 WHERE id = ?1", params![id, now])
            }
            Store::Postgres(db) => {
                let id = id.to_owned();
                db.call("update", move |client| {
                    client.execute("UPDATE runs SET state = 'running', started_at = $2 WHERE id = $1", &[&id, &now])
                })
                .map(|rows| rows as usize)
            }
        }
        .map(drop)
    }

    /// Records how the run ended.
    pub fn finished(&self, id: &str, ending: &Ending) -> Result<()> {
        let now = unix_ms(SystemTime::now());
        let duration = ending.duration.map(|d| d.as_millis() as i64);
        let (stdout_bytes, stderr_bytes) = (ending.stdout_bytes as i64, ending.stderr_bytes as i64);
        match &self.store {
            Store::Sqlite(db) => db.write(
                "update",
                "UPDATE runs SET state = 'finished', outcome = ?2, exit_code = ?3, error = ?4, finished_at = ?5, \
                 duration_ms = ?6, stdout_bytes = ?7, stderr_bytes = ?8, truncated = ?9 WHERE id = ?1",
                params![
                    id,
                    ending.outcome.as_str(),
                    ending.exit_code,
                    ending.error,
                    now,
                    duration,
                    stdout_bytes,
                    stderr_bytes,
                    ending.truncated,
                ],
            ),
            Store::Postgres(db) => {
                let (id, outcome, exit_code, truncated) =
                    (id.to_owned(), ending.outcome.as_str(), ending.exit_code, ending.truncated);
                // PostgreSQL's TEXT holds no NUL; an error's text may quote one.
                let error = ending.error.as_ref().map(|error| error.replace('\0', "\u{fffd}"));
                db.call("update", move |client| {
                    client.execute(
                        "UPDATE runs SET state = 'finished', outcome = $2, exit_code = $3, error = $4, \
                         finished_at = $5, duration_ms = $6, stdout_bytes = $7, stderr_bytes = $8, truncated = $9 \
                         WHERE id = $1",
                        &[&id, &outcome, &exit_code, &error, &now, &duration, &stdout_bytes, &stderr_bytes, &truncated],
                    )
                })
                .map(|rows| rows as usize)
            }
        }
        .map(drop)
    }

    /// One run, if the history has it.
    pub fn get(&self, id: &str) -> Result<Option<RunRecord>> {
        match &self.store {
            Store::Sqlite(db) => db
                .connection()
                .query_row(&format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"), params![id], record)
                .optional()
                .map_err(|e| db.error("read", e)),
            Store::Postgres(db) => {
                let id = id.to_owned();
                db.call("read", move |client| {
                    client
                        .query_opt(&format!("SELECT {COLUMNS} FROM runs WHERE id = $1"), &[&id])?
                        .map(pg_record)
                        .transpose()
                })
            }
        }
    }

    /// The id of the newest run whose id starts with `prefix` (lowercase hex, as run ids are), if any; for faces
    /// that show shortened run ids (Baponi's trace ids).
    pub fn find_by_prefix(&self, prefix: &str) -> Result<Option<String>> {
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Ok(None);
        }
        match &self.store {
            Store::Sqlite(db) => db
                .connection()
                .query_row(
                    "SELECT id FROM runs WHERE substr(id, 1, ?2) = ?1 ORDER BY queued_at DESC, rowid DESC LIMIT 1",
                    params![prefix, prefix.len() as i64],
                    |row| row.get::<_, String>(0),
                )
                .optional()
                .map_err(|e| db.error("read", e)),
            Store::Postgres(db) => {
                let prefix = prefix.to_owned();
                db.call("read", move |client| {
                    client
                        .query_opt(
                            "SELECT id FROM runs WHERE starts_with(id, $1) ORDER BY queued_at DESC, seq DESC LIMIT 1",
                            &[&prefix],
                        )?
                        .map(|row| row.try_get(0))
                        .transpose()
                })
            }
        }
    }

    /// The newest `limit` runs (at most [`MAX_LISTED_RUNS`]), of one conversation or of all, newest first.
    pub fn list(&self, conversation: Option<&ConversationId>, limit: usize) -> Result<Vec<RunRecord>> {
        self.listing(conversation, None, limit)
    }

    /// The newest `limit` runs of `conversation` (or all) asked for by `caller` (or anyone), newest first.
    fn listing(
        &self,
        conversation: Option<&ConversationId>,
        caller: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        let limit = limit.min(MAX_LISTED_RUNS) as i64;
        // What is not given is NULL, and the condition on it always true; each listing keeps its index's condition.
        let filter = match (conversation, caller) {
            (Some(_), Some(_)) => "conversation_id = $1 AND caller = $2",
            (Some(_), None) => "conversation_id = $1 AND $2::TEXT IS NULL",
            (None, Some(_)) => "$1::TEXT IS NULL AND caller = $2",
            (None, None) => "$1::TEXT IS NULL AND $2::TEXT IS NULL",
        };
        let conversation = conversation.map(ConversationId::to_string);
        let caller = caller.map(str::to_owned);
        match &self.store {
            Store::Sqlite(db) => {
                let filter = filter.replace('$', "?").replace("::TEXT", "");
                db.connection()
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM runs WHERE {filter} ORDER BY queued_at DESC, rowid DESC LIMIT ?3"
                    ))
                    .and_then(|mut s| s.query_map(params![conversation, caller, limit], record)?.collect())
                    .map_err(|e| db.error("read", e))
            }
            Store::Postgres(db) => db.call("read", move |client| {
                let sql =
                    format!("SELECT {COLUMNS} FROM runs WHERE {filter} ORDER BY queued_at DESC, seq DESC LIMIT $3");
                client.query(&sql, &[&conversation, &caller, &limit])?.into_iter().map(pg_record).collect()
            }),
        }
    }

    /// [`History::get`] for `tenant`: a run of another tenant (one whose `caller` is not the tenant's name) is `None`,
    /// as a missing one is; an admin gets any.
    pub fn get_for(&self, tenant: &Tenant, id: &str) -> Result<Option<RunRecord>> {
        Ok(self.get(id)?.filter(|run| tenant.may_use(&run.caller)))
    }

    /// The run whose id is exactly `whole_id`, if it is `tenant`'s (see [`History::get_for`]); unlike
    /// [`History::find_by_prefix`], no shortened id matches, so another tenant's run cannot be found by guessing a
    /// few digits. For faces that look runs up by an id they showed (Baponi's trace ids).
    pub fn find_for(&self, tenant: &Tenant, whole_id: &str) -> Result<Option<String>> {
        Ok(self.get_for(tenant, whole_id)?.map(|run| run.id))
    }

    /// [`History::list`] for `tenant`: only the runs whose `caller` is the tenant's name; an admin gets every run.
    pub fn list_for(
        &self,
        tenant: &Tenant,
        conversation: Option<&ConversationId>,
        limit: usize,
    ) -> Result<Vec<RunRecord>> {
        match tenant.is_admin() {
            true => self.listing(conversation, None, limit),
            false => self.listing(conversation, Some(tenant.name()), limit),
        }
    }
}

const COLUMNS: &str = concat!(
    "id, conversation_id, caller, language, code_bytes, code_sha256, code, metadata, state, outcome, exit_code, ",
    "error, queued_at, started_at, finished_at, duration_ms, stdout_bytes, stderr_bytes, truncated, ",
    "(SELECT trail FROM run_connections WHERE run_id = runs.id)"
);

fn record(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let time =
        |index: usize| -> rusqlite::Result<Option<String>> { Ok(row.get::<_, Option<i64>>(index)?.map(rfc3339)) };
    Ok(RunRecord {
        id: row.get(0)?,
        conversation_id: row.get(1)?,
        caller: row.get(2)?,
        language: row.get(3)?,
        code_bytes: row.get::<_, i64>(4)? as u64,
        code_sha256: row.get(5)?,
        code: row.get(6)?,
        metadata: row.get::<_, Option<String>>(7)?.and_then(|text| serde_json::from_str(&text).ok()),
        state: row.get(8)?,
        outcome: row.get::<_, Option<String>>(9)?.as_deref().and_then(Outcome::parse),
        exit_code: row.get(10)?,
        error: row.get(11)?,
        queued_at: time(12)?.unwrap_or_default(),
        started_at: time(13)?,
        finished_at: time(14)?,
        duration_ms: row.get::<_, Option<i64>>(15)?.map(|ms| ms as u64),
        stdout_bytes: row.get::<_, i64>(16)? as u64,
        stderr_bytes: row.get::<_, i64>(17)? as u64,
        truncated: row.get(18)?,
        network: super::connections::parse(row.get(19)?),
    })
}

/// [`record`] for a PostgreSQL row (the same [`COLUMNS`]; code is BYTEA there).
fn pg_record(row: postgres::Row) -> std::result::Result<RunRecord, postgres::Error> {
    let time = |index: usize| -> std::result::Result<Option<String>, postgres::Error> {
        Ok(row.try_get::<_, Option<i64>>(index)?.map(rfc3339))
    };
    Ok(RunRecord {
        id: row.try_get(0)?,
        conversation_id: row.try_get(1)?,
        caller: row.try_get(2)?,
        language: row.try_get(3)?,
        code_bytes: row.try_get::<_, i64>(4)? as u64,
        code_sha256: row.try_get(5)?,
        code: row.try_get::<_, Option<Vec<u8>>>(6)?.map(|code| String::from_utf8_lossy(&code).into_owned()),
        metadata: row.try_get::<_, Option<String>>(7)?.and_then(|text| serde_json::from_str(&text).ok()),
        state: row.try_get(8)?,
        outcome: row.try_get::<_, Option<String>>(9)?.as_deref().and_then(Outcome::parse),
        exit_code: row.try_get(10)?,
        error: row.try_get(11)?,
        queued_at: time(12)?.unwrap_or_default(),
        started_at: time(13)?,
        finished_at: time(14)?,
        duration_ms: row.try_get::<_, Option<i64>>(15)?.map(|ms| ms as u64),
        stdout_bytes: row.try_get::<_, i64>(16)? as u64,
        stderr_bytes: row.try_get::<_, i64>(17)? as u64,
        truncated: row.try_get(18)?,
        network: super::connections::parse(row.try_get(19)?),
    })
}

fn rfc3339(ms: i64) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    crate::rfc3339_millis(time)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_stores::stores;
    use crate::history::tests::{ids, new_run};

    #[test]
    fn a_run_is_recorded_from_queue_to_end() {
        for store in stores() {
            let history = store.open(false);
            let conversation = ConversationId::parse("c1").unwrap();
            let metadata = serde_json::json!({ "ticket": 7 });
            history.queued(&NewRun { metadata: Some(&metadata), ..new_run("r1", &conversation, "print(1)") }).unwrap();
            assert_eq!(history.get("r1").unwrap().unwrap().state, "queued");
            history.started("r1").unwrap();
            assert_eq!(history.get("r1").unwrap().unwrap().state, "running");
            let ending = Ending {
                outcome: Outcome::Ok,
                exit_code: Some(0),
                error: None,
                duration: Some(Duration::from_millis(12)),
                stdout_bytes: 2,
                stderr_bytes: 0,
                truncated: false,
            };
            history.finished("r1", &ending).unwrap();
            let record = history.get("r1").unwrap().unwrap();
            let times = (record.queued_at.clone(), record.started_at.clone(), record.finished_at.clone());
            assert!(times.0.ends_with('Z') && times.1.is_some() && times.2.is_some(), "{times:?}");
            assert_eq!(
                record,
                RunRecord {
                    id: "r1".into(),
                    conversation_id: "c1".into(),
                    caller: "tester".into(),
                    language: "python".into(),
                    code_bytes: 8,
                    code_sha256: hex::encode(Sha256::digest(b"print(1)")),
                    code: None,
                    metadata: Some(metadata),
                    state: "finished".into(),
                    outcome: Some(Outcome::Ok),
                    exit_code: Some(0),
                    error: None,
                    queued_at: times.0,
                    started_at: times.1,
                    finished_at: times.2,
                    duration_ms: Some(12),
                    stdout_bytes: 2,
                    stderr_bytes: 0,
                    truncated: false,
                    network: None,
                }
            );
        }
    }

    #[test]
    fn code_is_kept_only_when_asked() {
        let conversation = ConversationId::parse("c").unwrap();
        for (kept, not_kept) in stores().into_iter().zip(stores()) {
            let (kept, not_kept) = (kept.open(true), not_kept.open(false));
            kept.queued(&new_run("r", &conversation, "echo hi")).unwrap();
            assert_eq!(kept.get("r").unwrap().unwrap().code.as_deref(), Some("echo hi"));
            not_kept.queued(&new_run("r", &conversation, "echo hi")).unwrap();
            assert_eq!(not_kept.get("r").unwrap().unwrap().code, None);
        }
    }

    #[test]
    fn listings_are_newest_first_per_conversation_and_bounded() {
        for store in stores() {
            let history = store.open(false);
            let (a, b) = (ConversationId::parse("a").unwrap(), ConversationId::parse("b").unwrap());
            for id in ["a1", "a2", "a3"] {
                history.queued(&new_run(id, &a, "x")).unwrap();
            }
            history.queued(&new_run("b1", &b, "x")).unwrap();
            let ids = |records: Vec<RunRecord>| records.into_iter().map(|r| r.id).collect::<Vec<_>>();
            assert_eq!(ids(history.list(Some(&a), 10).unwrap()), ["a3", "a2", "a1"]);
            assert_eq!(ids(history.list(Some(&a), 2).unwrap()), ["a3", "a2"]);
            assert_eq!(ids(history.list(None, 10).unwrap()), ["b1", "a3", "a2", "a1"]);
            assert_eq!(history.get("missing").unwrap(), None);
        }
    }

    #[test]
    fn a_tenant_sees_only_the_runs_it_asked_for_and_an_admin_all() {
        for store in stores() {
            let history = store.open(false);
            let (a, b) = (ConversationId::parse("a").unwrap(), ConversationId::parse("b").unwrap());
            let alice_run = "0123456789abcdef0123456789abcdef";
            for (id, conversation, caller) in
                [(alice_run, &a, "alice"), ("bob-1", &a, "bob"), ("bob-2", &b, "bob"), ("cli-1", &b, "cli")]
            {
                history.queued(&NewRun { caller, ..new_run(id, conversation, "x") }).unwrap();
            }
            let (alice, bob, root) = (Tenant::new("alice"), Tenant::new("bob"), Tenant::admin("root"));
            assert_eq!(ids(history.list_for(&bob, None, 10).unwrap()), ["bob-2", "bob-1"]);
            assert_eq!(ids(history.list_for(&bob, Some(&a), 10).unwrap()), ["bob-1"]);
            assert_eq!(ids(history.list_for(&bob, None, 1).unwrap()), ["bob-2"]);
            assert_eq!(ids(history.list_for(&alice, Some(&b), 10).unwrap()), Vec::<String>::new());
            assert_eq!(ids(history.list_for(&root, None, 10).unwrap()), ["cli-1", "bob-2", "bob-1", alice_run]);
            assert_eq!(ids(history.list_for(&root, Some(&a), 10).unwrap()), ["bob-1", alice_run]);

            assert_eq!(history.get_for(&alice, alice_run).unwrap(), history.get(alice_run).unwrap());
            assert_eq!(history.get_for(&bob, alice_run).unwrap(), None);
            assert_eq!(history.get_for(&root, alice_run).unwrap(), history.get(alice_run).unwrap());
            assert_eq!(history.get_for(&alice, "missing").unwrap(), None);

            // A whole id only: a prefix finds nothing, and another tenant's id nothing either.
            assert_eq!(history.find_for(&alice, alice_run).unwrap().as_deref(), Some(alice_run));
            assert_eq!(history.find_for(&alice, &alice_run[..20]).unwrap(), None);
            assert_eq!(history.find_for(&bob, alice_run).unwrap(), None);
            assert_eq!(history.find_for(&root, alice_run).unwrap().as_deref(), Some(alice_run));
        }
    }
}
