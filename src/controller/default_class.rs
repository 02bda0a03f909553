//! Retroactive default StorageClass for classless, unbound claims (KEP-3333).

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use super::context::Ctx;

#[derive(Debug, Default)]
pub struct Metrics {}

impl Metrics {
    pub fn register(_registry: &mut Registry) -> Self {
        Self::default()
    }
}

/// Runs the claim controller until `stop`.
pub async fn run(_ctx: Arc<Ctx>, stop: CancellationToken) {
    stop.cancelled().await;
}
