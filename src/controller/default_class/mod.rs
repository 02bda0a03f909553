//! Retroactive default StorageClass for classless, unbound claims (KEP-3333).
//!
//! One loop, fed by three watches: StorageClasses and Namespaces into caches of their own
//! (the default is picked from them with the admission rule's
//! [`pick_default_class`](crate::admission::claim::default_class::pick_default_class)), and
//! claims into an index that keeps only the candidates — classless, unbound claims, usually
//! a handful. Every watch event is handled after its own cache took it in, one at a time, so
//! whichever of "claim appears" and "default appears" comes second sees the other: a claim
//! gets the default as soon as both exist, without waiting for the resync. The resync walks
//! the candidates again, as the upstream PV controller does.
//!
//! What the controller remembers per candidate is the resourceVersion it last tried: a
//! claim is patched at most once per version, so a refusal (an apiserver before 1.25
//! rejects the change) is reported once and retried only when the claim itself changes.
//! That memory lives in the index entry and goes with it, so it is bounded by the number
//! of candidates.

pub mod plan;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Patch;
use kube::runtime::events::{Event, EventType};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Resource};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::context::Ctx;
use crate::admission::claim::default_class::DefaultSource;
use crate::cluster::{ClusterView, ClusterWriters};
pub use plan::{Leave, Outcome, Plan};

/// The KEP's metrics: attempts, and failed attempts (successes are the difference).
#[derive(Debug, Default)]
pub struct Metrics {
    attempts: Counter,
    errors: Counter,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "retroactive_storageclass",
            "Retroactive default StorageClass assignment attempts",
            metrics.attempts.clone(),
        );
        registry.register(
            "retroactive_storageclass_errors",
            "Retroactive default StorageClass assignment attempts that failed",
            metrics.errors.clone(),
        );
        metrics
    }
}

/// How soon a failed request (apiserver unavailable, timeout) is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

type Key = (String, String);

/// A candidate claim and what was tried on it.
struct Entry {
    claim: Arc<PersistentVolumeClaim>,
    /// resourceVersion of the last attempt (assigned, conflicted or refused).
    tried: Option<String>,
    /// Whether its refusal was reported (once per claim uid).
    reported: bool,
}

/// Candidates by namespace and name, rebuilt on every relist.
#[derive(Default)]
struct Candidates {
    index: HashMap<Key, Entry>,
    relisting: Option<HashMap<Key, Entry>>,
    synced: bool,
}

fn key_of(claim: &PersistentVolumeClaim) -> Key {
    (
        claim.metadata.namespace.clone().unwrap_or_default(),
        claim.metadata.name.clone().unwrap_or_default(),
    )
}

impl Candidates {
    /// Files `claim` in `index` if it is a candidate, keeping the memory of earlier
    /// attempts on the same object (same uid).
    fn file(
        index: &mut HashMap<Key, Entry>,
        previous: Option<Entry>,
        claim: PersistentVolumeClaim,
    ) -> Option<Key> {
        if !plan::qualifies(&claim) {
            return None;
        }
        let key = key_of(&claim);
        let same_object = previous
            .as_ref()
            .is_some_and(|p| p.claim.metadata.uid == claim.metadata.uid);
        let (tried, reported) = match previous {
            Some(p) if same_object => (p.tried, p.reported),
            _ => (None, false),
        };
        index.insert(
            key.clone(),
            Entry {
                claim: Arc::new(claim),
                tried,
                reported,
            },
        );
        Some(key)
    }

    fn absorb(&mut self, event: watcher::Event<PersistentVolumeClaim>) -> Trigger {
        match event {
            watcher::Event::Init => {
                self.relisting = Some(HashMap::new());
                Trigger::Nothing
            }
            watcher::Event::InitApply(claim) => {
                if let Some(fresh) = self.relisting.as_mut() {
                    let previous = self.index.remove(&key_of(&claim));
                    Self::file(fresh, previous, claim);
                }
                Trigger::Nothing
            }
            watcher::Event::InitDone => {
                if let Some(fresh) = self.relisting.take() {
                    self.index = fresh;
                }
                self.synced = true;
                Trigger::All
            }
            watcher::Event::Apply(claim) => {
                let key = key_of(&claim);
                let previous = self.index.remove(&key);
                match Self::file(&mut self.index, previous, claim) {
                    Some(key) => Trigger::Claim(key),
                    None => Trigger::Nothing,
                }
            }
            watcher::Event::Delete(claim) => {
                self.index.remove(&key_of(&claim));
                Trigger::Nothing
            }
        }
    }
}

/// Which candidates to look at after an event.
#[derive(Debug, PartialEq, Eq)]
enum Trigger {
    Nothing,
    Claim(Key),
    Namespace(String),
    All,
}

enum Input {
    Claim(Box<watcher::Event<PersistentVolumeClaim>>),
    Class(watcher::Event<StorageClass>),
    Namespace(watcher::Event<Namespace>),
}

/// Where the watches stand before the first full pass.
#[derive(Default)]
struct Synced {
    classes: bool,
    namespaces: bool,
}

fn strip<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

fn watch<K>(api: Api<K>) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(strip::<K>)
}

/// Runs the claim controller until `stop`.
pub async fn run(ctx: Arc<Ctx>, stop: CancellationToken) {
    let writers = ClusterWriters::new();
    // Only classes and namespaces are filled: the picker reads nothing else.
    let view = writers.view();
    let ClusterWriters {
        storage_classes,
        namespaces,
        ..
    } = writers;
    let client = ctx.client.clone();
    let classes = reflector::reflector(
        storage_classes,
        watch(Api::<StorageClass>::all(client.clone())),
    )
    .map(|e| e.map(Input::Class));
    let spaces = reflector::reflector(namespaces, watch(Api::<Namespace>::all(client.clone())))
        .map(|e| e.map(Input::Namespace));
    let claims = watch(Api::<PersistentVolumeClaim>::all(client))
        .map(|e| e.map(|e| Input::Claim(Box::new(e))));
    let mut inputs = futures::stream::select_all([classes.boxed(), spaces.boxed(), claims.boxed()]);

    let mut worker = Worker {
        ctx: &ctx,
        view,
        candidates: Candidates::default(),
        retry_at: None,
    };
    let mut synced = Synced::default();
    let mut resync = tokio::time::interval(ctx.config.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let retry_at = worker.retry_at;
        let trigger = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            input = inputs.next() => match input {
                None => return,
                Some(Err(error)) => {
                    tracing::warn!(%error, "retroactive default class: watch error");
                    Trigger::Nothing
                }
                Some(Ok(input)) => worker.absorb(input, &mut synced),
            },
            () = sleep_until(retry_at), if retry_at.is_some() => {
                worker.retry_at = None;
                Trigger::All
            }
            _ = resync.tick() => Trigger::All,
        };
        // Acting before every cache listed once could miss a default or a namespace's choice.
        if !(synced.classes && synced.namespaces && worker.candidates.synced) {
            continue;
        }
        worker.handle(trigger).await;
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

struct Worker<'a> {
    ctx: &'a Ctx,
    view: ClusterView,
    candidates: Candidates,
    retry_at: Option<Instant>,
}

impl Worker<'_> {
    fn absorb(&mut self, input: Input, synced: &mut Synced) -> Trigger {
        match input {
            Input::Claim(event) => self.candidates.absorb(*event),
            // Any class change may change the cluster default for every namespace.
            Input::Class(watcher::Event::InitDone) => {
                synced.classes = true;
                Trigger::All
            }
            Input::Class(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => Trigger::All,
            Input::Class(_) => Trigger::Nothing,
            Input::Namespace(watcher::Event::InitDone) => {
                synced.namespaces = true;
                Trigger::All
            }
            Input::Namespace(watcher::Event::Apply(ns) | watcher::Event::Delete(ns)) => {
                Trigger::Namespace(ns.metadata.name.unwrap_or_default())
            }
            Input::Namespace(_) => Trigger::Nothing,
        }
    }

    async fn handle(&mut self, trigger: Trigger) {
        let keys: Vec<Key> = match trigger {
            Trigger::Nothing => return,
            Trigger::Claim(key) => vec![key],
            Trigger::Namespace(ns) => self
                .candidates
                .index
                .keys()
                .filter(|(n, _)| *n == ns)
                .cloned()
                .collect(),
            Trigger::All => self.candidates.index.keys().cloned().collect(),
        };
        for key in keys {
            self.reconcile(&key).await;
        }
    }

    async fn reconcile(&mut self, key: &Key) {
        let Some(entry) = self.candidates.index.get(key) else {
            return;
        };
        let claim = entry.claim.clone();
        let Plan::Assign {
            class,
            resource_version,
        } = plan::plan(&claim, &self.view, entry.tried.as_deref())
        else {
            return;
        };
        let (namespace, name) = key;
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.ctx.client.clone(), namespace);
        let params = crate::field_manager::patch();
        let body = plan::patch_body(&class.name, &resource_version);
        let metrics = &self.ctx.metrics.default_class;
        metrics.attempts.inc();
        let result = api.patch(name, &params, &Patch::Merge(&body)).await;
        let (outcome, message) = match &result {
            Ok(_) => (Outcome::Assigned, String::new()),
            Err(kube::Error::Api(status)) => (plan::classify(status.code), status.message.clone()),
            Err(error) => (Outcome::Transient, error.to_string()),
        };
        if outcome != Outcome::Assigned {
            metrics.errors.inc();
        }
        let source = match class.source {
            DefaultSource::Namespace => format!("the default of namespace {namespace:?}"),
            DefaultSource::Cluster => "the cluster default".to_owned(),
        };
        match outcome {
            Outcome::Assigned => {
                tracing::info!(%namespace, %name, class = %class.name, "assigned the default StorageClass");
                self.tried(key, &resource_version);
                let note = format!(
                    "Assigned StorageClass {:?} ({source}) to the claim created without one",
                    class.name
                );
                self.ctx
                    .event(
                        &*claim,
                        Event {
                            type_: EventType::Normal,
                            reason: "DefaultStorageClassAssigned".to_owned(),
                            note: Some(note),
                            action: "AssignStorageClass".to_owned(),
                            secondary: None,
                        },
                    )
                    .await;
            }
            Outcome::Conflict => {
                // The claim moved (bound, given a class, edited): its watch event decides anew.
                tracing::debug!(%namespace, %name, "claim changed before the default class was set");
                self.tried(key, &resource_version);
            }
            Outcome::Gone => {
                self.candidates.index.remove(key);
            }
            Outcome::Rejected => {
                tracing::warn!(%namespace, %name, %message, "the apiserver refused the default StorageClass");
                self.tried(key, &resource_version);
                let first = self
                    .candidates
                    .index
                    .get_mut(key)
                    .is_some_and(|e| !std::mem::replace(&mut e.reported, true));
                if first {
                    let hint = if plan::is_old_apiserver_refusal(&message) {
                        " (Kubernetes before 1.25 does not let a claim's class be set after creation; re-create the claim to use the class)"
                    } else {
                        ""
                    };
                    let note = format!(
                        "Could not assign StorageClass {:?} ({source}): {message}{hint}",
                        class.name
                    );
                    self.ctx
                        .event(
                            &*claim,
                            Event {
                                type_: EventType::Warning,
                                reason: "DefaultStorageClassRejected".to_owned(),
                                note: Some(truncate(note, 1000)),
                                action: "AssignStorageClass".to_owned(),
                                secondary: None,
                            },
                        )
                        .await;
                }
            }
            Outcome::Transient => {
                tracing::warn!(%namespace, %name, %message, "assigning the default StorageClass failed; retrying");
                let at = Instant::now() + RETRY_AFTER;
                self.retry_at = Some(self.retry_at.map_or(at, |r| r.min(at)));
            }
        }
    }

    fn tried(&mut self, key: &Key, resource_version: &str) {
        if let Some(entry) = self.candidates.index.get_mut(key) {
            entry.tried = Some(resource_version.to_owned());
        }
    }
}

/// Event notes are limited to 1 kB.
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, uid: &str, rv: &str, spec: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
            "spec": spec, "status": {"phase": "Pending"},
        }))
        .expect("a claim")
    }

    #[test]
    fn the_index_keeps_only_candidates_and_their_memory() {
        let mut c = Candidates::default();
        assert_eq!(c.absorb(watcher::Event::Init), Trigger::Nothing);
        c.absorb(watcher::Event::InitApply(claim("a", "u-a", "1", json!({}))));
        c.absorb(watcher::Event::InitApply(claim(
            "b",
            "u-b",
            "1",
            json!({"storageClassName": "x"}),
        )));
        assert_eq!(c.absorb(watcher::Event::InitDone), Trigger::All);
        assert!(c.synced);
        assert_eq!(c.index.len(), 1, "only the classless claim is kept");

        let key = ("ns".to_owned(), "a".to_owned());
        if let Some(e) = c.index.get_mut(&key) {
            e.tried = Some("1".to_owned());
            e.reported = true;
        }
        // A change to the same claim keeps what was tried.
        assert_eq!(
            c.absorb(watcher::Event::Apply(claim("a", "u-a", "2", json!({})))),
            Trigger::Claim(key.clone())
        );
        assert_eq!(c.index[&key].tried.as_deref(), Some("1"));
        assert!(c.index[&key].reported);
        // A relist keeps it too.
        c.absorb(watcher::Event::Init);
        c.absorb(watcher::Event::InitApply(claim("a", "u-a", "2", json!({}))));
        c.absorb(watcher::Event::InitDone);
        assert!(c.index[&key].reported);
        // A new claim under the same name starts afresh.
        c.absorb(watcher::Event::Apply(claim("a", "u-new", "3", json!({}))));
        assert_eq!(c.index[&key].tried, None);
        assert!(!c.index[&key].reported);
        // Getting a class, or going away, drops the entry.
        assert_eq!(
            c.absorb(watcher::Event::Apply(claim(
                "a",
                "u-new",
                "4",
                json!({"storageClassName": "gold"})
            ))),
            Trigger::Nothing
        );
        assert!(c.index.is_empty());
        c.absorb(watcher::Event::Apply(claim("z", "u-z", "5", json!({}))));
        c.absorb(watcher::Event::Delete(claim("z", "u-z", "5", json!({}))));
        assert!(c.index.is_empty());
    }

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("é".repeat(600), 1000).len(), 1000);
        assert_eq!(truncate("abc".to_owned(), 1000), "abc");
        assert_eq!(truncate("aé".to_owned(), 2), "a");
    }
}
