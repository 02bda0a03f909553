//! The one backoff of every retry: a first wait doubling with each failure in a row, up to a
//! cap, as client-go's exponential backoff does it ([`Exponential`]); scattered by a random
//! source where several processes may retry together ([`jittered`]); and kept by key where
//! each object has its own count ([`PerKey`]: a success forgets the object).
//!
//! Its users: a failed reconcile of a set (the controller's per-set [`PerKey`]), a capability
//! probe that failed (one count per capability), a watch cut off (jittered, so that replicas
//! cut off together do not return together), a refused eviction (the claim rollout's memory of
//! evictions, by pod).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Doublings at most: beyond, the wait stays where it is (no overflow, whatever the count).
const MAX_DOUBLINGS: u32 = 16;

/// `base`, doubling with each failure in a row, at most `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exponential {
    pub base: Duration,
    pub cap: Duration,
}

impl Exponential {
    pub(crate) const fn new(base: Duration, cap: Duration) -> Self {
        Self { base, cap }
    }

    /// The wait after `failures` failures in a row: `base` after the first (and after none).
    pub(crate) fn after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(MAX_DOUBLINGS);
        self.base.saturating_mul(1u32 << doublings).min(self.cap)
    }
}

/// `wait` scattered within its upper half by `jitter` in [0, 1): at least half of it.
pub(crate) fn jittered(wait: Duration, jitter: f64) -> Duration {
    wait.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// A number in [0, 1), from the process's random source (seeded by the operating system).
pub(crate) fn jitter() -> f64 {
    fastrand::f64()
}

/// Failures in a row, by key.
#[derive(Debug)]
pub(crate) struct PerKey {
    shape: Exponential,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for PerKey {
    /// 1 s, doubling, at most five minutes.
    fn default() -> Self {
        Self::new(Exponential::new(
            Duration::from_secs(1),
            Duration::from_secs(300),
        ))
    }
}

impl PerKey {
    pub(crate) fn new(shape: Exponential) -> Self {
        Self {
            shape,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `key` failed again: how long to wait before the next try.
    pub(crate) fn failed(&self, key: &str) -> Duration {
        let mut failures = self.failures();
        let n = failures.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        self.shape.after(*n)
    }

    /// `key` succeeded (or is gone): the next failure starts from the base again.
    pub(crate) fn succeeded(&self, key: &str) {
        let mut failures = self.failures();
        if !failures.is_empty() {
            failures.remove(key);
        }
    }

    /// Objects failing now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.failures().len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_doubles_the_wait_up_to_the_cap_and_a_success_starts_over() {
        let b = PerKey::new(Exponential::new(
            Duration::from_secs(1),
            Duration::from_secs(10),
        ));
        let waits: Vec<u64> = (0..6).map(|_| b.failed("db/web").as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        assert_eq!(b.failed("db/other"), Duration::from_secs(1), "per object");
        b.succeeded("db/web");
        assert_eq!(b.failed("db/web"), Duration::from_secs(1));
        b.succeeded("db/web");
        b.succeeded("db/other");
        assert!(b.is_empty(), "bounded by the objects failing now");
        for _ in 0..100 {
            b.failed("db/web");
        }
        assert_eq!(b.failed("db/web"), Duration::from_secs(10), "no overflow");
    }

    #[test]
    fn the_shape_starts_at_the_base_and_never_overflows() {
        let shape = Exponential::new(Duration::from_secs(1), Duration::from_secs(60));
        let waits: Vec<u64> = (0..=9).map(|n| shape.after(n).as_secs()).collect();
        assert_eq!(waits, [1, 1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(shape.after(u32::MAX), Duration::from_secs(60));
        let uncapped = Exponential::new(Duration::from_millis(200), Duration::MAX);
        assert_eq!(uncapped.after(u32::MAX), Duration::from_millis(200) * 65536);
    }

    #[test]
    fn jitter_keeps_the_upper_half() {
        let wait = Duration::from_secs(2);
        assert_eq!(jittered(wait, 0.0), Duration::from_secs(1));
        assert_eq!(jittered(wait, 5.0), wait);
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
            assert!((Duration::from_secs(1)..=wait).contains(&jittered(wait, j)));
        }
    }
}
