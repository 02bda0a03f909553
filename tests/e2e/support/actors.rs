//! What the control plane here lacks, played by the test over the API, as the real components
//! would write it:
//! - the kubelet: a pod becomes Running and Ready (unless the scenario holds it unready), and a
//!   pod being deleted is removed (`gracePeriodSeconds: 0`), as once its containers stopped;
//! - the external provisioner: a claim of a class gets a PersistentVolume pre-bound to it, which
//!   the PV controller then binds;
//! - the external resizer (and the node's file system expansion): a bound claim asking for more
//!   than its capacity gets it (`status.capacity`), or the resize error the scenario chose; a
//!   claim whose `volumeAttributesClassName` changed gets it as current.
//!
//! Each polls its scenario's namespaces every 200 ms until the scenario ends.

use std::collections::{HashMap, HashSet};
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
}

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
            "metadata": {"name": format!("e2e-{uid}"), "labels": {SCENARIO_LABEL: scenario}},
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
