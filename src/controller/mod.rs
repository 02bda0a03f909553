//! The companion controller: applies what the webhook recorded and what the proposals ask of
//! a controller (claim rollout and convergence, retroactive default class, StatefulSet
//! conditions, maxUnavailable where the gate is off). It runs inside `serve` under a Lease so
//! that one replica acts. Each feature separates planning (pure: state in, actions out) from
//! acting (API calls), and makes no write when nothing needs to change.

pub mod action;
pub(crate) mod claim_rollout;
pub(crate) mod conditions;
pub(crate) mod context;
pub mod convergence;
pub(crate) mod default_class;
pub mod executor;
pub mod fence;
pub(crate) mod leader;
pub mod max_unavailable;
pub(crate) mod metrics;
pub(crate) mod sets;
pub(crate) mod snapshot;
#[cfg(test)]
pub(crate) mod test_api;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::capabilities::CapabilityCell;
use crate::cluster::{ClusterView, Kind, Kinds};
use crate::health::{self, Health};
use claim_rollout::ClaimRollout;
use conditions::Conditions;
pub use context::{Ctx, Error};
use convergence::Convergence;
use default_class::RetroactiveDefaultClass;
pub use leader::LeaseTiming;
use max_unavailable::MaxUnavailable;
use metrics::ControllerMetrics;
use sets::SetFeatures;
pub use snapshot::SetSnapshot;

/// Which features run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features {
    /// Patch existing claims to the desired templates (policy `InPlace`), report claim status.
    pub claim_rollout: bool,
    /// Re-create a set with its desired templates (journaled orphan delete and create).
    pub converge: bool,
    /// Give classless, unbound claims the default StorageClass (KEP-3333).
    pub retroactive_default_class: bool,
    /// Maintain `Available` and `Progressing` conditions (KEP-2804).
    pub conditions: bool,
    /// Drive rolling updates with maxUnavailable where the apiserver's gate is off (KEP-961).
    pub max_unavailable: bool,
}

impl Default for Features {
    fn default() -> Self {
        Self {
            claim_rollout: true,
            converge: true,
            retroactive_default_class: true,
            conditions: true,
            max_unavailable: true,
        }
    }
}

/// Settings of the controller, from the command line.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Namespace of the Lease and the journals (the controller's own).
    pub namespace: String,
    /// This replica's name in the Lease (the pod name).
    pub identity: String,
    pub lease_name: String,
    pub timing: LeaseTiming,
    /// Every object is reconciled again at least this often.
    pub resync: Duration,
    pub features: Features,
    /// How often a convergence in flight (a set being deleted, a journal whose set is gone)
    /// is looked at again.
    pub converge_poll: Duration,
    /// Act, or only report what would be done.
    pub mode: executor::Mode,
    /// Restart (evict) a replica's pod whose claim waits for it to finish growing its file
    /// system, for sets without the `restart-pods-for-resize` annotation.
    pub restart_pods_for_resize: bool,
    /// How long a claim waits at `FileSystemResizePending` before its pod is restarted.
    pub resize_restart_grace: Duration,
    /// Least time between two writes of one set's conditions: news within it is written at its
    /// end, the latest only (see `conditions::pace`).
    pub conditions_interval: Duration,
}

/// Default of [`ControllerConfig::conditions_interval`].
pub const DEFAULT_CONDITIONS_INTERVAL: Duration = Duration::from_secs(1);

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            namespace: "default".to_owned(),
            identity: "stateful-admission".to_owned(),
            lease_name: "stateful-admission-controller".to_owned(),
            timing: LeaseTiming::default(),
            resync: Duration::from_secs(300),
            features: Features::default(),
            converge_poll: Duration::from_secs(1),
            mode: executor::Mode::Enforce,
            restart_pods_for_resize: false,
            resize_restart_grace: crate::rollout::restart::DEFAULT_GRACE,
            conditions_interval: DEFAULT_CONDITIONS_INTERVAL,
        }
    }
}

/// The controller, registered in the metrics registry and ready to run: the shared metrics,
/// the executor's, and each enabled feature with its own.
pub struct Controller {
    config: ControllerConfig,
    metrics: Arc<ControllerMetrics>,
    actions: executor::ActionMetrics,
    features: SetFeatures,
    default_class: Option<Arc<RetroactiveDefaultClass>>,
    capabilities: CapabilityCell,
    health: Arc<Health>,
}

impl Controller {
    /// `capabilities` is the cell the prober writes and the webhook reads (the entry point
    /// owns it); every feature reads what the cluster does from it.
    pub fn new(
        config: ControllerConfig,
        registry: &mut Registry,
        capabilities: CapabilityCell,
    ) -> Self {
        let metrics = Arc::new(ControllerMetrics::register(registry));
        let actions = executor::ActionMetrics::register(registry);
        let f = &config.features;
        let features = SetFeatures {
            claim_rollout: f
                .claim_rollout
                .then(|| Arc::new(ClaimRollout::register(registry))),
            convergence: (f.claim_rollout || f.converge)
                .then(|| Arc::new(Convergence::register(registry))),
            conditions: f
                .conditions
                .then(|| Arc::new(Conditions::register(registry))),
            max_unavailable: f
                .max_unavailable
                .then(|| Arc::new(MaxUnavailable::register(registry, capabilities.clone()))),
        };
        let default_class = f
            .retroactive_default_class
            .then(|| Arc::new(RetroactiveDefaultClass::register(registry)));
        Self {
            config,
            metrics,
            actions,
            features,
            default_class,
            capabilities,
            health: Arc::default(),
        }
    }

    /// Where the controller says what it is doing and waiting for (`/readyz?verbose`).
    pub fn with_health(mut self, health: Arc<Health>) -> Self {
        if let Some(convergence) = &self.features.convergence {
            convergence.set_health(health.clone());
        }
        self.health = health;
        self
    }

    /// Campaigns for the Lease and runs the features while leading, until `stop`; then
    /// finishes in-flight work and releases the Lease. A term whose Lease is lost (taken over,
    /// or not renewed by the renew deadline) is fenced and its work in flight dropped, and
    /// the campaign starts again. `view` must hold the controller's kinds
    /// (pods and the journals of the controller's namespace: see
    /// [`watch::from_cluster`](crate::cluster::watch::from_cluster)); every feature reads it.
    pub async fn run(self, client: Client, view: ClusterView, stop: CancellationToken) {
        if let Err(why) = self.config.timing.validate() {
            tracing::error!(%why, "controller not started: its Lease timings are inconsistent");
            return;
        }
        if view.journal_namespace() != Some(self.config.namespace.as_str()) {
            tracing::error!(
                namespace = %self.config.namespace,
                view = ?view.journal_namespace(),
                "controller not started: the cluster view does not watch its pods and journals"
            );
            return;
        }
        // A replica leads only with a complete view: a takeover never plans from a half-filled
        // one (a missing pod would look like an unavailable one).
        loop {
            let since = view.synced_kinds();
            let waiting: Vec<&str> = view
                .sync_status()
                .into_iter()
                .filter(|(_, synced)| !synced)
                .map(|(k, _)| k.plural())
                .collect();
            if waiting.is_empty() {
                break;
            }
            self.health.set(
                HEALTH,
                health::State::Waiting,
                format!(
                    "waiting for {} to list before campaigning for the Lease",
                    waiting.join(", ")
                ),
            );
            tokio::select! {
                _ = stop.cancelled() => return,
                progressed = view.sync_progressed(since) => if progressed.is_err() { return },
            }
        }
        // Nor does it act on guesses where a first probe answers within moments (a class
        // patch the apiserver would drop, a lowered request it would refuse): it waits for
        // each capability to be asked once, at most CAPABILITIES_WAIT (unknown afterwards is
        // tried, and its answer teaches).
        let mut asked = self.capabilities.subscribe();
        if !asked.borrow().asked() {
            self.health.set(
                HEALTH,
                health::State::Waiting,
                "waiting for the first probe of what the cluster does before campaigning for the Lease",
            );
            let first = asked.wait_for(|c| c.asked());
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::timeout(CAPABILITIES_WAIT, first) => {}
            }
        }
        self.health.set(
            HEALTH,
            health::State::Ok,
            format!("standby: campaigning for Lease {}", self.config.lease_name),
        );
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.config.namespace);
        let mut elector = leader::Elector::new(
            leases,
            &self.config.lease_name,
            &self.config.identity,
            self.config.timing.clone(),
        );
        elector = elector.with_health(self.health.clone());
        if self.config.features.max_unavailable {
            let capabilities = self.capabilities.clone();
            elector = elector.with_status(Box::new(move || {
                vec![(
                    crate::names::LEASE_MAX_UNAVAILABLE_GATE,
                    gate_text(&capabilities.get()),
                )]
            }));
        }
        loop {
            if !elector.acquire(&stop).await {
                return;
            }
            self.leading(true);
            let term = stop.child_token();
            // Cancelled when this term is lost: its writes are refused from then on, even if
            // a later term renews the clock.
            let lost = CancellationToken::new();
            let fence = Arc::new(fence::Fence::new(
                elector.clock(),
                lost.clone(),
                self.actions.fenced(),
            ));
            let exec = executor::Executor::new(
                client.clone(),
                self.config.mode,
                &self.config.identity,
                self.actions.clone(),
            )
            .with_fence(fence);
            let ctx = Arc::new(Ctx::new(
                client.clone(),
                self.config.clone(),
                view.clone(),
                exec,
                self.capabilities.clone(),
            ));
            // Aborted with this future: a controller that is dropped (a crash, in tests) must
            // not keep acting.
            let mut features = AbortOnDrop(tokio::spawn(run_features(
                ctx,
                self.features.clone(),
                self.default_class.clone(),
                self.metrics.clone(),
                term.clone(),
            )));
            let stopped_while_leading = elector.hold(&stop).await;
            if !stopped_while_leading {
                // Lost: what is in flight is dropped at its next await, not waited for (the
                // fence refuses it anyway); the next campaign starts at once.
                lost.cancel();
                features.0.abort();
            }
            // Stopped: the features finish their step under a Lease still valid, then it is
            // released.
            term.cancel();
            match (&mut features.0).await {
                Err(error) if !error.is_cancelled() => {
                    tracing::error!(%error, "controller features ended abnormally");
                }
                _ => {}
            }
            self.leading(false);
            if stopped_while_leading {
                elector.release().await;
                return;
            }
        }
    }

    /// Leadership gained or lost. What only the leader knows starts over, so that a former
    /// leader does not keep reporting it beside the new one.
    fn leading(&self, leading: bool) {
        self.metrics.set_leader(leading);
        self.health.set(
            HEALTH,
            health::State::Ok,
            if leading {
                format!(
                    "leading (Lease {}), mode {}",
                    self.config.lease_name,
                    self.config.mode.as_str()
                )
            } else {
                format!("standby: campaigning for Lease {}", self.config.lease_name)
            },
        );
        if let Some(convergence) = &self.features.convergence
            && !leading
        {
            convergence.leadership_lost();
        }
        if let Some(conditions) = &self.features.conditions {
            conditions.new_term();
        }
    }
}

/// The controller's line on the health board.
const HEALTH: &str = "controller";

/// The longest wait for the first probe of what the cluster does before campaigning.
const CAPABILITIES_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The gate as the Lease tells it: `enabled`, `disabled`, or `unknown` with why.
fn gate_text(capabilities: &crate::capabilities::Capabilities) -> String {
    let learned = capabilities.get(crate::capabilities::Name::MaxUnavailable);
    match max_unavailable::GateStatus::of(capabilities) {
        max_unavailable::GateStatus::Unknown => format!("unknown: {}", learned.how.detail()),
        known => known.as_str().to_owned(),
    }
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs every enabled feature until `stop`.
async fn run_features(
    ctx: Arc<Ctx>,
    set_features: SetFeatures,
    default_class: Option<Arc<RetroactiveDefaultClass>>,
    metrics: Arc<ControllerMetrics>,
    stop: CancellationToken,
) {
    tracing::info!(features = ?ctx.config.features, mode = ctx.config.mode.as_str(), "controller running");
    // Each part starts once the kinds it reads have listed (the Lease is taken with a whole
    // view, so this waits only where a relist is under way).
    let synced = |kinds: &[Kind]| {
        let (view, stop) = (ctx.view.clone(), stop.clone());
        let kinds = Kinds::of(kinds);
        async move {
            tokio::select! {
                _ = stop.cancelled() => false,
                synced = view.wait_kinds(kinds) => synced.is_ok(),
            }
        }
    };
    let sets = async {
        // Every kind a set's features read (the journals' own loop waits for journals).
        let kinds = [
            Kind::StatefulSet,
            Kind::Namespace,
            Kind::StorageClass,
            Kind::Claim,
            Kind::Pod,
        ];
        if set_features.any() && synced(&kinds).await {
            sets::run(ctx.clone(), set_features.clone(), metrics, stop.clone()).await;
        }
    };
    let journals = async {
        if let Some(convergence) = &set_features.convergence
            && synced(&[Kind::Journal, Kind::StatefulSet, Kind::Namespace]).await
        {
            convergence.run_journals(ctx.clone(), stop.clone()).await;
        }
    };
    // An absent set (deleted by its convergence, not created again yet) has no reconcile of its
    // own: its claims keep rolling from its journal.
    let absent = async {
        if let Some(claim_rollout) = &set_features.claim_rollout
            && synced(&[
                Kind::Journal,
                Kind::StatefulSet,
                Kind::StorageClass,
                Kind::Claim,
                Kind::Pod,
            ])
            .await
        {
            claim_rollout.run_absent(ctx.clone(), stop.clone()).await;
        }
    };
    let classes = async {
        if let Some(default_class) = &default_class
            && synced(&[Kind::Claim, Kind::StorageClass, Kind::Namespace]).await
        {
            default_class.run(ctx.clone(), stop.clone()).await;
        }
    };
    let sweep = async {
        if let Some(max_unavailable) = &set_features.max_unavailable {
            max_unavailable.run_sweep(ctx.clone(), stop.clone()).await;
        }
    };
    tokio::join!(sets, journals, absent, classes, sweep);
}
