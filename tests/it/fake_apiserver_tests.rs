//! The fake API server against kube's own client, watcher, reflector and event recorder:
//! each test pins one behaviour controller tests rely on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures::future::BoxFuture;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, ObjectReference, PersistentVolumeClaim, Pod, Secret,
};
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy, WatchEvent, WatchParams,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::fake_apiserver::admission::{
    AdmissionHook, Attributes, CallError, FailurePolicy, Phase, Webhook,
};
use crate::support::fake_apiserver::{
    ChangeKind, FakeApiConfig, FakeApiServer, GARBAGE_COLLECTOR_AGENT, PVC_SPEC_FORBIDDEN, Profile,
    STATEFULSET_SPEC_FORBIDDEN, StoreView, WriteRecord, resources,
};

const WAIT: Duration = Duration::from_secs(10);

fn pvc(name: &str, storage: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
    }))
    .expect("valid claim")
}

fn statefulset(name: &str) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    }))
    .expect("valid statefulset")
}

fn config_map(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .expect("valid config map")
}

/// The `Status` of a failed call, or a panic naming what happened instead.
fn api_error<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls until `check` holds, for state outside the fake server (a reflector's store).
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A reflector over claims in `default`, driven in the background.
fn claim_reflector(client: Client) -> reflector::Store<PersistentVolumeClaim> {
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(
            Api::<PersistentVolumeClaim>::default_namespaced(client),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .applied_objects();
    tokio::spawn(stream.for_each(|_| async {}));
    reader
}

fn names(reader: &reflector::Store<PersistentVolumeClaim>) -> Vec<String> {
    let mut names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
    names.sort();
    names
}

fn storage_of(reader: &reflector::Store<PersistentVolumeClaim>, name: &str) -> Option<String> {
    reader
        .state()
        .iter()
        .find(|c| c.name_any() == name)
        .and_then(|c| {
            c.spec
                .as_ref()?
                .resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("storage")
                .map(|q| q.0.clone())
        })
}

#[tokio::test]
async fn reflector_syncs_then_follows_creates_patches_and_deletes() {
    let api = FakeApiServer::start().await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(api.client());
    claims
        .create(&PostParams::default(), &pvc("data-web-0", "1Gi"))
        .await
        .expect("create");

    let reader = claim_reflector(api.client());
    tokio::time::timeout(WAIT, reader.wait_until_ready())
        .await
        .expect("synced in time")
        .expect("writer alive");
    assert_eq!(names(&reader), ["data-web-0"]);

    claims
        .create(&PostParams::default(), &pvc("data-web-1", "1Gi"))
        .await
        .expect("create");
    api.put_object(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-0", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}},
    }));
    let resize = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    claims
        .patch(
            "data-web-0",
            &PatchParams::default(),
            &Patch::Merge(&resize),
        )
        .await
        .expect("expand a bound claim");
    claims
        .delete("data-web-1", &DeleteParams::default())
        .await
        .expect("delete");
    claims
        .create(&PostParams::default(), &pvc("data-web-2", "1Gi"))
        .await
        .expect("create");

    eventually("the reflector to see every change", || {
        names(&reader) == ["data-web-0", "data-web-2"]
            && storage_of(&reader, "data-web-0").as_deref() == Some("2Gi")
    })
    .await;
}

#[tokio::test]
async fn list_filters_by_label_and_field_selectors() {
    let api = FakeApiServer::start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    for (name, labels) in [
        ("web", json!({"app": "web", "tier": "front"})),
        ("db", json!({"app": "db"})),
        ("cache", json!({"app": "cache", "tier": "back"})),
    ] {
        maps.create(&PostParams::default(), &config_map(name, labels))
            .await
            .expect("create");
    }
    Api::<ConfigMap>::namespaced(api.client(), "other")
        .create(
            &PostParams::default(),
            &config_map("web", json!({"app": "web"})),
        )
        .await
        .expect("create in another namespace");

    let cases = [
        ("app=web", vec!["web"]),
        ("app==web", vec!["web"]),
        ("app!=web", vec!["cache", "db"]),
        ("tier", vec!["cache", "web"]),
        ("!tier", vec!["db"]),
        ("app in (web, db)", vec!["db", "web"]),
        ("app notin (web),tier", vec!["cache"]),
        ("", vec!["cache", "db", "web"]),
    ];
    for (selector, expected) in cases {
        let list = maps
            .list(&ListParams::default().labels(selector))
            .await
            .expect("list");
        let got: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
        assert_eq!(got, expected, "labelSelector {selector:?}");
        assert!(
            list.metadata
                .resource_version
                .is_some_and(|rv| !rv.is_empty()),
            "a list carries its resourceVersion"
        );
    }

    let everywhere: Api<ConfigMap> = Api::all(api.client());
    let named_web = everywhere
        .list(&ListParams::default().fields("metadata.name=web"))
        .await
        .expect("list");
    let namespaces: Vec<String> = named_web
        .items
        .iter()
        .filter_map(|m| m.namespace())
        .collect();
    assert_eq!(namespaces, ["default", "other"]);
    let only_other = everywhere
        .list(&ListParams::default().fields("metadata.namespace=other"))
        .await
        .expect("list");
    assert_eq!(only_other.items.len(), 1);
    let paged = maps
        .list(&ListParams::default().limit(1))
        .await
        .expect("a limit is accepted");
    assert_eq!(paged.items.len(), 1, "a limit pages the list");
    assert_eq!(paged.metadata.remaining_item_count, Some(2));
    assert!(paged.metadata.continue_.is_some_and(|c| !c.is_empty()));

    let bad = api_error(maps.list(&ListParams::default().fields("data.k=v")).await);
    assert_eq!((bad.code, bad.reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn create_assigns_identity_and_rejects_duplicates() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let created = sets
        .create(&PostParams::default(), &statefulset("web"))
        .await
        .expect("create");
    assert!(created.uid().is_some_and(|u| u.len() == 36));
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.creation_timestamp().is_some());
    assert_eq!(created.namespace().as_deref(), Some("default"));
    let template = &created
        .spec
        .volume_claim_templates
        .as_ref()
        .expect("templates")[0];
    assert_eq!(
        template
            .spec
            .as_ref()
            .and_then(|s| s.volume_mode.as_deref()),
        Some("Filesystem"),
        "templates are defaulted"
    );

    let duplicate = api_error(
        sets.create(&PostParams::default(), &statefulset("web"))
            .await,
    );
    assert_eq!(
        (duplicate.code, duplicate.reason.as_str()),
        (409, "AlreadyExists")
    );
    assert_eq!(
        duplicate.message,
        "statefulsets.apps \"web\" already exists"
    );

    let mut generated = config_map("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("journal-".into());
    let made = Api::<ConfigMap>::default_namespaced(api.client())
        .create(&PostParams::default(), &generated)
        .await
        .expect("create");
    assert!(
        made.name_any().starts_with("journal-") && made.name_any().len() == "journal-".len() + 5
    );
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_conflicts() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let stale = sets
        .create(&PostParams::default(), &statefulset("web"))
        .await
        .expect("create");
    let mut fresh = stale.clone();
    fresh.spec.replicas = Some(3);
    let replaced = sets
        .replace("web", &PostParams::default(), &fresh)
        .await
        .expect("replace at the current version");
    assert_ne!(replaced.resource_version(), stale.resource_version());

    let mut late = stale;
    late.spec.replicas = Some(5);
    let conflict = api_error(sets.replace("web", &PostParams::default(), &late).await);
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert!(
        conflict
            .message
            .starts_with("Operation cannot be fulfilled on statefulsets.apps \"web\"")
    );
    assert_eq!(
        api.get::<StatefulSet>("default", "web")
            .and_then(|s| s.spec.replicas),
        Some(3)
    );
}

#[tokio::test]
async fn merge_and_json_patches_apply_with_preconditions() {
    let api = FakeApiServer::start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    let created = maps
        .create(&PostParams::default(), &config_map("cm", json!({"a": "1"})))
        .await
        .expect("create");

    let merge = json!({"metadata": {"labels": {"b": "2", "a": null}}, "data": {"extra": "x"}});
    let merged = maps
        .patch("cm", &PatchParams::default(), &Patch::Merge(&merge))
        .await
        .expect("merge patch");
    assert_eq!(merged.labels().get("b").map(String::as_str), Some("2"));
    assert!(!merged.labels().contains_key("a"));
    assert_eq!(
        merged
            .data
            .as_ref()
            .and_then(|d| d.get("extra"))
            .map(String::as_str),
        Some("x")
    );

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "add", "path": "/metadata/annotations", "value": {"note": "json"}},
    ]))
    .expect("valid patch");
    let patched = maps
        .patch("cm", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .expect("json patch");
    assert_eq!(
        patched.annotations().get("note").map(String::as_str),
        Some("json")
    );

    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/k", "value": "other"}]))
            .expect("valid patch");
    let failed = api_error(
        maps.patch("cm", &PatchParams::default(), &Patch::Json::<()>(failing))
            .await,
    );
    assert_eq!(failed.code, 422);

    let stale =
        json!({"metadata": {"resourceVersion": created.resource_version()}, "data": {"k": "late"}});
    let conflict = api_error(
        maps.patch("cm", &PatchParams::default(), &Patch::Merge(&stale))
            .await,
    );
    assert_eq!(conflict.code, 409);
    let current =
        json!({"metadata": {"resourceVersion": patched.resource_version()}, "data": {"k": "now"}});
    maps.patch("cm", &PatchParams::default(), &Patch::Merge(&current))
        .await
        .expect("precondition holds");
}

#[tokio::test]
async fn status_subresource_is_isolated_and_generation_counts_spec_changes() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    sets.create(&PostParams::default(), &statefulset("web"))
        .await
        .expect("create");

    let status_write =
        json!({"spec": {"replicas": 9}, "status": {"replicas": 2, "readyReplicas": 2}});
    let after_status = sets
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status_write))
        .await
        .expect("status");
    assert_eq!(
        after_status.status.as_ref().and_then(|s| s.ready_replicas),
        Some(2)
    );
    assert_eq!(
        after_status.spec.replicas,
        Some(2),
        "a status write leaves spec alone"
    );
    assert_eq!(after_status.metadata.generation, Some(1));

    let main_write = json!({"spec": {"replicas": 3}, "status": {"readyReplicas": 0}});
    let after_main = sets
        .patch("web", &PatchParams::default(), &Patch::Merge(&main_write))
        .await
        .expect("patch");
    assert_eq!(
        after_main.status.as_ref().and_then(|s| s.ready_replicas),
        Some(2),
        "a main write leaves status alone"
    );
    assert_eq!(after_main.metadata.generation, Some(2));

    let label_only = json!({"metadata": {"labels": {"x": "y"}}});
    let after_label = sets
        .patch("web", &PatchParams::default(), &Patch::Merge(&label_only))
        .await
        .expect("patch");
    assert_eq!(
        after_label.metadata.generation,
        Some(2),
        "metadata changes do not bump generation"
    );

    let unchanged = sets
        .patch("web", &PatchParams::default(), &Patch::Merge(&label_only))
        .await
        .expect("no-op patch");
    assert_eq!(
        unchanged.resource_version(),
        after_label.resource_version(),
        "a no-op write is not stored"
    );
}

#[tokio::test]
async fn immutable_fields_are_rejected_like_the_real_registries() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    sets.create(&PostParams::default(), &statefulset("web"))
        .await
        .expect("create");
    let grow = json!({"spec": {"volumeClaimTemplates": [{
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}},
    }]}});
    let denied = api_error(
        sets.patch("web", &PatchParams::default(), &Patch::Merge(&grow))
            .await,
    );
    assert_eq!((denied.code, denied.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        denied.message,
        format!(
            "StatefulSet.apps \"web\" is invalid: spec: Forbidden: {STATEFULSET_SPEC_FORBIDDEN}"
        )
    );

    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(api.client());
    claims
        .create(&PostParams::default(), &pvc("pending", "1Gi"))
        .await
        .expect("create");
    let resize = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    let unbound = api_error(
        claims
            .patch("pending", &PatchParams::default(), &Patch::Merge(&resize))
            .await,
    );
    assert_eq!(
        unbound.message,
        format!(
            "PersistentVolumeClaim \"pending\" is invalid: spec: Forbidden: {PVC_SPEC_FORBIDDEN}"
        )
    );
    let class = json!({"spec": {"storageClassName": "gold"}});
    claims
        .patch("pending", &PatchParams::default(), &Patch::Merge(&class))
        .await
        .expect("a class may be set once");
    let other_class = json!({"spec": {"storageClassName": "silver"}});
    assert_eq!(
        api_error(
            claims
                .patch(
                    "pending",
                    &PatchParams::default(),
                    &Patch::Merge(&other_class)
                )
                .await
        )
        .code,
        422
    );

    api.configure(|c| c.retroactive_default_class_allowed = false);
    claims
        .create(&PostParams::default(), &pvc("old-cluster", "1Gi"))
        .await
        .expect("create");
    let denied = api_error(
        claims
            .patch(
                "old-cluster",
                &PatchParams::default(),
                &Patch::Merge(&class),
            )
            .await,
    );
    assert!(
        denied
            .message
            .contains("spec: Forbidden: spec is immutable after creation"),
        "{}",
        denied.message
    );
}

#[tokio::test]
async fn delete_preconditions_protect_the_object() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let created = sets
        .create(&PostParams::default(), &statefulset("web"))
        .await
        .expect("create");

    let wrong_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("00000000-0000-0000-0000-000000000000".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let conflict = api_error(sets.delete("web", &wrong_uid).await);
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    // As `rest.BeforeDelete` words it (the agreement bodies check the whole message).
    assert!(
        conflict.message.contains(
            "the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match"
        ),
        "{}",
        conflict.message
    );
    assert!(
        api.get::<StatefulSet>("default", "web").is_some(),
        "the object is kept"
    );

    let stale_version = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        }),
        ..DeleteParams::default()
    };
    assert_eq!(
        api_error(sets.delete("web", &stale_version).await).code,
        409
    );

    let right = DeleteParams {
        preconditions: Some(Preconditions {
            uid: created.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    sets.delete("web", &right).await.expect("delete");
    assert!(api.get::<StatefulSet>("default", "web").is_none());
    assert_eq!(api_error(sets.get("web").await).code, 404);
}

/// A pod owned by `owner_uid` (and by a second, unrelated owner when `extra` is set).
fn owned_pod(name: &str, owner_uid: &str, extra: bool) -> Value {
    let mut owners = vec![
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": owner_uid, "controller": true}),
    ];
    if extra {
        owners.push(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "other-uid"}),
        );
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "ownerReferences": owners},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    })
}

#[tokio::test]
async fn orphan_delete_strips_owner_references_and_keeps_dependents() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let set = sets
        .create(&PostParams::default(), &statefulset("web"))
        .await
        .expect("create");
    let uid = set.uid().expect("uid");
    api.put_object(owned_pod("web-0", &uid, false));
    api.put_object(owned_pod("web-1", &uid, true));

    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        preconditions: Some(Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    sets.delete("web", &orphan).await.expect("orphan delete");

    assert!(api.get::<StatefulSet>("default", "web").is_none());
    let pods = api.list::<Pod>();
    assert_eq!(pods.len(), 2, "dependents are kept");
    assert!(pods[0].metadata.owner_references.is_none());
    let remaining: Vec<String> = pods[1]
        .owner_references()
        .iter()
        .map(|r| r.uid.clone())
        .collect();
    assert_eq!(
        remaining,
        ["other-uid"],
        "only references to the deleted owner go"
    );
    let deletes: Vec<_> = api
        .writes()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].propagation_policy().as_deref(), Some("Orphan"));
}

#[tokio::test]
async fn lagged_orphan_delete_shows_the_deletion_in_progress() {
    let api = FakeApiServer::start_with(FakeApiConfig {
        orphan_deletion_lag: Duration::from_millis(300),
        ..FakeApiConfig::default()
    })
    .await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let set = sets
        .create(&PostParams::default(), &statefulset("web"))
        .await
        .expect("create");
    api.put_object(owned_pod("web-0", &set.uid().expect("uid"), false));

    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    sets.delete("web", &orphan).await.expect("orphan delete");
    let pending = api
        .get::<StatefulSet>("default", "web")
        .expect("still present");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert_eq!(pending.finalizers(), ["orphan"]);

    api.wait_for(|s| s.get::<StatefulSet>("default", "web").is_none(), WAIT)
        .await
        .expect("deleted after the lag");
    assert!(
        api.get::<Pod>("default", "web-0")
            .expect("pod kept")
            .metadata
            .owner_references
            .is_none()
    );
}

/// The garbage collector stand-in: it acts after its lag, not while the apiserver is down
/// (the collector writes through it), and its patches are recorded as kube-controller-manager's
/// (the dependent's ownerReferences first, then the owner's finalizer).
#[tokio::test]
async fn the_garbage_collector_stand_in_waits_out_an_outage_and_records_its_patches() {
    let lag = Duration::from_millis(300);
    let api = FakeApiServer::start_with(FakeApiConfig {
        orphan_deletion_lag: lag,
        ..FakeApiConfig::default()
    })
    .await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let set = sets
        .create(&PostParams::default(), &statefulset("web"))
        .await
        .expect("create");
    api.put_object(owned_pod("web-0", &set.uid().expect("uid"), false));
    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    sets.delete("web", &orphan).await.expect("orphan delete");
    let deleted = api.uptime();
    // Down for longer than the lag.
    api.begin_outage();
    tokio::time::sleep(lag * 3).await;
    let back = api.uptime();
    api.end_outage();
    api.wait_for(|s| s.get::<StatefulSet>("default", "web").is_none(), WAIT)
        .await
        .expect("deleted once the apiserver is back");

    let collector: Vec<WriteRecord> = api
        .write_records()
        .into_iter()
        .filter(|r| r.user_agent.as_deref() == Some(GARBAGE_COLLECTOR_AGENT))
        .collect();
    let written: Vec<(String, &str, Option<&str>, bool)> = collector
        .iter()
        .map(|r| {
            (
                r.target(),
                r.verb.as_str(),
                r.name.as_deref(),
                r.succeeded(),
            )
        })
        .collect();
    assert_eq!(
        written,
        [
            ("pods".to_owned(), "patch", Some("web-0"), true),
            ("statefulsets.apps".to_owned(), "patch", Some("web"), true),
        ]
    );
    for record in &collector {
        assert!(
            record.at >= back && record.at >= deleted + lag,
            "acted {:?} after the delete, the apiserver back after {:?}",
            record.at - deleted,
            back - deleted
        );
        assert_eq!(record.namespace.as_deref(), Some("default"));
    }
}

#[tokio::test]
async fn dry_run_create_validates_but_stores_nothing() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let before = api.resource_version();
    let mut changes = api.subscribe();
    let answer = sets
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &statefulset("probe"),
        )
        .await
        .expect("dry run");
    assert_eq!(answer.name_any(), "probe");
    assert!(api.get::<StatefulSet>("default", "probe").is_none());
    assert_eq!(api.resource_version(), before);
    assert!(changes.try_recv().is_err(), "no change is published");
    assert!(api.requests().last().is_some_and(|r| r.is_dry_run()));

    sets.create(&PostParams::default(), &statefulset("probe"))
        .await
        .expect("create");
    let change = changes.try_recv().expect("a real create is published");
    assert_eq!(
        (change.kind, change.resource_version),
        (ChangeKind::Added, before + 1)
    );
}

#[tokio::test]
async fn gate_knob_drops_max_unavailable() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let max_unavailable = |s: &StatefulSet| {
        s.spec
            .update_strategy
            .as_ref()?
            .rolling_update
            .as_ref()?
            .max_unavailable
            .clone()
    };
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };

    let kept = sets
        .create(&dry_run, &statefulset("probe"))
        .await
        .expect("dry run");
    assert!(
        max_unavailable(&kept).is_some(),
        "gate on: the field survives"
    );

    api.configure(|c| c.drop_statefulset_max_unavailable = true);
    let dropped = sets
        .create(&dry_run, &statefulset("probe"))
        .await
        .expect("dry run");
    assert!(
        max_unavailable(&dropped).is_none(),
        "gate off: the field is dropped"
    );
    let stored = sets
        .create(&PostParams::default(), &statefulset("web"))
        .await
        .expect("create");
    assert!(max_unavailable(&stored).is_none());
}

#[tokio::test]
async fn a_gone_resource_version_makes_the_watcher_relist() {
    let api = FakeApiServer::start().await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(api.client());
    claims
        .create(&PostParams::default(), &pvc("data-web-0", "1Gi"))
        .await
        .expect("create");
    let reader = claim_reflector(api.client());
    tokio::time::timeout(WAIT, reader.wait_until_ready())
        .await
        .expect("synced in time")
        .expect("writer alive");

    // Hold the watcher off while the history it would resume from is compacted away.
    api.fail_next("GET", "watch=true", 500, usize::MAX);
    api.disconnect_watches();
    api.put_object(
        serde_json::to_value(pvc("data-web-1", "1Gi"))
            .map(|mut v| {
                v["apiVersion"] = json!("v1");
                v["kind"] = json!("PersistentVolumeClaim");
                v
            })
            .expect("serializes"),
    );
    api.compact_history();
    // The watcher tried again and was refused before the fault is lifted.
    eventually("the watch to be refused", || {
        api.requests().iter().any(|r| r.is_watch() && r.code == 500)
    })
    .await;
    api.clear_faults();

    eventually("the reflector to relist", || {
        names(&reader) == ["data-web-0", "data-web-1"]
    })
    .await;
    let requests = api.requests();
    assert!(
        requests.iter().any(|r| r.is_watch() && r.code == 500),
        "the fault held the watcher off"
    );
    let lists = requests
        .iter()
        .filter(|r| {
            r.method == "GET" && !r.is_watch() && r.path.ends_with("persistentvolumeclaims")
        })
        .count();
    assert_eq!(lists, 2, "one initial list and one relist after 410 Gone");
}

#[tokio::test]
async fn raw_watch_streams_events_bookmarks_and_ends_on_timeout() {
    let api = FakeApiServer::start_with(FakeApiConfig {
        bookmark_interval: Duration::from_millis(100),
        ..FakeApiConfig::default()
    })
    .await;
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    let first = maps
        .create(
            &PostParams::default(),
            &config_map("a", json!({"app": "web"})),
        )
        .await
        .expect("create");

    let params = WatchParams {
        bookmarks: true,
        ..WatchParams::default()
    }
    .labels("app=web")
    .timeout(1);
    let stream = maps
        .watch(&params, &first.resource_version().expect("rv"))
        .await
        .expect("watch");
    let writer = {
        let maps = maps.clone();
        async move {
            maps.create(
                &PostParams::default(),
                &config_map("b", json!({"app": "web"})),
            )
            .await
            .expect("create");
            maps.create(
                &PostParams::default(),
                &config_map("c", json!({"app": "db"})),
            )
            .await
            .expect("create");
            let relabel = json!({"metadata": {"labels": {"app": "db"}}});
            maps.patch("b", &PatchParams::default(), &Patch::Merge(&relabel))
                .await
                .expect("patch");
        }
    };
    let (events, ()) = tokio::join!(
        tokio::time::timeout(WAIT, stream.try_collect::<Vec<_>>()),
        writer
    );
    let events = events
        .expect("the stream ends at timeoutSeconds")
        .expect("no stream error");
    let seen: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Added(m) => Some(format!("ADDED {}", m.name_any())),
            WatchEvent::Modified(m) => Some(format!("MODIFIED {}", m.name_any())),
            WatchEvent::Deleted(m) => Some(format!("DELETED {}", m.name_any())),
            _ => None,
        })
        .collect();
    assert_eq!(
        seen,
        ["ADDED b", "DELETED b"],
        "leaving the selection reads as a delete"
    );
    assert!(events.iter().any(|e| matches!(e, WatchEvent::Bookmark(_))));
}

#[tokio::test]
async fn request_log_and_injected_failures() {
    let api = FakeApiServer::start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    maps.create(&PostParams::default(), &config_map("cm", json!({})))
        .await
        .expect("create");
    api.clear_requests();

    api.fail_next("patch", "/configmaps/cm", 500, 1);
    let change = json!({"data": {"k": "w"}});
    let failed = api_error(
        maps.patch("cm", &PatchParams::default(), &Patch::Merge(&change))
            .await,
    );
    assert_eq!(
        (failed.code, failed.reason.as_str()),
        (500, "InternalError")
    );
    maps.patch("cm", &PatchParams::default(), &Patch::Merge(&change))
        .await
        .expect("the fault is used up");
    maps.get("cm").await.expect("get");

    let writes = api.writes();
    let summary: Vec<(String, u16)> = writes.iter().map(|r| (r.method.clone(), r.code)).collect();
    assert_eq!(
        summary,
        [("PATCH".to_owned(), 500), ("PATCH".to_owned(), 200)]
    );
    assert_eq!(writes[1].path, "/api/v1/namespaces/default/configmaps/cm");
    assert_eq!(
        writes[1].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(writes[1].body, Some(change));
    assert_eq!(api.requests().len(), 3, "reads are logged too");
}

#[tokio::test]
async fn recorder_publishes_events_k8s_io_events() {
    let api = FakeApiServer::start().await;
    let recorder = Recorder::new(
        api.client(),
        Reporter {
            controller: "stateful-admission".into(),
            instance: None,
        },
    );
    let regarding = ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some("StatefulSet".into()),
        name: Some("web".into()),
        namespace: Some("default".into()),
        uid: Some("set-uid".into()),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Warning,
        reason: "ClaimIncompatible".into(),
        note: Some("delete the claim and its pod to re-create it".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&event, &regarding).await.expect("create");
    recorder
        .publish(&event, &regarding)
        .await
        .expect("series update");

    let events: Api<EventV1> = Api::default_namespaced(api.client());
    let listed = events
        .list(&ListParams::default().fields("regarding.name=web"))
        .await
        .expect("list");
    assert_eq!(listed.items.len(), 1);
    let stored = &listed.items[0];
    assert_eq!(stored.reason.as_deref(), Some("ClaimIncompatible"));
    assert_eq!(stored.series.as_ref().map(|s| s.count), Some(2));
    // One collection, two versions: the core/v1 view of the same Event.
    let core = api.list_objects(&resources::CORE_EVENTS);
    assert_eq!(core.len(), 1, "{core:?}");
    assert_eq!(core[0]["involvedObject"]["name"], "web");
    assert_eq!(core[0]["reportingComponent"], "stateful-admission");
    assert_eq!(
        core[0]["message"],
        "delete the claim and its pod to re-create it"
    );
    assert_eq!(core[0]["series"]["count"], 2);
}

#[tokio::test]
async fn lease_replace_with_a_stale_version_conflicts() {
    let api = FakeApiServer::start().await;
    let leases: Api<Lease> = Api::default_namespaced(api.client());
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "stateful-admission"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }))
    .expect("valid lease");
    let created = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create");
    assert_eq!(
        api_error(leases.create(&PostParams::default(), &lease).await).code,
        409
    );

    let mut taken = created.clone();
    taken.spec.as_mut().expect("spec").holder_identity = Some("b".into());
    leases
        .replace("stateful-admission", &PostParams::default(), &taken)
        .await
        .expect("take over");

    let mut late = created;
    late.spec.as_mut().expect("spec").holder_identity = Some("c".into());
    let conflict = api_error(
        leases
            .replace("stateful-admission", &PostParams::default(), &late)
            .await,
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    let holder = api
        .get::<Lease>("default", "stateful-admission")
        .and_then(|l| l.spec?.holder_identity);
    assert_eq!(holder.as_deref(), Some("b"));
}

#[tokio::test]
async fn streams_end_when_the_server_shuts_down() {
    let api = FakeApiServer::start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    let stream = maps
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch");
    api.shutdown();
    let events = tokio::time::timeout(WAIT, stream.try_collect::<Vec<_>>())
        .await
        .expect("the stream ends");
    assert!(events.is_ok_and(|e| e.is_empty()));
}

#[tokio::test]
async fn cluster_scoped_resources_live_outside_namespaces() {
    let api = FakeApiServer::start().await;
    let namespaces: Api<Namespace> = Api::all(api.client());
    let default = namespaces.get("default").await.expect("built-in namespace");
    assert_eq!(
        default.status.and_then(|s| s.phase).as_deref(),
        Some("Active")
    );
    let created = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "apps"}})).expect("valid"),
        )
        .await
        .expect("create");
    assert_eq!(created.namespace(), None);
    assert!(
        namespaces
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .iter()
            .any(|n| n.name_any() == "apps")
    );

    let classes: Api<StorageClass> = Api::all(api.client());
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "gold", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "example.com/csi",
        "allowVolumeExpansion": true,
    }))
    .expect("valid class");
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("create");
    assert_eq!(
        api.get::<StorageClass>("", "gold")
            .and_then(|c| c.allow_volume_expansion),
        Some(true)
    );
    classes
        .delete("gold", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(api.list_objects(&resources::STORAGE_CLASSES).is_empty());
}

#[tokio::test]
async fn streaming_list_watchers_sync_too() {
    let api = FakeApiServer::start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    maps.create(&PostParams::default(), &config_map("before", json!({})))
        .await
        .expect("create");
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(maps.clone(), watcher::Config::default().streaming_lists()),
    );
    tokio::spawn(
        stream
            .default_backoff()
            .applied_objects()
            .for_each(|_| async {}),
    );
    tokio::time::timeout(WAIT, reader.wait_until_ready())
        .await
        .expect("synced in time")
        .expect("writer alive");
    maps.create(&PostParams::default(), &config_map("after", json!({})))
        .await
        .expect("create");
    eventually("the streaming watcher to see both", || {
        reader.state().len() == 2
    })
    .await;
    assert!(
        api.requests()
            .iter()
            .all(|r| !(r.method == "GET" && !r.is_watch() && r.path.ends_with("configmaps"))),
        "no list request"
    );
}

fn secret(value: Value) -> Secret {
    serde_json::from_value(value).expect("valid secret")
}

#[tokio::test]
async fn secrets_store_string_data_as_data_and_keep_their_type() {
    let api = FakeApiServer::start().await;
    let secrets: Api<Secret> = Api::namespaced(api.client(), "apps");
    let created = secrets
        .create(
            &PostParams::default(),
            &secret(
                json!({"metadata": {"name": "s"}, "data": {"b": "eQ=="}, "stringData": {"a": "x"}}),
            ),
        )
        .await
        .expect("create");
    let stored = api
        .get_object(&resources::SECRETS, "apps", "s")
        .expect("stored");
    assert_eq!(stored["data"], json!({"a": "eA==", "b": "eQ=="}));
    assert_eq!(stored["type"], "Opaque");
    assert!(stored.get("stringData").is_none());

    // A TLS Secret needs both halves; the type never changes.
    let half = api_error(
        secrets
            .create(
                &PostParams::default(),
                &secret(
                    json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
                    "data": {"tls.crt": "eA=="}}),
                ),
            )
            .await,
    );
    assert_eq!(half.code, 422);
    assert_eq!(
        half.message,
        "Secret \"tls\" is invalid: data[tls.key]: Required value"
    );
    let mut retyped = created.clone();
    retyped.type_ = Some("kubernetes.io/tls".into());
    retyped.string_data = Some(BTreeMap::from([
        ("tls.crt".to_owned(), "c".to_owned()),
        ("tls.key".to_owned(), "k".to_owned()),
    ]));
    let immutable = api_error(secrets.replace("s", &PostParams::default(), &retyped).await);
    assert_eq!(
        immutable.message,
        "Secret \"s\" is invalid: type: Invalid value: \"kubernetes.io/tls\": field is immutable"
    );

    // Optimistic concurrency as for every type.
    let mut changed = created.clone();
    changed.string_data = Some(BTreeMap::from([("a".to_owned(), "z".to_owned())]));
    secrets
        .replace("s", &PostParams::default(), &changed)
        .await
        .expect("current resourceVersion");
    let stale = api_error(secrets.replace("s", &PostParams::default(), &changed).await);
    assert_eq!(stale.code, 409);
    let again = api_error(
        secrets
            .create(
                &PostParams::default(),
                &secret(json!({"metadata": {"name": "s"}})),
            )
            .await,
    );
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
}

/// A webhook configuration with two webhooks carrying every field a patch must not touch.
fn webhook_configuration(kind: &str, name: &str) -> Value {
    let webhook = |hook: &str, resource: &str| {
        json!({
            "name": hook,
            "clientConfig": {"service": {"name": "svc", "namespace": "sa-system", "path": "/validate", "port": 443}},
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": [resource]}],
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]},
            "matchConditions": [
                {"name": "m1", "expression": "true"},
                {"name": "m2", "expression": "request.dryRun != true"},
            ],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
        })
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": {"app": "sa"}},
        "webhooks": [webhook("a.example.io", "statefulsets"), webhook("b.example.io", "persistentvolumeclaims")],
    })
}

#[tokio::test]
async fn webhook_configurations_are_cluster_scoped() {
    let api = FakeApiServer::start().await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(api.client());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(api.client());
    let object: MutatingWebhookConfiguration = serde_json::from_value(webhook_configuration(
        "MutatingWebhookConfiguration",
        "hooks",
    ))
    .expect("valid");
    mutating
        .create(&PostParams::default(), &object)
        .await
        .expect("create");
    let got = mutating.get("hooks").await.expect("get");
    assert_eq!(got.namespace(), None);
    assert_eq!(got.webhooks.map(|w| w.len()), Some(2));
    assert!(matches!(
        validating.get("hooks").await,
        Err(kube::Error::Api(s)) if s.code == 404
    ));
    api.put_object(webhook_configuration(
        "ValidatingWebhookConfiguration",
        "hooks",
    ));
    let listed = validating.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 1);
    assert!(
        api.requests().iter().any(|r| r.path
            == "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/hooks")
    );
}

/// A webhook configuration as the apiserver stores it: `SetDefaults_*Webhook` fills in the
/// failure and match policies, empty selectors, the timeout, each rule's scope and (mutating)
/// no reinvocation.
fn defaulted_webhooks(kind: &str, mut object: Value) -> Value {
    for webhook in object["webhooks"].as_array_mut().into_iter().flatten() {
        let Some(hook) = webhook.as_object_mut() else {
            continue;
        };
        for (field, value) in [
            ("failurePolicy", json!("Fail")),
            ("matchPolicy", json!("Equivalent")),
            ("namespaceSelector", json!({})),
            ("objectSelector", json!({})),
            ("timeoutSeconds", json!(10)),
        ] {
            hook.entry(field).or_insert(value);
        }
        if kind == "MutatingWebhookConfiguration" {
            hook.entry("reinvocationPolicy").or_insert(json!("Never"));
        }
        for rule in hook
            .get_mut("rules")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            rule.as_object_mut()
                .map(|r| r.entry("scope").or_insert(json!("*")));
        }
    }
    object
}

/// Strategic merge on the webhook configurations merges `webhooks` and their
/// `matchConditions` by `name`, as the apiserver does; a merge patch replaces the list.
#[tokio::test]
async fn strategic_merge_merges_webhooks_by_name() {
    let api = FakeApiServer::start().await;
    let kinds = [
        (
            "MutatingWebhookConfiguration",
            &resources::MUTATING_WEBHOOK_CONFIGURATIONS,
        ),
        (
            "ValidatingWebhookConfiguration",
            &resources::VALIDATING_WEBHOOK_CONFIGURATIONS,
        ),
    ];
    for (kind, resource) in kinds {
        let original = webhook_configuration(kind, "hooks");
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "one webhook's caBundle: everything else kept",
                json!({"webhooks": [{"name": "b.example.io", "clientConfig": {"caBundle": "Q0E="}}]}),
                {
                    let mut want = original.clone();
                    want["webhooks"][1]["clientConfig"]["caBundle"] = json!("Q0E=");
                    want
                },
            ),
            (
                "an unknown name is appended",
                json!({"webhooks": [{"name": "c.example.io", "sideEffects": "None", "gone": null}]}),
                {
                    let mut want = original.clone();
                    want["webhooks"]
                        .as_array_mut()
                        .expect("list")
                        .push(json!({"name": "c.example.io", "sideEffects": "None"}));
                    want
                },
            ),
            (
                "matchConditions merge by name; rules are atomic",
                json!({"webhooks": [{"name": "a.example.io",
                    "matchConditions": [{"name": "m2", "expression": "false"}],
                    "rules": [{"operations": ["CREATE"]}]}]}),
                {
                    let mut want = original.clone();
                    want["webhooks"][0]["matchConditions"][1]["expression"] = json!("false");
                    want["webhooks"][0]["rules"] = json!([{"operations": ["CREATE"]}]);
                    want
                },
            ),
            (
                "$patch: delete removes one item; $setElementOrder is accepted",
                json!({"$setElementOrder/webhooks": [{"name": "b.example.io"}],
                    "webhooks": [{"name": "a.example.io", "$patch": "delete"}]}),
                {
                    let mut want = original.clone();
                    want["webhooks"].as_array_mut().expect("list").remove(0);
                    want
                },
            ),
            (
                "$patch: replace replaces the list",
                json!({"webhooks": [{"$patch": "replace"}, {"name": "z.example.io"}]}),
                {
                    let mut want = original.clone();
                    want["webhooks"] = json!([{"name": "z.example.io"}]);
                    want
                },
            ),
        ];
        for (name, patch, want) in cases {
            api.put_object(original.clone());
            let got = raw_patch(
                &api,
                resource.plural,
                "application/strategic-merge-patch+json",
                patch,
            )
            .await
            .expect(name);
            // Server-owned metadata aside (a changed `webhooks` is a new generation), the
            // stored object is the merge, defaulted.
            let strip = |mut v: Value| {
                for field in [
                    "resourceVersion",
                    "uid",
                    "creationTimestamp",
                    "managedFields",
                    "generation",
                ] {
                    v["metadata"].as_object_mut().map(|m| m.remove(field));
                }
                v
            };
            assert_eq!(
                strip(got),
                strip(defaulted_webhooks(kind, want)),
                "{kind}: {name}"
            );
        }

        // Patch items must carry the merge key.
        api.put_object(original.clone());
        let keyless = api_error(
            raw_patch(
                &api,
                resource.plural,
                "application/strategic-merge-patch+json",
                json!({"webhooks": [{"sideEffects": "None"}]}),
            )
            .await,
        );
        assert_eq!(keyless.code, 500, "{kind}");
        assert!(
            keyless
                .message
                .contains("does not contain declared merge key: name")
        );

        // A JSON merge patch replaces the list, as it does on a real apiserver.
        let merged: Value = raw_patch(
            &api,
            resource.plural,
            "application/merge-patch+json",
            json!({"webhooks": [{"name": "b.example.io"}]}),
        )
        .await
        .expect("merge patch");
        assert_eq!(
            merged["webhooks"],
            defaulted_webhooks(kind, json!({"webhooks": [{"name": "b.example.io"}]}))["webhooks"],
            "{kind}"
        );
    }
}

async fn raw_patch(
    api: &FakeApiServer,
    plural: &str,
    content_type: &str,
    patch: Value,
) -> Result<Value, kube::Error> {
    let request = axum::http::Request::patch(format!(
        "/apis/admissionregistration.k8s.io/v1/{plural}/hooks"
    ))
    .header("content-type", content_type)
    .body(serde_json::to_vec(&patch).expect("json"))
    .expect("request");
    api.client().request(request).await
}

/// Held writes reach the registry together once released: a race made certain.
#[tokio::test]
async fn held_requests_race_on_release() {
    let api = FakeApiServer::start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    let created = maps
        .create(&PostParams::default(), &config_map("cm", json!({})))
        .await
        .expect("create");
    api.clear_requests();
    let hold = api.hold_next("put", "/configmaps/cm", 2);
    let replace = |value: &'static str| {
        let maps = maps.clone();
        let mut changed = created.clone();
        changed.data = Some(BTreeMap::from([("k".to_owned(), value.to_owned())]));
        async move { maps.replace("cm", &PostParams::default(), &changed).await }
    };
    let (first, second, ()) = tokio::join!(replace("a"), replace("b"), async {
        hold.arrived(2, WAIT).await.expect("both held");
        assert!(api.writes().is_empty(), "nothing applied while held");
        hold.release();
    });
    let code = |result: Result<ConfigMap, kube::Error>| match result {
        Ok(_) => 200,
        Err(error) => api_error::<()>(Err(error)).code,
    };
    let mut codes = [code(first), code(second)];
    codes.sort_unstable();
    assert_eq!(codes, [200, 409], "same resourceVersion: one wins");
}

/// `(manager, operation, subresource, fieldsV1)` of each managedFields entry.
fn ownership(object: &Value) -> Vec<(String, String, String, Value)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let text = |k: &str| e[k].as_str().unwrap_or("").to_owned();
            (
                text("manager"),
                text("operation"),
                text("subresource"),
                e["fieldsV1"].clone(),
            )
        })
        .collect()
}

fn managers(object: &Value) -> Vec<String> {
    ownership(object).into_iter().map(|(m, ..)| m).collect()
}

/// Who owns `spec.volumeClaimTemplates`, by manager and operation.
fn template_owners(object: &Value) -> Vec<(String, String)> {
    ownership(object)
        .into_iter()
        .filter(|(.., fields)| fields.pointer("/f:spec/f:volumeClaimTemplates").is_some())
        .map(|(m, op, ..)| (m, op))
        .collect()
}

fn client_with_agent(api: &FakeApiServer, agent: &str) -> Client {
    let mut config = kube::Config::new(api.url().parse().expect("url"));
    config.default_namespace = "default".into();
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_str(agent).expect("agent"),
    ));
    Client::try_from(config).expect("client")
}

#[tokio::test]
async fn managed_fields_name_the_writer_and_follow_each_write() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let params = PostParams {
        field_manager: Some("creator".into()),
        ..PostParams::default()
    };
    let created = sets
        .create(&params, &statefulset("web"))
        .await
        .expect("create");
    let created = serde_json::to_value(&created).expect("json");
    let entries = ownership(&created);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let (manager, operation, subresource, fields) = &entries[0];
    assert_eq!(
        (manager.as_str(), operation.as_str(), subresource.as_str()),
        ("creator", "Update", "")
    );
    assert_eq!(
        created["metadata"]["managedFields"][0]["apiVersion"],
        "apps/v1"
    );
    assert_eq!(
        fields["f:spec"]["f:volumeClaimTemplates"],
        json!({}),
        "an atomic list is one leaf"
    );
    assert_eq!(
        fields["f:spec"]["f:podManagementPolicy"],
        json!({}),
        "defaults are the creator's"
    );
    assert!(
        fields.get("f:status").is_none(),
        "status is not tracked on the main resource"
    );
    assert!(
        fields["f:metadata"].get("f:name").is_none() && fields.get("f:apiVersion").is_none(),
        "server-owned fields are not tracked"
    );

    // A patch with no fieldManager is named after the user agent's product token.
    let helm3 =
        Api::<StatefulSet>::default_namespaced(client_with_agent(&api, "Helm/3.17.0 (linux)"));
    let patched = helm3
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"replicas": 5}, "metadata": {"labels": {"team": "db"}}}),
            ),
        )
        .await
        .expect("patch");
    let patched = serde_json::to_value(&patched).expect("json");
    let helm_fields = ownership(&patched)
        .into_iter()
        .find(|(m, ..)| m == "Helm")
        .expect("Helm's entry")
        .3;
    assert_eq!(
        helm_fields,
        json!({"f:metadata": {"f:labels": {".": {}, "f:team": {}}}, "f:spec": {"f:replicas": {}}})
    );
    let creator = ownership(&patched)
        .into_iter()
        .find(|(m, ..)| m == "creator")
        .expect("creator's entry")
        .3;
    assert!(
        creator["f:spec"].get("f:replicas").is_none(),
        "a changed field moves to its writer"
    );

    // No fieldManager and no user agent: "unknown"; a status write is its own entry.
    let mut status = patched.clone();
    status["status"] = json!({"replicas": 2, "readyReplicas": 1});
    let written = sets
        .replace_status(
            "web",
            &PostParams::default(),
            &serde_json::from_value::<StatefulSet>(status).expect("set"),
        )
        .await
        .expect("status");
    let written = serde_json::to_value(&written).expect("json");
    let entry = ownership(&written)
        .into_iter()
        .find(|(_, _, sub, _)| sub == "status")
        .expect("status entry");
    assert_eq!(entry.0, "unknown");
    assert_eq!(
        entry.3,
        json!({"f:status": {"f:readyReplicas": {}, "f:replicas": {}}})
    );

    // Nothing changes: nothing is written, not even a new time.
    let before = api
        .get_object(&resources::STATEFULSETS, "default", "web")
        .expect("stored");
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 5}})),
    )
    .await
    .expect("no-op patch");
    assert_eq!(
        api.get_object(&resources::STATEFULSETS, "default", "web"),
        Some(before)
    );
}

#[tokio::test]
async fn managed_fields_sent_on_create_are_replaced_and_on_update_stand() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let journaled = json!([
        {"manager": "helm", "operation": "Apply", "apiVersion": "apps/v1", "time": "2026-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:volumeClaimTemplates": {}}}},
        {"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1", "time": "2026-01-02T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}}
    ]);
    let mut body = serde_json::to_value(statefulset("web")).expect("json");
    body["metadata"]["managedFields"] = journaled.clone();
    let params = PostParams {
        field_manager: Some("stateful-admission".into()),
        ..PostParams::default()
    };
    let created = sets
        .create(&params, &serde_json::from_value(body).expect("set"))
        .await
        .expect("create");
    let created = serde_json::to_value(&created).expect("json");
    // On create the creator takes every field the object has from the entries sent; an
    // entry left owning only fields the object lacks survives, as upstream.
    assert_eq!(managers(&created), ["kubectl", "stateful-admission"]);
    assert_eq!(
        template_owners(&created),
        [("stateful-admission".to_owned(), "Update".to_owned())]
    );
    assert_eq!(
        ownership(&created)[0].3,
        json!({"f:metadata": {"f:labels": {"f:team": {}}}})
    );

    // An update that changes nothing but managedFields: the entries stand as given.
    let restore = json!({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"],
                                      "managedFields": journaled}});
    let restored = sets
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("stateful-admission".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&restore),
        )
        .await
        .expect("restore");
    let restored = serde_json::to_value(&restored).expect("json");
    assert_eq!(restored["metadata"]["managedFields"], journaled);
    assert_eq!(
        template_owners(&restored),
        [("helm".to_owned(), "Apply".to_owned())]
    );

    // A write that also changes a field: that field moves to the writer, the rest stands.
    let replicas = sets
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("scaler".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&json!({"spec": {"replicas": 7}})),
        )
        .await
        .expect("scale");
    let replicas = serde_json::to_value(&replicas).expect("json");
    let entries = ownership(&replicas);
    assert_eq!(
        entries.iter().map(|(m, ..)| m.as_str()).collect::<Vec<_>>(),
        ["helm", "kubectl", "scaler"]
    );
    assert_eq!(
        entries[0].3,
        json!({"f:spec": {"f:volumeClaimTemplates": {}}})
    );
    assert_eq!(entries[2].3, json!({"f:spec": {"f:replicas": {}}}));

    // `[]` resets managedFields; the writer then owns only what it changed.
    let reset = sets
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"managedFields": []}})),
        )
        .await
        .expect("reset");
    assert!(reset.metadata.managed_fields.is_none());
}

fn applied_set(storage: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "annotations": {"team": "db"}},
        "spec": {
            "replicas": 2, "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}}],
        },
    })
}

#[tokio::test]
async fn server_side_apply_merges_owns_prunes_and_conflicts_like_the_apiserver() {
    let api = FakeApiServer::start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(api.client());
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());

    // Options: a field manager is required; force only with apply.
    let missing = api_error(
        sets.patch(
            "web",
            &PatchParams::default(),
            &Patch::Apply(&applied_set("1Gi")),
        )
        .await,
    );
    assert_eq!(missing.code, 422);
    assert_eq!(
        missing.message,
        r#"PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch"#
    );
    maps.create(&PostParams::default(), &config_map("cm", json!({})))
        .await
        .expect("create");
    let forced_merge = reqwest::Client::new()
        .patch(format!(
            "{}/api/v1/namespaces/default/configmaps/cm?force=true",
            api.url()
        ))
        .header("content-type", "application/merge-patch+json")
        .body("{}")
        .send()
        .await
        .expect("patch");
    assert_eq!(forced_merge.status(), 422);
    let forced_merge: Value = forced_merge.json().await.expect("status");
    assert_eq!(
        forced_merge["message"],
        r#"PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch"#
    );

    // An apply creates; the applier owns what it applied, not the defaults.
    let created = sets
        .patch(
            "web",
            &PatchParams::apply("helm"),
            &Patch::Apply(&applied_set("1Gi")),
        )
        .await
        .expect("apply creates");
    let created = serde_json::to_value(&created).expect("json");
    assert_eq!(
        created["spec"]["podManagementPolicy"], "OrderedReady",
        "defaulted"
    );
    let entries = ownership(&created);
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (entries[0].0.as_str(), entries[0].1.as_str()),
        ("helm", "Apply")
    );
    assert!(
        entries[0].3["f:spec"]
            .get("f:podManagementPolicy")
            .is_none()
    );
    assert_eq!(entries[0].3["f:spec"]["f:volumeClaimTemplates"], json!({}));
    let writes_before = api.writes().len();

    // The same configuration again: no conflict, nothing changes.
    sets.patch(
        "web",
        &PatchParams::apply("helm"),
        &Patch::Apply(&applied_set("1Gi")),
    )
    .await
    .expect("re-apply");
    assert_eq!(
        api.get_object(&resources::STATEFULSETS, "default", "web")
            .expect("stored")["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"],
        "an identical apply writes nothing"
    );
    assert_eq!(api.writes().len(), writes_before + 1);

    // Another manager that owns the atomic list (here by replacing managedFields as a
    // re-create without restore would leave them): an apply that changes the list conflicts.
    let stored = api
        .get_object(&resources::STATEFULSETS, "default", "web")
        .expect("stored");
    let taken = json!({"metadata": {"resourceVersion": stored["metadata"]["resourceVersion"],
        "managedFields": [
        {"manager": "unknown", "operation": "Update", "apiVersion": "apps/v1", "time": "2026-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:volumeClaimTemplates": {}, "f:replicas": {}}}}]}});
    sets.patch("web", &PatchParams::default(), &Patch::Merge(&taken))
        .await
        .expect("ownership handed over");
    let conflict = api_error(
        sets.patch(
            "web",
            &PatchParams::apply("helm"),
            &Patch::Apply(&applied_set("1Gi")),
        )
        .await,
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        conflict.message,
        r#"Apply failed with 1 conflict: conflict with "unknown" using apps/v1: .spec.volumeClaimTemplates"#,
        "the stored list is defaulted, the applied one is not: the value differs"
    );
    let causes = conflict
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, ".spec.volumeClaimTemplates");
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    // Applying the value another manager owns, unchanged, is no conflict: replicas is 2.
    let dry = sets
        .patch(
            "web",
            &PatchParams::apply("helm").dry_run(),
            &Patch::Apply(&json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                                  "metadata": {"name": "web"}, "spec": {"replicas": 2}})),
        )
        .await
        .expect("shared ownership of an equal value");
    assert_eq!(dry.spec.replicas, Some(2));
    // Forced: the applier takes the list; the dry run above stored nothing.
    let forced = sets
        .patch(
            "web",
            &PatchParams::apply("helm").force(),
            &Patch::Apply(&applied_set("1Gi")),
        )
        .await
        .expect("forced");
    let forced = serde_json::to_value(&forced).expect("json");
    assert_eq!(
        template_owners(&forced),
        [("helm".to_owned(), "Apply".to_owned())]
    );
    assert_eq!(
        ownership(&forced)
            .iter()
            .find(|(m, ..)| m == "unknown")
            .map(|e| e.3.clone()),
        Some(json!({"f:spec": {"f:replicas": {}}})),
        "the other manager keeps what was not taken"
    );

    // Fields the applier stops applying go, when nobody else owns them.
    let mut fewer = applied_set("1Gi");
    fewer["metadata"]
        .as_object_mut()
        .expect("meta")
        .remove("annotations");
    let pruned = sets
        .patch("web", &PatchParams::apply("helm"), &Patch::Apply(&fewer))
        .await
        .expect("prune");
    assert!(
        !pruned.annotations().contains_key("team"),
        "{:?}",
        pruned.annotations()
    );

    // A dry-run apply answers the result and stores nothing.
    let rv = api
        .get_object(&resources::STATEFULSETS, "default", "web")
        .expect("stored")["metadata"]["resourceVersion"]
        .clone();
    let mut bigger = applied_set("1Gi");
    bigger["spec"]["replicas"] = json!(9);
    let preview = sets
        .patch(
            "web",
            &PatchParams::apply("helm").force().dry_run(),
            &Patch::Apply(&bigger),
        )
        .await
        .expect("dry run");
    assert_eq!(preview.spec.replicas, Some(9));
    let stored = api
        .get_object(&resources::STATEFULSETS, "default", "web")
        .expect("stored");
    assert_eq!(stored["metadata"]["resourceVersion"], rv);
    assert_eq!(stored["spec"]["replicas"], 2);
}

/// A test hook: records the reviews it gets; the mutating webhook adds a label and warns,
/// the validating one denies objects labelled `deny`, and `broken` objects fail the call.
struct RecordingHook {
    reviews: std::sync::Mutex<Vec<Value>>,
    failure_policy: FailurePolicy,
}

impl AdmissionHook for RecordingHook {
    fn webhooks(
        &self,
        phase: Phase,
        attributes: &Attributes<'_>,
        _store: &StoreView<'_>,
    ) -> Vec<Webhook> {
        if !std::ptr::eq(attributes.resource, &resources::CONFIG_MAPS) {
            return Vec::new();
        }
        vec![Webhook {
            name: format!("{phase:?}.example.io").to_lowercase(),
            phase,
            endpoint: String::new(),
            failure_policy: self.failure_policy,
        }]
    }

    fn call(
        &self,
        webhook: &Webhook,
        review: Value,
    ) -> BoxFuture<'static, Result<Value, CallError>> {
        self.reviews.lock().expect("reviews").push(review.clone());
        let phase = webhook.phase;
        Box::pin(async move {
            let request = &review["request"];
            let labels = &request["object"]["metadata"]["labels"];
            if labels.get("broken").is_some() {
                return Err(CallError("connection refused".into()));
            }
            let mut response = json!({"uid": request["uid"], "allowed": true});
            match phase {
                Phase::Mutating => {
                    let patch =
                        json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]);
                    response["patch"] = json!(
                        base64::engine::general_purpose::STANDARD
                            .encode(serde_json::to_vec(&patch).expect("json"))
                    );
                    response["patchType"] = json!("JSONPatch");
                    response["warnings"] = json!(["labelled \"mutated\""]);
                }
                Phase::Validating if labels.get("deny").is_some() => {
                    response["allowed"] = json!(false);
                    response["status"] =
                        json!({"code": 403, "reason": "Forbidden", "message": "label deny is set"});
                }
                Phase::Validating => {}
            }
            Ok(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
            )
        })
    }
}

#[tokio::test]
async fn admission_hooks_see_reviews_mutate_deny_warn_and_fail_by_policy() {
    let api = FakeApiServer::start().await;
    let hook = Arc::new(RecordingHook {
        reviews: std::sync::Mutex::new(Vec::new()),
        failure_policy: FailurePolicy::Fail,
    });
    api.add_admission_hook(hook.clone());

    // Through the HTTP surface, impersonating a user, to see the Warning header.
    let http = reqwest::Client::new();
    let response = http
        .post(format!(
            "{}/api/v1/namespaces/default/configmaps?fieldManager=tester",
            api.url()
        ))
        .header("Impersonate-User", "jane")
        .json(&config_map("cm", json!({"app": "x"})))
        .send()
        .await
        .expect("create");
    assert_eq!(response.status(), 201);
    let warnings: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().expect("ascii").to_owned())
        .collect();
    assert_eq!(warnings, [r#"299 - "labelled \"mutated\"""#]);
    let created: Value = response.json().await.expect("json");
    assert_eq!(created["metadata"]["labels"]["mutated"], "yes");
    assert_eq!(
        template_owners(&created),
        Vec::<(String, String)>::new(),
        "no templates here"
    );
    assert!(
        ownership(&created)[0].3["f:metadata"]["f:labels"]
            .get("f:mutated")
            .is_none(),
        "managedFields are computed before mutating admission: the webhook's label is nobody's"
    );
    {
        let reviews = hook.reviews.lock().expect("reviews");
        assert_eq!(reviews.len(), 2, "mutating, then validating");
        let mutate = &reviews[0]["request"];
        assert_eq!(reviews[0]["kind"], "AdmissionReview");
        assert_eq!(mutate["operation"], "CREATE");
        assert_eq!(
            mutate["kind"],
            json!({"group": "", "version": "v1", "kind": "ConfigMap"})
        );
        assert_eq!(
            mutate["resource"],
            json!({"group": "", "version": "v1", "resource": "configmaps"})
        );
        assert_eq!(mutate["requestResource"], mutate["resource"]);
        assert_eq!(
            (mutate["name"].as_str(), mutate["namespace"].as_str()),
            (Some("cm"), Some("default"))
        );
        assert_eq!(mutate["userInfo"]["username"], "jane");
        assert_eq!(mutate["oldObject"], Value::Null);
        assert_eq!(mutate["dryRun"], false);
        assert_eq!(
            mutate["options"],
            json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "tester"})
        );
        assert!(
            mutate["object"]["metadata"].get("uid").is_none(),
            "mutating webhooks run before the uid is set"
        );
        let validate = &reviews[1]["request"];
        assert!(
            validate["object"]["metadata"]["uid"].is_string(),
            "validating ones after"
        );
        assert_eq!(validate["object"]["metadata"]["labels"]["mutated"], "yes");
        assert_ne!(mutate["uid"], validate["uid"]);
    }

    // A denial becomes the response Status; nothing is stored.
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    let denied = api_error(
        maps.patch(
            "cm",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"deny": "1"}}})),
        )
        .await,
    );
    assert_eq!((denied.code, denied.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        denied.message,
        r#"admission webhook "validating.example.io" denied the request: label deny is set"#
    );
    assert!(
        !maps
            .get("cm")
            .await
            .expect("get")
            .labels()
            .contains_key("deny")
    );
    let update = hook
        .reviews
        .lock()
        .expect("reviews")
        .last()
        .cloned()
        .expect("review");
    assert_eq!(update["request"]["operation"], "UPDATE");
    assert_eq!(update["request"]["oldObject"]["metadata"]["name"], "cm");
    assert_eq!(update["request"]["options"]["kind"], "UpdateOptions");
    assert_eq!(
        update["request"]["userInfo"]["username"],
        "kubernetes-admin"
    );

    // A failed call: failurePolicy Fail refuses the write...
    let broken = config_map("broken", json!({"broken": "1"}));
    let failed = api_error(maps.create(&PostParams::default(), &broken).await);
    assert_eq!(failed.code, 500);
    assert_eq!(
        failed.message,
        r#"Internal error occurred: failed calling webhook "mutating.example.io": connection refused"#
    );
    // ...and Ignore lets it through unchanged.
    api.clear_admission_hooks();
    api.add_admission_hook(Arc::new(RecordingHook {
        reviews: std::sync::Mutex::new(Vec::new()),
        failure_policy: FailurePolicy::Ignore,
    }));
    let passed = maps
        .create(&PostParams::default(), &broken)
        .await
        .expect("ignored");
    assert!(!passed.labels().contains_key("mutated"));

    // Dry runs are reviewed too, and say so.
    let hook = Arc::new(RecordingHook {
        reviews: std::sync::Mutex::new(Vec::new()),
        failure_policy: FailurePolicy::Fail,
    });
    api.clear_admission_hooks();
    api.add_admission_hook(hook.clone());
    maps.create(
        &PostParams {
            dry_run: true,
            ..PostParams::default()
        },
        &config_map("dry", json!({})),
    )
    .await
    .expect("dry run");
    assert!(maps.get_opt("dry").await.expect("get").is_none());
    let reviews = hook.reviews.lock().expect("reviews");
    assert_eq!(reviews[0]["request"]["dryRun"], true);
    assert_eq!(reviews[0]["request"]["options"]["dryRun"], json!(["All"]));
}

fn claim_object(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "db"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
}

/// `n` claims over three namespaces, loaded without HTTP.
fn seed_claims(api: &FakeApiServer, n: usize) {
    let stored =
        api.seed((0..n).map(|i| claim_object(&format!("ns-{}", i % 3), &format!("c-{i:05}"))));
    assert_eq!(stored, n);
}

/// GETs a path of the fake server and returns the status and body.
async fn raw_get(api: &FakeApiServer, path_and_query: &str) -> (u16, Value) {
    let response = reqwest::get(format!("{}{path_and_query}", api.url()))
        .await
        .expect("request");
    let code = response.status().as_u16();
    (code, response.json().await.expect("json body"))
}

#[tokio::test]
async fn watcher_pages_through_a_large_list_with_limit_and_continue() {
    let api = FakeApiServer::start().await;
    seed_claims(&api, 1_234);
    // kube-runtime's watcher lists with limit=500 (kube drops resourceVersion=0 beside a
    // limit), so 1,234 claims take a first page and two continued ones.
    let (store, writer) = reflector::store();
    tokio::spawn(
        watcher(
            Api::<PersistentVolumeClaim>::all(api.client()),
            watcher::Config::default(),
        )
        .reflect(writer)
        .for_each(|_| async {}),
    );
    eventually("the reflector holds every claim", || {
        store.state().len() == 1_234
    })
    .await;
    eventually("the watcher watches after its list", || {
        api.traffic(&resources::PERSISTENT_VOLUME_CLAIMS)
            .watches_open
            == 1
    })
    .await;
    let traffic = api.traffic(&resources::PERSISTENT_VOLUME_CLAIMS);
    assert_eq!((traffic.lists, traffic.continued_pages), (1, 2));
    assert_eq!(traffic.watches_opened, 1);
    let lists: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/persistentvolumeclaims" && !r.is_watch())
        .map(|r| r.query)
        .collect();
    assert_eq!(lists.len(), 3);
    assert!(lists[0].contains("limit=500") && !lists[0].contains("resourceVersion"));
    assert!(lists[1].contains("continue=") && !lists[1].contains("resourceVersion"));
}

#[tokio::test]
async fn continued_pages_come_from_the_first_page_snapshot() {
    let api = FakeApiServer::start().await;
    seed_claims(&api, 10);
    let claims: Api<PersistentVolumeClaim> = Api::all(api.client());
    let first = claims
        .list(&ListParams::default().limit(4))
        .await
        .expect("first page");
    let names = |list: &kube::core::ObjectList<PersistentVolumeClaim>| -> Vec<String> {
        list.items.iter().map(ResourceExt::name_any).collect()
    };
    // Key order is namespace then name.
    assert_eq!(names(&first), ["c-00000", "c-00003", "c-00006", "c-00009"]);
    assert_eq!(first.metadata.remaining_item_count, Some(6));
    let snapshot = first.metadata.resource_version.clone();

    // Changes after the first page: a claim deleted, one added, one modified.
    api.remove_object(&resources::PERSISTENT_VOLUME_CLAIMS, "ns-1", "c-00001");
    api.put_object(claim_object("ns-1", "c-00002a"));
    let mut changed = api
        .get_object(&resources::PERSISTENT_VOLUME_CLAIMS, "ns-1", "c-00004")
        .expect("stored");
    changed["metadata"]["labels"]["app"] = json!("changed");
    api.put_object(changed);

    let mut pages = vec![names(&first)];
    let mut token = first.metadata.continue_.clone();
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = claims
            .list(&ListParams::default().limit(4).continue_token(&t))
            .await
            .expect("continued page");
        assert_eq!(page.metadata.resource_version, snapshot, "one snapshot");
        if let Some(c) = page.items.iter().find(|c| c.name_any() == "c-00004") {
            assert_eq!(c.labels()["app"], "db", "the state at the snapshot");
        }
        pages.push(names(&page));
        token = page.metadata.continue_.clone();
    }
    assert_eq!(
        pages,
        [
            vec!["c-00000", "c-00003", "c-00006", "c-00009"],
            vec!["c-00001", "c-00004", "c-00007", "c-00002"],
            vec!["c-00005", "c-00008"],
        ]
    );
    // A new list sees the changes.
    let now = claims.list(&ListParams::default()).await.expect("list");
    assert_eq!(now.items.len(), 10);
    assert!(now.items.iter().any(|c| c.name_any() == "c-00002a"));
}

#[tokio::test]
async fn an_expired_continue_is_410_with_a_token_to_go_on() {
    let api = FakeApiServer::start().await;
    seed_claims(&api, 6);
    let claims: Api<PersistentVolumeClaim> = Api::all(api.client());
    let first = claims
        .list(&ListParams::default().limit(2))
        .await
        .expect("first page");
    let token = first.metadata.continue_.clone().expect("a continue token");
    // etcd compacted past the snapshot: the apiserver cannot serve the rest of it.
    api.put_object(claim_object("ns-0", "late"));
    api.compact_history();
    let (code, status) = raw_get(
        &api,
        &format!("/api/v1/persistentvolumeclaims?limit=2&continue={token}"),
    )
    .await;
    assert_eq!((code, status["reason"].as_str()), (410, Some("Expired")));
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("The provided continue parameter is too old")),
        "{status}"
    );
    let err = api_error(
        claims
            .list(&ListParams::default().limit(2).continue_token(&token))
            .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (410, "Expired"));
    // The token in the Status goes on at the current revision, inconsistently: the claim
    // created after the first page shows.
    let inconsistent = status["metadata"]["continue"].as_str().expect("token");
    let rest = claims
        .list(&ListParams::default().continue_token(inconsistent))
        .await
        .expect("the rest");
    let names: Vec<String> = rest.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["late", "c-00001", "c-00004", "c-00002", "c-00005"]);
    assert_eq!(
        rest.metadata.resource_version,
        Some(api.resource_version().to_string())
    );

    let (code, _) = raw_get(
        &api,
        &format!("/api/v1/persistentvolumeclaims?continue={token}&resourceVersion=5"),
    )
    .await;
    assert_eq!(code, 400, "resourceVersion beside continue is refused");
    let (code, _) = raw_get(
        &api,
        "/api/v1/persistentvolumeclaims?limit=2&continue=bm90IGEgdG9rZW4",
    )
    .await;
    assert_eq!(code, 400, "a token that does not decode is refused");
}

#[tokio::test]
async fn the_watch_cache_answers_resource_version_0_whole() {
    let api = FakeApiServer::start().await;
    seed_claims(&api, 5);
    let (code, list) = raw_get(
        &api,
        "/api/v1/persistentvolumeclaims?limit=2&resourceVersion=0",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().map(Vec::len), Some(5));
    assert!(list["metadata"].get("continue").is_none());
    // An exact resourceVersion with a limit is paged from that revision.
    let at = api.resource_version();
    api.remove_object(&resources::PERSISTENT_VOLUME_CLAIMS, "ns-0", "c-00000");
    let (code, list) = raw_get(
        &api,
        &format!(
            "/api/v1/persistentvolumeclaims?limit=2&resourceVersion={at}&resourceVersionMatch=Exact"
        ),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        list["items"][0]["metadata"]["name"], "c-00000",
        "as it was at {at}"
    );
    assert_eq!(list["metadata"]["remainingItemCount"], 3);
    // A label selector leaves the count out.
    let (_, list) = raw_get(
        &api,
        "/api/v1/persistentvolumeclaims?limit=1&labelSelector=app%3Ddb",
    )
    .await;
    assert!(list["metadata"]["continue"].is_string());
    assert!(list["metadata"].get("remainingItemCount").is_none());
}

#[tokio::test]
async fn a_lag_holds_back_the_kth_watch_only() {
    let api = FakeApiServer::start().await;
    let claims: Api<PersistentVolumeClaim> = Api::all(api.client());
    let params = WatchParams::default();
    let first = claims
        .watch(&params, "0")
        .await
        .expect("first watch")
        .boxed();
    let second = claims
        .watch(&params, "0")
        .await
        .expect("second watch")
        .boxed();
    let traffic = api.traffic(&resources::PERSISTENT_VOLUME_CLAIMS);
    assert_eq!((traffic.watches_open, traffic.watches_opened), (2, 2));
    let lag = Duration::from_millis(1500);
    api.lag_watches(
        &resources::PERSISTENT_VOLUME_CLAIMS,
        crate::support::fake_apiserver::WatchSelector::Nth(2),
        lag,
    );
    let committed = tokio::time::Instant::now();
    api.put_object(claim_object("default", "late"));
    let arrival = |mut stream: futures::stream::BoxStream<
        'static,
        kube::Result<WatchEvent<PersistentVolumeClaim>>,
    >| async move {
        loop {
            match tokio::time::timeout(WAIT, stream.next()).await {
                Ok(Some(Ok(WatchEvent::Added(c)))) if c.name_any() == "late" => {
                    return (tokio::time::Instant::now(), stream);
                }
                Ok(Some(_)) => {}
                other => panic!("no ADDED event: {other:?}"),
            }
        }
    };
    let ((fast, first), (slow, second)) = tokio::join!(arrival(first), arrival(second));
    assert!(
        fast - committed < lag,
        "the first watch is not held back: {:?}",
        fast - committed
    );
    assert!(
        slow - committed >= lag,
        "the second arrives after the lag: {:?}",
        slow - committed
    );
    assert!(slow > fast);
    api.clear_watch_lags();
    drop((first, second));
    eventually("dropped streams are no longer open", || {
        api.traffic(&resources::PERSISTENT_VOLUME_CLAIMS)
            .watches_open
            == 0
    })
    .await;
    assert_eq!(
        api.traffic(&resources::PERSISTENT_VOLUME_CLAIMS)
            .watches_opened,
        2
    );
}

#[tokio::test]
async fn a_lag_on_every_watch_of_a_resource_keeps_one_cache_behind() {
    let api = FakeApiServer::start().await;
    api.lag_watches(
        &resources::PERSISTENT_VOLUME_CLAIMS,
        crate::support::fake_apiserver::WatchSelector::Every,
        Duration::from_millis(600),
    );
    let claims = claim_reflector(api.client());
    let maps = reflector::store::Writer::<ConfigMap>::default();
    let maps_reader = maps.as_reader();
    tokio::spawn(
        watcher(
            Api::<ConfigMap>::all(api.client()),
            watcher::Config::default(),
        )
        .reflect(maps)
        .for_each(|_| async {}),
    );
    claims.wait_until_ready().await.expect("claims synced");
    maps_reader.wait_until_ready().await.expect("maps synced");
    api.put_object(claim_object("default", "after"));
    api.put_object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after", "namespace": "default"}}));
    eventually("the unlagged cache sees its change", || {
        !maps_reader.state().is_empty()
    })
    .await;
    assert!(
        claims.state().is_empty(),
        "the lagged cache is still behind"
    );
    eventually("the lagged cache catches up", || claims.state().len() == 1).await;
}

#[tokio::test]
async fn writes_are_counted_by_resource_verb_and_field_manager() {
    let api = FakeApiServer::start().await;
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(api.client());
    let managed = PostParams {
        field_manager: Some("tester".into()),
        ..PostParams::default()
    };
    claims
        .create(&managed, &pvc("a", "1Gi"))
        .await
        .expect("create");
    let mark = api.uptime();
    claims
        .patch_status(
            "a",
            &PatchParams {
                field_manager: Some("tester".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )
        .await
        .expect("status patch");
    claims
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &pvc("b", "1Gi"),
        )
        .await
        .expect("dry run");
    let _ = claims.get("a").await.expect("a read is no write");
    let _ = api_error(claims.delete("missing", &DeleteParams::default()).await);
    claims
        .delete("a", &DeleteParams::default())
        .await
        .expect("delete");

    let by_target = api.tally_writes(|w| {
        Some((
            w.target(),
            w.verb.as_str(),
            w.field_manager.as_deref().map(str::to_owned),
        ))
    });
    let expected: BTreeMap<_, usize> = [
        (
            (
                "persistentvolumeclaims".to_owned(),
                "create",
                Some("tester".to_owned()),
            ),
            1,
        ),
        (("persistentvolumeclaims".to_owned(), "create", None), 1),
        (
            (
                "persistentvolumeclaims/status".to_owned(),
                "patch",
                Some("tester".to_owned()),
            ),
            1,
        ),
        (("persistentvolumeclaims".to_owned(), "delete", None), 2),
    ]
    .into_iter()
    .collect();
    assert_eq!(by_target, expected);
    assert_eq!(
        api.count_writes(|w| w.succeeded()),
        3,
        "the dry run and the 404 changed nothing"
    );
    assert_eq!(
        api.count_writes(|w| w.at >= mark),
        4,
        "a window from a mark"
    );
    let records = api.write_records();
    assert_eq!(records.iter().filter(|w| w.dry_run).count(), 1);
    assert_eq!(records.last().and_then(|w| w.name.as_deref()), Some("a"));
    assert_eq!(
        records.last().and_then(|w| w.namespace.as_deref()),
        Some("default")
    );
}

/// Discovery and OpenAPI answer on the default configuration and on every profile, in shapes
/// kube's client and k8s-openapi read, and consistently with the switches: VolumeAttributesClasses
/// served (and answered) at one version where claims keep the field, nowhere else;
/// `maxUnavailable` and a claim's `volumeAttributesClassName` listed where the types have them.
#[tokio::test]
async fn discovery_and_openapi_agree_with_the_switches() {
    let configs = std::iter::once(("default".to_owned(), FakeApiConfig::default()))
        .chain(Profile::ALL.map(|p| (p.label().to_owned(), FakeApiConfig::profile(p))));
    for (name, config) in configs {
        let api = FakeApiServer::start_with(config.clone()).await;
        let client = api.client();
        let discovery = kube::Discovery::new(client.clone())
            .run()
            .await
            .unwrap_or_else(|e| panic!("{name}: discovery: {e}"));
        assert!(discovery.has_group("apps") && discovery.has_group("storage.k8s.io"));
        client
            .list_core_api_resources("v1")
            .await
            .unwrap_or_else(|e| panic!("{name}: /api/v1: {e}"));
        let version = client.apiserver_version().await.expect("version");
        assert_eq!(
            (version.git_version, version.git_commit),
            (config.git_version.clone(), config.git_commit.clone())
        );

        let served = if config.drop_claim_volume_attributes_class {
            None
        } else {
            config.volume_attributes_class_api
        };
        let group = client.list_api_groups().await.expect("groups");
        let storage = group
            .groups
            .iter()
            .find(|g| g.name == "storage.k8s.io")
            .expect("storage.k8s.io");
        for listed in &storage.versions {
            let resources = client
                .list_api_group_resources(&listed.group_version)
                .await
                .expect("a served version's resources");
            let has = resources
                .resources
                .iter()
                .any(|r| r.name == "volumeattributesclasses");
            assert_eq!(
                has,
                served == Some(listed.version.as_str()),
                "{name}: {}",
                listed.group_version
            );
        }
        for version in ["v1", "v1beta1"] {
            let request = axum::http::Request::post(format!(
                "/apis/storage.k8s.io/{version}/volumeattributesclasses"
            ))
            .header("content-type", "application/json")
            .body(
                serde_json::to_vec(&json!({"apiVersion": format!("storage.k8s.io/{version}"),
                    "kind": "VolumeAttributesClass", "metadata": {"name": "gold"},
                    "driverName": "example.com/none"}))
                .expect("json"),
            )
            .expect("request");
            let created = client.request::<Value>(request).await;
            assert_eq!(
                created.is_ok(),
                served == Some(version),
                "{name}: VolumeAttributesClass at {version}: {created:?}"
            );
        }

        let index: Value = client
            .request(
                axum::http::Request::get("/openapi/v3")
                    .body(Vec::new())
                    .expect("request"),
            )
            .await
            .expect("the OpenAPI v3 index");
        let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .expect("apps/v1 in the index")
            .to_owned();
        let apps: Value = client
            .request(
                axum::http::Request::get(url)
                    .body(Vec::new())
                    .expect("request"),
            )
            .await
            .expect("the apps/v1 document");
        let properties = |definition: &str| {
            apps["components"]["schemas"][definition]["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(
            properties("io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy")
                .contains_key("maxUnavailable"),
            config.statefulset_max_unavailable_in_types,
            "{name}"
        );
        assert_eq!(
            properties("io.k8s.api.core.v1.PersistentVolumeClaimSpec")
                .contains_key("volumeAttributesClassName"),
            config.claim_volume_attributes_class_in_types,
            "{name}"
        );
        assert!(
            !properties("io.k8s.api.apps.v1.StatefulSetSpec")
                .contains_key("volumeClaimUpdatePolicy"),
            "{name}: no captured version has KEP-4650"
        );
    }
}

/// The synthetic `native_template_edits` (KEP-4650, in no captured version): OpenAPI lists
/// `volumeClaimUpdatePolicy`, writes keep it, and a claim template's labels, annotations,
/// size and VolumeAttributesClass may change, nothing else of it.
#[tokio::test]
async fn native_template_edits_accept_the_kep_4650_changes() {
    for native in [false, true] {
        let api = FakeApiServer::start_with(FakeApiConfig {
            native_template_edits: native,
            ..FakeApiConfig::profile(Profile::V1_35)
        })
        .await;
        let client = api.client();
        let v2: Value = client
            .request(
                axum::http::Request::get("/openapi/v2")
                    .body(Vec::new())
                    .expect("request"),
            )
            .await
            .expect("openapi v2");
        assert_eq!(
            v2["definitions"]["io.k8s.api.apps.v1.StatefulSetSpec"]["properties"]
                .get("volumeClaimUpdatePolicy")
                .is_some(),
            native
        );
        // Untyped: k8s-openapi's StatefulSetSpec has no such field either.
        let sets: Api<kube::api::DynamicObject> = Api::default_namespaced_with(
            client.clone(),
            &kube::api::ApiResource::erase::<StatefulSet>(&()),
        );
        let mut body = serde_json::to_value(statefulset("web")).expect("json");
        body["apiVersion"] = json!("apps/v1");
        body["kind"] = json!("StatefulSet");
        body["spec"]["volumeClaimUpdatePolicy"] = json!("OnDelete");
        let created = sets
            .create(
                &PostParams::default(),
                &serde_json::from_value(body).expect("set"),
            )
            .await
            .expect("create");
        let stored = serde_json::to_value(&created).expect("json");
        assert_eq!(
            stored["spec"].get("volumeClaimUpdatePolicy").is_some(),
            native,
            "kept only where the types have it: {}",
            stored["spec"]
        );
        let mut templates = stored["spec"]["volumeClaimTemplates"].clone();
        templates[0]["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        templates[0]["metadata"]["labels"] = json!({"tier": "db"});
        let resized = sets
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"volumeClaimTemplates": templates.clone()}})),
            )
            .await;
        assert_eq!(resized.is_ok(), native, "size and labels: {resized:?}");
        templates[0]["spec"]["storageClassName"] = json!("other");
        let reclassed = api_error(
            sets.patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"volumeClaimTemplates": templates}})),
            )
            .await,
        );
        assert_eq!(reclassed.code, 422, "a class change stays refused");
    }
}
