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
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::controller::action::{Action, After, Kind, Report, Request, Target, Verb, Write};
use crate::controller::max_unavailable::plan::{Health, health};
use crate::names;
use crate::quantity::Quantity;

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
    pub resize: Resize,
    pub record: Option<Record>,
}

impl Claim {
    pub(crate) fn of(claim: &PersistentVolumeClaim) -> Self {
        Self {
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            resize: Resize::of(claim),
            record: Record::of(claim),
        }
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
    /// The budget is taken by replicas restarting or down.
    Budget,
    /// Within the grace period: an online-capable volume finishes meanwhile.
    Grace { left: Duration },
    /// Its eviction was refused (a PodDisruptionBudget): asked again once this has passed.
    Refused { left: Duration },
}

/// What to do for one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Record the restart on these claims (those with no record yet), then evict the pod.
    Evict {
        ordinal: u32,
        pod: String,
        pod_uid: String,
        /// `(claim, uid, resourceVersion)` to record it on, in order.
        record_on: Vec<(String, Option<String>, Option<String>)>,
    },
    /// The restart's record goes: the new pod is available and the claim has its capacity.
    Clear {
        ordinal: u32,
        claim: String,
        uid: Option<String>,
        resource_version: Option<String>,
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

/// The outcome of planning.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    pub steps: Vec<Step>,
    /// When to look again without a change (the end of a grace period, `minReadySeconds`).
    pub recheck_after: Option<Duration>,
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
    let Some(record) = replica.claims.iter().find_map(|c| c.record.as_ref()) else {
        return (Progress::None, None);
    };
    let progress = match &replica.pod {
        Some(pod) if pod.uid == record.pod_uid && pod.health != Health::Terminating => {
            Progress::Evicting
        }
        Some(pod) if pod.uid != record.pod_uid && pod.health == Health::Available => {
            let recorded = replica.claims.iter().filter(|c| c.record.is_some());
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

/// Plans which pods to evict now. `replicas` holds every replica of the set (any order).
pub(crate) fn plan(settings: &Settings, replicas: &[Replica]) -> Plan {
    let mut out = Plan::default();
    let mut ordered: Vec<&Replica> = replicas.iter().collect();
    // Highest index first: the order a rolling update replaces pods in.
    ordered.sort_by_key(|r| std::cmp::Reverse(r.index));

    // Unavailable now: restarting (recorded, not finished) or down for any other reason.
    let mut unavailable = 0usize;
    for replica in &ordered {
        let (progress, _) = progress(settings, replica);
        let down = replica
            .pod
            .as_ref()
            .is_none_or(|p| p.health != Health::Available);
        if matches!(progress, Progress::Evicting | Progress::Restarting) || down {
            unavailable += 1;
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
                .any(|c| c.record.is_some() && matches!(c.resize, Resize::WaitsForRestart { .. }))
        {
            let ready = ready_for(pod, settings.now).unwrap_or_default();
            let left = settings.grace.saturating_sub(ready);
            out.recheck_after = sooner(out.recheck_after, left.max(Duration::from_secs(1)));
        }
    }
    let mut budget = settings.max_unavailable.max(1).saturating_sub(unavailable);

    for replica in ordered {
        let (state, record) = progress(settings, replica);
        match state {
            Progress::Evicting => {
                if let Some(left) = replica.backoff {
                    out.recheck_after = sooner(out.recheck_after, left);
                    out.steps.push(Step::Waiting {
                        ordinal: replica.ordinal,
                        pod: replica.pod.as_ref().map(|p| p.name.clone()),
                        claims: waiting_claims(replica),
                        why: Wait::Refused { left },
                    });
                    continue;
                }
                // The record outlived the eviction (a crash, a refusal): the same pod again.
                if let (Some(pod), Some(record)) = (&replica.pod, record) {
                    out.steps.push(Step::Evict {
                        ordinal: replica.ordinal,
                        pod: pod.name.clone(),
                        pod_uid: record.pod_uid.clone(),
                        record_on: Vec::new(),
                    });
                }
                continue;
            }
            Progress::Restarting => continue,
            Progress::Finished => {
                for claim in replica.claims.iter().filter(|c| c.record.is_some()) {
                    out.steps.push(Step::Clear {
                        ordinal: replica.ordinal,
                        claim: claim.name.clone(),
                        uid: claim.uid.clone(),
                        resource_version: claim.resource_version.clone(),
                    });
                }
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
        let claims = waiting_claims(replica);
        if claims.is_empty() {
            continue;
        }
        let waiting = |why: Wait| Step::Waiting {
            ordinal: replica.ordinal,
            pod: replica.pod.as_ref().map(|p| p.name.clone()),
            claims: claims.clone(),
            why,
        };
        if !settings.restart {
            out.steps.push(waiting(Wait::NotOptedIn));
            continue;
        }
        if !settings.rolling {
            out.steps.push(waiting(Wait::OnDelete));
            continue;
        }
        if replica.index < settings.partition {
            out.steps.push(waiting(Wait::Partition));
            continue;
        }
        let Some(pod) = replica.pod.as_ref().filter(|p| {
            !matches!(p.health, Health::Terminating | Health::Missing)
                && (settings.update_revision.is_none() || p.revision == settings.update_revision)
        }) else {
            out.steps.push(waiting(Wait::BeingReplaced));
            continue;
        };
        // The grace runs from the latest claim's condition (a kubelet growing a volume online
        // clears it within seconds), or from the pod turning Ready where that came later: a
        // pod started since then had its volumes grown as they were mounted, and the kubelet
        // clears the condition right after.
        let since = replica
            .claims
            .iter()
            .filter_map(|c| match c.resize {
                Resize::WaitsForRestart { since } => Some(since),
                _ => None,
            })
            .max()
            .flatten()
            .map(|since| pod.ready_since.map_or(since, |ready| since.max(ready)));
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
        if costs {
            budget -= 1;
        }
        out.steps.push(Step::Evict {
            ordinal: replica.ordinal,
            pod: pod.name.clone(),
            pod_uid: pod.uid.clone(),
            record_on: replica
                .claims
                .iter()
                .filter(|c| matches!(c.resize, Resize::WaitsForRestart { .. }))
                .map(|c| (c.name.clone(), c.uid.clone(), c.resource_version.clone()))
                .collect(),
        });
    }
    out
}

/// The writes and Events of a plan, for set `set` of `namespace`: for each eviction the
/// records first (each on its claim's version), then the eviction, only once they are done;
/// each record that goes; and what waits for the user, said once per set, pod and claims.
pub(crate) fn actions(namespace: &str, set: &ObjectReference, plan: &Plan) -> Vec<Action> {
    let set_name = set.name.as_deref().unwrap_or_default();
    let mut actions = Vec::new();
    for step in &plan.steps {
        match step {
            Step::Evict {
                pod,
                pod_uid,
                record_on,
                ..
            } => {
                let record = Record {
                    pod: pod.clone(),
                    pod_uid: pod_uid.clone(),
                    at: Timestamp::now(),
                };
                for (i, (claim, uid, resource_version)) in record_on.iter().enumerate() {
                    let mut write = Write::new(
                        Verb::RecordPodRestart,
                        Target {
                            uid: uid.clone(),
                            ..Target::new(Kind::Claim, namespace, claim)
                        },
                        Request::Patch(json!({"metadata": {
                            "annotations": {names::RESIZE_RESTART: record.render()}}})),
                        format!("record the restart of pod {pod} for the resize of {claim}"),
                    )
                    .expect()
                    .expected(&[404, 409])
                    // The first of this step's records goes whatever the step before did.
                    .after(if i == 0 { After::Anything } else { After::Done });
                    if let Some(rv) = resource_version {
                        write.precondition(rv);
                    }
                    actions.push(Action::Write(write));
                }
                let pod_ref = Target {
                    uid: Some(pod_uid.clone()),
                    ..Target::new(Kind::Pod, namespace, pod)
                }
                .reference();
                let claims: Vec<&str> = record_on.iter().map(|(c, _, _)| c.as_str()).collect();
                let note = if claims.is_empty() {
                    format!(
                        "evicted pod {pod} so that its claims' file systems finish growing (the restart recorded earlier)"
                    )
                } else {
                    format!(
                        "evicted pod {pod}: claim {} waits for its pod to be re-created to finish growing its file system (FileSystemResizePending)",
                        claims.join(", ")
                    )
                };
                actions.push(Action::Write(
                    Write::new(
                        Verb::EvictPod,
                        Target {
                            uid: Some(pod_uid.clone()),
                            ..Target::new(Kind::Pod, namespace, pod)
                        },
                        Request::Evict {
                            uid: Some(pod_uid.clone()),
                        },
                        format!("evict pod {pod} for a resize"),
                    )
                    .about(set.clone())
                    // Gone or replaced meanwhile (its replacement is waited for); refused by a
                    // PodDisruptionBudget: asked again later, never turned into a delete.
                    .expected(&[404, 409, 429])
                    .after(if record_on.is_empty() {
                        After::Anything
                    } else {
                        After::Done
                    })
                    .on_done(
                        Report::normal(set.clone(), "PodEvictedForResize", "EvictPod", note)
                            .related(Some(pod_ref)),
                    ),
                ));
            }
            Step::Clear {
                claim,
                uid,
                resource_version,
                ..
            } => {
                let mut write = Write::new(
                    Verb::RecordPodRestart,
                    Target {
                        uid: uid.clone(),
                        ..Target::new(Kind::Claim, namespace, claim)
                    },
                    Request::Patch(json!({"metadata": {
                        "annotations": {names::RESIZE_RESTART: null}}})),
                    format!("remove the record of the restart done for {claim}"),
                )
                .expect()
                .expected(&[404, 409]);
                if let Some(rv) = resource_version {
                    write.precondition(rv);
                }
                actions.push(Action::Write(write));
            }
            Step::Waiting {
                pod,
                claims,
                why: why @ (Wait::NotOptedIn | Wait::OnDelete),
                ..
            } => {
                // Each pod its own Event (the recorder folds Events of one object, reason and
                // related object into a series).
                let related = pod
                    .as_deref()
                    .map(|pod| Target::new(Kind::Pod, namespace, pod).reference());
                let pod = pod.as_deref().unwrap_or("its pod");
                let what = format!(
                    "claim {} waits for pod {pod} to be re-created to finish growing its file system (FileSystemResizePending)",
                    claims.join(", ")
                );
                let note = if *why == Wait::OnDelete {
                    format!(
                        "{what}; updateStrategy OnDelete: pods are yours to delete, restart it with kubectl delete pod -n {namespace} {pod}"
                    )
                } else {
                    format!(
                        "{what}; restart it (kubectl delete pod -n {namespace} {pod}), or let the controller evict it: annotate the set {}=true",
                        names::RESTART_PODS_FOR_RESIZE
                    )
                };
                actions.push(Action::Report(
                    Report::warning(set.clone(), "PodRestartNeededForResize", "EvictPod", note)
                        .related(related)
                        .once(format!(
                            "restart-needed/{namespace}/{set_name}/{pod}/{}",
                            claims.join(",")
                        )),
                ));
            }
            Step::StillWaiting { pod, claims, .. } => {
                actions.push(Action::Report(
                    Report::warning(
                        set.clone(),
                        "ResizeNotFinishedAfterRestart",
                        "EvictPod",
                        format!(
                            "pod {pod} was re-created after its eviction for the resize, and claim {} still waits for a restart (FileSystemResizePending): the volume's driver did not grow the file system; it is not evicted again",
                            claims.join(", ")
                        ),
                    )
                    .related(Some(Target::new(Kind::Pod, namespace, pod).reference()))
                    .once(format!(
                        "resize-not-finished/{namespace}/{set_name}/{pod}/{}",
                        claims.join(",")
                    )),
                ));
            }
            Step::Waiting { .. } => {}
        }
    }
    actions
}

fn waiting_claims(replica: &Replica) -> Vec<String> {
    replica
        .claims
        .iter()
        .filter(|c| matches!(c.resize, Resize::WaitsForRestart { .. }))
        .map(|c| c.name.clone())
        .collect()
}

#[cfg(test)]
mod tests;
