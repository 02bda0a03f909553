//! Runs the companion controller in-process against the fake API server, with short Lease
//! timings, the way `serve` runs it against a cluster.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use stateful_admission::capabilities::{self, CapabilityCell};
use stateful_admission::cluster::{ClusterView, watch};
use stateful_admission::controller::{Controller, ControllerConfig, Features, LeaseTiming};
use stateful_admission::health::{Health, Part};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fake_apiserver::FakeApiServer;

/// Namespace the controller runs in (Lease, journals, probes).
pub const CONTROLLER_NAMESPACE: &str = "stateful-admission";

/// Every feature off; tests switch on what they exercise.
pub fn no_features() -> Features {
    Features {
        claim_rollout: false,
        converge: false,
        retroactive_default_class: false,
        conditions: false,
        max_unavailable: false,
    }
}

/// A configuration with fast Lease timings (takeover within ~2 s).
pub fn config(identity: &str, features: Features) -> ControllerConfig {
    ControllerConfig {
        namespace: CONTROLLER_NAMESPACE.to_owned(),
        identity: identity.to_owned(),
        timing: LeaseTiming {
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1500),
            retry_period: Duration::from_millis(200),
        },
        resync: Duration::from_secs(30),
        features,
        ..ControllerConfig::default()
    }
}

/// A client for `api` as `serve` builds one: with the project's user agent, without kube's
/// retry layer.
pub fn client(api: &FakeApiServer) -> kube::Client {
    client_with_agent(api, stateful_admission::field_manager::USER_AGENT)
}

/// [`client`], its user agent naming `identity` after the project's
/// (`stateful-admission/<version> (replica-a)`), so that the fake's write records tell
/// replicas apart.
pub fn client_as(api: &FakeApiServer, identity: &str) -> kube::Client {
    client_with_agent(
        api,
        &format!(
            "{} ({identity})",
            stateful_admission::field_manager::USER_AGENT
        ),
    )
}

fn client_with_agent(api: &FakeApiServer, agent: &str) -> kube::Client {
    let mut config = kube::Config::new(api.url().parse().expect("the server URL is a URI"));
    config.default_namespace = "default".into();
    config.default_retry = false;
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_str(agent).expect("a header value"),
    ));
    kube::Client::try_from(config).expect("a kube client for the fake API server")
}

/// How the capability prober beside a test controller runs: in the controller's namespace,
/// as `serve` runs it.
pub fn prober() -> capabilities::run::Settings {
    capabilities::run::Settings {
        namespace: CONTROLLER_NAMESPACE.to_owned(),
        ..capabilities::run::Settings::default()
    }
}

/// Whether a write record is `identity`'s (see [`client_as`]).
pub fn written_by(record: &super::fake_apiserver::WriteRecord, identity: &str) -> bool {
    record
        .user_agent
        .as_deref()
        .is_some_and(|agent| agent.ends_with(&format!("({identity})")))
}

/// A controller running on its own task, with its own view and metrics, beside a capability
/// prober (as in `serve`: every replica probes; the controller reads what it learns).
pub struct RunningController {
    stop: CancellationToken,
    handle: JoinHandle<()>,
    probing: JoinHandle<()>,
    registry: Arc<Registry>,
    view: ClusterView,
    health: Arc<Health>,
}

impl RunningController {
    pub fn start(api: &FakeApiServer, config: ControllerConfig) -> Self {
        Self::start_with(api, config, prober())
    }

    /// [`Self::start`] with the prober's settings.
    pub fn start_with(
        api: &FakeApiServer,
        config: ControllerConfig,
        prober: capabilities::run::Settings,
    ) -> Self {
        let client = client_as(api, &config.identity);
        let stop = CancellationToken::new();
        let (view, driver) = watch::from_cluster(client.clone(), Some(CONTROLLER_NAMESPACE));
        let driver_stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = driver => {}
                _ = driver_stop.cancelled() => {}
            }
        });
        let mut registry = Registry::default();
        let cell = CapabilityCell::default();
        let prober = capabilities::run::Prober::new(prober, &mut registry, cell.clone());
        let probing = tokio::spawn(prober.run(client.clone(), Some(view.clone()), stop.clone()));
        let health = Arc::new(Health::default());
        let controller = Controller::new(config, &mut registry, cell).with_health(health.clone());
        let handle = tokio::spawn(controller.run(client, view.clone(), stop.clone()));
        Self {
            stop,
            handle,
            probing,
            registry: Arc::new(registry),
            view,
            health,
        }
    }

    /// What the controller says of itself on `/readyz?verbose`, line by line (`serve` adds
    /// the webhook's lines around them).
    pub fn readyz_lines(&self) -> Vec<String> {
        self.health.parts().iter().map(Part::line).collect()
    }

    /// The controller's view of the cluster (what it plans from), to wait for it to have
    /// seen a change before the next step.
    pub fn view(&self) -> &ClusterView {
        &self.view
    }

    /// The Prometheus text of this controller's metrics.
    pub fn metrics(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("metrics encode");
        text
    }

    pub fn is_leader(&self) -> bool {
        self.metrics().lines().any(|l| l == "controller_leader 1")
    }

    /// Stops as `serve` does on SIGTERM (finish the current step, release the Lease).
    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.handle)
            .await
            .expect("controller stops within 10s")
            .expect("controller task");
    }

    /// Kills the controller without releasing anything, as a crash would.
    pub fn kill(self) {
        self.handle.abort();
        self.probing.abort();
    }

    /// The value of a counter or gauge without labels (0 when absent).
    pub fn metric(&self, name: &str) -> f64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }
}

/// A controller in a process of its own, as far as time goes: its own single-threaded
/// runtime on its own thread, which [`Isolated::freeze`] stops as SIGSTOP stops a process
/// (timers, connections and tasks all wait; the monotonic clock goes on).
pub struct Isolated {
    pub controller: RunningController,
    runtime: tokio::runtime::Handle,
    _done: tokio::sync::oneshot::Sender<()>,
}

impl Isolated {
    pub fn start(api: &FakeApiServer, config: ControllerConfig) -> Self {
        let (started, controller) = std::sync::mpsc::channel();
        let (done, finished) = tokio::sync::oneshot::channel::<()>();
        let api = api.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let controller = RunningController::start(&api, config);
                let _ = started.send((controller, tokio::runtime::Handle::current()));
                let _ = finished.await;
            });
        });
        let (controller, runtime) = controller.recv().expect("the controller started");
        Self {
            controller,
            runtime,
            _done: done,
        }
    }

    /// Freezes the whole runtime for `duration`; returns once it is frozen.
    pub async fn freeze(&self, duration: Duration) {
        let (frozen, is_frozen) = tokio::sync::oneshot::channel();
        self.runtime.spawn(async move {
            let _ = frozen.send(());
            std::thread::sleep(duration);
        });
        is_frozen.await.expect("the runtime froze");
    }
}

/// Polls `cond` every 20 ms until it holds or `within` passes.
pub async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
