//! Claim rollout and convergence (KEP-4650): patch existing claims to the desired templates,
//! report their status, and re-create the set with the desired templates.
//!
//! - [`plan`]: pure rollout planner (claims in, patches out); [`status`]: the KEP status per
//!   template; [`converge`]: the journal format and its state machine; [`act`]: API calls.
//! - Desired templates are those of the annotation `desired-volume-claim-templates` while it
//!   is present, else the set's own (after convergence the set carries them, and the rollout
//!   goes on from there). So convergence does not wait for the claims: it starts as soon as
//!   the annotation appears, which is when GitOps tools stop seeing a difference, and the
//!   rollout is the same before and after it.
//! - Within one reconcile: claim patches first, then the status annotation (only when it
//!   changes and no journal is open, so the set's resourceVersion does not move under a
//!   journal), then convergence.
//! - Sets that never used the feature (no desired annotation, policy `OnDelete`, no status
//!   annotation yet) get no status annotation: nothing is written to them.

pub mod act;
pub mod converge;
pub mod plan;
pub mod status;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::events::EventType;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::context::{Ctx, Error, SetSnapshot};
use crate::admission::set_claims;
use crate::admission::statefulset::max_unavailable;
use crate::admission::statefulset::{ClaimUpdatePolicy, claim_update_policy};
use crate::names;
use act::{claim_event, event};
use plan::{PodFacts, Replica, Rollout, Slot};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SetLabels {
    pub namespace: String,
    pub statefulset: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub step: &'static str,
}

/// Metrics of the claim rollout and convergence, and what this controller already reported
/// (so that a Warning is published once per cause, not on every resync).
#[derive(Debug, Default)]
pub struct Metrics {
    patched: Counter,
    patch_errors: Counter,
    incompatible: Family<SetLabels, Gauge>,
    rollouts_in_progress: Gauge,
    converge_steps: Family<StepLabels, Counter>,
    memory: Mutex<Memory>,
}

#[derive(Debug, Default)]
struct Memory {
    reported: HashSet<String>,
    in_progress: HashSet<(String, String)>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
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
            "statefulset_converge_steps",
            "Convergence steps taken, by step",
            m.converge_steps.clone(),
        );
        m
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True the first time `key` is reported by this controller.
    pub fn first_report(&self, key: &str) -> bool {
        self.memory().reported.insert(key.to_owned())
    }

    fn forget(&self, prefix: &str) {
        self.memory().reported.retain(|k| !k.starts_with(prefix));
    }

    pub fn step(&self, step: &'static str) {
        self.converge_steps
            .get_or_create(&StepLabels { step })
            .inc();
    }

    fn set_in_progress(&self, namespace: &str, name: &str, in_progress: bool) {
        let mut memory = self.memory();
        let key = (namespace.to_owned(), name.to_owned());
        if in_progress {
            memory.in_progress.insert(key);
        } else {
            memory.in_progress.remove(&key);
        }
        self.rollouts_in_progress
            .set(i64::try_from(memory.in_progress.len()).unwrap_or(i64::MAX));
    }
}

/// At most `max` bytes of `s`, cut on a character boundary.
pub fn clip(s: &str, max: usize) -> String {
    crate::admission::statefulset::templates::truncate(s, max)
}

/// One reconcile step for `snapshot`; returns when to look again.
pub async fn sync(snapshot: &SetSnapshot, ctx: &Ctx) -> Result<Option<Duration>, Error> {
    let mut first_error = None;
    if ctx.config.features.claim_rollout
        && let Err(e) = rollout(snapshot, ctx).await
    {
        first_error = Some(e);
    }
    let wants = annotations(&snapshot.set)
        .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
    let deleting = snapshot.set.metadata.deletion_timestamp.is_some();
    let after =
        if snapshot.journal.is_some() || (ctx.config.features.converge && wants && !deleting) {
            act::converge(
                ctx,
                &snapshot.namespace,
                &snapshot.name,
                ctx.config.features.converge,
            )
            .await?
        } else {
            None
        };
    match first_error {
        Some(e) => Err(e),
        None => Ok(after),
    }
}

fn annotations(set: &StatefulSet) -> Option<&std::collections::BTreeMap<String, String>> {
    set.metadata.annotations.as_ref()
}

/// The templates claims should follow: the recorded desired ones (by name), else the live.
fn desired_templates(set: &StatefulSet) -> Result<Vec<PersistentVolumeClaim>, String> {
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

fn rollout_settings(set: &StatefulSet, replicas: usize) -> (Rollout, Option<String>) {
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
    };
    (rollout, problem)
}

async fn warn_once(ctx: &Ctx, key: String, set: &StatefulSet, reason: &str, note: String) {
    if ctx.metrics.claims.first_report(&key) {
        ctx.event(
            set,
            event(EventType::Warning, reason, "RolloutClaims", note),
        )
        .await;
    }
}

/// Key of a claim in the controller's expectations.
fn claim_key(namespace: &str, name: &str) -> String {
    format!("persistentvolumeclaims/{namespace}/{name}")
}

async fn rollout(snapshot: &SetSnapshot, ctx: &Ctx) -> Result<(), Error> {
    let set = snapshot.set.as_ref();
    let (ns, name) = (&snapshot.namespace, &snapshot.name);
    let metrics = &ctx.metrics.claims;
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
            return Ok(());
        }
    };
    if templates.is_empty() || set.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    // A claim we patched whose new version the cache has not shown yet: planning now would
    // work on stale sizes and budgets. Its watch event triggers the next reconcile.
    let stale = snapshot.claims.iter().any(|(_, _, c)| {
        c.as_ref().is_some_and(|c| {
            ctx.expectations.is_stale(
                &claim_key(ns, c.metadata.name.as_deref().unwrap_or_default()),
                c.metadata.resource_version.as_deref(),
            )
        })
    });
    if stale {
        return Ok(());
    }
    let (settings, problem) = rollout_settings(set, snapshot.ordinals.len());
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
    let replicas: Vec<Replica<'_>> = snapshot
        .ordinals
        .iter()
        .enumerate()
        .map(|(index, &ordinal)| {
            let pod = snapshot
                .pods
                .iter()
                .find(|(n, _)| *n == ordinal)
                .and_then(|(_, p)| p.as_ref())
                .map(|p| PodFacts {
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
                        .and_then(|class| ctx.view.storage_class(class))
                        .is_some_and(|sc| sc.allow_volume_expansion == Some(true));
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
    let plan = plan::plan(&settings, &replicas, |t, n| {
        set_claims::claim_name(t, name, n)
    });
    let claim_of = |claim: &str| {
        snapshot
            .claims
            .iter()
            .find_map(|(t, n, c)| {
                (set_claims::claim_name(t, name, *n) == claim).then_some(c.clone())
            })
            .flatten()
    };

    let mut first_error = None;
    for step in &plan.steps {
        let changes = step.patch.changes.join(", ");
        let claim = claim_of(&step.claim);
        match act::patch_claim(ctx, ns, &step.claim, &step.patch.body).await {
            Ok(_) => {
                if let Some(version) = claim
                    .as_ref()
                    .and_then(|c| c.metadata.resource_version.clone())
                {
                    ctx.expectations.wrote(claim_key(ns, &step.claim), version);
                }
                metrics.patched.inc();
                metrics.forget(&format!("{uid}/patch/{}/", step.claim));
                let note = format!(
                    "patched claim {} to template {:?}: {changes}",
                    step.claim, step.template
                );
                if let Some(c) = &claim {
                    ctx.event(
                        c.as_ref(),
                        event(
                            EventType::Normal,
                            "VolumeClaimPatched",
                            "PatchClaim",
                            note.clone(),
                        ),
                    )
                    .await;
                }
                ctx.event(
                    set,
                    claim_event(
                        EventType::Normal,
                        "VolumeClaimPatched",
                        "PatchClaim",
                        note,
                        claim.as_deref(),
                    ),
                )
                .await;
            }
            Err(e) => {
                metrics.patch_errors.inc();
                let note = format!(
                    "could not patch claim {} ({changes}): {e}; retrying",
                    step.claim
                );
                if metrics.first_report(&format!("{uid}/patch/{}/{e}", step.claim)) {
                    if let Some(c) = &claim {
                        ctx.event(
                            c.as_ref(),
                            event(
                                EventType::Warning,
                                "VolumeClaimPatchFailed",
                                "PatchClaim",
                                note.clone(),
                            ),
                        )
                        .await;
                    }
                    ctx.event(
                        set,
                        claim_event(
                            EventType::Warning,
                            "VolumeClaimPatchFailed",
                            "PatchClaim",
                            note,
                            claim.as_deref(),
                        ),
                    )
                    .await;
                }
                first_error.get_or_insert(Error::Kube(e));
            }
        }
    }
    for bad in &plan.incompatible {
        let claim = claim_of(&bad.claim);
        let claim_uid = claim
            .as_ref()
            .and_then(|c| c.metadata.uid.clone())
            .unwrap_or_default();
        let note = format!(
            "claim {} cannot follow volume claim template {:?} in place: {}",
            bad.claim, bad.template, bad.reason
        );
        if metrics.first_report(&format!("{uid}/incompatible/{claim_uid}/{note}")) {
            if let Some(c) = &claim {
                ctx.event(
                    c.as_ref(),
                    event(
                        EventType::Warning,
                        "VolumeClaimIncompatible",
                        "RolloutClaims",
                        note.clone(),
                    ),
                )
                .await;
            }
            ctx.event(
                set,
                claim_event(
                    EventType::Warning,
                    "VolumeClaimIncompatible",
                    "RolloutClaims",
                    note,
                    claim.as_deref(),
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
    let in_use = settings.policy == ClaimUpdatePolicy::InPlace
        || annotations(set).is_some_and(|a| {
            a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES)
                || a.contains_key(names::VOLUME_CLAIM_STATUS)
        });
    metrics.set_in_progress(ns, name, in_use && plan.in_progress);
    let stored = annotations(set).and_then(|a| a.get(names::VOLUME_CLAIM_STATUS));
    if in_use
        && snapshot.journal.is_none()
        && !status::unchanged(stored.map(String::as_str), &plan.status)
    {
        let was_updating = stored
            .and_then(|s| serde_json::from_str::<Vec<status::TemplateStatus>>(s).ok())
            .is_some_and(|s| s.iter().any(|t| t.updating > 0));
        match act::write_status(ctx, ns, name, &status::render(&plan.status)).await {
            Ok(()) => {
                if was_updating && !plan.in_progress {
                    ctx.event(
                        set,
                        event(
                            EventType::Normal,
                            "VolumeClaimRolloutComplete",
                            "RolloutClaims",
                            "every claim is compatible with its volume claim template".to_owned(),
                        ),
                    )
                    .await;
                }
            }
            Err(e) => {
                first_error.get_or_insert(Error::Kube(e));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Finishes journals whose set is gone (the set controller only sees sets that exist): the
/// crash-after-delete case, and the wait for an orphan delete to complete. Runs until `stop`.
pub async fn run_journals(ctx: std::sync::Arc<Ctx>, stop: CancellationToken) {
    let poll = ctx.config.converge_poll;
    loop {
        let journals = ctx.view.journals();
        ctx.metrics.journals(&journals);
        for journal in journals {
            let Some((namespace, name)) = converge::owner(&journal) else {
                continue;
            };
            if ctx.view.has_stateful_set(&namespace, &name) {
                continue;
            }
            if let Err(error) =
                act::converge(&ctx, &namespace, &name, ctx.config.features.converge).await
            {
                tracing::warn!(%error, %namespace, %name, "converge step failed");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(poll) => {}
        }
    }
}
