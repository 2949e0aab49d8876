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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Takes `bytes` going `direction`, a chunk at a time, as a pump does.
    async fn move_bytes(bandwidth: &Bandwidth, direction: Direction, bytes: usize) {
        let mut left = bytes;
        while left > 0 {
            let chunk = left.min(bandwidth.chunk());
            bandwidth.take(direction, chunk).await;
            left -= chunk;
        }
    }

    #[tokio::test]
    async fn each_way_has_its_own_bucket() {
        const RATE: u64 = 256 * 1024;
        let bandwidth = Bandwidth::new(RATE);
        assert_eq!(bandwidth.chunk(), 26214, "a tenth of a second's bytes");
        // 640 KiB each way at once: about 2.4 s if the ways are apart, 4.9 s if they shared a bucket. The lower
        // bound cannot break on a busy machine; the upper one has 1.6 s of room for late timers.
        let started = Instant::now();
        tokio::join!(
            move_bytes(&bandwidth, Direction::Sent, 640 * 1024),
            move_bytes(&bandwidth, Direction::Received, 640 * 1024)
        );
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(2000), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(4000), "{elapsed:?}");
    }

    #[tokio::test]
    async fn no_cap_no_wait() {
        let bandwidth = Bandwidth::new(0);
        assert_eq!(bandwidth.chunk(), CHUNK);
        let started = Instant::now();
        move_bytes(&bandwidth, Direction::Sent, 1 << 30).await;
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
