//! What every scenario stands on: the clusters from the environment, the release installed once
//! per cluster, `serve` as a child process, the actors that play the kubelet, the provisioner and
//! the resizer, and waiting with a deadline.

#![allow(dead_code)] // Each scenario uses a part.

pub mod actors;
pub mod caps;
pub mod cluster;
pub mod front;
pub mod history;
pub mod install;
pub mod objects;
pub mod pods;
pub mod serve;
pub mod wait;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolume, Pod};

use crate::agreement::{Body, Expect};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use libtest_mimic::Completion;
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub use caps::{Caps, Choice, Need};
pub use cluster::Cluster;
pub use install::Install;
pub use serve::{Serve, ServeOptions};
pub use wait::eventually;

/// Environment variable naming an optional second cluster: scenarios that need a behaviour
/// the `KUBECONFIG` cluster lacks (typically one with the `MaxUnavailableStatefulSet` and
/// `VolumeAttributesClass` gates on, or off) run there.
pub const GATES_KUBECONFIG: &str = "E2E_GATES_KUBECONFIG";

/// Label on every cluster-scoped object a scenario creates (StorageClasses, volumes,
/// VolumeAttributesClasses), so that the scenario's cleanup finds them.
pub const SCENARIO_LABEL: &str = "e2e.stateful-admission.io/scenario";

/// Field manager of the test's own writes, as a user's tool would have one.
pub const USER: &str = "e2e-user";

/// The value of [`SCENARIO_LABEL`] for a scenario: its name where that fits a label value (63
/// characters, `pkg/util/validation.IsValidLabelValue`), else its first 54 characters and a
/// hash of the whole name, so two long names never share a value.
pub fn label_value(scenario: &str) -> String {
    const MAX: usize = 63;
    if scenario.len() <= MAX {
        return scenario.to_owned();
    }
    let head = scenario[..54].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{head}-{:08x}", fnv1a(scenario))
}

/// A stable 32-bit hash of a name (FNV-1a), for names that must be the same in every run.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// One of the clusters the environment names, in the order scenarios look at them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Which {
    /// `KUBECONFIG`: every scenario runs here that can.
    Default,
    /// `E2E_GATES_KUBECONFIG`, when set: a scenario whose needs the first cluster lacks.
    Second,
}

impl Which {
    fn var(self) -> &'static str {
        match self {
            Which::Default => "KUBECONFIG",
            Which::Second => GATES_KUBECONFIG,
        }
    }
}

/// One scenario of the suite.
pub struct Scenario {
    pub name: &'static str,
    /// What the cluster must do for the scenario to apply at all (empty: any cluster). How it
    /// adapts to the rest (spellings, apiVersions, messages) it reads from [`Scope::caps`].
    pub needs: &'static [Need],
    /// What the environment must provide beyond a cluster, checked first: why it cannot run
    /// here, if it cannot.
    pub requires: Option<fn() -> Option<String>>,
    pub body: fn(Scope) -> BoxFuture<'static, anyhow::Result<()>>,
}

/// The environment the suite runs in.
pub struct Env;

impl Env {
    /// Why the suite cannot run here, if it cannot.
    pub fn skip_reason() -> Option<String> {
        match std::env::var_os("KUBECONFIG") {
            Some(path) if !path.is_empty() => None,
            _ => Some(
                "KUBECONFIG is not set: the real-cluster suite needs a cluster-admin kubeconfig \
                 (README.md, \"Tests against a real cluster\")"
                    .to_owned(),
            ),
        }
    }

    /// Whether the environment names this cluster.
    fn names(which: Which) -> bool {
        std::env::var_os(which.var()).is_some_and(|p| !p.is_empty())
    }

    fn kubeconfig(which: Which) -> anyhow::Result<PathBuf> {
        let var = which.var();
        match std::env::var_os(var) {
            Some(path) if !path.is_empty() => Ok(PathBuf::from(path)),
            _ => anyhow::bail!("{var} is not set (README.md, \"Tests against a real cluster\")"),
        }
    }
}

/// One runtime for the whole suite: clients and the front live across scenarios.
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the suite's runtime")
});

/// A cluster and what it does, asked once per cluster on first use.
struct Probed {
    cluster: Cluster,
    caps: Arc<Caps>,
}

static PROBED: LazyLock<Mutex<HashMap<Which, Arc<Probed>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The release installed once per cluster, on first use.
static INSTALLS: LazyLock<Mutex<HashMap<Which, Arc<Install>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

async fn probed(which: Which) -> anyhow::Result<Arc<Probed>> {
    if let Some(found) = PROBED.lock().expect("probed").get(&which) {
        return Ok(found.clone());
    }
    let kubeconfig = Env::kubeconfig(which)?;
    let found = async {
        let cluster = Cluster::connect(&kubeconfig).await?;
        let caps = Caps::probe(&cluster).await?;
        anyhow::Ok(Probed {
            cluster,
            caps: Arc::new(caps),
        })
    }
    .await
    .with_context(|| {
        format!(
            "{} names {}, which the suite could not ask what it does",
            which.var(),
            kubeconfig.display()
        )
    })?;
    eprintln!("e2e: {}: {}", which.var(), found.caps.summary());
    let found = Arc::new(found);
    PROBED.lock().expect("probed").insert(which, found.clone());
    Ok(found)
}

async fn install(which: Which) -> anyhow::Result<Arc<Install>> {
    if let Some(found) = INSTALLS.lock().expect("installs").get(&which) {
        return Ok(found.clone());
    }
    let cluster = probed(which).await?.cluster.clone();
    let installed = Arc::new(Install::new(cluster).await?);
    INSTALLS
        .lock()
        .expect("installs")
        .insert(which, installed.clone());
    Ok(installed)
}

/// The cluster a scenario with these needs runs on, with what it does; or why none applies.
/// The second cluster is asked only when the first lacks something; one that is named but
/// cannot be asked fails the scenario.
async fn choose(needs: &[Need]) -> anyhow::Result<Result<(Which, Arc<Caps>), String>> {
    let first = probed(Which::Default).await?;
    let mut clusters = vec![(Which::Default, first.caps.clone())];
    if caps::choose(needs, &[("KUBECONFIG", &first.caps)]) != Choice::Run(0)
        && Env::names(Which::Second)
    {
        clusters.push((Which::Second, probed(Which::Second).await?.caps.clone()));
    }
    let named: Vec<(&str, &Caps)> = clusters
        .iter()
        .map(|(which, caps)| (which.var(), caps.as_ref()))
        .collect();
    Ok(match caps::choose(needs, &named) {
        Choice::Run(index) => Ok(clusters.swap_remove(index)),
        Choice::Skip(why) => Err(why),
    })
}

/// Runs one scenario on the first cluster that has what it needs: its namespaces and actors
/// set up, its body, then its cleanup whatever the outcome. Where no cluster has it, the
/// scenario is ignored with the reason. A failure carries the tail of every `serve` log of
/// the scenario.
pub fn run_scenario(scenario: &Scenario) -> Result<Completion, libtest_mimic::Failed> {
    let started = Instant::now();
    let outcome = RUNTIME.block_on(async {
        // What the environment must provide beyond a cluster (a way to stop its apiserver).
        if let Some(why) = scenario.requires.and_then(|check| check()) {
            return Ok(Completion::ignored_with(why));
        }
        let (which, caps) = match choose(scenario.needs).await? {
            Ok(found) => found,
            Err(why) => return Ok(Completion::ignored_with(why)),
        };
        if which == Which::Second {
            eprintln!("e2e: {} runs on {}", scenario.name, which.var());
        }
        let install = install(which).await?;
        let scope = Scope::new(scenario.name, install, caps).await?;
        let body = (scenario.body)(scope.clone());
        // A scenario that hangs fails with what it was waiting for, not with CI's timeout.
        let result = match tokio::time::timeout(Duration::from_secs(300), body).await {
            Ok(result) => result,
            Err(_) => Err(anyhow::anyhow!("the scenario did not finish within 300 s")),
        };
        let logs = scope.log_tails();
        scope.cleanup().await;
        result
            .map(|()| Completion::Completed)
            .map_err(|e| anyhow::anyhow!("{e:#}{logs}"))
    });
    eprintln!(
        "e2e: {} {} in {:.1} s",
        scenario.name,
        match &outcome {
            Ok(Completion::Completed) => "passed".to_owned(),
            Ok(Completion::Ignored { reason }) =>
                format!("skipped ({})", reason.as_deref().unwrap_or_default()),
            Err(_) => "failed".to_owned(),
        },
        started.elapsed().as_secs_f64()
    );
    outcome.map_err(|e| libtest_mimic::Failed::from(format!("{e:#}")))
}

/// A namespace labelled with [`SCENARIO_LABEL`] for `name` (`e2e-<name>-<random>`).
async fn agreement_namespace(client: &kube::Client, name: &str) -> anyhow::Result<String> {
    let ns = namespace_name(name, "", rand_u16());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams {
                field_manager: Some(USER.into()),
                ..PostParams::default()
            },
            &serde_json::from_value(json!({"metadata": {"name": ns,
                "labels": {SCENARIO_LABEL: label_value(name)}}}))?,
        )
        .await?;
    Ok(ns)
}

/// Removes an agreement namespace (its pods first: no kubelet removes them).
async fn remove_namespace(client: &kube::Client, ns: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _ = pods
        .delete_collection(
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
            &ListParams::default(),
        )
        .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(ns, &DeleteParams::default()).await;
}

/// What the `KUBECONFIG` cluster does (tests/agreement `Expect::discover`), learned once per run
/// in a namespace of its own.
pub async fn expectations(client: &kube::Client) -> anyhow::Result<Arc<Expect>> {
    static EXPECT: tokio::sync::OnceCell<Arc<Expect>> = tokio::sync::OnceCell::const_new();
    EXPECT
        .get_or_try_init(|| async {
            let ns = agreement_namespace(client, "agreement-expect").await?;
            let found = Expect::discover(client, &ns).await;
            remove_namespace(client, &ns).await;
            Ok(Arc::new(found?))
        })
        .await
        .cloned()
}

/// Runs one agreement body (tests/agreement) on the `KUBECONFIG` cluster: a client, a
/// namespace labelled with [`SCENARIO_LABEL`] for the body, removed afterwards whatever the
/// outcome, and what the cluster was found to do ([`expectations`]). Nothing is installed and
/// `serve` is not needed.
pub fn run_agreement(name: &str, body: Body) -> Result<(), libtest_mimic::Failed> {
    let started = Instant::now();
    let outcome = RUNTIME.block_on(async {
        let cluster = Cluster::connect(&Env::kubeconfig(Which::Default)?).await?;
        let client = cluster.client.clone();
        let expect = expectations(&client).await?;
        let ns = agreement_namespace(&client, name).await?;
        let result = match tokio::time::timeout(
            Duration::from_secs(120),
            body(client.clone(), ns.clone(), expect),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(anyhow::anyhow!("the body did not finish within 120 s")),
        };
        remove_namespace(&client, &ns).await;
        result
    });
    eprintln!(
        "e2e: {name} {} in {:.1} s",
        if outcome.is_ok() { "passed" } else { "failed" },
        started.elapsed().as_secs_f64()
    );
    outcome.map_err(|e| libtest_mimic::Failed::from(format!("{e:#}")))
}

/// The trial `agreement_expectations_match_a_profile`: what the `KUBECONFIG` cluster was found
/// to do ([`expectations`]) equals what one captured version does (`Expect::captured`, which
/// the fake's profile of that version is checked against in tests/it); otherwise it names the
/// closest version and every field that differs.
pub fn expectations_match_a_profile() -> Result<(), libtest_mimic::Failed> {
    let outcome = RUNTIME.block_on(async {
        let cluster = Cluster::connect(&Env::kubeconfig(Which::Default)?).await?;
        let found = expectations(&cluster.client).await?;
        let (label, differences) = found.matching_capture()?;
        eprintln!("e2e: the cluster ({}) answers as {label}", found.git_version);
        anyhow::ensure!(
            differences.is_empty(),
            "the cluster ({}) matches no captured version; closest {label}, which differs in:\n{}\nfound: {found:#?}",
            found.git_version,
            differences.join("\n")
        );
        anyhow::Ok(())
    });
    outcome.map_err(|e| libtest_mimic::Failed::from(format!("{e:#}")))
}

/// What a scenario body works with: the install, a namespace of its own, and handles whose
/// cleanup the runner owns.
#[derive(Clone)]
pub struct Scope {
    pub scenario: &'static str,
    pub install: Arc<Install>,
    /// What the scenario's cluster does: every apiVersion, spelling and expected message
    /// that differs between clusters comes from here.
    pub caps: Arc<Caps>,
    /// The scenario's first namespace.
    pub ns: String,
    /// The controller's Lease, as the chart names it (its RBAC allows that one name only).
    /// Removed at cleanup, once the scenario's replicas are gone, so the next scenario's first
    /// replica takes it at once instead of waiting out a killed holder's 15 s.
    pub lease: String,
    namespaces: Arc<Mutex<Vec<String>>>,
    logs: Arc<Mutex<Vec<PathBuf>>>,
    /// Cancelled at cleanup: the actors and anything else the scenario spawned on it.
    pub stop: CancellationToken,
    serves: Arc<Mutex<Vec<Serve>>>,
}

impl Scope {
    async fn new(
        scenario: &'static str,
        install: Arc<Install>,
        caps: Arc<Caps>,
    ) -> anyhow::Result<Self> {
        let scope = Self {
            scenario,
            lease: install.lease_name(),
            install,
            caps,
            ns: String::new(),
            namespaces: Arc::default(),
            logs: Arc::default(),
            stop: CancellationToken::new(),
            serves: Arc::default(),
        };
        let ns = scope.namespace("").await?;
        Ok(Self { ns, ..scope })
    }

    pub fn cluster(&self) -> &Cluster {
        &self.install.cluster
    }

    pub fn client(&self) -> kube::Client {
        self.install.cluster.client.clone()
    }

    /// A new namespace for this scenario (`e2e-<scenario>[-<suffix>]-<random>`), removed at
    /// cleanup.
    pub async fn namespace(&self, suffix: &str) -> anyhow::Result<String> {
        let name = namespace_name(self.scenario, suffix, rand_u16());
        let api: Api<Namespace> = Api::all(self.client());
        api.create(
            &PostParams {
                field_manager: Some(USER.into()),
                ..PostParams::default()
            },
            &serde_json::from_value(json!({"metadata": {"name": name,
                "labels": {SCENARIO_LABEL: label_value(self.scenario)}}}))?,
        )
        .await?;
        self.namespaces
            .lock()
            .expect("namespaces")
            .push(name.clone());
        Ok(name)
    }

    /// Starts `serve` for this scenario (stopped at cleanup if still running). Unless `no_wait`, it returns once the replica is ready and, where it is
    /// the scenario's only running controller, once it leads: what the scenario does next is
    /// seen by a controller that acts.
    pub async fn serve(&self, options: ServeOptions) -> anyhow::Result<Serve> {
        let controller = !options.args.iter().any(|a| a == "--controller=false");
        let alone = !self
            .serves
            .lock()
            .expect("serves")
            .iter()
            .any(|s| s.running() && s.controller);
        let wait_lead = controller && alone && !options.no_wait;
        let index = self.logs.lock().expect("logs").len();
        let dir = self.install.work_dir.join(self.scenario);
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("serve-{index}.log"));
        self.logs.lock().expect("logs").push(log.clone());
        let identity = options
            .identity
            .clone()
            .unwrap_or_else(|| format!("{}-{index}", self.scenario));
        let serve = Serve::start(&self.install, &identity, log, options).await?;
        self.serves.lock().expect("serves").push(serve.handle());
        if wait_lead {
            serve.wait_leading(Duration::from_secs(60)).await?;
        }
        Ok(serve)
    }

    fn log_tails(&self) -> String {
        let mut out = String::new();
        for path in self.logs.lock().expect("logs").iter() {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            out.push_str(&format!(
                "\n--- last {} lines of {} ---\n{}",
                tail.len(),
                path.display(),
                tail.join("\n")
            ));
        }
        out
    }

    async fn cleanup(&self) {
        self.stop.cancel();
        for serve in self.serves.lock().expect("serves").drain(..) {
            serve.kill();
        }
        let client = self.client();
        let namespaces: Vec<String> = self.namespaces.lock().expect("namespaces").clone();
        for ns in &namespaces {
            // No kubelet removes them: without this a namespace never finishes terminating.
            let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
            let _ = pods
                .delete_collection(
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..DeleteParams::default()
                    },
                    &ListParams::default(),
                )
                .await;
            let api: Api<Namespace> = Api::all(client.clone());
            let _ = api.delete(ns, &DeleteParams::default()).await;
        }
        // The Lease its replicas held, and journals of sets in its namespaces (a convergence a
        // failed scenario left half done), so that the next scenario meets neither.
        let leases: Api<Lease> = Api::namespaced(client.clone(), install::NAMESPACE);
        let _ = leases.delete(&self.lease, &DeleteParams::default()).await;
        let journals: Api<ConfigMap> = Api::namespaced(client.clone(), install::NAMESPACE);
        if let Ok(list) = journals
            .list(&ListParams::default().labels(stateful_admission::names::JOURNAL_LABEL))
            .await
        {
            for journal in list.items {
                let set_ns = journal
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(stateful_admission::names::JOURNAL_SET_NAMESPACE));
                if let (Some(set_ns), Some(name)) = (set_ns, journal.metadata.name.as_deref())
                    && namespaces.contains(set_ns)
                {
                    let _ = journals.delete(name, &DeleteParams::default()).await;
                }
            }
        }
        let by_scenario = ListParams::default()
            .labels(&format!("{SCENARIO_LABEL}={}", label_value(self.scenario)));
        let classes: Api<StorageClass> = Api::all(client.clone());
        let _ = classes
            .delete_collection(&DeleteParams::default(), &by_scenario)
            .await;
        let volumes: Api<PersistentVolume> = Api::all(client.clone());
        let _ = volumes
            .delete_collection(&DeleteParams::default(), &by_scenario)
            .await;
        // Where served; they may carry kubernetes.io/vac-protection until their volumes are
        // gone, and go then.
        if let Some(version) = &self.caps.vac_version {
            let classes: Api<DynamicObject> = Api::all_with(client, &caps::vac_resource(version));
            let _ = classes
                .delete_collection(&DeleteParams::default(), &by_scenario)
                .await;
        }
    }
}

/// A scenario's namespace name: `e2e-<scenario's first 30 characters>[-<suffix>]-<random>`,
/// with `_` as `-` (a namespace name is a DNS-1123 label).
pub fn namespace_name(scenario: &str, suffix: &str, random: u16) -> String {
    let base: String = scenario
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(30)
        .collect();
    let suffix = if suffix.is_empty() {
        String::new()
    } else {
        format!("-{suffix}")
    };
    format!("e2e-{}{suffix}-{random:04x}", base.trim_matches('-'))
}

/// The trial `names_within_the_apiservers_limits` (no cluster needed): every name and label
/// value the suite gives its objects is one a real apiserver accepts (namespace names are
/// DNS-1123 labels, label values at most 63 characters of `[A-Za-z0-9_.-]` starting and
/// ending alphanumeric), and no two scenarios share a label value.
pub fn names_within_limits(names: &[&str]) -> Result<(), libtest_mimic::Failed> {
    fn dns_label(s: &str) -> bool {
        (1..=63).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }
    fn label_value_ok(s: &str) -> bool {
        s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && s.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
            && s.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric())
    }
    let mut problems = Vec::new();
    let mut values = std::collections::BTreeMap::new();
    for name in names {
        let value = label_value(name);
        if !label_value_ok(&value) {
            problems.push(format!("{name}: label value {value:?}"));
        }
        if let Some(other) = values.insert(value.clone(), *name) {
            problems.push(format!(
                "{name} and {other} share the label value {value:?}"
            ));
        }
        for suffix in ["", "plain"] {
            let ns = namespace_name(name, suffix, u16::MAX);
            if !dns_label(&ns) {
                problems.push(format!("{name}: namespace name {ns:?}"));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n").into())
    }
}

/// A few random bits for names, without a crate for it.
pub fn rand_u16() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u16
}
