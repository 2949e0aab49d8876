//! The embedded store of the history (the default): one SQLite file, `<SANDBOX_ROOT>/.sandlot/history.db`, WAL
//! journal, one connection behind a mutex (writes are short: a row each, no fsync per commit, so they are done in
//! place on the caller's thread). Only the server's user may read it: it names callers and may hold their code.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

use crate::{Error, Result};

/// The SQLite database and its one connection.
pub(super) struct Sqlite {
    connection: Mutex<Connection>,
    path: PathBuf,
}

impl Sqlite {
    /// Opens (creating it if needed, mode 0600) the database at `path`, with its tables.
    pub(super) fn open(path: PathBuf) -> Result<Self> {
        // SQLite gives the -wal and -shm files the database file's mode.
        if let Err(e) = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            return Err(Error::History { message: format!("cannot create {}: {e}", path.display()) });
        }
        let connection = Connection::open(&path).map_err(|e| error(&path, "open", e))?;
        super::schema::set_up(&connection).map_err(|e| error(&path, "set up", e))?;
        Ok(Self { connection: Mutex::new(connection), path })
    }

    /// The database file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn connection(&self) -> MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs one statement (kept prepared: each run writes three times, always with the same statements).
    pub(super) fn write(&self, action: &str, sql: &str, params: impl rusqlite::Params) -> Result<usize> {
        self.connection()
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute(params))
            .map_err(|e| self.error(action, e))
    }

    /// `error`, saying what was done to which file.
    pub(super) fn error(&self, action: &str, error: rusqlite::Error) -> Error {
        self::error(&self.path, action, error)
    }
}

fn error(path: &Path, action: &str, error: rusqlite::Error) -> Error {
    Error::History { message: format!("cannot {action} {}: {error}", path.display()) }
}
