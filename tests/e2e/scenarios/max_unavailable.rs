//! maxUnavailable (KEP-961) on real clusters. Where the apiserver drops the field
//! (`MaxUnavailableStatefulSet` off) the driver deletes old-revision pods within the budget,
//! in both spellings a user writes: the field with a `rollingUpdate` block (where the API has
//! the field), and the annotation with `type: RollingUpdate` alone. Never more than the budget
//! is unavailable, the budget is used, and every pod is deleted exactly once. Where the
//! apiserver keeps it, the driver stands down and the built-in controller does the same. Where
//! VolumeAttributesClasses are served and claims keep theirs, a template's
//! `volumeAttributesClassName` edit reaches the claims.

use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use serde_json::{Value, json};

use crate::support::caps::{MAX_UNAVAILABLE_ANNOTATION, Spelling};
use crate::support::pods::PodTracker;
use crate::support::wait::step;
use crate::support::{
    Need, Scenario, Scope, Serve, ServeOptions, actors, eventually, install, objects,
};

pub fn gate_off_field() -> Scenario {
    Scenario {
        name: "max_unavailable_gate_off_field",
        needs: &[Need::MuField, Need::MuDropped],
        requires: None,
        body: |scope| rollout(scope, Some(Spelling::Field), Gate::Off).boxed(),
    }
}

pub fn gate_off_annotation() -> Scenario {
    Scenario {
        name: "max_unavailable_gate_off_annotation",
        needs: &[Need::MuDropped],
        requires: None,
        body: |scope| rollout(scope, Some(Spelling::Annotation), Gate::Off).boxed(),
    }
}

/// The controller starts while its webhook is unreachable and its gate probe is refused (no
/// `create` on StatefulSets yet); once the probe is allowed and a webhook replica is back, the
/// gate is learned within seconds and a rollout still keeps two pods updating at once. The
/// budget is spelled as the cluster's users would (the field where the API has it).
pub fn gate_learned_late() -> Scenario {
    Scenario {
        name: "max_unavailable_gate_learned_after_failed_probes",
        needs: &[Need::MuDropped],
        requires: None,
        body: |scope| rollout_with(scope, None, Gate::Off, Start::ProbeRefused).boxed(),
    }
}

pub fn gate_on() -> Scenario {
    Scenario {
        name: "max_unavailable_gate_on_builtin_drives",
        needs: &[Need::MuKept],
        requires: None,
        body: |scope| rollout(scope, Some(Spelling::Field), Gate::On).boxed(),
    }
}

pub fn volume_attributes_class() -> Scenario {
    Scenario {
        name: "volume_attributes_class_edit_reaches_claims",
        needs: &[Need::Vac],
        requires: None,
        body: |scope| vac_body(scope).boxed(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Off,
    On,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Normal,
    /// The gate probe refused (RBAC) and the webhook unreachable when the controller starts.
    ProbeRefused,
}

const REPLICAS: usize = 5;
const BUDGET: usize = 2;

async fn rollout(scope: Scope, spelling: Option<Spelling>, gate: Gate) -> anyhow::Result<()> {
    rollout_with(scope, spelling, gate, Start::Normal).await
}

/// `spelling`: the one the scenario is about, else the cluster's ([`Caps::mu_spelling`]).
///
/// [`Caps::mu_spelling`]: crate::support::Caps::mu_spelling
async fn rollout_with(
    scope: Scope,
    spelling: Option<Spelling>,
    gate: Gate,
    start: Start,
) -> anyhow::Result<()> {
    let spelling = spelling.unwrap_or_else(|| scope.caps.mu_spelling());
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let class = format!("{ns}-fast");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let node = actors::start(&scope, vec![ns.clone()]);
    let serve = match start {
        Start::Normal => scope.serve(ServeOptions::default()).await?,
        Start::ProbeRefused => {
            let refused = probe_refused_then_learned(&scope).await;
            scope.install.restore_access()?;
            refused?
        }
    };
    let strategy = spelling.strategy(&json!(BUDGET), json!({}));
    let manifest = |version: &str| {
        let mut extra = strategy.clone();
        objects::merge(
            &mut extra,
            json!({"spec": {"template": {"metadata": {"annotations": {"example.com/version": version}}}}}),
        );
        objects::statefulset(&ns, "db", REPLICAS as i32, &class, "1Gi", extra)
    };
    let apply = |version: &str| {
        cluster.kubectl(
            &["apply", "--server-side", "-f", "-"],
            Some(&objects::manifest(&[manifest(version)])),
        )
    };
    apply("1")?;
    let sets: Api<StatefulSet> = Api::namespaced(scope.client(), &ns);
    let settled = || async {
        let set = sets.get("db").await?;
        let status = set.status.clone().unwrap_or_default();
        let (ready, updated) = (
            status.ready_replicas.unwrap_or(0),
            status.updated_replicas.unwrap_or(0),
        );
        anyhow::ensure!(
            ready == REPLICAS as i32
                && updated == REPLICAS as i32
                && status.current_revision == status.update_revision
                && status.observed_generation == set.metadata.generation,
            "ready {ready}, updated {updated}, revisions {:?} / {:?}",
            status.current_revision,
            status.update_revision
        );
        Ok(set)
    };
    let set = eventually("5 ready replicas", Duration::from_secs(120), settled).await?;
    let stored = serde_json::to_value(&set.spec.update_strategy)?;
    match (gate, spelling) {
        (Gate::Off, Spelling::Field) => anyhow::ensure!(
            stored.pointer("/rollingUpdate/maxUnavailable").is_none()
                && annotation(&set, MAX_UNAVAILABLE_ANNOTATION) == Some("2"),
            "where the gate is off the field is dropped and the annotation kept: {stored}"
        ),
        (Gate::Off, Spelling::Annotation) => anyhow::ensure!(
            stored.pointer("/rollingUpdate/partition") == Some(&json!(0)),
            "the webhook gives type RollingUpdate alone the rollingUpdate block defaulting \
             would have given it: {stored}"
        ),
        (Gate::On, _) => anyhow::ensure!(
            stored.pointer("/rollingUpdate/maxUnavailable") == Some(&json!(BUDGET)),
            "where the gate is on the apiserver keeps the field: {stored}"
        ),
    }
    expect_gate(&serve, gate).await?;

    step(s, "roll the pods: each takes 2 s to become ready");
    let tracker = PodTracker::watch(&scope, &ns, "db", REPLICAS);
    eventually("the pod watch listed", Duration::from_secs(10), || async {
        anyhow::ensure!(tracker.listed(), "not yet");
        Ok(())
    })
    .await?;
    node.slow_start(Duration::from_secs(2));
    apply("2")?;
    eventually("the rollout complete", Duration::from_secs(120), settled).await?;
    let most = tracker.max_unavailable();
    anyhow::ensure!(
        most <= BUDGET,
        "{most} replicas were unavailable at once, above maxUnavailable {BUDGET}:\n{}",
        tracker.timeline()
    );
    anyhow::ensure!(
        most == BUDGET,
        "at most {most} replica(s) unavailable at once: the budget of {BUDGET} was not used"
    );
    for (pod, uids) in tracker.uids() {
        anyhow::ensure!(
            uids.len() == 2,
            "{pod} had {} pod objects during the rollout (each pod is deleted exactly once): {uids:?}",
            uids.len()
        );
    }
    anyhow::ensure!(
        tracker.uids().len() == REPLICAS,
        "pods seen: {:?}",
        tracker.uids().keys()
    );
    let deletions = serve
        .metric("stateful_admission_controller_actions_total{action=\"DeletePod\",result=\"done\"}")
        .await?;
    match gate {
        Gate::Off => anyhow::ensure!(deletions >= 1.0, "the driver deleted no pod"),
        Gate::On => anyhow::ensure!(
            deletions == 0.0,
            "the driver deleted {deletions} pods where the built-in controller drives"
        ),
    }
    Ok(())
}

/// Starts the controller unreachable behind the front, with its probe refused: the gate
/// stays unknown and the Lease says why. Then allows the probe and starts a webhook-only
/// replica behind the front; returns the controller's replica once it has learned the gate.
async fn probe_refused_then_learned(scope: &Scope) -> anyhow::Result<Serve> {
    let s = scope.scenario;
    step(
        s,
        "controller starts: webhook unreachable, gate probe refused",
    );
    scope.install.revoke("apps", "statefulsets", "create")?;
    // The authorizer follows the role within moments.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let serve = scope
        .serve(ServeOptions {
            unreachable: true,
            ..ServeOptions::default()
        })
        .await?;
    eventually("failed probes", Duration::from_secs(30), || async {
        let failed = serve
            .metric("stateful_admission_max_unavailable_gate_probes_total{result=\"error\"}")
            .await?;
        let gate = serve
            .metric("stateful_admission_max_unavailable_gate_enabled")
            .await?;
        anyhow::ensure!(
            failed >= 2.0 && gate == -1.0,
            "failed {failed}, gate {gate}"
        );
        Ok(())
    })
    .await?;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(scope.client(), install::NAMESPACE);
    eventually(
        "the Lease naming the unknown gate",
        Duration::from_secs(10),
        || async {
            // The chart's Lease, which this scenario's replica leads.
            let said = leases
                .get_opt(&scope.lease)
                .await?
                .and_then(|l| l.metadata.annotations)
                .and_then(|a| a.get("stateful-admission.io/max-unavailable-gate").cloned())
                .into_iter()
                .collect::<Vec<_>>();
            anyhow::ensure!(
                said.iter()
                    .any(|t| t.starts_with("unknown: ") && t.contains("forbidden")),
                "{said:?}"
            );
            Ok(())
        },
    )
    .await?;

    step(
        s,
        "the probe allowed and a webhook replica back: the gate is learned",
    );
    scope.install.restore_access()?;
    let _webhook = scope
        .serve(ServeOptions::args(&["--controller=false"]))
        .await?;
    // Retries after 1, 2, 4, 8 … s: the next one is at most about 16 s away here.
    eventually("the gate learned", Duration::from_secs(40), || async {
        let gate = serve
            .metric("stateful_admission_max_unavailable_gate_enabled")
            .await?;
        anyhow::ensure!(gate == 0.0, "gate {gate}");
        Ok(())
    })
    .await?;
    Ok(serve)
}

fn annotation<'a>(set: &'a StatefulSet, key: &str) -> Option<&'a str> {
    set.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The gate as the controller probed it (`-1` unknown, `0` off, `1` on).
async fn expect_gate(serve: &Serve, gate: Gate) -> anyhow::Result<()> {
    let want = match gate {
        Gate::Off => 0.0,
        Gate::On => 1.0,
    };
    eventually("the gate probed", Duration::from_secs(30), || async {
        let got = serve
            .metric("stateful_admission_max_unavailable_gate_enabled")
            .await?;
        anyhow::ensure!(
            got == want,
            "max_unavailable_gate_enabled {got}, want {want}"
        );
        Ok(())
    })
    .await
}

async fn vac_body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let class = format!("{ns}-fast");
    let (silver, gold) = (format!("{ns}-silver"), format!("{ns}-gold"));
    // Where the cluster serves them: v1beta1 behind a gate, v1 once GA.
    let api_version = scope.caps.vac_api_version().ok_or_else(|| {
        anyhow::anyhow!("no storage.k8s.io version serves volumeattributesclasses")
    })?;
    let vac = |name: &str, iops: &str| {
        json!({"apiVersion": api_version, "kind": "VolumeAttributesClass",
               "metadata": {"name": name, "labels": {crate::support::SCENARIO_LABEL: crate::support::label_value(s)}},
               "driverName": "hostpath.e2e.stateful-admission.io",
               "parameters": {"iops": iops}})
    };
    install::apply(
        cluster,
        vec![
            objects::storage_class(s, &class, true, json!({})),
            vac(&silver, "1000"),
            vac(&gold, "5000"),
        ],
    )?;
    let _node = actors::start(&scope, vec![ns.clone()]);
    let _serve = scope.serve(ServeOptions::default()).await?;
    let manifest = |attributes: &str| {
        let mut set = objects::statefulset(
            &ns,
            "db",
            2,
            &class,
            "1Gi",
            json!({"metadata": {"annotations": {
                "stateful-admission.io/volume-claim-update-policy": "InPlace"}}}),
        );
        set["spec"]["volumeClaimTemplates"][0]["spec"]["volumeAttributesClassName"] =
            json!(attributes);
        set
    };
    let apply = |attributes: &str| {
        cluster.kubectl(
            &["apply", "--server-side", "-f", "-"],
            Some(&objects::manifest(&[manifest(attributes)])),
        )
    };
    apply(&silver)?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), &ns);
    let attributes_of = |claim: &PersistentVolumeClaim| {
        (
            claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_attributes_class_name.clone()),
            claim
                .status
                .as_ref()
                .and_then(|s| s.current_volume_attributes_class_name.clone()),
            claim.status.as_ref().and_then(|s| s.phase.clone()),
        )
    };
    eventually(
        "bound claims of class silver",
        Duration::from_secs(90),
        || async {
            for n in 0..2 {
                let got = attributes_of(&claims.get(&format!("data-db-{n}")).await?);
                anyhow::ensure!(
                    got.0.as_deref() == Some(silver.as_str()) && got.2.as_deref() == Some("Bound"),
                    "data-db-{n}: {got:?}"
                );
            }
            Ok(())
        },
    )
    .await?;

    step(s, "template volumeAttributesClassName silver -> gold");
    let out = apply(&gold)?;
    anyhow::ensure!(
        out.warnings()
            .iter()
            .any(|w| w.contains("volumeAttributesClassName") && w.contains(&gold)),
        "no warning naming the volumeAttributesClassName change: {:?}",
        out.warnings()
    );
    let sets: Api<StatefulSet> = Api::namespaced(scope.client(), &ns);
    eventually(
        "claims and the live template at gold",
        Duration::from_secs(90),
        || async {
            for n in 0..2 {
                let got = attributes_of(&claims.get(&format!("data-db-{n}")).await?);
                anyhow::ensure!(
                    got.0.as_deref() == Some(gold.as_str())
                        && got.1.as_deref() == Some(gold.as_str()),
                    "data-db-{n}: {got:?}"
                );
            }
            let set: Value = serde_json::to_value(sets.get("db").await?)?;
            let live = set.pointer("/spec/volumeClaimTemplates/0/spec/volumeAttributesClassName");
            anyhow::ensure!(live == Some(&json!(gold)), "live template: {live:?}");
            Ok(())
        },
    )
    .await?;
    Ok(())
}
