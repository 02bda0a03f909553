//! StatefulSet rules: volumeClaimTemplate updates (KEP-4650) and maxUnavailable (KEP-961).

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

use super::{Context, Phase, Verdict};

/// Entry point for `apps/v1 statefulsets` CREATE and UPDATE.
pub fn review(
    _phase: Phase,
    _req: &AdmissionRequest<DynamicObject>,
    _ctx: &Context<'_>,
) -> Verdict {
    Verdict::allow()
}
