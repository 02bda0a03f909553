//! The fake API server's Eviction subresource and PodDisruptionBudgets against kube's client and
//! raw requests: each test pins what kube-apiserver answers (pkg/registry/core/pod/storage/
//! eviction.go) and what the disruption controller would have computed.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::fake_apiserver::eviction::{MULTIPLE_BUDGETS_MESSAGE, REFUSAL_MESSAGE};
use crate::support::fake_apiserver::{
    ChangeKind, DisruptionStatus, FakeApiConfig, FakeApiServer, Profile, ResourceType,
};

const NS: &str = "db";

fn set(name: &str, replicas: u32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"replicas": replicas, "serviceName": name,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    Unready,
    Pending,
}

fn pod(set: &str, set_uid: &str, ordinal: u32, state: State) -> Value {
    let (phase, ready) = match state {
        State::Ready => ("Running", "True"),
        State::Unready => ("Running", "False"),
        State::Pending => ("Pending", "False"),
    };
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": format!("{set}-{ordinal}"), "namespace": NS,
                        "labels": {"app": set},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                             "name": set, "uid": set_uid, "controller": true}]},
           "spec": {"containers": [{"name": "c", "image": "nginx"}]},
           "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}})
}

/// A set `web` of `states.len()` replicas, its pods in these states.
fn install(api: &FakeApiServer, states: &[State]) {
    let stored = api.put_object(set("web", states.len() as u32));
    let uid = stored["metadata"]["uid"].as_str().expect("uid").to_owned();
    for (n, state) in states.iter().enumerate() {
        api.put_object(pod("web", &uid, n as u32, *state));
    }
}

/// A budget `name` selecting the set's pods, with `spec` merged in.
fn budget(name: &str, spec: Value) -> Value {
    let mut object = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                            "metadata": {"name": name, "namespace": NS},
                            "spec": {"selector": {"matchLabels": {"app": "web"}}}});
    for (k, v) in spec.as_object().into_iter().flatten() {
        object["spec"][k] = v.clone();
    }
    object
}

fn pods(api: &FakeApiServer) -> Api<Pod> {
    Api::namespaced(api.client_without_retries(), NS)
}

fn present(api: &FakeApiServer, name: &str) -> bool {
    api.get::<Pod>(NS, name).is_some()
}

/// POSTs `body` to the eviction of `pod` (with `query`), answering the code, the body and
/// whether a `Retry-After` header came.
async fn raw_evict(api: &FakeApiServer, pod: &str, query: &str, body: Value) -> (u16, Value, bool) {
    let response = reqwest::Client::new()
        .post(format!(
            "{}/api/v1/namespaces/{NS}/pods/{pod}/eviction{query}",
            api.url()
        ))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let code = response.status().as_u16();
    let retry_after = response.headers().contains_key("retry-after");
    (code, response.json().await.expect("json body"), retry_after)
}

/// The Eviction as client-go sends it.
fn eviction(pod: &str, delete_options: Option<Value>) -> Value {
    let mut body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                          "metadata": {"name": pod, "namespace": NS}});
    if let Some(options) = delete_options {
        body["deleteOptions"] = options;
    }
    body
}

fn refusal_body(budget: &str, desired: i64, current: i64) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": REFUSAL_MESSAGE, "reason": "TooManyRequests",
           "details": {"causes": [{"reason": "DisruptionBudget",
               "message": format!("The disruption budget {budget} needs {desired} healthy pods and has {current} currently")}]},
           "code": 429})
}

#[tokio::test]
async fn budgets_are_served_defaulted_with_a_status_subresource() {
    let api = FakeApiServer::start().await;
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(api.client(), NS);
    let created = budgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(budget("plain", json!({}))).expect("budget"),
        )
        .await
        .expect("create");
    let spec = created.spec.clone().expect("spec");
    assert_eq!(
        serde_json::to_value(&spec.min_available).expect("json"),
        json!(1),
        "policy/v1 defaults minAvailable to 1 when neither is set"
    );
    assert_eq!(created.metadata.generation, Some(1));
    let status = created.status.clone().expect("the registry's empty status");
    assert_eq!(
        (
            status.disruptions_allowed,
            status.current_healthy,
            status.desired_healthy,
            status.expected_pods
        ),
        (Some(0), Some(0), Some(0), Some(0))
    );
    // The status subresource changes status only; the main resource keeps it.
    budgets
        .patch_status(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"disruptionsAllowed": 3}, "spec": {"minAvailable": 9}}),
            ),
        )
        .await
        .expect("status patch");
    let after = budgets
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxUnavailable": 1, "minAvailable": null}, "status": {"disruptionsAllowed": 0}})),
        )
        .await
        .expect("patch");
    assert_eq!(after.status.expect("status").disruptions_allowed, Some(3));
    assert_eq!(after.metadata.generation, Some(2));
    assert_eq!(
        serde_json::to_value(&after.spec.expect("spec").max_unavailable).expect("json"),
        json!(1)
    );
    let (code, discovery) = {
        let response = reqwest::get(format!("{}/apis/policy/v1", api.url()))
            .await
            .expect("request");
        (
            response.status().as_u16(),
            response.json::<Value>().await.expect("json"),
        )
    };
    assert_eq!(code, 200);
    let names: Vec<&str> = discovery["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        names.contains(&"poddisruptionbudgets") && names.contains(&"poddisruptionbudgets/status"),
        "{discovery}"
    );
}

#[tokio::test]
async fn an_eviction_a_budget_allows_deletes_the_pod_and_answers_201() {
    let api = FakeApiServer::start().await;
    install(&api, &[State::Ready, State::Ready, State::Ready]);
    api.put_object(budget("web", json!({"maxUnavailable": 1})));
    let uid = api.get::<Pod>(NS, "web-2").and_then(|p| p.metadata.uid);
    let before = api.resource_version();

    let status = pods(&api)
        .evict("web-2", &EvictParams::default())
        .await
        .expect("evicted");
    assert!(status.is_success(), "{status:?}");
    assert_eq!(status.code, 201);
    assert!(!present(&api, "web-2"), "the pod went at once");

    // Watches see the DisruptionTarget condition, then the deletion: every change committed
    // by the time the eviction was answered, from the fake's record.
    let seen: Vec<(ChangeKind, Value)> = api
        .changes_since(before)
        .expect("the record reaches back")
        .iter()
        .filter(|change| change.resource == ResourceType::of::<Pod>())
        .map(|change| (change.kind, change.object.clone()))
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].0, ChangeKind::Modified);
    let condition = seen[0].1["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionTarget"))
        .cloned()
        .expect("DisruptionTarget");
    assert_eq!(
        (
            &condition["status"],
            &condition["reason"],
            &condition["message"]
        ),
        (
            &json!("True"),
            &json!("EvictionByEvictionAPI"),
            &json!("Eviction API: evicting")
        )
    );
    assert_eq!(seen[1].0, ChangeKind::Deleted);

    // Counted as the eviction of that pod, and as a write like any other.
    assert_eq!(api.evictions_of(NS, "web-2"), 1);
    assert_eq!(api.evictions_of(NS, "web-1"), 0);
    assert_eq!(
        api.evictions(),
        [(format!("{NS}/web-2"), 1)].into_iter().collect()
    );
    let records = api.eviction_records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].uid, uid);
    assert_eq!(records[0].budget.as_deref(), Some("web"));
    assert!(records[0].evicted());
    let writes: Vec<_> = api
        .write_records()
        .into_iter()
        .filter(|w| w.subresource.as_deref() == Some("eviction"))
        .collect();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].verb.as_str(), "create");
    assert_eq!(writes[0].target(), "pods/eviction");
    assert_eq!(writes[0].name.as_deref(), Some("web-2"));
    assert_eq!(writes[0].code, 201);
    let logged = api
        .writes()
        .into_iter()
        .find(|r| r.path.ends_with("/eviction"))
        .expect("logged");
    assert_eq!(
        logged.path,
        format!("/api/v1/namespaces/{NS}/pods/web-2/eviction")
    );
    assert_eq!(logged.code, 201);

    // Without a budget the pod goes just the same; without the gate (v1.24) no condition.
    let api = FakeApiServer::start_with(FakeApiConfig::profile(Profile::V1_24)).await;
    install(&api, &[State::Ready]);
    let mut changes = api.subscribe();
    let (code, body, _) = raw_evict(&api, "web-0", "", eviction("web-0", None)).await;
    assert_eq!(code, 201);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    );
    let change = changes.recv().await.expect("a change");
    assert_eq!(
        change.kind,
        ChangeKind::Deleted,
        "no condition before v1.26"
    );
}

#[tokio::test]
async fn a_refused_eviction_is_429_with_the_apiservers_status_and_deletes_nothing() {
    let api = FakeApiServer::start().await;
    // One replica is down already: a budget of one unavailable allows nothing more.
    install(&api, &[State::Unready, State::Ready, State::Ready]);
    api.put_object(budget("web-budget", json!({"maxUnavailable": 1})));
    let (code, body, retry_after) = raw_evict(&api, "web-2", "", eviction("web-2", None)).await;
    assert_eq!(code, 429);
    assert_eq!(body, refusal_body("web-budget", 2, 2));
    assert!(
        !retry_after,
        "no Retry-After: upstream suggests none for this refusal"
    );
    assert!(present(&api, "web-2"));

    // kube's client sees the Status (with its retries off; see `client_without_retries`).
    let refused = pods(&api)
        .evict("web-2", &EvictParams::default())
        .await
        .expect_err("refused");
    let kube::Error::Api(status) = refused else {
        panic!("expected an API error, got {refused:?}");
    };
    assert_eq!(status.code, 429);
    assert_eq!(status.reason, "TooManyRequests");
    assert_eq!(status.message, REFUSAL_MESSAGE);
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].reason, "DisruptionBudget");
    assert_eq!(
        causes[0].message,
        "The disruption budget web-budget needs 2 healthy pods and has 2 currently"
    );
    assert!(present(&api, "web-2"));
    assert_eq!(api.eviction_refusals_of(NS, "web-2"), 2);
    assert_eq!(api.evictions_of(NS, "web-2"), 0);
    assert!(
        api.write_records()
            .iter()
            .filter(|w| w.subresource.as_deref() == Some("eviction"))
            .all(|w| w.code == 429 && !w.succeeded())
    );

    // Once the unready replica is back, one eviction is allowed, and then none again.
    let uid = api
        .get_object(ResourceType::of::<Pod>(), NS, "web-0")
        .expect("pod")["metadata"]["ownerReferences"][0]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    api.put_object(pod("web", &uid, 0, State::Ready));
    assert_eq!(
        api.disruption_status(NS, "web-budget"),
        Some(DisruptionStatus {
            expected_pods: 3,
            desired_healthy: 2,
            current_healthy: 3,
            disruptions_allowed: 1,
            synced: true,
        })
    );
    pods(&api)
        .evict("web-2", &EvictParams::default())
        .await
        .expect("allowed");
    let (code, body, _) = raw_evict(&api, "web-1", "", eviction("web-1", None)).await;
    assert_eq!((code, body), (429, refusal_body("web-budget", 2, 2)));
}

/// Budgets over four replicas, three of them Ready: what the disruption controller computes
/// and what a (dry-run) eviction of a Ready pod answers.
#[tokio::test]
async fn budgets_count_ready_pods_against_integers_and_percentages() {
    let api = FakeApiServer::start().await;
    install(
        &api,
        &[State::Unready, State::Ready, State::Ready, State::Ready],
    );
    // (spec, expected, desired, allowed, synced)
    let cases = [
        (json!({"maxUnavailable": 1}), 4, 3, 0, true),
        (json!({"maxUnavailable": 2}), 4, 2, 1, true),
        (json!({"maxUnavailable": "50%"}), 4, 2, 1, true),
        // Rounded up: 30% of 4 is 1.2, so two may be unavailable.
        (json!({"maxUnavailable": "30%"}), 4, 2, 1, true),
        (json!({"maxUnavailable": "0%"}), 4, 4, 0, true),
        (json!({"maxUnavailable": 9}), 4, 0, 3, true),
        // An integer minAvailable counts the selected pods, not the controller's scale.
        (json!({"minAvailable": 2}), 4, 2, 1, true),
        (json!({"minAvailable": 3}), 4, 3, 0, true),
        (json!({"minAvailable": "50%"}), 4, 2, 1, true),
        // Rounded up: 60% of 4 is 2.4, so three must stay.
        (json!({"minAvailable": "60%"}), 4, 3, 0, true),
        (json!({"minAvailable": "100%"}), 4, 4, 0, true),
        // Not a percentage: the controller fails safe.
        (json!({"maxUnavailable": "1"}), 0, 0, 0, false),
    ];
    for (spec, expected, desired, allowed, synced) in cases {
        api.put_object(budget("b", spec.clone()));
        let got = api.disruption_status(NS, "b").expect("budget");
        assert_eq!(
            got,
            DisruptionStatus {
                expected_pods: expected,
                desired_healthy: desired,
                current_healthy: if synced { 3 } else { 0 },
                disruptions_allowed: allowed,
                synced,
            },
            "{spec}"
        );
        let (code, body, _) =
            raw_evict(&api, "web-3", "?dryRun=All", eviction("web-3", None)).await;
        if allowed > 0 {
            assert_eq!(code, 201, "{spec}: {body}");
        } else {
            let current = if synced { 3 } else { 0 };
            assert_eq!(
                (code, body),
                (429, refusal_body("b", desired, current)),
                "{spec}"
            );
        }
        assert!(present(&api, "web-3"), "{spec}: a dry run deletes nothing");
    }
    assert_eq!(
        api.evictions_of(NS, "web-3"),
        0,
        "dry runs are not evictions"
    );
    assert!(api.eviction_records().iter().all(|r| r.dry_run));

    // The scale is the controller's: a fifth replica that does not exist yet is unavailable.
    api.put_object(set("web", 5));
    api.put_object(budget("b", json!({"maxUnavailable": 2})));
    assert_eq!(
        api.disruption_status(NS, "b").map(|s| (
            s.expected_pods,
            s.desired_healthy,
            s.disruptions_allowed
        )),
        Some((5, 3, 0))
    );
    // A pod whose controller is not found fails the computation safe.
    let mut stray = pod("web", "another-uid", 7, State::Ready);
    stray["metadata"]["ownerReferences"][0]["name"] = json!("gone");
    api.put_object(stray);
    assert_eq!(
        api.disruption_status(NS, "b")
            .map(|s| (s.synced, s.disruptions_allowed)),
        Some((false, 0))
    );
    // A pod without a controller is left out of the scale.
    let mut loose = pod("web", "", 8, State::Ready);
    loose["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("ownerReferences");
    api.remove::<Pod>(NS, "web-7");
    api.put_object(loose);
    assert_eq!(
        api.disruption_status(NS, "b").map(|s| (
            s.expected_pods,
            s.current_healthy,
            s.disruptions_allowed
        )),
        Some((5, 4, 1))
    );
}

#[tokio::test]
async fn unready_and_pending_pods_go_where_upstream_lets_them() {
    let api = FakeApiServer::start().await;
    install(
        &api,
        &[State::Ready, State::Unready, State::Ready, State::Pending],
    );
    // Healthy: two Ready of two needed. An unready pod goes without using the budget.
    api.put_object(budget("b", json!({"minAvailable": 2})));
    assert_eq!(
        api.disruption_status(NS, "b")
            .map(|s| s.disruptions_allowed),
        Some(0)
    );
    let (code, _, _) = raw_evict(&api, "web-1", "?dryRun=All", eviction("web-1", None)).await;
    assert_eq!(code, 201, "an unready pod of a healthy application");
    let (code, body, _) = raw_evict(&api, "web-0", "", eviction("web-0", None)).await;
    assert_eq!((code, body), (429, refusal_body("b", 2, 2)), "a Ready one");

    // Unhealthy: three needed. The unready pod is guarded too, unless the policy says
    // AlwaysAllow.
    api.put_object(budget("b", json!({"minAvailable": 3})));
    let (code, body, _) = raw_evict(&api, "web-1", "?dryRun=All", eviction("web-1", None)).await;
    assert_eq!((code, body), (429, refusal_body("b", 3, 2)));
    api.put_object(budget(
        "b",
        json!({"minAvailable": 3, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
    ));
    let (code, _, _) = raw_evict(&api, "web-1", "?dryRun=All", eviction("web-1", None)).await;
    assert_eq!(code, 429);
    api.put_object(budget(
        "b",
        json!({"minAvailable": 3, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
    ));
    let (code, _, _) = raw_evict(&api, "web-1", "", eviction("web-1", None)).await;
    assert_eq!(code, 201);
    assert!(!present(&api, "web-1"));
    // AlwaysAllow is about unready pods only.
    let (code, _, _) = raw_evict(&api, "web-0", "?dryRun=All", eviction("web-0", None)).await;
    assert_eq!(code, 429);

    // A Pending pod goes whatever the budget; so does a terminal one.
    let (code, _, _) = raw_evict(&api, "web-3", "", eviction("web-3", None)).await;
    assert_eq!(code, 201);
    assert!(!present(&api, "web-3"));
    let mut done = api
        .get_object(ResourceType::of::<Pod>(), NS, "web-2")
        .expect("pod");
    done["status"]["phase"] = json!("Succeeded");
    api.put_object(done);
    let (code, _, _) = raw_evict(&api, "web-2", "", eviction("web-2", None)).await;
    assert_eq!(code, 201);
    let records = api.eviction_records();
    assert_eq!(
        records
            .iter()
            .filter(|r| r.evicted())
            .map(|r| r.pod.as_str())
            .collect::<Vec<_>>(),
        ["web-1", "web-3", "web-2"]
    );
    assert_eq!(
        records.last().and_then(|r| r.budget.clone()),
        None,
        "a terminal pod's eviction looks at no budget"
    );

    // Before v1.27 the policy field is not honoured.
    let old = FakeApiServer::start_with(FakeApiConfig::profile(Profile::V1_24)).await;
    install(&old, &[State::Ready, State::Unready, State::Ready]);
    old.put_object(budget(
        "b",
        json!({"minAvailable": 3, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
    ));
    let (code, body, _) = raw_evict(&old, "web-1", "", eviction("web-1", None)).await;
    assert_eq!((code, body), (429, refusal_body("b", 3, 2)));
}

#[tokio::test]
async fn preconditions_conflict_with_the_apiservers_message() {
    let api = FakeApiServer::start().await;
    install(&api, &[State::Ready, State::Ready, State::Ready]);
    let live = api.get::<Pod>(NS, "web-2").expect("pod");
    let uid = live.metadata.uid.clone().expect("uid");
    let version = live.metadata.resource_version.clone().expect("rv");

    let (code, body, _) = raw_evict(
        &api,
        "web-2",
        "",
        eviction(
            "web-2",
            Some(json!({"preconditions": {"uid": "not-the-uid"}})),
        ),
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": format!("Operation cannot be fulfilled on Pod \"web-2\": the UID in the precondition (not-the-uid) does not match the UID in record ({uid}). The object might have been deleted and then recreated"),
               "reason": "Conflict", "details": {"name": "web-2", "kind": "Pod"}, "code": 409})
    );
    let (code, body, _) = raw_evict(
        &api,
        "web-2",
        "",
        eviction(
            "web-2",
            Some(json!({"preconditions": {"resourceVersion": "1"}})),
        ),
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(
        body["message"],
        format!(
            "Operation cannot be fulfilled on Pod \"web-2\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({version}). The object might have been modified"
        )
    );
    assert!(present(&api, "web-2"));
    assert_eq!(
        api.get::<Pod>(NS, "web-2")
            .and_then(|p| p.metadata.resource_version),
        Some(version.clone()),
        "a refused eviction writes no condition"
    );

    // A budget decides before the preconditions are looked at.
    api.put_object(budget("b", json!({"minAvailable": 3})));
    let (code, _, _) = raw_evict(
        &api,
        "web-2",
        "",
        eviction(
            "web-2",
            Some(json!({"preconditions": {"uid": "not-the-uid"}})),
        ),
    )
    .await;
    assert_eq!(code, 429);
    api.remove_object(
        ResourceType::of::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(),
        NS,
        "b",
    );

    // kube's `EvictParams` sends its options as `delete_options`, a field the apiserver does not
    // know and drops: its preconditions never reach the registry. A policy/v1 Eviction with
    // `deleteOptions`, posted to the subresource, carries them.
    let wrong = EvictParams {
        delete_options: Some(DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some("not-the-uid".into()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    let status = pods(&api)
        .evict("web-1", &wrong)
        .await
        .expect("not refused");
    assert!(status.is_success());
    assert!(!present(&api, "web-1"), "the precondition was dropped");

    let with_uid = |uid: &str| Eviction {
        metadata: ObjectMeta {
            name: Some("web-2".into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        }),
    };
    let refused = pods(&api)
        .create_subresource::<_, kube::core::Status>(
            "eviction",
            "web-2",
            &PostParams::default(),
            &with_uid("not-the-uid"),
        )
        .await
        .expect_err("a stale uid");
    assert!(
        matches!(refused, kube::Error::Api(ref s) if s.code == 409),
        "{refused:?}"
    );
    let status: kube::core::Status = pods(&api)
        .create_subresource("eviction", "web-2", &PostParams::default(), &with_uid(&uid))
        .await
        .expect("evicted");
    assert!(status.is_success());
    assert!(!present(&api, "web-2"));
}

#[tokio::test]
async fn a_missing_pod_is_404_two_budgets_500_and_a_bad_body_400() {
    let api = FakeApiServer::start().await;
    install(&api, &[State::Ready, State::Ready]);
    let (code, body, _) = raw_evict(&api, "web-9", "", eviction("web-9", None)).await;
    assert_eq!(code, 404);
    assert_eq!(body["message"], "pods \"web-9\" not found");
    assert_eq!(body["reason"], "NotFound");
    let missing = pods(&api)
        .evict("web-9", &EvictParams::default())
        .await
        .expect_err("missing");
    assert!(matches!(missing, kube::Error::Api(ref s) if s.code == 404));

    api.put_object(budget("one", json!({"maxUnavailable": 1})));
    api.put_object(budget("two", json!({"maxUnavailable": 1})));
    // A budget with an empty selector selects nothing, here as in eviction.go.
    let mut empty = budget("three", json!({"maxUnavailable": 1}));
    empty["spec"]["selector"] = json!({});
    api.put_object(empty);
    let (code, body, _) = raw_evict(&api, "web-1", "", eviction("web-1", None)).await;
    assert_eq!(code, 500);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": MULTIPLE_BUDGETS_MESSAGE, "code": 500})
    );
    assert!(present(&api, "web-1"));
    let several = pods(&api)
        .evict("web-1", &EvictParams::default())
        .await
        .expect_err("two budgets");
    assert!(
        matches!(several, kube::Error::Api(ref s) if s.code == 500 && s.message == MULTIPLE_BUDGETS_MESSAGE),
        "{several:?}"
    );

    let (code, body, _) = raw_evict(&api, "web-1", "", eviction("web-0", None)).await;
    assert_eq!(code, 400);
    assert_eq!(
        body["message"],
        "name in URL does not match name in Eviction object"
    );
    let mut other_namespace = eviction("web-1", None);
    other_namespace["metadata"]["namespace"] = json!("elsewhere");
    let (code, _, _) = raw_evict(&api, "web-1", "", other_namespace).await;
    assert_eq!(code, 400);
    let (code, body, _) = raw_evict(
        &api,
        "web-1",
        "",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1"}}),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body["message"],
        "the API version in the data (v1) does not match the expected API version (policy/v1)"
    );
    let response = reqwest::get(format!(
        "{}/api/v1/namespaces/{NS}/pods/web-1/eviction",
        api.url()
    ))
    .await
    .expect("request");
    assert_eq!(response.status().as_u16(), 405);
    assert!(present(&api, "web-1") && present(&api, "web-0"));
    assert_eq!(
        api.eviction_records()
            .iter()
            .map(|r| r.code)
            .collect::<Vec<_>>(),
        [404, 404, 500, 500, 400, 400, 400]
    );
}

#[tokio::test]
async fn syncing_budgets_writes_what_the_disruption_controller_would() {
    let api = FakeApiServer::start().await;
    install(&api, &[State::Ready, State::Unready, State::Ready]);
    api.put_object(budget("b", json!({"maxUnavailable": 1})));
    api.sync_disruption_budgets(NS);
    let synced = api.get::<PodDisruptionBudget>(NS, "b").expect("budget");
    let status = synced.status.expect("status");
    assert_eq!(
        (
            status.observed_generation,
            status.expected_pods,
            status.desired_healthy,
            status.current_healthy,
            status.disruptions_allowed
        ),
        (Some(1), Some(3), Some(2), Some(2), Some(0))
    );
    let condition = &status.conditions.expect("conditions")[0];
    assert_eq!(
        (
            condition.type_.as_str(),
            condition.status.as_str(),
            condition.reason.as_str()
        ),
        ("DisruptionAllowed", "False", "InsufficientPods")
    );
    // Nothing changed: nothing written.
    let version = api.resource_version();
    api.sync_disruption_budgets(NS);
    assert_eq!(api.resource_version(), version);
}
