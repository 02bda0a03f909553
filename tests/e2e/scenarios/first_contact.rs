//! First contact with a cluster of healthy StatefulSets (created by the real controller-manager,
//! their pods Ready, their status as the StatefulSet controller writes it): the controller
//! writes at most one thing per set (its conditions), and nothing once it has.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use serde_json::json;

use crate::support::wait::step;
use crate::support::{Scenario, Scope, ServeOptions, actors, eventually, install, objects};

pub fn healthy_sets() -> Scenario {
    Scenario {
        name: "first_contact_with_healthy_sets_writes_once_per_set",
        needs: &[],
        requires: None,
        body: |scope| body(scope).boxed(),
    }
}

const SETS: usize = 12;

/// `controller_actions_total{result="done"}` by action.
fn done_by_action(metrics: &str) -> BTreeMap<String, f64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("stateful_admission_controller_actions_total{action=\""))
        .filter_map(|rest| {
            let (action, rest) = rest.split_once('"')?;
            let value = rest
                .strip_prefix(",result=\"done\"} ")?
                .trim()
                .parse::<f64>()
                .ok()?;
            Some((action.to_owned(), value))
        })
        .collect()
}

async fn body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let class = format!("{ns}-fast");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let _node = actors::start(&scope, vec![ns.clone()]);
    // Charts as a platform has them: OrderedReady and Parallel, one to three replicas, with
    // and without a partition, some with maxUnavailable (spelled as the cluster's users
    // would: the field where the API has it).
    let spelling = scope.caps.mu_spelling();
    let manifests: Vec<_> = (0..SETS)
        .map(|i| {
            let mut extra = json!({"spec": {"updateStrategy": {"type": "RollingUpdate",
                "rollingUpdate": {"partition": 0}}}});
            if i % 2 == 1 {
                extra["spec"]["podManagementPolicy"] = json!("Parallel");
            }
            if i % 3 == 2 {
                objects::merge(
                    &mut extra,
                    spelling.strategy(&json!(2), json!({"partition": 0})),
                );
            }
            objects::statefulset(
                &ns,
                &format!("db{i}"),
                1 + (i % 3) as i32,
                &class,
                "1Gi",
                extra,
            )
        })
        .collect();
    cluster.kubectl(
        &["apply", "--server-side", "-f", "-"],
        Some(&objects::manifest(&manifests)),
    )?;
    let sets: Api<StatefulSet> = Api::namespaced(scope.client(), &ns);
    eventually(
        "every set settled by the StatefulSet controller",
        Duration::from_secs(180),
        || async {
            let list = sets.list(&Default::default()).await?.items;
            anyhow::ensure!(list.len() == SETS, "{} sets", list.len());
            for set in &list {
                let status = set.status.clone().unwrap_or_default();
                let want = set.spec.replicas.unwrap_or(1);
                anyhow::ensure!(
                    status.observed_generation == set.metadata.generation
                        && status.ready_replicas == Some(want)
                        && status.available_replicas == Some(want)
                        && status.updated_replicas == Some(want)
                        && status.current_revision == status.update_revision,
                    "{:?} not settled: {status:?}",
                    set.metadata.name
                );
            }
            Ok(())
        },
    )
    .await?;
    // What the StatefulSet controller writes last settles within moments.
    tokio::time::sleep(Duration::from_secs(2)).await;

    step(s, "serve meets the healthy sets");
    let serve = scope.serve(ServeOptions::default()).await?;
    eventually(
        "conditions on every set",
        Duration::from_secs(60),
        || async {
            let list = sets.list(&Default::default()).await?.items;
            let missing: Vec<_> = list
                .iter()
                .filter(|set| objects::condition(set, "Available").is_none())
                .filter_map(|set| set.metadata.name.clone())
                .collect();
            anyhow::ensure!(missing.is_empty(), "no conditions on {missing:?}");
            Ok(())
        },
    )
    .await?;
    // More reconciles (the StatefulSet controller drops our conditions on its next status
    // write; nothing of theirs is due for healthy sets).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let done = done_by_action(&serve.metrics().await?);
    let total: f64 = done.values().sum();
    anyhow::ensure!(
        total <= SETS as f64 && done.keys().all(|a| a == "WriteConditions"),
        "at most one write per healthy set, its conditions: {done:?}"
    );
    let list = sets.list(&Default::default()).await?.items;
    for set in &list {
        let progressing = objects::condition(set, "Progressing");
        anyhow::ensure!(
            progressing
                .as_ref()
                .is_some_and(|(st, r, _)| st == "True" && r == "RolloutComplete"),
            "{:?}: {progressing:?}",
            set.metadata.name
        );
        let annotations = set.metadata.annotations.clone().unwrap_or_default();
        anyhow::ensure!(
            !annotations.contains_key("stateful-admission.io/progress")
                && !annotations.contains_key("stateful-admission.io/volume-claim-status"),
            "no record on a healthy set: {annotations:?}"
        );
    }
    Ok(())
}
