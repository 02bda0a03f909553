//! Retroactive default StorageClass for classless, unbound claims (KEP-3333).
//!
//! One loop over the shared cluster view: the default is picked from its classes and
//! namespaces with the admission rule's
//! [`pick_default_class`](crate::admission::claim::default_class::pick_default_class), and
//! an index keeps only the candidate claims — classless, unbound claims, usually a handful —
//! kept current from the view's change feed. Each change is handled after the view took it
//! in, one at a time, so whichever of "claim appears" and "default appears" comes second sees
//! the other: a claim gets the default as soon as both exist, without waiting for the
//! resync. The resync walks the candidates again, as the upstream PV controller does.
//!
//! What the controller remembers per candidate is the resourceVersion it last tried: a
//! claim is patched at most once per version, so a refusal (an apiserver before 1.25
//! rejects the change) is reported once and retried only when the claim itself changes.
//! That memory lives in the index entry and goes with it, so it is bounded by the number
//! of candidates.

pub(crate) mod plan;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::events::{Event, EventType};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::action::{Kind as Kind2, Report, Request, Target, Verb, Write};
use super::context::Ctx;
use super::executor::Outcome as Outcome2;
use crate::admission::claim::default_class::{DefaultClass, DefaultSource};
use crate::capabilities::{Name, Value};
use crate::cluster::{Change, ClusterView, Kind};
pub(crate) use plan::{Outcome, Plan};

/// The feature, with the KEP's metrics: attempts, and failed attempts (successes are the
/// difference).
#[derive(Debug, Default)]
pub(crate) struct RetroactiveDefaultClass {
    attempts: Counter,
    errors: Counter,
}

impl RetroactiveDefaultClass {
    pub(crate) fn register(registry: &mut Registry) -> Self {
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

/// Candidates by namespace and name, kept from the view's change feed.
#[derive(Default)]
struct Candidates {
    index: HashMap<Key, Entry>,
}

impl Candidates {
    /// Files `claim` in `index` if it is a candidate, keeping the memory of earlier
    /// attempts on the same object (same uid).
    fn file(
        index: &mut HashMap<Key, Entry>,
        key: Key,
        previous: Option<Entry>,
        claim: Arc<PersistentVolumeClaim>,
    ) -> bool {
        if !plan::qualifies(&claim) {
            return false;
        }
        let same_object = previous
            .as_ref()
            .is_some_and(|p| p.claim.metadata.uid == claim.metadata.uid);
        let (tried, reported) = match previous {
            Some(p) if same_object => (p.tried, p.reported),
            _ => (None, false),
        };
        index.insert(
            key,
            Entry {
                claim,
                tried,
                reported,
            },
        );
        true
    }

    /// Takes in the view's current copy of one claim (or its absence).
    fn refresh(&mut self, view: &ClusterView, key: Key) -> Trigger {
        let previous = self.index.remove(&key);
        let filed = view
            .claim(&key.0, &key.1)
            .is_some_and(|claim| Self::file(&mut self.index, key.clone(), previous, claim));
        if filed {
            Trigger::Claim(key)
        } else {
            Trigger::Nothing
        }
    }

    /// Rebuilds the index from every claim of the view (at start and after the claims were
    /// listed again), keeping what was tried on claims that are still candidates.
    fn rebuild(&mut self, view: &ClusterView) {
        let mut fresh = HashMap::new();
        for key in view.claim_keys() {
            if let Some(claim) = view.claim(&key.0, &key.1) {
                let previous = self.index.remove(&key);
                Self::file(&mut fresh, key, previous, claim);
            }
        }
        self.index = fresh;
    }
}

/// Which candidates to look at after a change.
#[derive(Debug, PartialEq, Eq)]
enum Trigger {
    Nothing,
    Claim(Key),
    Namespace(String),
    All,
}

/// Runs the claim controller until `stop`, from the view (synced before it starts) and its
/// change feed.
impl RetroactiveDefaultClass {
    /// Runs the feature until `stop`.
    pub(crate) async fn run(&self, ctx: Arc<Ctx>, stop: CancellationToken) {
        run(self, ctx, stop).await;
    }
}

async fn run(metrics: &RetroactiveDefaultClass, ctx: Arc<Ctx>, stop: CancellationToken) {
    // Subscribed before the first scan: whatever changes after it is heard of.
    let mut changes = ctx.view.subscribe();
    let mut worker = Worker {
        metrics,
        ctx: &ctx,
        view: ctx.view.clone(),
        candidates: Candidates::default(),
        retry_at: None,
    };
    worker.candidates.rebuild(&worker.view);
    worker.handle(Trigger::All).await;
    let mut resync =
        tokio::time::interval_at(Instant::now() + ctx.config.resync, ctx.config.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let retry_at = worker.retry_at;
        let trigger = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = ctx.exec.closed() => return,
            change = changes.recv() => match change {
                None => return,
                Some(change) => worker.absorb(change),
            },
            () = sleep_until(retry_at), if retry_at.is_some() => {
                worker.retry_at = None;
                Trigger::All
            }
            _ = resync.tick() => Trigger::All,
        };
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
    metrics: &'a RetroactiveDefaultClass,
    ctx: &'a Ctx,
    view: ClusterView,
    candidates: Candidates,
    retry_at: Option<Instant>,
}

impl Worker<'_> {
    fn absorb(&mut self, change: Change) -> Trigger {
        match change {
            Change::Claim { namespace, name } => {
                self.candidates.refresh(&self.view, (namespace, name))
            }
            Change::Relisted(Kind::Claim) => {
                self.candidates.rebuild(&self.view);
                Trigger::All
            }
            // A watch back after failing: what failed meanwhile is tried again now.
            Change::Resumed(Kind::Claim | Kind::StorageClass | Kind::Namespace) => Trigger::All,
            // Any class change may change the cluster default for every namespace.
            Change::StorageClass(_) | Change::Relisted(Kind::StorageClass | Kind::Namespace) => {
                Trigger::All
            }
            Change::Namespace(namespace) => Trigger::Namespace(namespace),
            Change::StatefulSet { .. }
            | Change::Pod { .. }
            | Change::Journal { .. }
            | Change::Relisted(_)
            | Change::Resumed(_) => Trigger::Nothing,
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
            // The fence closed: nothing more is written this term.
            if self.ctx.exec.is_closed() {
                return;
            }
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
        let metrics = self.metrics;
        // Where the apiserver is known to refuse it (KEP-3333's gate off or absent), nothing is
        // sent: the claim is told once why it keeps no class.
        let capabilities = self.ctx.capabilities.get();
        let known = capabilities.get(Name::RetroactiveDefaultClass);
        if known.value == Some(Value::Refused) {
            self.tried(key, &resource_version);
            let message = format!(
                "the apiserver refuses to give a class-less claim a class ({}: {})",
                known.how.source(),
                known.how.detail()
            );
            // A refusal the probe predicted is a failed assignment all the same (KEP-3333's
            // `retroactive_storageclass_errors_total` tells that the feature does not work
            // here), counted once per claim as its Event is, as an attempt and an error so
            // that successes stay the difference of the two.
            if self
                .report_rejected(key, &claim, &class, namespace, &message)
                .await
            {
                metrics.attempts.inc();
                metrics.errors.inc();
            }
            return;
        }
        let write = assign(&claim, &class, &resource_version);
        let result = match self.ctx.exec.write(&write).await {
            Ok(Outcome2::Observed) => {
                // Reported; the claim is looked at again when it changes.
                self.tried(key, &resource_version);
                return;
            }
            Ok(Outcome2::Done(_)) => Ok(()),
            // Not sent: no attempt to count; the next term looks again.
            Err(e) if super::fence::is_fenced(&e) => return,
            Err(e) => Err(e),
        };
        metrics.attempts.inc();
        let (outcome, message) = match &result {
            Ok(()) => (Outcome::Assigned, String::new()),
            Err(kube::Error::Api(status)) => (plan::classify(status.code), status.message.clone()),
            Err(error) => (Outcome::Transient, error.to_string()),
        };
        if outcome != Outcome::Assigned {
            metrics.errors.inc();
        }
        match outcome {
            Outcome::Assigned => {
                tracing::info!(%namespace, %name, class = %class.name, "assigned the default StorageClass");
                self.tried(key, &resource_version);
                self.ctx.capabilities.evidence(
                    Name::RetroactiveDefaultClass,
                    Value::Accepted,
                    format!("claim {namespace}/{name} was given class {:?}", class.name),
                );
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
                if plan::is_old_apiserver_refusal(&message) {
                    self.ctx.capabilities.evidence(
                        Name::RetroactiveDefaultClass,
                        Value::Refused,
                        format!(
                            "claim {namespace}/{name}: {}",
                            crate::text::clip(&message, 200)
                        ),
                    );
                }
                self.report_rejected(key, &claim, &class, namespace, &message)
                    .await;
            }
            Outcome::Transient => {
                tracing::warn!(%namespace, %name, %message, "assigning the default StorageClass failed; retrying");
                let at = Instant::now() + RETRY_AFTER;
                self.retry_at = Some(self.retry_at.map_or(at, |r| r.min(at)));
            }
        }
    }

    /// The claim's one `DefaultStorageClassRejected` Warning (until the claim changes); whether
    /// this was that one.
    async fn report_rejected(
        &mut self,
        key: &Key,
        claim: &PersistentVolumeClaim,
        class: &DefaultClass,
        namespace: &str,
        message: &str,
    ) -> bool {
        let first = self
            .candidates
            .index
            .get_mut(key)
            .is_some_and(|e| !std::mem::replace(&mut e.reported, true));
        if !first {
            return false;
        }
        let hint = if plan::is_old_apiserver_refusal(message)
            || message.starts_with("the apiserver refuses")
        {
            " (this apiserver does not let a class-less claim be given a class after creation, as Kubernetes before 1.25 did not; re-create the claim to use the class)"
        } else {
            ""
        };
        let note = format!(
            "Could not assign StorageClass {:?} ({}): {message}{hint}",
            class.name,
            source_text(class, namespace)
        );
        self.ctx
            .event(
                claim,
                Event {
                    type_: EventType::Warning,
                    reason: "DefaultStorageClassRejected".to_owned(),
                    note: Some(note),
                    action: "AssignStorageClass".to_owned(),
                    secondary: None,
                },
            )
            .await;
        true
    }

    fn tried(&mut self, key: &Key, resource_version: &str) {
        if let Some(entry) = self.candidates.index.get_mut(key) {
            entry.tried = Some(resource_version.to_owned());
        }
    }
}

/// Where the default came from, for Event notes.
fn source_text(class: &DefaultClass, namespace: &str) -> String {
    match class.source {
        DefaultSource::Namespace => format!("the default of namespace {namespace:?}"),
        DefaultSource::Cluster => "the cluster default".to_owned(),
    }
}

/// The write that gives `claim` (as the view holds it at `resource_version`) the default
/// `class`, with the Event it publishes once done.
pub(crate) fn assign(
    claim: &PersistentVolumeClaim,
    class: &DefaultClass,
    resource_version: &str,
) -> Write {
    let target = Target::of(Kind2::Claim, &claim.metadata);
    let namespace = target.namespace.clone();
    let note = format!(
        "Assigned StorageClass {:?} ({}) to the claim created without one",
        class.name,
        source_text(class, &namespace)
    );
    Write::new(
        Verb::AssignStorageClass,
        target.clone(),
        Request::Patch(plan::patch_body(&class.name, resource_version)),
        format!(
            "set spec.storageClassName to {:?} ({})",
            class.name,
            source_text(class, &namespace)
        ),
    )
    .on_done(Report::normal(
        target.reference(),
        "DefaultStorageClassAssigned",
        "AssignStorageClass",
        note,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::cluster::ClusterWriters;
    use crate::cluster::lite::ClaimLite;
    use kube::runtime::watcher::Event;

    #[test]
    fn an_assignment_is_a_precondition_patch_with_its_event() {
        let claim: PersistentVolumeClaim =
            serde_json::from_value(json!({"metadata": {"name": "scratch", "namespace": "ns",
                "uid": "c1", "resourceVersion": "12"}}))
            .expect("claim");
        let class = DefaultClass {
            name: "gold".into(),
            source: DefaultSource::Namespace,
        };
        let write = assign(&claim, &class, "12");
        assert_eq!(write.verb, Verb::AssignStorageClass);
        assert_eq!(write.target.key(), "persistentvolumeclaims/ns/scratch");
        assert_eq!(
            write.request,
            Request::Patch(json!({"metadata": {"resourceVersion": "12"},
                                  "spec": {"storageClassName": "gold"}}))
        );
        assert!(
            write.summary.contains("the default of namespace \"ns\""),
            "{}",
            write.summary
        );
        let done: Vec<_> = write
            .on_done
            .iter()
            .map(|r| (r.reason.as_str(), r.regarding.uid.as_deref()))
            .collect();
        assert_eq!(done, [("DefaultStorageClassAssigned", Some("c1"))]);
        let cluster = DefaultClass {
            source: DefaultSource::Cluster,
            ..class
        };
        assert!(
            assign(&claim, &cluster, "12").on_done[0]
                .note
                .contains("the cluster default")
        );
    }

    fn claim(name: &str, uid: &str, rv: &str, spec: serde_json::Value) -> ClaimLite {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv},
            "spec": spec, "status": {"phase": "Pending"},
        }))
        .expect("a claim")
    }

    /// Applies `event` to the view and hands the change it published to the index.
    fn absorb(
        c: &mut Candidates,
        writers: &mut ClusterWriters,
        changes: &mut tokio::sync::mpsc::UnboundedReceiver<Change>,
        event: Event<ClaimLite>,
    ) -> Trigger {
        writers.apply_claim(event);
        let view = writers.view();
        match changes.try_recv() {
            Ok(Change::Claim { namespace, name }) => c.refresh(&view, (namespace, name)),
            Ok(Change::Relisted(Kind::Claim)) => {
                c.rebuild(&view);
                Trigger::All
            }
            Ok(other) => panic!("unexpected change {other:?}"),
            Err(_) => Trigger::Nothing,
        }
    }

    #[test]
    fn the_index_keeps_only_candidates_and_their_memory() {
        let mut writers = ClusterWriters::new();
        let mut changes = writers.view().subscribe();
        let mut c = Candidates::default();
        let mut absorb = |c: &mut Candidates, e| absorb(c, &mut writers, &mut changes, e);
        assert_eq!(absorb(&mut c, Event::Init), Trigger::Nothing);
        absorb(&mut c, Event::InitApply(claim("a", "u-a", "1", json!({}))));
        absorb(
            &mut c,
            Event::InitApply(claim("b", "u-b", "1", json!({"storageClassName": "x"}))),
        );
        assert_eq!(absorb(&mut c, Event::InitDone), Trigger::All);
        assert_eq!(c.index.len(), 1, "only the classless claim is kept");

        let key = ("ns".to_owned(), "a".to_owned());
        if let Some(e) = c.index.get_mut(&key) {
            e.tried = Some("1".to_owned());
            e.reported = true;
        }
        // A change to the same claim keeps what was tried.
        assert_eq!(
            absorb(&mut c, Event::Apply(claim("a", "u-a", "2", json!({})))),
            Trigger::Claim(key.clone())
        );
        assert_eq!(c.index[&key].tried.as_deref(), Some("1"));
        assert_eq!(
            c.index[&key].claim.metadata.resource_version.as_deref(),
            Some("2"),
            "the index holds the view's copy"
        );
        assert!(c.index[&key].reported);
        // A relist keeps it too.
        absorb(&mut c, Event::Init);
        absorb(&mut c, Event::InitApply(claim("a", "u-a", "2", json!({}))));
        absorb(&mut c, Event::InitDone);
        assert!(c.index[&key].reported);
        // A new claim under the same name starts afresh.
        absorb(&mut c, Event::Apply(claim("a", "u-new", "3", json!({}))));
        assert_eq!(c.index[&key].tried, None);
        assert!(!c.index[&key].reported);
        // Getting a class, or going away, drops the entry.
        assert_eq!(
            absorb(
                &mut c,
                Event::Apply(claim(
                    "a",
                    "u-new",
                    "4",
                    json!({"storageClassName": "gold"})
                ))
            ),
            Trigger::Nothing
        );
        assert!(c.index.is_empty());
        absorb(&mut c, Event::Apply(claim("z", "u-z", "5", json!({}))));
        assert_eq!(c.index.len(), 1);
        absorb(&mut c, Event::Delete(claim("z", "u-z", "5", json!({}))));
        assert!(c.index.is_empty());
    }
}
