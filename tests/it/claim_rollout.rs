//! Claim rollout and convergence (KEP-4650) end to end: the real controller against the fake
//! API server, with a simulated volume resizer (tests complete expansions by writing claim
//! status) and crashes injected between convergence steps.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use serde_json::{Value, json};
use stateful_admission::admission::statefulset::templates::desired_annotation;
use stateful_admission::controller::{ControllerConfig, Features};
use stateful_admission::names;

use crate::support::barrier::{Objects, Peak};
use crate::support::controller::{
    CONTROLLER_NAMESPACE, RunningController, config, eventually, no_features,
};
use crate::support::fake_apiserver::{FakeApiServer, RecordedRequest, ResourceType, WatchSelector};

pub(crate) const NS: &str = "db";
pub(crate) const JOURNAL: &str = "sa-journal.db.web";

pub(crate) fn features(converge: bool) -> Features {
    Features {
        claim_rollout: true,
        converge,
        ..no_features()
    }
}

pub(crate) fn fast(identity: &str, features: Features) -> ControllerConfig {
    ControllerConfig {
        converge_poll: Duration::from_millis(100),
        resync: Duration::from_secs(1),
        ..config(identity, features)
    }
}

fn template(storage: &str, class: &str) -> Value {
    json!({"metadata": {"name": "data"},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                    "resources": {"requests": {"storage": storage}}}})
}

/// A set as Helm would install it, with `extra` annotations (policy, budget) and the desired
/// templates recorded as the webhook records them.
pub(crate) fn set(
    name: &str,
    replicas: u32,
    class: &str,
    desired: Option<&str>,
    extra: &[(&str, &str)],
) -> Value {
    let mut annotations: BTreeMap<String, String> = BTreeMap::from([
        ("meta.helm.sh/release-name".into(), name.into()),
        ("meta.helm.sh/release-namespace".into(), NS.into()),
        (
            "argocd.argoproj.io/tracking-id".into(),
            format!("apps:apps/StatefulSet:{NS}/{name}"),
        ),
    ]);
    for (k, v) in extra {
        annotations.insert((*k).into(), (*v).into());
    }
    if let Some(size) = desired {
        annotations.insert(
            names::DESIRED_VOLUME_CLAIM_TEMPLATES.into(),
            desired_annotation(&[template(size, class)]).expect("annotation"),
        );
    }
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "web-1.2.0"},
                     "annotations": annotations},
        "spec": {"replicas": replicas, "serviceName": name,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
                 "volumeClaimTemplates": [template("1Gi", class)]},
    })
}

fn claim(set: &str, ordinal: u32, class: &str, size: &str, modes: &[&str]) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": format!("data-{set}-{ordinal}"), "namespace": NS,
                        "labels": {"app": set, "owner": "me"}},
           "spec": {"accessModes": modes, "storageClassName": class,
                    "resources": {"requests": {"storage": size}}, "volumeName": format!("pv-{set}-{ordinal}")},
           "status": {"phase": "Bound", "capacity": {"storage": size}}})
}

fn pod(set_uid: &str, set: &str, ordinal: u32) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": format!("{set}-{ordinal}"), "namespace": NS,
                        "labels": {"app": set, names::POD_NAME_LABEL: format!("{set}-{ordinal}"),
                                   "controller-revision-hash": format!("{set}-rev1")},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": set,
                                             "uid": set_uid, "controller": true}]},
           "spec": {"containers": [{"name": "c", "image": "nginx"}]},
           "status": {"phase": "Running"}})
}

pub(crate) fn class(name: &str, expandable: bool) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
           "provisioner": "csi.example.com", "allowVolumeExpansion": expandable})
}

/// A set, its pods and claims; returns the set's uid.
pub(crate) fn install(api: &FakeApiServer, set_json: Value, replicas: u32, class: &str) -> String {
    let stored = api.put_object(set_json);
    let name = stored["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let uid = stored["metadata"]["uid"].as_str().expect("uid").to_owned();
    for n in 0..replicas {
        api.put_object(claim(&name, n, class, "1Gi", &["ReadWriteOnce"]));
        api.put_object(pod(&uid, &name, n));
    }
    uid
}

pub(crate) fn storage(c: &PersistentVolumeClaim) -> (String, String) {
    let spec = c
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    let cap = c
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    (spec, cap)
}

/// Whether a claim asks for another size than it has.
fn claim_updating(claim: &Value) -> bool {
    claim["spec"]["resources"]["requests"]["storage"] != claim["status"]["capacity"]["storage"]
}

/// How many claims of `set` are updating among `claims`.
fn updating_in(claims: &Objects, set: &str) -> usize {
    claims
        .iter()
        .filter(|(name, c)| name.starts_with(&format!("data-{set}-")) && claim_updating(c))
        .count()
}

pub(crate) fn updating(api: &FakeApiServer, set: &str) -> Vec<String> {
    api.list::<PersistentVolumeClaim>()
        .into_iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("data-{set}-")))
        })
        .filter(|c| {
            let (spec, cap) = storage(c);
            spec != cap
        })
        .filter_map(|c| c.metadata.name)
        .collect()
}

/// The simulated resizer: the volume reaches the requested size.
pub(crate) fn complete_expansion(api: &FakeApiServer, name: &str) {
    let mut c = api
        .get_object(
            crate::support::fake_apiserver::ResourceType::of::<PersistentVolumeClaim>(),
            NS,
            name,
        )
        .expect("claim");
    let spec = c["spec"]["resources"]["requests"]["storage"].clone();
    c["status"]["capacity"]["storage"] = spec;
    api.put_object(c);
}

/// Claim patches that could change a claim (not the capability probes' dry runs).
fn claim_patches(writes: &[RecordedRequest]) -> Vec<String> {
    writes
        .iter()
        .filter(|w| w.method == "PATCH" && w.path.contains("/persistentvolumeclaims/"))
        .filter(|w| !w.is_dry_run())
        .filter_map(|w| w.path.rsplit('/').next().map(str::to_owned))
        .collect()
}

fn events(api: &FakeApiServer, reason: &str) -> Vec<Event> {
    api.list::<Event>()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

fn regarding(e: &Event) -> (String, String) {
    let r = e.regarding.as_ref().expect("regarding");
    (
        r.kind.clone().unwrap_or_default(),
        r.name.clone().unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_size_increase_rolls_out_highest_ordinal_first_within_a_budget_of_two() {
    let started = Instant::now();
    let api = FakeApiServer::start().await;
    api.put_object(class("fast", true));
    install(
        &api,
        set(
            "web",
            5,
            "fast",
            Some("2Gi"),
            &[
                (names::VOLUME_CLAIM_UPDATE_POLICY, "InPlace"),
                (names::MAX_UNAVAILABLE, "2"),
            ],
        ),
        5,
        "fast",
    );
    // Every state the claims went through: never more than two expanding at once.
    let peak = Peak::track(
        &api,
        ResourceType::of::<PersistentVolumeClaim>(),
        NS,
        |claims| updating_in(claims, "web"),
    );

    let controller = RunningController::start(&api, fast("a", features(true)));
    let mut completed = Vec::new();
    for round in 0..5 {
        // Wait for the controller to use its budget (two at first, then one slot per completion).
        let want = (5 - round).min(2);
        assert!(
            eventually(Duration::from_secs(10), || updating(&api, "web").len()
                == want)
            .await,
            "round {round}: expected {want} updating, got {:?}",
            updating(&api, "web")
        );
        // An over-eager controller would exceed the budget in a reconcile that sees this.
        controller.settle().await;
        let mut now = updating(&api, "web");
        assert_eq!(now.len(), want, "round {round}: {now:?}");
        now.sort();
        // Highest ordinal first: the claims updating are always the highest not yet done.
        let expected: Vec<String> = (0..5u32)
            .rev()
            .skip(round)
            .take(want)
            .map(|n| format!("data-web-{n}"))
            .collect();
        let mut expected_sorted = expected.clone();
        expected_sorted.sort();
        assert_eq!(now, expected_sorted, "round {round}");
        complete_expansion(&api, &expected[0]);
        completed.push(expected[0].clone());
    }
    assert!(
        eventually(Duration::from_secs(10), || {
            api.get::<StatefulSet>(NS, "web")
                .and_then(|s| s.metadata.annotations)
                .and_then(|a| a.get(names::VOLUME_CLAIM_STATUS).cloned())
                .as_deref()
                == Some(r#"[{"name":"data","compatible":5,"updating":0,"overSized":0,"totalCapacity":"10Gi"}]"#)
        })
        .await,
        "final status: {:?}",
        api.get::<StatefulSet>(NS, "web").and_then(|s| s.metadata.annotations)
    );
    assert_eq!(
        peak.get(),
        2,
        "at most two claims updating, and the budget was used"
    );
    let patches = claim_patches(&api.writes());
    assert_eq!(
        patches,
        [
            "data-web-4",
            "data-web-3",
            "data-web-2",
            "data-web-1",
            "data-web-0"
        ],
        "one patch per claim, in order"
    );
    for n in 0..5 {
        let c = api
            .get::<PersistentVolumeClaim>(NS, &format!("data-web-{n}"))
            .expect("claim");
        assert_eq!(storage(&c), ("2Gi".into(), "2Gi".into()));
        assert_eq!(
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("owner"))
                .map(String::as_str),
            Some("me"),
            "user labels kept"
        );
    }
    // Convergence ran alongside: the set carries the templates, the annotation is gone.
    let live = api.get::<StatefulSet>(NS, "web").expect("set");
    assert!(
        !live
            .metadata
            .annotations
            .as_ref()
            .expect("annotations")
            .contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES)
    );
    assert_eq!(
        live.spec
            .volume_claim_templates
            .as_ref()
            .and_then(|t| t[0].spec.as_ref())
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.as_str()),
        Some("2Gi")
    );
    assert_eq!(
        events(&api, "VolumeClaimPatched").len(),
        10,
        "one event on the claim and one on the set per patch"
    );
    // Published after the status write that the loop above saw.
    assert!(
        eventually(Duration::from_secs(5), || !events(
            &api,
            "VolumeClaimRolloutComplete"
        )
        .is_empty())
        .await
    );
    let metrics = controller.metrics();
    assert!(metrics.contains("claims_patched_total 5"), "{metrics}");
    assert!(
        metrics.contains("claim_rollouts_in_progress 0"),
        "{metrics}"
    );
    assert!(metrics.contains("claim_patch_errors_total 0"), "{metrics}");
    controller.stop().await;
    eprintln!(
        "rollout of 5 claims with budget 2 took {:?}; writes: {}",
        started.elapsed(),
        api.writes().len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn incompatible_claims_are_left_alone_with_a_warning_on_set_and_claim() {
    let api = FakeApiServer::start().await;
    api.put_object(class("fast", true));
    api.put_object(class("fixed", false));
    let policy = [
        (names::VOLUME_CLAIM_UPDATE_POLICY, "InPlace"),
        (names::MAX_UNAVAILABLE, "3"),
    ];
    install(&api, set("web", 3, "fast", Some("2Gi"), &policy), 3, "fast");
    // Another access mode than the template: immutable, never compatible in place.
    api.put_object(claim("web", 1, "fast", "1Gi", &["ReadWriteMany"]));
    install(
        &api,
        set("cold", 1, "fixed", Some("2Gi"), &policy),
        1,
        "fixed",
    );

    let controller = RunningController::start(&api, fast("a", features(false)));
    assert!(
        eventually(Duration::from_secs(10), || events(
            &api,
            "VolumeClaimIncompatible"
        )
        .len()
            >= 4)
        .await,
        "events: {:?}",
        api.list::<Event>()
            .iter()
            .map(|e| (e.reason.clone(), e.note.clone()))
            .collect::<Vec<_>>()
    );
    let incompatible = events(&api, "VolumeClaimIncompatible");
    let mut about: Vec<(String, String)> = incompatible.iter().map(regarding).collect();
    about.sort();
    assert_eq!(
        about,
        [
            ("PersistentVolumeClaim".to_owned(), "data-cold-0".to_owned()),
            ("PersistentVolumeClaim".to_owned(), "data-web-1".to_owned()),
            ("StatefulSet".to_owned(), "cold".to_owned()),
            ("StatefulSet".to_owned(), "web".to_owned()),
        ]
    );
    let note = |name: &str| {
        incompatible
            .iter()
            .find(|e| regarding(e).1 == name)
            .and_then(|e| e.note.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        note("data-web-1"),
        "claim data-web-1 cannot follow volume claim template \"data\" in place: its accessModes differ from the template; delete the claim and its pod to re-create it from the template"
    );
    assert_eq!(
        note("data-cold-0"),
        "claim data-cold-0 cannot follow volume claim template \"data\" in place: it needs 2Gi but its StorageClass \"fixed\" does not allow volume expansion; delete the claim and its pod to re-create it from the template"
    );
    // The compatible claims of web are patched (budget 3, one unit taken by the blocked claim).
    assert!(
        eventually(Duration::from_secs(15), || claim_patches(&api.writes())
            .len()
            == 2)
        .await,
        "{:?}",
        api.writes()
            .iter()
            .filter(|w| w.path.contains("persistentvolumeclaims"))
            .map(|w| (w.method.clone(), w.path.clone(), w.code, w.body.clone()))
            .collect::<Vec<_>>()
    );
    let mut patched = claim_patches(&api.writes());
    patched.sort();
    assert_eq!(
        patched,
        ["data-web-0", "data-web-2"],
        "incompatible claims are never patched"
    );
    // Reported once, not on every resync; and each claim patched exactly once, even while the
    // cache lags behind our own writes: two rounds of both sets' reconciles (resync 1 s) since.
    let mark = controller.mark();
    controller.reconciled_after_n(mark, 4).await;
    let incompatible = events(&api, "VolumeClaimIncompatible");
    assert_eq!(incompatible.len(), 4);
    assert!(
        incompatible.iter().all(|e| e.series.is_none()),
        "not repeated: {incompatible:?}"
    );
    assert_eq!(claim_patches(&api.writes()).len(), 2, "one patch per claim");
    let status = api
        .get::<StatefulSet>(NS, "cold")
        .and_then(|s| s.metadata.annotations)
        .and_then(|a| a.get(names::VOLUME_CLAIM_STATUS).cloned());
    assert_eq!(
        status.as_deref(),
        Some(
            r#"[{"name":"data","compatible":0,"updating":0,"overSized":0,"totalCapacity":"1Gi","awaiting":1,"incompatible":1}]"#
        ),
        "the status says the claim cannot follow (what a GitOps health check reads)"
    );
    let metrics = controller.metrics();
    assert!(
        metrics.contains(r#"claims_incompatible{namespace="db",statefulset="web"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"claims_incompatible{namespace="db",statefulset="cold"} 1"#),
        "{metrics}"
    );
    controller.stop().await;
}

/// Where a crash is injected: the request that fails (so the controller stops right after
/// the previous step) and how to tell it got there.
struct Crash {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    reached: fn(&FakeApiServer, &str) -> bool,
}

pub(crate) fn journal_step(api: &FakeApiServer) -> Option<String> {
    api.get::<ConfigMap>(CONTROLLER_NAMESPACE, JOURNAL)
        .and_then(|j| j.metadata.annotations)
        .and_then(|a| a.get(names::JOURNAL_STEP).cloned())
}

pub(crate) fn set_uid(api: &FakeApiServer, name: &str) -> Option<String> {
    api.get::<StatefulSet>(NS, name)
        .and_then(|s| s.metadata.uid)
}

pub(crate) fn converged(api: &FakeApiServer) -> bool {
    api.get::<ConfigMap>(CONTROLLER_NAMESPACE, JOURNAL)
        .is_none()
        && api.get::<StatefulSet>(NS, "web").is_some_and(|s| {
            !s.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES))
                && serde_json::to_value(&s.spec.volume_claim_templates)
                    .ok()
                    .and_then(|t| t.pointer("/0/spec/resources/requests/storage").cloned())
                    == Some(json!("2Gi"))
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_each_convergence_step_resumes_from_the_journal_and_loses_nothing() {
    let crashes = [
        Crash {
            name: "journal written",
            method: "PATCH",
            path: "/configmaps/sa-journal.db.web",
            reached: |api, _| journal_step(api).as_deref() == Some("journaled"),
        },
        Crash {
            name: "journal marked",
            method: "DELETE",
            path: "/statefulsets/web",
            reached: |api, _| journal_step(api).as_deref() == Some("deleting"),
        },
        Crash {
            name: "set deleted",
            method: "POST",
            path: "/namespaces/db/statefulsets",
            reached: |api, _| journal_step(api).is_some() && set_uid(api, "web").is_none(),
        },
        Crash {
            name: "set created",
            method: "DELETE",
            path: "/configmaps/sa-journal.db.web",
            reached: |api, old| {
                journal_step(api).is_some() && set_uid(api, "web").is_some_and(|u| u != old)
            },
        },
    ];
    for crash in crashes {
        let started = Instant::now();
        let api = FakeApiServer::start().await;
        api.put_object(class("fast", true));
        let uid = install(&api, set("web", 3, "fast", Some("2Gi"), &[]), 3, "fast");
        let pods_before: Vec<(Option<String>, Option<String>)> = api
            .list::<Pod>()
            .into_iter()
            .map(|p| (p.metadata.name, p.metadata.uid))
            .collect();
        let claims_before: Vec<Value> = (0..3)
            .map(|n| {
                serde_json::to_value(api.get::<PersistentVolumeClaim>(NS, &format!("data-web-{n}")))
                    .expect("json")
            })
            .collect();

        api.fail_next(crash.method, crash.path, 500, 10_000);
        let first = RunningController::start(&api, fast("first", features(true)));
        assert!(
            eventually(Duration::from_secs(10), || (crash.reached)(&api, &uid)).await,
            "{}: the controller did not get there (step {:?}, set {:?})",
            crash.name,
            journal_step(&api),
            set_uid(&api, "web")
        );
        // The failing step retried at least once (its first attempt and another answered 500),
        // then the crash.
        let attempts = |api: &FakeApiServer| {
            api.requests()
                .iter()
                .filter(|r| {
                    r.method == crash.method
                        && r.path.ends_with(crash.path)
                        && r.code == 500
                        && !r.is_dry_run()
                })
                .count()
        };
        assert!(
            eventually(Duration::from_secs(30), || attempts(&api) >= 2).await,
            "{}: the failing step was not retried ({} attempts)",
            crash.name,
            attempts(&api)
        );
        first.kill();
        api.clear_faults();
        assert!(
            !converged(&api),
            "{}: converged before the restart",
            crash.name
        );

        let second = RunningController::start(&api, fast("second", features(true)));
        assert!(
            eventually(Duration::from_secs(15), || converged(&api)).await,
            "{}: not converged after the restart (step {:?})",
            crash.name,
            journal_step(&api)
        );
        let live = api.get::<StatefulSet>(NS, "web").expect("set");
        assert_ne!(
            live.metadata.uid.as_deref(),
            Some(uid.as_str()),
            "{}: re-created",
            crash.name
        );
        let labels = live.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("Helm"),
            "{}",
            crash.name
        );
        assert_eq!(
            labels.get("helm.sh/chart").map(String::as_str),
            Some("web-1.2.0")
        );
        let annotations = live.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get("meta.helm.sh/release-name")
                .map(String::as_str),
            Some("web")
        );
        assert!(annotations.contains_key("argocd.argoproj.io/tracking-id"));
        let pods_after: Vec<(Option<String>, Option<String>)> = api
            .list::<Pod>()
            .into_iter()
            .map(|p| (p.metadata.name, p.metadata.uid))
            .collect();
        assert_eq!(pods_after, pods_before, "{}: pods kept", crash.name);
        for (n, before) in claims_before.iter().enumerate() {
            let after = serde_json::to_value(
                api.get::<PersistentVolumeClaim>(NS, &format!("data-web-{n}")),
            )
            .expect("json");
            assert_eq!(
                &after, before,
                "{}: claims untouched (policy OnDelete)",
                crash.name
            );
        }
        let writes = api.writes();
        assert!(
            !writes.iter().any(|w| w.method == "DELETE"
                && (w.path.contains("/pods/") || w.path.contains("/persistentvolumeclaims/"))),
            "{}: no pod or claim deleted",
            crash.name
        );
        let deletes: Vec<&RecordedRequest> = writes
            .iter()
            .filter(|w| {
                w.method == "DELETE" && w.path.ends_with("/statefulsets/web") && w.code < 300
            })
            .collect();
        assert_eq!(deletes.len(), 1, "{}: one successful delete", crash.name);
        assert_eq!(deletes[0].propagation_policy().as_deref(), Some("Orphan"));
        let body = deletes[0].body.clone().unwrap_or_default();
        assert_eq!(
            body.pointer("/preconditions/uid"),
            Some(&json!(uid)),
            "{}",
            crash.name
        );
        assert!(body.pointer("/preconditions/resourceVersion").is_some());
        let creates = writes
            .iter()
            .filter(|w| {
                w.method == "POST"
                    && w.path.ends_with("/namespaces/db/statefulsets")
                    && w.code < 300
            })
            .count();
        assert_eq!(creates, 1, "{}: created once", crash.name);
        second.stop().await;
        eprintln!(
            "crash after '{}': converged in {:?} with {} writes",
            crash.name,
            started.elapsed(),
            writes.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_edit_during_convergence_is_not_overwritten() {
    let api = FakeApiServer::start().await;
    api.put_object(class("fast", true));
    let uid = install(&api, set("web", 2, "fast", Some("2Gi"), &[]), 2, "fast");
    api.fail_next("PATCH", "/configmaps/sa-journal.db.web", 500, 10_000);
    let controller = RunningController::start(&api, fast("a", features(true)));
    assert!(
        eventually(Duration::from_secs(10), || journal_step(&api).as_deref()
            == Some("journaled"))
        .await
    );
    // The user edits the set while the journal (from the old version) is open.
    let mut edited = api
        .get_object(
            crate::support::fake_apiserver::ResourceType::of::<StatefulSet>(),
            NS,
            "web",
        )
        .expect("set");
    edited["metadata"]["labels"]["team"] = json!("blue");
    edited["spec"]["replicas"] = json!(4);
    api.put_object(edited);
    api.clear_faults();
    assert!(
        eventually(Duration::from_secs(15), || converged(&api)).await,
        "step {:?}",
        journal_step(&api)
    );
    let live = api.get::<StatefulSet>(NS, "web").expect("set");
    assert_ne!(live.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(
        live.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("team"))
            .map(String::as_str),
        Some("blue"),
        "the edit survived"
    );
    assert_eq!(live.spec.replicas, Some(4));
    assert_eq!(events(&api, "ConvergeAbandoned").len(), 1);
    let journals = api
        .writes()
        .iter()
        .filter(|w| w.method == "POST" && w.path.ends_with("/configmaps") && w.code < 300)
        .count();
    assert_eq!(
        journals, 2,
        "the stale journal was dropped and a new one written from the edited set"
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_set_deleted_by_its_user_before_our_delete_is_not_recreated() {
    let api = FakeApiServer::start().await;
    api.put_object(class("fast", true));
    install(&api, set("web", 1, "fast", Some("2Gi"), &[]), 1, "fast");
    api.fail_next("PATCH", "/configmaps/sa-journal.db.web", 500, 10_000);
    let controller = RunningController::start(&api, fast("a", features(true)));
    assert!(
        eventually(Duration::from_secs(10), || journal_step(&api).as_deref()
            == Some("journaled"))
        .await
    );
    api.remove::<StatefulSet>(NS, "web");
    api.clear_faults();
    assert!(
        eventually(Duration::from_secs(10), || api
            .get::<ConfigMap>(CONTROLLER_NAMESPACE, JOURNAL)
            .is_none())
        .await
    );
    // Published once the journal is dropped, the convergence's last step: a re-create would
    // have come before it.
    assert!(
        eventually(Duration::from_secs(10), || events(
            &api,
            "ConvergeAbandoned"
        )
        .len()
            == 1)
        .await
    );
    assert!(
        !api.writes().iter().any(|w| w.method == "POST"
            && w.path.ends_with("/namespaces/db/statefulsets")
            && !w.is_dry_run()),
        "never re-created"
    );
    assert!(
        api.get::<StatefulSet>(NS, "web").is_none(),
        "the user's delete stands: {:?}",
        api.writes()
            .iter()
            .filter(|w| !w.path.contains("/leases/"))
            .map(|w| (
                w.method.clone(),
                w.path.clone(),
                w.code,
                w.body
                    .as_ref()
                    .and_then(|b| b.pointer("/metadata/annotations"))
                    .cloned()
            ))
            .collect::<Vec<_>>()
    );
    assert_eq!(api.list::<Pod>().len(), 1, "pods are left alone");
    controller.stop().await;
}

/// A namespace deleted while its set is being converged takes the set with it: the journal
/// goes too (nothing can be created there again) and the set is not re-created.
#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_deleted_mid_convergence_ends_it_without_a_recreate() {
    let api = FakeApiServer::start().await;
    api.put_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    api.put_object(class("fast", true));
    install(&api, set("web", 1, "fast", Some("2Gi"), &[]), 1, "fast");
    api.fail_next("DELETE", "/statefulsets/web", 500, 10_000);
    let controller = RunningController::start(&api, fast("a", features(true)));
    assert!(
        eventually(Duration::from_secs(10), || journal_step(&api).as_deref()
            == Some("deleting"))
        .await
    );
    // The namespace controller at work: the namespace terminating, its set deleted.
    api.put_object(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["kubernetes"]},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Terminating"}}));
    // Once the view has it, the controller waits for the set to go instead of deleting it.
    assert!(
        eventually(Duration::from_secs(10), || controller
            .view()
            .namespace(NS)
            .is_some_and(|n| n.metadata.deletion_timestamp.is_some()))
        .await
    );
    api.remove::<StatefulSet>(NS, "web");
    api.clear_faults();
    assert!(
        eventually(Duration::from_secs(10), || api
            .get::<ConfigMap>(CONTROLLER_NAMESPACE, JOURNAL)
            .is_none())
        .await,
        "the journal goes with its namespace"
    );
    // Counted once the journal's delete is answered, the convergence's last step: a
    // re-create would have come before it.
    assert!(
        eventually(Duration::from_secs(10), || controller.metrics().contains(
            "statefulset_converge_steps_total{step=\"namespace-gone\"} 1"
        ))
        .await,
        "{}",
        controller.metrics()
    );
    assert!(
        !api.writes().iter().any(|w| w.method == "POST"
            && w.path.ends_with("/namespaces/db/statefulsets")
            && !w.is_dry_run()),
        "never re-created"
    );
    assert!(
        api.get::<StatefulSet>(NS, "web").is_none(),
        "not re-created"
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orphan_delete_that_takes_time_is_waited_for() {
    let api = FakeApiServer::start().await;
    api.configure(|c| c.orphan_deletion_lag = Duration::from_millis(700));
    api.put_object(class("fast", true));
    install(&api, set("web", 2, "fast", Some("2Gi"), &[]), 2, "fast");
    let controller = RunningController::start(&api, fast("a", features(true)));
    assert!(
        eventually(Duration::from_secs(15), || converged(&api)).await,
        "step {:?}",
        journal_step(&api)
    );
    let creates = api
        .writes()
        .iter()
        .filter(|w| w.method == "POST" && w.path.ends_with("/statefulsets") && !w.is_dry_run())
        .count();
    assert_eq!(creates, 1);
    let pods: Vec<Pod> = api.list();
    assert!(
        pods.iter().all(|p| p.metadata.owner_references.is_none()),
        "orphaned, not deleted"
    );
    controller.stop().await;
}

/// Between the orphan delete and the create the set is absent (here the create hangs, as
/// behind a slow admission webhook): its claims keep rolling, planned from the object its
/// journal creates, within the budget and in order, each patched once.
#[tokio::test(flavor = "multi_thread")]
async fn claims_keep_rolling_while_the_set_is_absent_between_its_delete_and_its_create() {
    use crate::fencing::{patched, rollout};
    use crate::support::controller::written_by;
    let api = FakeApiServer::start().await;
    rollout(&api);
    let create = api.hold_next("POST", "/namespaces/db/statefulsets", usize::MAX);
    let controller = RunningController::start(&api, fast("a", features(true)));
    create
        .arrived(1, Duration::from_secs(15))
        .await
        .expect("the convergence got to its create");
    let absent = |api: &FakeApiServer| api.get::<StatefulSet>(NS, "web").is_none();
    assert!(absent(&api), "deleted, not created again");
    assert!(
        patched(&api, 2),
        "the first claim was patched before the delete"
    );
    assert!(!patched(&api, 1), "one at a time");

    complete_expansion(&api, "data-web-2");
    assert!(
        eventually(Duration::from_secs(10), || patched(&api, 1)).await,
        "the claims waited for the set to be created again"
    );
    assert!(absent(&api), "patched while the set is absent");
    assert!(!patched(&api, 0), "within the budget of 1");
    complete_expansion(&api, "data-web-1");
    assert!(eventually(Duration::from_secs(10), || patched(&api, 0)).await);
    assert!(absent(&api), "patched while the set is absent");
    complete_expansion(&api, "data-web-0");

    drop(create);
    assert!(
        eventually(Duration::from_secs(15), || converged(&api)).await,
        "step {:?}",
        journal_step(&api)
    );
    let records = api.write_records();
    for n in 0..3 {
        let name = format!("data-web-{n}");
        let patches = records
            .iter()
            .filter(|r| {
                written_by(r, "a")
                    && r.succeeded()
                    && r.resource
                        .is_some_and(|t| t.plural == "persistentvolumeclaims")
                    && r.name.as_deref() == Some(name.as_str())
            })
            .count();
        assert_eq!(patches, 1, "{name} patched {patches} times");
    }
    // No claim status annotation was sent to the set that was not there.
    let lost: Vec<String> = records
        .iter()
        .filter(|r| {
            r.resource.is_some_and(|t| t.plural == "statefulsets")
                && r.verb.as_str() == "patch"
                && !r.succeeded()
        })
        .map(|r| format!("{:?} {}", r.name, r.code))
        .collect();
    assert!(lost.is_empty(), "{lost:?}");
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_sets_converge_and_then_nothing_is_written() {
    let api = FakeApiServer::start().await;
    api.put_object(class("fast", true));
    for i in 0..200 {
        api.put_object(set(&format!("s{i}"), 1, "fast", Some("2Gi"), &[]));
    }
    let started = Instant::now();
    let controller = RunningController::start(&api, fast("a", features(true)));
    let all_converged = |api: &FakeApiServer| {
        let sets: Vec<StatefulSet> = api.list();
        sets.len() == 200
            && sets.iter().all(|s| {
                !s.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES))
            })
            && api
                .list::<ConfigMap>()
                .iter()
                .all(|c| c.metadata.namespace.as_deref() != Some(CONTROLLER_NAMESPACE))
    };
    // A liveness bound, far above a quiet machine's few seconds: how long it takes is
    // printed below, not asserted.
    assert!(
        eventually(Duration::from_secs(180), || all_converged(&api)).await,
        "not converged: {} sets still carry desired templates, journals {:?}",
        api.list::<StatefulSet>()
            .iter()
            .filter(|s| s
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES)))
            .count(),
        api.list::<ConfigMap>()
            .iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(CONTROLLER_NAMESPACE))
            .filter_map(|c| c.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let took = started.elapsed();
    let is_lease = |w: &RecordedRequest| w.path.contains("/leases/");
    let converge_writes = api.writes().iter().filter(|w| !is_lease(w)).count();
    // Settle (events of the last steps: a round of every set's reconciles), then watch two
    // more rounds (resync 1 s).
    controller.settle().await;
    controller.reconciled_after_n(controller.mark(), 200).await;
    api.clear_requests();
    controller.reconciled_after_n(controller.mark(), 400).await;
    let writes: Vec<(String, String)> = api
        .writes()
        .into_iter()
        .filter(|w| !is_lease(w))
        .map(|w| (w.method, w.path))
        .collect();
    assert!(writes.is_empty(), "writes at steady state: {writes:?}");
    assert!(
        api.requests()
            .iter()
            .any(|r| r.is_watch() || r.method == "GET"),
        "the controller is alive"
    );
    for s in api.list::<StatefulSet>() {
        let a = s.metadata.annotations.unwrap_or_default();
        assert_eq!(a.get("meta.helm.sh/release-name"), s.metadata.name.as_ref());
    }
    controller.stop().await;
    eprintln!(
        "200 sets converged in {took:?} with {converge_writes} writes ({} per set)",
        converge_writes / 200
    );
}

/// The claim watch falls behind the StatefulSet watch (an apiserver's watch cache lagging for
/// one resource). A reconcile triggered by a claim change must read a view at least as new as
/// that change, so every step of an InPlace rollout follows its claim's change without
/// waiting for the resync (an hour here).
#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_completes_without_a_resync_when_the_claim_watch_lags() {
    let api = FakeApiServer::start().await;
    api.put_object(class("fast", true));
    install(
        &api,
        set(
            "web",
            3,
            "fast",
            Some("2Gi"),
            &[(names::VOLUME_CLAIM_UPDATE_POLICY, "InPlace")],
        ),
        3,
        "fast",
    );
    // The first claim watch opened, the view's: the one whose lag made a reconcile plan on
    // an older claim than the change that triggered it.
    api.lag_watches(
        ResourceType::of::<PersistentVolumeClaim>(),
        WatchSelector::Nth(1),
        Duration::from_millis(500),
    );
    let controller = RunningController::start(
        &api,
        ControllerConfig {
            resync: Duration::from_secs(3600),
            ..config("a", features(false))
        },
    );
    for ordinal in (0..3u32).rev() {
        let claim = format!("data-web-{ordinal}");
        assert!(
            eventually(Duration::from_secs(10), || updating(&api, "web")
                == [claim.clone()])
            .await,
            "{claim} was not patched; updating: {:?}",
            updating(&api, "web")
        );
        complete_expansion(&api, &claim);
    }
    assert!(
        eventually(Duration::from_secs(10), || {
            api.get::<StatefulSet>(NS, "web")
                .and_then(|s| s.metadata.annotations)
                .and_then(|a| a.get(names::VOLUME_CLAIM_STATUS).cloned())
                .as_deref()
                == Some(r#"[{"name":"data","compatible":3,"updating":0,"overSized":0,"totalCapacity":"6Gi"}]"#)
        })
        .await,
        "final status: {:?}",
        api.get::<StatefulSet>(NS, "web").and_then(|s| s.metadata.annotations)
    );
    assert_eq!(
        claim_patches(&api.writes()),
        ["data-web-2", "data-web-1", "data-web-0"]
    );
    controller.stop().await;
}

/// Observe mode: with a template change to roll out in place and to converge, a claim to
/// give the default class and conditions to write, every feature plans and says what it
/// would do, and nothing is written but Events and the Lease.
#[tokio::test]
async fn observe_mode_reports_every_planned_write_and_makes_none() {
    let api = FakeApiServer::start().await;
    let mut default = class("fast", true);
    default["metadata"]["annotations"] =
        json!({"storageclass.kubernetes.io/is-default-class": "true"});
    api.put_object(default);
    install(
        &api,
        set(
            "web",
            2,
            "fast",
            Some("2Gi"),
            &[(names::VOLUME_CLAIM_UPDATE_POLICY, "InPlace")],
        ),
        2,
        "fast",
    );
    api.put_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "scratch", "namespace": NS},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}}));
    let controller = RunningController::start(
        &api,
        ControllerConfig {
            mode: stateful_admission::controller::executor::Mode::Observe,
            ..fast(
                "observer",
                Features {
                    claim_rollout: true,
                    converge: true,
                    retroactive_default_class: true,
                    conditions: true,
                    max_unavailable: false,
                },
            )
        },
    );
    let reasons = || {
        api.list::<Event>()
            .into_iter()
            .filter_map(|e| e.reason)
            .collect::<std::collections::BTreeSet<String>>()
    };
    let expected = [
        "WouldPatchClaim",
        "WouldStartConvergence",
        "WouldAssignStorageClass",
        "WouldWriteConditions",
    ];
    assert!(
        eventually(Duration::from_secs(15), || expected
            .iter()
            .all(|r| reasons().contains(*r)))
        .await,
        "events: {:?}",
        reasons()
    );
    // A few more reconciles (resync 1 s, convergence poll 100 ms) change nothing.
    controller.reconciled_after_n(controller.mark(), 3).await;

    let written = api.tally_writes(|w| w.succeeded().then(|| w.target()));
    assert!(
        written
            .keys()
            .all(|t| t == "events.events.k8s.io" || t == "leases.coordination.k8s.io"),
        "{written:?}"
    );
    assert!(
        written.contains_key("leases.coordination.k8s.io"),
        "{written:?}"
    );
    assert!(updating(&api, "web").is_empty());
    assert!(
        api.list::<PersistentVolumeClaim>()
            .iter()
            .all(|c| { c.metadata.name.as_deref() == Some("scratch") || storage(c).0 == "1Gi" })
    );
    let scratch = api
        .get::<PersistentVolumeClaim>(NS, "scratch")
        .expect("claim");
    assert_eq!(scratch.spec.and_then(|s| s.storage_class_name), None);
    assert!(
        api.get::<ConfigMap>(CONTROLLER_NAMESPACE, JOURNAL)
            .is_none()
    );
    let set = api.get::<StatefulSet>(NS, "web").expect("set");
    assert!(set.status.and_then(|s| s.conditions).is_none());
    // Said once per object and planned change, though reconciled many times.
    let would_patch = api
        .list::<Event>()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("WouldPatchClaim"))
        .count();
    assert_eq!(
        would_patch, 1,
        "one claim at a time (highest ordinal first)"
    );
    // Said again, the Event would carry a series (WouldWriteProgress is left out: its planned
    // record carries the time it is planned at, a new change at every reconcile).
    let repeated: Vec<Event> = api
        .list::<Event>()
        .into_iter()
        .filter(|e| e.series.is_some() && e.reason.as_deref() != Some("WouldWriteProgress"))
        .collect();
    assert!(repeated.is_empty(), "said again: {repeated:?}");
    let metrics = controller.metrics();
    for action in [
        "PatchClaim",
        "StartConvergence",
        "AssignStorageClass",
        "WriteConditions",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(&format!(
                "controller_actions_total{{action=\"{action}\",result=\"observed\"}}"
            ))),
            "{action}: {metrics}"
        );
    }
    assert!(!metrics.contains("result=\"done\""), "{metrics}");
    controller.stop().await;
}

/// Where the cluster drops a claim's `volumeAttributesClassName` (the VolumeAttributesClass
/// gate off: 1.29–1.33 by default): a recorded change of size and class rolls the size out
/// within the budget, never patches for the class nor waits for it, records the class as not
/// applied (a change) in the claim status, says it once in an Event; and once the cluster
/// keeps classes (learned again on a `/version` change), the class rolls out too.
#[tokio::test(flavor = "multi_thread")]
async fn a_class_the_cluster_drops_never_stalls_the_rollout_and_rolls_out_once_kept() {
    let api = FakeApiServer::start().await;
    api.configure(|c| {
        c.drop_claim_volume_attributes_class = true;
        c.git_version = "v1.32.0".to_owned();
    });
    api.put_object(class("fast", true));
    let with_class = |mut t: Value, vac: &str| {
        t["spec"]["volumeAttributesClassName"] = json!(vac);
        t
    };
    let mut vo = set(
        "vo",
        2,
        "fast",
        None,
        &[(names::VOLUME_CLAIM_UPDATE_POLICY, "InPlace")],
    );
    vo["spec"]["volumeClaimTemplates"] = json!([with_class(template("1Gi", "fast"), "e2e-fast")]);
    vo["metadata"]["annotations"][names::DESIRED_VOLUME_CLAIM_TEMPLATES] = json!(
        desired_annotation(&[with_class(template("2Gi", "fast"), "e2e-faster")])
            .expect("annotation")
    );
    install(&api, vo, 2, "fast");
    let controller = RunningController::start_with(
        &api,
        fast("a", features(true)),
        stateful_admission::capabilities::run::Settings {
            version_check: Duration::from_millis(200),
            ..crate::support::controller::prober()
        },
    );
    // Both claims grow at once (budget 1 each replica... maxUnavailable defaults to 1: one at
    // a time), never for the class.
    for round in 0..2 {
        assert!(
            eventually(Duration::from_secs(20), || updating(&api, "vo").len() == 1).await,
            "round {round}: {:?}",
            updating(&api, "vo")
        );
        let name = updating(&api, "vo").remove(0);
        complete_expansion(&api, &name);
    }
    let claims: Vec<PersistentVolumeClaim> = api.list();
    assert!(
        claims.iter().all(|c| storage(c).0 == "2Gi"
            && c.spec
                .as_ref()
                .and_then(|s| s.volume_attributes_class_name.as_ref())
                .is_none()),
        "{claims:?}"
    );
    let class_patches = || {
        api.writes()
            .into_iter()
            .filter(|w| {
                w.method == "PATCH"
                    && w.path.contains("/persistentvolumeclaims/")
                    && !w.is_dry_run()
            })
            .filter(|w| {
                w.body
                    .as_ref()
                    .is_some_and(|b| b.pointer("/spec/volumeAttributesClassName").is_some())
            })
            .count()
    };
    assert_eq!(class_patches(), 0, "no patch the apiserver would drop");
    // The live set carries the templates; its claim status says the class is not applied.
    let recorded_class = || {
        api.get::<StatefulSet>(NS, "vo")
            .and_then(|s| s.metadata.annotations)
            .and_then(|a| a.get(names::VOLUME_CLAIM_STATUS).cloned())
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|s| s.pointer("/0/volumeAttributesClass").cloned())
    };
    assert!(
        eventually(Duration::from_secs(20), || recorded_class().is_some_and(
            |c| c["changed"] == json!(true) && c["applied"] == json!(false)
        ))
        .await,
        "{:?} {:?}",
        recorded_class(),
        api.get::<StatefulSet>(NS, "vo")
            .map(|s| s.metadata.annotations)
    );
    let live = api.get::<StatefulSet>(NS, "vo").expect("the set");
    assert!(
        !live
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES)),
        "converged"
    );
    // Looked at again and again since (resync 1 s): still said once.
    controller.reconciled_after_n(controller.mark(), 3).await;
    let said = events(&api, "VolumeAttributesClassNotApplied");
    assert_eq!(said.len(), 1, "one per set: {said:?}");
    assert!(said[0].series.is_none(), "not repeated: {said:?}");
    let note = said[0].note.clone().unwrap_or_default();
    assert!(
        note.starts_with("volumeAttributesClassName \"e2e-faster\" of template \"data\" cannot reach the claims: the cluster drops")
            && note.contains("capability claim-volume-attributes-class: dropped (probe:"),
        "{note}"
    );

    // The gate turned on (an upgrade: a new /version): learned again, and the class rolls out.
    api.configure(|c| {
        c.drop_claim_volume_attributes_class = false;
        c.git_version = "v1.34.1".to_owned();
    });
    // One replica at a time within the budget: the test plays the external modifier that
    // moves status.currentVolumeAttributesClassName once the volume is modified.
    let modifying = || {
        api.list::<PersistentVolumeClaim>()
            .into_iter()
            .filter(|c| {
                c.spec
                    .as_ref()
                    .and_then(|s| s.volume_attributes_class_name.as_deref())
                    == Some("e2e-faster")
                    && c.status
                        .as_ref()
                        .and_then(|s| s.current_volume_attributes_class_name.as_deref())
                        != Some("e2e-faster")
            })
            .filter_map(|c| c.metadata.name)
            .collect::<Vec<_>>()
    };
    for round in 0..2 {
        assert!(
            eventually(Duration::from_secs(20), || modifying().len() == 1).await,
            "round {round}: {:?}\n{}",
            api.list::<PersistentVolumeClaim>(),
            controller.metrics()
        );
        let name = modifying().remove(0);
        let mut c = api
            .get_object(ResourceType::of::<PersistentVolumeClaim>(), NS, &name)
            .expect("claim");
        c["status"]["currentVolumeAttributesClassName"] = json!("e2e-faster");
        api.put_object(c);
    }
    // The request log has a write once it is answered, a moment after the store shows it;
    // and no third since.
    assert!(
        eventually(Duration::from_secs(20), || class_patches() >= 2).await,
        "{} class patches",
        class_patches()
    );
    controller.settle().await;
    assert_eq!(class_patches(), 2, "one class patch per claim");
    // Applied now: the claim status no longer says otherwise.
    assert!(
        eventually(Duration::from_secs(20), || recorded_class().is_none()).await,
        "{:?}",
        recorded_class()
    );
    controller.stop().await;
}
