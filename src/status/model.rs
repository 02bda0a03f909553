//! Storage rollouts as data: from the objects [`gather`](super::gather) read (StatefulSets,
//! their claims and pods, convergence journals, Events of ours, StorageClasses) to one
//! [`SetStatus`] per StatefulSet. Pure: the clock is passed in. [`StatusReport`] is also the
//! documented, versioned shape of `-o json` (README "Waiting for a rollout").
//!
//! Every judgement the controller makes is made here with the controller's own functions, on
//! the same inputs: a claim against its desired template ([`plan::assess`]), which replicas'
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
use serde::Serialize;
use serde_json::{Value, json};

use crate::admission::set_claims;
use crate::admission::statefulset::ClaimUpdatePolicy;
use crate::admission::statefulset::templates::{self, Classification};
use crate::controller::claim_rollout as claims;
use crate::controller::claim_rollout::plan::{self, Assessment, PodFacts, Replica};
use crate::controller::claim_rollout::state as claim_state;
pub(crate) use crate::controller::claim_rollout::state::ClaimState;
use crate::controller::claim_rollout::status::TemplateStatus;
use crate::controller::conditions::plan::{self as conditions, reason, rollout_key};
use crate::controller::convergence::journal as converge;
use crate::controller::max_unavailable::plan as max_unavailable;
use crate::names;
use crate::names::journal_name;
use crate::quantity::Quantity;
use crate::rollout::restart;

/// `apiVersion` of the report: a new version is made for any change that is not an added field.
pub(crate) const API_VERSION: &str = "stateful-admission.io/v1alpha1";
pub(crate) const KIND: &str = "StatusReport";
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

/// The report: `-o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusReport {
    pub api_version: String,
    pub kind: String,
    /// When it was made (RFC 3339).
    pub time: String,
    /// Sources that could not be read, and what is judged without them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<Unreadable>,
    pub items: Vec<SetStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Unreadable {
    /// `configmaps` (journals), `events`, `storageclasses` or `pods`.
    pub resource: String,
    pub reason: String,
}

/// Whether the set exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Presence {
    Present,
    /// Absent while its convergence journal says it is being created again.
    Recreating,
    /// Absent, with no journal to say why (deleted, or re-created out of sight).
    Absent,
}

/// The outcome of judging one set ([`judge`](super::judge)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Verdict {
    pub result: Outcome,
    /// CamelCase, e.g. `RolloutComplete`, `UpdatingClaims`, `ClaimResizeFailed`.
    pub reason: String,
    pub message: String,
}

impl Default for Verdict {
    fn default() -> Self {
        Self {
            result: Outcome::Progressing,
            reason: String::new(),
            message: String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Outcome {
    Done,
    Progressing,
    Failed,
    NotFound,
}

/// One StatefulSet.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SetStatus {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub presence: Presence,
    /// When a set that was there went away (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absent_since: Option<String>,
    /// `OnDelete` or `InPlace`: how existing claims follow the templates (while the set is
    /// absent, that of the object its journal creates; empty without one).
    pub policy: String,
    /// Why the policy annotation was ignored (the controller then uses `OnDelete`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_error: Option<String>,
    /// `RollingUpdate` or `OnDelete`.
    pub update_strategy: String,
    pub partition: i64,
    pub replicas: i64,
    /// A coordinated rollout's hold of the rolling update (`stateful-admission.io/rollout-hold`):
    /// the partition held at and the user's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<crate::rollout::hold::Hold>,
    /// The hold annotation does not parse (the controller removes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_error: Option<String>,
    /// When the change was recorded, as the apiserver's managedFields tell (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_recorded_at: Option<String>,
    /// The recorded templates against the live ones, per changed template.
    pub changes: Vec<TemplateChange>,
    /// Why the recorded templates cannot be applied (the controller skips the convergence).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_templates_error: Option<String>,
    /// Whether `--wait` waits for the claims (policy `InPlace`).
    pub claims_awaited: bool,
    pub claims: ClaimCounts,
    /// `stateful-admission.io/volume-claim-status` as the controller last wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_claim_status: Option<Vec<TemplateStatus>>,
    pub convergence: Convergence,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<MaxUnavailable>,
    /// `Available` and `Progressing`, as on the set.
    pub conditions: Vec<Condition>,
    /// `Progressing` is False with `ProgressDeadlineExceeded` for the current rollout.
    pub progress_deadline_exceeded: bool,
    /// A refusal the controller reported for the current change (an Event of ours).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// One per template and replica, in template order then ordinal.
    pub claim_list: Vec<ClaimStatus>,
    /// The newest Events of ours about the set and its claims, oldest first.
    pub events: Vec<EventSummary>,
    pub verdict: Verdict,
}

impl SetStatus {
    /// Each template's class that the controller found the cluster cannot apply to claims, as
    /// it recorded it: `(template, class)`.
    pub(crate) fn classes_not_applied(
        &self,
    ) -> Vec<(&str, &crate::controller::claim_rollout::status::ClassStatus)> {
        classes_not_applied(self.recorded_claim_status.iter().flatten()).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TemplateChange {
    pub template: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<FromTo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_attributes_class_name: Option<FromTo>,
    pub labels: bool,
    pub annotations: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FromTo {
    pub from: Option<String>,
    pub to: Option<String>,
}

/// Claims of replicas below `replicas` that exist, by state (`total` = all of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimCounts {
    pub total: u32,
    pub compatible: u32,
    pub updating: u32,
    pub pending: u32,
    pub held: u32,
    pub waiting: u32,
    pub provisioning: u32,
    pub incompatible: u32,
    pub failed: u32,
    /// Waiting for their pod to be re-created to finish growing (also awaited).
    pub waiting_for_restart: u32,
    /// Their pod evicted for the resize, not back with the capacity yet (also awaited).
    pub restarting: u32,
    /// Larger than the template (also counted as compatible).
    pub over_sized: u32,
    /// Claims not created yet (not in `total`).
    pub missing: u32,
}

/// Where the convergence of the live object stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Convergence {
    pub phase: ConvergencePhase,
    /// `namespace/name` of the journal ConfigMap, where one is open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<String>,
    /// The journal's step annotation (`journaled`, `deleting`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_step: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How long the orphan delete has waited for the garbage collector to orphan the set's
    /// dependents, once that is 5 s or longer ([`converge::ORPHAN_WAIT_SAID`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub garbage_collector_wait_seconds: Option<u64>,
}

/// The next convergence step, as the controller's state machine decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum ConvergencePhase {
    /// Nothing recorded: the live object carries its templates.
    None,
    /// Recorded; the journal is not written yet (or journals cannot be read).
    Pending,
    Journaled,
    /// Orphan delete marked or sent; waiting for the set to go.
    Deleting,
    /// The set changed under the journal; the controller looks again.
    Rechecking,
    /// Gone; the controller creates it from the journal.
    Recreating,
    /// Created again; its field ownership is being put back.
    RestoringOwnership,
    /// Created again; the journal is about to be dropped.
    Finishing,
    /// The journal is being dropped without a re-create (someone else deleted or replaced it).
    Abandoned,
    /// The journal cannot be used: it waits for a human.
    Stuck,
    /// The set is absent and no journal says why.
    Unknown,
}

impl ConvergencePhase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::None => "done",
            Self::Pending => "pending",
            Self::Journaled => "journaled",
            Self::Deleting => "deleting",
            Self::Rechecking => "rechecking",
            Self::Recreating => "re-creating",
            Self::RestoringOwnership => "restoring",
            Self::Finishing => "finishing",
            Self::Abandoned => "abandoned",
            Self::Stuck => "stuck",
            Self::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MaxUnavailable {
    /// As written: an integer or a percentage.
    pub value: String,
    /// `native` (`spec.updateStrategy.rollingUpdate.maxUnavailable`) or `annotation`.
    pub source: String,
    /// Resolved against the replicas, as upstream does (round down, at least 1).
    pub budget: i64,
    /// `status.replicas - status.availableReplicas`.
    pub unavailable: i64,
    pub updated_replicas: i64,
    /// `currentRevision` differs from `updateRevision`.
    pub rolling_out: bool,
    /// Pods the controller deleted in its last batch, when that batch is of the update in
    /// progress (rolling out, to this `updateRevision`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    /// The note of the last `MaxUnavailableBatch` Event, and its time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_batch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_batch_time: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimStatus {
    pub name: String,
    pub template: String,
    pub ordinal: u32,
    pub state: ClaimState,
    /// Why it is in that state, or what the pending patch changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `spec.resources.requests.storage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// `status.capacity.storage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<String>,
    /// The template's storage request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `spec.volumeAttributesClassName`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_attributes_class: Option<String>,
    /// `status.currentVolumeAttributesClassName`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_volume_attributes_class: Option<String>,
    /// The template's `volumeAttributesClassName`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_volume_attributes_class: Option<String>,
    /// Resize and modification conditions (`Resizing`, `FileSystemResizePending`,
    /// `ControllerResizeError`, `NodeResizeError`, `ModifyingVolume`, `ModifyVolumeError`).
    pub conditions: Vec<ClaimCondition>,
    /// `status.allocatedResourceStatuses`, where the apiserver sets it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated_resource_statuses: BTreeMap<String, String>,
    /// `status.modifyVolumeStatus.status` and its target class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modify_volume_status: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EventSummary {
    /// Last seen (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    /// `Kind/name` of the object it is about.
    pub object: String,
    pub note: String,
    pub count: i32,
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

/// The templates of a recorded claim status whose class the cluster does not apply, with it.
fn classes_not_applied<'a>(
    templates: impl Iterator<Item = &'a TemplateStatus>,
) -> impl Iterator<
    Item = (
        &'a str,
        &'a crate::controller::claim_rollout::status::ClassStatus,
    ),
> {
    templates.filter_map(|t| {
        t.volume_attributes_class
            .as_ref()
            .filter(|c| !c.applied)
            .map(|c| (t.name.as_str(), c))
    })
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

/// The recorded templates against the live ones, and why they cannot be applied, if so.
fn changes(set: &StatefulSet, desired: Option<&str>) -> (Vec<TemplateChange>, Option<String>) {
    let Some(desired) = desired else {
        return (Vec::new(), None);
    };
    let raw = serde_json::to_value(set).unwrap_or(Value::Null);
    // The controller's own check before it journals (`ConvergeSkipped` when it fails).
    let refused = converge::desired_object(&raw).err();
    let live = raw
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Ok(Value::Array(desired)) = serde_json::from_str::<Value>(desired) else {
        return (Vec::new(), refused);
    };
    let changes = match templates::classify_template_change(&live, &desired) {
        Classification::Allowed(changes) => changes
            .into_iter()
            .map(|c| {
                let mut out = TemplateChange {
                    template: c.name,
                    storage: None,
                    volume_attributes_class_name: None,
                    labels: false,
                    annotations: false,
                };
                for change in c.changes {
                    match change {
                        templates::Change::Labels => out.labels = true,
                        templates::Change::Annotations => out.annotations = true,
                        templates::Change::Storage { old, new, .. } => {
                            out.storage = Some(FromTo { from: old, to: new });
                        }
                        templates::Change::VolumeAttributesClass { old, new } => {
                            out.volume_attributes_class_name = Some(FromTo { from: old, to: new });
                        }
                    }
                }
                out
            })
            .collect(),
        Classification::Unchanged | Classification::Denied(_) => Vec::new(),
    };
    (changes, refused)
}

/// Whether a managedFields entry (of the main resource) owns `path` (`f:` keys).
fn owns(entry: &ManagedFieldsEntry, path: &[&str]) -> bool {
    let mut node = entry.fields_v1.as_ref().map(|f| &f.0);
    for key in path {
        node = node.and_then(|n| n.get(*key));
    }
    node.is_some()
}

fn main_resource(entry: &ManagedFieldsEntry) -> bool {
    entry.subresource.as_deref().is_none_or(str::is_empty)
}

const ANNOTATION_PATH: [&str; 3] = [
    "f:metadata",
    "f:annotations",
    "f:stateful-admission.io/desired-volume-claim-templates",
];
const TEMPLATES_PATH: [&str; 2] = ["f:spec", "f:volumeClaimTemplates"];

/// When the change was recorded, from managedFields: the time of the entry that owns the
/// desired-templates annotation (the applier, where the apiserver attributes a webhook's
/// mutation to it); else, while the annotation is there, the last write by anyone but the
/// controller (the one that recorded it, or a later one); else the last write, by anyone but
/// the controller, of an entry that owns the templates (after a re-create, the applier's
/// restored entry).
fn change_recorded_at(set: &StatefulSet, recorded: bool) -> Option<Timestamp> {
    let entries: Vec<&ManagedFieldsEntry> = set
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| main_resource(e) && e.manager.as_deref() != Some(names::CONTROLLER_NAME))
        .collect();
    let latest = |f: &dyn Fn(&ManagedFieldsEntry) -> bool| {
        entries
            .iter()
            .filter(|e| f(e))
            .filter_map(|e| e.time.as_ref().map(|t| t.0))
            .max()
    };
    if recorded {
        latest(&|e| owns(e, &ANNOTATION_PATH)).or_else(|| latest(&|_| true))
    } else {
        latest(&|e| owns(e, &TEMPLATES_PATH))
    }
}

/// The managedFields `change_recorded_at` reads, and no more: each entry's manager,
/// operation, subresource and time, and of its fields only the two it looks for.
pub(crate) fn trim_managed_fields(
    entries: Option<Vec<ManagedFieldsEntry>>,
) -> Option<Vec<ManagedFieldsEntry>> {
    entries.map(|entries| {
        entries
            .into_iter()
            .map(|e| {
                let mut fields = serde_json::Map::new();
                if owns(&e, &ANNOTATION_PATH) {
                    fields.insert(
                        "f:metadata".into(),
                        json!({"f:annotations": {ANNOTATION_PATH[2]: {}}}),
                    );
                }
                if owns(&e, &TEMPLATES_PATH) {
                    fields.insert("f:spec".into(), json!({"f:volumeClaimTemplates": {}}));
                }
                ManagedFieldsEntry {
                    fields_v1: Some(FieldsV1(Value::Object(fields))),
                    fields_type: None,
                    api_version: None,
                    ..e
                }
            })
            .collect()
    })
}

/// The convergence step the controller takes next, from the live set and its journal, and
/// (with `now`) how long its orphan delete has waited for the garbage collector.
fn convergence(
    set: Option<&StatefulSet>,
    journal: Option<&ConfigMap>,
    inputs: &Inputs,
    selection: &Selection,
    (namespace, name): (&str, &str),
    now: Option<Timestamp>,
) -> Convergence {
    let journal_ref = journal.map(|_| {
        format!(
            "{}/{}",
            selection.controller_namespace,
            journal_name(namespace, name)
        )
    });
    let journal_step = journal
        .and_then(|j| j.metadata.annotations.as_ref())
        .and_then(|a| a.get(names::JOURNAL_STEP))
        .cloned();
    let wants = set
        .and_then(|s| s.metadata.annotations.as_ref())
        .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
    let deleting = set.is_some_and(|s| s.metadata.deletion_timestamp.is_some());
    if let Some(why) = &inputs.journals.unreadable {
        // Judged from the set alone.
        let phase = match set {
            None => ConvergencePhase::Unknown,
            Some(_) if deleting => ConvergencePhase::Deleting,
            Some(_) if wants => ConvergencePhase::Pending,
            Some(_) => ConvergencePhase::None,
        };
        return Convergence {
            phase,
            journal: None,
            journal_step: None,
            message: (phase != ConvergencePhase::None)
                .then(|| format!("journals cannot be read: {why}")),
            garbage_collector_wait_seconds: None,
        };
    }
    if set.is_none() && journal.is_none() {
        return Convergence {
            phase: ConvergencePhase::Unknown,
            journal: None,
            journal_step: None,
            message: None,
            garbage_collector_wait_seconds: None,
        };
    }
    let live = set.map(live_facts);
    let read = journal.map(converge::read);
    // The controller's own measure of the wait, and its words.
    let orphan_wait = match (&live, &read, now) {
        (Some(live), Some(Ok(journal)), Some(now)) => converge::orphan_wait(live, journal, now)
            .map(|waited| {
                (
                    waited.as_secs(),
                    converge::orphan_wait_note(namespace, name, &live.uid, waited),
                )
            }),
        _ => None,
    };
    let (phase, message) = match converge::next(live.as_ref(), read.as_ref(), true) {
        converge::Step::Nothing => (ConvergencePhase::None, None),
        converge::Step::Start => (ConvergencePhase::Pending, None),
        converge::Step::MarkDeleting => (ConvergencePhase::Journaled, None),
        converge::Step::Delete { .. } | converge::Step::WaitGone => (
            ConvergencePhase::Deleting,
            orphan_wait.as_ref().map(|(_, note)| note.clone()),
        ),
        converge::Step::Recheck => (ConvergencePhase::Rechecking, None),
        converge::Step::Create => (ConvergencePhase::Recreating, None),
        converge::Step::Restore { .. } => (ConvergencePhase::RestoringOwnership, None),
        converge::Step::Drop(converge::DropReason::Finished) => (ConvergencePhase::Finishing, None),
        converge::Step::Drop(converge::DropReason::Replaced) => (
            ConvergencePhase::Abandoned,
            Some(
                "another StatefulSet of this name was created meanwhile; it is left alone"
                    .to_owned(),
            ),
        ),
        converge::Step::Drop(converge::DropReason::DeletedByUser) => (
            ConvergencePhase::Abandoned,
            Some("the StatefulSet was deleted by someone else; it is not created again".to_owned()),
        ),
        converge::Step::Stuck(why) => (
            ConvergencePhase::Stuck,
            Some(format!(
                "journal ConfigMap {} cannot be used ({why}); it is kept: inspect it, then delete it",
                journal_ref.as_deref().unwrap_or_default()
            )),
        ),
    };
    Convergence {
        garbage_collector_wait_seconds: (phase == ConvergencePhase::Deleting)
            .then(|| orphan_wait.map(|(seconds, _)| seconds))
            .flatten(),
        phase,
        journal: journal_ref,
        journal_step,
        message,
    }
}

/// The live set as the convergence state machine sees it (as the controller reads it).
fn live_facts(set: &StatefulSet) -> converge::LiveSet {
    converge::LiveSet {
        uid: set.metadata.uid.clone().unwrap_or_default(),
        resource_version: set.metadata.resource_version.clone().unwrap_or_default(),
        deleting: set.metadata.deletion_timestamp.is_some(),
        wants: set
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES)),
        templates: set
            .spec
            .volume_claim_templates
            .iter()
            .flatten()
            .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
            .collect(),
        managers: set
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| main_resource(e))
            .map(|e| e.manager.clone().unwrap_or_default())
            .collect(),
        deleting_since: set.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        orphaning: set
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == converge::ORPHAN_FINALIZER),
    }
}

fn max_unavailable_of(set: &StatefulSet, events: &EventIndex<'_>) -> Option<MaxUnavailable> {
    let rollout = max_unavailable::rollout(set).ok()?;
    let value = match rollout.source {
        max_unavailable::Source::Native => set
            .spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.max_unavailable.as_ref())
            .map(|v| match v {
                IntOrString::Int(i) => i.to_string(),
                IntOrString::String(s) => s.clone(),
            }),
        max_unavailable::Source::Annotation => set
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::MAX_UNAVAILABLE))
            .cloned(),
    }
    .unwrap_or_default();
    let status = set.status.as_ref();
    let batch = events.last_batch(
        set.metadata.namespace.as_deref().unwrap_or_default(),
        set.metadata.name.as_deref().unwrap_or_default(),
        set.metadata.uid.as_deref(),
    );
    let rolling_out = status.is_some_and(|s| s.current_revision != s.update_revision);
    let update_revision = status.and_then(|s| s.update_revision.as_deref());
    let current_batch = batch
        .and_then(|e| e.note.as_deref())
        .and_then(max_unavailable::read_batch_note)
        .filter(|b| rolling_out && Some(b.update_revision.as_str()) == update_revision)
        .map(|b| u32::try_from(b.pods).unwrap_or(u32::MAX));
    Some(MaxUnavailable {
        value,
        source: match rollout.source {
            max_unavailable::Source::Native => "native",
            max_unavailable::Source::Annotation => "annotation",
        }
        .to_owned(),
        budget: i64::try_from(rollout.max_unavailable).unwrap_or(i64::MAX),
        unavailable: status.map_or(0, |s| {
            (i64::from(s.replicas) - i64::from(s.available_replicas.unwrap_or(0))).max(0)
        }),
        updated_replicas: status.and_then(|s| s.updated_replicas).map_or(0, i64::from),
        rolling_out,
        batch: current_batch,
        last_batch: batch.map(|e| e.note.clone().unwrap_or_default()),
        last_batch_time: batch.and_then(event_time).map(format_time),
    })
}

/// When an Event was last seen.
fn event_time(e: &Event) -> Option<Timestamp> {
    e.series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

fn object_key(namespace: &str, kind: &str, name: &str) -> String {
    format!("{namespace}/{kind}/{name}")
}

/// Events of ours, by the object they are about.
struct EventIndex<'a> {
    /// By `namespace/kind/name` of the object.
    by_object: HashMap<String, Vec<&'a Event>>,
    by_uid: HashMap<&'a str, Vec<&'a Event>>,
}

impl<'a> EventIndex<'a> {
    fn new(events: &'a Source<Event>) -> Self {
        let mut by_object: HashMap<String, Vec<&Event>> = HashMap::new();
        let mut by_uid: HashMap<&str, Vec<&Event>> = HashMap::new();
        for event in events.objects.values() {
            let ours = event.reporting_controller.as_deref() == Some(names::CONTROLLER_NAME)
                || event
                    .deprecated_source
                    .as_ref()
                    .and_then(|s| s.component.as_deref())
                    == Some(names::CONTROLLER_NAME);
            let Some(regarding) = event.regarding.as_ref().filter(|_| ours) else {
                continue;
            };
            let namespace = regarding
                .namespace
                .as_deref()
                .or(event.metadata.namespace.as_deref())
                .unwrap_or_default();
            by_object
                .entry(object_key(
                    namespace,
                    regarding.kind.as_deref().unwrap_or_default(),
                    regarding.name.as_deref().unwrap_or_default(),
                ))
                .or_default()
                .push(event);
            if let Some(uid) = regarding.uid.as_deref() {
                by_uid.entry(uid).or_default().push(event);
            }
        }
        for list in by_object.values_mut().chain(by_uid.values_mut()) {
            list.sort_by_key(|e| event_time(e));
        }
        Self { by_object, by_uid }
    }

    fn of(&self, namespace: &str, kind: &str, name: &str) -> &[&'a Event] {
        self.by_object
            .get(&object_key(namespace, kind, name))
            .map_or(&[], Vec::as_slice)
    }

    /// The newest Events about set `name` (any uid: its history across re-creates) and the
    /// claims with `claim_uids`, oldest first.
    fn about(&self, namespace: &str, name: &str, claim_uids: &[&str]) -> Vec<EventSummary> {
        let mut all: Vec<&Event> = self.of(namespace, "StatefulSet", name).to_vec();
        for uid in claim_uids {
            all.extend(self.by_uid.get(uid).into_iter().flatten().filter(|e| {
                e.regarding.as_ref().and_then(|r| r.kind.as_deref())
                    == Some("PersistentVolumeClaim")
            }));
        }
        all.sort_by_key(|e| (event_time(e), e.metadata.name.clone()));
        let skip = all.len().saturating_sub(EVENTS_SHOWN);
        all.into_iter()
            .skip(skip)
            .map(|e| {
                let regarding = e.regarding.as_ref();
                EventSummary {
                    time: event_time(e).map(format_time),
                    type_: e.type_.clone().unwrap_or_default(),
                    reason: e.reason.clone().unwrap_or_default(),
                    object: format!(
                        "{}/{}",
                        regarding
                            .and_then(|r| r.kind.as_deref())
                            .unwrap_or_default(),
                        regarding
                            .and_then(|r| r.name.as_deref())
                            .unwrap_or_default()
                    ),
                    note: e.note.clone().unwrap_or_default(),
                    count: e.series.as_ref().map_or(1, |s| s.count),
                }
            })
            .collect()
    }

    /// A refusal of the current change: a Warning of ours about this very set (uid), at or
    /// after the change was recorded (an older one was about an earlier change).
    fn refusal(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        recorded: Option<Timestamp>,
    ) -> Option<String> {
        let (uid, recorded) = (uid?, recorded?);
        self.of(namespace, "StatefulSet", name)
            .iter()
            .rev()
            .find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref().is_some_and(|r| REFUSALS.contains(&r))
                    && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid)
                    && event_time(e).is_some_and(|t| t >= recorded)
            })
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.as_deref().unwrap_or_default(),
                    e.note.as_deref().unwrap_or_default()
                )
            })
    }

    /// The controller's `VolumeClaimIncompatible` Warning about this very claim (uid).
    fn incompatible(&self, claim: &PersistentVolumeClaim) -> Option<String> {
        let uid = claim.metadata.uid.as_deref()?;
        self.by_uid
            .get(uid)?
            .iter()
            .rev()
            .find(|e| e.reason.as_deref() == Some("VolumeClaimIncompatible"))
            .and_then(|e| e.note.clone())
    }

    /// The last `MaxUnavailableBatch` Event about this very set.
    fn last_batch(&self, namespace: &str, name: &str, uid: Option<&str>) -> Option<&'a Event> {
        self.of(namespace, "StatefulSet", name)
            .iter()
            .rev()
            .find(|e| {
                e.reason.as_deref() == Some("MaxUnavailableBatch")
                    && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == uid
            })
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::status::fixtures::*;

    fn entry(manager: &str, seconds: i64, fields: Value) -> Value {
        json!({"manager": manager, "operation": "Update", "apiVersion": "apps/v1",
               "time": time(seconds), "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    fn recorded_at(set: &Value) -> Option<String> {
        report(std::slice::from_ref(set)).items[0]
            .change_recorded_at
            .clone()
    }

    #[test]
    fn the_change_is_dated_by_who_recorded_it() {
        let annotation = json!({"f:metadata": {"f:annotations": {
            "f:stateful-admission.io/desired-volume-claim-templates": {}}}});
        let templates = json!({"f:spec": {"f:volumeClaimTemplates": {}}});
        let recorded = set("web", "1Gi", Some("2Gi"), None);
        // The entry owning the annotation, not a later writer.
        let set_a = with(
            recorded.clone(),
            "/metadata/managedFields",
            json!([
                entry("helm", 100, annotation.clone()),
                entry("kubectl-scale", 200, json!({"f:spec": {"f:replicas": {}}})),
                entry(names::CONTROLLER_NAME, 300, json!({"f:metadata": {}}))
            ]),
        );
        assert_eq!(recorded_at(&set_a), Some(time(100)));
        // Where no entry owns it (the mutation not attributed), the last write by anyone but us.
        let set_b = with(
            recorded,
            "/metadata/managedFields",
            json!([
                entry("helm", 100, templates.clone()),
                entry("kubectl-scale", 200, json!({})),
                entry(names::CONTROLLER_NAME, 300, json!({}))
            ]),
        );
        assert_eq!(recorded_at(&set_b), Some(time(200)));
        // After the re-create: the applier's restored entry owning the templates, while claims
        // still follow.
        let converged = with(
            set("web", "2Gi", None, Some("InPlace")),
            "/metadata/managedFields",
            json!([
                entry("helm", 100, templates),
                entry(names::CONTROLLER_NAME, 300, json!({}))
            ]),
        );
        let following = report(&[
            converged.clone(),
            class("fast", true),
            claim("web", 0, "1Gi", "1Gi"),
        ]);
        assert_eq!(following.items[0].change_recorded_at, Some(time(100)));
        // Nothing in flight: no age.
        let done = report(&[
            converged,
            class("fast", true),
            claim("web", 0, "2Gi", "2Gi"),
        ]);
        assert_eq!(done.items[0].change_recorded_at, None);
    }

    #[test]
    fn managed_fields_are_trimmed_to_what_dates_the_change() {
        let entries: Vec<ManagedFieldsEntry> = serde_json::from_value(json!([
            entry(
                "helm",
                100,
                json!({"f:metadata": {"f:labels": {"f:app": {}},
                "f:annotations": {"f:stateful-admission.io/desired-volume-claim-templates": {}}},
                "f:spec": {"f:template": {"f:spec": {}}, "f:volumeClaimTemplates": {}}})
            ),
            entry("kubectl", 200, json!({"f:spec": {"f:replicas": {}}})),
        ]))
        .expect("entries");
        let trimmed = trim_managed_fields(Some(entries)).expect("kept");
        assert_eq!(
            serde_json::to_value(&trimmed).expect("json"),
            json!([
                {"manager": "helm", "operation": "Update", "time": time(100), "fieldsV1": {
                    "f:metadata": {"f:annotations": {"f:stateful-admission.io/desired-volume-claim-templates": {}}},
                    "f:spec": {"f:volumeClaimTemplates": {}}}},
                {"manager": "kubectl", "operation": "Update", "time": time(200), "fieldsV1": {}}
            ])
        );
        assert_eq!(trim_managed_fields(None), None);
    }

    #[test]
    fn sets_are_listed_when_they_carry_something_of_ours_or_are_named() {
        let plain = without(set("plain", "1Gi", None, None), "/status/conditions");
        let in_place = without(
            set("inplace", "1Gi", None, Some("InPlace")),
            "/status/conditions",
        );
        let conditions = set("conditions", "1Gi", None, None);
        let recorded = without(
            set("recorded", "1Gi", Some("2Gi"), None),
            "/status/conditions",
        );
        let other_ns = with(
            set("elsewhere", "1Gi", Some("2Gi"), None),
            "/metadata/namespace",
            json!("other"),
        );
        let gone = set("gone", "1Gi", Some("2Gi"), Some("InPlace"));
        let objects = [
            plain,
            in_place,
            conditions,
            recorded.clone(),
            other_ns,
            journal(&gone, "deleting"),
        ];
        let names: Vec<(String, Presence)> = report(&objects)
            .items
            .iter()
            .map(|s| (s.name.clone(), s.presence))
            .collect();
        assert_eq!(
            names,
            [
                ("conditions".to_owned(), Presence::Present),
                ("gone".to_owned(), Presence::Recreating),
                ("inplace".to_owned(), Presence::Present),
                ("recorded".to_owned(), Presence::Present),
            ]
        );
        // Absent, it is described by the object its journal creates.
        let recreating = &report(&objects).items[1];
        assert_eq!(
            (
                recreating.policy.as_str(),
                recreating.replicas,
                recreating.convergence.phase
            ),
            ("InPlace", 3, ConvergencePhase::Recreating)
        );
        let named = report_of(&inputs(&objects), Some("plain"), &[]);
        assert_eq!(named.items.len(), 1);
        assert_eq!(named.items[0].name, "plain");
        // Every namespace.
        let mut all = selection(None);
        all.namespace = None;
        let everywhere = build(&inputs(&objects), &all, &Followed::default(), at(NOW));
        assert_eq!(everywhere.items.len(), 5);
        // A set reported before is reported again, with nothing of ours left on it.
        let followed = Followed {
            sets: [(NS.to_owned(), "plain".to_owned())].into(),
            absent: Vec::new(),
        };
        let again = build(&inputs(&objects), &selection(None), &followed, at(NOW));
        assert!(again.items.iter().any(|s| s.name == "plain"));
    }

    #[test]
    fn only_our_newest_events_about_the_set_and_its_claims_are_kept() {
        let mut objects = vec![
            set("web", "1Gi", None, Some("InPlace")),
            claim("web", 0, "1Gi", "1Gi"),
        ];
        for i in 0..12 {
            objects.push(event(
                "VolumeClaimPatched",
                "Normal",
                "StatefulSet",
                "web",
                "uid-web",
                &format!("n{i}"),
                100 + i,
            ));
        }
        objects.push(event(
            "VolumeClaimPatchFailed",
            "Warning",
            "PersistentVolumeClaim",
            "data-web-0",
            "uid-data-web-0",
            "claim",
            150,
        ));
        // About a claim of the same name that was deleted since: another uid.
        objects.push(event(
            "VolumeClaimIncompatible",
            "Warning",
            "PersistentVolumeClaim",
            "data-web-0",
            "uid-old",
            "old claim",
            160,
        ));
        let mut foreign = event(
            "Resizing",
            "Normal",
            "PersistentVolumeClaim",
            "data-web-0",
            "uid-data-web-0",
            "theirs",
            170,
        );
        foreign["reportingController"] = json!("external-resizer");
        objects.push(foreign);
        let events = &report(&objects).items[0].events;
        let notes: Vec<&str> = events.iter().map(|e| e.note.as_str()).collect();
        assert_eq!(
            notes,
            [
                "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11", "claim"
            ]
        );
        assert_eq!(events[9].object, "PersistentVolumeClaim/data-web-0");
        assert_eq!(events[9].time.as_deref(), Some(time(150).as_str()));
    }

    #[test]
    fn the_batch_shown_is_the_last_one_of_the_update_in_progress() {
        let rolling = |current: &str| {
            with(
                with(
                    set("web", "2Gi", None, None),
                    "/metadata/annotations/stateful-admission.io~1max-unavailable",
                    json!("3"),
                ),
                "/status/currentRevision",
                json!(current),
            )
        };
        let batch = |revision: &str| {
            event(
                "MaxUnavailableBatch",
                "Normal",
                "StatefulSet",
                "web",
                "uid-web",
                &max_unavailable::batch_note(&["web-2", "web-1", "web-0"], revision, 3, 0),
                500,
            )
        };
        let shown = |objects: &[Value]| {
            let m = report(objects).items[0].max_unavailable.clone();
            m.map(|m| (m.budget, m.batch))
        };
        // The fixture's update revision is web-1.
        assert_eq!(
            shown(&[rolling("web-0"), batch("web-1")]),
            Some((3, Some(3)))
        );
        assert_eq!(
            shown(&[rolling("web-0"), batch("web-0")]),
            Some((3, None)),
            "a batch of an earlier update"
        );
        assert_eq!(
            shown(&[rolling("web-1"), batch("web-1")]),
            Some((3, None)),
            "the update is over"
        );
    }

    #[test]
    fn inputs_take_only_the_kinds_status_reads() {
        assert!(
            Inputs::from_json(&[
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})
            ])
            .is_err()
        );
        let inputs = Inputs::from_json(&[set("web", "1Gi", None, None), class("fast", true)])
            .expect("inputs");
        assert!(inputs.sets.get(NS, "web").is_some());
        assert!(inputs.classes.get("", "fast").is_some());
    }
}
