//! Per-object backoff of failed reconciles, as client-go's per-item exponential rate limiter
//! does it: each failure in a row doubles the wait, up to a cap; a success forgets the object.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Failures in a row, by object.
#[derive(Debug)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Default for Backoff {
    /// 1 s, doubling, at most five minutes.
    fn default() -> Self {
        Self::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl Backoff {
    pub(crate) fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
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
        let wait = self.base.saturating_mul(1u32 << (*n).min(20)).min(self.cap);
        *n = n.saturating_add(1);
        wait
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
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
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
}
