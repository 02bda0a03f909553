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
use super::state;
use super::status::{self, TemplateStatus};
use crate::admission::statefulset::ClaimUpdatePolicy;
use crate::admission::statefulset::recreate::immutable_differences;
use crate::quantity::Quantity;

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

fn storage_request(c: &PersistentVolumeClaim) -> Option<Quantity> {
    let q = c
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?;
    Quantity::parse(&q.0).ok()
}

fn storage_capacity(c: &PersistentVolumeClaim) -> Option<Quantity> {
    let q = c.status.as_ref()?.capacity.as_ref()?.get("storage")?;
    Quantity::parse(&q.0).ok()
}

fn bound(c: &PersistentVolumeClaim) -> bool {
    c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
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
mod tests {
    use super::*;
    use serde_json::json;

    fn template(storage: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "labels": {"app": "web", "chart": "v2"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                     "resources": {"requests": {"storage": storage}}}
        }))
        .expect("template")
    }

    /// A bound claim with `spec` request and `capacity`.
    fn claim(spec: &str, capacity: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "resourceVersion": "7", "labels": {"app": "web", "chart": "v2", "mine": "x"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast", "volumeMode": "Filesystem",
                     "resources": {"requests": {"storage": spec}}},
            "status": {"phase": "Bound", "capacity": {"storage": capacity}}
        }))
        .expect("claim")
    }

    fn with(
        mut c: PersistentVolumeClaim,
        f: impl FnOnce(&mut PersistentVolumeClaim),
    ) -> PersistentVolumeClaim {
        f(&mut c);
        c
    }

    fn patch_body(a: &Assessment) -> Value {
        match a {
            Assessment::Patch(p) => p.body.clone(),
            other => panic!("no patch: {other:?}"),
        }
    }

    #[test]
    fn claims_are_assessed_as_the_kep_defines_compatibility() {
        let t = template("2Gi");
        let cases: Vec<(&str, PersistentVolumeClaim, bool, Assessment)> = vec![
            ("same size", claim("2Gi", "2Gi"), true, Assessment::Compatible),
            ("larger than the template", claim("5Gi", "5Gi"), true, Assessment::Compatible),
            ("spec ahead of capacity", claim("2Gi", "1Gi"), true, Assessment::Updating),
            (
                "class differs",
                with(claim("1Gi", "1Gi"), |c| {
                    c.spec.as_mut().expect("spec").storage_class_name = Some("slow".into())
                }),
                true,
                Assessment::Incompatible("its storageClassName differ from the template; delete the claim and its pod to re-create it from the template".into()),
            ),
            (
                "class does not expand",
                claim("1Gi", "1Gi"),
                false,
                Assessment::Incompatible("it needs 2Gi but its StorageClass \"fast\" does not allow volume expansion; delete the claim and its pod to re-create it from the template".into()),
            ),
            (
                "unbound and too small",
                with(claim("1Gi", "1Gi"), |c| c.status = None),
                true,
                Assessment::Waiting("the claim is not bound yet; only bound claims can be expanded".into()),
            ),
        ];
        for (name, c, expandable, want) in cases {
            assert_eq!(
                assess(&t, &c, expandable, ClusterFacts::default()),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn patches_never_ask_what_the_apiserver_rejects() {
        let t = template("2Gi");
        // Grow: to the template.
        assert_eq!(
            patch_body(&assess(
                &t,
                &claim("1Gi", "1Gi"),
                true,
                ClusterFacts::default()
            )),
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}})
        );
        // Capacity already above the template: nothing to do with storage.
        assert_eq!(
            assess(&t, &claim("3Gi", "3Gi"), true, ClusterFacts::default()),
            Assessment::Compatible
        );
        // Failed expansion to 8Gi, capacity 1Gi: recover down to the template (above capacity).
        assert_eq!(
            patch_body(&assess(
                &t,
                &claim("8Gi", "1Gi"),
                true,
                ClusterFacts::default()
            )),
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}})
        );
        // ... but not where the apiserver refuses any decrease: the claim keeps its request.
        let refused = ClusterFacts {
            recovery: Some(false),
            ..ClusterFacts::default()
        };
        assert_eq!(
            assess(&t, &claim("8Gi", "1Gi"), true, refused),
            Assessment::Updating
        );
        // Failed expansion to 8Gi, capacity 3Gi above the template: target is capacity, which
        // the apiserver rejects (not above capacity); leave it updating.
        assert_eq!(
            assess(&t, &claim("8Gi", "3Gi"), true, ClusterFacts::default()),
            Assessment::Updating
        );
        // Smaller template than the claim: never shrink.
        assert_eq!(
            assess(
                &template("1Gi"),
                &claim("2Gi", "2Gi"),
                true,
                ClusterFacts::default()
            ),
            Assessment::Compatible
        );
    }

    #[test]
    fn labels_annotations_and_class_are_added_without_removing_the_users() {
        let t = with(template("1Gi"), |t| {
            t.metadata.labels = Some(
                [
                    ("chart".to_owned(), "v3".to_owned()),
                    ("new".to_owned(), "1".to_owned()),
                ]
                .into(),
            );
            t.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
            t.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
        });
        let a = assess(&t, &claim("1Gi", "1Gi"), true, ClusterFacts::default());
        let Assessment::Patch(p) = a else {
            panic!("{a:?}")
        };
        assert_eq!(
            p.body,
            json!({"metadata": {"resourceVersion": "7", "labels": {"chart": "v3", "new": "1"}, "annotations": {"a": "b"}},
                   "spec": {"volumeAttributesClassName": "gold"}})
        );
        assert_eq!(
            p.changes,
            [
                "volumeAttributesClassName unset -> gold",
                "labels chart,new",
                "annotations a"
            ]
        );
        assert!(p.starts_update);
        // The control plane's own annotations are not the template's to roll out (the view
        // does not keep them on claims, so they would look missing forever).
        let t = with(template("1Gi"), |t| {
            t.metadata.annotations = Some(
                [(
                    "pv.kubernetes.io/bind-completed".to_owned(),
                    "yes".to_owned(),
                )]
                .into(),
            );
        });
        assert_eq!(
            assess(&t, &claim("1Gi", "1Gi"), true, ClusterFacts::default()),
            Assessment::Compatible
        );
        // Labels only: no update starts.
        let t = with(template("1Gi"), |t| {
            t.metadata.labels = Some([("chart".to_owned(), "v3".to_owned())].into());
        });
        let Assessment::Patch(p) = assess(&t, &claim("1Gi", "1Gi"), true, ClusterFacts::default())
        else {
            panic!()
        };
        assert!(!p.starts_update);
        // Modification pending until status.currentVolumeAttributesClassName follows.
        let t = with(template("1Gi"), |t| {
            t.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
        });
        let c = with(claim("1Gi", "1Gi"), |c| {
            c.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
        });
        assert_eq!(
            assess(&t, &c, true, ClusterFacts::default()),
            Assessment::Updating
        );
        let done = with(c, |c| {
            c.status
                .as_mut()
                .expect("status")
                .current_volume_attributes_class_name = Some("gold".into());
        });
        assert_eq!(
            assess(&t, &done, true, ClusterFacts::default()),
            Assessment::Compatible
        );
    }

    /// Where the cluster drops a claim's class: never patched for, never waited for; the
    /// rest of the change goes on, and the template's status says the class is not applied.
    #[test]
    fn a_class_the_cluster_drops_is_not_applicable() {
        let dropped = ClusterFacts {
            claim_volume_attributes_class: Some(false),
            ..ClusterFacts::default()
        };
        let gold = |t: PersistentVolumeClaim| {
            with(t, |t| {
                t.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
            })
        };
        // Class only: compatible as it is (the apiserver would drop the patch).
        assert_eq!(
            assess(&gold(template("1Gi")), &claim("1Gi", "1Gi"), true, dropped),
            Assessment::Compatible
        );
        // With a size: the size alone is patched.
        let Assessment::Patch(p) =
            assess(&gold(template("2Gi")), &claim("1Gi", "1Gi"), true, dropped)
        else {
            panic!("a patch")
        };
        assert_eq!(
            p.body,
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}})
        );
        assert_eq!(p.changes, ["storage 1Gi -> 2Gi"]);
        // A claim that somehow has the class (kept from before the gate went off) is not
        // waited for either.
        let has = with(claim("1Gi", "1Gi"), |c| {
            c.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
        });
        assert_eq!(
            assess(&gold(template("1Gi")), &has, true, dropped),
            Assessment::Compatible
        );
        // Unknown is tried, as before anything was learned.
        assert!(matches!(
            assess(
                &gold(template("1Gi")),
                &claim("1Gi", "1Gi"),
                true,
                ClusterFacts::default()
            ),
            Assessment::Patch(_)
        ));

        // The plan: both replicas grow within the budget, none is held for the class, and the
        // template's status records the class as not applied, changed or not.
        let t = gold(template("2Gi"));
        let claims = [claim("1Gi", "1Gi"), claim("1Gi", "1Gi")];
        for changed in [false, true] {
            let mut rollout = rolling(2, 0);
            rollout.cluster = dropped;
            if changed {
                rollout.class_changed.insert("data".into());
            }
            let replicas: Vec<Replica<'_>> = claims
                .iter()
                .enumerate()
                .map(|(i, c)| Replica {
                    index: i,
                    ordinal: u32::try_from(i).expect("small"),
                    pod: None,
                    slots: vec![Slot {
                        template: &t,
                        claim: Some(c),
                        expandable: true,
                    }],
                })
                .collect();
            let plan = plan(&rollout, &replicas, |t, n| format!("{t}-web-{n}"));
            assert_eq!(plan.steps.len(), 2, "{plan:?}");
            assert!(plan.held.is_empty());
            assert_eq!(
                plan.status[0].volume_attributes_class,
                Some(status::ClassStatus {
                    name: "gold".into(),
                    applied: false,
                    changed,
                    reason: status::CLASS_DROPPED.into(),
                })
            );
            assert!(
                status::render(&plan.status)
                    .contains(r#""volumeAttributesClass":{"name":"gold","applied":false"#),
                "{}",
                status::render(&plan.status)
            );
        }
    }

    struct Case {
        name: &'static str,
        rollout: Rollout,
        /// Per ordinal: (spec, capacity) of the one claim.
        claims: Vec<(&'static str, &'static str)>,
        want_steps: Vec<u32>,
        want_held: Vec<u32>,
        /// Claims the rollout still waits for (`volume-claim-status`'s `awaiting`).
        want_awaiting: u32,
    }

    fn rolling(max_unavailable: usize, partition: usize) -> Rollout {
        Rollout {
            policy: ClaimUpdatePolicy::InPlace,
            rolling: true,
            partition,
            max_unavailable,
            update_revision: Some("rev-2".into()),
            recreated_since: Some("2026-01-01T00:00:00Z".parse().expect("ts")),
            cluster: ClusterFacts::default(),
            class_changed: Default::default(),
        }
    }

    #[test]
    fn planning_table() {
        let t = template("2Gi");
        let small = ("1Gi", "1Gi");
        let busy = ("2Gi", "1Gi");
        let done = ("2Gi", "2Gi");
        let cases = vec![
            Case {
                name: "budget 2 takes the two highest",
                rollout: rolling(2, 0),
                claims: vec![small; 5],
                want_steps: vec![4, 3],
                want_held: vec![2, 1, 0],
                want_awaiting: 5,
            },
            Case {
                name: "one updating leaves one",
                rollout: rolling(2, 0),
                claims: vec![small, small, small, done, busy],
                want_steps: vec![2],
                want_held: vec![1, 0],
                want_awaiting: 4,
            },
            Case {
                name: "budget used up",
                rollout: rolling(2, 0),
                claims: vec![small, small, busy, busy, done],
                want_steps: vec![],
                want_held: vec![1, 0],
                want_awaiting: 4,
            },
            Case {
                name: "partition stops below",
                rollout: rolling(5, 3),
                claims: vec![small; 5],
                want_steps: vec![4, 3],
                want_held: vec![2, 1, 0],
                want_awaiting: 2,
            },
            Case {
                name: "all done",
                rollout: rolling(1, 0),
                claims: vec![done; 3],
                want_steps: vec![],
                want_held: vec![],
                want_awaiting: 0,
            },
            Case {
                name: "policy OnDelete never patches",
                rollout: Rollout {
                    policy: ClaimUpdatePolicy::OnDelete,
                    ..rolling(3, 0)
                },
                claims: vec![small; 3],
                want_steps: vec![],
                want_held: vec![],
                want_awaiting: 0,
            },
        ];
        for case in cases {
            let claims: Vec<PersistentVolumeClaim> =
                case.claims.iter().map(|(s, c)| claim(s, c)).collect();
            let replicas: Vec<Replica<'_>> = claims
                .iter()
                .enumerate()
                .map(|(i, c)| Replica {
                    index: i,
                    ordinal: i as u32,
                    pod: None,
                    slots: vec![Slot {
                        template: &t,
                        claim: Some(c),
                        expandable: true,
                    }],
                })
                .collect();
            let plan = plan(&case.rollout, &replicas, |t, n| format!("{t}-web-{n}"));
            let steps: Vec<u32> = plan.steps.iter().map(|s| s.ordinal).collect();
            assert_eq!(steps, case.want_steps, "{}", case.name);
            assert_eq!(plan.held, case.want_held, "{}", case.name);
            assert_eq!(plan.status[0].awaiting, case.want_awaiting, "{}", case.name);
            assert!(
                plan.steps
                    .iter()
                    .all(|s| s.claim == format!("data-web-{}", s.ordinal))
            );
        }
    }

    /// The claim status counts what the rollout awaits as `status` classifies each claim:
    /// failed resizes, claims waiting for or in a pod restart, incompatible ones.
    #[test]
    fn the_status_counts_what_the_rollout_awaits() {
        let t = template("2Gi");
        let condition = |type_: &'static str| {
            move |c: &mut PersistentVolumeClaim| {
                c.status.as_mut().expect("status").conditions = Some(vec![
                    serde_json::from_value(json!({"type": type_, "status": "True"}))
                        .expect("condition"),
                ]);
            }
        };
        let claims = [
            claim("2Gi", "2Gi"),
            with(claim("2Gi", "1Gi"), condition("ControllerResizeError")),
            with(claim("2Gi", "1Gi"), condition("FileSystemResizePending")),
            with(
                with(claim("2Gi", "1Gi"), condition("FileSystemResizePending")),
                |c| {
                    c.metadata.annotations = Some(
                        [(
                            crate::names::RESIZE_RESTART.to_owned(),
                            r#"{"pod":"web-3","podUID":"u3","at":"2026-01-01T00:00:00Z"}"#
                                .to_owned(),
                        )]
                        .into(),
                    );
                },
            ),
            with(claim("1Gi", "1Gi"), |c| {
                c.spec.as_mut().expect("spec").access_modes = Some(vec!["ReadWriteMany".into()]);
            }),
            claim("2Gi", "1Gi"),
        ];
        let replicas: Vec<Replica<'_>> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| Replica {
                index: i,
                ordinal: i as u32,
                pod: None,
                slots: vec![Slot {
                    template: &t,
                    claim: Some(c),
                    expandable: true,
                }],
            })
            .collect();
        let p = plan(&rolling(6, 0), &replicas, |t, n| format!("{t}-web-{n}"));
        assert_eq!(
            status::render(&p.status),
            r#"[{"name":"data","compatible":1,"updating":4,"overSized":0,"totalCapacity":"7Gi","awaiting":5,"failed":1,"incompatible":1,"waitingForRestart":1,"restarting":1}]"#
        );
        // Policy OnDelete awaits no claim: the KEP's counts alone.
        let on_delete = Rollout {
            policy: ClaimUpdatePolicy::OnDelete,
            ..rolling(6, 0)
        };
        let p = plan(&on_delete, &replicas, |t, n| format!("{t}-web-{n}"));
        assert_eq!(
            status::render(&p.status),
            r#"[{"name":"data","compatible":1,"updating":4,"overSized":0,"totalCapacity":"7Gi"}]"#
        );
    }

    #[test]
    fn an_incompatible_claim_blocks_one_unit_and_is_reported() {
        let t = template("2Gi");
        let other = with(claim("1Gi", "1Gi"), |c| {
            c.spec.as_mut().expect("spec").access_modes = Some(vec!["ReadWriteMany".into()])
        });
        let claims = [claim("1Gi", "1Gi"), claim("1Gi", "1Gi"), other];
        let replicas: Vec<Replica<'_>> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| Replica {
                index: i,
                ordinal: i as u32,
                pod: None,
                slots: vec![Slot {
                    template: &t,
                    claim: Some(c),
                    expandable: true,
                }],
            })
            .collect();
        let p = plan(&rolling(2, 0), &replicas, |t, n| format!("{t}-web-{n}"));
        assert_eq!(p.steps.iter().map(|s| s.ordinal).collect::<Vec<_>>(), [1]);
        assert_eq!(p.incompatible.len(), 1);
        assert_eq!(p.incompatible[0].claim, "data-web-2");
        assert_eq!(p.unavailable, 1);
        let p = plan(&rolling(1, 0), &replicas, |t, n| format!("{t}-web-{n}"));
        assert!(
            p.steps.is_empty(),
            "budget 1 is blocked by the incompatible claim"
        );
        assert_eq!(p.status[0].compatible, 0);
    }

    #[test]
    fn on_delete_strategy_waits_for_a_recreated_pod() {
        let t = template("2Gi");
        let c = claim("1Gi", "1Gi");
        let since: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        let pod = |rev: &str, created: &str, terminating: bool| PodFacts {
            revision: Some(rev.into()),
            created: Some(created.parse().expect("ts")),
            terminating,
        };
        let cases = [
            ("no pod", None, Some(since), false),
            (
                "old pod",
                Some(pod("rev-2", "2025-12-31T00:00:00Z", false)),
                Some(since),
                false,
            ),
            (
                "old revision",
                Some(pod("rev-1", "2026-01-02T00:00:00Z", false)),
                Some(since),
                false,
            ),
            (
                "terminating",
                Some(pod("rev-2", "2026-01-02T00:00:00Z", true)),
                Some(since),
                false,
            ),
            (
                "templates not live yet",
                Some(pod("rev-2", "2026-01-02T00:00:00Z", false)),
                None,
                false,
            ),
            (
                "re-created",
                Some(pod("rev-2", "2026-01-02T00:00:00Z", false)),
                Some(since),
                true,
            ),
        ];
        for (name, pod, since, want) in cases {
            let rollout = Rollout {
                rolling: false,
                recreated_since: since,
                ..rolling(1, 0)
            };
            let replicas = [Replica {
                index: 0,
                ordinal: 0,
                pod,
                slots: vec![Slot {
                    template: &t,
                    claim: Some(&c),
                    expandable: true,
                }],
            }];
            let p = plan(&rollout, &replicas, |t, n| format!("{t}-web-{n}"));
            assert_eq!(!p.steps.is_empty(), want, "{name}");
        }
    }
}
