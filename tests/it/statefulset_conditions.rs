//! `Available` and `Progressing` on StatefulSets (KEP-2804) end to end: the controller
//! against the fake API server, with the built-in StatefulSet controller simulated by
//! status rewrites that drop every condition, as the real one does on each status write
//! (by hand, or by [`StatefulSetSim`] for pods that come, go and turn ready and unready).

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::events::v1::Event as EventV1;
use serde_json::{Value, json};
use stateful_admission::controller::{ControllerConfig, DEFAULT_CONDITIONS_INTERVAL, Features};
use stateful_admission::names;

use crate::support::barrier::BARRIER_WAIT;
use crate::support::churn::{SetWrites, builtin_write_times, set_writes};
use crate::support::controller::{RunningController, config, eventually, no_features};
use crate::support::fake_apiserver::FakeApiServer;
use crate::support::fake_apiserver::resources::STATEFULSETS;
use crate::support::statefulset_sim::{SimConfig, StatefulSetSim, set_pod_ready};

const NS: &str = "default";

fn settings(resync: Duration) -> ControllerConfig {
    let mut c = config(
        "conditions",
        Features {
            conditions: true,
            ..no_features()
        },
    );
    c.resync = resync;
    c
}

/// Evidence that whatever the controller had to write of `set` by now is written: `interval`
/// (what may hold a write back) has passed, and the controller looked at the set after that
/// (a nudge, later in the watch than every change before it). How long it takes is for the
/// benchmarks; a "nothing was written" is read after this.
async fn looked_past(
    controller: &RunningController,
    api: &FakeApiServer,
    set: &str,
    interval: Duration,
) {
    tokio::time::sleep(interval).await;
    controller.nudge_and_settle(api, NS, set).await;
}

/// [`settings`], writing each change of the conditions at once.
fn uncoalesced(resync: Duration) -> ControllerConfig {
    ControllerConfig {
        conditions_interval: Duration::ZERO,
        ..settings(resync)
    }
}

fn status(
    generation: i64,
    replicas: i64,
    ready: i64,
    updated: i64,
    current: &str,
    update: &str,
) -> Value {
    json!({"observedGeneration": generation, "replicas": replicas, "readyReplicas": ready,
           "availableReplicas": ready, "updatedReplicas": updated, "currentReplicas": replicas - updated,
           "currentRevision": current, "updateRevision": update})
}

/// A set of 3 replicas, as created (status as the registry sets it).
fn create_set(api: &FakeApiServer, name: &str, annotations: Value, status: Value) {
    api.put_object(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"replicas": 3, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "v1"}]}}},
        "status": status,
    }));
}

/// The built-in controller's status write: the whole status rebuilt, no conditions. Returns
/// the resourceVersion it was stored at.
fn builtin_writes_status(api: &FakeApiServer, name: &str, status: Value) -> u64 {
    let mut set = api
        .get_object(&STATEFULSETS, NS, name)
        .expect("the set exists");
    set["status"] = status;
    let stored = api.put_object(set);
    stored["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("a stored resourceVersion")
}

/// A user edits the pod template: a new generation.
fn new_generation(api: &FakeApiServer, name: &str) -> i64 {
    let mut set = api
        .get_object(&STATEFULSETS, NS, name)
        .expect("the set exists");
    let generation = set
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        + 1;
    set["metadata"]["generation"] = json!(generation);
    set["spec"]["template"]["spec"]["containers"][0]["image"] = json!(format!("v{generation}"));
    api.put_object(set);
    generation
}

fn annotate(api: &FakeApiServer, name: &str, key: &str, value: &str) {
    let mut set = api
        .get_object(&STATEFULSETS, NS, name)
        .expect("the set exists");
    set["metadata"]["annotations"][key] = json!(value);
    api.put_object(set);
}

/// `(status, reason, lastTransitionTime)` of a condition.
fn condition(api: &FakeApiServer, name: &str, type_: &str) -> Option<(String, String, String)> {
    let set = api.get_object(&STATEFULSETS, NS, name)?;
    let c = set
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("lastTransitionTime")))
}

async fn expect_condition(
    api: &FakeApiServer,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> String {
    let ok = eventually(Duration::from_secs(15), || {
        condition(api, name, type_).is_some_and(|(s, r, _)| s == status && r == reason)
    })
    .await;
    assert!(
        ok,
        "{name}: {type_}={status} ({reason}) expected, have {:?}",
        condition(api, name, type_)
    );
    condition(api, name, type_).map(|c| c.2).unwrap_or_default()
}

/// What condition `type_` of set `name` said in each change of the set committed after
/// revision `from`, in order: `(status, reason)`, for the changes that carried it. What a watch
/// saw, not the set as it is now: under the simulated built-in controller, its next status write
/// removes ours (only ours carry conditions here), and under load it may land first.
fn said_since(api: &FakeApiServer, name: &str, type_: &str, from: u64) -> Vec<(String, String)> {
    let changes = api
        .changes_since(from)
        .expect("the fake's record of changes reaches back to the revision asked for");
    changes
        .iter()
        .filter(|c| {
            c.resource.plural == STATEFULSETS.plural
                && c.object.pointer("/metadata/name") == Some(&json!(name))
        })
        .filter_map(|c| {
            let conditions = c.object.pointer("/status/conditions")?.as_array()?;
            let said = conditions.iter().find(|c| c["type"] == type_)?;
            let text = |k: &str| said[k].as_str().unwrap_or_default().to_owned();
            Some((text("status"), text("reason")))
        })
        .collect()
}

/// Waits until a change of set `name` after revision `from` said `type_` with `status` and
/// `reason` ([`said_since`]).
async fn expect_said(
    api: &FakeApiServer,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
    from: u64,
) {
    let seen = eventually(BARRIER_WAIT, || {
        said_since(api, name, type_, from)
            .iter()
            .any(|(s, r)| s == status && r == reason)
    })
    .await;
    assert!(
        seen,
        "{name}: no change since revision {from} said {type_}={status} ({reason}); now {:?}",
        condition(api, name, type_)
    );
}

fn status_patches(api: &FakeApiServer) -> usize {
    api.writes()
        .iter()
        .filter(|r| r.path.ends_with("/status"))
        .count()
}

/// Writes other than the Lease renewals.
fn object_writes(api: &FakeApiServer) -> Vec<String> {
    api.writes()
        .into_iter()
        // Neither the Lease nor the capability probes' dry runs change an object.
        .filter(|r| !r.path.contains("/leases") && !r.is_dry_run())
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

fn metric(controller: &RunningController, name: &str) -> Option<u64> {
    controller.metrics().lines().find_map(|l| {
        l.strip_prefix(&format!("{name} "))
            .and_then(|v| v.parse().ok())
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_that_completes() {
    let api = FakeApiServer::start().await;
    create_set(
        &api,
        "web",
        json!({}),
        json!({"replicas": 0, "availableReplicas": 0}),
    );
    let controller = RunningController::start(&api, settings(Duration::from_secs(600)));
    let progressing_since = expect_condition(&api, "web", "Progressing", "True", "ScalingUp").await;
    expect_condition(&api, "web", "Available", "False", "ReplicasUnavailable").await;

    // Pods come up one by one; every status write drops the conditions, which come back.
    for n in 1..=3 {
        builtin_writes_status(&api, "web", status(1, n, n - 1, n, "web-1", "web-1"));
        builtin_writes_status(&api, "web", status(1, n, n, n, "web-1", "web-1"));
        let reason = if n < 3 {
            "ScalingUp"
        } else {
            "RolloutComplete"
        };
        let since = expect_condition(&api, "web", "Progressing", "True", reason).await;
        assert_eq!(
            since, progressing_since,
            "lastTransitionTime kept while Progressing stays True"
        );
    }
    expect_condition(&api, "web", "Available", "True", "ReplicasAvailable").await;

    // A template change rolls out from the highest ordinal down, with a claim rollout.
    let generation = new_generation(&api, "web");
    annotate(
        &api,
        "web",
        "stateful-admission.io/volume-claim-status",
        r#"{"data": {"compatible": 0, "updating": 3, "overSized": 0, "totalCapacity": "3Gi"}}"#,
    );
    builtin_writes_status(&api, "web", status(generation, 3, 3, 0, "web-1", "web-2"));
    expect_condition(&api, "web", "Progressing", "True", "UpdatingReplicas").await;
    for updated in 1..=3 {
        builtin_writes_status(
            &api,
            "web",
            status(generation, 3, 2, updated, "web-1", "web-2"),
        );
        builtin_writes_status(
            &api,
            "web",
            status(generation, 3, 3, updated, "web-1", "web-2"),
        );
    }
    builtin_writes_status(&api, "web", status(generation, 3, 3, 3, "web-2", "web-2"));
    // Pods are done; claims are not: not complete.
    expect_condition(&api, "web", "Progressing", "True", "UpdatingVolumeClaims").await;
    annotate(
        &api,
        "web",
        "stateful-admission.io/volume-claim-status",
        r#"{"data": {"compatible": 3, "updating": 0, "overSized": 0, "totalCapacity": "6Gi"}}"#,
    );
    let since = expect_condition(&api, "web", "Progressing", "True", "RolloutComplete").await;
    assert_eq!(since, progressing_since, "Progressing never left True");
    assert!(events(&api, "ProgressDeadlineExceeded").is_empty());
    // The record lived while the rollout was in flight; the built-in controller completed
    // it (currentRevision == updateRevision), so the record is gone.
    let record = |api: &FakeApiServer| {
        api.get::<StatefulSet>(NS, "web")
            .and_then(|s| s.metadata.annotations)
            .and_then(|a| a.get(names::PROGRESS).cloned())
    };
    assert!(
        eventually(Duration::from_secs(5), || record(&api).is_none()).await,
        "the progress record is removed at completion: {:?}",
        record(&api)
    );
    assert!(
        api.write_records()
            .iter()
            .any(|w| w.target() == "statefulsets.apps"),
        "it was written while in flight"
    );

    // Nothing on the object needs rewriting: a restarted controller writes nothing.
    controller.stop().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    api.clear_requests();
    let restarted = RunningController::start(&api, settings(Duration::from_millis(300)));
    assert!(eventually(Duration::from_secs(15), || restarted.is_leader()).await);
    // Looked at twice since it leads (resync 300 ms).
    restarted.reconciled_after_n(restarted.mark(), 2).await;
    assert_eq!(object_writes(&api), Vec::<String>::new());
    restarted.stop().await;
}

fn events(api: &FakeApiServer, reason: &str) -> Vec<EventV1> {
    api.list::<EventV1>()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_stuck_past_its_deadline() {
    let api = FakeApiServer::start().await;
    create_set(
        &api,
        "db",
        json!({"stateful-admission.io/progress-deadline-seconds": "2"}),
        status(2, 3, 3, 1, "db-1", "db-2"),
    );
    let mut set = api.get_object(&STATEFULSETS, NS, "db").expect("set");
    set["metadata"]["generation"] = json!(2);
    api.put_object(set);
    let started = tokio::time::Instant::now();
    let controller = RunningController::start(&api, settings(Duration::from_secs(600)));
    let since = expect_condition(&api, "db", "Progressing", "True", "UpdatingReplicas").await;

    // Nothing moves: the deadline passes (no resync needed: the controller looks again then).
    expect_condition(
        &api,
        "db",
        "Progressing",
        "False",
        "ProgressDeadlineExceeded",
    )
    .await;
    let stalled_after = started.elapsed();
    println!("ProgressDeadlineExceeded {stalled_after:?} after start with a 2s deadline");
    // Never before the deadline (times have seconds precision, as the apiserver's: it may end
    // up to 1s early); that it came at all within the wait above, against a 600 s resync, is
    // the controller looking again at the deadline.
    assert!(stalled_after >= Duration::from_secs(1), "{stalled_after:?}");
    let set: StatefulSet = api.get(NS, "db").expect("set");
    let message = set
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| {
            cs.into_iter()
                .find(|c| c.type_.as_deref() == Some("Progressing"))
        })
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert_eq!(
        message,
        "StatefulSet \"db\" has made no progress for 2s while rolling out revision \"db-2\": 1 of 3 replicas updated."
    );
    assert_ne!(
        condition(&api, "db", "Progressing").map(|c| c.2),
        Some(since)
    );

    // One warning, however often the set is looked at or its status rewritten. A rewrite
    // that changes nothing the conditions say removes them and they stay off: the user was
    // told, and the record keeps the stall (`status` reads it).
    looked_past(&controller, &api, "db", DEFAULT_CONDITIONS_INTERVAL).await;
    let before = status_patches(&api);
    for _ in 0..3 {
        builtin_writes_status(&api, "db", status(2, 3, 3, 1, "db-1", "db-2"));
        looked_past(&controller, &api, "db", DEFAULT_CONDITIONS_INTERVAL).await;
        assert_eq!(condition(&api, "db", "Progressing"), None);
    }
    assert_eq!(status_patches(&api) - before, 0, "none of ours");
    let stalled_record = api
        .get::<StatefulSet>(NS, "db")
        .and_then(|s| s.metadata.annotations)
        .and_then(|a| a.get(names::PROGRESS).cloned())
        .unwrap_or_default();
    assert!(
        stalled_record.contains(r#""progressing":{"status":"False""#),
        "{stalled_record}"
    );
    let warned = events(&api, "ProgressDeadlineExceeded");
    assert_eq!(warned.len(), 1);
    assert_eq!(warned[0].type_.as_deref(), Some("Warning"));
    assert!(warned[0].series.is_none());
    // The counter follows the progress write's answer, which reaches the controller a moment
    // after the apiserver stored the conditions written next.
    assert!(
        eventually(Duration::from_secs(5), || metric(
            &controller,
            "statefulset_progress_deadline_exceeded_total"
        ) == Some(1))
        .await,
        "{:?}",
        metric(&controller, "statefulset_progress_deadline_exceeded_total")
    );

    // Progress again: back to True.
    builtin_writes_status(&api, "db", status(2, 3, 3, 2, "db-1", "db-2"));
    expect_condition(&api, "db", "Progressing", "True", "UpdatingReplicas").await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sets_past_their_deadline_are_counted_until_they_progress_or_go() {
    let api = FakeApiServer::start().await;
    for name in ["db", "cache"] {
        create_set(
            &api,
            name,
            json!({"stateful-admission.io/progress-deadline-seconds": "2"}),
            status(2, 3, 3, 1, &format!("{name}-1"), &format!("{name}-2")),
        );
        let mut set = api.get_object(&STATEFULSETS, NS, name).expect("set");
        set["metadata"]["generation"] = json!(2);
        api.put_object(set);
    }
    create_set(&api, "web", json!({}), status(1, 3, 3, 3, "web-1", "web-1"));
    let controller = RunningController::start(&api, settings(Duration::from_secs(600)));
    let past = |c: &RunningController| metric(c, "statefulsets_past_progress_deadline");
    assert_eq!(past(&controller), Some(0));
    for name in ["db", "cache"] {
        expect_condition(
            &api,
            name,
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
        )
        .await;
    }
    assert!(
        eventually(Duration::from_secs(5), || past(&controller) == Some(2)).await,
        "{:?}",
        past(&controller)
    );
    // Counted once each set's write has been answered, not when the gauge moved.
    assert!(
        eventually(Duration::from_secs(5), || metric(
            &controller,
            "statefulset_progress_deadline_exceeded_total"
        ) == Some(2))
        .await,
        "{:?}",
        metric(&controller, "statefulset_progress_deadline_exceeded_total")
    );

    // One moves again: no longer counted (the counter of past events stays).
    builtin_writes_status(&api, "db", status(2, 3, 3, 2, "db-1", "db-2"));
    expect_condition(&api, "db", "Progressing", "True", "UpdatingReplicas").await;
    assert!(
        eventually(Duration::from_secs(5), || past(&controller) == Some(1)).await,
        "{:?}",
        past(&controller)
    );

    // The other is deleted: no reconcile is ever called for a deleted set, and the count
    // drops all the same.
    api.remove_object(&STATEFULSETS, NS, "cache");
    assert!(
        eventually(Duration::from_secs(5), || past(&controller) == Some(0)).await,
        "{:?}",
        past(&controller)
    );
    assert_eq!(
        metric(&controller, "statefulset_progress_deadline_exceeded_total"),
        Some(2)
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn conditions_dropped_by_a_foreign_status_write_return_promptly_where_they_have_news() {
    const TRIALS: usize = 50;
    let api = FakeApiServer::start().await;
    // Written at first contact: one replica is not available.
    create_set(&api, "web", json!({}), status(1, 3, 2, 3, "web-1", "web-1"));
    let controller = RunningController::start(&api, uncoalesced(Duration::from_secs(600)));
    expect_condition(&api, "web", "Available", "False", "ReplicasUnavailable").await;
    expect_condition(&api, "web", "Progressing", "True", "WaitingForAvailability").await;
    builtin_writes_status(&api, "web", status(1, 3, 3, 3, "web-1", "web-1"));
    expect_condition(&api, "web", "Progressing", "True", "RolloutComplete").await;
    // Every write of the first contact made and answered before counting.
    controller.nudge_and_settle(&api, NS, "web").await;
    let before = status_patches(&api);
    let record_writes = metric(&controller, "statefulset_progress_record_writes_total");
    let progressing_since = |api: &FakeApiServer| {
        api.list_objects(&STATEFULSETS)
            .iter()
            .find(|s| s.pointer("/metadata/name") == Some(&json!("web")))
            .and_then(|s| s.pointer("/status/conditions").cloned())
            .and_then(|c| {
                c.as_array()?
                    .iter()
                    .find(|c| c["type"] == "Progressing")
                    .map(|c| c["lastTransitionTime"].clone())
            })
    };
    let since_before = progressing_since(&api);
    assert!(since_before.is_some());

    let mut absent = Vec::with_capacity(TRIALS);
    for trial in 0..TRIALS {
        let mut changes = api.subscribe();
        // Each rewrite changes what Available says (2 of 3, then 3 of 3 again).
        let ready = if trial % 2 == 0 { 2 } else { 3 };
        let wiped_at = tokio::time::Instant::now();
        let wipe = builtin_writes_status(&api, "web", status(1, 3, ready, 3, "web-1", "web-1"));
        // The set's next change after the wipe is the controller's: prompted by the wipe's
        // watch event (the resync is 600 s, past the wait), nothing in between. How long it
        // takes is for a benchmark, not for this test.
        let next = tokio::time::timeout(BARRIER_WAIT, async {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let change = match changes.recv().await {
                    Ok(change) => change,
                    Err(RecvError::Lagged(missed)) => {
                        panic!("trial {trial}: missed {missed} changes of the fake")
                    }
                    Err(RecvError::Closed) => panic!("trial {trial}: the fake stopped"),
                };
                if change.object.pointer("/metadata/name") == Some(&json!("web"))
                    && change.resource_version > wipe
                {
                    return change;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("trial {trial}: the set did not change again after the wipe"));
        let conditions = next
            .object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        assert_eq!(
            conditions, 2,
            "trial {trial}: the change after the wipe brings both conditions back: {}",
            next.object["status"]
        );
        absent.push(wiped_at.elapsed());
    }
    absent.sort();
    println!(
        "conditions absent after a foreign status write over {TRIALS} trials: min {:?}, p50 {:?}, max {:?}",
        absent[0],
        absent[TRIALS / 2],
        absent[TRIALS - 1]
    );

    // Exactly one status patch per wipe, and no more once they are back (looked at since).
    controller.nudge_and_settle(&api, NS, "web").await;
    assert_eq!(status_patches(&api) - before, TRIALS);
    // A rewrite that changes nothing they say (the same numbers): they stay off, no write.
    builtin_writes_status(&api, "web", status(1, 3, 3, 3, "web-1", "web-1"));
    controller.nudge_and_settle(&api, NS, "web").await;
    assert_eq!(condition(&api, "web", "Available"), None);
    assert_eq!(status_patches(&api) - before, TRIALS);
    // Availability flapped on a settled set: no record is written, the transition times are
    // remembered in memory.
    let record_writes_after = metric(&controller, "statefulset_progress_record_writes_total");
    assert_eq!(
        record_writes_after.zip(record_writes).map(|(a, b)| a - b),
        Some(0)
    );
    let set = api.get::<StatefulSet>(NS, "web").expect("web");
    assert!(
        !set.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(names::PROGRESS),
        "no progress record on a set the built-in controller completed"
    );
    // News again: back, with the transition time Progressing kept all along.
    builtin_writes_status(&api, "web", status(1, 3, 2, 3, "web-1", "web-1"));
    expect_condition(&api, "web", "Available", "False", "ReplicasUnavailable").await;
    assert_eq!(
        progressing_since(&api),
        since_before,
        "Progressing kept its lastTransitionTime across the foreign status writes"
    );
    controller.stop().await;
}

/// Pods turning ready and unready under the simulated built-in controller (which rewrites
/// the whole status, dropping ours, whenever a count moves): our writes to the sets, counted
/// from the fake's write log, are at most the built-in controller's status writes, fewer
/// where changes come faster than the interval, and none where what the conditions say does
/// not change (a pod flapping within `minReadySeconds` moves `readyReplicas`, not
/// `availableReplicas`).
#[tokio::test(flavor = "multi_thread")]
async fn under_pod_churn_our_writes_are_at_most_the_builtin_controllers_and_none_without_news() {
    const INTERVAL: Duration = Duration::from_secs(1);
    let api = FakeApiServer::start().await;
    for (name, min_ready) in [("flappy", 0), ("gated", 2)] {
        api.put_object(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 3, "serviceName": name, "minReadySeconds": min_ready,
                     "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": {"app": name}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "v1"}]}}},
        }));
    }
    let start = api.resource_version();
    let sims: Vec<StatefulSetSim> = ["flappy", "gated"]
        .into_iter()
        .map(|name| StatefulSetSim::start(&api, NS, name, SimConfig::default(), false))
        .collect();
    let controller = RunningController::start(
        &api,
        ControllerConfig {
            conditions_interval: INTERVAL,
            ..settings(Duration::from_secs(600))
        },
    );
    for name in ["flappy", "gated"] {
        expect_said(&api, name, "Available", "True", "ReplicasAvailable", start).await;
        expect_said(&api, name, "Progressing", "True", "RolloutComplete", start).await;
    }
    let sets = |name: &str| vec![(NS.to_owned(), name.to_owned())];
    let kubelet = api.client();
    let quiet = async |set: &str| looked_past(&controller, &api, set, INTERVAL).await;
    quiet("flappy").await;
    quiet("gated").await;
    let mut totals = SetWrites::default();
    let mut add = |phase: &str, w: SetWrites| {
        println!("{phase}: {w}");
        totals.builtin += w.builtin;
        totals.ours_status += w.ours_status;
        totals.ours_set += w.ours_set;
        w
    };

    // Slowly: each turn is news (Available moves), each written once.
    let from = api.uptime();
    for _ in 0..4 {
        for ready in [false, true] {
            let rev = api.resource_version();
            set_pod_ready(&kubelet, NS, "flappy-2", ready).await;
            let (status, reason) = if ready {
                ("True", "ReplicasAvailable")
            } else {
                ("False", "ReplicasUnavailable")
            };
            expect_said(&api, "flappy", "Available", status, reason, rev).await;
            quiet("flappy").await;
        }
    }
    let slow = add("slow churn", set_writes(&api, from, &sets("flappy")));
    assert!(slow.builtin >= 8, "{slow}");
    assert!(slow.ours() <= slow.builtin, "{slow}");
    assert_eq!(slow.ours_set, 0, "no record for readiness: {slow}");

    // A burst within the interval: the first change at once, the rest together at its end.
    let from = api.uptime();
    let burst_from = api.resource_version();
    for flip in 0..10 {
        set_pod_ready(&kubelet, NS, "flappy-1", flip % 2 == 1).await;
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    // The last word is what holds at the end (ready again): said after the last flip, or
    // before it when the flips since changed nothing the user was last told.
    quiet("flappy").await;
    assert_eq!(
        said_since(&api, "flappy", "Available", burst_from).pop(),
        Some(("True".to_owned(), "ReplicasAvailable".to_owned()))
    );
    let burst = add("burst", set_writes(&api, from, &sets("flappy")));
    let times = builtin_write_times(&api, from, &sets("flappy"));
    let span = times
        .last()
        .zip(times.first())
        .map_or(Duration::ZERO, |(l, f)| l.saturating_sub(*f));
    // One at the first change, then at most one per interval while changes come, and one
    // after the last.
    let bound = 2 + usize::try_from(span.as_millis() / INTERVAL.as_millis()).unwrap_or(0);
    assert!(
        burst.ours() <= bound.min(burst.builtin),
        "{burst}; bound {bound} over {span:?}"
    );
    assert!(burst.ours() < burst.builtin, "coalesced: {burst}");

    // No news: gated-2 goes unready (news, written), then flaps faster than its
    // minReadySeconds, so only readyReplicas moves; ours stay off and nothing is written.
    let rev = api.resource_version();
    set_pod_ready(&kubelet, NS, "gated-2", false).await;
    expect_said(
        &api,
        "gated",
        "Available",
        "False",
        "ReplicasUnavailable",
        rev,
    )
    .await;
    quiet("gated").await;
    let from = api.uptime();
    for flip in 0..6 {
        set_pod_ready(&kubelet, NS, "gated-2", flip % 2 == 0).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    quiet("gated").await;
    let unchanged = add("no news", set_writes(&api, from, &sets("gated")));
    assert!(unchanged.builtin >= 4, "the flaps were seen: {unchanged}");
    assert_eq!(unchanged.ours(), 0, "nothing new to say: {unchanged}");
    assert_eq!(
        condition(&api, "gated", "Available"),
        None,
        "removed by the built-in controller's writes, not put back"
    );

    // Ready for good: available after minReadySeconds, which is news again.
    let from = api.uptime();
    let rev = api.resource_version();
    set_pod_ready(&kubelet, NS, "gated-2", true).await;
    expect_said(&api, "gated", "Available", "True", "ReplicasAvailable", rev).await;
    quiet("gated").await;
    let back = add("available again", set_writes(&api, from, &sets("gated")));
    assert!(back.ours() <= back.builtin && back.ours() >= 1, "{back}");

    println!("in all: {totals}");
    assert!(totals.ours() <= totals.builtin, "{totals}");
    controller.stop().await;
    for sim in sims {
        sim.stop().await;
    }
}

/// First contact with 500 sets, one in ten with a replica unavailable: only those are
/// written (their conditions, once each); the healthy ones say what their status says and get
/// nothing. Then nothing at all over six resyncs.
#[tokio::test(flavor = "multi_thread")]
async fn first_contact_writes_only_sets_with_news_and_then_nothing_over_500_sets() {
    const SETS: usize = 500;
    let api = FakeApiServer::start().await;
    let unavailable = |n: usize| n % 10 == 3;
    for n in 0..SETS {
        let name = format!("s{n}");
        let ready = if unavailable(n) { 2 } else { 3 };
        create_set(
            &api,
            &name,
            json!({}),
            status(1, 3, ready, 3, &format!("{name}-1"), &format!("{name}-1")),
        );
    }
    let resync = Duration::from_millis(500);
    let started = tokio::time::Instant::now();
    let controller = RunningController::start(&api, settings(resync));
    let with_conditions = || {
        api.list_objects(&STATEFULSETS)
            .iter()
            .filter(|s| {
                s.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .is_some_and(|c| c.len() == 2)
            })
            .count()
    };
    let settled = eventually(Duration::from_secs(60), || with_conditions() >= SETS / 10).await;
    assert!(settled, "the unavailable sets get their conditions");
    let took = started.elapsed();
    // Every set looked at, and those reconciles' writes answered.
    assert!(
        eventually(BARRIER_WAIT, || controller.reconciles() >= SETS as u64).await,
        "every set is looked at"
    );
    controller.settle().await;
    let first_pass = object_writes(&api);
    println!(
        "{SETS} sets met in {took:?} with {} writes",
        first_pass.len()
    );
    assert_eq!(first_pass.len(), SETS / 10, "{first_pass:?}");
    assert!(
        first_pass.iter().all(|w| w.ends_with("/status")),
        "conditions only, no record: {first_pass:?}"
    );
    for n in 0..SETS {
        let name = format!("s{n}");
        let has = condition(&api, &name, "Available").is_some();
        assert_eq!(has, unavailable(n), "{name}");
    }
    assert_eq!(with_conditions(), SETS / 10);

    api.clear_requests();
    let before = controller.reconciles();
    // Two rounds of every set's reconciles (resync 500 ms) started since.
    controller
        .reconciled_after_n(controller.mark(), 2 * SETS as u64)
        .await;
    assert_eq!(
        object_writes(&api),
        Vec::<String>::new(),
        "no writes over two rounds of reconciles"
    );
    println!(
        "{} reconciles in the quiet window, no writes",
        controller.reconciles() - before
    );
    controller.stop().await;
}
