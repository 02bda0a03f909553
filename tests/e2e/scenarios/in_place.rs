//! An InPlace claim rollout on a real cluster: claims follow a template's new size from the
//! highest ordinal down, no more replicas' claims updating at once than maxUnavailable, none
//! below the partition, and `volume-claim-status` tells where it is.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use serde_json::{Value, json};

use crate::support::caps::MAX_UNAVAILABLE_ANNOTATION;
use crate::support::wait::step;
use crate::support::{Scenario, Scope, ServeOptions, actors, eventually, install, objects};

pub fn in_place_rollout() -> Scenario {
    Scenario {
        name: "in_place_rollout_order_budget_partition_status",
        needs: &[],
        requires: None,
        body: |scope| body(scope).boxed(),
    }
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
    let _serve = scope.serve(ServeOptions::default()).await?;
    // maxUnavailable as the cluster's users write it: the field where the API has it.
    let spelling = scope.caps.mu_spelling();
    let manifest = |size: &str| {
        let mut extra = json!({"metadata": {"annotations": {
            "stateful-admission.io/volume-claim-update-policy": "InPlace"}}});
        objects::merge(
            &mut extra,
            spelling.strategy(&json!(2), json!({"partition": 1})),
        );
        objects::statefulset(&ns, "db", 4, &class, size, extra)
    };
    cluster.kubectl(
        &["apply", "--server-side", "-f", "-"],
        Some(&objects::manifest(&[manifest("1Gi")])),
    )?;
    let sets: Api<StatefulSet> = Api::namespaced(scope.client(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), &ns);
    let sizes = || async {
        let mut out = Vec::new();
        for n in 0..4 {
            let claim = claims.get(&format!("data-db-{n}")).await?;
            out.push((
                objects::claim_request(&claim),
                objects::claim_capacity(&claim),
            ));
        }
        anyhow::Ok(out)
    };
    eventually(
        "4 ready replicas with bound 1Gi claims",
        Duration::from_secs(120),
        || async {
            let set = sets.get("db").await?;
            let ready = set
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            anyhow::ensure!(ready == 4, "{ready} of 4 ready");
            let got = sizes().await?;
            anyhow::ensure!(
                got.iter().all(|(_, c)| c.as_deref() == Some("1Gi")),
                "claims {got:?}"
            );
            Ok(())
        },
    )
    .await?;
    let live = sets.get("db").await?;
    let annotations = live.metadata.annotations.clone().unwrap_or_default();
    let field = serde_json::to_value(&live.spec.update_strategy)?
        .pointer("/rollingUpdate/maxUnavailable")
        .cloned();
    if scope.caps.mu_kept {
        anyhow::ensure!(
            field == Some(json!(2)),
            "the apiserver keeps maxUnavailable here: {field:?}"
        );
    } else {
        // Written so, or (the field dropped) copied there by the webhook.
        anyhow::ensure!(
            annotations
                .get(MAX_UNAVAILABLE_ANNOTATION)
                .map(String::as_str)
                == Some("2"),
            "maxUnavailable kept in the annotation where the apiserver drops the field: \
             {annotations:?}"
        );
    }

    step(
        s,
        "resizer held: 1Gi -> 2Gi reaches the two highest ordinals only",
    );
    node.resize_paused.store(true, Ordering::SeqCst);
    let out = cluster.kubectl(
        &["apply", "--server-side", "-f", "-"],
        Some(&objects::manifest(&[manifest("2Gi")])),
    )?;
    anyhow::ensure!(
        out.warnings()
            .iter()
            .any(|w| w.contains("storage 1Gi -> 2Gi")),
        "no warning for the change: {:?}",
        out.warnings()
    );
    let two = Some("2Gi".to_owned());
    let one = Some("1Gi".to_owned());
    eventually(
        "claims of db-3 and db-2 asking 2Gi",
        Duration::from_secs(60),
        || async {
            let got = sizes().await?;
            anyhow::ensure!(got[3].0 == two && got[2].0 == two, "claims {got:?}");
            Ok(())
        },
    )
    .await?;
    let status = eventually(
        "volume-claim-status with 2 updating",
        Duration::from_secs(30),
        || async {
            let status = claim_status(&sets).await?;
            anyhow::ensure!(status["updating"] == 2, "status {status}");
            Ok(status)
        },
    )
    .await?;
    anyhow::ensure!(
        status["name"] == "data" && status["compatible"] == 0 && status["overSized"] == 0,
        "status while two claims update: {status}"
    );
    // The budget is full while both update: the next replica waits (the controller reconciles
    // within a second of each change; give it several).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let got = sizes().await?;
    anyhow::ensure!(
        got[1].0 == one && got[0].0 == one,
        "a third replica's claim was patched while two were updating: {got:?}"
    );

    step(
        s,
        "resizer back: db-1 follows, db-0 stays below the partition",
    );
    node.resize_paused.store(false, Ordering::SeqCst);
    eventually(
        "db-3, db-2, db-1 at 2Gi",
        Duration::from_secs(60),
        || async {
            let got = sizes().await?;
            anyhow::ensure!(
                (1..4).all(|n| got[n] == (two.clone(), two.clone())),
                "claims {got:?}"
            );
            Ok(())
        },
    )
    .await?;
    let status = eventually(
        "volume-claim-status settled",
        Duration::from_secs(30),
        || async {
            let status = claim_status(&sets).await?;
            anyhow::ensure!(
                status["compatible"] == 3 && status["updating"] == 0,
                "status {status}"
            );
            Ok(status)
        },
    )
    .await?;
    anyhow::ensure!(status["totalCapacity"] == "7Gi", "total capacity: {status}");
    let got = sizes().await?;
    anyhow::ensure!(
        got[0] == (one.clone(), one),
        "the claim below the partition changed: {got:?}"
    );
    Ok(())
}

/// The first template's entry of `stateful-admission.io/volume-claim-status`.
async fn claim_status(sets: &Api<StatefulSet>) -> anyhow::Result<Value> {
    let set = sets.get("db").await?;
    let text = set
        .metadata
        .annotations
        .unwrap_or_default()
        .get("stateful-admission.io/volume-claim-status")
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no volume-claim-status"))?;
    let all: Value = serde_json::from_str(&text)?;
    Ok(all[0].clone())
}
