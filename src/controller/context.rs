//! What every feature shares in one leadership term: the client, the settings, the cluster
//! view and the executor that carries out every write. Each feature keeps its own state and
//! metrics; the runner ([`super::run_features`]) hands them to it.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Event;
use kube::{Client, Resource};

use super::ControllerConfig;
use super::action::Report;
use super::executor::Executor;
use crate::capabilities::CapabilityCell;
use crate::cluster::ClusterView;

/// Errors of a reconcile; the object is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Invalid(String),
}

/// Shared state of one leadership term.
pub struct Ctx {
    pub client: Client,
    pub config: ControllerConfig,
    /// Everything the controller reads: StatefulSets, claims, StorageClasses, Namespaces,
    /// Pods of StatefulSets and the journals (shared with the webhook).
    pub view: ClusterView,
    /// Where every write and Event goes: field manager, expectations, report-once, mode.
    pub exec: Executor,
    /// What the cluster does (shared with the webhook and the prober): read it, and record
    /// what a write's answer shows of it.
    pub capabilities: CapabilityCell,
}

impl Ctx {
    pub fn new(
        client: Client,
        config: ControllerConfig,
        view: ClusterView,
        exec: Executor,
        capabilities: CapabilityCell,
    ) -> Self {
        Self {
            client,
            config,
            view,
            exec,
            capabilities,
        }
    }

    /// Publishes an Event about `object`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(&self, object: &K, event: Event) {
        let reference: ObjectReference = object.object_ref(&());
        self.exec
            .report(&Report {
                related: event.secondary,
                ..Report::new(
                    reference,
                    event.type_,
                    &event.reason,
                    &event.action,
                    event.note.unwrap_or_default(),
                )
            })
            .await;
    }
}
