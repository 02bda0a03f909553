//! A VolumeAttributesClass change where the cluster drops claims' classes (the
//! `VolumeAttributesClass` gate off, 1.29–1.33 by default): the apply is told the class cannot
//! reach the claims; the size rolls out within the budget and the class is neither patched nor
//! waited for; the set's claim status and one Warning Event say it is not applied; and
//! `status --wait` ends with exit 1 naming it once the rest is done, not on its timeout.

use std::process::Command;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use serde_json::{Value, json};

use crate::support::wait::step;
use crate::support::{
    Need, Scenario, Scope, ServeOptions, actors, eventually, install, objects, serve,
};

pub fn class_dropped() -> Scenario {
    Scenario {
        name: "volume_attributes_class_the_cluster_drops_is_told_and_never_stalls",
        needs: &[Need::VacDropped],
        requires: None,
        body: |scope| body(scope).boxed(),
    }
}

async fn body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let class = format!("{ns}-fast");
    // No VolumeAttributesClass object: the cluster serves none, and templates may name one.
    let (fast, faster) = (format!("{ns}-fast-io"), format!("{ns}-faster-io"));
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let _node = actors::start(&scope, vec![ns.clone()]);
    let _serve = scope.serve(ServeOptions::default()).await?;
    let manifest = |size: &str, attributes: &str| {
        let mut set = objects::statefulset(
            &ns,
            "vo",
            2,
            &class,
            size,
            json!({"metadata": {"annotations": {
                "stateful-admission.io/volume-claim-update-policy": "InPlace"}}}),
        );
        set["spec"]["volumeClaimTemplates"][0]["spec"]["volumeAttributesClassName"] =
            json!(attributes);
        objects::manifest(&[set])
    };
    let apply = ["apply", "-f", "-"];
    cluster.kubectl(&apply, Some(&manifest("1Gi", &fast)))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), &ns);
    let sets: Api<StatefulSet> = Api::namespaced(scope.client(), &ns);
    let state = || async {
        let mut out = Vec::new();
        for n in 0..2 {
            let claim = claims.get(&format!("data-vo-{n}")).await?;
            out.push((
                objects::claim_request(&claim),
                objects::claim_capacity(&claim),
                claim
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_attributes_class_name.clone()),
            ));
        }
        anyhow::Ok(out)
    };
    eventually(
        "bound 1Gi claims, without the class the apiserver dropped",
        Duration::from_secs(120),
        || async {
            let got = state().await?;
            anyhow::ensure!(
                got.iter()
                    .all(|(_, c, vac)| c.as_deref() == Some("1Gi") && vac.is_none()),
                "claims {got:?}"
            );
            Ok(())
        },
    )
    .await?;

    step(s, "kubectl apply: storage 1Gi -> 2Gi, class fast -> faster");
    let out = cluster.kubectl(&apply, Some(&manifest("2Gi", &faster)))?;
    let warnings = out.warnings();
    anyhow::ensure!(
        warnings.iter().any(|w| w.contains(&format!(
            "volumeAttributesClassName \"{faster}\" cannot reach the claims"
        ))) && warnings
            .iter()
            .any(|w| w.contains("VolumeAttributesClass feature gate is off")),
        "no warning that the class cannot reach the claims: {warnings:?}"
    );

    // The size reaches every claim within the budget; no claim is patched for the class.
    eventually(
        "both claims at 2Gi, still without a class; the set converged",
        Duration::from_secs(180),
        || async {
            let got = state().await?;
            anyhow::ensure!(
                got.iter().all(|(r, c, vac)| r.as_deref() == Some("2Gi")
                    && c.as_deref() == Some("2Gi")
                    && vac.is_none()),
                "claims {got:?}"
            );
            let set = sets.get("vo").await?;
            anyhow::ensure!(
                objects::template_size(&set, 0).as_deref() == Some("2Gi"),
                "live template {:?}",
                objects::template_size(&set, 0)
            );
            let recorded = recorded_class(&set);
            anyhow::ensure!(
                recorded.as_ref().is_some_and(|c| c["name"] == json!(faster)
                    && c["applied"] == json!(false)
                    && c["changed"] == json!(true)),
                "volume-claim-status: {recorded:?}"
            );
            Ok(())
        },
    )
    .await?;
    let told = objects::events(&scope.client(), &ns, "VolumeAttributesClassNotApplied").await?;
    anyhow::ensure!(
        told.len() == 1,
        "one VolumeAttributesClassNotApplied Event for the set: {told:?}"
    );

    step(s, "status --wait: exit 1 naming the class, not a timeout");
    let run = Command::new(serve::binary()?)
        .args(["status", "-n", &ns, "vo", "--wait", "--timeout", "120s"])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env_remove("RUST_LOG")
        .output()?;
    let stderr = String::from_utf8_lossy(&run.stderr);
    anyhow::ensure!(
        run.status.code() == Some(1)
            && stderr.contains(&format!(
                "statefulset {ns}/vo: template data: volumeAttributesClassName \"{faster}\" cannot be applied"
            )),
        "status --wait: exit {:?}: {stderr}{}",
        run.status.code(),
        String::from_utf8_lossy(&run.stdout)
    );
    Ok(())
}

/// The template's class as the controller recorded it in the set's claim status.
fn recorded_class(set: &StatefulSet) -> Option<Value> {
    set.metadata
        .annotations
        .as_ref()?
        .get("stateful-admission.io/volume-claim-status")
        .and_then(|s| serde_json::from_str::<Value>(s).ok())?
        .pointer("/0/volumeAttributesClass")
        .cloned()
}
