//! Expansions that wait for a pod restart, end to end: the real controller against the fake
//! API server with its Eviction subresource and PodDisruptionBudgets, the StatefulSet
//! simulation (the built-in controller and kubelet bring evicted pods back) and the
//! offline-expansion resizer (a claim's file system grows only once its pod is re-created).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use serde_json::{Value, json};
use stateful_admission::controller::ControllerConfig;
use stateful_admission::names;

use crate::claim_rollout::{NS, class, fast, features, set};
use crate::support::barrier::{Peak, wall_clock_past};
use crate::support::controller::{RunningController, eventually};
use crate::support::fake_apiserver::{FakeApiServer, ResourceType};
use crate::support::offline_resizer::{OfflineResizer, ResizerConfig, resize_pending};
use crate::support::statefulset_sim::{SimConfig, StatefulSetSim, pod_is_available};

const WAIT: Duration = Duration::from_secs(30);

/// The controller with the claim rollout, restarts for a resize off by default (sets opt in by
/// annotation) and a grace of `grace`.
fn controller(identity: &str, grace: Duration) -> ControllerConfig {
    ControllerConfig {
        resize_restart_grace: grace,
        ..fast(identity, features(false))
    }
}

/// The resizer of a driver without online expansion, its node side at mount (see [`install`]).
fn resizer() -> ResizerConfig {
    ResizerConfig {
        grow_at_mount: true,
        ..ResizerConfig::default()
    }
}

/// An `InPlace` set `web` of three replicas asking for 2Gi with `extra` annotations, its bound
/// 1Gi claims and their volumes, the built-in StatefulSet controller and kubelet simulated
/// (pods created and made Ready), and a budget of one unavailable pod, as a chart ships it.
/// The kubelet grows a waiting file system as it mounts the volume, before the pod turns
/// Ready (with [`resizer`]), as a real one does: no grace has to outlast a loaded machine.
async fn install(
    api: &FakeApiServer,
    extra: &[(&str, &str)],
    change: impl FnOnce(&mut Value),
) -> StatefulSetSim {
    api.put_object(class("fast", true));
    let mut annotations = vec![(names::VOLUME_CLAIM_UPDATE_POLICY, "InPlace")];
    annotations.extend_from_slice(extra);
    let mut web = set("web", 3, "fast", Some("2Gi"), &annotations);
    change(&mut web);
    api.put_object(web);
    for n in 0..3 {
        api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("pv-web-{n}")},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": "fast",
                     "csi": {"driver": "offline.csi.example.com", "volumeHandle": format!("h-{n}")}}}));
        api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": format!("data-web-{n}"), "namespace": NS, "labels": {"app": "web"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                     "resources": {"requests": {"storage": "1Gi"}}, "volumeName": format!("pv-web-{n}")},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}));
    }
    api.put_object(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
    );
    let sim = StatefulSetSim::start(
        &api.clone(),
        NS,
        "web",
        SimConfig {
            mount_grows_file_systems: true,
            ..SimConfig::default()
        },
        false,
    );
    assert!(
        eventually(WAIT, || available(api) == 3).await,
        "three Ready pods"
    );
    sim
}

fn available(api: &FakeApiServer) -> usize {
    (0..3)
        .filter(|n| {
            api.get_object(ResourceType::of::<Pod>(), NS, &format!("web-{n}"))
                .is_some_and(|p| pod_is_available(&p))
        })
        .count()
}

fn claim(api: &FakeApiServer, name: &str) -> Value {
    api.get_object(ResourceType::of::<PersistentVolumeClaim>(), NS, name)
        .unwrap_or(Value::Null)
}

fn capacity(api: &FakeApiServer, name: &str) -> String {
    claim(api, name)["status"]["capacity"]["storage"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn request(api: &FakeApiServer, name: &str) -> String {
    claim(api, name)["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn record(api: &FakeApiServer, name: &str) -> Option<Value> {
    claim(api, name)["metadata"]["annotations"][names::RESIZE_RESTART]
        .as_str()
        .and_then(|r| serde_json::from_str(r).ok())
}

fn pod_uid(api: &FakeApiServer, pod: &str) -> Option<String> {
    api.get::<Pod>(NS, pod).and_then(|p| p.metadata.uid)
}

fn events(api: &FakeApiServer, reason: &str) -> Vec<Event> {
    api.list::<Event>()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// Deletes of pods anyone made through the API (the simulation's own go through the store).
fn pod_deletes(api: &FakeApiServer) -> Vec<String> {
    api.writes()
        .iter()
        .filter(|w| w.method == "DELETE" && w.path.contains("/pods/"))
        .map(|w| w.path.clone())
        .collect()
}

fn evicted_in_order(api: &FakeApiServer) -> Vec<String> {
    api.eviction_records()
        .into_iter()
        .filter(|r| r.evicted())
        .map(|r| r.pod)
        .collect()
}

async fn all_grown(api: &FakeApiServer) -> bool {
    eventually(WAIT, || {
        (0..3).all(|n| capacity(api, &format!("data-web-{n}")) == "2Gi")
    })
    .await
}

/// The most pods of `web` unavailable at once, over every state the pods went through.
fn peak_unavailable(api: &FakeApiServer) -> Peak {
    Peak::track(api, ResourceType::of::<Pod>(), NS, |pods| {
        3 - (0..3)
            .filter(|n| pods.get(&format!("web-{n}")).is_some_and(pod_is_available))
            .count()
    })
}

/// Waits until the controller would call `claim`'s wait for a restart longer than `grace`
/// (from its `FileSystemResizePending` time, or its pod's Ready time where later, each read a
/// second early as the controller reads whole-second times), then for a reconcile after that.
async fn past_the_grace(
    api: &FakeApiServer,
    controller: &RunningController,
    claim_name: &str,
    grace: Duration,
) {
    let stored = claim(api, claim_name);
    let time = |t: &Value| t.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let pending = stored["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "FileSystemResizePending")
        .and_then(|c| time(&c["lastTransitionTime"]))
        .unwrap_or_else(|| panic!("{claim_name} waits for a restart: {stored}"));
    let pod = format!("web-{}", claim_name.rsplit('-').next().unwrap_or_default());
    let ready = api
        .get_object(ResourceType::of::<Pod>(), NS, &pod)
        .and_then(|p| {
            p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")
                .and_then(|c| time(&c["lastTransitionTime"]))
        });
    let since = ready.map_or(pending, |ready| ready.max(pending));
    wall_clock_past(since + grace + Duration::from_secs(1)).await;
    controller.settle().await;
}

/// The revision at which each claim `data-web-N` first had `size`, and the one at which a pod
/// `web-N` other than `originals`' first turned Ready, from the fake's record of changes
/// after `from`.
fn grown_and_ready(
    api: &FakeApiServer,
    from: u64,
    originals: &BTreeMap<u32, Option<String>>,
) -> BTreeMap<u32, (Option<u64>, Option<u64>)> {
    let mut seen: BTreeMap<u32, (Option<u64>, Option<u64>)> = BTreeMap::new();
    let changes = api
        .changes_since(from)
        .expect("the fake's history reaches the start of the rollout");
    for change in changes {
        let object = &change.object;
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let ordinal = |prefix: &str| name.strip_prefix(prefix)?.parse::<u32>().ok();
        if change.resource == ResourceType::of::<PersistentVolumeClaim>()
            && object["status"]["capacity"]["storage"] == "2Gi"
            && let Some(n) = ordinal("data-web-")
        {
            seen.entry(n)
                .or_default()
                .0
                .get_or_insert(change.resource_version);
        }
        if change.resource == ResourceType::of::<Pod>()
            && let Some(n) = ordinal("web-")
            && object["metadata"]["uid"].as_str() != originals[&n].as_deref()
            && pod_is_available(object)
        {
            seen.entry(n)
                .or_default()
                .1
                .get_or_insert(change.resource_version);
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn offline_expansions_restart_each_pod_once_highest_first_within_the_budget() {
    let grace = Duration::from_secs(1);
    let api = FakeApiServer::start().await;
    let sim = install(&api, &[(names::RESTART_PODS_FOR_RESIZE, "true")], |_| {}).await;
    // The disruption budget allows two: the set's own (maxUnavailable, 1) is what keeps the
    // restarts to one pod down at a time, not a refusal of the Eviction API.
    api.put_object(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
    );
    // The new pods of web-2 and web-1 stay Pending until the test lets them start, so that
    // the next claim's grace passes while its replica is the only one up to go.
    sim.hold_ready("web-2");
    sim.hold_ready("web-1");
    let resizer = OfflineResizer::start(&api, NS, resizer());
    let originals: BTreeMap<u32, Option<String>> = (0..3)
        .map(|n| (n, pod_uid(&api, &format!("web-{n}"))))
        .collect();
    let peak = peak_unavailable(&api);
    let start = api.resource_version();
    let controller = RunningController::start(&api, controller("a", grace));

    // web-N restarted, its claim grown as the new pod mounted it, the pod not Ready yet; the
    // next claim waits past its grace and the controller has looked since: its pod is not
    // evicted while web-N is down.
    for (down, next) in [(2, 1), (1, 0)] {
        let (grown, waiting) = (format!("data-web-{down}"), format!("data-web-{next}"));
        assert!(
            eventually(WAIT, || capacity(&api, &grown) == "2Gi"
                && resize_pending(&claim(&api, &waiting)))
            .await,
            "{grown} grown and {waiting} waiting for a restart: {} {}",
            claim(&api, &grown)["status"],
            claim(&api, &waiting)["status"]
        );
        past_the_grace(&api, &controller, &waiting, grace).await;
        assert_eq!(
            peak.get(),
            1,
            "web-{down} down and {waiting} past its grace: one pod down at a time ({:?})",
            evicted_in_order(&api)
        );
        sim.release_ready(&format!("web-{down}"));
    }

    assert!(
        all_grown(&api).await,
        "every claim grows: {:?}",
        (0..3)
            .map(|n| claim(&api, &format!("data-web-{n}"))["status"].clone())
            .collect::<Vec<_>>()
    );
    assert!(
        eventually(WAIT, || available(&api) == 3
            && (0..3).all(|n| record(&api, &format!("data-web-{n}")).is_none()))
        .await,
        "every pod back and every restart's record gone"
    );
    assert_eq!(peak.get(), 1, "one pod down at a time");
    assert_eq!(
        evicted_in_order(&api),
        ["web-2", "web-1", "web-0"],
        "highest ordinal first, each once"
    );
    // Each file system grew before its new pod turned Ready, as a kubelet mounts: the
    // controller never saw a new pod Ready beside a claim still waiting, whatever the grace.
    let order = grown_and_ready(&api, start, &originals);
    assert!(
        (0..3).all(|n| matches!(order.get(&n), Some((Some(grown), Some(ready))) if grown < ready)),
        "revisions (grown, new pod Ready) per ordinal: {order:?}"
    );
    // Each eviction met the pod the claim waited with, and no budget refused one: the next
    // waited for the re-created pod to be available.
    for r in api.eviction_records() {
        let ordinal: u32 = r.pod.trim_start_matches("web-").parse().expect("ordinal");
        assert_eq!(r.code, 201, "{r:?}");
        assert_eq!(r.uid, originals[&ordinal], "{r:?}");
    }
    assert!(pod_deletes(&api).is_empty(), "{:?}", pod_deletes(&api));
    let stats = resizer.stop().await;
    assert_eq!(
        stats.restarts,
        [
            ("web-0".to_owned(), 1),
            ("web-1".to_owned(), 1),
            ("web-2".to_owned(), 1)
        ]
        .into()
    );
    assert_eq!(stats.completed, ["data-web-2", "data-web-1", "data-web-0"]);
    let told = events(&api, "PodEvictedForResize");
    assert_eq!(told.len(), 3, "{told:?}");
    assert!(
        told.iter().all(
            |e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("web")
                && e.related
                    .as_ref()
                    .is_some_and(|r| r.kind.as_deref() == Some("Pod"))
        ),
        "{told:?}"
    );
    assert!(events(&api, "ResizeNotFinishedAfterRestart").is_empty());
    assert!(
        eventually(WAIT, || {
            api.get::<StatefulSet>(NS, "web")
                .and_then(|s| s.metadata.annotations)
                .and_then(|a| a.get(names::VOLUME_CLAIM_STATUS).cloned())
                .is_some_and(|s| s.contains(r#""compatible":3,"updating":0"#))
        })
        .await
    );
    assert_eq!(controller.metric("claim_pod_evictions_total"), 3.0);
    assert_eq!(controller.metric("claim_pod_eviction_refusals_total"), 0.0);
    controller.stop().await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_opt_in_no_pod_is_evicted_and_the_set_is_told_once() {
    let api = FakeApiServer::start().await;
    let sim = install(&api, &[], |_| {}).await;
    let _resizer = OfflineResizer::start(&api, NS, resizer());
    let controller = RunningController::start(&api, controller("a", Duration::from_secs(1)));

    assert!(
        eventually(WAIT, || events(&api, "PodRestartNeededForResize").len()
            == 1)
        .await,
        "the set is told"
    );
    let told = &events(&api, "PodRestartNeededForResize")[0];
    let note = told.note.as_deref().unwrap_or_default();
    assert!(
        note.contains("data-web-2") && note.contains("kubectl delete pod -n db web-2"),
        "{note}"
    );
    assert!(note.contains(names::RESTART_PODS_FOR_RESIZE), "{note}");
    // Past the grace, and looked at since: nothing restarted, the rollout holds at the first
    // claim.
    past_the_grace(&api, &controller, "data-web-2", Duration::from_secs(1)).await;
    assert!(api.eviction_records().is_empty());
    assert!(pod_deletes(&api).is_empty());
    assert!(record(&api, "data-web-2").is_none());
    assert!(resize_pending(&claim(&api, "data-web-2")));
    assert_eq!(request(&api, "data-web-1"), "1Gi");
    let told = events(&api, "PodRestartNeededForResize");
    assert!(
        told.len() == 1 && told[0].series.is_none(),
        "told once: {told:?}"
    );

    // The user restarts it: the claim grows and the rollout goes on to the next one.
    api.remove::<Pod>(NS, "web-2");
    assert!(
        eventually(WAIT, || capacity(&api, "data-web-2") == "2Gi"
            && request(&api, "data-web-1") == "2Gi")
        .await
    );
    assert!(
        eventually(WAIT, || events(&api, "PodRestartNeededForResize").len()
            == 2)
        .await,
        "web-1 named next"
    );
    assert!(api.eviction_records().is_empty());
    controller.stop().await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_budget_refusal_is_asked_again_and_never_becomes_a_delete() {
    let api = FakeApiServer::start().await;
    let sim = install(&api, &[(names::RESTART_PODS_FOR_RESIZE, "true")], |_| {}).await;
    // No pod may go.
    api.put_object(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}}}),
    );
    let _resizer = OfflineResizer::start(&api, NS, resizer());
    let original = pod_uid(&api, "web-2");
    let controller = RunningController::start(&api, controller("a", Duration::from_secs(1)));

    assert!(
        eventually(WAIT, || api.eviction_refusals_of(NS, "web-2") >= 2).await,
        "refused, then asked again"
    );
    assert_eq!(api.evictions_of(NS, "web-2"), 0);
    assert_eq!(pod_uid(&api, "web-2"), original);
    assert!(pod_deletes(&api).is_empty(), "never turned into a delete");
    assert!(
        eventually(WAIT, || events(&api, "PodEvictionRefused").len() == 1).await,
        "the refusal is told"
    );
    // The fake records a refusal as it answers; the controller counts it once it has read it.
    assert!(
        eventually(WAIT, || controller
            .metric("claim_pod_eviction_refusals_total")
            >= 2.0)
        .await
    );
    // Not asked at once again and again: from 1 s doubling.
    let refusals: Vec<Duration> = api
        .eviction_records()
        .iter()
        .filter(|r| r.refused())
        .map(|r| r.at)
        .collect();
    for pair in refusals.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(900),
            "{refusals:?}"
        );
    }
    assert_eq!(
        record(&api, "data-web-2").and_then(|r| r["podUID"].as_str().map(str::to_owned)),
        original,
        "the record names the pod asked for"
    );

    // The budget allows one: the same pod goes, once, and the claim grows.
    api.put_object(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
    );
    assert!(all_grown(&api).await);
    assert_eq!(api.evictions_of(NS, "web-2"), 1);
    assert!(
        api.eviction_records()
            .iter()
            .filter(|r| r.pod == "web-2")
            .all(|r| r.uid == original)
    );
    assert!(pod_deletes(&api).is_empty());
    controller.stop().await;
    sim.stop().await;
}

/// A record is a promise, not an order: a set that opts out while its pod's eviction is
/// refused gets no eviction afterwards, even once the budget would allow it; the record goes,
/// and the set is told why.
#[tokio::test(flavor = "multi_thread")]
async fn an_opt_out_during_a_refused_eviction_clears_the_record_and_evicts_nothing() {
    let api = FakeApiServer::start().await;
    let sim = install(&api, &[(names::RESTART_PODS_FOR_RESIZE, "true")], |_| {}).await;
    api.put_object(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}}}),
    );
    let _resizer = OfflineResizer::start(&api, NS, ResizerConfig::default());
    let original = pod_uid(&api, "web-2");
    let controller = RunningController::start(&api, controller("a", Duration::from_secs(1)));
    assert!(
        eventually(WAIT, || api.eviction_refusals_of(NS, "web-2") >= 1
            && record(&api, "data-web-2").is_some())
        .await,
        "recorded, then refused"
    );

    // The set opts out, and the budget is lifted.
    let sets: kube::Api<StatefulSet> = kube::Api::namespaced(api.client(), NS);
    sets.patch(
        "web",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
            names::RESTART_PODS_FOR_RESIZE: "false"}}})),
    )
    .await
    .expect("the opt-out");
    api.put_object(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
    );
    assert!(
        eventually(WAIT, || record(&api, "data-web-2").is_none()).await,
        "the record goes"
    );
    // The Event follows the write's answer.
    assert!(
        eventually(WAIT, || !events(&api, "PodRestartCancelled").is_empty()).await,
        "the set is told"
    );
    let cancelled = events(&api, "PodRestartCancelled");
    assert!(
        cancelled.len() == 1
            && cancelled[0].note.as_deref().is_some_and(
                |n| n.contains("data-web-2") && n.contains("the set no longer opts in")
            ),
        "{cancelled:?}"
    );
    // The controller looked again after the record went (its backoff over, the budget free)
    // and still evicted nothing: the user is told to restart the pod instead.
    controller.reconciled_after_n(controller.mark(), 2).await;
    assert!(
        eventually(WAIT, || !events(&api, "PodRestartNeededForResize")
            .is_empty())
        .await,
        "told the user"
    );
    assert_eq!(
        api.evictions_of(NS, "web-2"),
        0,
        "no eviction after the opt-out"
    );
    assert_eq!(pod_uid(&api, "web-2"), original);
    assert!(pod_deletes(&api).is_empty());
    controller.stop().await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_before_or_after_the_eviction_never_evicts_a_pod_twice_nor_its_successor() {
    let api = FakeApiServer::start().await;
    let sim = install(&api, &[(names::RESTART_PODS_FOR_RESIZE, "true")], |_| {}).await;
    // The node takes a while to grow a file system as it mounts it, so a controller that
    // crashed right after an eviction finds the record still there.
    let _resizer = OfflineResizer::start(
        &api,
        NS,
        ResizerConfig {
            node_delay: Duration::from_millis(1500),
            ..resizer()
        },
    );
    let original_2 = pod_uid(&api, "web-2");
    let original_1 = pod_uid(&api, "web-1");

    // Crash between the record and the eviction: the eviction never arrives.
    api.fail_next("POST", "/pods/web-2/eviction", 500, 1000);
    let a = RunningController::start(&api, controller("a", Duration::from_secs(3)));
    assert!(
        eventually(WAIT, || api.requests().iter().any(
            |r| r.method == "POST" && r.path.ends_with("/pods/web-2/eviction")
        ))
        .await
    );
    a.kill();
    api.clear_faults();
    let written = record(&api, "data-web-2").expect("recorded before the eviction");
    assert_eq!(written["pod"], "web-2");
    assert_eq!(written["podUID"].as_str().map(str::to_owned), original_2);
    assert_eq!(api.evictions_of(NS, "web-2"), 0);

    // Another controller sends the eviction the record names.
    let b = RunningController::start(&api, controller("b", Duration::from_secs(3)));
    assert!(eventually(WAIT, || capacity(&api, "data-web-2") == "2Gi").await);

    // Crash right after the next eviction, its record still there.
    assert!(eventually(WAIT, || api.evictions_of(NS, "web-1") == 1).await);
    b.kill();
    assert!(
        record(&api, "data-web-1").is_some(),
        "the crash came before the record went"
    );
    assert_ne!(pod_uid(&api, "web-1"), original_1);
    let c = RunningController::start(&api, controller("c", Duration::from_secs(3)));
    assert!(all_grown(&api).await);
    assert!(
        eventually(WAIT, || available(&api) == 3
            && (0..3).all(|n| record(&api, &format!("data-web-{n}")).is_none()))
        .await
    );
    assert_eq!(
        api.evictions(),
        [
            (format!("{NS}/web-0"), 1),
            (format!("{NS}/web-1"), 1),
            (format!("{NS}/web-2"), 1)
        ]
        .into()
    );
    // Every eviction of web-2 and web-1, sent or not, named the pod the claim waited with.
    for (pod, original) in [("web-2", &original_2), ("web-1", &original_1)] {
        assert!(
            api.eviction_records()
                .iter()
                .filter(|r| r.pod == pod)
                .all(|r| r.uid == *original),
            "{:?}",
            api.eviction_records()
        );
    }
    assert!(events(&api, "ResizeNotFinishedAfterRestart").is_empty());
    assert!(pod_deletes(&api).is_empty());
    c.stop().await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn under_on_delete_pods_are_the_users_to_restart() {
    let api = FakeApiServer::start().await;
    let sim = install(&api, &[(names::RESTART_PODS_FOR_RESIZE, "true")], |set| {
        set["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        // The set as (re-)created with its 2Gi template live: under OnDelete the claims of a
        // pod re-created since then follow.
        set["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] =
            json!("2Gi");
        if let Some(a) = set["metadata"]["annotations"].as_object_mut() {
            a.remove(names::DESIRED_VOLUME_CLAIM_TEMPLATES);
        }
    })
    .await;
    let _resizer = OfflineResizer::start(&api, NS, resizer());
    let controller = RunningController::start(&api, controller("a", Duration::from_secs(1)));
    // Under OnDelete the claims of pods created since the set follow its template (here
    // all); the file systems then wait for a restart, which is the user's.
    assert!(
        eventually(WAIT, || resize_pending(&claim(&api, "data-web-2"))).await,
        "{} {:?} {:?}",
        claim(&api, "data-web-2"),
        api.get_object(ResourceType::of::<Pod>(), NS, "web-2"),
        api.get_object(ResourceType::of::<StatefulSet>(), NS, "web")
    );
    assert!(
        eventually(WAIT, || events(&api, "PodRestartNeededForResize").len()
            == 1)
        .await
    );
    let note = events(&api, "PodRestartNeededForResize")[0]
        .note
        .clone()
        .unwrap_or_default();
    assert!(note.contains("OnDelete"), "{note}");
    past_the_grace(&api, &controller, "data-web-2", Duration::from_secs(1)).await;
    let told = events(&api, "PodRestartNeededForResize");
    assert!(
        told.len() == 1 && told[0].series.is_none(),
        "told once: {told:?}"
    );
    assert!(api.eviction_records().is_empty());
    assert!(pod_deletes(&api).is_empty());
    assert!(record(&api, "data-web-2").is_none());
    controller.stop().await;
    sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_the_statefulset_controller_replaces_is_waited_for_not_evicted() {
    let api = FakeApiServer::start().await;
    let sim = install(&api, &[(names::RESTART_PODS_FOR_RESIZE, "true")], |_| {}).await;
    let _resizer = OfflineResizer::start(&api, NS, resizer());
    // A pod template change: the pods are at the old revision until the StatefulSet
    // controller replaces them (the simulation's built-in rolling update is off, the test
    // plays it).
    let mut web = api
        .get_object(ResourceType::of::<StatefulSet>(), NS, "web")
        .expect("set");
    web["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    // A spec change: the apiserver's next generation.
    let generation = web["metadata"]["generation"].as_i64().unwrap_or(1);
    web["metadata"]["generation"] = json!(generation + 1);
    api.put_object(web);
    assert!(
        eventually(WAIT, || api
            .get::<StatefulSet>(NS, "web")
            .and_then(|s| s.status)
            .and_then(|s| s.update_revision)
            .is_some_and(|r| r != "web-rev1"))
        .await
    );
    let controller = RunningController::start(&api, controller("a", Duration::from_secs(1)));
    assert!(eventually(WAIT, || resize_pending(&claim(&api, "data-web-2"))).await);
    past_the_grace(&api, &controller, "data-web-2", Duration::from_secs(1)).await;
    assert!(
        api.eviction_records().is_empty(),
        "web-2 is at the old revision: the StatefulSet controller replaces it"
    );

    // It does: the claim grows with the new pod, and no eviction was needed.
    api.remove::<Pod>(NS, "web-2");
    assert!(eventually(WAIT, || capacity(&api, "data-web-2") == "2Gi").await);
    assert!(eventually(WAIT, || resize_pending(&claim(&api, "data-web-1"))).await);
    past_the_grace(&api, &controller, "data-web-1", Duration::from_secs(1)).await;
    assert!(
        api.eviction_records().is_empty(),
        "{:?} {:?} {:?}",
        api.eviction_records(),
        api.get_object(ResourceType::of::<Pod>(), NS, "web-1")
            .map(|p| p["metadata"]["labels"].clone()),
        api.get::<StatefulSet>(NS, "web").and_then(|s| s.status)
    );
    assert!(pod_deletes(&api).is_empty());
    controller.stop().await;
    sim.stop().await;
}
