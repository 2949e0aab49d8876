//! The run pool: a fixed number of places, one per executing run, shared fairly among tenants.
//!
//! A place that frees goes to the waiting run whose tenant holds the fewest places (ties: the earliest waiter), among
//! the runs whose tenant is under its share: `max(1, ceil(places / active tenants))`, where a tenant is active while
//! it holds a place or waits for one. A tenant alone has the whole pool, and a share grows back as other tenants
//! leave; no run is ever stopped to make room, so a tenant that got places while alone keeps them to their runs'
//! end. Runs that go on alongside their conversation (background shells, which outlive their call) hold at most half
//! the places of the pool per tenant (at least 1), so one tenant's shells never take every place.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// The places, and who holds and waits for them.
#[derive(Debug)]
pub struct Pool {
    capacity: usize,
    state: Mutex<State>,
}

/// A place in the pool, held by one run; given back, and passed on, when dropped.
#[derive(Debug)]
pub struct PoolPermit {
    pool: Arc<Pool>,
    tenant: String,
    alongside: bool,
}

impl Drop for PoolPermit {
    fn drop(&mut self) {
        self.pool.release(&self.tenant, self.alongside);
    }
}

#[derive(Debug, Default)]
struct State {
    /// Places held, all tenants together.
    held: usize,
    /// The active tenants. Invariant: a tenant is here exactly while one of its counts is not zero.
    tenants: HashMap<String, Share>,
    /// Runs waiting for a place, in arrival order (`seq` increases).
    waiters: VecDeque<Waiter>,
    next_seq: u64,
}

/// What one tenant holds and waits for.
#[derive(Debug, Default, Clone, Copy)]
struct Share {
    held: usize,
    /// Of `held`, the places of runs that go on alongside their conversation.
    alongside: usize,
    waiting: usize,
}

#[derive(Debug)]
struct Waiter {
    seq: u64,
    tenant: String,
    alongside: bool,
    grant: oneshot::Sender<PoolPermit>,
}

/// Places handed to waiters, sent once the state is unlocked: a send that fails (its waiter went away) drops the
/// permit, which gives the place back, and that takes the lock again.
type Grants = Vec<(oneshot::Sender<PoolPermit>, PoolPermit)>;

impl Pool {
    /// A pool of `capacity` places (at least 1).
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self { capacity: capacity.max(1), state: Mutex::default() })
    }

    /// A place for a run of `tenant` now, if one is free and the tenant may take it; `None` otherwise. Waiting runs
    /// are never passed over: places go to them as soon as they free, so a place still free is one none of them may
    /// take.
    pub fn try_acquire(self: &Arc<Self>, tenant: &str, alongside: bool) -> Option<PoolPermit> {
        let mut state = self.lock();
        if state.held >= self.capacity || !self.fits(&state, tenant, alongside) {
            return None;
        }
        Some(self.take(&mut state, tenant.to_owned(), alongside))
    }

    /// Waits for a place for a run of `tenant`, in the queue from this call on. Dropping the future leaves the queue
    /// (or gives back the place it was just handed). `None` only if the pool went away, which an engine's does not.
    pub fn acquire(
        self: &Arc<Self>,
        tenant: &str,
        alongside: bool,
    ) -> impl Future<Output = Option<PoolPermit>> + Send + 'static {
        let (grant, granted) = oneshot::channel();
        let (seq, grants) = {
            let mut state = self.lock();
            let seq = state.next_seq;
            state.next_seq += 1;
            state.tenants.entry(tenant.to_owned()).or_default().waiting += 1;
            state.waiters.push_back(Waiter { seq, tenant: tenant.to_owned(), alongside, grant });
            let grants = self.dispatch(&mut state);
            (seq, grants)
        };
        hand_out(grants);
        let queued = Queued { pool: self.clone(), seq };
        async move {
            let permit = granted.await.ok();
            drop(queued);
            permit
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a run of `tenant` may take a place (if one is free): the tenant, counted as active, is under its share,
    /// and, for a run alongside, under its places for such runs.
    fn fits(&self, state: &State, tenant: &str, alongside: bool) -> bool {
        let share = state.tenants.get(tenant).copied().unwrap_or_default();
        let active = state.tenants.len() + usize::from(!state.tenants.contains_key(tenant));
        let share_cap = self.capacity.div_ceil(active).max(1);
        let alongside_cap = (self.capacity / 2).max(1);
        share.held < share_cap && (!alongside || share.alongside < alongside_cap)
    }

    /// Gives a place to `tenant`.
    fn take(self: &Arc<Self>, state: &mut State, tenant: String, alongside: bool) -> PoolPermit {
        state.held += 1;
        let share = state.tenants.entry(tenant.clone()).or_default();
        share.held += 1;
        share.alongside += usize::from(alongside);
        PoolPermit { pool: self.clone(), tenant, alongside }
    }

    /// Hands free places to the waiters that may take them, the tenant holding the fewest places first, then the
    /// earliest. Called after every change of who holds or waits, so no waiter that may take a free place waits.
    fn dispatch(self: &Arc<Self>, state: &mut State) -> Grants {
        let mut grants = Vec::new();
        while state.held < self.capacity {
            let held = |tenant: &str| state.tenants.get(tenant).map_or(0, |share| share.held);
            let next = state
                .waiters
                .iter()
                .enumerate()
                .filter(|(_, waiter)| self.fits(state, &waiter.tenant, waiter.alongside))
                .min_by_key(|(_, waiter)| (held(&waiter.tenant), waiter.seq))
                .map(|(index, _)| index);
            let Some(waiter) = next.and_then(|index| state.waiters.remove(index)) else { break };
            let permit = self.take(state, waiter.tenant, waiter.alongside);
            if let Some(share) = state.tenants.get_mut(&permit.tenant) {
                share.waiting -= 1;
            }
            grants.push((waiter.grant, permit));
        }
        grants
    }

    fn release(self: &Arc<Self>, tenant: &str, alongside: bool) {
        let grants = {
            let mut state = self.lock();
            state.held -= 1;
            if let Some(share) = state.tenants.get_mut(tenant) {
                share.held -= 1;
                share.alongside -= usize::from(alongside);
            }
            state.forget_if_idle(tenant);
            self.dispatch(&mut state)
        };
        hand_out(grants);
    }
}

impl State {
    /// Keeps the invariant of `tenants`.
    fn forget_if_idle(&mut self, tenant: &str) {
        if self.tenants.get(tenant).is_some_and(|share| share.held == 0 && share.waiting == 0) {
            self.tenants.remove(tenant);
        }
    }
}

fn hand_out(grants: Grants) {
    for (grant, permit) in grants {
        let _ = grant.send(permit);
    }
}

/// A run's place in the queue: dropped before it got a place, it leaves the queue (which may let others take one:
/// its tenant may no longer count as active).
struct Queued {
    pool: Arc<Pool>,
    seq: u64,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let grants = {
            let mut state = self.pool.lock();
            let Some(index) = state.waiters.iter().position(|waiter| waiter.seq == self.seq) else { return };
            let Some(waiter) = state.waiters.remove(index) else { return };
            if let Some(share) = state.tenants.get_mut(&waiter.tenant) {
                share.waiting -= 1;
            }
            state.forget_if_idle(&waiter.tenant);
            self.pool.dispatch(&mut state)
        };
        hand_out(grants);
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    type Waiting = Pin<Box<dyn Future<Output = Option<PoolPermit>> + Send>>;

    /// A run of `tenant` that starts waiting now.
    fn wait(pool: &Arc<Pool>, tenant: &str) -> Waiting {
        Box::pin(pool.acquire(tenant, false))
    }

    fn wait_alongside(pool: &Arc<Pool>, tenant: &str) -> Waiting {
        Box::pin(pool.acquire(tenant, true))
    }

    /// The waiting run's place, if it has one now. Places are handed out synchronously, so one poll tells.
    fn got(waiting: &mut Waiting) -> Option<PoolPermit> {
        match waiting.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(permit) => Some(permit.expect("the pool is there")),
            Poll::Pending => None,
        }
    }

    /// `count` places taken at once by `tenant`, which must all be free to it.
    fn take(pool: &Arc<Pool>, tenant: &str, count: usize) -> Vec<PoolPermit> {
        (0..count).map(|_| pool.try_acquire(tenant, false).expect("a place free to the tenant")).collect()
    }

    /// Each tenant's (held, alongside, waiting), sorted by tenant.
    fn shares(pool: &Pool) -> Vec<(String, usize, usize, usize)> {
        let state = pool.lock();
        let mut shares: Vec<_> =
            state.tenants.iter().map(|(name, s)| (name.clone(), s.held, s.alongside, s.waiting)).collect();
        shares.sort();
        shares
    }

    fn share(name: &str, held: usize, alongside: usize, waiting: usize) -> (String, usize, usize, usize) {
        (name.to_owned(), held, alongside, waiting)
    }

    #[test]
    fn a_tenant_alone_gets_the_whole_pool() {
        let pool = Pool::new(4);
        let mut held = take(&pool, "a", 4);
        assert!(pool.try_acquire("a", false).is_none());
        let mut fifth = wait(&pool, "a");
        assert!(got(&mut fifth).is_none());
        held.pop();
        assert!(got(&mut fifth).is_some());
    }

    #[test]
    fn two_tenants_a_freed_place_goes_to_the_tenant_under_its_share_before_an_earlier_waiter() {
        let pool = Pool::new(4);
        let mut a = take(&pool, "a", 3);
        let mut b = take(&pool, "b", 1);
        let (mut a4, mut b2) = (wait(&pool, "a"), wait(&pool, "b"));
        // Two active tenants: a share of 2. `a` holds 3, `b` 1: the place goes to `b` though `a` asked first.
        a.pop();
        assert!(got(&mut a4).is_none());
        let _b2 = got(&mut b2).expect("b's second run starts");
        assert_eq!(shares(&pool), [share("a", 2, 0, 1), share("b", 2, 0, 0)]);
        // `a` is at its share: a place `b` frees stays free to the runs of another tenant.
        b.pop();
        assert!(got(&mut a4).is_none());
        assert_eq!(pool.lock().held, 3);
        let _c = pool.try_acquire("c", false).expect("a third tenant is under its share");
        // One of `a`'s runs ends: `a` is under its share, and its waiting run takes the place.
        a.pop();
        let _a4 = got(&mut a4).expect("a under its share again");
        assert_eq!(shares(&pool), [share("a", 2, 0, 0), share("b", 1, 0, 0), share("c", 1, 0, 0)]);
    }

    #[test]
    fn three_tenants_a_freed_place_goes_to_the_tenant_holding_the_fewest_then_the_earliest() {
        let pool = Pool::new(4);
        let mut c = take(&pool, "c", 3);
        let _b = take(&pool, "b", 1);
        let (mut b2, mut a1) = (wait(&pool, "b"), wait(&pool, "a"));
        // Shares of 2: `a` (holding none) before `b` (holding one), though `b` asked first.
        c.pop();
        assert!(got(&mut b2).is_none());
        let _a1 = got(&mut a1).expect("a's run starts");
        c.pop();
        let b2 = got(&mut b2).expect("b's second run starts");
        assert_eq!(shares(&pool), [share("a", 1, 0, 0), share("b", 2, 0, 0), share("c", 1, 0, 0)]);
        // `a` and `c` hold one each: the tie goes to the earliest waiter.
        let (mut a2, mut c2) = (wait(&pool, "a"), wait(&pool, "c"));
        drop(b2);
        assert!(got(&mut c2).is_none());
        let _a2 = got(&mut a2).expect("the earliest of two tenants holding one each");
    }

    #[test]
    fn a_tenants_share_is_capped_while_others_are_active_and_grows_back_as_they_leave() {
        // Two tenants in a pool of 4: 2 each, a free place notwithstanding.
        let pool = Pool::new(4);
        let _a = take(&pool, "a", 1);
        let b = take(&pool, "b", 2);
        let mut b3 = wait(&pool, "b");
        assert!(got(&mut b3).is_none(), "b is at its share of 2");
        assert_eq!(pool.lock().held, 3);
        drop(b);
        let _b3 = got(&mut b3).expect("b under its share again");

        // Three tenants in a pool of 5: a share of ceil(5 / 3) = 2.
        let pool = Pool::new(5);
        let _a = take(&pool, "a", 2);
        let _b = take(&pool, "b", 1);
        let c = take(&pool, "c", 1);
        let mut a3 = wait(&pool, "a");
        assert!(got(&mut a3).is_none(), "a is at its share though a place is free");
        let _b2 = pool.try_acquire("b", false).expect("b is under its share");
        // `c` leaves: two tenants, a share of 3.
        drop(c);
        let _a3 = got(&mut a3).expect("a's share grew to 3");
        assert_eq!(shares(&pool), [share("a", 3, 0, 0), share("b", 2, 0, 0)]);
    }

    #[test]
    fn runs_alongside_hold_at_most_half_the_pool_per_tenant() {
        let pool = Pool::new(4);
        let mut shells = vec![pool.try_acquire("a", true).unwrap(), pool.try_acquire("a", true).unwrap()];
        assert!(pool.try_acquire("a", true).is_none(), "two of four places are a's shells' share");
        let mut third = wait_alongside(&pool, "a");
        assert!(got(&mut third).is_none());
        let _run = pool.try_acquire("a", false).expect("an ordinary run of a takes a free place");
        assert_eq!(shares(&pool), [share("a", 3, 2, 1)]);
        shells.pop();
        let _third = got(&mut third).expect("a shell ended: the next may start");

        // Each tenant's shells are counted apart.
        let pool = Pool::new(4);
        let _a_shells = [pool.try_acquire("a", true).unwrap(), pool.try_acquire("a", true).unwrap()];
        let _b_shells = [pool.try_acquire("b", true).unwrap(), pool.try_acquire("b", true).unwrap()];
        assert_eq!(shares(&pool), [share("a", 2, 2, 0), share("b", 2, 2, 0)]);

        // In a pool of one, a shell may still run.
        let pool = Pool::new(1);
        let _shell = pool.try_acquire("a", true).expect("at least one place");
    }

    #[test]
    fn a_run_that_stops_waiting_leaves_the_queue_and_the_active_tenants() {
        let pool = Pool::new(4);
        let _a = take(&pool, "a", 3);
        let b = take(&pool, "b", 1);
        let mut a4 = wait(&pool, "a");
        let c1 = wait(&pool, "c");
        assert_eq!(pool.lock().waiters.len(), 2);
        drop(c1);
        assert_eq!(pool.lock().waiters.len(), 1);
        // `b` ends: `a` is alone, with the whole pool, and takes the place (with `c` still counted, `c` would).
        drop(b);
        let _a4 = got(&mut a4).expect("a alone");
        assert_eq!(shares(&pool), [share("a", 4, 0, 0)]);
    }

    #[test]
    fn a_place_handed_to_a_run_that_went_away_passes_on() {
        let pool = Pool::new(1);
        let a = take(&pool, "a", 1);
        let (b, mut c) = (wait(&pool, "b"), wait(&pool, "c"));
        drop(a); // handed to `b`, which never looks
        drop(b);
        let _c = got(&mut c).expect("b's place went on to c");
        assert_eq!(shares(&pool), [share("c", 1, 0, 0)]);
        assert_eq!(pool.lock().waiters.len(), 0);
    }
}
