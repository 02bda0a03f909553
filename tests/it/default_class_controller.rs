//! The retroactive default StorageClass (KEP-3333) end to end: the controller against the
//! fake API server, reacting to classes and namespaces as they change.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::events::v1::Event as EventV1;
use serde_json::{Value, json};
use stateful_admission::cluster::Change;
use stateful_admission::controller::ControllerConfig;

use crate::support::barrier::{BARRIER_WAIT, ClassProbe, PROBE_NAMESPACE};
use crate::support::controller::{RunningController, config, eventually, no_features};
use crate::support::fake_apiserver::FakeApiServer;
use crate::support::fake_apiserver::resources::PERSISTENT_VOLUME_CLAIMS;

fn settings(resync: Duration) -> ControllerConfig {
    let mut c = config(
        "defclass",
        stateful_admission::controller::Features {
            retroactive_default_class: true,
            ..no_features()
        },
    );
    c.resync = resync;
    c
}

fn class(api: &FakeApiServer, name: &str, default: bool, created: &str) {
    api.put_object(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "csi.example.com",
        "metadata": {"name": name, "creationTimestamp": created, "annotations": {
            "storageclass.kubernetes.io/is-default-class": if default { "true" } else { "false" }}},
    }));
}

fn claim(api: &FakeApiServer, namespace: &str, name: &str, spec: Value, extra_meta: Value) {
    let mut spec_full =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    json_patch::merge(&mut spec_full, &spec);
    let mut object = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec_full, "status": {"phase": "Pending"},
    });
    json_patch::merge(&mut object["metadata"], &extra_meta);
    api.put_object(object);
}

fn class_of(api: &FakeApiServer, namespace: &str, name: &str) -> Option<String> {
    api.get::<PersistentVolumeClaim>(namespace, name)
        .and_then(|c| c.spec)
        .and_then(|s| s.storage_class_name)
}

/// Claim patches that could change a claim (not the capability probes' dry runs, nor the
/// barrier's probe claims).
fn claim_patches(api: &FakeApiServer) -> Vec<(String, u16)> {
    api.writes()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("/persistentvolumeclaims/"))
        .filter(|r| !r.is_dry_run() && !r.path.contains(&format!("/{PROBE_NAMESPACE}/")))
        .map(|r| (r.path, r.code))
        .collect()
}

/// Events with `reason`, but those about the barrier's probe claims.
fn events(api: &FakeApiServer, reason: &str) -> Vec<EventV1> {
    api.list::<EventV1>()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.namespace.as_deref()) != Some(PROBE_NAMESPACE)
        })
        .collect()
}

fn metric(controller: &RunningController, name: &str) -> Option<u64> {
    controller.metrics().lines().find_map(|l| {
        l.strip_prefix(&format!("{name} "))
            .and_then(|v| v.parse().ok())
    })
}

/// Asserts the controller's attempts come to exactly `want`, the probe claims' included. An
/// attempt is counted once its answer is in, a moment after the store shows it: waited for
/// until the count reaches `want`; an attempt too many (always before the last probe's, the
/// loop being sequential) then shows as more.
async fn attempts_are(controller: &RunningController, want: u64) {
    let attempts = || metric(controller, "retroactive_storageclass_total");
    assert!(
        eventually(Duration::from_secs(30), || attempts() >= Some(want)).await,
        "attempts {:?}, {want} expected",
        attempts()
    );
    assert_eq!(attempts(), Some(want), "attempts");
}

async fn leading(controller: &RunningController) {
    assert!(eventually(Duration::from_secs(15), || controller.is_leader()).await);
}

/// Whether the controller's view holds `name` as the cluster default, or (`false`) no default.
fn view_default_is(controller: &RunningController, name: Option<&str>) -> bool {
    let defaults: Vec<String> = controller
        .view()
        .storage_classes()
        .iter()
        .filter(|c| {
            c.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("storageclass.kubernetes.io/is-default-class"))
                .is_some_and(|v| v == "true")
        })
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    match name {
        Some(name) => defaults.iter().any(|d| d == name),
        None => defaults.is_empty(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_created_before_any_default_gets_one_as_soon_as_a_default_appears() {
    let api = FakeApiServer::start().await;
    class(&api, "plain", false, "2024-01-01T00:00:00Z");
    claim(&api, "default", "data", json!({}), json!({}));
    claim(
        &api,
        "default",
        "chosen",
        json!({"storageClassName": "plain"}),
        json!({}),
    );
    claim(
        &api,
        "default",
        "no-class",
        json!({"storageClassName": ""}),
        json!({}),
    );
    claim(
        &api,
        "default",
        "beta",
        json!({}),
        json!({"annotations": {"volume.beta.kubernetes.io/storage-class": "plain"}}),
    );
    claim(
        &api,
        "default",
        "prebound",
        json!({"volumeName": "pv-1"}),
        json!({}),
    );
    let mut probe = ClassProbe::install(&api);
    // A long resync: only the class watch can explain a prompt assignment.
    let controller = RunningController::start(&api, settings(Duration::from_secs(600)));
    leading(&controller).await;
    // Its first pass over the claims is done.
    probe.looked().await;
    assert_eq!(class_of(&api, "default", "data"), None, "no default yet");
    assert!(claim_patches(&api).is_empty());

    let mut feed = controller.view().subscribe();
    class(&api, "gold", true, "2024-02-01T00:00:00Z");
    api.wait_for(
        |s| {
            s.get_object(&PERSISTENT_VOLUME_CLAIMS, "default", "data")
                .and_then(|c| c.pointer("/spec/storageClassName").cloned())
                == Some(json!("gold"))
        },
        BARRIER_WAIT,
    )
    .await
    .expect("the claim gets the new default");
    // The class watch did it: the class is all the controller heard of between its first
    // pass and the claim's assignment (the resync is 600 s, past the wait).
    let mut heard = Vec::new();
    let assigned = Change::Claim {
        namespace: "default".into(),
        name: "data".into(),
    };
    while heard.last() != Some(&assigned) {
        let change = tokio::time::timeout(BARRIER_WAIT, feed.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("the view never took in the assignment: {heard:?}"));
        // The probe's own claim, assigned a moment ago, may come in late.
        if !matches!(&change, Change::Claim { namespace, .. } if namespace == PROBE_NAMESPACE) {
            heard.push(change);
        }
    }
    assert_eq!(
        heard,
        [Change::StorageClass("gold".into()), assigned],
        "what the controller heard of until the assignment"
    );

    // Looked at since the assignment: nothing more.
    probe.looked().await;
    let patches = claim_patches(&api);
    assert_eq!(
        patches,
        [(
            "/api/v1/namespaces/default/persistentvolumeclaims/data".to_owned(),
            200
        )]
    );
    let body = api
        .writes()
        .into_iter()
        // The controller's patch, not a dry run of the capability prober's on the same claim.
        .find(|r| r.method == "PATCH" && r.path.ends_with("/data") && !r.is_dry_run())
        .and_then(|r| r.body)
        .unwrap_or_default();
    assert!(
        body.pointer("/metadata/resourceVersion")
            .is_some_and(Value::is_string),
        "precondition sent: {body}"
    );
    for (name, expected) in [
        ("chosen", Some("plain")),
        ("no-class", Some("")),
        ("beta", None),
        ("prebound", None),
    ] {
        assert_eq!(
            class_of(&api, "default", name).as_deref(),
            expected,
            "{name} is untouched"
        );
    }
    // Counted once the write's answer and its Event are in (the probe claims' too).
    let probes = probe.sent() as u64;
    attempts_are(&controller, 1 + probes).await;
    assert_eq!(events(&api, "DefaultStorageClassAssigned").len(), 1);
    assert_eq!(
        metric(&controller, "retroactive_storageclass_errors_total"),
        Some(0)
    );
    let assigned = events(&api, "DefaultStorageClassAssigned");
    assert_eq!(assigned.len(), 1);
    assert_eq!(
        assigned[0]
            .regarding
            .as_ref()
            .and_then(|r| r.name.as_deref()),
        Some("data")
    );
    assert!(
        assigned[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("\"gold\" (the cluster default)"))
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_two_defaults_the_newest_wins_and_a_namespace_default_comes_first() {
    let api = FakeApiServer::start().await;
    class(&api, "older", true, "2024-01-01T00:00:00Z");
    class(&api, "newer", true, "2024-06-01T00:00:00Z");
    class(&api, "team-class", false, "2023-01-01T00:00:00Z");
    api.put_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    let mut probe = ClassProbe::install(&api);
    let controller = RunningController::start(&api, settings(Duration::from_secs(600)));
    leading(&controller).await;

    // Claims appearing while defaults exist (as if the admission plugin were off).
    claim(&api, "default", "a", json!({}), json!({}));
    assert!(
        eventually(Duration::from_secs(15), || class_of(&api, "default", "a")
            .as_deref()
            == Some("newer"))
        .await
    );

    // A namespace default set later applies to its classless claims at once.
    class(&api, "older", false, "2024-01-01T00:00:00Z");
    class(&api, "newer", false, "2024-06-01T00:00:00Z");
    // Separate watches: the controller has seen that no class is the default before the
    // claim appears.
    assert!(
        eventually(Duration::from_secs(15), || view_default_is(
            &controller,
            None
        ))
        .await
    );
    claim(&api, "team", "b", json!({}), json!({}));
    // The controller has handled the claim's arrival.
    probe.looked().await;
    assert_eq!(class_of(&api, "team", "b"), None, "no default anywhere");
    api.put_object(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team",
        "annotations": {"stateful-admission.io/default-storage-class": "team-class"}}}),
    );
    assert!(
        eventually(Duration::from_secs(15), || class_of(&api, "team", "b")
            .as_deref()
            == Some("team-class"))
        .await
    );

    // An opted-out namespace is left alone.
    api.put_object(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "off",
        "labels": {"stateful-admission.io/ignore": "true"}}}),
    );
    claim(&api, "off", "c", json!({}), json!({}));
    class(&api, "older", true, "2024-01-01T00:00:00Z");
    // Handled both the claim and the new default.
    assert!(
        eventually(Duration::from_secs(15), || view_default_is(
            &controller,
            Some("older")
        ))
        .await
    );
    probe.looked().await;
    assert_eq!(
        class_of(&api, "off", "c"),
        None,
        "the opted-out namespace's claim keeps no class"
    );
    attempts_are(&controller, 2 + probe.sent() as u64).await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_bound_meanwhile_is_left_alone() {
    let api = FakeApiServer::start().await;
    let names: Vec<String> = (0..20).map(|n| format!("race-{n}")).collect();
    for name in &names {
        claim(&api, "default", name, json!({}), json!({}));
    }
    let mut probe = ClassProbe::install(&api);
    let controller = RunningController::start(&api, settings(Duration::from_secs(600)));
    leading(&controller).await;
    // Bound (and pre-bound) at the moment the default appears: whichever the controller
    // sees first, the claims must keep no class — either they are no longer candidates,
    // or the patch carries a stale resourceVersion and is refused.
    for name in &names {
        claim(
            &api,
            "default",
            name,
            json!({"volumeName": format!("pv-{name}")}),
            json!({}),
        );
        let mut bound = api
            .get_object(&PERSISTENT_VOLUME_CLAIMS, "default", name)
            .unwrap_or_default();
        bound["status"] = json!({"phase": "Bound"});
        api.put_object(bound);
    }
    class(&api, "gold", true, "2024-01-01T00:00:00Z");
    // The controller has handled every claim's binding and the new default.
    assert!(
        eventually(Duration::from_secs(15), || view_default_is(
            &controller,
            Some("gold")
        ))
        .await
    );
    probe.looked().await;
    for name in &names {
        assert_eq!(
            class_of(&api, "default", name),
            None,
            "{name} keeps no class"
        );
    }
    let patches = claim_patches(&api);
    assert!(
        patches.iter().all(|(_, code)| *code == 409),
        "only refused patches: {patches:?}"
    );
    println!(
        "{} of {} racing claims were patched with a stale version and refused",
        patches.len(),
        names.len()
    );
    assert!(events(&api, "DefaultStorageClassAssigned").is_empty());
    controller.stop().await;
}

/// An apiserver that refuses to give a class-less claim a class (KEP-3333's gate off or
/// absent): the first refusal is reported once on the claim and teaches the controller, which
/// sends no more such patches, for this claim or others, until the apiserver's version changes.
#[tokio::test(flavor = "multi_thread")]
async fn an_old_apiserver_rejection_is_reported_once_per_claim() {
    let api = FakeApiServer::start().await;
    api.configure(|c| {
        c.retroactive_default_class_allowed = false;
        c.git_version = "v1.24.17".to_owned();
    });
    claim(&api, "default", "data", json!({}), json!({}));
    let mut probe = ClassProbe::install(&api);
    // A short resync: the rejected claim is looked at many times.
    let controller = RunningController::start_with(
        &api,
        settings(Duration::from_millis(200)),
        stateful_admission::capabilities::run::Settings {
            version_check: Duration::from_millis(200),
            ..crate::support::controller::prober()
        },
    );
    leading(&controller).await;
    class(&api, "gold", true, "2024-01-01T00:00:00Z");
    // The refusal is learned either by the capability probe's dry run on this very claim or
    // by the controller's first patch, whichever comes first; never more than one patch.
    assert!(
        eventually(Duration::from_secs(15), || !events(
            &api,
            "DefaultStorageClassRejected"
        )
        .is_empty())
        .await
    );
    // Several resyncs (200 ms) come due, and the controller looks after them (a probe claim,
    // once the refusal is known, is told without a patch).
    tokio::time::sleep(Duration::from_secs(1)).await;
    probe.looked().await;
    let patches = claim_patches(&api);
    assert!(
        patches.len() <= 1 && patches.iter().all(|(_, code)| *code == 422),
        "at most one attempt per claim version, whatever the resyncs: {patches:?}"
    );
    // One failed assignment per claim, whether the patch was sent and refused or the probe
    // predicted the refusal and nothing was sent: counted once, as an attempt and an error
    // (the barrier's own class-less claims are refused and counted alike).
    let refused = Some(1 + probe.sent() as u64);
    assert_eq!(
        metric(&controller, "retroactive_storageclass_total"),
        refused
    );
    assert_eq!(
        metric(&controller, "retroactive_storageclass_errors_total"),
        refused
    );
    let rejected = events(&api, "DefaultStorageClassRejected");
    assert_eq!(rejected.len(), 1);
    let note = rejected[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("spec is immutable after creation") && note.contains("before 1.25"),
        "{note}"
    );
    assert!(rejected[0].series.is_none(), "not repeated");
    let metrics = controller.metrics();
    assert!(
        metrics.contains(r#"capability{capability="retroactive-default-class",value="refused""#),
        "{metrics}"
    );

    // A change to the claim, and another class-less claim: the apiserver is known to refuse,
    // so nothing is sent; the new claim is told once why it keeps no class.
    claim(
        &api,
        "default",
        "data",
        json!({}),
        json!({"labels": {"edited": "yes"}}),
    );
    claim(&api, "default", "logs", json!({}), json!({}));
    assert!(
        eventually(Duration::from_secs(15), || events(
            &api,
            "DefaultStorageClassRejected"
        )
        .len()
            == 2)
        .await
    );
    probe.looked().await;
    assert_eq!(
        claim_patches(&api),
        patches,
        "no patch the apiserver refuses"
    );
    // The new claim's predicted refusal counted; the edited one's not again.
    let refused = Some(2 + probe.sent() as u64);
    assert_eq!(
        metric(&controller, "retroactive_storageclass_total"),
        refused
    );
    assert_eq!(
        metric(&controller, "retroactive_storageclass_errors_total"),
        refused
    );
    let logs = events(&api, "DefaultStorageClassRejected")
        .into_iter()
        .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("logs"))
        .expect("the new claim is told");
    let note = logs.note.unwrap_or_default();
    assert!(
        note.contains("the apiserver refuses to give a class-less claim a class (")
            && note.contains("claim default/data"),
        "{note}"
    );

    // An upgrade (a new /version) learns it again: the next change gets the class.
    api.configure(|c| {
        c.retroactive_default_class_allowed = true;
        c.git_version = "v1.28.3".to_owned();
    });
    // The prober has noticed the new version and no longer holds the refusal.
    assert!(
        eventually(Duration::from_secs(15), || !controller
            .metrics()
            .lines()
            .any(|l| l.contains(
                r#"capability{capability="retroactive-default-class",value="refused""#
            ) && l.ends_with(" 1")))
        .await,
        "{}",
        controller.metrics()
    );
    claim(
        &api,
        "default",
        "data",
        json!({}),
        json!({"labels": {"edited": "again"}}),
    );
    assert!(
        eventually(Duration::from_secs(15), || class_of(
            &api, "default", "data"
        )
        .as_deref()
            == Some("gold"))
        .await
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_request_is_retried_and_counted() {
    let api = FakeApiServer::start().await;
    claim(&api, "default", "data", json!({}), json!({}));
    let mut probe = ClassProbe::install(&api);
    let controller = RunningController::start(&api, settings(Duration::from_secs(600)));
    leading(&controller).await;
    api.fail_next("PATCH", "persistentvolumeclaims/data", 500, 1);
    class(&api, "gold", true, "2024-01-01T00:00:00Z");
    assert!(
        eventually(Duration::from_secs(10), || class_of(
            &api, "default", "data"
        )
        .as_deref()
            == Some("gold"))
        .await,
        "retried after the failure, well before the resync"
    );
    // The claim shows the class as soon as the apiserver stored it; the controller counts the
    // attempt when the answer reaches it, a moment later.
    assert!(
        eventually(Duration::from_secs(10), || metric(
            &controller,
            "retroactive_storageclass_total"
        ) == Some(2))
        .await,
        "two attempts: {:?}",
        metric(&controller, "retroactive_storageclass_total")
    );
    assert_eq!(
        metric(&controller, "retroactive_storageclass_errors_total"),
        Some(1)
    );
    // And no third: the assignment is not repeated once the view shows it (the view has it,
    // and the controller looked since).
    assert!(
        eventually(Duration::from_secs(15), || controller
            .view()
            .claim("default", "data")
            .and_then(|c| c.spec.as_ref()?.storage_class_name.clone())
            .is_some())
        .await
    );
    probe.looked().await;
    attempts_are(&controller, 2 + probe.sent() as u64).await;
    controller.stop().await;
}
