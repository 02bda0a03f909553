//! First contact with a cluster of healthy StatefulSets (created by the real controller-manager,
//! their pods Ready, their status as the StatefulSet controller writes it), half of them with
//! policy `InPlace` and claims matching their templates: the controller writes none of them —
//! no conditions (they would say what the status says), no claim status, no record — and a set
//! gets its conditions once they have news (here: a scale).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use serde_json::json;

use crate::support::history::SetHistory;
use crate::support::wait::step;
use crate::support::{Scenario, Scope, ServeOptions, actors, eventually, install, objects};

pub fn healthy_sets() -> Scenario {
    Scenario {
        name: "first_contact_with_healthy_sets_writes_nothing",
        needs: &[],
        requires: None,
        body: |scope| body(scope).boxed(),
    }
}

const SETS: usize = 12;

/// Successful StatefulSet reconciles.
fn set_reconciles(metrics: &str) -> f64 {
    crate::support::serve::sample_value(
        metrics,
        r#"stateful_admission_controller_reconciles_total{controller="statefulset",result="success"}"#,
    )
}

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
    let node = actors::start(&scope, vec![ns.clone()]);
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
            // Teams that opted into in-place claim updates; nothing to update.
            if i % 2 == 0 {
                objects::merge(
                    &mut extra,
                    json!({"metadata": {"annotations": {
                        "stateful-admission.io/volume-claim-update-policy": "InPlace"}}}),
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
        "every set looked at by the controller",
        Duration::from_secs(60),
        || async {
            let looked = set_reconciles(&serve.metrics().await?);
            anyhow::ensure!(looked >= SETS as f64, "{looked} reconciles");
            Ok(())
        },
    )
    .await?;
    // More reconciles (resyncs; the StatefulSet controller has nothing due for healthy sets).
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Writes of ours to this namespace's sets, as the apiserver recorded them (the metrics
    // count every set the controller sees, another scenario's going away included).
    let list = sets.list(&Default::default()).await?.items;
    let written: Vec<String> = list.iter().filter_map(written_by_us).collect();
    anyhow::ensure!(
        written.is_empty(),
        "no write to a healthy set, InPlace or not: {written:?} (controller writes in all: {:?})",
        done_by_action(&serve.metrics().await?)
    );
    for set in &list {
        anyhow::ensure!(
            objects::condition(set, "Available").is_none()
                && objects::condition(set, "Progressing").is_none(),
            "{:?}: no conditions where the status says it all",
            set.metadata.name
        );
        let annotations = set.metadata.annotations.clone().unwrap_or_default();
        anyhow::ensure!(
            !annotations.contains_key("stateful-admission.io/progress")
                && !annotations.contains_key("stateful-admission.io/volume-claim-status"),
            "no record on a healthy set: {annotations:?}"
        );
    }

    step(s, "db0 scaled to 2: its conditions, once they have news");
    // The built-in controller's status writes remove our conditions, and what they said is
    // not put back unchanged: what a user read is what a watch saw. The new pod stays unready
    // until that is seen (news that lasts: a replica that turns Ready at once may be over
    // before the controller looks, and then there is nothing to say).
    let history = SetHistory::watch(&scope, &ns);
    node.hold_unready(&ns, "db0-1");
    cluster.kubectl(
        &[
            "-n",
            ns.as_str(),
            "scale",
            "statefulset",
            "db0",
            "--replicas=2",
        ],
        None,
    )?;
    eventually(
        "db0 said a replica is unavailable",
        Duration::from_secs(120),
        || async {
            let seen = history.of("db0").conditions;
            anyhow::ensure!(
                seen.iter().any(|c| c.contains("Available=False/")),
                "conditions seen: {seen:?}"
            );
            Ok(())
        },
    )
    .await?;
    node.release(&ns, "db0-1");
    eventually(
        "db0 said Available and RolloutComplete with 2 replicas",
        Duration::from_secs(120),
        || async {
            let seen = history.of("db0").conditions;
            anyhow::ensure!(
                seen.iter()
                    .any(|c| c.contains("Available=True/ReplicasAvailable: 2 of 2")
                        && c.contains("Progressing=True/RolloutComplete")),
                "conditions seen: {seen:?}"
            );
            Ok(())
        },
    )
    .await?;
    let others = sets.list(&Default::default()).await?.items;
    anyhow::ensure!(
        others
            .iter()
            .filter(|set| set.metadata.name.as_deref() != Some("db0"))
            .all(|set| objects::condition(set, "Available").is_none()),
        "the other sets are still not written"
    );
    let written: Vec<String> = others.iter().filter_map(written_by_us).collect();
    anyhow::ensure!(
        written.iter().all(|w| w.starts_with("db0 ")),
        "only db0 is written: {written:?}"
    );
    Ok(())
}

/// `name manager/subresource` where the set's managed fields name our field manager.
fn written_by_us(set: &StatefulSet) -> Option<String> {
    let ours: Vec<String> = set
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some("stateful-admission"))
        .map(|m| m.subresource.as_deref().unwrap_or("(object)").to_owned())
        .collect();
    (!ours.is_empty()).then(|| {
        format!(
            "{} stateful-admission/{}",
            set.metadata.name.as_deref().unwrap_or_default(),
            ours.join(",")
        )
    })
}
