//! The conditions a StatefulSet should carry, and the progress record that must survive
//! restarts: pure, from the set as observed, the record read back from it, and the time.
//!
//! Progress is judged from observable state only, as the Deployment controller's
//! `DeploymentProgressing` does (pkg/controller/deployment/util): a rollout made progress
//! when any count reached a level it had not reached before in this rollout — more
//! replicas updated, ready or available, fewer outdated replicas, replicas closer to the
//! desired count, the controller observing the new generation, the current revision
//! moving, more volume claims compatible or fewer still updating. High-water marks rather
//! than "changed since last time" so that a pod flapping between ready and not ready does
//! not reset the deadline forever.
//!
//! The record ([`Progress`], annotation `stateful-admission.io/progress`) holds the rollout
//! it belongs to, those high-water marks, when progress was last seen, whether the rollout
//! completed, and when each condition last changed status. It lives on the object because
//! the built-in controller rebuilds `.status` (dropping our conditions) on its next write,
//! and because this controller may restart; it is written only when one of those facts
//! changes, never to refresh a time, and not for `Available` turning alone (that follows pod
//! readiness; its time lives in memory and rides along with the next write of the record).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names;

pub(crate) const AVAILABLE: &str = "Available";
pub(crate) const PROGRESSING: &str = "Progressing";

/// Condition reasons. Deployment's names (`NewReplicaSetAvailable`, `ReplicaSetUpdated`)
/// speak of ReplicaSets; these say what a StatefulSet is doing.
pub(crate) mod reason {
    /// Available=True: `availableReplicas >= replicas`.
    pub(crate) const REPLICAS_AVAILABLE: &str = "ReplicasAvailable";
    /// Available=False.
    pub(crate) const REPLICAS_UNAVAILABLE: &str = "ReplicasUnavailable";
    /// Progressing=True: fewer replicas exist than desired.
    pub(crate) const SCALING_UP: &str = "ScalingUp";
    /// Progressing=True: more replicas exist than desired.
    pub(crate) const SCALING_DOWN: &str = "ScalingDown";
    /// Progressing=True: replicas still to move to the update revision (or the controller
    /// has not yet observed the latest generation).
    pub(crate) const UPDATING_REPLICAS: &str = "UpdatingReplicas";
    /// Progressing=True: the claim rollout (`volume-claim-status`) still has claims updating.
    pub(crate) const UPDATING_VOLUME_CLAIMS: &str = "UpdatingVolumeClaims";
    /// Progressing=True: every replica exists and is updated, not all are available yet.
    pub(crate) const WAITING_FOR_AVAILABILITY: &str = "WaitingForAvailability";
    /// Progressing=True: every replica updated and available, claims done (Deployment's
    /// `NewReplicaSetAvailable`). Kept until the next rollout, as Deployment does: later
    /// availability changes show in `Available`.
    pub(crate) const ROLLOUT_COMPLETE: &str = "RolloutComplete";
    /// Progressing=False: no progress for the deadline (Deployment's `TimedOutReason`).
    pub(crate) const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
}

/// Default of `stateful-admission.io/progress-deadline-seconds` (Deployment's default).
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);

/// What the conditions are computed from, read off the set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub name: String,
    /// Identifies the rollout: the generation and the desired claim templates.
    pub rollout: String,
    pub generation: i64,
    pub observed_generation: i64,
    /// `spec.replicas`.
    pub desired: i64,
    /// `spec.updateStrategy.rollingUpdate.partition`, clamped to `0..=desired`.
    pub partition: i64,
    /// `updateStrategy: OnDelete`: the user replaces pods, the rollout does not wait for it.
    pub on_delete: bool,
    pub current_revision: Option<String>,
    pub update_revision: Option<String>,
    pub replicas: i64,
    pub ready: i64,
    pub available: i64,
    pub updated: i64,
    /// Sums over the templates of `volume-claim-status`, when it exists and parses.
    pub claims: Option<ClaimCounts>,
    pub deadline: Duration,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClaimCounts {
    pub compatible: i64,
    pub updating: i64,
}

/// Reads what the plan needs from a set.
pub(crate) fn observe(set: &StatefulSet) -> Observed {
    let annotations = set.metadata.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    let status = set.status.as_ref();
    let count = |f: fn(&k8s_openapi::api::apps::v1::StatefulSetStatus) -> Option<i32>| {
        status.and_then(f).map_or(0, i64::from)
    };
    let desired = i64::from(set.spec.replicas.unwrap_or(1).max(0));
    let strategy = set.spec.update_strategy.as_ref();
    let on_delete = strategy.and_then(|s| s.type_.as_deref()) == Some("OnDelete");
    let partition = strategy
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .map_or(0, i64::from)
        .clamp(0, desired);
    let generation = set.metadata.generation.unwrap_or(0);
    let templates = annotation(names::DESIRED_VOLUME_CLAIM_TEMPLATES);
    Observed {
        name: set.metadata.name.clone().unwrap_or_default(),
        rollout: rollout_key(generation, templates),
        generation,
        observed_generation: status.and_then(|s| s.observed_generation).unwrap_or(0),
        desired,
        partition,
        on_delete,
        current_revision: status.and_then(|s| s.current_revision.clone()),
        update_revision: status.and_then(|s| s.update_revision.clone()),
        replicas: status.map_or(0, |s| i64::from(s.replicas)),
        ready: count(|s| s.ready_replicas),
        available: count(|s| s.available_replicas),
        updated: count(|s| s.updated_replicas),
        claims: annotation(names::VOLUME_CLAIM_STATUS).and_then(claim_counts),
        deadline: deadline(annotation(names::PROGRESS_DEADLINE_SECONDS)),
    }
}

/// `progress-deadline-seconds`: a positive integer up to Go's int32 maximum (like
/// `spec.progressDeadlineSeconds`); anything else means the default.
pub(crate) fn deadline(value: Option<&str>) -> Duration {
    value
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|s| (1..=i32::MAX.unsigned_abs()).contains(s))
        .map_or(DEFAULT_DEADLINE, |s| Duration::from_secs(u64::from(s)))
}

/// Sums `compatible` and `updating` of the claim rollout's status: JSON per template,
/// either an object keyed by template name or an array. Entries without those counts are
/// skipped; a value that is not JSON of either shape counts as no status.
pub(crate) fn claim_counts(text: &str) -> Option<ClaimCounts> {
    let value: Value = serde_json::from_str(text).ok()?;
    let entries: Vec<&Value> = match &value {
        Value::Object(map) if map.contains_key("updating") => vec![&value],
        Value::Object(map) => map.values().collect(),
        Value::Array(items) => items.iter().collect(),
        _ => return None,
    };
    let field = |e: &Value, k: &str| e.get(k).and_then(Value::as_i64).filter(|n| *n >= 0);
    let mut counts = ClaimCounts::default();
    for entry in entries {
        counts.compatible = counts
            .compatible
            .saturating_add(field(entry, "compatible").unwrap_or(0));
        counts.updating = counts
            .updating
            .saturating_add(field(entry, "updating").unwrap_or(0));
    }
    Some(counts)
}

/// `<generation>/<hash of the desired claim templates>`: a spec change or a template edit
/// starts a new rollout.
pub(crate) fn rollout_key(generation: i64, templates: Option<&str>) -> String {
    match templates {
        Some(t) => format!("{generation}/{:016x}", fnv1a(t.as_bytes())),
        None => generation.to_string(),
    }
}

/// FNV-1a: a hash that stays the same across builds (the record outlives the binary).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The progress record kept in the `stateful-admission.io/progress` annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Progress {
    /// The rollout this record is about ([`rollout_key`]).
    pub rollout: String,
    /// The rollout completed (sticky until the next rollout, or claims start updating).
    pub complete: bool,
    /// When progress was last seen (RFC 3339, seconds).
    pub progress_at: String,
    /// High-water marks of this rollout.
    pub best: Marks,
    /// When each condition took its current status, to restore `lastTransitionTime`
    /// after the built-in controller dropped the conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<Transition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progressing: Option<Transition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Transition {
    pub status: String,
    pub since: String,
}

/// The levels reached; see the module docs for which direction is progress.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Marks {
    pub observed_generation: i64,
    pub updated: i64,
    pub ready: i64,
    pub available: i64,
    /// Replicas not yet at the update revision (lower is better).
    pub outdated: i64,
    /// Distance between existing and desired replicas (lower is better).
    pub away: i64,
    pub claims_compatible: i64,
    /// Claims still updating (lower is better).
    pub claims_updating: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
}

impl Marks {
    fn of(o: &Observed) -> Self {
        let claims = o.claims.unwrap_or_default();
        Self {
            observed_generation: o.observed_generation,
            updated: o.updated,
            ready: o.ready,
            available: o.available,
            outdated: (o.replicas - o.updated).max(0),
            away: (o.replicas - o.desired).abs(),
            claims_compatible: claims.compatible,
            claims_updating: claims.updating,
            current_revision: o.current_revision.clone(),
        }
    }

    fn surpassed_by(&self, now: &Self) -> bool {
        now.observed_generation > self.observed_generation
            || now.updated > self.updated
            || now.ready > self.ready
            || now.available > self.available
            || now.outdated < self.outdated
            || now.away < self.away
            || now.claims_compatible > self.claims_compatible
            || now.claims_updating < self.claims_updating
            || now.current_revision != self.current_revision
    }

    fn merged(&self, now: &Self) -> Self {
        Self {
            observed_generation: self.observed_generation.max(now.observed_generation),
            updated: self.updated.max(now.updated),
            ready: self.ready.max(now.ready),
            available: self.available.max(now.available),
            outdated: self.outdated.min(now.outdated),
            away: self.away.min(now.away),
            claims_compatible: self.claims_compatible.max(now.claims_compatible),
            claims_updating: self.claims_updating.min(now.claims_updating),
            current_revision: now.current_revision.clone(),
        }
    }
}

/// Reads the record; a missing or malformed one counts as none (it is rewritten).
pub(crate) fn read_progress(set: &StatefulSet) -> Option<Progress> {
    let text = set.metadata.annotations.as_ref()?.get(names::PROGRESS)?;
    serde_json::from_str(text).ok()
}

/// Where the rollout stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    Complete,
    /// Under way, within the deadline: `(reason, what is going on)`.
    Progressing(&'static str, String),
    /// Under way, no progress for the deadline: what was going on.
    Stalled(String),
}

/// How long after a deadline the set is looked at again.
pub(crate) const LOOK_AGAIN_MARGIN: Duration = Duration::from_millis(100);

/// What to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    pub phase: Phase,
    /// The full `status.conditions` list, when it differs from the set's.
    pub conditions: Option<Vec<StatefulSetCondition>>,
    /// The record, when it differs from the set's.
    pub progress: Option<Progress>,
    /// The set has a record it no longer needs: remove it.
    pub remove_progress: bool,
    /// Progressing just turned False: warn.
    pub deadline_exceeded: bool,
    /// The conditions say no more than the set's status does (every replica updated and
    /// available, the generation observed, no claim updating: `Available=True`,
    /// `Progressing=True RolloutComplete`): a set carrying none of ours is taken to say this.
    pub steady: bool,
    /// Look again by then (the deadline of an unfinished rollout).
    pub look_again: Option<Duration>,
}

/// Seconds precision, as the apiserver stores times.
pub(crate) fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

fn truncate_to_seconds(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// Whether every replica is updated and available, the controller saw the latest
/// generation and no claim is updating — Deployment's `DeploymentComplete`, with the
/// partition and claims of a StatefulSet.
pub(crate) fn is_complete(o: &Observed) -> bool {
    o.observed_generation >= o.generation
        && o.replicas == o.desired
        && o.available >= o.desired
        && replicas_updated(o)
        && o.claims.is_none_or(|c| c.updating == 0)
}

/// Pods on the update revision as far as the strategy goes: all of them, or those at and
/// above the partition; with `OnDelete` the user replaces pods, so nothing is awaited.
fn replicas_updated(o: &Observed) -> bool {
    if o.on_delete {
        return true;
    }
    let revisions_agree = match (&o.current_revision, &o.update_revision) {
        (Some(current), Some(update)) => current == update,
        _ => true,
    };
    o.updated >= o.desired - o.partition && (o.partition > 0 || revisions_agree)
}

/// What an unfinished rollout is doing: `(reason, detail)`.
fn under_way(o: &Observed) -> (&'static str, String) {
    let claims_updating = o.claims.map_or(0, |c| c.updating);
    if o.replicas > o.desired {
        (
            reason::SCALING_DOWN,
            format!(
                "scaling down: {} replicas, {} desired",
                o.replicas, o.desired
            ),
        )
    } else if o.replicas < o.desired {
        (
            reason::SCALING_UP,
            format!(
                "scaling up: {} of {} replicas created, {} available",
                o.replicas, o.desired, o.available
            ),
        )
    } else if !replicas_updated(o) || o.observed_generation < o.generation {
        let revision = o.update_revision.as_deref().map_or_else(
            || "a new revision".to_owned(),
            |r| format!("revision {r:?}"),
        );
        (
            reason::UPDATING_REPLICAS,
            format!(
                "rolling out {revision}: {} of {} replicas updated",
                o.updated,
                o.desired - o.partition
            ),
        )
    } else if claims_updating > 0 {
        (
            reason::UPDATING_VOLUME_CLAIMS,
            format!("updating volume claims: {claims_updating} still updating"),
        )
    } else {
        (
            reason::WAITING_FOR_AVAILABILITY,
            format!(
                "waiting for replicas to become available: {} of {} available",
                o.available, o.desired
            ),
        )
    }
}

/// Whether the set's own status says its last rollout finished, with no record needed: the
/// built-in controller moved `currentRevision` to `updateRevision` (its `completeRollingUpdate`
/// does so only once every replica is updated and ready, `stateful_set_utils.go`), it observed
/// the latest generation, the replica count is the desired one and no claim is updating.
/// Partitioned and `OnDelete` sets never get there (the built-in controller completes only
/// unpartitioned `RollingUpdate`s), so they keep the record.
pub(crate) fn settled(o: &Observed) -> bool {
    rollout_finished(o) && o.replicas == o.desired && o.updated >= o.desired
}

/// [`settled`] but for the replicas: the built-in controller's last rollout finished and no
/// spec change came since. A pod that went missing (deleted, evicted, its node gone) lowers
/// `replicas` and `updatedReplicas` until it is re-created, without any rollout: once this
/// rollout was seen complete, that is availability, as a Deployment's completed rollout stays
/// complete when a pod dies (a spec change, `kubectl scale` too, is a new generation).
fn rollout_finished(o: &Observed) -> bool {
    !o.on_delete
        && o.partition == 0
        && o.observed_generation >= o.generation
        && o.current_revision.is_some()
        && o.current_revision == o.update_revision
        && o.claims.is_none_or(|c| c.updating == 0)
}

/// When our two conditions last changed status, as this process last wrote or saw them: what
/// keeps `lastTransitionTime` across the built-in controller's status writes for a set
/// without a record. In memory only, so a restart forgets it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Remembered {
    pub available: Option<Transition>,
    pub progressing: Option<Transition>,
    /// The rollout ([`rollout_key`]) last seen complete: it stays complete while only
    /// availability moves, as with a record.
    pub completed: Option<String>,
}

impl Remembered {
    /// Our conditions' statuses and transition times in `conditions`.
    pub(crate) fn of(conditions: &[StatefulSetCondition]) -> Self {
        let find = |type_: &str| {
            conditions
                .iter()
                .find(|c| c.type_.as_deref() == Some(type_))
                .and_then(|c| {
                    Some(Transition {
                        status: c.status.clone()?,
                        since: format_time(c.last_transition_time.as_ref()?.0),
                    })
                })
        };
        Self {
            available: find(AVAILABLE),
            progressing: find(PROGRESSING),
            completed: None,
        }
    }
}

fn fresh(o: &Observed, now: &str, complete: bool) -> Progress {
    Progress {
        rollout: o.rollout.clone(),
        complete,
        progress_at: now.to_owned(),
        best: Marks::of(o),
        available: None,
        progressing: None,
    }
}

/// Decides the conditions and the record of one set at time `now`, remembering nothing (the
/// tables of tests).
#[cfg(test)]
pub(crate) fn plan(
    o: &Observed,
    existing: &[StatefulSetCondition],
    recorded: Option<&Progress>,
    now: Timestamp,
) -> Decision {
    plan_remembering(o, existing, recorded, None, now)
}

/// [`plan`], with what this process remembers of the set: its conditions' transition times
/// (newer than a record's) and the rollout it last saw complete.
///
/// A set without a record whose status says it is [`settled`] is complete, and gets no record;
/// a record is removed once its rollout is complete and settled. The record exists only while
/// a rollout is in flight (or, for partitioned and `OnDelete` sets, which never settle, until
/// the next rollout). Whether and when the conditions decided here are written is
/// for the controller's pacing to say.
pub(crate) fn plan_remembering(
    o: &Observed,
    existing: &[StatefulSetCondition],
    recorded: Option<&Progress>,
    remembered: Option<&Remembered>,
    now: Timestamp,
) -> Decision {
    let exact_now = now;
    let complete_now = is_complete(o);
    // Complete now, or seen complete in this rollout and only availability moved since (pods
    // unready, or missing until the built-in controller re-creates them).
    let unrecorded_settled = recorded.is_none()
        && ((settled(o) && complete_now)
            || (rollout_finished(o)
                && remembered.is_some_and(|m| m.completed.as_ref() == Some(&o.rollout))));
    let now = truncate_to_seconds(now);
    let now_text = format_time(now);
    let marks = Marks::of(o);
    let claims_updating = o.claims.is_some_and(|c| c.updating > 0);

    let (mut progress, phase) = match recorded.filter(|r| r.rollout == o.rollout) {
        // A new rollout (or none recorded): starting is progress.
        None => {
            let mut p = fresh(o, &now_text, complete_now);
            if let Some(r) = recorded {
                p.available = r.available.clone();
                p.progressing = r.progressing.clone();
            }
            (
                p,
                // Settled and only availability dipped: done, as a Deployment stays done.
                if complete_now || unrecorded_settled {
                    Phase::Complete
                } else {
                    progressing(o)
                },
            )
        }
        // Done, and only availability moved since: stays done, as a Deployment's does.
        Some(r) if r.complete && !claims_updating => (r.clone(), Phase::Complete),
        // Done, then the claim rollout started: a new phase of the same rollout.
        Some(r) if r.complete => {
            let mut p = fresh(o, &now_text, false);
            p.available = r.available.clone();
            p.progressing = r.progressing.clone();
            (p, progressing(o))
        }
        Some(r) => {
            let mut p = r.clone();
            if complete_now || r.best.surpassed_by(&marks) {
                p.best = r.best.merged(&marks);
                p.progress_at.clone_from(&now_text);
                p.complete = complete_now;
                (
                    p,
                    if complete_now {
                        Phase::Complete
                    } else {
                        progressing(o)
                    },
                )
            } else {
                let since = parse_time(&r.progress_at).unwrap_or(now);
                let idle = since.duration_until(now);
                if !idle.is_negative() && idle.unsigned_abs() >= o.deadline {
                    (p, Phase::Stalled(under_way(o).1))
                } else {
                    (p, progressing(o))
                }
            }
        }
    };

    // What this process remembers of the transitions is newer than the record: the record is
    // not rewritten for `Available` alone (see the module docs), only carries it along.
    if let Some(m) = remembered {
        if m.available.is_some() {
            progress.available.clone_from(&m.available);
        }
        if m.progressing.is_some() {
            progress.progressing.clone_from(&m.progressing);
        }
    }

    let available_now = o.available >= o.desired;
    let available = condition(
        AVAILABLE,
        available_now,
        if available_now {
            reason::REPLICAS_AVAILABLE
        } else {
            reason::REPLICAS_UNAVAILABLE
        },
        format!("{} of {} replicas available.", o.available, o.desired),
    );
    let progressing_condition = match &phase {
        Phase::Complete => condition(
            PROGRESSING,
            true,
            reason::ROLLOUT_COMPLETE,
            match &o.update_revision {
                Some(r) => format!(
                    "StatefulSet {:?} has successfully rolled out revision {r:?}.",
                    o.name
                ),
                None => format!("StatefulSet {:?} has successfully rolled out.", o.name),
            },
        ),
        Phase::Progressing(why, detail) => condition(
            PROGRESSING,
            true,
            why,
            format!("StatefulSet {:?} is {detail}.", o.name),
        ),
        Phase::Stalled(detail) => condition(
            PROGRESSING,
            false,
            reason::PROGRESS_DEADLINE_EXCEEDED,
            format!(
                "StatefulSet {:?} has made no progress for {}s while {detail}.",
                o.name,
                o.deadline.as_secs()
            ),
        ),
    };

    let was_stalled = recorded
        .and_then(|r| r.progressing.as_ref())
        .is_some_and(|t| t.status == "False");
    let mut ours = [available, progressing_condition];
    for (c, record) in ours
        .iter_mut()
        .zip([&mut progress.available, &mut progress.progressing])
    {
        let since = existing
            .iter()
            .find(|e| e.type_ == c.type_ && e.status == c.status)
            .and_then(|e| e.last_transition_time.clone())
            .or_else(|| {
                record
                    .as_ref()
                    .filter(|t| Some(&t.status) == c.status.as_ref())
                    .and_then(|t| parse_time(&t.since))
                    .map(Time)
            })
            .unwrap_or(Time(now));
        if record
            .as_ref()
            .is_none_or(|t| Some(&t.status) != c.status.as_ref())
        {
            *record = Some(Transition {
                status: c.status.clone().unwrap_or_default(),
                since: format_time(since.0),
            });
        }
        c.last_transition_time = Some(since);
    }

    let mut conditions: Vec<StatefulSetCondition> = Vec::with_capacity(existing.len() + 2);
    for e in existing {
        match ours.iter().find(|c| c.type_ == e.type_) {
            // Ours replace theirs in place; a duplicate of our type is dropped.
            Some(c) if !conditions.iter().any(|x| x.type_ == c.type_) => conditions.push(c.clone()),
            Some(_) => {}
            None => conditions.push(e.clone()),
        }
    }
    for c in &ours {
        if !conditions.iter().any(|x| x.type_ == c.type_) {
            conditions.push(c.clone());
        }
    }

    let look_again = match &phase {
        Phase::Progressing(..) => {
            let since = parse_time(&progress.progress_at).unwrap_or(now);
            let due = since
                .checked_add(jiff::SignedDuration::try_from(o.deadline).unwrap_or_default())
                .unwrap_or(now);
            let left = exact_now.duration_until(due);
            let left = if left.is_negative() {
                Duration::ZERO
            } else {
                left.unsigned_abs()
            };
            // A little late, so that the deadline has surely passed at the next look.
            Some(left + LOOK_AGAIN_MARGIN)
        }
        Phase::Complete | Phase::Stalled(_) => None,
    };
    // The built-in controller completed the rollout: the set's status says so from now on,
    // so the record goes (its transition times live on in the conditions and in memory).
    let drop_record = recorded.is_some() && settled(o) && matches!(phase, Phase::Complete);
    Decision {
        deadline_exceeded: matches!(phase, Phase::Stalled(_)) && !was_stalled,
        phase,
        // What they say, not when: a list that differs only in `lastTransitionTime` is not
        // worth a write.
        conditions: (said(&conditions) != said(existing)).then_some(conditions),
        progress: (!unrecorded_settled
            && !drop_record
            && recorded.is_none_or(|r| !same_facts(r, &progress)))
        .then_some(progress),
        remove_progress: drop_record,
        steady: complete_now,
        look_again,
    }
}

/// Whether two records hold the same facts: all but `Available`'s transition, which follows
/// readiness and would rewrite the record (a write to the set) on every pod turning ready or
/// unready. It is kept in memory and rides along with the record's next write; after a
/// restart an `Available` dropped meanwhile comes back with the restore time, as for a set
/// without a record.
fn same_facts(a: &Progress, b: &Progress) -> bool {
    Progress {
        available: None,
        ..a.clone()
    } == Progress {
        available: None,
        ..b.clone()
    }
}

/// What our two conditions say, as a user reads them: type, status, reason and message of
/// `Available` and `Progressing`, not when they last changed (a fingerprint, stable across
/// builds); `None` when neither is there.
pub(crate) fn said(conditions: &[StatefulSetCondition]) -> Option<u64> {
    let ours = [AVAILABLE, PROGRESSING].map(|type_| {
        conditions
            .iter()
            .find(|c| c.type_.as_deref() == Some(type_))
    });
    if ours.iter().all(Option::is_none) {
        return None;
    }
    let mut text = String::new();
    for c in ours {
        match c {
            Some(c) => {
                for part in [&c.type_, &c.status, &c.reason, &c.message] {
                    text.push_str(part.as_deref().unwrap_or_default());
                    text.push('\u{1f}');
                }
            }
            None => text.push('\u{1e}'),
        }
    }
    Some(fnv1a(text.as_bytes()))
}

fn progressing(o: &Observed) -> Phase {
    let (why, detail) = under_way(o);
    Phase::Progressing(why, detail)
}

fn condition(type_: &str, status: bool, reason: &str, message: String) -> StatefulSetCondition {
    StatefulSetCondition {
        type_: Some(type_.to_owned()),
        status: Some(if status { "True" } else { "False" }.to_owned()),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_transition_time: None,
    }
}

#[cfg(test)]
mod tests;
