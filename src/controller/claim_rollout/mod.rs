//! Claim rollout (KEP-4650): patch existing claims to the desired templates and report their
//! status (`volume-claim-status`).
//!
//! - [`plan`]: pure rollout planner (claims in, patches out); [`status`]: the KEP status per
//!   template; [`assessment`]: what one claim needs; [`rollout_actions`]: a plan as writes
//!   and Events.
//! - Desired templates are those of the annotation `desired-volume-claim-templates` while it
//!   is present, else the set's own (after convergence the set carries them, and the rollout
//!   goes on from there). So convergence ([`super::convergence`]) does not wait for the
//!   claims: it starts as soon as the annotation appears, which is when GitOps tools stop
//!   seeing a difference, and the rollout is the same before and after it.
//! - Within one reconcile: claim patches first, then the status annotation (only when it
//!   changes and no journal is open, so the set's resourceVersion does not move under a
//!   journal); convergence runs after.
//! - A convergence of ours does not stop the rollout ([`basis`]): while the orphan-deleted set
//!   waits for the garbage collector it plans from the terminating set, and while the set is
//!   absent (deleted, not created again yet) from the object its journal creates, which
//!   [`ClaimRollout::run_absent`] looks at since no set reconcile runs for an absent set.
//! - The status annotation only where it tells something ([`status_wanted`]): a recorded
//!   change, an in-place rollout with work, a claim that cannot follow its template. A set
//!   whose claims match their templates, `InPlace` or not, is never written.

pub(crate) mod assessment;
pub(crate) mod basis;
pub(crate) mod hold;
pub(crate) mod plan;
pub(crate) mod restart;
pub(crate) mod state;
pub(crate) mod status;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use kube::Api;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::action::{self, Action, Kind, Report, Request, Target, Verb, Write};
use super::context::{Ctx, Error};
use super::executor::Ran;
use super::snapshot::SetSnapshot;
use crate::admission::set_claims;
use crate::admission::statefulset::max_unavailable;
use crate::admission::statefulset::{ClaimUpdatePolicy, claim_update_policy};
use crate::controller::convergence::journal;
use crate::names;
use plan::{PodFacts, Replica, Rollout, Slot};
use serde_json::json;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SetLabels {
    pub namespace: String,
    pub statefulset: String,
}

/// The feature: its metrics, and the sets whose rollout is in progress (for the gauge).
#[derive(Debug, Default)]
pub(crate) struct ClaimRollout {
    patched: Counter,
    patch_errors: Counter,
    incompatible: Family<SetLabels, Gauge>,
    rollouts_in_progress: Gauge,
    in_progress: Mutex<HashSet<(String, String)>>,
    pod_evictions: Counter,
    pod_eviction_refusals: Counter,
    /// What became of the evictions asked for, by pod uid (bounded: see [`REFUSAL_MEMORY`]).
    evictions: Mutex<std::collections::HashMap<String, Eviction>>,
}

/// What became of the evictions of one pod.
#[derive(Debug, Clone, Copy)]
enum Eviction {
    /// Refused `count` times in a row; not to be asked again before `after`.
    Refused {
        count: u32,
        after: std::time::Instant,
    },
    /// Evicted at `at`: going, while the pod cache has yet to hear of it.
    Done { at: std::time::Instant },
}

impl Eviction {
    /// Until when it is remembered.
    fn remembered_until(&self) -> std::time::Instant {
        match self {
            Self::Refused { after, .. } => *after + REFUSAL_MEMORY,
            Self::Done { at } => *at + REFUSAL_MEMORY,
        }
    }
}

impl ClaimRollout {
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "claims_patched",
            "PersistentVolumeClaims patched to their desired template",
            m.patched.clone(),
        );
        registry.register(
            "claim_patch_errors",
            "Claim patches the apiserver refused or that failed",
            m.patch_errors.clone(),
        );
        registry.register(
            "claims_incompatible",
            "Claims that cannot become compatible with their template in place, by set",
            m.incompatible.clone(),
        );
        registry.register(
            "claim_rollouts_in_progress",
            "StatefulSets whose claims are not all compatible with their templates yet",
            m.rollouts_in_progress.clone(),
        );
        registry.register(
            "claim_pod_evictions",
            "Pods evicted so that their claims finish growing their file systems (offline expansion)",
            m.pod_evictions.clone(),
        );
        registry.register(
            "claim_pod_eviction_refusals",
            "Evictions for a resize refused by a PodDisruptionBudget (asked again later)",
            m.pod_eviction_refusals.clone(),
        );
        m
    }

    fn set_in_progress(&self, namespace: &str, name: &str, in_progress: bool) {
        let mut sets = self.in_progress.lock().unwrap_or_else(|p| p.into_inner());
        let key = (namespace.to_owned(), name.to_owned());
        if in_progress {
            sets.insert(key);
        } else {
            sets.remove(&key);
        }
        self.rollouts_in_progress
            .set(i64::try_from(sets.len()).unwrap_or(i64::MAX));
    }

    /// One reconcile step of `snapshot`'s claims; returns when to look again.
    pub(crate) async fn sync(
        &self,
        snapshot: &SetSnapshot,
        ctx: &Ctx,
    ) -> Result<Option<Duration>, Error> {
        match basis::basis(Some(&snapshot.set), snapshot.journal.as_deref()) {
            basis::Basis::Live { held } => rollout(self, snapshot, ctx, held).await,
            basis::Basis::Journal(_) | basis::Basis::Nothing(_) => Ok(None),
        }
    }

    /// One look at the claims of set `namespace/name` while it is absent, deleted by its
    /// convergence and not created again yet: planned from the object its journal creates,
    /// read from the API (the view keeps a journal's annotations only).
    pub(crate) async fn sync_absent(
        &self,
        ctx: &Ctx,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Duration>, Error> {
        let journals = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ctx.config.namespace);
        let journal = journals
            .get_opt(&names::journal_name(namespace, name))
            .await?;
        // Created again meanwhile: its own reconcile takes over.
        if ctx.view.has_stateful_set(namespace, name) {
            return Ok(None);
        }
        let basis::Basis::Journal(set) = basis::basis(None, journal.as_ref()) else {
            return Ok(None);
        };
        let Some(snapshot) = SetSnapshot::gather(Arc::new(*set), &ctx.view) else {
            return Ok(None);
        };
        rollout(self, &snapshot, ctx, true).await
    }

    /// Rolls the claims of absent sets out (see [`Self::sync_absent`]): every
    /// `converge_poll`, each journal of the view whose set the view does not hold. Runs until
    /// `stop`.
    pub(crate) async fn run_absent(&self, ctx: Arc<Ctx>, stop: CancellationToken) {
        loop {
            for open in ctx.view.journals() {
                let Some((namespace, name)) = journal::owner(&open) else {
                    continue;
                };
                if ctx.view.has_stateful_set(&namespace, &name) {
                    continue;
                }
                if ctx.exec.is_closed() {
                    return;
                }
                if let Err(error) = self.sync_absent(&ctx, &namespace, &name).await {
                    tracing::warn!(%error, %namespace, %name, "claim rollout of an absent set failed");
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                () = ctx.exec.closed() => return,
                _ = tokio::time::sleep(ctx.config.converge_poll) => {}
            }
        }
    }

    fn evictions(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Eviction>> {
        self.evictions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Self::evictions`] for a write: bounded, a pod that went elsewhere is forgotten once
    /// its backoff is long over, an eviction once its pod has surely gone from the view.
    fn evictions_pruned(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Eviction>> {
        let mut evictions = self.evictions();
        let now = std::time::Instant::now();
        evictions.retain(|_, e| e.remembered_until() > now);
        evictions
    }

    /// Notes an eviction of the pod with uid `pod` refused; returns the wait before the next
    /// attempt: 1 s doubling to a minute.
    fn refused(&self, pod: &str) -> Duration {
        let now = std::time::Instant::now();
        let mut evictions = self.evictions_pruned();
        let count = match evictions.get(pod) {
            Some(Eviction::Refused { count, .. }) => count.saturating_add(1),
            _ => 1,
        };
        let wait = crate::capabilities::run::retry_after(count, Duration::from_secs(60));
        evictions.insert(
            pod.to_owned(),
            Eviction::Refused {
                count,
                after: now + wait,
            },
        );
        wait
    }

    /// Notes the pod with uid `pod` evicted (its refusals forgotten).
    fn evicted(&self, pod: &str) {
        let at = std::time::Instant::now();
        self.evictions_pruned()
            .insert(pod.to_owned(), Eviction::Done { at });
    }

    /// Whether the pod with uid `pod` was evicted (lately).
    fn was_evicted(&self, pod: &str) -> bool {
        matches!(self.evictions().get(pod), Some(Eviction::Done { .. }))
    }

    /// How long an eviction of the pod with uid `pod` still waits after a refusal.
    fn backoff(&self, pod: &str) -> Option<Duration> {
        let Some(Eviction::Refused { after, .. }) = self.evictions().get(pod).copied() else {
            return None;
        };
        let left = after.saturating_duration_since(std::time::Instant::now());
        (!left.is_zero()).then_some(left)
    }
}

/// How long a refusal's count outlives its backoff (a refusal after that starts again at 1 s),
/// and an eviction is remembered.
const REFUSAL_MEMORY: Duration = Duration::from_secs(600);

fn annotations(set: &StatefulSet) -> Option<&std::collections::BTreeMap<String, String>> {
    set.metadata.annotations.as_ref()
}

/// The templates claims should follow: the recorded desired ones (by name), else the live.
pub(crate) fn desired_templates(set: &StatefulSet) -> Result<Vec<PersistentVolumeClaim>, String> {
    let live = set.spec.volume_claim_templates.clone().unwrap_or_default();
    match set_claims::desired_templates(annotations(set)) {
        None => Ok(live),
        Some(Err(e)) => Err(format!(
            "annotation {} does not parse: {e}",
            names::DESIRED_VOLUME_CLAIM_TEMPLATES
        )),
        Some(Ok(desired)) => Ok(live
            .into_iter()
            .map(|t| {
                desired
                    .iter()
                    .find(|d| d.metadata.name == t.metadata.name)
                    .cloned()
                    .unwrap_or(t)
            })
            .collect()),
    }
}

/// Templates whose `volumeAttributesClassName` a recorded change sets or changes: the
/// desired class differs from the live template's while the change is recorded, and stays
/// "changed" in the set's claim status (which outlives the record) while the template names
/// that class.
pub(crate) fn class_changes(set: &StatefulSet) -> std::collections::BTreeSet<String> {
    let class = |t: &PersistentVolumeClaim| {
        t.spec
            .as_ref()
            .and_then(|s| s.volume_attributes_class_name.clone())
    };
    let live = set.spec.volume_claim_templates.as_deref().unwrap_or(&[]);
    let mut changed = std::collections::BTreeSet::new();
    if let Some(Ok(desired)) = set_claims::desired_templates(annotations(set)) {
        for d in &desired {
            let before = live
                .iter()
                .find(|t| t.metadata.name == d.metadata.name)
                .and_then(class);
            if class(d).is_some() && class(d) != before {
                changed.insert(d.metadata.name.clone().unwrap_or_default());
            }
        }
    }
    let stored: Vec<status::TemplateStatus> = annotations(set)
        .and_then(|a| a.get(names::VOLUME_CLAIM_STATUS))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    for t in stored {
        let Some(recorded) = t.volume_attributes_class.filter(|c| c.changed) else {
            continue;
        };
        // Still the class that changed (a later edit to another class decides anew).
        let wanted = desired_templates(set)
            .ok()
            .and_then(|d| {
                d.into_iter()
                    .find(|d| d.metadata.name.as_deref() == Some(&t.name))
            })
            .and_then(|d| class(&d));
        if wanted.as_deref() == Some(recorded.name.as_str()) {
            changed.insert(t.name);
        }
    }
    changed
}

/// The set-wide inputs of its claim rollout for `replicas` replicas, and why the policy
/// annotation was ignored (then the policy is `OnDelete`).
pub(crate) fn rollout_settings(set: &StatefulSet, replicas: usize) -> (Rollout, Option<String>) {
    let spec = serde_json::to_value(&set.spec).unwrap_or(Value::Null);
    let annotations = annotations(set);
    let mut problem = None;
    let policy = claim_update_policy(&spec, annotations).unwrap_or_else(|e| {
        problem = Some(e.to_string());
        ClaimUpdatePolicy::OnDelete
    });
    let (_, strategy) = max_unavailable::validate_update_strategy(&spec);
    let value = strategy.max_unavailable.clone().or_else(|| {
        annotations
            .and_then(|a| a.get(names::MAX_UNAVAILABLE))
            .and_then(|raw| max_unavailable::annotation_value(raw).ok())
    });
    let replicas_i64 = i64::try_from(replicas).unwrap_or(i64::MAX);
    let max_unavailable = value
        .map(|v| max_unavailable::effective(&v, replicas_i64))
        .unwrap_or(1);
    let recorded =
        annotations.is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
    let rollout = Rollout {
        policy,
        rolling: strategy.rolling,
        partition: usize::try_from(strategy.partition).unwrap_or(0),
        max_unavailable: usize::try_from(max_unavailable).unwrap_or(1),
        update_revision: set.status.as_ref().and_then(|s| s.update_revision.clone()),
        // The templates became live when the set was (re-)created with them.
        recreated_since: if recorded {
            None
        } else {
            set.metadata.creation_timestamp.as_ref().map(|t| t.0)
        },
        // What the cluster does is the caller's to add (see `ClusterFacts::of`).
        cluster: plan::ClusterFacts::default(),
        class_changed: class_changes(set),
    };
    (rollout, problem)
}

/// A Warning about the set's rollout, once per key.
async fn warn_once(ctx: &Ctx, key: String, set: &StatefulSet, reason: &str, note: String) {
    let about = action::reference_of(Kind::StatefulSet, &set.metadata);
    ctx.exec
        .report(&Report::warning(about, reason, "RolloutClaims", note).once(key))
        .await;
}

/// The rollout of `snapshot`'s claims; `held`: a convergence of ours holds the set (deleted,
/// terminating or absent; see [`basis`]).
async fn rollout(
    metrics: &ClaimRollout,
    snapshot: &SetSnapshot,
    ctx: &Ctx,
    held: bool,
) -> Result<Option<Duration>, Error> {
    let set = snapshot.set.as_ref();
    let (ns, name) = (&snapshot.namespace, &snapshot.name);
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let templates = match desired_templates(set) {
        Ok(t) => t,
        Err(why) => {
            warn_once(
                ctx,
                format!("{uid}/desired/{why}"),
                set,
                "DesiredTemplatesInvalid",
                why,
            )
            .await;
            return Ok(None);
        }
    };
    if templates.is_empty() {
        // No claim change recorded (any more): a hold left has nothing to coordinate.
        if !held && let Some(h) = hold::Hold::of(annotations(set)) {
            let partition = set
                .spec
                .update_strategy
                .as_ref()
                .and_then(|s| s.rolling_update.as_ref())
                .and_then(|r| r.partition)
                .unwrap_or(0);
            return hold::step(snapshot, ctx, &[], h, partition, false).await;
        }
        return Ok(None);
    }
    // A claim we patched whose new version the cache has not shown yet: planning now would
    // work on stale sizes and budgets. Its watch event triggers the next reconcile.
    if snapshot.is_stale(&ctx.exec, Kind::Claim) {
        return Ok(None);
    }
    let (mut settings, problem) = rollout_settings(set, snapshot.ordinals.len());
    settings.cluster = plan::ClusterFacts::of(&ctx.capabilities.get());
    // A coordinated rollout holds the rolling update ([`hold`]): the replica just below the
    // hold has its claims patched before its pod is re-created; pods (and their restarts)
    // follow the set's partition itself.
    let pod_partition = settings.partition;
    let in_place = settings.policy == ClaimUpdatePolicy::InPlace;
    let coordinated = hold::Hold::of(annotations(set)).filter(|_| settings.rolling);
    if let Some(Ok(h)) = coordinated.as_ref().filter(|_| in_place) {
        let replicas = hold::replicas(snapshot, &templates, jiff::Timestamp::now());
        settings.partition = hold::claims_partition(h, &replicas);
    }
    if let Some(why) = problem {
        warn_once(
            ctx,
            format!("{uid}/policy/{why}"),
            set,
            "VolumeClaimUpdatePolicyInvalid",
            format!("{why}; claims are not patched"),
        )
        .await;
    }
    let expandable = |class: &str| {
        ctx.view
            .storage_class(class)
            .is_some_and(|sc| sc.allow_volume_expansion == Some(true))
    };
    let mut plan = plan_for(snapshot, &templates, &settings, expandable);
    // What the claim status says during a hold is the whole rollout, down to the user's
    // partition: the claims the hold has not reached yet are awaited (GitOps health checks and
    // `status --wait` read them), not held back by the user's update strategy.
    if let Some(Ok(h)) = coordinated.as_ref().filter(|_| in_place) {
        let whole = Rollout {
            partition: usize::try_from(h.user_partition).unwrap_or(0),
            ..settings.clone()
        };
        let whole = plan_for(snapshot, &templates, &whole, expandable);
        plan.status = whole.status;
        plan.in_progress = whole.in_progress;
        plan.held = whole.held;
    }
    // A class the cluster cannot apply: said once per set and class (not per uid: a
    // convergence re-creates the set), and the rest rolls out as usual.
    for template in &plan.status {
        if let Some(class) = template
            .volume_attributes_class
            .as_ref()
            .filter(|c| !c.applied)
        {
            let how = ctx
                .capabilities
                .get()
                .get(crate::capabilities::Name::ClaimVolumeAttributesClass)
                .describe();
            warn_once(
                ctx,
                format!("{ns}/{name}/class-not-applied/{}/{}", template.name, class.name),
                set,
                "VolumeAttributesClassNotApplied",
                format!(
                    "volumeAttributesClassName {:?} of template {:?} cannot reach the claims: {} (capability claim-volume-attributes-class: {how}); storage, labels and annotations roll out as usual, the class once the cluster keeps it",
                    class.name, template.name, class.reason
                ),
            )
            .await;
        }
    }
    let labels = SetLabels {
        namespace: ns.clone(),
        statefulset: name.clone(),
    };
    if plan.incompatible.is_empty() {
        metrics.incompatible.remove(&labels);
    } else {
        metrics
            .incompatible
            .get_or_create(&labels)
            .set(i64::try_from(plan.incompatible.len()).unwrap_or(i64::MAX));
    }
    let in_use = status_wanted(set, settings.policy, &plan);
    metrics.set_in_progress(ns, name, in_use && plan.in_progress);
    let write_status = in_use && !held && snapshot.journal.is_none();
    let actions = rollout_actions(snapshot, &plan, write_status);
    let ran = ctx.exec.run(&actions).await;
    let mut first_error = None;
    for (action, ran) in actions.iter().zip(ran) {
        if let Action::Write(write) = action
            && write.verb == Verb::PatchClaim
        {
            match &ran {
                Ran::Written(Ok(outcome)) if outcome.is_done() => {
                    metrics.patched.inc();
                }
                Ran::Written(Err(kube::Error::Api(status))) => {
                    metrics.patch_errors.inc();
                    // A lowered request refused by the rule that predates recovery from
                    // failed expansions: no claim of this cluster is lowered again.
                    if crate::capabilities::judge::lowering_above_capacity(
                        status.code,
                        &status.message,
                    ) == Some(crate::capabilities::Value::Refused)
                    {
                        ctx.capabilities.evidence(
                            crate::capabilities::Name::ExpansionRecovery,
                            crate::capabilities::Value::Refused,
                            format!(
                                "claim {ns}/{}: {}",
                                write.target.name,
                                crate::text::clip(&status.message, 200)
                            ),
                        );
                    }
                }
                Ran::Written(Err(_)) => {
                    metrics.patch_errors.inc();
                }
                _ => {}
            }
        }
        if let Ran::Written(Err(e)) = ran {
            first_error.get_or_insert(Error::Kube(e));
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    // No pod is restarted while the set is held: the StatefulSet controller re-creates no pod
    // of a set being deleted (`updateStatefulSet` returns early on `DeletionTimestamp`), nor
    // of an absent one. The restarts wait for the set to be back.
    if held {
        return Ok(None);
    }
    let hold_next = match coordinated {
        Some(h) => {
            let partition = i32::try_from(pod_partition).unwrap_or(i32::MAX);
            hold::step(snapshot, ctx, &templates, h, partition, in_place).await?
        }
        None => None,
    };
    settings.partition = pod_partition;
    let restart_next = restart_pods(metrics, snapshot, ctx, &settings).await?;
    Ok(match (hold_next, restart_next) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// The claim rollout of `snapshot` against `templates` (pure): the plan a reconcile carries
/// out, and the claim status it records. `expandable`: whether a StorageClass of that name
/// exists and allows volume expansion.
pub(crate) fn plan_for(
    snapshot: &SetSnapshot,
    templates: &[PersistentVolumeClaim],
    settings: &Rollout,
    expandable: impl Fn(&str) -> bool,
) -> plan::Plan {
    let replicas: Vec<Replica<'_>> = snapshot
        .ordinals
        .iter()
        .enumerate()
        .map(|(index, &ordinal)| {
            let pod = snapshot.pod(ordinal).map(|p| PodFacts {
                revision: p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("controller-revision-hash"))
                    .cloned(),
                created: p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                terminating: p.metadata.deletion_timestamp.is_some(),
            });
            let slots = templates
                .iter()
                .map(|t| {
                    let tname = t.metadata.name.as_deref().unwrap_or_default();
                    let claim = snapshot
                        .claims
                        .iter()
                        .find(|(tn, n, _)| tn == tname && *n == ordinal)
                        .and_then(|(_, _, c)| c.as_deref());
                    let expandable = claim
                        .and_then(|c| c.spec.as_ref())
                        .and_then(|s| s.storage_class_name.as_deref())
                        .is_some_and(&expandable);
                    Slot {
                        template: t,
                        claim,
                        expandable,
                    }
                })
                .collect();
            Replica {
                index,
                ordinal,
                pod,
                slots,
            }
        })
        .collect();
    plan::plan(settings, &replicas, |t, n| {
        set_claims::claim_name(t, &snapshot.name, n)
    })
}

/// Expansions waiting for a pod restart ([`restart`]): plans and carries out the evictions;
/// returns when to look again (a grace period ending, a pod becoming available, a refusal's
/// backoff).
async fn restart_pods(
    metrics: &ClaimRollout,
    snapshot: &SetSnapshot,
    ctx: &Ctx,
    rollout: &Rollout,
) -> Result<Option<Duration>, Error> {
    let set = snapshot.set.as_ref();
    // A pod we deleted or evicted that the view still shows as it was: the budget would be
    // counted without it. Its watch event brings the next look.
    if snapshot.is_stale(&ctx.exec, Kind::Pod) {
        return Ok(None);
    }
    let now = jiff::Timestamp::now();
    let settings = restart::Settings {
        restart: restart::opted_in(set, ctx.config.restart_pods_for_resize),
        rolling: rollout.rolling,
        partition: rollout.partition,
        max_unavailable: rollout.max_unavailable,
        update_revision: rollout.update_revision.clone(),
        grace: ctx.config.resize_restart_grace,
        observed: restart::observed(set),
        now,
    };
    let mut replicas = restart::replicas_of(
        set,
        &snapshot.ordinals,
        |ordinal| snapshot.pod(ordinal),
        |ordinal| {
            snapshot
                .claims
                .iter()
                .filter(|(_, n, _)| *n == ordinal)
                .filter_map(|(_, _, c)| c.as_deref())
                .collect()
        },
        now,
    );
    for replica in &mut replicas {
        if let Some(pod) = replica.pod.as_mut() {
            // Evicted, and the pod cache has not heard of it yet: going.
            if metrics.was_evicted(&pod.uid) {
                pod.health = crate::rollout::health::Health::Terminating;
            }
            replica.backoff = metrics.backoff(&pod.uid);
        }
    }
    let plan = restart::plan(&settings, &replicas);
    if plan.steps.is_empty() {
        return Ok(plan.recheck_after);
    }
    let set_ref = action::reference_of(Kind::StatefulSet, &set.metadata);
    let mut actions = restart::actions(&snapshot.namespace, &set_ref, &plan);
    // Every eviction is expected, at the pod's version planned from: until the view shows it
    // going, the maxUnavailable driver (in this reconcile too) and the next plan here count
    // the budget as spent, not as free.
    for action in &mut actions {
        if let Action::Write(write) = action
            && write.verb == Verb::EvictPod
            && let Some(version) = snapshot
                .pods
                .iter()
                .filter_map(|(_, p)| p.as_deref())
                .find(|p| p.metadata.name.as_deref() == Some(write.target.name.as_str()))
                .and_then(|p| p.metadata.resource_version.clone())
        {
            write.target.resource_version = Some(version);
            write.expect = true;
        }
    }
    let ran = ctx.exec.run(&actions).await;
    let mut next = plan.recheck_after;
    let mut first_error = None;
    for (action, ran) in actions.iter().zip(ran) {
        let Action::Write(write) = action else {
            continue;
        };
        match (write.verb, ran) {
            (Verb::EvictPod, Ran::Written(Ok(outcome))) if outcome.is_done() => {
                metrics.pod_evictions.inc();
                let uid = write.target.uid.as_deref().unwrap_or_default();
                metrics.evicted(uid);
                tracing::info!(namespace = %snapshot.namespace, pod = %write.target.name, "evicted a pod whose claim waits for it to finish a resize");
            }
            (Verb::EvictPod, Ran::Written(Err(kube::Error::Api(status)))) if status.code == 429 => {
                // A PodDisruptionBudget refuses it for now: asked again with backoff, said
                // once per pod, never turned into a delete.
                metrics.pod_eviction_refusals.inc();
                let wait = metrics.refused(write.target.uid.as_deref().unwrap_or_default());
                next = Some(next.map_or(wait, |n| n.min(wait)));
                ctx.exec
                    .report(
                        &Report::warning(
                            set_ref.clone(),
                            "PodEvictionRefused",
                            "EvictPod",
                            format!(
                                "the eviction of pod {} for a resize was refused: {}; asked again in {}s, never deleted instead",
                                write.target.name,
                                crate::text::clip(&status.message, 300),
                                wait.as_secs()
                            ),
                        )
                        .related(Some(write.target.reference()))
                        .once(format!(
                            "eviction-refused/{}/{}",
                            snapshot.namespace,
                            write.target.uid.as_deref().unwrap_or_default()
                        )),
                    )
                    .await;
            }
            (_, Ran::Written(Err(kube::Error::Api(status))))
                if write.expected.contains(&status.code) => {}
            (_, Ran::Written(Err(e))) => {
                first_error.get_or_insert(Error::Kube(e));
            }
            _ => {}
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(next),
    }
}

/// Whether `set`'s claim status is worth its annotation, a write to the set (KEP-4650 puts it
/// in the status the built-in controller writes anyway; here each is a write every watcher of
/// StatefulSets receives):
/// - a claim change was recorded (`desired-volume-claim-templates`), or the annotation is
///   there already (a change was recorded once, or an in-place rollout ran: kept current);
/// - policy `InPlace` and the rollout has work: a claim to patch (now or once the budget or
///   the update strategy lets it), or one updating;
/// - a claim that cannot follow its template in place, whatever the policy: the user has to
///   delete it (and its pod) for it to, and the Warning Events about it expire.
///
/// Not for a set whose claims match their templates, `InPlace` or not, nor for claims only
/// waiting to be bound (a scale-up): nothing there is news, and installing on a cluster of
/// healthy sets writes none of them.
pub(crate) fn status_wanted(
    set: &StatefulSet,
    policy: ClaimUpdatePolicy,
    plan: &plan::Plan,
) -> bool {
    let annotated = annotations(set).is_some_and(|a| {
        a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES)
            || a.contains_key(names::VOLUME_CLAIM_STATUS)
    });
    let rollout_has_work = !plan.steps.is_empty()
        || !plan.held.is_empty()
        || plan.status.iter().any(|t| t.updating > 0);
    annotated
        || !plan.incompatible.is_empty()
        || (policy == ClaimUpdatePolicy::InPlace && rollout_has_work)
}

/// What a rollout plan does: a patch per planned step (each with its Events), a report of
/// each claim that cannot follow its template, and the `volume-claim-status` annotation
/// where it changes (`write_status`: the set uses the feature and no journal is open).
pub(crate) fn rollout_actions(
    snapshot: &SetSnapshot,
    plan: &plan::Plan,
    write_status: bool,
) -> Vec<Action> {
    let set = snapshot.set.as_ref();
    let (ns, name) = (&snapshot.namespace, &snapshot.name);
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let set_ref = action::reference_of(Kind::StatefulSet, &set.metadata);
    let claim_of = |claim: &str| {
        snapshot
            .claims
            .iter()
            .find_map(|(t, n, c)| {
                (set_claims::claim_name(t, name, *n) == claim).then_some(c.clone())
            })
            .flatten()
    };
    let mut actions = Vec::with_capacity(plan.steps.len() + plan.incompatible.len() + 1);
    for step in &plan.steps {
        let changes = step.patch.changes.join(", ");
        let claim = claim_of(&step.claim);
        let claim_ref = claim
            .as_ref()
            .map(|c| action::reference_of(Kind::Claim, &c.metadata));
        let target = match &claim {
            Some(c) => Target::of(Kind::Claim, &c.metadata),
            None => Target::new(Kind::Claim, ns, &step.claim),
        };
        let done = format!(
            "patched claim {} to template {:?}: {changes}",
            step.claim, step.template
        );
        let failed = format!(
            "could not patch claim {} ({changes}): {{error}}; retrying",
            step.claim
        );
        let once = format!("{uid}/patch/{}/", step.claim);
        let mut write = Write::new(
            Verb::PatchClaim,
            target,
            Request::Patch(step.patch.body.clone()),
            format!(
                "patch claim {} to template {:?}: {changes}",
                step.claim, step.template
            ),
        )
        .about(set_ref.clone())
        .expect();
        if let Some(c) = &claim_ref {
            write = write
                .about(c.clone())
                .on_done(Report::normal(
                    c.clone(),
                    "VolumeClaimPatched",
                    "PatchClaim",
                    done.clone(),
                ))
                .on_failed(
                    Report::warning(
                        c.clone(),
                        "VolumeClaimPatchFailed",
                        "PatchClaim",
                        failed.clone(),
                    )
                    .once(format!("{once}claim/")),
                );
        }
        write = write
            .on_done(
                Report::normal(set_ref.clone(), "VolumeClaimPatched", "PatchClaim", done)
                    .related(claim_ref.clone()),
            )
            .on_failed(
                Report::warning(
                    set_ref.clone(),
                    "VolumeClaimPatchFailed",
                    "PatchClaim",
                    failed,
                )
                .related(claim_ref.clone())
                .once(once),
            );
        actions.push(Action::Write(write));
    }
    for bad in &plan.incompatible {
        let claim = claim_of(&bad.claim);
        let claim_uid = claim
            .as_ref()
            .and_then(|c| c.metadata.uid.clone())
            .unwrap_or_default();
        let claim_ref = claim
            .as_ref()
            .map(|c| action::reference_of(Kind::Claim, &c.metadata));
        let note = format!(
            "claim {} cannot follow volume claim template {:?} in place: {}",
            bad.claim, bad.template, bad.reason
        );
        let once = format!("{uid}/incompatible/{claim_uid}/{note}");
        if let Some(c) = &claim_ref {
            actions.push(Action::Report(
                Report::warning(
                    c.clone(),
                    "VolumeClaimIncompatible",
                    "RolloutClaims",
                    note.clone(),
                )
                .once(format!("{once}/claim")),
            ));
        }
        actions.push(Action::Report(
            Report::warning(
                set_ref.clone(),
                "VolumeClaimIncompatible",
                "RolloutClaims",
                note,
            )
            .related(claim_ref)
            .once(once),
        ));
    }
    let stored = annotations(set).and_then(|a| a.get(names::VOLUME_CLAIM_STATUS));
    if write_status && !status::unchanged(stored.map(String::as_str), &plan.status) {
        let was_updating = stored
            .and_then(|s| serde_json::from_str::<Vec<status::TemplateStatus>>(s).ok())
            .is_some_and(|s| s.iter().any(|t| t.updating > 0));
        let value = status::render(&plan.status);
        let body = json!({"metadata": {"annotations": {names::VOLUME_CLAIM_STATUS: &value}}});
        let mut write = Write::new(
            Verb::WriteClaimStatus,
            Target::of(Kind::StatefulSet, &set.metadata),
            Request::Patch(body),
            format!("set annotation {}: {value}", names::VOLUME_CLAIM_STATUS),
        );
        if was_updating && !plan.in_progress {
            write = write.on_done(Report::normal(
                set_ref,
                "VolumeClaimRolloutComplete",
                "RolloutClaims",
                "every claim is compatible with its volume claim template".to_owned(),
            ));
        }
        actions.push(Action::Write(write));
    }
    actions
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::controller::action::Request;

    #[test]
    fn refusals_back_off_doubling_and_an_eviction_forgets_them() {
        let rollout = ClaimRollout::register(&mut Registry::default());
        assert_eq!(rollout.backoff("p1"), None);
        assert!(!rollout.was_evicted("p1"));
        let waits: Vec<u64> = (0..3).map(|_| rollout.refused("p1").as_secs()).collect();
        assert_eq!(waits, [1, 2, 4]);
        assert!(
            rollout
                .backoff("p1")
                .is_some_and(|b| b > Duration::from_secs(3))
        );
        // Another pod has its own count.
        assert_eq!(rollout.refused("p2"), Duration::from_secs(1));

        rollout.evicted("p1");
        assert!(rollout.was_evicted("p1"));
        assert_eq!(
            rollout.backoff("p1"),
            None,
            "an evicted pod waits for nothing"
        );
        assert!(!rollout.was_evicted("p2"));
        // Refused again later (a new pod with the same uid never comes; a stale answer):
        // counted from one.
        assert_eq!(rollout.refused("p1"), Duration::from_secs(1));
        assert!(!rollout.was_evicted("p1"));
    }

    fn snapshot(status: Option<&str>) -> SetSnapshot {
        let mut annotations = serde_json::Map::new();
        if let Some(s) = status {
            annotations.insert(names::VOLUME_CLAIM_STATUS.into(), s.into());
        }
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "db", "uid": "u1", "resourceVersion": "40",
                         "annotations": annotations},
            "spec": {"selector": {}, "serviceName": "web", "template": {}},
        }))
        .expect("set");
        let claim = |n: u32| -> Arc<PersistentVolumeClaim> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {
                    "name": format!("data-web-{n}"), "namespace": "db",
                    "uid": format!("c{n}"), "resourceVersion": format!("{}", 10 + n)}}))
                .expect("claim"),
            )
        };
        SetSnapshot {
            set: Arc::new(set),
            namespace: "db".into(),
            name: "web".into(),
            ordinals: vec![0, 1],
            pods: vec![(0, None), (1, None)],
            claims: vec![
                ("data".into(), 0, Some(claim(0))),
                ("data".into(), 1, Some(claim(1))),
            ],
            journal: None,
        }
    }

    fn plan() -> plan::Plan {
        plan::Plan {
            steps: vec![plan::Step {
                template: "data".into(),
                ordinal: 1,
                claim: "data-web-1".into(),
                patch: plan::ClaimPatch {
                    body: json!({"metadata": {"resourceVersion": "11"},
                                 "spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
                    changes: vec!["storage 1Gi -> 2Gi".into()],
                    starts_update: true,
                },
            }],
            incompatible: vec![plan::Incompatible {
                template: "data".into(),
                ordinal: 0,
                claim: "data-web-0".into(),
                reason: "storage class differs".into(),
            }],
            status: vec![status::TemplateStatus {
                name: "data".into(),
                compatible: 0,
                updating: 1,
                over_sized: 0,
                total_capacity: "2Gi".into(),
                awaiting: 1,
                ..status::TemplateStatus::default()
            }],
            unavailable: 1,
            in_progress: true,
            held: Vec::new(),
        }
    }

    fn writes(actions: &[Action]) -> Vec<&Write> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Write(w) => Some(w),
                Action::Report(_) => None,
            })
            .collect()
    }

    fn reports(actions: &[Action]) -> Vec<(&str, Option<&str>, Option<&str>)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Report(r) => Some((
                    r.reason.as_str(),
                    r.regarding.kind.as_deref(),
                    r.once.as_deref(),
                )),
                Action::Write(_) => None,
            })
            .collect()
    }

    #[test]
    fn a_rollout_plan_becomes_patches_reports_and_a_status_write() {
        let actions = rollout_actions(&snapshot(None), &plan(), true);
        let w = writes(&actions);
        assert_eq!(w.len(), 2, "{actions:?}");

        let patch = w[0];
        assert_eq!(patch.verb, Verb::PatchClaim);
        assert_eq!(patch.target.key(), "persistentvolumeclaims/db/data-web-1");
        assert_eq!(patch.target.resource_version.as_deref(), Some("11"));
        assert!(
            patch.expect,
            "the view must show the patch before the next plan"
        );
        assert_eq!(patch.about.name.as_deref(), Some("data-web-1"));
        assert!(
            matches!(&patch.request, Request::Patch(b) if b["spec"]["resources"]["requests"]["storage"] == "2Gi")
        );
        let done: Vec<_> = patch
            .on_done
            .iter()
            .map(|r| (r.reason.as_str(), r.regarding.kind.as_deref()))
            .collect();
        assert_eq!(
            done,
            [
                ("VolumeClaimPatched", Some("PersistentVolumeClaim")),
                ("VolumeClaimPatched", Some("StatefulSet"))
            ]
        );
        assert_eq!(
            patch.on_done[1]
                .related
                .as_ref()
                .and_then(|r| r.name.as_deref()),
            Some("data-web-1")
        );
        assert!(patch.on_done[0].note.contains("storage 1Gi -> 2Gi"));
        assert!(
            patch
                .on_failed
                .iter()
                .all(|r| r.note.contains("{error}") && r.once.is_some())
        );

        assert_eq!(
            reports(&actions),
            [
                (
                    "VolumeClaimIncompatible",
                    Some("PersistentVolumeClaim"),
                    Some(
                        "u1/incompatible/c0/claim data-web-0 cannot follow volume claim template \"data\" in place: storage class differs/claim"
                    )
                ),
                (
                    "VolumeClaimIncompatible",
                    Some("StatefulSet"),
                    Some(
                        "u1/incompatible/c0/claim data-web-0 cannot follow volume claim template \"data\" in place: storage class differs"
                    )
                ),
            ]
        );

        let status = w[1];
        assert_eq!(status.verb, Verb::WriteClaimStatus);
        assert_eq!(status.target.key(), "statefulsets/db/web");
        let Request::Patch(body) = &status.request else {
            panic!("a patch: {status:?}")
        };
        assert_eq!(
            body["metadata"]["annotations"][names::VOLUME_CLAIM_STATUS],
            status::render(&plan().status)
        );
        assert!(status.on_done.is_empty(), "not complete yet");
    }

    #[test]
    fn the_claim_status_is_wanted_only_where_it_tells_something() {
        let set_with = |keys: &[&str]| {
            let annotations: serde_json::Map<String, Value> = keys
                .iter()
                .map(|k| ((*k).to_owned(), Value::from("x")))
                .collect();
            serde_json::from_value::<StatefulSet>(json!({
                "metadata": {"name": "web", "annotations": annotations},
                "spec": {"selector": {}, "serviceName": "web", "template": {}},
            }))
            .expect("set")
        };
        let matching = plan::Plan {
            status: vec![status::TemplateStatus {
                name: "data".into(),
                compatible: 2,
                updating: 0,
                over_sized: 1,
                total_capacity: "3Gi".into(),
                volume_attributes_class: None,
                ..status::TemplateStatus::default()
            }],
            ..plan::Plan::default()
        };
        let updating = plan::Plan {
            status: vec![status::TemplateStatus {
                updating: 1,
                ..matching.status[0].clone()
            }],
            in_progress: true,
            ..matching.clone()
        };
        let held = plan::Plan {
            held: vec![1],
            in_progress: true,
            ..matching.clone()
        };
        let waiting_to_bind = plan::Plan {
            in_progress: true,
            ..matching.clone()
        };
        let to_patch = plan::Plan {
            steps: plan().steps,
            in_progress: true,
            ..matching.clone()
        };
        let incompatible = plan::Plan {
            incompatible: plan().incompatible,
            in_progress: true,
            ..matching.clone()
        };
        let (in_place, on_delete) = (ClaimUpdatePolicy::InPlace, ClaimUpdatePolicy::OnDelete);
        let plain = set_with(&[]);
        let recorded = set_with(&[names::DESIRED_VOLUME_CLAIM_TEMPLATES]);
        let reported = set_with(&[names::VOLUME_CLAIM_STATUS]);
        // (what, set, policy, plan, wanted)
        let cases = [
            ("healthy, OnDelete", &plain, on_delete, &matching, false),
            (
                "healthy, InPlace: claims match",
                &plain,
                in_place,
                &matching,
                false,
            ),
            (
                "InPlace, a claim only waiting to be bound",
                &plain,
                in_place,
                &waiting_to_bind,
                false,
            ),
            (
                "InPlace, a claim to patch",
                &plain,
                in_place,
                &to_patch,
                true,
            ),
            (
                "InPlace, a patch held by the budget",
                &plain,
                in_place,
                &held,
                true,
            ),
            (
                "InPlace, a claim updating",
                &plain,
                in_place,
                &updating,
                true,
            ),
            (
                "OnDelete, a claim updating by hand",
                &plain,
                on_delete,
                &updating,
                false,
            ),
            (
                "a claim that cannot follow, OnDelete",
                &plain,
                on_delete,
                &incompatible,
                true,
            ),
            ("a change recorded", &recorded, on_delete, &matching, true),
            (
                "reported before: kept current",
                &reported,
                on_delete,
                &matching,
                true,
            ),
        ];
        for (what, set, policy, plan, wanted) in cases {
            assert_eq!(status_wanted(set, policy, plan), wanted, "{what}");
        }
    }

    #[test]
    fn the_status_is_written_only_where_it_changes_and_completion_is_said() {
        let p = plan();
        let same = status::render(&p.status);
        assert!(
            writes(&rollout_actions(&snapshot(Some(&same)), &p, true))
                .iter()
                .all(|w| w.verb != Verb::WriteClaimStatus),
            "unchanged"
        );
        assert!(
            writes(&rollout_actions(&snapshot(None), &p, false))
                .iter()
                .all(|w| w.verb != Verb::WriteClaimStatus),
            "not in use, or a journal is open"
        );
        let done = plan::Plan {
            steps: Vec::new(),
            incompatible: Vec::new(),
            in_progress: false,
            status: vec![status::TemplateStatus {
                compatible: 2,
                updating: 0,
                ..p.status[0].clone()
            }],
            ..p
        };
        let actions = rollout_actions(&snapshot(Some(&same)), &done, true);
        let w = writes(&actions);
        assert_eq!(w.len(), 1);
        assert_eq!(
            w[0].on_done
                .iter()
                .map(|r| r.reason.as_str())
                .collect::<Vec<_>>(),
            ["VolumeClaimRolloutComplete"]
        );
    }
}
