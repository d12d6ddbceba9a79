//! Rate limits: a token bucket per key (a client address or a token id).
//!
//! A bucket holds up to `burst` requests and refills at `per_second`; a
//! request takes one. A request that finds the bucket empty waits for its
//! turn when that comes within [`MAX_RATE_WAIT`] (so a client sending one
//! request after another is paced, not failed), and is answered 429 with
//! the time until its turn otherwise: at most `per_second` ×
//! [`MAX_RATE_WAIT`] requests of one key wait at once. tapd's universe
//! server uses 100 per second with a burst of 10 ([`Rate::TAPD`]).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token bucket's rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Requests per second, sustained.
    pub per_second: f64,
    /// Requests at most at once (the bucket's size).
    pub burst: u32,
}

impl Rate {
    /// tapd's universe server: 100 requests per second, burst 10.
    pub const TAPD: Rate = Rate {
        per_second: 100.0,
        burst: 10,
    };

    /// `per_second` sustained, `burst` at once.
    pub fn new(per_second: f64, burst: u32) -> Self {
        Rate { per_second, burst }
    }
}

/// The longest a request waits for its turn in a bucket; a longer wait is
/// a 429.
pub const MAX_RATE_WAIT: Duration = Duration::from_millis(100);

/// Keys tracked at most by one limiter: beyond, buckets that have refilled
/// (the same as no bucket) are dropped, and if that is not enough every
/// new key shares one overflow bucket.
pub const MAX_TRACKED_KEYS: usize = 65_536;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, rate: &Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_second).min(f64::from(rate.burst));
        self.at = now;
    }
}

/// Token buckets by key.
#[derive(Debug)]
pub(crate) struct RateLimiter<K> {
    rate: Rate,
    buckets: Mutex<(HashMap<K, Bucket>, Option<Bucket>)>,
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    pub fn new(rate: Rate) -> Self {
        RateLimiter {
            rate,
            buckets: Mutex::new((HashMap::new(), None)),
        }
    }

    fn full(&self, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(self.rate.burst),
            at: now,
        }
    }

    /// Takes one request from `key`'s bucket: `Ok(wait)`, the time to
    /// wait for its turn (zero when the bucket held one, at most
    /// [`MAX_RATE_WAIT`]); `Err(retry)` when its turn is further off
    /// (nothing taken).
    pub fn take(&self, key: &K, now: Instant) -> Result<Duration, Duration> {
        self.with_bucket(key, now, |bucket, rate| {
            let wait = if bucket.tokens >= 1.0 {
                Duration::ZERO
            } else {
                let missing = 1.0 - bucket.tokens;
                Duration::from_secs_f64(missing / rate.per_second.max(1e-9))
            };
            if wait > MAX_RATE_WAIT {
                return Err(wait);
            }
            bucket.tokens -= 1.0;
            Ok(wait)
        })
    }

    /// True when `key`'s bucket holds a request (nothing taken).
    pub fn has(&self, key: &K, now: Instant) -> bool {
        self.with_bucket(key, now, |bucket, _| bucket.tokens >= 1.0)
    }

    fn with_bucket<T>(&self, key: &K, now: Instant, f: impl FnOnce(&mut Bucket, &Rate) -> T) -> T {
        let mut guard = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (map, overflow) = &mut *guard;
        if !map.contains_key(key) && map.len() >= MAX_TRACKED_KEYS {
            let rate = self.rate;
            map.retain(|_, b| {
                b.refill(&rate, now);
                b.tokens < f64::from(rate.burst)
            });
        }
        let full = self.full(now);
        let bucket = if map.contains_key(key) || map.len() < MAX_TRACKED_KEYS {
            map.entry(key.clone()).or_insert(full)
        } else {
            overflow.get_or_insert(full)
        };
        bucket.refill(&self.rate, now);
        f(bucket, &self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_then_its_rate() {
        // 5 per second: a turn every 200 ms, longer than the wait.
        let limiter = RateLimiter::new(Rate::new(5.0, 3));
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.take(&1u8, t0), Ok(Duration::ZERO));
        }
        let retry = limiter.take(&1u8, t0).expect_err("empty");
        assert!(retry <= Duration::from_millis(200) && retry > MAX_RATE_WAIT);
        assert!(limiter.take(&2u8, t0).is_ok(), "another key has its own");
        assert!(!limiter.has(&1u8, t0));
        let later = t0 + Duration::from_millis(200);
        assert!(limiter.has(&1u8, later));
        assert_eq!(limiter.take(&1u8, later), Ok(Duration::ZERO));
        assert!(limiter.take(&1u8, later).is_err());
        // 150 ms on, the next turn is 50 ms off: waited for, not refused.
        let wait = limiter
            .take(&1u8, later + Duration::from_millis(150))
            .expect("waits");
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(51));
        // Refills up to the burst only.
        let much_later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(limiter.take(&1u8, much_later), Ok(Duration::ZERO));
        }
        assert!(limiter.take(&1u8, much_later).is_err());
    }
}
