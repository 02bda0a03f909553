//! maxUnavailable rolling updates where the apiserver's `MaxUnavailableStatefulSet` gate is
//! off (KEP-961).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

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

/// Probes whether the apiserver keeps `maxUnavailable`, at start and every hour, until `stop`.
pub async fn run_gate_probe(_ctx: Arc<Ctx>, stop: CancellationToken) {
    stop.cancelled().await;
}
