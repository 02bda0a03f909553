//! The apiserver's maxUnavailable gate as this process last learned it: state the webhook
//! reads (to stop writing the fallback annotation where the gate is on) and the controller's
//! probe writes. The entry point hands the one cell to both.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use super::GateStatus;

/// The gate's last known state, shared by the controller (which probes and acts on it) and
/// the webhook. One process-wide cell: it outlives leadership terms, so a replica that lost
/// the Lease keeps its last answer rather than forgetting it. While unknown it also holds why
/// (the last probe's error), for `/readyz` and the Lease.
#[derive(Debug, Clone, Default)]
pub struct GateCell(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    status: AtomicU8,
    why_unknown: Mutex<String>,
}

impl GateCell {
    pub fn get(&self) -> GateStatus {
        decode(self.0.status.load(Ordering::Acquire))
    }

    /// Stores `status`; returns the previous state. A known state forgets why it was not.
    pub fn set(&self, status: GateStatus) -> GateStatus {
        let raw = match status {
            GateStatus::Unknown => 0,
            GateStatus::Enabled => 1,
            GateStatus::Disabled => 2,
        };
        if status != GateStatus::Unknown {
            self.why().clear();
        }
        decode(self.0.status.swap(raw, Ordering::AcqRel))
    }

    /// Notes why the state could not be learned (kept only while it is unknown).
    pub fn unknown_because(&self, why: &str) {
        if self.get() == GateStatus::Unknown {
            *self.why() = why.chars().take(300).collect();
        }
    }

    /// Why the state is unknown, when it is and a reason was noted.
    pub fn why_unknown(&self) -> Option<String> {
        let why = self.why().clone();
        (self.get() == GateStatus::Unknown && !why.is_empty()).then_some(why)
    }

    fn why(&self) -> std::sync::MutexGuard<'_, String> {
        self.0.why_unknown.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn decode(raw: u8) -> GateStatus {
    match raw {
        1 => GateStatus::Enabled,
        2 => GateStatus::Disabled,
        _ => GateStatus::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cell_remembers_the_last_state() {
        let cell = GateCell::default();
        assert_eq!(cell.get(), GateStatus::Unknown);
        let shared = cell.clone();
        assert_eq!(shared.set(GateStatus::Disabled), GateStatus::Unknown);
        assert_eq!(cell.get(), GateStatus::Disabled);
        assert_eq!(cell.set(GateStatus::Enabled), GateStatus::Disabled);
        assert_eq!(shared.get(), GateStatus::Enabled);
    }

    #[test]
    fn why_the_state_is_unknown_is_kept_only_while_it_is() {
        let cell = GateCell::default();
        assert_eq!(cell.why_unknown(), None);
        cell.unknown_because("Internal error occurred: failed calling webhook");
        assert_eq!(
            cell.why_unknown().as_deref(),
            Some("Internal error occurred: failed calling webhook")
        );
        cell.set(GateStatus::Disabled);
        assert_eq!(cell.why_unknown(), None);
        // A failure after an answer keeps the answer: nothing to explain.
        cell.unknown_because("timeout");
        assert_eq!(cell.why_unknown(), None);
        assert_eq!(cell.get(), GateStatus::Disabled);
    }
}
