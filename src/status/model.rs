//! Storage rollouts as data: from the objects [`gather`](super::gather) read (StatefulSets,
//! their claims and pods, convergence journals, Events of ours, StorageClasses) to one
//! [`SetStatus`] per StatefulSet. Pure: the clock is passed in. The shape of the report,
//! [`StatusReport`], the documented `-o json`, is [`super::report`]'s.
//!
//! Every judgement the controller makes is made here with the functions it plans with (the
//! rollout model, [`crate::rollout`]), on the same inputs: a claim against its desired template ([`plan::assess`]), which replicas'
//! claims the strategy lets it patch now ([`plan::eligible`]), the convergence step a journal
//! and the live set lead to ([`converge::next`]), whether the recorded templates can be
//! applied at all ([`converge::desired_object`]), and which rollout a progress record is about
//! ([`rollout_key`]). So `status` says what the controller will do, not a guess of it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use crate::admission::set_claims;
use crate::admission::statefulset::ClaimUpdatePolicy;
use crate::admission::statefulset::templates::{self, Classification};
use crate::names;
use crate::names::journal_name;
use crate::quantity::Quantity;
use crate::rollout::claims;
use crate::rollout::claims::plan::{self, Assessment, PodFacts, Replica};
use crate::rollout::claims::state as claim_state;
pub(crate) use crate::rollout::claims::state::ClaimState;
use crate::rollout::claims::status::TemplateStatus;
use crate::rollout::journal as converge;
use crate::rollout::max_unavailable;
use crate::rollout::progress::{self as conditions, reason, rollout_key};
use crate::rollout::restart;

pub(crate) use super::report::*;
use convergence::{convergence, max_unavailable_of};
use events::EventIndex;
pub(crate) use history::trim_managed_fields;
use history::{change_recorded_at, changes};

mod convergence;
mod events;
mod history;

/// Events of ours shown per set (the newest).
pub(crate) const EVENTS_SHOWN: usize = 10;

/// Namespace and name.
pub(crate) type Key = (String, String);

/// The objects of one kind, and why they could not be read (then `objects` is empty).
#[derive(Debug, Clone)]
pub(crate) struct Source<T> {
    pub objects: BTreeMap<Key, T>,
    pub unreadable: Option<String>,
}

impl<T> Default for Source<T> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            unreadable: None,
        }
    }
}

impl<T> Source<T> {
    fn get(&self, namespace: &str, name: &str) -> Option<&T> {
        self.objects.get(&(namespace.to_owned(), name.to_owned()))
    }
}

/// What the report is made from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inputs {
    pub sets: Source<StatefulSet>,
    pub claims: Source<PersistentVolumeClaim>,
    /// Pods of StatefulSets (for claims that follow re-created pods, `updateStrategy: OnDelete`).
    pub pods: Source<Pod>,
    /// Convergence journals of the controller's namespace.
    pub journals: Source<ConfigMap>,
    /// `events.k8s.io/v1` Events (only ours are used).
    pub events: Source<Event>,
    pub classes: Source<StorageClass>,
}

impl Inputs {
    /// From objects as JSON (`apiVersion` and `kind` say where each goes): fixtures, tests.
    #[cfg(test)]
    pub(crate) fn from_json(objects: &[Value]) -> Result<Self, String> {
        fn put<T: serde::de::DeserializeOwned + kube::Resource>(
            source: &mut Source<T>,
            object: &Value,
        ) -> Result<(), String> {
            let typed: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
            let key = (
                typed.meta().namespace.clone().unwrap_or_default(),
                typed.meta().name.clone().unwrap_or_default(),
            );
            source.objects.insert(key, typed);
            Ok(())
        }
        let mut inputs = Self::default();
        for object in objects {
            let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
            let api = object
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            match (api, kind) {
                ("apps/v1", "StatefulSet") => put(&mut inputs.sets, object)?,
                ("v1", "PersistentVolumeClaim") => put(&mut inputs.claims, object)?,
                ("v1", "Pod") => put(&mut inputs.pods, object)?,
                ("v1", "ConfigMap") => put(&mut inputs.journals, object)?,
                ("events.k8s.io/v1", "Event") => put(&mut inputs.events, object)?,
                ("storage.k8s.io/v1", "StorageClass") => put(&mut inputs.classes, object)?,
                _ => return Err(format!("unexpected object {api} {kind}")),
            }
        }
        Ok(inputs)
    }
}

/// Which sets the report is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selection {
    /// `None`: every namespace.
    pub namespace: Option<String>,
    /// One set; then it is reported whatever it carries.
    pub name: Option<String>,
    /// Where the journals are: the controller's namespace.
    pub controller_namespace: String,
}

impl Selection {
    fn namespace_matches(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == namespace)
    }

    fn matches(&self, namespace: &str, name: &str) -> bool {
        self.namespace_matches(namespace) && self.name.as_deref().is_none_or(|n| n == name)
    }
}

/// What a run that follows sets over time knows beyond the objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Followed {
    /// Sets reported before: reported again even with nothing of ours left on them (a set
    /// re-created by its convergence carries no recorded change).
    pub sets: BTreeSet<Key>,
    /// Sets that were there (or were asked for by name) and are not now.
    pub absent: Vec<Absent>,
}

/// A set that was there (or was asked for by name) and is not now, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Absent {
    pub namespace: String,
    pub name: String,
    pub since: Timestamp,
}

/// Condition types of a claim that say where a resize or modification is.
const CLAIM_CONDITIONS: [&str; 6] = [
    "Resizing",
    "FileSystemResizePending",
    "ControllerResizeError",
    "NodeResizeError",
    "ModifyingVolume",
    "ModifyVolumeError",
];

/// Warning Events of ours that mean the controller refused the recorded change.
const REFUSALS: [&str; 3] = [
    "ConvergeSkipped",
    "ConvergeJournalUnreadable",
    "DesiredTemplatesInvalid",
];

/// Builds the report for `selection` at `now`, with what a run following the sets knows.
pub(crate) fn build(
    inputs: &Inputs,
    selection: &Selection,
    followed: &Followed,
    now: Timestamp,
) -> StatusReport {
    let events = EventIndex::new(&inputs.events);
    let mut items: BTreeMap<Key, SetStatus> = BTreeMap::new();
    for ((namespace, name), set) in &inputs.sets.objects {
        let key = (namespace.clone(), name.clone());
        if !selection.matches(namespace, name)
            || (selection.name.is_none()
                && !followed.sets.contains(&key)
                && !relevant(set, inputs, selection))
        {
            continue;
        }
        let status = present(set, inputs, selection, &events, now);
        items.insert(key, status);
    }
    // Sets being created again from a journal, and sets gone from sight.
    for journal in inputs.journals.objects.values() {
        if let Some((namespace, name)) = converge::owner(journal)
            && selection.matches(&namespace, &name)
            && inputs.sets.get(&namespace, &name).is_none()
        {
            let status = missing(
                &namespace,
                &name,
                Some(journal),
                None,
                inputs,
                selection,
                &events,
            );
            items.insert((namespace, name), status);
        }
    }
    for gone in &followed.absent {
        let key = (gone.namespace.clone(), gone.name.clone());
        if items.contains_key(&key) || !selection.matches(&gone.namespace, &gone.name) {
            continue;
        }
        let status = missing(
            &gone.namespace,
            &gone.name,
            None,
            Some(gone.since),
            inputs,
            selection,
            &events,
        );
        items.insert(key, status);
    }
    let mut unreadable = Vec::new();
    for (resource, reason) in [
        ("configmaps", &inputs.journals.unreadable),
        ("events", &inputs.events.unreadable),
        ("storageclasses", &inputs.classes.unreadable),
        ("pods", &inputs.pods.unreadable),
    ] {
        if let Some(reason) = reason {
            unreadable.push(Unreadable {
                resource: resource.to_owned(),
                reason: reason.clone(),
            });
        }
    }
    StatusReport {
        api_version: API_VERSION.to_owned(),
        kind: KIND.to_owned(),
        time: format_time(now),
        unreadable,
        items: items.into_values().collect(),
    }
}

/// Whether a set is listed without being named: it carries something of ours (a recorded
/// change, claim status, a progress record, a maxUnavailable annotation, policy `InPlace`,
/// our conditions) or a journal is open for it.
fn relevant(set: &StatefulSet, inputs: &Inputs, selection: &Selection) -> bool {
    let annotations = set.metadata.annotations.as_ref();
    let ours = annotations.is_some_and(|a| {
        [
            names::DESIRED_VOLUME_CLAIM_TEMPLATES,
            names::VOLUME_CLAIM_STATUS,
            names::PROGRESS,
            names::MAX_UNAVAILABLE,
        ]
        .iter()
        .any(|k| a.contains_key(*k))
            || a.get(names::VOLUME_CLAIM_UPDATE_POLICY).map(String::as_str) == Some("InPlace")
    });
    let conditions = set
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| is_ours(c.type_.as_deref())));
    let namespace = set.metadata.namespace.as_deref().unwrap_or_default();
    let name = set.metadata.name.as_deref().unwrap_or_default();
    ours || conditions
        || inputs
            .journals
            .get(
                &selection.controller_namespace,
                &journal_name(namespace, name),
            )
            .is_some()
}

/// `Available` or `Progressing`: the conditions the controller keeps (KEP-2804).
fn is_ours(type_: Option<&str>) -> bool {
    type_ == Some(conditions::AVAILABLE) || type_ == Some(conditions::PROGRESSING)
}

fn format_time(t: Timestamp) -> String {
    conditions::format_time(t)
}

fn quantity_text(
    q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<String> {
    q.map(|q| q.0.clone())
}

fn parse_quantity(
    q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<Quantity> {
    q.and_then(|q| Quantity::parse(&q.0).ok())
}

fn request_of(
    c: &PersistentVolumeClaim,
) -> Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    c.spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
}

fn capacity_of(
    c: &PersistentVolumeClaim,
) -> Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    c.status.as_ref()?.capacity.as_ref()?.get("storage")
}

fn template_name(t: &PersistentVolumeClaim) -> String {
    t.metadata.name.clone().unwrap_or_default()
}

/// A set that is not there: being created again from `journal`, or gone since `since`.
fn missing(
    namespace: &str,
    name: &str,
    journal: Option<&ConfigMap>,
    since: Option<Timestamp>,
    inputs: &Inputs,
    selection: &Selection,
    events: &EventIndex<'_>,
) -> SetStatus {
    let journal = journal.or_else(|| {
        inputs.journals.get(
            &selection.controller_namespace,
            &journal_name(namespace, name),
        )
    });
    let convergence = convergence(None, journal, inputs, selection, (namespace, name), None);
    // What the set will be again: the object its journal creates.
    let future: Option<StatefulSet> = journal
        .and_then(|j| converge::read(j).ok())
        .and_then(|j| serde_json::from_value(j.object).ok());
    let (policy, update_strategy, partition, replicas) = match &future {
        Some(set) => {
            let (rollout, _) = claims::rollout_settings(set, 0);
            (
                policy_name(rollout.policy),
                strategy_name(set),
                i64::try_from(rollout.partition).unwrap_or(i64::MAX),
                i64::from(set.spec.replicas.unwrap_or(1)),
            )
        }
        None => (String::new(), String::new(), 0, 0),
    };
    SetStatus {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: None,
        presence: if journal.is_some() {
            Presence::Recreating
        } else {
            Presence::Absent
        },
        absent_since: since.map(format_time),
        policy,
        policy_error: None,
        update_strategy,
        partition,
        replicas,
        hold: None,
        hold_error: None,
        change_recorded_at: None,
        changes: Vec::new(),
        desired_templates_error: None,
        claims_awaited: false,
        claims: ClaimCounts::default(),
        recorded_claim_status: None,
        convergence,
        max_unavailable: None,
        conditions: Vec::new(),
        progress_deadline_exceeded: false,
        refusal: None,
        claim_list: Vec::new(),
        events: events.about(namespace, name, &[]),
        verdict: Verdict::default(),
    }
}

fn present(
    set: &StatefulSet,
    inputs: &Inputs,
    selection: &Selection,
    events: &EventIndex<'_>,
    now: Timestamp,
) -> SetStatus {
    let namespace = set.metadata.namespace.clone().unwrap_or_default();
    let name = set.metadata.name.clone().unwrap_or_default();
    let annotations = set.metadata.annotations.as_ref();
    let desired_raw = annotations.and_then(|a| a.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
    let replicas = set.spec.replicas.unwrap_or(1).max(0);
    let start = set
        .spec
        .ordinals
        .as_ref()
        .and_then(|o| o.start)
        .and_then(|s| u32::try_from(s).ok())
        .unwrap_or(0);
    let ordinals: Vec<u32> =
        (start..start.saturating_add(u32::try_from(replicas).unwrap_or(0))).collect();
    let (mut rollout, policy_error) = claims::rollout_settings(set, ordinals.len());
    let recorded_claim_status: Option<Vec<TemplateStatus>> = annotations
        .and_then(|a| a.get(names::VOLUME_CLAIM_STATUS))
        .and_then(|s| serde_json::from_str(s).ok());
    // The controller found the cluster dropping claims' classes: as it does, no claim waits
    // for one (the set says which class is not applied, and why).
    if classes_not_applied(recorded_claim_status.iter().flatten())
        .next()
        .is_some()
    {
        rollout.cluster.claim_volume_attributes_class = Some(false);
    }
    let in_place = rollout.policy == ClaimUpdatePolicy::InPlace;
    // A coordinated rollout's hold: the claims of the replica just below it are patched (as
    // the controller does), pods and their restarts follow the set's partition.
    let pod_partition = rollout.partition;
    let (hold, hold_error) = match crate::rollout::hold::Hold::of(annotations) {
        Some(Ok(h)) => (Some(h), None),
        Some(Err(why)) => (None, Some(why)),
        None => (None, None),
    };

    let (changes, mut desired_templates_error) = changes(set, desired_raw.map(String::as_str));
    let templates = match claims::desired_templates(set) {
        Ok(t) => t,
        Err(why) => {
            desired_templates_error.get_or_insert(why);
            set.spec.volume_claim_templates.clone().unwrap_or_default()
        }
    };
    // During a coordinated rollout's hold the whole rollout, down to the user's partition, is
    // awaited (as the controller's claim status counts it); the `Coordinated` line says which
    // replica is next.
    if let Some(h) = hold.as_ref().filter(|_| rollout.rolling && in_place) {
        rollout.partition = usize::try_from(h.user_partition).unwrap_or(0);
    }

    let classes_known = inputs.classes.unreadable.is_none();
    // Restarts for resizes as the controller plans them (its planner, on the same objects):
    // `status` shows that decision, not one of its own. Planned once per set, and only for a
    // set with a claim that waits for a restart or has one under way.
    let restart_plan = std::cell::OnceCell::new();
    let plan_restarts = || {
        let settings = restart::Settings {
            // `status` does not know `serve`'s default: the set's own word.
            restart: restart::opted_in(set, false),
            rolling: rollout.rolling,
            partition: pod_partition,
            max_unavailable: rollout.max_unavailable,
            update_revision: rollout.update_revision.clone(),
            grace: restart::DEFAULT_GRACE,
            observed: restart::observed(set),
            now,
        };
        let replicas = restart::replicas_of(
            set,
            &ordinals,
            |ordinal| inputs.pods.get(&namespace, &format!("{name}-{ordinal}")),
            |ordinal| {
                templates
                    .iter()
                    .filter_map(|t| {
                        let claim = set_claims::claim_name(&template_name(t), &name, ordinal);
                        inputs.claims.get(&namespace, &claim)
                    })
                    .collect()
            },
            now,
        );
        restart::plan(&settings, &replicas)
    };
    let mut claim_list = Vec::with_capacity(templates.len() * ordinals.len());
    let mut counts = ClaimCounts::default();
    let mut claim_uids = Vec::new();
    for template in &templates {
        let tname = template_name(template);
        let want = parse_quantity(
            template
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage")),
        );
        for (index, &ordinal) in ordinals.iter().enumerate() {
            let claim_name = set_claims::claim_name(&tname, &name, ordinal);
            let Some(claim) = inputs.claims.get(&namespace, &claim_name) else {
                counts.missing += 1;
                claim_list.push(ClaimStatus {
                    name: claim_name,
                    template: tname.clone(),
                    ordinal,
                    state: ClaimState::Missing,
                    message: None,
                    phase: None,
                    request: None,
                    capacity: None,
                    target: quantity_text(request_of(template)),
                    volume_attributes_class: None,
                    current_volume_attributes_class: None,
                    target_volume_attributes_class: template
                        .spec
                        .as_ref()
                        .and_then(|s| s.volume_attributes_class_name.clone()),
                    conditions: Vec::new(),
                    allocated_resource_statuses: BTreeMap::new(),
                    modify_volume_status: None,
                });
                continue;
            };
            if let Some(uid) = &claim.metadata.uid {
                claim_uids.push(uid.as_str());
            }
            let pod_name = format!("{name}-{ordinal}");
            let replica = Replica {
                index,
                ordinal,
                pod: inputs.pods.get(&namespace, &pod_name).map(pod_facts),
                slots: Vec::new(),
            };
            let expandable = claim
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.as_deref())
                .and_then(|class| inputs.classes.get("", class))
                .map_or(!classes_known, |sc| sc.allow_volume_expansion == Some(true));
            let assessment = plan::assess(template, claim, expandable, rollout.cluster);
            let eligible = plan::eligible(&rollout, &replica);
            // The state as the controller counts it; the why is said here.
            let state = claim_state::classify(template, claim, &assessment, in_place, eligible);
            let (state, message) = match (&assessment, state) {
                (_, ClaimState::Compatible) => (state, None),
                (_, ClaimState::Failed) => (state, claim_state::resize_failure(claim)),
                (_, ClaimState::Restarting | ClaimState::WaitingForRestart) => restart_state(
                    set,
                    &claim_name,
                    ordinal,
                    restart_plan.get_or_init(plan_restarts),
                    &pod_name,
                )
                .unwrap_or((state, None)),
                (_, ClaimState::Provisioning) => (
                    state,
                    Some("not bound yet; it asks for its template's size".to_owned()),
                ),
                (Assessment::Waiting(why) | Assessment::Incompatible(why), _) => {
                    (state, Some(why.clone()))
                }
                (Assessment::Patch(patch), _) => {
                    let changes = patch.changes.join(", ");
                    // Only the controller knew: it reads StorageClasses we could not.
                    let reported = (!classes_known)
                        .then(|| events.incompatible(claim))
                        .flatten();
                    if let Some(note) = reported {
                        (ClaimState::Incompatible, Some(note))
                    } else if !in_place {
                        (
                            ClaimState::Held,
                            Some(format!(
                                "{changes}: policy OnDelete patches no existing claim; a claim deleted with its pod is created again from the template"
                            )),
                        )
                    } else if !eligible {
                        (
                            ClaimState::Held,
                            Some(held_reason(&rollout, &replica, &pod_name, &changes)),
                        )
                    } else {
                        (ClaimState::Pending, Some(changes))
                    }
                }
                _ => (state, None),
            };
            counts.total += 1;
            match state {
                ClaimState::Compatible => counts.compatible += 1,
                ClaimState::Updating => counts.updating += 1,
                ClaimState::Pending => counts.pending += 1,
                ClaimState::Held => counts.held += 1,
                ClaimState::Waiting => counts.waiting += 1,
                ClaimState::Provisioning => counts.provisioning += 1,
                ClaimState::Incompatible => counts.incompatible += 1,
                ClaimState::Failed => counts.failed += 1,
                ClaimState::WaitingForRestart => counts.waiting_for_restart += 1,
                ClaimState::Restarting => counts.restarting += 1,
                ClaimState::Missing => {}
            }
            // As the controller's status counts it: capacity (else request) above the template.
            let size = parse_quantity(capacity_of(claim)).or(parse_quantity(request_of(claim)));
            if let (Some(size), Some(want)) = (size, want)
                && size > want
            {
                counts.over_sized += 1;
            }
            claim_list.push(claim_status(
                claim, template, &tname, ordinal, state, message,
            ));
        }
    }

    let journal = inputs.journals.get(
        &selection.controller_namespace,
        &journal_name(&namespace, &name),
    );
    let convergence = convergence(
        Some(set),
        journal,
        inputs,
        selection,
        (&namespace, &name),
        Some(now),
    );
    let claims_open = counts.updating
        + counts.pending
        + counts.waiting
        + counts.incompatible
        + counts.failed
        + counts.waiting_for_restart
        + counts.restarting
        > 0;
    // Only a change in flight has an age worth showing.
    let change_recorded_at = (convergence.phase != ConvergencePhase::None || claims_open)
        .then(|| change_recorded_at(set, desired_raw.is_some()))
        .flatten();
    let uid = set.metadata.uid.clone();
    let set_conditions: Vec<Condition> = set
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| is_ours(c.type_.as_deref()))
        .map(|c| Condition {
            type_: c.type_.clone().unwrap_or_default(),
            status: c.status.clone().unwrap_or_default(),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
            last_transition_time: c.last_transition_time.as_ref().map(|t| format_time(t.0)),
        })
        .collect();
    let record = conditions::read_progress(set);
    let current = rollout_key(
        set.metadata.generation.unwrap_or(0),
        desired_raw.map(String::as_str),
    );
    // A stall of an earlier rollout (or of the set this one replaced) says nothing of this one.
    let progress_deadline_exceeded = record.as_ref().is_some_and(|r| {
        r.rollout == current
            && (set_conditions.iter().any(|c| {
                c.type_ == conditions::PROGRESSING
                    && c.status == "False"
                    && c.reason == reason::PROGRESS_DEADLINE_EXCEEDED
            }) || r.progressing.as_ref().is_some_and(|t| t.status == "False"))
    });
    let refusal = if convergence.phase == ConvergencePhase::None {
        None
    } else {
        events.refusal(&namespace, &name, uid.as_deref(), change_recorded_at)
    };
    SetStatus {
        events: events.about(&namespace, &name, &claim_uids),
        max_unavailable: max_unavailable_of(set, events),
        namespace,
        name,
        uid,
        presence: Presence::Present,
        absent_since: None,
        policy: policy_name(rollout.policy),
        policy_error,
        update_strategy: strategy_name(set),
        partition: i64::try_from(pod_partition).unwrap_or(i64::MAX),
        replicas: i64::from(replicas),
        hold,
        hold_error,
        change_recorded_at: change_recorded_at.map(format_time),
        changes,
        desired_templates_error,
        claims_awaited: in_place,
        claims: counts,
        recorded_claim_status,
        convergence,
        conditions: set_conditions,
        progress_deadline_exceeded,
        refusal,
        claim_list,
        verdict: Verdict::default(),
    }
}

/// An updating claim that waits for its pod to be re-created (offline expansion), or whose
/// pod the controller evicted for it, as the restart planner decides; `None` for any other.
fn restart_state(
    set: &StatefulSet,
    claim: &str,
    ordinal: u32,
    plan: &restart::Plan,
    pod: &str,
) -> Option<(ClaimState, Option<String>)> {
    use restart::{ClaimRestart, Wait};
    let namespace = set.metadata.namespace.as_deref().unwrap_or_default();
    let decision = restart::claim_restart(plan, ordinal, claim)?;
    let waits = format!(
        "waits for pod {pod} to be re-created to finish growing its file system (FileSystemResizePending)"
    );
    let (state, message) = match decision {
        ClaimRestart::Restarting { record } => (
            ClaimState::Restarting,
            format!(
                "pod {} evicted at {} for this resize: waiting for it to be re-created and the file system to grow",
                record.pod,
                format_time(record.at)
            ),
        ),
        ClaimRestart::Evicting { pod } => (
            ClaimState::WaitingForRestart,
            format!("{waits}; the controller evicts pod {pod} now, within the budget"),
        ),
        ClaimRestart::Stuck { pod } => (
            ClaimState::Failed,
            format!(
                "pod {pod} was re-created after its eviction for this resize and the file system still waits (FileSystemResizePending): the volume's driver did not grow it; it is not evicted again"
            ),
        ),
        ClaimRestart::Cancelled { why } => (
            ClaimState::WaitingForRestart,
            format!(
                "{waits}; the restart recorded for it is not made: {}",
                why.reason().unwrap_or_default()
            ),
        ),
        ClaimRestart::Waiting { why, .. } => {
            let detail = match why {
                Wait::NotOptedIn => format!(
                    "restart it (kubectl delete pod -n {namespace} {pod}), or let the controller: annotate the set {}=true (or its --restart-pods-for-resize)",
                    names::RESTART_PODS_FOR_RESIZE
                ),
                Wait::OnDelete => format!(
                    "updateStrategy OnDelete: restart it yourself (kubectl delete pod -n {namespace} {pod})"
                ),
                Wait::Partition => "the replica is below the rolling update's partition".to_owned(),
                Wait::BeingReplaced => {
                    "the StatefulSet controller is re-creating the pod: that is the restart".to_owned()
                }
                Wait::Budget => {
                    "held by the budget: other replicas are down, restarting or being replaced for the pod template".to_owned()
                }
                Wait::NotObserved => {
                    "the StatefulSet controller has not seen the set's latest spec yet".to_owned()
                }
                Wait::Grace { left } => format!(
                    "the controller evicts it if it still waits in {}s (an online-capable volume finishes meanwhile)",
                    left.as_secs()
                ),
                Wait::Refused { left } => format!(
                    "its eviction was refused (a PodDisruptionBudget); asked again in {}s",
                    left.as_secs()
                ),
            };
            (ClaimState::WaitingForRestart, format!("{waits}; {detail}"))
        }
    };
    Some((state, Some(message)))
}

fn policy_name(policy: ClaimUpdatePolicy) -> String {
    match policy {
        ClaimUpdatePolicy::InPlace => "InPlace",
        ClaimUpdatePolicy::OnDelete => "OnDelete",
    }
    .to_owned()
}

fn strategy_name(set: &StatefulSet) -> String {
    let on_delete = set
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        == Some("OnDelete");
    if on_delete {
        "OnDelete"
    } else {
        "RollingUpdate"
    }
    .to_owned()
}

fn pod_facts(pod: &Pod) -> PodFacts {
    PodFacts {
        revision: pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::CONTROLLER_REVISION_HASH_LABEL))
            .cloned(),
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        terminating: pod.metadata.deletion_timestamp.is_some(),
    }
}

fn held_reason(rollout: &plan::Rollout, replica: &Replica<'_>, pod: &str, changes: &str) -> String {
    if rollout.rolling {
        format!(
            "{changes}: replica {} is below partition {}",
            replica.index, rollout.partition
        )
    } else if rollout.recreated_since.is_none() {
        format!(
            "{changes}: updateStrategy OnDelete: patched once the set is re-created with the templates and pod {pod} is deleted and created again"
        )
    } else {
        format!(
            "{changes}: updateStrategy OnDelete: patched once pod {pod} is deleted and created again"
        )
    }
}

fn claim_status(
    claim: &PersistentVolumeClaim,
    template: &PersistentVolumeClaim,
    tname: &str,
    ordinal: u32,
    state: ClaimState,
    message: Option<String>,
) -> ClaimStatus {
    let status = claim.status.as_ref();
    ClaimStatus {
        name: claim.metadata.name.clone().unwrap_or_default(),
        template: tname.to_owned(),
        ordinal,
        state,
        message,
        phase: status.and_then(|s| s.phase.clone()),
        request: quantity_text(request_of(claim)),
        capacity: quantity_text(capacity_of(claim)),
        target: quantity_text(request_of(template)),
        volume_attributes_class: claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_attributes_class_name.clone()),
        current_volume_attributes_class: status
            .and_then(|s| s.current_volume_attributes_class_name.clone()),
        target_volume_attributes_class: template
            .spec
            .as_ref()
            .and_then(|s| s.volume_attributes_class_name.clone()),
        conditions: status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| CLAIM_CONDITIONS.contains(&c.type_.as_str()))
            .map(|c| ClaimCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone().filter(|r| !r.is_empty()),
                message: c.message.clone().filter(|m| !m.is_empty()),
            })
            .collect(),
        allocated_resource_statuses: status
            .and_then(|s| s.allocated_resource_statuses.clone())
            .unwrap_or_default(),
        modify_volume_status: status.and_then(|s| s.modify_volume_status.as_ref()).map(
            |m| match &m.target_volume_attributes_class_name {
                Some(target) => format!("{} (to {target})", m.status),
                None => m.status.clone(),
            },
        ),
    }
}

#[cfg(test)]
mod tests;
