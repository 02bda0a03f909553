//! The command line's flags, as clap reads them: what each subcommand takes, its defaults and
//! environment names, and the conversion of flags into the library's configuration types.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::admission::{AdmissionMode, Policy};
use crate::capabilities::{self, run::Settings as ProberSettings};
use crate::controller::executor;
use crate::controller::{ControllerConfig, Features, LeaseTiming};
use crate::telemetry::LogFormat;
use crate::write_limit;

#[derive(Parser)]
#[command(
    name = "stateful-admission",
    version,
    about = "Admission webhook and controller for StatefulSet volume claims, maxUnavailable, default StorageClasses and volume expansion"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    Status(crate::status::Args),
    /// Print the health checks for GitOps tools: Argo CD's for StatefulSets (as an argocd-cm
    /// patch, Argo CD Helm chart values, or the Lua script alone) or Flux's (Kustomization
    /// healthCheckExprs). They say Progressing while a storage rollout is under way and
    /// Degraded where it cannot finish, as `status --wait` does.
    Gitops(GitopsArgs),
}

#[derive(Args)]
pub struct GitopsArgs {
    /// What to print.
    #[arg(value_enum)]
    pub snippet: crate::gitops::Snippet,
}

#[derive(Args)]
pub struct CheckArgs {
    /// Kubeconfig context to use (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Namespace of the release (default: the context's namespace, as Helm takes it).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Helm release name; the objects are named as the chart names them.
    #[arg(long, default_value = "stateful-admission")]
    pub release: String,
    /// Name of the controller's Lease (chart value controller.leaderElection.leaseName;
    /// default: <fullname>-leader); the Deployment's --lease-name wins where it can be read.
    #[arg(long)]
    pub lease_name: Option<String>,
    /// Port of the webhook Service (chart value service.port).
    #[arg(long, default_value_t = 443)]
    pub service_port: i32,
    /// Namespace for the dry-run requests: one the webhooks cover.
    #[arg(long, default_value = "default")]
    pub probe_namespace: String,
    /// Output format; json is printed in every outcome, an error as a failed check.
    #[arg(
        long,
        short = 'o',
        value_enum,
        default_value = "text",
        value_name = "text|json"
    )]
    pub output: CheckOutput,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckOutput {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum CertsCommand {
    /// Write a CA (ca.crt) and a serving certificate (tls.crt, tls.key) for a Service's DNS
    /// names: NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local.
    Generate(CertsGenerateArgs),
}

#[derive(Args)]
pub struct CertsGenerateArgs {
    /// Name of the Service the apiserver calls.
    #[arg(long)]
    pub service: String,
    /// Namespace of the Service.
    #[arg(long)]
    pub namespace: String,
    /// Directory to write into (created if missing; existing files are replaced).
    #[arg(long)]
    pub out: PathBuf,
    /// Days the CA is valid.
    #[arg(long, default_value_t = 365)]
    pub ca_days: i64,
    /// Days the serving certificate is valid.
    #[arg(long, default_value_t = 90)]
    pub days: i64,
    /// Also write the CA's private key (ca.key), to sign more certificates later.
    #[arg(long)]
    pub with_ca_key: bool,
}

/// The binary keeps its own CA and serving certificate in a Secret and renews them.
#[derive(Args)]
pub struct SelfManagedArgs {
    /// Keep the CA and serving certificate in a Secret, renew them at two thirds of their
    /// lifetime, and patch caBundle into the webhook configurations named below.
    #[arg(long, env = "STATEFUL_ADMISSION_SELF_MANAGED_CERTS", conflicts_with_all = ["tls_cert", "tls_key", "self_signed"], requires = "cert_namespace")]
    pub self_managed_certs: bool,
    /// Secret holding the self-managed certificates.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_CERT_SECRET",
        default_value = "stateful-admission-certs"
    )]
    pub cert_secret: String,
    /// Namespace of that Secret and of the webhook Service (usually the pod's own).
    #[arg(long, env = "STATEFUL_ADMISSION_CERT_NAMESPACE")]
    pub cert_namespace: Option<String>,
    /// Name of the webhook Service; the certificate carries its DNS names.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_SERVICE_NAME",
        default_value = "stateful-admission"
    )]
    pub service_name: String,
    /// MutatingWebhookConfiguration whose caBundle to keep current.
    #[arg(long, env = "STATEFUL_ADMISSION_MUTATING_WEBHOOK_CONFIGURATION")]
    pub mutating_webhook_configuration: Option<String>,
    /// ValidatingWebhookConfiguration whose caBundle to keep current.
    #[arg(long, env = "STATEFUL_ADMISSION_VALIDATING_WEBHOOK_CONFIGURATION")]
    pub validating_webhook_configuration: Option<String>,
    /// Writable directory where the serving pair is placed for the TLS listener.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_CERT_DIR",
        default_value = "/tmp/stateful-admission-certs"
    )]
    pub cert_dir: PathBuf,
    /// How often to re-read the Secret (and so pick up another replica's renewal).
    #[arg(long, env = "STATEFUL_ADMISSION_CERT_CHECK_INTERVAL", default_value = "1m", value_parser = parse_duration)]
    pub cert_check_interval: Duration,
}

#[derive(Args, Clone)]
pub struct PolicyArgs {
    /// Deny, instead of warn about, maxUnavailable above replicas or above replicas - partition.
    #[arg(long, env = "STATEFUL_ADMISSION_STRICT_MAX_UNAVAILABLE")]
    pub strict_max_unavailable: bool,
    /// Copy a StatefulSet's maxUnavailable into the stateful-admission.io/max-unavailable
    /// annotation, for apiservers that drop the field.
    #[arg(long, env = "STATEFUL_ADMISSION_MAX_UNAVAILABLE_FALLBACK", default_value_t = true, action = clap::ArgAction::Set)]
    pub max_unavailable_fallback: bool,
    /// Allow lowering a claim's request to a value above its capacity, to recover from a
    /// failed expansion; when false any decrease is denied.
    #[arg(long, env = "STATEFUL_ADMISSION_EXPANSION_RECOVERY", default_value_t = true, action = clap::ArgAction::Set)]
    pub expansion_recovery: bool,
    /// Users the StatefulSet controller creates claims as (comma-separated); only their claims
    /// get a set's recorded template values, a claim anyone else creates keeps its own.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_STATEFULSET_CONTROLLER_USERS",
        value_delimiter = ',',
        default_value = "system:serviceaccount:kube-system:statefulset-controller,system:kube-controller-manager"
    )]
    pub statefulset_controller_users: Vec<String>,
    /// What a denial of the rules does: enforce denies the request; warn allows it unchanged
    /// with the denial as a warning, counted in admission_would_deny_total and logged.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_ADMISSION_MODE",
        value_enum,
        default_value = "enforce",
        value_name = "enforce|warn"
    )]
    pub admission_mode: AdmissionModeArg,
    /// What the cluster does, stated instead of learned (repeatable or comma-separated
    /// NAME=VALUE, e.g. claim-volume-attributes-class=dropped): for clusters whose policies
    /// refuse the probes, and for review, which has no cluster to ask. Names: max-unavailable,
    /// claim-volume-attributes-class (kept|dropped|absent), volume-attributes-class-api
    /// (v1|v1beta1|v1alpha1|none), retroactive-default-class, expansion-recovery
    /// (accepted|refused), native-template-edits (volumeClaimUpdatePolicy|volumeClaimUpdateStrategy|no).
    #[arg(
        long = "capability",
        env = "STATEFUL_ADMISSION_CAPABILITY",
        value_delimiter = ',',
        value_name = "NAME=VALUE",
        value_parser = capabilities::parse_flag
    )]
    pub capabilities: Vec<(capabilities::Name, capabilities::Value)>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum AdmissionModeArg {
    Enforce,
    Warn,
}

impl PolicyArgs {
    pub fn policy(&self) -> Policy {
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
            // `serve` says whether its controller lowers holds; offline, what an install does.
            coordinated_rollout: true,
            capabilities: std::sync::Arc::new(
                capabilities::Capabilities::unknown(
                    "offline: no cluster to learn from (state it with --capability)",
                )
                .with_flags(&self.capabilities),
            ),
        }
    }
}

#[derive(Args)]
pub struct ServeArgs {
    /// HTTPS address of the webhook (POST /mutate, POST /validate).
    #[arg(long, env = "STATEFUL_ADMISSION_ADDR", default_value = "0.0.0.0:8443")]
    pub addr: SocketAddr,
    /// Plain-HTTP address for /healthz, /readyz and /metrics.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_PROBE_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    pub probe_addr: SocketAddr,
    /// PEM certificate chain; reloaded when it changes on disk.
    // Which certificate source is missing is told in one line by `serve`, naming all three.
    #[arg(long, env = "STATEFUL_ADMISSION_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key matching --tls-cert.
    #[arg(long, env = "STATEFUL_ADMISSION_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Make a throwaway CA and certificate (for local use) instead of --tls-cert/--tls-key.
    #[arg(long, env = "STATEFUL_ADMISSION_SELF_SIGNED", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub self_signed: bool,
    /// Directory for the --self-signed files, kept on exit (default: a new directory under
    /// the temp dir, removed on exit).
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_SELF_SIGNED_DIR",
        requires = "self_signed"
    )]
    pub self_signed_dir: Option<PathBuf>,
    /// Names of the --self-signed certificate (DNS names or IP addresses).
    #[arg(
        long = "self-signed-name",
        value_name = "NAME",
        env = "STATEFUL_ADMISSION_SELF_SIGNED_NAME",
        value_delimiter = ',',
        default_value = "localhost,127.0.0.1,::1"
    )]
    pub self_signed_names: Vec<String>,
    /// Set when the names came from the deprecated `STATEFUL_ADMISSION_SELF_SIGNED_NAMES`.
    #[arg(skip)]
    pub deprecated_names_env: bool,
    /// Serve from a file of objects instead of a cluster (YAML or JSON; no kubeconfig needed).
    #[arg(long, env = "STATEFUL_ADMISSION_STATE")]
    pub state: Option<PathBuf>,
    /// Longest wait between attempts to re-open a watch the apiserver did not answer
    /// (connection refused or reset, 429, 5xx): from 200ms doubling, jittered, so that the
    /// view is current again within this long of the apiserver's return.
    #[arg(long, env = "STATEFUL_ADMISSION_WATCH_RECONNECT_MAX_DELAY", default_value = "2s", value_parser = parse_positive_duration)]
    pub watch_reconnect_max_delay: Duration,
    #[command(flatten)]
    pub self_managed: SelfManagedArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// How often to re-read the certificate files, besides file-system events.
    #[arg(long, env = "STATEFUL_ADMISSION_CERT_POLL_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub cert_poll_interval: Duration,
    /// After SIGTERM, keep accepting this long with readiness off before draining.
    #[arg(long, env = "STATEFUL_ADMISSION_SHUTDOWN_DELAY", default_value = "0s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// Longest wait for in-flight requests once draining.
    #[arg(long, env = "STATEFUL_ADMISSION_SHUTDOWN_TIMEOUT", default_value = "25s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// Longest time to read a request and answer it.
    #[arg(long, env = "STATEFUL_ADMISSION_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// Longest time for a TLS handshake and for HTTP/1 request headers.
    #[arg(long, env = "STATEFUL_ADMISSION_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,
    /// Open connections at most.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_MAX_CONNECTIONS",
        default_value_t = 1024
    )]
    pub max_connections: usize,
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Writes to the apiserver per second on average (client-side token bucket; reads and
    /// the leader election Lease are not limited), as kube-controller-manager's flag.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_KUBE_API_QPS",
        default_value_t = write_limit::DEFAULT_QPS,
        value_parser = parse_qps
    )]
    pub kube_api_qps: f32,
    /// Writes allowed at once above --kube-api-qps.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_KUBE_API_BURST",
        default_value_t = write_limit::DEFAULT_BURST,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub kube_api_burst: u32,
    #[command(flatten)]
    pub log: LogArgs,
}

fn parse_qps(text: &str) -> Result<f32, String> {
    let qps: f32 = text.parse().map_err(|e| format!("{e}"))?;
    write_limit::WriteLimit::new(qps, 1)?;
    Ok(qps)
}

#[derive(Args)]
pub struct ControllerArgs {
    /// Run the companion controller inside serve (needs a cluster; off with --state).
    #[arg(long, env = "STATEFUL_ADMISSION_CONTROLLER", default_value_t = true, action = clap::ArgAction::Set)]
    pub controller: bool,
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
    pub controller_mode: ControllerModeArg,
    /// Namespace of the controller's Lease, journals and probes (its own namespace).
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_CONTROLLER_NAMESPACE",
        default_value = "default"
    )]
    pub controller_namespace: String,
    /// This replica's identity in the Lease (default: the HOSTNAME, i.e. the pod name).
    #[arg(long, env = "STATEFUL_ADMISSION_CONTROLLER_IDENTITY")]
    pub controller_identity: Option<String>,
    /// Name of the Lease that elects the acting replica.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_LEASE_NAME",
        default_value = "stateful-admission-controller"
    )]
    pub lease_name: String,
    /// How long another replica waits, from when it sees the Lease unchanged, before it
    /// takes it (client-go's LeaseDuration); whole seconds.
    #[arg(long, env = "STATEFUL_ADMISSION_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// The leader writes only until this long after the start of its last successful
    /// renewal, and steps down then; shorter than --lease-duration (client-go's
    /// RenewDeadline).
    #[arg(long, env = "STATEFUL_ADMISSION_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// Time between renewals, and between attempts to take the Lease; shorter than
    /// --renew-deadline (client-go's RetryPeriod).
    #[arg(long, env = "STATEFUL_ADMISSION_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// Reconcile every object again at least this often.
    #[arg(long, env = "STATEFUL_ADMISSION_RESYNC", default_value = "5m", value_parser = parse_duration)]
    pub resync: Duration,
    /// Patch existing claims to desired templates (policy InPlace) and report claim status.
    #[arg(long, env = "STATEFUL_ADMISSION_CLAIM_ROLLOUT", default_value_t = true, action = clap::ArgAction::Set)]
    pub claim_rollout: bool,
    /// Re-create a StatefulSet with its desired templates (journaled orphan delete, create).
    #[arg(long, env = "STATEFUL_ADMISSION_CONVERGE", default_value_t = true, action = clap::ArgAction::Set)]
    pub converge: bool,
    /// Give classless, unbound claims the default StorageClass once one exists.
    #[arg(long, env = "STATEFUL_ADMISSION_RETROACTIVE_DEFAULT_CLASS", default_value_t = true, action = clap::ArgAction::Set)]
    pub retroactive_default_class: bool,
    /// Maintain Available and Progressing conditions on StatefulSets.
    #[arg(long, env = "STATEFUL_ADMISSION_STATEFULSET_CONDITIONS", default_value_t = true, action = clap::ArgAction::Set)]
    pub statefulset_conditions: bool,
    /// Least time between two writes of one StatefulSet's conditions: what changes within it
    /// is written at its end, the latest only (0s: each change at once).
    #[arg(long, env = "STATEFUL_ADMISSION_STATEFULSET_CONDITIONS_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub statefulset_conditions_interval: Duration,
    /// How often a convergence in flight (set being deleted, journal whose set is gone) is
    /// looked at again.
    #[arg(long, env = "STATEFUL_ADMISSION_CONVERGE_POLL", default_value = "1s", value_parser = parse_duration)]
    pub converge_poll: Duration,
    /// Restart (evict, through the Eviction API) a replica's pod whose claim waits for it to be
    /// re-created to finish growing its file system (offline node expansion), for sets without
    /// the annotation stateful-admission.io/restart-pods-for-resize.
    #[arg(long, env = "STATEFUL_ADMISSION_RESTART_PODS_FOR_RESIZE", default_value_t = false, action = clap::ArgAction::Set)]
    pub restart_pods_for_resize: bool,
    /// How long a claim waits at FileSystemResizePending before its pod is restarted (a volume
    /// that grows online finishes within seconds and is never restarted for).
    #[arg(long, env = "STATEFUL_ADMISSION_RESIZE_RESTART_GRACE", default_value = "60s", value_parser = parse_duration)]
    pub resize_restart_grace: Duration,
    /// Drive maxUnavailable rolling updates where the apiserver's gate is off.
    #[arg(long, env = "STATEFUL_ADMISSION_MAX_UNAVAILABLE_DRIVER", default_value_t = true, action = clap::ArgAction::Set)]
    pub max_unavailable_driver: bool,
    /// The apiserver's MaxUnavailableStatefulSet gate: auto probes it with a dry-run create of
    /// a StatefulSet in the controller namespace; enabled or disabled states it (the same as
    /// --capability max-unavailable=kept or =dropped) and skips the probe.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_MAX_UNAVAILABLE_GATE",
        value_enum,
        default_value = "auto"
    )]
    pub max_unavailable_gate: GateArg,
    /// Time between probes of what the cluster does (discovery, OpenAPI and dry runs in the
    /// controller namespace); a /version change probes again at once.
    #[arg(long, alias = "max-unavailable-gate-probe-interval", env = "STATEFUL_ADMISSION_CAPABILITY_PROBE_INTERVAL", default_value = "1h", value_parser = parse_duration)]
    pub capability_probe_interval: Duration,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ControllerModeArg {
    Enforce,
    Observe,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum GateArg {
    Auto,
    Enabled,
    Disabled,
}

impl ControllerArgs {
    /// Whether this controller lowers coordinated rollouts' holds: it runs, enforcing, with
    /// the claim rollout on.
    pub fn lowers_holds(&self) -> bool {
        self.controller
            && self.claim_rollout
            && matches!(self.controller_mode, ControllerModeArg::Enforce)
    }

    /// The Lease timings as given (see [`LeaseTiming::validate`]).
    pub fn timing(&self) -> LeaseTiming {
        LeaseTiming {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        }
    }

    pub fn config(&self) -> Option<ControllerConfig> {
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
            timing: self.timing(),
            resync: self.resync,
            features: Features {
                claim_rollout: self.claim_rollout,
                converge: self.converge,
                retroactive_default_class: self.retroactive_default_class,
                conditions: self.statefulset_conditions,
                max_unavailable: self.max_unavailable_driver,
            },
            converge_poll: self.converge_poll,
            restart_pods_for_resize: self.restart_pods_for_resize,
            resize_restart_grace: self.resize_restart_grace,
            conditions_interval: self.statefulset_conditions_interval,
            mode: match self.controller_mode {
                ControllerModeArg::Enforce => executor::Mode::Enforce,
                ControllerModeArg::Observe => executor::Mode::Observe,
            },
        })
    }

    /// How the capability prober of `serve` runs: in the controller namespace (also where the
    /// controller is off: the chart's release namespace), with the values `stated` by
    /// `--capability` and `--max-unavailable-gate`.
    pub fn prober(&self, stated: &[(capabilities::Name, capabilities::Value)]) -> ProberSettings {
        let mut flags = stated.to_vec();
        let gate = match self.max_unavailable_gate {
            GateArg::Auto => None,
            GateArg::Enabled => Some(capabilities::Value::Kept),
            GateArg::Disabled => Some(capabilities::Value::Dropped),
        };
        if let Some(value) = gate
            && !flags
                .iter()
                .any(|(n, _)| *n == capabilities::Name::MaxUnavailable)
        {
            flags.push((capabilities::Name::MaxUnavailable, value));
        }
        ProberSettings {
            namespace: self.controller_namespace.clone(),
            interval: self.capability_probe_interval,
            flags,
            ..ProberSettings::default()
        }
    }
}

#[derive(Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(
        long,
        env = "STATEFUL_ADMISSION_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Log level or filter (RUST_LOG syntax); RUST_LOG overrides it.
    #[arg(long, env = "STATEFUL_ADMISSION_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

#[derive(Args)]
pub struct ReviewArgs {
    /// Cluster state to review against (YAML or JSON: a List, a stream, or single objects).
    #[arg(long, env = "STATEFUL_ADMISSION_STATE")]
    pub state: Option<PathBuf>,
    /// Run one webhook only; by default both, in the apiserver's order.
    #[arg(long, value_enum)]
    pub phase: Option<PhaseArg>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// How the response's patch is printed: base64, exactly as the webhook sends it, or json,
    /// the decoded JSON-patch array.
    #[arg(long, value_enum, default_value = "base64", value_name = "base64|json")]
    pub patch: PatchFormat,
    /// Whether --patch was given (on the command line), not only defaulted.
    #[arg(skip)]
    pub patch_given: bool,
    /// What is printed: the response AdmissionReview (the default), or the object as the
    /// apiserver would store it after the mutation (nothing when the review is denied).
    #[arg(
        long,
        value_enum,
        default_value = "review",
        value_name = "review|object"
    )]
    pub show: Show,
    /// AdmissionReview JSON file, or - for standard input.
    pub review: PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PhaseArg {
    Mutate,
    Validate,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PatchFormat {
    Base64,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Show {
    Review,
    Object,
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be more than 0s".to_owned());
    }
    Ok(d)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("not a duration like 10s, 500ms or 2m: {e}"))?;
    Duration::try_from(d).map_err(|_| "must not be negative".to_owned())
}
