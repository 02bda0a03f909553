//! The object store: every object as raw JSON (so unknown fields survive), one global
//! resourceVersion counter, and a bounded history of changes that watches resume from.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, watch};

use super::events;
use super::resources::{self, ResourceType};

/// What happened to an object, as a watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub fn as_watch_type(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One committed change. `previous` lets a selector-filtered watch turn a change that
/// moves an object in or out of its selection into ADDED or DELETED, as the apiserver does.
#[derive(Debug, Clone)]
pub struct StoreChange {
    pub kind: ChangeKind,
    pub resource: &'static ResourceType,
    pub resource_version: u64,
    pub object: Value,
    pub previous: Option<Value>,
}

/// `(plural.group, namespace or "", name)`: sorts like the apiserver's etcd keys.
type ObjectKey = (String, String, String);

fn key(resource: &ResourceType, namespace: &str, name: &str) -> ObjectKey {
    (
        resource.qualified_resource(),
        namespace.to_owned(),
        name.to_owned(),
    )
}

pub struct Store {
    objects: BTreeMap<ObjectKey, Value>,
    revision: u64,
    history: VecDeque<Arc<StoreChange>>,
    /// Every change above this revision is still in `history`.
    history_floor: u64,
    history_limit: usize,
    uid_seed: u64,
    changes: broadcast::Sender<Arc<StoreChange>>,
    revision_tx: watch::Sender<u64>,
}

/// Capacity of the live change channel; a watch that falls this far behind is closed and
/// its client resumes from history.
const CHANGE_CHANNEL_CAPACITY: usize = 16_384;

impl Store {
    pub fn new(history_limit: usize, uid_seed: u64) -> Self {
        let (changes, _) = broadcast::channel(CHANGE_CHANNEL_CAPACITY);
        let (revision_tx, _) = watch::channel(0);
        Self {
            objects: BTreeMap::new(),
            revision: 0,
            history: VecDeque::new(),
            history_floor: 0,
            history_limit: history_limit.max(1),
            uid_seed,
            changes,
            revision_tx,
        }
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn history_floor(&self) -> u64 {
        self.history_floor
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoreChange>> {
        self.changes.subscribe()
    }

    pub fn watch_revision(&self) -> watch::Receiver<u64> {
        self.revision_tx.subscribe()
    }

    /// Changes after `revision` still retained, oldest first.
    pub fn history_since(&self, revision: u64) -> impl Iterator<Item = &Arc<StoreChange>> {
        self.history
            .iter()
            .filter(move |c| c.resource_version > revision)
    }

    /// Forgets all history, so any watch resuming from an older revision gets 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.history_floor = self.revision;
    }

    pub fn get(&self, resource: &ResourceType, namespace: &str, name: &str) -> Option<&Value> {
        self.objects.get(&key(resource, namespace, name))
    }

    /// Objects of a type, optionally in one namespace, in key order.
    pub fn list<'a>(
        &'a self,
        resource: &ResourceType,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        let id = resource.qualified_resource();
        let start = (
            id.clone(),
            namespace.unwrap_or("").to_owned(),
            String::new(),
        );
        self.objects
            .range(start..)
            .take_while(move |((r, ns, _), _)| *r == id && namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| v)
    }

    /// Objects of a type in key order, optionally in one namespace, starting just after the
    /// key `after` (namespace, name), with their namespace and name: a page of a list.
    pub fn range<'a>(
        &'a self,
        resource: &ResourceType,
        namespace: Option<&'a str>,
        after: Option<(&str, &str)>,
    ) -> impl Iterator<Item = (&'a str, &'a str, &'a Value)> + 'a {
        use std::ops::Bound;
        let id = resource.qualified_resource();
        let start = match after {
            Some((ns, name)) => Bound::Excluded((id.clone(), ns.to_owned(), name.to_owned())),
            None => Bound::Included((
                id.clone(),
                namespace.unwrap_or("").to_owned(),
                String::new(),
            )),
        };
        self.objects
            .range((start, Bound::Unbounded))
            .take_while(move |((r, ns, _), _)| *r == id && namespace.is_none_or(|n| n == ns))
            .map(|((_, ns, name), v)| (ns.as_str(), name.as_str(), v))
    }

    /// All objects of every type, for the garbage collector's dependents scan (an Event once,
    /// in its core/v1 view).
    pub fn all(&self) -> impl Iterator<Item = &Value> {
        let mirror = resources::EVENTS.qualified_resource();
        self.objects
            .iter()
            .filter(move |((r, _, _), _)| *r != mirror)
            .map(|(_, v)| v)
    }

    /// A fresh UID in the RFC 4122 text form; unique per server, and stable per run order.
    pub fn new_uid(&mut self) -> String {
        self.uid_seed = self
            .uid_seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let a = self.uid_seed;
        let b = a.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }

    /// A short random-looking suffix for `generateName`, from the apiserver's alphabet.
    pub fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let uid = self.new_uid();
        uid.bytes()
            .filter(u8::is_ascii_hexdigit)
            .take(5)
            .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
            .collect()
    }

    /// Stores an object (create or replace), bumping the revision and notifying watches.
    /// The object must carry `metadata.namespace` (if namespaced) and `metadata.name`.
    ///
    /// An Event is one object in two versions: both views are stored and announced at one
    /// resourceVersion, and the view of `resource` is returned.
    pub fn commit_upsert(&mut self, resource: &'static ResourceType, object: Value) -> Value {
        self.revision += 1;
        if events::is_event(resource) {
            let (core, v1) = events::views(resource, &object);
            let core = self.put(&resources::CORE_EVENTS, core);
            let v1 = self.put(&resources::EVENTS, v1);
            return if std::ptr::eq(resource, &resources::EVENTS) {
                v1
            } else {
                core
            };
        }
        self.put(resource, object)
    }

    /// Stores one object at the current revision and announces it.
    fn put(&mut self, resource: &'static ResourceType, mut object: Value) -> Value {
        set_meta(
            &mut object,
            "resourceVersion",
            json!(self.revision.to_string()),
        );
        let (namespace, name) = namespace_and_name(&object);
        let previous = self
            .objects
            .insert(key(resource, &namespace, &name), object.clone());
        let kind = if previous.is_some() {
            ChangeKind::Modified
        } else {
            ChangeKind::Added
        };
        self.record(StoreChange {
            kind,
            resource,
            resource_version: self.revision,
            object: object.clone(),
            previous,
        });
        object
    }

    /// Removes an object, bumping the revision; the DELETED event carries the object's last
    /// state with the deletion's revision, as the apiserver's watch cache sends it.
    pub fn commit_delete(
        &mut self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        if events::is_event(resource) {
            let twin = if std::ptr::eq(resource, &resources::EVENTS) {
                &resources::CORE_EVENTS
            } else {
                &resources::EVENTS
            };
            if !self.objects.contains_key(&key(resource, namespace, name)) {
                return None;
            }
            self.revision += 1;
            self.remove(twin, namespace, name);
            return self.remove(resource, namespace, name);
        }
        if !self.objects.contains_key(&key(resource, namespace, name)) {
            return None;
        }
        self.revision += 1;
        self.remove(resource, namespace, name)
    }

    /// Removes one object at the current revision and announces it.
    fn remove(
        &mut self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let mut object = self.objects.remove(&key(resource, namespace, name))?;
        let previous = object.clone();
        set_meta(
            &mut object,
            "resourceVersion",
            json!(self.revision.to_string()),
        );
        self.record(StoreChange {
            kind: ChangeKind::Deleted,
            resource,
            resource_version: self.revision,
            object: object.clone(),
            previous: Some(previous),
        });
        Some(object)
    }

    fn record(&mut self, change: StoreChange) {
        let change = Arc::new(change);
        self.history.push_back(Arc::clone(&change));
        while self.history.len() > self.history_limit {
            if let Some(evicted) = self.history.pop_front() {
                self.history_floor = evicted.resource_version;
            }
        }
        // No receiver is fine: nobody watches.
        let _ = self.changes.send(change);
        self.revision_tx.send_replace(self.revision);
    }
}

/// Read-only access to the store for test predicates (`FakeApiServer::wait_for`).
pub struct StoreView<'a>(pub(super) &'a Store);

impl StoreView<'_> {
    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.0.revision()
    }

    /// An object as stored; `namespace` is `""` for cluster-scoped types.
    pub fn get_object(
        &self,
        resource: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> Option<&Value> {
        self.0.get(resource, namespace, name)
    }

    /// Every object of a type, across namespaces.
    pub fn list_objects(&self, resource: &ResourceType) -> Vec<&Value> {
        self.0.list(resource, None).collect()
    }

    /// A typed object.
    ///
    /// # Panics
    /// If the stored JSON does not deserialize as `K`.
    pub fn get<K: kube::Resource<DynamicType = ()> + DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<K> {
        self.get_object(ResourceType::of::<K>(), namespace, name)
            .map(|v| typed(v.clone()))
    }

    /// Every object of a typed kind, across namespaces.
    pub fn list<K: kube::Resource<DynamicType = ()> + DeserializeOwned>(&self) -> Vec<K> {
        self.0
            .list(ResourceType::of::<K>(), None)
            .map(|v| typed(v.clone()))
            .collect()
    }
}

/// Converts stored JSON to a typed object; a failure is a bug in the test data.
pub fn typed<K: DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value)
        .unwrap_or_else(|e| panic!("stored object does not deserialize: {e}"))
}

/// `metadata.namespace` (or `""`) and `metadata.name` of an object.
pub fn namespace_and_name(object: &Value) -> (String, String) {
    let text = |field: &str| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    (text("namespace"), text("name"))
}

/// The `metadata` map of an object, created if absent.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    match object.get_mut("metadata") {
        Some(Value::Object(meta)) => meta,
        _ => unreachable!("metadata was just made an object"),
    }
}

pub fn set_meta(object: &mut Value, field: &str, value: Value) {
    metadata_mut(object).insert(field.to_owned(), value);
}

pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}
