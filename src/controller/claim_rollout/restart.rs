//! Expansions that wait for a pod restart: the planner is the rollout model's
//! ([`crate::rollout::restart`], which `status` reads too); here, its steps as writes and Events.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::json;

use crate::controller::action::{Action, After, Kind, Report, Request, Target, Verb, Write};
use crate::names;
pub(crate) use crate::rollout::restart::*;

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
                let at = Timestamp::now();
                for (i, on) in record_on.iter().enumerate() {
                    let record = Record {
                        pod: pod.clone(),
                        pod_uid: pod_uid.clone(),
                        at,
                        size: on.request.clone(),
                    };
                    let mut write = Write::new(
                        Verb::RecordPodRestart,
                        Target {
                            uid: on.uid.clone(),
                            ..Target::new(Kind::Claim, namespace, &on.claim)
                        },
                        Request::Patch(json!({"metadata": {
                            "annotations": {names::RESIZE_RESTART: record.render()}}})),
                        format!(
                            "record the restart of pod {pod} for the resize of {}",
                            on.claim
                        ),
                    )
                    .expect()
                    .expected(&[404, 409])
                    // The first of this step's records goes whatever the step before did.
                    .after(if i == 0 { After::Anything } else { After::Done });
                    if let Some(rv) = &on.resource_version {
                        write.precondition(rv);
                    }
                    actions.push(Action::Write(write));
                }
                let pod_ref = Target {
                    uid: Some(pod_uid.clone()),
                    ..Target::new(Kind::Pod, namespace, pod)
                }
                .reference();
                let claims: Vec<&str> = record_on.iter().map(|r| r.claim.as_str()).collect();
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
                why,
                ..
            } => {
                let what = match why.reason() {
                    None => format!("remove the record of the restart done for {claim}"),
                    Some(reason) => {
                        format!(
                            "remove the record of a restart no longer made for {claim}: {reason}"
                        )
                    }
                };
                let mut write = Write::new(
                    Verb::RecordPodRestart,
                    Target {
                        uid: uid.clone(),
                        ..Target::new(Kind::Claim, namespace, claim)
                    },
                    Request::Patch(json!({"metadata": {
                        "annotations": {names::RESIZE_RESTART: null}}})),
                    what,
                )
                .expect()
                .expected(&[404, 409]);
                if let Some(rv) = resource_version {
                    write.precondition(rv);
                }
                // A restart that will not be made is said, once its record is gone.
                if let Some(reason) = why.reason() {
                    write = write.on_done(Report::normal(
                        set.clone(),
                        "PodRestartCancelled",
                        "EvictPod",
                        format!(
                            "the restart recorded for the resize of claim {claim} is not made: {reason}"
                        ),
                    ));
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

#[cfg(test)]
mod tests;
