//! Read-only view of the cluster state that the rules and the controller consult:
//! StorageClasses, Namespaces, StatefulSets and PersistentVolumeClaims, and, when the
//! controller runs, the Pods of StatefulSets and the controller's journals. Two sources fill
//! it — one watch per kind ([`watch`]) or a `--state` file ([`state_file`]) — and its readers
//! cannot tell them apart. Lookups are in-memory; the admission path never calls the API.
//!
//! Objects are trimmed on arrival to what their readers use ([`lite`]), and the numerous kinds
//! are held as compact JSON ([`store`]). After each change is applied, the view publishes it
//! to its subscribers ([`feed`]), so a reader reacting to a change sees at least that change.

pub(crate) mod feed;
pub(crate) mod freshness;
pub mod lite;
pub(crate) mod packing;
pub mod state_file;
pub(crate) mod store;
pub mod watch;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;

pub use feed::{Change, Kind, Kinds};
pub use freshness::Stale;
use lite::{ClaimLite, JournalLite, PodLite, SetLite, Watched};
use store::{Compact, CompactWriter};

use crate::names;

/// A cheap-to-clone handle on the view.
#[derive(Clone)]
pub struct ClusterView {
    storage_classes: Store<StorageClass>,
    namespaces: Store<Namespace>,
    stateful_sets: Compact<StatefulSet>,
    claims: Compact<PersistentVolumeClaim>,
    /// Present when the controller's kinds are watched.
    controller: Option<ControllerKinds>,
    feed: feed::Feed,
    /// The kinds this view watches, and those that have taken in their first list.
    watched: Kinds,
    synced: tokio::sync::watch::Receiver<Kinds>,
    /// Which kinds' watches are failing, since when and why.
    freshness: freshness::Freshness,
}

/// Pods of StatefulSets, and the journals in the controller's namespace.
#[derive(Clone)]
struct ControllerKinds {
    pods: Compact<Pod>,
    journals: Compact<ConfigMap>,
    journal_namespace: Arc<str>,
}

/// The write side of a [`ClusterView`], owned by whichever source fills it: one writer per
/// kind, each applying its watch's events and publishing them to the view's feed.
pub struct ClusterWriters {
    storage_classes: Writer<StorageClass>,
    namespaces: Writer<Namespace>,
    stateful_sets: CompactWriter<SetLite>,
    claims: CompactWriter<ClaimLite>,
    controller: Option<ControllerWriters>,
    feed: feed::Feed,
    sync: feed::SyncSender,
    freshness: freshness::Freshness,
    view: ClusterView,
}

struct ControllerWriters {
    pods: CompactWriter<PodLite>,
    journals: CompactWriter<JournalLite>,
}

impl ClusterWriters {
    /// Writers of the kinds the webhook reads.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// Writers of the webhook's kinds and the controller's: Pods of StatefulSets and the
    /// journals in `journal_namespace`.
    pub fn with_controller(journal_namespace: &str) -> Self {
        Self::build(Some(journal_namespace))
    }

    fn build(journal_namespace: Option<&str>) -> Self {
        let storage_classes = Writer::default();
        let namespaces = Writer::default();
        let stateful_sets = CompactWriter::default();
        let claims = CompactWriter::default();
        let controller = journal_namespace.map(|_| ControllerWriters {
            pods: CompactWriter::default(),
            journals: CompactWriter::default(),
        });
        let feed = feed::Feed::default();
        let freshness = freshness::Freshness::default();
        let (sync, synced) = feed::SyncSender::new();
        let controller_read = controller
            .as_ref()
            .map(|c| (c.pods.as_reader(), c.journals.as_reader()));
        let mut watched = Kinds::of(&[
            Kind::StorageClass,
            Kind::Namespace,
            Kind::StatefulSet,
            Kind::Claim,
        ]);
        if controller_read.is_some() {
            watched = watched.with(Kind::Pod).with(Kind::Journal);
        }
        let view = ClusterView {
            storage_classes: storage_classes.as_reader(),
            namespaces: namespaces.as_reader(),
            stateful_sets: stateful_sets.as_reader(),
            claims: claims.as_reader(),
            controller: controller_read.zip(journal_namespace).map(
                |((pods, journals), namespace)| ControllerKinds {
                    pods,
                    journals,
                    journal_namespace: namespace.into(),
                },
            ),
            feed: feed.clone(),
            watched,
            synced,
            freshness: freshness.clone(),
        };
        Self {
            storage_classes,
            namespaces,
            stateful_sets,
            claims,
            controller,
            feed,
            sync,
            freshness,
            view,
        }
    }

    pub fn view(&self) -> ClusterView {
        self.view.clone()
    }

    /// Applies one event of a StorageClass watch, then publishes it.
    pub fn apply_storage_class(&mut self, event: watcher::Event<StorageClass>) {
        apply(&mut self.storage_classes, &self.feed, &self.sync, event);
    }

    /// Applies one event of a Namespace watch, then publishes it.
    pub fn apply_namespace(&mut self, event: watcher::Event<Namespace>) {
        apply(&mut self.namespaces, &self.feed, &self.sync, event);
    }

    /// Applies one event of a StatefulSet watch, then publishes it.
    pub fn apply_stateful_set(&mut self, event: watcher::Event<SetLite>) {
        apply(&mut self.stateful_sets, &self.feed, &self.sync, event);
    }

    /// Applies one event of a claim watch, then publishes it.
    pub fn apply_claim(&mut self, event: watcher::Event<ClaimLite>) {
        apply(&mut self.claims, &self.feed, &self.sync, event);
    }

    /// Applies one event of a pod watch, then publishes it (ignored without the
    /// controller's kinds).
    pub fn apply_pod(&mut self, event: watcher::Event<PodLite>) {
        if let Some(c) = &mut self.controller {
            apply(&mut c.pods, &self.feed, &self.sync, event);
        }
    }

    /// Applies one event of a journal watch, then publishes it (ignored without the
    /// controller's kinds).
    pub fn apply_journal(&mut self, event: watcher::Event<JournalLite>) {
        if let Some(c) = &mut self.controller {
            apply(&mut c.journals, &self.feed, &self.sync, event);
        }
    }

    /// Replaces the whole content of the webhook's kinds with `objects` and marks them
    /// synced (the controller's kinds, if any, are left as they are).
    pub fn replace_all(&mut self, objects: ClusterObjects) {
        fn load<K: Watched>(
            sink: &mut impl Sink<K>,
            feed: &feed::Feed,
            sync: &feed::SyncSender,
            items: Vec<K>,
        ) {
            apply(sink, feed, sync, watcher::Event::Init);
            for item in items {
                apply(sink, feed, sync, watcher::Event::InitApply(item));
            }
            apply(sink, feed, sync, watcher::Event::InitDone);
        }
        let (feed, sync) = (&self.feed, &self.sync);
        load(
            &mut self.storage_classes,
            feed,
            sync,
            objects.storage_classes,
        );
        load(&mut self.namespaces, feed, sync, objects.namespaces);
        load(&mut self.stateful_sets, feed, sync, objects.stateful_sets);
        load(&mut self.claims, feed, sync, objects.claims);
    }
}

impl Default for ClusterWriters {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a watch's events go: a store of the view.
trait Sink<K> {
    fn apply_event(&mut self, event: &watcher::Event<K>);
}

impl<K: Watched> Sink<K> for Writer<K> {
    fn apply_event(&mut self, event: &watcher::Event<K>) {
        self.apply_watcher_event(event);
    }
}

impl<L: lite::Lite> Sink<L> for CompactWriter<L> {
    fn apply_event(&mut self, event: &watcher::Event<L>) {
        self.apply(event);
    }
}

/// Trims the event's object, applies the event to its store, then publishes the change: in
/// this order, so that a subscriber never reads a view older than the change it was told.
fn apply<K: Watched>(
    sink: &mut impl Sink<K>,
    feed: &feed::Feed,
    sync: &feed::SyncSender,
    mut event: watcher::Event<K>,
) {
    if let watcher::Event::Apply(object)
    | watcher::Event::InitApply(object)
    | watcher::Event::Delete(object) = &mut event
    {
        object.trim();
    }
    sink.apply_event(&event);
    match &event {
        watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
            feed.publish(|| object.change());
        }
        watcher::Event::InitDone => {
            sync.synced(K::KIND);
            feed.publish(|| Change::Relisted(K::KIND));
        }
        watcher::Event::Init | watcher::Event::InitApply(_) => {}
    }
}

/// A store of the view was dropped before it was filled.
#[derive(Debug, Clone, thiserror::Error)]
#[error("a store of the cluster view was dropped before it was filled")]
pub struct NotSynced;

/// Objects of the webhook's four kinds, as loaded from a file or built in a test, already
/// trimmed to what the view keeps.
#[derive(Debug, Default, Clone)]
pub struct ClusterObjects {
    pub storage_classes: Vec<StorageClass>,
    pub namespaces: Vec<Namespace>,
    pub stateful_sets: Vec<SetLite>,
    pub claims: Vec<ClaimLite>,
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

    /// A StatefulSet (decoded on every call).
    pub fn stateful_set(&self, namespace: &str, name: &str) -> Option<Arc<StatefulSet>> {
        self.stateful_sets.get(namespace, name)
    }

    /// Whether the view holds the StatefulSet (nothing is decoded).
    pub fn has_stateful_set(&self, namespace: &str, name: &str) -> bool {
        self.stateful_sets.contains(namespace, name)
    }

    /// `(namespace, name)` of every StatefulSet.
    pub fn stateful_set_keys(&self) -> Vec<(String, String)> {
        self.stateful_sets.keys()
    }

    /// Names of the StatefulSets of `namespace`.
    pub fn stateful_sets_in(&self, namespace: &str) -> Vec<String> {
        self.stateful_sets.names_in(namespace)
    }

    /// A claim (decoded on every call).
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(namespace, name)
    }

    /// The claims of `namespace` whose name passes `wanted` (only those are decoded).
    pub fn claims_in(
        &self,
        namespace: &str,
        wanted: impl Fn(&str) -> bool,
    ) -> Vec<Arc<PersistentVolumeClaim>> {
        self.claims.in_namespace(namespace, wanted)
    }

    /// `(namespace, name)` of every claim.
    pub fn claim_keys(&self) -> Vec<(String, String)> {
        self.claims.keys()
    }

    /// A pod of a StatefulSet (decoded on every call); `None` also when the view does not
    /// hold pods (see [`Self::holds_controller_kinds`]).
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.controller.as_ref()?.pods.get(namespace, name)
    }

    /// A journal of the controller's namespace by name.
    pub fn journal(&self, name: &str) -> Option<Arc<ConfigMap>> {
        let c = self.controller.as_ref()?;
        c.journals.get(&c.journal_namespace, name)
    }

    /// Every journal (they are few: one per convergence in flight).
    pub fn journals(&self) -> Vec<Arc<ConfigMap>> {
        self.controller
            .as_ref()
            .map_or_else(Vec::new, |c| c.journals.all())
    }

    /// The namespace whose journals the view holds, when it holds the controller's kinds.
    pub fn journal_namespace(&self) -> Option<&str> {
        self.controller.as_ref().map(|c| &*c.journal_namespace)
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

    /// Every change applied from now on, in order; each after it is visible in the view.
    /// Nothing is kept for a receiver that is dropped.
    pub fn subscribe(&self) -> tokio::sync::mpsc::UnboundedReceiver<Change> {
        self.feed.subscribe()
    }

    /// Resolves once every store has seen its initial list; an error when the writers went
    /// away first.
    pub async fn wait_synced(&self) -> Result<(), NotSynced> {
        self.wait_kinds(self.watched).await
    }

    /// Resolves once every kind of `kinds` this view watches has seen its initial list.
    pub async fn wait_kinds(&self, kinds: Kinds) -> Result<(), NotSynced> {
        let want = Kinds::of(
            &kinds
                .list()
                .into_iter()
                .filter(|k| self.watched.contains(*k))
                .collect::<Vec<_>>(),
        );
        let mut synced = self.synced.clone();
        synced
            .wait_for(|have| have.covers(want))
            .await
            .map(|_| ())
            .map_err(|_| NotSynced)
    }

    /// The kinds that have seen their initial list.
    pub fn synced_kinds(&self) -> Kinds {
        *self.synced.borrow()
    }

    /// Resolves when the synced kinds are no longer `since` (another kind has listed), or
    /// with an error when the writers are gone.
    pub async fn sync_progressed(&self, since: Kinds) -> Result<(), NotSynced> {
        let mut synced = self.synced.clone();
        synced
            .wait_for(|now| *now != since)
            .await
            .map(|_| ())
            .map_err(|_| NotSynced)
    }

    /// Whether `kind` has seen its initial list (true for a kind this view does not watch:
    /// nothing to wait for).
    pub fn is_synced(&self, kind: Kind) -> bool {
        !self.watched.contains(kind) || self.synced.borrow().contains(kind)
    }

    /// The kinds whose watches are failing now: how long, and why (empty for a view from a
    /// file, which never goes stale).
    pub fn stale(&self) -> Vec<Stale> {
        self.freshness.stale(tokio::time::Instant::now())
    }

    /// Registers `cluster_view_stale_seconds` (by kind watched), read at each scrape.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register_collector(Box::new(freshness::StaleSeconds {
            watched: self.watched,
            freshness: self.freshness.clone(),
        }));
    }

    /// Each kind this view watches, and whether it has seen its initial list.
    pub fn sync_status(&self) -> Vec<(Kind, bool)> {
        let have = *self.synced.borrow();
        self.watched
            .list()
            .into_iter()
            .map(|k| (k, have.contains(k)))
            .collect()
    }

    /// Bytes of compact JSON held for a kind (for measurements); 0 for the kinds held typed
    /// and for kinds not watched.
    pub fn stored_json_bytes(&self, kind: Kind) -> usize {
        match (kind, &self.controller) {
            (Kind::StatefulSet, _) => self.stateful_sets.json_bytes(),
            (Kind::Claim, _) => self.claims.json_bytes(),
            (Kind::Pod, Some(c)) => c.pods.json_bytes(),
            (Kind::Journal, Some(c)) => c.journals.json_bytes(),
            _ => 0,
        }
    }

    /// Object counts, for logs and readiness.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        let mut counts = vec![
            ("storageclasses", self.storage_classes.len()),
            ("namespaces", self.namespaces.len()),
            ("statefulsets", self.stateful_sets.len()),
            ("persistentvolumeclaims", self.claims.len()),
        ];
        if let Some(c) = &self.controller {
            counts.push(("pods", c.pods.len()));
            counts.push(("journals", c.journals.len()));
        }
        counts
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

    #[tokio::test]
    async fn each_kind_syncs_on_its_own_and_a_view_whose_writers_went_never_does() {
        let mut writers = ClusterWriters::with_controller("sa");
        let view = writers.view();
        assert!(!view.is_synced(Kind::StatefulSet));
        writers.apply_storage_class(watcher::Event::Init);
        writers.apply_storage_class(watcher::Event::InitDone);
        writers.apply_namespace(watcher::Event::Init);
        writers.apply_namespace(watcher::Event::InitDone);
        let webhook = tokio::spawn({
            let view = view.clone();
            async move { view.wait_kinds(Kinds::of(&Kind::WEBHOOK)).await.is_ok() }
        });
        tokio::task::yield_now().await;
        assert!(!webhook.is_finished(), "sets not listed yet");
        writers.apply_stateful_set(watcher::Event::Init);
        writers.apply_stateful_set(watcher::Event::InitDone);
        assert!(webhook.await.expect("joined"));
        assert!(view.is_synced(Kind::StatefulSet) && !view.is_synced(Kind::Claim));
        assert_eq!(
            view.sync_status()
                .into_iter()
                .filter(|(_, synced)| !synced)
                .map(|(k, _)| k.plural())
                .collect::<Vec<_>>(),
            ["persistentvolumeclaims", "pods", "journals"]
        );
        let all = tokio::time::timeout(std::time::Duration::from_millis(50), view.wait_synced());
        assert!(
            all.await.is_err(),
            "claims, pods and journals still listing"
        );
        drop(writers);
        assert!(
            view.wait_synced().await.is_err(),
            "never, once the writers are gone"
        );
        // A kind the view does not watch is not waited for.
        let webhook_only = ClusterWriters::new().view();
        assert!(webhook_only.is_synced(Kind::Pod));
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
                "selector": {}, "template": {}, "updateStrategy": {"type": "OnDelete"},
                "volumeClaimTemplates": [
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "labels": {"a": "b"}},
                     "spec": {"resources": {"requests": {"storage": "1Gi"}}}},
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "wal"}}
                ]
            }, "status": {"replicas": 3}})
        );
        assert!(view.has_stateful_set("team", "db"));
        assert_eq!(view.stateful_sets_in("team"), ["db"]);
    }

    fn claim_at(version: usize) -> lite::ClaimLite {
        serde_json::from_value(
            json!({"metadata": {"name": "data-db-0", "namespace": "team",
            "resourceVersion": version.to_string()}}),
        )
        .expect("a claim")
    }

    #[test]
    fn a_change_is_published_after_the_view_shows_it() {
        let mut writers = ClusterWriters::new();
        let view = writers.view();
        let mut changes = view.subscribe();
        const UPDATES: usize = 2000;
        // A reader on another thread: at every change it is told of, the view already shows
        // at least that change.
        let reader = std::thread::spawn(move || {
            for seen in 1..=UPDATES {
                let change = changes.blocking_recv().expect("a change");
                assert_eq!(
                    change,
                    Change::Claim {
                        namespace: "team".into(),
                        name: "data-db-0".into()
                    }
                );
                let version: usize = view
                    .claim("team", "data-db-0")
                    .and_then(|c| c.metadata.resource_version.clone())
                    .and_then(|v| v.parse().ok())
                    .expect("the claim is in the view when its change arrives");
                assert!(
                    version >= seen,
                    "change {seen} arrived before the view had it: {version}"
                );
            }
        });
        for version in 1..=UPDATES {
            writers.apply_claim(watcher::Event::Apply(claim_at(version)));
        }
        reader
            .join()
            .expect("the reader saw every change after the view had it");
    }

    #[test]
    fn lists_publish_once_when_complete_and_deletes_name_what_went() {
        let mut writers = ClusterWriters::with_controller("sa");
        let view = writers.view();
        let mut changes = view.subscribe();
        writers.apply_claim(watcher::Event::Init);
        writers.apply_claim(watcher::Event::InitApply(claim_at(1)));
        assert!(changes.try_recv().is_err(), "nothing while a list comes in");
        writers.apply_claim(watcher::Event::InitDone);
        assert_eq!(changes.try_recv().ok(), Some(Change::Relisted(Kind::Claim)));
        let pod: lite::PodLite = serde_json::from_value(json!({"metadata": {"name": "db-0", "namespace": "team",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u", "controller": true}]}}))
            .expect("a pod");
        writers.apply_pod(watcher::Event::Apply(pod.clone()));
        assert!(view.pod("team", "db-0").is_some());
        writers.apply_pod(watcher::Event::Delete(pod));
        assert!(view.pod("team", "db-0").is_none());
        let gone = Change::Pod {
            namespace: "team".into(),
            name: "db-0".into(),
            owner: Some("db".into()),
        };
        assert_eq!(changes.try_recv().ok(), Some(gone.clone()));
        assert_eq!(changes.try_recv().ok(), Some(gone));
        // Without a subscriber nothing is kept.
        drop(changes);
        writers.apply_claim(watcher::Event::Apply(claim_at(2)));
        assert_eq!(view.feed.subscriber_count(), 0);
    }

    #[tokio::test]
    async fn the_view_is_synced_when_every_watched_kind_listed() {
        let mut writers = ClusterWriters::with_controller("sa");
        let view = writers.view();
        assert_eq!(view.journal_namespace(), Some("sa"));
        writers.replace_all(ClusterObjects::default());
        let not_yet =
            tokio::time::timeout(std::time::Duration::from_millis(50), view.wait_synced()).await;
        assert!(not_yet.is_err(), "pods and journals have not listed yet");
        writers.apply_pod(watcher::Event::Init);
        writers.apply_pod(watcher::Event::InitDone);
        writers.apply_journal(watcher::Event::Init);
        writers.apply_journal(watcher::Event::InitDone);
        assert!(view.wait_synced().await.is_ok());
        assert_eq!(
            view.counts(),
            [
                ("storageclasses", 0),
                ("namespaces", 0),
                ("statefulsets", 0),
                ("persistentvolumeclaims", 0),
                ("pods", 0),
                ("journals", 0)
            ]
        );
        assert_eq!(ClusterView::empty().journal_namespace(), None);
    }
}
