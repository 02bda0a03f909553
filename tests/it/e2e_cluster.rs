//! Against a real cluster: convergence re-creates a StatefulSet with its recorded desired
//! templates, and the real StatefulSet controller adopts the running pod (same UID, no
//! restart). The webhook need not be installed: the test records the desired templates
//! itself, as the webhook would. Everything lives in a fresh namespace that is deleted at the
//! end.
//!
//! Ignored by default, so that a run without a cluster reports it as ignored rather than
//! passed. Run it with a kubeconfig whose user may create namespaces:
//!
//! ```sh
//! KUBECONFIG=$HOME/.kube/config cargo test --locked --test it -- --ignored e2e_cluster
//! ```

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use serde_json::json;
use stateful_admission::admission::statefulset::templates::desired_annotation;
use stateful_admission::cluster::watch;
use stateful_admission::controller::{Controller, ControllerConfig, Features};
use stateful_admission::names;
use tokio_util::sync::CancellationToken;

async fn poll<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    false
}

/// The cluster named by `KUBECONFIG`; asked for explicitly, so that `--ignored` without it
/// fails instead of passing or reaching whatever cluster a default config points at.
async fn cluster_from_kubeconfig() -> Client {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "this test needs a real cluster: set KUBECONFIG and run it with `cargo test -- --ignored`"
    );
    Client::try_default()
        .await
        .expect("a client from KUBECONFIG")
}

/// Writes the test makes as a user would (Helm, kubectl), under a manager of its own.
fn as_user() -> PostParams {
    PostParams {
        field_manager: Some(USER.into()),
        ..PostParams::default()
    }
}

const USER: &str = "stateful-admission-e2e";

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs KUBECONFIG"]
async fn convergence_keeps_the_running_pod_on_a_real_cluster() {
    let client = cluster_from_kubeconfig().await;
    let ns = format!("sa-e2e-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &as_user(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
        )
        .await
        .expect("create the test namespace");

    let template = |size: &str| {
        json!({"metadata": {"name": "data"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}})
    };
    let desired = desired_annotation(&[template("2Gi")]).expect("annotation");
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": ns, "labels": {"app.kubernetes.io/managed-by": "Helm"},
                     "annotations": {names::DESIRED_VOLUME_CLAIM_TEMPLATES: desired}},
        "spec": {"replicas": 1, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"terminationGracePeriodSeconds": 1,
                                       "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}},
                 "volumeClaimTemplates": [template("1Gi")]}
    }))
    .expect("set");
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // Record first, converge after the pod exists, so there is a pod to keep.
    let mut paused = set.clone();
    if let Some(a) = paused.metadata.annotations.as_mut() {
        a.remove(names::DESIRED_VOLUME_CLAIM_TEMPLATES);
    }
    sets.create(&as_user(), &paused)
        .await
        .expect("create the set");
    assert!(
        poll(Duration::from_secs(120), || async {
            pods.get_opt("web-0").await.ok().flatten().is_some()
        })
        .await,
        "the StatefulSet controller created no pod"
    );
    let pod_uid = pods.get("web-0").await.expect("pod").metadata.uid;
    let live = sets.get("web").await.expect("set");
    let old_uid = live.metadata.uid.clone();
    let patch = json!({"metadata": {"annotations": {names::DESIRED_VOLUME_CLAIM_TEMPLATES:
        set.metadata.annotations.as_ref().and_then(|a| a.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES))}}});
    sets.patch(
        "web",
        &kube::api::PatchParams {
            field_manager: Some(USER.into()),
            ..kube::api::PatchParams::default()
        },
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .expect("record the desired templates");

    let stop = CancellationToken::new();
    let (view, driver) = watch::from_cluster(client.clone(), Some(&ns));
    let driver_stop = stop.clone();
    tokio::spawn(async move {
        tokio::select! { _ = driver => {}, _ = driver_stop.cancelled() => {} }
    });
    let mut registry = Registry::default();
    let controller = Controller::new(
        ControllerConfig {
            namespace: ns.clone(),
            identity: "e2e".into(),
            resync: Duration::from_secs(5),
            features: Features {
                claim_rollout: true,
                converge: true,
                retroactive_default_class: false,
                conditions: false,
                max_unavailable: false,
            },
            ..ControllerConfig::default()
        },
        &mut registry,
    );
    let running = tokio::spawn(controller.run(client.clone(), view, stop.clone()));

    let journals: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let converged = poll(Duration::from_secs(120), || async {
        let Ok(Some(s)) = sets.get_opt("web").await else {
            return false;
        };
        let storage = serde_json::to_value(&s.spec.volume_claim_templates)
            .ok()
            .and_then(|t| t.pointer("/0/spec/resources/requests/storage").cloned());
        s.metadata.uid != old_uid
            && storage == Some(json!("2Gi"))
            && journals
                .get_opt(&stateful_admission::controller::context::journal_name(
                    &ns, "web",
                ))
                .await
                .ok()
                .flatten()
                .is_none()
    })
    .await;
    let adopted = converged
        && poll(Duration::from_secs(60), || async {
            pods.get_opt("web-0").await.ok().flatten().is_some_and(|p| {
                p.metadata
                    .owner_references
                    .as_ref()
                    .is_some_and(|o| !o.is_empty())
            })
        })
        .await;
    let pod_after = pods
        .get_opt("web-0")
        .await
        .ok()
        .flatten()
        .and_then(|p| p.metadata.uid);

    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), running).await;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;

    assert!(
        converged,
        "the set was not re-created with its desired templates"
    );
    assert!(adopted, "the StatefulSet controller did not adopt the pod");
    assert_eq!(pod_after, pod_uid, "the pod kept running (same UID)");
}
