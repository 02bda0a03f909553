//! The GitOps loop end to end: the real controller against the fake API server with the
//! project's webhook in its write path. Each loop is a table of steps as Helm 4 (server-side
//! apply, manager `helm`), kubectl's client-side apply (three-way strategic merge patch with
//! the last-applied annotation) and `--force-conflicts` run them; after each step the answer
//! (no conflict), the owner of `spec.volumeClaimTemplates` and the number of re-creates of
//! the set (orphan deletes and creates in the request log) are checked.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use stateful_admission::controller::{ControllerConfig, Features};
use stateful_admission::names;

use crate::support::admission_hook::RouterHook;
use crate::support::controller::{
    CONTROLLER_NAMESPACE, RunningController, config, eventually, no_features,
};
use crate::support::fake_apiserver::{FakeApiServer, RecordedRequest, ResourceType, resources};

const NS: &str = "db";
const JOURNAL: &str = "sa-journal.db.web";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn fast(identity: &str) -> ControllerConfig {
    ControllerConfig {
        converge_poll: Duration::from_millis(100),
        resync: Duration::from_secs(1),
        ..config(
            identity,
            Features {
                claim_rollout: true,
                converge: true,
                ..no_features()
            },
        )
    }
}

/// The StatefulSet as a chart renders it.
fn manifest(storage: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": NS,
                     "labels": {"app.kubernetes.io/managed-by": "Helm"},
                     "annotations": {"meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": NS}},
        "spec": {"replicas": 2, "serviceName": "web",
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                              "resources": {"requests": {"storage": storage}}}}]},
    })
}

/// How a step writes the manifest.
#[derive(Debug, Clone, Copy)]
enum Write {
    /// `helm upgrade` (Helm 4) / `kubectl apply --server-side`: manager `helm`.
    Apply { force: bool },
    /// `kubectl apply` (client-side): create, or a three-way strategic merge patch.
    ClientSide,
}

/// One step of a loop and what must hold after it.
struct Step {
    name: &'static str,
    write: Write,
    storage: &'static str,
    /// `Some(message)`: the write is refused with this conflict (not caused by this project:
    /// shown to say what `--force-conflicts` is for).
    conflict: Option<&'static str>,
    /// Re-creates of the set this step causes.
    recreates: usize,
    /// The live template's storage once settled.
    live: &'static str,
    /// `(manager, operation)` owning `spec.volumeClaimTemplates` once settled.
    owner: (&'static str, &'static str),
}

fn template_owners(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e.pointer("/fieldsV1/f:spec/f:volumeClaimTemplates")
                .is_some()
        })
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or("").to_owned(),
                e["operation"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn live_set(api: &FakeApiServer) -> Option<Value> {
    api.get_object(ResourceType::of::<StatefulSet>(), NS, "web")
}

fn live_storage(set: &Value) -> String {
    set.pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

fn has_desired(set: &Value) -> bool {
    set.pointer("/metadata/annotations")
        .and_then(|a| a.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES))
        .is_some()
}

/// Successful orphan deletes of the set: one per re-create.
fn recreates(writes: &[RecordedRequest]) -> usize {
    writes
        .iter()
        .filter(|w| {
            w.method == "DELETE"
                && w.path.ends_with("/namespaces/db/statefulsets/web")
                && w.code < 300
        })
        .count()
}

fn creates(writes: &[RecordedRequest]) -> usize {
    writes
        .iter()
        .filter(|w| {
            w.method == "POST"
                && w.path.ends_with("/namespaces/db/statefulsets")
                && w.code < 300
                && !w.is_dry_run()
        })
        .count()
}

fn settled(api: &FakeApiServer) -> bool {
    api.get::<ConfigMap>(CONTROLLER_NAMESPACE, JOURNAL)
        .is_none()
        && live_set(api).is_some_and(|s| !has_desired(&s))
}

/// A claim and a pod per replica, owned by the set as the StatefulSet controller leaves them.
fn add_replicas(api: &FakeApiServer, set_uid: &str) {
    api.put_object(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "fast"}, "provisioner": "csi.example.com", "allowVolumeExpansion": true}));
    for n in 0..2 {
        api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": format!("data-web-{n}"), "namespace": NS, "labels": {"app": "web"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                     "resources": {"requests": {"storage": "1Gi"}}, "volumeName": format!("pv-{n}")},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}));
        api.put_object(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{n}"), "namespace": NS,
                         "labels": {"app": "web", names::POD_NAME_LABEL: format!("web-{n}")},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                                              "uid": set_uid, "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            "status": {"phase": "Running"}}));
    }
}

/// Writes the manifest as `write` does; answers the conflict message, if refused.
async fn write(
    api: &FakeApiServer,
    write: Write,
    storage: &str,
    dry_run: bool,
) -> Result<Value, String> {
    let sets: Api<StatefulSet> = Api::namespaced(api.client(), NS);
    let manifest = manifest(storage);
    let result = match write {
        Write::Apply { force } => {
            let mut params = PatchParams::apply("helm");
            params.force = force;
            params.dry_run = dry_run;
            sets.patch("web", &params, &Patch::Apply(&manifest)).await
        }
        Write::ClientSide => {
            let last_applied = serde_json::to_string(&manifest).expect("json");
            match sets.get_opt("web").await.map_err(|e| e.to_string())? {
                None => {
                    let mut created = manifest.clone();
                    created["metadata"]["annotations"][LAST_APPLIED] = json!(last_applied);
                    let params = PostParams {
                        dry_run,
                        field_manager: Some("kubectl-client-side-apply".into()),
                    };
                    let object = serde_json::from_value(created).expect("set");
                    sets.create(&params, &object).await
                }
                Some(live) => {
                    // kubectl's three-way merge: the new last-applied, and every field of the
                    // manifest whose live value differs (volumeClaimTemplates has no patch
                    // strategy: it is replaced whole).
                    let live = serde_json::to_value(&live).expect("json");
                    let mut patch =
                        json!({"metadata": {"annotations": {LAST_APPLIED: last_applied}}});
                    if live["spec"]["volumeClaimTemplates"]
                        != manifest["spec"]["volumeClaimTemplates"]
                    {
                        patch["spec"] = json!({"volumeClaimTemplates": manifest["spec"]["volumeClaimTemplates"]});
                    }
                    let params = PatchParams {
                        dry_run,
                        field_manager: Some("kubectl-client-side-apply".into()),
                        ..PatchParams::default()
                    };
                    sets.patch("web", &params, &Patch::Strategic(&patch)).await
                }
            }
        }
    };
    match result {
        Ok(set) => Ok(serde_json::to_value(&set).expect("json")),
        Err(kube::Error::Api(status)) => Err(status.message),
        Err(other) => panic!("write failed: {other}"),
    }
}

/// Runs `steps` after `install`, with the controller and the webhook running; returns every
/// step's failures (so that one run shows them all).
async fn run_loop(name: &str, install: Write, steps: &[Step]) -> Vec<String> {
    let api = FakeApiServer::start().await;
    RouterHook::install(&api).await;
    let installed = write(&api, install, "1Gi", false)
        .await
        .unwrap_or_else(|e| panic!("{name}: install: {e}"));
    let uid = installed["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    add_replicas(&api, &uid);
    let controller = RunningController::start(&api, fast("a"));
    let mut failures = Vec::new();
    let mut expected_recreates = 0;
    let initial_creates = creates(&api.writes());
    for step in steps {
        let what = format!("{name}: {}", step.name);
        let answer = write(&api, step.write, step.storage, false).await;
        match (answer, step.conflict) {
            (Ok(_), None) => {}
            (Err(message), Some(expected)) if message == expected => {}
            (Err(message), _) => failures.push(format!("{what}: refused: {message}")),
            (Ok(_), Some(expected)) => {
                failures.push(format!("{what}: expected the conflict {expected:?}"))
            }
        }
        expected_recreates += step.recreates;
        let converged = eventually(Duration::from_secs(15), || {
            settled(&api) && recreates(&api.writes()) >= expected_recreates
        })
        .await;
        // A second re-create would have started (a journal written, the set deleted) in the
        // reconciles since (resync 1 s).
        controller.reconciled_after_n(controller.mark(), 3).await;
        let writes = api.writes();
        if !converged || recreates(&writes) != expected_recreates || !settled(&api) {
            failures.push(format!(
                "{what}: {} re-creates in all, expected {expected_recreates} (settled: {})",
                recreates(&writes),
                settled(&api)
            ));
        }
        if creates(&writes) - initial_creates != recreates(&writes) {
            failures.push(format!(
                "{what}: creates and deletes of the set do not pair up"
            ));
        }
        let Some(live) = live_set(&api) else {
            failures.push(format!("{what}: the set is gone"));
            break;
        };
        if live_storage(&live) != step.live {
            failures.push(format!(
                "{what}: live template storage {}, expected {}",
                live_storage(&live),
                step.live
            ));
        }
        let owners = template_owners(&live);
        let want = vec![(step.owner.0.to_owned(), step.owner.1.to_owned())];
        if owners != want {
            failures.push(format!(
                "{what}: spec.volumeClaimTemplates owned by {owners:?}, expected {want:?}"
            ));
        }
    }
    // Pods and claims were never deleted.
    let writes = api.writes();
    if writes.iter().any(|w| {
        w.method == "DELETE"
            && (w.path.contains("/pods/") || w.path.contains("/persistentvolumeclaims/"))
    }) {
        failures.push(format!("{name}: a pod or claim was deleted"));
    }
    controller.stop().await;
    // Every write names its field manager, but the Events of kube's recorder, which takes
    // no parameters: the user agent names those.
    for w in api.writes() {
        if w.method != "DELETE" && !w.path.contains("/events") && !w.query.contains("fieldManager=")
        {
            failures.push(format!(
                "{name}: {} {} carries no fieldManager",
                w.method, w.path
            ));
        }
    }
    // Every write of ours names us, Events (kube's recorder) by the user agent.
    for resource in resources::ALL {
        for object in api.list_objects(resource) {
            for entry in object["metadata"]["managedFields"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if entry["manager"] == "unknown" {
                    failures.push(format!(
                        "{name}: {} {} was written without a field manager",
                        resource.kind, object["metadata"]["name"]
                    ));
                }
            }
        }
    }
    failures
}

const HELM: (&str, &str) = ("helm", "Apply");
const CLIENT_SIDE: (&str, &str) = ("kubectl-client-side-apply", "Update");

#[tokio::test(flavor = "multi_thread")]
async fn gitops_loops_keep_field_ownership_without_conflicts_or_second_recreates() {
    let server_side = Write::Apply { force: false };
    let forced = Write::Apply { force: true };
    let loops: Vec<(&str, Write, Vec<Step>)> = vec![
        (
            "Helm 4 (server-side apply)",
            server_side,
            vec![
                Step {
                    name: "upgrade to 2Gi",
                    write: server_side,
                    storage: "2Gi",
                    conflict: None,
                    recreates: 1,
                    live: "2Gi",
                    owner: HELM,
                },
                Step {
                    name: "the same upgrade again",
                    write: server_side,
                    storage: "2Gi",
                    conflict: None,
                    recreates: 0,
                    live: "2Gi",
                    owner: HELM,
                },
                Step {
                    name: "--force-conflicts, unchanged",
                    write: forced,
                    storage: "2Gi",
                    conflict: None,
                    recreates: 0,
                    live: "2Gi",
                    owner: HELM,
                },
                Step {
                    name: "rollback to 1Gi",
                    write: server_side,
                    storage: "1Gi",
                    conflict: None,
                    recreates: 1,
                    live: "1Gi",
                    owner: HELM,
                },
                Step {
                    name: "the rollback again",
                    write: server_side,
                    storage: "1Gi",
                    conflict: None,
                    recreates: 0,
                    live: "1Gi",
                    owner: HELM,
                },
                Step {
                    name: "upgrade to 3Gi",
                    write: server_side,
                    storage: "3Gi",
                    conflict: None,
                    recreates: 1,
                    live: "3Gi",
                    owner: HELM,
                },
            ],
        ),
        (
            "kubectl apply (client-side three-way merge)",
            Write::ClientSide,
            vec![
                Step {
                    name: "apply 2Gi",
                    write: Write::ClientSide,
                    storage: "2Gi",
                    conflict: None,
                    recreates: 1,
                    live: "2Gi",
                    owner: CLIENT_SIDE,
                },
                Step {
                    name: "the same apply again",
                    write: Write::ClientSide,
                    storage: "2Gi",
                    conflict: None,
                    recreates: 0,
                    live: "2Gi",
                    owner: CLIENT_SIDE,
                },
                Step {
                    name: "rollback to 1Gi",
                    write: Write::ClientSide,
                    storage: "1Gi",
                    conflict: None,
                    recreates: 1,
                    live: "1Gi",
                    owner: CLIENT_SIDE,
                },
            ],
        ),
        (
            "client-side history, then server-side apply",
            Write::ClientSide,
            vec![
                Step {
                    name: "server-side apply over client-side ownership",
                    write: server_side,
                    storage: "1Gi",
                    conflict: Some(
                        r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.volumeClaimTemplates"#,
                    ),
                    recreates: 0,
                    live: "1Gi",
                    owner: CLIENT_SIDE,
                },
                Step {
                    name: "--force-conflicts, unchanged",
                    write: forced,
                    storage: "1Gi",
                    conflict: None,
                    recreates: 0,
                    live: "1Gi",
                    owner: HELM,
                },
                Step {
                    name: "--force-conflicts to 2Gi",
                    write: forced,
                    storage: "2Gi",
                    conflict: None,
                    recreates: 1,
                    live: "2Gi",
                    owner: HELM,
                },
                Step {
                    name: "server-side apply again",
                    write: server_side,
                    storage: "2Gi",
                    conflict: None,
                    recreates: 0,
                    live: "2Gi",
                    owner: HELM,
                },
            ],
        ),
    ];
    let mut failures = Vec::new();
    for (name, install, steps) in loops {
        failures.extend(run_loop(name, install, &steps).await);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_apply_shows_no_drift_while_a_rollout_is_in_flight_nor_after() {
    let api = FakeApiServer::start().await;
    RouterHook::install(&api).await;
    let server_side = Write::Apply { force: false };
    let installed = write(&api, server_side, "1Gi", false)
        .await
        .expect("install");
    add_replicas(&api, installed["metadata"]["uid"].as_str().expect("uid"));
    // No controller yet: the webhook records the change, the set keeps its templates.
    let recorded = write(&api, server_side, "2Gi", false)
        .await
        .expect("upgrade");
    assert!(has_desired(&recorded));
    assert_eq!(live_storage(&recorded), "1Gi");
    // The prediction comes through the typed client, which drops the nulls the apiserver
    // prints (an embedded ObjectMeta's zero creationTimestamp); the live set is raw.
    fn without_nulls(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.retain(|_, v| !v.is_null());
                map.values_mut().for_each(without_nulls);
            }
            Value::Array(items) => items.iter_mut().for_each(without_nulls),
            _ => {}
        }
    }
    let comparable = |set: &Value| {
        let mut set = set.clone();
        let meta = set["metadata"].as_object_mut().expect("metadata");
        meta.remove("managedFields");
        without_nulls(&mut set);
        set
    };
    let in_flight = live_set(&api).expect("set");
    let predicted = write(&api, server_side, "2Gi", true)
        .await
        .expect("dry run");
    assert_eq!(
        comparable(&predicted),
        comparable(&in_flight),
        "in flight, the prediction is the live object: templates put back, same annotation"
    );
    let controller = RunningController::start(&api, fast("a"));
    assert!(eventually(Duration::from_secs(15), || settled(&api)).await);
    let converged = live_set(&api).expect("set");
    assert_eq!(live_storage(&converged), "2Gi");
    let predicted = write(&api, server_side, "2Gi", true)
        .await
        .expect("dry run");
    assert_eq!(
        comparable(&predicted),
        comparable(&converged),
        "after convergence the manifest is the live object"
    );
    assert_eq!(
        template_owners(&converged),
        [("helm".to_owned(), "Apply".to_owned())]
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_create_and_ownership_restore_resumes_from_the_journal() {
    let api = FakeApiServer::start().await;
    RouterHook::install(&api).await;
    let server_side = Write::Apply { force: false };
    let installed = write(&api, server_side, "1Gi", false)
        .await
        .expect("install");
    let uid = installed["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    add_replicas(&api, &uid);
    write(&api, server_side, "2Gi", false)
        .await
        .expect("upgrade");
    // Every later patch of the set fails: the controller gets as far as the create.
    api.fail_next("PATCH", "/namespaces/db/statefulsets/web", 500, 10_000);
    let first = RunningController::start(&api, fast("first"));
    let created = eventually(Duration::from_secs(15), || {
        api.get::<ConfigMap>(CONTROLLER_NAMESPACE, JOURNAL)
            .is_some()
            && live_set(&api).is_some_and(|s| s["metadata"]["uid"] != json!(uid))
    })
    .await;
    assert!(created, "the controller did not get to the create");
    // It went on to the restore, which the apiserver refused: the crash comes right after
    // the create, the templates still the creator's.
    let restore_refused = || {
        let requests = api.requests();
        let created = requests.iter().position(|r| {
            r.method == "POST" && r.path.ends_with("/namespaces/db/statefulsets") && r.code < 300
        });
        created.is_some_and(|at| {
            requests[at..].iter().any(|r| {
                r.method == "PATCH"
                    && r.path.ends_with("/namespaces/db/statefulsets/web")
                    && r.code == 500
            })
        })
    };
    assert!(
        eventually(Duration::from_secs(15), restore_refused).await,
        "the restore was not attempted"
    );
    first.kill();
    api.clear_faults();
    let between = live_set(&api).expect("set");
    let owners: BTreeMap<String, String> = template_owners(&between).into_iter().collect();
    assert!(
        !owners.contains_key("helm"),
        "before the restore the creator owns the templates: {owners:?}"
    );

    let second = RunningController::start(&api, fast("second"));
    assert!(eventually(Duration::from_secs(15), || settled(&api)).await);
    let live = live_set(&api).expect("set");
    assert_eq!(live_storage(&live), "2Gi");
    assert_eq!(
        template_owners(&live),
        [("helm".to_owned(), "Apply".to_owned())]
    );
    let writes = api.writes();
    assert_eq!(recreates(&writes), 1, "one orphan delete");
    assert_eq!(creates(&writes), 1, "one create (the install was an apply)");
    write(&api, server_side, "2Gi", false)
        .await
        .expect("the next apply has no conflict");
    // Looked at the applied set since (resync 1 s): a re-create would have begun.
    second.reconciled_after_n(second.mark(), 3).await;
    assert_eq!(recreates(&api.writes()), 1, "and causes no re-create");
    assert!(settled(&api), "no convergence under way");
    second.stop().await;
}
