//! The StatefulSet controller: one reconcile per set, triggered by changes to the set, its
//! claims, its pods and its journal as the shared view's change feed reports them, and
//! requeued at least every resync; a failed reconcile is retried with per-set backoff. Each
//! feature looks at the same [`SetSnapshot`] and does its own planning and acting.
//!
//! It runs kube-runtime's `applier` (the engine of its `Controller`) on a queue built from the
//! feed, over a store that holds only the sets' keys, kept in step with the view: no watch or
//! object cache of its own. A reconcile reads the set and its world from the view, which
//! already holds the change that triggered it.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use super::claim_rollout::ClaimRollout;
use super::conditions::Conditions;
use super::context::{Ctx, Error};
use super::convergence::Convergence;
use super::max_unavailable::MaxUnavailable;
use super::metrics::ControllerMetrics;
use super::snapshot::SetSnapshot;
use crate::admission::set_claims;
use crate::backoff::PerKey;
use crate::cluster::{Change, ClusterView, Kind};

const NAME: &str = "statefulset";

/// Reconciles running at once (each mostly waits on the API; the bound keeps a cold start
/// over thousands of sets from flooding it).
pub(crate) const CONCURRENCY: u16 = 16;

/// What the applier's store holds of a set: its namespace and name.
type SetKey = PartialObjectMeta<StatefulSet>;

fn key(namespace: &str, name: &str) -> SetKey {
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        _phantom: PhantomData,
    }
}

fn key_ref(namespace: &str, name: &str) -> ObjectRef<SetKey> {
    ObjectRef::new(name).within(namespace)
}

/// The applier's store of set keys, following the view.
struct Keys {
    writer: Writer<SetKey>,
    store: Store<SetKey>,
}

impl Keys {
    fn new(view: &ClusterView) -> Self {
        let writer = Writer::default();
        let store = writer.as_reader();
        let mut keys = Self { writer, store };
        keys.relist(view);
        keys
    }

    /// Takes every set of the view, dropping keys of sets that are gone.
    fn relist(&mut self, view: &ClusterView) {
        self.writer.apply_watcher_event(&watcher::Event::Init);
        for (namespace, name) in view.stateful_set_keys() {
            self.writer
                .apply_watcher_event(&watcher::Event::InitApply(key(&namespace, &name)));
        }
        self.writer.apply_watcher_event(&watcher::Event::InitDone);
    }

    /// Follows one set of the view.
    fn update(&mut self, view: &ClusterView, namespace: &str, name: &str) {
        let key = key(namespace, name);
        if view.has_stateful_set(namespace, name) {
            self.writer.apply_watcher_event(&watcher::Event::Apply(key));
        } else {
            self.writer
                .apply_watcher_event(&watcher::Event::Delete(key));
        }
    }

    fn all(&self) -> Vec<ObjectRef<SetKey>> {
        self.store
            .state()
            .iter()
            .map(|k| ObjectRef::from_obj(k.as_ref()))
            .collect()
    }

    /// `namespace/name`, if the set is known.
    fn known(&self, namespace: &str, name: &str) -> Option<ObjectRef<SetKey>> {
        let reference = key_ref(namespace, name);
        self.store.get(&reference).map(|_| reference)
    }
}

/// The sets to reconcile after `change`, keeping the key store in step with the view.
fn route(view: &ClusterView, keys: &mut Keys, change: Change) -> Vec<ObjectRef<SetKey>> {
    match change {
        Change::StatefulSet { namespace, name } => {
            keys.update(view, &namespace, &name);
            keys.known(&namespace, &name).into_iter().collect()
        }
        Change::Relisted(Kind::StatefulSet) => {
            keys.relist(view);
            keys.all()
        }
        // A class decides which claims can expand; a relist may hide any change; a watch
        // that is back after failing: what failed meanwhile is tried again now, not after
        // its backoff.
        Change::StorageClass(_) | Change::Relisted(_) | Change::Resumed(_) => keys.all(),
        // A namespace's opt-out label.
        Change::Namespace(namespace) => view
            .stateful_sets_in(&namespace)
            .iter()
            .filter_map(|name| keys.known(&namespace, name))
            .collect(),
        // Every set whose claim the name can be (each split names another set), of those
        // that exist.
        Change::Claim { namespace, name } => set_claims::candidates(&name)
            .into_iter()
            .filter_map(|(_, set, _)| keys.known(&namespace, set))
            .collect(),
        Change::Pod {
            namespace,
            owner: Some(set),
            ..
        } => keys.known(&namespace, &set).into_iter().collect(),
        Change::Journal {
            owner: Some((namespace, set)),
            ..
        } => keys.known(&namespace, &set).into_iter().collect(),
        Change::Pod { owner: None, .. } | Change::Journal { owner: None, .. } => Vec::new(),
    }
}

/// The features that look at every set, each where it is on.
#[derive(Clone, Default)]
pub(crate) struct SetFeatures {
    pub claim_rollout: Option<Arc<ClaimRollout>>,
    /// With the claim rollout or convergence on: journals are finished either way.
    pub convergence: Option<Arc<Convergence>>,
    pub conditions: Option<Arc<Conditions>>,
    pub max_unavailable: Option<Arc<MaxUnavailable>>,
}

impl SetFeatures {
    pub(crate) fn any(&self) -> bool {
        self.claim_rollout.is_some()
            || self.convergence.is_some()
            || self.conditions.is_some()
            || self.max_unavailable.is_some()
    }
}

/// What each reconcile works with.
struct Runner {
    ctx: Arc<Ctx>,
    features: SetFeatures,
    metrics: Arc<ControllerMetrics>,
    backoff: PerKey,
}

pub(crate) async fn run(
    ctx: Arc<Ctx>,
    features: SetFeatures,
    metrics: Arc<ControllerMetrics>,
    stop: CancellationToken,
) {
    // Subscribed before the keys are taken: no change after them is missed.
    let changes = ctx.view.subscribe();
    let keys = Keys::new(&ctx.view);
    let store = keys.store.clone();
    let first = keys.all();
    let view = ctx.view.clone();
    let followed = futures::stream::unfold(
        (changes, keys, view),
        |(mut changes, mut keys, view)| async move {
            let change = changes.recv().await?;
            let sets = route(&view, &mut keys, change);
            Some((futures::stream::iter(sets), (changes, keys, view)))
        },
    )
    .flatten();
    // Sets whose maxUnavailable budget waited for the gate, once it is known.
    let capabilities = features.max_unavailable.as_ref().map(|f| f.subscribe());
    let learned = futures::stream::unfold(
        (features.max_unavailable.clone(), capabilities),
        |(feature, mut changes)| async move {
            let sets = match (&feature, changes.as_mut()) {
                (Some(feature), Some(changes)) => feature.deferred_once_learned(changes).await?,
                _ => std::future::pending().await,
            };
            let refs = sets
                .into_iter()
                .map(|(namespace, name)| key_ref(&namespace, &name))
                .collect::<Vec<_>>();
            Some((futures::stream::iter(refs), (feature, changes)))
        },
    )
    .flatten();
    // Every set again when what the cluster does for claims changes (a class it starts to
    // keep rolls out then; a lowered request it starts to accept is sent then).
    let facts = futures::stream::unfold(
        (
            ctx.capabilities.subscribe(),
            store.clone(),
            crate::rollout::claims::plan::ClusterFacts::of(&ctx.capabilities.get()),
        ),
        |(mut changes, store, mut before)| async move {
            loop {
                changes.changed().await.ok()?;
                let now =
                    crate::rollout::claims::plan::ClusterFacts::of(&changes.borrow_and_update());
                if now != before {
                    before = now;
                    break;
                }
            }
            let refs: Vec<ObjectRef<SetKey>> = store
                .state()
                .iter()
                .map(|k| ObjectRef::from_obj(k.as_ref()))
                .collect();
            Some((futures::stream::iter(refs), (changes, store, before)))
        },
    )
    .flatten();
    // Ending the queue lets reconciles in flight finish, then ends the applier.
    let queue = futures::stream::iter(first)
        .chain(futures::stream::select(
            followed,
            futures::stream::select(learned, facts),
        ))
        .map(Ok::<_, Infallible>)
        .take_until(stop.clone().cancelled_owned());
    let runner = Arc::new(Runner {
        ctx,
        features,
        metrics,
        backoff: PerKey::default(),
    });
    let run = controller::applier(
        |set: Arc<SetKey>, runner: Arc<Runner>| -> BoxFuture<'static, Result<Action, Error>> {
            Box::pin(reconcile(set, runner))
        },
        error_policy,
        runner,
        store,
        queue,
        controller::Config::default().concurrency(CONCURRENCY),
    )
    .for_each(|result| async {
        if let Err(error) = result {
            tracing::debug!(%error, "statefulset reconcile failed");
        }
    });
    run.await;
}

fn backoff_key(set: &SetKey) -> String {
    format!(
        "{}/{}",
        set.metadata.namespace.as_deref().unwrap_or_default(),
        set.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Reconciles the set named by `key`, as the view holds it now.
async fn reconcile(key: Arc<SetKey>, runner: Arc<Runner>) -> Result<Action, Error> {
    let (Some(namespace), Some(name)) = (
        key.metadata.namespace.as_deref(),
        key.metadata.name.as_deref(),
    ) else {
        return Ok(Action::await_change());
    };
    // Gone since it was queued: its key goes with the change that removed it.
    let Some(set) = runner.ctx.view.stateful_set(namespace, name) else {
        runner.backoff.succeeded(&backoff_key(&key));
        return Ok(Action::await_change());
    };
    // The term's fence closing (the Lease lost, or not renewed by its deadline) cancels the
    // reconcile at its current await: it makes no further write.
    let result = tokio::select! {
        biased;
        () = runner.ctx.exec.closed() => return Ok(Action::await_change()),
        result = reconcile_set(set, &runner) => result,
    };
    if result.is_ok() {
        runner.backoff.succeeded(&backoff_key(&key));
    }
    result
}

async fn reconcile_set(set: Arc<StatefulSet>, runner: &Runner) -> Result<Action, Error> {
    let ctx = runner.ctx.as_ref();
    let Some(snapshot) = SetSnapshot::gather(set, &ctx.view) else {
        return Ok(Action::await_change());
    };
    let features = &runner.features;
    let mut next = Some(ctx.config.resync);
    let mut first_error = None;
    let mut note = |result: Result<Option<Duration>, Error>, feature: &str| match result {
        Ok(after) => next = earliest(next, after),
        Err(error) => {
            tracing::warn!(%error, feature, namespace = %snapshot.namespace, name = %snapshot.name, "reconcile step failed");
            first_error.get_or_insert(error);
        }
    };
    if let Some(rollout) = &features.claim_rollout {
        note(rollout.sync(&snapshot, ctx).await, "claims");
    }
    if let Some(convergence) = &features.convergence {
        note(convergence.sync(&snapshot, ctx).await, "claims");
    }
    if let Some(conditions) = &features.conditions {
        note(conditions.sync(&snapshot, ctx).await, "conditions");
    }
    if let Some(max_unavailable) = &features.max_unavailable {
        note(
            max_unavailable.sync(&snapshot, ctx).await,
            "max-unavailable",
        );
    }
    if let Some(error) = first_error {
        runner.metrics.reconciled(NAME, "error");
        return Err(error);
    }
    runner.metrics.reconciled(NAME, "success");
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

/// A failed reconcile is tried again after its set's backoff: 1 s, doubling with each
/// failure in a row, at most five minutes.
fn error_policy(set: Arc<SetKey>, _error: &Error, runner: Arc<Runner>) -> Action {
    Action::requeue(runner.backoff.failed(&backoff_key(&set)))
}

/// The sooner of two optional deadlines.
pub(crate) fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterWriters;
    use crate::cluster::lite::SetLite;
    use serde_json::json;

    fn set(namespace: &str, name: &str) -> SetLite {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace}}))
            .expect("a set")
    }

    fn names(refs: Vec<ObjectRef<SetKey>>) -> Vec<String> {
        let mut names: Vec<String> = refs
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn changes_route_to_the_sets_they_concern() {
        let mut writers = ClusterWriters::with_controller("sa");
        writers.apply_stateful_set(watcher::Event::Init);
        for (namespace, name) in [("db", "web"), ("db", "my-web"), ("x", "other")] {
            writers.apply_stateful_set(watcher::Event::InitApply(set(namespace, name)));
        }
        writers.apply_stateful_set(watcher::Event::InitDone);
        let view = writers.view();
        let mut keys = Keys::new(&view);
        let mut route = |change| names(route(&view, &mut keys, change));
        let claim = |namespace: &str, name: &str| Change::Claim {
            namespace: namespace.into(),
            name: name.into(),
        };
        let all = ["db/my-web", "db/web", "x/other"];

        assert_eq!(route(claim("db", "data-web-0")), ["db/web"]);
        // Ambiguous names go to every set they can belong to; the reconcile checks templates.
        assert_eq!(route(claim("db", "data-my-web-2")), ["db/my-web", "db/web"]);
        assert!(route(claim("db", "data-absent-0")).is_empty());
        assert!(route(claim("x", "data-web-0")).is_empty());
        assert!(route(claim("db", "not-a-claim-name")).is_empty());
        let pod = |owner: Option<&str>| Change::Pod {
            namespace: "db".into(),
            name: "web-0".into(),
            owner: owner.map(str::to_owned),
        };
        assert_eq!(route(pod(Some("web"))), ["db/web"]);
        assert!(route(pod(None)).is_empty());
        assert!(route(pod(Some("gone"))).is_empty());
        let journal = |owner: Option<(&str, &str)>| Change::Journal {
            name: "sa-journal.db.web".into(),
            owner: owner.map(|(n, s)| (n.to_owned(), s.to_owned())),
        };
        assert_eq!(route(journal(Some(("db", "web")))), ["db/web"]);
        assert!(route(journal(Some(("db", "gone")))).is_empty());
        assert!(route(journal(None)).is_empty());
        assert_eq!(
            route(Change::Namespace("db".into())),
            ["db/my-web", "db/web"]
        );
        assert!(route(Change::Namespace("empty".into())).is_empty());
        assert_eq!(route(Change::StorageClass("gold".into())), all);
        assert_eq!(route(Change::Relisted(Kind::Pod)), all);
        assert_eq!(route(Change::Relisted(Kind::Claim)), all);
        assert_eq!(route(Change::Resumed(Kind::Pod)), all);
    }

    #[test]
    fn the_key_store_follows_the_view() {
        let mut writers = ClusterWriters::with_controller("sa");
        writers.apply_stateful_set(watcher::Event::Init);
        writers.apply_stateful_set(watcher::Event::InitApply(set("db", "web")));
        writers.apply_stateful_set(watcher::Event::InitDone);
        let view = writers.view();
        let mut keys = Keys::new(&view);
        assert_eq!(names(keys.all()), ["db/web"]);

        writers.apply_stateful_set(watcher::Event::Apply(set("db", "new")));
        let sets = route(
            &view,
            &mut keys,
            Change::StatefulSet {
                namespace: "db".into(),
                name: "new".into(),
            },
        );
        assert_eq!(names(sets), ["db/new"]);
        assert_eq!(names(keys.all()), ["db/new", "db/web"]);

        writers.apply_stateful_set(watcher::Event::Delete(set("db", "new")));
        let sets = route(
            &view,
            &mut keys,
            Change::StatefulSet {
                namespace: "db".into(),
                name: "new".into(),
            },
        );
        assert!(sets.is_empty(), "a set that is gone is not reconciled");
        assert_eq!(names(keys.all()), ["db/web"]);

        // A relist that no longer has "web" but has "other".
        writers.apply_stateful_set(watcher::Event::Init);
        writers.apply_stateful_set(watcher::Event::InitApply(set("db", "other")));
        writers.apply_stateful_set(watcher::Event::InitDone);
        let sets = route(&view, &mut keys, Change::Relisted(Kind::StatefulSet));
        assert_eq!(names(sets), ["db/other"]);
        assert_eq!(names(keys.all()), ["db/other"]);
    }
}
