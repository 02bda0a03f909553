//! The executor every controller write goes through, against the fake API server: the field
//! manager and preconditions of each kind of write, expectations against a lagging watch,
//! the write rate limit, report-once failure Events, and observe mode.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::events::EventType;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use stateful_admission::cluster::watch;
use stateful_admission::controller::action::{Kind, Report, Request, Target, Verb, Write};
use stateful_admission::controller::executor::{ActionMetrics, Executor, Mode, Outcome};
use stateful_admission::write_limit::WriteLimit;

use crate::support::controller::{client, eventually};
use crate::support::fake_apiserver::{
    FakeApiServer, ResourceType, WatchSelector, WriteRecord, resources,
};

fn claim(api: &FakeApiServer, name: &str) -> Value {
    api.put_object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "db"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gold",
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound"},
    }))
}

fn executor(api: &FakeApiServer, mode: Mode) -> (Executor, ActionMetrics) {
    let metrics = ActionMetrics::register(&mut Registry::default());
    (
        Executor::new(client(api), mode, "test", metrics.clone()),
        metrics,
    )
}

/// A patch of claim `object`'s size, planned from its current version.
fn resize(object: &Value, size: &str) -> Write {
    let meta: kube::api::ObjectMeta =
        serde_json::from_value(object["metadata"].clone()).expect("metadata");
    let target = Target::of(Kind::Claim, &meta);
    let body = json!({"metadata": {"resourceVersion": meta.resource_version},
                      "spec": {"resources": {"requests": {"storage": size}}}});
    Write::new(
        Verb::PatchClaim,
        target.clone(),
        Request::Patch(body),
        format!("spec.resources.requests.storage -> {size}"),
    )
    .expect()
    .on_done(Report::normal(
        target.reference(),
        "VolumeClaimPatched",
        "PatchClaim",
        format!("patched to {size}"),
    ))
    .on_failed(
        Report::warning(
            target.reference(),
            "VolumeClaimPatchFailed",
            "PatchClaim",
            "could not patch: {error}".to_owned(),
        )
        .once(format!("patch/{}/", meta.name.unwrap_or_default())),
    )
}

fn to(resource: &'static ResourceType) -> impl Fn(&WriteRecord) -> bool {
    move |r| r.resource.is_some_and(|x| std::ptr::eq(x, resource)) && r.succeeded()
}

fn event_writes(api: &FakeApiServer, reason: &str) -> usize {
    api.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("/events"))
        .filter(|r| {
            r.body
                .as_ref()
                .is_some_and(|b| b["reason"].as_str() == Some(reason))
        })
        .count()
}

#[tokio::test]
async fn every_kind_of_write_carries_the_field_manager_and_its_preconditions() {
    let api = FakeApiServer::start().await;
    let object = claim(&api, "data-web-0");
    api.put_object(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "db"},
        "spec": {"replicas": 1, "serviceName": "web",
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }));
    let set = api
        .get_object(&resources::STATEFULSETS, "db", "web")
        .expect("set");
    let set_uid = set["metadata"]["uid"].as_str().expect("uid").to_owned();
    let (exec, metrics) = executor(&api, Mode::Enforce);

    let outcome = exec.write(&resize(&object, "2Gi")).await.expect("patch");
    assert!(outcome.resource_version().is_some(), "{outcome:?}");
    let status = Write::new(
        Verb::WriteConditions,
        Target::new(Kind::StatefulSet, "db", "web"),
        Request::PatchStatus(
            json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}}),
        ),
        "conditions".into(),
    );
    exec.write(&status).await.expect("status");
    let journal = Write::new(
        Verb::StartConvergence,
        Target::new(Kind::ConfigMap, "stateful-admission", "sa-journal.db.web"),
        Request::Create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "sa-journal.db.web", "namespace": "stateful-admission"}})),
        "journal".into(),
    );
    exec.write(&journal).await.expect("create");
    // A delete whose uid precondition does not hold is refused, and nothing is deleted.
    let delete = |uid: &str| {
        Write::new(
            Verb::DeleteStatefulSet,
            Target::new(Kind::StatefulSet, "db", "web"),
            Request::Delete {
                uid: Some(uid.to_owned()),
                resource_version: None,
                orphan: true,
            },
            "orphan delete".into(),
        )
        .expected(&[409])
    };
    let refused = exec
        .write(&delete("another-uid"))
        .await
        .expect_err("precondition");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 409),
        "{refused:?}"
    );
    assert!(
        api.get_object(&resources::STATEFULSETS, "db", "web")
            .is_some()
    );
    exec.write(&delete(&set_uid)).await.expect("delete");
    assert!(
        api.get_object(&resources::STATEFULSETS, "db", "web")
            .is_none()
    );

    let writes: Vec<WriteRecord> = api
        .write_records()
        .into_iter()
        .filter(|r| {
            r.resource
                .is_some_and(|x| !std::ptr::eq(x, &resources::EVENTS))
        })
        .collect();
    assert_eq!(writes.len(), 5, "{writes:?}");
    for w in writes.iter().filter(|w| w.verb.as_str() != "delete") {
        assert_eq!(
            w.field_manager.as_deref(),
            Some("stateful-admission"),
            "{w:?}"
        );
    }
    let deletes: Vec<Value> = api
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .filter_map(|r| r.body)
        .collect();
    assert_eq!(deletes.len(), 2);
    for d in &deletes {
        assert_eq!(d["propagationPolicy"], "Orphan", "{d}");
    }
    assert_eq!(deletes[1]["preconditions"]["uid"], set_uid.as_str());
    assert_eq!(metrics.get("PatchClaim", "done"), 1);
    assert_eq!(metrics.get("DeleteStatefulSet", "conflict"), 1);
    assert_eq!(metrics.get("DeleteStatefulSet", "done"), 1);
    assert_eq!(event_writes(&api, "VolumeClaimPatched"), 1);
}

#[tokio::test]
async fn no_second_write_while_the_view_lags_behind_ours() {
    let api = FakeApiServer::start().await;
    claim(&api, "data-web-0");
    // The view's claim watch delivers every event 600 ms late.
    api.lag_watches(
        ResourceType::of::<PersistentVolumeClaim>(),
        WatchSelector::Every,
        Duration::from_millis(600),
    );
    let (view, driver) = watch::from_cluster(client(&api), None);
    let driver = tokio::spawn(driver);
    view.wait_synced().await.expect("synced");
    let (exec, _) = executor(&api, Mode::Enforce);
    let key = stateful_admission::controller::action::key(Kind::Claim, "db", "data-web-0");

    // A planner's loop: plan from the view unless our last write is not in it yet.
    let mut written = 0;
    let started = tokio::time::Instant::now();
    while started.elapsed() < Duration::from_millis(400) {
        let seen = view.claim("db", "data-web-0").expect("in the view");
        let version = seen.metadata.resource_version.clone();
        if !exec.is_stale(&key, version.as_deref()) {
            let object = serde_json::to_value(seen.as_ref()).expect("json");
            exec.write(&resize(&object, "2Gi")).await.expect("patch");
            written += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        written, 1,
        "one write while the view showed the old version"
    );
    let patches = api.count_writes(|r| to(&resources::PERSISTENT_VOLUME_CLAIMS)(r));
    assert_eq!(patches, 1);
    // Once the view shows the write, plans are fresh again.
    assert!(
        eventually(Duration::from_secs(5), || {
            let v = view
                .claim("db", "data-web-0")
                .and_then(|c| c.metadata.resource_version.clone());
            !exec.is_stale(&key, v.as_deref())
        })
        .await
    );
    driver.abort();
}

#[tokio::test]
async fn writes_wait_for_the_rate_limit() {
    let api = FakeApiServer::start().await;
    let limit = WriteLimit::new(10.0, 2).expect("limit");
    let mut config = kube::Config::new(api.url().parse().expect("url"));
    config.default_namespace = "default".into();
    let limited =
        stateful_admission::field_manager::client_from(config, Some(&limit)).expect("client");
    let exec = Executor::new(limited, Mode::Enforce, "test", ActionMetrics::default());
    let n = 12;
    let started = std::time::Instant::now();
    for i in 0..n {
        let write = Write::new(
            Verb::StartConvergence,
            Target::new(Kind::ConfigMap, "stateful-admission", &format!("j{i}")),
            Request::Create(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("j{i}"), "namespace": "stateful-admission"}})),
            "journal".into(),
        );
        exec.write(&write).await.expect("create");
    }
    let at: Vec<Duration> = api
        .write_records()
        .into_iter()
        .filter(|r| to(&resources::CONFIG_MAPS)(r))
        .map(|r| r.at)
        .collect();
    assert_eq!(at.len(), n);
    // A bucket of 2 at 10/s: the last write goes out at least (n - 2) / 10 s after the first,
    // on any machine. Measured here (the fake records a write as it answers, so the first
    // one's latency would shrink a span between its records).
    let span = started.elapsed();
    assert!(span >= Duration::from_millis(950), "{span:?}");
}

#[tokio::test]
async fn a_failure_is_reported_once_per_error_and_again_after_a_success() {
    let api = FakeApiServer::start().await;
    claim(&api, "data-web-0");
    let (exec, metrics) = executor(&api, Mode::Enforce);
    let current = || {
        api.get_object(&resources::PERSISTENT_VOLUME_CLAIMS, "db", "data-web-0")
            .expect("claim")
    };
    api.fail_next("PATCH", "persistentvolumeclaims/data-web-0", 500, 3);
    for _ in 0..3 {
        let error = exec
            .write(&resize(&current(), "2Gi"))
            .await
            .expect_err("fails");
        assert!(
            matches!(&error, kube::Error::Api(s) if s.code == 500),
            "{error:?}"
        );
    }
    assert_eq!(metrics.get("PatchClaim", "failed"), 3);
    assert_eq!(
        event_writes(&api, "VolumeClaimPatchFailed"),
        1,
        "reported once"
    );
    let note = api
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.contains("/events"))
        .find_map(|r| r.body.filter(|b| b["reason"] == "VolumeClaimPatchFailed"))
        .map(|b| b["note"].as_str().unwrap_or_default().to_owned())
        .expect("the failure event");
    assert!(note.starts_with("could not patch: "), "{note}");
    assert!(!note.contains("{error}"), "{note}");

    exec.write(&resize(&current(), "2Gi")).await.expect("patch");
    assert_eq!(metrics.get("PatchClaim", "done"), 1);
    api.fail_next("PATCH", "persistentvolumeclaims/data-web-0", 500, 1);
    exec.write(&resize(&current(), "3Gi"))
        .await
        .expect_err("fails");
    assert!(
        eventually(Duration::from_secs(2), || {
            api.requests()
                .iter()
                .filter(|r| {
                    r.path.contains("/events") && (r.method == "POST" || r.method == "PATCH")
                })
                .filter(|r| {
                    r.body.as_ref().is_some_and(|b| {
                        b["reason"] == "VolumeClaimPatchFailed" || b.get("series").is_some()
                    })
                })
                .count()
                >= 2
        })
        .await,
        "a failure after a success is reported again"
    );
}

#[tokio::test]
async fn observe_mode_writes_nothing_but_one_event_per_planned_change() {
    let api = FakeApiServer::start().await;
    let object = claim(&api, "data-web-0");
    let (exec, metrics) = executor(&api, Mode::Observe);
    for _ in 0..3 {
        let outcome = exec.write(&resize(&object, "2Gi")).await.expect("observed");
        assert!(matches!(outcome, Outcome::Observed), "{outcome:?}");
    }
    exec.write(&resize(&object, "3Gi")).await.expect("observed");
    exec.report(&Report::new(
        Target::new(Kind::Claim, "db", "data-web-0").reference(),
        EventType::Warning,
        "SomethingToSay",
        "Test",
        "reports are written in observe mode too".into(),
    ))
    .await;

    assert_eq!(
        metrics.get("PatchClaim", "observed"),
        2,
        "two planned changes"
    );
    assert_eq!(metrics.get("PatchClaim", "done"), 0);
    let writes = api.write_records();
    assert!(
        writes.iter().all(|w| w
            .resource
            .is_some_and(|r| std::ptr::eq(r, &resources::EVENTS))),
        "only events are written: {writes:?}"
    );
    // Once per planned change: the second change of the same claim joins the first
    // Event's series (kube's recorder folds Events by object, reason and action).
    assert_eq!(event_writes(&api, "WouldPatchClaim"), 1);
    assert_eq!(
        writes.len(),
        3,
        "two reports of planned changes and one Event: {writes:?}"
    );
    assert_eq!(
        event_writes(&api, "VolumeClaimPatched"),
        0,
        "nothing was patched"
    );
    assert_eq!(event_writes(&api, "SomethingToSay"), 1);
    let note = api
        .requests()
        .into_iter()
        .find_map(|r| r.body.filter(|b| b["reason"] == "WouldPatchClaim"))
        .expect("would event");
    assert_eq!(note["action"], "PatchClaim");
    assert_eq!(note["regarding"]["kind"], "PersistentVolumeClaim");
    assert!(
        note["note"]
            .as_str()
            .is_some_and(|n| n.contains("2Gi") && n.contains("observe mode")),
        "{note}"
    );
}

/// An eviction carries the pod's uid as its precondition (in the body the apiserver reads, not
/// the key kube's `Api::evict` uses, which it ignores) and the field manager: the wrong uid is
/// a conflict and the pod stays; the right one evicts it.
#[tokio::test]
async fn an_eviction_carries_the_pods_uid_as_a_precondition() {
    let api = FakeApiServer::start().await;
    let pod = api.put_object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "db", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }));
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_owned();
    let (exec, metrics) = executor(&api, Mode::Enforce);
    let evict = |uid: &str| {
        Write::new(
            Verb::EvictPod,
            Target::new(Kind::Pod, "db", "web-0"),
            Request::Evict {
                uid: Some(uid.to_owned()),
            },
            "evict".into(),
        )
        .expected(&[404, 409, 429])
    };
    let refused = exec
        .write(&evict("the-pod-before"))
        .await
        .expect_err("precondition");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 409),
        "{refused:?}"
    );
    assert!(api.get_object(&resources::PODS, "db", "web-0").is_some());
    exec.write(&evict(&uid)).await.expect("evicted");
    assert!(api.get_object(&resources::PODS, "db", "web-0").is_none());
    assert_eq!(api.evictions_of("db", "web-0"), 1);
    let posted: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/pods/web-0/eviction"))
        .collect();
    assert_eq!(posted.len(), 2);
    for r in &posted {
        assert!(r.query.contains("fieldManager=stateful-admission"), "{r:?}");
    }
    let body = posted[1].body.as_ref().expect("body");
    assert_eq!(body["kind"], "Eviction", "{body}");
    assert_eq!(body["metadata"]["name"], "web-0");
    assert_eq!(body["deleteOptions"]["preconditions"]["uid"], uid.as_str());
    assert_eq!(metrics.get("EvictPod", "conflict"), 1);
    assert_eq!(metrics.get("EvictPod", "done"), 1);
}
