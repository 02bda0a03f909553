//! The compact store: objects of one kind held as compact JSON, by namespace and name, and
//! decoded into their k8s-openapi type when read. StatefulSets, claims and pods live here.
//!
//! They are the numerous kinds, and a typed object is large before it holds any data (a
//! `StatefulSet` is 2.6 KB inline, its pod template alone 1.8 KB of mostly empty fields; a
//! `Pod` 2.5 KB; a claim's four maps are a B-tree node each), while the compact JSON of a
//! lite object is a few hundred bytes. Objects are read by name (a few per reconcile or
//! admission) or by namespace (a StatefulSet CREATE looks for claims it would adopt), never
//! all at once on the admission path, so each is decoded when read.
//!
//! A relist updates entries in place and marks them; at its end the entries it did not list
//! are swept. So a relist after a 410 never holds two copies of the kind, and until it
//! completes the view shows what it held before, updated as the list comes in.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube::runtime::watcher;
use serde::de::DeserializeOwned;

use super::lite::Lite;

type Objects = HashMap<Box<str>, HashMap<Box<str>, Entry>>;

struct Entry {
    /// The object's JSON, packed ([`super::packing`]).
    json: Box<[u8]>,
    /// The list (or watch) generation that last wrote it.
    mark: u32,
}

#[derive(Default)]
struct Shared {
    objects: RwLock<Objects>,
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, Objects> {
        self.objects.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Objects> {
        self.objects.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The read side, handing out `T`; cheap to clone.
pub(crate) struct Compact<T> {
    shared: Arc<Shared>,
    full: PhantomData<fn() -> T>,
}

impl<T> Clone for Compact<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            full: PhantomData,
        }
    }
}

/// The write side of one kind, owned by whichever source fills the view.
pub(crate) struct CompactWriter<L> {
    shared: Arc<Shared>,
    /// The generation of the list in progress, or of the last one.
    mark: u32,
    lite: PhantomData<fn(L)>,
}

impl<L: Lite> Default for CompactWriter<L> {
    fn default() -> Self {
        Self {
            shared: Arc::default(),
            mark: 0,
            lite: PhantomData,
        }
    }
}

impl<L: Lite> CompactWriter<L> {
    pub(crate) fn as_reader(&self) -> Compact<L::Full> {
        Compact {
            shared: self.shared.clone(),
            full: PhantomData,
        }
    }

    /// Applies one watcher event, with a kube reflector's semantics but without a second
    /// map during a relist (see the module).
    pub(crate) fn apply(&mut self, event: &watcher::Event<L>) {
        match event {
            watcher::Event::Init => self.mark = self.mark.wrapping_add(1),
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                self.insert(object);
            }
            watcher::Event::InitDone => {
                let mark = self.mark;
                let mut objects = self.shared.write();
                objects.retain(|_, in_namespace| {
                    in_namespace.retain(|_, entry| entry.mark == mark);
                    // Tables grow by doubling while a list comes in; what it left is kept.
                    in_namespace.shrink_to_fit();
                    !in_namespace.is_empty()
                });
                objects.shrink_to_fit();
                drop(objects);
            }
            watcher::Event::Delete(object) => {
                let meta = object.meta();
                let namespace = meta.namespace.as_deref().unwrap_or_default();
                let Some(name) = meta.name.as_deref() else {
                    return;
                };
                let mut objects = self.shared.write();
                if let Some(in_namespace) = objects.get_mut(namespace) {
                    in_namespace.remove(name);
                    if in_namespace.is_empty() {
                        objects.remove(namespace);
                    }
                }
            }
        }
    }

    fn insert(&self, object: &L) {
        let meta = object.meta();
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let Some(name) = meta.name.as_deref() else {
            return;
        };
        // Name and namespace are the entry's keys: the JSON goes without them, and reads put
        // them back. Serialising a lite object cannot fail; one that somehow did is not stored.
        let mut keyless = object.clone();
        keyless.meta_mut().name = None;
        keyless.meta_mut().namespace = None;
        let Ok(json) = serde_json::to_vec(&keyless) else {
            return;
        };
        let entry = Entry {
            json: super::packing::pack(&json),
            mark: self.mark,
        };
        let mut objects = self.shared.write();
        // Keys already held are reused, not allocated again.
        let in_namespace = match objects.get_mut(namespace) {
            Some(in_namespace) => in_namespace,
            None => objects.entry(namespace.into()).or_default(),
        };
        match in_namespace.get_mut(name) {
            Some(held) => *held = entry,
            None => {
                in_namespace.insert(name.into(), entry);
            }
        }
    }
}

impl<T: DeserializeOwned + kube::Resource> Compact<T> {
    /// The object stored as `json` under `namespace/name`.
    fn decode(namespace: &str, name: &str, json: &[u8]) -> Option<Arc<T>> {
        // Only JSON this store wrote is decoded; a failure would be a bug, not bad input.
        let mut object: T = serde_json::from_slice(&super::packing::unpack(json)).ok()?;
        let meta = object.meta_mut();
        meta.name = Some(name.to_owned());
        meta.namespace = (!namespace.is_empty()).then(|| namespace.to_owned());
        Some(Arc::new(object))
    }

    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<Arc<T>> {
        let objects = self.shared.read();
        Self::decode(namespace, name, &objects.get(namespace)?.get(name)?.json)
    }

    /// Whether `namespace/name` is held (nothing is decoded).
    pub(crate) fn contains(&self, namespace: &str, name: &str) -> bool {
        self.shared
            .read()
            .get(namespace)
            .is_some_and(|n| n.contains_key(name))
    }

    /// The objects of `namespace` whose name passes `wanted`; only those are decoded.
    pub(crate) fn in_namespace(
        &self,
        namespace: &str,
        wanted: impl Fn(&str) -> bool,
    ) -> Vec<Arc<T>> {
        let objects = self.shared.read();
        objects
            .get(namespace)
            .map_or_else(Vec::new, |in_namespace| {
                in_namespace
                    .iter()
                    .filter(|(name, _)| wanted(name))
                    .filter_map(|(name, entry)| Self::decode(namespace, name, &entry.json))
                    .collect()
            })
    }

    /// The names held in `namespace`.
    pub(crate) fn names_in(&self, namespace: &str) -> Vec<String> {
        let objects = self.shared.read();
        objects
            .get(namespace)
            .map_or_else(Vec::new, |in_namespace| {
                in_namespace.keys().map(|n| n.to_string()).collect()
            })
    }

    /// Every `(namespace, name)` held.
    pub(crate) fn keys(&self) -> Vec<(String, String)> {
        let objects = self.shared.read();
        objects
            .iter()
            .flat_map(|(namespace, in_namespace)| {
                in_namespace
                    .keys()
                    .map(|name| (namespace.to_string(), name.to_string()))
            })
            .collect()
    }

    /// Every object, decoded (for kinds with few objects).
    pub(crate) fn all(&self) -> Vec<Arc<T>> {
        let objects = self.shared.read();
        objects
            .iter()
            .flat_map(|(namespace, in_namespace)| {
                in_namespace
                    .iter()
                    .filter_map(move |(name, entry)| Self::decode(namespace, name, &entry.json))
            })
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.shared.read().values().map(HashMap::len).sum()
    }

    /// The bytes of stored JSON, for measurements.
    pub(crate) fn json_bytes(&self) -> usize {
        let objects = self.shared.read();
        objects
            .values()
            .flat_map(HashMap::values)
            .map(|entry| entry.json.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::lite::ClaimLite;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;

    fn claim(namespace: &str, name: &str, storage: &str) -> ClaimLite {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1",
                "labels": {"app": "db"}, "annotations": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
            "status": {"phase": "Bound", "capacity": {"storage": storage}}
        }))
        .expect("a claim")
    }

    fn storage(c: &PersistentVolumeClaim) -> Option<String> {
        c.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone())
    }

    #[test]
    fn objects_read_back_as_their_full_type() {
        let mut writer = CompactWriter::<ClaimLite>::default();
        let store = writer.as_reader();
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(claim(
            "team",
            "data-db-0",
            "1Gi",
        )));
        writer.apply(&watcher::Event::InitDone);
        let got = store.get("team", "data-db-0").expect("stored");
        let want: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data-db-0", "namespace": "team", "resourceVersion": "1",
                "labels": {"app": "db"}, "annotations": {"a": "b"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}
        }))
        .expect("a claim");
        assert_eq!(*got, want);
        assert!(store.get("other", "data-db-0").is_none());
        assert!(store.contains("team", "data-db-0"));
        assert!(!store.contains("team", "data-db-1"));
        assert_eq!(store.len(), 1);
        assert_eq!(store.keys(), [("team".to_owned(), "data-db-0".to_owned())]);
    }

    #[test]
    fn applies_and_deletes_change_what_is_held() {
        let mut writer = CompactWriter::<ClaimLite>::default();
        let store = writer.as_reader();
        writer.apply(&watcher::Event::Init);
        for name in ["data-db-0", "data-db-1", "wal-db-0"] {
            writer.apply(&watcher::Event::InitApply(claim("team", name, "1Gi")));
        }
        writer.apply(&watcher::Event::InitDone);
        writer.apply(&watcher::Event::Apply(claim("team", "data-db-0", "2Gi")));
        writer.apply(&watcher::Event::Delete(claim("team", "wal-db-0", "1Gi")));
        writer.apply(&watcher::Event::Apply(claim("x", "data-web-0", "1Gi")));
        assert_eq!(
            store
                .get("team", "data-db-0")
                .as_deref()
                .and_then(storage)
                .as_deref(),
            Some("2Gi")
        );
        assert!(store.get("team", "wal-db-0").is_none());
        let mut data: Vec<_> = store
            .in_namespace("team", |n| n.starts_with("data-"))
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        data.sort();
        assert_eq!(data, ["data-db-0", "data-db-1"]);
        let mut names = store.names_in("team");
        names.sort();
        assert_eq!(names, ["data-db-0", "data-db-1"]);
        assert_eq!(store.len(), 3);
        writer.apply(&watcher::Event::Delete(claim("x", "data-web-0", "1Gi")));
        assert!(store.names_in("x").is_empty());
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn a_relist_updates_in_place_and_sweeps_what_it_did_not_list() {
        let mut writer = CompactWriter::<ClaimLite>::default();
        let store = writer.as_reader();
        writer.apply(&watcher::Event::Init);
        for name in ["a", "b", "c"] {
            writer.apply(&watcher::Event::InitApply(claim("team", name, "1Gi")));
        }
        writer.apply(&watcher::Event::InitDone);
        let held = store.json_bytes();

        // A relist after a 410: "b" changed, "c" is gone. While it runs the store holds one
        // entry per object (no second map), the old ones visible until the list completes.
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(claim("team", "a", "1Gi")));
        writer.apply(&watcher::Event::InitApply(claim("team", "b", "3Gi")));
        assert_eq!(store.len(), 3, "nothing doubled, nothing gone yet");
        assert_eq!(store.json_bytes(), held, "same size: updated in place");
        assert_eq!(
            store
                .get("team", "b")
                .as_deref()
                .and_then(storage)
                .as_deref(),
            Some("3Gi")
        );
        assert!(store.get("team", "c").is_some(), "swept only at the end");
        writer.apply(&watcher::Event::InitDone);
        assert_eq!(store.len(), 2);
        assert!(store.get("team", "c").is_none());

        // An interrupted relist: a new one starts over; what neither listed is swept.
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(claim("team", "a", "1Gi")));
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(claim("team", "b", "3Gi")));
        writer.apply(&watcher::Event::InitDone);
        let mut names = store.names_in("team");
        names.sort();
        assert_eq!(names, ["b"]);
    }
}
