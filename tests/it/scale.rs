//! The controller against a seeded cluster: how many watches it opens and how many writes it
//! sends at first contact and at steady state (small, fast tests that pin today's numbers),
//! the scale benchmark (`scripts/scale.sh`: the release binary against 10,000 claims /
//! 2,000 StatefulSets and 50,000 / 10,000; results in BENCHMARKS.md), and the write budget
//! benchmark beside it (`scripts/scale.sh writes`: writes per set at first contact with a
//! platform's 10,000 sets, and ours per built-in status write under pod churn).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use serde_json::{Value, json};

use crate::serve_cluster::kubeconfig;
use crate::serve_tls::Served;
use crate::support::churn::{SetWrites, set_writes};
use crate::support::controller::{RunningController, config, eventually};
use crate::support::fake_apiserver::{FakeApiConfig, FakeApiServer, WriteRecord, resources};
use crate::support::scale_cluster::{Mix, ScalePlan, ScaleSize};
use crate::support::statefulset_sim::{SimConfig, StatefulSetSim, set_pod_ready};
use stateful_admission::controller::Features;

/// A few hundred objects: 24 sets (1–3 templates), 100 claims, their pods, 4 classes.
const TINY: ScaleSize = ScaleSize {
    claims: 100,
    sets: 24,
    classes: 4,
    sets_per_namespace: 8,
    seed: 7,
    mix: Mix::HEALTHY,
};

/// [`TINY`] as a platform has it: every other set `InPlace` (claims matching), sets 4, 12 and
/// 20 with an unready pod, sets 7, 15 and 23 with a claim that cannot follow its template.
const TINY_PLATFORM: ScaleSize = ScaleSize {
    mix: Mix {
        in_place: 2,
        unready: 8,
        incompatible: 8,
        min_ready_seconds: 0,
        min_ready_every: 0,
    },
    ..TINY
};

fn json_size(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

#[tokio::test]
async fn scale_cluster_objects_look_like_the_control_planes() {
    let plan = ScalePlan::new(TINY);
    let objects: Vec<Value> = plan.objects().collect();
    let again: Vec<Value> = ScalePlan::new(TINY).objects().collect();
    assert!(objects == again, "a seed gives the same cluster");

    let api = FakeApiServer::start().await;
    api.seed(objects);
    let claims = api.list_objects(&resources::PERSISTENT_VOLUME_CLAIMS);
    let sets = api.list_objects(&resources::STATEFULSETS);
    let pods = api.list_objects(&resources::PODS);
    assert_eq!(claims.len(), 100);
    assert_eq!(sets.len(), 24);
    assert_eq!(pods.len(), plan.pods());
    assert_eq!(api.list_objects(&resources::STORAGE_CLASSES).len(), 4);
    // Three namespaces of the cluster, and the four every cluster has.
    assert_eq!(api.list_objects(&resources::NAMESPACES).len(), 3 + 4);

    for claim in &claims {
        assert_eq!(claim["status"]["phase"], "Bound");
        assert!(
            claim["spec"]["volumeName"]
                .as_str()
                .is_some_and(|v| v.starts_with("pvc-"))
        );
        assert_eq!(
            claim["status"]["capacity"]["storage"],
            claim["spec"]["resources"]["requests"]["storage"]
        );
        let annotations = &claim["metadata"]["annotations"];
        for key in [
            "pv.kubernetes.io/bind-completed",
            "pv.kubernetes.io/bound-by-controller",
            "volume.kubernetes.io/selected-node",
            "volume.kubernetes.io/storage-provisioner",
        ] {
            assert!(annotations[key].is_string(), "{key} on {claim}");
        }
        assert_eq!(
            claim["metadata"]["finalizers"][0],
            "kubernetes.io/pvc-protection"
        );
        assert_eq!(
            claim["metadata"]["managedFields"].as_array().map(Vec::len),
            Some(4)
        );
    }
    for set in &sets {
        let typed: StatefulSet = serde_json::from_value(set.clone()).expect("a StatefulSet");
        let status = typed.status.expect("status");
        let spec = typed.spec;
        assert_eq!(status.ready_replicas, spec.replicas);
        assert_eq!(status.updated_replicas, spec.replicas);
        assert_eq!(status.current_revision, status.update_revision);
        assert_eq!(status.observed_generation, typed.metadata.generation);
        let templates = spec.volume_claim_templates.map_or(0, |t| t.len());
        assert!((1..=3).contains(&templates));
        assert!(
            set["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
                .is_string()
        );
        assert!(json_size(set) > 8_000, "several KB: {}", json_size(set));
    }
    for pod in &pods {
        assert_eq!(pod["status"]["phase"], "Running");
        let ready = pod["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .map(|c| c["status"].clone());
        assert_eq!(ready, Some(Value::from("True")));
        let labels = &pod["metadata"]["labels"];
        assert_eq!(
            labels["statefulset.kubernetes.io/pod-name"],
            pod["metadata"]["name"]
        );
        assert!(labels["controller-revision-hash"].is_string());
        let owner = &pod["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["controller"].as_bool()),
            (Some("StatefulSet"), Some(true))
        );
        let set = sets
            .iter()
            .find(|s| s["metadata"]["uid"] == owner["uid"])
            .expect("the owner exists");
        assert_eq!(
            set["status"]["updateRevision"],
            labels["controller-revision-hash"]
        );
    }
}

/// Writes by target (`statefulsets.apps/status`), verb (and whether a dry run) and field
/// manager (`-` for none).
fn by_target(
    api: &FakeApiServer,
    window: impl Fn(&WriteRecord) -> bool,
) -> BTreeMap<String, usize> {
    api.tally_writes(|w| {
        window(w).then(|| {
            format!(
                "{} {}{} {}",
                w.target(),
                w.verb.as_str(),
                if w.dry_run { " (dry run)" } else { "" },
                w.field_manager.as_deref().unwrap_or("-")
            )
        })
    })
}

/// Successful StatefulSet reconciles in a metrics text (prefixed or not).
fn set_reconciles(metrics: &str) -> usize {
    metrics
        .lines()
        .filter(|l| {
            l.contains("controller_reconciles_total{")
                && l.contains(r#"controller="statefulset""#)
                && l.contains(r#"result="success""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as usize)
        .sum()
}

/// Writes to each StatefulSet (its own or its status, not dry runs) by `namespace/name`.
fn writes_per_set(
    api: &FakeApiServer,
    window: impl Fn(&WriteRecord) -> bool,
) -> BTreeMap<String, usize> {
    api.tally_writes(|w| {
        (window(w)
            && !w.dry_run
            && w.resource
                .is_some_and(|r| std::ptr::eq(r, &resources::STATEFULSETS)))
        .then(|| {
            format!(
                "{}/{}",
                w.namespace.as_deref().unwrap_or_default(),
                w.name.as_deref().unwrap_or_default()
            )
        })
    })
}

/// First contact with a platform's 24 sets: a set is written at most once, and only where
/// something of ours has news — the conditions of the three sets with an unready pod, the claim
/// status of the three with a claim that cannot follow its template. The healthy ones, half of
/// them `InPlace` with claims matching their templates, get nothing: their conditions would
/// say what their status says (`Available=True`, `RolloutComplete`). At steady state nothing
/// but the Lease renewals.
#[tokio::test(flavor = "multi_thread")]
async fn at_most_one_write_per_set_at_first_contact_and_none_at_steady_state() {
    let api = FakeApiServer::start().await;
    let plan = ScalePlan::new(TINY_PLATFORM);
    api.seed(plan.objects());
    let controller = RunningController::start(&api, config("replica-0", Features::default()));
    assert!(
        eventually(Duration::from_secs(30), || set_reconciles(
            &controller.metrics()
        ) >= plan.sets.len())
        .await,
        "every set is looked at"
    );
    let status_of = |i: usize| {
        let set = &plan.sets[i];
        api.get_object(&resources::STATEFULSETS, &set.namespace, &set.name)
            .unwrap_or_default()
    };
    let news = |set: &Value| {
        set["metadata"]["annotations"]["stateful-admission.io/volume-claim-status"].is_string()
            || has_conditions(set)
    };
    assert!(
        eventually(Duration::from_secs(30), || [4, 7, 12, 15, 20, 23]
            .iter()
            .all(|i| news(&status_of(*i))))
        .await,
        "the sets with news are written"
    );
    // The reconciles the controller's own writes trigger have finished (its resync is 30 s:
    // every set nudged).
    controller.nudge_all_and_settle(&api).await;
    let contact_end = api.uptime();
    let first = by_target(&api, |w| {
        w.at < contact_end && !w.target().starts_with("leases") && !w.target().starts_with("events")
    });
    let expected: BTreeMap<String, usize> = [
        // The conditions of the sets with an unready pod.
        ("statefulsets.apps/status patch stateful-admission", 3),
        // The claim status of the sets with a claim that cannot follow its template.
        ("statefulsets.apps patch stateful-admission", 3),
        // The capability probes: dry-run creates of a StatefulSet and a claim.
        ("statefulsets.apps create (dry run) stateful-admission", 1),
        (
            "persistentvolumeclaims create (dry run) stateful-admission",
            1,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(first, expected, "writes at first contact");
    let per_set = writes_per_set(&api, |w| w.at < contact_end);
    assert!(per_set.values().all(|n| *n == 1), "{per_set:?}");
    for (i, set) in plan.sets.iter().enumerate() {
        let written = per_set.contains_key(&format!("{}/{}", set.namespace, set.name));
        let mix = TINY_PLATFORM.mix;
        assert_eq!(
            written,
            mix.is_unready(i) || mix.is_incompatible(i),
            "set {i} ({})",
            set.name
        );
        let stored = status_of(i);
        assert_eq!(has_conditions(&stored), mix.is_unready(i), "set {i}");
    }

    // Every set looked at again since, nothing to write; and the Lease renewed meanwhile.
    controller.nudge_all_and_settle(&api).await;
    assert!(
        eventually(Duration::from_secs(30), || api.count_writes(|w| w.at
            >= contact_end
            && w.target().starts_with("leases"))
            > 0)
        .await
    );
    let steady = by_target(&api, |w| w.at >= contact_end);
    let leases = steady
        .iter()
        .filter(|(k, _)| k.starts_with("leases"))
        .map(|(_, n)| n)
        .sum::<usize>();
    let others: BTreeMap<_, _> = steady
        .into_iter()
        .filter(|(k, _)| !k.starts_with("leases"))
        .collect();
    assert!(
        others.is_empty(),
        "no write at steady state but the Lease: {others:?}"
    );
    assert!(leases > 0, "the Lease is renewed");
    controller.stop().await;
}

fn has_conditions(set: &Value) -> bool {
    set["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Available"))
}

/// The process watches each kind once: the webhook and every controller feature read one
/// shared view. (Before it, the webhook's view, the StatefulSet controller, the controller's
/// own caches and the default class controller each watched for themselves: claims three
/// times, StatefulSets, classes, namespaces, pods and journals twice.)
#[tokio::test(flavor = "multi_thread")]
async fn one_watch_per_resource_kind() {
    let api = FakeApiServer::start().await;
    api.seed(ScalePlan::new(TINY).objects());
    let controller = RunningController::start(&api, config("replica-0", Features::default()));
    assert!(
        eventually(Duration::from_secs(30), || controller.is_leader()).await,
        "the controller leads"
    );
    // Give every feature time to open its watches.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let open: BTreeMap<String, usize> = api
        .traffic_by_resource()
        .into_iter()
        .filter(|(_, t)| t.watches_open > 0)
        .map(|(r, t)| (r, t.watches_open))
        .collect();
    controller.stop().await;
    let expected: BTreeMap<String, usize> = [
        "configmaps",
        "namespaces",
        "persistentvolumeclaims",
        "pods",
        "statefulsets.apps",
        "storageclasses.storage.k8s.io",
    ]
    .into_iter()
    .map(|r| (r.to_owned(), 1))
    .collect();
    assert_eq!(open, expected, "watch streams open per resource");
}

// --- the benchmark -----------------------------------------------------------------------

/// Resident and peak size of a process, from `/proc/<pid>/status`, in KiB.
fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU seconds (user + system) of a process, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // CLK_TCK is 100 on Linux.
    Some(ticks / 100.0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn env_secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// Creates `plan`'s objects in a real cluster, as they are found in one: each created, then
/// its status written; pods and claims owned by the set as created (its real uid). Nothing is
/// done where the cluster already holds the plan's last namespace (seeded by an earlier run).
/// The cluster's controller-manager should be stopped first: it would otherwise re-create,
/// garbage-collect and re-write these objects, and its writes would count.
async fn seed_real(client: &kube::Client, plan: &ScalePlan) -> usize {
    use futures::StreamExt;
    use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
    let resource = |kind: &str| match kind {
        "Namespace" => ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
        "StorageClass" => ApiResource::erase::<k8s_openapi::api::storage::v1::StorageClass>(&()),
        "StatefulSet" => ApiResource::erase::<StatefulSet>(&()),
        "Pod" => ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        _ => ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&()),
    };
    let api_of = |kind: &str, ns: Option<&str>| -> Api<DynamicObject> {
        let r = resource(kind);
        match ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &r),
            None => Api::all_with(client.clone(), &r),
        }
    };
    let last_ns = plan
        .sets
        .last()
        .map(|s| s.namespace.clone())
        .unwrap_or_default();
    // The controller's namespace (its Lease and journals), as a release namespace is.
    let controller_ns = json!({"metadata": {"name": "stateful-admission"}});
    let _ = api_of("Namespace", None)
        .create(
            &PostParams::default(),
            &serde_json::from_value(controller_ns).expect("a namespace"),
        )
        .await;
    if api_of("Namespace", None)
        .get_opt(&last_ns)
        .await
        .ok()
        .flatten()
        .is_some()
    {
        eprintln!("the cluster holds {last_ns} already: not seeded again");
        return 0;
    }
    // Creates one object (and its status); returns its uid.
    let create = |mut object: Value, owner: Option<String>| {
        let api_of = &api_of;
        async move {
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let ns = object["metadata"]["namespace"].as_str().map(str::to_owned);
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if let Some(meta) = object["metadata"].as_object_mut() {
                for k in [
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "managedFields",
                    "generation",
                ] {
                    meta.remove(k);
                }
            }
            if let (Some(uid), Some(owners)) =
                (owner, object["metadata"]["ownerReferences"].as_array_mut())
            {
                for o in owners {
                    o["uid"] = json!(uid);
                }
            }
            let status = object.as_object_mut().and_then(|o| o.remove("status"));
            let api = api_of(&kind, ns.as_deref());
            let object: DynamicObject = serde_json::from_value(object).expect("an object");
            let created = loop {
                match api.create(&PostParams::default(), &object).await {
                    Ok(created) => break created,
                    Err(e) => {
                        eprintln!("create {kind} {name}: {e}; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            };
            if let Some(status) = status.filter(|_| kind != "Namespace" && kind != "StorageClass") {
                let patch = json!({ "status": status });
                while let Err(e) = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    eprintln!("status of {kind} {name}: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            created.metadata.uid.unwrap_or_default()
        }
    };
    let mut objects = plan.objects().peekable();
    // Namespaces and classes first, then each set with its pods and claims.
    let mut firsts = Vec::new();
    while let Some(o) = objects.next_if(|o| o["kind"] == "Namespace" || o["kind"] == "StorageClass")
    {
        firsts.push(o);
    }
    let mut created = futures::stream::iter(firsts.into_iter().map(|o| create(o, None)))
        .buffer_unordered(32)
        .count()
        .await;
    let mut groups: Vec<Vec<Value>> = Vec::new();
    for o in objects {
        if o["kind"] == "StatefulSet" {
            groups.push(Vec::new());
        }
        if let Some(group) = groups.last_mut() {
            group.push(o);
        }
    }
    let started = Instant::now();
    let total = groups.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    created += futures::stream::iter(groups.into_iter().map(|mut group| {
        let (done, create) = (&done, &create);
        async move {
            let set = group.remove(0);
            let uid = create(set, None).await;
            let n =
                1 + futures::stream::iter(group.into_iter().map(|o| create(o, Some(uid.clone()))))
                    .buffer_unordered(8)
                    .count()
                    .await;
            let finished = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            if finished % 500 == 0 {
                eprintln!(
                    "seeded {finished} of {total} sets in {:.0} s",
                    started.elapsed().as_secs_f64()
                );
            }
            n
        }
    }))
    .buffer_unordered(8)
    .fold(0, |a, n| async move { a + n })
    .await;
    created
}

/// Writes the apiserver counted (`apiserver_request_total`, not dry runs), by resource.
async fn apiserver_writes(client: &kube::Client) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(request) = axum::http::Request::get("/metrics").body(Vec::new()) else {
        return out;
    };
    let Ok(text) = client.request_text(request).await else {
        return out;
    };
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split("\",")
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let verb = label("verb");
        if matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE")
            && label("dry_run").is_empty()
        {
            let key = match label("subresource").as_str() {
                "" => label("resource"),
                sub => format!("{}/{sub}", label("resource")),
            };
            *out.entry(key).or_default() += value.trim().parse::<f64>().unwrap_or(0.0);
        }
    }
    out
}

/// `after - before`, for the resources that moved.
fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, usize> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| (k.clone(), d as usize))
        })
        .collect()
}

/// One run's numbers.
#[derive(Debug, Default)]
struct Run {
    seed_secs: f64,
    ready_secs: f64,
    rss_ready: u64,
    rss_later: u64,
    peak: u64,
    cpu_ready: f64,
    cpu_total: f64,
    writes_first: Option<usize>,
    writes_steady_per_min: Option<f64>,
    /// The same without the Lease renewals.
    writes_steady_per_min_no_lease: Option<f64>,
    set_writes_first: Option<usize>,
    breakdown: BTreeMap<String, usize>,
    /// Seconds from start until the controller led (its whole view listed).
    controller_secs: f64,
    /// RSS (KiB) every 15 s from ready on.
    rss_series: Vec<u64>,
    /// Against a real cluster: writes the apiserver counted by resource, in the first window
    /// and per minute of the steady one.
    real_first: BTreeMap<String, usize>,
    real_steady_per_min: BTreeMap<String, f64>,
}

/// `serve` (release build, controller on) against the fake API server seeded with
/// `size`, or against the cluster of `KUBECONFIG` when set (nothing seeded, no write counts).
async fn bench_one(size: ScaleSize) -> Run {
    let first_window = env_secs("SCALE_FIRST_SECS", 90);
    let steady_window = env_secs("SCALE_STEADY_SECS", 60);
    let extra: Vec<String> = std::env::var("SCALE_SERVE_ARGS")
        .map(|a| a.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let real = std::env::var("KUBECONFIG").ok().filter(|k| !k.is_empty());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut run = Run::default();
    let real_client = match &real {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("KUBECONFIG");
            let config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .expect("a client configuration");
            Some(kube::Client::try_from(config).expect("a client"))
        }
        None => None,
    };
    let api = match real {
        Some(_) => {
            if std::env::var_os("SCALE_SEED").is_some()
                && let Some(client) = &real_client
            {
                let plan = ScalePlan::new(size);
                let started = Instant::now();
                let objects = seed_real(client, &plan).await;
                run.seed_secs = started.elapsed().as_secs_f64();
                eprintln!(
                    "seeded {objects} objects ({} claims, {} sets, {} pods) in {:.1} s",
                    size.claims,
                    size.sets,
                    plan.pods(),
                    run.seed_secs
                );
            }
            None
        }
        None => {
            let api = FakeApiServer::start_with(FakeApiConfig {
                // The request log keeps bodies; the write records are what is counted.
                request_log_limit: 1,
                ..FakeApiConfig::default()
            })
            .await;
            let plan = ScalePlan::new(size);
            let started = Instant::now();
            let objects = api.seed(plan.objects());
            run.seed_secs = started.elapsed().as_secs_f64();
            eprintln!(
                "seeded {objects} objects ({} claims, {} sets, {} pods, {} namespaces) in {:.1} s",
                size.claims,
                size.sets,
                plan.pods(),
                plan.namespaces,
                run.seed_secs
            );
            Some(api)
        }
    };
    let config_path = match (&api, &real) {
        (Some(api), _) => {
            let path = dir.path().join("kubeconfig");
            std::fs::write(&path, kubeconfig(api)).expect("kubeconfig");
            path
        }
        (None, Some(path)) => path.into(),
        (None, None) => unreachable!(),
    };
    let certs = dir.path().join("certs");
    let mut args: Vec<&str> = vec![
        "--self-signed",
        "--self-signed-dir",
        certs.to_str().expect("path"),
        "--controller-namespace",
        "stateful-admission",
        "--controller-identity",
        "scale-bench",
    ];
    args.extend(extra.iter().map(String::as_str));
    let origin = api.as_ref().map(FakeApiServer::uptime);
    let spawned = Instant::now();
    let served = Served::start_with_env(
        &args,
        &[("KUBECONFIG", config_path.to_str().expect("path"))],
    );
    let pid = served.pid();
    let ready_url = served.probe_url("/readyz");
    let client = reqwest::Client::new();
    let writes_at_start = match &real_client {
        Some(c) => apiserver_writes(c).await,
        None => BTreeMap::new(),
    };
    loop {
        if client
            .get(&ready_url)
            .send()
            .await
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
        {
            break;
        }
        assert!(
            spawned.elapsed() < Duration::from_secs(300),
            "ready within 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.ready_secs = spawned.elapsed().as_secs_f64();
    run.rss_ready = memory_kib(pid).map_or(0, |m| m.0);
    run.cpu_ready = cpu_seconds(pid).unwrap_or(0.0);
    run.rss_series.push(run.rss_ready);
    let verbose = format!("{ready_url}?verbose");
    let mut next_sample = Instant::now() + Duration::from_secs(15);
    let first_end = spawned + first_window;
    let steady_end = first_end + steady_window;
    while Instant::now() < steady_end {
        if run.controller_secs == 0.0 {
            let text = match client.get(&verbose).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if text.contains("[+]controller leading") {
                run.controller_secs = spawned.elapsed().as_secs_f64();
            }
        }
        if run.rss_later == 0 && Instant::now() >= first_end {
            run.rss_later = memory_kib(pid).map_or(0, |m| m.0);
            if let Some(c) = &real_client {
                run.real_first = delta(&writes_at_start, &apiserver_writes(c).await);
            }
        }
        if Instant::now() >= next_sample {
            run.rss_series.push(memory_kib(pid).map_or(0, |m| m.0));
            next_sample += Duration::from_secs(15);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(c) = &real_client {
        let per_min = 60.0 / steady_window.as_secs_f64();
        let total = delta(&writes_at_start, &apiserver_writes(c).await);
        run.real_steady_per_min = total
            .iter()
            .map(|(k, n)| {
                let first = run.real_first.get(k).copied().unwrap_or(0);
                (k.clone(), n.saturating_sub(first) as f64 * per_min)
            })
            .filter(|(_, n)| *n > 0.0)
            .collect();
    }
    let (_, peak) = memory_kib(pid).unwrap_or_default();
    run.peak = peak;
    run.cpu_total = cpu_seconds(pid).unwrap_or(0.0);
    if let (Some(api), Some(origin)) = (&api, origin) {
        let first = origin + first_window;
        let steady = first + steady_window;
        run.writes_first = Some(api.count_writes(|w| w.at < first));
        run.set_writes_first = Some(api.count_writes(|w| {
            w.at < first
                && w.resource
                    .is_some_and(|r| std::ptr::eq(r, &resources::STATEFULSETS))
                && !w.dry_run
        }));
        let per_min = |n: usize| n as f64 * 60.0 / steady_window.as_secs_f64();
        let steady_writes = api.count_writes(|w| w.at >= first && w.at < steady);
        run.writes_steady_per_min = Some(per_min(steady_writes));
        let lease_writes = api.count_writes(|w| {
            w.at >= first
                && w.at < steady
                && w.resource
                    .is_some_and(|r| std::ptr::eq(r, &resources::LEASES))
        });
        run.writes_steady_per_min_no_lease = Some(per_min(steady_writes - lease_writes));
        run.breakdown = by_target(api, |w| w.at < steady);
        let traffic: Vec<String> = api
            .traffic_by_resource()
            .into_iter()
            .map(|(r, t)| {
                format!(
                    "{r}: {} watches, {} lists, {} continued pages",
                    t.watches_opened, t.lists, t.continued_pages
                )
            })
            .collect();
        eprintln!("requests by resource: {}", traffic.join("; "));
    }
    drop(served);
    run
}

/// `scripts/scale.sh`: one table row per size, on standard output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale benchmark: scripts/scale.sh"]
async fn scale_benchmark() {
    let sizes = std::env::var("SCALE_SIZES").unwrap_or_else(|_| "small,large".to_owned());
    println!(
        "| claims / sets / pods | seed s | ready s | controller leads s | RSS at ready | RSS at first window | RSS at end | peak RSS | CPU s to ready / total | writes first window (to sets) | writes/min steady (without Lease) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for name in sizes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let size = match name {
            "small" => ScaleSize::SMALL,
            "large" => ScaleSize::LARGE,
            other => panic!("unknown size {other:?}: small or large"),
        };
        let run = bench_one(size).await;
        let opt = |v: Option<usize>| v.map_or_else(|| "n/a".to_owned(), |v| v.to_string());
        let rss_end = run.rss_series.last().copied().unwrap_or(0);
        println!(
            "| {} / {} / {} | {:.1} | {:.2} | {:.2} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} / {:.1} | {} ({}) | {} ({}) |",
            size.claims,
            size.sets,
            ScalePlan::new(size).pods(),
            run.seed_secs,
            run.ready_secs,
            run.controller_secs,
            mib(run.rss_ready),
            mib(run.rss_later),
            mib(rss_end),
            mib(run.peak),
            run.cpu_ready,
            run.cpu_total,
            opt(run.writes_first),
            opt(run.set_writes_first),
            run.writes_steady_per_min
                .map_or_else(|| "n/a".to_owned(), |v| format!("{v:.1}")),
            run.writes_steady_per_min_no_lease
                .map_or_else(|| "n/a".to_owned(), |v| format!("{v:.1}")),
        );
        for (target, n) in &run.breakdown {
            println!("    {target}: {n}");
        }
        let series: Vec<String> = run
            .rss_series
            .iter()
            .map(|kib| format!("{:.1}", mib(*kib)))
            .collect();
        println!("    RSS MiB every 15 s from ready: {}", series.join(" "));
        if !run.real_first.is_empty() || !run.real_steady_per_min.is_empty() {
            println!(
                "    apiserver writes in the first window: {:?}",
                run.real_first
            );
            println!(
                "    apiserver writes per minute afterwards: {:?}",
                run.real_steady_per_min
            );
        }
    }
}

// --- the write budget benchmark ----------------------------------------------------------

/// The text of `serve`'s `/metrics` (empty when it cannot be read).
async fn serve_metrics(client: &reqwest::Client, served: &Served) -> String {
    match client.get(served.probe_url("/metrics")).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// One phase of churn on `sets`: each set runs `script` of (pod ordinal, ready, pause after)
/// on its own (all sets at once); then the phase lasts at least `settle` more and until
/// neither the built-in controller nor we wrote to these sets for `quiet` (a loaded machine
/// delays reactions: what a phase causes is counted in it). Returns the writes counted from
/// the log, and how long the script took.
async fn churn_phase(
    api: &FakeApiServer,
    kubelet: &kube::Client,
    sets: &[(String, String)],
    script: &[(u32, bool, Duration)],
    settle: Duration,
    quiet: Duration,
) -> (SetWrites, Duration) {
    let from = api.uptime();
    let started = Instant::now();
    futures::future::join_all(sets.iter().map(|(ns, name)| async move {
        for (ordinal, ready, pause) in script {
            set_pod_ready(kubelet, ns, &format!("{name}-{ordinal}"), *ready).await;
            tokio::time::sleep(*pause).await;
        }
    }))
    .await;
    let took = started.elapsed();
    tokio::time::sleep(settle).await;
    let last_write = || {
        api.write_records()
            .iter()
            .rev()
            .find(|w| {
                w.resource
                    .is_some_and(|r| std::ptr::eq(r, &resources::STATEFULSETS))
                    && sets.iter().any(|(ns, name)| {
                        w.namespace.as_deref() == Some(ns.as_str())
                            && w.name.as_deref() == Some(name.as_str())
                    })
            })
            .map(|w| w.at)
    };
    while last_write().is_some_and(|at| api.uptime().saturating_sub(at) < quiet) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (set_writes(api, from, sets), took)
}

/// `scripts/scale.sh writes`: `serve` (the binary of this build, or `WRITE_BUDGET_BIN`, e.g.
/// a copy of an earlier build's) at the default write limit against the fake API server seeded
/// with a platform's cluster ([`Mix::PLATFORM`], 10,000 sets by default, `SCALE_SIZES=small`
/// for 2,000). Reports the writes to sets at first contact (per set, by kind, how long they
/// take), then our writes per built-in status write while the sets with `minReadySeconds`
/// churn under the simulated built-in controller: pods turning unready and ready slowly
/// (each turn is news), in bursts within the conditions interval, and flapping faster than
/// `minReadySeconds` (`readyReplicas` moves, nothing the conditions say does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "write budget benchmark: scripts/scale.sh writes"]
async fn write_budget_benchmark() {
    let base = match std::env::var("SCALE_SIZES").as_deref() {
        Ok("small") => ScaleSize::SMALL,
        _ => ScaleSize::LARGE,
    };
    let size = ScaleSize {
        mix: Mix::PLATFORM,
        ..base
    };
    let plan = ScalePlan::new(size);
    let api = FakeApiServer::start_with(FakeApiConfig {
        request_log_limit: 1,
        ..FakeApiConfig::default()
    })
    .await;
    let seeded = api.seed(plan.objects());
    let mix = size.mix;
    let count = |f: &dyn Fn(usize) -> bool| (0..plan.sets.len()).filter(|i| f(*i)).count();
    println!(
        "seeded {seeded} objects: {} claims, {} sets ({} InPlace, {} with an unready pod, {} with a claim that cannot follow its template, {} with minReadySeconds {}), {} pods",
        size.claims,
        size.sets,
        count(&|i| mix.is_in_place(i)),
        count(&|i| mix.is_unready(i)),
        count(&|i| mix.is_incompatible(i)),
        count(&|i| mix.min_ready(i).is_some()),
        mix.min_ready_seconds,
        plan.pods()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config_path = dir.path().join("kubeconfig");
    std::fs::write(&config_path, kubeconfig(&api)).expect("kubeconfig");
    let certs = dir.path().join("certs");
    let binary = std::env::var("WRITE_BUDGET_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_stateful-admission").to_owned());
    let extra: Vec<String> = std::env::var("SCALE_SERVE_ARGS")
        .map(|a| a.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let mut args = vec![
        "--self-signed",
        "--self-signed-dir",
        certs.to_str().expect("path"),
        "--controller-namespace",
        "stateful-admission",
        "--controller-identity",
        "write-budget",
        // A dev build holding 10,000 sets on two shared cores can miss a renewal while a
        // resync pass runs; a lost term is a pass over every set again. Longer Lease timings
        // keep one term for the whole run; they change no write.
        "--lease-duration",
        "60s",
        "--renew-deadline",
        "45s",
        "--retry-period",
        "5s",
    ];
    args.extend(extra.iter().map(String::as_str));
    let origin = api.uptime();
    let started = Instant::now();
    let served = Served::start_binary(
        &binary,
        &args,
        &[("KUBECONFIG", config_path.to_str().expect("path"))],
    );
    let client = reqwest::Client::new();
    let limit = env_secs("WRITE_BUDGET_FIRST_CONTACT_MAX_SECS", 1800);
    // First contact is over once every set was looked at and no set was written for 15 s.
    let set_write = |w: &WriteRecord| {
        w.at >= origin
            && !w.dry_run
            && w.resource
                .is_some_and(|r| std::ptr::eq(r, &resources::STATEFULSETS))
    };
    let mut looked_at = None;
    loop {
        assert!(started.elapsed() < limit, "first contact within {limit:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let metrics = serve_metrics(&client, &served).await;
        if looked_at.is_none() && set_reconciles(&metrics) >= plan.sets.len() {
            looked_at = Some(started.elapsed());
        }
        let last = api
            .write_records()
            .iter()
            .rev()
            .find(|w| set_write(w))
            .map(|w| w.at);
        let quiet_since = last.map_or(api.uptime() - origin, |at| api.uptime() - at);
        if looked_at.is_some() && quiet_since >= Duration::from_secs(15) {
            break;
        }
    }
    let end = api.uptime();
    let per_set = writes_per_set(&api, |w| w.at >= origin && w.at < end);
    let total: usize = per_set.values().sum();
    let max = per_set.values().copied().max().unwrap_or(0);
    let last_write = api
        .write_records()
        .iter()
        .filter(|w| set_write(w))
        .map(|w| w.at.saturating_sub(origin))
        .max()
        .unwrap_or_default();
    let kinds = by_target(&api, |w| w.at >= origin && w.at < end);
    let index: BTreeMap<String, usize> = plan
        .sets
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("{}/{}", s.namespace, s.name), i))
        .collect();
    let mut written_by_kind: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (set, i) in &index {
        let kind = if mix.is_unready(*i) {
            "unready pod"
        } else if mix.is_incompatible(*i) {
            "claim that cannot follow"
        } else if mix.is_in_place(*i) {
            "healthy, InPlace"
        } else {
            "healthy"
        };
        let entry = written_by_kind.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += per_set.get(set).copied().unwrap_or(0);
    }
    println!("== first contact ({binary})");
    println!(
        "every set looked at after {:.1} s; last write to a set {:.1} s after start",
        looked_at.unwrap_or_default().as_secs_f64(),
        last_write.as_secs_f64()
    );
    println!(
        "| sets | writes to sets | sets written | writes per set | most to one set | at 20/s |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {total} | {} | {:.3} | {max} | {:.0} s |",
        plan.sets.len(),
        per_set.len(),
        total as f64 / plan.sets.len() as f64,
        total as f64 / 20.0
    );
    for (kind, (sets, writes)) in &written_by_kind {
        println!("    {kind}: {sets} sets, {writes} writes");
    }
    for (target, n) in &kinds {
        println!("    {target}: {n}");
    }

    // Steady state: nothing but the Lease.
    let quiet_from = api.uptime();
    tokio::time::sleep(env_secs("WRITE_BUDGET_STEADY_SECS", 30)).await;
    let steady = api.count_writes(|w| w.at >= quiet_from && set_write(w));
    println!(
        "writes to sets in the next {} s: {steady}",
        (api.uptime() - quiet_from).as_secs()
    );

    // Churn, on the sets with minReadySeconds, all at once.
    let churned: Vec<(String, String)> = plan
        .sets
        .iter()
        .enumerate()
        .filter(|(i, s)| mix.min_ready(*i).is_some() && !mix.is_unready(*i) && s.replicas >= 1)
        .map(|(_, s)| (s.namespace.clone(), s.name.clone()))
        .collect();
    let sims: Vec<StatefulSetSim> = churned
        .iter()
        .map(|(ns, name)| {
            StatefulSetSim::start(
                &api,
                ns,
                name,
                SimConfig {
                    tick: Duration::from_millis(250),
                    ..SimConfig::default()
                },
                false,
            )
        })
        .collect();
    // What the sims write at start (nothing where the seeded status is consistent).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kubelet = api.client();
    let min_ready = Duration::from_secs(mix.min_ready_seconds);
    let s = Duration::from_secs;
    let ms = Duration::from_millis;
    let mut slow_script = Vec::new();
    for _ in 0..3 {
        slow_script.push((0, false, s(2)));
        slow_script.push((0, true, min_ready + s(3)));
    }
    // Quiet for three intervals of the conditions (1 s): nothing more comes of the phase.
    let quiet = s(3);
    let slow = churn_phase(&api, &kubelet, &churned, &slow_script, s(1), quiet).await;
    let burst_script: Vec<(u32, bool, Duration)> =
        (0..8).map(|i| (0, i % 2 == 1, ms(60))).collect();
    let burst = churn_phase(
        &api,
        &kubelet,
        &churned,
        &burst_script,
        min_ready + s(2),
        quiet,
    )
    .await;
    let before_flaps =
        churn_phase(&api, &kubelet, &churned, &[(0, false, s(2))], s(1), quiet).await;
    let flap_script: Vec<(u32, bool, Duration)> =
        (0..6).map(|i| (0, i % 2 == 0, ms(300))).collect();
    let flaps = churn_phase(&api, &kubelet, &churned, &flap_script, s(1), quiet).await;
    let after_flaps = churn_phase(
        &api,
        &kubelet,
        &churned,
        &[(0, true, min_ready + s(3))],
        s(1),
        quiet,
    )
    .await;
    for sim in sims {
        sim.stop().await;
    }
    // serve's log, for a closer look (`SCALE_SERVE_ARGS="--log-level debug"`).
    if let Ok(path) = std::env::var("WRITE_BUDGET_SERVE_LOG") {
        std::fs::write(&path, served.logs().join("\n")).expect("the log is written");
    }
    println!(
        "== churn on {} sets with minReadySeconds {} (our writes: status patches and writes to the set, every one sent)",
        churned.len(),
        mix.min_ready_seconds
    );
    println!("| phase | turns took | built-in status writes | ours | ours per built-in write |");
    println!("|---|---|---|---|---|");
    let mut all = SetWrites::default();
    for (phase, (w, took)) in [
        ("unready / ready, 2 s and 6 s apart (each turn news)", slow),
        ("8 turns 60 ms apart (within the 1 s interval)", burst),
        ("one pod unready (news)", before_flaps),
        (
            "6 turns 300 ms apart, within minReadySeconds (no news)",
            flaps,
        ),
        (
            "ready for good, available after minReadySeconds",
            after_flaps,
        ),
    ] {
        println!(
            "| {phase} | {:.1} s | {} | {} ({} status, {} set) | {:.2} |",
            took.as_secs_f64(),
            w.builtin,
            w.ours(),
            w.ours_status,
            w.ours_set,
            w.ratio()
        );
        all.builtin += w.builtin;
        all.ours_status += w.ours_status;
        all.ours_set += w.ours_set;
    }
    println!(
        "| all | | {} | {} | {:.2} |",
        all.builtin,
        all.ours(),
        all.ratio()
    );
    drop(served);
}
