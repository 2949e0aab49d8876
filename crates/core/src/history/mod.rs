//! The run history: every run the engine accepts is a row, written when it is queued, when it starts and when it
//! ends, so a run is never lost: one the server was killed in the middle of is found at the next start and marked
//! `interrupted`. Each row names the process that owns it (`owner`), so servers sharing a root (`serve` and `stdio`),
//! or a database (many machines), never mark each other's live runs.
//! Code is kept only when asked (`SANDLOT_STORE_CODE`); its size and SHA-256 always are.
//! What a run printed is kept beside its row (table `run_outputs`), as the run's outcome holds it: at most
//! `SANDLOT_MAX_OUTPUT_BYTES` per stream (its first and last halves when longer), so a result can show a model only a head and a tail and still point at the
//! whole. It goes when its run goes (pruning, a conversation's removal), and all outputs together stay within a
//! budget (`SANDLOT_HISTORY_OUTPUT_MB`, 1 GiB by default): past it, the oldest outputs are dropped (their runs stay).
//!
//! Two stores behind one API ([`Store`]): an embedded SQLite file (`sqlite`, the default:
//! `<SANDBOX_ROOT>/.sandlot/history.db`) or a PostgreSQL database many servers share (`postgres`,
//! `SANDLOT_HISTORY_URL`). Each query has a form for each, side by side in the submodule of its table: `record` (the
//! rows of runs), `outputs` (what runs printed), `connections` (a leashed run's audit trail), `retention` (what is
//! forgotten when), `nodes` (PostgreSQL only: the nodes' leases, which end a lost node's runs); `schema` is SQLite's
//! tables, `postgres::migrations` PostgreSQL's. Here: opening either, and recovering after a crash.

mod connections;
mod nodes;
mod outputs;
mod owner;
mod postgres;
mod record;
mod retention;
mod schema;
mod sqlite;
#[cfg(test)]
pub(crate) mod test_stores;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::params;

use crate::Result;
use owner::Owner;

pub use connections::NetworkTrail;
pub use nodes::hold_lease;
pub use outputs::{DEFAULT_OUTPUT_BUDGET, OutputLookup, RunOutput};
pub use postgres::relay::{Deliver, Listening, Relay, Relayed};
pub use record::{Ending, MAX_LISTED_RUNS, NewRun, Outcome, RunRecord};

/// Where the history is kept.
enum Store {
    Sqlite(sqlite::Sqlite),
    Postgres(postgres::Postgres),
}

/// The run history, in SQLite or PostgreSQL. Its calls are sync and short (a statement or two); a PostgreSQL one
/// that cannot reach its database fails with an error saying so, and the next one connects again.
pub struct History {
    store: Store,
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
        f.debug_struct("History").field("location", &self.location()).field("store_code", &self.store_code).finish()
    }
}

impl History {
    /// Opens (creating it if needed) the SQLite database at `path`; `store_code` keeps each run's source.
    pub fn open(path: impl Into<PathBuf>, store_code: bool) -> Result<Self> {
        Self::with_store(Store::Sqlite(sqlite::Sqlite::open(path.into())?), store_code, false)
    }

    /// Connects to the PostgreSQL database `url` names (`postgres://user:password@host:port/dbname`, or
    /// `key=value` pairs) and brings its tables up to date; `store_code` keeps each run's source.
    pub fn connect(url: &str, store_code: bool) -> Result<Self> {
        let history = Self::with_store(Store::Postgres(postgres::Postgres::connect(url)?), store_code, true)?;
        // This node's lease, before it records any run (see `nodes`).
        history.heartbeat()?;
        Ok(history)
    }

    fn with_store(store: Store, store_code: bool, shared: bool) -> Result<Self> {
        let history = Self {
            store,
            store_code,
            server: owner::this_process(shared),
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

    /// Whether many machines share this history (PostgreSQL), so that each node holds a lease (see `nodes`).
    pub fn is_shared(&self) -> bool {
        matches!(self.store, Store::Postgres(_))
    }

    /// Starts relaying run events to and from the other nodes of a shared history (see `postgres::relay`); `None`
    /// for SQLite, which no other node shares. `deliver` receives the other nodes' events; `listening` says whether
    /// anyone here listens to them.
    pub fn relay(&self, deliver: Deliver, listening: Listening) -> Result<Option<Relay>> {
        match &self.store {
            Store::Sqlite(_) => Ok(None),
            Store::Postgres(db) => db.relay(self.server.clone(), deliver, listening).map(Some),
        }
    }

    /// Where the history is: its file, or its PostgreSQL database (without credentials).
    pub fn location(&self) -> String {
        match &self.store {
            Store::Sqlite(db) => db.path().display().to_string(),
            Store::Postgres(db) => db.location().to_owned(),
        }
    }

    /// Marks every run left queued or running by a process of this machine that is gone as interrupted; returns
    /// their ids. Another machine's runs are its own to recover.
    pub fn recover(&self) -> Result<Vec<String>> {
        const ERROR: &str = "the server stopped while the run was in flight";
        let now = unix_ms(SystemTime::now());
        match &self.store {
            Store::Sqlite(db) => {
                let connection = db.connection();
                let unfinished = connection
                    .prepare("SELECT id, server FROM runs WHERE state != 'finished' ORDER BY queued_at")
                    .and_then(|mut statement| {
                        statement
                            .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))?
                            .collect::<rusqlite::Result<Vec<_>>>()
                    })
                    .map_err(|e| db.error("read", e))?;
                let orphans = orphans(unfinished);
                for id in &orphans {
                    connection
                        .execute(
                            "UPDATE runs SET state = 'finished', outcome = 'interrupted', finished_at = ?2, \
                             error = ?3 WHERE id = ?1 AND state != 'finished'",
                            params![id, now, ERROR],
                        )
                        .map_err(|e| db.error("update", e))?;
                }
                Ok(orphans)
            }
            Store::Postgres(db) => db.call("recover runs in", move |client| {
                let mut transaction = client.transaction()?;
                let rows = transaction.query(
                    "SELECT id, server FROM runs WHERE state <> 'finished' ORDER BY queued_at, seq FOR UPDATE",
                    &[],
                )?;
                let unfinished = rows
                    .iter()
                    .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let orphans = orphans(unfinished);
                for id in &orphans {
                    transaction.execute(
                        "UPDATE runs SET state = 'finished', outcome = 'interrupted', finished_at = $2, error = $3 \
                         WHERE id = $1",
                        &[id, &now, &ERROR],
                    )?;
                }
                transaction.commit()?;
                Ok(orphans)
            }),
        }
    }
}

impl History {
    /// Runs `sql`, a statement without parameters both stores understand; returns the rows it changed.
    fn write_both(&self, action: &'static str, sql: &'static str) -> Result<usize> {
        match &self.store {
            Store::Sqlite(db) => db.write(action, sql, []),
            Store::Postgres(db) => db.call(action, move |client| client.execute(sql, &[])).map(|rows| rows as usize),
        }
    }
}

/// The ids of the unfinished runs `(id, owner)` whose owner is a process of this machine that is gone.
fn orphans(unfinished: Vec<(String, String)>) -> Vec<String> {
    unfinished.into_iter().filter(|(_, server)| owner::of(server) == Owner::Gone).map(|(id, _)| id).collect()
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
        let conversation = ConversationId::parse("c").unwrap();
        for store in test_stores::stores() {
            {
                let history = store.open(false);
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
                history.queued(&new_run("elsewhere", &conversation, "x")).unwrap();
                history.execute("UPDATE runs SET server = '4194999:1@another-machine' WHERE id = 'elsewhere'");
            }
            let history = store.open(false);
            assert_eq!(
                history.recover().unwrap(),
                Vec::<String>::new(),
                "{}: this process still owns them",
                store.name()
            );
            // An owner of this machine that is gone (SQLite's rows name no machine; PostgreSQL's do).
            let gone = match store.name() {
                "sqlite" => "4194999:1".to_owned(),
                _ => format!("4194999:1@{}", history.server.split_once('@').unwrap().1),
            };
            history.execute(&format!("UPDATE runs SET server = '{gone}' WHERE id <> 'elsewhere'"));
            let mut recovered = history.recover().unwrap();
            recovered.sort();
            assert_eq!(recovered, ["running", "waiting"], "{}", store.name());
            let outcomes: Vec<_> = ["running", "waiting", "done", "elsewhere"]
                .iter()
                .map(|id| history.get(id).unwrap().unwrap().outcome)
                .collect();
            let expected = [Some(Outcome::Interrupted), Some(Outcome::Interrupted), Some(Outcome::Error), None];
            assert_eq!(outcomes, expected, "{}: another machine's run is its own", store.name());
            assert_eq!(history.recover().unwrap(), Vec::<String>::new());
        }
    }
}
