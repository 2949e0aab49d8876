//! A long-lived stream's lease on its caller's credential: the response body of a stream ([`Lease`]) holds the
//! caller's [`StreamPermit`] while it lives and ends when the credential expires (a JWT's `exp`), so a stream
//! opened with a credential never outlives it.
//!
//! The end is `exp` itself by the server's clock. The credential check's leeway (which forgives an issuer's clock
//! being a little ahead) decides only whether a request is let in; a stream opened within that leeway, after `exp`,
//! ends at once.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::SystemTime;

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::auth::Caller;
use super::stream_cap::StreamPermit;

/// When `caller`'s credential expires, on tokio's clock; `None` for one that never does (a static token).
pub fn expiry_of(caller: &Caller) -> Option<Instant> {
    let expires_at = caller.expires_at?;
    let left = expires_at.duration_since(SystemTime::now()).unwrap_or_default();
    Some(Instant::now() + left)
}

/// Completes at `at` (at once when it has passed); never without one.
pub async fn expired(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A stream's response body: counted in its caller's streams while it lives, ended at the credential's expiry.
pub struct Lease {
    /// `None` once the lease ended: the stream is dropped at once, and with it whatever it holds (a session).
    inner: Option<Body>,
    _permit: StreamPermit,
    end: Option<Pin<Box<Sleep>>>,
}

impl Lease {
    /// `body`, holding `permit`, ended at `end`.
    pub fn new(body: Body, permit: StreamPermit, end: Option<Instant>) -> Self {
        Self { inner: Some(body), _permit: permit, end: end.map(|at| Box::pin(tokio::time::sleep_until(at))) }
    }
}

impl http_body::Body for Lease {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.end.as_mut().is_some_and(|end| end.as_mut().poll(cx).is_ready()) && this.inner.is_some() {
            tracing::info!("stream ended: its credential expired");
            this.inner = None;
        }
        match this.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map_or_else(|| SizeHint::with_exact(0), http_body::Body::size_hint)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use http_body_util::BodyExt;

    use super::*;
    use crate::kit::StreamCap;

    /// A body that sends one frame, then nothing, forever.
    fn endless() -> Body {
        let first = futures::stream::once(async { Ok::<_, std::convert::Infallible>(Bytes::from_static(b"open\n")) });
        Body::from_stream(first.chain(futures::stream::pending()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_ends_at_its_expiry_and_frees_its_place() {
        let cap = StreamCap::new(1);
        let start = Instant::now();
        let lease = Lease::new(endless(), cap.open("alice").unwrap(), Some(start + Duration::from_secs(30)));
        let read = lease.collect().await.unwrap().to_bytes();
        assert_eq!(
            (read, start.elapsed(), cap.held_by("alice")),
            (Bytes::from_static(b"open\n"), Duration::from_secs(30), 0)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_without_expiry_lives_on() {
        let cap = StreamCap::new(1);
        let mut lease = Lease::new(endless(), cap.open("alice").unwrap(), None);
        assert_eq!(lease.frame().await.unwrap().unwrap().into_data().unwrap(), Bytes::from_static(b"open\n"));
        let later = tokio::time::timeout(Duration::from_secs(86_400), lease.frame()).await;
        assert!(later.is_err(), "the stream ended: {later:?}");
        assert_eq!(cap.held_by("alice"), 1);
    }

    #[test]
    fn an_expiry_in_the_past_is_now() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let caller = Caller {
                name: "alice".into(),
                admin: false,
                expires_at: Some(SystemTime::now() - Duration::from_secs(10)),
                scopes: None,
            };
            let at = expiry_of(&caller).unwrap();
            assert!(at <= Instant::now());
            let never = Caller { expires_at: None, ..caller };
            assert_eq!(expiry_of(&never), None);
        });
    }
}
