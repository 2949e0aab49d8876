//! The run history: every run the engine accepts is a row in an embedded SQLite database
//! (`<SANDBOX_ROOT>/.sandlot/history.db`, WAL journal), written when it is queued, when it starts and when it ends, so a run
//! is never lost: one the server was killed in the middle of is found at the next start and marked `interrupted`.
//! Each row names the process that owns it (pid and start time), so servers sharing a root (`serve` and `stdio`)
//! never mark each other's live runs.
//! Code is kept only when asked (`SANDLOT_STORE_CODE`); its size and SHA-256 always are.
//! What a run printed is kept beside its row (table `run_outputs`), as the run's outcome holds it: at most
//! `SANDLOT_MAX_OUTPUT_BYTES` per stream, so a result can show a model only a head and a tail and still point at the
//! whole. It goes when its run goes (pruning, a conversation's removal), and all outputs together stay within a
//! budget (`SANDLOT_HISTORY_OUTPUT_MB`, 1 GiB by default): past it, the oldest outputs are dropped (their runs stay).

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::{ConversationId, Error, Language, Result, Termination};

/// Most runs one listing returns.
pub const MAX_LISTED_RUNS: usize = 500;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    caller TEXT NOT NULL,
    server TEXT NOT NULL,
    language TEXT NOT NULL,
    code_bytes INTEGER NOT NULL,
    code_sha256 TEXT NOT NULL,
    code TEXT,
    metadata TEXT,
    state TEXT NOT NULL,
    outcome TEXT,
    exit_code INTEGER,
    error TEXT,
    queued_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    duration_ms INTEGER,
    stdout_bytes INTEGER NOT NULL DEFAULT 0,
    stderr_bytes INTEGER NOT NULL DEFAULT 0,
    truncated INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_conversation ON runs (conversation_id, queued_at DESC);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (queued_at);
CREATE TABLE IF NOT EXISTS run_outputs (
    run_id TEXT PRIMARY KEY,
    stdout TEXT NOT NULL,
    stderr TEXT NOT NULL,
    stdout_truncated INTEGER NOT NULL,
    stderr_truncated INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
";

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

/// The history database. Writes are short (a row each, WAL, no fsync per commit), so they are done in place.
pub struct History {
    connection: Mutex<Connection>,
    path: PathBuf,
    store_code: bool,
    /// This process, as rows name their owner.
    server: String,
    /// Most bytes of output kept, all runs together.
    output_budget: u64,
    /// Bytes of output kept now (the sum of `run_outputs.bytes`).
    output_bytes: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").field("path", &self.path).field("store_code", &self.store_code).finish()
    }
}

impl History {
    /// Opens (creating it if needed) the database at `path`; `store_code` keeps each run's source.
    pub fn open(path: impl Into<PathBuf>, store_code: bool) -> Result<Self> {
        let path = path.into();
        // The history names callers and may hold their code: only the server's user may read it. SQLite gives the
        // -wal and -shm files the database file's mode.
        if let Err(e) = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            return Err(Error::History { message: format!("cannot create {}: {e}", path.display()) });
        }
        let connection = Connection::open(&path).map_err(|e| database_error(&path, "open", e))?;
        connection
            .execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;")
            .and_then(|()| connection.execute_batch(SCHEMA))
            .map_err(|e| database_error(&path, "set up", e))?;
        let server = process_identity(std::process::id()).unwrap_or_default();
        let history = Self {
            connection: Mutex::new(connection),
            path,
            store_code,
            server,
            output_budget: DEFAULT_OUTPUT_BUDGET,
            output_bytes: Default::default(),
        };
        history.count_output_bytes()?;
        Ok(history)
    }

    /// The same history, keeping at most `bytes` of run output (0: none), the newest.
    pub fn with_output_budget(mut self, bytes: u64) -> Self {
        self.output_budget = bytes;
        self
    }

    /// Sets the kept output's size from the database (after a removal, or another process's writes).
    fn count_output_bytes(&self) -> Result<u64> {
        let bytes: i64 = self
            .connection()
            .query_row("SELECT COALESCE(SUM(bytes), 0) FROM run_outputs", [], |row| row.get(0))
            .map_err(|e| database_error(&self.path, "read", e))?;
        let bytes = bytes.max(0) as u64;
        self.output_bytes.store(bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(bytes)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs one statement (kept prepared: each run writes three times, always with the same statements).
    fn write(&self, action: &str, sql: &str, params: impl rusqlite::Params) -> Result<usize> {
        self.connection()
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute(params))
            .map_err(|e| database_error(&self.path, action, e))
    }

    /// Marks every run left queued or running by a process that is gone as interrupted; returns their ids.
    pub fn recover(&self) -> Result<Vec<String>> {
        let connection = self.connection();
        let unfinished = connection
            .prepare("SELECT id, server FROM runs WHERE state != 'finished' ORDER BY queued_at")
            .and_then(|mut statement| {
                statement
                    .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| database_error(&self.path, "read", e))?;
        let orphans: Vec<String> =
            unfinished.into_iter().filter(|(_, server)| !process_alive(server)).map(|(id, _)| id).collect();
        for id in &orphans {
            connection
                .execute(
                    "UPDATE runs SET state = 'finished', outcome = 'interrupted', finished_at = ?2, \
                     error = 'the server stopped while the run was in flight' WHERE id = ?1",
                    params![id, unix_ms(SystemTime::now())],
                )
                .map_err(|e| database_error(&self.path, "update", e))?;
        }
        Ok(orphans)
    }

    /// Records a run that was just accepted (queued).
    pub fn queued(&self, run: &NewRun<'_>) -> Result<()> {
        let sha256 = hex::encode(Sha256::digest(run.code.as_bytes()));
        let metadata = run.metadata.map(serde_json::Value::to_string);
        self.write(
            "insert into",
            "INSERT INTO runs (id, conversation_id, caller, server, language, code_bytes, code_sha256, code, \
             metadata, state, queued_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'queued', ?10)",
            params![
                run.id,
                run.conversation.as_str(),
                run.caller,
                self.server,
                run.language.as_str(),
                run.code.len() as i64,
                sha256,
                self.store_code.then_some(run.code),
                metadata,
                unix_ms(SystemTime::now()),
            ],
        )
        .map(drop)
    }

    /// Records that the run got its turn.
    pub fn started(&self, id: &str) -> Result<()> {
        self.write(
            "update",
            "UPDATE runs SET state = 'running', started_at = ?2 WHERE id = ?1",
            params![id, unix_ms(SystemTime::now())],
        )
        .map(drop)
    }

    /// Records how the run ended.
    pub fn finished(&self, id: &str, ending: &Ending) -> Result<()> {
        self.write(
            "update",
            "UPDATE runs SET state = 'finished', outcome = ?2, exit_code = ?3, error = ?4, finished_at = ?5, \
             duration_ms = ?6, stdout_bytes = ?7, stderr_bytes = ?8, truncated = ?9 WHERE id = ?1",
            params![
                id,
                ending.outcome.as_str(),
                ending.exit_code,
                ending.error,
                unix_ms(SystemTime::now()),
                ending.duration.map(|d| d.as_millis() as i64),
                ending.stdout_bytes as i64,
                ending.stderr_bytes as i64,
                ending.truncated,
            ],
        )
        .map(drop)
    }

    /// Keeps what run `id` printed (nothing for a run that printed nothing: reading gives empty streams).
    /// Beyond the output budget, the oldest outputs are dropped (a tenth of the budget more, so that this is rare).
    pub fn store_output(&self, id: &str, outcome: &crate::RunOutcome) -> Result<()> {
        let bytes = (outcome.stdout.len() + outcome.stderr.len()) as u64;
        if bytes == 0 || bytes > self.output_budget {
            return Ok(());
        }
        self.write(
            "insert into",
            "INSERT OR REPLACE INTO run_outputs (run_id, stdout, stderr, stdout_truncated, stderr_truncated, bytes) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                id,
                outcome.stdout,
                outcome.stderr,
                outcome.stdout_truncated,
                outcome.stderr_truncated,
                bytes as i64
            ],
        )?;
        let kept = self.output_bytes.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed) + bytes;
        if kept > self.output_budget {
            self.drop_oldest_outputs()?;
        }
        Ok(())
    }

    /// Drops the oldest outputs until those kept take at most nine tenths of the budget.
    fn drop_oldest_outputs(&self) -> Result<()> {
        let target = self.output_budget / 10 * 9;
        if self.count_output_bytes()? <= self.output_budget {
            return Ok(()); // another process's removals made room
        }
        // The newest outputs that fit in `target` stay: a window sum over the newest first.
        self.write(
            "prune",
            "DELETE FROM run_outputs WHERE rowid IN (SELECT rowid FROM (SELECT rowid, \
             SUM(bytes) OVER (ORDER BY rowid DESC) AS newer FROM run_outputs) WHERE newer > ?1)",
            params![i64::try_from(target).unwrap_or(i64::MAX)],
        )?;
        self.count_output_bytes().map(drop)
    }

    /// What run `id` printed. A finished run that printed nothing has empty streams.
    pub fn output(&self, id: &str) -> Result<OutputLookup> {
        let sql = "SELECT r.state, r.stdout_bytes + r.stderr_bytes, o.stdout, o.stderr, o.stdout_truncated, \
                   o.stderr_truncated FROM runs r LEFT JOIN run_outputs o ON o.run_id = r.id WHERE r.id = ?1";
        type Row = (String, i64, Option<String>, Option<String>, Option<bool>, Option<bool>);
        let row: Option<Row> = self
            .connection()
            .query_row(sql, params![id], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
            })
            .optional()
            .map_err(|e| database_error(&self.path, "read", e))?;
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

    /// Removes the outputs whose run is gone.
    fn drop_orphan_outputs(&self) -> Result<()> {
        self.write("prune", "DELETE FROM run_outputs WHERE run_id NOT IN (SELECT id FROM runs)", [])?;
        self.count_output_bytes().map(drop)
    }

    /// One run, if the history has it.
    pub fn get(&self, id: &str) -> Result<Option<RunRecord>> {
        let sql = format!("SELECT {COLUMNS} FROM runs WHERE id = ?1");
        self.connection()
            .query_row(&sql, params![id], record)
            .optional()
            .map_err(|e| database_error(&self.path, "read", e))
    }

    /// The id of the newest run whose id starts with `prefix` (lowercase hex, as run ids are), if any; for faces
    /// that show shortened run ids (Baponi's trace ids).
    pub fn find_by_prefix(&self, prefix: &str) -> Result<Option<String>> {
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Ok(None);
        }
        self.connection()
            .query_row(
                "SELECT id FROM runs WHERE substr(id, 1, ?2) = ?1 ORDER BY queued_at DESC, rowid DESC LIMIT 1",
                params![prefix, prefix.len() as i64],
                |row| row.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| database_error(&self.path, "read", e))
    }

    /// The newest `limit` runs (at most [`MAX_LISTED_RUNS`]), of one conversation or of all, newest first.
    pub fn list(&self, conversation: Option<&ConversationId>, limit: usize) -> Result<Vec<RunRecord>> {
        let limit = limit.min(MAX_LISTED_RUNS) as i64;
        let connection = self.connection();
        let rows = match conversation {
            Some(conversation) => connection
                .prepare(&format!(
                    "SELECT {COLUMNS} FROM runs WHERE conversation_id = ?1 ORDER BY queued_at DESC, rowid DESC LIMIT ?2"
                ))
                .and_then(|mut s| s.query_map(params![conversation.as_str(), limit], record)?.collect()),
            None => connection
                .prepare(&format!("SELECT {COLUMNS} FROM runs ORDER BY queued_at DESC, rowid DESC LIMIT ?1"))
                .and_then(|mut s| s.query_map(params![limit], record)?.collect()),
        };
        rows.map_err(|e| database_error(&self.path, "read", e))
    }
}

impl History {
    /// Whether a run of `conversation` is queued or running in a process that is still alive (this one, or
    /// another server on the same root).
    pub fn has_live_runs(&self, conversation: &ConversationId) -> Result<bool> {
        let servers = self
            .connection()
            .prepare_cached("SELECT server FROM runs WHERE conversation_id = ?1 AND state != 'finished'")
            .and_then(|mut statement| {
                statement.query_map(params![conversation.as_str()], |row| row.get::<_, String>(0))?.collect()
            })
            .map_err(|e| database_error(&self.path, "read", e));
        let servers: Vec<String> = servers?;
        Ok(servers.iter().any(|server| process_alive(server)))
    }

    /// Removes the finished runs of `conversation`; returns how many. Runs not yet finished stay: they are of a
    /// run that got in after the conversation was removed, and will use a new, empty one.
    pub fn delete_conversation(&self, conversation: &ConversationId) -> Result<usize> {
        let removed = self.write(
            "delete from",
            "DELETE FROM runs WHERE conversation_id = ?1 AND state = 'finished'",
            params![conversation.as_str()],
        )?;
        self.drop_orphan_outputs()?;
        Ok(removed)
    }

    /// When each conversation in the history was last used: its latest queue, start or end time.
    pub fn last_activity(&self) -> Result<std::collections::HashMap<String, SystemTime>> {
        let sql = "SELECT conversation_id, MAX(MAX(queued_at, COALESCE(started_at, 0), COALESCE(finished_at, 0))) \
                   FROM runs GROUP BY conversation_id";
        let rows = self
            .connection()
            .prepare_cached(sql)
            .and_then(|mut statement| {
                statement.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?.collect()
            })
            .map_err(|e| database_error(&self.path, "read", e));
        let rows: Vec<(String, i64)> = rows?;
        Ok(rows.into_iter().map(|(id, ms)| (id, UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))).collect())
    }

    /// When `conversation` was last used according to the history, if it has runs there.
    pub fn last_activity_of(&self, conversation: &ConversationId) -> Result<Option<SystemTime>> {
        let sql = "SELECT MAX(MAX(queued_at, COALESCE(started_at, 0), COALESCE(finished_at, 0))) \
                   FROM runs WHERE conversation_id = ?1";
        let ms: Option<i64> = self
            .connection()
            .prepare_cached(sql)
            .and_then(|mut statement| statement.query_row(params![conversation.as_str()], |row| row.get(0)))
            .map_err(|e| database_error(&self.path, "read", e))?;
        Ok(ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)))
    }

    /// Removes finished runs queued before `older_than`, then the oldest finished runs beyond the newest
    /// `max_runs`; returns how many went. Runs not yet finished are never removed.
    pub fn prune(&self, older_than: Option<SystemTime>, max_runs: Option<u64>) -> Result<usize> {
        let mut removed = 0;
        if let Some(cutoff) = older_than {
            removed += self.write(
                "prune",
                "DELETE FROM runs WHERE state = 'finished' AND queued_at < ?1",
                params![unix_ms(cutoff)],
            )?;
        }
        if let Some(max_runs) = max_runs {
            removed += self.write(
                "prune",
                "DELETE FROM runs WHERE state = 'finished' AND rowid IN \
                 (SELECT rowid FROM runs ORDER BY queued_at DESC, rowid DESC LIMIT -1 OFFSET ?1)",
                params![i64::try_from(max_runs).unwrap_or(i64::MAX)],
            )?;
        }
        if removed > 0 {
            self.drop_orphan_outputs()?;
        }
        Ok(removed)
    }
}

const COLUMNS: &str = "id, conversation_id, caller, language, code_bytes, code_sha256, code, metadata, state, \
    outcome, exit_code, error, queued_at, started_at, finished_at, duration_ms, stdout_bytes, stderr_bytes, truncated";

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
    })
}

/// `<pid>:<start time>` of a process (its start time tells a reused pid apart), from `/proc/<pid>/stat`.
fn process_identity(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces, inside parentheses); start time is field 22.
    let after_name = &stat[stat.rfind(')')? + 2..];
    let start_time = after_name.split_whitespace().nth(19)?;
    Some(format!("{pid}:{start_time}"))
}

/// Whether the process a row names still runs.
fn process_alive(server: &str) -> bool {
    let Some(pid) = server.split(':').next().and_then(|pid| pid.parse::<u32>().ok()) else { return false };
    process_identity(pid).as_deref() == Some(server)
}

fn database_error(path: &Path, action: &str, error: rusqlite::Error) -> Error {
    Error::History { message: format!("cannot {action} {}: {error}", path.display()) }
}

fn unix_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn rfc3339(ms: i64) -> String {
    let time = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_run<'a>(id: &'a str, conversation: &'a ConversationId, code: &'a str) -> NewRun<'a> {
        NewRun { id, conversation, caller: "tester", language: Language::Python, code, metadata: None }
    }

    #[test]
    fn a_run_is_recorded_from_queue_to_end() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("sandlot.db"), false).unwrap();
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
            }
        );
    }

    #[test]
    fn only_the_owner_may_read_the_database() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("sandlot.db"), false).unwrap();
        let conversation = ConversationId::parse("c").unwrap();
        history.queued(&new_run("r", &conversation, "x")).unwrap();
        for name in ["sandlot.db", "sandlot.db-wal"] {
            let mode = std::fs::metadata(dir.path().join(name)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{name}");
        }
    }

    #[test]
    fn code_is_kept_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let conversation = ConversationId::parse("c").unwrap();
        let kept = History::open(dir.path().join("a.db"), true).unwrap();
        kept.queued(&new_run("r", &conversation, "echo hi")).unwrap();
        assert_eq!(kept.get("r").unwrap().unwrap().code.as_deref(), Some("echo hi"));
        let not_kept = History::open(dir.path().join("b.db"), false).unwrap();
        not_kept.queued(&new_run("r", &conversation, "echo hi")).unwrap();
        assert_eq!(not_kept.get("r").unwrap().unwrap().code, None);
    }

    #[test]
    fn runs_in_flight_at_a_restart_become_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sandlot.db");
        let conversation = ConversationId::parse("c").unwrap();
        {
            let history = History::open(&path, false).unwrap();
            history.queued(&new_run("running", &conversation, "x")).unwrap();
            history.started("running").unwrap();
            history.queued(&new_run("waiting", &conversation, "x")).unwrap();
            history.queued(&new_run("done", &conversation, "x")).unwrap();
            let ending = Ending {
                outcome: Outcome::Error,
                exit_code: Some(1),
                error: None,
                duration: None,
                stdout_bytes: 0,
                stderr_bytes: 0,
                truncated: false,
            };
            history.finished("done", &ending).unwrap();
        }
        let history = History::open(&path, false).unwrap();
        assert_eq!(history.recover().unwrap(), Vec::<String>::new(), "this process still owns them");
        history.connection().execute("UPDATE runs SET server = '4194999:1'", []).unwrap(); // an owner that is gone
        let mut recovered = history.recover().unwrap();
        recovered.sort();
        assert_eq!(recovered, ["running", "waiting"]);
        let outcomes: Vec<_> =
            ["running", "waiting", "done"].iter().map(|id| history.get(id).unwrap().unwrap().outcome).collect();
        assert_eq!(outcomes, [Some(Outcome::Interrupted), Some(Outcome::Interrupted), Some(Outcome::Error)]);
        assert_eq!(history.recover().unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_process_is_named_by_pid_and_start_time() {
        let me = process_identity(std::process::id()).unwrap();
        assert!(me.starts_with(&format!("{}:", std::process::id())), "{me}");
        assert!(process_alive(&me));
        assert!(!process_alive(&format!("{}:0", std::process::id())), "a reused pid is another process");
        assert!(!process_alive("not a process"));
    }

    fn ids(records: Vec<RunRecord>) -> Vec<String> {
        records.into_iter().map(|r| r.id).collect()
    }

    fn finish(history: &History, id: &str) {
        let ending = Ending {
            outcome: Outcome::Ok,
            exit_code: Some(0),
            error: None,
            duration: None,
            stdout_bytes: 0,
            stderr_bytes: 0,
            truncated: false,
        };
        history.finished(id, &ending).unwrap();
    }

    #[test]
    fn pruning_removes_old_and_excess_finished_runs_only() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("sandlot.db"), false).unwrap();
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
            let sql = "UPDATE runs SET queued_at = ?2 WHERE id = ?1";
            history.connection().execute(sql, params![id, now - age_days * day_ms]).unwrap();
        }
        let cutoff = SystemTime::now() - Duration::from_secs(30 * 24 * 3600);
        assert_eq!(history.prune(Some(cutoff), None).unwrap(), 2);
        assert_eq!(ids(history.list(None, 10).unwrap()), ["new3", "new2", "new1", "running"]);
        // At most two: the oldest finished beyond the newest two go, the unfinished one stays whatever its age.
        assert_eq!(history.prune(None, Some(2)).unwrap(), 1);
        assert_eq!(ids(history.list(None, 10).unwrap()), ["new3", "new2", "running"]);
        assert_eq!(history.prune(Some(cutoff), Some(2)).unwrap(), 0);
    }

    #[test]
    fn deleting_a_conversation_keeps_other_conversations_and_unfinished_runs() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("sandlot.db"), false).unwrap();
        let (a, b) = (ConversationId::parse("a").unwrap(), ConversationId::parse("b").unwrap());
        for (id, conversation) in [("a1", &a), ("a2", &a), ("b1", &b)] {
            history.queued(&new_run(id, conversation, "x")).unwrap();
            finish(&history, id);
        }
        history.queued(&new_run("a-queued", &a, "x")).unwrap();
        assert!(history.has_live_runs(&a).unwrap());
        assert!(!history.has_live_runs(&b).unwrap());
        let activity = history.last_activity().unwrap();
        assert_eq!(activity.keys().map(String::as_str).collect::<std::collections::BTreeSet<_>>(), ["a", "b"].into());
        assert_eq!(history.last_activity_of(&b).unwrap(), Some(activity["b"]));
        assert_eq!(history.last_activity_of(&ConversationId::parse("none").unwrap()).unwrap(), None);
        assert_eq!(history.delete_conversation(&a).unwrap(), 2);
        assert_eq!(ids(history.list(None, 10).unwrap()), ["a-queued", "b1"]);
    }

    #[test]
    fn listings_are_newest_first_per_conversation_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("sandlot.db"), false).unwrap();
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

    #[test]
    fn output_is_kept_with_its_run_and_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("sandlot.db"), false).unwrap();
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
        history.store_output("printed", &outcome("out\n")).unwrap();
        history.store_output("pruned", &outcome("old\n")).unwrap();
        history.store_output("silent", &crate::RunOutcome::empty(Termination::Cancelled, Duration::ZERO)).unwrap();
        let printed = RunOutput {
            run_id: "printed".into(),
            stdout: "out\n".into(),
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
        history.connection().execute("UPDATE runs SET queued_at = 0 WHERE id = 'pruned'", []).unwrap();
        assert_eq!(history.prune(Some(UNIX_EPOCH + Duration::from_secs(1)), None).unwrap(), 1);
        let left: i64 = history.connection().query_row("SELECT COUNT(*) FROM run_outputs", [], |r| r.get(0)).unwrap();
        assert_eq!(left, 1, "the pruned run's output went with it");
        assert_eq!(history.delete_conversation(&c).unwrap(), 2);
        let left: i64 = history.connection().query_row("SELECT COUNT(*) FROM run_outputs", [], |r| r.get(0)).unwrap();
        assert_eq!(left, 0);
    }

    #[test]
    fn outputs_stay_within_their_budget_the_newest_kept() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("sandlot.db"), false).unwrap().with_output_budget(1000);
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
        let history = History::open(dir.path().join("sandlot.db"), false).unwrap();
        assert_eq!(history.output_bytes.load(std::sync::atomic::Ordering::Relaxed), 900);
    }
}
