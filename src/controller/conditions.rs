//! `Available` and `Progressing` conditions of StatefulSets (KEP-2804).

use std::time::Duration;

use prometheus_client::registry::Registry;

use super::context::{Ctx, Error, SetSnapshot};

#[derive(Debug, Default)]
pub struct Metrics {}

impl Metrics {
    pub fn register(_registry: &mut Registry) -> Self {
        Self::default()
    }
}

/// One reconcile step for `snapshot`; returns when to look again.
pub async fn sync(_snapshot: &SetSnapshot, _ctx: &Ctx) -> Result<Option<Duration>, Error> {
    Ok(None)
}
