//! Command line: `serve` runs the webhook and the controller; `review` evaluates one
//! AdmissionReview offline; `check` verifies an install; `status` shows storage rollouts;
//! `certs generate` writes certificates for local development. The flags and what the
//! one-shot commands print are in the library's `cli` module; here is the wiring of `serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use stateful_admission::capabilities::{self, CapabilityCell};
use stateful_admission::certs::{rotation::Lifetimes, self_managed::SelfManagedConfig};
use stateful_admission::cli::{self, CertsCommand, Command, ServeArgs};
use stateful_admission::cluster::watch::{self, WatchSettings};
use stateful_admission::cluster::{ClusterView, state_file};
use stateful_admission::controller::{Controller, ControllerConfig};
use stateful_admission::server::{Companion, ListenerLimits, ServeConfig, Server, TlsSource};
use stateful_admission::telemetry::{self, LogFormat};
use stateful_admission::write_limit;

// jemalloc, returning freed memory to the system (see the module).
stateful_admission::global_allocator!();

fn main() -> ExitCode {
    let cli = cli::parse();
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Review(args) => cli::review::run(args),
        Command::Certs(CertsCommand::Generate(args)) => cli::certs::generate(args),
        Command::Check(args) => cli::check::run(args),
        Command::Status(args) => status(args),
        Command::Gitops(args) => {
            use std::io::Write;
            let text = stateful_admission::gitops::render(args.snippet);
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                // A reader that went away (`| head`) is not an error of ours.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("error: cannot write the output: {e}");
                    ExitCode::FAILURE
                }
                _ => ExitCode::SUCCESS,
            }
        }
    }
}

fn status(args: stateful_admission::status::Args) -> ExitCode {
    // Every outcome is said in a line of its own; the client's error lines (one per 5xx or
    // connection failure, while --wait retries) would only repeat them. RUST_LOG turns them on.
    telemetry::init(LogFormat::Text, "off");
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => ExitCode::from(runtime.block_on(stateful_admission::status::run(args))),
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            ExitCode::from(2)
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let log_format = args.log.log_format;
    telemetry::init(log_format, &args.log.log_level);
    if args.deprecated_names_env {
        tracing::warn!(
            "{} is deprecated; set STATEFUL_ADMISSION_SELF_SIGNED_NAME instead",
            cli::DEPRECATED_SELF_SIGNED_NAMES
        );
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Before anything is made that shutdown must undo: a signal during startup is handled too.
    let shutdown = {
        let _runtime = runtime.enter();
        shutdown_signal()
    };
    // The --self-signed directory we made, removed when this guard drops: after the server
    // stopped on SIGTERM or Ctrl-C, or failed. One the user named stays.
    let mut self_signed_temp = None;
    let tls = match (args.self_signed, args.tls_cert, args.tls_key) {
        _ if args.self_managed.self_managed_certs => {
            let certs = args.self_managed;
            let Some(namespace) = certs.cert_namespace else {
                eprintln!("error: --self-managed-certs needs --cert-namespace");
                return ExitCode::from(2);
            };
            TlsSource::SelfManaged(SelfManagedConfig {
                secret: certs.cert_secret,
                namespace,
                service: certs.service_name,
                mutating_webhook: certs.mutating_webhook_configuration,
                validating_webhook: certs.validating_webhook_configuration,
                dir: certs.cert_dir,
                check_interval: certs.cert_check_interval,
                lifetimes: Lifetimes::default(),
            })
        }
        (true, _, _) => {
            let dir = match args.self_signed_dir {
                Some(dir) => dir,
                None => match tempfile::Builder::new()
                    .prefix("stateful-admission-")
                    .tempdir()
                {
                    Ok(temp) => self_signed_temp.insert(temp).path().to_owned(),
                    Err(error) => {
                        eprintln!("error: cannot create a directory for --self-signed: {error}");
                        return ExitCode::FAILURE;
                    }
                },
            };
            TlsSource::SelfSigned {
                dir,
                names: args.self_signed_names,
            }
        }
        (false, Some(cert), Some(key)) => TlsSource::Files { cert, key },
        _ => {
            eprintln!(
                "error: serve needs a serving certificate: --tls-cert FILE --tls-key FILE, --self-signed (a throwaway one for local use) or --self-managed-certs (kept in a Secret)"
            );
            return ExitCode::from(2);
        }
    };
    let config = ServeConfig {
        addr: args.addr,
        probe_addr: args.probe_addr,
        tls,
        policy: stateful_admission::admission::Policy {
            // A hold is started only where this process's controller lowers it.
            coordinated_rollout: args.state.is_none() && args.controller.lowers_holds(),
            ..args.policy.policy()
        },
        cert_poll_interval: args.cert_poll_interval,
        shutdown_delay: args.shutdown_delay,
        request_timeout: args.request_timeout,
        limits: ListenerLimits {
            max_connections: args.max_connections,
            handshake_timeout: args.handshake_timeout,
            header_read_timeout: args.handshake_timeout,
            drain_timeout: args.shutdown_timeout,
            ..ListenerLimits::default()
        },
    };
    let controller = args.controller.config();
    let prober = args.controller.prober(&args.policy.capabilities);
    let limit = (args.kube_api_qps, args.kube_api_burst);
    let watches = WatchSettings {
        reconnect_max_delay: args.watch_reconnect_max_delay,
    };
    let result = runtime.block_on(run_serve(
        config, args.state, controller, prober, limit, watches, shutdown,
    ));
    drop(self_signed_temp);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Said once: a plain line beside text logs, an event where a pipeline reads JSON.
        Err(error) => {
            match log_format {
                LogFormat::Text => eprintln!("error: {error:#}"),
                LogFormat::Json => tracing::error!(error = format!("{error:#}"), "serve failed"),
            }
            ExitCode::FAILURE
        }
    }
}

/// Where everything `serve` runs meets: the cluster view (one watch per kind, or the
/// `--state` file), the companion controller on that view, and the webhook serving from it.
async fn run_serve(
    config: ServeConfig,
    state: Option<PathBuf>,
    controller: Option<ControllerConfig>,
    prober: capabilities::run::Settings,
    (qps, burst): (f32, u32),
    watches: WatchSettings,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let Some(path) = state else {
        let limit = write_limit::WriteLimit::new(qps, burst).map_err(anyhow::Error::msg)?;
        let kube_config = stateful_admission::connect::infer()
            .await
            .map_err(|no_cluster| {
                anyhow::anyhow!(
                    "{no_cluster}; use --state FILE to serve without a cluster, or set KUBECONFIG"
                )
            })?;
        let client = stateful_admission::field_manager::client_from(kube_config, Some(&limit))?;
        // Non-leading replicas keep the controller's kinds too: a takeover starts synced.
        let namespace = controller.as_ref().map(|c| c.namespace.as_str());
        let (view, driver) = watch::from_cluster_with(client.clone(), namespace, watches);
        tokio::spawn(driver);
        let mut server = Server::new(config, view.clone());
        limit.register(server.registry());
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
        return server.run(shutdown).await;
    };
    let _ = prober;
    let view = ClusterView::from_objects(state_file::load(&path)?);
    tracing::info!(state = %path.display(), counts = ?view.counts(), "cluster state loaded from file");
    if controller.is_some() {
        tracing::info!("controller off: it needs a cluster, and state comes from a file");
    }
    Server::new(config, view).run(shutdown).await
}

/// SIGTERM (from the kubelet) or Ctrl-C (SIGINT). The handlers are installed when this is
/// called, not when the future is first polled: until then either signal would end the
/// process at once, without the shutdown sequence. Needs the runtime entered.
fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
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
