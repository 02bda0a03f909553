//! Claims the StatefulSet controller creates for a set whose volumeClaimTemplates change was
//! stored in `stateful-admission.io/desired-volume-claim-templates` (DESIGN.md: the apiserver
//! keeps the old templates, so the controller still creates claims from them). The stored
//! template's storage request, volumeAttributesClassName, labels and annotations are applied
//! to the new claim, so that a scale-up gets the new values at once.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::core::DynamicObject;
use serde_json::Value;

use super::{add_op, at, quantities, remove_op, shown};
use crate::admission::Verdict;
use crate::admission::set_claims::{self, SetClaim};
use crate::cluster::ClusterView;
use crate::names;
use crate::quantity::Quantity;

/// The mutation of a claim CREATE named `<template>-<set>-<ordinal>` of a set in the view.
///
/// The claim is recognised by its name alone (as the controller names it); the requesting
/// user is not checked, since the controller's service account differs between clusters.
pub fn apply(object: &DynamicObject, namespace: &str, name: &str, view: &ClusterView) -> Verdict {
    let Some(hit) = set_claims::resolve(view, namespace, name) else {
        return Verdict::allow();
    };
    let set_name = hit.set.metadata.name.as_deref().unwrap_or_default();
    let desired = match set_claims::desired_templates(hit.set.metadata.annotations.as_ref()) {
        None => return Verdict::allow(),
        Some(Ok(templates)) => templates,
        Some(Err(e)) => {
            let mut verdict = Verdict::allow();
            verdict.warn(format!(
                "StatefulSet {namespace}/{set_name}: annotation {} is not a JSON array of claim \
                 templates ({}); claim {name:?} is created from the set's current template",
                names::DESIRED_VOLUME_CLAIM_TEMPLATES,
                shown(&e.to_string()),
            ));
            return verdict;
        }
    };
    let Some(template) = desired
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(hit.template.as_str()))
    else {
        return Verdict::allow();
    };
    apply_template(object, template, &hit)
}

/// The ops that make `object` carry `template`'s values; none when it already does.
/// Template values win over the claim's on conflicts: the claim's came from the set's old
/// template, which the stored one replaces. Keys only the claim has are kept.
pub fn apply_template(
    object: &DynamicObject,
    template: &PersistentVolumeClaim,
    hit: &SetClaim,
) -> Verdict {
    let mut verdict = Verdict::allow();
    if object.data.get("spec").is_some_and(Value::is_object) {
        apply_storage(&object.data, template, hit, &mut verdict);
        apply_attributes_class(&object.data, template, hit, &mut verdict);
    }
    merge_map(
        "labels",
        object.metadata.labels.as_ref(),
        template.metadata.labels.as_ref(),
        &mut verdict,
    );
    merge_map(
        "annotations",
        object.metadata.annotations.as_ref(),
        template.metadata.annotations.as_ref(),
        &mut verdict,
    );
    verdict
}

fn apply_storage(
    data: &Value,
    template: &PersistentVolumeClaim,
    hit: &SetClaim,
    verdict: &mut Verdict,
) {
    let Some(wanted) = template
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
    else {
        return;
    };
    let Ok(wanted_value) = Quantity::parse(&wanted.0) else {
        verdict.warn(format!(
            "the stored template {:?} asks for storage {:?}, which is not a quantity; the claim keeps its request",
            hit.template,
            shown(&wanted.0),
        ));
        return;
    };
    // Equal sizes written differently (1Gi, 1024Mi) are left as the controller wrote them.
    let current = quantities::read(data, "/spec/resources/requests/storage", "");
    if matches!(current, Ok(Some(ref c)) if c.value == wanted_value) {
        return;
    }
    let value = Value::String(wanted.0.clone());
    let op = if at(data, "/spec/resources/requests").is_some_and(Value::is_object) {
        add_op(&["spec", "resources", "requests", "storage"], value)
    } else if at(data, "/spec/resources").is_some_and(Value::is_object) {
        add_op(
            &["spec", "resources", "requests"],
            serde_json::json!({ "storage": value }),
        )
    } else {
        add_op(
            &["spec", "resources"],
            serde_json::json!({ "requests": { "storage": value } }),
        )
    };
    verdict.patch.push(op);
}

fn apply_attributes_class(
    data: &Value,
    template: &PersistentVolumeClaim,
    hit: &SetClaim,
    verdict: &mut Verdict,
) {
    let current = at(data, "/spec/volumeAttributesClassName");
    let wanted = template
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref());
    match wanted {
        Some(w) if current.and_then(Value::as_str) != Some(w) => verdict.patch.push(add_op(
            &["spec", "volumeAttributesClassName"],
            Value::String(w.to_owned()),
        )),
        Some(_) => {}
        None => {
            // Dropped from the template: undo it only where it came from the old template.
            let live = hit
                .set
                .spec
                .volume_claim_templates
                .as_ref()
                .and_then(|ts| {
                    ts.iter()
                        .find(|t| t.metadata.name.as_deref() == Some(hit.template.as_str()))
                })
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| s.volume_attributes_class_name.as_deref());
            if live.is_some() && current.and_then(Value::as_str) == live {
                verdict
                    .patch
                    .push(remove_op(&["spec", "volumeAttributesClassName"]));
            }
        }
    }
}

/// Adds the template's entries of `metadata.<field>` that the claim lacks or has otherwise.
fn merge_map(
    field: &str,
    claim: Option<&BTreeMap<String, String>>,
    template: Option<&BTreeMap<String, String>>,
    verdict: &mut Verdict,
) {
    let Some(template) = template else {
        return;
    };
    let missing: BTreeMap<&String, &String> = template
        .iter()
        .filter(|(k, v)| claim.and_then(|c| c.get(*k)) != Some(*v))
        .collect();
    if missing.is_empty() {
        return;
    }
    match claim {
        // No map yet: one op creates it with every entry.
        None => {
            let map: serde_json::Map<String, Value> = missing
                .into_iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            verdict
                .patch
                .push(add_op(&["metadata", field], Value::Object(map)));
        }
        Some(_) => {
            for (key, value) in missing {
                verdict.patch.push(add_op(
                    &["metadata", field, key],
                    Value::String(value.clone()),
                ));
            }
        }
    }
}
