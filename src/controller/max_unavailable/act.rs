//! Acting on a plan: delete the planned pods with preconditions, publish an event per batch,
//! keep the gauges. Nothing here decides anything.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;

use super::MaxUnavailable;
use super::SetLabels;
use crate::admission::GateStatus;
use crate::controller::action::{self, Action, After, Kind, Report, Request, Target, Verb, Write};
use crate::controller::context::{Ctx, Error};
use crate::controller::executor::Ran;
use crate::controller::snapshot::SetSnapshot;
use crate::rollout::max_unavailable::{self as plan, Skip};

/// While the gate is unknown, sets that would need the driver are looked at again this often
/// (the probe's answer cannot trigger a reconcile by itself).
const GATE_UNKNOWN_RECHECK: Duration = Duration::from_secs(15);

/// One reconcile step for `snapshot`; returns when to look again.
pub(crate) async fn sync(
    metrics: &MaxUnavailable,
    snapshot: &SetSnapshot,
    ctx: &Ctx,
) -> Result<Option<Duration>, Error> {
    let (namespace, name) = (snapshot.namespace.as_str(), snapshot.name.as_str());
    let rollout = match plan::rollout(&snapshot.set) {
        Ok(rollout) => rollout,
        Err(skip) => {
            metrics.forget(namespace, name);
            if let Skip::Invalid(error) = &skip {
                tracing::warn!(%namespace, %name, %error, "maxUnavailable not honoured: invalid value");
            }
            return Ok(None);
        }
    };
    let plan = plan::plan(&rollout, &snapshot.pods, jiff::Timestamp::now());
    match metrics.gate_or_evidence(&snapshot.set) {
        GateStatus::Disabled => {}
        GateStatus::Enabled => {
            // The built-in controller honours the field itself.
            metrics.forget(namespace, name);
            return Ok(None);
        }
        GateStatus::Unknown => {
            metrics.forget(namespace, name);
            metrics.defer(namespace, name);
            if !plan.deletions.is_empty() {
                // A rollout the budget would speed up: say why it goes one pod at a time.
                ctx.exec
                    .report(&gate_unknown(
                        snapshot,
                        &rollout,
                        &plan,
                        metrics.why_unknown().as_deref(),
                    ))
                    .await;
            }
            return Ok(Some(GATE_UNKNOWN_RECHECK));
        }
    }
    metrics.observe(
        SetLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            pod_management_policy: rollout.policy.as_str(),
        },
        plan.max_unavailable,
        plan.unavailable,
    );
    // A pod we deleted that the view still shows as it was: the budget would be counted
    // without that deletion. The pod's watch event triggers the next look.
    if snapshot.is_stale(&ctx.exec, Kind::Pod) {
        return Ok(plan.recheck_after);
    }
    let actions = actions(snapshot, &rollout, &plan);
    let ran = ctx.exec.run(&actions).await;
    // Deletions by pod name, as the batch's Event names them.
    let mut deleted: Vec<&str> = Vec::with_capacity(plan.deletions.len());
    let mut observed = false;
    let mut failure = None;
    for (action, ran) in actions.iter().zip(ran) {
        match (action, ran) {
            (Action::Report(_), Ran::Reported(true)) => {
                report_missing_rolling_update(snapshot, &plan)
            }
            (Action::Write(write), Ran::Written(Ok(outcome))) if outcome.is_done() => {
                deleted.push(write.target.name.as_str());
            }
            (_, Ran::Written(Ok(_))) => observed = true,
            // Gone, or changed since our view (the built-in controller may have deleted it
            // first): either way its unavailability was already in the budget.
            (Action::Write(write), Ran::Written(Err(kube::Error::Api(status))))
                if status.code == 404 || status.code == 409 =>
            {
                tracing::debug!(%namespace, pod = %write.target.name, code = status.code, "pod changed before deletion; skipped");
            }
            // Reported by the write's failure Event; the batch so far is still said below.
            (_, Ran::Written(Err(error))) => {
                failure.get_or_insert(error);
            }
            _ => {}
        }
    }
    metrics.deleted(deleted.len());
    if observed {
        return Ok(plan.recheck_after);
    }
    if !deleted.is_empty() {
        tracing::info!(
            %namespace, %name, pods = ?deleted, update_revision = %rollout.update_revision,
            max_unavailable = plan.max_unavailable, unavailable_before = plan.unavailable,
            "maxUnavailable batch: deleted old-revision pods"
        );
        let note = plan::batch_note(
            &deleted,
            &rollout.update_revision,
            plan.max_unavailable,
            plan.unavailable,
        );
        // The recorder folds events with the same key into one series, keeping the first
        // note; the batch's first pod (a new uid each time) keeps batches apart.
        let first_deleted = plan.deletions.iter().find(|d| d.name == deleted[0]);
        ctx.exec
            .report(
                &Report::normal(set_ref(snapshot), "MaxUnavailableBatch", "DeletePods", note)
                    .related(first_deleted.map(|d| pod_reference(namespace, d))),
            )
            .await;
    }
    if let Some(error) = failure {
        return Err(error.into());
    }
    Ok(plan.recheck_after)
}

/// The Event of a set whose budget cannot be driven while the gate is unknown: once per set
/// and update revision.
pub(crate) fn gate_unknown(
    snapshot: &SetSnapshot,
    rollout: &plan::Rollout,
    plan: &plan::Plan,
    why_unknown: Option<&str>,
) -> Report {
    let why = match why_unknown {
        None | Some(crate::capabilities::NOT_PROBED_YET) => "it has not been probed yet".to_owned(),
        Some(why) => format!("the probe failed: {why}"),
    };
    let note = format!(
        "maxUnavailable {} is not driven yet: whether the apiserver keeps \
         spec.updateStrategy.rollingUpdate.maxUnavailable (its MaxUnavailableStatefulSet gate) is \
         not known ({why}); the StatefulSet controller replaces one pod at a time until it is",
        plan.max_unavailable
    );
    Report::warning(
        set_ref(snapshot),
        "MaxUnavailableNotDriven",
        "DeletePods",
        note,
    )
    .once(format!(
        "max-unavailable-gate/{}/{}",
        rollout.uid, rollout.update_revision
    ))
}

fn set_ref(snapshot: &SetSnapshot) -> k8s_openapi::api::core::v1::ObjectReference {
    action::reference_of(Kind::StatefulSet, &snapshot.set.metadata)
}

/// What a plan does: the once-per-rollout warning where the budget cannot be used, then
/// one precondition delete per planned pod (highest ordinal first), each remembered in the
/// expectations. Deletions come last so that they zip with `plan.deletions`.
pub(crate) fn actions(
    snapshot: &SetSnapshot,
    rollout: &plan::Rollout,
    plan: &plan::Plan,
) -> Vec<Action> {
    let mut actions = Vec::with_capacity(plan.deletions.len() + 1);
    if plan.hold == plan::Hold::RecreatedAtCurrentRevision {
        let below = rollout.recreated_at_current_below.unwrap_or(0);
        let note = format!(
            "maxUnavailable {} is not used for {} old pods: spec.updateStrategy has no rollingUpdate, so the \
             StatefulSet controller re-creates a pod below status.currentReplicas ({below}) at the old \
             revision and deleting it early would restart it twice; they are updated one at a time. Set \
             spec.updateStrategy.rollingUpdate: {{partition: 0}} (what an empty type defaults to; the \
             webhook adds it on the set's next write)",
            plan.max_unavailable, plan.left_to_builtin
        );
        actions.push(Action::Report(
            Report::warning(
                set_ref(snapshot),
                "MaxUnavailableNeedsRollingUpdate",
                "DeletePods",
                note,
            )
            .once(format!(
                "max-unavailable/{}/{}",
                rollout.uid, rollout.update_revision
            )),
        ));
    }
    for deletion in &plan.deletions {
        let target = Target {
            uid: Some(deletion.uid.clone()),
            resource_version: Some(deletion.resource_version.clone()),
            ..Target::new(Kind::Pod, &snapshot.namespace, &deletion.name)
        };
        let request = Request::Delete {
            uid: Some(deletion.uid.clone()),
            resource_version: Some(deletion.resource_version.clone()),
            orphan: false,
        };
        let summary = format!(
            "delete pod {} (old revision) for the update to revision {} within maxUnavailable {}",
            deletion.name, rollout.update_revision, plan.max_unavailable
        );
        actions.push(Action::Write(
            Write::new(Verb::DeletePod, target, request, summary)
                .expect()
                .expected(&[404, 409])
                .after(After::NoFailure)
                .on_failed(Report::warning(
                    set_ref(snapshot),
                    "MaxUnavailableDeleteFailed",
                    "DeletePods",
                    format!(
                        "Could not delete pod {} for the update: {{error}}",
                        deletion.name
                    ),
                )),
        ));
    }
    actions
}

/// Logs why the budget is not used for the set's old pods (the Event says it once per
/// rollout).
fn report_missing_rolling_update(snapshot: &SetSnapshot, plan: &plan::Plan) {
    tracing::warn!(
        namespace = %snapshot.namespace, name = %snapshot.name, left_to_builtin = plan.left_to_builtin,
        "maxUnavailable not used: spec.updateStrategy has no rollingUpdate, pods would come back at the old revision"
    );
}

fn pod_reference(namespace: &str, deletion: &plan::Deletion) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.to_owned()),
        name: Some(deletion.name.clone()),
        uid: Some(deletion.uid.clone()),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;

    fn snapshot() -> SetSnapshot {
        let set: StatefulSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "db", "uid": "u1", "resourceVersion": "9"},
            "spec": {"selector": {}, "serviceName": "web", "template": {}},
        }))
        .expect("set");
        SetSnapshot {
            set: Arc::new(set),
            namespace: "db".into(),
            name: "web".into(),
            ordinals: vec![0, 1, 2],
            pods: Vec::new(),
            claims: Vec::new(),
            journal: None,
        }
    }

    fn rollout(below: Option<usize>) -> plan::Rollout {
        plan::Rollout {
            uid: "u1".into(),
            policy: plan::PodManagement::Parallel,
            replicas: 3,
            partition: 0,
            max_unavailable: 2,
            source: plan::Source::Annotation,
            min_ready_seconds: 0,
            update_revision: "web-2".into(),
            recreated_at_current_below: below,
        }
    }

    fn deletion(ordinal: u32) -> plan::Deletion {
        plan::Deletion {
            ordinal,
            name: format!("web-{ordinal}"),
            uid: format!("p{ordinal}"),
            resource_version: format!("{}", 20 + ordinal),
            already_unavailable: false,
        }
    }

    fn batch(hold: plan::Hold, deletions: Vec<plan::Deletion>) -> plan::Plan {
        plan::Plan {
            max_unavailable: 2,
            unavailable: 0,
            outdated: 3,
            left_to_builtin: 0,
            deletions,
            hold,
            recheck_after: None,
        }
    }

    #[test]
    fn a_batch_becomes_precondition_deletes_highest_ordinal_first() {
        let plan = batch(plan::Hold::BudgetUsed, vec![deletion(2), deletion(1)]);
        let actions = actions(&snapshot(), &rollout(None), &plan);
        assert_eq!(actions.len(), 2);
        for (action, ordinal) in actions.iter().zip([2u32, 1]) {
            let Action::Write(w) = action else {
                panic!("{action:?}")
            };
            assert_eq!(w.verb, Verb::DeletePod);
            assert_eq!(w.target.key(), format!("pods/db/web-{ordinal}"));
            assert!(
                w.expect,
                "the budget must not be counted from a lagging view"
            );
            assert_eq!(w.expected, [404, 409]);
            assert_eq!(
                w.request,
                Request::Delete {
                    uid: Some(format!("p{ordinal}")),
                    resource_version: Some(format!("{}", 20 + ordinal)),
                    orphan: false,
                }
            );
            assert_eq!(w.about.kind.as_deref(), Some("Pod"));
            assert_eq!(w.on_failed.len(), 1);
            assert_eq!(w.on_failed[0].reason, "MaxUnavailableDeleteFailed");
            assert_eq!(
                w.on_failed[0].regarding.kind.as_deref(),
                Some("StatefulSet")
            );
        }
        assert!(actions_nothing_to_do());
    }

    fn actions_nothing_to_do() -> bool {
        actions(
            &snapshot(),
            &rollout(None),
            &batch(plan::Hold::Nothing, Vec::new()),
        )
        .is_empty()
    }

    #[test]
    fn pods_left_to_the_builtin_controller_are_reported_once_per_rollout() {
        let plan = plan::Plan {
            left_to_builtin: 3,
            ..batch(plan::Hold::RecreatedAtCurrentRevision, Vec::new())
        };
        let actions = actions(&snapshot(), &rollout(Some(3)), &plan);
        assert_eq!(actions.len(), 1);
        let Action::Report(r) = &actions[0] else {
            panic!("{actions:?}")
        };
        assert_eq!(r.reason, "MaxUnavailableNeedsRollingUpdate");
        assert_eq!(r.once.as_deref(), Some("max-unavailable/u1/web-2"));
        assert!(r.note.contains("status.currentReplicas (3)"), "{}", r.note);
    }
}
