//! The claim rollout's metrics, and what it remembers of the evictions it asked for (by pod:
//! refused, with the backoff before the next attempt, or done while the pod cache has yet to
//! hear of it).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::backoff::Exponential;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SetLabels {
    pub namespace: String,
    pub statefulset: String,
}

/// The feature: its metrics, and the sets whose rollout is in progress (for the gauge).
#[derive(Debug, Default)]
pub(crate) struct ClaimRollout {
    pub(super) patched: Counter,
    pub(super) patch_errors: Counter,
    pub(super) incompatible: Family<SetLabels, Gauge>,
    pub(super) rollouts_in_progress: Gauge,
    pub(super) in_progress: Mutex<HashSet<(String, String)>>,
    pub(super) pod_evictions: Counter,
    pub(super) pod_eviction_refusals: Counter,
    /// What became of the evictions asked for, by pod uid (bounded: see [`REFUSAL_MEMORY`]).
    evictions: Mutex<std::collections::HashMap<String, Eviction>>,
}

/// What became of the evictions of one pod.
#[derive(Debug, Clone, Copy)]
enum Eviction {
    /// Refused `count` times in a row; not to be asked again before `after`.
    Refused {
        count: u32,
        after: std::time::Instant,
    },
    /// Evicted at `at`: going, while the pod cache has yet to hear of it.
    Done { at: std::time::Instant },
}

impl Eviction {
    /// Until when it is remembered.
    fn remembered_until(&self) -> std::time::Instant {
        match self {
            Self::Refused { after, .. } => *after + REFUSAL_MEMORY,
            Self::Done { at } => *at + REFUSAL_MEMORY,
        }
    }
}

impl ClaimRollout {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "claims_patched",
            "PersistentVolumeClaims patched to their desired template",
            m.patched.clone(),
        );
        registry.register(
            "claim_patch_errors",
            "Claim patches the apiserver refused or that failed",
            m.patch_errors.clone(),
        );
        registry.register(
            "claims_incompatible",
            "Claims that cannot become compatible with their template in place, by set",
            m.incompatible.clone(),
        );
        registry.register(
            "claim_rollouts_in_progress",
            "StatefulSets whose claims are not all compatible with their templates yet",
            m.rollouts_in_progress.clone(),
        );
        registry.register(
            "claim_pod_evictions",
            "Pods evicted so that their claims finish growing their file systems (offline expansion)",
            m.pod_evictions.clone(),
        );
        registry.register(
            "claim_pod_eviction_refusals",
            "Evictions for a resize refused by a PodDisruptionBudget (asked again later)",
            m.pod_eviction_refusals.clone(),
        );
        m
    }

    pub(super) fn set_in_progress(&self, namespace: &str, name: &str, in_progress: bool) {
        let mut sets = self.in_progress.lock().unwrap_or_else(|p| p.into_inner());
        let key = (namespace.to_owned(), name.to_owned());
        if in_progress {
            sets.insert(key);
        } else {
            sets.remove(&key);
        }
        self.rollouts_in_progress
            .set(i64::try_from(sets.len()).unwrap_or(i64::MAX));
    }

    fn evictions(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Eviction>> {
        self.evictions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Self::evictions`] for a write: bounded, a pod that went elsewhere is forgotten once
    /// its backoff is long over, an eviction once its pod has surely gone from the view.
    fn evictions_pruned(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Eviction>> {
        let mut evictions = self.evictions();
        let now = std::time::Instant::now();
        evictions.retain(|_, e| e.remembered_until() > now);
        evictions
    }

    /// Notes an eviction of the pod with uid `pod` refused; returns the wait before the next
    /// attempt: 1 s doubling to a minute.
    pub(super) fn refused(&self, pod: &str) -> Duration {
        let now = std::time::Instant::now();
        let mut evictions = self.evictions_pruned();
        let count = match evictions.get(pod) {
            Some(Eviction::Refused { count, .. }) => count.saturating_add(1),
            _ => 1,
        };
        let wait = REFUSAL_BACKOFF.after(count);
        evictions.insert(
            pod.to_owned(),
            Eviction::Refused {
                count,
                after: now + wait,
            },
        );
        wait
    }

    /// Notes the pod with uid `pod` evicted (its refusals forgotten).
    pub(super) fn evicted(&self, pod: &str) {
        let at = std::time::Instant::now();
        self.evictions_pruned()
            .insert(pod.to_owned(), Eviction::Done { at });
    }

    /// Whether the pod with uid `pod` was evicted (lately).
    pub(super) fn was_evicted(&self, pod: &str) -> bool {
        matches!(self.evictions().get(pod), Some(Eviction::Done { .. }))
    }

    /// How long an eviction of the pod with uid `pod` still waits after a refusal.
    pub(super) fn backoff(&self, pod: &str) -> Option<Duration> {
        let Some(Eviction::Refused { after, .. }) = self.evictions().get(pod).copied() else {
            return None;
        };
        let left = after.saturating_duration_since(std::time::Instant::now());
        (!left.is_zero()).then_some(left)
    }
}

/// The wait after refusals in a row: 1 s doubling to a minute.
const REFUSAL_BACKOFF: Exponential =
    Exponential::new(Duration::from_secs(1), Duration::from_secs(60));

/// How long a refusal's count outlives its backoff (a refusal after that starts again at 1 s),
/// and an eviction is remembered.
const REFUSAL_MEMORY: Duration = Duration::from_secs(600);
