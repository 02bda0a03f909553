//! One apply that changes both the pod template and a claim template's storage of an `InPlace`
//! set, on a driver that grows file systems only offline, end to end: the real controller
//! (with `serve`'s features) against the fake API server with the project's webhook in its
//! write path, the StatefulSet simulation (the built-in controller's own rolling update and
//! the kubelet) and the offline-expansion resizer (a claim's file system grows only as its pod
//! is re-created).
//!
//! What the user sees: each pod is re-created once, by the rolling update, and that
//! re-creation is the restart the expansion waits for; no pod is evicted, never more than one
//! is unavailable, and at the end the set's partition is the user's again, with nothing of
//! the rollout left on it. Under `OnDelete` the same apply re-creates no pod and holds nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use stateful_admission::controller::{ControllerConfig, Features};
use stateful_admission::names;

use crate::claim_rollout::{NS, class, fast};
use crate::support::admission_hook::RouterHook;
use crate::support::barrier::{Changes, Peak, fold, objects_now};
use crate::support::controller::{RunningController, eventually};
use crate::support::fake_apiserver::{FakeApiServer, ResourceType};
use crate::support::offline_resizer::{OfflineResizer, ResizerConfig};
use crate::support::statefulset_sim::{SimConfig, StatefulSetSim, pod_is_available};

const WAIT: Duration = Duration::from_secs(60);
const REPLICAS: u32 = 3;
/// The field manager of the user's `kubectl apply --server-side`.
const USER: &str = "kubectl";
/// Where the webhook keeps the user's partition while it holds the built-in rolling update.
const ROLLOUT_HOLD: &str = "stateful-admission.io/rollout-hold";
const OLD_IMAGE: &str = "registry.example.com/db:1";
const NEW_IMAGE: &str = "registry.example.com/db:2";

/// The user's manifest: an `InPlace` set `web` of three replicas opted in to restarts for a
/// resize, with `strategy` as its `updateStrategy`, running `image` with claims of `size`.
fn manifest(strategy: &Value, image: &str, size: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NS,
                     "annotations": {names::VOLUME_CLAIM_UPDATE_POLICY: "InPlace",
                                     names::RESTART_PODS_FOR_RESIZE: "true"}},
        "spec": {"replicas": REPLICAS, "serviceName": "web",
                 "selector": {"matchLabels": {"app": "web"}},
                 "updateStrategy": strategy,
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "db", "image": image}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                              "resources": {"requests": {"storage": size}}}}]},
    })
}

fn rolling() -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
}

fn on_delete() -> Value {
    json!({"type": "OnDelete"})
}

/// The user's server-side apply of [`manifest`].
async fn apply(api: &FakeApiServer, strategy: &Value, image: &str, size: &str) -> StatefulSet {
    let sets: Api<StatefulSet> = Api::namespaced(api.client(), NS);
    sets.patch(
        "web",
        &PatchParams::apply(USER),
        &Patch::Apply(&manifest(strategy, image, size)),
    )
    .await
    .unwrap_or_else(|e| panic!("the user's apply of {image} and {size}: {e}"))
}

/// The webhook in the write path, the expandable class `fast`, three bound 1Gi claims on a
/// driver without online expansion and their volumes, the set as the user applies it, and the
/// built-in controller (its own rolling update) and kubelet simulated; returns once the three
/// pods are Ready. The kubelet grows a waiting file system as it mounts the volume, before the
/// pod turns Ready, as a real one does.
async fn install(api: &FakeApiServer, strategy: &Value) -> StatefulSetSim {
    RouterHook::install(api).await;
    api.put_object(class("fast", true));
    for n in 0..REPLICAS {
        api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("pv-web-{n}")},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "fast",
                     "csi": {"driver": "offline.csi.example.com", "volumeHandle": format!("h-{n}")}}}));
        api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": format!("data-web-{n}"), "namespace": NS, "labels": {"app": "web"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                     "resources": {"requests": {"storage": "1Gi"}}, "volumeName": format!("pv-web-{n}")},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}));
    }
    apply(api, strategy, OLD_IMAGE, "1Gi").await;
    let sim = StatefulSetSim::start(
        api,
        NS,
        "web",
        SimConfig {
            mount_grows_file_systems: true,
            ..SimConfig::default()
        },
        true,
    );
    assert!(
        eventually(WAIT, || available(api) == REPLICAS as usize).await,
        "three Ready pods"
    );
    sim
}

/// `serve`'s controller, with a short grace before a restart for a resize.
fn controller() -> ControllerConfig {
    ControllerConfig {
        resize_restart_grace: Duration::from_secs(1),
        ..fast("a", Features::default())
    }
}

/// The resizer of a driver without online expansion, its node side at mount. Its controller
/// side (the driver's `ControllerExpandVolume`, a storage backend's call) takes longer than
/// the built-in controller takes to re-create a pod: a pod re-created before its claim waits
/// at `FileSystemResizePending` mounted the volume before it grew, and the claim then waits
/// for another restart, as a real kubelet grows a file system only at a mount that finds the
/// expansion pending (`NodeResizePending`).
fn resizer() -> ResizerConfig {
    ResizerConfig {
        controller_delay: Duration::from_secs(1),
        grow_at_mount: true,
        ..ResizerConfig::default()
    }
}

fn pod(api: &FakeApiServer, n: u32) -> Option<Value> {
    api.get_object(ResourceType::of::<Pod>(), NS, &format!("web-{n}"))
}

fn available(api: &FakeApiServer) -> usize {
    (0..REPLICAS)
        .filter(|n| pod(api, *n).is_some_and(|p| pod_is_available(&p)))
        .count()
}

fn image(pod: &Value) -> &str {
    pod["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

fn capacity(api: &FakeApiServer, n: u32) -> String {
    api.get_object(
        ResourceType::of::<PersistentVolumeClaim>(),
        NS,
        &format!("data-web-{n}"),
    )
    .and_then(|c| {
        c["status"]["capacity"]["storage"]
            .as_str()
            .map(str::to_owned)
    })
    .unwrap_or_default()
}

fn live(api: &FakeApiServer) -> Value {
    api.get_object(ResourceType::of::<StatefulSet>(), NS, "web")
        .unwrap_or(Value::Null)
}

fn partition(set: &Value) -> Option<i64> {
    set.pointer("/spec/updateStrategy/rollingUpdate/partition")
        .and_then(Value::as_i64)
}

fn hold(set: &Value) -> Option<&str> {
    set.pointer("/metadata/annotations")
        .and_then(|a| a.get(ROLLOUT_HOLD))
        .and_then(Value::as_str)
}

/// The managers whose entries own `spec.updateStrategy.rollingUpdate.partition`.
fn partition_owners(set: &Value) -> Vec<(String, String)> {
    set["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e.pointer("/fieldsV1/f:spec/f:updateStrategy/f:rollingUpdate/f:partition")
                .is_some()
        })
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_owned(),
                e["operation"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Deletes of pods anyone made through the API (the simulation's own go through the store).
fn pod_deletes(api: &FakeApiServer) -> Vec<String> {
    api.writes()
        .iter()
        .filter(|w| w.method == "DELETE" && w.path.contains("/pods/"))
        .map(|w| w.path.clone())
        .collect()
}

fn events(api: &FakeApiServer, reason: &str) -> Vec<Event> {
    api.list::<Event>()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// Every pod object (uid) each pod of the namespace had, from the fake's record of every
/// change since [`PodObjects::track`]: a pod that lived a microsecond counts.
struct PodObjects {
    uids: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>,
    changes: Changes,
}

impl PodObjects {
    fn track(api: &FakeApiServer) -> Self {
        let pods = ResourceType::of::<Pod>();
        let (revision, mut objects) = objects_now(api, pods, NS);
        let uid = |p: &Value| p["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let seen: BTreeMap<String, BTreeSet<String>> = objects
            .iter()
            .map(|(name, p)| (name.clone(), BTreeSet::from([uid(p)])))
            .collect();
        let uids = Arc::new(Mutex::new(seen));
        let changes = Changes::follow(api, revision, {
            let uids = uids.clone();
            move |change| {
                if fold(&mut objects, change, pods, NS)
                    && let Some(name) = change.object["metadata"]["name"].as_str()
                {
                    uids.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(name.to_owned())
                        .or_default()
                        .insert(uid(&change.object));
                }
            }
        });
        Self { uids, changes }
    }

    /// How many pod objects each pod had, every change so far folded in.
    fn counts(&self) -> BTreeMap<String, usize> {
        self.changes.catch_up();
        self.uids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, uids)| (name.clone(), uids.len()))
            .collect()
    }
}

/// The claims awaited (`awaiting` of `volume-claim-status`, summed) in every version of `web`
/// that carried a hold and a claim status, from every change.
fn awaited_while_held(api: &FakeApiServer) -> (Arc<Mutex<Vec<u64>>>, Changes) {
    let sets = ResourceType::of::<StatefulSet>();
    let (revision, _) = objects_now(api, sets, NS);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let changes = Changes::follow(api, revision, {
        let seen = seen.clone();
        move |change| {
            let object = &change.object;
            if object["metadata"]["name"] != "web" || hold(object).is_none() {
                return;
            }
            let Some(status) =
                object["metadata"]["annotations"]["stateful-admission.io/volume-claim-status"]
                    .as_str()
                    .and_then(|s| serde_json::from_str::<Vec<Value>>(s).ok())
            else {
                return;
            };
            let awaiting = status
                .iter()
                .map(|t| t["awaiting"].as_u64().unwrap_or(0))
                .sum();
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(awaiting);
        }
    });
    (seen, changes)
}

/// The most pods of `web` unavailable at once, over every state the pods went through.
fn peak_unavailable(api: &FakeApiServer) -> Peak {
    Peak::track(api, ResourceType::of::<Pod>(), NS, |pods| {
        REPLICAS as usize
            - (0..REPLICAS)
                .filter(|n| pods.get(&format!("web-{n}")).is_some_and(pod_is_available))
                .count()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn one_apply_of_image_and_storage_restarts_each_pod_once_through_the_rolling_update() {
    let api = FakeApiServer::start().await;
    let sim = install(&api, &rolling()).await;
    let resizer = OfflineResizer::start(&api, NS, resizer());
    let controller = RunningController::start(&api, controller());
    controller.settle().await;
    let objects = PodObjects::track(&api);
    let peak = peak_unavailable(&api);
    let (awaited, set_changes) = awaited_while_held(&api);

    apply(&api, &rolling(), NEW_IMAGE, "2Gi").await;
    let done = eventually(WAIT, || {
        let set = live(&api);
        (0..REPLICAS).all(|n| {
            capacity(&api, n) == "2Gi"
                && pod(&api, n).is_some_and(|p| pod_is_available(&p) && image(&p) == NEW_IMAGE)
        }) && partition(&set) == Some(0)
            && hold(&set).is_none()
    })
    .await;
    let set = live(&api);
    assert!(
        done,
        "every claim at 2Gi, every pod Ready at {NEW_IMAGE}, the partition the user's and no hold: \
         capacities {:?}, images {:?}, partition {:?}, hold {:?}, pod objects {:?}",
        (0..REPLICAS).map(|n| capacity(&api, n)).collect::<Vec<_>>(),
        (0..REPLICAS)
            .map(|n| pod(&api, n).map(|p| image(&p).to_owned()))
            .collect::<Vec<_>>(),
        partition(&set),
        hold(&set),
        objects.counts()
    );

    // Each pod re-created once: the rolling update's re-creation was the restart the
    // expansion waited for.
    let once: BTreeMap<String, usize> = (0..REPLICAS).map(|n| (format!("web-{n}"), 2)).collect();
    assert_eq!(
        objects.counts(),
        once,
        "pod objects per pod (each pod re-created exactly once)"
    );
    let stats = resizer.stop().await;
    assert_eq!(
        stats.restarts,
        (0..REPLICAS).map(|n| (format!("web-{n}"), 1)).collect(),
        "new pods while a claim waited"
    );
    let mut completed = stats.completed.clone();
    completed.sort();
    assert_eq!(completed, ["data-web-0", "data-web-1", "data-web-2"]);
    assert_eq!(peak.get(), 1, "never more than one pod unavailable");
    // While held, the claim status says the rollout is not done (GitOps health checks and
    // `status --wait` read it): the claims below the hold are awaited.
    set_changes.catch_up();
    let awaited = awaited.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        !awaited.is_empty() && awaited.iter().all(|n| *n > 0),
        "claims awaited in each held version with a claim status: {awaited:?}"
    );
    assert!(
        api.eviction_records().is_empty(),
        "no eviction: {:?}",
        api.eviction_records()
    );
    assert_eq!(controller.metric("claim_pod_evictions_total"), 0.0);
    assert!(events(&api, "PodEvictedForResize").is_empty());
    assert!(pod_deletes(&api).is_empty(), "{:?}", pod_deletes(&api));

    // The user applies the same manifest again: no conflict, the partition still theirs, and
    // nothing more happens.
    let again = apply(&api, &rolling(), NEW_IMAGE, "2Gi").await;
    let again = serde_json::to_value(&again).expect("json");
    assert_eq!(partition(&again), Some(0));
    assert!(hold(&again).is_none(), "{again}");
    assert!(
        partition_owners(&again).contains(&(USER.to_owned(), "Apply".to_owned())),
        "the user's apply owns the partition: {:?}",
        partition_owners(&again)
    );
    controller.reconciled_after_n(controller.mark(), 2).await;
    let set = live(&api);
    assert_eq!(partition(&set), Some(0));
    assert!(hold(&set).is_none(), "{set}");
    assert_eq!(objects.counts(), once, "the second apply re-created no pod");
    assert!(api.eviction_records().is_empty());
    controller.stop().await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn under_on_delete_one_apply_of_image_and_storage_holds_and_restarts_nothing() {
    let api = FakeApiServer::start().await;
    let sim = install(&api, &on_delete()).await;
    let _resizer = OfflineResizer::start(&api, NS, resizer());
    let controller = RunningController::start(&api, controller());
    controller.settle().await;
    let objects = PodObjects::track(&api);

    let answered = apply(&api, &on_delete(), NEW_IMAGE, "2Gi").await;
    let answered = serde_json::to_value(&answered).expect("json");
    assert!(
        answered
            .pointer("/spec/updateStrategy/rollingUpdate")
            .is_none(),
        "{answered}"
    );
    assert!(hold(&answered).is_none(), "{answered}");
    // The set converged to the new templates (its claims are the user's to restart under
    // OnDelete), and the controller looked since.
    assert!(
        eventually(WAIT, || {
            let set = live(&api);
            set.pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage")
                == Some(&json!("2Gi"))
                && set
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES))
                    .is_none()
        })
        .await,
        "{}",
        live(&api)
    );
    controller.reconciled_after_n(controller.mark(), 2).await;
    let set = live(&api);
    assert!(
        set.pointer("/spec/updateStrategy/rollingUpdate").is_none(),
        "{set}"
    );
    assert_eq!(set["spec"]["updateStrategy"]["type"], "OnDelete");
    assert!(hold(&set).is_none(), "{set}");
    let untouched: BTreeMap<String, usize> =
        (0..REPLICAS).map(|n| (format!("web-{n}"), 1)).collect();
    assert_eq!(objects.counts(), untouched, "no pod re-created");
    assert!(
        (0..REPLICAS).all(|n| pod(&api, n).is_some_and(|p| image(&p) == OLD_IMAGE)),
        "pods keep their image until the user deletes them"
    );
    assert!(api.eviction_records().is_empty());
    assert!(pod_deletes(&api).is_empty());
    assert!(sim.stats().deleted_by_builtin.is_empty());
    controller.stop().await;
    sim.stop().await;
}
