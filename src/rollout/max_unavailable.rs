//! One maxUnavailable step for one StatefulSet, planned from the set and its pods: pure, with
//! the clock passed in.
//!
//! The reference is kube-controller-manager's StatefulSet controller with the
//! `MaxUnavailableStatefulSet` gate on (pkg/controller/statefulset/stateful_set_control.go,
//! `updateStatefulSetAfterInvariantEstablished`), including the 1.37 change for `Parallel`
//! (kubernetes#137666, fixing #137409): old-revision pods that are already unavailable are
//! replaced first, without spending the budget, so a broken old revision cannot stall the
//! rollout. Under `OrderedReady` upstream reaches the rolling step only once every replica is
//! Running and Available (`processReplica` returns early in monotonic mode); so do we.
//!
//! The pods we delete are re-created by the built-in controller, by its own rule for the
//! revision: where `spec.updateStrategy.rollingUpdate` is nil, a pod below
//! `status.currentReplicas` comes back at the old revision. Such pods are left to its
//! one-at-a-time update ([`Hold::RecreatedAtCurrentRevision`]); the webhook gives such sets the
//! `rollingUpdate: {partition: 0}` that avoids it.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::admission::statefulset::max_unavailable::{
    self as rules, IntOrPercent, MAX_UNAVAILABLE_PATH,
};
use crate::names;
pub(crate) use crate::rollout::health::{Health, health};

/// `spec.podManagementPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PodManagement {
    OrderedReady,
    Parallel,
}

impl PodManagement {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::OrderedReady => "OrderedReady",
            Self::Parallel => "Parallel",
        }
    }
}

/// Where a set's maxUnavailable comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// `spec.updateStrategy.rollingUpdate.maxUnavailable`, stored while the gate was on.
    Native,
    /// `stateful-admission.io/max-unavailable`, written by the webhook.
    Annotation,
}

/// A set whose rolling update this controller drives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rollout {
    pub uid: String,
    pub policy: PodManagement,
    pub replicas: i64,
    /// Replicas at a position below this are never touched. Upstream compares the position
    /// in the replica list (ordinal minus `spec.ordinals.start`), not the ordinal.
    pub partition: usize,
    /// Effective value: percent of replicas rounded down, at least 1 (above 1 here).
    pub max_unavailable: usize,
    pub source: Source,
    pub min_ready_seconds: i64,
    pub update_revision: String,
    /// `status.currentReplicas` where `spec.updateStrategy.rollingUpdate` is nil: the
    /// built-in controller re-creates a deleted pod at a position below it at the current
    /// revision (upstream `newVersionedStatefulSetPod`, pkg/controller/statefulset/
    /// stateful_set_utils.go), and only its own deletions lower the count first. Deleting
    /// such a pod would restart it at the old revision, to be deleted again. `None` where
    /// `rollingUpdate` is set: the partition is the bound then, and the driver keeps above it.
    pub recreated_at_current_below: Option<usize>,
}

/// Why a set is left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Skip {
    /// The set is being deleted.
    Deleting,
    /// `OnDelete` (or a type the apiserver would reject).
    NotRollingUpdate,
    /// Neither the native field nor the annotation is set.
    Unset,
    /// Resolves to 1: the built-in controller's one-at-a-time update is already that.
    AtMostOne,
    /// The value does not validate (the webhook denies it; it may predate the webhook).
    Invalid(String),
    /// `partition >= replicas` (or no replicas): the rollout is paused.
    Paused,
    /// The built-in controller has not seen the latest spec: its revisions may be stale.
    NotObserved,
    /// No `status.updateRevision` yet.
    NoUpdateRevision,
    /// Without a uid the pods' ownership cannot be told.
    NoUid,
}

/// Reads what the driver needs from the set, or why it should not act on it.
pub(crate) fn rollout(set: &StatefulSet) -> Result<Rollout, Skip> {
    let meta = &set.metadata;
    if meta.deletion_timestamp.is_some() {
        return Err(Skip::Deleting);
    }
    let spec = &set.spec;
    let strategy = spec.update_strategy.as_ref();
    match strategy.and_then(|s| s.type_.as_deref()) {
        None | Some("RollingUpdate") => {}
        Some(_) => return Err(Skip::NotRollingUpdate),
    }
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    let replicas = i64::from(spec.replicas.unwrap_or(1));
    // A native value wins over the annotation, as in the webhook.
    let (value, source) = match rolling.and_then(|r| r.max_unavailable.as_ref()) {
        Some(native) => {
            let value = match native {
                IntOrString::Int(i) => IntOrPercent::Int(i64::from(*i)),
                IntOrString::String(s) => IntOrPercent::Str(s.clone()),
            };
            if let Some(error) = rules::validate_int_or_percent(&value, MAX_UNAVAILABLE_PATH)
                .into_iter()
                .next()
            {
                return Err(Skip::Invalid(error.to_string()));
            }
            (value, Source::Native)
        }
        None => {
            let raw = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(names::MAX_UNAVAILABLE))
                .ok_or(Skip::Unset)?;
            let value = rules::annotation_value(raw).map_err(|errors| {
                Skip::Invalid(errors.first().map(ToString::to_string).unwrap_or_default())
            })?;
            (value, Source::Annotation)
        }
    };
    let effective = rules::effective(&value, replicas);
    if effective <= 1 {
        return Err(Skip::AtMostOne);
    }
    let partition = rolling
        .and_then(|r| r.partition)
        .map_or(0, |p| i64::from(p.max(0)));
    if replicas <= 0 || partition >= replicas {
        return Err(Skip::Paused);
    }
    let status = set.status.as_ref();
    let observed = status.and_then(|s| s.observed_generation).unwrap_or(0);
    if observed < meta.generation.unwrap_or(0) {
        return Err(Skip::NotObserved);
    }
    let update_revision = status
        .and_then(|s| s.update_revision.clone())
        .filter(|r| !r.is_empty())
        .ok_or(Skip::NoUpdateRevision)?;
    let uid = meta
        .uid
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or(Skip::NoUid)?;
    let policy = match spec.pod_management_policy.as_deref() {
        Some("Parallel") => PodManagement::Parallel,
        _ => PodManagement::OrderedReady,
    };
    // The status the built-in controller last wrote is at least as high as what it uses
    // when it re-creates a pod: within a rollout the count only falls, so this errs on the
    // side of deleting less.
    let recreated_at_current_below = rolling.is_none().then(|| {
        status
            .and_then(|s| s.current_replicas)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0)
    });
    Ok(Rollout {
        uid,
        policy,
        replicas,
        partition: usize::try_from(partition).unwrap_or(usize::MAX),
        max_unavailable: usize::try_from(effective).unwrap_or(usize::MAX),
        source,
        min_ready_seconds: i64::from(spec.min_ready_seconds.unwrap_or(0).max(0)),
        update_revision,
        recreated_at_current_below,
    })
}

/// A pod to delete, with the preconditions that make the delete safe against a stale view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Deletion {
    pub ordinal: u32,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    /// Already unavailable: replacing it costs none of the budget.
    pub already_unavailable: bool,
}

/// Why no (further) pod is deleted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Every replica from the partition up is at the update revision (or being replaced).
    Nothing,
    /// `OrderedReady`: a batch starts only when every replica is available.
    NotAllAvailable,
    /// The unavailable replicas use the whole budget.
    BudgetUsed,
    /// Old pods are left to the built-in controller: `rollingUpdate` is nil, so each would
    /// come back at the old revision if deleted now (see [`Rollout::recreated_at_current_below`]).
    RecreatedAtCurrentRevision,
}

/// What to do for one set now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub max_unavailable: usize,
    /// Unavailable replicas over all ordinals, before the deletions.
    pub unavailable: usize,
    /// Old-revision pods at or above the partition, not terminating, before the deletions.
    pub outdated: usize,
    /// Of those, pods left to the built-in controller because they would come back at the
    /// old revision ([`Hold::RecreatedAtCurrentRevision`]).
    pub left_to_builtin: usize,
    /// Highest ordinal first (already unavailable ones first under `Parallel`).
    pub deletions: Vec<Deletion>,
    pub hold: Hold,
    /// A Ready pod becomes available after `minReadySeconds` without any event: look then.
    pub recheck_after: Option<Duration>,
}

struct Replica<'a> {
    position: usize,
    ordinal: u32,
    /// The pod, if this set controls it.
    pod: Option<&'a Pod>,
    health: Health,
}

impl Replica<'_> {
    /// Being replaced for the update: gone, or terminating at an old revision.
    fn is_being_replaced(&self, rollout: &Rollout, present: bool) -> bool {
        match self.health {
            Health::Missing => !present,
            Health::Terminating => self
                .pod
                .is_some_and(|p| revision(p) != Some(&rollout.update_revision)),
            _ => false,
        }
    }
}

fn revision(pod: &Pod) -> Option<&String> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(names::CONTROLLER_REVISION_HASH_LABEL))
}

impl Replica<'_> {
    /// An old-revision pod at or above the partition that is not already going.
    fn deletion(&self, rollout: &Rollout) -> Option<Deletion> {
        let pod = self.pod?;
        if self.position < rollout.partition
            || matches!(self.health, Health::Missing | Health::Terminating)
        {
            return None;
        }
        if revision(pod) == Some(&rollout.update_revision) {
            return None;
        }
        Some(Deletion {
            ordinal: self.ordinal,
            name: pod.metadata.name.clone()?,
            uid: pod.metadata.uid.clone()?,
            resource_version: pod.metadata.resource_version.clone()?,
            already_unavailable: !self.health.is_available(),
        })
    }
}

fn controlled_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Plans one step: `pods` holds every ordinal of the set in order (as in
/// the controller's set snapshot), `now` is the clock.
pub(crate) fn plan(rollout: &Rollout, pods: &[(u32, Option<Arc<Pod>>)], now: Timestamp) -> Plan {
    let replicas: Vec<Replica<'_>> = pods
        .iter()
        .enumerate()
        .map(|(position, (ordinal, pod))| {
            let pod = pod.as_deref().filter(|p| controlled_by(p, &rollout.uid));
            let health = pod.map_or(Health::Missing, |p| {
                health(p, rollout.min_ready_seconds, now)
            });
            Replica {
                position,
                ordinal: *ordinal,
                pod,
                health,
            }
        })
        .collect();
    let unavailable = replicas.iter().filter(|r| !r.health.is_available()).count();
    let recheck_after = replicas
        .iter()
        .filter_map(|r| match r.health {
            Health::AvailableIn(d) => Some(d),
            _ => None,
        })
        .min();
    // Highest ordinal first, as upstream walks `replicas` from the end down to the partition.
    let outdated: Vec<(usize, Deletion)> = replicas
        .iter()
        .rev()
        .filter_map(|r| r.deletion(rollout).map(|d| (r.position, d)))
        .collect();
    let floor = rollout.recreated_at_current_below.unwrap_or(0);
    let (candidates, left): (Vec<_>, Vec<_>) = outdated
        .into_iter()
        .partition(|(position, _)| *position >= floor);
    let highest_candidate = candidates.first().map(|(position, _)| *position);
    let candidates: Vec<Deletion> = candidates.into_iter().map(|(_, d)| d).collect();
    let max = rollout.max_unavailable;
    let mut plan = Plan {
        max_unavailable: max,
        unavailable,
        outdated: candidates.len() + left.len(),
        left_to_builtin: left.len(),
        deletions: Vec::new(),
        hold: Hold::Nothing,
        recheck_after,
    };
    if candidates.is_empty() {
        if !left.is_empty() {
            plan.hold = Hold::RecreatedAtCurrentRevision;
        }
        return plan;
    }
    let budget = max.saturating_sub(unavailable);
    match rollout.policy {
        PodManagement::OrderedReady => {
            // Upstream starts a batch only when every replica is available. With the gate off
            // the built-in controller starts each step itself, deleting the top old pod in the
            // same sync that reveals the new revision; a batch may join it: the unavailable
            // replicas must be exactly those being replaced directly above the next pod to
            // delete (a re-created pod above a missing one means the last batch is not done).
            let joins_batch = highest_candidate.is_some_and(|top| {
                replicas
                    .iter()
                    .filter(|r| !r.health.is_available())
                    .enumerate()
                    .all(|(i, r)| {
                        r.position == top + 1 + i
                            && r.is_being_replaced(
                                rollout,
                                pods.get(r.position).is_some_and(|(_, p)| p.is_some()),
                            )
                    })
            });
            if unavailable > 0 && !joins_batch {
                plan.hold = Hold::NotAllAvailable;
                return plan;
            }
            plan.deletions = candidates.into_iter().take(budget).collect();
        }
        PodManagement::Parallel => {
            // Phase 1: old pods that are unavailable anyway, at most maxUnavailable a step.
            let (broken, healthy): (Vec<_>, Vec<_>) =
                candidates.into_iter().partition(|d| d.already_unavailable);
            plan.deletions.extend(broken.into_iter().take(max));
            // Phase 2: each deletion of an available pod adds one unavailable replica.
            plan.deletions.extend(healthy.into_iter().take(budget));
        }
    }
    if plan.deletions.len() < plan.outdated - plan.left_to_builtin {
        plan.hold = Hold::BudgetUsed;
    } else if plan.left_to_builtin > 0 {
        plan.hold = Hold::RecreatedAtCurrentRevision;
    }
    plan
}

/// The note of a batch's `MaxUnavailableBatch` Event; [`read_batch_note`] reads it back.
pub(crate) fn batch_note(
    pods: &[&str],
    update_revision: &str,
    max_unavailable: usize,
    unavailable_before: usize,
) -> String {
    format!(
        "Deleted {} for the update to revision {update_revision} (maxUnavailable {max_unavailable}, {unavailable_before} unavailable before)",
        pod_list(pods)
    )
}

/// What a batch's note says: how many pods it deleted, for which revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchNote {
    pub pods: usize,
    pub update_revision: String,
}

/// Reads a note [`batch_note`] wrote (`status` shows the batch of the update in progress).
pub(crate) fn read_batch_note(note: &str) -> Option<BatchNote> {
    let rest = note.strip_prefix("Deleted ")?;
    let (list, rest) = rest.split_once(" for the update to revision ")?;
    let (update_revision, _) = rest.split_once(" (")?;
    // Pod names are DNS labels: no spaces, so " and N more" can only be the list's end.
    let (named, more) = match list.rsplit_once(" and ") {
        Some((named, more)) => (named, more.strip_suffix(" more")?.parse().ok()?),
        None => (list, 0),
    };
    Some(BatchNote {
        pods: named.split(", ").count() + more,
        update_revision: update_revision.to_owned(),
    })
}

/// The pods of a batch for an event note, which must stay under 1 kB.
fn pod_list(pods: &[&str]) -> String {
    const SHOWN: usize = 10;
    let mut list = pods
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if pods.len() > SHOWN {
        list.push_str(&format!(" and {} more", pods.len() - SHOWN));
    }
    list
}

#[cfg(test)]
mod tests;
