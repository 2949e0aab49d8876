//! Bearer authentication: `Authorization: Bearer <credential>`, checked by [`Credentials`] (a static token or
//! JWTs), with a limit on wrong credentials per client address (governor's keyed GCRA limiter).
//!
//! Invariants, each tested by attack in `crates/server/tests/integration/auth_limits.rs`:
//! - The credential is checked first: a valid one is never refused, whatever the limiter says, so nobody sharing
//!   an address with a client (a NAT, a proxy) can lock that client out.
//! - Only a wrong bearer credential counts as a failure. A request without one (OAuth discovery, a header-less
//!   `GET /mcp`, health probes) or with another scheme gets 401 and is not counted: it guesses nothing.
//! - Past `failures_per_minute` wrong credentials from one address (burst, refilled evenly over the minute), a
//!   wrong credential gets 429 with `Retry-After` instead of 401.
//! - The address is the TCP peer, or the client a trusted proxy names ([`ClientAddress`]). At most
//!   [`MAX_TRACKED`] addresses are remembered; past that, new addresses share one allowance, which only ever
//!   refuses wrong credentials.
//!
//! How a refusal is answered, and what an accepted request carries, is the gate's ([`super::gate`]).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::header;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::client_addr::{ClientAddress, ClientIpHeader, TrustedProxy};
use super::credentials::Credentials;

/// Who made an authenticated request: its tenant (`api-token`, a named token's name, a JWT's subject), which owns
/// the conversations it makes and which the run history records; whether it is an administrator (sees every
/// tenant's); and when its credential expires (a stream opened with it ends then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub admin: bool,
    pub expires_at: Option<std::time::SystemTime>,
    /// An OAuth access token's scopes; `None`: a credential without scopes, which may do all its tenant may.
    pub scopes: Option<Arc<[String]>>,
}

impl Caller {
    /// The process's own operator (`sandlot stdio`): whoever started it can read the data root anyway, so it sees
    /// every tenant's conversations, as an administrator.
    pub fn local(name: &str) -> Self {
        Self { name: name.to_owned(), admin: true, expires_at: None, scopes: None }
    }

    /// No credential was checked: a tenant of its own, `anonymous`, that owns only what it makes.
    pub fn anonymous() -> Self {
        Self { name: "anonymous".to_owned(), admin: false, expires_at: None, scopes: None }
    }

    /// The caller a request was authenticated as (its extensions), [`Caller::anonymous`] when none was checked.
    pub fn of(extensions: &axum::http::Extensions) -> Self {
        extensions.get::<Caller>().cloned().unwrap_or_else(Caller::anonymous)
    }

    /// Whether the caller's credential grants `scope` (one without scopes grants everything).
    pub fn allows(&self, scope: crate::kit::oauth::scopes::Scope) -> bool {
        self.scopes.as_ref().is_none_or(|granted| scope.granted_by(granted.iter().map(String::as_str)))
    }

    /// The tenant the engine checks conversations and runs against.
    pub fn tenant(&self) -> sandlot_core::Tenant {
        if self.admin { sandlot_core::Tenant::admin(&self.name) } else { sandlot_core::Tenant::new(&self.name) }
    }
}

/// Addresses remembered at most (about 5 MB); past it, new addresses share [`OVERFLOW`]'s allowance.
pub const MAX_TRACKED: usize = 65_536;
/// The shared key of addresses beyond [`MAX_TRACKED`].
const OVERFLOW: IpAddr = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
/// Forgotten addresses are swept at most this often (a sweep walks the whole map).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How wrong credentials are limited, and how the client's address is found.
#[derive(Debug, Clone)]
pub struct AuthLimits {
    /// Wrong credentials one address may send per minute (as a burst, refilled evenly); 0 turns the limit off.
    pub failures_per_minute: u32,
    /// Peers whose forwarded-for header names the client (reverse proxies); empty: every peer is the client.
    pub trusted_proxies: Vec<TrustedProxy>,
    /// The header those proxies set.
    pub client_ip_header: ClientIpHeader,
}

impl Default for AuthLimits {
    /// 10 wrong credentials per minute per address, no trusted proxy.
    fn default() -> Self {
        Self { failures_per_minute: 10, trusted_proxies: Vec::new(), client_ip_header: ClientIpHeader::default() }
    }
}

/// The wrong credentials seen per client address.
struct FailureLimiter {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
    clock: DefaultClock,
    last_sweep: Mutex<Instant>,
}

impl FailureLimiter {
    /// A limiter allowing `per_minute` failures per address; `None` for 0 (no limit).
    fn per_minute(per_minute: u32) -> Option<Arc<Self>> {
        NonZeroU32::new(per_minute).map(|per_minute| {
            let clock = DefaultClock::default();
            let limiter = RateLimiter::dashmap_with_clock(Quota::per_minute(per_minute), clock.clone());
            Arc::new(FailureLimiter { limiter, clock, last_sweep: Mutex::new(Instant::now()) })
        })
    }

    /// Counts one failure of `client`: `Err(retry after)` when it is past its allowance (the failure is then not
    /// counted again: the allowance refills at its steady pace whatever the client sends).
    fn count(&self, client: IpAddr) -> Result<(), Duration> {
        let mut key = client;
        if self.limiter.len() >= MAX_TRACKED {
            let now = Instant::now();
            let mut last = self.last_sweep.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if now.duration_since(*last) >= SWEEP_EVERY {
                *last = now;
                self.limiter.retain_recent();
                self.limiter.shrink_to_fit();
            }
            if self.limiter.len() >= MAX_TRACKED {
                key = OVERFLOW;
            }
        }
        self.limiter.check_key(&key).map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }
}

/// What every protected request must present, and the failures seen per client address.
#[derive(Clone)]
pub struct Authenticator {
    credentials: Arc<Credentials>,
    limiter: Option<Arc<FailureLimiter>>,
    clients: Arc<ClientAddress>,
    /// The message of every 401, when a profile fixes it (Baponi's); else each says what was wrong.
    fixed_message: Option<&'static str>,
    /// Tenants whose credentials see every tenant's conversations and runs (`SANDLOT_ADMINS`).
    admins: Arc<std::collections::HashSet<String>>,
}

/// How a drop-in profile's clients are told their credential failed, and how many failures it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureRendering {
    /// The `message` of every 401 body (`{"error":"unauthorized","message":...}`).
    pub message: &'static str,
    /// Wrong credentials one address may send per minute before 429.
    pub failures_per_minute: u32,
}

impl Authenticator {
    /// Requests must present this static token (default limits). Its tenant, the only one, is an administrator:
    /// one token is one user, who sees everything.
    pub fn token(token: impl Into<String>) -> Self {
        Self::new(Credentials::token(token)).with_admins([super::DEFAULT_TOKEN_TENANT.to_owned()])
    }

    /// Requests must present a credential these accept (default limits).
    pub fn new(credentials: Credentials) -> Self {
        Self {
            credentials: Arc::new(credentials),
            limiter: None,
            clients: Arc::default(),
            fixed_message: None,
            admins: Arc::default(),
        }
        .with_limits(AuthLimits::default())
    }

    /// The authorization server whose access tokens are accepted, if any.
    pub fn oauth(&self) -> Option<&Arc<crate::kit::ResourceServer>> {
        self.credentials.oauth()
    }

    /// Before [`Authenticator::authenticate`], which does not wait: makes sure the key an access token names is
    /// known (fetching the authorization server's keys when it rotated them).
    pub async fn prepare(&self, headers: &axum::http::HeaderMap) {
        let Some(oauth) = self.oauth() else { return };
        let token = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
        if let Some(token) = token {
            oauth.prepare(token).await;
        }
    }

    /// The same check, with these tenants as administrators.
    pub fn with_admins(self, admins: impl IntoIterator<Item = String>) -> Self {
        Self { admins: Arc::new(admins.into_iter().collect()), ..self }
    }

    /// The same check with these limits (and a fresh count of failures).
    pub fn with_limits(self, limits: AuthLimits) -> Self {
        let limiter = FailureLimiter::per_minute(limits.failures_per_minute);
        let clients = Arc::new(ClientAddress::new(limits.trusted_proxies, limits.client_ip_header));
        Self { limiter, clients, ..self }
    }

    /// The same credentials and client addresses for a profile's routes, with its own failure message and its own
    /// count of failures (so a profile's stricter limit does not spend sandlot's allowance, nor the reverse).
    pub fn for_profile(&self, rendering: FailureRendering) -> Self {
        let limiter = FailureLimiter::per_minute(rendering.failures_per_minute);
        Self { limiter, fixed_message: Some(rendering.message), ..self.clone() }
    }
}

/// Why [`Authenticator::authenticate`] refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credential, another scheme, or a wrong credential: what was wrong.
    Unauthorized(String),
    /// Too many wrong credentials from the client's address: retry after this many seconds.
    TooMany(u64),
}

impl Authenticator {
    /// Checks the bearer credential of a request (its headers, and its extensions for the peer address), counting
    /// wrong ones per client address: the caller, or why it was refused. Refusals are logged and counted in the
    /// metrics; how they are answered is the face's. Only the kit calls it: every surface goes through the gate, which
    /// calls it from the headers before any body is read.
    pub(super) fn authenticate(
        &self,
        headers: &axum::http::HeaderMap,
        extensions: &axum::http::Extensions,
    ) -> Result<Caller, Refusal> {
        let refuse = |message: &str| Refusal::Unauthorized(self.fixed_message.unwrap_or(message).to_owned());
        let presented = match headers.get(header::AUTHORIZATION) {
            None => {
                crate::kit::telemetry::auth_failed("missing");
                return Err(refuse("missing Authorization header (expected: Bearer <token>)"));
            }
            Some(value) => value.to_str().ok().and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned())
            }),
        };
        let Some(presented) = presented else {
            crate::kit::telemetry::auth_failed("malformed");
            return Err(refuse("Authorization must be: Bearer <token>"));
        };
        let failure = match self.credentials.verify(&presented) {
            Ok(verified) => {
                let scopes: Option<Arc<[String]>> = verified.scopes.map(Into::into);
                let admin_scope = scopes.as_ref().is_some_and(|granted| {
                    crate::kit::oauth::scopes::Scope::Admin.granted_by(granted.iter().map(String::as_str))
                });
                let admin = admin_scope || self.admins.contains(&verified.tenant);
                return Ok(Caller { name: verified.tenant, admin, expires_at: verified.expires_at, scopes });
            }
            Err(why) => why,
        };
        let peer = extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip());
        let client = peer.map(|peer| self.clients.key(peer, headers));
        if let (Some(limiter), Some(client)) = (&self.limiter, client)
            && let Err(wait) = limiter.count(client)
        {
            // Rounded up: a client that waits as told is let through.
            let retry_after = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
            crate::kit::telemetry::auth_failed("rate_limited");
            tracing::info!(client = client.to_string(), retry_after, "wrong credential refused: over the limit");
            return Err(Refusal::TooMany(retry_after));
        }
        crate::kit::telemetry::auth_failed("rejected");
        tracing::info!(client = client.map(|c| c.to_string()), reason = failure, "authentication failed");
        Err(refuse(&failure))
    }
}
