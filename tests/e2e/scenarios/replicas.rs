//! Two `serve` replicas sharing the controller's Lease, as the chart runs them: the leader is
//! killed (`kill -9`, no release of the Lease) in the middle of an InPlace claim rollout; the
//! other replica takes the Lease and finishes the rollout, and every admission request made
//! while one replica is down is answered by the other (with `failurePolicy: Ignore` a failed
//! call would go unnoticed, so the probe is a request whose answer shows the webhook's part:
//! a classless claim given its namespace's default class).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::wait::step;
use crate::support::{Scenario, Scope, ServeOptions, USER, actors, eventually, install, objects};

pub fn leader_killed_mid_rollout() -> Scenario {
    Scenario {
        name: "two_replicas_leader_killed_mid_rollout",
        needs: &[],
        requires: None,
        body: |scope| body(scope).boxed(),
    }
}

const REPLICAS: usize = 4;

/// The holder of the controller's Lease, as the chart names it.
pub async fn lease_holder(scope: &Scope) -> anyhow::Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(scope.client(), install::NAMESPACE);
    Ok(leases
        .get_opt(&scope.lease)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
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
    // Claims without a class get this one from the webhook (the probe of the admission path).
    let namespaces: Api<Namespace> = Api::all(scope.client());
    namespaces
        .patch(
            &ns,
            &PatchParams::apply(USER),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "annotations": {
                    "stateful-admission.io/default-storage-class": class}}})),
        )
        .await?;
    let node = actors::start(&scope, vec![ns.clone()]);
    let replicas = [
        scope
            .serve(ServeOptions {
                identity: Some("replica-a".into()),
                ..ServeOptions::default()
            })
            .await?,
        scope
            .serve(ServeOptions {
                identity: Some("replica-b".into()),
                ..ServeOptions::default()
            })
            .await?,
    ];
    let manifest = |size: &str| {
        objects::statefulset(
            &ns,
            "db",
            REPLICAS as i32,
            &class,
            size,
            json!({"metadata": {"annotations": {
                "stateful-admission.io/volume-claim-update-policy": "InPlace"}}}),
        )
    };
    let apply = ["apply", "--server-side", "-f", "-"];
    cluster.kubectl(&apply, Some(&objects::manifest(&[manifest("1Gi")])))?;
    let sets: Api<StatefulSet> = Api::namespaced(scope.client(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), &ns);
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
    eventually(
        "4 ready replicas with bound 1Gi claims",
        Duration::from_secs(120),
        || async {
            let ready = sets
                .get("db")
                .await?
                .status
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            anyhow::ensure!(ready == REPLICAS as i32, "{ready} of {REPLICAS} ready");
            let got = sizes().await?;
            anyhow::ensure!(
                got.iter().all(|(_, c)| c.as_deref() == Some("1Gi")),
                "claims {got:?}"
            );
            Ok(())
        },
    )
    .await?;
    // A replica of an earlier scenario, killed, holds the Lease until it expires.
    let leader = eventually(
        "one of the two leading",
        Duration::from_secs(40),
        || async {
            let holder = lease_holder(&scope).await?;
            match holder {
                Some(h) if replicas.iter().any(|r| r.identity == h) => Ok(h),
                other => anyhow::bail!("the Lease is held by {other:?}"),
            }
        },
    )
    .await?;
    let (dying, surviving) = match replicas.iter().position(|r| r.identity == leader) {
        Some(0) => (&replicas[0], &replicas[1]),
        Some(_) => (&replicas[1], &replicas[0]),
        None => anyhow::bail!("the Lease is held by {leader:?}, neither replica"),
    };

    step(
        s,
        "resizer held; 1Gi -> 2Gi: the leader patches the first claim",
    );
    node.resize_paused.store(true, Ordering::SeqCst);
    cluster.kubectl(&apply, Some(&objects::manifest(&[manifest("2Gi")])))?;
    let two = Some("2Gi".to_owned());
    eventually(
        "the claim of db-3 asking 2Gi",
        Duration::from_secs(60),
        || async {
            let got = sizes().await?;
            anyhow::ensure!(got[3].0 == two, "claims {got:?}");
            Ok(())
        },
    )
    .await?;

    step(
        s,
        &format!(
            "kill -9 the leader ({}) mid-rollout; admission requests meanwhile",
            dying.identity
        ),
    );
    dying.kill();
    let answered = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let requests = tokio::spawn({
        let claims = claims.clone();
        let answered = answered.clone();
        let refused = refused.clone();
        let stop = scope.stop.child_token();
        let class = class.clone();
        async move {
            // A classless claim as a dry run: the mutating webhook gives it the namespace's
            // default class; without the webhook (failurePolicy Ignore) it would come back
            // classless, there being no cluster default.
            let probe: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": "probe"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}))
            .expect("a claim");
            let params = PostParams {
                dry_run: true,
                field_manager: Some(USER.into()),
            };
            while !stop.is_cancelled() {
                match claims.create(&params, &probe).await {
                    Ok(claim)
                        if claim
                            .spec
                            .as_ref()
                            .and_then(|s| s.storage_class_name.as_deref())
                            == Some(class.as_str()) =>
                    {
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => refused
                        .lock()
                        .expect("refused")
                        .push("a claim came back without the namespace's class".to_owned()),
                    Err(e) => refused.lock().expect("refused").push(e.to_string()),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    step(
        s,
        "resizer back: the other replica takes the Lease and finishes",
    );
    node.resize_paused.store(false, Ordering::SeqCst);
    eventually(
        &format!("{} holding the Lease", surviving.identity),
        Duration::from_secs(60),
        || async {
            let holder = lease_holder(&scope).await?;
            anyhow::ensure!(
                holder.as_deref() == Some(surviving.identity.as_str()),
                "held by {holder:?}"
            );
            Ok(())
        },
    )
    .await?;
    eventually("every claim at 2Gi", Duration::from_secs(90), || async {
        let got = sizes().await?;
        anyhow::ensure!(
            got.iter()
                .all(|(r, c)| *r == two && c.as_deref() == Some("2Gi")),
            "claims {got:?}"
        );
        Ok(())
    })
    .await?;
    eventually(
        "volume-claim-status: 4 compatible",
        Duration::from_secs(30),
        || async {
            let set = sets.get("db").await?;
            let status = set
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("stateful-admission.io/volume-claim-status"))
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .unwrap_or_default();
            anyhow::ensure!(
                status.pointer("/0/compatible") == Some(&json!(REPLICAS)),
                "{status}"
            );
            Ok(())
        },
    )
    .await?;
    scope.stop.cancel();
    let _ = requests.await;
    let refused = refused.lock().expect("refused").clone();
    let answered = answered.load(Ordering::SeqCst);
    anyhow::ensure!(
        refused.is_empty(),
        "admission requests failed while one replica was down ({answered} answered): {refused:?}"
    );
    anyhow::ensure!(answered >= 10, "only {answered} admission requests made");
    anyhow::ensure!(
        surviving
            .metric("stateful_admission_controller_leader")
            .await?
            == 1.0,
        "the surviving replica reports itself leader"
    );
    Ok(())
}
