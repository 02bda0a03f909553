//! What the control plane here lacks, played by the test over the API, as the real components
//! would write it:
//! - the kubelet: a pod becomes Running and Ready (unless the scenario holds it unready), and a
//!   pod being deleted is removed (`gracePeriodSeconds: 0`), as once its containers stopped;
//! - the external provisioner: a claim of a class gets a PersistentVolume pre-bound to it, which
//!   the PV controller then binds;
//! - the external resizer (and the node's file system expansion): a bound claim asking for more
//!   than its capacity gets it (`status.capacity`), or the resize error the scenario chose; a
//!   claim whose `volumeAttributesClassName` changed gets it as current. In offline-expansion
//!   mode ([`Node::offline_expansion`]) it plays a driver that grows the file system only while
//!   the volume is unpublished: the claim stops at `FileSystemResizePending` (its volume
//!   expanded, `allocatedResources` the request, `allocatedResourceStatuses` `NodeResizePending`,
//!   `status.capacity` unchanged, as external-resizer's `markPVCAsFSResizeRequired` leaves it)
//!   until the pod that mounts it is another pod than then (another uid) and Ready; then the
//!   capacity is set and the resize condition and status go (the kubelet's
//!   `MarkFSResizeFinished`). Its controller side may be made to take a while
//!   ([`Node::controller_expansion_delay`]), as a storage backend's expand call does.
//!
//! Each polls its scenario's namespaces every 200 ms until the scenario ends.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::json;
use stateful_admission::quantity::Quantity;

use super::{SCENARIO_LABEL, Scope};

/// The scenario's knobs on the actors.
#[derive(Clone, Default)]
pub struct Node {
    /// `namespace/pod` kept Running but not Ready.
    pub unready: Arc<Mutex<HashSet<String>>>,
    /// `namespace/claim` whose expansion fails with this message (`ControllerResizeError`).
    pub resize_errors: Arc<Mutex<HashMap<String, String>>>,
    /// Expansions wait while set (a resizer that is slow or down).
    pub resize_paused: Arc<std::sync::atomic::AtomicBool>,
    /// Pods the kubelet first sees from now on become Ready only this long after (containers
    /// that take a while to start), so that a rollout's concurrency shows.
    slow_start: Arc<Mutex<Option<(Duration, std::time::Instant)>>>,
    /// When the kubelet first saw each pod (by uid).
    first_seen: Arc<Mutex<HashMap<String, std::time::Instant>>>,
    /// Expansions finish only once the claim's pod is re-created ([`Node::offline_expansion`]).
    offline: Arc<std::sync::atomic::AtomicBool>,
    offline_state: Arc<Mutex<Offline>>,
}

/// What the offline resizer keeps: the claims waiting for a new pod, and what it saw.
#[derive(Default)]
struct Offline {
    /// `namespace/claim` at `FileSystemResizePending` → the uid of its pod then (`None`: no
    /// pod), and the new pods seen since.
    waiting: HashMap<String, (Option<String>, BTreeSet<String>)>,
    /// `namespace/claim` set to `FileSystemResizePending`, once per expansion, in order.
    pending: Vec<String>,
    /// `namespace/claim` whose expansion finished on a new pod, in order.
    completed: Vec<String>,
    /// `namespace/pod` → new pods (uids) it had while a claim of it waited.
    restarts: BTreeMap<String, usize>,
    /// How long the controller side of an offline expansion takes
    /// ([`Node::controller_expansion_delay`]).
    controller_delay: Duration,
    /// `namespace/claim` → when the resizer first saw it ask for more than its capacity.
    asked: HashMap<String, std::time::Instant>,
}

/// The resizer's condition type and message (external-resizer, `markPVCAsFSResizeRequired`).
pub const FILE_SYSTEM_RESIZE_PENDING: &str = "FileSystemResizePending";
pub const FILE_SYSTEM_RESIZE_PENDING_MESSAGE: &str =
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node.";

impl Node {
    pub fn hold_unready(&self, ns: &str, pod: &str) {
        self.unready
            .lock()
            .expect("unready")
            .insert(format!("{ns}/{pod}"));
    }

    pub fn release(&self, ns: &str, pod: &str) {
        self.unready
            .lock()
            .expect("unready")
            .remove(&format!("{ns}/{pod}"));
    }

    /// From now on, new pods take `delay` to become Ready.
    pub fn slow_start(&self, delay: Duration) {
        *self.slow_start.lock().expect("slow start") = Some((delay, std::time::Instant::now()));
    }

    /// From now on, expansions wait at `FileSystemResizePending` for the claim's pod to be
    /// re-created (a driver without online expansion).
    pub fn offline_expansion(&self) {
        self.offline
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// From now on, the controller side of an offline expansion (the driver's
    /// `ControllerExpandVolume`, a storage backend's call) takes `delay` from the first time the
    /// resizer sees a claim ask for more: a pod re-created meanwhile mounted the volume before
    /// it grew, and the claim then waits at `FileSystemResizePending` for another restart.
    pub fn controller_expansion_delay(&self, delay: Duration) {
        self.offline_state.lock().expect("offline").controller_delay = delay;
    }

    /// `namespace/claim` the offline resizer set to `FileSystemResizePending`, in order.
    pub fn resize_pending_claims(&self) -> Vec<String> {
        self.offline_state.lock().expect("offline").pending.clone()
    }

    /// `namespace/claim` whose offline expansion finished, in order.
    pub fn resize_completed_claims(&self) -> Vec<String> {
        self.offline_state
            .lock()
            .expect("offline")
            .completed
            .clone()
    }

    /// `namespace/pod` → how many new pods it had while a claim of it waited for one.
    pub fn restarts(&self) -> BTreeMap<String, usize> {
        self.offline_state.lock().expect("offline").restarts.clone()
    }

    pub fn fail_resize(&self, ns: &str, claim: &str, message: &str) {
        self.resize_errors
            .lock()
            .expect("resize errors")
            .insert(format!("{ns}/{claim}"), message.to_owned());
    }
}

/// Starts the three actors on `namespaces` until the scope stops.
pub fn start(scope: &Scope, namespaces: Vec<String>) -> Node {
    let node = Node::default();
    let client = scope.client();
    let scenario = scope.scenario;
    let stop = scope.stop.clone();
    let acting = node.clone();
    tokio::spawn(async move {
        loop {
            for ns in &namespaces {
                kubelet(&client, ns, &acting).await;
                provisioner(&client, ns, scenario).await;
                resizer(&client, ns, &acting).await;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    });
    node
}

fn manager(name: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(name.to_owned()),
        ..PatchParams::default()
    }
}

async fn kubelet(client: &Client, ns: &str, node: &Node) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return;
    };
    for pod in list.items {
        let Some(name) = pod.metadata.name.clone() else {
            continue;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            let _ = pods
                .delete(
                    &name,
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions {
                            uid: pod.metadata.uid.clone(),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    },
                )
                .await;
            continue;
        }
        let seen = pod
            .metadata
            .uid
            .as_ref()
            .map(|uid| {
                *node
                    .first_seen
                    .lock()
                    .expect("first seen")
                    .entry(uid.clone())
                    .or_insert_with(std::time::Instant::now)
            })
            .unwrap_or_else(std::time::Instant::now);
        let started_long_enough = match *node.slow_start.lock().expect("slow start") {
            Some((delay, since)) if seen >= since => seen.elapsed() >= delay,
            _ => true,
        };
        let want_ready = started_long_enough
            && !node
                .unready
                .lock()
                .expect("unready")
                .contains(&format!("{ns}/{name}"));
        let status = pod.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if status.phase.as_deref() == Some("Running") && ready == want_ready {
            continue;
        }
        let now = jiff::Timestamp::now().to_string();
        let flag = if want_ready { "True" } else { "False" };
        let started = status
            .start_time
            .map(|t| t.0.to_string())
            .unwrap_or(now.clone());
        let containers: Vec<_> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| {
                json!({"name": c.name, "image": c.image, "imageID": "", "ready": want_ready,
                       "started": true, "restartCount": 0,
                       "state": {"running": {"startedAt": started}}})
            })
            .collect();
        let patch = json!({"status": {
            "phase": "Running",
            "startTime": started,
            "podIP": "10.0.0.1",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
                {"type": "Initialized", "status": "True", "lastTransitionTime": started},
                {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                {"type": "Ready", "status": flag, "lastTransitionTime": now},
            ],
            "containerStatuses": containers,
        }});
        let _ = pods
            .patch_status(&name, &manager("e2e-kubelet"), &Patch::Merge(&patch))
            .await;
    }
}

async fn provisioner(client: &Client, ns: &str, scenario: &str) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let Ok(list) = claims.list(&ListParams::default()).await else {
        return;
    };
    for claim in list.items {
        let spec = claim.spec.clone().unwrap_or_default();
        let class = spec.storage_class_name.clone().unwrap_or_default();
        if class.is_empty()
            || spec.volume_name.as_deref().is_some_and(|v| !v.is_empty())
            || claim.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let (Some(name), Some(uid)) = (claim.metadata.name.clone(), claim.metadata.uid.clone())
        else {
            continue;
        };
        let size = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "1Gi".to_owned());
        let mut pv_spec = json!({
            "capacity": {"storage": size},
            "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".to_owned()]),
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": "Retain",
            // A CSI volume of the suite's driver: nothing mounts it here, and the apiserver
            // takes volumeAttributesClassName only on CSI volumes.
            "csi": {"driver": "hostpath.e2e.stateful-admission.io", "volumeHandle": uid},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": ns, "name": name, "uid": uid},
        });
        if let Some(vac) = &spec.volume_attributes_class_name {
            pv_spec["volumeAttributesClassName"] = json!(vac);
        }
        if let Some(mode) = &spec.volume_mode {
            pv_spec["volumeMode"] = json!(mode);
        }
        let Ok(pv) = serde_json::from_value::<PersistentVolume>(json!({
            "metadata": {"name": format!("e2e-{uid}"), "labels": {SCENARIO_LABEL: super::label_value(scenario)}},
            "spec": pv_spec,
        })) else {
            continue;
        };
        // An existing one (409) is this claim's from an earlier tick; anything else is a
        // defect of the suite, worth a line in the log.
        match volumes
            .create(
                &PostParams {
                    field_manager: Some("e2e-provisioner".into()),
                    ..PostParams::default()
                },
                &pv,
            )
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(kube::Error::Api(e)) => {
                eprintln!("e2e: provisioner: volume for {ns}/{name}: {}", e.message)
            }
            Err(e) => eprintln!("e2e: provisioner: volume for {ns}/{name}: {e}"),
            Ok(_) => {}
        }
    }
}

async fn resizer(client: &Client, ns: &str, node: &Node) {
    if node.resize_paused.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let Ok(list) = claims.list(&ListParams::default()).await else {
        return;
    };
    for claim in list.items {
        let Some(name) = claim.metadata.name.clone() else {
            continue;
        };
        let spec = claim.spec.clone().unwrap_or_default();
        let status = claim.status.clone().unwrap_or_default();
        if status.phase.as_deref() != Some("Bound") {
            continue;
        }
        let quantity = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
            q.and_then(|q| Quantity::parse(&q.0).ok())
        };
        let request = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"));
        let capacity = status.capacity.as_ref().and_then(|c| c.get("storage"));
        let grow = matches!((quantity(request), quantity(capacity)), (Some(r), Some(c)) if r > c);
        let vac_changed = spec.volume_attributes_class_name.is_some()
            && spec.volume_attributes_class_name != status.current_volume_attributes_class_name;
        if grow && let Some(request) = request {
            let failure = node
                .resize_errors
                .lock()
                .expect("resize errors")
                .get(&format!("{ns}/{name}"))
                .cloned();
            let failing = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "ControllerResizeError" && c.status == "True");
            if failure.is_none() && node.offline.load(std::sync::atomic::Ordering::SeqCst) {
                offline_resize(client, ns, node, &claim, &request.0).await;
                continue;
            }
            let patch = match failure {
                Some(_) if failing => continue,
                Some(message) => json!({"status": {"conditions": [{
                    "type": "ControllerResizeError", "status": "True",
                    "lastTransitionTime": jiff::Timestamp::now().to_string(),
                    "message": message}]}}),
                None => {
                    if let Some(volume) = &spec.volume_name {
                        let _ = volumes
                            .patch(
                                volume,
                                &manager("e2e-resizer"),
                                &Patch::Merge(
                                    &json!({"spec": {"capacity": {"storage": request.0}}}),
                                ),
                            )
                            .await;
                    }
                    json!({"status": {"capacity": {"storage": request.0}, "conditions": null}})
                }
            };
            let _ = claims
                .patch_status(&name, &manager("e2e-resizer"), &Patch::Merge(&patch))
                .await;
        }
        if vac_changed {
            let patch = json!({"status": {"currentVolumeAttributesClassName": spec.volume_attributes_class_name}});
            let _ = claims
                .patch_status(&name, &manager("e2e-resizer"), &Patch::Merge(&patch))
                .await;
        }
    }
}

/// Whether a pod is Ready and not being deleted.
fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod whose volumes mount `claim`.
async fn pod_of(client: &Client, ns: &str, claim: &str) -> Option<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods.list(&ListParams::default()).await.ok()?;
    list.items.into_iter().find(|pod| {
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(|v| {
                v.persistent_volume_claim
                    .as_ref()
                    .is_some_and(|c| c.claim_name == claim)
            })
    })
}

/// One tick of the offline resizer for a bound claim asking for `request` above its capacity.
async fn offline_resize(
    client: &Client,
    ns: &str,
    node: &Node,
    claim: &PersistentVolumeClaim,
    request: &str,
) {
    let Some(name) = claim.metadata.name.clone() else {
        return;
    };
    let key = format!("{ns}/{name}");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let conditions = claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let pending = conditions
        .iter()
        .any(|c| c.type_ == FILE_SYSTEM_RESIZE_PENDING && c.status == "True");
    let pod = pod_of(client, ns, &name).await;
    let pod_uid = pod.as_ref().and_then(|p| p.metadata.uid.clone());
    if !pending {
        // The controller side takes its time.
        {
            let mut state = node.offline_state.lock().expect("offline");
            let delay = state.controller_delay;
            let since = *state
                .asked
                .entry(key.clone())
                .or_insert_with(std::time::Instant::now);
            if since.elapsed() < delay {
                return;
            }
        }
        // The controller side is done: the volume has the size, the file system not yet.
        if let Some(volume) = claim.spec.as_ref().and_then(|s| s.volume_name.as_ref()) {
            let volumes: Api<PersistentVolume> = Api::all(client.clone());
            let _ = volumes
                .patch(
                    volume,
                    &manager("e2e-resizer"),
                    &Patch::Merge(&json!({"spec": {"capacity": {"storage": request}}})),
                )
                .await;
        }
        let mut kept: Vec<serde_json::Value> = conditions
            .iter()
            .filter(|c| !matches!(c.type_.as_str(), "Resizing" | FILE_SYSTEM_RESIZE_PENDING))
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        kept.push(json!({"type": FILE_SYSTEM_RESIZE_PENDING, "status": "True",
                         "lastTransitionTime": jiff::Timestamp::now().to_string(),
                         "message": FILE_SYSTEM_RESIZE_PENDING_MESSAGE}));
        let patch = json!({"metadata": {"resourceVersion": claim.metadata.resource_version},
                           "status": {"conditions": kept,
                                      "allocatedResources": {"storage": request},
                                      "allocatedResourceStatuses": {"storage": "NodeResizePending"}}});
        if claims
            .patch_status(&name, &manager("e2e-resizer"), &Patch::Merge(&patch))
            .await
            .is_ok()
        {
            let mut state = node.offline_state.lock().expect("offline");
            state.asked.remove(&key);
            state
                .waiting
                .insert(key.clone(), (pod_uid, BTreeSet::new()));
            state.pending.push(key);
        }
        return;
    }
    let finished = {
        let mut state = node.offline_state.lock().expect("offline");
        let Offline {
            waiting, restarts, ..
        } = &mut *state;
        // Pending before this resizer knew it: the pod there now is the one to replace.
        let (then, recreated) = waiting
            .entry(key.clone())
            .or_insert_with(|| (pod_uid.clone(), BTreeSet::new()));
        match (&pod, &pod_uid) {
            (Some(pod), Some(uid)) if Some(uid) != then.as_ref() => {
                if recreated.insert(uid.clone()) {
                    let pod_name = pod.metadata.name.clone().unwrap_or_default();
                    *restarts.entry(format!("{ns}/{pod_name}")).or_insert(0) += 1;
                }
                ready(pod)
            }
            _ => false,
        }
    };
    if !finished {
        return;
    }
    let kept: Vec<serde_json::Value> = conditions
        .iter()
        .filter(|c| !matches!(c.type_.as_str(), "Resizing" | FILE_SYSTEM_RESIZE_PENDING))
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    let patch = json!({"metadata": {"resourceVersion": claim.metadata.resource_version},
                       "status": {"capacity": {"storage": request},
                                  "conditions": if kept.is_empty() { json!(null) } else { json!(kept) },
                                  "allocatedResourceStatuses": {"storage": null}}});
    if claims
        .patch_status(&name, &manager("e2e-resizer"), &Patch::Merge(&patch))
        .await
        .is_ok()
    {
        let mut state = node.offline_state.lock().expect("offline");
        state.waiting.remove(&key);
        state.completed.push(key);
    }
}
