//! Where one claim stands in its template's rollout: one classification that `status` shows
//! per claim and the controller counts into `volume-claim-status`, so that what a GitOps
//! health check reads off the set is what `status --wait` decides on.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::Serialize;

use super::assessment::Assessment;
use crate::quantity::Quantity;
use crate::rollout::restart::{Record, Resize};

/// Conditions that say a resize or modification failed (upstream
/// `PersistentVolumeClaimControllerResizeError`, `…NodeResizeError`, `…VolumeModifyVolumeError`).
const CLAIM_ERRORS: [&str; 3] = [
    "ControllerResizeError",
    "NodeResizeError",
    "ModifyVolumeError",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum ClaimState {
    /// Compatible with its template (KEP-4650), larger ones included.
    Compatible,
    /// Patched; the volume has not caught up yet (expansion or modification in progress).
    Updating,
    /// Its file system waits for its pod to be re-created (`FileSystemResizePending`: the
    /// volume's driver grows it only offline).
    WaitingForRestart,
    /// Its pod was evicted by the controller for the resize; waiting for the new pod and the
    /// capacity.
    Restarting,
    /// The controller will patch it (now, or when the maxUnavailable budget allows).
    Pending,
    /// Not patched on its own: policy `OnDelete`, a partition, or a pod to re-create first.
    Held,
    /// Cannot be patched yet (an unbound claim that needs to grow), or bound and not at the
    /// template's size or class for another reason.
    Waiting,
    /// Not bound yet, and asks for what its template says: the provisioner's to finish, not
    /// the rollout's (not awaited).
    Provisioning,
    /// Cannot follow its template in place.
    Incompatible,
    /// Its resize or modification failed.
    Failed,
    /// Not created yet.
    Missing,
}

impl ClaimState {
    /// Whether the rollout is not done while a claim of this state is awaited (policy
    /// `InPlace`): held, provisioning, missing and compatible claims are not waited for.
    pub(crate) fn open(self) -> bool {
        matches!(
            self,
            Self::Updating
                | Self::Pending
                | Self::Waiting
                | Self::Incompatible
                | Self::Failed
                | Self::WaitingForRestart
                | Self::Restarting
        )
    }
}

/// The state of an existing claim from its assessment against its desired template, whether
/// the controller patches existing claims at all (policy `InPlace`) and whether its replica's
/// claims may be patched now under the update strategy ([`super::plan::eligible`]).
pub(crate) fn classify(
    template: &PersistentVolumeClaim,
    claim: &PersistentVolumeClaim,
    assessment: &Assessment,
    in_place: bool,
    eligible: bool,
) -> ClaimState {
    match assessment {
        Assessment::Compatible => ClaimState::Compatible,
        _ if resize_failure(claim).is_some() => ClaimState::Failed,
        Assessment::Updating => restart(claim).unwrap_or(ClaimState::Updating),
        Assessment::Waiting(_) if !bound(claim) && !needs_patch(template, claim) => {
            ClaimState::Provisioning
        }
        Assessment::Waiting(_) => ClaimState::Waiting,
        Assessment::Incompatible(_) => ClaimState::Incompatible,
        Assessment::Patch(_) if in_place && eligible => ClaimState::Pending,
        Assessment::Patch(_) => ClaimState::Held,
    }
}

/// An updating claim that waits for its pod to be re-created (offline expansion), or whose
/// pod the controller evicted for it.
fn restart(claim: &PersistentVolumeClaim) -> Option<ClaimState> {
    if Record::of(claim).is_some() {
        return Some(ClaimState::Restarting);
    }
    match Resize::of(claim) {
        Resize::WaitsForRestart { .. } => Some(ClaimState::WaitingForRestart),
        _ => None,
    }
}

/// Why a claim's resize or modification failed, if it did: an error condition, or a status
/// the resizer marks infeasible (KEP-1790 `allocatedResourceStatuses`, KEP-3751
/// `modifyVolumeStatus`).
pub(crate) fn resize_failure(claim: &PersistentVolumeClaim) -> Option<String> {
    let status = claim.status.as_ref()?;
    if let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| CLAIM_ERRORS.contains(&c.type_.as_str()) && c.status == "True")
    {
        let message = c.message.as_deref().or(c.reason.as_deref()).unwrap_or("");
        return Some(if message.is_empty() {
            c.type_.clone()
        } else {
            format!("{}: {message}", c.type_)
        });
    }
    if let Some((resource, value)) = status
        .allocated_resource_statuses
        .iter()
        .flatten()
        .find(|(_, v)| v.ends_with("Infeasible"))
    {
        return Some(format!("allocatedResourceStatuses[{resource}]: {value}"));
    }
    status
        .modify_volume_status
        .as_ref()
        .filter(|m| m.status == "Infeasible")
        .map(|m| {
            format!(
                "modifyVolumeStatus: Infeasible (to {})",
                m.target_volume_attributes_class_name
                    .as_deref()
                    .unwrap_or("unset")
            )
        })
}

/// `spec.resources.requests.storage`, parsed.
pub(crate) fn storage_request(c: &PersistentVolumeClaim) -> Option<Quantity> {
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

/// `status.capacity.storage`, parsed.
pub(crate) fn storage_capacity(c: &PersistentVolumeClaim) -> Option<Quantity> {
    let q = c.status.as_ref()?.capacity.as_ref()?.get("storage")?;
    Quantity::parse(&q.0).ok()
}

pub(crate) fn bound(claim: &PersistentVolumeClaim) -> bool {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// Whether the claim asks for less storage than its template (it must grow once bound).
fn needs_patch(template: &PersistentVolumeClaim, claim: &PersistentVolumeClaim) -> bool {
    match (storage_request(template), storage_request(claim)) {
        (Some(want), Some(have)) => have < want,
        (Some(_), None) => true,
        (None, _) => false,
    }
}
