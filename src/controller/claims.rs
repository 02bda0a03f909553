//! Claim rollout and convergence (KEP-4650): patch existing claims to the desired templates
//! and re-create the set with them. Planned in the claim-rollout work.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::ObjectRef;
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

/// The set a journal belongs to.
pub fn journal_owner(_journal: &ConfigMap) -> Option<ObjectRef<StatefulSet>> {
    None
}
