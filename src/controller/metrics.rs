//! Metrics every feature shares: leadership and reconciles. Each feature registers its own
//! (see its module), and the executor `controller_actions_total`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReconcileLabels {
    pub controller: &'static str,
    pub result: &'static str,
}

#[derive(Debug)]
pub(crate) struct ControllerMetrics {
    leader: Gauge,
    reconciles: Family<ReconcileLabels, Counter>,
}

impl ControllerMetrics {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            leader: Gauge::default(),
            reconciles: Family::default(),
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
        metrics
    }

    pub(crate) fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    pub(crate) fn reconciled(&self, controller: &'static str, result: &'static str) {
        self.reconciles
            .get_or_create(&ReconcileLabels { controller, result })
            .inc();
    }
}
