//! Bulk loading: many objects straight into the store, as if they had been there before the
//! test started, fast enough for a large cluster (no HTTP, no per-object lookups of the
//! server's configuration, the store lock taken once per chunk so that requests still get
//! through during a long load).

use serde_json::{Value, json};

use super::registry;
use super::store::{meta_str, metadata_mut, namespace_and_name};
use super::{FakeApiServer, lock};

/// Objects committed per store lock.
const CHUNK: usize = 2_000;

impl FakeApiServer {
    /// Stores every object as [`put_object`](Self::put_object) does (defaulting; uid,
    /// creationTimestamp and, where tracked, generation filled in where missing) and returns
    /// how many were stored. Objects already carrying a uid keep it, so a seeded cluster can
    /// be deterministic. Watches are notified as for any change; the history keeps the last
    /// `watch_history_limit` of them.
    ///
    /// # Panics
    /// If an object's `apiVersion`/`kind` is not served, or it has no `metadata.name`.
    pub fn seed(&self, objects: impl IntoIterator<Item = Value>) -> usize {
        let config = lock(&self.shared.config).clone();
        let now = registry::now_rfc3339();
        let mut objects = objects.into_iter().peekable();
        let mut stored = 0;
        while objects.peek().is_some() {
            let mut store = self.shared.store();
            for mut object in objects.by_ref().take(CHUNK) {
                let resource = registry::resource_of(&object).unwrap_or_else(|| {
                    panic!(
                        "seed: unsupported apiVersion/kind in {}",
                        object.get("kind").unwrap_or(&Value::Null)
                    )
                });
                let (namespace, name) = namespace_and_name(&object);
                assert!(!name.is_empty(), "seed: metadata.name is required");
                registry::apply_defaults(&config, resource, None, &mut object);
                registry::drop_disabled_fields(&config, resource, None, &mut object);
                let uid = match meta_str(&object, "uid") {
                    Some(_) => None,
                    None => Some(store.new_uid()),
                };
                let meta = metadata_mut(&mut object);
                if resource.namespaced && namespace.is_empty() {
                    meta.insert("namespace".into(), json!("default"));
                }
                if let Some(uid) = uid {
                    meta.insert("uid".into(), json!(uid));
                }
                meta.entry("creationTimestamp").or_insert(json!(now));
                if resource.tracks_generation {
                    meta.entry("generation").or_insert(json!(1));
                }
                store.commit_upsert(resource, object);
                stored += 1;
            }
        }
        stored
    }
}
