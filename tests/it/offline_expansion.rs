//! The offline-expansion resizer stand-in with the StatefulSet simulation and the fake's
//! Eviction subresource, driven by hand as the controller of issue 36 will drive them: a claim
//! stops at `FileSystemResizePending` until its pod is re-created, an eviction the budget
//! allows re-creates it (the simulation brings it back Ready), the resize then completes; an
//! eviction the budget refuses changes nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{EvictParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::fake_apiserver::{FakeApiServer, ResourceType, StoreView};
use crate::support::offline_resizer::{
    FILE_SYSTEM_RESIZE_PENDING, FILE_SYSTEM_RESIZE_PENDING_MESSAGE, OfflineResizer, ResizerConfig,
    resize_pending,
};
use crate::support::statefulset_sim::{SimConfig, StatefulSetSim, pod_is_available};

const NS: &str = "db";
const WAIT: Duration = Duration::from_secs(10);

/// A set `web` of `replicas` with the claim template `data`, its bound 1Gi claims and their
/// volumes; the simulation creates the pods.
fn install(api: &FakeApiServer, replicas: u32) {
    api.put_object(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": replicas, "serviceName": "web",
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}));
    for n in 0..replicas {
        api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": format!("pv-web-{n}")},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "csi": {"driver": "offline.csi.example.com", "volumeHandle": format!("h-{n}")}}}));
        api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": format!("data-web-{n}"), "namespace": NS, "labels": {"app": "web"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "volumeName": format!("pv-web-{n}")},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}));
    }
}

/// Where a test reads objects: the server, or the store a `wait_for` predicate sees (the
/// predicate runs under the store's lock, so it must not call the server).
trait Objects {
    fn object(&self, resource: &ResourceType, namespace: &str, name: &str) -> Option<Value>;
}

impl Objects for FakeApiServer {
    fn object(&self, resource: &ResourceType, namespace: &str, name: &str) -> Option<Value> {
        self.get_object(resource, namespace, name)
    }
}

impl Objects for StoreView<'_> {
    fn object(&self, resource: &ResourceType, namespace: &str, name: &str) -> Option<Value> {
        self.get_object(resource, namespace, name).cloned()
    }
}

fn claim(objects: &impl Objects, name: &str) -> Value {
    objects
        .object(ResourceType::of::<PersistentVolumeClaim>(), NS, name)
        .expect("claim")
}

fn capacity(objects: &impl Objects, name: &str) -> String {
    claim(objects, name)["status"]["capacity"]["storage"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn uid(objects: &impl Objects, pod: &str) -> Option<String> {
    objects
        .object(ResourceType::of::<Pod>(), NS, pod)
        .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_owned))
}

fn all_available(objects: &impl Objects, replicas: u32) -> bool {
    (0..replicas).all(|n| {
        objects
            .object(ResourceType::of::<Pod>(), NS, &format!("web-{n}"))
            .is_some_and(|p| pod_is_available(&p))
    })
}

/// What the controller does first: the claim asks for the new size.
async fn grow(api: &FakeApiServer, name: &str, size: &str) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(api.client(), NS);
    claims
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": size}}}})),
        )
        .await
        .expect("claim patched");
}

/// Waits for the store to satisfy `check`.
async fn settle(api: &FakeApiServer, what: &str, check: impl FnMut(&StoreView<'_>) -> bool) {
    api.wait_for(check, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// Polls `check`, for state outside the store (what the resizer counted).
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The hand-driven run the controller will automate: two claims of a three-replica set grow,
/// wait at `FileSystemResizePending`, and complete one at a time as their pods are evicted
/// within a budget of one unavailable pod.
#[tokio::test(flavor = "multi_thread")]
async fn an_evicted_pod_comes_back_and_its_claim_completes_one_at_a_time_within_the_budget() {
    let api = FakeApiServer::start().await;
    install(&api, 3);
    let sim = StatefulSetSim::start(&api, NS, "web", SimConfig::default(), false);
    settle(&api, "three Ready pods", |v| all_available(v, 3)).await;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(api.client(), NS);
    budgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}))
            .expect("budget"),
        )
        .await
        .expect("budget created");
    let resizer = OfflineResizer::start(&api, NS, ResizerConfig::default());
    let (first_2, first_1) = (uid(&api, "web-2"), uid(&api, "web-1"));

    grow(&api, "data-web-2", "2Gi").await;
    grow(&api, "data-web-1", "2Gi").await;
    settle(&api, "both claims at FileSystemResizePending", |v| {
        resize_pending(&claim(v, "data-web-2")) && resize_pending(&claim(v, "data-web-1"))
    })
    .await;
    let waiting = claim(&api, "data-web-2");
    let condition = &waiting["status"]["conditions"][0];
    assert_eq!(condition["type"], FILE_SYSTEM_RESIZE_PENDING);
    assert_eq!(condition["status"], "True");
    assert_eq!(condition["message"], FILE_SYSTEM_RESIZE_PENDING_MESSAGE);
    assert!(condition["lastTransitionTime"].is_string());
    assert_eq!(
        waiting["status"]["allocatedResources"],
        json!({"storage": "2Gi"})
    );
    assert_eq!(
        waiting["status"]["allocatedResourceStatuses"],
        json!({"storage": "NodeResizePending"})
    );
    assert_eq!(waiting["status"]["capacity"], json!({"storage": "1Gi"}));
    assert_eq!(
        api.get::<PersistentVolume>("", "pv-web-2")
            .and_then(|pv| pv.spec)
            .and_then(|s| s.capacity)
            .and_then(|c| c.get("storage").map(|q| q.0.clone()))
            .as_deref(),
        Some("2Gi"),
        "the volume is expanded; the file system is not"
    );
    // Typed, as the controller reads it.
    let typed = api
        .get::<PersistentVolumeClaim>(NS, "data-web-2")
        .expect("claim");
    let conditions = typed.status.and_then(|s| s.conditions).unwrap_or_default();
    assert_eq!(conditions[0].type_, FILE_SYSTEM_RESIZE_PENDING);

    // Nothing finishes while the pods stay: read once the resizer has looked twice since.
    let looked = resizer.stats().steps;
    eventually("two passes of the resizer", || {
        resizer.stats().steps >= looked + 2
    })
    .await;
    assert_eq!(
        (capacity(&api, "data-web-2"), capacity(&api, "data-web-1")),
        ("1Gi".into(), "1Gi".into())
    );
    assert_eq!(resizer.waiting(), ["data-web-1", "data-web-2"]);

    // The highest ordinal first: evicted, the budget is then used up.
    let pods: Api<Pod> = Api::namespaced(api.client_without_retries(), NS);
    let evicted = pods
        .evict("web-2", &EvictParams::default())
        .await
        .expect("web-2 evicted");
    assert!(evicted.is_success());
    let refused = pods
        .evict("web-1", &EvictParams::default())
        .await
        .expect_err("web-1 waits for web-2");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 429
            && s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.message
                == "The disruption budget web needs 2 healthy pods and has 2 currently"))),
        "{refused:?}"
    );
    settle(&api, "data-web-2 at 2Gi", |v| {
        capacity(v, "data-web-2") == "2Gi" && !resize_pending(&claim(v, "data-web-2"))
    })
    .await;
    let done = claim(&api, "data-web-2");
    assert!(
        done["status"].get("allocatedResourceStatuses").is_none(),
        "{done}"
    );
    assert!(done["status"].get("conditions").is_none(), "{done}");
    assert_eq!(
        done["status"]["allocatedResources"],
        json!({"storage": "2Gi"})
    );
    assert!(uid(&api, "web-2").is_some() && uid(&api, "web-2") != first_2);
    assert_eq!(resizer.restarts_of("web-2"), 1);
    assert_eq!(
        capacity(&api, "data-web-1"),
        "1Gi",
        "web-1 was not re-created"
    );

    // web-2 Ready again: the budget allows the next one.
    settle(&api, "three Ready pods", |v| all_available(v, 3)).await;
    pods.evict("web-1", &EvictParams::default())
        .await
        .expect("web-1 evicted");
    settle(&api, "data-web-1 at 2Gi", |v| {
        capacity(v, "data-web-1") == "2Gi"
    })
    .await;
    assert!(uid(&api, "web-1") != first_1);
    settle(&api, "three Ready pods", |v| all_available(v, 3)).await;

    let stats = resizer.stop().await;
    let mut pending = stats.pending.clone();
    pending.sort();
    assert_eq!(pending, ["data-web-1", "data-web-2"]);
    assert_eq!(stats.completed, ["data-web-2", "data-web-1"]);
    assert_eq!(
        stats.restarts,
        [("web-1".to_owned(), 1), ("web-2".to_owned(), 1)].into()
    );
    assert_eq!(
        api.evictions(),
        [(format!("{NS}/web-1"), 1), (format!("{NS}/web-2"), 1)].into()
    );
    assert_eq!(api.eviction_refusals_of(NS, "web-1"), 1);
    assert_eq!(capacity(&api, "data-web-0"), "1Gi");
    assert!(!resize_pending(&claim(&api, "data-web-0")));
    let created = sim.stop().await.created;
    assert_eq!(
        created.iter().filter(|p| *p == "web-2").count(),
        2,
        "created once, re-created once: {created:?}"
    );
    // The resizer wrote through the store: nothing of it in the write records.
    assert!(
        api.write_records()
            .iter()
            .all(|w| w.target() != "persistentvolumeclaims/status")
    );
}

/// Every new pod while the claim waits counts, Ready or not; only a Ready one completes it.
#[tokio::test(flavor = "multi_thread")]
async fn each_new_pod_while_a_claim_waits_counts_as_a_restart() {
    let api = FakeApiServer::start().await;
    install(&api, 1);
    let sim_config = SimConfig {
        create_delay: Duration::from_millis(50),
        ready_delay: Duration::from_millis(1500),
        ..SimConfig::default()
    };
    let sim = StatefulSetSim::start(&api, NS, "web", sim_config, false);
    settle(&api, "a Ready pod", |v| all_available(v, 1)).await;
    let resizer = OfflineResizer::start_for(
        &api,
        NS,
        &["data-web-0"],
        ResizerConfig {
            node_delay: Duration::from_millis(100),
            ..ResizerConfig::default()
        },
    );
    grow(&api, "data-web-0", "3Gi").await;
    settle(&api, "pending", |v| resize_pending(&claim(v, "data-web-0"))).await;
    let pods: Api<Pod> = Api::namespaced(api.client_without_retries(), NS);
    let original = uid(&api, "web-0");
    pods.evict("web-0", &EvictParams::default())
        .await
        .expect("evicted");
    settle(&api, "a new pod", |v| {
        uid(v, "web-0").is_some_and(|u| Some(u) != original)
    })
    .await;
    let second = uid(&api, "web-0");
    eventually("the resizer saw it", || resizer.restarts_of("web-0") == 1).await;
    // Not Ready yet (Pending): evicted again at once, as a hasty controller would.
    pods.evict("web-0", &EvictParams::default())
        .await
        .expect("a Pending pod goes regardless");
    settle(&api, "a third pod", |v| {
        uid(v, "web-0").is_some_and(|u| Some(u.clone()) != original && Some(u) != second)
    })
    .await;
    settle(&api, "data-web-0 at 3Gi", |v| {
        capacity(v, "data-web-0") == "3Gi"
    })
    .await;
    assert_eq!(resizer.restarts_of("web-0"), 2);
    assert_eq!(api.evictions_of(NS, "web-0"), 2);
    resizer.stop().await;
    sim.stop().await;
}
