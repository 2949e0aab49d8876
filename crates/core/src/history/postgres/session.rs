//! One connection to the history's PostgreSQL database and the statements prepared on it: each query the history
//! makes is prepared once per connection and then runs in one round trip (instead of two: a parse, then the run).
//! The history's statements are a small fixed set, so the cache needs no bound; it goes with its connection, and is
//! emptied after an error (a statement another node's migration made stale is prepared again).

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, Row, Statement, Transaction};

/// A connection and its prepared statements.
pub(crate) struct Session {
    client: Client,
    statements: HashMap<String, Statement>,
}

/// A query's parameters.
type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

impl Session {
    pub(super) fn new(client: Client) -> Self {
        Self { client, statements: HashMap::new() }
    }

    /// Whether the connection is known to be gone.
    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Forgets the prepared statements.
    pub(super) fn forget_statements(&mut self) {
        self.statements.clear();
    }

    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Runs `sql`; returns the rows it changed.
    pub(crate) fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, postgres::Error> {
        let statement = self.statement(sql)?;
        self.client.execute(&statement, params)
    }

    /// The rows `sql` gives.
    pub(crate) fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, postgres::Error> {
        let statement = self.statement(sql)?;
        self.client.query(&statement, params)
    }

    /// The one row `sql` gives.
    pub(crate) fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, postgres::Error> {
        let statement = self.statement(sql)?;
        self.client.query_one(&statement, params)
    }

    /// The row `sql` gives, if any.
    pub(crate) fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, postgres::Error> {
        let statement = self.statement(sql)?;
        self.client.query_opt(&statement, params)
    }

    /// A transaction (its statements are not cached).
    pub(crate) fn transaction(&mut self) -> Result<Transaction<'_>, postgres::Error> {
        self.client.transaction()
    }
}
