//! The part of the apiserver's OpenAPI schema the field manager needs
//! (`k8s.io/apimachinery/pkg/util/managedfields` on structured-merge-diff): which lists are
//! associative (`x-kubernetes-list-type: map`, with their keys) or sets, which maps are atomic
//! (`x-kubernetes-map-type: atomic`), and the typed zero object of each type, whose value
//! structs (`spec.template`, `spec.updateStrategy`, a claim's `spec.resources`) and
//! non-omitempty fields (`spec.template.spec.containers: null`) are present before anything
//! is set: a map that appears where the zero object had none is a member of its own (`"."` in
//! `fieldsV1`), one the zero object had is not.
//!
//! Covered: the types the fake serves, the fields the project and the captures meet. Every
//! other list is atomic and every other map granular, as the fake assumed before.

use serde_json::{Map, Value, json};

use super::FakeApiConfig;
use super::resources::{self, ResourceType};

/// How a list merges and is tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListType {
    /// One value (`x-kubernetes-list-type: atomic`, and every list not listed here).
    Atomic,
    /// Items identified by these fields (`k:{"name":"main"}`).
    Map(&'static [&'static str]),
    /// Items identified by their value (`v:"orphan"`).
    Set,
}

/// The schema facts of one served type.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    resource: &'static ResourceType,
    /// `PersistentVolumeSpec.claimRef` is `+structType=granular` from v1.26; an atomic
    /// ObjectReference before.
    claim_ref_granular: bool,
}

fn is(resource: &ResourceType, other: &ResourceType) -> bool {
    std::ptr::eq(resource, other)
}

impl Schema {
    pub fn new(resource: &'static ResourceType, config: &FakeApiConfig) -> Self {
        Self {
            resource,
            claim_ref_granular: config.volume_claim_ref_granular,
        }
    }

    /// The schema of the newest versions (granular `claimRef`), where no configuration is at
    /// hand.
    pub fn of(resource: &'static ResourceType) -> Self {
        Self {
            resource,
            claim_ref_granular: true,
        }
    }

    /// Where the pod spec is: `spec` of a pod, `spec.template.spec` of a workload.
    fn pod_spec_root(&self) -> Option<&'static [&'static str]> {
        let r = self.resource;
        if is(r, &resources::PODS) {
            Some(&["spec"])
        } else if is(r, &resources::STATEFULSETS) || is(r, &resources::DEPLOYMENTS) {
            Some(&["spec", "template", "spec"])
        } else {
            None
        }
    }

    /// The list at `path` (field names, `*` for a list item).
    pub fn list(&self, path: &[&str]) -> ListType {
        match path {
            ["metadata", "ownerReferences"] => return ListType::Map(&["uid"]),
            ["metadata", "finalizers"] => return ListType::Set,
            ["status", "conditions"]
                if !is(self.resource, &resources::PERSISTENT_VOLUME_CLAIMS) =>
            {
                return ListType::Map(&["type"]);
            }
            ["webhooks"] => return ListType::Map(&["name"]),
            _ => {}
        }
        let Some(root) = self.pod_spec_root() else {
            return ListType::Atomic;
        };
        let Some(rest) = path.strip_prefix(root) else {
            return ListType::Atomic;
        };
        match rest {
            ["containers" | "initContainers" | "ephemeralContainers"]
            | ["volumes"]
            | ["imagePullSecrets"]
            | ["containers" | "initContainers", "*", "env"] => ListType::Map(&["name"]),
            ["containers" | "initContainers", "*", "ports"] => {
                ListType::Map(&["containerPort", "protocol"])
            }
            ["containers" | "initContainers", "*", "volumeMounts"] => ListType::Map(&["mountPath"]),
            _ => ListType::Atomic,
        }
    }

    /// Whether the map at `path` is one value (`x-kubernetes-map-type: atomic`).
    pub fn atomic_map(&self, path: &[&str]) -> bool {
        let r = self.resource;
        if is(r, &resources::STATEFULSETS) || is(r, &resources::DEPLOYMENTS) {
            return path == ["spec", "selector"];
        }
        if is(r, &resources::PERSISTENT_VOLUME_CLAIMS) {
            return matches!(path, ["spec", "selector" | "dataSource" | "dataSourceRef"]);
        }
        if is(r, &resources::PERSISTENT_VOLUMES) {
            return !self.claim_ref_granular && path == ["spec", "claimRef"];
        }
        if is(r, &resources::CORE_EVENTS) {
            return matches!(path, ["involvedObject" | "related"]);
        }
        if is(r, &resources::EVENTS) {
            return matches!(path, ["regarding" | "related"]);
        }
        if is(r, &resources::MUTATING_WEBHOOK_CONFIGURATIONS)
            || is(r, &resources::VALIDATING_WEBHOOK_CONFIGURATIONS)
        {
            return matches!(
                path,
                ["webhooks", "*", "namespaceSelector" | "objectSelector"]
            );
        }
        false
    }

    /// The type's zero value as the apiserver's typed converter sees it: value structs and
    /// fields serialized without `omitempty`, nothing else.
    pub fn zero(&self) -> Value {
        let r = self.resource;
        let meta = json!({"creationTimestamp": null});
        let template =
            json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": null}});
        if is(r, &resources::STATEFULSETS) {
            json!({"metadata": meta, "spec": {"selector": null, "template": template,
                   "serviceName": "", "updateStrategy": {}},
                   "status": {"replicas": 0, "availableReplicas": 0}})
        } else if is(r, &resources::DEPLOYMENTS) {
            json!({"metadata": meta, "spec": {"selector": null, "template": template,
                   "strategy": {}}, "status": {}})
        } else if is(r, &resources::PODS) {
            json!({"metadata": meta, "spec": {"containers": null}, "status": {}})
        } else if is(r, &resources::PERSISTENT_VOLUME_CLAIMS) {
            json!({"metadata": meta, "spec": {"resources": {}}, "status": {}})
        } else if is(r, &resources::PERSISTENT_VOLUMES) || is(r, &resources::NAMESPACES) {
            json!({"metadata": meta, "spec": {}, "status": {}})
        } else if is(r, &resources::CORE_EVENTS) {
            json!({"metadata": meta, "involvedObject": {}, "source": {}, "firstTimestamp": null,
                   "lastTimestamp": null, "eventTime": null, "reportingComponent": "",
                   "reportingInstance": ""})
        } else if is(r, &resources::EVENTS) {
            json!({"metadata": meta, "eventTime": null, "regarding": {}, "deprecatedSource": {},
                   "deprecatedFirstTimestamp": null, "deprecatedLastTimestamp": null})
        } else if is(r, &resources::LEASES) {
            json!({"metadata": meta, "spec": {}})
        } else if is(r, &resources::STORAGE_CLASSES) {
            json!({"metadata": meta, "provisioner": ""})
        } else {
            json!({"metadata": meta})
        }
    }
}

/// `object` with every member of `zero` it lacks (recursively through maps): what the typed
/// converter makes of it.
pub fn with_zero(zero: &Value, object: &Value) -> Value {
    match (zero.as_object(), object.as_object()) {
        (Some(z), Some(o)) => {
            let mut out: Map<String, Value> = o.clone();
            for (key, value) in z {
                match out.get(key) {
                    None => {
                        out.insert(key.clone(), value.clone());
                    }
                    Some(present) if present.is_object() && value.is_object() => {
                        let merged = with_zero(value, present);
                        out.insert(key.clone(), merged);
                    }
                    Some(_) => {}
                }
            }
            Value::Object(out)
        }
        _ => object.clone(),
    }
}

/// The path element of a list item: `k:{"name":"main"}` (key fields sorted, values as JSON)
/// or `v:"orphan"`; `None` when the item lacks its key.
pub fn item_element(list: ListType, item: &Value) -> Option<String> {
    match list {
        ListType::Atomic => None,
        ListType::Set => Some(format!("v:{item}")),
        ListType::Map(keys) => {
            let mut key = Map::new();
            for field in keys {
                if let Some(value) = item.get(*field) {
                    key.insert((*field).to_owned(), value.clone());
                }
            }
            (!key.is_empty()).then(|| format!("k:{}", Value::Object(key)))
        }
    }
}
