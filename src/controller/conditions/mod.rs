//! `Available` and `Progressing` conditions of StatefulSets (KEP-2804), with a progress
//! deadline (`stateful-admission.io/progress-deadline-seconds`, default 600).
//!
//! The plan ([`progress`], the rollout model's) and what of it goes out when ([`pace`]) are
//! pure; this module reads the set, writes what [`pace`] lets out, remembers what it told, and
//! says when to look again. The built-in StatefulSet controller rebuilds `.status` on each of
//! its writes and so drops these conditions; its write reaches the set watch, whose reconcile
//! puts them back only where what they say changed (one status patch, at most one per set per
//! `--statefulset-conditions-interval`), and a reconcile that finds them present and saying the
//! same writes nothing. The progress record goes to an annotation, which status writes do not
//! touch.

pub(crate) mod pace;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use serde_json::json;

use super::action::{Action, After, Kind, Report, Request, Target, Verb, Write};
use super::context::{Ctx, Error};
use super::executor::{self, Mode, Ran};
use super::snapshot::SetSnapshot;
use crate::cluster::ClusterView;
use crate::names;
use crate::rollout::progress;
pub(crate) use crate::rollout::progress::{Decision, Phase, Progress, Remembered};

/// The feature: its metrics, the sets past their deadline now, and what it remembers of sets
/// without a progress record.
#[derive(Debug, Default)]
pub(crate) struct Conditions {
    condition_writes: Counter,
    progress_writes: Counter,
    deadlines_exceeded: Counter,
    past_deadline: Arc<PastDeadline>,
    memory: Memory,
}

/// The StatefulSets whose rollout is past its progress deadline now (`Progressing=False`), as
/// this controller last decided. The counter of deadlines exceeded tells only that it
/// happened; this tells how many are still stuck. Deleted sets are never reconciled, so the
/// count is taken at scrape time against the cluster view: a set gone from it no longer counts
/// and is forgotten (one re-created under the same name is reconciled, and so noted afresh).
/// Only stalled sets are kept.
#[derive(Default)]
pub(crate) struct PastDeadline(Mutex<Stalled>);

#[derive(Default)]
struct Stalled {
    /// (namespace, name) of each stalled set.
    sets: HashSet<(String, String)>,
    /// The view the sets are checked against; the first note brings it.
    view: Option<ClusterView>,
}

impl Stalled {
    fn prune(&mut self) {
        if let Some(view) = &self.view {
            self.sets
                .retain(|(namespace, name)| view.has_stateful_set(namespace, name));
        }
    }
}

impl PastDeadline {
    const NAME: &str = "statefulsets_past_progress_deadline";
    const HELP: &str = "StatefulSets whose rollout is past its progress deadline now (Progressing=False, ProgressDeadlineExceeded); reported by the leader";

    fn state(&self) -> std::sync::MutexGuard<'_, Stalled> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records whether set `namespace/name` is past its deadline.
    pub(crate) fn note(&self, view: &ClusterView, namespace: &str, name: &str, past: bool) {
        let mut state = self.state();
        let key = (namespace.to_owned(), name.to_owned());
        if !past {
            state.sets.remove(&key);
            return;
        }
        if state.view.is_none() {
            state.view = Some(view.clone());
        }
        if state.sets.insert(key) {
            // A new entry: drop those of sets gone meanwhile, so the memory stays bounded by
            // the stalled sets that exist even when nobody scrapes.
            state.prune();
        }
    }

    /// Forgets every set (leadership lost: another replica reports them now).
    pub(crate) fn forget_all(&self) {
        self.state().sets.clear();
    }

    /// Stalled sets that still exist.
    pub(crate) fn count(&self) -> usize {
        let mut state = self.state();
        state.prune();
        state.sets.len()
    }
}

impl std::fmt::Debug for PastDeadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PastDeadline")
            .field("sets", &self.state().sets.len())
            .finish()
    }
}

impl Collector for PastDeadline {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let gauge = ConstGauge::new(i64::try_from(self.count()).unwrap_or(i64::MAX));
        let metric =
            encoder.encode_descriptor(Self::NAME, Self::HELP, None, gauge.metric_type())?;
        gauge.encode(metric)
    }
}

/// What this process knows of each set it has looked at in this leadership term ([`Recalled`]),
/// by namespace and name (with the set's uid, so that a re-created set starts afresh).
/// Bounded by the sets that exist: entries of sets gone from the view are dropped whenever
/// the map has doubled since the last sweep. Held compactly (a set's key and uid hashed, times
/// as seconds, what the conditions said as a fingerprint): it has an entry for every set of a
/// cluster.
#[derive(Default)]
pub(crate) struct Memory(Mutex<MemoryState>);

#[derive(Default)]
struct MemoryState {
    sets: HashMap<u64, Kept>,
    sweep_at: usize,
    hasher: std::hash::RandomState,
}

/// One set's [`Recalled`], compact.
struct Kept {
    uid: u64,
    available: Option<(Status, i64)>,
    progressing: Option<(Status, i64)>,
    completed: Option<Box<str>>,
    told: Option<u64>,
    written_at: Option<Instant>,
    held: Option<Box<Progress>>,
}

/// What this process knows of a set beyond the object.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Recalled {
    /// Transition times and the rollout last seen complete, for the plan.
    pub remembered: Remembered,
    /// What our conditions said when last written or found on the set ([`progress::said`]).
    pub told: Option<u64>,
    /// When this process last sent the set's conditions (written or refused).
    pub written_at: Option<Instant>,
    /// A record decided at first sight and not written yet ([`pace`]).
    pub held: Option<Progress>,
}

/// A condition's status, as a byte.
#[derive(Clone, Copy)]
enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    fn of(text: &str) -> Self {
        match text {
            "True" => Self::True,
            "False" => Self::False,
            _ => Self::Unknown,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

fn keep(t: &progress::Transition) -> Option<(Status, i64)> {
    let since: jiff::Timestamp = t.since.parse().ok()?;
    Some((Status::of(&t.status), since.as_second()))
}

fn unkeep(t: Option<(Status, i64)>) -> Option<progress::Transition> {
    let (status, since) = t?;
    Some(progress::Transition {
        status: status.text().to_owned(),
        since: progress::format_time(jiff::Timestamp::from_second(since).ok()?),
    })
}

impl MemoryState {
    fn key(&self, namespace: &str, name: &str) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one((namespace, name))
    }

    fn uid(&self, uid: Option<&str>) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(uid)
    }
}

impl Memory {
    fn state(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What was remembered of this set (this uid).
    pub(crate) fn get(&self, namespace: &str, name: &str, uid: Option<&str>) -> Option<Recalled> {
        let state = self.state();
        let kept = state.sets.get(&state.key(namespace, name))?;
        (kept.uid == state.uid(uid)).then(|| Recalled {
            remembered: Remembered {
                available: unkeep(kept.available),
                progressing: unkeep(kept.progressing),
                completed: kept.completed.as_deref().map(str::to_owned),
            },
            told: kept.told,
            written_at: kept.written_at,
            held: kept.held.as_deref().cloned(),
        })
    }

    /// Remembers this set; `None` forgets it.
    pub(crate) fn put(
        &self,
        view: &ClusterView,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        recalled: Option<Recalled>,
    ) {
        let mut state = self.state();
        let key = state.key(namespace, name);
        let Some(recalled) = recalled else {
            state.sets.remove(&key);
            return;
        };
        let remembered = recalled.remembered;
        let kept = Kept {
            uid: state.uid(uid),
            available: remembered.available.as_ref().and_then(keep),
            progressing: remembered.progressing.as_ref().and_then(keep),
            completed: remembered.completed.map(String::into_boxed_str),
            told: recalled.told,
            written_at: recalled.written_at,
            held: recalled.held.map(Box::new),
        };
        state.sets.insert(key, kept);
        if state.sets.len() >= state.sweep_at {
            let live: std::collections::HashSet<u64> = view
                .stateful_set_keys()
                .iter()
                .map(|(namespace, name)| state.key(namespace, name))
                .collect();
            state.sets.retain(|key, _| live.contains(key));
            state.sets.shrink_to_fit();
            state.sweep_at = (state.sets.len() * 2).max(1024);
        }
    }

    /// Forgets every set.
    pub(crate) fn clear(&self) {
        let mut state = self.state();
        state.sets = HashMap::new();
        state.sweep_at = 0;
    }

    /// How many sets are remembered.
    pub(crate) fn len(&self) -> usize {
        self.state().sets.len()
    }
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("sets", &self.len()).finish()
    }
}

impl Conditions {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "statefulset_condition_writes",
            "Status patches writing the Available and Progressing conditions",
            metrics.condition_writes.clone(),
        );
        registry.register(
            "statefulset_progress_record_writes",
            "Writes of the progress record annotation",
            metrics.progress_writes.clone(),
        );
        registry.register(
            "statefulset_progress_deadline_exceeded",
            "Rollouts that made no progress within their deadline",
            metrics.deadlines_exceeded.clone(),
        );
        registry.register_collector(Box::new(metrics.past_deadline.clone()));
        metrics
    }

    /// Leadership gained or lost: what only the leader knows starts over (another replica
    /// reports the stalled sets now; transition times are remembered afresh).
    pub(crate) fn new_term(&self) {
        self.past_deadline.forget_all();
        self.memory.clear();
    }

    /// One reconcile step for `snapshot`; returns when to look again.
    pub(crate) async fn sync(
        &self,
        snapshot: &SetSnapshot,
        ctx: &Ctx,
    ) -> Result<Option<Duration>, Error> {
        sync(self, snapshot, ctx).await
    }
}

async fn sync(
    metrics: &Conditions,
    snapshot: &SetSnapshot,
    ctx: &Ctx,
) -> Result<Option<Duration>, Error> {
    let set = &snapshot.set;
    let (namespace, name) = (&snapshot.namespace, &snapshot.name);
    let past_deadline = |decision: &Decision| {
        let past = matches!(decision.phase, Phase::Stalled(_));
        metrics.past_deadline.note(&ctx.view, namespace, name, past);
    };
    if set.metadata.deletion_timestamp.is_some() || ctx.view.namespace_ignored(namespace) {
        metrics
            .past_deadline
            .note(&ctx.view, namespace, name, false);
        return Ok(None);
    }
    let now = jiff::Timestamp::now();
    let clock = Instant::now();
    let interval = ctx.config.conditions_interval;
    let recalled = metrics
        .memory
        .get(namespace, name, set.metadata.uid.as_deref());
    let remember = |set: &StatefulSet, step: &Step, written: Written| {
        let recalled = step.recall(set, recalled.as_ref(), written, clock);
        metrics.memory.put(
            &ctx.view,
            namespace,
            name,
            set.metadata.uid.as_deref(),
            Some(recalled),
        );
    };
    let first = Step::of(set, recalled.as_ref(), now, clock, interval);
    past_deadline(&first.decision);
    if !first.out.writes() {
        remember(set, &first, Written::default());
        return Ok(first.look_again());
    }
    // Our last write of the set is not in the view yet: its watch event brings the next look.
    if snapshot.is_stale(&ctx.exec, Kind::StatefulSet) {
        return Ok(first.look_again());
    }
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), namespace);
    // The view can lag behind writes of others too (the built-in controller's status write
    // reaches it after the trigger): decide again on a fresh read, so that a stale copy costs
    // a GET rather than a refused patch.
    // In observe mode nothing is written, so the view's copy is good enough and a resync
    // of every set costs no read.
    let set = if ctx.exec.mode() == Mode::Observe {
        StatefulSet::clone(set)
    } else {
        match api.get_opt(name).await? {
            Some(fresh) if fresh.metadata.uid == set.metadata.uid => fresh,
            _ => return Ok(None),
        }
    };
    let step = Step::of(&set, recalled.as_ref(), now, clock, interval);
    past_deadline(&step.decision);
    let actions = actions(&set, &step.sending())?;
    let ran = ctx.exec.run(&actions).await;
    let mut written = Written::default();
    let mut conflict = false;
    for (action, ran) in actions.iter().zip(ran) {
        let Action::Write(write) = action else {
            continue;
        };
        if write.verb == Verb::WriteConditions && matches!(ran, Ran::Written(_)) {
            written.conditions_sent = true;
        }
        match ran {
            Ran::Written(Ok(outcome)) if outcome.is_done() => match write.verb {
                Verb::WriteProgress => {
                    written.record = true;
                    metrics.progress_writes.inc();
                    if step.decision.deadline_exceeded {
                        metrics.deadlines_exceeded.inc();
                        tracing::warn!(namespace = %namespace, name = %name, "progress deadline exceeded");
                    }
                }
                _ => {
                    written.conditions = true;
                    metrics.condition_writes.inc();
                }
            },
            // Gone: nothing more to do.
            Ran::Written(Err(e)) if executor::code(&e) == Some(404) => return Ok(None),
            // Computed from a set that moved on (the built-in controller's status write landed
            // first).
            Ran::Written(Err(e)) if executor::code(&e) == Some(409) => conflict = true,
            Ran::Written(Err(e)) => return Err(e.into()),
            // Reported, not written (observe mode), or not sent: nothing to remember.
            _ => {}
        }
    }
    remember(&set, &step, written);
    if conflict {
        // Decided again from a fresh read once the interval is over: the newer version's
        // watch event may have been handled before this answer came, and a refused write
        // counts against the interval as a written one does (it is a request all the same).
        return Ok(Some(interval.max(RETRY_AFTER_CONFLICT)));
    }
    Ok(step.look_again())
}

/// The least wait before a write refused for a newer version is decided again.
const RETRY_AFTER_CONFLICT: Duration = Duration::from_millis(200);

/// What went out of a [`Step`].
#[derive(Debug, Clone, Copy, Default)]
struct Written {
    /// The record was written (or removed).
    record: bool,
    /// The conditions were written.
    conditions: bool,
    /// The conditions were sent, written or refused: the interval counts from it.
    conditions_sent: bool,
}

/// One look at a set: what the plan decides and what of it goes out now.
struct Step {
    decision: Decision,
    out: pace::Outgoing,
}

impl Step {
    fn of(
        set: &StatefulSet,
        recalled: Option<&Recalled>,
        now: jiff::Timestamp,
        clock: Instant,
        interval: Duration,
    ) -> Self {
        let existing = conditions_of(set);
        let record_on_set = set
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(names::PROGRESS));
        // A record held since the first sight counts as the set's until one is on it.
        let recorded =
            progress::read_progress(set).or_else(|| recalled.and_then(|r| r.held.clone()));
        let decision = progress::plan_remembering(
            &progress::observe(set),
            existing,
            recorded.as_ref(),
            recalled.map(|r| &r.remembered),
            now,
        );
        let known = pace::Known {
            record_on_set,
            first_sight: recalled.is_none(),
            told: recalled.and_then(|r| r.told),
            since_write: recalled
                .and_then(|r| r.written_at)
                .map(|at| clock.saturating_duration_since(at)),
        };
        let out = pace::outgoing(&decision, existing, &known, interval);
        Self { decision, out }
    }

    /// The decision as far as it goes out now.
    fn sending(&self) -> Decision {
        use pace::{RecordStep, Send};
        Decision {
            progress: self
                .decision
                .progress
                .clone()
                .filter(|_| self.out.record == RecordStep::Write),
            remove_progress: self.out.record == RecordStep::Remove,
            conditions: self
                .decision
                .conditions
                .clone()
                .filter(|_| self.out.conditions == Send::Now),
            ..self.decision.clone()
        }
    }

    /// When to look again: the deadline of a rollout under way, or the end of the interval
    /// that holds back news.
    fn look_again(&self) -> Option<Duration> {
        match (self.decision.look_again, self.out.after()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What to remember of the set after this step, `written` of it having gone out.
    fn recall(
        &self,
        set: &StatefulSet,
        before: Option<&Recalled>,
        written: Written,
        clock: Instant,
    ) -> Recalled {
        use pace::RecordStep;
        let existing = conditions_of(set);
        let decision = &self.decision;
        // The conditions as they stand now, written or not: their transition times are ours.
        let now = decision.conditions.as_deref().unwrap_or(existing);
        let told = if written.conditions {
            decision.conditions.as_deref().and_then(progress::said)
        } else {
            progress::said(existing).or_else(|| before.and_then(|b| b.told))
        };
        let held = match self.out.record {
            RecordStep::Hold => decision.progress.clone(),
            RecordStep::Forget => None,
            RecordStep::Write | RecordStep::Remove if written.record => None,
            _ => before.and_then(|b| b.held.clone()),
        };
        Recalled {
            remembered: Remembered {
                completed: matches!(decision.phase, Phase::Complete)
                    .then(|| progress::observe(set).rollout),
                ..Remembered::of(now)
            },
            told,
            written_at: if written.conditions_sent {
                Some(clock)
            } else {
                before.and_then(|b| b.written_at)
            },
            held,
        }
    }
}

fn conditions_of(set: &StatefulSet) -> &[k8s_openapi::api::apps::v1::StatefulSetCondition] {
    set.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[])
}

/// What a decision writes, each with `set`'s resourceVersion as its precondition: the
/// progress record (or its removal) with the deadline warning, then the conditions.
pub(crate) fn actions(set: &StatefulSet, decision: &Decision) -> Result<Vec<Action>, Error> {
    let mut actions = Vec::with_capacity(2);
    let target = Target::of(Kind::StatefulSet, &set.metadata);
    let resource_version = set.metadata.resource_version.clone();
    if decision.progress.is_some() || decision.remove_progress {
        // `null` removes the annotation (JSON merge patch).
        let (text, summary) = match &decision.progress {
            Some(progress) => {
                let text = serde_json::to_string(progress)
                    .map_err(|e| Error::Invalid(format!("progress record: {e}")))?;
                let summary = format!("set annotation {}: {text}", names::PROGRESS);
                (serde_json::Value::String(text), summary)
            }
            None => (
                serde_json::Value::Null,
                format!(
                    "remove annotation {} (the rollout is complete)",
                    names::PROGRESS
                ),
            ),
        };
        let body = json!({"metadata": {
            "resourceVersion": resource_version,
            "annotations": {names::PROGRESS: text},
        }});
        let mut write = Write::new(
            Verb::WriteProgress,
            target.clone(),
            Request::Patch(body),
            summary,
        )
        .expect()
        .expected(&[404, 409]);
        // The record holds the transition, so this is said once however the rest goes.
        if decision.deadline_exceeded {
            let existing = set
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or(&[]);
            let note = decision
                .conditions
                .as_deref()
                .unwrap_or(existing)
                .iter()
                .find(|c| c.type_.as_deref() == Some(progress::PROGRESSING))
                .and_then(|c| c.message.clone())
                .unwrap_or_default();
            write = write.on_done(Report::warning(
                target.reference(),
                progress::reason::PROGRESS_DEADLINE_EXCEEDED,
                "TrackRollout",
                note,
            ));
        }
        actions.push(Action::Write(write));
    }
    if let Some(conditions) = &decision.conditions {
        let body = json!({
            "metadata": {"resourceVersion": resource_version},
            "status": {"conditions": conditions},
        });
        let summary = conditions
            .iter()
            .map(|c| {
                format!(
                    "{}={} ({})",
                    c.type_.as_deref().unwrap_or_default(),
                    c.status.as_deref().unwrap_or_default(),
                    c.reason.as_deref().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        // After a record write, at the version that write produced (the record moved the
        // set's resourceVersion); not at all if it did not happen.
        let after = if actions.is_empty() {
            After::Anything
        } else {
            After::DoneVersion
        };
        actions.push(Action::Write(
            Write::new(
                Verb::WriteConditions,
                target,
                Request::PatchStatus(body),
                format!("set status.conditions: {summary}"),
            )
            .expect()
            .expected(&[404, 409])
            .after(after),
        ));
    }
    Ok(actions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterObjects, ClusterWriters};
    use k8s_openapi::api::apps::v1::StatefulSetCondition;

    fn set(namespace: &str, name: &str) -> crate::cluster::lite::SetLite {
        serde_json::from_value(json!({
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"selector": {}, "template": {}, "serviceName": name},
        }))
        .expect("set")
    }

    fn sets(names: &[(&str, &str)]) -> ClusterObjects {
        ClusterObjects {
            stateful_sets: names.iter().map(|(ns, n)| set(ns, n)).collect(),
            ..ClusterObjects::default()
        }
    }

    fn scraped(registry: &Registry) -> Option<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
        text.lines()
            .find(|l| l.starts_with("statefulsets_past_progress_deadline "))
            .map(str::to_owned)
    }

    fn stalled_set() -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"namespace": "db", "name": "web", "uid": "u1", "resourceVersion": "7"},
            "spec": {"selector": {}, "template": {}, "serviceName": "web"},
        }))
        .expect("set")
    }

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> StatefulSetCondition {
        StatefulSetCondition {
            type_: Some(type_.to_owned()),
            status: Some(status.to_owned()),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_transition_time: None,
        }
    }

    #[test]
    fn a_decision_becomes_a_record_write_with_its_warning_then_the_conditions() {
        let set = stalled_set();
        let decision = Decision {
            phase: Phase::Stalled("1 of 3 updated".into()),
            conditions: Some(vec![
                condition("Available", "True", "MinimumReplicasAvailable", "ok"),
                condition(
                    progress::PROGRESSING,
                    "False",
                    "ProgressDeadlineExceeded",
                    "stuck at 1 of 3",
                ),
            ]),
            progress: Some(progress::Progress {
                rollout: "web-2".into(),
                complete: false,
                progress_at: "2026-11-24T00:00:00Z".into(),
                best: progress::Marks::default(),
                available: None,
                progressing: None,
            }),
            remove_progress: false,
            deadline_exceeded: true,
            steady: false,
            look_again: None,
        };
        let actions = actions(&set, &decision).expect("actions");
        let writes: Vec<&Write> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Write(w) => Some(w),
                Action::Report(_) => None,
            })
            .collect();
        assert_eq!(writes.len(), 2, "{actions:?}");
        let (record, conditions) = (writes[0], writes[1]);
        assert_eq!(record.verb, Verb::WriteProgress);
        assert!(record.expect && conditions.expect);
        assert_eq!(record.expected, [404, 409]);
        let Request::Patch(body) = &record.request else {
            panic!("{record:?}")
        };
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert!(
            body["metadata"]["annotations"][names::PROGRESS]
                .as_str()
                .is_some_and(|r| r.contains("web-2"))
        );
        let warned: Vec<_> = record
            .on_done
            .iter()
            .map(|r| (r.type_, r.reason.as_str(), r.note.as_str()))
            .collect();
        assert_eq!(
            warned,
            [(
                kube::runtime::events::EventType::Warning,
                "ProgressDeadlineExceeded",
                "stuck at 1 of 3"
            )]
        );
        assert_eq!(conditions.verb, Verb::WriteConditions);
        let Request::PatchStatus(body) = &conditions.request else {
            panic!("{conditions:?}")
        };
        assert_eq!(body["status"]["conditions"][1]["status"], "False");
        assert!(
            conditions
                .summary
                .contains("Progressing=False (ProgressDeadlineExceeded)")
        );

        // The chained precondition: the conditions follow the record's new version.
        assert_eq!(conditions.after, After::DoneVersion);
        let mut chained = conditions.clone();
        chained.precondition("8");
        assert_eq!(chained.target.resource_version.as_deref(), Some("8"));
        let Request::PatchStatus(body) = &chained.request else {
            panic!()
        };
        assert_eq!(body["metadata"]["resourceVersion"], "8");
    }

    #[test]
    fn a_settled_set_only_loses_its_record_and_an_unchanged_one_gets_nothing() {
        let set = stalled_set();
        let removal = Decision {
            phase: Phase::Complete,
            conditions: None,
            progress: None,
            remove_progress: true,
            deadline_exceeded: false,
            steady: true,
            look_again: None,
        };
        let planned = actions(&set, &removal).expect("actions");
        assert_eq!(planned.len(), 1);
        let Action::Write(w) = &planned[0] else {
            panic!("{planned:?}")
        };
        let Request::Patch(body) = &w.request else {
            panic!("{w:?}")
        };
        assert!(body["metadata"]["annotations"][names::PROGRESS].is_null());
        assert!(w.on_done.is_empty());
        let nothing = Decision {
            remove_progress: false,
            ..removal
        };
        assert!(actions(&set, &nothing).expect("actions").is_empty());
    }

    #[test]
    fn the_memory_gives_back_what_it_kept_for_the_same_set_and_is_swept_of_gone_ones() {
        let mut writers = ClusterWriters::new();
        writers.replace_all(sets(&[("db", "a"), ("db", "b")]));
        let view = writers.view();
        let memory = Memory::default();
        let recalled = Recalled {
            remembered: Remembered {
                available: Some(progress::Transition {
                    status: "True".into(),
                    since: "2026-01-01T00:00:05Z".into(),
                }),
                progressing: Some(progress::Transition {
                    status: "Unknown".into(),
                    since: "2026-01-01T00:00:07Z".into(),
                }),
                completed: Some("3/0123456789abcdef".into()),
            },
            told: Some(42),
            written_at: Some(Instant::now()),
            held: Some(progress::Progress {
                rollout: "3".into(),
                complete: true,
                progress_at: "2026-01-01T00:00:07Z".into(),
                best: progress::Marks::default(),
                available: None,
                progressing: None,
            }),
        };
        memory.put(&view, "db", "a", Some("u1"), Some(recalled.clone()));
        assert_eq!(memory.get("db", "a", Some("u1")), Some(recalled.clone()));
        assert_eq!(
            memory.get("db", "a", Some("u2")),
            None,
            "a re-created set starts afresh"
        );
        assert_eq!(memory.get("db", "b", Some("u1")), None);
        memory.put(&view, "db", "a", Some("u1"), None);
        assert_eq!(memory.get("db", "a", Some("u1")), None, "forgotten");
        // Past 1,024 entries the sets gone from the view are swept.
        for i in 0..1100 {
            memory.put(
                &view,
                "gone",
                &format!("s{i}"),
                None,
                Some(recalled.clone()),
            );
        }
        memory.put(&view, "db", "b", None, Some(recalled.clone()));
        assert!(memory.len() < 1100, "{}", memory.len());
        assert_eq!(memory.get("db", "b", None), Some(recalled));
    }

    #[test]
    fn past_deadline_counts_the_stalled_sets_that_still_exist() {
        let mut writers = ClusterWriters::new();
        writers.replace_all(sets(&[("db", "a"), ("db", "b"), ("web", "a")]));
        let view = writers.view();
        let mut registry = Registry::default();
        let metrics = Conditions::register(&mut registry);
        let gauge = &metrics.past_deadline;
        assert_eq!(
            scraped(&registry).as_deref(),
            Some("statefulsets_past_progress_deadline 0")
        );

        gauge.note(&view, "db", "a", true);
        gauge.note(&view, "db", "a", true);
        gauge.note(&view, "web", "a", true);
        gauge.note(&view, "db", "b", false);
        assert_eq!(gauge.count(), 2, "each set once, by namespace and name");
        assert_eq!(
            scraped(&registry).as_deref(),
            Some("statefulsets_past_progress_deadline 2")
        );

        // Progress again: no longer counted.
        gauge.note(&view, "web", "a", false);
        assert_eq!(gauge.count(), 1);

        // Deleted (no reconcile ever says so): gone from the view, gone from the count.
        writers.replace_all(sets(&[("db", "b"), ("web", "a")]));
        assert_eq!(
            scraped(&registry).as_deref(),
            Some("statefulsets_past_progress_deadline 0")
        );
        // and forgotten: its re-creation under the same name starts from nothing.
        writers.replace_all(sets(&[("db", "a"), ("db", "b"), ("web", "a")]));
        assert_eq!(gauge.count(), 0);
    }

    #[test]
    fn past_deadline_memory_keeps_only_sets_that_exist_even_without_scrapes() {
        let mut writers = ClusterWriters::new();
        let view = writers.view();
        let gauge = PastDeadline::default();
        for n in 0..1000 {
            let name = format!("s{n}");
            writers.replace_all(sets(&[("db", &name)]));
            gauge.note(&view, "db", &name, true);
        }
        assert_eq!(gauge.state().sets.len(), 1, "deleted sets were dropped");
        gauge.forget_all();
        assert_eq!(
            gauge.count(),
            0,
            "a replica that stops leading reports none"
        );
    }
}
