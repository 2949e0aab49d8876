//! The accept loop of `sandlot serve`: HTTP/1.1 connections (hyper, with upgrades) served by the app, under a
//! connection tracker that keeps idle connections from taking every descriptor.
//!
//! Every connection knows whether a request is in flight on it: from the moment the request proved who sent it (a
//! valid credential, checked from its headers by the kit's gate, or a valid signature on a signed route: each marks
//! its request through the [`InFlightSlot`] in its extensions) until its response body has been sent (or dropped),
//! so a long run or an event stream counts as in flight. A request that never proves anything (no or a wrong
//! credential, a public route) leaves its connection idle in the tracker's eyes: anyone can send one without a
//! credential, so it must never make a connection safe from eviction. A connection with no request in flight (one
//! that never sent a request, sits idle between requests, sends only unauthenticated ones, or is still dribbling its
//! headers) is closed after [`ConnectionLimits::idle_timeout`] since it was last busy (or opened). When the server
//! holds [`ConnectionLimits::max_connections`], the oldest idle connection is closed to make room for the new one
//! (as nginx drains reusable connections), so idle sockets can never keep a client with a real request out. Only
//! when every connection has a request in flight is a new one refused (closed at once). Connections with requests
//! in flight are never closed by the tracker: they need a credential (or a signed URL) and end with their request.
//! The cap counts descriptors, not intentions: a connection is registered by the accept loop before its task runs
//! and released only after its socket is closed, so a connection being closed still counts, and a burst of new
//! connections waits in the kernel's queue until the ones evicted for it are gone.
//!
//! Closing an idle connection races with a request arriving on it, as with any keep-alive server: the close is
//! graceful (hyper finishes a request it has already read; an unauthenticated one gets a second), and a client may
//! retry on a new connection.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// How many connections the server keeps, and for how long an idle one.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// A connection with no request in flight is closed after this long; also the time a client has to send a
    /// request's headers.
    pub idle_timeout: Duration,
    /// Most connections open at once; at the cap, the oldest idle connection is closed to make room.
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// Descriptors kept out of the connections' share for everything else: runs (each holds pipes, a pidfd and
    /// cgroup files while it executes), warm inits, the history database, files being downloaded, logs.
    pub const RESERVED_DESCRIPTORS: u64 = 256;

    /// The most connections the default cap allows, whatever the descriptor limit: an idle connection costs
    /// about 11 KiB of memory (10,000 idle connections: 107 MiB more resident memory, release build), so 16,384
    /// of them about 175 MiB. The hard descriptor limit is often 512Ki.
    pub const DEFAULT_CEILING: usize = 16_384;

    /// The default cap for a process allowed `nofile` open descriptors running `concurrent_runs` at once: what is
    /// left after [`Self::RESERVED_DESCRIPTORS`] and 16 per run, at least 64 and at most [`Self::DEFAULT_CEILING`].
    pub fn default_max_connections(nofile: u64, concurrent_runs: usize) -> usize {
        let reserve = Self::RESERVED_DESCRIPTORS.saturating_add(16u64.saturating_mul(concurrent_runs as u64));
        let left = usize::try_from(nofile.saturating_sub(reserve)).unwrap_or(usize::MAX);
        left.clamp(64, Self::DEFAULT_CEILING)
    }
}

/// Raises the soft limit on open descriptors to the hard limit (systemd's default soft limit is 1024, its hard
/// limit 512Ki); returns the soft limit in force afterwards. Sandboxes are unaffected: each run sets its own.
pub fn raise_nofile_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
    if limit.current != limit.maximum && setrlimit(Resource::Nofile, raised).is_ok() {
        return limit.maximum.unwrap_or(u64::MAX);
    }
    limit.current.unwrap_or(u64::MAX)
}

/// What the tracker knows of one connection.
struct Connection {
    /// Requests read and not yet answered to their last byte.
    in_flight: usize,
    /// When the last request ended (or the connection opened); meaningful while `in_flight` is 0.
    idle_since: Instant,
    /// Cancelled to close the connection (idle timeout, eviction).
    close: CancellationToken,
}

impl Connection {
    fn closing(&self) -> bool {
        self.close.is_cancelled()
    }
}

/// Every open connection, by id.
#[derive(Default)]
struct Tracker {
    table: Mutex<Table>,
    /// Signalled each time a connection's socket has been closed and its registration released.
    released: tokio::sync::Notify,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    connections: HashMap<u64, Connection>,
}

impl Table {
    /// Starts closing `id` (once).
    fn close(&mut self, id: u64) {
        if let Some(connection) = self.connections.get(&id) {
            connection.close.cancel();
        }
    }
}

impl Tracker {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a new (idle) connection: its id and the token that closes it.
    fn open(&self) -> (u64, CancellationToken) {
        let mut table = self.table();
        let id = table.next_id;
        table.next_id += 1;
        let close = CancellationToken::new();
        table.connections.insert(id, Connection { in_flight: 0, idle_since: Instant::now(), close: close.clone() });
        (id, close)
    }

    fn remove(&self, id: u64) {
        self.table().connections.remove(&id);
        self.released.notify_one();
    }

    /// Connections open and not being closed.
    #[cfg(test)]
    fn open_count(&self) -> usize {
        self.table().connections.values().filter(|c| !c.closing()).count()
    }

    /// Sockets held: connections open or being closed, each a descriptor until its task has dropped it.
    fn held(&self) -> usize {
        self.table().connections.len()
    }

    /// Whether some connection is being closed with no request in flight: its socket is about to be released. (One
    /// closed while hyper had a request of it in hand may have admitted that request since, and last as long.)
    fn any_closing_idle(&self) -> bool {
        self.table().connections.values().any(|c| c.closing() && c.in_flight == 0)
    }

    /// Waits until the server holds fewer than `max` sockets, closing the oldest idle connections to get there:
    /// one at first, another each `patience` that none has been released (a client dribbling its headers is given
    /// a second to finish them). Returns at once, with the cap still reached, when every connection is busy.
    async fn make_room(&self, max: usize, patience: Duration) {
        while self.held() >= max {
            if !self.any_closing_idle() && !self.evict_oldest_idle() {
                return;
            }
            if tokio::time::timeout(patience, self.released.notified()).await.is_err() {
                self.evict_oldest_idle();
            }
        }
    }

    fn begin(self: &Arc<Self>, id: u64) -> InFlight {
        if let Some(connection) = self.table().connections.get_mut(&id) {
            connection.in_flight += 1;
        }
        InFlight { tracker: self.clone(), id }
    }

    fn busy(&self, id: u64) -> bool {
        self.table().connections.get(&id).is_some_and(|c| c.in_flight > 0)
    }

    /// Closes the connection idle for the longest time; false when every connection has a request in flight.
    fn evict_oldest_idle(&self) -> bool {
        let mut table = self.table();
        let oldest = table
            .connections
            .iter()
            .filter(|(_, c)| c.in_flight == 0 && !c.closing())
            .min_by_key(|(_, c)| c.idle_since)
            .map(|(id, _)| *id);
        oldest.inspect(|id| table.close(*id)).is_some()
    }

    /// Closes every connection idle since before `now - timeout`.
    fn sweep(&self, timeout: Duration) {
        let now = Instant::now();
        let mut table = self.table();
        let idle: Vec<u64> = table
            .connections
            .iter()
            .filter(|(_, c)| c.in_flight == 0 && !c.closing() && now.duration_since(c.idle_since) >= timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in idle {
            table.close(id);
        }
    }
}

/// A request in flight on a connection; dropping it (the response's last byte sent, or the request abandoned)
/// makes the connection idle again when it was the last.
struct InFlight {
    tracker: Arc<Tracker>,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(connection) = self.tracker.table().connections.get_mut(&self.id) {
            connection.in_flight = connection.in_flight.saturating_sub(1);
            if connection.in_flight == 0 {
                connection.idle_since = Instant::now();
            }
        }
    }
}

/// A request's place on its connection, in the request's extensions: [`InFlightSlot::admit`] counts the request as
/// in flight from then until its response's last byte has been sent (or the response is dropped). The gate admits a
/// request once its credential is valid, a signed route once its signature is; nothing else does. A request not
/// served through [`serve`] (a test's `oneshot`, another listener) has an empty slot, whose `admit` does nothing.
/// As an extractor it never fails.
#[derive(Clone, Default)]
pub struct InFlightSlot(Option<Slot>);

#[derive(Clone)]
struct Slot {
    tracker: Arc<Tracker>,
    id: u64,
    /// Owned by the connection's service until the response's body is done: a slot kept past that (a request's
    /// parts travel with an MCP message) can no longer make its connection busy.
    held: Weak<Mutex<Option<InFlight>>>,
}

impl InFlightSlot {
    /// The slot of the request whose extensions these are (an empty one when there is none).
    pub fn of(extensions: &axum::http::Extensions) -> Self {
        extensions.get::<InFlightSlot>().cloned().unwrap_or_default()
    }

    /// Counts the request as in flight on its connection (once, however often it is called).
    pub fn admit(&self) {
        let Some(slot) = &self.0 else { return };
        let Some(held) = slot.held.upgrade() else { return };
        let mut held = held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if held.is_none() {
            *held = Some(slot.tracker.begin(slot.id));
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for InFlightSlot {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self::of(&parts.extensions))
    }
}

/// Serves `router` on `listener` until `shutdown` completes; then stops accepting, lets every connection finish
/// its request in flight (idle ones close at once) and returns when all are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let tracker = Arc::new(Tracker::default());
    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            shutdown.await;
            stop.cancel();
        }
    });
    tasks.spawn(sweep(tracker.clone(), limits.idle_timeout, stop.clone()));
    // No header-read timeout of hyper's: it arms a timer for every request, and the sweep already closes a
    // connection whose headers are not complete after the idle timeout (no request is in flight on it until then).
    let builder = hyper::server::conn::http1::Builder::new();
    loop {
        let accepted = tokio::select! {
            accepted = async {
                tracker.make_room(limits.max_connections, Duration::from_millis(200)).await;
                listener.accept().await
            } => accepted,
            () = stop.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                // Out of descriptors (EMFILE, ENFILE) or memory: make room by closing the oldest idle connection,
                // or wait for a connection to end; the pending connection stays in the kernel's queue meanwhile.
                tracing::warn!(%error, "cannot accept a connection");
                let pause = if tracker.evict_oldest_idle() { 10 } else { 100 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
                continue;
            }
        };
        if tracker.held() >= limits.max_connections {
            tracing::warn!(%peer, max = limits.max_connections, "connection refused: every connection is busy");
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let registered = Registered::new(tracker.clone());
        tasks.spawn(connection(stream, peer, router.clone(), builder.clone(), registered, stop.clone()));
    }
    drop(listener);
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// Errors of one connection that was queued and is gone; the next accept may succeed at once.
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(error.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}

/// Closes idle connections past the timeout, checking a few times per timeout (at most every second).
async fn sweep(tracker: Arc<Tracker>, timeout: Duration, stop: CancellationToken) {
    let period = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => tracker.sweep(timeout),
            () = stop.cancelled() => return,
        }
    }
}

/// A connection's place in the tracker, from its accept until it is dropped: after the connection's socket, which
/// [`connection`] moves into a local of its body (dropped before the function's parameters).
struct Registered {
    tracker: Arc<Tracker>,
    id: u64,
    close: CancellationToken,
}

impl Registered {
    fn new(tracker: Arc<Tracker>) -> Self {
        let (id, close) = tracker.open();
        Self { tracker, id, close }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.tracker.remove(self.id);
    }
}

/// Serves one connection until it ends, the tracker closes it, or the server stops.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    builder: hyper::server::conn::http1::Builder,
    registered: Registered,
    stop: CancellationToken,
) {
    let (tracker, id, close) = (registered.tracker.clone(), registered.id, registered.close.clone());
    let service = hyper::service::service_fn({
        let tracker = tracker.clone();
        move |mut request: hyper::Request<Incoming>| {
            // Empty until the request is admitted (authenticated); then it holds the request's `InFlight`.
            let held = Arc::new(Mutex::new(None::<InFlight>));
            let slot = Slot { tracker: tracker.clone(), id, held: Arc::downgrade(&held) };
            request.extensions_mut().insert(ConnectInfo(peer));
            request.extensions_mut().insert(InFlightSlot(Some(slot)));
            let router = router.clone();
            async move {
                let response = router.oneshot(request.map(Body::new)).await?;
                // An admitted request stays in flight until its body has been sent (or dropped): an event stream or
                // a download is never an idle connection.
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _ = &held;
                        frame
                    }))
                }))
            }
        }
    });
    let served = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
    tokio::pin!(served);
    let ended = tokio::select! {
        result = served.as_mut() => Some(result),
        () = close.cancelled() => None,
        () = stop.cancelled() => None,
    };
    if let Some(result) = ended {
        if let Err(error) = result {
            tracing::debug!(%peer, %error, "connection ended with an error");
        }
        return;
    }
    // Closing: hyper ends an idle connection at once and finishes a request it has already read. A connection that
    // is still idle a second later (a client that never finishes its headers) is dropped.
    served.as_mut().graceful_shutdown();
    loop {
        tokio::select! {
            _ = served.as_mut() => break,
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if !tracker.busy(id) {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_takes_the_oldest_idle_connection_and_spares_busy_ones() {
        let tracker = Arc::new(Tracker::default());
        let (first, first_close) = tracker.open();
        let (_second, second_close) = tracker.open();
        let (_third, third_close) = tracker.open();
        let busy = tracker.begin(first);
        assert!(tracker.evict_oldest_idle());
        assert_eq!(
            (first_close.is_cancelled(), second_close.is_cancelled(), third_close.is_cancelled()),
            (false, true, false)
        );
        assert_eq!(tracker.open_count(), 2);
        assert!(tracker.evict_oldest_idle());
        assert!(third_close.is_cancelled());
        assert!(!tracker.evict_oldest_idle(), "only a busy connection is left");
        drop(busy);
        tracker.sweep(Duration::ZERO);
        assert!(first_close.is_cancelled(), "idle again once its request ended");
    }

    /// The slot a connection's service would put in a request, and what the service keeps until the response ends.
    fn slot(tracker: &Arc<Tracker>, id: u64) -> (InFlightSlot, Arc<Mutex<Option<InFlight>>>) {
        let held = Arc::new(Mutex::new(None));
        (InFlightSlot(Some(Slot { tracker: tracker.clone(), id, held: Arc::downgrade(&held) })), held)
    }

    #[test]
    fn a_request_is_in_flight_only_once_admitted_and_until_its_response_ends() {
        let tracker = Arc::new(Tracker::default());
        let (unauthenticated, unauthenticated_close) = tracker.open();
        let (authenticated, authenticated_close) = tracker.open();
        let (_refused, refused_held) = slot(&tracker, unauthenticated);
        let (admitted, admitted_held) = slot(&tracker, authenticated);
        admitted.admit();
        admitted.admit();
        assert_eq!((tracker.busy(unauthenticated), tracker.busy(authenticated)), (false, true));
        // At the cap, the connection whose request was never admitted is the one evicted; then none is idle.
        assert!(tracker.evict_oldest_idle());
        assert_eq!((unauthenticated_close.is_cancelled(), authenticated_close.is_cancelled()), (true, false));
        assert!(!tracker.evict_oldest_idle());
        drop(refused_held);
        // The response ended: the connection is idle again, and a slot kept past the response cannot make it busy.
        let kept = admitted.clone();
        drop(admitted_held);
        kept.admit();
        assert!(!tracker.busy(authenticated));
        InFlightSlot::default().admit(); // a request not served by `serve`: nothing to count
    }

    /// A burst of connections once took every descriptor: the accept loop ran ahead of the connections' tasks,
    /// which registered themselves, and evicted connections counted as gone before their sockets were closed.
    #[tokio::test]
    async fn room_is_made_only_once_an_evicted_connection_has_released_its_socket() {
        let tracker = Arc::new(Tracker::default());
        let idle = Registered::new(tracker.clone());
        let busy = Registered::new(tracker.clone());
        let _in_flight = tracker.begin(busy.id);
        let room = tokio::spawn({
            let tracker = tracker.clone();
            async move { tracker.make_room(2, Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(idle.close.is_cancelled() && !busy.close.is_cancelled(), "the idle connection is the one closed");
        assert!(!room.is_finished(), "no room while the closed connection still holds its socket");
        assert_eq!(tracker.held(), 2);
        drop(idle);
        tokio::time::timeout(Duration::from_secs(10), room).await.expect("room once it is released").unwrap();
        assert_eq!(tracker.held(), 1);
        // Every connection busy: no wait, the cap is still reached and the accept loop refuses the next one.
        tokio::time::timeout(Duration::from_secs(1), tracker.make_room(1, Duration::from_secs(60)))
            .await
            .expect("make_room returns at once when nothing can be closed");
        // So too when the busy one is being closed: a request hyper had read when it was closed was admitted, and
        // its socket is not coming back soon.
        tracker.table().close(busy.id);
        tokio::time::timeout(Duration::from_secs(1), tracker.make_room(1, Duration::from_secs(60)))
            .await
            .expect("make_room does not wait on a closing connection with a request in flight");
    }

    #[test]
    fn the_default_cap_keeps_a_reserve_for_runs() {
        assert_eq!(ConnectionLimits::default_max_connections(1024, 4), 1024 - 256 - 64);
        assert_eq!(ConnectionLimits::default_max_connections(100, 4), 64);
        assert_eq!(ConnectionLimits::default_max_connections(524_288, 4), ConnectionLimits::DEFAULT_CEILING);
    }
}
