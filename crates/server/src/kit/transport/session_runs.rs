//! The runs of each Streamable HTTP session, by session id, so that ending a session (`DELETE /mcp`) cancels its
//! runs at once. rmcp closes a deleted session's service, but the calls it had in flight are only dropped when
//! their transport notices, seconds later; until then the sandbox kept running. A call that carries an
//! `Mcp-Session-Id` enters its session here for as long as it runs; [`SessionRuns::end`] cancels them all.
//! An entry lives only while a call of its session runs, so the table is bounded by the runs in flight.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// Sessions with calls in flight: each one's cancellation and how many calls hold it.
#[derive(Debug, Default)]
pub struct SessionRuns {
    sessions: Mutex<HashMap<String, (CancellationToken, usize)>>,
}

impl SessionRuns {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, (CancellationToken, usize)>> {
        self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A call of `session` starts; it is cancelled by [`SessionRuns::end`] until the guard is dropped.
    pub fn enter(self: &Arc<Self>, session: &str) -> SessionCall {
        let mut table = self.table();
        let (token, calls) = table.entry(session.to_owned()).or_insert_with(|| (CancellationToken::new(), 0));
        *calls += 1;
        SessionCall { runs: self.clone(), session: session.to_owned(), token: token.clone() }
    }

    /// `session` ended: cancels every call of it in flight.
    pub fn end(&self, session: &str) {
        if let Some((token, _)) = self.table().remove(session) {
            token.cancel();
        }
    }
}

/// One call of a session, counted while it lives.
pub struct SessionCall {
    runs: Arc<SessionRuns>,
    session: String,
    token: CancellationToken,
}

impl SessionCall {
    /// Cancelled when the session ends.
    pub fn ended(&self) -> CancellationToken {
        self.token.clone()
    }
}

impl Drop for SessionCall {
    fn drop(&mut self) {
        let mut table = self.runs.table();
        if let Some((token, calls)) = table.get_mut(&self.session)
            && token == &self.token
        {
            *calls -= 1;
            if *calls == 0 {
                table.remove(&self.session);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ending_a_session_cancels_its_calls_only_and_entries_go_with_their_calls() {
        let runs = Arc::new(SessionRuns::default());
        let (a1, a2, b) = (runs.enter("a"), runs.enter("a"), runs.enter("b"));
        runs.end("a");
        assert!(a1.ended().is_cancelled() && a2.ended().is_cancelled());
        assert!(!b.ended().is_cancelled());
        let a_again = runs.enter("a"); // a new entry, not the ended one
        assert!(!a_again.ended().is_cancelled());
        drop((a1, a2));
        assert_eq!(runs.table().get("a").map(|(_, calls)| *calls), Some(1), "the old calls leave the new entry alone");
        drop((a_again, b));
        assert!(runs.table().is_empty());
    }
}
