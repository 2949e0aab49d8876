//! A sandbox's bandwidth cap: one token bucket each way, shared by all of the sandbox's connections (governor's,
//! one cell a byte).
//!
//! The bucket holds a tenth of a second's bytes (at least 16 KiB, at most the rate), so a burst after a pause is
//! short and a cap measured over a second holds to within about a tenth; a pump moves at most a bucket at once.

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;

/// The largest chunk a pump reads at once when there is no cap.
pub const CHUNK: usize = 64 * 1024;

/// One sandbox's buckets (none: no cap).
pub struct Bandwidth {
    buckets: Option<[DefaultDirectRateLimiter; 2]>,
    chunk: usize,
}

/// Which way bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the sandbox to the host.
    Sent,
    /// From the host to the sandbox.
    Received,
}

impl Bandwidth {
    /// A cap of `bytes_per_second` each way (0: none).
    pub fn new(bytes_per_second: u64) -> Self {
        let Some(rate) = NonZeroU32::new(u32::try_from(bytes_per_second).unwrap_or(u32::MAX)) else {
            return Self { buckets: None, chunk: CHUNK };
        };
        let burst = (rate.get() / 10).max(16 * 1024).min(rate.get());
        let burst = NonZeroU32::new(burst).unwrap_or(rate);
        let bucket = || RateLimiter::direct(Quota::per_second(rate).allow_burst(burst));
        Self { buckets: Some([bucket(), bucket()]), chunk: (burst.get() as usize).min(CHUNK) }
    }

    /// The most a pump should read at once.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Waits until `bytes` (at most [`Bandwidth::chunk`]) may go `direction`.
    pub async fn take(&self, direction: Direction, bytes: usize) {
        let Some(buckets) = &self.buckets else { return };
        let bucket = &buckets[direction as usize];
        let Some(cells) = NonZeroU32::new(u32::try_from(bytes.min(self.chunk)).unwrap_or(u32::MAX)) else { return };
        // Never more than the bucket holds (the chunk is at most the burst), so this cannot fail.
        let _ = bucket.until_n_ready(cells).await;
    }
}
