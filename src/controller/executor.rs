//! The one place the controller's writes go through. Every feature plans
//! [`Action`](super::action::Action)s from the cluster view; the executor carries them out:
//!
//! - every write carries the field manager `stateful-admission` ([`crate::field_manager`]) and
//!   waits for the client's write rate limit ([`crate::write_limit`]);
//! - expectations: after a write planned from version R of an object, plans that read the
//!   object at R are stale until the view shows the write (the "expectations" of upstream
//!   controllers), so a lagging view never leads to a second write;
//! - Events, report-once where the plan says so (bounded memory);
//! - `controller_actions_total{action, result}`;
//! - the mode: in [`Mode::Observe`] nothing is written but Events; each write is reported as
//!   a `Would<Verb>` Event on its object, counted with result `observed` and logged, once per
//!   object and planned change. That is the only branch on the mode that changes what is
//!   written (conditions also skip their confirming read when nothing will be written);
//! - fencing ([`super::fence`]): immediately before each API call (claims, sets, status,
//!   journals, deletes, Events) the term's fence is asked, and again after the write rate
//!   limit's wait ([`crate::write_limit::checked_after_wait`]); a call still in flight when the
//!   fence closes is dropped. A refusal is an error of the write (nothing was sent), counted
//!   in `controller_writes_fenced_total`, with no Event.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, Preconditions, PropagationPolicy};
use kube::runtime::events::{Event, Recorder, Reporter};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::action::{Action, After, Report, Request, Write};
use super::fence::{self, Fence};
use crate::names;
use crate::{field_manager, write_limit};

/// Whether the controller acts or only says what it would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Enforce,
    /// Plan everything, write nothing but Events.
    Observe,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::Observe => "observe",
        }
    }
}

/// What became of one action of a plan.
#[derive(Debug)]
pub enum Ran {
    Written(Result<Outcome, kube::Error>),
    /// A write not sent: the write before it did not end as it needed.
    Skipped,
    /// A Report: whether it was published (false: reported before, not repeated).
    Reported(bool),
}

impl Ran {
    pub fn is_done(&self) -> bool {
        matches!(self, Self::Written(Ok(Outcome::Done(_))))
    }

    pub fn is_observed(&self) -> bool {
        matches!(self, Self::Written(Ok(Outcome::Observed)))
    }

    /// The error of a write that failed.
    pub fn error(&self) -> Option<&kube::Error> {
        match self {
            Self::Written(Err(error)) => Some(error),
            _ => None,
        }
    }
}

/// What became of a write.
#[derive(Debug)]
pub enum Outcome {
    /// Written; the object as the apiserver answered (a delete may answer with a status).
    Done(Option<Box<DynamicObject>>),
    /// Observe mode: reported, not written.
    Observed,
}

impl Outcome {
    pub fn is_done(&self) -> bool {
        matches!(self, Self::Done(_))
    }

    /// The resourceVersion the write produced, if the apiserver returned the object.
    pub fn resource_version(&self) -> Option<String> {
        match self {
            Self::Done(Some(o)) => o.metadata.resource_version.clone(),
            _ => None,
        }
    }

    /// The uid of the object the write produced, if returned.
    pub fn uid(&self) -> Option<String> {
        match self {
            Self::Done(Some(o)) => o.metadata.uid.clone(),
            _ => None,
        }
    }
}

/// The HTTP status of a failed request, if it was one.
pub fn code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: &'static str,
    pub result: &'static str,
}

/// `controller_actions_total`, `controller_writes_fenced_total`.
#[derive(Debug, Clone, Default)]
pub struct ActionMetrics {
    actions: Family<ActionLabels, Counter>,
    fenced: Counter,
}

impl ActionMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "controller_actions",
            "Writes the controller planned, by action and result: done, conflict (a precondition failed: the object moved on), gone, failed, or observed (observe mode: reported, not written)",
            metrics.actions.clone(),
        );
        registry.register(
            "controller_writes_fenced",
            "Writes (Events included) the controller refused, or abandoned in flight, because this replica's Lease was no longer valid by its own clock (renew deadline passed, or the Lease lost)",
            metrics.fenced.clone(),
        );
        metrics
    }

    /// The counter of writes refused by fencing (for the term's [`Fence`]).
    pub fn fenced(&self) -> Counter {
        self.fenced.clone()
    }

    fn count(&self, action: &'static str, result: &'static str) {
        self.actions
            .get_or_create(&ActionLabels { action, result })
            .inc();
    }

    /// The count of `action` with `result` (tests and diagnostics).
    pub fn get(&self, action: &'static str, result: &'static str) -> u64 {
        self.actions
            .get_or_create(&ActionLabels { action, result })
            .get()
    }
}

/// Entries kept at most in each memory; past it the memory starts over (costing at worst one
/// repeated Event, or one write refused by its precondition, never a wrong write).
const MAX_REMEMBERED: usize = 10_000;

/// Writes whose effect the view has not shown yet: an object key and the resourceVersion the
/// object had when we wrote it.
#[derive(Debug, Default)]
pub struct Expectations(Mutex<HashMap<String, String>>);

impl Expectations {
    /// Records that we wrote `key` when it had `stale_version`.
    pub fn wrote(&self, key: String, stale_version: String) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_REMEMBERED {
            map.clear();
        }
        map.insert(key, stale_version);
    }

    /// Whether the viewed `version` of `key` predates our write; forgets the write once the
    /// view has moved past it (or the object is gone from it).
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

/// Keys already reported, bounded.
#[derive(Debug, Default)]
struct Reported(Mutex<HashSet<String>>);

impl Reported {
    fn first(&self, key: &str) -> bool {
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if set.contains(key) {
            return false;
        }
        if set.len() >= MAX_REMEMBERED {
            set.clear();
        }
        set.insert(key.to_owned())
    }

    fn forget(&self, prefix: &str) {
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        set.retain(|k| !k.starts_with(prefix));
    }
}

/// Carries out actions; one per leadership term.
pub struct Executor {
    client: Client,
    mode: Mode,
    recorder: Recorder,
    metrics: ActionMetrics,
    expectations: Expectations,
    reported: Reported,
    /// The term's fence; `None` writes unfenced (tools and tests without a Lease).
    fence: Option<Arc<Fence>>,
}

impl Executor {
    /// An executor writing with `client` (which carries the write rate limit) and publishing
    /// Events as `identity` of the controller.
    pub fn new(client: Client, mode: Mode, identity: &str, metrics: ActionMetrics) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: names::CONTROLLER_NAME.to_owned(),
                instance: Some(identity.to_owned()),
            },
        );
        Self {
            client,
            mode,
            recorder,
            metrics,
            expectations: Expectations::default(),
            reported: Reported::default(),
            fence: None,
        }
    }

    /// Every write and Event from now on passes `fence` first.
    pub fn with_fence(mut self, fence: Arc<Fence>) -> Self {
        self.fence = Some(fence);
        self
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Resolves when the fence closes (never without one): what waits on this executor's
    /// writes can stop at once.
    pub async fn closed(&self) {
        match &self.fence {
            Some(fence) => {
                fence.closed().await;
            }
            None => std::future::pending().await,
        }
    }

    /// Whether the fence refuses writes now (counting nothing).
    pub fn is_closed(&self) -> bool {
        self.fence.as_ref().is_some_and(|f| !f.is_open())
    }

    /// Asks the fence whether the write `what` names may go out now.
    fn admit(&self, what: impl FnOnce() -> String) -> Result<(), kube::Error> {
        match &self.fence {
            Some(fence) => fence.admit(what).map_err(kube::Error::from),
            None => Ok(()),
        }
    }

    /// Runs one API call under the fence: checked again after the write rate limit's wait,
    /// and dropped if the fence closes while it is in flight.
    async fn fenced<T>(
        &self,
        what: impl Fn() -> String + Send + Sync + 'static,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        let Some(fence) = &self.fence else {
            return call.await;
        };
        let what = Arc::new(what);
        let check = {
            let (fence, what) = (fence.clone(), what.clone());
            Arc::new(move || {
                fence
                    .admit(|| format!("{} (after the write rate limit's wait)", what()))
                    .map_err(tower::BoxError::from)
            })
        };
        let call = write_limit::checked_after_wait(check, call);
        tokio::select! {
            biased;
            why = fence.closed() => Err(fence.refuse(why, || format!("{} (abandoned in flight)", what())).into()),
            result = call => result,
        }
    }

    /// Whether a plan from the view's `version` of object `key` is stale (we wrote the object
    /// at that version and the view has not shown the write yet).
    pub fn is_stale(&self, key: &str, version: Option<&str>) -> bool {
        self.expectations.is_stale(key, version)
    }

    /// Carries out one write (or reports it, in observe mode).
    pub async fn write(&self, write: &Write) -> Result<Outcome, kube::Error> {
        let action = write.verb.as_str();
        let target = &write.target;
        if self.mode == Mode::Observe {
            // What observe mode writes (its Events) is fenced as any write.
            self.admit(|| describe(write))?;
            let key = format!(
                "would/{action}/{}/{}/{}",
                target.key(),
                target.uid.as_deref().unwrap_or_default(),
                write.summary
            );
            // Counted, logged and reported once per object and planned change: the metric
            // says how many distinct writes would have been made, not how often they were
            // planned again.
            if self.reported.first(&key) {
                self.metrics.count(action, "observed");
                tracing::info!(
                    action,
                    namespace = %target.namespace,
                    name = %target.name,
                    note = %write.summary,
                    "would act (observe mode)"
                );
                let note = format!("{} (observe mode: not written)", write.summary);
                self.report(&Report::normal(
                    write.about.clone(),
                    write.verb.would(),
                    action,
                    note,
                ))
                .await;
            }
            return Ok(Outcome::Observed);
        }
        match self.send(write).await {
            Ok(object) => {
                self.metrics.count(action, "done");
                if write.expect
                    && let Some(version) = &target.resource_version
                {
                    self.expectations.wrote(target.key(), version.clone());
                }
                for report in &write.on_failed {
                    if let Some(once) = &report.once {
                        self.reported.forget(once);
                    }
                }
                let written_uid = object.as_ref().and_then(|o| o.metadata.uid.clone());
                for report in &write.on_done {
                    // An Event about the object just created names the object the apiserver
                    // made (its uid was not known when the plan was made).
                    let about_written = report.regarding.uid.is_none()
                        && report.regarding.name.as_deref() == Some(target.name.as_str())
                        && report.regarding.namespace.as_deref() == Some(target.namespace.as_str())
                        && report.regarding.kind.as_deref()
                            == Some(target.kind.api_resource().kind.as_str());
                    match (&written_uid, about_written) {
                        (Some(uid), true) => {
                            let mut report = report.clone();
                            report.regarding.uid = Some(uid.clone());
                            self.report(&report).await
                        }
                        _ => self.report(report).await,
                    };
                }
                Ok(Outcome::Done(object))
            }
            // Refused or abandoned by the fence: counted there; no Event (that would be a
            // write too).
            Err(error) if fence::is_fenced(&error) => Err(error),
            Err(error) => {
                let result = match code(&error) {
                    Some(409) => "conflict",
                    Some(404) => "gone",
                    _ => "failed",
                };
                self.metrics.count(action, result);
                if !code(&error).is_some_and(|c| write.expected.contains(&c)) {
                    tracing::debug!(action, namespace = %target.namespace, name = %target.name, %error, "write failed");
                    let text = error.to_string();
                    for report in &write.on_failed {
                        let report = Report {
                            note: report.note.replace("{error}", &text),
                            once: report.once.as_ref().map(|k| format!("{k}{text}")),
                            ..report.clone()
                        };
                        self.report(&report).await;
                    }
                }
                Err(error)
            }
        }
    }

    async fn send(&self, write: &Write) -> Result<Option<Box<DynamicObject>>, kube::Error> {
        let target = &write.target;
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &target.namespace,
            &target.kind.api_resource(),
        );
        // Immediately before the call: nothing between this check and the request but the
        // rate limit's wait, which checks again.
        self.admit(|| describe(write))?;
        let what = describe(write);
        self.fenced(move || what.clone(), self.call(&api, write))
            .await
    }

    async fn call(
        &self,
        api: &Api<DynamicObject>,
        write: &Write,
    ) -> Result<Option<Box<DynamicObject>>, kube::Error> {
        let target = &write.target;
        match &write.request {
            Request::Patch(body) => api
                .patch(&target.name, &field_manager::patch(), &Patch::Merge(body))
                .await
                .map(|o| Some(Box::new(o))),
            Request::PatchStatus(body) => api
                .patch_status(&target.name, &field_manager::patch(), &Patch::Merge(body))
                .await
                .map(|o| Some(Box::new(o))),
            Request::Create(object) => {
                let object: DynamicObject =
                    serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
                api.create(&field_manager::post(), &object)
                    .await
                    .map(|o| Some(Box::new(o)))
            }
            Request::Delete {
                uid,
                resource_version,
                orphan,
            } => {
                let params = DeleteParams {
                    propagation_policy: orphan.then_some(PropagationPolicy::Orphan),
                    preconditions: Some(Preconditions {
                        uid: uid.clone(),
                        resource_version: resource_version.clone(),
                    }),
                    ..DeleteParams::default()
                };
                api.delete(&target.name, &params)
                    .await
                    .map(|answer| answer.left().map(Box::new))
            }
            Request::Evict { uid } => {
                use k8s_openapi::api::policy::v1::Eviction;
                use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
                let pods: Api<k8s_openapi::api::core::v1::Pod> =
                    Api::namespaced(self.client.clone(), &target.namespace);
                // Posted as an Eviction object: kube's `Api::evict` sends its delete options
                // under a key the apiserver ignores, so the uid precondition would not arrive.
                let eviction = Eviction {
                    metadata: meta::ObjectMeta {
                        name: Some(target.name.clone()),
                        namespace: Some(target.namespace.clone()),
                        ..meta::ObjectMeta::default()
                    },
                    delete_options: Some(meta::DeleteOptions {
                        preconditions: Some(meta::Preconditions {
                            uid: uid.clone(),
                            resource_version: None,
                        }),
                        ..meta::DeleteOptions::default()
                    }),
                };
                pods.create_subresource::<_, kube::core::Status>(
                    "eviction",
                    &target.name,
                    &field_manager::post(),
                    &eviction,
                )
                .await
                .map(|_| None)
            }
        }
    }

    /// Carries out a plan in order: each write through [`Executor::write`], resolving how it
    /// depends on the write before it ([`After`]); each Report published. Returns what became
    /// of every action, in the plan's order.
    pub async fn run(&self, actions: &[Action]) -> Vec<Ran> {
        /// What became of the last write so far.
        enum Last {
            Done(Option<String>),
            /// Observe mode: counts as done for what follows, which is reported too.
            Observed,
            /// The code, and whether the write expected it.
            Failed(Option<u16>, bool),
        }
        let mut ran = Vec::with_capacity(actions.len());
        let mut last: Option<Last> = None;
        for action in actions {
            match action {
                Action::Report(report) => ran.push(Ran::Reported(self.report(report).await)),
                Action::Write(write) => {
                    let runs = match write.after {
                        After::Anything => true,
                        After::Done | After::DoneVersion => {
                            matches!(last, Some(Last::Done(_) | Last::Observed))
                        }
                        After::Gone => matches!(last, Some(Last::Failed(Some(404), _))),
                        After::NoFailure => !matches!(last, Some(Last::Failed(_, false))),
                    };
                    if !runs {
                        last = Some(Last::Failed(None, false));
                        ran.push(Ran::Skipped);
                        continue;
                    }
                    let result = match (write.after, &last) {
                        (After::DoneVersion, Some(Last::Done(Some(version)))) => {
                            let mut chained = write.clone();
                            chained.precondition(version);
                            self.write(&chained).await
                        }
                        _ => self.write(write).await,
                    };
                    last = Some(match &result {
                        Ok(outcome @ Outcome::Done(_)) => Last::Done(outcome.resource_version()),
                        Ok(Outcome::Observed) => Last::Observed,
                        Err(error) => {
                            let code = code(error);
                            Last::Failed(code, code.is_some_and(|c| write.expected.contains(&c)))
                        }
                    });
                    ran.push(Ran::Written(result));
                }
            }
        }
        ran
    }

    /// Whether a plan from the view is stale for any of `objects` (`(key, viewed version)`):
    /// we wrote one of them at the version the view still shows.
    pub fn any_stale<'a>(
        &self,
        mut objects: impl Iterator<Item = (String, Option<&'a str>)>,
    ) -> bool {
        objects.any(|(key, version)| self.is_stale(&key, version))
    }

    /// Publishes an Event (once per key, where it has one). Events are written in every mode:
    /// they are what observe mode reports with. A failure is logged, never fatal. Returns
    /// false when the report was made before and is not repeated.
    pub async fn report(&self, report: &Report) -> bool {
        let (reason, regarding) = (report.reason.clone(), report.regarding.name.clone());
        let what = move || format!("Event {reason} about {regarding:?}");
        if self.admit(&what).is_err() {
            return false;
        }
        if let Some(once) = &report.once
            && !self.reported.first(once)
        {
            return false;
        }
        let event = Event {
            type_: report.type_,
            reason: report.reason.clone(),
            note: Some(crate::text::clip(&report.note, super::action::MAX_NOTE)),
            action: report.action.clone(),
            secondary: report.related.clone(),
        };
        let published = self.fenced(what, self.recorder.publish(&event, &report.regarding));
        match published.await {
            Ok(()) => {}
            Err(error) if fence::is_fenced(&error) => return false,
            Err(error) => {
                tracing::warn!(%error, reason = %report.reason, "could not publish event")
            }
        }
        true
    }

    /// Whether `key` is reported for the first time (then it is remembered).
    pub fn first_report(&self, key: &str) -> bool {
        self.reported.first(key)
    }
}

/// A write as the fence's log names it: `PatchClaim db/data-web-0`.
fn describe(write: &Write) -> String {
    format!(
        "{} {}/{}",
        write.verb.as_str(),
        write.target.namespace,
        write.target.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::action::{self, Kind, Target, Verb};
    use crate::controller::fence::{Fenced, LeaseClock, Refusal};
    use crate::controller::test_api;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    /// An executor fenced on a clock valid for 10 s from now, over an API that answers
    /// claim patches (or holds them, with `hold`) and Events; counts what reached it.
    fn fenced_executor(
        hold: bool,
    ) -> (
        Executor,
        Arc<LeaseClock>,
        CancellationToken,
        ActionMetrics,
        Arc<AtomicUsize>,
    ) {
        let reached = Arc::new(AtomicUsize::new(0));
        let counted = reached.clone();
        let client = test_api::client(move |_method, path, _body| {
            counted.fetch_add(1, Ordering::SeqCst);
            if hold && path.contains("persistentvolumeclaims") {
                return None;
            }
            Some((
                200,
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data-web-0", "namespace": "db", "resourceVersion": "2"}}),
            ))
        });
        let clock = Arc::new(LeaseClock::new(Duration::from_secs(10)));
        clock.renewed(Instant::now());
        let lost = CancellationToken::new();
        let metrics = ActionMetrics::default();
        let fence = Arc::new(Fence::new(clock.clone(), lost.clone(), metrics.fenced()));
        let exec = Executor::new(client, Mode::Enforce, "a", metrics.clone()).with_fence(fence);
        (exec, clock, lost, metrics, reached)
    }

    fn patch() -> Write {
        Write::new(
            Verb::PatchClaim,
            Target::new(Kind::Claim, "db", "data-web-0"),
            Request::Patch(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
            "2Gi".into(),
        )
        .on_failed(Report::warning(
            action::set_reference("db", "web", None),
            "ClaimPatchFailed",
            "PatchClaim",
            "{error}".into(),
        ))
    }

    fn fenced(result: &Result<Outcome, kube::Error>) -> bool {
        matches!(result, Err(error) if fence::is_fenced(error))
    }

    #[tokio::test(start_paused = true)]
    async fn writes_go_out_until_the_deadline_and_none_from_it() {
        let (exec, _clock, _lost, metrics, reached) = fenced_executor(false);
        assert!(exec.write(&patch()).await.is_ok());
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert!(exec.write(&patch()).await.is_ok(), "a millisecond left");
        assert_eq!(reached.load(Ordering::SeqCst), 2);
        // The clock jumped past the deadline (a thawed process): refused, nothing sent, no
        // Event about the failure (that would be a write too).
        tokio::time::advance(Duration::from_secs(5)).await;
        let refused = exec.write(&patch()).await;
        assert!(fenced(&refused), "{refused:?}");
        assert!(
            !exec
                .report(&Report::normal(
                    action::set_reference("db", "web", None),
                    "Reason",
                    "Action",
                    "note".into(),
                ))
                .await,
            "Events are fenced too"
        );
        assert_eq!(reached.load(Ordering::SeqCst), 2, "nothing reached the API");
        assert_eq!(metrics.fenced().get(), 2);
        assert_eq!(
            metrics.get("PatchClaim", "failed"),
            0,
            "a refusal is not a failure"
        );
        assert!(exec.is_closed());
        // Observe mode writes only Events, which are fenced alike.
        let observe = Executor {
            mode: Mode::Observe,
            ..exec
        };
        assert!(fenced(&observe.write(&patch()).await));
        assert_eq!(reached.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_in_flight_is_abandoned_when_the_fence_closes() {
        let (exec, clock, _lost, metrics, reached) = fenced_executor(true);
        let exec = Arc::new(exec);
        let started = Instant::now();
        let write = tokio::spawn({
            let exec = exec.clone();
            async move { (exec.write(&patch()).await, Instant::now()) }
        });
        // Renewed at 4 s: the write waits on until 14 s.
        tokio::time::advance(Duration::from_secs(4)).await;
        clock.renewed(Instant::now());
        let (result, at) = write.await.expect("joined");
        assert!(fenced(&result), "{result:?}");
        assert_eq!(at - started, Duration::from_secs(14));
        assert_eq!(
            reached.load(Ordering::SeqCst),
            1,
            "sent once, never answered"
        );
        assert_eq!(metrics.fenced().get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_term_refuses_at_once_whatever_the_clock_says() {
        let (exec, clock, lost, _metrics, reached) = fenced_executor(true);
        let exec = Arc::new(exec);
        let write = tokio::spawn({
            let exec = exec.clone();
            async move { exec.write(&patch()).await }
        });
        tokio::time::advance(Duration::from_secs(1)).await;
        lost.cancel();
        let result = write.await.expect("joined");
        assert!(
            matches!(&result, Err(kube::Error::Service(e)) if matches!(e.downcast_ref::<Fenced>(), Some(Fenced(Refusal::TermOver)))),
            "{result:?}"
        );
        // A later term renewing the shared clock does not reopen this one.
        clock.renewed(Instant::now());
        assert!(fenced(&exec.write(&patch()).await));
        assert_eq!(reached.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn expectations_hold_until_the_view_moves_past_our_write() {
        let e = Expectations::default();
        assert!(!e.is_stale("db/a", Some("7")), "nothing written");
        e.wrote("db/a".into(), "7".into());
        assert!(
            e.is_stale("db/a", Some("7")),
            "view still shows the old version"
        );
        assert!(e.is_stale("db/a", Some("7")));
        assert!(!e.is_stale("db/a", Some("9")), "view caught up");
        assert!(!e.is_stale("db/a", Some("7")), "forgotten once caught up");
        e.wrote("db/b".into(), "3".into());
        assert!(!e.is_stale("db/b", None), "gone from the view");
        assert!(!e.is_stale("db/b", Some("3")), "forgotten once gone");
    }

    #[test]
    fn reports_are_remembered_boundedly_and_forgotten_by_prefix() {
        let r = Reported::default();
        assert!(r.first("a/1"));
        assert!(!r.first("a/1"));
        assert!(r.first("a/2"));
        r.forget("a/");
        assert!(r.first("a/1"), "forgotten");
        for i in 0..MAX_REMEMBERED + 5 {
            r.first(&format!("k{i}"));
        }
        assert!(r.0.lock().map(|s| s.len()).unwrap_or(0) <= MAX_REMEMBERED);
    }
}
