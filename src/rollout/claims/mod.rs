//! The claim rollout as data (KEP-4650): which templates a set's claims should follow, the
//! set-wide inputs of the rollout, the planner and its assessment of each claim, and the claim
//! status recorded per template. The controller carries a plan out; `status` shows it.
//!
//! - [`plan`]: the rollout planner (claims in, patches out); [`assessment`]: what one claim
//!   needs; [`state`]: a claim's state as the status shows it; [`status`]: the KEP status
//!   per template; [`basis`]: what the rollout plans from while a convergence holds the set.

pub(crate) mod assessment;
pub(crate) mod basis;
pub(crate) mod plan;
pub(crate) mod state;
pub(crate) mod status;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::Value;

use crate::admission::set_claims;
use crate::admission::statefulset::max_unavailable;
use crate::admission::statefulset::{ClaimUpdatePolicy, claim_update_policy};
use crate::names;
use plan::Rollout;

/// The set's annotations.
pub(crate) fn annotations(
    set: &StatefulSet,
) -> Option<&std::collections::BTreeMap<String, String>> {
    set.metadata.annotations.as_ref()
}

/// The templates claims should follow: the recorded desired ones (by name), else the live.
pub(crate) fn desired_templates(set: &StatefulSet) -> Result<Vec<PersistentVolumeClaim>, String> {
    let live = set.spec.volume_claim_templates.clone().unwrap_or_default();
    match set_claims::desired_templates(annotations(set)) {
        None => Ok(live),
        Some(Err(e)) => Err(format!(
            "annotation {} does not parse: {e}",
            names::DESIRED_VOLUME_CLAIM_TEMPLATES
        )),
        Some(Ok(desired)) => Ok(live
            .into_iter()
            .map(|t| {
                desired
                    .iter()
                    .find(|d| d.metadata.name == t.metadata.name)
                    .cloned()
                    .unwrap_or(t)
            })
            .collect()),
    }
}

/// Templates whose `volumeAttributesClassName` a recorded change sets or changes: the
/// desired class differs from the live template's while the change is recorded, and stays
/// "changed" in the set's claim status (which outlives the record) while the template names
/// that class.
pub(crate) fn class_changes(set: &StatefulSet) -> std::collections::BTreeSet<String> {
    let class = |t: &PersistentVolumeClaim| {
        t.spec
            .as_ref()
            .and_then(|s| s.volume_attributes_class_name.clone())
    };
    let live = set.spec.volume_claim_templates.as_deref().unwrap_or(&[]);
    let mut changed = std::collections::BTreeSet::new();
    if let Some(Ok(desired)) = set_claims::desired_templates(annotations(set)) {
        for d in &desired {
            let before = live
                .iter()
                .find(|t| t.metadata.name == d.metadata.name)
                .and_then(class);
            if class(d).is_some() && class(d) != before {
                changed.insert(d.metadata.name.clone().unwrap_or_default());
            }
        }
    }
    let stored: Vec<status::TemplateStatus> = annotations(set)
        .and_then(|a| a.get(names::VOLUME_CLAIM_STATUS))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    for t in stored {
        let Some(recorded) = t.volume_attributes_class.filter(|c| c.changed) else {
            continue;
        };
        // Still the class that changed (a later edit to another class decides anew).
        let wanted = desired_templates(set)
            .ok()
            .and_then(|d| {
                d.into_iter()
                    .find(|d| d.metadata.name.as_deref() == Some(&t.name))
            })
            .and_then(|d| class(&d));
        if wanted.as_deref() == Some(recorded.name.as_str()) {
            changed.insert(t.name);
        }
    }
    changed
}

/// The set-wide inputs of its claim rollout for `replicas` replicas, and why the policy
/// annotation was ignored (then the policy is `OnDelete`).
pub(crate) fn rollout_settings(set: &StatefulSet, replicas: usize) -> (Rollout, Option<String>) {
    let spec = serde_json::to_value(&set.spec).unwrap_or(Value::Null);
    let annotations = annotations(set);
    let mut problem = None;
    let policy = claim_update_policy(&spec, annotations).unwrap_or_else(|e| {
        problem = Some(e.to_string());
        ClaimUpdatePolicy::OnDelete
    });
    let (_, strategy) = max_unavailable::validate_update_strategy(&spec);
    let value = strategy.max_unavailable.clone().or_else(|| {
        annotations
            .and_then(|a| a.get(names::MAX_UNAVAILABLE))
            .and_then(|raw| max_unavailable::annotation_value(raw).ok())
    });
    let replicas_i64 = i64::try_from(replicas).unwrap_or(i64::MAX);
    let max_unavailable = value
        .map(|v| max_unavailable::effective(&v, replicas_i64))
        .unwrap_or(1);
    let recorded =
        annotations.is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
    let rollout = Rollout {
        policy,
        rolling: strategy.rolling,
        partition: usize::try_from(strategy.partition).unwrap_or(0),
        max_unavailable: usize::try_from(max_unavailable).unwrap_or(1),
        update_revision: set.status.as_ref().and_then(|s| s.update_revision.clone()),
        // The templates became live when the set was (re-)created with them.
        recreated_since: if recorded {
            None
        } else {
            set.metadata.creation_timestamp.as_ref().map(|t| t.0)
        },
        // What the cluster does is the caller's to add (see `ClusterFacts::of`).
        cluster: plan::ClusterFacts::default(),
        class_changed: class_changes(set),
    };
    (rollout, problem)
}

/// Whether `set`'s claim status is worth its annotation, a write to the set (KEP-4650 puts it
/// in the status the built-in controller writes anyway; here each is a write every watcher of
/// StatefulSets receives):
/// - a claim change was recorded (`desired-volume-claim-templates`), or the annotation is
///   there already (a change was recorded once, or an in-place rollout ran: kept current);
/// - policy `InPlace` and the rollout has work: a claim to patch (now or once the budget or
///   the update strategy lets it), or one updating;
/// - a claim that cannot follow its template in place, whatever the policy: the user has to
///   delete it (and its pod) for it to, and the Warning Events about it expire.
///
/// Not for a set whose claims match their templates, `InPlace` or not, nor for claims only
/// waiting to be bound (a scale-up): nothing there is news, and installing on a cluster of
/// healthy sets writes none of them.
pub(crate) fn status_wanted(
    set: &StatefulSet,
    policy: ClaimUpdatePolicy,
    plan: &plan::Plan,
) -> bool {
    let annotated = annotations(set).is_some_and(|a| {
        a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES)
            || a.contains_key(names::VOLUME_CLAIM_STATUS)
    });
    let rollout_has_work = !plan.steps.is_empty()
        || !plan.held.is_empty()
        || plan.status.iter().any(|t| t.updating > 0);
    annotated
        || !plan.incompatible.is_empty()
        || (policy == ClaimUpdatePolicy::InPlace && rollout_has_work)
}
