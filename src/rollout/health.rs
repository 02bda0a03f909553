//! A replica's pod as kube-controller-manager's StatefulSet controller judges it
//! (pkg/controller/statefulset/stateful_set_utils.go `isUnavailable`, `podutil.IsPodAvailable`).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;

/// One replica's state as the upstream controller judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// Running, Ready, for at least `minReadySeconds`, not terminating.
    Available,
    /// Running and Ready, available once `minReadySeconds` have passed: in this long.
    AvailableIn(Duration),
    /// Not Running and Ready (or Ready with no transition time under `minReadySeconds`).
    NotReady,
    /// Has a deletion timestamp.
    Terminating,
    /// No pod, or one this set does not control (upstream's controller does not see it).
    Missing,
}

impl Health {
    pub(crate) fn is_available(self) -> bool {
        self == Self::Available
    }
}

/// `isUnavailable` = not (Running and `podutil.IsPodAvailable`) or terminating.
/// `IsPodAvailable`: Ready, and `minReadySeconds` zero or the Ready condition's
/// `lastTransitionTime + minReadySeconds` strictly before now.
pub(crate) fn health(pod: &Pod, min_ready_seconds: i64, now: Timestamp) -> Health {
    if pod.metadata.deletion_timestamp.is_some() {
        return Health::Terminating;
    }
    let status = pod.status.as_ref();
    if status.and_then(|s| s.phase.as_deref()) != Some("Running") {
        return Health::NotReady;
    }
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .filter(|c| c.status == "True");
    let Some(ready) = ready else {
        return Health::NotReady;
    };
    if min_ready_seconds == 0 {
        return Health::Available;
    }
    let Some(since) = ready.last_transition_time.as_ref().map(|t| t.0) else {
        return Health::NotReady;
    };
    let available_at = since.checked_add(SignedDuration::from_secs(min_ready_seconds));
    match available_at {
        Ok(at) if at < now => Health::Available,
        // Timestamps have whole seconds: one more second makes `at < now` hold then.
        Ok(at) => Health::AvailableIn(
            Duration::try_from(now.duration_until(at))
                .unwrap_or_default()
                .saturating_add(Duration::from_secs(1)),
        ),
        Err(_) => Health::NotReady,
    }
}
