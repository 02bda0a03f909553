//! What every feature shares: the client, the cluster view, event recorder, metrics, and a
//! snapshot of one StatefulSet's world gathered from the view.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, PersistentVolumeClaim, Pod};
use kube::runtime::events::Event;
use kube::{Client, Resource};

use super::ControllerConfig;
use super::action::Report;
use super::executor::Executor;
use super::metrics::ControllerMetrics;
use crate::admission::set_claims;
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
    pub metrics: Arc<ControllerMetrics>,
    /// Where every write and Event goes: field manager, expectations, report-once, mode.
    pub exec: Executor,
    /// Condition transition times of sets without a progress record.
    pub condition_memory: super::conditions::Memory,
}

impl Ctx {
    pub fn new(
        client: Client,
        config: ControllerConfig,
        view: ClusterView,
        metrics: Arc<ControllerMetrics>,
    ) -> Self {
        let exec = Executor::new(
            client.clone(),
            config.mode,
            &config.identity,
            metrics.actions.clone(),
        );
        Self {
            client,
            config,
            view,
            metrics,
            exec,
            condition_memory: super::conditions::Memory::default(),
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

/// One StatefulSet and what belongs to it, read from the view at reconcile time.
#[derive(Debug, Clone)]
pub struct SetSnapshot {
    pub set: Arc<StatefulSet>,
    pub namespace: String,
    pub name: String,
    /// Ordinals of the set's replicas (`spec.ordinals.start` onward, `spec.replicas` many).
    pub ordinals: Vec<u32>,
    /// Pods by ordinal, where they exist.
    pub pods: Vec<(u32, Option<Arc<Pod>>)>,
    /// Claims of each live template by ordinal, where they exist: `(template, ordinal, claim)`.
    pub claims: Vec<(String, u32, Option<Arc<PersistentVolumeClaim>>)>,
    /// The convergence journal of this set, if one is open.
    pub journal: Option<Arc<ConfigMap>>,
}

impl SetSnapshot {
    pub fn gather(set: Arc<StatefulSet>, ctx: &Ctx) -> Option<Self> {
        let namespace = set.metadata.namespace.clone()?;
        let name = set.metadata.name.clone()?;
        let replicas = u32::try_from(set.spec.replicas.unwrap_or(1)).unwrap_or(0);
        let start = set
            .spec
            .ordinals
            .as_ref()
            .and_then(|o| o.start)
            .and_then(|s| u32::try_from(s).ok())
            .unwrap_or(0);
        let ordinals: Vec<u32> = (start..start.saturating_add(replicas)).collect();
        let pods = ordinals
            .iter()
            .map(|&n| (n, ctx.view.pod(&namespace, &format!("{name}-{n}"))))
            .collect();
        let templates: Vec<String> = set
            .spec
            .volume_claim_templates
            .iter()
            .flatten()
            .filter_map(|t| t.metadata.name.clone())
            .collect();
        let mut claims = Vec::with_capacity(templates.len() * ordinals.len());
        for t in &templates {
            for &n in &ordinals {
                let claim_name = set_claims::claim_name(t, &name, n);
                claims.push((t.clone(), n, ctx.view.claim(&namespace, &claim_name)));
            }
        }
        let journal = ctx.view.journal(&journal_name(&namespace, &name));
        Some(Self {
            set,
            namespace,
            name,
            ordinals,
            pods,
            claims,
            journal,
        })
    }
}

/// Name of the journal ConfigMap of set `namespace/name`. A namespace name has no dots, so
/// the first dot after the prefix ends it and no two sets share a journal.
pub fn journal_name(namespace: &str, name: &str) -> String {
    format!("sa-journal.{namespace}.{name}")
}
