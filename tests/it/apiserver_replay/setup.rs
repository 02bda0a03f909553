//! The objects the probes start from, made as the capture's own client made them (its user
//! agent, so its field manager), and the controllers' turns between probes, where the captured
//! answers show they acted.

use serde_json::{Value, json};

use super::{Harness, PROBE, controllers};

/// A claim of the probes: RWO, 1Gi, `class` (none when empty).
fn claim(namespace: &str, name: &str, class: &str) -> Value {
    let mut claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    if !class.is_empty() {
        claim["spec"]["storageClassName"] = json!(class);
    }
    claim
}

/// A host-path volume of 1Gi pre-bound to `namespace/claim`, as probe 06d makes one.
fn volume(name: &str, class: &str, namespace: &str, claim: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": class, "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": format!("/data/{name}")},
                 "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                              "namespace": namespace, "name": claim}}})
}

/// A StatefulSet as the probes write them: `web`, one container `main`, optionally the claim
/// template `data` (RWO, 1Gi, `standard`).
fn set(namespace: &str, replicas: i64, parallel: bool, claims: bool) -> Value {
    let mut set = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}},
                 "replicas": replicas}});
    if parallel {
        set["spec"]["podManagementPolicy"] = json!("Parallel");
    }
    if claims {
        set["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
                     "resources": {"requests": {"storage": "1Gi"}}}}]);
    }
    set
}

fn claims_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims")
}

fn sets_path(namespace: &str) -> String {
    format!("/apis/apps/v1/namespaces/{namespace}/statefulsets")
}

/// Before the first probe: the namespaces and the class `fixed` (no expansion).
pub async fn cluster(h: &Harness) {
    for ns in [
        "p02", "p03", "p04", "p05", "p06", "p07", "p08", "p09", "p10", "reviews",
    ] {
        h.create(
            PROBE,
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns}}),
        )
        .await;
    }
    h.create(
        PROBE,
        "/apis/storage.k8s.io/v1/storageclasses",
        json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fixed"},
        "provisioner": "example.com/none", "allowVolumeExpansion": false}),
    )
    .await;
}

/// What a group of probes starts from, made before its first probe.
pub async fn before(h: &Harness, id: &str) {
    match id.get(..3).unwrap_or("") {
        // A set whose pod template carries an annotation; one replica, so the controller
        // has a pod and a status to show.
        "03a" => {
            let mut web = set("p03", 1, false, true);
            web["spec"]["template"]["metadata"]["annotations"] =
                json!({"example.com/revision": "a"});
            h.create(PROBE, &sets_path("p03"), web).await;
            controllers::sync_sets(h, "p03").await;
        }
        // Unbound claims (the PV controller hands those of `standard` to its provisioner), a
        // bound claim of the class that does not expand; `bound` comes last, its volume only
        // with probe 06d.
        "06a" => {
            for (name, class) in [
                ("vac", "standard"),
                ("no-class", ""),
                ("unbound", "standard"),
                ("bound-fixed", "fixed"),
            ] {
                h.create(PROBE, &claims_path("p06"), claim("p06", name, class))
                    .await;
            }
            h.create(
                PROBE,
                "/api/v1/persistentvolumes",
                volume("pv-p06-bound-fixed", "fixed", "p06", "bound-fixed"),
            )
            .await;
            controllers::volumes(h, "p06").await;
            h.create(
                PROBE,
                &claims_path("p06"),
                claim("p06", "bound", "standard"),
            )
            .await;
        }
        // A parallel set with one pod and claim; two claims used by pods, one unscheduled and
        // one on a node.
        "07a" => {
            h.create(PROBE, &sets_path("p07"), set("p07", 1, true, true))
                .await;
            for (claim_name, pod_name, node) in [
                ("in-use-pending", "user-pending", None),
                ("in-use-scheduled", "user-scheduled", Some("node-1")),
            ] {
                h.create(
                    PROBE,
                    &claims_path("p07"),
                    claim("p07", claim_name, "standard"),
                )
                .await;
                let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pod_name, "namespace": "p07"},
                    "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                             "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]}});
                if let Some(node) = node {
                    pod["spec"]["nodeName"] = json!(node);
                }
                h.create(PROBE, "/api/v1/namespaces/p07/pods", pod).await;
            }
            controllers::sync_sets(h, "p07").await;
            controllers::volumes(h, "p07").await;
        }
        // The set the Events are about.
        "09a" => {
            h.create(PROBE, &sets_path("p09"), set("p09", 0, false, false))
                .await;
        }
        // A parallel set of one pod, no claims.
        "10a" => {
            h.create(PROBE, &sets_path("p10"), set("p10", 1, true, false))
                .await;
            controllers::sync_sets(h, "p10").await;
        }
        // The volume the StatefulSet's first claim binds to.
        "11a" => {
            h.create(
                PROBE,
                "/api/v1/persistentvolumes",
                volume("pv-reviews-data-web-0", "standard", "reviews", "data-web-0"),
            )
            .await;
        }
        _ => {}
    }
}

/// The controllers' turn after a probe that succeeded, where the captured answers show it.
pub async fn after(h: &Harness, id: &str, ok: bool) {
    if !ok {
        return;
    }
    match id.get(..3).unwrap_or("") {
        "03e" | "03f" | "03g" | "03h" => controllers::sync_sets(h, "p03").await,
        "08a" | "08b" | "08c" => controllers::sync_sets(h, "p08").await,
        "10a" | "10c" => controllers::sync_sets(h, "p10").await,
        "11c" | "11d" | "11e" | "11g" => {
            controllers::sync_sets(h, "reviews").await;
            controllers::volumes(h, "reviews").await;
        }
        // The default class appears: the PV controller gives it to the class-less claim.
        "05e" => controllers::volumes(h, "p05").await,
        // ... and the class goes again.
        "05h" => {
            let answer = h
                .call(
                    PROBE,
                    "DELETE",
                    "/apis/storage.k8s.io/v1/storageclasses/default-class",
                    None,
                    None,
                )
                .await;
            assert!(answer.ok(), "delete default-class: {answer:?}");
        }
        // The volume pre-bound to `bound` exists: the PV controller binds them.
        "06d" => controllers::volumes(h, "p06").await,
        _ => {}
    }
}
