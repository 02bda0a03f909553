//! Fixture builders for the tests of `status`: objects as the apiserver returns them, as JSON.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::judge;
use super::model::{self, Inputs, Selection, StatusReport};
use crate::admission::statefulset::templates::desired_annotation;
use crate::names;
use crate::rollout::journal as converge;

pub(crate) const NS: &str = "db";

/// `T0 + seconds`.
pub(crate) fn at(seconds: i64) -> Timestamp {
    let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
    t0 + SignedDuration::from_secs(seconds)
}

pub(crate) fn time(seconds: i64) -> String {
    at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// When the reports of the tests are made.
pub(crate) const NOW: i64 = 600;

/// The `data` template of class `fast` asking for `storage`.
pub(crate) fn template(storage: &str) -> Value {
    json!({"metadata": {"name": "data"},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                    "resources": {"requests": {"storage": storage}}, "volumeMode": "Filesystem"}})
}

/// Pod `ordinal` of set `name`, controlled by it, at its revision `<name>-1`, Running and Ready
/// since `ready_at` (made 5 s before).
pub(super) fn pod(name: &str, ordinal: u32, uid: &str, ready_at: i64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{name}-{ordinal}"), "namespace": NS, "uid": uid,
                     "creationTimestamp": time(ready_at - 5),
                     "labels": {"app": name, "controller-revision-hash": format!("{name}-1")},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                          "name": name, "uid": format!("uid-{name}"),
                                          "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "db:1"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": time(ready_at)}]}
    })
}

/// A settled set `name` of 3 replicas, with the controller's conditions, with live template `live`; `desired` recorded by the
/// webhook at T0+100 (the applier `helm` owning the annotation, as the apiserver attributes a
/// webhook's mutation); `policy` as annotation.
pub(crate) fn set(name: &str, live: &str, desired: Option<&str>, policy: Option<&str>) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(p) = policy {
        annotations.insert(names::VOLUME_CLAIM_UPDATE_POLICY.into(), json!(p));
    }
    let mut fields = json!({"f:spec": {"f:replicas": {}, "f:volumeClaimTemplates": {}}});
    if let Some(size) = desired {
        annotations.insert(
            names::DESIRED_VOLUME_CLAIM_TEMPLATES.into(),
            json!(desired_annotation(&[template(size)]).expect("annotation")),
        );
        fields["f:metadata"] =
            json!({"f:annotations": {format!("f:{}", names::DESIRED_VOLUME_CLAIM_TEMPLATES): {}}});
    }
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "resourceVersion": "10", "generation": 1,
                     "creationTimestamp": time(0), "annotations": annotations,
                     "managedFields": [
                        {"manager": "helm", "operation": "Update", "apiVersion": "apps/v1",
                         "time": time(100), "fieldsType": "FieldsV1", "fieldsV1": fields},
                        {"manager": "kube-controller-manager", "operation": "Update",
                         "apiVersion": "apps/v1", "time": time(500), "subresource": "status",
                         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]},
        "spec": {"replicas": 3, "serviceName": name,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "db:1"}]}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                 "volumeClaimTemplates": [template(live)]},
        "status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                   "updatedReplicas": 3, "currentReplicas": 3, "observedGeneration": 1,
                   "currentRevision": format!("{name}-1"), "updateRevision": format!("{name}-1"),
                   "conditions": [
                       {"type": "Available", "status": "True", "reason": "ReplicasAvailable",
                        "message": "3 of 3 replicas available", "lastTransitionTime": time(10)},
                       {"type": "Progressing", "status": "True", "reason": "RolloutComplete",
                        "message": "rollout complete", "lastTransitionTime": time(20)}]}
    })
}

/// A bound claim of set `set`, replica `ordinal`, asking for `request` with `capacity`.
pub(crate) fn claim(set: &str, ordinal: u32, request: &str, capacity: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": format!("data-{set}-{ordinal}"), "namespace": NS,
                        "uid": format!("uid-data-{set}-{ordinal}"), "resourceVersion": "20"},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                    "volumeMode": "Filesystem", "volumeName": format!("pv-{set}-{ordinal}"),
                    "resources": {"requests": {"storage": request}}},
           "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                      "capacity": {"storage": capacity}}})
}

/// The three claims of set `name`, each asking for `request` with `capacity`.
pub(crate) fn claims(name: &str, request: &str, capacity: &str) -> Vec<Value> {
    (0..3).map(|n| claim(name, n, request, capacity)).collect()
}

pub(crate) fn class(name: &str, expand: bool) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
           "metadata": {"name": name}, "provisioner": "disk.example.com",
           "allowVolumeExpansion": expand})
}

/// The journal the controller writes for `set` (as returned by the apiserver), at `step`.
pub(crate) fn journal(set: &Value, step: &str) -> Value {
    let object = converge::desired_object(set).expect("desired object");
    let mut cm = serde_json::to_value(
        converge::journal_configmap("stateful-admission", set, &object).expect("journal"),
    )
    .expect("json");
    cm["apiVersion"] = json!("v1");
    cm["kind"] = json!("ConfigMap");
    cm["metadata"]["annotations"][names::JOURNAL_STEP] = json!(step);
    cm
}

/// An Event of ours about `kind/name` (uid `uid`) at T0+`seconds`.
pub(crate) fn event(
    reason: &str,
    type_: &str,
    kind: &str,
    name: &str,
    uid: &str,
    note: &str,
    seconds: i64,
) -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
           "metadata": {"name": format!("{name}.{reason}.{seconds}"), "namespace": NS},
           "eventTime": format!("{}.000000Z", time(seconds).trim_end_matches('Z')),
           "reportingController": names::CONTROLLER_NAME, "reportingInstance": "sa-0",
           "action": "Converge", "reason": reason, "type": type_, "note": note,
           "regarding": {"apiVersion": if kind == "StatefulSet" { "apps/v1" } else { "v1" },
                         "kind": kind, "namespace": NS, "name": name, "uid": uid}})
}

/// `value` with `pointer` set to `x` (objects made on the way).
pub(crate) fn with(mut value: Value, pointer: &str, x: Value) -> Value {
    let mut node = &mut value;
    for part in pointer.trim_start_matches('/').split('/') {
        let part = part.replace("~1", "/").replace("~0", "~");
        if node.is_array() {
            let index: usize = part.parse().expect("an index into the array");
            node = node.get_mut(index).expect("index in the array");
            continue;
        }
        if !node.is_object() {
            *node = json!({});
        }
        node = node
            .as_object_mut()
            .expect("object")
            .entry(part)
            .or_insert(Value::Null);
    }
    *node = x;
    value
}

/// `value` without the member at `pointer`.
pub(crate) fn without(mut value: Value, pointer: &str) -> Value {
    let (parent, last) = pointer.rsplit_once('/').expect("pointer");
    if let Some(Value::Object(map)) = value.pointer_mut(parent) {
        map.remove(&last.replace("~1", "/"));
    }
    value
}

pub(crate) fn inputs(objects: &[Value]) -> Inputs {
    Inputs::from_json(objects).expect("fixtures")
}

pub(crate) fn selection(name: Option<&str>) -> Selection {
    Selection {
        namespace: Some(NS.to_owned()),
        name: name.map(str::to_owned),
        controller_namespace: "stateful-admission".to_owned(),
    }
}

/// The judged report of `inputs` at T0+[`NOW`].
pub(crate) fn report_of(
    inputs: &Inputs,
    name: Option<&str>,
    absent: &[model::Absent],
) -> StatusReport {
    let followed = model::Followed {
        sets: Default::default(),
        absent: absent.to_vec(),
    };
    let mut report = model::build(inputs, &selection(name), &followed, at(NOW));
    judge::judge_report(&mut report, at(NOW), Duration::from_secs(30));
    report
}

pub(crate) fn report(objects: &[Value]) -> StatusReport {
    report_of(&inputs(objects), None, &[])
}
