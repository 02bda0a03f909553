//! The shell around the rules: an HTTPS admission listener, a plain-HTTP probe listener,
//! readiness on the cluster view that feeds the rules, and the shutdown sequence that ties
//! them together. The view, and whatever else runs in the process (the controller), come from
//! the entry point.

pub mod listener;
pub mod metrics;
pub(crate) mod probes;
pub mod routes;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::admission::Policy;
use crate::capabilities::CapabilityCell;
use crate::cluster::{ClusterView, Kind, Kinds};
use crate::health::Health;
pub use listener::ListenerLimits;

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsSource {
    Files {
        cert: PathBuf,
        key: PathBuf,
    },
    /// A throwaway CA and certificate written into this directory.
    SelfSigned {
        dir: PathBuf,
        names: Vec<String>,
    },
    /// A CA and certificate kept in a Secret and renewed by this process.
    SelfManaged(crate::certs::self_managed::SelfManagedConfig),
}

/// Everything `serve` needs; built from the command line.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub addr: SocketAddr,
    pub probe_addr: SocketAddr,
    pub tls: TlsSource,
    pub policy: Policy,
    pub cert_poll_interval: Duration,
    /// Time between readiness turning false and the listener closing, so that endpoints
    /// stop routing to this pod before it stops accepting.
    pub shutdown_delay: Duration,
    pub request_timeout: Duration,
    pub limits: ListenerLimits,
}

/// Work that runs beside the webhook in the process (the companion controller): told to stop
/// when draining begins, so that it finishes its step and hands its Lease over while the
/// listener still serves, and waited for (up to the drain timeout) before `run` returns.
pub struct Companion {
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

/// Owns the configuration and the view, and runs the webhook until `shutdown` resolves.
pub struct Server {
    config: ServeConfig,
    view: ClusterView,
    registry: Registry,
    capabilities: Option<CapabilityCell>,
    companion: Option<Companion>,
    /// What the other parts of the process say of themselves, for `/readyz?verbose`.
    health: Arc<Health>,
}

impl Server {
    /// A server answering from `view`; it turns ready once the view has synced.
    pub fn new(config: ServeConfig, view: ClusterView) -> Self {
        Self {
            config,
            view,
            registry: Registry::with_prefix("stateful_admission"),
            capabilities: None,
            companion: None,
            health: Arc::default(),
        }
    }

    /// The board the controller (and whatever else runs beside) writes its state on.
    pub fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    /// The registry `/metrics` serves, for what else runs in the process to register in.
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Shares what the capability prober learns with the rules.
    pub fn with_capabilities(self, capabilities: CapabilityCell) -> Self {
        Self {
            capabilities: Some(capabilities),
            ..self
        }
    }

    /// Work to stop and wait for in the shutdown sequence (see [`Companion`]).
    pub fn with_companion(self, companion: Companion) -> Self {
        Self {
            companion: Some(companion),
            ..self
        }
    }

    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Self {
            config,
            view,
            mut registry,
            capabilities,
            companion,
            health,
        } = self;
        let readiness = Arc::new(probes::Readiness::default());
        let metrics = Arc::new(metrics::Metrics::register(&mut registry));
        view.register_metrics(&mut registry);
        let stop_accepting = CancellationToken::new();
        let stop_background = CancellationToken::new();

        // Ready once what the webhook's verdicts read has listed; the rest (claims, and the
        // controller's pods and journals) is logged when it has.
        let synced_view = view.clone();
        let synced = readiness.clone();
        tokio::spawn(async move {
            let webhook = Kinds::of(&Kind::WEBHOOK);
            if synced_view.wait_kinds(webhook).await.is_ok() {
                tracing::info!(counts = ?synced_view.counts(), "webhook view synced: ready");
                synced.set_synced();
            }
            if synced_view.wait_synced().await.is_ok() {
                tracing::info!(counts = ?synced_view.counts(), "cluster view synced");
            }
        });
        let cert_metrics = match &config.tls {
            TlsSource::SelfManaged(_) => {
                Some(crate::certs::self_managed::Metrics::register(&mut registry))
            }
            _ => None,
        };
        let registry = Arc::new(registry);

        let (cert_path, key_path) = match &config.tls {
            TlsSource::Files { cert, key } => (cert.clone(), key.clone()),
            TlsSource::SelfSigned { dir, names } => {
                let generated = crate::certs::generate("stateful-admission", names, 7, 7)?;
                let paths = generated.write(dir, false)?;
                tracing::info!(ca = %paths.ca_cert.display(), "self-signed certificate written; trust this CA to call the webhook");
                eprintln!("self-signed CA certificate: {}", paths.ca_cert.display());
                (paths.cert, paths.key)
            }
            TlsSource::SelfManaged(certs) => {
                let client = crate::field_manager::client().await.context(
                    "self-managed certificates need a cluster (kubeconfig or in-cluster)",
                )?;
                let paths = crate::certs::self_managed::start(
                    client,
                    certs.clone(),
                    cert_metrics.clone().unwrap_or_default(),
                    stop_background.clone(),
                )
                .await?;
                (paths.cert, paths.key)
            }
        };
        let certs = tls::CertReloader::load(&cert_path, &key_path)
            .context("cannot load the serving certificate")?;
        certs.report_expiry(&metrics);
        let tls_config = certs.server_config()?;
        tokio::spawn(certs.clone().watch(
            config.cert_poll_interval,
            metrics.clone(),
            stop_background.clone(),
        ));

        let probe_listener = TcpListener::bind(config.probe_addr)
            .await
            .with_context(|| format!("cannot bind the probe address {}", config.probe_addr))?;
        let probe_addr = probe_listener.local_addr()?;
        let probe_app = probes::router(readiness.clone(), registry.clone(), view.clone(), health);
        let probe_stop = stop_background.clone();
        let probe_server = tokio::spawn(async move {
            axum::serve(probe_listener, probe_app)
                .with_graceful_shutdown(async move { probe_stop.cancelled().await })
                .await
        });

        let mut state = routes::AdmissionState::new(view, config.policy.clone(), metrics.clone());
        if let Some(capabilities) = capabilities {
            state = state.with_capabilities(capabilities);
        }
        // A drain that outlasted the request timeout would turn a 413 or 415 into a 408.
        state.early_reply_drain.timeout = state
            .early_reply_drain
            .timeout
            .min(config.request_timeout / 2);
        let state = Arc::new(state);
        let app = routes::router(state).layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            config.request_timeout,
        ));
        let listener = TcpListener::bind(config.addr)
            .await
            .with_context(|| format!("cannot bind the webhook address {}", config.addr))?;
        let addr = listener.local_addr()?;
        readiness.set_tls_bound();
        tracing::info!(%addr, %probe_addr, "webhook listening");

        let serving = tokio::spawn(listener::serve_tls(
            listener,
            tls_config,
            app,
            config.limits.clone(),
            stop_accepting.clone(),
        ));

        shutdown.await;
        readiness.set_draining();
        // The controller finishes its current step and hands the Lease over while we drain.
        if let Some(companion) = &companion {
            companion.stop.cancel();
        }
        tracing::info!(delay = ?config.shutdown_delay, "shutting down: readiness off, draining");
        tokio::time::sleep(config.shutdown_delay).await;
        stop_accepting.cancel();
        serving.await.context("the HTTPS listener failed")?;
        if let Some(companion) = companion
            && tokio::time::timeout(config.limits.drain_timeout, companion.task)
                .await
                .is_err()
        {
            tracing::warn!("controller did not stop within the drain timeout");
        }
        stop_background.cancel();
        if let Ok(Err(error)) = probe_server.await {
            tracing::warn!(%error, "probe listener ended with an error");
        }
        tracing::info!("stopped");
        Ok(())
    }
}
