//! maxUnavailable rolling updates where the apiserver's `MaxUnavailableStatefulSet` gate is
//! off (KEP-961).
//!
//! Where the gate is off the apiserver drops `spec.updateStrategy.rollingUpdate.maxUnavailable`
//! and the built-in StatefulSet controller replaces one pod at a time. The webhook keeps the
//! user's value in `stateful-admission.io/max-unavailable`; here the controller deletes
//! old-revision pods in batches within that budget, as the built-in controller does with the
//! gate on, and lets the built-in controller re-create them at the update revision.
//!
//! - the gate itself is a capability ([`crate::capabilities`]): probed by every replica,
//!   read here from the shared cell, with a set's own evidence while it is unknown;
//! - [`crate::rollout::max_unavailable`]: pure planning of one step from the set, its pods and the clock;
//! - [`act`]: the deletions (with uid and resourceVersion preconditions), events, metrics.

pub(crate) mod act;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use crate::capabilities::{CapabilityCell, Name, Value, judge};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub use crate::admission::GateStatus;

/// How often series of StatefulSets that no longer exist are removed from the metrics.
const METRICS_SWEEP: Duration = Duration::from_secs(30);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SetLabels {
    pub namespace: String,
    pub name: String,
    pub pod_management_policy: &'static str,
}

/// The feature: the capabilities as this process knows them (the cell the entry point shares
/// with the webhook and the prober), the sets waiting for the gate, and the metrics.
#[derive(Debug)]
pub struct MaxUnavailable {
    capabilities: CapabilityCell,
    max_unavailable: Family<SetLabels, Gauge>,
    unavailable_replicas: Family<SetLabels, Gauge>,
    deleted_pods: Counter,
    /// Label sets in use per `(namespace, name)`, so that series of sets the driver no longer
    /// handles (deleted, gate on, maxUnavailable removed) go away: bounded cardinality.
    series: Mutex<HashMap<(String, String), SetLabels>>,
    /// Sets whose budget waits for the gate (bounded by the sets there are).
    deferred: Mutex<HashSet<(String, String)>>,
}

impl MaxUnavailable {
    /// The feature, reading the gate from `capabilities`.
    pub fn register(registry: &mut Registry, capabilities: CapabilityCell) -> Self {
        let metrics = Self {
            capabilities,
            max_unavailable: Family::default(),
            unavailable_replicas: Family::default(),
            deleted_pods: Counter::default(),
            series: Mutex::new(HashMap::new()),
            deferred: Mutex::new(HashSet::new()),
        };
        registry.register(
            "statefulset_max_unavailable",
            "Effective maxUnavailable of StatefulSets whose rolling update the controller drives",
            metrics.max_unavailable.clone(),
        );
        registry.register(
            "statefulset_unavailable_replicas",
            "Unavailable replicas of StatefulSets whose rolling update the controller drives",
            metrics.unavailable_replicas.clone(),
        );
        registry.register(
            "max_unavailable_pod_deletions",
            "Pods deleted to drive maxUnavailable rolling updates",
            metrics.deleted_pods.clone(),
        );
        metrics
    }

    pub fn gate(&self) -> GateStatus {
        GateStatus::of(&self.capabilities.get())
    }

    /// Why the gate is not known, while it is not.
    pub fn why_unknown(&self) -> Option<String> {
        let capabilities = self.capabilities.get();
        let learned = capabilities.get(Name::MaxUnavailable);
        learned
            .value
            .is_none()
            .then(|| learned.how.detail().to_owned())
    }

    /// The gate as the capabilities know it, else as `set` shows it (see
    /// [`judge::max_unavailable_evidence`]), which is recorded for every reader.
    pub fn gate_or_evidence(&self, set: &k8s_openapi::api::apps::v1::StatefulSet) -> GateStatus {
        match self.gate() {
            GateStatus::Unknown => match judge::max_unavailable_evidence(set) {
                Some(seen) => {
                    self.capabilities.evidence(
                        Name::MaxUnavailable,
                        seen,
                        format!(
                            "StatefulSet {}/{} {} spec.updateStrategy.rollingUpdate.maxUnavailable",
                            set.metadata.namespace.as_deref().unwrap_or(""),
                            set.metadata.name.as_deref().unwrap_or(""),
                            if seen == Value::Kept {
                                "kept"
                            } else {
                                "was written with but no longer has"
                            }
                        ),
                    );
                    GateStatus::of(&self.capabilities.get())
                }
                None => GateStatus::Unknown,
            },
            known => known,
        }
    }

    /// One reconcile step for `snapshot`; returns when to look again.
    pub async fn sync(
        &self,
        snapshot: &crate::controller::snapshot::SetSnapshot,
        ctx: &crate::controller::context::Ctx,
    ) -> Result<Option<Duration>, crate::controller::context::Error> {
        act::sync(self, snapshot, ctx).await
    }

    /// Removes the series of sets that are gone, every half minute until `stop`.
    pub async fn run_sweep(
        &self,
        ctx: std::sync::Arc<crate::controller::context::Ctx>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let mut sweep = tokio::time::interval(METRICS_SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = sweep.tick() => self.sweep(|ns, name| ctx.view.has_stateful_set(ns, name)),
            }
        }
    }

    /// Remembers a set whose budget could not be driven because the gate is unknown.
    pub fn defer(&self, namespace: &str, name: &str) {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((namespace.to_owned(), name.to_owned()));
    }

    /// Waits until the gate is learned (or changes), then hands over the sets deferred
    /// meanwhile; `None` once nothing can change it any more.
    pub async fn deferred_once_learned(
        &self,
        changes: &mut tokio::sync::watch::Receiver<
            std::sync::Arc<crate::capabilities::Capabilities>,
        >,
    ) -> Option<Vec<(String, String)>> {
        let before = GateStatus::of(&changes.borrow_and_update());
        loop {
            changes.changed().await.ok()?;
            if GateStatus::of(&changes.borrow_and_update()) != before {
                break;
            }
        }
        Some(
            std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|p| p.into_inner()))
                .into_iter()
                .collect(),
        )
    }

    /// A receiver of the capabilities' changes, for [`Self::deferred_once_learned`].
    pub fn subscribe(
        &self,
    ) -> tokio::sync::watch::Receiver<std::sync::Arc<crate::capabilities::Capabilities>> {
        self.capabilities.subscribe()
    }

    pub fn deleted(&self, pods: usize) {
        self.deleted_pods.inc_by(pods as u64);
    }

    /// Records the gauges of a set the driver handles.
    pub fn observe(&self, labels: SetLabels, max_unavailable: usize, unavailable: usize) {
        let key = (labels.namespace.clone(), labels.name.clone());
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = series.insert(key, labels.clone())
            && old != labels
        {
            self.max_unavailable.remove(&old);
            self.unavailable_replicas.remove(&old);
        }
        self.max_unavailable
            .get_or_create(&labels)
            .set(i64::try_from(max_unavailable).unwrap_or(i64::MAX));
        self.unavailable_replicas
            .get_or_create(&labels)
            .set(i64::try_from(unavailable).unwrap_or(i64::MAX));
    }

    /// Drops the series of a set the driver no longer handles.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(labels) = series.remove(&(namespace.to_owned(), name.to_owned())) {
            self.max_unavailable.remove(&labels);
            self.unavailable_replicas.remove(&labels);
        }
    }

    /// Drops the series of every set for which `exists` says no.
    pub fn sweep(&self, exists: impl Fn(&str, &str) -> bool) {
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        series.retain(|(namespace, name), labels| {
            let keep = exists(namespace, name);
            if !keep {
                self.max_unavailable.remove(labels);
                self.unavailable_replicas.remove(labels);
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(name: &str, policy: &'static str) -> SetLabels {
        SetLabels {
            namespace: "db".into(),
            name: name.into(),
            pod_management_policy: policy,
        }
    }

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).expect("encodes");
        out
    }

    #[test]
    fn series_of_sets_no_longer_driven_are_removed() {
        let mut registry = Registry::default();
        let cell = CapabilityCell::default();
        let metrics = MaxUnavailable::register(&mut registry, cell.clone());
        metrics.observe(labels("a", "Parallel"), 2, 1);
        metrics.observe(labels("b", "OrderedReady"), 3, 0);
        let out = text(&registry);
        assert!(out.contains(r#"statefulset_max_unavailable{namespace="db",name="a",pod_management_policy="Parallel"} 2"#), "{out}");
        assert!(out.contains(r#"statefulset_unavailable_replicas{namespace="db",name="b",pod_management_policy="OrderedReady"} 0"#), "{out}");
        // A set re-created with another policy keeps one series.
        metrics.observe(labels("a", "OrderedReady"), 2, 0);
        let out = text(&registry);
        assert!(
            !out.contains(r#"name="a",pod_management_policy="Parallel""#),
            "{out}"
        );
        metrics.forget("db", "b");
        metrics.sweep(|_, name| name != "a");
        let out = text(&registry);
        assert!(
            !out.contains(r#"name="a""#) && !out.contains(r#"name="b""#),
            "{out}"
        );
        assert_eq!(metrics.gate(), GateStatus::Unknown);
        cell.set(
            Name::MaxUnavailable,
            crate::capabilities::Learned::probed(Value::Dropped, "dry run"),
        );
        assert_eq!(metrics.gate(), GateStatus::Disabled);
    }
}
