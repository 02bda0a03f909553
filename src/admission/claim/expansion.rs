//! Claim UPDATE: expansion gating (KEP-284), mirroring upstream's resize admission plugin
//! (plugin/pkg/admission/storage/persistentvolume/resize/admission.go) and the size rules of
//! core validation `ValidatePersistentVolumeClaimUpdate`, so that clusters which disable the
//! plugin still get them; plus the `max-volume-size` policy and warnings read from the status.
//!
//! "Bound" and the capacity are read from `oldObject.status`: the apiserver resets the new
//! object's status to the old one before validating.

use kube::core::DynamicObject;
use serde_json::Value;

use super::quantities::{self, Read};
use super::{BETA_STORAGE_CLASS_ANNOTATION, at, shown};
use crate::admission::warning::{self, Warning};
use crate::admission::{Context, FieldError, Verdict};
use crate::names;
use crate::quantity::Quantity;

const STORAGE_FIELD: &str = "spec.resources.requests.storage";
const STORAGE_POINTER: &str = "/spec/resources/requests/storage";

/// resize admission: an increase on a claim that is not bound.
pub const NOT_BOUND: &str = "Only bound persistent volume claims can be expanded";
/// resize admission: an increase whose class does not allow expansion.
pub const NOT_EXPANDABLE: &str = "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize";
/// core validation, RecoverVolumeExpansionFailure on: a decrease to capacity or below.
pub const BELOW_CAPACITY: &str = "field can not be less than status.capacity";
/// core validation, RecoverVolumeExpansionFailure off: any decrease.
pub const BELOW_PREVIOUS: &str = "field can not be less than previous value";

/// `allocatedResourceStatuses.storage` values of a resize still under way (KEP-1790).
const IN_PROGRESS_STATUSES: [&str; 3] = [
    "ControllerResizeInProgress",
    "NodeResizePending",
    "NodeResizeInProgress",
];
/// ... and of a resize that failed for good.
const FAILED_STATUSES: [&str; 2] = ["ControllerResizeInfeasible", "NodeResizeInfeasible"];

/// The validation of a claim UPDATE.
pub fn review_update(old: &DynamicObject, new: &DynamicObject, ctx: &Context<'_>) -> Verdict {
    let mut errors = quantities::check_claim(&new.data, "");
    errors.extend(quantities::check_claim_with_status(&old.data, "oldObject."));
    if !errors.is_empty() {
        return Verdict::invalid(errors);
    }
    let sizes = Sizes::read(&old.data, &new.data);
    let mut verdict = if sizes.new.value > sizes.old.value {
        review_increase(old, new, &sizes, ctx)
    } else if sizes.new.value < sizes.old.value {
        review_decrease(&sizes, ctx)
    } else {
        Verdict::allow()
    };
    if verdict.is_allowed() {
        warn_about_class_assignment(old, new, ctx, &mut verdict);
    }
    verdict
}

/// The sizes the rules compare; an absent quantity is zero, as upstream's map lookup gives.
struct Sizes {
    old: Read,
    new: Read,
    capacity: Read,
    allocated: Option<Read>,
}

impl Sizes {
    fn read(old: &Value, new: &Value) -> Self {
        // Malformed values were reported before; here they cannot occur.
        let get = |v: &Value, p: &str| quantities::read(v, p, "").ok().flatten();
        let zero = || Read {
            value: Quantity::ZERO,
            raw: "0".to_owned(),
        };
        Sizes {
            old: get(old, STORAGE_POINTER).unwrap_or_else(zero),
            new: get(new, STORAGE_POINTER).unwrap_or_else(zero),
            capacity: get(old, "/status/capacity/storage").unwrap_or_else(zero),
            allocated: get(old, "/status/allocatedResources/storage"),
        }
    }
}

/// upstream `GetPersistentVolumeClaimClass`: the beta annotation first, then the field; `""`
/// when neither is set.
pub fn claim_class_name(object: &DynamicObject) -> &str {
    if let Some(class) = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
    {
        return class;
    }
    object
        .data
        .pointer("/spec/storageClassName")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn review_increase(
    old: &DynamicObject,
    new: &DynamicObject,
    sizes: &Sizes,
    ctx: &Context<'_>,
) -> Verdict {
    // resize admission: Validate
    if at(&old.data, "/status/phase").and_then(Value::as_str) != Some("Bound") {
        return Verdict::forbidden(NOT_BOUND);
    }
    // resize admission: allowResize
    let class = claim_class_name(new);
    let expandable = !class.is_empty()
        && class == claim_class_name(old)
        && ctx
            .view
            .storage_class(class)
            .is_some_and(|sc| sc.allow_volume_expansion == Some(true));
    if !expandable {
        return Verdict::forbidden(NOT_EXPANDABLE);
    }
    let mut verdict = Verdict::allow();
    if let Some(sc) = ctx.view.storage_class(class)
        && let Some(raw) = sc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::MAX_VOLUME_SIZE))
    {
        match Quantity::parse(raw) {
            Ok(limit) if limit >= Quantity::ZERO => {
                if sizes.new.value > limit {
                    return Verdict::invalid(vec![FieldError::invalid(
                        STORAGE_FIELD,
                        shown(&sizes.new.raw),
                        format!(
                            "must be less than or equal to {}, the {} of StorageClass {class:?}",
                            shown(raw),
                            names::MAX_VOLUME_SIZE
                        ),
                    )]);
                }
            }
            parsed => verdict.warn_all(
                Warning::new(format!("StorageClass {}", warning::quote(class)))
                    .fact(format!(
                        "annotation {} is {}, which is not a size",
                        names::MAX_VOLUME_SIZE,
                        warning::quote_to(raw, 64),
                    ))
                    .fact(match parsed {
                        Err(e) => warning::cut(&e.to_string()),
                        Ok(_) => "a size must be greater than or equal to 0".to_owned(),
                    })
                    .fact("no size limit applies"),
            ),
        }
    }
    warn_about_previous_expansion(&old.data, sizes, &mut verdict);
    verdict
}

fn review_decrease(sizes: &Sizes, ctx: &Context<'_>) -> Verdict {
    // core validation: ValidatePersistentVolumeClaimUpdate
    if !ctx.policy.expansion_recovery {
        return Verdict::invalid(vec![FieldError::forbidden(STORAGE_FIELD, BELOW_PREVIOUS)]);
    }
    // Recovery from a failed expansion may lower the request, but never to the capacity.
    if sizes.new.value <= sizes.capacity.value {
        return Verdict::invalid(vec![FieldError::forbidden(STORAGE_FIELD, BELOW_CAPACITY)]);
    }
    Verdict::allow()
}

/// Warnings from the old status about an expansion that has not finished or has failed.
fn warn_about_previous_expansion(old: &Value, sizes: &Sizes, verdict: &mut Verdict) {
    let resize_status =
        at(old, "/status/allocatedResourceStatuses/storage").and_then(Value::as_str);
    let conditions = true_conditions(old);
    let mut unfinished = Vec::new();
    if let Some(allocated) = &sizes.allocated
        && allocated.value > sizes.capacity.value
    {
        unfinished.push(format!(
            "status.allocatedResources.storage is {}, status.capacity.storage is {}",
            warning::cut_to(&allocated.raw, 32),
            warning::cut_to(&sizes.capacity.raw, 32)
        ));
    }
    if let Some(status) = resize_status.filter(|s| IN_PROGRESS_STATUSES.contains(s)) {
        unfinished.push(format!(
            "status.allocatedResourceStatuses.storage is {status}"
        ));
    }
    if conditions.contains(&"Resizing") {
        unfinished.push("condition Resizing is True".to_owned());
    }
    if !unfinished.is_empty() {
        let w = unfinished.into_iter().fold(
            Warning::new("a previous expansion of this claim has not finished"),
            Warning::fact,
        );
        verdict.warn_all(w.fact(format!(
            "the new size {} is requested on top of it",
            warning::cut_to(&sizes.new.raw, 32)
        )));
    }
    if conditions.contains(&"FileSystemResizePending") {
        verdict.warn(
            "the volume waits for a file system resize that only happens when a pod (re)starts using it \
             (condition FileSystemResizePending); this expansion will complete the same way",
        );
    }
    let failed: Vec<&str> = resize_status
        .filter(|s| FAILED_STATUSES.contains(s))
        .into_iter()
        .chain(
            conditions
                .iter()
                .copied()
                .filter(|c| *c == "ControllerResizeError" || *c == "NodeResizeError"),
        )
        .collect();
    if !failed.is_empty() {
        verdict.warn_all(
            Warning::new(format!(
                "a previous expansion of this claim failed ({})",
                failed.join(", ")
            ))
            .fact(format!(
                "to recover, lower the request to a value above status.capacity.storage ({})",
                warning::cut_to(&sizes.capacity.raw, 32)
            )),
        );
    }
}

/// Types of the status conditions that are `True` (wrong shapes are skipped).
fn true_conditions(object: &Value) -> Vec<&str> {
    at(object, "/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
                .filter_map(|c| c.get("type").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// KEP-3333: a class set on a claim that had none is allowed (apiserver 1.25+); other class
/// changes are the apiserver's to judge. Warns when the class is unknown to the view.
fn warn_about_class_assignment(
    old: &DynamicObject,
    new: &DynamicObject,
    ctx: &Context<'_>,
    verdict: &mut Verdict,
) {
    let was_unset = at(&old.data, "/spec/storageClassName").is_none();
    let Some(class) = at(&new.data, "/spec/storageClassName").and_then(Value::as_str) else {
        return;
    };
    if was_unset && !class.is_empty() && ctx.view.storage_class(class).is_none() {
        verdict.warn_all(
            Warning::new("spec.storageClassName")
                .fact(format!(
                    "set to {}, but no such StorageClass exists",
                    warning::quote(class)
                ))
                .fact("the claim stays Pending until it does"),
        );
    }
}
