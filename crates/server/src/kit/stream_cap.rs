//! The cap on long-lived streams per caller: SSE streams (`/mcp/events`, legacy SSE sessions, Streamable HTTP and
//! Baponi GET streams) and NDJSON streams (open-sandbox's, Baponi's execute and output), across every surface.
//!
//! A stream holds a connection that is in flight, which the connection tracker never evicts; without a cap, one
//! caller's streams could take every connection the server keeps. Each caller (the name its credential gives) may
//! hold [`StreamCap::max_per_caller`] at once; one more is refused until one of them ends. The gate takes a
//! [`StreamPermit`] for every request that opens a stream and keeps it in the response's body, so the stream is
//! counted exactly as long as its response lives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The streams every caller holds, and how many each may.
#[derive(Clone, Debug)]
pub struct StreamCap {
    max_per_caller: usize,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

impl StreamCap {
    /// The default cap per caller: enough for a client's event stream and a few sessions and runs followed live
    /// at once, and far below the default connection cap (at least 64), so one caller's streams cannot keep others'
    /// requests out.
    pub const DEFAULT_PER_CALLER: usize = 16;

    /// At most `max_per_caller` streams per caller (0 is taken as 1).
    pub fn new(max_per_caller: usize) -> Self {
        Self { max_per_caller: max_per_caller.max(1), open: Arc::default() }
    }

    /// The most streams one caller may hold.
    pub fn max_per_caller(&self) -> usize {
        self.max_per_caller
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One more stream for `caller`, counted until the permit is dropped; `None` when it holds the most already.
    pub fn open(&self, caller: &str) -> Option<StreamPermit> {
        let mut table = self.table();
        let count = table.entry(caller.to_owned()).or_insert(0);
        if *count >= self.max_per_caller {
            return None;
        }
        *count += 1;
        Some(StreamPermit { cap: self.clone(), caller: caller.to_owned() })
    }

    /// How many streams `caller` holds now.
    pub fn held_by(&self, caller: &str) -> usize {
        self.table().get(caller).copied().unwrap_or(0)
    }
}

impl Default for StreamCap {
    fn default() -> Self {
        Self::new(Self::DEFAULT_PER_CALLER)
    }
}

/// One open stream of a caller; dropping it (the stream's response ended) frees its place.
#[derive(Debug)]
pub struct StreamPermit {
    cap: StreamCap,
    caller: String,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut table = self.cap.table();
        if let Some(count) = table.get_mut(&self.caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                table.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_caller_holds_at_most_the_cap_until_a_stream_ends() {
        let cap = StreamCap::new(2);
        let first = cap.open("alice").unwrap();
        let _second = cap.open("alice").unwrap();
        assert!(cap.open("alice").is_none(), "a third stream of alice's");
        let _bob = cap.open("bob").unwrap();
        assert_eq!((cap.held_by("alice"), cap.held_by("bob")), (2, 1));
        drop(first);
        let _again = cap.open("alice").unwrap();
        assert_eq!(cap.held_by("alice"), 2);
    }

    #[test]
    fn a_caller_with_no_stream_left_is_forgotten() {
        let cap = StreamCap::new(1);
        drop(cap.open("carol").unwrap());
        assert_eq!((cap.held_by("carol"), cap.table().len()), (0, 0));
    }
}
