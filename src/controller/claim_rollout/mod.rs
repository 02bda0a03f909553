//! Claim rollout (KEP-4650): patch existing claims to the desired templates and report their
//! status (`volume-claim-status`).
//!
//! - The pure model ([`crate::rollout::claims`]): the rollout planner (claims in, patches
//!   out), the KEP status per template, what one claim needs. Here the reconcile; beside it
//!   [`rollout_actions`] (a plan as writes and Events) and [`metrics`] (the feature's
//!   metrics, and what it remembers of the evictions it asked for).
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

mod actions;
pub(crate) mod hold;
mod metrics;
pub(crate) mod restart;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use kube::Api;
use tokio_util::sync::CancellationToken;

use super::action::{self, Action, Kind, Report, Request, Target, Verb, Write};
use super::context::{Ctx, Error};
use super::executor::Ran;
use super::snapshot::SetSnapshot;
use crate::admission::set_claims;
use crate::admission::statefulset::ClaimUpdatePolicy;
use crate::names;
use crate::rollout::claims::plan::{self, PodFacts, Replica, Rollout, Slot};
use crate::rollout::claims::{
    annotations, basis, desired_templates, rollout_settings, status, status_wanted,
};
use crate::rollout::journal;
pub(crate) use actions::rollout_actions;
pub(crate) use metrics::{ClaimRollout, SetLabels};
use serde_json::json;

impl ClaimRollout {
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

#[cfg(test)]
mod tests;
