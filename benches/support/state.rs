//! A synthetic cluster of the size the issue measures: StorageClasses (one cluster default,
//! one expandable with a size limit), Namespaces (one with its own default class),
//! StatefulSets with three volumeClaimTemplates and the PVCs they created, shaped like
//! `kubectl get -o json` prints them (managedFields, last-applied annotations, status).
//! Shared by the benches and `examples/gen_state.rs`.

use serde_json::{Value, json};

/// Object counts of a generated state.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    pub claims: usize,
    pub sets: usize,
    pub classes: usize,
    pub namespaces: usize,
}

impl Size {
    /// 10,000 PVCs, 2,000 StatefulSets, 50 StorageClasses (issue 9).
    pub const ISSUE: Size = Size {
        claims: 10_000,
        sets: 2_000,
        classes: 50,
        namespaces: 40,
    };
}

/// The objects, in a `v1 List`.
pub fn list(size: Size) -> Value {
    json!({ "apiVersion": "v1", "kind": "List", "metadata": {}, "items": objects(size) })
}

pub fn objects(size: Size) -> Vec<Value> {
    let mut items = Vec::with_capacity(size.claims + size.sets + size.classes + size.namespaces);
    for i in 0..size.classes {
        items.push(storage_class(i));
    }
    for i in 0..size.namespaces {
        items.push(namespace(i));
    }
    for i in 0..size.sets {
        items.push(stateful_set(i, size));
    }
    // Claims are spread over the sets: templates × ordinals until the count is reached.
    let templates = ["data", "wal", "backup"];
    let mut n = 0;
    'outer: for ordinal in 0.. {
        for set in 0..size.sets.max(1) {
            for t in templates {
                if n == size.claims {
                    break 'outer;
                }
                items.push(claim(t, set, ordinal, size));
                n += 1;
            }
        }
    }
    items
}

fn namespace_of(set: usize, size: Size) -> String {
    match set % size.namespaces.max(1) {
        0 => "default".to_owned(),
        1 => "team".to_owned(),
        n => format!("ns-{n:03}"),
    }
}

fn managed(manager: &str, fields: Value) -> Value {
    json!({
        "manager": manager, "operation": "Update", "apiVersion": "v1",
        "time": "2026-11-22T05:07:21Z", "fieldsType": "FieldsV1", "fieldsV1": fields
    })
}

fn storage_class(i: usize) -> Value {
    let name = match i {
        0 => "std".to_owned(),
        1 => "gold".to_owned(),
        2 => "fast".to_owned(),
        n => format!("class-{n:03}"),
    };
    let mut annotations = json!({});
    if i == 0 {
        annotations["storageclass.kubernetes.io/is-default-class"] = json!("true");
    }
    if i == 1 {
        annotations["stateful-admission.io/max-volume-size"] = json!("10Ti");
    }
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {
            "name": name, "uid": format!("00000000-0000-4000-8000-{i:012}"),
            "resourceVersion": "100", "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": annotations,
            "managedFields": [managed("helm", json!({"f:provisioner": {}, "f:parameters": {}}))]
        },
        "provisioner": "csi.example.com",
        "parameters": { "type": "ssd", "fsType": "ext4" },
        "reclaimPolicy": "Delete",
        "allowVolumeExpansion": i != 2,
        "volumeBindingMode": "WaitForFirstConsumer"
    })
}

fn namespace(i: usize) -> Value {
    let name = namespace_of(
        i,
        Size {
            namespaces: usize::MAX,
            ..Size::ISSUE
        },
    );
    let mut annotations = json!({});
    if name == "team" {
        annotations["stateful-admission.io/default-storage-class"] = json!("fast");
    }
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {
            "name": name, "uid": format!("00000000-0000-4000-9000-{i:012}"),
            "labels": { "kubernetes.io/metadata.name": name },
            "annotations": annotations
        },
        "spec": { "finalizers": ["kubernetes"] },
        "status": { "phase": "Active" }
    })
}

fn set_name(set: usize) -> String {
    format!("db-{set:05}")
}

fn template(name: &str, storage: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "name": name, "labels": { "app": "db", "volume": name } },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": storage } },
            "storageClassName": "gold",
            "volumeMode": "Filesystem"
        },
        "status": { "phase": "Pending" }
    })
}

pub fn stateful_set(i: usize, size: Size) -> Value {
    let name = set_name(i);
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": name, "namespace": namespace_of(i, size),
            "uid": format!("00000000-0000-4000-a000-{i:012}"),
            "resourceVersion": "2000", "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": { "app": "db", "app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "Helm" },
            "annotations": { "meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": "default" },
            "managedFields": [
                managed("helm", json!({"f:spec": {"f:replicas": {}, "f:serviceName": {}, "f:template": {}, "f:volumeClaimTemplates": {}}})),
                managed("kube-controller-manager", json!({"f:status": {"f:replicas": {}, "f:readyReplicas": {}}}))
            ]
        },
        "spec": {
            "replicas": 2,
            "serviceName": name,
            "selector": { "matchLabels": { "app": "db", "app.kubernetes.io/instance": name } },
            "template": {
                "metadata": { "labels": { "app": "db", "app.kubernetes.io/instance": name } },
                "spec": {
                    "containers": [{
                        "name": "db", "image": "postgres:16.4",
                        "ports": [{ "containerPort": 5432, "name": "pg", "protocol": "TCP" }],
                        "resources": { "requests": { "cpu": "500m", "memory": "1Gi" } },
                        "volumeMounts": [
                            { "name": "data", "mountPath": "/var/lib/data" },
                            { "name": "wal", "mountPath": "/var/lib/wal" },
                            { "name": "backup", "mountPath": "/var/lib/backup" }
                        ]
                    }],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"
                }
            },
            "volumeClaimTemplates": [template("data", "10Gi"), template("wal", "2Gi"), template("backup", "20Gi")],
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "partition": 0 } },
            "revisionHistoryLimit": 10,
            "persistentVolumeClaimRetentionPolicy": { "whenDeleted": "Retain", "whenScaled": "Retain" }
        },
        "status": {
            "replicas": 2, "readyReplicas": 2, "currentReplicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2, "observedGeneration": 3,
            "currentRevision": format!("{name}-5d8c7b9f6"), "updateRevision": format!("{name}-5d8c7b9f6"),
            "collisionCount": 0
        }
    })
}

pub fn claim(t: &str, set: usize, ordinal: usize, size: Size) -> Value {
    let set_name = set_name(set);
    let name = format!("{t}-{set_name}-{ordinal}");
    let storage = match t {
        "data" => "10Gi",
        "wal" => "2Gi",
        _ => "20Gi",
    };
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name, "namespace": namespace_of(set, size),
            "uid": format!("00000000-0000-4000-b{set:05}{ordinal:02}-{:012}", t.len()),
            "resourceVersion": "3000", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": { "app": "db", "app.kubernetes.io/instance": set_name, "volume": t },
            "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "pv.kubernetes.io/bound-by-controller": "yes",
                "volume.beta.kubernetes.io/storage-provisioner": "csi.example.com",
                "volume.kubernetes.io/storage-provisioner": "csi.example.com"
            },
            "finalizers": ["kubernetes.io/pvc-protection"],
            "managedFields": [
                managed("kube-controller-manager", json!({"f:metadata": {"f:annotations": {"f:pv.kubernetes.io/bind-completed": {}}}, "f:spec": {"f:volumeName": {}}})),
                managed("kube-controller-manager", json!({"f:status": {"f:accessModes": {}, "f:capacity": {"f:storage": {}}, "f:phase": {}}}))
            ]
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": storage } },
            "storageClassName": "gold",
            "volumeMode": "Filesystem",
            "volumeName": format!("pvc-{set:05}-{ordinal:02}-{t}")
        },
        "status": {
            "phase": "Bound",
            "accessModes": ["ReadWriteOnce"],
            "capacity": { "storage": storage }
        }
    })
}
