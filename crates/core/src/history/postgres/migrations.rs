//! The PostgreSQL history's schema, versioned: [`MIGRATIONS`] in order, each applied once, recorded in
//! `schema_migrations (version, applied_at, compatible_from)`. A server applies what its database lacks when it
//! connects, in one transaction holding an advisory lock, so nodes starting at once wait for each other instead of
//! applying a migration twice. Each migration also records the oldest schema version whose sandlot still works on
//! the database after it (`compatible_from`: its own version when older code would break, earlier when it only adds
//! what older code ignores), so a database a newer sandlot migrated is used as long as every migration past this
//! sandlot's last allows it (a rolling upgrade: an old node restarting after a new one migrated), and refused
//! otherwise.
//! A migration, once released, never changes: a change to the schema is a new one at the end.
//!
//! The tables are SQLite's (`schema.rs`) with PostgreSQL's types: times are milliseconds since the epoch (BIGINT, as
//! in SQLite, so both stores share their queries' arithmetic), `seq` orders rows inserted in the same millisecond (as
//! SQLite's rowid does), and code and output are BYTEA, since PostgreSQL's TEXT cannot hold a NUL, which a program
//! may print.

use super::Session;

/// The advisory lock held while migrating ("sandlot" in ASCII).
const LOCK: i64 = 0x73_61_6e_64_6c_6f_74;

/// A version of the schema: its number, the oldest version whose sandlot works on it, and its statements.
struct Migration {
    version: i64,
    compatible_from: i64,
    statements: &'static str,
}

/// Each version, in order.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        compatible_from: 1,
        statements: "
CREATE TABLE runs (
    seq BIGSERIAL NOT NULL UNIQUE,
    id TEXT PRIMARY KEY,
    conversation_id TEXT NOT NULL,
    caller TEXT NOT NULL,
    server TEXT NOT NULL,
    language TEXT NOT NULL,
    code_bytes BIGINT NOT NULL,
    code_sha256 TEXT NOT NULL,
    code BYTEA,
    metadata TEXT,
    state TEXT NOT NULL,
    outcome TEXT,
    exit_code INTEGER,
    error TEXT,
    queued_at BIGINT NOT NULL,
    started_at BIGINT,
    finished_at BIGINT,
    duration_ms BIGINT,
    stdout_bytes BIGINT NOT NULL DEFAULT 0,
    stderr_bytes BIGINT NOT NULL DEFAULT 0,
    truncated BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX runs_by_conversation ON runs (conversation_id, queued_at DESC, seq DESC);
CREATE INDEX runs_by_time ON runs (queued_at DESC, seq DESC);
CREATE INDEX runs_by_caller ON runs (caller, queued_at DESC, seq DESC);
CREATE INDEX runs_unfinished ON runs (conversation_id) WHERE state <> 'finished';
CREATE TABLE run_outputs (
    seq BIGSERIAL NOT NULL UNIQUE,
    run_id TEXT PRIMARY KEY,
    stdout BYTEA NOT NULL,
    stderr BYTEA NOT NULL,
    stdout_truncated BOOLEAN NOT NULL,
    stderr_truncated BOOLEAN NOT NULL,
    bytes BIGINT NOT NULL
);
CREATE TABLE run_connections (
    run_id TEXT PRIMARY KEY,
    trail TEXT NOT NULL
);
",
    },
    // A table version 1 never reads.
    Migration {
        version: 2,
        compatible_from: 1,
        statements: "
CREATE TABLE nodes (
    name TEXT PRIMARY KEY,
    seen_at BIGINT NOT NULL
);
",
    },
];

/// The last version this sandlot knows.
pub(super) fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |migration| migration.version)
}

/// Applies the migrations the database lacks; `Err(message)` inside when a newer sandlot migrated the database past
/// what this one works with.
pub(super) fn apply(client: &mut Session) -> Result<Result<Vec<i64>, String>, postgres::Error> {
    let mut transaction = client.transaction()?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])?;
    transaction.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version BIGINT PRIMARY KEY,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
             compatible_from BIGINT
         )",
    )?;
    // `compatible_from` came after schema version 2 was released; a row without one allows only its own version.
    // Added once, by the first sandlot that knows it (altering a table needs its owner, which a later start may not
    // be).
    let has_column = "SELECT EXISTS (SELECT 1 FROM information_schema.columns
                      WHERE table_name = 'schema_migrations' AND column_name = 'compatible_from'
                      AND table_schema = current_schema())";
    if !transaction.query_one(has_column, &[])?.try_get::<_, bool>(0)? {
        transaction.batch_execute("ALTER TABLE schema_migrations ADD COLUMN compatible_from BIGINT")?;
    }
    let newer = transaction.query_one(
        "SELECT COALESCE(MAX(version), 0), MAX(COALESCE(compatible_from, version)) FILTER (WHERE version > $1)
         FROM schema_migrations",
        &[&latest()],
    )?;
    let (current, needs): (i64, Option<i64>) = (newer.try_get(0)?, newer.try_get(1)?);
    if let Some(needs) = needs {
        if needs > latest() {
            return Ok(Err(format!(
                "the history database is at schema version {current}, which needs a sandlot of schema version {needs} \
                 or later; this sandlot's is {}: upgrade sandlot",
                latest()
            )));
        }
        tracing::info!(current, latest = latest(), "the history database is newer than this sandlot, and allows it");
        return Ok(Ok(Vec::new()));
    }
    let mut applied = Vec::new();
    for migration in MIGRATIONS.iter().filter(|migration| migration.version > current) {
        transaction.batch_execute(migration.statements)?;
        transaction.execute(
            "INSERT INTO schema_migrations (version, compatible_from) VALUES ($1, $2)",
            &[&migration.version, &migration.compatible_from],
        )?;
        applied.push(migration.version);
    }
    transaction.commit()?;
    Ok(Ok(applied))
}
