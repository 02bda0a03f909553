//! Expansions that wait for a pod restart finish without a person (issue 36): on a driver that
//! grows file systems only while the volume is unpublished (the resizer stand-in in offline
//! mode, `support/actors.rs`), an InPlace rollout of three claims under a PodDisruptionBudget of
//! `maxUnavailable: 1`, on a set opted in with `stateful-admission.io/restart-pods-for-resize`,
//! completes by itself: each claim stops at `FileSystemResizePending`, the controller evicts its
//! pod through `pods/eviction` after the grace period, one pod at a time, each pod once, and
//! the budget is never exceeded.
//!
//! A recorded restart is a promise, not an order: where the set opts out while its eviction is
//! refused by a PodDisruptionBudget, nothing is evicted afterwards, even once the budget would
//! allow it; the record goes and the set is told why (issue 41).
//!
//! One apply that changes both the pod template and the claims' size of such a set restarts
//! each pod once: the built-in rolling update's re-creation of a pod is the restart its claim's
//! expansion waits for, so no pod is evicted besides, never more than one is unavailable (with
//! no PodDisruptionBudget to hold anything back), and the set's partition is the user's again at
//! the end, with nothing of the rollout left on the set for the user's next apply to meet.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::support::pods::PodTracker;
use crate::support::wait::{self, step};
use crate::support::{Scenario, Scope, ServeOptions, USER, actors, eventually, install, objects};

pub fn opt_out_during_refusal() -> Scenario {
    Scenario {
        name: "offline_expansion_opt_out_during_a_refused_eviction_evicts_nothing",
        needs: &[],
        requires: None,
        body: |scope| opt_out_body(scope).boxed(),
    }
}

pub fn image_and_storage_in_one_apply() -> Scenario {
    Scenario {
        name: "image_and_storage_in_one_apply_restart_each_pod_once",
        needs: &[],
        requires: None,
        body: |scope| image_and_storage_body(scope).boxed(),
    }
}

pub fn offline_expansion() -> Scenario {
    Scenario {
        name: "offline_expansion_restarts_pods_through_the_eviction_api",
        needs: &[],
        requires: None,
        body: |scope| body(scope).boxed(),
    }
}

const REPLICAS: usize = 3;

/// Evictions the apiserver answered, by response code: `apiserver_request_total` samples of
/// `POST pods/eviction` (not dry runs).
fn evictions(metrics: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split("\",")
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        if label("resource") != "pods"
            || label("subresource") != "eviction"
            || label("verb") != "POST"
            || !label("dry_run").is_empty()
        {
            continue;
        }
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        *out.entry(label("code")).or_default() += value;
    }
    out
}

/// Three ready replicas of `db` with bound 1Gi claims, and, where it has one, its budget (all
/// three healthy) allowing `allowed` disruptions.
async fn ready_under_budget(
    client: &kube::Client,
    ns: &str,
    budget: Option<(&Api<PodDisruptionBudget>, i32)>,
) -> anyhow::Result<()> {
    wait::ready_with_bound_claims(client, ns, "db", "data", REPLICAS, "1Gi").await?;
    let Some((budgets, allowed)) = budget else {
        return Ok(());
    };
    eventually(
        &format!("the budget allowing {allowed} disruption(s)"),
        Duration::from_secs(60),
        || async {
            let status = budgets.get("db").await?.status.unwrap_or_default();
            anyhow::ensure!(
                status.current_healthy == Some(REPLICAS as i32)
                    && status.disruptions_allowed == Some(allowed),
                "budget status {status:?}"
            );
            Ok(())
        },
    )
    .await
}

async fn body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let client = scope.client();
    let class = format!("{ns}-offline");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let node = actors::start(&scope, vec![ns.clone()]);
    node.offline_expansion();
    let _serve = scope
        .serve(ServeOptions::args(&["--resize-restart-grace=5s"]))
        .await?;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    budgets
        .create(
            &PostParams {
                field_manager: Some(USER.into()),
                ..PostParams::default()
            },
            &serde_json::from_value(json!({"metadata": {"name": "db"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}}}))?,
        )
        .await?;
    let manifest = |size: &str| {
        objects::statefulset(
            &ns,
            "db",
            REPLICAS as i32,
            &class,
            size,
            json!({"metadata": {"annotations": {
                "stateful-admission.io/volume-claim-update-policy": "InPlace",
                "stateful-admission.io/restart-pods-for-resize": "true"}}}),
        )
    };
    let apply = |size: &str| {
        cluster.kubectl(
            &["apply", "--server-side", "-f", "-"],
            Some(&objects::manifest(&[manifest(size)])),
        )
    };
    apply("1Gi")?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let sizes = || async {
        let mut out = Vec::new();
        for n in 0..REPLICAS {
            let claim = claims.get(&format!("data-db-{n}")).await?;
            out.push((
                objects::claim_request(&claim),
                objects::claim_capacity(&claim),
            ));
        }
        anyhow::Ok(out)
    };
    ready_under_budget(&client, &ns, Some((&budgets, 1))).await?;

    step(
        s,
        "1Gi -> 2Gi on a driver without online expansion: the controller restarts the pods",
    );
    let tracker = PodTracker::watch(&scope, &ns, "db", REPLICAS);
    eventually("the pod watch listed", Duration::from_secs(10), || async {
        anyhow::ensure!(tracker.listed(), "not yet");
        Ok(())
    })
    .await?;
    let before = evictions(&cluster.apiserver_metrics().await?);
    apply("2Gi")?;
    let two = Some("2Gi".to_owned());
    // One pod at a time: for each, the grace period (5 s), the eviction, the new pod Ready.
    // The disruption controller keys evicted pods by name: where it syncs only after the
    // StatefulSet controller re-created a pod, it counts the new pod unhealthy for up to two
    // minutes (`DeletionTimeout`), and the next eviction is refused meanwhile; hence the margin.
    eventually(
        "every claim at 2Gi, with no one restarting a pod by hand",
        Duration::from_secs(240),
        || async {
            let got = sizes().await?;
            anyhow::ensure!(
                got.iter().all(|(r, c)| *r == two && *c == two),
                "claims {got:?}; pods seen: {:?}",
                tracker.uids()
            );
            Ok(())
        },
    )
    .await?;
    let after = evictions(&cluster.apiserver_metrics().await?);

    // The driver made each claim wait for a restart, and the restart came.
    let claim_keys: Vec<String> = (0..REPLICAS).map(|n| format!("{ns}/data-db-{n}")).collect();
    let mut pending = node.resize_pending_claims();
    pending.sort();
    anyhow::ensure!(
        pending == claim_keys,
        "each claim waits at FileSystemResizePending once: {pending:?}"
    );
    let mut completed = node.resize_completed_claims();
    completed.sort();
    anyhow::ensure!(
        completed == claim_keys,
        "each claim finished on a new pod: {completed:?}"
    );
    for claim in claims.list(&Default::default()).await?.items {
        let conditions = claim
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        anyhow::ensure!(
            !conditions
                .iter()
                .any(|c| c.type_ == actors::FILE_SYSTEM_RESIZE_PENDING),
            "{:?} still waits: {conditions:?}",
            claim.metadata.name
        );
    }

    // Each pod restarted exactly once, one at a time, the budget never exceeded.
    let restarts = node.restarts();
    let want: BTreeMap<String, usize> =
        (0..REPLICAS).map(|n| (format!("{ns}/db-{n}"), 1)).collect();
    anyhow::ensure!(
        restarts == want,
        "new pods while claims waited: {restarts:?}"
    );
    let uids = tracker.uids();
    anyhow::ensure!(uids.len() == REPLICAS, "pods seen: {uids:?}");
    for (pod, seen) in &uids {
        anyhow::ensure!(
            seen.len() == 2,
            "{pod} had {} pod objects (each pod is evicted exactly once): {seen:?}",
            seen.len()
        );
    }
    let most = tracker.max_unavailable();
    anyhow::ensure!(
        most <= 1,
        "{most} replicas were unavailable at once, above the budget's maxUnavailable 1:\n{}",
        tracker.timeline()
    );

    // Through the Eviction API: the apiserver counted three granted evictions (a refusal,
    // 429, is allowed: it is retried and reported).
    let granted =
        after.get("201").copied().unwrap_or(0.0) - before.get("201").copied().unwrap_or(0.0);
    anyhow::ensure!(
        granted == REPLICAS as f64,
        "evictions granted by the apiserver: {granted} (before {before:?}, after {after:?})"
    );
    let evicted = objects::events(&client, &ns, "PodEvictedForResize").await?;
    anyhow::ensure!(!evicted.is_empty(), "no PodEvictedForResize Event");
    eprintln!(
        "e2e: {s}: {} PodEvictedForResize Event(s), eviction answers {:?}",
        evicted.len(),
        after
    );
    Ok(())
}

async fn opt_out_body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let client = scope.client();
    let class = format!("{ns}-offline");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let node = actors::start(&scope, vec![ns.clone()]);
    node.offline_expansion();
    let serve = scope
        .serve(ServeOptions::args(&["--resize-restart-grace=2s"]))
        .await?;
    // No pod may go.
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    budgets
        .create(
            &PostParams {
                field_manager: Some(USER.into()),
                ..PostParams::default()
            },
            &serde_json::from_value(json!({"metadata": {"name": "db"},
                "spec": {"minAvailable": REPLICAS, "selector": {"matchLabels": {"app": "db"}}}}))?,
        )
        .await?;
    let manifest = |size: &str, opted: &str| {
        objects::manifest(&[objects::statefulset(
            &ns,
            "db",
            REPLICAS as i32,
            &class,
            size,
            json!({"metadata": {"annotations": {
                "stateful-admission.io/volume-claim-update-policy": "InPlace",
                "stateful-admission.io/restart-pods-for-resize": opted}}}),
        )])
    };
    let apply = |size: &str, opted: &str| {
        cluster.kubectl(
            &["apply", "--server-side", "-f", "-"],
            Some(&manifest(size, opted)),
        )
    };
    apply("1Gi", "true")?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    ready_under_budget(&client, &ns, Some((&budgets, 0))).await?;
    let tracker = PodTracker::watch(&scope, &ns, "db", REPLICAS);
    eventually("the pod watch listed", Duration::from_secs(10), || async {
        anyhow::ensure!(tracker.listed(), "not yet");
        Ok(())
    })
    .await?;

    step(
        s,
        "1Gi -> 2Gi: the first claim waits for a restart, its pod's eviction is refused",
    );
    apply("2Gi", "true")?;
    let record = |claim: PersistentVolumeClaim| {
        claim
            .metadata
            .annotations
            .and_then(|a| a.get("stateful-admission.io/resize-restart").cloned())
    };
    eventually(
        "data-db-2's restart recorded and its eviction refused",
        Duration::from_secs(120),
        || async {
            let recorded = record(claims.get("data-db-2").await?);
            let refused = objects::events(&client, &ns, "PodEvictionRefused").await?;
            anyhow::ensure!(
                recorded.is_some() && !refused.is_empty(),
                "record {recorded:?}, refusals {}",
                refused.len()
            );
            Ok(())
        },
    )
    .await?;
    let before = evictions(&cluster.apiserver_metrics().await?);

    step(
        s,
        "the set opts out during the refusal: the record goes, the set is told why",
    );
    apply("2Gi", "false")?;
    eventually(
        "the record gone, and the set told why",
        Duration::from_secs(60),
        || async {
            let recorded = record(claims.get("data-db-2").await?);
            let cancelled = objects::events(&client, &ns, "PodRestartCancelled").await?;
            anyhow::ensure!(
                recorded.is_none()
                    && cancelled
                        .iter()
                        .any(|e| e.message.as_deref().is_some_and(
                            |n| n.contains("data-db-2") && n.contains("no longer opts in")
                        )),
                "record {recorded:?}, Events {cancelled:?}"
            );
            Ok(())
        },
    )
    .await?;
    step(
        s,
        "the budget lifted: nothing is evicted, the user is told to restart the pods",
    );
    budgets
        .delete("db", &kube::api::DeleteParams::default())
        .await?;
    // Nothing of the controller's watches changes with a budget: a change to the claim makes
    // it look again, the budget free and the refusal's backoff long over. Evidence that it
    // looked: more reconciles; the user is told to restart the pods instead.
    let reconciles = serve
        .metric("stateful_admission_controller_reconciles_total")
        .await?;
    claims
        .patch(
            "data-db-2",
            &kube::api::PatchParams {
                field_manager: Some(USER.into()),
                ..kube::api::PatchParams::default()
            },
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"e2e-touched": "yes"}}})),
        )
        .await?;
    eventually(
        "the controller looked again and told the user",
        Duration::from_secs(60),
        || async {
            let now = serve
                .metric("stateful_admission_controller_reconciles_total")
                .await?;
            let told = objects::events(&client, &ns, "PodRestartNeededForResize").await?;
            anyhow::ensure!(
                now >= reconciles + 1.0 && !told.is_empty(),
                "reconciles {reconciles} -> {now}, told {}",
                told.len()
            );
            Ok(())
        },
    )
    .await?;
    let after = evictions(&cluster.apiserver_metrics().await?);
    let granted =
        after.get("201").copied().unwrap_or(0.0) - before.get("201").copied().unwrap_or(0.0);
    anyhow::ensure!(
        granted == 0.0,
        "evictions granted after the opt-out: {granted} (before {before:?}, after {after:?})"
    );
    for (pod, seen) in tracker.uids() {
        anyhow::ensure!(seen.len() == 1, "{pod} was restarted: {seen:?}");
    }
    anyhow::ensure!(
        node.restarts().is_empty(),
        "new pods while claims waited: {:?}",
        node.restarts()
    );
    Ok(())
}

/// Where the webhook keeps the user's partition while it holds the built-in rolling update.
const ROLLOUT_HOLD: &str = "stateful-admission.io/rollout-hold";

/// The managers whose entries own `spec.updateStrategy.rollingUpdate.partition`.
fn partition_owners(set: &StatefulSet) -> Vec<String> {
    set.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| {
                    f.0.pointer("/f:spec/f:updateStrategy/f:rollingUpdate/f:partition")
                })
                .is_some()
        })
        .filter_map(|m| m.manager.clone())
        .collect()
}

async fn image_and_storage_body(scope: Scope) -> anyhow::Result<()> {
    const OLD_IMAGE: &str = "registry.k8s.io/pause:3.10";
    const NEW_IMAGE: &str = "registry.k8s.io/pause:3.9";
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let client = scope.client();
    let class = format!("{ns}-offline");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let node = actors::start(&scope, vec![ns.clone()]);
    node.offline_expansion();
    // The driver's expand call takes longer than the StatefulSet controller takes to re-create
    // a pod: a pod re-created before its claim waits at FileSystemResizePending does not
    // finish the expansion.
    node.controller_expansion_delay(Duration::from_secs(3));
    let serve = scope
        .serve(ServeOptions::args(&["--resize-restart-grace=5s"]))
        .await?;
    let manifest = |image: &str, size: &str| {
        objects::manifest(&[objects::statefulset(
            &ns,
            "db",
            REPLICAS as i32,
            &class,
            size,
            json!({"metadata": {"annotations": {
                    "stateful-admission.io/volume-claim-update-policy": "InPlace",
                    "stateful-admission.io/restart-pods-for-resize": "true"}},
                   "spec": {
                    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                    "template": {"spec": {"containers": [{"name": "db", "image": image}]}}}}),
        )])
    };
    let apply = |image: &str, size: &str| {
        cluster.kubectl(
            &["apply", "--server-side", "-f", "-"],
            Some(&manifest(image, size)),
        )
    };
    apply(OLD_IMAGE, "1Gi")?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    ready_under_budget(&client, &ns, None).await?;
    let tracker = PodTracker::watch(&scope, &ns, "db", REPLICAS);
    eventually("the pod watch listed", Duration::from_secs(10), || async {
        anyhow::ensure!(tracker.listed(), "not yet");
        Ok(())
    })
    .await?;
    let before = evictions(&cluster.apiserver_metrics().await?);

    step(
        s,
        "one server-side apply: a new image and 1Gi -> 2Gi, on a driver without online expansion",
    );
    apply(NEW_IMAGE, "2Gi")?;
    let two = Some("2Gi".to_owned());
    let partition = |set: &StatefulSet| {
        set.spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition)
    };
    let hold = |set: &StatefulSet| {
        set.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ROLLOUT_HOLD).cloned())
    };
    let images = || async {
        let pods = objects::pods_of(&client, &ns, "db").await?;
        anyhow::Ok(
            pods.iter()
                .map(|p| {
                    let image = p
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.first())
                        .and_then(|c| c.image.clone())
                        .unwrap_or_default();
                    (p.metadata.name.clone().unwrap_or_default(), image)
                })
                .collect::<Vec<_>>(),
        )
    };
    // One pod at a time: for each, its claim's expansion (3 s), the pod re-created by the
    // StatefulSet controller and Ready, the file system grown; on a loaded cluster each of
    // these takes seconds.
    eventually(
        "every claim at 2Gi, every pod Ready at the new image, the partition the user's again",
        Duration::from_secs(240),
        || async {
            let mut sizes = Vec::new();
            for n in 0..REPLICAS {
                let claim = claims.get(&format!("data-db-{n}")).await?;
                sizes.push((
                    objects::claim_request(&claim),
                    objects::claim_capacity(&claim),
                ));
            }
            let set = sets.get("db").await?;
            let ready = set.status.as_ref().and_then(|s| s.ready_replicas);
            let images = images().await?;
            anyhow::ensure!(
                sizes.iter().all(|(r, c)| *r == two && *c == two)
                    && images.len() == REPLICAS
                    && images.iter().all(|(_, i)| i == NEW_IMAGE)
                    && ready == Some(REPLICAS as i32)
                    && partition(&set) == Some(0)
                    && hold(&set).is_none(),
                "claims {sizes:?}, images {images:?}, ready {ready:?}, partition {:?}, hold {:?}; \
                 pods seen: {:?}",
                partition(&set),
                hold(&set),
                tracker.uids()
            );
            Ok(())
        },
    )
    .await?;
    let after = evictions(&cluster.apiserver_metrics().await?);

    // Each claim waited for a restart once, and the rolling update's re-creation was it.
    let claim_keys: Vec<String> = (0..REPLICAS).map(|n| format!("{ns}/data-db-{n}")).collect();
    let mut pending = node.resize_pending_claims();
    pending.sort();
    anyhow::ensure!(
        pending == claim_keys,
        "each claim waits at FileSystemResizePending once: {pending:?}"
    );
    let mut completed = node.resize_completed_claims();
    completed.sort();
    anyhow::ensure!(
        completed == claim_keys,
        "each claim finished on a new pod: {completed:?}"
    );
    let restarts = node.restarts();
    let want: BTreeMap<String, usize> =
        (0..REPLICAS).map(|n| (format!("{ns}/db-{n}"), 1)).collect();
    anyhow::ensure!(
        restarts == want,
        "new pods while claims waited: {restarts:?}"
    );

    // Each pod re-created exactly once, one at a time.
    let uids = tracker.uids();
    anyhow::ensure!(uids.len() == REPLICAS, "pods seen: {uids:?}");
    for (pod, seen) in &uids {
        anyhow::ensure!(
            seen.len() == 2,
            "{pod} had {} pod objects (each pod is re-created exactly once):\n{}",
            seen.len(),
            tracker.timeline()
        );
    }
    let most = tracker.max_unavailable();
    anyhow::ensure!(
        most <= 1,
        "{most} replicas were unavailable at once:\n{}",
        tracker.timeline()
    );

    // No eviction: the rolling update's re-creation was the restart.
    let asked: f64 = after.values().sum::<f64>() - before.values().sum::<f64>();
    anyhow::ensure!(
        asked == 0.0,
        "evictions asked of the apiserver: {asked} (before {before:?}, after {after:?})"
    );
    let evicted = objects::events(&client, &ns, "PodEvictedForResize").await?;
    anyhow::ensure!(
        evicted.is_empty(),
        "PodEvictedForResize Events: {evicted:?}"
    );

    step(
        s,
        "the user applies the same manifest again: no conflict, nothing restarts",
    );
    let reconciles = serve
        .metric("stateful_admission_controller_reconciles_total")
        .await?;
    apply(NEW_IMAGE, "2Gi")?;
    let set = sets.get("db").await?;
    let owners = partition_owners(&set);
    anyhow::ensure!(
        owners.iter().any(|o| o == "kubectl"),
        "the user's apply owns spec.updateStrategy.rollingUpdate.partition; owners: {owners:?}"
    );
    // The same manifest changes nothing, so nothing brings a reconcile: another change of the
    // set (an annotation of someone else's) does, after which nothing may have moved.
    cluster.kubectl(
        &[
            "-n",
            ns.as_str(),
            "annotate",
            "statefulset",
            "db",
            "e2e.stateful-admission.io/looked=1",
        ],
        None,
    )?;
    eventually(
        "the controller looked again",
        Duration::from_secs(60),
        || async {
            let now = serve
                .metric("stateful_admission_controller_reconciles_total")
                .await?;
            anyhow::ensure!(now >= reconciles + 1.0, "reconciles {reconciles} -> {now}");
            Ok(())
        },
    )
    .await?;
    let set = sets.get("db").await?;
    anyhow::ensure!(
        partition(&set) == Some(0) && hold(&set).is_none(),
        "partition {:?}, hold {:?} after the second apply",
        partition(&set),
        hold(&set)
    );
    for (pod, seen) in tracker.uids() {
        anyhow::ensure!(
            seen.len() == 2,
            "{pod} was re-created after the second apply: {seen:?}"
        );
    }
    Ok(())
}
