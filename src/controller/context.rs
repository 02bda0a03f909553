//! What every feature shares: the client, caches, event recorder, metrics, and a snapshot of
//! one StatefulSet's world gathered from the caches.

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, PersistentVolumeClaim, Pod};
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio_util::sync::CancellationToken;

use super::ControllerConfig;
use super::metrics::ControllerMetrics;
use crate::admission::set_claims;
use crate::cluster::ClusterView;
use crate::names;

/// Errors of a reconcile; the object is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Invalid(String),
}

/// Writes whose effect the caches have not shown yet (the "expectations" of upstream
/// controllers): an object key and the resourceVersion the object had when we wrote it. While
/// a cache still shows that version, plans for the object are stale and must not lead to a
/// second write.
#[derive(Debug, Default)]
pub struct Expectations(std::sync::Mutex<std::collections::HashMap<String, String>>);

/// Entries kept at most; past it the oldest knowledge is dropped (costing at worst one
/// refused write, never a wrong one: writes carry preconditions).
const MAX_EXPECTATIONS: usize = 10_000;

impl Expectations {
    /// Records that we wrote `key` when it had `stale_version`.
    pub fn wrote(&self, key: String, stale_version: String) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_EXPECTATIONS {
            map.clear();
        }
        map.insert(key, stale_version);
    }

    /// Whether the cached `version` of `key` predates our write; forgets the write once the
    /// cache has moved past it.
    pub fn is_stale(&self, key: &str, version: Option<&str>) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(key) {
            Some(stale) if Some(stale.as_str()) == version => true,
            Some(_) => {
                map.remove(key);
                false
            }
            None => false,
        }
    }
}

/// Shared state of one leadership term.
pub struct Ctx {
    pub client: Client,
    pub config: ControllerConfig,
    /// StatefulSets, claims, StorageClasses and Namespaces (shared with the webhook).
    pub view: ClusterView,
    /// Pods of StatefulSets (selected by the pod-name label).
    pub pods: Store<Pod>,
    /// Convergence journals in the controller's namespace.
    pub journals: Store<ConfigMap>,
    pub recorder: Recorder,
    pub metrics: Arc<ControllerMetrics>,
    /// Our writes the caches have not caught up with.
    pub expectations: Expectations,
    writers: std::sync::Mutex<
        Option<(
            reflector::store::Writer<Pod>,
            reflector::store::Writer<ConfigMap>,
        )>,
    >,
}

impl Ctx {
    pub fn new(
        client: Client,
        config: ControllerConfig,
        view: ClusterView,
        metrics: Arc<ControllerMetrics>,
    ) -> Self {
        let pods_writer = reflector::store::Writer::default();
        let journals_writer = reflector::store::Writer::default();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: names::CONTROLLER_NAME.to_owned(),
                instance: Some(config.identity.clone()),
            },
        );
        Self {
            pods: pods_writer.as_reader(),
            journals: journals_writer.as_reader(),
            client,
            config,
            view,
            recorder,
            metrics,
            expectations: Expectations::default(),
            writers: std::sync::Mutex::new(Some((pods_writer, journals_writer))),
        }
    }

    /// Starts the controller's own caches (pods, journals); resolves to whether they and
    /// the shared view synced.
    pub async fn start_caches(self: Arc<Self>, stop: CancellationToken) -> bool {
        let writers = self
            .writers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some((pods_writer, journals_writer)) = writers else {
            return false;
        };
        let pods = watcher(
            Api::<Pod>::all(self.client.clone()),
            watcher::Config::default().labels(names::POD_NAME_LABEL),
        )
        .default_backoff()
        .modify(|p: &mut Pod| p.metadata.managed_fields = None);
        let journals = watcher(
            Api::<ConfigMap>::namespaced(self.client.clone(), &self.config.namespace),
            watcher::Config::default().labels(names::JOURNAL_LABEL),
        )
        .default_backoff();
        for (kind, fut) in [
            (
                "pods",
                drive(reflector::reflector(pods_writer, pods)).boxed(),
            ),
            (
                "journals",
                drive(reflector::reflector(journals_writer, journals)).boxed(),
            ),
        ] {
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = fut => tracing::warn!(kind, "cache stream ended"),
                    _ = stop.cancelled() => {}
                }
            });
        }
        self.pods.wait_until_ready().await.is_ok()
            && self.journals.wait_until_ready().await.is_ok()
            && self.view.wait_synced().await.is_ok()
    }

    /// Publishes an Event about `object`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(&self, object: &K, event: Event) {
        let reference: ObjectReference = object.object_ref(&());
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, reason = %event.reason, "could not publish event");
        }
    }
}

async fn drive<S, T>(stream: S)
where
    S: futures::Stream<Item = Result<T, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        if let Err(error) = item {
            tracing::warn!(%error, "watch error");
        }
    }
}

/// One StatefulSet and what belongs to it, read from the caches at reconcile time.
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
            .map(|&n| {
                let pod = ctx
                    .pods
                    .get(&ObjectRef::new(&format!("{name}-{n}")).within(&namespace));
                (n, pod)
            })
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
        let journal = ctx
            .journals
            .get(&ObjectRef::new(&journal_name(&namespace, &name)).within(&ctx.config.namespace));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_hold_until_the_cache_moves_past_our_write() {
        let e = Expectations::default();
        assert!(!e.is_stale("db/a", Some("7")), "nothing written");
        e.wrote("db/a".into(), "7".into());
        assert!(
            e.is_stale("db/a", Some("7")),
            "cache still shows the old version"
        );
        assert!(e.is_stale("db/a", Some("7")));
        assert!(!e.is_stale("db/a", Some("9")), "cache caught up");
        assert!(!e.is_stale("db/a", Some("7")), "forgotten once caught up");
    }
}
