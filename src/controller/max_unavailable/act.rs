//! Acting on a plan: delete the planned pods with preconditions, publish an event per batch,
//! keep the gauges. Nothing here decides anything.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Api;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType};

use super::SetLabels;
use super::plan::{self, Skip};
use crate::admission::GateStatus;
use crate::controller::context::{Ctx, Error, SetSnapshot};

/// While the gate is unknown, sets that would need the driver are looked at again this often
/// (the probe's answer cannot trigger a reconcile by itself).
const GATE_UNKNOWN_RECHECK: Duration = Duration::from_secs(15);

/// One reconcile step for `snapshot`; returns when to look again.
pub async fn sync(snapshot: &SetSnapshot, ctx: &Ctx) -> Result<Option<Duration>, Error> {
    let metrics = &ctx.metrics.max_unavailable;
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
    match metrics.gate() {
        GateStatus::Disabled => {}
        GateStatus::Enabled => {
            // The built-in controller honours the field itself.
            metrics.forget(namespace, name);
            return Ok(None);
        }
        GateStatus::Unknown => {
            metrics.forget(namespace, name);
            return Ok(Some(GATE_UNKNOWN_RECHECK));
        }
    }
    let plan = plan::plan(&rollout, &snapshot.pods, jiff::Timestamp::now());
    metrics.observe(
        SetLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            pod_management_policy: rollout.policy.as_str(),
        },
        plan.max_unavailable,
        plan.unavailable,
    );
    if plan.hold == plan::Hold::RecreatedAtCurrentRevision
        && metrics.first_report(&rollout.uid, &rollout.update_revision)
    {
        report_missing_rolling_update(snapshot, &rollout, &plan, ctx).await;
    }
    if plan.deletions.is_empty() {
        tracing::debug!(%namespace, %name, unavailable = plan.unavailable, outdated = plan.outdated, hold = ?plan.hold, "maxUnavailable: nothing to delete");
        return Ok(plan.recheck_after);
    }

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let mut deleted: Vec<&str> = Vec::with_capacity(plan.deletions.len());
    let mut first_deleted = None;
    let mut failure = None;
    for deletion in &plan.deletions {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(deletion.uid.clone()),
                resource_version: Some(deletion.resource_version.clone()),
            }),
            ..DeleteParams::default()
        };
        match pods.delete(&deletion.name, &params).await {
            Ok(_) => {
                first_deleted.get_or_insert(deletion);
                deleted.push(deletion.name.as_str());
            }
            // Gone, or changed since our view (the built-in controller may have deleted it
            // first): either way its unavailability was already in the budget.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                tracing::debug!(%namespace, pod = %deletion.name, code = status.code, "pod changed before deletion; skipped");
            }
            Err(error) => {
                failure = Some((deletion.name.clone(), error));
                break;
            }
        }
    }
    metrics.deleted(deleted.len());
    if !deleted.is_empty() {
        tracing::info!(
            %namespace, %name, pods = ?deleted, update_revision = %rollout.update_revision,
            max_unavailable = plan.max_unavailable, unavailable_before = plan.unavailable,
            "maxUnavailable batch: deleted old-revision pods"
        );
        let note = format!(
            "Deleted {} for the update to revision {} (maxUnavailable {}, {} unavailable before)",
            pod_list(&deleted),
            rollout.update_revision,
            plan.max_unavailable,
            plan.unavailable
        );
        ctx.event(
            snapshot.set.as_ref(),
            Event {
                type_: EventType::Normal,
                reason: "MaxUnavailableBatch".into(),
                note: Some(note),
                action: "DeletePods".into(),
                // The recorder folds events with the same key into one series, keeping the
                // first note; the batch's first pod (a new uid each time) keeps batches apart.
                secondary: first_deleted.map(|d| pod_reference(namespace, d)),
            },
        )
        .await;
    }
    if let Some((pod, error)) = failure {
        ctx.event(
            snapshot.set.as_ref(),
            Event {
                type_: EventType::Warning,
                reason: "MaxUnavailableDeleteFailed".into(),
                note: Some(format!(
                    "Could not delete pod {pod} for the update: {error}"
                )),
                action: "DeletePods".into(),
                secondary: None,
            },
        )
        .await;
        return Err(error.into());
    }
    Ok(plan.recheck_after)
}

/// Says, once per rollout, why the budget is not used for the set's old pods and what the set
/// needs for it.
async fn report_missing_rolling_update(
    snapshot: &SetSnapshot,
    rollout: &plan::Rollout,
    plan: &plan::Plan,
    ctx: &Ctx,
) {
    let below = rollout.recreated_at_current_below.unwrap_or(0);
    tracing::warn!(
        namespace = %snapshot.namespace, name = %snapshot.name, left_to_builtin = plan.left_to_builtin,
        current_replicas = below,
        "maxUnavailable not used: spec.updateStrategy has no rollingUpdate, pods would come back at the old revision"
    );
    let note = format!(
        "maxUnavailable {} is not used for {} old pods: spec.updateStrategy has no rollingUpdate, so the \
         StatefulSet controller re-creates a pod below status.currentReplicas ({below}) at the old \
         revision and deleting it early would restart it twice; they are updated one at a time. Set \
         spec.updateStrategy.rollingUpdate: {{partition: 0}} (what an empty type defaults to; the \
         webhook adds it on the set's next write)",
        plan.max_unavailable, plan.left_to_builtin
    );
    ctx.event(
        snapshot.set.as_ref(),
        Event {
            type_: EventType::Warning,
            reason: "MaxUnavailableNeedsRollingUpdate".into(),
            note: Some(note),
            action: "DeletePods".into(),
            secondary: None,
        },
    )
    .await;
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
mod tests {
    use super::*;

    #[test]
    fn long_batches_are_shortened_in_events() {
        assert_eq!(pod_list(&["web-5", "web-4"]), "web-5, web-4");
        let many: Vec<String> = (0..300)
            .map(|i| format!("pod-with-a-long-name-{i}"))
            .collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let list = pod_list(&refs);
        assert!(list.ends_with(" and 290 more"), "{list}");
        assert!(list.len() < 512);
    }
}
