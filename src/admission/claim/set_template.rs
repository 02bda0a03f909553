//! Claims the StatefulSet controller creates for a set whose volumeClaimTemplates change was
//! stored in `stateful-admission.io/desired-volume-claim-templates` (DESIGN.md: the apiserver
//! keeps the old templates, so the controller still creates claims from them). The stored
//! template's storage request, volumeAttributesClassName, labels and annotations are applied
//! to the new claim, so that a scale-up gets the new values at once.
//!
//! Only to claims the StatefulSet controller creates, told by the requesting user
//! ([`crate::admission::Policy::statefulset_controller_users`]): a claim named like a set's claim but created by
//! a person or another tool (restored from a snapshot with a chosen size, a bigger volume) was
//! made that way on purpose. It keeps its own values, with a warning saying what the template
//! would have changed and how to get the template's values.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::core::DynamicObject;
use serde_json::Value;

use super::{add_op, at, quantities, remove_op};
use crate::admission::set_claims::{self, SetClaim};
use crate::admission::statefulset::{ClaimUpdatePolicy, claim_update_policy};
use crate::admission::warning::{self, Warning};
use crate::admission::{Context, Verdict};
use crate::names;
use crate::quantity::Quantity;

/// The claim being created, as the rule needs it.
pub(crate) struct NewClaim<'a> {
    pub object: &'a DynamicObject,
    pub namespace: &'a str,
    pub name: &'a str,
    /// `request.userInfo.username`.
    pub username: Option<&'a str>,
}

/// The mutation of a claim CREATE named `<template>-<set>-<ordinal>` of a set in the view:
/// the stored template's values where the StatefulSet controller creates the claim, a warning
/// (and no change) where anyone else does.
pub(crate) fn apply(claim: &NewClaim<'_>, ctx: &Context<'_>) -> Verdict {
    let (namespace, name) = (claim.namespace, claim.name);
    let Some(hit) = set_claims::resolve(ctx.view, namespace, name) else {
        return Verdict::allow();
    };
    let set_name = hit.set.metadata.name.as_deref().unwrap_or_default();
    let desired = match set_claims::desired_templates(hit.set.metadata.annotations.as_ref()) {
        None => return Verdict::allow(),
        Some(Ok(templates)) => templates,
        Some(Err(e)) => {
            let mut verdict = Verdict::allow();
            verdict.warn_all(
                Warning::new(format!("StatefulSet {namespace}/{set_name}"))
                    .fact(format!(
                        "annotation {} is not a JSON array of claim templates ({})",
                        names::DESIRED_VOLUME_CLAIM_TEMPLATES,
                        warning::cut_to(&e.to_string(), 64),
                    ))
                    .fact(format!(
                        "claim {} is created from the set's current template",
                        warning::quote(name)
                    )),
            );
            return verdict;
        }
    };
    let Some(template) = desired
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(hit.template.as_str()))
    else {
        return Verdict::allow();
    };
    let applied = apply_template(claim.object, template, &hit);
    let by_controller = claim
        .username
        .is_some_and(|u| ctx.policy.is_statefulset_controller(u));
    if by_controller || applied.differences.is_empty() {
        return applied.verdict;
    }
    foreign_claim_warning(claim, &hit, &applied.differences)
}

/// Allowed unchanged: that the claim keeps its values and why, what the template would have
/// changed, and how to get the template's values.
fn foreign_claim_warning(
    claim: &NewClaim<'_>,
    hit: &SetClaim,
    differences: &[Difference],
) -> Verdict {
    let set_name = hit.set.metadata.name.as_deref().unwrap_or_default();
    let user = claim
        .username
        .map_or_else(|| "an unnamed user".to_owned(), warning::quote);
    let keeps = format!(
        "PersistentVolumeClaim {} keeps its own values",
        warning::cut(claim.name)
    );
    let mut verdict = Verdict::allow();
    verdict.warn_all(Warning::new(keeps.clone()).fact(format!(
        "created by {user}, not by the StatefulSet controller"
    )));
    let mut not_applied = Warning::new(format!(
        "template {} of StatefulSet {} not applied",
        warning::quote_to(&hit.template, 63),
        warning::cut(set_name)
    ));
    let show = |v: &Option<String>| {
        v.as_deref()
            .map_or_else(|| "unset".to_owned(), warning::quote)
    };
    for d in differences {
        not_applied = match d {
            Difference::Storage { from, to } => {
                not_applied.change("storage", &warning::cut(from), &warning::cut(to))
            }
            Difference::Class { from, to } => {
                not_applied.change("volumeAttributesClassName", &show(from), &show(to))
            }
            Difference::Map { field, keys } => not_applied.fact(format!(
                "{field} {}",
                keys.iter()
                    .map(|k| warning::cut_to(k, 63))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
    }
    verdict.warn_all(not_applied);
    let spec = serde_json::to_value(&hit.set.spec).unwrap_or(Value::Null);
    let how = match claim_update_policy(&spec, hit.set.metadata.annotations.as_ref()) {
        Ok(ClaimUpdatePolicy::InPlace) => {
            "policy InPlace: the controller patches it to the template later, as the set's other claims"
        }
        _ => {
            "to get the template's values, delete the claim before its pod uses it and let the StatefulSet controller create it"
        }
    };
    verdict.warn_all(Warning::new(keeps).fact(how).fact(
        "a StatefulSet controller running as another user belongs in --statefulset-controller-users",
    ));
    verdict
}

/// A value of the claim that the stored template would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Difference {
    /// `spec.resources.requests.storage`, as written (`unset` when absent).
    Storage { from: String, to: String },
    /// `spec.volumeAttributesClassName`.
    Class {
        from: Option<String>,
        to: Option<String>,
    },
    /// Keys of `metadata.labels` or `metadata.annotations` the template adds or sets otherwise.
    Map {
        field: &'static str,
        keys: Vec<String>,
    },
}

/// A template applied to a claim: the verdict (ops, warnings) and what the ops change.
pub(crate) struct Applied {
    pub verdict: Verdict,
    pub differences: Vec<Difference>,
}

/// The ops that make `object` carry `template`'s values; none when it already does.
/// Template values win over the claim's on conflicts: the claim's came from the set's old
/// template, which the stored one replaces. Keys only the claim has are kept.
pub(crate) fn apply_template(
    object: &DynamicObject,
    template: &PersistentVolumeClaim,
    hit: &SetClaim,
) -> Applied {
    let mut applied = Applied {
        verdict: Verdict::allow(),
        differences: Vec::new(),
    };
    if object.data.get("spec").is_some_and(Value::is_object) {
        apply_storage(&object.data, template, hit, &mut applied);
        apply_attributes_class(&object.data, template, hit, &mut applied);
    }
    merge_map(
        "labels",
        object.metadata.labels.as_ref(),
        template.metadata.labels.as_ref(),
        &mut applied,
    );
    merge_map(
        "annotations",
        object.metadata.annotations.as_ref(),
        template.metadata.annotations.as_ref(),
        &mut applied,
    );
    applied
}

fn apply_storage(
    data: &Value,
    template: &PersistentVolumeClaim,
    hit: &SetClaim,
    applied: &mut Applied,
) {
    let verdict = &mut applied.verdict;
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
        verdict.warn_all(
            Warning::new(format!(
                "the stored template {}",
                warning::quote_to(&hit.template, 63)
            ))
            .fact(format!(
                "asks for storage {}, which is not a quantity",
                warning::quote(&wanted.0)
            ))
            .fact("the claim keeps its request"),
        );
        return;
    };
    // Equal sizes written differently (1Gi, 1024Mi) are left as the controller wrote them.
    let current = quantities::read(data, "/spec/resources/requests/storage", "");
    if matches!(current, Ok(Some(ref c)) if c.value == wanted_value) {
        return;
    }
    let from = at(data, "/spec/resources/requests/storage").map_or_else(
        || "unset".to_owned(),
        |v| v.as_str().map_or_else(|| v.to_string(), str::to_owned),
    );
    applied.differences.push(Difference::Storage {
        from,
        to: wanted.0.clone(),
    });
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
    applied: &mut Applied,
) {
    let verdict = &mut applied.verdict;
    let current = at(data, "/spec/volumeAttributesClassName");
    let from = current.map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
    let wanted = template
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref());
    match wanted {
        Some(w) if current.and_then(Value::as_str) != Some(w) => {
            verdict.patch.push(add_op(
                &["spec", "volumeAttributesClassName"],
                Value::String(w.to_owned()),
            ));
            applied.differences.push(Difference::Class {
                from,
                to: Some(w.to_owned()),
            });
        }
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
                applied
                    .differences
                    .push(Difference::Class { from, to: None });
            }
        }
    }
}

/// Adds the template's entries of `metadata.<field>` that the claim lacks or has otherwise.
fn merge_map(
    field: &'static str,
    claim: Option<&BTreeMap<String, String>>,
    template: Option<&BTreeMap<String, String>>,
    applied: &mut Applied,
) {
    let verdict = &mut applied.verdict;
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
    applied.differences.push(Difference::Map {
        field,
        keys: missing.keys().map(|k| (*k).clone()).collect(),
    });
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
