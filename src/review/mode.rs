//! The admission mode: what a denial of the rules does to the request. In `warn` mode it is
//! let through, carried as the first warning.

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

use super::respond::denial_status;
use crate::admission::{AdmissionMode, Denial, Verdict, WOULD_DENY_PREFIX, warning};

/// A denial that [`AdmissionMode::Warn`] turned into a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WouldDeny {
    /// The status reason the denial would carry: `Invalid` or `Forbidden`.
    pub reason: &'static str,
    /// The denial's message, as the client would have seen it.
    pub message: String,
}

/// Applies `mode` to the verdict of one phase: the one place where a denial becomes a warning.
/// In `Enforce` mode the verdict is returned as it is.
pub fn apply_mode(
    mode: AdmissionMode,
    req: &AdmissionRequest<DynamicObject>,
    verdict: Verdict,
) -> (Verdict, Option<WouldDeny>) {
    let Verdict {
        denial,
        patch,
        warnings,
    } = verdict;
    let denial = match (mode, denial) {
        (AdmissionMode::Warn, Some(denial)) => denial,
        (_, denial) => {
            let verdict = Verdict {
                denial,
                patch,
                warnings,
            };
            return (verdict, None);
        }
    };
    let reason = match denial {
        Denial::Invalid(_) => "Invalid",
        Denial::Forbidden(_) => "Forbidden",
    };
    let message = denial_status(req, denial).message;
    // First, so that the apiserver's cut of long warning lists never drops it.
    let mut allowed = Verdict::allow();
    allowed.warn_all(warning::Warning::new(WOULD_DENY_PREFIX).fact(message.clone()));
    allowed.warnings.extend(warnings);
    (allowed, Some(WouldDeny { reason, message }))
}
