//! The claim rollout, planned: from a set's desired templates, its claims and pods to the claim
//! patches to send now (KEP-4650 "Updated Reconciliation Logic").
//!
//! Decisions where the KEP leaves room:
//! - A claim is judged against the desired template as the KEP's "What PVC is compatible"
//!   says. A template without `volumeAttributesClassName` does not ask for one: existing
//!   classes are neither compared nor removed.
//! - Storage goes to `max(template, status.capacity)`, and only where the apiserver accepts it:
//!   up (the class must allow expansion, the claim must be bound), or down only while staying
//!   above `status.capacity` (recovery from a failed expansion). Anything else is left alone.
//! - The budget counts replicas, as maxUnavailable does: a replica is unavailable while any of
//!   its claims is updating (spec ahead of status), and an eligible replica with an
//!   incompatible claim blocks one unit of the budget for good (the KEP blocks a rollout on a
//!   claim that never becomes compatible). A patch of labels and annotations alone makes no
//!   claim unavailable and is not limited by the budget.
//! - `RollingUpdate`: replicas from the highest index down to `partition` (upstream
//!   `updateStatefulSet` counts the partition in replica indices, not ordinals).
//!   `OnDelete`: a replica's claims follow once its pod was re-created, i.e. it runs the
//!   update revision and was created at or after the templates became live (see
//!   [`Rollout::recreated_since`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Map, Value, json};

pub(crate) use super::assessment::{Assessment, ClaimPatch};
use super::state::{self, bound, storage_capacity, storage_request};
use super::status::{self, TemplateStatus};
use crate::admission::statefulset::ClaimUpdatePolicy;
use crate::admission::statefulset::recreate::immutable_differences;

/// The set-wide inputs of a rollout.
#[derive(Debug, Clone)]
pub(crate) struct Rollout {
    pub policy: ClaimUpdatePolicy,
    /// `RollingUpdate` (true) or `OnDelete`.
    pub rolling: bool,
    /// Replica indices below this are not updated (`RollingUpdate` only).
    pub partition: usize,
    /// Replicas that may be unavailable at once (resolved, at least 1).
    pub max_unavailable: usize,
    /// `status.updateRevision`, for `OnDelete`.
    pub update_revision: Option<String>,
    /// `OnDelete`: pods created at or after this instant count as re-created. `None` while
    /// the templates are only recorded (not yet live): claims then wait.
    pub recreated_since: Option<jiff::Timestamp>,
    /// What the cluster does, where a patch depends on it.
    pub cluster: ClusterFacts,
    /// Templates whose `volumeAttributesClassName` a recorded change set or changed (not one
    /// they had all along): where the cluster cannot apply it, that change fails.
    pub class_changed: std::collections::BTreeSet<String>,
}

/// What the cluster does, as far as a claim's patch depends on it (from
/// [`crate::capabilities`]; `None` where not known: the patch is sent, and its answer teaches).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClusterFacts {
    /// A request lowered to a value still above the capacity is accepted (recovery from a
    /// failed expansion, `RecoverVolumeExpansionFailure`).
    pub recovery: Option<bool>,
    /// A claim keeps `spec.volumeAttributesClassName` (`VolumeAttributesClass` gate on, or GA).
    /// Where it does not, a template's class is not applicable: no claim is patched for it
    /// and none waits for it (the apiserver drops it on create and patch alike, without an
    /// error).
    pub claim_volume_attributes_class: Option<bool>,
}

impl ClusterFacts {
    pub(crate) fn of(capabilities: &crate::capabilities::Capabilities) -> Self {
        use crate::capabilities::{Name, Value};
        Self {
            recovery: capabilities
                .value(Name::ExpansionRecovery)
                .map(|v| v == Value::Accepted),
            claim_volume_attributes_class: capabilities.keeps_claim_volume_attributes_class(),
        }
    }

    /// Whether a template's class can reach the claims (unknown: it is tried).
    pub(crate) fn applies_class(self) -> bool {
        self.claim_volume_attributes_class != Some(false)
    }
}

/// A pod as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodFacts {
    pub revision: Option<String>,
    pub created: Option<jiff::Timestamp>,
    pub terminating: bool,
}

/// One claim slot: a desired template and the claim of one replica, if it exists.
#[derive(Debug, Clone)]
pub(crate) struct Slot<'a> {
    pub template: &'a PersistentVolumeClaim,
    pub claim: Option<&'a PersistentVolumeClaim>,
    /// Whether the claim's StorageClass exists and allows expansion.
    pub expandable: bool,
}

/// One replica: its index (position among the set's ordinals), ordinal, pod and claims (one
/// per template, in the set's order).
#[derive(Debug, Clone)]
pub(crate) struct Replica<'a> {
    pub index: usize,
    pub ordinal: u32,
    pub pod: Option<PodFacts>,
    pub slots: Vec<Slot<'a>>,
}

/// A claim to report as incompatible.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Incompatible {
    pub template: String,
    pub ordinal: u32,
    pub claim: String,
    pub reason: String,
}

/// A claim to patch now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    pub template: String,
    pub ordinal: u32,
    pub claim: String,
    pub patch: ClaimPatch,
}

/// The outcome of planning.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Plan {
    pub steps: Vec<Step>,
    pub incompatible: Vec<Incompatible>,
    /// Per template, in the set's order.
    pub status: Vec<TemplateStatus>,
    /// Replicas unavailable because of their claims (updating, or blocked by an incompatible one).
    pub unavailable: usize,
    /// Some claim is not yet compatible with its template.
    pub in_progress: bool,
    /// Replicas that need a patch that the budget or the update strategy holds back.
    pub held: Vec<u32>,
}

fn requested_text(c: &PersistentVolumeClaim) -> String {
    c.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map_or_else(|| "unset".to_owned(), |q| q.0.clone())
}

fn template_vac(t: &PersistentVolumeClaim) -> Option<&str> {
    t.spec.as_ref()?.volume_attributes_class_name.as_deref()
}

/// Keys of `want` whose value in `have` differs: the part of a merge patch that adds them.
fn missing_entries(
    want: Option<&BTreeMap<String, String>>,
    have: Option<&BTreeMap<String, String>>,
) -> Map<String, Value> {
    want.into_iter()
        .flatten()
        .filter(|(k, v)| have.and_then(|h| h.get(*k)) != Some(*v))
        // The control plane's own annotations (binding, provisioning) are not the view's to
        // compare, nor a template's to roll out.
        .filter(|(k, _)| crate::cluster::lite::claim_annotation_kept(k))
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// Judges one existing claim against its desired template.
pub(crate) fn assess(
    template: &PersistentVolumeClaim,
    claim: &PersistentVolumeClaim,
    expandable: bool,
    cluster: ClusterFacts,
) -> Assessment {
    let template_json = serde_json::to_value(template).unwrap_or(Value::Null);
    let differing = immutable_differences(&template_json, claim);
    if !differing.is_empty() {
        return Assessment::Incompatible(format!(
            "its {} differ from the template; delete the claim and its pod to re-create it from the template",
            differing.join(", ")
        ));
    }
    let want = template
        .spec
        .as_ref()
        .and_then(|_| storage_request(template));
    let spec = storage_request(claim);
    let capacity = storage_capacity(claim);
    let mut spec_patch = Map::new();
    let mut changes = Vec::new();
    let mut starts_update = false;
    let mut waiting = None;

    if let Some(want) = want {
        let target = capacity.map_or(want, |c| c.max(want));
        let grow = spec.is_none_or(|s| target > s);
        // core/validation: a decrease must stay above status.capacity, and is accepted only
        // where the apiserver recovers from failed expansions (else "field can not be less
        // than previous value"): there the claim keeps its request until it is reached.
        let recover = spec.is_some_and(|s| target < s)
            && capacity.is_some_and(|c| target > c)
            && cluster.recovery != Some(false);
        if grow && !bound(claim) {
            waiting =
                Some("the claim is not bound yet; only bound claims can be expanded".to_owned());
        } else if grow && !expandable {
            let class = claim
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
                .unwrap_or("");
            return Assessment::Incompatible(format!(
                "it needs {want} but its StorageClass {class:?} does not allow volume expansion; delete the claim and its pod to re-create it from the template"
            ));
        } else if grow || recover {
            spec_patch.insert(
                "resources".into(),
                json!({"requests": {"storage": target.to_string()}}),
            );
            changes.push(format!("storage {} -> {target}", requested_text(claim)));
            starts_update = capacity.is_none_or(|c| target > c);
        }
    }
    let claim_vac = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref());
    let current_vac = claim
        .status
        .as_ref()
        .and_then(|s| s.current_volume_attributes_class_name.as_deref());
    if let Some(vac) = template_vac(template)
        && claim_vac != Some(vac)
        && cluster.applies_class()
    {
        spec_patch.insert("volumeAttributesClassName".into(), json!(vac));
        changes.push(format!(
            "volumeAttributesClassName {} -> {vac}",
            claim_vac.unwrap_or("unset")
        ));
        starts_update = true;
    }
    let labels = missing_entries(
        template.metadata.labels.as_ref(),
        claim.metadata.labels.as_ref(),
    );
    let annotations = missing_entries(
        template.metadata.annotations.as_ref(),
        claim.metadata.annotations.as_ref(),
    );
    if !labels.is_empty() {
        changes.push(format!("labels {}", keys(&labels)));
    }
    if !annotations.is_empty() {
        changes.push(format!("annotations {}", keys(&annotations)));
    }
    if !changes.is_empty() {
        let mut metadata = Map::new();
        if let Some(rv) = &claim.metadata.resource_version {
            metadata.insert("resourceVersion".into(), json!(rv));
        }
        if !labels.is_empty() {
            metadata.insert("labels".into(), Value::Object(labels));
        }
        if !annotations.is_empty() {
            metadata.insert("annotations".into(), Value::Object(annotations));
        }
        let mut body = Map::new();
        body.insert("metadata".into(), Value::Object(metadata));
        if !spec_patch.is_empty() {
            body.insert("spec".into(), Value::Object(spec_patch));
        }
        return Assessment::Patch(ClaimPatch {
            body: Value::Object(body),
            changes,
            starts_update,
        });
    }
    if let Some(reason) = waiting {
        return Assessment::Waiting(reason);
    }
    let expanding = match (spec, capacity) {
        (Some(s), Some(c)) => s > c,
        (Some(_), None) => bound(claim),
        _ => false,
    };
    let modifying = claim_vac.is_some() && claim_vac != current_vac && cluster.applies_class();
    if expanding || modifying {
        return Assessment::Updating;
    }
    let big_enough = match (want, capacity) {
        (None, _) => true,
        (Some(w), Some(c)) => c >= w,
        (Some(_), None) => false,
    };
    // A class the cluster cannot apply is reported per template, not waited for.
    let vac_ok =
        !cluster.applies_class() || template_vac(template).is_none_or(|v| current_vac == Some(v));
    if big_enough && vac_ok {
        Assessment::Compatible
    } else {
        Assessment::Waiting("the volume has not reached the template's size or class".to_owned())
    }
}

fn keys(map: &Map<String, Value>) -> String {
    map.keys().cloned().collect::<Vec<_>>().join(",")
}

/// Whether a replica's claims may be patched now under the update strategy.
pub(crate) fn eligible(rollout: &Rollout, replica: &Replica<'_>) -> bool {
    if rollout.rolling {
        return replica.index >= rollout.partition;
    }
    // OnDelete: the pod was deleted and re-created since the templates became live.
    let (Some(pod), Some(since)) = (&replica.pod, rollout.recreated_since) else {
        return false;
    };
    let revision_ok = match (&rollout.update_revision, &pod.revision) {
        (Some(want), Some(have)) => want == have,
        _ => false,
    };
    !pod.terminating && revision_ok && pod.created.is_some_and(|c| c >= since)
}

/// Plans the rollout of `replicas` (any order; ordinals beyond `replicas` must not be given).
pub(crate) fn plan(
    rollout: &Rollout,
    replicas: &[Replica<'_>],
    claim_name: impl Fn(&str, u32) -> String,
) -> Plan {
    let mut out = Plan::default();
    let template_count = replicas.first().map_or(0, |r| r.slots.len());
    let mut per_template: Vec<Vec<(&PersistentVolumeClaim, &Assessment)>> =
        vec![Vec::new(); template_count];
    let mut assessed: Vec<(&Replica<'_>, Vec<Option<Assessment>>)> = replicas
        .iter()
        .map(|r| {
            let a = r
                .slots
                .iter()
                .map(|s| {
                    s.claim
                        .map(|c| assess(s.template, c, s.expandable, rollout.cluster))
                })
                .collect();
            (r, a)
        })
        .collect();
    // Highest index first: the order claims are patched in.
    assessed.sort_by_key(|a| std::cmp::Reverse(a.0.index));

    let mut budget_users = 0usize;
    let mut wanting: Vec<(&Replica<'_>, &Vec<Option<Assessment>>)> = Vec::new();
    for (replica, assessments) in &assessed {
        let mut updating = false;
        let mut blocked = false;
        for (i, (slot, a)) in replica.slots.iter().zip(assessments).enumerate() {
            let (Some(claim), Some(a)) = (slot.claim, a) else {
                continue;
            };
            if let Some(list) = per_template.get_mut(i) {
                list.push((claim, a));
            }
            match a {
                Assessment::Compatible => {}
                Assessment::Updating => updating = true,
                Assessment::Incompatible(reason) => {
                    blocked = true;
                    out.incompatible.push(Incompatible {
                        template: name_of(slot.template),
                        ordinal: replica.ordinal,
                        claim: claim_name(&name_of(slot.template), replica.ordinal),
                        reason: reason.clone(),
                    });
                }
                Assessment::Patch(_) | Assessment::Waiting(_) => {}
            }
            if !matches!(a, Assessment::Compatible) {
                out.in_progress = true;
            }
        }
        let eligible = eligible(rollout, replica);
        if updating || (blocked && eligible) {
            budget_users += 1;
        }
        if assessments
            .iter()
            .any(|a| matches!(a, Some(Assessment::Patch(_))))
        {
            wanting.push((replica, assessments));
        }
    }
    out.unavailable = budget_users;
    out.status = replicas
        .first()
        .map(|r| {
            r.slots
                .iter()
                .zip(&per_template)
                .map(|(slot, claims)| {
                    let mut status = status::summarize(slot.template, claims);
                    status.volume_attributes_class = class_not_applied(slot.template, rollout);
                    status
                })
                .collect()
        })
        .unwrap_or_default();
    // What the rollout still waits for, classified as `status` shows each claim.
    if rollout.policy == ClaimUpdatePolicy::InPlace {
        for (replica, assessments) in &assessed {
            let eligible = eligible(rollout, replica);
            let slots = replica.slots.iter().zip(assessments);
            for ((slot, a), status) in slots.zip(&mut out.status) {
                if let (Some(claim), Some(a)) = (slot.claim, a) {
                    status.count_awaited(state::classify(slot.template, claim, a, true, eligible));
                }
            }
        }
    }

    if rollout.policy == ClaimUpdatePolicy::OnDelete {
        return out;
    }
    let mut budget = rollout.max_unavailable.max(1).saturating_sub(budget_users);
    for (replica, assessments) in wanting {
        if !eligible(rollout, replica) {
            out.held.push(replica.ordinal);
            continue;
        }
        let patches: Vec<(&Slot<'_>, &ClaimPatch)> = replica
            .slots
            .iter()
            .zip(assessments)
            .filter_map(|(s, a)| match a {
                Some(Assessment::Patch(p)) => Some((s, p)),
                _ => None,
            })
            .collect();
        let replica_updating = assessments
            .iter()
            .any(|a| matches!(a, Some(Assessment::Updating)));
        let starts = patches.iter().any(|(_, p)| p.starts_update);
        // A replica already unavailable has its unit of the budget; metadata-only patches
        // cost nothing.
        if starts && !replica_updating {
            if budget == 0 {
                out.held.push(replica.ordinal);
                continue;
            }
            budget -= 1;
        }
        for (slot, patch) in patches {
            let template = name_of(slot.template);
            out.steps.push(Step {
                claim: claim_name(&template, replica.ordinal),
                template,
                ordinal: replica.ordinal,
                patch: patch.clone(),
            });
        }
    }
    out
}

/// Where the cluster drops a claim's class, what the template asks for and that it is not
/// applied (the apiserver drops it without an error: `dropDisabledFields` of
/// `pkg/api/persistentvolumeclaim/util.go`).
fn class_not_applied(
    template: &PersistentVolumeClaim,
    rollout: &Rollout,
) -> Option<status::ClassStatus> {
    let class = template_vac(template)?;
    if rollout.cluster.applies_class() {
        return None;
    }
    Some(status::ClassStatus {
        name: class.to_owned(),
        applied: false,
        changed: rollout.class_changed.contains(&name_of(template)),
        reason: status::CLASS_DROPPED.to_owned(),
    })
}

fn name_of(t: &PersistentVolumeClaim) -> String {
    t.metadata.name.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests;
