//! KEP-961 against the fake API server: the gate probe with both answers (and a failing
//! one), and rolling updates of 6 replicas with maxUnavailable 2 and partition 3 driven by
//! the controller where the gate is off, with a simulated kubelet and built-in StatefulSet
//! controller; the invariants are checked at every change of the store.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use stateful_admission::admission::{self, GateStatus};
use stateful_admission::capabilities::{self, CapabilityCell};
use stateful_admission::controller::{ControllerConfig, Features};
use tokio::time::Instant;

use crate::common;
use crate::support::barrier::{Changes, fold, objects_now};
use crate::support::controller::{
    CONTROLLER_NAMESPACE, RunningController, config, eventually, no_features, written_by,
};
use crate::support::fake_apiserver::{ChangeKind, FakeApiServer, ResourceType, resources};
use crate::support::statefulset_sim::{SimConfig, StatefulSetSim, pod_is_available, pod_revision};

const NS: &str = "db";
const SET: &str = "web";
const REPLICAS: u32 = 6;
const PARTITION: u32 = 3;
const MAX_UNAVAILABLE: usize = 2;

fn driver_config(identity: &str) -> ControllerConfig {
    config(
        identity,
        Features {
            max_unavailable: true,
            ..no_features()
        },
    )
}

/// The set as a user applies it, with the annotation the webhook adds to it.
fn web(policy: &str) -> StatefulSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": SET, "namespace": NS,
                     "annotations": {"stateful-admission.io/max-unavailable": "2"}},
        "spec": {
            "replicas": REPLICAS,
            "serviceName": SET,
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": SET}},
            "template": {"metadata": {"labels": {"app": SET}},
                         "spec": {"containers": [{"name": "app", "image": "app:1"}]}},
            "updateStrategy": {"type": "RollingUpdate",
                               "rollingUpdate": {"partition": PARTITION, "maxUnavailable": 2}},
        },
    }))
    .expect("a valid StatefulSet")
}

fn pod_name(n: u32) -> String {
    format!("{SET}-{n}")
}

fn metric_line(metrics: &str, prefix: &str) -> Option<String> {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .map(str::to_owned)
}

/// Unavailable replicas of a set of `replicas`: missing, or not Running and Ready.
fn unavailable(pods: &BTreeMap<String, Value>, replicas: u32) -> usize {
    (0..replicas)
        .filter(|&n| !pods.get(&pod_name(n)).is_some_and(pod_is_available))
        .count()
}

/// What the watcher of the store saw.
#[derive(Debug, Default)]
struct Observed {
    max_unavailable: usize,
    /// Changes after which more than `MAX_UNAVAILABLE` replicas were unavailable.
    over_budget: Vec<String>,
    /// Pods below the partition that were deleted or changed.
    touched_below_partition: Vec<String>,
    changes: usize,
}

/// Checks the invariants after every committed change of the store: a model of the set's
/// pods is kept from the fake's record of changes itself, so no intermediate state is missed
/// (and a record that no longer reaches back fails the test: [`Changes::catch_up`]).
fn watch_invariants(api: &FakeApiServer) -> (Arc<Mutex<Observed>>, Changes) {
    watch_set(api, REPLICAS, PARTITION, MAX_UNAVAILABLE)
}

/// [`watch_invariants`] for a set of `replicas` with `partition` and a budget of `budget`.
fn watch_set(
    api: &FakeApiServer,
    replicas: u32,
    partition: u32,
    budget: usize,
) -> (Arc<Mutex<Observed>>, Changes) {
    let pod_type = ResourceType::of::<Pod>();
    let (revision, mut pods) = objects_now(api, pod_type, NS);
    let below: BTreeMap<String, Value> = (0..partition)
        .filter_map(|n| Some((pod_name(n), pods.get(&pod_name(n))?.clone())))
        .collect();
    let observed = Arc::new(Mutex::new(Observed {
        max_unavailable: unavailable(&pods, replicas),
        ..Observed::default()
    }));
    let shared = observed.clone();
    let changes = Changes::follow(api, revision, move |change| {
        if !fold(&mut pods, change, pod_type, NS) {
            return;
        }
        let name = change.object["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let now_unavailable = unavailable(&pods, replicas);
        let mut o = shared.lock().unwrap_or_else(|p| p.into_inner());
        o.changes += 1;
        o.max_unavailable = o.max_unavailable.max(now_unavailable);
        if now_unavailable > budget {
            o.over_budget.push(format!(
                "{:?} {name} at rv {}: {now_unavailable} unavailable",
                change.kind, change.resource_version
            ));
        }
        if let Some(before) = below.get(name)
            && (change.kind == ChangeKind::Deleted
                || before.pointer("/metadata/uid") != change.object.pointer("/metadata/uid")
                || pod_revision(before) != pod_revision(&change.object))
        {
            o.touched_below_partition
                .push(format!("{:?} {name}", change.kind));
        }
    });
    (observed, changes)
}

/// Creates the set through the API and waits for the simulated cluster to run it.
async fn running_set(api: &FakeApiServer, policy: &str, builtin_update: bool) -> StatefulSetSim {
    running(api, &web(policy), builtin_update).await
}

/// Creates `set` through the API and waits for the simulated cluster to run all its replicas.
async fn running(api: &FakeApiServer, set: &StatefulSet, builtin_update: bool) -> StatefulSetSim {
    let sets: Api<StatefulSet> = Api::namespaced(api.client(), NS);
    sets.create(&PostParams::default(), set)
        .await
        .expect("the set is created");
    let replicas = set.spec.replicas.unwrap_or(1) as u32;
    let sim = StatefulSetSim::start(api, NS, SET, SimConfig::default(), builtin_update);
    let settled = eventually(Duration::from_secs(20), || {
        (0..replicas).all(|n| {
            api.get_object(ResourceType::of::<Pod>(), NS, &pod_name(n))
                .is_some_and(|p| pod_is_available(&p))
        })
    })
    .await;
    assert!(settled, "the simulated cluster starts all replicas");
    sim
}

/// Changes the pod template: a new generation, hence a new update revision.
async fn update_image(api: &FakeApiServer) {
    let sets: Api<StatefulSet> = Api::namespaced(api.client(), NS);
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}});
    sets.patch(SET, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the template is updated");
}

/// Every replica from the partition up runs the update revision and is Ready.
fn rolled_out(api: &FakeApiServer) -> bool {
    (PARTITION..REPLICAS).all(|n| {
        api.get_object(ResourceType::of::<Pod>(), NS, &pod_name(n))
            .is_some_and(|p| pod_is_available(&p) && pod_revision(&p) == Some("web-rev2"))
    })
}

fn uids_below_partition(api: &FakeApiServer) -> Vec<Option<Value>> {
    (0..PARTITION)
        .map(|n| {
            api.get_object(ResourceType::of::<Pod>(), NS, &pod_name(n))
                .and_then(|p| p.pointer("/metadata/uid").cloned())
        })
        .collect()
}

/// Successful pod deletions the system under test sent (the simulation deletes through the
/// store hook, so these are the controller's own).
fn pod_deletions(api: &FakeApiServer) -> Vec<(String, Option<Value>, u16)> {
    api.requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.contains("/pods/"))
        .map(|r| (r.path, r.body, r.code))
        .collect()
}

struct Rollout {
    elapsed: Duration,
    observed: Observed,
    ours: Vec<(String, Option<Value>, u16)>,
    builtin: Vec<String>,
    metrics: String,
}

/// Runs the update with the gate as `drop_max_unavailable` makes it, and reports.
async fn roll(policy: &str, drop_max_unavailable: bool) -> Rollout {
    roll_with(policy, drop_max_unavailable, Probes::Answered).await
}

/// How the gate probe fares in a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probes {
    Answered,
    /// The first this many fail (500), then the apiserver answers.
    FailFirst(usize),
    /// Every probe fails: the driver has only the stored set's evidence.
    FailAlways,
}

async fn roll_with(policy: &str, drop_max_unavailable: bool, probes: Probes) -> Rollout {
    let api = FakeApiServer::start().await;
    api.configure(|c| c.drop_statefulset_max_unavailable = drop_max_unavailable);
    let sim = running_set(&api, policy, true).await;
    match probes {
        Probes::Answered => {}
        // The StatefulSet dry run in the controller namespace: the gate's probe.
        Probes::FailFirst(n) => api.fail_next("POST", GATE_PROBE, 500, n),
        Probes::FailAlways => api.fail_next("POST", GATE_PROBE, 500, usize::MAX),
    }
    let stored = api.get::<StatefulSet>(NS, SET).expect("stored");
    let native = stored
        .spec
        .update_strategy
        .and_then(|s| s.rolling_update)
        .and_then(|r| r.max_unavailable);
    assert_eq!(
        native.is_none(),
        drop_max_unavailable,
        "the apiserver drops the field exactly where the gate is off"
    );

    let controller = RunningController::start(&api, driver_config("replica-a"));
    // The probe's own answer (a set's evidence may tell the gate before it): failed probes
    // are retried after 1 s, 2 s, 4 s, so three are behind in about 7 s.
    let want_probe = match probes {
        Probes::FailAlways => "max_unavailable_gate_probes_total{result=\"error\"}",
        _ if drop_max_unavailable => "max_unavailable_gate_probes_total{result=\"disabled\"} 1",
        _ => "max_unavailable_gate_probes_total{result=\"enabled\"} 1",
    };
    assert!(
        eventually(Duration::from_secs(15), || {
            controller.metrics().contains(want_probe)
        })
        .await,
        "the gate is probed: {}",
        controller.metrics()
    );
    let below = uids_below_partition(&api);
    let (observed, watcher) = watch_invariants(&api);

    let started = Instant::now();
    update_image(&api).await;
    let done = eventually(Duration::from_secs(30), || rolled_out(&api)).await;
    let elapsed = started.elapsed();
    assert!(done, "the rollout completes");
    // The driver looked at the rolled-out set (its resync is 30 s: nudged); nothing below the
    // partition changed.
    controller.nudge_and_settle(&api, NS, SET).await;
    assert_eq!(
        uids_below_partition(&api),
        below,
        "pods below the partition are untouched"
    );
    let ours = pod_deletions(&api);
    // At steady state the driver writes nothing but the Lease renewals, however often it
    // looks (the simulated built-in controller may still finish the rollout's status).
    let steady_from = api.uptime();
    controller.nudge_and_settle(&api, NS, SET).await;
    let writes: Vec<String> = api
        .write_records()
        .into_iter()
        .filter(|w| w.at >= steady_from && written_by(w, "replica-a"))
        .filter(|w| !w.target().starts_with("leases"))
        .map(|w| format!("{} {}", w.verb.as_str(), w.target()))
        .collect();
    assert!(writes.is_empty(), "writes at steady state: {writes:?}");

    let metrics = controller.metrics();
    controller.stop().await;
    let stats = sim.stop().await;
    watcher.catch_up();
    let observed = std::mem::take(&mut *observed.lock().unwrap_or_else(|p| p.into_inner()));
    Rollout {
        elapsed,
        observed,
        ours,
        builtin: stats.deleted_by_builtin,
        metrics,
    }
}

async fn rollout_with_the_gate_off(policy: &str) {
    check_gate_off_rollout(policy, roll(policy, true).await);
}

fn check_gate_off_rollout(policy: &str, r: Rollout) {
    let o = &r.observed;
    let succeeded: Vec<&String> = r
        .ours
        .iter()
        .filter(|(_, _, code)| *code == 200)
        .map(|(path, _, _)| path)
        .collect();
    eprintln!(
        "maxUnavailable rollout ({policy}, gate off): {:?}, max unavailable {}, {} store changes checked, \
         controller deletions {} ({} sent), built-in deletions {:?}",
        r.elapsed,
        o.max_unavailable,
        o.changes,
        succeeded.len(),
        r.ours.len(),
        r.builtin
    );
    assert!(o.over_budget.is_empty(), "over budget: {:?}", o.over_budget);
    assert!(
        o.touched_below_partition.is_empty(),
        "{:?}",
        o.touched_below_partition
    );
    assert_eq!(
        o.max_unavailable, MAX_UNAVAILABLE,
        "the driver uses the whole budget"
    );
    assert_eq!(
        succeeded.len() + r.builtin.len(),
        (REPLICAS - PARTITION) as usize,
        "each pod from the partition up is replaced exactly once: ours {succeeded:?}, built-in {:?}",
        r.builtin
    );
    assert!(!succeeded.is_empty(), "the controller deleted pods");
    for (path, body, _) in &r.ours {
        let ordinal: u32 = path
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a pod path");
        assert!(ordinal >= PARTITION, "{path}");
        let body = body.as_ref().expect("DeleteOptions");
        assert!(
            body.pointer("/preconditions/uid").is_some()
                && body.pointer("/preconditions/resourceVersion").is_some(),
            "{path}: {body}"
        );
    }
    assert_eq!(
        metric_line(
            &r.metrics,
            &format!("statefulset_max_unavailable{{namespace=\"{NS}\",name=\"{SET}\",pod_management_policy=\"{policy}\"}}")
        )
        .as_deref()
        .map(|l| l.ends_with(" 2")),
        Some(true),
        "{}",
        r.metrics
    );
    assert!(
        r.metrics.contains("statefulset_unavailable_replicas{"),
        "{}",
        r.metrics
    );
}

/// A probe that fails (the webhook unreachable, the apiserver restarting) is retried within
/// seconds, and the rollout gets its budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_probe_that_fails_a_few_times_is_retried_within_seconds_and_the_budget_is_driven() {
    let r = roll_with("OrderedReady", true, Probes::FailFirst(3)).await;
    assert!(
        r.metrics
            .contains("max_unavailable_gate_probes_total{result=\"error\"} 3"),
        "{}",
        r.metrics
    );
    check_gate_off_rollout("OrderedReady", r);
}

/// With every probe failing, a set whose stored object shows the field dropped (its owner in
/// managedFields, the field gone) still has its budget driven.
#[tokio::test(flavor = "multi_thread")]
async fn while_the_probe_fails_a_set_that_shows_the_field_dropped_is_driven() {
    let r = roll_with("OrderedReady", true, Probes::FailAlways).await;
    check_gate_off_rollout("OrderedReady", r);
}

/// Without evidence (the annotation alone, which a user may have written) and without an
/// answer, the set is told why its budget waits; once the probe answers it is driven at once.
#[tokio::test(flavor = "multi_thread")]
async fn without_evidence_a_set_is_told_why_and_driven_once_the_gate_is_known() {
    let api = FakeApiServer::start().await;
    api.configure(|c| c.drop_statefulset_max_unavailable = true);
    let mut set = web("OrderedReady");
    if let Some(r) = set
        .spec
        .update_strategy
        .as_mut()
        .and_then(|s| s.rolling_update.as_mut())
    {
        r.max_unavailable = None;
    }
    let sim = running(&api, &set, true).await;
    api.fail_next("POST", GATE_PROBE, 500, usize::MAX);
    // A resync longer than the test: only the gate being learned can explain a prompt drive.
    let cfg = ControllerConfig {
        resync: Duration::from_secs(3600),
        ..driver_config("replica-a")
    };
    let controller = RunningController::start_with(
        &api,
        cfg,
        capabilities::run::Settings {
            retry_cap: Duration::from_millis(300),
            ..crate::support::controller::prober()
        },
    );
    assert!(
        eventually(Duration::from_secs(10), || controller
            .metrics()
            .contains("max_unavailable_gate_probes_total{result=\"error\"}"))
        .await
    );
    update_image(&api).await;
    let not_driven = || {
        api.list::<k8s_openapi::api::events::v1::Event>()
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("MaxUnavailableNotDriven"))
            .collect::<Vec<_>>()
    };
    assert!(eventually(Duration::from_secs(10), || !not_driven().is_empty()).await);
    let event = &not_driven()[0];
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.starts_with("maxUnavailable 2 is not driven yet")
            && note.contains("the probe failed")
            && note.contains("500"),
        "{note}"
    );
    assert!(
        pod_deletions(&api).is_empty(),
        "nothing deleted without the gate"
    );
    // The apiserver answers: the deferred set is looked at once the gate is learned, not at
    // its resync (an hour); how soon is for a benchmark.
    api.clear_faults();
    assert!(
        eventually(Duration::from_secs(60), || !pod_deletions(&api).is_empty()).await,
        "driven once the gate is known"
    );
    assert!(eventually(Duration::from_secs(30), || rolled_out(&api)).await);
    assert_eq!(not_driven().len(), 1, "said once");
    controller.stop().await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ordered_ready_rollout_keeps_to_max_unavailable_where_the_gate_is_off() {
    rollout_with_the_gate_off("OrderedReady").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_rollout_keeps_to_max_unavailable_where_the_gate_is_off() {
    rollout_with_the_gate_off("Parallel").await;
}

/// Where the gate is on the built-in controller honours the field; the driver deletes
/// nothing (here the simulated built-in controller goes one at a time: the baseline).
#[tokio::test(flavor = "multi_thread")]
async fn where_the_gate_is_on_the_driver_leaves_the_rollout_alone() {
    let r = roll("OrderedReady", false).await;
    eprintln!(
        "baseline rollout (driver idle, one at a time): {:?}, max unavailable {}, built-in deletions {:?}",
        r.elapsed, r.observed.max_unavailable, r.builtin
    );
    assert!(r.ours.is_empty(), "no deletion: {:?}", r.ours);
    assert_eq!(r.observed.max_unavailable, 1);
    assert_eq!(r.builtin.len(), (REPLICAS - PARTITION) as usize);
    assert!(
        !r.metrics.contains("statefulset_max_unavailable{"),
        "no series for sets the driver does not drive: {}",
        r.metrics
    );
}

/// A controller stopped right after its first batch is replaced by another replica, which
/// keeps no state and plans from what it sees: the budget holds across the handover and the
/// rollout completes. (`kill` would leave the killed replica's feature tasks running in this
/// process, so the handover is a clean stop.)
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_mid_rollout_neither_breaks_the_budget_nor_stalls() {
    let api = FakeApiServer::start().await;
    api.configure(|c| c.drop_statefulset_max_unavailable = true);
    // Without the built-in controller's own deletions only the driver can finish.
    let sim = running_set(&api, "Parallel", false).await;
    let first = RunningController::start(&api, driver_config("replica-a"));
    assert!(
        eventually(Duration::from_secs(10), || first
            .metrics()
            .contains("max_unavailable_gate_enabled 0"))
        .await
    );
    let below = uids_below_partition(&api);
    let (observed, watcher) = watch_invariants(&api);
    update_image(&api).await;
    assert!(
        eventually(Duration::from_secs(10), || !pod_deletions(&api).is_empty()).await,
        "the first batch starts"
    );
    first.stop().await;
    let second = RunningController::start(&api, driver_config("replica-b"));
    assert!(
        eventually(Duration::from_secs(30), || rolled_out(&api)).await,
        "the rollout completes after the takeover"
    );
    second.nudge_and_settle(&api, NS, SET).await;
    assert!(second.is_leader());
    assert_eq!(uids_below_partition(&api), below);
    let deleted: Vec<u16> = pod_deletions(&api)
        .into_iter()
        .map(|(_, _, code)| code)
        .collect();
    assert_eq!(
        deleted.iter().filter(|c| **c == 200).count(),
        3,
        "each of pods 3, 4, 5 deleted once across both replicas: {deleted:?}"
    );
    second.stop().await;
    sim.stop().await;
    watcher.catch_up();
    let o = observed.lock().unwrap_or_else(|p| p.into_inner());
    assert!(o.over_budget.is_empty(), "{:?}", o.over_budget);
    assert!(
        o.touched_below_partition.is_empty(),
        "{:?}",
        o.touched_below_partition
    );
    assert!(o.max_unavailable <= MAX_UNAVAILABLE);
}

/// What the gate probe's requests have in their path: a create of a StatefulSet in the
/// controller namespace (with a query: the dry run).
const GATE_PROBE: &str = "/namespaces/stateful-admission/statefulsets?";

/// Dry-run creates of StatefulSets in the controller namespace.
fn probes(api: &FakeApiServer) -> Vec<bool> {
    api.requests()
        .into_iter()
        .filter(|r| {
            r.method == "POST"
                && r.path == format!("/apis/apps/v1/namespaces/{CONTROLLER_NAMESPACE}/statefulsets")
        })
        .map(|r| r.is_dry_run())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_gate_probe_tells_both_answers_and_stores_nothing() {
    for (drop, want) in [(true, GateStatus::Disabled), (false, GateStatus::Enabled)] {
        let api = FakeApiServer::start().await;
        api.configure(|c| c.drop_statefulset_max_unavailable = drop);
        let controller = RunningController::start(&api, driver_config("replica-a"));
        let line = format!("max_unavailable_gate_enabled {}", want.metric_value());
        assert!(
            eventually(Duration::from_secs(10), || controller
                .metrics()
                .contains(&line))
            .await,
            "drop {drop}: {}",
            controller.metrics()
        );
        let result = format!(
            "max_unavailable_gate_probes_total{{result=\"{}\"}} 1",
            want.as_str()
        );
        // The probe is counted after the gate is recorded.
        assert!(
            eventually(Duration::from_secs(10), || controller
                .metrics()
                .contains(&result))
            .await,
            "{}",
            controller.metrics()
        );
        assert_eq!(probes(&api), [true], "one probe, a dry run");
        assert!(api.list::<StatefulSet>().is_empty(), "nothing stored");
        controller.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_probe_leaves_the_gate_unknown_and_is_retried() {
    let api = FakeApiServer::start().await;
    api.configure(|c| c.drop_statefulset_max_unavailable = true);
    api.fail_next("POST", GATE_PROBE, 500, 1);
    let cfg = driver_config("replica-a");
    let controller = RunningController::start_with(
        &api,
        cfg,
        capabilities::run::Settings {
            // The first retry comes a second after the error: the window to see it unknown.
            retry_cap: Duration::from_secs(1),
            ..crate::support::controller::prober()
        },
    );
    // The first snapshot that shows the error shows the gate unknown too.
    let mut after_error = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            after_error = controller.metrics();
            after_error.contains("max_unavailable_gate_probes_total{result=\"error\"} 1")
        })
        .await
    );
    assert!(
        after_error.contains("max_unavailable_gate_enabled -1"),
        "{after_error}"
    );
    assert!(
        eventually(Duration::from_secs(15), || controller
            .metrics()
            .contains("max_unavailable_gate_enabled 0"))
        .await,
        "the probe is retried: {}",
        controller.metrics()
    );
    assert_eq!(probes(&api), [true, true]);
    controller.stop().await;
}

/// A probe refused by authorization (a webhook-only install's RBAC, a policy) is asked again
/// with backoff until it answers, as the RBAC may be fixed; meanwhile the capability says why.
#[tokio::test(flavor = "multi_thread")]
async fn a_forbidden_probe_is_retried_until_allowed() {
    let api = FakeApiServer::start().await;
    api.configure(|c| c.drop_statefulset_max_unavailable = true);
    api.fail_next("POST", GATE_PROBE, 403, 2);
    let controller = RunningController::start_with(
        &api,
        driver_config("replica-a"),
        capabilities::run::Settings {
            retry_cap: Duration::from_millis(200),
            ..crate::support::controller::prober()
        },
    );
    assert!(
        eventually(Duration::from_secs(10), || controller
            .metrics()
            .contains(r#"max_unavailable_gate_probes_total{result="error"} 2"#))
        .await,
        "{}",
        controller.metrics()
    );
    assert!(
        eventually(Duration::from_secs(10), || controller.metrics().contains(
            r#"capability{capability="max-unavailable",value="dropped",source="probe"} 1"#
        ))
        .await,
        "learned once allowed: {}",
        controller.metrics()
    );
    assert_eq!(probes(&api), [true, true, true]);
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gate_set_by_flag_is_known_at_once_and_never_probed() {
    let api = FakeApiServer::start().await;
    let cfg = driver_config("replica-a");
    let controller = RunningController::start_with(
        &api,
        cfg,
        capabilities::run::Settings {
            flags: vec![(
                capabilities::Name::MaxUnavailable,
                capabilities::Value::Dropped,
            )],
            ..crate::support::controller::prober()
        },
    );
    assert!(
        controller
            .metrics()
            .contains("max_unavailable_gate_enabled 0")
    );
    assert!(eventually(Duration::from_secs(15), || controller.is_leader()).await);
    // The prober's first round is recorded (other capabilities probed): a gate probe would
    // have been sent in it.
    assert!(
        eventually(Duration::from_secs(30), || controller
            .metrics()
            .lines()
            .any(|l| l.starts_with("capability_probes_total{")))
        .await,
        "{}",
        controller.metrics()
    );
    assert!(probes(&api).is_empty());
    controller.stop().await;
}

/// Writes what the rules see of the gate into a warning.
fn echo_gate(
    _phase: admission::Phase,
    _req: &kube::core::admission::AdmissionRequest<kube::core::DynamicObject>,
    ctx: &admission::Context<'_>,
) -> admission::Verdict {
    let mut verdict = admission::Verdict::allow();
    verdict.warn(format!(
        "gate={} fallback={}",
        ctx.policy.max_unavailable_gate().as_str(),
        ctx.policy.needs_max_unavailable_fallback()
    ));
    verdict
}

/// In `serve` the webhook reads the cell the controller's probe writes.
#[tokio::test]
async fn the_webhook_reads_the_gate_the_controller_probed() {
    use prometheus_client::registry::Registry;
    use stateful_admission::cluster::ClusterView;
    use stateful_admission::server::metrics::Metrics;
    use stateful_admission::server::routes::{self, AdmissionState};

    let gate = CapabilityCell::default();
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let mut state =
        AdmissionState::new(ClusterView::empty(), admission::Policy::default(), metrics)
            .with_capabilities(gate.clone());
    state.evaluator = echo_gate;
    let app = routes::router(Arc::new(state));
    let review = stateful_admission::review::builder::ReviewBuilder::statefulset("CREATE")
        .object(serde_json::to_value(web("OrderedReady")).expect("json"))
        .into_json();
    let mut seen = Vec::new();
    for status in [
        GateStatus::Unknown,
        GateStatus::Disabled,
        GateStatus::Enabled,
    ] {
        gate.update(|c| {
            *c = common::capabilities_with_gate(status);
            true
        });
        let response = common::review_response(&app, "/mutate", &review).await;
        seen.push(
            response["warnings"][0]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert_eq!(
        seen,
        [
            "gate=unknown fallback=true",
            "gate=disabled fallback=true",
            "gate=enabled fallback=false",
        ]
    );
    // The flag still turns the fallback off whatever the gate.
    let off = admission::Policy {
        max_unavailable_fallback: false,
        ..admission::Policy::default()
    };
    assert!(!off.needs_max_unavailable_fallback());
}

/// The controller's `events.k8s.io` Events about the set, by reason.
#[tokio::test(flavor = "multi_thread")]
async fn each_batch_is_reported_in_an_event() {
    let api = FakeApiServer::start().await;
    api.configure(|c| c.drop_statefulset_max_unavailable = true);
    let sim = running_set(&api, "Parallel", false).await;
    let controller = RunningController::start(&api, driver_config("replica-a"));
    assert!(
        eventually(Duration::from_secs(10), || controller
            .metrics()
            .contains("max_unavailable_gate_enabled 0"))
        .await
    );
    update_image(&api).await;
    assert!(eventually(Duration::from_secs(30), || rolled_out(&api)).await);
    let notes: Vec<String> = eventually_events(&api).await;
    assert!(
        notes.iter().any(|n| n.starts_with("Deleted web-5, web-4 for the update to revision web-rev2 (maxUnavailable 2, 0 unavailable before)")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.starts_with("Deleted web-3 ")),
        "{notes:?}"
    );
    let stats = sim.stop().await;
    assert!(
        stats.deleted_by_builtin.is_empty(),
        "the built-in update was off here"
    );
    controller.stop().await;
}

async fn eventually_events(api: &FakeApiServer) -> Vec<String> {
    let notes = || -> Vec<String> {
        api.list_objects(&resources::EVENTS)
            .into_iter()
            .filter(|e| e["reason"] == "MaxUnavailableBatch")
            .filter_map(|e| e["note"].as_str().map(str::to_owned))
            .collect()
    };
    eventually(Duration::from_secs(15), || notes().len() >= 2).await;
    notes()
}

// ------------------------------------------------- one restart per pod, whatever the spelling

/// Replicas of the sets below, as in the rollout reported from a real v1.32 control plane.
const SPELLED_REPLICAS: u32 = 5;

/// The ways a user asks for maxUnavailable 2 where the apiserver's gate is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spelling {
    /// `updateStrategy: {type: RollingUpdate}` without `rollingUpdate`, and the annotation:
    /// defaulting leaves `rollingUpdate` nil.
    TypeOnly,
    /// `rollingUpdate: {maxUnavailable: 2}`: the apiserver drops the field and defaults the
    /// partition; the webhook keeps the value in the annotation.
    NativeField,
    /// No update strategy at all, and the annotation: defaulting gives
    /// `{type: RollingUpdate, rollingUpdate: {partition: 0}}`.
    EmptyType,
}

/// The set as the user writes it.
fn spelled(spelling: Spelling, policy: &str) -> Value {
    let mut set = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": SET, "namespace": NS},
        "spec": {
            "replicas": SPELLED_REPLICAS,
            "serviceName": SET,
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": SET}},
            "template": {"metadata": {"labels": {"app": SET}},
                         "spec": {"containers": [{"name": "app", "image": "app:1"}]}},
        },
    });
    let annotation = json!({"stateful-admission.io/max-unavailable": "2"});
    match spelling {
        Spelling::TypeOnly => {
            set["metadata"]["annotations"] = annotation;
            set["spec"]["updateStrategy"] = json!({"type": "RollingUpdate"});
        }
        Spelling::NativeField => {
            set["spec"]["updateStrategy"] =
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}});
        }
        Spelling::EmptyType => set["metadata"]["annotations"] = annotation,
    }
    set
}

/// `set` as the mutating webhook leaves it on CREATE, where the controller found the gate off:
/// the rules run on an AdmissionReview shaped like the apiserver's, and their patch is applied
/// (the fake API server has no admission of its own).
fn admitted(set: Value) -> Value {
    let review = stateful_admission::review::builder::ReviewBuilder::statefulset("CREATE")
        .object(set)
        .into_json();
    let view = stateful_admission::cluster::ClusterView::empty();
    let policy = admission::Policy::default().with_capabilities(Arc::new(
        common::capabilities_with_gate(GateStatus::Disabled),
    ));
    let ctx = admission::Context {
        view: &view,
        policy: &policy,
    };
    let outcome = stateful_admission::review::offline::review(
        &serde_json::to_vec(&review).expect("json"),
        stateful_admission::review::offline::Phases::Only(admission::Phase::Mutate),
        &ctx,
    )
    .expect("the webhook answers");
    assert!(outcome.allowed, "{}", outcome.review);
    outcome.object.expect("the set")
}

/// Pod deletions of one rollout, by pod: the driver's (through the API) and the built-in
/// controller's (in the simulation).
struct Restarts {
    by_pod: BTreeMap<String, usize>,
    ours: usize,
    builtin: usize,
    observed: Observed,
    notes: Vec<String>,
}

/// Creates `set` (through the webhook when `webhook`), runs the driver and the simulated
/// built-in controller with the gate off, updates the image and counts the deletions per pod
/// until every replica runs the update revision.
async fn restarts(set: Value, webhook: bool) -> Restarts {
    let api = FakeApiServer::start().await;
    api.configure(|c| c.drop_statefulset_max_unavailable = true);
    let set = if webhook { admitted(set) } else { set };
    let set: StatefulSet = serde_json::from_value(set).expect("a valid StatefulSet");
    let sim = running(&api, &set, true).await;
    let controller = RunningController::start(&api, driver_config("replica-a"));
    assert!(
        eventually(Duration::from_secs(10), || controller
            .metrics()
            .contains("max_unavailable_gate_enabled 0"))
        .await,
        "the gate is probed"
    );
    let (observed, watcher) = watch_set(&api, SPELLED_REPLICAS, 0, 2);
    api.clear_requests();
    update_image(&api).await;
    let done = eventually(Duration::from_secs(30), || {
        (0..SPELLED_REPLICAS).all(|n| {
            api.get_object(ResourceType::of::<Pod>(), NS, &pod_name(n))
                .is_some_and(|p| pod_is_available(&p) && pod_revision(&p) == Some("web-rev2"))
        })
    })
    .await;
    // What happens after the last pod is replaced counts too (a pod back at the old revision
    // would be deleted again): the driver looked since (its resync is 30 s: nudged).
    if done {
        controller.nudge_and_settle(&api, NS, SET).await;
    }
    let ours: Vec<String> = pod_deletions(&api)
        .into_iter()
        .filter(|(_, _, code)| *code == 200)
        .filter_map(|(path, _, _)| path.rsplit('/').next().map(str::to_owned))
        .collect();
    let notes: Vec<String> = api
        .list_objects(&resources::EVENTS)
        .into_iter()
        .filter(|e| e["type"] == "Warning")
        .filter_map(|e| {
            Some(format!(
                "{}: {}",
                e["reason"].as_str()?,
                e["note"].as_str()?
            ))
        })
        .collect();
    controller.stop().await;
    let stats = sim.stop().await;
    watcher.catch_up();
    let mut by_pod: BTreeMap<String, usize> =
        (0..SPELLED_REPLICAS).map(|n| (pod_name(n), 0)).collect();
    for pod in ours.iter().chain(&stats.deleted_by_builtin) {
        *by_pod.entry(pod.clone()).or_default() += 1;
    }
    let observed = std::mem::take(&mut *observed.lock().unwrap_or_else(|p| p.into_inner()));
    assert!(done, "the rollout completes: deletions so far {by_pod:?}");
    Restarts {
        by_pod,
        ours: ours.len(),
        builtin: stats.deleted_by_builtin.len(),
        observed,
        notes,
    }
}

/// Each pod is deleted exactly once for the update, within the budget, and the driver used it.
async fn each_pod_restarts_once(spelling: Spelling, policy: &str) {
    let r = restarts(spelled(spelling, policy), true).await;
    eprintln!(
        "{spelling:?} ({policy}): deletions per pod {:?} (driver {}, built-in {}), max unavailable {}",
        r.by_pod, r.ours, r.builtin, r.observed.max_unavailable
    );
    let once: BTreeMap<String, usize> = (0..SPELLED_REPLICAS).map(|n| (pod_name(n), 1)).collect();
    assert_eq!(
        r.by_pod, once,
        "{spelling:?} ({policy}): one restart per pod"
    );
    assert!(
        r.observed.over_budget.is_empty(),
        "{:?}",
        r.observed.over_budget
    );
    assert_eq!(
        r.observed.max_unavailable, 2,
        "{spelling:?}: the budget is used"
    );
    assert!(r.ours > 0, "the driver deleted pods");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_type_only_strategy_restarts_each_pod_once() {
    each_pod_restarts_once(Spelling::TypeOnly, "OrderedReady").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_type_only_strategy_restarts_each_pod_once_under_parallel() {
    each_pod_restarts_once(Spelling::TypeOnly, "Parallel").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_native_field_restarts_each_pod_once() {
    each_pod_restarts_once(Spelling::NativeField, "OrderedReady").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_type_restarts_each_pod_once() {
    each_pod_restarts_once(Spelling::EmptyType, "OrderedReady").await;
}

/// A set the webhook never saw (created before the install, or while the webhook was down)
/// keeps `rollingUpdate` nil: the driver deletes no pod that would come back at the old
/// revision, so the built-in controller's one-at-a-time update is all that happens, and the
/// set is reported once.
#[tokio::test(flavor = "multi_thread")]
async fn a_set_the_webhook_never_saw_is_left_to_the_builtin_update_and_reported() {
    let r = restarts(spelled(Spelling::TypeOnly, "OrderedReady"), false).await;
    eprintln!(
        "TypeOnly without the webhook: deletions per pod {:?} (driver {}, built-in {}), max unavailable {}, events {:?}",
        r.by_pod, r.ours, r.builtin, r.observed.max_unavailable, r.notes
    );
    let once: BTreeMap<String, usize> = (0..SPELLED_REPLICAS).map(|n| (pod_name(n), 1)).collect();
    assert_eq!(r.by_pod, once, "one restart per pod");
    assert_eq!(
        r.ours, 0,
        "the driver deletes nothing that would come back old"
    );
    assert_eq!(r.observed.max_unavailable, 1);
    let reported: Vec<&String> = r
        .notes
        .iter()
        .filter(|n| n.starts_with("MaxUnavailableNeedsRollingUpdate: "))
        .collect();
    assert_eq!(reported.len(), 1, "reported once: {:?}", r.notes);
    assert!(
        reported[0].contains("rollingUpdate: {partition: 0}"),
        "{}",
        reported[0]
    );
}
