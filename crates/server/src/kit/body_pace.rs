//! The pace every request body must keep ([`BodyLimits`]), enforced by a layer around the whole app
//! ([`pace_bodies`]): a body that arrives too slowly ends in an error ([`SlowBody`]) where its handler reads it, and
//! the response closes the connection.
//!
//! Without it, a client with a credential could hold a body's buffer, its connection and its handler for as long as
//! it dribbles bytes (a slow-body attack; without a credential the body is never read at all: the gate answers from
//! the headers). Two rules, measured from the handler's first read of the body (bytes a client already sent wait in
//! the socket and arrive at once, so a handler that reads late never makes an honest client slow):
//! - the whole body within [`BodyLimits::deadline`], plus a second for every [`BodyLimits::bytes_per_extra_second`]
//!   received, so a large upload on a slow link gets the time its size needs while a body that stops does not;
//! - after a grace period, every further period of the same length brings at least [`BodyLimits::min_rate`] bytes
//!   per second, so a body that stalls ends within two periods instead of at the deadline.
//!
//! A request whose body is a stream of messages over time (open-sandbox's NDJSON stream) is exempt: the gate marks
//! it ([`BodyPace::exempt`]) once its credential is valid; such streams are capped per caller instead.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// How fast a request body must arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// The whole body within this long of its first read (extended by its size, below).
    pub deadline: Duration,
    /// One more second of deadline for every this many bytes received.
    pub bytes_per_extra_second: u64,
    /// No rate is asked for in the first `grace`; after it, each following `grace` must bring `min_rate`.
    pub grace: Duration,
    /// The least bytes per second, averaged over each period of `grace` after the first.
    pub min_rate: u64,
}

impl Default for BodyLimits {
    /// 60 s for a body up to 1 MiB (every MCP and REST request: 18 KiB/s, a 150 kbit/s link, sends the largest in
    /// time), plus 1 s per 64 KiB (a 64 MiB upload gets 18 min: a 512 kbit/s link); after 10 s, at least 1 KiB/s
    /// over every 10 s (any link that is moving at all).
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(60),
            bytes_per_extra_second: 64 * 1024,
            grace: Duration::from_secs(10),
            min_rate: 1024,
        }
    }
}

/// Why a request body was cut: it broke [`BodyLimits`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("request body too slow: {0}")]
pub struct SlowBody(String);

/// Why reading a request body failed, to answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Over the reader's size limit.
    TooLarge,
    /// Too slow ([`SlowBody`]): what was too slow.
    TooSlow(String),
    /// The connection broke, or another error of the transport.
    Broken(String),
}

impl BodyError {
    /// What made `error` (from `axum::body::to_bytes` or a body's stream).
    pub fn of(error: &axum::Error) -> Self {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(current) = cause {
            if current.is::<http_body_util::LengthLimitError>() {
                return Self::TooLarge;
            }
            if let Some(slow) = current.downcast_ref::<SlowBody>() {
                return Self::TooSlow(slow.to_string());
            }
            cause = current.source();
        }
        Self::Broken(error.to_string())
    }

    /// The HTTP status of the failure: 413, 408, or 400.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooSlow(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// A request's handle on its body's pace, in its extensions.
#[derive(Clone, Debug, Default)]
pub struct BodyPace {
    exempt: Arc<AtomicBool>,
    cut: Arc<AtomicBool>,
}

impl BodyPace {
    /// The body is a stream of messages over time (authenticated, and capped as a stream): no limit applies.
    pub fn exempt(&self) {
        self.exempt.store(true, Ordering::Relaxed);
    }

    /// The pace of the request whose extensions these are, if the app paces bodies.
    pub fn of(extensions: &axum::http::Extensions) -> Option<&Self> {
        extensions.get::<Self>()
    }
}

/// The layer: every request's body under `limits`; a response to a request whose body was cut closes its
/// connection (the rest of the body is never read).
pub async fn pace_bodies(State(limits): State<BodyLimits>, request: Request, next: Next) -> Response {
    let pace = BodyPace::default();
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(pace.clone());
    let paced = Paced { inner: body, limits, pace: pace.clone(), clock: None };
    let mut response = next.run(Request::from_parts(parts, Body::new(paced))).await;
    if pace.cut.load(Ordering::Relaxed) {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Where a body's clock stands, from its first read.
struct Clock {
    started: Instant,
    received: u64,
    /// The start of the period being measured, and the bytes received in it.
    period_start: Instant,
    period_bytes: u64,
    /// Wakes the reader at the end of the period or at the deadline, whichever is first.
    alarm: Pin<Box<Sleep>>,
}

/// A body under [`BodyLimits`].
struct Paced {
    inner: Body,
    limits: BodyLimits,
    pace: BodyPace,
    clock: Option<Clock>,
}

impl Paced {
    fn deadline(&self, clock: &Clock) -> Instant {
        let extra = clock.received / self.limits.bytes_per_extra_second.max(1);
        clock.started + self.limits.deadline + Duration::from_secs(extra)
    }

    /// The rule `now` breaks, if any; otherwise the alarm is set for the next check.
    fn check(&mut self, now: Instant) -> Result<(), SlowBody> {
        let limits = self.limits;
        let Some(mut clock) = self.clock.take() else { return Ok(()) };
        let deadline = self.deadline(&clock);
        if now >= deadline {
            let waited = now.duration_since(clock.started).as_secs();
            return Err(SlowBody(format!(
                "{} bytes in {waited} s, not all of it within the time allowed",
                clock.received
            )));
        }
        let period_end = clock.period_start + limits.grace;
        if now >= period_end {
            let in_grace = clock.period_start == clock.started;
            let wanted = limits.min_rate.saturating_mul(limits.grace.as_secs().max(1));
            if !in_grace && clock.period_bytes < wanted {
                let (got, secs) = (clock.period_bytes, limits.grace.as_secs());
                return Err(SlowBody(format!("{got} bytes in the last {secs} s, at least {wanted} are needed")));
            }
            clock.period_start = now;
            clock.period_bytes = 0;
        }
        clock.alarm.as_mut().reset((clock.period_start + limits.grace).min(deadline));
        self.clock = Some(clock);
        Ok(())
    }

    fn cut(&mut self, why: SlowBody) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        tracing::info!(reason = %why, "request body cut");
        self.pace.cut.store(true, Ordering::Relaxed);
        self.clock = None;
        Poll::Ready(Some(Err(axum::Error::new(why))))
    }
}

impl http_body::Body for Paced {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.pace.cut.load(Ordering::Relaxed) {
            return Poll::Ready(None);
        }
        let exempt = this.pace.exempt.load(Ordering::Relaxed);
        if !exempt && this.clock.is_none() {
            let now = Instant::now();
            let alarm = Box::pin(tokio::time::sleep_until(now + this.limits.grace.min(this.limits.deadline)));
            this.clock = Some(Clock { started: now, received: 0, period_start: now, period_bytes: 0, alarm });
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if exempt {
                    return Poll::Ready(Some(Ok(frame)));
                }
                let length = frame.data_ref().map_or(0, |data| data.len() as u64);
                if let Some(clock) = this.clock.as_mut() {
                    clock.received = clock.received.saturating_add(length);
                    clock.period_bytes = clock.period_bytes.saturating_add(length);
                }
                match this.check(Instant::now()) {
                    Ok(()) => Poll::Ready(Some(Ok(frame))),
                    Err(why) => this.cut(why),
                }
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error))),
            Poll::Ready(None) => {
                this.clock = None;
                Poll::Ready(None)
            }
            Poll::Pending if exempt => Poll::Pending,
            Poll::Pending => loop {
                let Some(clock) = this.clock.as_mut() else { return Poll::Pending };
                if clock.alarm.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                if let Err(why) = this.check(Instant::now()) {
                    return this.cut(why);
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use http_body_util::BodyExt;

    use super::*;

    fn limits() -> BodyLimits {
        BodyLimits {
            deadline: Duration::from_secs(60),
            bytes_per_extra_second: 1000,
            grace: Duration::from_secs(10),
            min_rate: 100,
        }
    }

    /// A body fed by the test through the sender, under `limits`, and its pace.
    fn paced(limits: BodyLimits) -> (tokio::sync::mpsc::Sender<Bytes>, Paced, BodyPace) {
        let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(16);
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver).map(Ok::<_, std::convert::Infallible>);
        let pace = BodyPace::default();
        (sender, Paced { inner: Body::from_stream(stream), limits, pace: pace.clone(), clock: None }, pace)
    }

    /// How a test client sends its body: `chunk` bytes every `every` until `total`, then the end (`ends`) or
    /// silence.
    struct Client {
        chunk: usize,
        every: Duration,
        total: usize,
        ends: bool,
    }

    /// The reader's result (the bytes read, or the error) and when it came (time is paused: exact).
    async fn read(client: Client) -> (Result<usize, String>, Duration) {
        let (sender, body, _pace) = paced(limits());
        let start = Instant::now();
        tokio::spawn(async move {
            let mut sent = 0;
            while sent < client.total {
                if sender.send(Bytes::from(vec![b'x'; client.chunk])).await.is_err() {
                    return;
                }
                sent += client.chunk;
                tokio::time::sleep(client.every).await;
            }
            if !client.ends {
                std::future::pending::<()>().await;
            }
        });
        let result = body.collect().await.map(|c| c.to_bytes().len()).map_err(|e| e.to_string());
        (result, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_is_cut_at_the_end_of_the_first_period_after_the_grace() {
        let client = Client { chunk: 5000, every: Duration::from_secs(1), total: 5000, ends: false };
        let message = "request body too slow: 0 bytes in the last 10 s, at least 1000 are needed";
        assert_eq!(read(client).await, (Err(message.into()), Duration::from_secs(20)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_above_the_minimum_rate_is_cut_at_its_deadline_extended_by_its_size() {
        // 1200 bytes every 5 s (2.4 times the minimum rate): the 19,200 bytes received by 75 s earn 19 s more than
        // 60 (no chunk arrives at the deadline itself, so the order of two events at one instant never matters).
        let client = Client { chunk: 1200, every: Duration::from_secs(5), total: usize::MAX, ends: false };
        let message = "request body too slow: 19200 bytes in 79 s, not all of it within the time allowed";
        assert_eq!(read(client).await, (Err(message.into()), Duration::from_secs(79)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_the_pace_is_read_whole() {
        let client = Client { chunk: 2000, every: Duration::from_secs(1), total: 40_000, ends: true };
        assert_eq!(read(client).await.0, Ok(40_000));
    }

    #[tokio::test(start_paused = true)]
    async fn an_exempt_body_may_idle_as_long_as_it_likes() {
        let (sender, body, pace) = paced(limits());
        pace.exempt();
        let reader = tokio::spawn(body.collect());
        tokio::time::sleep(Duration::from_secs(3600)).await;
        sender.send(Bytes::from_static(b"late")).await.unwrap();
        drop(sender);
        assert_eq!(reader.await.unwrap().unwrap().to_bytes(), Bytes::from_static(b"late"));
    }

    #[tokio::test]
    async fn read_errors_are_told_apart() {
        let (sender, body, _pace) = paced(BodyLimits { grace: Duration::ZERO, deadline: Duration::ZERO, ..limits() });
        let slow = axum::body::to_bytes(Body::new(body), 10).await.unwrap_err();
        drop(sender);
        let large = axum::body::to_bytes(Body::from("too long"), 1).await.unwrap_err();
        let broken = axum::Error::new("connection reset");
        let message = "request body too slow: 0 bytes in 0 s, not all of it within the time allowed";
        assert_eq!(
            [BodyError::of(&slow), BodyError::of(&large), BodyError::of(&broken)],
            [BodyError::TooSlow(message.into()), BodyError::TooLarge, BodyError::Broken("connection reset".into())]
        );
    }
}
