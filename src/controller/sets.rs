//! The StatefulSet controller: one reconcile per set, triggered by changes to the set, its
//! claims, its pods and its journal, and by a periodic resync. Each feature looks at the same
//! [`SetSnapshot`] and does its own planning and acting.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use super::context::{Ctx, Error, SetSnapshot};
use super::{claims, conditions, max_unavailable};
use crate::admission::set_claims;
use crate::names;

const NAME: &str = "statefulset";

pub async fn run(ctx: Arc<Ctx>, stop: CancellationToken) {
    let client = ctx.client.clone();
    let controller = Controller::new(
        Api::<StatefulSet>::all(client.clone()),
        watcher::Config::default(),
    )
    .watches(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default(),
        |claim| {
            let ns = claim.metadata.namespace.clone().unwrap_or_default();
            let name = claim.metadata.name.clone().unwrap_or_default();
            set_claims::candidates(&name)
                .into_iter()
                .map(|(_, set, _)| ObjectRef::<StatefulSet>::new(set).within(&ns))
                .collect::<Vec<_>>()
        },
    )
    .watches(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().labels(names::POD_NAME_LABEL),
        |pod| {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            pod.metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .filter(|o| o.kind == "StatefulSet" && o.controller == Some(true))
                .map(|o| ObjectRef::<StatefulSet>::new(&o.name).within(&ns))
                .collect::<Vec<_>>()
        },
    )
    .watches(
        Api::<ConfigMap>::namespaced(client, &ctx.config.namespace),
        watcher::Config::default().labels(names::JOURNAL_LABEL),
        |journal| claims::journal_owner(&journal),
    )
    .graceful_shutdown_on({
        let stop = stop.clone();
        async move { stop.cancelled().await }
    });
    let store = controller.store();
    let run = controller
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| async {
            if let Err(error) = result {
                tracing::debug!(%error, "statefulset reconcile failed");
            }
        });
    let mut run = std::pin::pin!(run);
    tokio::select! {
        () = &mut run => return,
        () = stop.cancelled() => {}
    }
    // The graceful shutdown lets started reconciles finish. kube-runtime starts reconciling
    // only once the controller's store is ready, and a shutdown stops the watch that fills it:
    // stopped before that, the controller would wait for the store forever (a SIGTERM right
    // after start hung the process). No reconcile can have started then; stop at once.
    if matches!(store.wait_until_ready().now_or_never(), Some(Ok(()))) {
        run.await;
    }
}

async fn reconcile(set: Arc<StatefulSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let Some(snapshot) = SetSnapshot::gather(set, &ctx) else {
        return Ok(Action::await_change());
    };
    let features = &ctx.config.features;
    let mut next = Some(ctx.config.resync);
    let mut first_error = None;
    let mut note = |result: Result<Option<Duration>, Error>, feature: &str| match result {
        Ok(after) => next = earliest(next, after),
        Err(error) => {
            tracing::warn!(%error, feature, namespace = %snapshot.namespace, name = %snapshot.name, "reconcile step failed");
            first_error.get_or_insert(error);
        }
    };
    if features.claim_rollout || features.converge {
        note(claims::sync(&snapshot, &ctx).await, "claims");
    }
    if features.conditions {
        note(conditions::sync(&snapshot, &ctx).await, "conditions");
    }
    if features.max_unavailable {
        note(
            max_unavailable::sync(&snapshot, &ctx).await,
            "max-unavailable",
        );
    }
    if let Some(error) = first_error {
        ctx.metrics.reconciled(NAME, "error");
        return Err(error);
    }
    ctx.metrics.reconciled(NAME, "success");
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

fn error_policy(_set: Arc<StatefulSet>, _error: &Error, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

/// The sooner of two optional deadlines.
pub fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
