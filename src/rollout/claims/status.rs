//! The claim status of KEP-4650, per template, kept in the set's annotation
//! `stateful-admission.io/volume-claim-status` (the apiserver has no such status field).
//!
//! Format: a JSON array in the set's template order, one object per template:
//! `[{"name":"data","compatible":5,"updating":0,"overSized":1,"totalCapacity":"12Gi"}]` —
//! a list keyed by `name`, as Kubernetes lists of structs are. Counts cover the claims that
//! exist for ordinals below `replicas`.
//!
//! Beyond the KEP's four, what a rollout still waits for, so that a GitOps health check
//! reading the set alone says what `status --wait` says (each absent when zero, so older
//! readers and writers see the KEP's shape): `awaiting` counts the claims the rollout waits
//! for that are not compatible yet (policy `InPlace`; not held back by the update strategy,
//! not merely provisioning), and of those `failed` (resize or modification failed),
//! `incompatible` (cannot follow the template in place), `waitingForRestart` (the file
//! system waits for the pod to be re-created) and `restarting` (the pod was evicted for it).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::{Deserialize, Serialize};

use super::assessment::Assessment;
use super::state::{ClaimState, storage_capacity, storage_request};
use crate::quantity::Quantity;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TemplateStatus {
    pub name: String,
    /// Claims compatible with the template (KEP "What PVC is compatible").
    pub compatible: u32,
    /// Claims being updated in place (spec ahead of status).
    pub updating: u32,
    /// Claims larger than the template.
    pub over_sized: u32,
    /// Sum of `status.capacity.storage`.
    pub total_capacity: String,
    /// Claims the rollout still waits for (see the module docs).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub awaiting: u32,
    /// Of those, claims whose resize or modification failed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u32,
    /// Of those, claims that cannot follow the template in place.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub incompatible: u32,
    /// Of those, claims whose file system waits for their pod to be re-created.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting_for_restart: u32,
    /// Of those, claims whose pod was evicted for the resize and is not back with it yet.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarting: u32,
    /// The template's `volumeAttributesClassName` where the cluster cannot apply it to claims
    /// (absent otherwise: an applied class is judged per claim like the size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_attributes_class: Option<ClassStatus>,
}

/// Why a template's class is not on its claims.
pub(crate) const CLASS_DROPPED: &str = "the cluster drops a claim's volumeAttributesClassName (its VolumeAttributesClass feature gate is off)";

/// A template's class that does not reach its claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClassStatus {
    pub name: String,
    pub applied: bool,
    /// A recorded change set or changed it (a class the template had all along is reported,
    /// a change that cannot be applied has failed).
    #[serde(default)]
    pub changed: bool,
    pub reason: String,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl TemplateStatus {
    /// Counts a claim of the template in `state` that the rollout awaits (policy `InPlace`).
    pub(crate) fn count_awaited(&mut self, state: ClaimState) {
        if !state.open() {
            return;
        }
        self.awaiting += 1;
        match state {
            ClaimState::Failed => self.failed += 1,
            ClaimState::Incompatible => self.incompatible += 1,
            ClaimState::WaitingForRestart => self.waiting_for_restart += 1,
            ClaimState::Restarting => self.restarting += 1,
            _ => {}
        }
    }
}

/// The status of one template from its claims and their assessments.
pub(crate) fn summarize(
    template: &PersistentVolumeClaim,
    claims: &[(&PersistentVolumeClaim, &Assessment)],
) -> TemplateStatus {
    let want = storage_request(template);
    let mut status = TemplateStatus {
        name: template.metadata.name.clone().unwrap_or_default(),
        ..TemplateStatus::default()
    };
    let mut total = Quantity::ZERO;
    for (claim, assessment) in claims {
        match assessment {
            Assessment::Compatible => status.compatible += 1,
            Assessment::Updating => status.updating += 1,
            _ => {}
        }
        let capacity = storage_capacity(claim);
        let requested = storage_request(claim);
        if let (Some(size), Some(want)) = (capacity.or(requested), want)
            && size > want
        {
            status.over_sized += 1;
        }
        if let Some(c) = capacity {
            total = total.saturating_add(c);
        }
    }
    status.total_capacity = total.to_string();
    status
}

/// The annotation value for `statuses`.
pub(crate) fn render(statuses: &[TemplateStatus]) -> String {
    serde_json::to_string(statuses).unwrap_or_else(|_| "[]".to_owned())
}

/// Whether the stored annotation already says `statuses` (a value that does not parse is
/// rewritten).
pub(crate) fn unchanged(stored: Option<&str>, statuses: &[TemplateStatus]) -> bool {
    stored
        .and_then(|s| serde_json::from_str::<Vec<TemplateStatus>>(s).ok())
        .is_some_and(|s| s == statuses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pvc(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).expect("claim")
    }

    #[test]
    fn status_counts_compatible_updating_oversized_and_sums_capacity() {
        let t = pvc(
            json!({"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
        );
        let c = |spec: &str, cap: Option<&str>| {
            let mut v = json!({"spec": {"resources": {"requests": {"storage": spec}}}});
            if let Some(cap) = cap {
                v["status"] = json!({"capacity": {"storage": cap}});
            }
            pvc(v)
        };
        let claims = [
            c("2Gi", Some("2Gi")),
            c("2Gi", Some("1Gi")),
            c("4Gi", Some("4Gi")),
            c("3Gi", None),
        ];
        let assessments = [
            Assessment::Compatible,
            Assessment::Updating,
            Assessment::Compatible,
            Assessment::Waiting(String::new()),
        ];
        let pairs: Vec<_> = claims.iter().zip(assessments.iter()).collect();
        let s = summarize(&t, &pairs);
        assert_eq!(
            s,
            TemplateStatus {
                name: "data".into(),
                compatible: 2,
                updating: 1,
                over_sized: 2,
                total_capacity: "7Gi".into(),
                ..TemplateStatus::default()
            }
        );
        let text = render(std::slice::from_ref(&s));
        assert_eq!(
            text,
            r#"[{"name":"data","compatible":2,"updating":1,"overSized":2,"totalCapacity":"7Gi"}]"#
        );
        assert!(unchanged(Some(&text), std::slice::from_ref(&s)));
        assert!(!unchanged(Some("garbage"), std::slice::from_ref(&s)));
        assert!(!unchanged(None, &[s]));
        assert_eq!(summarize(&t, &[]).total_capacity, "0");
    }
}
