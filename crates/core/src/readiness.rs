//! Whether the engine can run code now: each backend names its own checks (the native jail: an init can start and
//! every runner's interpreter is there; Docker: the engine answers and every runner image is there), the engine
//! adds a generic one for a backend that has none, and caches the answer briefly so a probe every second costs the
//! backend at most one check per [`READINESS_TTL`].
//!
//! What a check says is served without authentication (`/readyz`), so its `detail` names states and counts, never a
//! path, an image name, an engine address or an error message from the host (those go to the log).

use std::time::{Duration, Instant};

/// How long a readiness answer is reused.
pub const READINESS_TTL: Duration = Duration::from_secs(1);
/// How long the backend's checks may take before the answer is "not ready" (a Docker engine that hangs).
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// One check of readiness.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReadinessCheck {
    /// Short and stable (`jail`, `runners`, `engine`).
    pub name: &'static str,
    pub ok: bool,
    /// What was found, in words safe to show anyone.
    pub detail: String,
}

impl ReadinessCheck {
    /// A check that passed.
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self { name, ok: true, detail: detail.into() }
    }

    /// A check that failed.
    pub fn failed(name: &'static str, detail: impl Into<String>) -> Self {
        Self { name, ok: false, detail: detail.into() }
    }
}

/// The engine's readiness: ready when every check passed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// The backend's name (`native`, `docker`).
    pub backend: &'static str,
    pub checks: Vec<ReadinessCheck>,
}

impl Readiness {
    /// The readiness these checks make.
    pub fn of(backend: &'static str, checks: Vec<ReadinessCheck>) -> Self {
        Self { ready: checks.iter().all(|c| c.ok), backend, checks }
    }
}

/// The last answer and when it was made.
#[derive(Default)]
pub(crate) struct ReadinessCache(tokio::sync::Mutex<Option<(Instant, Readiness)>>);

impl ReadinessCache {
    /// The cached answer if it is younger than [`READINESS_TTL`], else `check()`'s (bounded by
    /// [`READINESS_TIMEOUT`]). Concurrent callers wait for the one check under way. A change of readiness is logged.
    pub(crate) async fn get<F>(&self, backend: &'static str, check: F) -> Readiness
    where
        F: Future<Output = Vec<ReadinessCheck>>,
    {
        let mut cached = self.0.lock().await;
        if let Some((at, readiness)) = cached.as_ref()
            && at.elapsed() < READINESS_TTL
        {
            return readiness.clone();
        }
        let checks = match tokio::time::timeout(READINESS_TIMEOUT, check).await {
            Ok(checks) => checks,
            Err(_elapsed) => vec![ReadinessCheck::failed(
                "backend",
                format!("the backend did not answer within {} s", READINESS_TIMEOUT.as_secs()),
            )],
        };
        let readiness = Readiness::of(backend, checks);
        let was_ready = cached.as_ref().map(|(_, previous)| previous.ready);
        if was_ready != Some(readiness.ready) {
            let failing: Vec<String> =
                readiness.checks.iter().filter(|c| !c.ok).map(|c| format!("{}: {}", c.name, c.detail)).collect();
            if readiness.ready {
                tracing::info!(backend, "ready");
            } else {
                tracing::warn!(backend, failing = failing.join("; "), "not ready");
            }
        }
        *cached = Some((Instant::now(), readiness.clone()));
        readiness
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_are_reused_for_the_ttl_and_a_hung_check_is_not_ready() {
        let cache = ReadinessCache::default();
        let first = cache.get("test", async { vec![ReadinessCheck::ok("a", "fine")] }).await;
        assert_eq!(first, Readiness { ready: true, backend: "test", checks: vec![ReadinessCheck::ok("a", "fine")] });
        // Within the TTL the check is not run again.
        let checked = std::sync::atomic::AtomicBool::new(false);
        let again = cache
            .get("test", async {
                checked.store(true, std::sync::atomic::Ordering::SeqCst);
                Vec::new()
            })
            .await;
        assert_eq!(again, first);
        assert!(!checked.load(std::sync::atomic::Ordering::SeqCst));
        *cache.0.lock().await = None;
        let hung = cache.get("test", std::future::pending()).await;
        assert!(!hung.ready);
        assert_eq!(hung.checks[0].name, "backend");
    }
}
