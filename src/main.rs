//! Command line: `serve` runs the webhook; `review` evaluates one AdmissionReview offline.

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use stateful_admission::admission::offline::{self, Phases};
use stateful_admission::admission::{Context, Phase, Policy};
use stateful_admission::cluster::{ClusterView, state_file};
use stateful_admission::controller::{ControllerConfig, Features};
use stateful_admission::server::{ListenerLimits, ServeConfig, Server, StateSource, TlsSource};
use stateful_admission::telemetry::{self, LogFormat};

#[derive(Parser)]
#[command(
    name = "stateful-admission",
    version,
    about = "Admission webhook and controller for StatefulSet volume claims, maxUnavailable, default StorageClasses and volume expansion"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTPS admission webhook (and the probe/metrics listener).
    Serve(Box<ServeArgs>),
    /// Evaluate one AdmissionReview offline as the apiserver would: mutate, apply the patch,
    /// validate. Prints the response AdmissionReview. Exit 0 allowed, 1 denied, 2 bad input.
    Review(ReviewArgs),
}

#[derive(Args, Clone)]
struct PolicyArgs {
    /// Deny, instead of warn about, maxUnavailable above replicas or above replicas - partition.
    #[arg(long, env = "STATEFUL_ADMISSION_STRICT_MAX_UNAVAILABLE")]
    strict_max_unavailable: bool,
    /// Copy a StatefulSet's maxUnavailable into the stateful-admission.io/max-unavailable
    /// annotation, for apiservers that drop the field.
    #[arg(long, env = "STATEFUL_ADMISSION_MAX_UNAVAILABLE_FALLBACK", default_value_t = true, action = clap::ArgAction::Set)]
    max_unavailable_fallback: bool,
    /// Allow lowering a claim's request to a value above its capacity, to recover from a
    /// failed expansion; when false any decrease is denied.
    #[arg(long, env = "STATEFUL_ADMISSION_EXPANSION_RECOVERY", default_value_t = true, action = clap::ArgAction::Set)]
    expansion_recovery: bool,
}

impl PolicyArgs {
    fn policy(&self) -> Policy {
        Policy {
            strict_max_unavailable: self.strict_max_unavailable,
            max_unavailable_fallback: self.max_unavailable_fallback,
            expansion_recovery: self.expansion_recovery,
        }
    }
}

#[derive(Args)]
struct ServeArgs {
    /// HTTPS address of the webhook (POST /mutate, POST /validate).
    #[arg(long, env = "STATEFUL_ADMISSION_ADDR", default_value = "0.0.0.0:8443")]
    addr: SocketAddr,
    /// Plain-HTTP address for /healthz, /readyz and /metrics.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_PROBE_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    probe_addr: SocketAddr,
    /// PEM certificate chain; reloaded when it changes on disk.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_TLS_CERT",
        required_unless_present = "self_signed",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// PEM private key matching --tls-cert.
    #[arg(long, env = "STATEFUL_ADMISSION_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Make a throwaway CA and certificate (for local use) instead of --tls-cert/--tls-key.
    #[arg(long, env = "STATEFUL_ADMISSION_SELF_SIGNED", conflicts_with_all = ["tls_cert", "tls_key"])]
    self_signed: bool,
    /// Directory for the --self-signed files (default: a new directory under the temp dir).
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_SELF_SIGNED_DIR",
        requires = "self_signed"
    )]
    self_signed_dir: Option<PathBuf>,
    /// Names of the --self-signed certificate (DNS names or IP addresses).
    #[arg(
        long = "self-signed-name",
        env = "STATEFUL_ADMISSION_SELF_SIGNED_NAMES",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,::1"
    )]
    self_signed_names: Vec<String>,
    /// Serve from a file of objects instead of a cluster (YAML or JSON; no kubeconfig needed).
    #[arg(long, env = "STATEFUL_ADMISSION_STATE")]
    state: Option<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
    /// How often to re-read the certificate files, besides file-system events.
    #[arg(long, env = "STATEFUL_ADMISSION_CERT_POLL_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    cert_poll_interval: Duration,
    /// After SIGTERM, keep accepting this long with readiness off before draining.
    #[arg(long, env = "STATEFUL_ADMISSION_SHUTDOWN_DELAY", default_value = "0s", value_parser = parse_duration)]
    shutdown_delay: Duration,
    /// Longest wait for in-flight requests once draining.
    #[arg(long, env = "STATEFUL_ADMISSION_SHUTDOWN_TIMEOUT", default_value = "25s", value_parser = parse_duration)]
    shutdown_timeout: Duration,
    /// Longest time to read a request and answer it.
    #[arg(long, env = "STATEFUL_ADMISSION_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    request_timeout: Duration,
    /// Longest time for a TLS handshake and for HTTP/1 request headers.
    #[arg(long, env = "STATEFUL_ADMISSION_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    handshake_timeout: Duration,
    /// Open connections at most.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_MAX_CONNECTIONS",
        default_value_t = 1024
    )]
    max_connections: usize,
    #[command(flatten)]
    controller: ControllerArgs,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Args)]
struct ControllerArgs {
    /// Run the companion controller inside serve (needs a cluster; off with --state).
    #[arg(long, env = "STATEFUL_ADMISSION_CONTROLLER", default_value_t = true, action = clap::ArgAction::Set)]
    controller: bool,
    /// Namespace of the controller's Lease, journals and probes (its own namespace).
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_CONTROLLER_NAMESPACE",
        default_value = "default"
    )]
    controller_namespace: String,
    /// This replica's identity in the Lease (default: the HOSTNAME, i.e. the pod name).
    #[arg(long, env = "STATEFUL_ADMISSION_CONTROLLER_IDENTITY")]
    controller_identity: Option<String>,
    /// Name of the Lease that elects the acting replica.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_LEASE_NAME",
        default_value = "stateful-admission-controller"
    )]
    lease_name: String,
    /// Reconcile every object again at least this often.
    #[arg(long, env = "STATEFUL_ADMISSION_RESYNC", default_value = "5m", value_parser = parse_duration)]
    resync: Duration,
    /// Patch existing claims to desired templates (policy InPlace) and report claim status.
    #[arg(long, env = "STATEFUL_ADMISSION_CLAIM_ROLLOUT", default_value_t = true, action = clap::ArgAction::Set)]
    claim_rollout: bool,
    /// Re-create a StatefulSet with its desired templates (journaled orphan delete, create).
    #[arg(long, env = "STATEFUL_ADMISSION_CONVERGE", default_value_t = true, action = clap::ArgAction::Set)]
    converge: bool,
    /// Give classless, unbound claims the default StorageClass once one exists.
    #[arg(long, env = "STATEFUL_ADMISSION_RETROACTIVE_DEFAULT_CLASS", default_value_t = true, action = clap::ArgAction::Set)]
    retroactive_default_class: bool,
    /// Maintain Available and Progressing conditions on StatefulSets.
    #[arg(long, env = "STATEFUL_ADMISSION_STATEFULSET_CONDITIONS", default_value_t = true, action = clap::ArgAction::Set)]
    statefulset_conditions: bool,
    /// Drive maxUnavailable rolling updates where the apiserver's gate is off.
    #[arg(long, env = "STATEFUL_ADMISSION_MAX_UNAVAILABLE_DRIVER", default_value_t = true, action = clap::ArgAction::Set)]
    max_unavailable_driver: bool,
}

impl ControllerArgs {
    fn config(&self) -> Option<ControllerConfig> {
        if !self.controller {
            return None;
        }
        let identity = self
            .controller_identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("stateful-admission-{}", std::process::id()));
        Some(ControllerConfig {
            namespace: self.controller_namespace.clone(),
            identity,
            lease_name: self.lease_name.clone(),
            resync: self.resync,
            features: Features {
                claim_rollout: self.claim_rollout,
                converge: self.converge,
                retroactive_default_class: self.retroactive_default_class,
                conditions: self.statefulset_conditions,
                max_unavailable: self.max_unavailable_driver,
            },
            ..ControllerConfig::default()
        })
    }
}

#[derive(Args)]
struct LogArgs {
    /// Log format.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// Log level or filter (RUST_LOG syntax); RUST_LOG overrides it.
    #[arg(long, env = "STATEFUL_ADMISSION_LOG_LEVEL", default_value = "info")]
    log_level: String,
}

#[derive(Args)]
struct ReviewArgs {
    /// Cluster state to review against (YAML or JSON: a List, a stream, or single objects).
    #[arg(long, env = "STATEFUL_ADMISSION_STATE")]
    state: Option<PathBuf>,
    /// Run one webhook only; by default both, in the apiserver's order.
    #[arg(long, value_enum)]
    phase: Option<PhaseArg>,
    #[command(flatten)]
    policy: PolicyArgs,
    /// AdmissionReview JSON file, or - for standard input.
    review: PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PhaseArg {
    Mutate,
    Validate,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("not a duration like 10s, 500ms or 2m: {e}"))?;
    Duration::try_from(d).map_err(|_| "must not be negative".to_owned())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Review(args) => review(args),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    telemetry::init(args.log.log_format, &args.log.log_level);
    let tls = match (args.self_signed, args.tls_cert, args.tls_key) {
        (true, _, _) => TlsSource::SelfSigned {
            dir: args.self_signed_dir.unwrap_or_else(|| {
                std::env::temp_dir().join(format!("stateful-admission-{}", std::process::id()))
            }),
            names: args.self_signed_names,
        },
        (false, Some(cert), Some(key)) => TlsSource::Files { cert, key },
        _ => {
            eprintln!("error: --tls-cert and --tls-key, or --self-signed, are required");
            return ExitCode::from(2);
        }
    };
    let config = ServeConfig {
        addr: args.addr,
        probe_addr: args.probe_addr,
        tls,
        state: args.state.map_or(StateSource::Cluster, StateSource::File),
        policy: args.policy.policy(),
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
        controller: args.controller.config(),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(Server::new(config).run(shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "serve failed");
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// SIGTERM (from the kubelet) or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn review(args: ReviewArgs) -> ExitCode {
    telemetry::init(LogFormat::Text, "warn");
    let bad_input = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    let view = match &args.state {
        Some(path) => match state_file::load(path) {
            Ok(objects) => ClusterView::from_objects(objects),
            Err(e) => return bad_input(e.to_string()),
        },
        None => ClusterView::empty(),
    };
    let mut body = Vec::new();
    let read = if args.review.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut body).map(|_| ())
    } else {
        std::fs::read(&args.review).map(|b| body = b)
    };
    if let Err(e) = read {
        return bad_input(format!("cannot read {}: {e}", args.review.display()));
    }
    let phases = match args.phase {
        None => Phases::Both,
        Some(PhaseArg::Mutate) => Phases::Only(Phase::Mutate),
        Some(PhaseArg::Validate) => Phases::Only(Phase::Validate),
    };
    let policy = args.policy.policy();
    let ctx = Context {
        view: &view,
        policy: &policy,
    };
    let outcome = match offline::review(&body, phases, &ctx) {
        Ok(outcome) => outcome,
        Err(e) => return bad_input(format!("{}: {e}", args.review.display())),
    };
    match serde_json::to_string_pretty(&outcome.review) {
        Ok(text) => println!("{text}"),
        Err(e) => return bad_input(e.to_string()),
    }
    if outcome.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
