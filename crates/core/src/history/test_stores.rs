//! The stores the history's tests run against: a SQLite file always, and a fresh PostgreSQL database when the tests
//! have a server (`SANDLOT_TEST_POSTGRES_URL`, which `scripts/test.sh` sets from `scripts/postgres-test.sh`; with it
//! set, a PostgreSQL that cannot be reached fails the tests). Each database is made for one test and dropped after.

use std::path::PathBuf;

use super::{History, Store};

/// The variable naming the tests' PostgreSQL server (any database of it: each test makes its own).
pub(crate) const POSTGRES_URL: &str = "SANDLOT_TEST_POSTGRES_URL";

/// A place a history is kept, opened as often as a test needs (a restart is another `open`).
pub(crate) enum TestStore {
    Sqlite(tempfile::TempDir),
    Postgres { admin: Box<postgres::Config>, database: String },
}

/// One new, empty store of each kind the tests have.
pub(crate) fn stores() -> Vec<TestStore> {
    let mut stores = vec![TestStore::Sqlite(tempfile::tempdir().unwrap())];
    if let Ok(url) = std::env::var(POSTGRES_URL) {
        stores.push(TestStore::postgres(&url));
    }
    stores
}

impl TestStore {
    /// A new database on the server `url` names.
    fn postgres(url: &str) -> Self {
        let admin: postgres::Config = url.parse().unwrap();
        let database = format!("sandlot_test_{}", uuid::Uuid::new_v4().simple());
        let sql = format!("CREATE DATABASE {database}");
        // The sync client drives a runtime of its own: on a thread of its own, whatever the test runs in.
        let config = admin.clone();
        std::thread::spawn(move || config.connect(postgres::NoTls).unwrap().batch_execute(&sql).unwrap())
            .join()
            .unwrap();
        Self::Postgres { admin: Box::new(admin), database }
    }

    /// Which kind, for assertion messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "sqlite",
            Self::Postgres { .. } => "postgres",
        }
    }

    /// The history kept here.
    pub(crate) fn open(&self, store_code: bool) -> History {
        self.try_open(store_code).unwrap()
    }

    /// [`TestStore::open`], or why not.
    pub(crate) fn try_open(&self, store_code: bool) -> crate::Result<History> {
        match self {
            Self::Sqlite(dir) => History::open(self.sqlite_path(dir), store_code),
            Self::Postgres { admin, database } => {
                let mut config = postgres::Config::clone(admin);
                config.dbname(database);
                let store = Store::Postgres(super::postgres::Postgres::connect_with(config)?);
                History::with_store(store, store_code, true)
            }
        }
    }

    /// A new PostgreSQL store, if the tests have a server.
    pub(crate) fn postgres_only() -> Option<Self> {
        std::env::var(POSTGRES_URL).ok().map(|url| Self::postgres(&url))
    }

    /// Runs `sql` as the server's administrator, from its default database, with `{database}` this store's
    /// database's name (a PostgreSQL store only).
    pub(crate) fn administer(&self, sql: &str) {
        let Self::Postgres { admin, database } = self else { panic!("not a PostgreSQL store") };
        let (sql, config) = (sql.replace("{database}", database), admin.clone());
        std::thread::spawn(move || config.connect(postgres::NoTls).unwrap().batch_execute(&sql).unwrap())
            .join()
            .unwrap();
    }

    fn sqlite_path(&self, dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("sandlot.db")
    }

    /// The URL of this store's PostgreSQL database, if it is one (for `History::connect`).
    pub(crate) fn url(&self) -> Option<String> {
        let Self::Postgres { admin, database } = self else { return None };
        let host = match admin.get_hosts().first()? {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string().replace('/', "%2F"),
        };
        let user = admin.get_user().unwrap_or("postgres");
        let port = admin.get_ports().first().map(|port| format!(":{port}")).unwrap_or_default();
        Some(format!("postgresql://{user}@{host}{port}/{database}"))
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if let Self::Postgres { admin, database } = self {
            let sql = format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)");
            let config = admin.clone();
            let dropped = std::thread::spawn(move || config.connect(postgres::NoTls)?.batch_execute(&sql)).join();
            if !matches!(dropped, Ok(Ok(()))) && !std::thread::panicking() {
                panic!("cannot drop the test database {database}: {dropped:?}");
            }
        }
    }
}

impl History {
    /// Runs `sql`, a statement both stores understand (no parameters), as a test's way to change rows.
    pub(crate) fn execute(&self, sql: &str) -> u64 {
        match &self.store {
            Store::Sqlite(db) => db.connection().execute(sql, []).unwrap() as u64,
            Store::Postgres(db) => {
                let sql = sql.to_owned();
                db.call("test", move |client| client.execute(&sql, &[])).unwrap()
            }
        }
    }

    /// The one number `sql` (a query both stores understand) gives.
    pub(crate) fn number(&self, sql: &str) -> i64 {
        match &self.store {
            Store::Sqlite(db) => db.connection().query_row(sql, [], |row| row.get(0)).unwrap(),
            Store::Postgres(db) => {
                let sql = sql.to_owned();
                db.call("test", move |client| client.query_one(&sql, &[])?.try_get(0)).unwrap()
            }
        }
    }
}
