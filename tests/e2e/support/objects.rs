//! Manifests as a user writes them (what `kubectl apply` or a chart would send), and reads of
//! what the cluster made of them.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use super::SCENARIO_LABEL;

/// A StatefulSet as a chart would write it: `replicas` pods of a pause container, one claim
/// template `data` of `size` in `class`, rolling updates. `extra` is merged over it (JSON merge
/// patch semantics: objects merge, anything else replaces).
pub fn statefulset(
    ns: &str,
    name: &str,
    replicas: i32,
    class: &str,
    size: &str,
    extra: Value,
) -> Value {
    let mut set = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "db", "image": "registry.k8s.io/pause:3.10"}],
                },
            },
            "volumeClaimTemplates": [claim_template("data", class, size)],
        },
    });
    merge(&mut set, extra);
    set
}

/// A volumeClaimTemplate.
pub fn claim_template(name: &str, class: &str, size: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "resources": {"requests": {"storage": size}},
        },
    })
}

/// A StorageClass labelled for the scenario's cleanup; binding is immediate (no scheduler
/// here), the provisioner is the suite's own.
pub fn storage_class(scenario: &str, name: &str, expandable: bool, extra: Value) -> Value {
    let mut class = json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "labels": {SCENARIO_LABEL: super::label_value(scenario)}},
        "provisioner": "hostpath.e2e.stateful-admission.io",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": expandable,
    });
    merge(&mut class, extra);
    class
}

/// RFC 7386 merge of `patch` into `target`.
pub fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    merge(t.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

/// A manifest file holding `objects` (a `List`, which kubectl reads like a stream).
pub fn manifest(objects: &[Value]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string()
}

/// The storage request of template `index` of a set, as stored.
pub fn template_size(set: &StatefulSet, index: usize) -> Option<String> {
    set.spec
        .volume_claim_templates
        .as_ref()?
        .get(index)?
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| q.0.clone())
}

/// A claim's storage request.
pub fn claim_request(claim: &PersistentVolumeClaim) -> Option<String> {
    claim
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|q| q.0.clone())
}

/// A claim's `status.capacity.storage`.
pub fn claim_capacity(claim: &PersistentVolumeClaim) -> Option<String> {
    claim
        .status
        .as_ref()?
        .capacity
        .as_ref()?
        .get("storage")
        .map(|q| q.0.clone())
}

/// The pods of a set, by name, with their uid.
pub async fn pods_of(client: &Client, ns: &str, set: &str) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut items = pods
        .list(&ListParams::default().labels(&format!("app={set}")))
        .await?
        .items;
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(items)
}

/// Events (core/v1 view) in `ns` with this reason, oldest first.
pub async fn events(client: &Client, ns: &str, reason: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut items: Vec<Event> = api
        .list(&ListParams::default().fields(&format!("reason={reason}")))
        .await?
        .items;
    items.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    Ok(items)
}

/// A condition of a StatefulSet's status: `(status, reason, message)`.
pub fn condition(set: &StatefulSet, type_: &str) -> Option<(String, String, String)> {
    set.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_.as_deref() == Some(type_))
        .map(|c| {
            (
                c.status.clone().unwrap_or_default(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// The field managers of `set` that own `spec.volumeClaimTemplates` (fieldsV1 `f:spec` →
/// `f:volumeClaimTemplates`).
pub fn template_owners(set: &StatefulSet) -> Vec<String> {
    set.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.pointer("/f:spec/f:volumeClaimTemplates"))
                .is_some()
        })
        .filter_map(|m| m.manager.clone())
        .collect()
}
