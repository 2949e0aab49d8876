//! The front door of every route that needs a credential: [`require_bearer`], a route layer over a [`Gate`].
//!
//! Invariants (the attacks are in `crates/server/tests/integration/auth_first.rs` and `crates/cli/tests/integration/serve.rs`):
//! - The credential is checked from the request's headers before anything reads its body. A refusal is rendered
//!   from the head alone, in the surface's shape ([`RenderDenial`]: the kit's 401/429 by default, open-sandbox's
//!   HTTP 200 with a -32001 error), with `Connection: close`: the body is never read, and its connection ends.
//! - Only an authenticated request is in flight on its connection ([`InFlightSlot::admit`]); a refused one leaves
//!   its connection idle, the first to be evicted at the connection cap.
//! - A request that opens a long-lived stream ([`Opens`], read from its head by the surface's [`Classify`]) takes
//!   one of its caller's places ([`StreamCap`]) before its handler runs, or is refused (429 naming the cap); its
//!   response is a [`Lease`], counted while it lives and ended when the credential expires. A stream whose body is
//!   itself a stream of requests is exempt from the body pace ([`BodyPace::exempt`]).
//!
//! - With an authorization server ([`crate::kit::oauth`]), a refusal for the credential carries its
//!   `WWW-Authenticate` challenge, and an access token without the scope the route needs ([`scopes::for_route`]) gets
//!   403 `insufficient_scope` before the handler runs; an MCP endpoint that checks each message's scope itself
//!   ([`Gate::checking_messages`]) is left to do so.
//!
//! The accepted request carries its [`Caller`] in its extensions (and the authorization server's check, when there
//! is one).

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sandlot_core::Escaped;

use super::auth::{Authenticator, Caller, FailureRendering, Refusal};
use super::body_pace::BodyPace;
use super::connections::InFlightSlot;
use super::oauth::scopes;
use super::stream_cap::StreamCap;
use super::stream_lease::{Lease, expiry_of};

/// What a request opens, known from its head before its handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opens {
    /// One request, one answer (however long the answer takes).
    Exchange,
    /// A long-lived response (an SSE or NDJSON stream): capped per caller, ended at the credential's expiry.
    Stream,
    /// A long-lived response whose request body is a stream of requests over time (NDJSON in and out): a
    /// [`Opens::Stream`] whose body may idle, exempt from the body pace.
    DuplexStream,
}

impl Opens {
    /// Every `GET` opens a stream (an SSE endpoint); any other method is an exchange.
    pub fn stream_on_get(request: &Request) -> Opens {
        if request.method() == Method::GET { Opens::Stream } else { Opens::Exchange }
    }

    /// Every request opens a stream.
    pub fn stream(_request: &Request) -> Opens {
        Opens::Stream
    }
}

/// Why the gate turned a request away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// No credential, a wrong one, or too many wrong ones from the client's address.
    Credential(Refusal),
    /// The caller holds as many streams as it may.
    TooManyStreams { max: usize },
}

/// How a surface answers a denial: from the request's head alone (its body is never read).
pub type RenderDenial = fn(&Denial, &Request) -> Response;

/// What a surface's request opens.
pub type Classify = fn(&Request) -> Opens;

/// The credential check, the streams per caller, and a surface's way of refusing and of telling streams.
#[derive(Clone)]
pub struct Gate {
    auth: Authenticator,
    streams: StreamCap,
    classify: Classify,
    render: RenderDenial,
    /// The surface's MCP endpoint checks each JSON-RPC message's scope (sandlot's); else a POST there needs
    /// `sandlot:run`.
    messages_checked: bool,
}

impl Gate {
    /// Checks credentials with `auth` and caps streams with `streams` (shared by every surface: the cap is per
    /// caller, whichever surface its streams are on); every request an exchange, refusals in the kit's shape.
    pub fn new(auth: Authenticator, streams: StreamCap) -> Self {
        Self { auth, streams, classify: |_| Opens::Exchange, render: render_denial, messages_checked: false }
    }

    /// The same gate with a profile's failure message and its own count of wrong credentials
    /// ([`Authenticator::for_profile`]).
    pub fn for_profile(&self, rendering: FailureRendering) -> Self {
        Self { auth: self.auth.for_profile(rendering), ..self.clone() }
    }

    /// The same gate, refusing in a surface's own shape.
    pub fn rendering(&self, render: RenderDenial) -> Self {
        Self { render, ..self.clone() }
    }

    /// The same gate, leaving the scope of each JSON-RPC message to the surface's MCP endpoint
    /// ([`crate::kit::oauth::refuse_message`]).
    pub fn checking_messages(&self) -> Self {
        Self { messages_checked: true, ..self.clone() }
    }

    /// The same gate, telling streams with `classify`.
    pub fn opening(&self, classify: Classify) -> Self {
        Self { classify, ..self.clone() }
    }
}

/// The kit's refusals: 401 `unauthorized` with `WWW-Authenticate: Bearer`, 429 `too_many_requests` with
/// `Retry-After` for wrong credentials past the limit, 429 `too_many_streams` naming the cap.
pub fn render_denial(denial: &Denial, _request: &Request) -> Response {
    let (status, kind, message) = match denial {
        Denial::Credential(Refusal::Unauthorized(message)) => {
            (StatusCode::UNAUTHORIZED, "unauthorized", message.clone())
        }
        Denial::Credential(Refusal::TooMany(retry_after)) => (
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            format!("too many wrong credentials from this address; retry in {retry_after} s"),
        ),
        Denial::TooManyStreams { max } => (
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_streams",
            format!("this credential has {max} streams open, the most it may; close one first"),
        ),
    };
    let mut response = (status, axum::Json(serde_json::json!({ "error": kind, "message": message }))).into_response();
    let headers = response.headers_mut();
    match denial {
        Denial::Credential(Refusal::Unauthorized(_)) => {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        Denial::Credential(Refusal::TooMany(retry_after)) => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
        }
        Denial::TooManyStreams { .. } => {}
    }
    response
}

/// Lets the request through only with a valid bearer credential (wrong ones counted per client address), and a
/// stream only within its caller's cap; see the module's invariants.
pub async fn require_bearer(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    gate.auth.prepare(request.headers()).await;
    let caller: Caller = match gate.auth.authenticate(request.headers(), request.extensions()) {
        Ok(caller) => caller,
        Err(refusal) => {
            let unauthorized = matches!(refusal, Refusal::Unauthorized(_));
            let mut response = (gate.render)(&Denial::Credential(refusal), &request);
            if let (true, Some(oauth)) = (unauthorized, gate.auth.oauth())
                && let Ok(challenge) = HeaderValue::from_str(&oauth.challenge(None))
            {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
            }
            return closing(response);
        }
    };
    if let Some(oauth) = gate.auth.oauth() {
        let checked_later =
            gate.messages_checked && scopes::for_route(request.method(), request.uri().path()).is_none();
        let needed = scopes::for_route(request.method(), request.uri().path())
            .or((!checked_later && request.method() == Method::POST).then_some(scopes::Scope::Run));
        if let Some(scope) = needed.filter(|scope| !caller.allows(*scope)) {
            return closing(crate::kit::oauth::insufficient(oauth, scope, None));
        }
        request.extensions_mut().insert(oauth.clone());
    }
    InFlightSlot::of(request.extensions()).admit();
    let opens = (gate.classify)(&request);
    let permit = match opens {
        Opens::Exchange => None,
        Opens::Stream | Opens::DuplexStream => match gate.streams.open(&caller.name) {
            Some(permit) => Some(permit),
            None => {
                let max = gate.streams.max_per_caller();
                tracing::info!(caller = %Escaped(&caller.name), max, "stream refused: the caller holds the most it may");
                return closing((gate.render)(&Denial::TooManyStreams { max }, &request));
            }
        },
    };
    if let (Opens::DuplexStream, Some(pace)) = (opens, BodyPace::of(request.extensions())) {
        pace.exempt();
    }
    let end = expiry_of(&caller);
    request.extensions_mut().insert(caller);
    let response = next.run(request).await;
    match permit {
        Some(permit) => response.map(|body| axum::body::Body::new(Lease::new(body, permit, end))),
        None => response,
    }
}

/// A refusal that closes its connection: the request's body, unread, is not worth keeping the connection for.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}
