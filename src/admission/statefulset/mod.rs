//! StatefulSet rules: volumeClaimTemplate updates (KEP-4650) and maxUnavailable (KEP-961).
//!
//! Stock kube-apiserver rejects every change of `spec.volumeClaimTemplates`, and it runs the
//! mutating webhooks before its own validation; so the template work happens in the mutating
//! phase: an allowed change is recorded in `stateful-admission.io/desired-volume-claim-templates`
//! and the old templates are put back. maxUnavailable is checked in both phases, because an
//! apiserver with the `MaxUnavailableStatefulSet` gate off drops the field between them.

pub(crate) mod max_unavailable;
pub(crate) mod recreate;
pub mod templates;

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::{Map, Value};

use super::warning::{self, Warning};
use super::{BadValue, Context, Denial, FieldError, Phase, Policy, Verdict};
use crate::capabilities::{Capabilities, Name, Value as CapabilityValue};
use crate::names;
use crate::text::clip;
use max_unavailable::{ANNOTATION_PATH, IntOrPercent, MAX_UNAVAILABLE_PATH};
use templates::{Classification, TemplateChange};

/// Where a set's pod template is read past, the key under `spec` that holds a digest of its
/// text instead (no field of the API has a `/` in its name).
pub const TEMPLATE_DIGEST: &str = "stateful-admission.io/template-digest";

/// Whether `old` and `new` (a set's specs as decoded) have different pod templates: by their
/// digests where the templates were read past, else by value.
pub fn pod_template_changed(old: &Value, new: &Value) -> bool {
    match (old.get(TEMPLATE_DIGEST), new.get(TEMPLATE_DIGEST)) {
        (Some(a), Some(b)) => a != b,
        _ => old.get("template") != new.get("template"),
    }
}

/// Field path of the claim update policy annotation.
pub const UPDATE_POLICY_PATH: &str =
    "metadata.annotations[stateful-admission.io/volume-claim-update-policy]";

/// How existing claims follow a recorded template change (KEP-4650 `volumeClaimUpdatePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimUpdatePolicy {
    /// Only new or re-created claims use the new template (the default).
    OnDelete,
    /// Existing claims are patched in place where possible.
    InPlace,
}

/// The claim update policy: a native `spec.volumeClaimUpdatePolicy` (or
/// `spec.volumeClaimUpdateStrategy.type`) wins over the annotation, which defaults to
/// `OnDelete`; an annotation with another value is an error.
pub fn claim_update_policy(
    spec: &Value,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<ClaimUpdatePolicy, FieldError> {
    let parse = |s: &str| match s {
        "OnDelete" => Some(ClaimUpdatePolicy::OnDelete),
        "InPlace" => Some(ClaimUpdatePolicy::InPlace),
        _ => None,
    };
    let native = spec
        .get("volumeClaimUpdatePolicy")
        .or_else(|| spec.pointer("/volumeClaimUpdateStrategy/type"))
        .and_then(Value::as_str)
        .and_then(parse);
    if let Some(policy) = native {
        return Ok(policy);
    }
    match annotations.and_then(|a| a.get(names::VOLUME_CLAIM_UPDATE_POLICY)) {
        None => Ok(ClaimUpdatePolicy::OnDelete),
        Some(raw) => parse(raw).ok_or_else(|| {
            FieldError::not_supported(
                UPDATE_POLICY_PATH,
                BadValue::Str(clip(raw, 64)),
                &["InPlace", "OnDelete"],
            )
        }),
    }
}

/// Entry point for `apps/v1 statefulsets` CREATE and UPDATE.
pub fn review(phase: Phase, req: &AdmissionRequest<DynamicObject>, ctx: &Context<'_>) -> Verdict {
    let Some(object) = req.object.as_ref() else {
        return Verdict::allow();
    };
    let Some(spec) = object.data.get("spec").filter(|s| s.is_object()) else {
        return Verdict::invalid(vec![FieldError::required("spec", "")]);
    };
    let annotations = object.metadata.annotations.as_ref();
    let (mut errors, warnings, fallback) = review_max_unavailable(spec, annotations, ctx.policy);
    match phase {
        // Warnings were given by the mutating phase already; only denials are repeated, for
        // values another mutating webhook may have set after ours.
        Phase::Validate => {
            if errors.is_empty() {
                Verdict::allow()
            } else {
                Verdict::invalid(errors)
            }
        }
        Phase::Mutate => {
            let mut verdict = Verdict {
                warnings,
                ..Verdict::default()
            };
            let mut set_annotations = Vec::new();
            if let Some(value) = fallback {
                set_annotations.push((names::MAX_UNAVAILABLE, value));
            }
            let grows = review_templates(
                req,
                spec,
                annotations,
                ctx,
                &mut errors,
                &mut verdict,
                &mut set_annotations,
            );
            if !errors.is_empty() {
                verdict.patch.clear();
                verdict.denial = Some(Denial::Invalid(errors));
                return verdict;
            }
            let hold = review_hold(
                req,
                spec,
                annotations,
                grows && ctx.policy.coordinated_rollout,
            );
            let mut remove_annotations = Vec::new();
            if let Some(annotation) = &hold.annotation {
                match annotation {
                    Some(value) => set_annotations.push((names::ROLLOUT_HOLD, value.clone())),
                    None => remove_annotations.push(names::ROLLOUT_HOLD),
                }
            }
            let block_added = hold
                .partition
                .map(|p| hold_partition_op(spec, p, &mut verdict));
            if let Some(held) = hold.started {
                verdict.warn_all(
                    Warning::new(HOLD_PATH)
                        .fact(format!(
                            "held at {} while each replica's claims are patched before its pod is re-created, highest ordinal first",
                            held.partition
                        ))
                        .fact(format!(
                            "given back as {} at the end ({})",
                            held.user_partition,
                            names::ROLLOUT_HOLD
                        )),
                );
            }
            if block_added != Some(true)
                && max_unavailable::needs_rolling_update_block(spec, annotations)
            {
                verdict.patch.push(PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["spec", "updateStrategy", "rollingUpdate"]),
                    value: serde_json::json!({"partition": 0}),
                }));
                verdict.warn_all(
                    Warning::new(max_unavailable::ROLLING_UPDATE_PATH)
                        .fact("set to {partition: 0}, as the apiserver defaults an empty type")
                        .fact(format!(
                            "without it the StatefulSet controller re-creates pods deleted for {} at the old revision",
                            names::MAX_UNAVAILABLE
                        )),
                );
            }
            verdict
                .patch
                .extend(annotation_ops(annotations.is_some(), set_annotations));
            verdict
                .patch
                .extend(remove_annotations.into_iter().map(|k| {
                    PatchOperation::Remove(json_patch::RemoveOperation {
                        path: PointerBuf::from_tokens(["metadata", "annotations", k]),
                    })
                }));
            verdict
        }
    }
}

/// Field path of the rolling update's partition.
const HOLD_PATH: &str = "spec.updateStrategy.rollingUpdate.partition";

/// The coordinated rollout's hold ([`crate::rollout::hold`]) for an update; `grows`: the
/// update records a claim template growth of an `InPlace` set.
fn review_hold(
    req: &AdmissionRequest<DynamicObject>,
    spec: &Value,
    annotations: Option<&BTreeMap<String, String>>,
    grows: bool,
) -> crate::rollout::hold::Admit {
    if req.operation != Operation::Update {
        return crate::rollout::hold::Admit::default();
    }
    let old = req.old_object.as_ref();
    let old_spec = old.and_then(|o| o.data.get("spec"));
    let template_changed = old_spec.is_some_and(|o| pod_template_changed(o, spec));
    crate::rollout::hold::admit(
        old.zip(old_spec)
            .map(|(o, s)| (o.metadata.annotations.as_ref(), s)),
        (annotations, spec),
        grows && template_changed,
    )
}

/// The patch that sets the partition to `partition`; true where it adds the whole
/// `rollingUpdate` block.
fn hold_partition_op(spec: &Value, partition: i32, verdict: &mut Verdict) -> bool {
    let strategy = spec.get("updateStrategy").filter(|s| s.is_object());
    let rolling = strategy
        .and_then(|s| s.get("rollingUpdate"))
        .filter(|r| r.is_object());
    let (tokens, value, block): (&[&str], Value, bool) = match (strategy, rolling) {
        (Some(_), Some(_)) => (
            &["spec", "updateStrategy", "rollingUpdate", "partition"],
            Value::from(partition),
            false,
        ),
        (Some(_), None) => (
            &["spec", "updateStrategy", "rollingUpdate"],
            serde_json::json!({"partition": partition}),
            true,
        ),
        (None, _) => (
            &["spec", "updateStrategy"],
            serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"partition": partition}}),
            true,
        ),
    };
    verdict.patch.push(PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(tokens.iter().copied()),
        value,
    }));
    block
}

/// maxUnavailable and partition as upstream validates them, the KEP's limits (from the
/// native field, else the fallback annotation), and the annotation value to write.
///
/// The fallback (`--max-unavailable-fallback`, on by default) copies a set native
/// `maxUnavailable` into `stateful-admission.io/max-unavailable`, because an apiserver with the
/// `MaxUnavailableStatefulSet` gate off drops the field after the mutating webhooks ran and the
/// user's value would be lost; the companion controller honours the annotation there. The
/// trade-off: the annotation is a second copy the apiserver cannot see. Where the gate is off
/// the stored object never holds the native field, so removing `maxUnavailable` from a
/// manifest cannot be told apart from the apiserver dropping it, and the annotation stays
/// until it is removed too; GitOps tools diffing with mutation webhooks see an extra
/// annotation; and where the gate is on it merely duplicates the field (the controller does
/// nothing there). A native value always overwrites the annotation.
fn review_max_unavailable(
    spec: &Value,
    annotations: Option<&BTreeMap<String, String>>,
    policy: &Policy,
) -> (Vec<FieldError>, Vec<String>, Option<String>) {
    let (mut errors, strategy) = max_unavailable::validate_update_strategy(spec);
    let mut warnings = Vec::new();
    let written = annotations.and_then(|a| a.get(names::MAX_UNAVAILABLE));
    let from_annotation = written.and_then(|raw| match max_unavailable::annotation_value(raw) {
        Ok(v) => Some(v),
        Err(e) => {
            errors.extend(e);
            None
        }
    });
    if !errors.is_empty() {
        return (errors, warnings, None);
    }
    let source: Option<(IntOrPercent, &str)> = match (&strategy.max_unavailable, from_annotation) {
        (Some(native), _) => Some((native.clone(), MAX_UNAVAILABLE_PATH)),
        (None, Some(v)) => Some((v, ANNOTATION_PATH)),
        (None, None) => None,
    };
    if let Some((value, path)) = source.as_ref().filter(|_| strategy.rolling) {
        match max_unavailable::check_against_replicas(
            value,
            spec,
            strategy.partition,
            path,
            policy.strict_max_unavailable,
        ) {
            Ok(Some(w)) => warnings.extend(w.build()),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    let mut fallback = None;
    if policy.needs_max_unavailable_fallback()
        && let Some(native) = &strategy.max_unavailable
    {
        let value = native.render();
        if written != Some(&value) {
            if let Some(old) = written {
                warnings.extend(
                    Warning::new(names::MAX_UNAVAILABLE)
                        .fact(format!(
                            "{} replaced by spec.updateStrategy.rollingUpdate.maxUnavailable ({})",
                            warning::quote(old),
                            warning::cut(&value)
                        ))
                        .build(),
                );
            }
            fallback = Some(value);
        }
    }
    (errors, warnings, fallback)
}

/// KEP-4650 on the templates: CREATE checks a desired annotation and warns about existing
/// claims; UPDATE classifies the change and records an allowed one.
fn review_templates(
    req: &AdmissionRequest<DynamicObject>,
    spec: &Value,
    annotations: Option<&BTreeMap<String, String>>,
    ctx: &Context<'_>,
    errors: &mut Vec<FieldError>,
    verdict: &mut Verdict,
    set_annotations: &mut Vec<(&'static str, String)>,
) -> bool {
    let policy = match claim_update_policy(spec, annotations) {
        Ok(p) => p,
        Err(e) => {
            errors.push(e);
            ClaimUpdatePolicy::OnDelete
        }
    };
    let new_templates = match templates::templates_of(spec) {
        Ok(t) => t,
        Err(e) => {
            errors.push(e);
            return false;
        }
    };
    let desired_now = annotations.and_then(|a| a.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
    match req.operation {
        Operation::Create => {
            if let Some(raw) = desired_now {
                errors.extend(templates::check_desired_annotation(raw, new_templates));
            }
            let object = req.object.as_ref();
            let name = object.and_then(|o| o.metadata.name.as_deref());
            let namespace = req
                .namespace
                .as_deref()
                .or_else(|| object.and_then(|o| o.metadata.namespace.as_deref()));
            if let (Some(name), Some(namespace)) = (name, namespace) {
                verdict.warnings.extend(recreate::existing_claim_warnings(
                    ctx.view,
                    namespace,
                    name,
                    new_templates,
                ));
            }
        }
        Operation::Update => {
            let Some(old) = req.old_object.as_ref() else {
                return false;
            };
            // An apiserver with KEP-4650 takes template edits itself (and validates them): the
            // edit is stored as sent, nothing is recorded for our controller to apply.
            if ctx.policy.capabilities.native_template_edits().is_some() {
                return false;
            }
            let old_spec = old.data.get("spec").unwrap_or(&Value::Null);
            let old_templates = templates::templates_of(old_spec).unwrap_or(&[]);
            let desired_before = old
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
            match templates::classify_template_change(old_templates, new_templates) {
                Classification::Unchanged => {
                    if let Some(raw) = desired_now.filter(|now| Some(*now) != desired_before) {
                        errors.extend(templates::check_desired_annotation(raw, new_templates));
                    }
                }
                Classification::Allowed(changes) => {
                    match templates::desired_annotation(new_templates) {
                        Ok(text) => {
                            verdict
                                .patch
                                .push(PatchOperation::Replace(ReplaceOperation {
                                    path: PointerBuf::from_tokens(["spec", "volumeClaimTemplates"]),
                                    value: Value::Array(old_templates.to_vec()),
                                }));
                            // A growth this update records (not one recorded before): the
                            // claims an InPlace set patches, maybe with a restart.
                            let grows = policy == ClaimUpdatePolicy::InPlace
                                && desired_before != Some(&text)
                                && changes.iter().flat_map(|c| &c.changes).any(|c| {
                                    matches!(c, templates::Change::Storage { old, new, decrease: false } if old != new)
                                });
                            if desired_now != Some(&text) {
                                set_annotations.push((names::DESIRED_VOLUME_CLAIM_TEMPLATES, text));
                            }
                            verdict.warnings.extend(change_warnings(&changes, policy));
                            verdict
                                .warnings
                                .extend(class_warnings(&changes, &ctx.policy.capabilities));
                            return grows;
                        }
                        Err(e) => errors.push(e),
                    }
                }
                Classification::Denied(e) => errors.extend(e),
            }
        }
        _ => {}
    }
    false
}

/// For each recorded template, warnings that name it, each change with its old and new value,
/// where the change is recorded and how existing claims follow (split into several warnings
/// of at most 256 characters rather than cut); and one more per storage decrease.
pub fn change_warnings(changes: &[TemplateChange], policy: ClaimUpdatePolicy) -> Vec<String> {
    let how = match policy {
        ClaimUpdatePolicy::OnDelete => "policy OnDelete: only new or re-created claims use it",
        ClaimUpdatePolicy::InPlace => "policy InPlace: existing claims are patched in place",
    };
    let quantity = |v: &Option<String>| {
        v.as_deref()
            .map_or_else(|| "unset".to_owned(), warning::cut)
    };
    let class = |v: &Option<String>| {
        v.as_deref()
            .map_or_else(|| "unset".to_owned(), warning::quote)
    };
    let mut warnings = Vec::new();
    for change in changes {
        let subject = format!(
            "volume claim template {}",
            warning::quote_to(&change.name, 63)
        );
        let mut w = Warning::new(subject.clone());
        let mut decrease = None;
        // Values first: labels and annotations changed say least.
        let mut ordered: Vec<&templates::Change> = change.changes.iter().collect();
        ordered.sort_by_key(|c| match c {
            templates::Change::Storage { .. } => 0,
            templates::Change::VolumeAttributesClass { .. } => 1,
            templates::Change::Labels => 2,
            templates::Change::Annotations => 3,
        });
        for c in ordered {
            w = match c {
                templates::Change::Labels => w.fact("labels changed"),
                templates::Change::Annotations => w.fact("annotations changed"),
                templates::Change::Storage {
                    old,
                    new,
                    decrease: d,
                } => {
                    if *d {
                        decrease = Some((quantity(old), quantity(new)));
                    }
                    w.change("storage", &quantity(old), &quantity(new))
                }
                templates::Change::VolumeAttributesClass { old, new } => {
                    w.change("volumeAttributesClassName", &class(old), &class(new))
                }
            };
        }
        w = w
            .fact(format!(
                "recorded in {}",
                names::DESIRED_VOLUME_CLAIM_TEMPLATES
            ))
            .fact(how);
        warnings.extend(w.build());
        if let Some((old, new)) = decrease {
            warnings.extend(
                Warning::new(subject)
                    .fact(format!(
                        "storage decrease {old} -> {new} only affects new claims"
                    ))
                    .fact("existing claims are never shrunk")
                    .build(),
            );
        }
    }
    warnings
}

/// Where the cluster drops a claim's `volumeAttributesClassName`, a warning per template
/// whose edit sets or changes the class: it cannot reach the claims, and why; what else the
/// edit changes still rolls out.
pub fn class_warnings(changes: &[TemplateChange], capabilities: &Capabilities) -> Vec<String> {
    let why = match capabilities.value(Name::ClaimVolumeAttributesClass) {
        Some(CapabilityValue::Dropped) => {
            "this cluster drops a claim's volumeAttributesClassName (its VolumeAttributesClass feature gate is off)"
        }
        Some(CapabilityValue::Absent) => {
            "this cluster's claims have no volumeAttributesClassName (its apiserver predates VolumeAttributesClass)"
        }
        _ => return Vec::new(),
    };
    let mut warnings = Vec::new();
    for change in changes {
        let Some(class) = change.changes.iter().find_map(|c| match c {
            templates::Change::VolumeAttributesClass { new: Some(new), .. } => Some(new),
            _ => None,
        }) else {
            continue;
        };
        let others = change
            .changes
            .iter()
            .any(|c| !matches!(c, templates::Change::VolumeAttributesClass { .. }));
        warnings.extend(
            Warning::new(format!(
                "volume claim template {}",
                warning::quote_to(&change.name, 63)
            ))
            .fact(format!(
                "volumeAttributesClassName {} cannot reach the claims",
                warning::quote(class)
            ))
            .fact(why)
            .fact(if others {
                "the rest of the change rolls out as usual, the class once the cluster keeps it"
            } else {
                "the class rolls out once the cluster keeps it"
            })
            .build(),
        );
    }
    warnings
}

/// JSON-patch ops setting annotations: one `add` of the whole map when the object has none
/// (also replacing a null), else one `add` per key (which replaces an existing value).
fn annotation_ops(map_exists: bool, set: Vec<(&'static str, String)>) -> Vec<PatchOperation> {
    if set.is_empty() {
        return Vec::new();
    }
    if !map_exists {
        let map: Map<String, Value> = set
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::String(v)))
            .collect();
        return vec![PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: Value::Object(map),
        })];
    }
    set.into_iter()
        .map(|(k, v)| {
            PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["metadata", "annotations", k]),
                value: Value::String(v),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_claim_update_policy_comes_from_native_field_then_annotation() {
        let ann = |v: &str| {
            let mut m = BTreeMap::new();
            m.insert(names::VOLUME_CLAIM_UPDATE_POLICY.to_owned(), v.to_owned());
            m
        };
        let empty = json!({});
        assert_eq!(
            claim_update_policy(&empty, None),
            Ok(ClaimUpdatePolicy::OnDelete)
        );
        assert_eq!(
            claim_update_policy(&empty, Some(&ann("InPlace"))),
            Ok(ClaimUpdatePolicy::InPlace)
        );
        assert_eq!(
            claim_update_policy(
                &json!({"volumeClaimUpdatePolicy": "OnDelete"}),
                Some(&ann("InPlace"))
            ),
            Ok(ClaimUpdatePolicy::OnDelete)
        );
        assert_eq!(
            claim_update_policy(
                &json!({"volumeClaimUpdateStrategy": {"type": "InPlace"}}),
                None
            ),
            Ok(ClaimUpdatePolicy::InPlace)
        );
        let err = claim_update_policy(&empty, Some(&ann("Sometimes"))).expect_err("invalid");
        assert_eq!(
            err.to_string(),
            r#"metadata.annotations[stateful-admission.io/volume-claim-update-policy]: Unsupported value: "Sometimes": supported values: "InPlace", "OnDelete""#
        );
        let err = claim_update_policy(&empty, Some(&ann(&"x".repeat(5000)))).expect_err("invalid");
        assert!(err.to_string().len() < 200);
    }

    #[test]
    fn warnings_name_each_change_and_the_policy() {
        let changes = [TemplateChange {
            index: 0,
            name: "data".into(),
            changes: vec![
                templates::Change::Storage {
                    old: Some("5Gi".into()),
                    new: Some("1Gi".into()),
                    decrease: true,
                },
                templates::Change::Labels,
            ],
        }];
        let w = change_warnings(&changes, ClaimUpdatePolicy::InPlace);
        assert_eq!(
            w,
            [
                "volume claim template \"data\": storage 5Gi -> 1Gi; labels changed; recorded in stateful-admission.io/desired-volume-claim-templates; policy InPlace: existing claims are patched in place",
                "volume claim template \"data\": storage decrease 5Gi -> 1Gi only affects new claims; existing claims are never shrunk",
            ]
        );
    }

    /// Where the cluster drops claims' classes, an edit that sets or changes one is told the
    /// class cannot reach the claims, and why; nothing is said where the cluster keeps them or
    /// is not known to drop them, nor for an edit without a class.
    #[test]
    fn a_class_the_cluster_drops_is_said_at_the_edit() {
        use crate::capabilities::{Capabilities, Learned, Name, Value};
        let edit = |changes: Vec<templates::Change>| TemplateChange {
            index: 0,
            name: "data".into(),
            changes,
        };
        let class = templates::Change::VolumeAttributesClass {
            old: Some("fast".into()),
            new: Some("faster".into()),
        };
        let storage = templates::Change::Storage {
            old: Some("1Gi".into()),
            new: Some("2Gi".into()),
            decrease: false,
        };
        let cluster = |value: Option<Value>| {
            let mut c = Capabilities::default();
            if let Some(value) = value {
                c.set(
                    Name::ClaimVolumeAttributesClass,
                    Learned::probed(value, "dry run"),
                );
            }
            c
        };
        let dropped = cluster(Some(Value::Dropped));
        assert_eq!(
            class_warnings(&[edit(vec![storage.clone(), class.clone()])], &dropped),
            [
                "volume claim template \"data\": volumeAttributesClassName \"faster\" cannot reach the claims; this cluster drops a claim's volumeAttributesClassName (its VolumeAttributesClass feature gate is off)",
                "volume claim template \"data\": the rest of the change rolls out as usual, the class once the cluster keeps it"
            ]
        );
        let absent = class_warnings(&[edit(vec![class.clone()])], &cluster(Some(Value::Absent)));
        assert_eq!(absent.len(), 1);
        assert!(
            absent[0].contains("predates VolumeAttributesClass")
                && absent[0].ends_with("the class rolls out once the cluster keeps it"),
            "{absent:?}"
        );
        assert!(
            class_warnings(&[edit(vec![class.clone()])], &cluster(Some(Value::Kept))).is_empty()
        );
        assert!(class_warnings(&[edit(vec![class])], &cluster(None)).is_empty());
        assert!(class_warnings(&[edit(vec![storage])], &dropped).is_empty());
        // A class removed from the template asks nothing of the claims.
        let removed = templates::Change::VolumeAttributesClass {
            old: Some("fast".into()),
            new: None,
        };
        assert!(class_warnings(&[edit(vec![removed])], &dropped).is_empty());
    }

    /// Every change is named in full with its old and new value, whatever the lengths:
    /// split into several warnings of at most 256 characters rather than cut.
    #[test]
    fn long_changes_are_split_never_cut() {
        let class = |n: usize| format!("io2-{}", "x".repeat(n - 4));
        let change = |old_class: Option<String>, new_class: String| TemplateChange {
            index: 0,
            name: "data".into(),
            changes: vec![
                templates::Change::Storage {
                    old: Some("1Gi".into()),
                    new: Some("5Gi".into()),
                    decrease: false,
                },
                templates::Change::VolumeAttributesClass {
                    old: old_class,
                    new: Some(new_class),
                },
                templates::Change::Labels,
                templates::Change::Annotations,
            ],
        };
        // A class name of 80 characters with a size and a label: the new class is named.
        let long = class(80);
        let w = change_warnings(
            &[change(Some("gold".into()), long.clone())],
            ClaimUpdatePolicy::OnDelete,
        );
        assert_eq!(
            w,
            [
                format!(
                    "volume claim template \"data\": storage 1Gi -> 5Gi; volumeAttributesClassName \"gold\" -> \"{long}\"; labels changed; annotations changed"
                ),
                "volume claim template \"data\": recorded in stateful-admission.io/desired-volume-claim-templates; policy OnDelete: only new or re-created claims use it".to_owned(),
            ]
        );
        // Two long names: old and new apart, each whole.
        let (old, new) = (class(95), class(99));
        let w = change_warnings(
            &[change(Some(old.clone()), new.clone())],
            ClaimUpdatePolicy::OnDelete,
        );
        assert!(w.iter().all(|w| w.chars().count() <= 256), "{w:?}");
        assert!(
            w.iter()
                .all(|w| w.starts_with("volume claim template \"data\": "))
        );
        let all = w.join("\n");
        assert!(
            all.contains(&format!("volumeAttributesClassName from \"{old}\"")),
            "{all}"
        );
        assert!(
            all.contains(&format!("volumeAttributesClassName to \"{new}\"")),
            "{all}"
        );
        assert!(all.contains("storage 1Gi -> 5Gi") && all.contains("policy OnDelete"));
        // The longest a class name may be (253): only then is a value cut, saying so.
        let longest = class(253);
        let w = change_warnings(
            &[change(None, longest.clone())],
            ClaimUpdatePolicy::OnDelete,
        );
        assert!(w.iter().all(|w| w.chars().count() <= 256), "{w:?}");
        let all = w.join("\n");
        assert!(
            all.contains(&format!(
                "volumeAttributesClassName unset -> \"{}\"... (cut from 253 characters)",
                &longest[..100]
            )),
            "{all}"
        );
    }

    #[test]
    fn annotation_ops_create_the_map_when_absent() {
        let ops = annotation_ops(false, vec![(names::MAX_UNAVAILABLE, "2".into())]);
        assert_eq!(
            serde_json::to_value(&ops).expect("json"),
            json!([{"op": "add", "path": "/metadata/annotations", "value": {"stateful-admission.io/max-unavailable": "2"}}])
        );
        let ops = annotation_ops(true, vec![(names::MAX_UNAVAILABLE, "2".into())]);
        assert_eq!(
            serde_json::to_value(&ops).expect("json"),
            json!([{"op": "add", "path": "/metadata/annotations/stateful-admission.io~1max-unavailable", "value": "2"}])
        );
        assert!(annotation_ops(true, Vec::new()).is_empty());
    }
}
