//! The apiserver's maxUnavailable gate as this process last learned it: state the webhook
//! reads (to stop writing the fallback annotation where the gate is on) and the controller's
//! probe writes. The entry point hands the one cell to both.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use super::GateStatus;

/// The gate's last known state, shared by the controller (which probes and acts on it) and
/// the webhook. One process-wide cell: it outlives leadership terms, so a replica that lost
/// the Lease keeps its last answer rather than forgetting it.
#[derive(Debug, Clone, Default)]
pub struct GateCell(Arc<AtomicU8>);

impl GateCell {
    pub fn get(&self) -> GateStatus {
        match self.0.load(Ordering::Acquire) {
            1 => GateStatus::Enabled,
            2 => GateStatus::Disabled,
            _ => GateStatus::Unknown,
        }
    }

    /// Stores `status`; returns the previous state.
    pub fn set(&self, status: GateStatus) -> GateStatus {
        let raw = match status {
            GateStatus::Unknown => 0,
            GateStatus::Enabled => 1,
            GateStatus::Disabled => 2,
        };
        match self.0.swap(raw, Ordering::AcqRel) {
            1 => GateStatus::Enabled,
            2 => GateStatus::Disabled,
            _ => GateStatus::Unknown,
        }
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
}
