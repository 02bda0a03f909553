//! One StatefulSet's world as the shared view holds it at reconcile time: the set, its pods
//! and claims by ordinal, and its convergence journal.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};

use super::action::{self, Kind};
use super::executor::Executor;
use crate::admission::set_claims;
use crate::cluster::ClusterView;
use crate::names;

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
    pub fn gather(set: Arc<StatefulSet>, view: &ClusterView) -> Option<Self> {
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
            .map(|&n| (n, view.pod(&namespace, &format!("{name}-{n}"))))
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
                claims.push((t.clone(), n, view.claim(&namespace, &claim_name)));
            }
        }
        let journal = view.journal(&names::journal_name(&namespace, &name));
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

    /// The pod of replica `ordinal`, where it exists.
    pub fn pod(&self, ordinal: u32) -> Option<&Pod> {
        self.pods
            .iter()
            .find(|(n, _)| *n == ordinal)
            .and_then(|(_, p)| p.as_deref())
    }

    /// Whether a plan from this snapshot is stale for the set's objects of `kind`: we wrote
    /// one of them at the version the view still shows (the executor's expectations), so
    /// planning now would count without that write. Its watch event brings the next look.
    pub fn is_stale(&self, exec: &Executor, kind: Kind) -> bool {
        fn key<'a>(
            kind: Kind,
            namespace: &str,
            meta: &'a kube::api::ObjectMeta,
        ) -> (String, Option<&'a str>) {
            (
                action::key(kind, namespace, meta.name.as_deref().unwrap_or_default()),
                meta.resource_version.as_deref(),
            )
        }
        let ns = self.namespace.as_str();
        match kind {
            Kind::StatefulSet => exec.any_stale(std::iter::once(key(kind, ns, &self.set.metadata))),
            Kind::Claim => exec.any_stale(
                self.claims
                    .iter()
                    .filter_map(|(_, _, c)| c.as_ref())
                    .map(|c| key(kind, ns, &c.metadata)),
            ),
            Kind::Pod => exec.any_stale(
                self.pods
                    .iter()
                    .filter_map(|(_, p)| p.as_ref())
                    .map(|p| key(kind, ns, &p.metadata)),
            ),
            Kind::ConfigMap => {
                exec.any_stale(self.journal.iter().map(|j| key(kind, ns, &j.metadata)))
            }
        }
    }
}
