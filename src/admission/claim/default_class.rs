//! Default StorageClass for claims created without one (KEP-3333), with a per-namespace
//! default (`stateful-admission.io/default-storage-class`) taking precedence over the cluster's.
//!
//! The built-in `DefaultStorageClass` admission plugin runs before mutating webhooks, so a
//! classless claim usually arrives with the cluster default already filled in. The request's
//! managedFields are computed before admission and tell the two apart: a
//! `spec.storageClassName` that no entry claims was written by the plugin, not the client.

use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use serde_json::Value;

use super::{BETA_STORAGE_CLASS_ANNOTATION, add_op};
use crate::admission::Verdict;
use crate::admission::warning::{self, Warning};
use crate::cluster::ClusterView;
use crate::names;

/// `storageclass.kubernetes.io/is-default-class`.
pub const IS_DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// `storageclass.beta.kubernetes.io/is-default-class`, still honoured upstream.
pub const BETA_IS_DEFAULT_CLASS_ANNOTATION: &str =
    "storageclass.beta.kubernetes.io/is-default-class";

/// Where a default class comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultSource {
    /// The namespace's `stateful-admission.io/default-storage-class`.
    Namespace,
    /// The cluster default, as upstream picks it.
    Cluster,
}

/// The class a classless claim in some namespace should get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultClass {
    pub name: String,
    pub source: DefaultSource,
}

/// The default class for claims in `namespace`: the namespace's annotation when it names a
/// class that exists, else the cluster default; `None` when there is neither.
pub fn pick_default_class(view: &ClusterView, namespace: &str) -> Option<DefaultClass> {
    if let Some(name) = namespace_default_name(view, namespace)
        && view.storage_class(&name).is_some()
    {
        return Some(DefaultClass {
            name,
            source: DefaultSource::Namespace,
        });
    }
    let classes = view.storage_classes();
    cluster_default(classes.iter().map(AsRef::as_ref)).map(|class| DefaultClass {
        name: class.metadata.name.clone().unwrap_or_default(),
        source: DefaultSource::Cluster,
    })
}

/// The class named by the namespace's annotation, whether or not it exists.
pub fn namespace_default_name(view: &ClusterView, namespace: &str) -> Option<String> {
    let ns = view.namespace(namespace)?;
    let name = ns
        .metadata
        .annotations
        .as_ref()?
        .get(names::DEFAULT_STORAGE_CLASS)?;
    (!name.is_empty()).then(|| name.clone())
}

/// The cluster default among `classes`, as upstream `GetDefaultClass`
/// (pkg/volume/util/storageclass.go): classes annotated as default with exactly `"true"`; of
/// several, the newest `creationTimestamp`, ties broken by the smallest name.
pub fn cluster_default<'a>(
    classes: impl IntoIterator<Item = &'a StorageClass>,
) -> Option<&'a StorageClass> {
    classes
        .into_iter()
        .filter(|c| is_default_annotation(&c.metadata))
        .min_by(|a, b| {
            // Newest first; a missing timestamp is Go's zero time, older than any.
            b.metadata
                .creation_timestamp
                .cmp(&a.metadata.creation_timestamp)
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        })
}

/// upstream `IsDefaultAnnotation`: either annotation set to exactly `"true"`.
pub fn is_default_annotation(meta: &ObjectMeta) -> bool {
    meta.annotations.as_ref().is_some_and(|a| {
        [
            IS_DEFAULT_CLASS_ANNOTATION,
            BETA_IS_DEFAULT_CLASS_ANNOTATION,
        ]
        .iter()
        .any(|k| a.get(*k).is_some_and(|v| v == "true"))
    })
}

/// What a claim in a CREATE request says about its class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimClass {
    /// The client chose (a class, `""` for "no class", or the beta annotation): never touched.
    Chosen,
    /// No class at all: the claim asks for the default.
    Unset,
    /// A class the client did not write, so the `DefaultStorageClass` plugin filled it in.
    FilledIn(String),
}

/// Classifies the claim of a CREATE request.
///
/// A set class counts as the client's unless the request's managedFields prove otherwise;
/// a request without managedFields (a hand-written review, an old apiserver) gives no proof,
/// so its class is kept.
pub fn claim_class(object: &DynamicObject) -> ClaimClass {
    let annotated = object
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(BETA_STORAGE_CLASS_ANNOTATION));
    if annotated {
        return ClaimClass::Chosen;
    }
    match object.data.pointer("/spec/storageClassName") {
        None | Some(Value::Null) => ClaimClass::Unset,
        // The plugin only ever writes a class name; "" is always the client's.
        Some(Value::String(name)) if !name.is_empty() => {
            match class_written_by_client(&object.metadata) {
                Some(false) => ClaimClass::FilledIn(name.clone()),
                Some(true) | None => ClaimClass::Chosen,
            }
        }
        Some(_) => ClaimClass::Chosen,
    }
}

/// Whether some managedFields entry owns `spec.storageClassName`; `None` when the request
/// carries no managedFields to tell.
fn class_written_by_client(meta: &ObjectMeta) -> Option<bool> {
    let entries = meta.managed_fields.as_ref().filter(|m| !m.is_empty())?;
    Some(entries.iter().any(|e| {
        e.fields_v1
            .as_ref()
            .is_some_and(|f| f.0.pointer("/f:spec/f:storageClassName").is_some())
    }))
}

/// The mutation of a claim CREATE: give a classless claim its default class.
pub fn assign(object: &DynamicObject, namespace: &str, view: &ClusterView) -> Verdict {
    // A claim without a spec object is the apiserver's to reject.
    if !object.data.get("spec").is_some_and(Value::is_object) {
        return Verdict::allow();
    }
    let class = claim_class(object);
    if class == ClaimClass::Chosen {
        return Verdict::allow();
    }
    let mut verdict = Verdict::allow();
    let picked = pick_default_class(view, namespace);
    if let Some(named) = namespace_default_name(view, namespace)
        && picked
            .as_ref()
            .is_none_or(|p| p.source != DefaultSource::Namespace)
    {
        verdict.warn_all(
            Warning::new(format!("namespace {}", warning::quote(namespace)))
                .fact(format!(
                    "annotation {} names {}, but no such StorageClass exists",
                    names::DEFAULT_STORAGE_CLASS,
                    warning::quote_to(&named, 64),
                ))
                .fact(match (&class, &picked) {
                    (ClaimClass::FilledIn(current), _) => {
                        format!("the claim keeps {}", warning::quote(current))
                    }
                    (_, Some(p)) => {
                        format!("using the cluster default {}", warning::quote(&p.name))
                    }
                    (_, None) => "the claim is left without a class".to_owned(),
                }),
        );
    }
    let target = match (class, picked) {
        (ClaimClass::Unset, Some(p)) => p.name,
        // Only the namespace default outranks the plugin's pick; for the cluster default the
        // apiserver's own choice stands even if this view lags behind it.
        (ClaimClass::FilledIn(current), Some(p))
            if p.source == DefaultSource::Namespace && p.name != current =>
        {
            p.name
        }
        _ => return verdict,
    };
    verdict
        .patch
        .push(add_op(&["spec", "storageClassName"], Value::String(target)));
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, created: Option<&str>, annotations: Value) -> StorageClass {
        let mut meta = json!({"name": name, "annotations": annotations});
        if let Some(t) = created {
            meta["creationTimestamp"] = json!(t);
        }
        serde_json::from_value(json!({"metadata": meta, "provisioner": "x"})).expect("class")
    }

    fn default_class(name: &str, created: &str) -> StorageClass {
        class(
            name,
            Some(created),
            json!({IS_DEFAULT_CLASS_ANNOTATION: "true"}),
        )
    }

    /// Upstream `TestGetDefaultClass` shapes: no default, one, several by time, name ties.
    #[test]
    fn cluster_default_is_the_newest_then_the_smallest_name() {
        let t1 = "2024-01-01T00:00:00Z";
        let t2 = "2024-01-02T00:00:00Z";
        let cases: Vec<(&str, Vec<StorageClass>, Option<&str>)> = vec![
            ("no classes", vec![], None),
            ("no default", vec![class("a", Some(t1), json!({}))], None),
            ("one default", vec![default_class("a", t1)], Some("a")),
            (
                "beta annotation counts",
                vec![class(
                    "b",
                    Some(t1),
                    json!({BETA_IS_DEFAULT_CLASS_ANNOTATION: "true"}),
                )],
                Some("b"),
            ),
            (
                "value must be exactly true",
                vec![
                    class("a", Some(t1), json!({IS_DEFAULT_CLASS_ANNOTATION: "True"})),
                    class("b", Some(t1), json!({IS_DEFAULT_CLASS_ANNOTATION: "yes"})),
                    class(
                        "c",
                        Some(t1),
                        json!({BETA_IS_DEFAULT_CLASS_ANNOTATION: " true"}),
                    ),
                ],
                None,
            ),
            (
                "newest of two wins",
                vec![default_class("old", t1), default_class("new", t2)],
                Some("new"),
            ),
            (
                "newest wins in any order",
                vec![default_class("new", t2), default_class("old", t1)],
                Some("new"),
            ),
            (
                "same time: smallest name",
                vec![
                    default_class("b", t1),
                    default_class("a", t1),
                    default_class("c", t1),
                ],
                Some("a"),
            ),
            (
                "newer beats smaller name",
                vec![default_class("a", t1), default_class("z", t2)],
                Some("z"),
            ),
            (
                "missing timestamp is oldest",
                vec![
                    class("a", None, json!({IS_DEFAULT_CLASS_ANNOTATION: "true"})),
                    default_class("b", t1),
                ],
                Some("b"),
            ),
            (
                "non-default newer class is ignored",
                vec![default_class("d", t1), class("n", Some(t2), json!({}))],
                Some("d"),
            ),
        ];
        for (what, classes, want) in cases {
            let got = cluster_default(&classes).and_then(|c| c.metadata.name.as_deref());
            assert_eq!(got, want, "{what}");
        }
    }

    fn view(objects: &[Value]) -> ClusterView {
        ClusterView::from_json(objects).expect("objects")
    }

    fn sc(name: &str, created: &str, default: bool) -> Value {
        let mut annotations = json!({});
        if default {
            annotations[IS_DEFAULT_CLASS_ANNOTATION] = json!("true");
        }
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "x",
               "metadata": {"name": name, "creationTimestamp": created, "annotations": annotations}})
    }

    fn ns(name: &str, default: Option<&str>) -> Value {
        let mut meta = json!({"name": name});
        if let Some(d) = default {
            meta["annotations"] = json!({(names::DEFAULT_STORAGE_CLASS): d});
        }
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    }

    #[test]
    fn namespace_default_wins_when_its_class_exists() {
        let v = view(&[
            sc("std", "2024-01-01T00:00:00Z", true),
            sc("fast", "2024-01-01T00:00:00Z", false),
            ns("team", Some("fast")),
            ns("typo", Some("nope")),
            ns("empty", Some("")),
            ns("plain", None),
        ]);
        let picked = |n: &str| pick_default_class(&v, n).map(|d| (d.name, d.source));
        assert_eq!(
            picked("team"),
            Some(("fast".into(), DefaultSource::Namespace))
        );
        assert_eq!(picked("typo"), Some(("std".into(), DefaultSource::Cluster)));
        assert_eq!(
            picked("empty"),
            Some(("std".into(), DefaultSource::Cluster))
        );
        assert_eq!(
            picked("plain"),
            Some(("std".into(), DefaultSource::Cluster))
        );
        assert_eq!(
            picked("absent"),
            Some(("std".into(), DefaultSource::Cluster))
        );
        let none = view(&[
            sc("fast", "2024-01-01T00:00:00Z", false),
            ns("typo", Some("nope")),
        ]);
        assert_eq!(pick_default_class(&none, "typo"), None);
    }

    fn claim(spec: Value, annotations: Value, managed: Option<Value>) -> DynamicObject {
        let mut meta = json!({"name": "c", "namespace": "team", "annotations": annotations});
        if let Some(m) = managed {
            meta["managedFields"] = m;
        }
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": meta, "spec": spec}))
        .expect("claim")
    }

    fn entry(spec_fields: Value) -> Value {
        json!({"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": spec_fields}})
    }

    #[test]
    fn claim_class_tells_client_choice_from_plugin_fill_in() {
        let without_class = json!([entry(json!({"f:accessModes": {}}))]);
        let with_class = json!([entry(json!({"f:storageClassName": {}}))]);
        let cases = [
            ("no class", json!({}), json!({}), None, ClaimClass::Unset),
            (
                "null class",
                json!({"storageClassName": null}),
                json!({}),
                None,
                ClaimClass::Unset,
            ),
            (
                "empty class is a choice",
                json!({"storageClassName": ""}),
                json!({}),
                Some(without_class.clone()),
                ClaimClass::Chosen,
            ),
            (
                "beta annotation",
                json!({}),
                json!({(BETA_STORAGE_CLASS_ANNOTATION): ""}),
                None,
                ClaimClass::Chosen,
            ),
            (
                "class claimed by the client",
                json!({"storageClassName": "gold"}),
                json!({}),
                Some(with_class),
                ClaimClass::Chosen,
            ),
            (
                "class nobody claims",
                json!({"storageClassName": "gold"}),
                json!({}),
                Some(without_class),
                ClaimClass::FilledIn("gold".into()),
            ),
            (
                "no managedFields: kept",
                json!({"storageClassName": "gold"}),
                json!({}),
                None,
                ClaimClass::Chosen,
            ),
            (
                "empty managedFields: kept",
                json!({"storageClassName": "gold"}),
                json!({}),
                Some(json!([])),
                ClaimClass::Chosen,
            ),
            (
                "wrong type: left to the apiserver",
                json!({"storageClassName": 5}),
                json!({}),
                None,
                ClaimClass::Chosen,
            ),
        ];
        for (what, spec, annotations, managed, want) in cases {
            assert_eq!(
                claim_class(&claim(spec, annotations, managed)),
                want,
                "{what}"
            );
        }
    }
}
