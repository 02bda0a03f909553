//! maxUnavailable rolling updates where the apiserver's `MaxUnavailableStatefulSet` gate is
//! off (KEP-961).
//!
//! Where the gate is off the apiserver drops `spec.updateStrategy.rollingUpdate.maxUnavailable`
//! and the built-in StatefulSet controller replaces one pod at a time. The webhook keeps the
//! user's value in `stateful-admission.io/max-unavailable`; here the controller deletes
//! old-revision pods in batches within that budget, as the built-in controller does with the
//! gate on, and lets the built-in controller re-create them at the update revision.
//!
//! - [`gate`]: the probe (a server-side dry run) and the shared [`GateCell`];
//! - [`plan`]: pure planning of one step from the set, its pods and the clock;
//! - [`act`]: the deletions (with uid and resourceVersion preconditions), events, metrics.

pub(crate) mod act;
pub(crate) mod gate;
pub(crate) mod plan;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub use gate::{GateCell, GateMode};

pub use crate::admission::GateStatus;

/// Settings of the feature, from the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Probe the gate, or take its state from the operator.
    pub gate: GateMode,
    /// Time between probes.
    pub probe_interval: Duration,
    /// The longest wait before probing again after failed probes (the first retry is after
    /// a second, each next one twice as long).
    pub probe_retry: Duration,
    /// How often the apiserver's version is read, to probe again when it changes.
    pub version_check: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            gate: GateMode::Auto,
            probe_interval: Duration::from_secs(3600),
            probe_retry: Duration::from_secs(60),
            version_check: Duration::from_secs(60),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SetLabels {
    pub namespace: String,
    pub name: String,
    pub pod_management_policy: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    pub result: &'static str,
}

/// The feature: the gate as this process knows it (the cell the entry point shares with the
/// webhook), what stored sets show of it, the sets waiting for it, and the metrics.
#[derive(Debug)]
pub struct MaxUnavailable {
    settings: Settings,
    gate: GateCell,
    gate_enabled: Gauge,
    probes: Family<ProbeLabels, Counter>,
    max_unavailable: Family<SetLabels, Gauge>,
    unavailable_replicas: Family<SetLabels, Gauge>,
    deleted_pods: Counter,
    /// Label sets in use per `(namespace, name)`, so that series of sets the driver no longer
    /// handles (deleted, gate on, maxUnavailable removed) go away: bounded cardinality.
    series: Mutex<HashMap<(String, String), SetLabels>>,
    /// The gate as the last stored set with evidence showed it (used while unknown).
    evidence: GateCell,
    /// Sets whose budget waits for the gate (bounded by the sets there are), and the signal
    /// that it was learned.
    deferred: Mutex<HashSet<(String, String)>>,
    gate_learned: tokio::sync::Notify,
    /// Where the gate is said for `/readyz?verbose`, once wired.
    health: std::sync::OnceLock<std::sync::Arc<crate::health::Health>>,
}

impl MaxUnavailable {
    /// The feature with its `settings`, writing what it learns of the gate into `gate`.
    pub fn register(registry: &mut Registry, settings: Settings, gate: GateCell) -> Self {
        let metrics = Self {
            settings,
            gate,
            gate_enabled: Gauge::default(),
            probes: Family::default(),
            max_unavailable: Family::default(),
            unavailable_replicas: Family::default(),
            deleted_pods: Counter::default(),
            series: Mutex::new(HashMap::new()),
            evidence: GateCell::default(),
            deferred: Mutex::new(HashSet::new()),
            gate_learned: tokio::sync::Notify::new(),
            health: std::sync::OnceLock::new(),
        };
        metrics.gate_enabled.set(metrics.gate.get().metric_value());
        registry.register(
            "max_unavailable_gate_enabled",
            "Whether the apiserver keeps StatefulSet maxUnavailable (MaxUnavailableStatefulSet gate): 1 on, 0 off, -1 unknown",
            metrics.gate_enabled.clone(),
        );
        registry.register(
            "max_unavailable_gate_probes",
            "Gate probes (server-side dry-run creates), by result",
            metrics.probes.clone(),
        );
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

    /// The cell the webhook reads.
    pub fn gate_cell(&self) -> GateCell {
        self.gate.clone()
    }

    pub fn gate(&self) -> GateStatus {
        self.gate.get()
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Applies the settings that hold before any probe (a gate state set by flag).
    pub fn configure(&self) {
        if let Some(status) = self.settings.gate.configured() {
            self.record_gate(status);
        }
    }

    /// Stores a probe result; returns the previous state. Sets deferred while it was
    /// unknown are looked at again.
    pub fn record_gate(&self, status: GateStatus) -> GateStatus {
        self.gate_enabled.set(status.metric_value());
        let previous = self.gate.set(status);
        if previous != status {
            self.gate_learned.notify_one();
        }
        self.report();
        previous
    }

    /// A probe failed: while the state is unknown, this is why.
    pub fn probe_failed(&self, error: &str) {
        self.gate.unknown_because(error);
        self.report();
    }

    /// Says the gate on `health` from now on (`/readyz?verbose`).
    pub fn report_to(&self, health: std::sync::Arc<crate::health::Health>) {
        if self.health.set(health).is_ok() {
            self.report();
        }
    }

    fn report(&self) {
        use crate::health::State;
        let Some(health) = self.health.get() else {
            return;
        };
        let (state, detail) = match (self.gate.get(), self.gate.why_unknown()) {
            (GateStatus::Enabled, _) => (
                State::Ok,
                "enabled: the apiserver keeps maxUnavailable; the StatefulSet controller honours it".to_owned(),
            ),
            (GateStatus::Disabled, _) => (
                State::Ok,
                "disabled: the apiserver drops maxUnavailable; the controller drives budgets".to_owned(),
            ),
            (GateStatus::Unknown, Some(why)) => (
                State::Warning,
                format!("unknown: the probe failed ({why}); budgets are driven only where a set shows the gate"),
            ),
            (GateStatus::Unknown, None) => (State::Warning, "unknown: not probed yet".to_owned()),
        };
        health.set("max-unavailable-gate", state, detail);
    }

    /// The gate as this process knows it, else as the stored sets show it: the evidence of
    /// `set`, else the last evidence any set gave (see [`gate::evidence`]).
    pub fn gate_or_evidence(&self, set: &k8s_openapi::api::apps::v1::StatefulSet) -> GateStatus {
        match self.gate.get() {
            GateStatus::Unknown => match gate::evidence(set) {
                Some(seen) => {
                    self.evidence.set(seen);
                    seen
                }
                None => self.evidence.get(),
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

    /// Probes the gate (or takes it from the flag) until `stop`; sweeps gone sets' series.
    pub async fn run_gate_probe(
        &self,
        ctx: std::sync::Arc<crate::controller::context::Ctx>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        gate::run_gate_probe(self, ctx, stop).await;
    }

    /// Remembers a set whose budget could not be driven because the gate is unknown.
    pub fn defer(&self, namespace: &str, name: &str) {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((namespace.to_owned(), name.to_owned()));
    }

    /// Waits until the gate's state changes, then hands over the sets deferred meanwhile.
    pub async fn deferred_once_learned(&self) -> Vec<(String, String)> {
        self.gate_learned.notified().await;
        std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|p| p.into_inner()))
            .into_iter()
            .collect()
    }

    pub fn probed(&self, result: &'static str) {
        self.probes.get_or_create(&ProbeLabels { result }).inc();
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
        let metrics =
            MaxUnavailable::register(&mut registry, Settings::default(), GateCell::default());
        assert!(text(&registry).contains("max_unavailable_gate_enabled -1"));
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
        metrics.record_gate(GateStatus::Disabled);
        assert!(text(&registry).contains("max_unavailable_gate_enabled 0"));
        assert_eq!(metrics.gate_cell().get(), GateStatus::Disabled);
    }
}
