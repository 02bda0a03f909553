//! The claim cache: PersistentVolumeClaims held as compact JSON, by namespace and name.
//!
//! Claims are the most numerous objects the view holds, and a typed claim costs about 5 KB
//! (each of its four maps is a B-tree node of its own); its compact JSON, about 0.9 KB. Claims
//! are read by name (the claim controller, a few per StatefulSet and sync) or by namespace
//! (a StatefulSet CREATE looks for claims it would adopt), never all at once on the admission
//! path, so each is decoded when read. The writer follows a kube reflector's store: a relist
//! is collected apart and swapped in whole when it is complete.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::watcher;

use super::Trim;

type Claims = HashMap<Box<str>, HashMap<Box<str>, Box<[u8]>>>;

/// The read side; cheap to clone.
#[derive(Clone)]
pub struct ClaimCache {
    claims: Arc<RwLock<Claims>>,
    ready: tokio::sync::watch::Receiver<bool>,
}

/// The write side, owned by whichever source fills the view.
pub struct ClaimWriter {
    claims: Arc<RwLock<Claims>>,
    ready: tokio::sync::watch::Sender<bool>,
    relist: Option<Claims>,
}

/// The writer went away before the cache saw a complete list.
#[derive(Debug, thiserror::Error)]
#[error("the claim cache was dropped before it was filled")]
pub struct WriterDropped;

impl Default for ClaimWriter {
    fn default() -> Self {
        let (ready, _) = tokio::sync::watch::channel(false);
        Self {
            claims: Arc::default(),
            ready,
            relist: None,
        }
    }
}

fn insert(claims: &mut Claims, mut claim: PersistentVolumeClaim) {
    claim.trim();
    let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
    let Some(name) = claim.metadata.name.as_deref() else {
        return;
    };
    // Serialising a typed claim cannot fail; a claim that somehow did is not cached.
    let Ok(json) = serde_json::to_vec(&claim) else {
        return;
    };
    claims
        .entry(namespace.into())
        .or_default()
        .insert(name.into(), json.into());
}

impl ClaimWriter {
    pub fn as_reader(&self) -> ClaimCache {
        ClaimCache {
            claims: self.claims.clone(),
            ready: self.ready.subscribe(),
        }
    }

    /// Applies one watcher event, as `kube::runtime::reflector::store::Writer` does.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<PersistentVolumeClaim>) {
        match event {
            watcher::Event::Init => self.relist = Some(Claims::new()),
            watcher::Event::InitApply(claim) => {
                insert(self.relist.get_or_insert_default(), claim.clone());
            }
            watcher::Event::InitDone => {
                let complete = self.relist.take().unwrap_or_default();
                *self.claims.write().unwrap_or_else(PoisonError::into_inner) = complete;
                self.ready.send_replace(true);
            }
            watcher::Event::Apply(claim) => {
                let mut claims = self.claims.write().unwrap_or_else(PoisonError::into_inner);
                insert(&mut claims, claim.clone());
            }
            watcher::Event::Delete(claim) => {
                let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
                let Some(name) = claim.metadata.name.as_deref() else {
                    return;
                };
                let mut claims = self.claims.write().unwrap_or_else(PoisonError::into_inner);
                if let Some(in_namespace) = claims.get_mut(namespace) {
                    in_namespace.remove(name);
                    if in_namespace.is_empty() {
                        claims.remove(namespace);
                    }
                }
            }
        }
    }
}

fn decode(json: &[u8]) -> Option<Arc<PersistentVolumeClaim>> {
    // Only JSON this cache wrote is decoded; a failure would be a bug, not bad input.
    serde_json::from_slice(json).ok().map(Arc::new)
}

impl ClaimCache {
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let claims = self.claims.read().unwrap_or_else(PoisonError::into_inner);
        claims
            .get(namespace)?
            .get(name)
            .and_then(|json| decode(json))
    }

    /// The claims of `namespace` whose name passes `wanted`; only those are decoded.
    pub fn in_namespace(
        &self,
        namespace: &str,
        wanted: impl Fn(&str) -> bool,
    ) -> Vec<Arc<PersistentVolumeClaim>> {
        let claims = self.claims.read().unwrap_or_else(PoisonError::into_inner);
        claims.get(namespace).map_or_else(Vec::new, |in_namespace| {
            in_namespace
                .iter()
                .filter(|(name, _)| wanted(name))
                .filter_map(|(_, json)| decode(json))
                .collect()
        })
    }

    pub fn len(&self) -> usize {
        let claims = self.claims.read().unwrap_or_else(PoisonError::into_inner);
        claims.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the cache has seen a complete list.
    pub async fn wait_until_ready(&self) -> Result<(), WriterDropped> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| WriterDropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(namespace: &str, name: &str, storage: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1",
                "labels": {"app": "db"}, "annotations": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
            "status": {"phase": "Bound", "capacity": {"storage": storage}}
        }))
        .expect("a claim")
    }

    #[test]
    fn claims_read_back_as_written_without_managed_fields() {
        let mut writer = ClaimWriter::default();
        let cache = writer.as_reader();
        let data = claim("team", "data-db-0", "1Gi");
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(data.clone()));
        assert!(
            cache.get("team", "data-db-0").is_none(),
            "a relist shows when complete"
        );
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let mut want = data;
        want.metadata.managed_fields = None;
        assert_eq!(cache.get("team", "data-db-0").as_deref(), Some(&want));
        assert!(cache.get("other", "data-db-0").is_none());
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn applies_deletes_and_relists_replace_what_was_there() {
        let mut writer = ClaimWriter::default();
        let cache = writer.as_reader();
        writer.apply_watcher_event(&watcher::Event::Init);
        for name in ["data-db-0", "data-db-1", "wal-db-0"] {
            writer.apply_watcher_event(&watcher::Event::InitApply(claim("team", name, "1Gi")));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        writer.apply_watcher_event(&watcher::Event::Apply(claim("team", "data-db-0", "2Gi")));
        writer.apply_watcher_event(&watcher::Event::Delete(claim("team", "wal-db-0", "1Gi")));
        writer.apply_watcher_event(&watcher::Event::Apply(claim("x", "data-web-0", "1Gi")));
        let storage = |c: &PersistentVolumeClaim| {
            c.spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .map(|q| q.0.clone())
        };
        assert_eq!(
            cache
                .get("team", "data-db-0")
                .as_deref()
                .and_then(storage)
                .as_deref(),
            Some("2Gi")
        );
        assert!(cache.get("team", "wal-db-0").is_none());
        let mut data: Vec<_> = cache
            .in_namespace("team", |n| n.starts_with("data-"))
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        data.sort();
        assert_eq!(data, ["data-db-0", "data-db-1"]);
        assert_eq!(cache.len(), 3);

        // A relist drops what it does not list, once complete.
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(claim(
            "team",
            "data-db-1",
            "1Gi",
        )));
        assert_eq!(cache.len(), 3);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(cache.len(), 1);
        assert!(cache.in_namespace("x", |_| true).is_empty());
    }

    #[tokio::test]
    async fn ready_after_the_first_complete_list_and_an_error_when_the_writer_goes() {
        let mut writer = ClaimWriter::default();
        let cache = writer.as_reader();
        let waiting = tokio::spawn({
            let cache = cache.clone();
            async move { cache.wait_until_ready().await.is_ok() }
        });
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert!(waiting.await.expect("joined"));

        let never = ClaimWriter::default();
        let cache = never.as_reader();
        drop(never);
        assert!(cache.wait_until_ready().await.is_err());
    }
}
