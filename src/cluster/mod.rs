//! Read-only view of the cluster state the rules consult: StorageClasses, Namespaces,
//! StatefulSets and PersistentVolumeClaims. Two sources fill it — kube reflectors
//! ([`watch`]) or a `--state` file ([`state_file`]) — and the rules cannot tell them apart.
//! Lookups are in-memory; the admission path never calls the API.
//!
//! Both sources pass every object through [`Trim`] on the way in: managedFields are dropped
//! from all kinds, and a StatefulSet keeps only what its readers use; the pod template alone
//! is most of a set.

pub mod claims;
pub mod state_file;
pub mod watch;

use std::sync::Arc;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;

use crate::names;

/// A cheap-to-clone handle on the four object caches.
#[derive(Clone)]
pub struct ClusterView {
    storage_classes: Store<StorageClass>,
    namespaces: Store<Namespace>,
    stateful_sets: Store<StatefulSet>,
    claims: claims::ClaimCache,
    synced: Synced,
}

/// Every cache's first complete list, awaited by one future that all waiters share.
/// kube-runtime's `Store::wait_until_ready` keeps the waker of the last task that polled it
/// only, so of two tasks waiting on one store (readiness and the controller), one was never
/// woken and the webhook never became ready.
type Synced = Shared<BoxFuture<'static, Result<(), NotSynced>>>;

/// The write side of a [`ClusterView`], owned by whichever source fills it.
pub struct ClusterWriters {
    pub storage_classes: Writer<StorageClass>,
    pub namespaces: Writer<Namespace>,
    pub stateful_sets: Writer<StatefulSet>,
    pub claims: claims::ClaimWriter,
    synced: Synced,
}

impl ClusterWriters {
    pub fn new() -> Self {
        let storage_classes = Writer::default();
        let namespaces = Writer::default();
        let stateful_sets = Writer::default();
        let claims = claims::ClaimWriter::default();
        let (classes_read, namespaces_read, sets_read, claims_read) = (
            storage_classes.as_reader(),
            namespaces.as_reader(),
            stateful_sets.as_reader(),
            claims.as_reader(),
        );
        let synced = async move {
            let dropped = |_| NotSynced;
            classes_read.wait_until_ready().await.map_err(dropped)?;
            namespaces_read.wait_until_ready().await.map_err(dropped)?;
            sets_read.wait_until_ready().await.map_err(dropped)?;
            claims_read.wait_until_ready().await.map_err(|_| NotSynced)
        }
        .boxed()
        .shared();
        Self {
            storage_classes,
            namespaces,
            stateful_sets,
            claims,
            synced,
        }
    }

    pub fn view(&self) -> ClusterView {
        ClusterView {
            storage_classes: self.storage_classes.as_reader(),
            namespaces: self.namespaces.as_reader(),
            stateful_sets: self.stateful_sets.as_reader(),
            claims: self.claims.as_reader(),
            synced: self.synced.clone(),
        }
    }

    /// Replaces the whole content with `objects` and marks every cache synced.
    pub fn replace_all(&mut self, objects: ClusterObjects) {
        fn load<K: Trim>(mut apply: impl FnMut(&watcher::Event<K>), items: Vec<K>) {
            apply(&watcher::Event::Init);
            for mut item in items {
                item.trim();
                apply(&watcher::Event::InitApply(item));
            }
            apply(&watcher::Event::InitDone);
        }
        load(
            |e| self.storage_classes.apply_watcher_event(e),
            objects.storage_classes,
        );
        load(
            |e| self.namespaces.apply_watcher_event(e),
            objects.namespaces,
        );
        load(
            |e| self.stateful_sets.apply_watcher_event(e),
            objects.stateful_sets,
        );
        load(|e| self.claims.apply_watcher_event(e), objects.claims);
    }
}

impl Default for ClusterWriters {
    fn default() -> Self {
        Self::new()
    }
}

/// A cache of the view was dropped before it was filled.
#[derive(Debug, Clone, thiserror::Error)]
#[error("a cache of the cluster view was dropped before it was filled")]
pub struct NotSynced;

/// What the view keeps of an object of its kind: `trim` drops what no reader of the view
/// uses, before the object is cached.
pub trait Trim {
    fn trim(&mut self);
}

impl Trim for StorageClass {
    fn trim(&mut self) {
        self.metadata.managed_fields = None;
    }
}

impl Trim for Namespace {
    fn trim(&mut self) {
        self.metadata.managed_fields = None;
    }
}

impl Trim for PersistentVolumeClaim {
    /// Claims are read whole (the claim controller compares labels, annotations, spec and
    /// status with the templates), so only managedFields go.
    fn trim(&mut self) {
        self.metadata.managed_fields = None;
    }
}

/// The view's readers of a StatefulSet are the claim rules (which set owns a claim name, the
/// live and the desired templates: its claim templates and its `stateful-admission.io/`
/// annotations) and the controller's existence checks (the controller keeps whole sets in its
/// own cache). So a cached set keeps its identity (name, namespace, uid, resourceVersion,
/// generation), the project's annotations, replicas, ordinals and its claim templates (without
/// their status). Everything else (pod template, selector, strategy, status, other annotations
/// and labels) is dropped.
impl Trim for StatefulSet {
    fn trim(&mut self) {
        let meta = &mut self.metadata;
        meta.managed_fields = None;
        meta.labels = None;
        meta.owner_references = None;
        meta.finalizers = None;
        meta.annotations = meta
            .annotations
            .take()
            .map(|a| {
                a.into_iter()
                    .filter(|(k, _)| k.starts_with(names::PREFIX))
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
            .filter(|a| !a.is_empty());
        let spec = std::mem::take(&mut self.spec);
        self.spec = k8s_openapi::api::apps::v1::StatefulSetSpec {
            replicas: spec.replicas,
            ordinals: spec.ordinals,
            service_name: spec.service_name,
            volume_claim_templates: spec.volume_claim_templates.map(|mut templates| {
                for t in &mut templates {
                    t.status = None;
                }
                templates
            }),
            ..Default::default()
        };
        self.status = None;
    }
}

/// Objects of the four kinds, as loaded from a file or built in a test.
#[derive(Debug, Default, Clone)]
pub struct ClusterObjects {
    pub storage_classes: Vec<StorageClass>,
    pub namespaces: Vec<Namespace>,
    pub stateful_sets: Vec<StatefulSet>,
    pub claims: Vec<PersistentVolumeClaim>,
}

impl ClusterView {
    /// A synced view holding exactly `objects` (for `--state` and tests).
    pub fn from_objects(objects: ClusterObjects) -> Self {
        let mut writers = ClusterWriters::new();
        writers.replace_all(objects);
        writers.view()
    }

    /// A synced view built from plain JSON objects of the four kinds (for rule tests).
    pub fn from_json(objects: &[serde_json::Value]) -> Result<Self, state_file::StateError> {
        let loaded = state_file::objects_from_values(
            "<inline>",
            objects.iter().cloned().map(|v| (0, v)).collect(),
        )?;
        Ok(Self::from_objects(loaded))
    }

    /// A synced, empty view.
    pub fn empty() -> Self {
        Self::from_objects(ClusterObjects::default())
    }

    pub fn storage_class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.storage_classes.get(&ObjectRef::new(name))
    }

    pub fn storage_classes(&self) -> Vec<Arc<StorageClass>> {
        self.storage_classes.state()
    }

    pub fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespaces.get(&ObjectRef::new(name))
    }

    pub fn stateful_set(&self, namespace: &str, name: &str) -> Option<Arc<StatefulSet>> {
        self.stateful_sets
            .get(&ObjectRef::new(name).within(namespace))
    }

    pub fn stateful_sets(&self) -> Vec<Arc<StatefulSet>> {
        self.stateful_sets.state()
    }

    /// A cached claim (decoded from the claim cache on every call).
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(namespace, name)
    }

    /// The cached claims of `namespace` whose name passes `wanted` (only those are decoded).
    pub fn claims_in(
        &self,
        namespace: &str,
        wanted: impl Fn(&str) -> bool,
    ) -> Vec<Arc<PersistentVolumeClaim>> {
        self.claims.in_namespace(namespace, wanted)
    }

    /// Whether the namespace opted out with the label `stateful-admission.io/ignore: "true"`.
    pub fn namespace_ignored(&self, namespace: &str) -> bool {
        self.namespace(namespace).is_some_and(|ns| {
            ns.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(names::IGNORE_LABEL))
                .is_some_and(|v| v == "true")
        })
    }

    /// Resolves once every cache has seen its initial list; an error when a cache's writer
    /// went away first.
    pub async fn wait_synced(&self) -> Result<(), NotSynced> {
        self.synced.clone().await
    }

    /// Object counts, for logs and readiness.
    pub fn counts(&self) -> [(&'static str, usize); 4] {
        [
            ("storageclasses", self.storage_classes.len()),
            ("namespaces", self.namespaces.len()),
            ("statefulsets", self.stateful_sets.len()),
            ("persistentvolumeclaims", self.claims.len()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn every_task_waiting_for_the_view_is_woken_when_it_syncs() {
        let mut writers = ClusterWriters::new();
        let view = writers.view();
        // Two waiters, both parked before the caches fill, as readiness and the controller are.
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let view = writers.view();
                tokio::spawn(async move { view.wait_synced().await.is_ok() })
            })
            .collect();
        let third = view.clone();
        let third = tokio::spawn(async move { third.wait_synced().await.is_ok() });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(waiters.iter().all(|w| !w.is_finished()) && !third.is_finished());
        writers.replace_all(ClusterObjects::default());
        for waiter in waiters.into_iter().chain([third]) {
            let synced = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await;
            assert!(matches!(synced, Ok(Ok(true))), "a waiter was never woken");
        }
    }

    #[test]
    fn lookups_find_objects_by_namespace_and_name() {
        let view = ClusterView::from_json(&[
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "gold"}, "provisioner": "x"}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "off", "labels": {"stateful-admission.io/ignore": "true"}}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "on", "labels": {"stateful-admission.io/ignore": "false"}}}),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data-web-0", "namespace": "on"}}),
        ])
        .expect("valid objects");
        assert!(view.storage_class("gold").is_some());
        assert!(view.storage_class("silver").is_none());
        assert!(view.claim("on", "data-web-0").is_some());
        assert!(view.claim("off", "data-web-0").is_none());
        assert!(view.namespace_ignored("off"));
        assert!(!view.namespace_ignored("on"));
        assert!(!view.namespace_ignored("absent"));
    }

    #[test]
    fn a_cached_set_keeps_what_its_readers_use() {
        let set = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {
            "name": "db", "namespace": "team", "uid": "u-1", "resourceVersion": "7", "generation": 3,
            "labels": {"app": "db"},
            "annotations": {
                "stateful-admission.io/desired-volume-claim-templates": "[]",
                "stateful-admission.io/max-unavailable": "2",
                "kubectl.kubernetes.io/last-applied-configuration": "{}"
            },
            "managedFields": [{"manager": "m", "operation": "Update"}]
        }, "spec": {
            "replicas": 3, "ordinals": {"start": 2}, "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "x"}]}},
            "volumeClaimTemplates": [
                {"metadata": {"name": "data", "labels": {"a": "b"}}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}},
                {"metadata": {"name": "wal"}, "status": {"phase": "Pending"}}
            ],
            "updateStrategy": {"type": "OnDelete"}
        }, "status": {"replicas": 3}});
        let view = ClusterView::from_json(&[set]).expect("valid set");
        let cached = view.stateful_set("team", "db").expect("cached");
        let got = serde_json::to_value(&*cached).expect("json");
        assert_eq!(
            got,
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {
                "name": "db", "namespace": "team", "uid": "u-1", "resourceVersion": "7", "generation": 3,
                "annotations": {
                    "stateful-admission.io/desired-volume-claim-templates": "[]",
                    "stateful-admission.io/max-unavailable": "2"
                }
            }, "spec": {
                "replicas": 3, "ordinals": {"start": 2}, "serviceName": "db",
                "selector": {}, "template": {},
                "volumeClaimTemplates": [
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "labels": {"a": "b"}},
                     "spec": {"resources": {"requests": {"storage": "1Gi"}}}},
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "wal"}}
                ]
            }})
        );
    }
}
