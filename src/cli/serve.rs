//! `serve`: its flags made into a [`Serve`] (the serving certificate's source, the listener's
//! limits, the controller and the prober), run until SIGTERM or Ctrl-C.

use std::process::ExitCode;

use super::ServeArgs;
use crate::certs::{rotation::Lifetimes, self_managed::SelfManagedConfig};
use crate::cluster::watch::WatchSettings;
use crate::serve::{Serve, shutdown_signal};
use crate::server::{ListenerLimits, ServeConfig, TlsSource};
use crate::telemetry::{self, LogFormat};

/// `serve`: the webhook and the companion controller until SIGTERM or Ctrl-C.
pub fn run(args: ServeArgs) -> ExitCode {
    let log_format = args.log.log_format;
    telemetry::init(log_format, &args.log.log_level);
    if args.deprecated_names_env {
        tracing::warn!(
            "{} is deprecated; set STATEFUL_ADMISSION_SELF_SIGNED_NAME instead",
            super::DEPRECATED_SELF_SIGNED_NAMES
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
        policy: crate::admission::Policy {
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
    let (qps, burst) = (args.kube_api_qps, args.kube_api_burst);
    let watches = WatchSettings {
        reconnect_max_delay: args.watch_reconnect_max_delay,
    };
    let serve = Serve::new(config)
        .state_file(args.state)
        .controller(controller)
        .prober(prober)
        .write_limit(qps, burst)
        .watches(watches);
    let result = runtime.block_on(serve.run(shutdown));
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
