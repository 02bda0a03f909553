//! Command line: `serve` runs the webhook; `review` evaluates one AdmissionReview offline;
//! `certs generate` writes certificates for local development.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use stateful_admission::admission::offline::{self, Phases};
use stateful_admission::admission::{AdmissionMode, Context, Phase, Policy};
use stateful_admission::certs::{self, rotation::Lifetimes, self_managed::SelfManagedConfig};
use stateful_admission::cluster::{ClusterView, state_file, watch};
use stateful_admission::controller::executor;
use stateful_admission::controller::max_unavailable::{self, GateMode};
use stateful_admission::controller::{Controller, ControllerConfig, Features};
use stateful_admission::server::{Companion, ListenerLimits, ServeConfig, Server, TlsSource};
use stateful_admission::telemetry::{self, LogFormat};
use stateful_admission::write_limit;

// jemalloc, returning freed memory to the system (see the module).
stateful_admission::global_allocator!();

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
    /// validate. Prints the response AdmissionReview (or, with --show object, the object the
    /// apiserver would store). Exit 0 allowed, 1 denied, 2 bad input.
    Review(ReviewArgs),
    /// Certificate tooling for local development.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Verify an install from outside: the webhook configurations and their caBundle,
    /// dry-run requests through the apiserver to the webhook, the controller's Lease, the
    /// ServiceAccount's permissions and the Kubernetes version. One line per check; exit 1
    /// when a check failed (warnings do not fail), 2 without a cluster configuration.
    Check(CheckArgs),
    /// Show where storage rollouts stand (recorded template changes, claims, convergence,
    /// maxUnavailable, conditions), follow them with --watch, or --wait for them: exit 0 when
    /// done, 1 when one failed, 2 on timeout or error. Read-only (get, list, watch).
    Status(stateful_admission::status::Args),
}

#[derive(Args)]
struct CheckArgs {
    /// Kubeconfig context to use (default: the current context).
    #[arg(long)]
    context: Option<String>,
    /// Namespace of the release (default: the context's namespace, as Helm takes it).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Helm release name; the objects are named as the chart names them.
    #[arg(long, default_value = "stateful-admission")]
    release: String,
    /// Name of the controller's Lease (chart value controller.leaderElection.leaseName;
    /// default: <fullname>-leader); the Deployment's --lease-name wins where it can be read.
    #[arg(long)]
    lease_name: Option<String>,
    /// Port of the webhook Service (chart value service.port).
    #[arg(long, default_value_t = 443)]
    service_port: i32,
    /// Namespace for the dry-run requests: one the webhooks cover.
    #[arg(long, default_value = "default")]
    probe_namespace: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "text", value_name = "text|json")]
    output: CheckOutput,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CheckOutput {
    Text,
    Json,
}

#[derive(Subcommand)]
enum CertsCommand {
    /// Write a CA (ca.crt) and a serving certificate (tls.crt, tls.key) for a Service's DNS
    /// names: NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local.
    Generate(CertsGenerateArgs),
}

#[derive(Args)]
struct CertsGenerateArgs {
    /// Name of the Service the apiserver calls.
    #[arg(long)]
    service: String,
    /// Namespace of the Service.
    #[arg(long)]
    namespace: String,
    /// Directory to write into (created if missing; existing files are replaced).
    #[arg(long)]
    out: PathBuf,
    /// Days the CA is valid.
    #[arg(long, default_value_t = 365)]
    ca_days: i64,
    /// Days the serving certificate is valid.
    #[arg(long, default_value_t = 90)]
    days: i64,
    /// Also write the CA's private key (ca.key), to sign more certificates later.
    #[arg(long)]
    with_ca_key: bool,
}

/// The binary keeps its own CA and serving certificate in a Secret and renews them.
#[derive(Args)]
struct SelfManagedArgs {
    /// Keep the CA and serving certificate in a Secret, renew them at two thirds of their
    /// lifetime, and patch caBundle into the webhook configurations named below.
    #[arg(long, env = "STATEFUL_ADMISSION_SELF_MANAGED_CERTS", conflicts_with_all = ["tls_cert", "tls_key", "self_signed"], requires = "cert_namespace")]
    self_managed_certs: bool,
    /// Secret holding the self-managed certificates.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_CERT_SECRET",
        default_value = "stateful-admission-certs"
    )]
    cert_secret: String,
    /// Namespace of that Secret and of the webhook Service (usually the pod's own).
    #[arg(long, env = "STATEFUL_ADMISSION_CERT_NAMESPACE")]
    cert_namespace: Option<String>,
    /// Name of the webhook Service; the certificate carries its DNS names.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_SERVICE_NAME",
        default_value = "stateful-admission"
    )]
    service_name: String,
    /// MutatingWebhookConfiguration whose caBundle to keep current.
    #[arg(long, env = "STATEFUL_ADMISSION_MUTATING_WEBHOOK_CONFIGURATION")]
    mutating_webhook_configuration: Option<String>,
    /// ValidatingWebhookConfiguration whose caBundle to keep current.
    #[arg(long, env = "STATEFUL_ADMISSION_VALIDATING_WEBHOOK_CONFIGURATION")]
    validating_webhook_configuration: Option<String>,
    /// Writable directory where the serving pair is placed for the TLS listener.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_CERT_DIR",
        default_value = "/tmp/stateful-admission-certs"
    )]
    cert_dir: PathBuf,
    /// How often to re-read the Secret (and so pick up another replica's renewal).
    #[arg(long, env = "STATEFUL_ADMISSION_CERT_CHECK_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    cert_check_interval: Duration,
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
    /// Users the StatefulSet controller creates claims as (comma-separated); only their claims
    /// get a set's recorded template values, a claim anyone else creates keeps its own.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_STATEFULSET_CONTROLLER_USERS",
        value_delimiter = ',',
        default_value = "system:serviceaccount:kube-system:statefulset-controller,system:kube-controller-manager"
    )]
    statefulset_controller_users: Vec<String>,
    /// What a denial of the rules does: enforce denies the request; warn allows it unchanged
    /// with the denial as a warning, counted in admission_would_deny_total and logged.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_ADMISSION_MODE",
        value_enum,
        default_value = "enforce",
        value_name = "enforce|warn"
    )]
    admission_mode: AdmissionModeArg,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum AdmissionModeArg {
    Enforce,
    Warn,
}

impl PolicyArgs {
    fn policy(&self) -> Policy {
        Policy {
            strict_max_unavailable: self.strict_max_unavailable,
            max_unavailable_fallback: self.max_unavailable_fallback,
            expansion_recovery: self.expansion_recovery,
            statefulset_controller_users: self
                .statefulset_controller_users
                .iter()
                .map(|u| u.trim())
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
                .collect(),
            admission_mode: match self.admission_mode {
                AdmissionModeArg::Enforce => AdmissionMode::Enforce,
                AdmissionModeArg::Warn => AdmissionMode::Warn,
            },
            ..Policy::default()
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
        required_unless_present_any = ["self_signed", "self_managed_certs"],
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
    self_managed: SelfManagedArgs,
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
    /// Writes to the apiserver per second on average (client-side token bucket; reads and
    /// the leader election Lease are not limited), as kube-controller-manager's flag.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_KUBE_API_QPS",
        default_value_t = write_limit::DEFAULT_QPS,
        value_parser = parse_qps
    )]
    kube_api_qps: f32,
    /// Writes allowed at once above --kube-api-qps.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_KUBE_API_BURST",
        default_value_t = write_limit::DEFAULT_BURST,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    kube_api_burst: u32,
    #[command(flatten)]
    log: LogArgs,
}

fn parse_qps(text: &str) -> Result<f32, String> {
    let qps: f32 = text.parse().map_err(|e| format!("{e}"))?;
    write_limit::WriteLimit::new(qps, 1)?;
    Ok(qps)
}

#[derive(Args)]
struct ControllerArgs {
    /// Run the companion controller inside serve (needs a cluster; off with --state).
    #[arg(long, env = "STATEFUL_ADMISSION_CONTROLLER", default_value_t = true, action = clap::ArgAction::Set)]
    controller: bool,
    /// enforce acts; observe plans everything and writes nothing but Events: each write it
    /// would make becomes a Would<Action> Event on its object, a log line and
    /// controller_actions_total{result="observed"}.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_CONTROLLER_MODE",
        value_enum,
        default_value = "enforce",
        value_name = "enforce|observe"
    )]
    controller_mode: ControllerModeArg,
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
    /// How often a convergence in flight (set being deleted, journal whose set is gone) is
    /// looked at again.
    #[arg(long, env = "STATEFUL_ADMISSION_CONVERGE_POLL", default_value = "1s", value_parser = parse_duration)]
    converge_poll: Duration,
    /// Drive maxUnavailable rolling updates where the apiserver's gate is off.
    #[arg(long, env = "STATEFUL_ADMISSION_MAX_UNAVAILABLE_DRIVER", default_value_t = true, action = clap::ArgAction::Set)]
    max_unavailable_driver: bool,
    /// The apiserver's MaxUnavailableStatefulSet gate: auto probes it with a dry-run create of
    /// a StatefulSet in the controller namespace; enabled or disabled skips the probe.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_MAX_UNAVAILABLE_GATE",
        value_enum,
        default_value = "auto"
    )]
    max_unavailable_gate: GateArg,
    /// Time between gate probes.
    #[arg(long, env = "STATEFUL_ADMISSION_MAX_UNAVAILABLE_GATE_PROBE_INTERVAL", default_value = "1h", value_parser = parse_duration)]
    max_unavailable_gate_probe_interval: Duration,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ControllerModeArg {
    Enforce,
    Observe,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum GateArg {
    Auto,
    Enabled,
    Disabled,
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
            max_unavailable: max_unavailable::Settings {
                gate: match self.max_unavailable_gate {
                    GateArg::Auto => GateMode::Auto,
                    GateArg::Enabled => GateMode::Enabled,
                    GateArg::Disabled => GateMode::Disabled,
                },
                probe_interval: self.max_unavailable_gate_probe_interval,
                ..max_unavailable::Settings::default()
            },
            converge_poll: self.converge_poll,
            mode: match self.controller_mode {
                ControllerModeArg::Enforce => executor::Mode::Enforce,
                ControllerModeArg::Observe => executor::Mode::Observe,
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
    /// How the response's patch is printed: base64, exactly as the webhook sends it (the
    /// default), or json, the decoded JSON-patch array.
    #[arg(long, value_enum, value_name = "base64|json")]
    patch: Option<PatchFormat>,
    /// What is printed: the response AdmissionReview (the default), or the object as the
    /// apiserver would store it after the mutation (nothing when the review is denied).
    #[arg(
        long,
        value_enum,
        default_value = "review",
        value_name = "review|object"
    )]
    show: Show,
    /// AdmissionReview JSON file, or - for standard input.
    review: PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PhaseArg {
    Mutate,
    Validate,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PatchFormat {
    Base64,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Show {
    Review,
    Object,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("not a duration like 10s, 500ms or 2m: {e}"))?;
    Duration::try_from(d).map_err(|_| "must not be negative".to_owned())
}

fn main() -> ExitCode {
    let cli = parse_cli();
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Review(args) => review(args),
        Command::Certs(CertsCommand::Generate(args)) => certs_generate(args),
        Command::Check(args) => check(args),
        Command::Status(args) => status(args),
    }
}

/// The command line; named `kubectl stateful-admission` in help and errors when run as the
/// kubectl plugin `kubectl-stateful_admission` (kubectl passes the words after the plugin's).
fn parse_cli() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let plugin = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|n| n.starts_with("kubectl-"));
    if !plugin {
        return Cli::parse();
    }
    let matches = Cli::command()
        .bin_name("kubectl stateful-admission")
        .get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn status(args: stateful_admission::status::Args) -> ExitCode {
    telemetry::init(LogFormat::Text, "error");
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => ExitCode::from(runtime.block_on(stateful_admission::status::run(args))),
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            ExitCode::from(2)
        }
    }
}

fn check(args: CheckArgs) -> ExitCode {
    use stateful_admission::check::{Release, gather};
    telemetry::init(LogFormat::Text, "error");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let report = runtime.block_on(async {
        let config = match &args.context {
            Some(context) => {
                let options = kube::config::KubeConfigOptions {
                    context: Some(context.clone()),
                    ..Default::default()
                };
                kube::Config::from_kubeconfig(&options)
                    .await
                    .map_err(|e| e.to_string())
            }
            None => kube::Config::infer().await.map_err(|e| e.to_string()),
        }?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let mut release = Release::of(&args.release, &namespace);
        release.service_port = args.service_port;
        release.probe_namespace = args.probe_namespace.clone();
        if let Some(lease) = &args.lease_name {
            release.lease = lease.clone();
        }
        Ok::<_, String>(gather::run(config, &release).await)
    });
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            eprintln!("error: no cluster configuration (kubeconfig or in-cluster): {error}");
            return ExitCode::from(2);
        }
    };
    let text = match args.output {
        CheckOutput::Text => report.text(),
        CheckOutput::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => json + "\n",
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    if let Err(e) = std::io::stdout().lock().write_all(text.as_bytes())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("error: cannot write the output: {e}");
        return ExitCode::FAILURE;
    }
    if report.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    telemetry::init(args.log.log_format, &args.log.log_level);
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
    };
    let controller = args.controller.config();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let limit = (args.kube_api_qps, args.kube_api_burst);
    match runtime.block_on(run_serve(config, args.state, controller, limit)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "serve failed");
            eprintln!("error: {error:#}");
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
    (qps, burst): (f32, u32),
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let Some(path) = state else {
        let limit = write_limit::WriteLimit::new(qps, burst).map_err(anyhow::Error::msg)?;
        let client = stateful_admission::field_manager::limited_client(&limit)
            .await
            .context("no cluster configuration (kubeconfig or in-cluster); use --state FILE to run without a cluster")?;
        // Non-leading replicas keep the controller's kinds too: a takeover starts synced.
        let namespace = controller.as_ref().map(|c| c.namespace.as_str());
        let (view, driver) = watch::from_cluster(client.clone(), namespace);
        tokio::spawn(driver);
        let mut server = Server::new(config, view.clone());
        limit.register(server.registry());
        if let Some(controller) = controller {
            let controller = Controller::new(controller, server.registry());
            // The controller probes the maxUnavailable gate; the webhook reads the same cell.
            server = server.with_max_unavailable_gate(controller.max_unavailable_gate());
            let stop = tokio_util::sync::CancellationToken::new();
            let task = tokio::spawn(controller.run(client, view, stop.clone()));
            server = server.with_companion(Companion { stop, task });
        }
        return server.run(shutdown_signal()).await;
    };
    let view = ClusterView::from_objects(state_file::load(&path)?);
    tracing::info!(state = %path.display(), counts = ?view.counts(), "cluster state loaded from file");
    if controller.is_some() {
        tracing::info!("controller off: it needs a cluster, and state comes from a file");
    }
    Server::new(config, view).run(shutdown_signal()).await
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

fn certs_generate(args: CertsGenerateArgs) -> ExitCode {
    if args.ca_days < 1 || args.days < 1 || args.days > args.ca_days {
        eprintln!("error: need 1 <= --days <= --ca-days");
        return ExitCode::from(2);
    }
    let names = certs::service_dns_names(&args.service, &args.namespace);
    let written = certs::generate(&args.service, &names, args.ca_days, args.days)
        .and_then(|generated| generated.write(&args.out, args.with_ca_key));
    match written {
        Ok(paths) => {
            println!("CA certificate:      {}", paths.ca_cert.display());
            println!("serving certificate: {}", paths.cert.display());
            println!("serving key:         {}", paths.key.display());
            println!("DNS names:           {}", names.join(", "));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn review(args: ReviewArgs) -> ExitCode {
    telemetry::init(LogFormat::Text, "warn");
    let bad_input = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    if args.show == Show::Object {
        if args.patch.is_some() {
            return bad_input(
                "--patch formats the printed review; --show object prints the object instead"
                    .to_owned(),
            );
        }
        if matches!(args.phase, Some(PhaseArg::Validate)) {
            return bad_input(
                "--show object needs the mutating phase: a validating webhook never changes the object"
                    .to_owned(),
            );
        }
    }
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
    if args.state.is_none() {
        // Rules that read cluster state (default classes, expansion limits, a set's stored
        // templates) see nothing, which is easy to mistake for their answer.
        eprintln!(
            "note: no --state given: reviewed against an empty cluster (no StorageClasses, Namespaces, StatefulSets or claims)"
        );
    }
    let allowed = outcome.allowed;
    let printed = match (args.show, args.patch.unwrap_or(PatchFormat::Base64)) {
        (Show::Review, PatchFormat::Base64) => outcome.review,
        (Show::Review, PatchFormat::Json) => match outcome.review_with_decoded_patch() {
            Ok(review) => review,
            Err(e) => return bad_input(e),
        },
        (Show::Object, _) if !allowed => {
            // Nothing would be stored; say why, as kubectl would.
            let message = outcome
                .review
                .pointer("/response/status/message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("denied");
            eprintln!("denied: {message}");
            return ExitCode::from(1);
        }
        (Show::Object, _) => match outcome.object {
            Some(object) => object,
            None => {
                return bad_input(format!(
                    "{}: --show object: the request carries no object (a DELETE or CONNECT)",
                    args.review.display()
                ));
            }
        },
    };
    let text = match serde_json::to_string_pretty(&printed) {
        Ok(text) => text,
        Err(e) => return bad_input(e.to_string()),
    };
    // A reader that stops early (`| head`) is not an error of ours.
    if let Err(e) = writeln!(std::io::stdout().lock(), "{text}")
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return bad_input(format!("cannot write the output: {e}"));
    }
    if allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
