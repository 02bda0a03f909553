//! What Argo CD sees of a storage rollout with the shipped health check (gitops/argocd): the
//! live StatefulSet, read at every phase of an `InPlace` size change of 3 claims, is
//! Progressing from the apply until the last claim is compatible and the set re-created, then
//! Healthy, as `status` says; where the cluster drops claims' classes, a recorded class change
//! is Degraded once the rest is done, as `status --wait` fails it.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use serde_json::{Value, json};

use crate::gitops::argocd_health;
use crate::support::wait::step;
use crate::support::{
    Need, Scenario, Scope, ServeOptions, actors, eventually, install, objects, serve,
};

pub fn in_place_size_change() -> Scenario {
    Scenario {
        name: "gitops_health_progressing_until_claims_and_set_carry_the_size",
        needs: &[],
        requires: None,
        body: |scope| in_place(scope).boxed(),
    }
}

pub fn class_dropped() -> Scenario {
    Scenario {
        name: "gitops_health_degraded_on_a_class_the_cluster_drops",
        needs: &[Need::VacDropped],
        requires: None,
        body: |scope| dropped(scope).boxed(),
    }
}

/// The set as a GitOps tool reads it (`None` while it is away during its re-create).
async fn live(sets: &Api<StatefulSet>, name: &str) -> anyhow::Result<Option<Value>> {
    Ok(match sets.get_opt(name).await? {
        Some(set) => {
            let mut value = serde_json::to_value(&set)?;
            value["apiVersion"] = json!("apps/v1");
            value["kind"] = json!("StatefulSet");
            Some(value)
        }
        None => None,
    })
}

/// `status`'s verdict on the set (a one-shot `-o json` run): `(result, reason)`.
fn status_verdict(scope: &Scope, ns: &str, name: &str) -> anyhow::Result<(String, String)> {
    let run = Command::new(serve::binary()?)
        .args(["status", "-n", ns, name, "-o", "json"])
        .env("KUBECONFIG", &scope.cluster().kubeconfig)
        .env_remove("RUST_LOG")
        .output()?;
    anyhow::ensure!(
        run.status.success(),
        "status: exit {:?}: {}",
        run.status.code(),
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Value = serde_json::from_slice(&run.stdout)?;
    let verdict = &report["items"][0]["verdict"];
    Ok((
        verdict["result"].as_str().unwrap_or_default().to_owned(),
        verdict["reason"].as_str().unwrap_or_default().to_owned(),
    ))
}

fn note(phases: &mut Vec<String>, phase: String) {
    if phases.last() != Some(&phase) {
        phases.push(phase);
    }
}

fn annotation<'a>(set: &'a Value, key: &str) -> Option<&'a str> {
    set["metadata"]["annotations"][key].as_str()
}

async fn in_place(scope: Scope) -> anyhow::Result<()> {
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
    let manifest = |size: &str| {
        objects::manifest(&[objects::statefulset(
            &ns,
            "db",
            3,
            &class,
            size,
            json!({"metadata": {"annotations": {
                "stateful-admission.io/volume-claim-update-policy": "InPlace"}}}),
        )])
    };
    let apply = ["apply", "--server-side", "-f", "-"];
    cluster.kubectl(&apply, Some(&manifest("1Gi")))?;
    let sets: Api<StatefulSet> = Api::namespaced(scope.client(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), &ns);
    let sizes = || async {
        let mut out = Vec::new();
        for n in 0..3 {
            let claim = claims.get(&format!("data-db-{n}")).await?;
            out.push((
                objects::claim_request(&claim),
                objects::claim_capacity(&claim),
            ));
        }
        anyhow::Ok(out)
    };
    eventually(
        "3 ready replicas with bound 1Gi claims; Argo CD: Healthy",
        Duration::from_secs(120),
        || async {
            let Some(set) = live(&sets, "db").await? else {
                anyhow::bail!("no set yet");
            };
            let got = sizes().await?;
            anyhow::ensure!(
                got.iter().all(|(_, c)| c.as_deref() == Some("1Gi")),
                "claims {got:?}"
            );
            let health = argocd_health(&set)?;
            anyhow::ensure!(health.0 == "Healthy", "Argo CD: {health:?}");
            Ok(())
        },
    )
    .await?;
    let before = sets.get("db").await?.metadata.uid;

    step(
        s,
        "resizer held; apply 2Gi; the set read at every phase until re-created with 2Gi",
    );
    node.resize_paused.store(true, Ordering::SeqCst);
    cluster.kubectl(&apply, Some(&manifest("2Gi")))?;
    // Right after the apply the webhook has recorded the change (or the controller has already
    // taken it further): never Healthy from here on while the claims are held.
    let mut phases: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let set = live(&sets, "db").await?;
        let Some(set) = set else {
            note(&mut phases, "absent (Argo CD: Missing)".into());
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (status, message) = argocd_health(&set)?;
        let recorded =
            annotation(&set, "stateful-admission.io/desired-volume-claim-templates").is_some();
        let deleting = !set["metadata"]["deletionTimestamp"].is_null();
        let recreated = set["metadata"]["uid"].as_str() != before.as_deref();
        note(
            &mut phases,
            format!(
                "{}: {status}: {message}",
                match (recorded, deleting, recreated) {
                    (_, true, _) => "being deleted",
                    (true, _, _) => "change recorded",
                    (false, _, true) => "re-created",
                    (false, _, false) => "not recorded",
                }
            ),
        );
        anyhow::ensure!(
            status == "Progressing",
            "Argo CD says {status} ({message}) while the claims are held; phases seen: {phases:?}"
        );
        let got = sizes().await?;
        // Re-created, observed by the StatefulSet controller, data-db-2 patched and held:
        // the claim status the controller wrote after the re-create is what Argo CD shows.
        if recreated
            && !recorded
            && got[2].0.as_deref() == Some("2Gi")
            && message.starts_with("UpdatingClaims: ")
        {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not re-created with data-db-2 patched in 120s; phases seen: {phases:?}, claims {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("e2e: {s}: phases seen: {phases:?}");
    let (result, reason) = status_verdict(&scope, &ns, "db")?;
    anyhow::ensure!(
        result == "Progressing",
        "status says {result} {reason} where Argo CD says Progressing"
    );

    step(
        s,
        "resizer back: Progressing until the last claim has 2Gi, then Healthy",
    );
    node.resize_paused.store(false, Ordering::SeqCst);
    let two = Some("2Gi".to_owned());
    // Ok(Ok(message)): Healthy with the rollout done; Ok(Err(why)): a verdict that must never
    // be (Healthy too early, Degraded); Err: still Progressing, looked at again.
    let healthy = eventually("Argo CD: Healthy", Duration::from_secs(180), || async {
        let Some(set) = live(&sets, "db").await? else {
            anyhow::bail!("the set is away");
        };
        let (status, message) = argocd_health(&set)?;
        let got = sizes().await?;
        let typed: StatefulSet = serde_json::from_value(set.clone())?;
        let done = got.iter().all(|(r, c)| *r == two && *c == two)
            && objects::template_size(&typed, 0) == two
            && annotation(&set, "stateful-admission.io/desired-volume-claim-templates").is_none();
        match status.as_str() {
            "Healthy" if done => Ok(Ok(message)),
            "Progressing" => anyhow::bail!("{status}: {message}; claims {got:?}"),
            _ => Ok(Err(format!("{status} ({message}) with claims {got:?}"))),
        }
    })
    .await?
    .map_err(|why| anyhow::anyhow!("Argo CD said {why}"))?;
    eprintln!("e2e: {s}: Argo CD: Healthy: {healthy}");
    let (result, reason) = status_verdict(&scope, &ns, "db")?;
    anyhow::ensure!(
        result == "Done",
        "Argo CD says Healthy, status {result} {reason}"
    );
    Ok(())
}

async fn dropped(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let class = format!("{ns}-fast");
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
    let sets: Api<StatefulSet> = Api::namespaced(scope.client(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), &ns);
    let capacities = || async {
        let mut out = Vec::new();
        for n in 0..2 {
            out.push(objects::claim_capacity(
                &claims.get(&format!("data-vo-{n}")).await?,
            ));
        }
        anyhow::Ok(out)
    };
    eventually(
        "bound 1Gi claims; Argo CD: Healthy (a class the template has all along is no failure)",
        Duration::from_secs(120),
        || async {
            let Some(set) = live(&sets, "vo").await? else {
                anyhow::bail!("no set yet");
            };
            let got = capacities().await?;
            anyhow::ensure!(
                got.iter().all(|c| c.as_deref() == Some("1Gi")),
                "claims {got:?}"
            );
            let health = argocd_health(&set)?;
            anyhow::ensure!(health.0 == "Healthy", "Argo CD: {health:?}");
            Ok(())
        },
    )
    .await?;

    step(
        s,
        "kubectl apply: storage 1Gi -> 2Gi, class fast -> faster: Progressing, then Degraded",
    );
    cluster.kubectl(&apply, Some(&manifest("2Gi", &faster)))?;
    let message = eventually(
        "Argo CD: Degraded naming the class, once both claims have 2Gi",
        Duration::from_secs(180),
        || async {
            let Some(set) = live(&sets, "vo").await? else {
                anyhow::bail!("the set is away");
            };
            let (status, message) = argocd_health(&set)?;
            let grown = capacities()
                .await?
                .iter()
                .all(|c| c.as_deref() == Some("2Gi"));
            // Ok(Err(why)) fails at once: Degraded too early, or Healthy (a failed rollout
            // passed).
            match status.as_str() {
                "Degraded" if grown => Ok(Ok(message)),
                "Progressing" => anyhow::bail!("Progressing: {message}"),
                _ => Ok(Err(format!("{status} ({message}), claims grown: {grown}"))),
            }
        },
    )
    .await?
    .map_err(|why| anyhow::anyhow!("Argo CD said {why}"))?;
    anyhow::ensure!(
        message.starts_with(&format!(
            "VolumeAttributesClassNotApplied: template data: volumeAttributesClassName \"{faster}\" cannot be applied"
        )),
        "Argo CD: {message}"
    );
    let (result, reason) = status_verdict(&scope, &ns, "vo")?;
    anyhow::ensure!(
        (result.as_str(), reason.as_str()) == ("Failed", "VolumeAttributesClassNotApplied"),
        "Argo CD says Degraded, status {result} {reason}"
    );
    Ok(())
}
