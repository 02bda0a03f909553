//! Metrics of the controller: shared families, and one group per feature.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{claims, conditions, default_class, executor, max_unavailable};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: &'static str,
    pub result: &'static str,
}

#[derive(Debug)]
pub struct ControllerMetrics {
    leader: Gauge,
    reconciles: Family<ReconcileLabels, Counter>,
    journals_open: Gauge,
    oldest_journal: Gauge,
    pub claims: claims::Metrics,
    pub conditions: conditions::Metrics,
    pub default_class: default_class::Metrics,
    pub max_unavailable: max_unavailable::Metrics,
    pub actions: executor::ActionMetrics,
}

impl ControllerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            leader: Gauge::default(),
            reconciles: Family::default(),
            journals_open: Gauge::default(),
            oldest_journal: Gauge::default(),
            claims: claims::Metrics::register(registry),
            conditions: conditions::Metrics::register(registry),
            default_class: default_class::Metrics::register(registry),
            max_unavailable: max_unavailable::Metrics::register(registry),
            actions: executor::ActionMetrics::register(registry),
        };
        registry.register(
            "controller_leader",
            "1 while this replica holds the controller Lease",
            metrics.leader.clone(),
        );
        registry.register(
            "controller_reconciles",
            "Reconciles, by controller and result",
            metrics.reconciles.clone(),
        );
        registry.register(
            "convergence_journals_open",
            "Convergence journals (ConfigMaps of StatefulSets being re-created) open now; reported by the leader",
            metrics.journals_open.clone(),
        );
        registry.register(
            "convergence_journal_oldest_timestamp_seconds",
            "When the oldest open convergence journal was created, Unix time; 0 while none is open",
            metrics.oldest_journal.clone(),
        );
        metrics
    }

    /// Leadership gained or lost. What only the leader knows is cleared on loss, so that a
    /// former leader does not keep reporting it beside the new one.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        if !leading {
            self.journals(&[]);
            self.conditions.past_deadline.forget_all();
        }
    }

    /// The convergence journals open now: a convergence takes seconds, so an old journal
    /// means one is stuck (a StatefulSet may be orphan-deleted and not re-created yet).
    pub fn journals(&self, open: &[Arc<ConfigMap>]) {
        let oldest = open
            .iter()
            .filter_map(|j| j.metadata.creation_timestamp.as_ref())
            .map(|t| t.0.as_second())
            .min();
        self.journals_open
            .set(i64::try_from(open.len()).unwrap_or(i64::MAX));
        self.oldest_journal.set(oldest.unwrap_or(0));
    }

    pub fn reconciled(&self, controller: &'static str, result: &'static str) {
        self.reconciles
            .get_or_create(&ReconcileLabels { controller, result })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(created: Option<&str>) -> Arc<ConfigMap> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "sa-journal.db.x", "creationTimestamp": created},
            }))
            .expect("configmap"),
        )
    }

    fn scraped(registry: &Registry) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
        text.lines()
            .filter(|l| l.starts_with("convergence_journal"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn journals_report_how_many_are_open_and_when_the_oldest_was_created() {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        assert_eq!(
            scraped(&registry),
            [
                "convergence_journals_open 0",
                "convergence_journal_oldest_timestamp_seconds 0"
            ]
        );
        metrics.set_leader(true);
        metrics.journals(&[
            journal(Some("2030-01-01T00:10:00Z")),
            journal(Some("2030-01-01T00:00:00Z")),
            journal(None),
        ]);
        assert_eq!(
            scraped(&registry),
            [
                "convergence_journals_open 3",
                "convergence_journal_oldest_timestamp_seconds 1893456000"
            ]
        );
        metrics.journals(&[journal(Some("2030-01-01T00:10:00Z"))]);
        assert_eq!(
            scraped(&registry)[1],
            "convergence_journal_oldest_timestamp_seconds 1893456600"
        );
        // A replica that loses the Lease stops reporting what only the leader watches.
        metrics.set_leader(false);
        assert_eq!(
            scraped(&registry),
            [
                "convergence_journals_open 0",
                "convergence_journal_oldest_timestamp_seconds 0"
            ]
        );
    }
}
