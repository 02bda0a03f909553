//! Counting writes to StatefulSets under churn from the fake API server's write log: the
//! built-in controller's status writes (the simulation's, [`super::statefulset_sim`], which
//! carry no field manager) against ours (field manager `stateful-admission`), never from
//! timing.

use std::time::Duration;

use super::fake_apiserver::{FakeApiServer, WriteRecord, resources};

const OURS: &str = "stateful-admission";

/// Writes to some StatefulSets within a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetWrites {
    /// The built-in controller's status writes that were stored.
    pub builtin: usize,
    /// Our writes of `statefulsets/status` (the conditions), every one sent, refused or not.
    pub ours_status: usize,
    /// Our writes of the set itself (the progress record, the claim status), every one sent.
    pub ours_set: usize,
}

impl SetWrites {
    /// All our writes to the sets.
    pub fn ours(&self) -> usize {
        self.ours_status + self.ours_set
    }

    /// Ours per built-in status write (0 when there was none).
    pub fn ratio(&self) -> f64 {
        if self.builtin == 0 {
            0.0
        } else {
            self.ours() as f64 / self.builtin as f64
        }
    }
}

impl std::fmt::Display for SetWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} built-in status writes, {} of ours ({} status, {} to the set): {:.2} per built-in write",
            self.builtin,
            self.ours(),
            self.ours_status,
            self.ours_set,
            self.ratio()
        )
    }
}

fn is_set(w: &WriteRecord) -> bool {
    w.resource
        .is_some_and(|r| std::ptr::eq(r, &resources::STATEFULSETS))
        && !w.dry_run
}

/// Writes to the sets `sets` (namespace, name) from `from` (the fake's uptime) on.
pub fn set_writes(api: &FakeApiServer, from: Duration, sets: &[(String, String)]) -> SetWrites {
    let mut out = SetWrites::default();
    for w in api.write_records() {
        if w.at < from || !is_set(&w) {
            continue;
        }
        let named = sets.iter().any(|(ns, name)| {
            w.namespace.as_deref() == Some(ns.as_str()) && w.name.as_deref() == Some(name.as_str())
        });
        if !named {
            continue;
        }
        let status = w.subresource.as_deref() == Some("status");
        let ours = w.field_manager.as_deref() == Some(OURS);
        match (ours, status) {
            (false, true) if w.succeeded() => out.builtin += 1,
            (true, true) => out.ours_status += 1,
            (true, false) => out.ours_set += 1,
            _ => {}
        }
    }
    out
}

/// The times (the fake's uptime) of the stored built-in status writes to `sets` from `from` on.
pub fn builtin_write_times(
    api: &FakeApiServer,
    from: Duration,
    sets: &[(String, String)],
) -> Vec<Duration> {
    api.write_records()
        .iter()
        .filter(|w| w.at >= from && is_set(w) && w.succeeded())
        .filter(|w| w.subresource.as_deref() == Some("status"))
        .filter(|w| w.field_manager.as_deref() != Some(OURS))
        .filter(|w| {
            sets.iter().any(|(ns, name)| {
                w.namespace.as_deref() == Some(ns.as_str())
                    && w.name.as_deref() == Some(name.as_str())
            })
        })
        .map(|w| w.at)
        .collect()
}
