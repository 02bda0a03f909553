//! The report of `status -o json`: its documented, versioned shape (README "Waiting for a
//! rollout"). A new `apiVersion` is made for any change that is not an added field. The model
//! ([`super::model`]) fills it in; the table ([`super::render`]) prints it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::rollout::claims::state::ClaimState;
use crate::rollout::claims::status::{ClassStatus, TemplateStatus};

/// `apiVersion` of the report: a new version is made for any change that is not an added field.
pub(crate) const API_VERSION: &str = "stateful-admission.io/v1alpha1";
pub(crate) const KIND: &str = "StatusReport";

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
    pub(crate) fn classes_not_applied(&self) -> Vec<(&str, &ClassStatus)> {
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
/// The templates of a recorded claim status whose class the cluster does not apply, with it.
pub(crate) fn classes_not_applied<'a>(
    templates: impl Iterator<Item = &'a TemplateStatus>,
) -> impl Iterator<Item = (&'a str, &'a ClassStatus)> {
    templates.filter_map(|t| {
        t.volume_attributes_class
            .as_ref()
            .filter(|c| !c.applied)
            .map(|c| (t.name.as_str(), c))
    })
}
