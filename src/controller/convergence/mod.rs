//! Convergence (KEP-4650): re-create a StatefulSet with its recorded templates, through a
//! journal, so that the live object carries them and a crash at any step loses nothing.
//!
//! - [`journal`] (the rollout model's): the journal's format and its state machine;
//! - [`plan`]: pure, what exists now in, the next step's writes and Events out;
//! - here, the shell: read the set and its journal fresh from the API (the view may lag behind
//!   our own writes, and the journal holds the whole object), run the plan through the
//!   executor, read again; say an orphan delete that waits long for the garbage collector
//!   (one Event per wait, a `[!]convergence` line on `/readyz?verbose` while it lasts); and
//!   the loop that finishes journals whose set is gone.

pub(crate) mod plan;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::action::Action;
use super::context::{Ctx, Error};
use super::executor::{Ran, code};
use super::snapshot::SetSnapshot;
use crate::health::{self, Health};
use crate::names;
use crate::rollout::journal;
use plan::{Plan, Poll, Presence, State, Then};

/// A lock that a panic elsewhere does not wedge.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub step: &'static str,
}

/// The feature: its metrics, registered once per process, and the orphan deletes of ours that
/// wait long for the garbage collector (said on the health board).
#[derive(Debug, Default)]
pub struct Convergence {
    steps: Family<StepLabels, Counter>,
    journals_open: Gauge,
    oldest_journal: Gauge,
    /// By set (namespace, name): what the wait says.
    waits: Mutex<BTreeMap<(String, String), String>>,
    /// Where the waits are said (`/readyz?verbose`).
    health: Mutex<Option<Arc<Health>>>,
}

/// The line of the health board where waits on the garbage collector are said.
const HEALTH: &str = "convergence";

impl Convergence {
    pub fn register(registry: &mut Registry) -> Self {
        let feature = Self::default();
        registry.register(
            "statefulset_converge_steps",
            "Convergence steps taken, by step",
            feature.steps.clone(),
        );
        registry.register(
            "convergence_journals_open",
            "Convergence journals (ConfigMaps of StatefulSets being re-created) open now; reported by the leader",
            feature.journals_open.clone(),
        );
        registry.register(
            "convergence_journal_oldest_timestamp_seconds",
            "When the oldest open convergence journal was created, Unix time; 0 while none is open",
            feature.oldest_journal.clone(),
        );
        feature
    }

    /// Says the garbage collector's waits on `health` (`/readyz?verbose`, line `convergence`,
    /// while one lasts).
    pub fn set_health(&self, health: Arc<Health>) {
        *lock(&self.health) = Some(health);
        self.say_waits();
    }

    /// Leadership lost: the journal gauges and the waits are the leader's to report.
    pub fn leadership_lost(&self) {
        self.journals(&[]);
    }

    /// Notes what the convergence of `namespace/name` waits for now: the garbage collector
    /// (`Some(note)`), or not.
    fn note_wait(&self, namespace: &str, name: &str, wait: Option<String>) {
        let key = (namespace.to_owned(), name.to_owned());
        let changed = {
            let mut waits = lock(&self.waits);
            match wait {
                Some(note) => waits.insert(key, note.clone()).as_ref() != Some(&note),
                None => waits.remove(&key).is_some(),
            }
        };
        if changed {
            self.say_waits();
        }
    }

    /// Puts the waits on the health board: informational (`[!]`), readiness is the webhook's.
    fn say_waits(&self) {
        let Some(health) = lock(&self.health).clone() else {
            return;
        };
        let waits = lock(&self.waits);
        if waits.is_empty() {
            health.remove(HEALTH);
        } else {
            let text = waits.values().cloned().collect::<Vec<_>>().join("; ");
            health.set(HEALTH, health::State::Warning, text);
        }
    }

    /// The convergence journals open now: a convergence takes seconds, so an old journal
    /// means one is stuck (a StatefulSet may be orphan-deleted and not re-created yet).
    pub fn journals(&self, open: &[Arc<ConfigMap>]) {
        let oldest = open
            .iter()
            .filter_map(|j| j.metadata.creation_timestamp.as_ref())
            .map(|t| t.0.as_second())
            .min();
        self.journals_open
            .set(i64::try_from(open.len()).unwrap_or(i64::MAX));
        self.oldest_journal.set(oldest.unwrap_or(0));
        // A wait ends with its journal at the latest.
        let owners: Vec<(String, String)> = open.iter().filter_map(|j| journal::owner(j)).collect();
        let pruned = {
            let mut waits = lock(&self.waits);
            let before = waits.len();
            waits.retain(|key, _| owners.contains(key));
            waits.len() != before
        };
        if pruned {
            self.say_waits();
        }
    }

    /// One reconcile of `snapshot`: converge it when it has recorded templates to apply or a
    /// journal open.
    pub async fn sync(&self, snapshot: &SetSnapshot, ctx: &Ctx) -> Result<Option<Duration>, Error> {
        let set = snapshot.set.as_ref();
        let wants = set
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
        let deleting = set.metadata.deletion_timestamp.is_some();
        if snapshot.journal.is_some() || (ctx.config.features.converge && wants && !deleting) {
            self.converge(ctx, &snapshot.namespace, &snapshot.name)
                .await
        } else {
            Ok(None)
        }
    }

    /// Drives the convergence of set `namespace/name` as far as it goes now: read, plan, run,
    /// and again, one step per pass (a full convergence is seven). Returns when to look again.
    pub async fn converge(
        &self,
        ctx: &Ctx,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Duration>, Error> {
        let poll = ctx.config.converge_poll;
        let sets: Api<DynamicObject> = Api::namespaced_with(
            ctx.client.clone(),
            namespace,
            &ApiResource::erase::<StatefulSet>(&()),
        );
        let journals = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ctx.config.namespace);
        let journal_name = names::journal_name(namespace, name);
        for _ in 0..8 {
            let live = sets
                .get_opt(name)
                .await?
                .map(|o| serde_json::to_value(o).unwrap_or(Value::Null));
            let journal = journals.get_opt(&journal_name).await?;
            let state = State {
                namespace,
                name,
                controller_namespace: &ctx.config.namespace,
                live: live.as_ref(),
                journal: journal.as_ref(),
                enabled: ctx.config.features.converge,
                namespace_is: match ctx.view.namespace(namespace) {
                    Some(ns) if ns.metadata.deletion_timestamp.is_some() => Presence::Terminating,
                    _ => Presence::Active,
                },
            };
            self.orphan_wait(ctx, &state).await;
            let (actions, steps, then) = match plan::plan(&state) {
                Plan::Wait(None) => return Ok(None),
                Plan::Wait(Some(Poll)) => return Ok(Some(poll)),
                Plan::Invalid(why) => return Err(Error::Invalid(why)),
                Plan::Act {
                    actions,
                    steps,
                    then,
                } => (actions, steps, then),
            };
            tracing::debug!(namespace, name, ?steps, "converge step");
            let ran = ctx.exec.run(&actions).await;
            let live_uid = live
                .as_ref()
                .and_then(|l| l.pointer("/metadata/uid"))
                .and_then(Value::as_str);
            for (index, step) in steps {
                if let Some(Ran::Written(Ok(outcome))) = ran.get(index)
                    && outcome.is_done()
                {
                    // The set the step is about: the one created, else the live one.
                    let created = (step == "created").then(|| outcome.uid()).flatten();
                    let uid = created.as_deref().or(live_uid);
                    self.step_taken(ctx, step, namespace, name, uid, &journal_name);
                }
            }
            // Observe mode: nothing was written, so nothing moves on.
            if ran.iter().any(Ran::is_observed) {
                return Ok(None);
            }
            // An answer the plan did not expect ends the pass; the others are read again.
            let unexpected =
                actions
                    .iter()
                    .zip(ran)
                    .find_map(|(action, ran)| match (action, ran) {
                        (Action::Write(write), Ran::Written(Err(error)))
                            if !code(&error).is_some_and(|c| write.expected.contains(&c)) =>
                        {
                            Some(error)
                        }
                        _ => None,
                    });
            if let Some(error) = unexpected {
                return Err(error.into());
            }
            if then == Then::Stop {
                return Ok(None);
            }
        }
        Ok(Some(poll))
    }

    /// Says an orphan delete of ours that waits long for the garbage collector: on the health
    /// board while it lasts, and one Event on the set (per wait: its uid, per term).
    async fn orphan_wait(&self, ctx: &Ctx, state: &State<'_>) {
        let wait = plan::orphan_wait(state, jiff::Timestamp::now());
        if let Some(wait) = &wait
            && ctx.exec.report(&wait.report).await
        {
            tracing::info!(
                namespace = state.namespace,
                name = state.name,
                uid = %wait.uid,
                waited_seconds = wait.waited.as_secs(),
                "convergence waits for the garbage collector to orphan the set's dependents"
            );
        }
        self.note_wait(state.namespace, state.name, wait.map(|w| w.note));
    }

    /// A convergence step taken: counted, and logged at info with the set, its uid and the
    /// journal (uninstall and incident reviews read these lines).
    fn step_taken(
        &self,
        ctx: &Ctx,
        step: &'static str,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        journal: &str,
    ) {
        self.steps.get_or_create(&StepLabels { step }).inc();
        tracing::info!(
            step,
            namespace,
            name,
            uid = uid.unwrap_or(""),
            journal = %format!("{}/{journal}", ctx.config.namespace),
            "convergence step"
        );
    }

    /// Finishes journals whose set is gone (the set controller only sees sets that exist): the
    /// crash-after-delete case, and the wait for an orphan delete to complete. Runs until
    /// `stop`.
    pub async fn run_journals(&self, ctx: Arc<Ctx>, stop: CancellationToken) {
        let poll = ctx.config.converge_poll;
        loop {
            let journals = ctx.view.journals();
            self.journals(&journals);
            for journal in journals {
                let Some((namespace, name)) = journal::owner(&journal) else {
                    continue;
                };
                if ctx.view.has_stateful_set(&namespace, &name) {
                    continue;
                }
                if ctx.exec.is_closed() {
                    return;
                }
                if let Err(error) = self.converge(&ctx, &namespace, &name).await {
                    tracing::warn!(%error, %namespace, %name, "converge step failed");
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                () = ctx.exec.closed() => return,
                _ = tokio::time::sleep(poll) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(created: Option<&str>) -> Arc<ConfigMap> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "sa-journal.db.x", "creationTimestamp": created},
            }))
            .expect("configmap"),
        )
    }

    fn journal_of(namespace: &str, name: &str) -> Arc<ConfigMap> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": names::journal_name(namespace, name), "annotations": {
                    names::JOURNAL_SET_NAMESPACE: namespace, names::JOURNAL_SET_NAME: name}},
            }))
            .expect("configmap"),
        )
    }

    fn lines(health: &Health) -> Vec<String> {
        health
            .parts()
            .iter()
            .map(crate::health::Part::line)
            .collect()
    }

    #[test]
    fn waits_on_the_garbage_collector_are_said_on_the_health_board_while_they_last() {
        let feature = Convergence::register(&mut Registry::default());
        let health = Arc::new(Health::default());
        health.set("controller", health::State::Ok, "leading");
        feature.set_health(health.clone());
        assert_eq!(lines(&health), ["[+]controller leading"], "nothing waits");

        feature.note_wait("db", "web", Some("waiting for … db/web (u1) for 6s".into()));
        feature.note_wait("db", "api", Some("waiting for … db/api (u2) for 5s".into()));
        assert_eq!(
            lines(&health),
            [
                "[+]controller leading",
                "[!]convergence waiting for … db/api (u2) for 5s; waiting for … db/web (u1) for 6s"
            ]
        );
        // The wait of db/web over; db/api's journal dropped (its set re-created).
        feature.note_wait("db", "web", None);
        feature.journals(&[journal_of("db", "web")]);
        assert_eq!(lines(&health), ["[+]controller leading"]);

        feature.note_wait("db", "web", Some("waiting for … db/web (u1) for 9s".into()));
        assert_eq!(lines(&health).len(), 2);
        feature.leadership_lost();
        assert_eq!(
            lines(&health),
            ["[+]controller leading"],
            "a former leader does not say what only the leader knows"
        );
    }

    fn scraped(registry: &Registry) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
        text.lines()
            .filter(|l| l.starts_with("convergence_journal"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn journals_report_how_many_are_open_and_when_the_oldest_was_created() {
        let mut registry = Registry::default();
        let metrics = Convergence::register(&mut registry);
        assert_eq!(
            scraped(&registry),
            [
                "convergence_journals_open 0",
                "convergence_journal_oldest_timestamp_seconds 0"
            ]
        );
        metrics.journals(&[
            journal(Some("2030-01-01T00:10:00Z")),
            journal(Some("2030-01-01T00:00:00Z")),
            journal(None),
        ]);
        assert_eq!(
            scraped(&registry),
            [
                "convergence_journals_open 3",
                "convergence_journal_oldest_timestamp_seconds 1893456000"
            ]
        );
        metrics.journals(&[journal(Some("2030-01-01T00:10:00Z"))]);
        assert_eq!(
            scraped(&registry)[1],
            "convergence_journal_oldest_timestamp_seconds 1893456600"
        );
        // A replica that loses the Lease stops reporting what only the leader watches.
        metrics.leadership_lost();
        assert_eq!(
            scraped(&registry),
            [
                "convergence_journals_open 0",
                "convergence_journal_oldest_timestamp_seconds 0"
            ]
        );
    }
}
