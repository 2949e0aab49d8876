//! Retention: what a server forgets, and when. A background task ([`keep_tidy`]) removes conversations idle for
//! longer than a time to live (their directory and their runs in the history, as
//! [`Engine::delete_conversation`] does, so never one with a run going or queued) and prunes the run history by age
//! and by count. Both are off unless configured, except the history's age and count limits, which the CLI sets to
//! generous defaults.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::Engine;

/// The longest wait between two rounds.
const MAX_INTERVAL: Duration = Duration::from_secs(600);

/// The shortest wait between two rounds.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// What a server keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// A conversation unused for this long is removed; `None` keeps conversations forever.
    pub conversation_ttl: Option<Duration>,
    /// Finished runs queued longer ago than this leave the history; `None` keeps them.
    pub history_max_age: Option<Duration>,
    /// The history keeps at most this many finished runs, the newest; `None`: no limit.
    pub history_max_runs: Option<u64>,
}

impl Retention {
    /// Whether there is anything to do.
    pub fn is_active(&self) -> bool {
        self.conversation_ttl.is_some() || self.history_max_age.is_some() || self.history_max_runs.is_some()
    }

    /// The wait between two rounds: a tenth of the time to live (so a conversation outlives it by at most ~10 %),
    /// from 1 s to 10 min.
    pub fn interval(&self) -> Duration {
        self.conversation_ttl.map_or(MAX_INTERVAL, |ttl| (ttl / 10).clamp(MIN_INTERVAL, MAX_INTERVAL))
    }
}

/// Applies `retention` to `engine` at once, then every [`Retention::interval`], until `stop` is cancelled.
pub async fn keep_tidy(engine: Arc<Engine>, retention: Retention, stop: CancellationToken) {
    if !retention.is_active() {
        return;
    }
    loop {
        tidy(&engine, &retention).await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(retention.interval()) => {}
        }
    }
}

/// One round.
async fn tidy(engine: &Engine, retention: &Retention) {
    if let Some(ttl) = retention.conversation_ttl
        && let Err(error) = engine.remove_idle_conversations(ttl).await
    {
        tracing::warn!(%error, "cannot remove idle conversations");
    }
    if let Some(history) = engine.history() {
        let older_than = retention.history_max_age.and_then(|age| SystemTime::now().checked_sub(age));
        match history.prune(older_than, retention.history_max_runs) {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "pruned the run history"),
            Err(error) => tracing::warn!(%error, "cannot prune the run history"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_come_at_a_tenth_of_the_ttl_within_bounds() {
        let every = |ttl: Option<u64>| {
            Retention { conversation_ttl: ttl.map(Duration::from_secs), ..Retention::default() }.interval()
        };
        assert_eq!(every(None), MAX_INTERVAL);
        assert_eq!(every(Some(2)), MIN_INTERVAL);
        assert_eq!(every(Some(3600)), Duration::from_secs(360));
        assert_eq!(every(Some(30 * 24 * 3600)), MAX_INTERVAL);
    }
}
