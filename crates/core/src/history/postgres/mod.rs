//! The history's shared store: a PostgreSQL database (`SANDLOT_HISTORY_URL=postgres://...`), so that every node of a
//! fleet lists the same runs. Its schema is versioned (`migrations`); its connection is kept, lost and found again
//! by `link`; its statements are prepared once per connection (`session`).
//!
//! Why a thread: [`crate::History`] is a sync API called from async code (as SQLite's store is: short writes done in
//! place), and the sync `postgres` client drives a runtime of its own, which panics when started on a tokio worker
//! ("Cannot start a runtime from within a runtime"). So one thread, `sandlot-history`, owns the one connection and
//! runs the queries sent to it over a channel, one at a time and in order (as SQLite's mutex serializes them); the
//! caller blocks on the answer, as it would on SQLite's disk. The thread ends when the history is dropped.
//! (tokio-postgres driven through a runtime handle would not do: `Handle::block_on` panics on a worker just the same,
//! and the history is called from workers, blocking threads and tests without a runtime alike.) What a caller waits
//! for is a round trip or two; a database that stops answering costs the call that finds it out up to a timeout
//! (10 s unacknowledged on TCP, 5 s to connect), and the calls after it fail at once until the backoff allows another
//! attempt (`link`).

mod link;
mod migrations;
pub(crate) mod relay;
mod session;

use std::sync::mpsc;

use crate::{Error, Result};
use link::Link;
pub(crate) use session::Session;

/// A query, run on the history's thread against its connection.
type Job = Box<dyn FnOnce(&mut Link) + Send>;

/// The PostgreSQL database: a handle on the thread that holds its connection.
pub(super) struct Postgres {
    jobs: mpsc::Sender<Job>,
    /// Where the database is, without credentials: for messages.
    location: String,
    /// How to connect, for the connections of the event relay.
    config: postgres::Config,
}

impl Postgres {
    /// Connects to the database `url` names (`postgres://user:password@host:port/dbname?...`, or `key=value` pairs)
    /// and brings its schema up to date; fails when it cannot (a server must not start without its history).
    pub(super) fn connect(url: &str) -> Result<Self> {
        let config: postgres::Config = url.parse().map_err(|e| Error::History {
            message: format!("invalid SANDLOT_HISTORY_URL (a postgres:// URL or key=value pairs): {e}"),
        })?;
        Self::connect_with(config)
    }

    /// [`Postgres::connect`] with the connection's settings parsed already.
    pub(super) fn connect_with(config: postgres::Config) -> Result<Self> {
        let location = link::describe(&config);
        let (jobs, queue) = mpsc::channel::<Job>();
        let mut link = Link::new(config.clone(), location.clone())?;
        std::thread::Builder::new()
            .name("sandlot-history".into())
            .spawn(move || {
                for job in queue {
                    job(&mut link);
                }
            })
            .map_err(|e| Error::History { message: format!("cannot start the history's thread: {e}") })?;
        let database = Self { jobs, location, config };
        let applied = database.call("set up", migrations::apply)?.map_err(|message| Error::History { message })?;
        if !applied.is_empty() {
            tracing::info!(database = %database.location, ?applied, "history database migrated");
        }
        Ok(database)
    }

    /// Runs `query` on the connection and returns what it gives. A lost connection is found again once, at once,
    /// and the query run again; failing that, the error says the database is unreachable, and the next call tries
    /// to connect again (after a short backoff).
    pub(super) fn call<T: Send + 'static>(
        &self,
        action: &'static str,
        mut query: impl FnMut(&mut Session) -> std::result::Result<T, postgres::Error> + Send + 'static,
    ) -> Result<T> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |link| {
            let _ = reply.send(link.run(action, &mut query));
        });
        let gone = || Error::History { message: format!("the history's thread is gone ({})", self.location) };
        self.jobs.send(job).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }

    /// Where the database is, without credentials.
    pub(super) fn location(&self) -> &str {
        &self.location
    }

    /// Starts relaying run events between the nodes of this database (see [`relay`]).
    pub(super) fn relay(
        &self,
        node: String,
        deliver: relay::Deliver,
        listening: relay::Listening,
    ) -> Result<relay::Relay> {
        relay::Relay::start(self.config.clone(), self.location.clone(), node, deliver, listening)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::ConversationId;
    use crate::history::test_stores::TestStore;
    use crate::history::tests::new_run;

    /// Calls `call` until it succeeds, for at most 20 s (a reconnection takes milliseconds; the bound is for a loaded
    /// machine, and a history that never reconnects still fails it).
    fn eventually<T>(mut call: impl FnMut() -> crate::Result<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match call() {
                Ok(value) => return value,
                Err(error) if Instant::now() > deadline => panic!("still failing after 20 s: {error}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    #[test]
    fn a_lost_connection_fails_clearly_and_is_made_again() {
        let Some(store) = TestStore::postgres_only() else { return };
        let history = store.open(false);
        let conversation = ConversationId::parse("c").unwrap();
        history.queued(&new_run("before", &conversation, "x")).unwrap();
        let terminate = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'";

        // The server ends the connection (as a restart does): the next call makes a new one and is answered.
        store.administer(terminate);
        assert_eq!(history.get("before").unwrap().map(|run| run.id).as_deref(), Some("before"));
        history.queued(&new_run("after", &conversation, "x")).unwrap();

        // The database is unreachable: calls fail at once, saying so, and the run's other writes too.
        store.administer(&format!("ALTER DATABASE {{database}} ALLOW_CONNECTIONS false; {terminate}"));
        let started = Instant::now();
        let mut errors: Vec<String> = (0..3).map(|_| history.get("before").unwrap_err().to_string()).collect();
        errors.push(history.started("after").unwrap_err().to_string());
        for error in &errors {
            assert!(
                error.contains("the history database is unreachable (postgresql database sandlot_test_"),
                "{error}"
            );
        }
        // Calls in a row, milliseconds apart: at least one comes within the first backoff (0.2 s).
        assert!(errors.iter().any(|error| error.contains("next attempt to connect in")), "no backoff: {errors:?}");
        // Generous: each failed call takes a refused connection (milliseconds), never a timeout (5 s).
        assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());

        // Reachable again: within the backoff, calls succeed again, and nothing recorded before was lost.
        store.administer("ALTER DATABASE {database} ALLOW_CONNECTIONS true");
        let runs = eventually(|| history.list(Some(&conversation), 10));
        assert_eq!(runs.iter().map(|run| run.id.as_str()).collect::<Vec<_>>(), ["after", "before"]);
        history.started("after").unwrap();
        assert_eq!(history.get("after").unwrap().unwrap().state, "running");
    }

    #[test]
    fn a_history_connects_by_url_and_says_why_not() {
        let error = crate::History::connect("not a url", false).unwrap_err().to_string();
        assert!(error.contains("invalid SANDLOT_HISTORY_URL"), "{error}");
        let url = "postgresql://sandlot:secret-pw@%2Fnonexistent-dir/history";
        let error = crate::History::connect(url, false).unwrap_err().to_string();
        let unreachable =
            "the history database is unreachable (postgresql database history on /nonexistent-dir port 5432)";
        assert!(error.contains(unreachable) && error.contains("No such file or directory"), "{error}");
        assert!(!error.contains("secret-pw"), "{error}");
        let Some(store) = TestStore::postgres_only() else { return };
        let history = crate::History::connect(&store.url().unwrap(), false).unwrap();
        history.queued(&new_run("r", &ConversationId::parse("c").unwrap(), "x")).unwrap();
        assert_eq!(store.open(false).get("r").unwrap().map(|run| run.caller).as_deref(), Some("tester"));
    }

    #[test]
    fn migrations_are_applied_once_by_servers_starting_at_once() {
        let Some(store) = TestStore::postgres_only() else { return };
        let store = std::sync::Arc::new(store);
        let opened: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || drop(store.open(false)))
            })
            .collect();
        for thread in opened {
            thread.join().unwrap();
        }
        let history = store.open(false);
        assert_eq!(history.number("SELECT COUNT(*) FROM schema_migrations"), super::migrations::latest());
        assert_eq!(history.number("SELECT MAX(version) FROM schema_migrations"), super::migrations::latest());
        assert_eq!(
            history.number("SELECT COUNT(*) FROM schema_migrations WHERE compatible_from IS NULL"),
            0,
            "each migration records what it is compatible with"
        );
        // A database of a sandlot from before `compatible_from`: the column is added at the next start.
        history.execute("ALTER TABLE schema_migrations DROP COLUMN compatible_from");
        drop(store.open(false));
        assert_eq!(history.number("SELECT COUNT(*) FROM schema_migrations"), super::migrations::latest());
        // A newer sandlot's migration that older sandlots work with (a table they never read): used as it is.
        let latest = super::migrations::latest();
        history.execute(&format!("INSERT INTO schema_migrations (version, compatible_from) VALUES (999999, {latest})"));
        let reopened = store.open(false);
        reopened.queued(&new_run("after-a-newer-migration", &ConversationId::parse("c").unwrap(), "x")).unwrap();
        assert_eq!(reopened.number("SELECT MAX(version) FROM schema_migrations"), 999_999, "nothing applied again");
        // One that needs a newer sandlot (or says nothing, as rows from before `compatible_from`) is refused.
        for compatible_from in ["1000000", "NULL"] {
            history.execute("DELETE FROM schema_migrations WHERE version = 1000000");
            history.execute(&format!(
                "INSERT INTO schema_migrations (version, compatible_from) VALUES (1000000, {compatible_from})"
            ));
            let error = store.try_open(false).unwrap_err().to_string();
            let newer = format!(
                "schema version 1000000, which needs a sandlot of schema version 1000000 or later; this sandlot's is \
                 {latest}: upgrade sandlot"
            );
            assert!(error.contains(&newer), "{error}");
        }
    }
}
