//! The parts of kube-controller-manager the captures show at work, played through the API as
//! they act (the fake models the garbage collector and the claim protection itself):
//!
//! - the StatefulSet controller (`pkg/controller/statefulset`): claims of the claim templates,
//!   then the pod of each missing ordinal (one at a time under `OrderedReady`, stopping at a pod
//!   that is not Running and Ready, which none is without a kubelet), and a whole-status write
//!   (`UpdateStatus`) when the status it counts differs (`inconsistentStatus`); revisions
//!   named as `history.HashControllerRevision` names them;
//! - the PersistentVolume controller (`pkg/controller/volume/persistentvolume`): a class-less
//!   claim gets the default class (v1.25+), a claim binds to the volume pre-bound to it
//!   (volume `claimRef`, volume phase, claim `volumeName` and annotations, claim status), and a
//!   claim of a class whose provisioner no in-tree plugin runs is handed to that provisioner
//!   (the two `storage-provisioner` annotations).

use serde_json::{Value, json};

use super::{Harness, STATEFULSET_CONTROLLER, VOLUME_BINDER};
use crate::support::fake_apiserver::resources::{
    PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, PODS, STATEFULSETS, STORAGE_CLASSES,
};

/// Now, as a MicroTime.
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// `rand.SafeEncodeString`.
fn safe_encode(text: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    text.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// The name of the ControllerRevision of a set's template: `<set>-` and the FNV-1 32-bit hash
/// of `{"spec":{"template":{...,"$patch":"replace"}}}` (compact, keys sorted) followed by the
/// collision count, safe-encoded (`history.HashControllerRevision`, `getPatch`).
pub fn revision_name(set: &Value) -> String {
    let mut template = set.pointer("/spec/template").cloned().unwrap_or(json!({}));
    template["$patch"] = json!("replace");
    let patch = json!({"spec": {"template": template}}).to_string();
    let collisions = set
        .pointer("/status/collisionCount")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut hash: u32 = 2_166_136_261;
    for byte in patch.bytes().chain(collisions.to_string().bytes()) {
        hash = hash.wrapping_mul(16_777_619);
        hash ^= u32::from(byte);
    }
    let name = set
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    format!("{name}-{}", safe_encode(&hash.to_string()))
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn running_and_ready(pod: &Value) -> bool {
    text(pod, "/status/phase") == "Running"
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// The StatefulSet controller's sync of every set in `namespace`.
pub async fn sync_sets(h: &Harness, namespace: &str) {
    let sets: Vec<Value> = h
        .api
        .list_objects(&STATEFULSETS)
        .into_iter()
        .filter(|s| text(s, "/metadata/namespace") == namespace)
        .filter(|s| s.pointer("/metadata/deletionTimestamp").is_none())
        .collect();
    for set in sets {
        sync_set(h, &set).await;
    }
}

/// The claims of one ordinal, as `getPersistentVolumeClaims` makes them.
fn claims_of(set: &Value, pod: &str) -> Vec<Value> {
    let namespace = text(set, "/metadata/namespace");
    let selector = set
        .pointer("/spec/selector/matchLabels")
        .cloned()
        .unwrap_or(json!({}));
    set.pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|template| {
            let mut claim = template.clone();
            let name = format!("{}-{pod}", text(template, "/metadata/name"));
            claim["apiVersion"] = json!("v1");
            claim["kind"] = json!("PersistentVolumeClaim");
            claim["metadata"]["name"] = json!(name);
            claim["metadata"]["namespace"] = json!(namespace);
            let mut labels = claim["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for (k, v) in selector.as_object().into_iter().flatten() {
                labels.insert(k.clone(), v.clone());
            }
            claim["metadata"]["labels"] = json!(labels);
            claim
        })
        .collect()
}

/// The pod of one ordinal (`newVersionedStatefulSetPod`).
fn pod_of(h: &Harness, set: &Value, ordinal: usize, revision: &str) -> Value {
    let name = text(set, "/metadata/name");
    let pod_name = format!("{name}-{ordinal}");
    let template = set.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert("statefulset.kubernetes.io/pod-name".into(), json!(pod_name));
    labels.insert("controller-revision-hash".into(), json!(revision));
    if h.api.config().pod_index_label {
        labels.insert(
            "apps.kubernetes.io/pod-index".into(),
            json!(ordinal.to_string()),
        );
    }
    let mut metadata = json!({
        "name": pod_name, "generateName": format!("{name}-"),
        "namespace": text(set, "/metadata/namespace"), "labels": labels,
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
            "uid": text(set, "/metadata/uid"), "controller": true, "blockOwnerDeletion": true}],
    });
    if let Some(annotations) = template["metadata"].get("annotations") {
        metadata["annotations"] = annotations.clone();
    }
    let mut spec = template["spec"].clone();
    spec["hostname"] = json!(pod_name);
    spec["subdomain"] = json!(text(set, "/spec/serviceName"));
    // updateStorage: a volume per claim template, then the template's own.
    let mut volumes: Vec<Value> = claims_of(set, &pod_name)
        .iter()
        .zip(
            set["spec"]["volumeClaimTemplates"]
                .as_array()
                .into_iter()
                .flatten(),
        )
        .map(|(claim, template)| {
            json!({"name": text(template, "/metadata/name"),
                   "persistentVolumeClaim": {"claimName": text(claim, "/metadata/name")}})
        })
        .collect();
    volumes.extend(spec["volumes"].as_array().cloned().unwrap_or_default());
    if !volumes.is_empty() {
        spec["volumes"] = json!(volumes);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})
}

async fn sync_set(h: &Harness, set: &Value) {
    let namespace = text(set, "/metadata/namespace").to_owned();
    let name = text(set, "/metadata/name").to_owned();
    let uid = text(set, "/metadata/uid").to_owned();
    let replicas = set
        .pointer("/spec/replicas")
        .and_then(Value::as_u64)
        .unwrap_or(1) as usize;
    let ordered = text(set, "/spec/podManagementPolicy") != "Parallel";
    let update_revision = revision_name(set);
    let current_revision = match text(set, "/status/currentRevision") {
        "" => update_revision.clone(),
        current => current.to_owned(),
    };
    let pod = |ordinal: usize| {
        h.api
            .get_object(&PODS, &namespace, &format!("{name}-{ordinal}"))
    };
    for ordinal in 0..replicas {
        match pod(ordinal) {
            None => {
                let pod_name = format!("{name}-{ordinal}");
                for claim in claims_of(set, &pod_name) {
                    if h.api
                        .get_object(
                            &PERSISTENT_VOLUME_CLAIMS,
                            &namespace,
                            text(&claim, "/metadata/name"),
                        )
                        .is_none()
                    {
                        let path = format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims");
                        h.create(STATEFULSET_CONTROLLER, &path, claim).await;
                    }
                }
                let path = format!("/api/v1/namespaces/{namespace}/pods");
                h.create(
                    STATEFULSET_CONTROLLER,
                    &path,
                    pod_of(h, set, ordinal, &update_revision),
                )
                .await;
                if ordered {
                    break;
                }
            }
            Some(existing) if ordered && !running_and_ready(&existing) => break,
            Some(_) => {}
        }
    }

    // The status, counted from the pods the set owns.
    let pods: Vec<Value> = h
        .api
        .list_objects(&PODS)
        .into_iter()
        .filter(|p| text(p, "/metadata/namespace") == namespace)
        .filter(|p| {
            p.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r["uid"] == json!(uid)))
        })
        .collect();
    let count = |f: &dyn Fn(&Value) -> bool| pods.iter().filter(|p| f(p)).count();
    let total = pods.len();
    let ready = count(&running_and_ready);
    let updated =
        count(&|p| text(p, "/metadata/labels/controller-revision-hash") == update_revision);
    let mut current_revision = current_revision;
    let mut current =
        count(&|p| text(p, "/metadata/labels/controller-revision-hash") == current_revision);
    // completeRollingUpdate
    if text(set, "/spec/updateStrategy/type") == "RollingUpdate"
        && updated == total
        && ready == total
    {
        current_revision = update_revision.clone();
        current = updated;
    }
    let generation = set
        .pointer("/metadata/generation")
        .cloned()
        .unwrap_or(json!(1));
    let mut status = json!({"observedGeneration": generation, "replicas": total,
        "currentRevision": current_revision, "updateRevision": update_revision,
        "collisionCount": 0, "availableReplicas": 0});
    // omitempty counters
    for (field, value) in [
        ("readyReplicas", ready),
        ("currentReplicas", current),
        ("updatedReplicas", updated),
    ] {
        if value > 0 {
            status[field] = json!(value);
        }
    }
    let Some(stored) = h.api.get_object(&STATEFULSETS, &namespace, &name) else {
        return;
    };
    let number = |v: &Value, f: &str| v.get(f).and_then(Value::as_i64).unwrap_or(0);
    let words = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
    let old = stored.get("status").cloned().unwrap_or(json!({}));
    let inconsistent = number(&status, "observedGeneration") > number(&old, "observedGeneration")
        || [
            "replicas",
            "currentReplicas",
            "readyReplicas",
            "updatedReplicas",
            "availableReplicas",
        ]
        .iter()
        .any(|f| number(&status, f) != number(&old, f))
        || ["currentRevision", "updateRevision"]
            .iter()
            .any(|f| words(&status, f) != words(&old, f));
    if !inconsistent {
        return;
    }
    let mut written = stored.clone();
    written["status"] = status;
    let path = format!("/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}/status");
    let answer = h
        .call(STATEFULSET_CONTROLLER, "PUT", &path, None, Some(&written))
        .await;
    assert!(
        answer.ok(),
        "{} status of {namespace}/{name}: {answer:?}",
        h.profile.label()
    );
}

/// The PersistentVolume controller's pass over the unbound claims of `namespace`.
pub async fn volumes(h: &Harness, namespace: &str) {
    let names: Vec<String> = h
        .api
        .list_objects(&PERSISTENT_VOLUME_CLAIMS)
        .into_iter()
        .filter(|c| text(c, "/metadata/namespace") == namespace)
        .filter(|c| text(c, "/spec/volumeName").is_empty())
        .filter(|c| c.pointer("/metadata/deletionTimestamp").is_none())
        .map(|c| text(&c, "/metadata/name").to_owned())
        .collect();
    for name in names {
        sync_claim(h, namespace, &name).await;
    }
}

fn claim_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")
}

async fn put(h: &Harness, path: &str, object: &Value) {
    let answer = h.call(VOLUME_BINDER, "PUT", path, None, Some(object)).await;
    assert!(answer.ok(), "{} PUT {path}: {answer:?}", h.profile.label());
}

async fn sync_claim(h: &Harness, namespace: &str, name: &str) {
    let get = || h.api.get_object(&PERSISTENT_VOLUME_CLAIMS, namespace, name);
    let Some(mut claim) = get() else {
        return;
    };
    let annotated_class = claim
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .is_some();
    // RetroactiveDefaultStorageClass (v1.25+): a claim created without a class gets the
    // default once there is one.
    if claim.pointer("/spec/storageClassName").is_none()
        && !annotated_class
        && h.api.config().retroactive_default_class_allowed
        && let Some(default) = default_class(h)
    {
        claim["spec"]["storageClassName"] = json!(default);
        put(h, &claim_path(namespace, name), &claim).await;
        let Some(again) = get() else {
            return;
        };
        claim = again;
    }
    // A volume pre-bound to this claim (by name, and uid if it has one).
    let claim_uid = text(&claim, "/metadata/uid").to_owned();
    let volume = h
        .api
        .list_objects(&PERSISTENT_VOLUMES)
        .into_iter()
        .find(|v| {
            let uid = text(v, "/spec/claimRef/uid");
            text(v, "/spec/claimRef/namespace") == namespace
                && text(v, "/spec/claimRef/name") == name
                && (uid.is_empty() || uid == claim_uid)
        });
    if let Some(volume) = volume {
        bind(h, &claim, &volume).await;
        return;
    }
    let class = text(&claim, "/spec/storageClassName");
    let provisioner = h
        .api
        .get_object(&STORAGE_CLASSES, "", class)
        .map(|c| text(&c, "/provisioner").to_owned())
        .unwrap_or_default();
    let handed = claim
        .pointer("/metadata/annotations/volume.kubernetes.io~1storage-provisioner")
        .is_some();
    if class.is_empty()
        || provisioner.is_empty()
        || provisioner.starts_with("kubernetes.io/")
        || handed
    {
        return;
    }
    // setClaimProvisioner: the external provisioner's turn.
    let annotations = claim["metadata"]
        .as_object_mut()
        .map(|m| m.entry("annotations").or_insert(json!({})));
    if let Some(Value::Object(annotations)) = annotations {
        annotations.insert(
            "volume.beta.kubernetes.io/storage-provisioner".into(),
            json!(provisioner),
        );
        annotations.insert(
            "volume.kubernetes.io/storage-provisioner".into(),
            json!(provisioner),
        );
    }
    put(h, &claim_path(namespace, name), &claim).await;
}

fn default_class(h: &Harness) -> Option<String> {
    h.api
        .list_objects(&STORAGE_CLASSES)
        .into_iter()
        .find(|c| {
            c.pointer("/metadata/annotations/storageclass.kubernetes.io~1is-default-class")
                == Some(&json!("true"))
        })
        .map(|c| text(&c, "/metadata/name").to_owned())
}

/// `bind`: the volume's claimRef, its phase, the claim's volumeName and annotations, its
/// status.
async fn bind(h: &Harness, claim: &Value, volume: &Value) {
    let namespace = text(claim, "/metadata/namespace").to_owned();
    let name = text(claim, "/metadata/name").to_owned();
    let volume_name = text(volume, "/metadata/name").to_owned();
    let volume_path = format!("/api/v1/persistentvolumes/{volume_name}");

    let mut bound_volume = volume.clone();
    bound_volume["spec"]["claimRef"] = json!({"kind": "PersistentVolumeClaim",
        "namespace": namespace, "name": name, "uid": text(claim, "/metadata/uid"),
        "apiVersion": "v1", "resourceVersion": text(claim, "/metadata/resourceVersion")});
    put(h, &volume_path, &bound_volume).await;
    if let Some(mut stored) = h.api.get_object(&PERSISTENT_VOLUMES, "", &volume_name) {
        stored["status"]["phase"] = json!("Bound");
        put(h, &format!("{volume_path}/status"), &stored).await;
    }

    let mut bound_claim = claim.clone();
    bound_claim["spec"]["volumeName"] = json!(volume_name);
    let annotations = bound_claim["metadata"]
        .as_object_mut()
        .map(|m| m.entry("annotations").or_insert(json!({})));
    if let Some(Value::Object(annotations)) = annotations {
        annotations.insert("pv.kubernetes.io/bind-completed".into(), json!("yes"));
        annotations.insert("pv.kubernetes.io/bound-by-controller".into(), json!("yes"));
    }
    put(h, &claim_path(&namespace, &name), &bound_claim).await;
    if let Some(mut stored) = h
        .api
        .get_object(&PERSISTENT_VOLUME_CLAIMS, &namespace, &name)
    {
        stored["status"] = json!({"phase": "Bound",
            "accessModes": volume.pointer("/spec/accessModes").cloned().unwrap_or(json!([])),
            "capacity": volume.pointer("/spec/capacity").cloned().unwrap_or(json!({}))});
        put(
            h,
            &format!("{}/status", claim_path(&namespace, &name)),
            &stored,
        )
        .await;
    }
}
