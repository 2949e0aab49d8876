//! The history's connection to PostgreSQL, owned by its thread: made when first needed, dropped when found lost
//! (the server restarted, the backend was terminated, the network cut), made again by the next query, at most once
//! per backoff (from [`FIRST_BACKOFF`], doubled up to [`MAX_BACKOFF`]) so that a database that is down costs each
//! call an immediate error, not a connection timeout. Connections get short timeouts unless the URL sets its own.
//!
//! TLS (over TCP; a unix socket never uses it) follows the URL's `sslmode`: `prefer` (the default) uses it when the
//! server offers it, `require` insists, `disable` never. The server's certificate is always verified, against the
//! system's authorities (`SSL_CERT_FILE` or `SSL_CERT_DIR` name others), and must name the host: a database reached
//! over TLS is the one the URL names, or the connection fails saying why.

use std::time::{Duration, Instant};

use postgres::Config;
use postgres::error::SqlState;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::session::Session;

use crate::{Error, Result};

/// The wait before the first attempt to connect again after a failed one.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a connection may take, unless the URL says (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long sent data may go unacknowledged before a TCP connection counts as lost, unless the URL says.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS with the system's authorities (and those `SSL_CERT_FILE`/`SSL_CERT_DIR` name); none found leaves TLS
/// connections failing on the certificate, which the error says.
fn tls_config() -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::debug!(%error, "a system certificate authority could not be loaded");
    }
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    tracing::debug!(added, "certificate authorities for the history database's TLS");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::History { message: format!("cannot set up TLS for the history database: {e}") })?;
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// The connection, or what is known of the last attempt to make one.
pub(super) struct Link {
    config: Config,
    tls: MakeRustlsConnect,
    location: String,
    client: Option<Session>,
    /// No attempt to connect before this (after a failed one).
    next_attempt: Option<Instant>,
    backoff: Duration,
    /// Whether a connection was lost and not yet found again (for the log).
    lost: bool,
}

/// `config` with sandlot's defaults where the URL sets nothing: short timeouts, the application's name.
pub(super) fn with_defaults(mut config: Config) -> Config {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("sandlot");
    }
    config
}

/// What makes the history's TLS connections (see the module's documentation).
pub(super) fn tls() -> Result<MakeRustlsConnect> {
    Ok(MakeRustlsConnect::new(tls_config()?))
}

impl Link {
    pub(super) fn new(config: Config, location: String) -> Result<Self> {
        let (config, tls) = (with_defaults(config), tls()?);
        Ok(Self { config, tls, location, client: None, next_attempt: None, backoff: FIRST_BACKOFF, lost: false })
    }

    /// Runs `query` (see `Postgres::call`).
    pub(super) fn run<T>(
        &mut self,
        action: &str,
        query: &mut dyn FnMut(&mut Session) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let fresh = self.client.is_none();
        let client = self.client()?;
        let error = match query(client) {
            Ok(value) => return Ok(value),
            Err(error) if !lost(&error, client) => {
                client.forget_statements();
                return Err(self.failed(action, &error));
            }
            Err(error) => error,
        };
        self.lose(&error);
        if fresh {
            return Err(self.unreachable(&error));
        }
        // The connection was found lost by this query: one more try on a new one (the query did not reach the
        // database, or its answer was lost; each query the history makes can be made twice).
        let client = self.client()?;
        match query(client) {
            Ok(value) => Ok(value),
            Err(error) if !lost(&error, client) => {
                client.forget_statements();
                Err(self.failed(action, &error))
            }
            Err(error) => {
                self.lose(&error);
                Err(self.unreachable(&error))
            }
        }
    }

    /// The connection, made now if there is none and the backoff allows.
    fn client(&mut self) -> Result<&mut Session> {
        if self.client.is_none() {
            if let Some(at) = self.next_attempt
                && let Some(wait) = at.checked_duration_since(Instant::now())
            {
                return Err(Error::History {
                    message: format!(
                        "the history database is unreachable ({}): next attempt to connect in {} ms",
                        self.location,
                        wait.as_millis()
                    ),
                });
            }
            match self.config.connect(self.tls.clone()) {
                Ok(client) => {
                    if self.lost {
                        tracing::info!(database = %self.location, "connected to the history database again");
                    }
                    (self.next_attempt, self.backoff, self.lost) = (None, FIRST_BACKOFF, false);
                    self.client = Some(Session::new(client));
                }
                Err(error) => {
                    self.next_attempt = Some(Instant::now() + self.backoff);
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    self.lost = true;
                    return Err(self.unreachable(&error));
                }
            }
        }
        self.client.as_mut().ok_or_else(|| Error::History { message: "no connection".into() })
    }

    /// Drops a connection found lost; the next query makes a new one at once.
    fn lose(&mut self, error: &postgres::Error) {
        if !self.lost {
            tracing::warn!(database = %self.location, %error, "lost the connection to the history database");
        }
        (self.client, self.next_attempt, self.lost) = (None, None, true);
    }

    fn unreachable(&self, error: &postgres::Error) -> Error {
        let error = full(error);
        Error::History { message: format!("the history database is unreachable ({}): {error}", self.location) }
    }

    fn failed(&self, action: &str, error: &postgres::Error) -> Error {
        let error = full(error);
        Error::History { message: format!("cannot {action} the history database ({}): {error}", self.location) }
    }
}

/// Whether `error` means the connection is gone (rather than the query failed on a working one).
fn lost(error: &postgres::Error, session: &Session) -> bool {
    let shut_down = [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW];
    error.is_closed()
        || session.is_closed()
        || error.code().is_some_and(|code| shut_down.contains(code))
        || std::error::Error::source(error).is_some_and(|source| source.is::<std::io::Error>())
}

/// `error` and its causes, those its own text does not say already (a connection's error does not say why).
fn full(error: &postgres::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(error) = cause {
        let said = error.to_string();
        if !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        cause = error.source();
    }
    text
}

/// The database `config` names, for messages and logs: hosts, ports and name, never the password.
pub(super) fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let database = config.get_dbname().or(config.get_user()).unwrap_or("postgres");
    match ports.is_empty() {
        true => format!("postgresql database {database} on {}", hosts.join(",")),
        false => format!("postgresql database {database} on {} port {}", hosts.join(","), ports.join(",")),
    }
}
