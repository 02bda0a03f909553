//! Volume claim template edits as users make them: `kubectl apply` (client-side) and
//! `kubectl apply --server-side` (as Helm 4 and Flux apply), each accepted with the webhook's
//! warning, converged by exactly one re-create, with pods and claims kept and the applier still
//! owning `spec.volumeClaimTemplates`.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use kube::Api;
use serde_json::json;
use stateful_admission::quantity::Quantity;

use crate::support::history::SetHistory;
use crate::support::wait::step;
use crate::support::{Scenario, Scope, ServeOptions, actors, eventually, install, objects};

pub fn client_side() -> Scenario {
    Scenario {
        name: "template_edit_client_side_apply",
        needs: &[],
        requires: None,
        body: |scope| run(scope, Apply::ClientSide).boxed(),
    }
}

pub fn server_side() -> Scenario {
    Scenario {
        name: "template_edits_server_side_apply",
        needs: &[],
        requires: None,
        body: |scope| run(scope, Apply::ServerSide).boxed(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Apply {
    ClientSide,
    ServerSide,
}

impl Apply {
    fn args(self) -> Vec<&'static str> {
        match self {
            Apply::ClientSide => vec!["apply", "-f", "-"],
            Apply::ServerSide => vec!["apply", "--server-side", "-f", "-"],
        }
    }

    /// The field manager kubectl writes under.
    fn manager(self) -> &'static str {
        match self {
            Apply::ClientSide => "kubectl-client-side-apply",
            Apply::ServerSide => "kubectl",
        }
    }
}

async fn run(scope: Scope, apply: Apply) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let client = scope.client();
    let cluster = scope.cluster();
    let class = format!("{ns}-fast");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let _node = actors::start(&scope, vec![ns.clone()]);
    let _serve = scope.serve(ServeOptions::default()).await?;

    let manifest = |size: &str| {
        objects::statefulset(
            &ns,
            "db",
            2,
            &class,
            size,
            json!({"metadata": {"annotations": {
                "stateful-admission.io/volume-claim-update-policy": "InPlace"}}}),
        )
    };
    step(s, "create the set at 1Gi");
    let out = cluster.kubectl(&apply.args(), Some(&objects::manifest(&[manifest("1Gi")])))?;
    anyhow::ensure!(
        out.warnings().is_empty(),
        "a plain create warns: {:?}",
        out.warnings()
    );
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let ready = || async {
        let set = sets.get("db").await?;
        let ready = set
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        anyhow::ensure!(ready == 2, "{ready} of 2 replicas ready");
        for n in 0..2 {
            let claim = claims.get(&format!("data-db-{n}")).await?;
            let phase = claim.status.as_ref().and_then(|s| s.phase.clone());
            anyhow::ensure!(
                phase.as_deref() == Some("Bound"),
                "data-db-{n} is {phase:?}"
            );
        }
        Ok(())
    };
    eventually(
        "2 ready replicas with bound claims",
        Duration::from_secs(90),
        ready,
    )
    .await?;
    let uids = Uids::read(&scope, &ns).await?;
    let history = SetHistory::watch(&scope, &ns);
    let mut recreates = 0;
    let mut set_uid = sets.get("db").await?.metadata.uid;

    let changes: &[(&str, &str)] = match apply {
        Apply::ClientSide => &[("1Gi", "2Gi")],
        Apply::ServerSide => &[
            ("1Gi", "2Gi"),
            ("2Gi", "3Gi"),
            ("3Gi", "4Gi"),
            ("4Gi", "3Gi"),
        ],
    };
    let mut claim_size = "1Gi";
    for &(from, to) in changes {
        step(s, &format!("apply {from} -> {to}"));
        let out = cluster.kubectl(&apply.args(), Some(&objects::manifest(&[manifest(to)])))?;
        let expected = format!("storage {from} -> {to}");
        anyhow::ensure!(
            out.warnings().iter().any(|w| w.contains(&expected)),
            "the apply of {to} was accepted without a warning naming `{expected}`: {:?}",
            out.warnings()
        );
        // Claims never shrink: a rollback leaves them at their size.
        if Quantity::parse(to)? > Quantity::parse(claim_size)? {
            claim_size = to;
        }
        let converged = eventually(
            &format!("the set re-created with {to} and claims at {claim_size}"),
            Duration::from_secs(120),
            || async {
                let set = sets.get("db").await?;
                let live = objects::template_size(&set, 0);
                anyhow::ensure!(live.as_deref() == Some(to), "live template {live:?}");
                let annotations = set.metadata.annotations.clone().unwrap_or_default();
                anyhow::ensure!(
                    !annotations
                        .contains_key("stateful-admission.io/desired-volume-claim-templates"),
                    "the desired annotation is still on the converged set"
                );
                let journals: Api<ConfigMap> = Api::namespaced(client.clone(), install::NAMESPACE);
                let open = journals
                    .list(&kube::api::ListParams::default().labels("stateful-admission.io/journal"))
                    .await?
                    .items
                    .len();
                anyhow::ensure!(open == 0, "{open} journal(s) open");
                for n in 0..2 {
                    let claim = claims.get(&format!("data-db-{n}")).await?;
                    let (request, capacity) = (
                        objects::claim_request(&claim),
                        objects::claim_capacity(&claim),
                    );
                    anyhow::ensure!(
                        request.as_deref() == Some(claim_size)
                            && capacity.as_deref() == Some(claim_size),
                        "data-db-{n}: request {request:?}, capacity {capacity:?}"
                    );
                }
                Ok(set)
            },
        )
        .await?;
        if converged.metadata.uid != set_uid {
            recreates += 1;
            set_uid = converged.metadata.uid.clone();
        }
        let owners = objects::template_owners(&converged);
        anyhow::ensure!(
            owners.iter().any(|o| o == apply.manager()),
            "{} no longer owns spec.volumeClaimTemplates after the re-create; owners: {owners:?}",
            apply.manager()
        );
        anyhow::ensure!(
            !owners.iter().any(|o| o == "stateful-admission"),
            "the controller took ownership of spec.volumeClaimTemplates: {owners:?}"
        );
        // Once converged, the same apply is a no-op: no warning, no re-create.
        let out = cluster.kubectl(&apply.args(), Some(&objects::manifest(&[manifest(to)])))?;
        anyhow::ensure!(
            out.warnings().is_empty(),
            "an identical apply after convergence warned: {:?}",
            out.warnings()
        );
        uids.unchanged(&scope, &ns).await?;
    }
    // Every change was one re-create, and the identical applies none: no further one comes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let uid_now = sets.get("db").await?.metadata.uid;
    anyhow::ensure!(
        uid_now == set_uid,
        "the set was re-created again after it converged"
    );
    anyhow::ensure!(
        recreates == changes.len(),
        "{recreates} re-creates for {} changes",
        changes.len()
    );
    let seen = history.of("db");
    anyhow::ensure!(
        seen.deletions == changes.len() && seen.uids.len() == changes.len() + 1,
        "{} deletions and {} objects of the set for {} changes",
        seen.deletions,
        seen.uids.len(),
        changes.len()
    );
    uids.unchanged(&scope, &ns).await?;
    Ok(())
}

/// UIDs of the pods and claims, which must survive every convergence.
struct Uids(BTreeMap<String, Option<String>>);

impl Uids {
    async fn read(scope: &Scope, ns: &str) -> anyhow::Result<Self> {
        let mut map = BTreeMap::new();
        for pod in objects::pods_of(&scope.client(), ns, "db").await? {
            map.insert(
                format!("pod/{}", pod.metadata.name.unwrap_or_default()),
                pod.metadata.uid,
            );
        }
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), ns);
        for claim in claims.list(&Default::default()).await?.items {
            map.insert(
                format!("pvc/{}", claim.metadata.name.unwrap_or_default()),
                claim.metadata.uid,
            );
        }
        anyhow::ensure!(
            map.len() == 4,
            "expected 2 pods and 2 claims, found {:?}",
            map.keys()
        );
        Ok(Self(map))
    }

    async fn unchanged(&self, scope: &Scope, ns: &str) -> anyhow::Result<()> {
        let now = Self::read(scope, ns).await?;
        anyhow::ensure!(
            now.0 == self.0,
            "pods or claims were replaced: before {:?}, after {:?}",
            self.0,
            now.0
        );
        Ok(())
    }
}
