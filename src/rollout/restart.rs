//! Expansions that wait for a pod restart (offline node expansion), planned: which replica's
//! pod to evict now so that its claims' file systems grow, as KEP-4650 puts it: "we update the
//! PVC whenever we would re-create the Pod; we wait for the PVC to be compatible whenever we
//! would wait for the Pod to be available".
//!
//! Many CSI drivers grow a file system only while the volume is not in use (no `ONLINE`
//! `NodeExpansion` capability): the claim stops at condition `FileSystemResizePending` (the
//! controller part of the expansion done) with `status.capacity` unchanged until its pod is
//! re-created. Where the set opts in (`stateful-admission.io/restart-pods-for-resize`, or the
//! `serve` default), once a claim has waited so for the grace period (a kubelet finishes an
//! online-capable volume within seconds of the condition, so such a volume is never restarted
//! for), the replica's pod is evicted through the Eviction API, so PodDisruptionBudgets hold:
//!
//! - in the rollout's order, highest ordinal first, never below the partition;
//! - at most the rollout's budget (maxUnavailable) of replicas unavailable at once, counting
//!   those restarting and those down for any other reason, as upstream's rolling update does;
//! - moving on only once the re-created pod is available (Ready for `minReadySeconds`) and every
//!   claim of the replica has its capacity;
//! - never under `updateStrategy: OnDelete` (there the user deletes pods: said, not done), and
//!   never a pod the StatefulSet controller is replacing anyway (a pod template rollout in
//!   progress, a pod gone or terminating): that is waited for.
//!
//! Crash and failover safe: the restart is recorded on the claim
//! (`stateful-admission.io/resize-restart`, the pod's uid) before the eviction, which carries
//! that uid as its precondition. A controller that starts again sends the eviction again while
//! the recorded pod is there (the same pod: never a second one), and waits for the new one
//! otherwise; the record goes once the claim has its capacity and the new pod is available. A
//! pod that came back without the file system growing is reported, never evicted again.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde::{Deserialize, Serialize};

use super::health::{Health, health};
use crate::names;
use crate::quantity::Quantity;

/// `serve`'s `--resize-restart-grace` by default; `status` judges with it.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// The condition a claim has once the controller part of an expansion is done and the file
/// system waits for the node (upstream `PersistentVolumeClaimFileSystemResizePending`).
pub(crate) const FILE_SYSTEM_RESIZE_PENDING: &str = "FileSystemResizePending";

/// The record of a restart, in a claim's `stateful-admission.io/resize-restart` annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Record {
    /// The pod evicted.
    pub pod: String,
    /// Its uid: the eviction's precondition, and how its replacement is told apart.
    #[serde(rename = "podUID")]
    pub pod_uid: String,
    /// When the restart was decided.
    pub at: Timestamp,
    /// The claim's storage request it was decided for: a later resize (another request) is a
    /// new restart, even where this one came back without the file system growing. Absent
    /// in records written before it was kept: those stand for whatever the claim asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
}

impl Record {
    pub(crate) fn of(claim: &PersistentVolumeClaim) -> Option<Self> {
        claim
            .metadata
            .annotations
            .as_ref()?
            .get(names::RESIZE_RESTART)
            .and_then(|text| serde_json::from_str(text).ok())
    }

    pub(crate) fn render(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Where a claim's expansion stands, as far as a restart goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resize {
    /// Nothing asked beyond the capacity.
    Done,
    /// Growing, without waiting for a restart (or not bound yet).
    InProgress,
    /// The file system waits for the pod to be re-created, since then.
    WaitsForRestart { since: Option<Timestamp> },
}

impl Resize {
    pub(crate) fn of(claim: &PersistentVolumeClaim) -> Self {
        let quantity = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
            q.and_then(|q| Quantity::parse(&q.0).ok())
        };
        let request = quantity(
            claim
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage")),
        );
        let status = claim.status.as_ref();
        let capacity = quantity(
            status
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| c.get("storage")),
        );
        match (request, capacity) {
            (Some(r), Some(c)) if c >= r => return Self::Done,
            (None, _) => return Self::Done,
            _ => {}
        }
        let pending = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == FILE_SYSTEM_RESIZE_PENDING && c.status == "True");
        match pending {
            Some(condition) => Self::WaitsForRestart {
                since: condition.last_transition_time.as_ref().map(|t| t.0),
            },
            None => Self::InProgress,
        }
    }
}

/// One claim of a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// `spec.resources.requests.storage` as written.
    pub request: Option<String>,
    pub resize: Resize,
    pub record: Option<Record>,
}

impl Claim {
    pub(crate) fn of(claim: &PersistentVolumeClaim) -> Self {
        Self {
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            request: claim
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .map(|q| q.0.clone()),
            resize: Resize::of(claim),
            record: Record::of(claim),
        }
    }

    /// Its record, where it stands for the resize the claim asks for now.
    pub(crate) fn current_record(&self) -> Option<&Record> {
        self.record
            .as_ref()
            .filter(|r| r.size.is_none() || r.size == self.request)
    }

    /// A record left by an earlier resize (the claim asks for another size since).
    fn stale_record(&self) -> bool {
        self.record.is_some() && self.current_record().is_none()
    }

    fn waits(&self) -> bool {
        matches!(self.resize, Resize::WaitsForRestart { .. })
    }
}

/// A replica's pod as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodState {
    pub name: String,
    pub uid: String,
    pub revision: Option<String>,
    pub health: Health,
    /// When it last became Ready (its `Ready` condition's transition), else when it was made.
    pub ready_since: Option<Timestamp>,
    /// When it was made.
    pub created: Option<Timestamp>,
}

impl PodState {
    pub(crate) fn of(pod: &Pod, min_ready_seconds: i64, now: Timestamp) -> Option<Self> {
        Some(Self {
            name: pod.metadata.name.clone()?,
            uid: pod.metadata.uid.clone()?,
            revision: pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(names::CONTROLLER_REVISION_HASH_LABEL))
                .cloned(),
            health: health(pod, min_ready_seconds, now),
            ready_since: pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
                .and_then(|c| c.last_transition_time.as_ref())
                .or(pod.metadata.creation_timestamp.as_ref())
                .map(|t| t.0),
            created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        })
    }
}

/// One replica: its index among the set's ordinals, ordinal, pod and claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replica {
    pub index: usize,
    pub ordinal: u32,
    pub pod: Option<PodState>,
    /// How long an eviction of its pod still waits after a PodDisruptionBudget refused one.
    pub backoff: Option<Duration>,
    pub claims: Vec<Claim>,
}

/// The set-wide inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The set opted in (its annotation, else the `serve` default).
    pub restart: bool,
    /// `RollingUpdate` (true) or `OnDelete`.
    pub rolling: bool,
    /// Replica indices below this are not restarted (`RollingUpdate` only).
    pub partition: usize,
    /// Replicas that may be unavailable at once (resolved, at least 1).
    pub max_unavailable: usize,
    /// `status.updateRevision`: a pod at another revision is replaced by the StatefulSet
    /// controller anyway.
    pub update_revision: Option<String>,
    /// How long a claim waits at `FileSystemResizePending` before its pod is restarted.
    pub grace: Duration,
    /// The StatefulSet controller has seen the set's latest spec (`status.observedGeneration`
    /// at least `metadata.generation`): until then its revisions may be stale and a pod
    /// template rollout may be about to start, so no pod is restarted.
    pub observed: bool,
    pub now: Timestamp,
}

/// Why a replica whose claims wait for a restart is not restarted now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wait {
    /// The set did not opt in: the user restarts the pod.
    NotOptedIn,
    /// `updateStrategy: OnDelete`: the user deletes pods.
    OnDelete,
    /// Below the partition.
    Partition,
    /// The StatefulSet controller replaces the pod anyway (another revision), or it is gone or
    /// going: its re-creation is waited for.
    BeingReplaced,
    /// The budget is taken by replicas restarting, down, or about to be replaced by the rolling
    /// update of the pod template.
    Budget,
    /// The StatefulSet controller has not seen the set's latest spec yet.
    NotObserved,
    /// Within the grace period: an online-capable volume finishes meanwhile.
    Grace { left: Duration },
    /// Its eviction was refused (a PodDisruptionBudget): asked again once this has passed.
    Refused { left: Duration },
}

/// A claim an eviction is recorded on first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordOn {
    pub claim: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// Its storage request: the record's [`Record::size`].
    pub request: Option<String>,
}

/// What to do for one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Record the restart on these claims (those with no record yet), then evict the pod.
    Evict {
        ordinal: u32,
        pod: String,
        pod_uid: String,
        /// The claims to record it on, in order.
        record_on: Vec<RecordOn>,
    },
    /// The restart's record goes, and why.
    Clear {
        ordinal: u32,
        claim: String,
        uid: Option<String>,
        resource_version: Option<String>,
        why: Cleared,
    },
    /// Claims wait for a restart that is not made now, and why.
    Waiting {
        ordinal: u32,
        pod: Option<String>,
        claims: Vec<String>,
        why: Wait,
    },
    /// The pod was re-created but the file system still waits: said, not restarted again.
    StillWaiting {
        ordinal: u32,
        pod: String,
        claims: Vec<String>,
    },
}

/// Whether `set` restarts pods for resizes: its annotation
/// (`stateful-admission.io/restart-pods-for-resize`), else `default` (`serve`'s flag).
pub(crate) fn opted_in(set: &k8s_openapi::api::apps::v1::StatefulSet, default: bool) -> bool {
    match set
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::RESTART_PODS_FOR_RESIZE))
        .map(|v| v.trim())
    {
        Some("true") => true,
        Some("false") => false,
        _ => default,
    }
}

/// The planner's replicas of `set`: for each ordinal (in the set's order) the pod the set
/// controls (upstream's controller sees no other) and the claims (`claims(ordinal)`). No
/// backoff: the controller adds what it remembers of refusals.
pub(crate) fn replicas_of<'a>(
    set: &k8s_openapi::api::apps::v1::StatefulSet,
    ordinals: &[u32],
    pod: impl Fn(u32) -> Option<&'a Pod>,
    claims: impl Fn(u32) -> Vec<&'a PersistentVolumeClaim>,
    now: Timestamp,
) -> Vec<Replica> {
    let owner = set.metadata.uid.as_deref();
    let min_ready_seconds = i64::from(set.spec.min_ready_seconds.unwrap_or(0).max(0));
    ordinals
        .iter()
        .enumerate()
        .map(|(index, &ordinal)| Replica {
            index,
            ordinal,
            pod: pod(ordinal)
                .filter(|p| {
                    p.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == owner)
                })
                .and_then(|p| PodState::of(p, min_ready_seconds, now)),
            backoff: None,
            claims: claims(ordinal).into_iter().map(Claim::of).collect(),
        })
        .collect()
}

/// What a plan means for one claim of replica `ordinal`, for `status`: the same decision the
/// controller acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClaimRestart {
    /// Its pod is evicted now.
    Evicting { pod: String },
    /// It waits for a restart that is not made now, and why.
    Waiting { pod: Option<String>, why: Wait },
    /// Its pod was evicted for it; the new one or the growth is waited for.
    Restarting { record: Record },
    /// Its pod was re-created and the file system still waits: not evicted again.
    Stuck { pod: String },
    /// Its recorded restart will not be made.
    Cancelled { why: Cleared },
}

/// [`ClaimRestart`] of claim `claim` of replica `ordinal` in `plan`, where the plan says
/// anything of it.
pub(crate) fn claim_restart(plan: &Plan, ordinal: u32, claim: &str) -> Option<ClaimRestart> {
    for step in &plan.steps {
        match step {
            Step::Evict {
                ordinal: o, pod, ..
            } if *o == ordinal => return Some(ClaimRestart::Evicting { pod: pod.clone() }),
            Step::Waiting {
                ordinal: o,
                pod,
                claims,
                why,
            } if *o == ordinal && claims.iter().any(|c| c == claim) => {
                return Some(ClaimRestart::Waiting {
                    pod: pod.clone(),
                    why: why.clone(),
                });
            }
            Step::StillWaiting {
                ordinal: o,
                pod,
                claims,
            } if *o == ordinal && claims.iter().any(|c| c == claim) => {
                return Some(ClaimRestart::Stuck { pod: pod.clone() });
            }
            Step::Clear {
                ordinal: o,
                claim: c,
                why,
                ..
            } if *o == ordinal && c == claim && *why != Cleared::Finished => {
                return Some(ClaimRestart::Cancelled { why: *why });
            }
            _ => {}
        }
    }
    plan.restarting
        .iter()
        .find(|(o, _)| *o == ordinal)
        .map(|(_, record)| ClaimRestart::Restarting {
            record: record.clone(),
        })
}

/// Whether the StatefulSet controller has seen `set`'s latest spec ([`Settings::observed`]).
pub(crate) fn observed(set: &k8s_openapi::api::apps::v1::StatefulSet) -> bool {
    let observed = set
        .status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .unwrap_or(0);
    observed >= set.metadata.generation.unwrap_or(0)
}

/// Why a restart's record goes. A record is a promise to finish a restart, not an order to
/// repeat it: where the eviction it promised no longer applies, it goes, and only
/// [`Cleared::Finished`] is the restart done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cleared {
    /// The new pod is available and every recorded claim has its capacity.
    Finished,
    /// The set no longer opts in.
    OptedOut,
    /// The set's update strategy became `OnDelete`.
    OnDelete,
    /// The claim no longer waits for a restart (it finished growing online meanwhile).
    NoLongerWaits,
    /// The StatefulSet controller replaces the pod anyway (a pod template rollout): its
    /// re-creation is the restart.
    BeingReplaced,
    /// The replica is below the partition now.
    Partition,
    /// The claim asks for another size since: a new restart, if one is needed, is planned anew.
    Superseded,
}

impl Cleared {
    /// Why, for the Event that says a restart will not be made (none for [`Cleared::Finished`]).
    pub(crate) fn reason(self) -> Option<&'static str> {
        Some(match self {
            Self::Finished => return None,
            Self::OptedOut => "the set no longer opts in to restarts for resizes",
            Self::OnDelete => "the set's updateStrategy is OnDelete: pods are the user's to delete",
            Self::NoLongerWaits => "the claim no longer waits for a restart",
            Self::BeingReplaced => {
                "the StatefulSet controller replaces the pod for its template: that re-creation is the restart"
            }
            Self::Partition => "the replica is below the rolling update's partition",
            Self::Superseded => {
                "the claim asks for another size since; a restart for it is planned anew"
            }
        })
    }
}

/// The outcome of planning.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    pub steps: Vec<Step>,
    /// When to look again without a change (the end of a grace period, `minReadySeconds`).
    pub recheck_after: Option<Duration>,
    /// Replicas whose recorded restart is under way (the pod evicted, the new one not yet
    /// available or its claims not yet grown), with the record.
    pub restarting: Vec<(u32, Record)>,
}

/// Where a replica's restart stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// No restart recorded.
    None,
    /// Recorded; the recorded pod is still there: evict it (again).
    Evicting,
    /// Recorded; its pod is gone: waiting for the new one and the capacity.
    Restarting,
    /// The new pod is available and every recorded claim has its capacity.
    Finished,
    /// The new pod has been available for the grace period, and a recorded claim still
    /// waits for a restart.
    Stuck,
}

/// The resolution of the API's times: `metav1.Time` is RFC 3339 in whole seconds, so a time
/// read back may be up to a second before the moment it stands for.
const TIME_RESOLUTION: Duration = Duration::from_secs(1);

/// How long it has been since `since` at least, given [`TIME_RESOLUTION`]: a grace measured
/// so is never cut short by the truncation (a pod that turned Ready at 10.9 s reads 10 s).
/// `None` for a time after `now` (another clock).
fn at_least_since(since: Timestamp, now: Timestamp) -> Option<Duration> {
    Duration::try_from(now.duration_since(since))
        .ok()
        .map(|elapsed| elapsed.saturating_sub(TIME_RESOLUTION))
}

/// How long a new pod has been Ready at least, where known.
fn ready_for(pod: &PodState, now: Timestamp) -> Option<Duration> {
    pod.ready_since.and_then(|since| at_least_since(since, now))
}

fn progress<'a>(settings: &Settings, replica: &'a Replica) -> (Progress, Option<&'a Record>) {
    let Some(record) = replica.claims.iter().find_map(Claim::current_record) else {
        return (Progress::None, None);
    };
    let progress = match &replica.pod {
        Some(pod) if pod.uid == record.pod_uid && pod.health != Health::Terminating => {
            Progress::Evicting
        }
        Some(pod) if pod.uid != record.pod_uid && pod.health == Health::Available => {
            let recorded = replica
                .claims
                .iter()
                .filter(|c| c.current_record().is_some());
            let mut done = true;
            for claim in recorded {
                match claim.resize {
                    Resize::Done => {}
                    // The kubelet grows the file system as it mounts the volume for the new
                    // pod, and clears the condition right after: a claim seen waiting just
                    // as the pod turns Ready is still restarting. Stuck once the pod has been
                    // Ready for the grace period.
                    Resize::WaitsForRestart { .. } => {
                        let settled = ready_for(pod, settings.now)
                            .is_some_and(|ready| ready >= settings.grace);
                        if settled {
                            return (Progress::Stuck, Some(record));
                        }
                        done = false;
                    }
                    Resize::InProgress => done = false,
                }
            }
            if done {
                Progress::Finished
            } else {
                Progress::Restarting
            }
        }
        _ => Progress::Restarting,
    };
    (progress, Some(record))
}

fn sooner(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// A pod the StatefulSet controller replaces anyway: gone or going, or at another revision
/// than the update revision (a pod template rollout).
fn being_replaced(settings: &Settings, pod: Option<&PodState>) -> bool {
    pod.is_none_or(|p| {
        matches!(p.health, Health::Terminating | Health::Missing)
            || (settings.update_revision.is_some() && p.revision != settings.update_revision)
    })
}

/// Clears every record of `replica` for `why`.
fn clear_all(out: &mut Plan, replica: &Replica, why: Cleared) {
    for claim in replica
        .claims
        .iter()
        .filter(|c| c.current_record().is_some())
    {
        out.steps.push(Step::Clear {
            ordinal: replica.ordinal,
            claim: claim.name.clone(),
            uid: claim.uid.clone(),
            resource_version: claim.resource_version.clone(),
            why,
        });
    }
}

/// Plans which pods to evict now. `replicas` holds every replica of the set (any order).
///
/// One budget per set (maxUnavailable, else 1), as upstream's rolling update spends it
/// (pkg/controller/statefulset/stateful_set_control.go): replicas down for any reason count,
/// and so do those the rolling update of the pod template will take down next (available pods
/// at another revision from the partition up), which it replaces before any restart; restarts
/// use what is left, highest ordinal first.
pub(crate) fn plan(settings: &Settings, replicas: &[Replica]) -> Plan {
    let mut out = Plan::default();
    let mut ordered: Vec<&Replica> = replicas.iter().collect();
    // Highest index first: the order a rolling update replaces pods in.
    ordered.sort_by_key(|r| std::cmp::Reverse(r.index));

    // Unavailable now: down for any reason, or restarting (recorded and its pod gone, not
    // yet finished). A recorded replica whose pod is still up is charged below, when its
    // eviction is sent again, and only then: never twice.
    let mut unavailable = 0usize;
    // Available pods the rolling update of the pod template replaces next.
    let mut template_pending = 0usize;
    for replica in &ordered {
        let (progress, _) = progress(settings, replica);
        let down = replica
            .pod
            .as_ref()
            .is_none_or(|p| p.health != Health::Available);
        if progress == Progress::Restarting || down {
            unavailable += 1;
        } else if settings.rolling
            && replica.index >= settings.partition
            && being_replaced(settings, replica.pod.as_ref())
        {
            template_pending += 1;
        }
        if let Some(Health::AvailableIn(left)) = replica.pod.as_ref().map(|p| p.health) {
            out.recheck_after = sooner(out.recheck_after, left);
        }
        // A new pod up while a recorded claim still waits: look again when it would be stuck.
        if let (Progress::Restarting, Some(pod)) = (progress, replica.pod.as_ref())
            && pod.health == Health::Available
            && replica
                .claims
                .iter()
                .any(|c| c.current_record().is_some() && c.waits())
        {
            let ready = ready_for(pod, settings.now).unwrap_or_default();
            let left = settings.grace.saturating_sub(ready);
            out.recheck_after = sooner(out.recheck_after, left.max(Duration::from_secs(1)));
        }
    }
    let mut budget = settings.max_unavailable.max(1).saturating_sub(unavailable);
    // The rolling update of the pod template goes first: each pod it re-creates grows its file
    // systems as it starts, so it needs no restart of ours.
    budget = budget.saturating_sub(template_pending);

    for replica in ordered {
        let (state, record) = progress(settings, replica);
        let waiting = |why: Wait| Step::Waiting {
            ordinal: replica.ordinal,
            pod: replica.pod.as_ref().map(|p| p.name.clone()),
            claims: waiting_claims(replica),
            why,
        };
        match state {
            Progress::Evicting => {
                // A record is a promise, not an order: the same pod is asked again only while
                // the restart still applies, within the budget.
                let still_waits = replica
                    .claims
                    .iter()
                    .any(|c| c.current_record().is_some() && c.waits());
                let cancelled = if !settings.restart {
                    Some(Cleared::OptedOut)
                } else if !settings.rolling {
                    Some(Cleared::OnDelete)
                } else if !still_waits {
                    Some(Cleared::NoLongerWaits)
                } else if replica.index < settings.partition {
                    Some(Cleared::Partition)
                } else if being_replaced(settings, replica.pod.as_ref()) {
                    Some(Cleared::BeingReplaced)
                } else {
                    None
                };
                if let Some(why) = cancelled {
                    clear_all(&mut out, replica, why);
                    continue;
                }
                let Some((pod, record)) = replica.pod.as_ref().zip(record) else {
                    continue;
                };
                let costs = pod.health == Health::Available;
                if let Some(left) = replica.backoff {
                    // Its turn in the rollout's order is kept while a refusal's backoff runs.
                    budget = budget.saturating_sub(usize::from(costs));
                    out.recheck_after = sooner(out.recheck_after, left);
                    out.steps.push(waiting(Wait::Refused { left }));
                    continue;
                }
                if !settings.observed {
                    out.steps.push(waiting(Wait::NotObserved));
                    continue;
                }
                if costs && budget == 0 {
                    out.steps.push(waiting(Wait::Budget));
                    continue;
                }
                budget -= usize::from(costs);
                out.steps.push(Step::Evict {
                    ordinal: replica.ordinal,
                    pod: pod.name.clone(),
                    pod_uid: record.pod_uid.clone(),
                    record_on: Vec::new(),
                });
                continue;
            }
            Progress::Restarting => {
                if let Some(record) = record {
                    out.restarting.push((replica.ordinal, record.clone()));
                }
                continue;
            }
            Progress::Finished => {
                clear_all(&mut out, replica, Cleared::Finished);
                continue;
            }
            Progress::Stuck => {
                if let Some(pod) = &replica.pod {
                    out.steps.push(Step::StillWaiting {
                        ordinal: replica.ordinal,
                        pod: pod.name.clone(),
                        claims: waiting_claims(replica),
                    });
                }
                continue;
            }
            Progress::None => {}
        }
        if waiting_claims(replica).is_empty() {
            continue;
        }
        // The rolling update's own decisions first: a pod below the partition is not
        // re-created (a coordinated rollout re-creates it there later, see
        // [`crate::rollout::hold`]), a pod it replaces needs no restart of anyone's.
        if settings.rolling && replica.index < settings.partition {
            out.steps.push(waiting(Wait::Partition));
            continue;
        }
        // The latest claim's condition: when the replica began waiting for a restart.
        let since = replica
            .claims
            .iter()
            .filter_map(|c| match c.resize {
                Resize::WaitsForRestart { since } => Some(since),
                _ => None,
            })
            .max()
            .flatten();
        // A pod made after the claim began waiting and not yet Ready is the replacement
        // (the StatefulSet controller's, or the user's): it mounts the grown volume as it
        // starts, so it is waited for, never evicted.
        let replacement = |p: &PodState| {
            p.health != Health::Available
                && since.is_some_and(|since| p.created.is_some_and(|c| c > since))
        };
        let replaced = replica
            .pod
            .as_ref()
            .is_none_or(|p| being_replaced(settings, Some(p)) || replacement(p));
        if !settings.restart {
            out.steps.push(waiting(if settings.rolling && replaced {
                Wait::BeingReplaced
            } else {
                Wait::NotOptedIn
            }));
            continue;
        }
        if !settings.rolling {
            out.steps.push(waiting(Wait::OnDelete));
            continue;
        }
        let Some(pod) = replica.pod.as_ref().filter(|_| !replaced) else {
            out.steps.push(waiting(Wait::BeingReplaced));
            continue;
        };
        if !settings.observed {
            out.steps.push(waiting(Wait::NotObserved));
            continue;
        }
        // The grace runs from the latest claim's condition (a kubelet growing a volume online
        // clears it within seconds), or from the pod turning Ready where that came later: a
        // pod started since then had its volumes grown as they were mounted, and the kubelet
        // clears the condition right after.
        let since = since.map(|since| pod.ready_since.map_or(since, |ready| since.max(ready)));
        let waited = since
            .and_then(|since| at_least_since(since, settings.now))
            .unwrap_or_default();
        if since.is_none() || waited < settings.grace {
            // Without a transition time the grace starts at the first look: unknown, so wait
            // a whole grace (the condition's time comes with the next change).
            let left = settings.grace.saturating_sub(waited);
            out.recheck_after = sooner(out.recheck_after, left.max(Duration::from_secs(1)));
            out.steps.push(waiting(Wait::Grace { left }));
            continue;
        }
        if let Some(left) = replica.backoff {
            out.recheck_after = sooner(out.recheck_after, left);
            out.steps.push(waiting(Wait::Refused { left }));
            continue;
        }
        // A replica already down costs none of the budget.
        let costs = pod.health == Health::Available;
        if costs && budget == 0 {
            out.steps.push(waiting(Wait::Budget));
            continue;
        }
        budget -= usize::from(costs);
        out.steps.push(Step::Evict {
            ordinal: replica.ordinal,
            pod: pod.name.clone(),
            pod_uid: pod.uid.clone(),
            record_on: replica
                .claims
                .iter()
                .filter(|c| c.waits())
                .map(|c| RecordOn {
                    claim: c.name.clone(),
                    uid: c.uid.clone(),
                    resource_version: c.resource_version.clone(),
                    request: c.request.clone(),
                })
                .collect(),
        });
    }
    // Records of an earlier resize that no eviction of this plan writes over.
    for replica in replicas {
        for claim in replica.claims.iter().filter(|c| c.stale_record()) {
            let rewritten = out.steps.iter().any(|s| {
                matches!(s, Step::Evict { record_on, .. }
                    if record_on.iter().any(|r| r.claim == claim.name))
            });
            if !rewritten {
                out.steps.push(Step::Clear {
                    ordinal: replica.ordinal,
                    claim: claim.name.clone(),
                    uid: claim.uid.clone(),
                    resource_version: claim.resource_version.clone(),
                    why: Cleared::Superseded,
                });
            }
        }
    }
    out
}

pub(crate) fn waiting_claims(replica: &Replica) -> Vec<String> {
    replica
        .claims
        .iter()
        .filter(|c| c.waits())
        .map(|c| c.name.clone())
        .collect()
}
