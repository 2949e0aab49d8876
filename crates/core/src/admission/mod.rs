//! Fair concurrency: who runs now and who waits. At most `max_concurrent` runs execute at once, in a pool shared
//! fairly among tenants (`pool`); the others wait in a queue bounded by `max_queued` and by a wait limit, beyond
//! which a run is refused as busy with a retry hint instead of hanging. Runs of one conversation take turns in
//! arrival order (a fair mutex per conversation, taken before the place in the pool, so a conversation never holds
//! two places in the pool).

mod pool;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

use crate::ConversationId;
use pool::{Pool, PoolPermit};

/// The longest retry hint given.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A run's right to execute: its conversation's turn and a place in the pool. Dropping it passes both on.
#[derive(Debug)]
pub struct Turn {
    conversation: Option<OwnedMutexGuard<()>>,
    _permit: PoolPermit,
}

impl Turn {
    /// Lets the conversation's next run start while this one runs (it keeps its place in the pool): for a run that
    /// outlives its call, which waited its turn but must not hold the conversation's other runs back.
    pub fn release_conversation(&mut self) {
        self.conversation = None;
    }
}

/// Why a run did not get its turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The queue is full, or the run waited longer than the wait limit.
    Busy { reason: String, retry_after: Duration },
    /// Its caller cancelled it while it waited.
    Cancelled,
}

/// The queue in front of the backend.
#[derive(Debug)]
pub struct Admission {
    pool: Arc<Pool>,
    max_concurrent: usize,
    max_queued: usize,
    wait_limit: Duration,
    waiting: AtomicUsize,
    /// A moving average of recent run durations, for retry hints.
    typical_run_ms: AtomicU64,
    conversations: Mutex<HashMap<ConversationId, Weak<tokio::sync::Mutex<()>>>>,
}

/// Holds one place in the queue; gives it back when dropped.
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        metrics::gauge!(crate::run_metrics::QUEUE_DEPTH).decrement(1.0);
    }
}

impl Admission {
    /// `max_concurrent` runs at once (at least 1), `max_queued` waiting, none waiting longer than `wait_limit`.
    pub fn new(max_concurrent: usize, max_queued: usize, wait_limit: Duration) -> Self {
        let max_concurrent = max_concurrent.max(1);
        Self {
            pool: Pool::new(max_concurrent),
            max_concurrent,
            max_queued,
            wait_limit,
            waiting: AtomicUsize::new(0),
            typical_run_ms: AtomicU64::new(1000),
            conversations: Mutex::new(HashMap::new()),
        }
    }

    /// Runs waiting for their turn now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Waits for the turn of a run of `tenant` (`""` for a run without one; `alongside`: a run that goes on
    /// alongside its conversation, see [`crate::RunRequest::alongside`]): at once when its conversation is idle and
    /// a place in the pool is free to it; otherwise in the queue, unless it is full, the wait limit passes, or
    /// `cancel` fires.
    pub async fn wait_turn(
        &self,
        conversation: &ConversationId,
        tenant: &str,
        alongside: bool,
        cancel: &CancellationToken,
    ) -> Result<Turn, Refusal> {
        let lock = self.conversation_lock(conversation);
        // The fast path: a place free to this run is one no waiting run may take (the pool hands places to waiters
        // as soon as they free).
        let mut held = lock.clone().try_lock_owned().ok();
        if held.is_some()
            && let Some(permit) = self.pool.try_acquire(tenant, alongside)
            && let Some(conversation_turn) = held.take()
        {
            return Ok(Turn { conversation: Some(conversation_turn), _permit: permit });
        }
        let _place = self.take_place()?;
        let wait = async {
            let conversation_turn = match held {
                Some(turn) => turn,
                None => lock.lock_owned().await,
            };
            let permit = self.pool.acquire(tenant, alongside).await;
            permit.map(|permit| Turn { conversation: Some(conversation_turn), _permit: permit })
        };
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(Refusal::Cancelled),
            waited = tokio::time::timeout(self.wait_limit, wait) => match waited {
                Ok(Some(turn)) => Ok(turn),
                Ok(None) => Err(self.busy("shutting_down", "the server is shutting down".into())),
                Err(_elapsed) => Err(self.busy("wait_limit", format!(
                    "the run waited {} s for its turn (the queue's wait limit)",
                    self.wait_limit.as_secs_f64()
                ))),
            },
        }
    }

    /// The conversation's turn, taken now if no run of it holds it or waits for a place in the pool (those hold
    /// it); `None` otherwise. While held, no run of the conversation starts in this process.
    pub fn try_hold(&self, conversation: &ConversationId) -> Option<OwnedMutexGuard<()>> {
        self.conversation_lock(conversation).try_lock_owned().ok()
    }

    /// Notes how long a run took, for later retry hints.
    pub fn record_duration(&self, duration: Duration) {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let _ = self.typical_run_ms.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
            Some((average.saturating_mul(7).saturating_add(ms)) / 8)
        });
    }

    fn take_place(&self) -> Result<Place<'_>, Refusal> {
        let taken =
            self.waiting.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < self.max_queued).then_some(n + 1));
        match taken {
            Ok(_) => {
                metrics::gauge!(crate::run_metrics::QUEUE_DEPTH).increment(1.0);
                Ok(Place(&self.waiting))
            }
            Err(_) => Err(self.busy(
                "queue_full",
                format!(
                    "{} runs are executing and {} are queued (the queue's bound)",
                    self.max_concurrent, self.max_queued
                ),
            )),
        }
    }

    /// A busy refusal, with a retry hint: the time for the queue ahead to drain at the recent pace (1–60 s); counted
    /// under `kind` (one of [`crate::run_metrics::BUSY_REASONS`]).
    fn busy(&self, kind: &'static str, reason: String) -> Refusal {
        metrics::counter!(crate::run_metrics::BUSY_REFUSALS, "reason" => kind).increment(1);
        let ahead = self.waiting() as u64 + 1;
        let typical = self.typical_run_ms.load(Ordering::Relaxed);
        let ms = ahead.saturating_mul(typical) / self.max_concurrent as u64;
        let retry_after = Duration::from_secs(ms.div_ceil(1000)).clamp(Duration::from_secs(1), MAX_RETRY_AFTER);
        Refusal::Busy { reason, retry_after }
    }

    fn conversation_lock(&self, id: &ConversationId) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.conversations.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        map.retain(|_, weak| weak.strong_count() > 0);
        if let Some(lock) = map.get(id).and_then(Weak::upgrade) {
            return lock;
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(id.clone(), Arc::downgrade(&lock));
        lock
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> ConversationId {
        ConversationId::parse(name).unwrap()
    }

    #[tokio::test]
    async fn beyond_the_bound_runs_are_refused_at_once() {
        let admission = Admission::new(1, 1, Duration::from_secs(60));
        let never = CancellationToken::new();
        let running = admission.wait_turn(&id("a"), "", false, &never).await.unwrap();
        let queued = {
            let admission = &admission;
            let never = never.clone();
            async move { admission.wait_turn(&id("b"), "", false, &never).await }
        };
        tokio::pin!(queued);
        assert!(tokio::time::timeout(Duration::from_millis(50), &mut queued).await.is_err(), "b should wait");
        assert_eq!(admission.waiting(), 1);
        let refused = admission.wait_turn(&id("c"), "", false, &never).await.unwrap_err();
        assert!(matches!(&refused, Refusal::Busy { reason, .. } if reason.contains("queued")), "{refused:?}");
        drop(running);
        assert!(queued.await.is_ok());
        assert_eq!(admission.waiting(), 0);
    }

    #[tokio::test]
    async fn the_wait_limit_and_cancellation_end_a_wait() {
        let admission = Admission::new(1, 10, Duration::from_millis(100));
        let never = CancellationToken::new();
        let _running = admission.wait_turn(&id("a"), "", false, &never).await.unwrap();
        let started = std::time::Instant::now();
        let refused = admission.wait_turn(&id("b"), "", false, &never).await.unwrap_err();
        assert!(matches!(refused, Refusal::Busy { retry_after, .. } if retry_after >= Duration::from_secs(1)));
        // The 100 ms wait limit ended the wait (generous for a loaded machine; without the limit it never ends).
        assert!(started.elapsed() < Duration::from_secs(10));
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert_eq!(admission.wait_turn(&id("c"), "", false, &cancel).await.unwrap_err(), Refusal::Cancelled);
        assert_eq!(admission.waiting(), 0);
    }

    #[tokio::test]
    async fn one_conversation_takes_turns_in_arrival_order() {
        let admission = Arc::new(Admission::new(4, 10, Duration::from_secs(60)));
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = admission.wait_turn(&id("same"), "", false, &CancellationToken::new()).await.unwrap();
        let mut tasks = Vec::new();
        for n in 0..5 {
            let (admission, order) = (admission.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _turn = admission.wait_turn(&id("same"), "", false, &CancellationToken::new()).await.unwrap();
                order.lock().unwrap().push(n);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }));
            tokio::time::sleep(Duration::from_millis(10)).await; // arrive in order
        }
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn a_run_that_released_its_conversation_lets_the_next_start_but_keeps_its_place() {
        let admission = Admission::new(2, 10, Duration::from_millis(200));
        let mut background = admission.wait_turn(&id("same"), "", false, &CancellationToken::new()).await.unwrap();
        background.release_conversation();
        let foreground = admission.wait_turn(&id("same"), "", false, &CancellationToken::new()).await.unwrap();
        // Both places are taken: a third run waits out the limit.
        let refused = admission.wait_turn(&id("other"), "", false, &CancellationToken::new()).await.unwrap_err();
        assert!(matches!(refused, Refusal::Busy { .. }), "{refused:?}");
        drop((background, foreground));
        assert!(admission.wait_turn(&id("other"), "", false, &CancellationToken::new()).await.is_ok());
    }
}
