//! The history's tables, and the settings every connection to the database gets: WAL (readers never wait for the
//! writer), `synchronous = NORMAL` (no fsync per commit: a run's row is small and written three times) and a busy
//! timeout for the other servers sharing the root.

use std::time::{Duration, Instant};

use rusqlite::Connection;

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
CREATE INDEX IF NOT EXISTS runs_by_caller ON runs (caller, queued_at DESC);
CREATE TABLE IF NOT EXISTS run_outputs (
    run_id TEXT PRIMARY KEY,
    stdout TEXT NOT NULL,
    stderr TEXT NOT NULL,
    stdout_truncated INTEGER NOT NULL,
    stderr_truncated INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS run_connections (
    run_id TEXT PRIMARY KEY,
    trail TEXT NOT NULL
);
";

/// How long a connection waits for another server's lock (SQLite's busy timeout, and the WAL switch's retries).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Applies the connection's settings and creates what is missing of the tables.
pub(super) fn set_up(connection: &Connection) -> rusqlite::Result<()> {
    connection.busy_timeout(BUSY_TIMEOUT)?;
    switch_to_wal(connection)?;
    connection.execute_batch("PRAGMA synchronous = NORMAL;")?;
    connection.execute_batch(SCHEMA)
}

/// `PRAGMA journal_mode = WAL`, retried while another connection holds the database: switching a new database to WAL
/// needs it alone, and SQLite answers "database is locked" at once there, without its busy timeout (servers sharing
/// a root start at once). The mode is kept in the file, so only a new database's first connections meet this.
fn switch_to_wal(connection: &Connection) -> rusqlite::Result<()> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match connection.execute_batch("PRAGMA journal_mode = WAL;") {
            Err(rusqlite::Error::SqliteFailure(error, _))
                if error.code == rusqlite::ErrorCode::DatabaseBusy && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    /// Servers sharing a root start at once and each sets up the same new database: every one must succeed.
    #[test]
    fn servers_starting_at_once_on_one_new_database_all_set_it_up() {
        const SERVERS: usize = 6;
        for round in 0..30 {
            let dir = tempfile::tempdir().unwrap();
            let path = Arc::new(dir.path().join("history.db"));
            let barrier = Arc::new(Barrier::new(SERVERS));
            let servers: Vec<_> = (0..SERVERS)
                .map(|_| {
                    let (path, barrier) = (Arc::clone(&path), Arc::clone(&barrier));
                    std::thread::spawn(move || {
                        let connection = rusqlite::Connection::open(path.as_path())?;
                        barrier.wait();
                        super::set_up(&connection)
                    })
                })
                .collect();
            for server in servers {
                let result = server.join().unwrap();
                assert!(result.is_ok(), "round {round}: {result:?}");
            }
        }
    }
}
