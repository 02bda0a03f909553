//! The retroactive default class (KEP-3333) and StatefulSet conditions (KEP-2804) on a real
//! cluster.
//!
//! - A claim made while its namespace's default class (`stateful-admission.io/default-storage-class`)
//!   did not exist yet gets that class once it appears; the built-in PV controller assigns
//!   only a cluster default, so this is ours alone. A claim of a namespace without one stays
//!   classless until a cluster default appears, then gets it. Where the apiserver refuses a
//!   class on a claim created without one (before KEP-3333), the controller reports the
//!   refusal instead (a Warning Event, the error counter) and the claims stay classless; the
//!   cluster-default step does not apply there (the PV controller's assignment is refused
//!   the same way).
//! - `Available` and `Progressing` follow readiness: a scale-up whose new pod never becomes
//!   ready exceeds the set's progress deadline (`ProgressDeadlineExceeded`, with a Warning
//!   Event), and recovers once the pod is ready.

use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::history::SetHistory;
use crate::support::wait::step;
use crate::support::{
    Scenario, Scope, Serve, ServeOptions, USER, actors, eventually, install, objects,
};

pub fn retroactive_default_class() -> Scenario {
    Scenario {
        name: "retroactive_default_class_namespace_then_cluster",
        needs: &[],
        requires: None,
        body: |scope| default_class_body(scope).boxed(),
    }
}

pub fn conditions() -> Scenario {
    Scenario {
        name: "conditions_follow_readiness_and_the_progress_deadline",
        needs: &[],
        requires: None,
        body: |scope| conditions_body(scope).boxed(),
    }
}

fn claim(ns: &str, name: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("a claim")
}

fn class_of(claim: &PersistentVolumeClaim) -> Option<String> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
}

async fn default_class_body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let plain = scope.namespace("plain").await?;
    let cluster = scope.cluster();
    let client = scope.client();
    let (team, cluster_default) = (format!("{ns}-team"), format!("{ns}-cluster"));
    // A default left by another run would decide for both claims at once.
    let classes: Api<StorageClass> = Api::all(client.clone());
    let defaults: Vec<String> = classes
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|c| {
            c.metadata.annotations.as_ref().is_some_and(|a| {
                a.get("storageclass.kubernetes.io/is-default-class")
                    .is_some_and(|v| v == "true")
            })
        })
        .filter_map(|c| c.metadata.name)
        .collect();
    anyhow::ensure!(
        defaults.is_empty(),
        "the cluster has a default class already: {defaults:?}"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &ns,
            &PatchParams::apply(USER),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "annotations": {
                    "stateful-admission.io/default-storage-class": team}}})),
        )
        .await?;
    let _node = actors::start(&scope, vec![ns.clone(), plain.clone()]);
    let serve = scope.serve(ServeOptions::default()).await?;

    step(s, "classless claims while no default exists anywhere");
    let in_ns: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let in_plain: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &plain);
    let params = PostParams {
        field_manager: Some(USER.into()),
        ..PostParams::default()
    };
    in_ns.create(&params, &claim(&ns, "loose")).await?;
    in_plain.create(&params, &claim(&plain, "loose")).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for api in [&in_ns, &in_plain] {
        let found = class_of(&api.get("loose").await?);
        anyhow::ensure!(found.is_none(), "a class with no default: {found:?}");
    }

    if scope.caps.class_from_unset == Some(false) {
        return refused(&scope, &serve, &in_ns, &in_plain, &team).await;
    }

    step(
        s,
        "the namespace's default class appears: its claim gets it",
    );
    install::apply(
        cluster,
        vec![objects::storage_class(s, &team, true, json!({}))],
    )?;
    eventually(
        "the claim of the annotated namespace in its class",
        Duration::from_secs(30),
        || async {
            let found = class_of(&in_ns.get("loose").await?);
            anyhow::ensure!(found.as_deref() == Some(team.as_str()), "{found:?}");
            Ok(())
        },
    )
    .await?;
    // Published once the assignment's answer is back, a moment after the claim shows it.
    eventually(
        "a DefaultStorageClassAssigned Event naming the class",
        Duration::from_secs(10),
        || async {
            let assigned = objects::events(&client, &ns, "DefaultStorageClassAssigned").await?;
            anyhow::ensure!(
                assigned.len() == 1
                    && assigned[0]
                        .message
                        .as_deref()
                        .is_some_and(|m| m.contains(&team)),
                "{assigned:?}"
            );
            Ok(())
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let found = class_of(&in_plain.get("loose").await?);
    anyhow::ensure!(
        found.is_none(),
        "a class that is no default reached another namespace: {found:?}"
    );

    step(s, "a cluster default appears: the other claim gets it");
    install::apply(
        cluster,
        vec![objects::storage_class(
            s,
            &cluster_default,
            true,
            json!({"metadata": {"annotations": {
                "storageclass.kubernetes.io/is-default-class": "true"}}}),
        )],
    )?;
    eventually(
        "the claim of the plain namespace in the cluster default",
        Duration::from_secs(60),
        || async {
            let found = class_of(&in_plain.get("loose").await?);
            anyhow::ensure!(
                found.as_deref() == Some(cluster_default.as_str()),
                "{found:?}"
            );
            Ok(())
        },
    )
    .await?;
    let kept = class_of(&in_ns.get("loose").await?);
    anyhow::ensure!(
        kept.as_deref() == Some(team.as_str()),
        "a class once set is never replaced: {kept:?}"
    );
    anyhow::ensure!(
        serve
            .metric("stateful_admission_retroactive_storageclass_total")
            .await?
            >= 1.0
            && serve
                .metric("stateful_admission_retroactive_storageclass_errors_total")
                .await?
                == 0.0,
        "attempts counted, none failed:\n{}",
        serve.metrics().await?
    );
    Ok(())
}

/// Where the apiserver refuses a class on a claim created without one: the namespace's
/// default class appears, the controller tries once, reports the refusal, and both claims stay
/// classless.
async fn refused(
    scope: &Scope,
    serve: &Serve,
    in_ns: &Api<PersistentVolumeClaim>,
    in_plain: &Api<PersistentVolumeClaim>,
    team: &str,
) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = &scope.ns;
    let client = scope.client();
    step(
        s,
        "the namespace's default class appears: the apiserver refuses it, the controller says so",
    );
    install::apply(
        scope.cluster(),
        vec![objects::storage_class(s, team, true, json!({}))],
    )?;
    let rejected = eventually(
        "a Warning DefaultStorageClassRejected Event naming the class",
        Duration::from_secs(30),
        || async {
            let rejected = objects::events(&client, ns, "DefaultStorageClassRejected").await?;
            anyhow::ensure!(
                rejected.len() == 1
                    && rejected[0].type_.as_deref() == Some("Warning")
                    && rejected[0]
                        .message
                        .as_deref()
                        .is_some_and(|m| m.contains(team)),
                "{rejected:?}"
            );
            Ok(rejected)
        },
    )
    .await?;
    // The refusal counted once, as an attempt and an error, whether the patch was sent or the
    // capability probe predicted it (then nothing is sent).
    let counted = || async {
        let errors = serve
            .metric("stateful_admission_retroactive_storageclass_errors_total")
            .await?;
        let attempts = serve
            .metric("stateful_admission_retroactive_storageclass_total")
            .await?;
        anyhow::Ok((attempts, errors))
    };
    // Counted as the Event is published: polled, then it must stay at one.
    eventually(
        "the refusal counted once",
        Duration::from_secs(10),
        || async {
            let (attempts, errors) = counted().await?;
            anyhow::ensure!(
                errors == 1.0 && attempts == 1.0,
                "attempts {attempts}, errors {errors}, Event {rejected:?}"
            );
            Ok(())
        },
    )
    .await?;
    // More reconciles: the refusal is final, nothing retried or assigned.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for api in [in_ns, in_plain] {
        let found = class_of(&api.get("loose").await?);
        anyhow::ensure!(found.is_none(), "a class the apiserver refused: {found:?}");
    }
    let assigned = objects::events(&client, ns, "DefaultStorageClassAssigned").await?;
    anyhow::ensure!(assigned.is_empty(), "{assigned:?}");
    let again = objects::events(&client, ns, "DefaultStorageClassRejected").await?;
    anyhow::ensure!(again.len() == 1, "reported once: {again:?}");
    let later = counted().await?;
    anyhow::ensure!(later == (1.0, 1.0), "counted once: {later:?}");
    step(
        s,
        &format!(
            "skipped: a cluster default appearing ({}: the apiserver refuses a class on a claim \
             created without one, the PV controller's assignment too)",
            scope.caps.git_version
        ),
    );
    Ok(())
}

async fn conditions_body(scope: Scope) -> anyhow::Result<()> {
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
    let manifest = |replicas: i32| {
        objects::manifest(&[objects::statefulset(
            &ns,
            "db",
            replicas,
            &class,
            "1Gi",
            json!({"metadata": {"annotations": {
                "stateful-admission.io/progress-deadline-seconds": "10"}}}),
        )])
    };
    let apply = ["apply", "--server-side", "-f", "-"];
    // The built-in controller's status writes remove our conditions, and what they said is
    // not written again unchanged: what a user read is what a watch saw, from `from` on.
    let history = SetHistory::watch(&scope, &ns);
    let seen = |want: &'static [&'static str], from: usize| {
        let all = history.of("db").conditions;
        let found = all
            .iter()
            .skip(from)
            .find(|c| want.iter().all(|w| c.contains(w)))
            .cloned();
        let result = found.ok_or_else(|| {
            anyhow::anyhow!(
                "{want:?} not seen; conditions seen: {:?}",
                &all[from.min(all.len())..]
            )
        });
        async move { result }
    };
    let from = history.of("db").conditions.len();
    // A set that is healthy by the time the controller first looks has nothing to say (its
    // status says it all): db-1 stays unready until the rollout in progress was seen.
    node.hold_unready(&ns, "db-1");
    cluster.kubectl(&apply, Some(&manifest(2)))?;
    eventually(
        "a rollout in progress, a replica unavailable",
        Duration::from_secs(90),
        || seen(&["Available=False/ReplicasUnavailable:"], from),
    )
    .await?;
    node.release(&ns, "db-1");
    eventually(
        "Available and a completed rollout with 2 ready replicas",
        Duration::from_secs(90),
        || {
            seen(
                &[
                    "Available=True/ReplicasAvailable:",
                    "Progressing=True/RolloutComplete:",
                ],
                from,
            )
        },
    )
    .await?;

    step(s, "scale to 3; db-2 never becomes ready");
    node.hold_unready(&ns, "db-2");
    let from = history.of("db").conditions.len();
    cluster.kubectl(&apply, Some(&manifest(3)))?;
    eventually(
        "unavailable, still progressing within the deadline",
        Duration::from_secs(30),
        || {
            seen(
                &["Available=False/ReplicasUnavailable:", "Progressing=True/"],
                from,
            )
        },
    )
    .await?;
    let exceeded = eventually(
        "Progressing False past the 10 s deadline",
        Duration::from_secs(40),
        || {
            seen(
                &[
                    "Available=False/ReplicasUnavailable:",
                    "Progressing=False/ProgressDeadlineExceeded:",
                ],
                from,
            )
        },
    )
    .await?;
    let message = exceeded
        .split("Progressing=False/ProgressDeadlineExceeded: ")
        .nth(1)
        .unwrap_or_default();
    anyhow::ensure!(
        message.contains("10s") || message.contains("10 s") || message.contains("10 seconds"),
        "the message names the deadline: {message:?}"
    );
    let warned = objects::events(&scope.client(), &ns, "ProgressDeadlineExceeded").await?;
    anyhow::ensure!(
        warned.len() == 1 && warned[0].type_.as_deref() == Some("Warning"),
        "one Warning Event: {warned:?}"
    );

    step(
        s,
        "db-2 becomes ready: available, and the rollout completes",
    );
    let from = history.of("db").conditions.len();
    node.release(&ns, "db-2");
    eventually(
        "Available and RolloutComplete with 3 ready replicas",
        Duration::from_secs(60),
        || {
            seen(
                &[
                    "Available=True/ReplicasAvailable:",
                    "Progressing=True/RolloutComplete:",
                ],
                from,
            )
        },
    )
    .await?;
    Ok(())
}
