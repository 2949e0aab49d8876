//! Bearer authentication: `Authorization: Bearer <credential>`, checked by [`Credentials`] (a static token or
//! JWTs). A missing or wrong credential gets 401 with `{"error":"unauthorized","message":...}`; after 3 failures
//! from one IP within 60 s, every request from that IP gets 429 with `Retry-After` for the rest of the window.
//! An accepted request carries its [`Caller`] in its extensions.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::credentials::Credentials;

/// Who made an authenticated request (`api-token`, or the JWT's subject); the run history records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub String);

/// Failures allowed per IP and window before it is refused.
const MAX_FAILURES: u32 = 3;
/// The window in which failures are counted.
const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most; beyond, the oldest entry is forgotten (so a flood of addresses cannot grow memory).
const MAX_TRACKED: usize = 10_000;

/// What every protected request must present, and the failures seen per client IP.
#[derive(Clone)]
pub struct Authenticator {
    credentials: Arc<Credentials>,
    failures: Arc<Mutex<HashMap<IpAddr, (Instant, u32)>>>,
}

impl Authenticator {
    /// Requests must present this static token.
    pub fn token(token: impl Into<String>) -> Self {
        Self::new(Credentials::Token(token.into()))
    }

    /// Requests must present a credential these accept.
    pub fn new(credentials: Credentials) -> Self {
        Self { credentials: Arc::new(credentials), failures: Arc::default() }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, (Instant, u32)>> {
        self.failures.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Seconds left in the window of an IP that already failed too often.
    fn blocked_for(&self, ip: IpAddr) -> Option<u64> {
        let mut failures = self.failures();
        let (start, count) = *failures.get(&ip)?;
        let elapsed = start.elapsed();
        if elapsed >= WINDOW {
            failures.remove(&ip);
            return None;
        }
        (count >= MAX_FAILURES).then(|| (WINDOW - elapsed).as_secs().max(1))
    }

    fn record_failure(&self, ip: IpAddr) {
        let mut failures = self.failures();
        failures.retain(|_, (start, _)| start.elapsed() < WINDOW);
        if failures.len() >= MAX_TRACKED
            && !failures.contains_key(&ip)
            && let Some(oldest) = failures.iter().min_by_key(|(_, (start, _))| *start).map(|(ip, _)| *ip)
        {
            failures.remove(&oldest);
        }
        let entry = failures.entry(ip).or_insert((Instant::now(), 0));
        entry.1 += 1;
    }
}

fn unauthorized(message: &str) -> Response {
    let body = serde_json::json!({ "error": "unauthorized", "message": message });
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn too_many(retry_after: u64) -> Response {
    let body = serde_json::json!({
        "error": "too_many_requests",
        "message": format!("too many failed authentications from this address; retry in {retry_after} s"),
    });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    response
}

/// Lets the request through only with the right bearer token.
pub async fn require_bearer(State(token): State<Authenticator>, mut request: Request, next: Next) -> Response {
    let ip = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip());
    if let Some(retry_after) = ip.and_then(|ip| token.blocked_for(ip)) {
        crate::telemetry::auth_failed("rate_limited");
        return too_many(retry_after);
    }
    let presented = request.headers().get(header::AUTHORIZATION).map(|value| {
        value.to_str().ok().and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned())
        })
    });
    let (reason, failure) = match presented {
        Some(Some(presented)) => match token.credentials.verify(&presented) {
            Ok(caller) => {
                request.extensions_mut().insert(Caller(caller));
                return next.run(request).await;
            }
            Err(why) => ("rejected", why),
        },
        None => ("missing", "missing Authorization header (expected: Bearer <token>)".to_owned()),
        Some(None) => ("malformed", "Authorization must be: Bearer <token>".to_owned()),
    };
    crate::telemetry::auth_failed(reason);
    if let Some(ip) = ip {
        token.record_failure(ip);
        tracing::info!(%ip, failure, "authentication failed");
    }
    unauthorized(&failure)
}
