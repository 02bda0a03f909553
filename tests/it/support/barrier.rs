//! Barriers that make "nothing happened" and "at most N at once" assertions mean something on
//! a loaded machine.
//!
//! - "Nothing happened" is only worth asserting once the controller has looked after the
//!   moment that matters: [`RunningController::reconciled_after`] waits for a StatefulSet
//!   reconcile that *started* after a [`Mark`] (from the controller's own
//!   `controller_reconciles_total`), [`nudge`] gives a controller with a long resync a
//!   reason to look, and [`ClassProbe`] does the same for the default class controller, which
//!   counts no reconciles.
//! - "At most N at once" is only worth asserting over every state the cluster went through:
//!   [`Changes`] hands on the fake's own record of every committed change, in order, each
//!   with the object as it left it (never a later re-read of the store), and fails loudly when
//!   that record no longer reaches back far enough; [`Peak`] keeps the highest of a count over
//!   it.
//!
//! ```ignore
//! let mark = controller.mark();            // the moment of interest
//! controller.reconciled_after(mark).await; // the controller looked since
//! assert!(api.eviction_records().is_empty());
//!
//! let down = Peak::track(&api, ResourceType::of::<Pod>(), NS, |pods| unavailable(pods));
//! // ... the rollout ...
//! assert_eq!(down.get(), 1);
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::controller::{RunningController, eventually};
use super::fake_apiserver::{ChangeKind, FakeApiServer, ResourceType, StoreChange};

/// How long a barrier waits before it fails the test: only reached when something is wrong.
pub const BARRIER_WAIT: Duration = Duration::from_secs(60);

/// A moment, as the StatefulSet controller's finished reconciles count it: how many had
/// finished, and how many could have been running then (one per set the view holds: the
/// controller never runs two reconciles of one set at once).
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    finished: u64,
    in_flight: u64,
}

impl RunningController {
    /// Reconciles of the StatefulSet controller finished so far, whatever their result.
    pub fn reconciles(&self) -> u64 {
        self.metrics()
            .lines()
            .filter(|l| {
                l.starts_with("controller_reconciles_total{")
                    && l.contains(r#"controller="statefulset""#)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// Now, for [`Self::reconciled_after`]. Take it once the state of interest holds (in the
    /// fake, and in the view where the controller must have seen it).
    pub fn mark(&self) -> Mark {
        Mark {
            finished: self.reconciles(),
            in_flight: self.view().stateful_set_keys().len() as u64,
        }
    }

    /// Waits until a reconcile that started after `mark` has finished: each one reads the
    /// view as it is when it starts, and has made its writes and Events when it is counted.
    /// With one set, that reconcile was of that set; with several, see
    /// [`Self::reconciled_after_n`]. Fails the test after [`BARRIER_WAIT`].
    pub async fn reconciled_after(&self, mark: Mark) {
        self.reconciled_after_n(mark, 1).await;
    }

    /// [`Self::reconciled_after`] for `n` reconciles that started after `mark`. Counts do not
    /// say which set was reconciled: with several sets and a short resync, ask for a couple
    /// of rounds (`n` = twice the sets) so that each one's resync came round.
    pub async fn reconciled_after_n(&self, mark: Mark, n: u64) {
        let want = mark.finished + mark.in_flight + n;
        let done = eventually(BARRIER_WAIT, || self.reconciles() >= want).await;
        assert!(
            done,
            "the StatefulSet controller did not finish {n} reconcile(s) after the mark within {BARRIER_WAIT:?}: {} finished, {want} needed ({mark:?})",
            self.reconciles()
        );
    }

    /// Waits for a reconcile that started after now: what is in the view now has been acted
    /// on.
    pub async fn settle(&self) {
        self.reconciled_after(self.mark()).await;
    }

    /// [`Self::settle`] for a controller whose resync is too long to wait for (its other sets
    /// idle): [`nudge`]s the set so that it is reconciled, and waits for that. A nudge makes
    /// one reconcile, which may be the only one counted, or come after one already running:
    /// nudged and counted once more than reconciles could be running, one of them started
    /// after the first nudge.
    pub async fn nudge_and_settle(&self, api: &FakeApiServer, namespace: &str, set: &str) {
        let Mark {
            finished,
            in_flight,
        } = self.mark();
        for step in 1..=in_flight + 1 {
            nudge(api, namespace, set);
            let want = finished + step;
            let done = eventually(BARRIER_WAIT, || self.reconciles() >= want).await;
            assert!(
                done,
                "{namespace}/{set} nudged, yet the StatefulSet controller did not finish a reconcile within {BARRIER_WAIT:?}: {} finished, {want} needed",
                self.reconciles()
            );
        }
    }

    /// [`Self::nudge_and_settle`] for every set of the fake, for a controller whose resync is
    /// too long to wait for: each round nudges every set and waits for as many reconciles
    /// (each nudge makes one that starts after it). Counts do not say which set was
    /// reconciled, so a reconcile running at the first nudge may stand in for one of them:
    /// two rounds leave that to the second round's own. A test about one set uses
    /// [`Self::nudge_and_settle`].
    pub async fn nudge_all_and_settle(&self, api: &FakeApiServer) {
        let sets: Vec<(String, String)> = api
            .list_objects(ResourceType::of::<k8s_openapi::api::apps::v1::StatefulSet>())
            .iter()
            .filter_map(|s| {
                Some((
                    s["metadata"]["namespace"].as_str()?.to_owned(),
                    s["metadata"]["name"].as_str()?.to_owned(),
                ))
            })
            .collect();
        for _round in 0..2 {
            let want = self.reconciles() + sets.len() as u64;
            for (namespace, name) in &sets {
                nudge(api, namespace, name);
            }
            let done = eventually(BARRIER_WAIT, || self.reconciles() >= want).await;
            assert!(
                done,
                "{} sets nudged, yet the StatefulSet controller did not finish as many reconciles within {BARRIER_WAIT:?}: {} finished, {want} needed",
                sets.len(),
                self.reconciles()
            );
        }
    }
}

/// An annotation no feature reads: a change of the set that makes the controller reconcile
/// it (for controllers whose resync is too long to wait for), written through the store
/// hooks so that it stays out of the request log.
pub fn nudge(api: &FakeApiServer, namespace: &str, set: &str) {
    let nudged = api.update_object(
        ResourceType::of::<k8s_openapi::api::apps::v1::StatefulSet>(),
        namespace,
        set,
        |set| {
            let annotations = &mut set["metadata"]["annotations"];
            if !annotations.is_object() {
                *annotations = json!({});
            }
            let n = annotations["test.stateful-admission.io/nudge"]
                .as_str()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            annotations["test.stateful-admission.io/nudge"] = json!((n + 1).to_string());
            true
        },
    );
    assert!(nudged.is_some(), "nudge: no set {namespace}/{set}");
}

/// Waits until the wall clock (the one the controller reads API times against) is past
/// `moment`.
pub async fn wall_clock_past(moment: jiff::Timestamp) {
    let left = moment.duration_since(jiff::Timestamp::now());
    if let Ok(left) = Duration::try_from(left) {
        tokio::time::sleep(left + Duration::from_millis(50)).await;
    }
}

/// Every change the fake commits from a revision on, handed in order to a function, from the
/// fake's own record of changes ([`FakeApiServer::changes_since`]), each with the object as it
/// left it: no change is skipped or seen twice, and a follower that fell behind the record's
/// limit fails the test instead of missing states.
pub struct Changes {
    api: FakeApiServer,
    state: Arc<Mutex<Following>>,
    follower: JoinHandle<()>,
}

struct Following {
    /// Every change up to this revision has been handed on.
    revision: u64,
    each: Box<dyn FnMut(&StoreChange) + Send>,
    /// Why the record of changes could not be followed, if it could not.
    lost: Option<String>,
}

impl Changes {
    /// Hands every change after `revision` to `each`, as it is committed. Take `revision`
    /// with the state `each` starts from ([`FakeApiServer::snapshot`]).
    pub fn follow(
        api: &FakeApiServer,
        revision: u64,
        each: impl FnMut(&StoreChange) + Send + 'static,
    ) -> Self {
        // Subscribed before the first catch-up: no commit after it goes unnoticed.
        let mut revisions = api.revisions();
        let state = Arc::new(Mutex::new(Following {
            revision,
            each: Box::new(each),
            lost: None,
        }));
        let follower = tokio::spawn({
            let (api, state) = (api.clone(), state.clone());
            async move {
                loop {
                    catch_up(&api, &state);
                    if revisions.changed().await.is_err() {
                        return;
                    }
                }
            }
        });
        Self {
            api: api.clone(),
            state,
            follower,
        }
    }

    /// Hands on every change committed up to now. Fails the test if some were lost to the
    /// record's limit: what follows them proves nothing.
    pub fn catch_up(&self) {
        catch_up(&self.api, &self.state);
        if let Some(lost) = &lock(&self.state).lost {
            panic!("changes of the fake were missed: {lost}");
        }
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

fn catch_up(api: &FakeApiServer, state: &Mutex<Following>) {
    let mut state = lock(state);
    if state.lost.is_some() {
        return;
    }
    let Some(changes) = api.changes_since(state.revision) else {
        state.lost = Some(format!(
            "the fake's history no longer reaches revision {} (raise watch_history_limit)",
            state.revision
        ));
        return;
    };
    for change in changes {
        state.revision = state.revision.max(change.resource_version);
        (state.each)(&change);
    }
}

/// The objects of one type in one namespace by name, as the changes so far left them.
pub type Objects = BTreeMap<String, Value>;

/// The objects of `resource` in `namespace` as stored now, and the revision they are current
/// at: where [`Changes::follow`] takes over.
pub fn objects_now(
    api: &FakeApiServer,
    resource: &ResourceType,
    namespace: &str,
) -> (u64, Objects) {
    let (revision, objects) = api.snapshot(resource);
    let objects = objects
        .into_iter()
        .filter(|o| o["metadata"]["namespace"].as_str().unwrap_or_default() == namespace)
        .filter_map(|o| Some((o["metadata"]["name"].as_str()?.to_owned(), o)))
        .collect();
    (revision, objects)
}

/// Applies `change` to `objects` when it is of `resource` in `namespace`; returns whether it
/// was.
pub fn fold(
    objects: &mut Objects,
    change: &StoreChange,
    resource: &ResourceType,
    namespace: &str,
) -> bool {
    if change.resource != resource
        || change.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            != namespace
    {
        return false;
    }
    let Some(name) = change.object["metadata"]["name"].as_str() else {
        return false;
    };
    match change.kind {
        ChangeKind::Deleted => {
            objects.remove(name);
        }
        ChangeKind::Added | ChangeKind::Modified => {
            objects.insert(name.to_owned(), change.object.clone());
        }
    }
    true
}

/// The highest value `count` took over the objects of one type in one namespace, evaluated
/// after every change the fake committed from [`Peak::track`] on, on the objects as each
/// change left them: a state that lasted a microsecond counts.
pub struct Peak {
    peak: Arc<Mutex<usize>>,
    changes: Changes,
}

impl Peak {
    /// Starts from the store as it is now.
    pub fn track(
        api: &FakeApiServer,
        resource: &'static ResourceType,
        namespace: &str,
        count: impl Fn(&Objects) -> usize + Send + 'static,
    ) -> Self {
        let (revision, mut objects) = objects_now(api, resource, namespace);
        let peak = Arc::new(Mutex::new(count(&objects)));
        let namespace = namespace.to_owned();
        let changes = Changes::follow(api, revision, {
            let peak = peak.clone();
            move |change| {
                if fold(&mut objects, change, resource, &namespace) {
                    let now = count(&objects);
                    let mut peak = lock(&peak);
                    *peak = (*peak).max(now);
                }
            }
        });
        Self { peak, changes }
    }

    /// The highest count over every change so far (the changes up to now folded in first).
    /// Fails the test if a change was lost: a peak that missed some states proves nothing.
    pub fn get(&self) -> usize {
        self.changes.catch_up();
        *lock(&self.peak)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The namespace of [`ClassProbe`]'s claims: tests leave its claims, patches and Events out
/// of what they count.
pub const PROBE_NAMESPACE: &str = "barrier-probe";

/// Evidence that the default class controller has handled every change its view published
/// before a moment: its loop takes the view's changes one at a time, in order, so once it
/// has acted on a claim created after that moment (given it the class its namespace names,
/// or told it with an Event why not), it has handled everything published before.
pub struct ClassProbe {
    api: FakeApiServer,
    sent: usize,
}

impl ClassProbe {
    /// A StorageClass (not a default) and a namespace naming it as its default, for
    /// [`Self::looked`].
    pub fn install(api: &FakeApiServer) -> Self {
        api.put_object(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "csi.example.com",
            "metadata": {"name": PROBE_NAMESPACE},
        }));
        api.put_object(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": PROBE_NAMESPACE, "annotations": {
                stateful_admission::names::DEFAULT_STORAGE_CLASS: PROBE_NAMESPACE}},
        }));
        Self {
            api: api.clone(),
            sent: 0,
        }
    }

    /// Creates a class-less claim in the probe's namespace and waits until the controller
    /// has acted on it. Take the moment of interest first (in the fake, and in the
    /// controller's view where it matters). Fails the test after [`BARRIER_WAIT`].
    pub async fn looked(&mut self) {
        self.sent += 1;
        let name = format!("probe-{}", self.sent);
        self.api.put_object(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": PROBE_NAMESPACE},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"},
        }));
        let api = &self.api;
        let acted = || {
            let classed = api
                .get_object(
                    ResourceType::of::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(),
                    PROBE_NAMESPACE,
                    &name,
                )
                .is_some_and(|c| c["spec"]["storageClassName"].is_string());
            classed
                || api
                    .list_objects(ResourceType::of::<k8s_openapi::api::events::v1::Event>())
                    .iter()
                    .any(|e| {
                        e["regarding"]["namespace"] == PROBE_NAMESPACE
                            && e["regarding"]["name"] == name.as_str()
                    })
        };
        assert!(
            eventually(BARRIER_WAIT, acted).await,
            "the default class controller did not act on {PROBE_NAMESPACE}/{name} within {BARRIER_WAIT:?}"
        );
    }

    /// Probe claims sent so far (each one attempt of the controller's, where it writes).
    pub fn sent(&self) -> usize {
        self.sent
    }
}
