//! `serve` as a library: the cluster view (one watch per kind, or a `--state` file), the
//! capability prober and the companion controller on that view, and the webhook serving from
//! it. The binary's `serve` ([`crate::cli::serve`]) and the integration tests start it the
//! same way:
//!
//! ```ignore
//! Serve::new(config)
//!     .controller(Some(controller))
//!     .prober(prober)
//!     .run(shutdown)
//!     .await
//! ```

use std::path::PathBuf;

use crate::capabilities::{self, CapabilityCell};
use crate::cluster::watch::{self, WatchSettings};
use crate::cluster::{ClusterView, state_file};
use crate::controller::{Controller, ControllerConfig};
use crate::server::{Companion, ServeConfig, Server};
use crate::write_limit;

/// Where the view comes from.
enum Source {
    /// The cluster: through `client`, else the one the environment names (in-cluster, or
    /// `KUBECONFIG`), its writes limited.
    Cluster { client: Option<kube::Client> },
    /// A `--state` file: no cluster, so no controller and no prober.
    StateFile(PathBuf),
}

/// Everything `serve` runs, and how.
pub struct Serve {
    config: ServeConfig,
    source: Source,
    controller: Option<ControllerConfig>,
    prober: capabilities::run::Settings,
    write_limit: (f32, u32),
    watches: WatchSettings,
}

impl Serve {
    /// The webhook of `config` on the cluster the environment names, without the controller;
    /// the prober, the write limit and the watches as `serve`'s flags default them.
    pub fn new(config: ServeConfig) -> Self {
        Self {
            config,
            source: Source::Cluster { client: None },
            controller: None,
            prober: capabilities::run::Settings::default(),
            write_limit: (write_limit::DEFAULT_QPS, write_limit::DEFAULT_BURST),
            watches: WatchSettings::default(),
        }
    }

    /// The view read from a state file instead (`None`: from the cluster).
    pub fn state_file(mut self, path: Option<PathBuf>) -> Self {
        if let Some(path) = path {
            self.source = Source::StateFile(path);
        }
        self
    }

    /// The cluster through `client` (made by the caller: the write limit is then the
    /// caller's too).
    pub fn client(mut self, client: kube::Client) -> Self {
        self.source = Source::Cluster {
            client: Some(client),
        };
        self
    }

    /// The companion controller, or none.
    pub fn controller(mut self, controller: Option<ControllerConfig>) -> Self {
        self.controller = controller;
        self
    }

    /// How the capability prober runs.
    pub fn prober(mut self, prober: capabilities::run::Settings) -> Self {
        self.prober = prober;
        self
    }

    /// Writes per second and burst of the client `serve` makes.
    pub fn write_limit(mut self, qps: f32, burst: u32) -> Self {
        self.write_limit = (qps, burst);
        self
    }

    /// How the view's watches retry.
    pub fn watches(mut self, watches: WatchSettings) -> Self {
        self.watches = watches;
        self
    }

    /// Runs until `shutdown` resolves, then drains (see [`Server::run`]).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Self {
            config,
            source,
            controller,
            prober,
            write_limit: (qps, burst),
            watches,
        } = self;
        let (client, limit) = match source {
            Source::StateFile(path) => {
                let view = ClusterView::from_objects(state_file::load(&path)?);
                tracing::info!(state = %path.display(), counts = ?view.counts(), "cluster state loaded from file");
                if controller.is_some() {
                    tracing::info!(
                        "controller off: it needs a cluster, and state comes from a file"
                    );
                }
                return Server::new(config, view).run(shutdown).await;
            }
            Source::Cluster {
                client: Some(client),
            } => (client, None),
            Source::Cluster { client: None } => {
                let limit = write_limit::WriteLimit::new(qps, burst).map_err(anyhow::Error::msg)?;
                let kube_config = crate::connect::infer().await.map_err(|no_cluster| {
                    anyhow::anyhow!(
                        "{no_cluster}; use --state FILE to serve without a cluster, or set KUBECONFIG"
                    )
                })?;
                let client = crate::field_manager::client_from(kube_config, Some(&limit))?;
                (client, Some(limit))
            }
        };
        // Non-leading replicas keep the controller's kinds too: a takeover starts synced.
        let namespace = controller.as_ref().map(|c| c.namespace.as_str());
        let (view, driver) = watch::from_cluster_with(client.clone(), namespace, watches);
        tokio::spawn(driver);
        let mut server = Server::new(config, view.clone());
        if let Some(limit) = &limit {
            limit.register(server.registry());
        }
        // Every replica learns what the cluster does (a standby's webhook reads it too); the
        // webhook and the controller read the one cell.
        let cell = CapabilityCell::default();
        let prober = capabilities::run::Prober::new(prober, server.registry(), cell.clone())
            .with_health(server.health());
        server = server.with_capabilities(cell.clone());
        let stop = tokio_util::sync::CancellationToken::new();
        let probing = tokio::spawn(prober.run(client.clone(), Some(view.clone()), stop.clone()));
        let task = match controller {
            Some(controller) => {
                let controller = Controller::new(controller, server.registry(), cell)
                    .with_health(server.health());
                let controller = tokio::spawn(controller.run(client, view, stop.clone()));
                tokio::spawn(async move {
                    let _ = controller.await;
                    let _ = probing.await;
                })
            }
            None => probing,
        };
        server = server.with_companion(Companion { stop, task });
        server.run(shutdown).await
    }
}

/// SIGTERM (from the kubelet) or Ctrl-C (SIGINT). The handlers are installed when this is
/// called, not when the future is first polled: until then either signal would end the
/// process at once, without the shutdown sequence. Needs the runtime entered.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let wait = |kind| {
            let registered = signal(kind);
            async move {
                match registered {
                    Ok(mut stream) => {
                        stream.recv().await;
                    }
                    // Not deliverable as a shutdown then; the other signal still is.
                    Err(_) => std::future::pending().await,
                }
            }
        };
        let (term, interrupt) = (wait(SignalKind::terminate()), wait(SignalKind::interrupt()));
        async move {
            tokio::select! {
                _ = term => {}
                _ = interrupt => {}
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
