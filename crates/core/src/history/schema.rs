//! The history's tables, and the settings every connection to the database gets: WAL (readers never wait for the
//! writer), `synchronous = NORMAL` (no fsync per commit: a run's row is small and written three times) and a busy
//! timeout for the other servers sharing the root.

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

/// Applies the connection's settings and creates what is missing of the tables.
pub(super) fn set_up(connection: &Connection) -> rusqlite::Result<()> {
    connection.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;")?;
    connection.execute_batch(SCHEMA)
}
