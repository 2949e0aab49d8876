//! The run history: every run the engine accepts is a row in an embedded SQLite database
//! (`<SANDBOX_ROOT>/.sandlot/history.db`, WAL journal), written when it is queued, when it starts and when it ends, so a run
//! is never lost: one the server was killed in the middle of is found at the next start and marked `interrupted`.
//! Each row names the process that owns it (pid and start time), so servers sharing a root (`serve` and `stdio`)
//! never mark each other's live runs.
//! Code is kept only when asked (`SANDLOT_STORE_CODE`); its size and SHA-256 always are.
//! What a run printed is kept beside its row (table `run_outputs`), as the run's outcome holds it: at most
//! `SANDLOT_MAX_OUTPUT_BYTES` per stream (its first and last halves when longer), so a result can show a model only a head and a tail and still point at the
//! whole. It goes when its run goes (pruning, a conversation's removal), and all outputs together stay within a
//! budget (`SANDLOT_HISTORY_OUTPUT_MB`, 1 GiB by default): past it, the oldest outputs are dropped (their runs stay).
//!
//! Here: the database itself (opening it, recovering after a crash); the submodules hold its tables (`schema`), the
//! rows of runs (`record`), what runs printed (`outputs`) and what is forgotten when (`retention`).

mod connections;
mod outputs;
mod record;
mod retention;
mod schema;

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, params};

use crate::{Error, Result};

pub use connections::NetworkTrail;
pub use outputs::{DEFAULT_OUTPUT_BUDGET, OutputLookup, RunOutput};
pub use record::{Ending, MAX_LISTED_RUNS, NewRun, Outcome, RunRecord};

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
        schema::set_up(&connection).map_err(|e| database_error(&path, "set up", e))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConversationId;

    /// A new run of `conversation` by caller `tester`.
    pub(super) fn new_run<'a>(id: &'a str, conversation: &'a ConversationId, code: &'a str) -> NewRun<'a> {
        NewRun { id, conversation, caller: "tester", language: crate::Language::Python, code, metadata: None }
    }

    /// The ids of `records`, in order.
    pub(super) fn ids(records: Vec<RunRecord>) -> Vec<String> {
        records.into_iter().map(|r| r.id).collect()
    }

    /// Records run `id` as finished with exit code 0.
    pub(super) fn finish(history: &History, id: &str) {
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
}
