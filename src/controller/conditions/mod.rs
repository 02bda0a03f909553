//! `Available` and `Progressing` conditions of StatefulSets (KEP-2804), with a progress
//! deadline (`stateful-admission.io/progress-deadline-seconds`, default 600).
//!
//! The plan ([`plan`]) is pure; this module reads the set, writes what differs, and says
//! when to look again. The built-in StatefulSet controller rebuilds `.status` on each of
//! its writes and so drops these conditions; every such write reaches the set watch, whose
//! reconcile puts them back (one status patch), and a reconcile that finds them present and
//! equal writes nothing. The progress record goes to an annotation, which status writes do
//! not touch.

pub mod plan;

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::Patch;
use kube::runtime::events::{Event, EventType};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde_json::json;

use super::context::{Ctx, Error, SetSnapshot};
use crate::names;
pub use plan::{Decision, Phase};

#[derive(Debug, Default)]
pub struct Metrics {
    condition_writes: Counter,
    progress_writes: Counter,
    deadlines_exceeded: Counter,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "statefulset_condition_writes",
            "Status patches writing the Available and Progressing conditions",
            metrics.condition_writes.clone(),
        );
        registry.register(
            "statefulset_progress_record_writes",
            "Writes of the progress record annotation",
            metrics.progress_writes.clone(),
        );
        registry.register(
            "statefulset_progress_deadline_exceeded",
            "Rollouts that made no progress within their deadline",
            metrics.deadlines_exceeded.clone(),
        );
        metrics
    }
}

/// One reconcile step for `snapshot`; returns when to look again.
pub async fn sync(snapshot: &SetSnapshot, ctx: &Ctx) -> Result<Option<Duration>, Error> {
    let set = &snapshot.set;
    if set.metadata.deletion_timestamp.is_some() || ctx.view.namespace_ignored(&snapshot.namespace)
    {
        return Ok(None);
    }
    let now = jiff::Timestamp::now();
    let decision = decide(set, now);
    if decision.progress.is_none() && decision.conditions.is_none() {
        return Ok(decision.look_again);
    }
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &snapshot.namespace);
    // The cache can lag behind our own writes (the event of the record write triggers a
    // reconcile before the status write shows): decide again on a fresh read, so that a
    // stale copy costs a GET rather than a refused patch.
    let set = match api.get_opt(&snapshot.name).await? {
        Some(fresh) if fresh.metadata.uid == set.metadata.uid => fresh,
        _ => return Ok(None),
    };
    let decision = decide(&set, now);
    let existing = set
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    let params = crate::field_manager::patch();
    let metrics = &ctx.metrics.conditions;
    let mut resource_version = set.metadata.resource_version.clone();

    if let Some(progress) = &decision.progress {
        let text = serde_json::to_string(progress)
            .map_err(|e| Error::Invalid(format!("progress record: {e}")))?;
        let body = json!({"metadata": {
            "resourceVersion": resource_version,
            "annotations": {names::PROGRESS: text},
        }});
        match api
            .patch(&snapshot.name, &params, &Patch::Merge(&body))
            .await
        {
            Ok(written) => resource_version = written.metadata.resource_version,
            // The set moved on: its watch event brings the next look.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(None),
            Err(error) => return Err(error.into()),
        }
        metrics.progress_writes.inc();
        // The record holds the transition, so this is said once however the rest goes.
        if decision.deadline_exceeded {
            metrics.deadlines_exceeded.inc();
            let note = decision
                .conditions
                .as_deref()
                .unwrap_or(existing)
                .iter()
                .find(|c| c.type_.as_deref() == Some(plan::PROGRESSING))
                .and_then(|c| c.message.clone());
            tracing::warn!(namespace = %snapshot.namespace, name = %snapshot.name, "progress deadline exceeded");
            ctx.event(
                &set,
                Event {
                    type_: EventType::Warning,
                    reason: plan::reason::PROGRESS_DEADLINE_EXCEEDED.to_owned(),
                    note,
                    action: "TrackRollout".to_owned(),
                    secondary: None,
                },
            )
            .await;
        }
    }

    if let Some(conditions) = &decision.conditions {
        let body = json!({
            "metadata": {"resourceVersion": resource_version},
            "status": {"conditions": conditions},
        });
        match api
            .patch_status(&snapshot.name, &params, &Patch::Merge(&body))
            .await
        {
            Ok(_) => {
                metrics.condition_writes.inc();
            }
            // Computed from a status that is gone; the watch brings the new one.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(None),
            Err(error) => return Err(error.into()),
        }
    }
    Ok(decision.look_again)
}

fn decide(set: &StatefulSet, now: jiff::Timestamp) -> Decision {
    let existing = set
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    plan::plan(
        &plan::observe(set),
        existing,
        plan::read_progress(set).as_ref(),
        now,
    )
}
