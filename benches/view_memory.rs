//! Memory of the cluster view alone, per object of each kind, at the scale of a large
//! platform cluster: 50,000 claims, 10,000 StatefulSets (three claim templates each) and
//! 25,000 pods, shaped like `kubectl get -o json` prints them (managedFields, last-applied
//! annotations, pod specs, status). Objects are decoded as the watches decode them (the lite
//! types) and applied to the view's stores one at a time; a counting allocator over jemalloc
//! reports the bytes the stores hold (jemalloc's usable sizes, so size-class rounding counts).
//!
//! For comparison it measures what the same objects cost decoded whole as typed k8s-openapi
//! objects, as the controller's own caches held StatefulSets and Pods before, and the
//! StatefulSet controller's key store. It also times decoding and storing, and reading back.
//!
//! `cargo bench --bench view_memory` (sizes: `VIEW_MEMORY_SCALE=CLAIMS,SETS,PODS`).

#[path = "support/state.rs"]
#[allow(dead_code)]
mod state;

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use stateful_admission::cluster::lite::{ClaimLite, PodLite, SetLite};
use stateful_admission::cluster::{ClusterWriters, Kind};

/// jemalloc (the production allocator), counting the usable size of what is live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

fn usable(ptr: *mut u8) -> isize {
    // SAFETY: `ptr` was returned by jemalloc and is live.
    unsafe { tikv_jemallocator::usable_size(ptr) as isize }
}

// SAFETY: every call is forwarded to jemalloc unchanged; only a counter is kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { stateful_admission::allocator::Jemalloc.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(usable(ptr), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { stateful_admission::allocator::Jemalloc.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(usable(ptr), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(usable(ptr), Ordering::Relaxed);
        unsafe { stateful_admission::allocator::Jemalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let before = usable(ptr);
        let moved =
            unsafe { stateful_admission::allocator::Jemalloc.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            LIVE.fetch_add(usable(moved) - before, Ordering::Relaxed);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[derive(Clone, Copy)]
struct Scale {
    claims: usize,
    sets: usize,
    pods: usize,
}

fn scale() -> Scale {
    let default = Scale {
        claims: 50_000,
        sets: 10_000,
        pods: 25_000,
    };
    let Ok(text) = std::env::var("VIEW_MEMORY_SCALE") else {
        return default;
    };
    let n: Vec<usize> = text
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("VIEW_MEMORY_SCALE=CLAIMS,SETS,PODS")
        })
        .collect();
    match n[..] {
        [claims, sets, pods] => Scale { claims, sets, pods },
        _ => panic!("VIEW_MEMORY_SCALE=CLAIMS,SETS,PODS"),
    }
}

fn size(scale: Scale) -> state::Size {
    state::Size {
        claims: scale.claims,
        sets: scale.sets,
        classes: 50,
        namespaces: 40,
    }
}

/// A pod of a StatefulSet as `kubectl get -o json` prints it.
fn pod(set: &Value, ordinal: usize) -> Value {
    let name = set["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = set["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod = format!("{name}-{ordinal}");
    let time = "2026-01-01T00:00:00Z";
    let condition = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": time});
    let managed = |manager: &str, fields: Value| {
        json!({"manager": manager, "operation": "Update", "apiVersion": "v1", "time": time,
               "fieldsType": "FieldsV1", "fieldsV1": fields})
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod, "generateName": format!("{name}-"), "namespace": namespace,
            "uid": format!("00000000-0000-4000-c000-{:012}", ordinal),
            "resourceVersion": "4000", "creationTimestamp": time,
            "labels": {
                "app": "db", "app.kubernetes.io/instance": name,
                "apps.kubernetes.io/pod-index": ordinal.to_string(),
                "controller-revision-hash": format!("{name}-5d8c7b9f6"),
                "statefulset.kubernetes.io/pod-name": pod
            },
            "annotations": {"kubectl.kubernetes.io/restartedAt": time},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                                 "uid": set["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                managed("kube-controller-manager", json!({"f:metadata": {"f:generateName": {}, "f:labels": {}, "f:ownerReferences": {}}, "f:spec": {"f:containers": {}, "f:volumes": {}}})),
                managed("kubelet", json!({"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}))
            ]
        },
        "spec": {
            "containers": [{
                "name": "db", "image": "postgres:16.4",
                "env": [{"name": "PGDATA", "value": "/var/lib/data/pgdata"}, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                "ports": [{"containerPort": 5432, "name": "pg", "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                "volumeMounts": [
                    {"name": "data", "mountPath": "/var/lib/data"}, {"name": "wal", "mountPath": "/var/lib/wal"},
                    {"name": "backup", "mountPath": "/var/lib/backup"},
                    {"name": "kube-api-access-x1", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
                ],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            }],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": format!("data-{pod}")}},
                {"name": "wal", "persistentVolumeClaim": {"claimName": format!("wal-{pod}")}},
                {"name": "backup", "persistentVolumeClaim": {"claimName": format!("backup-{pod}")}},
                {"name": "kube-api-access-x1", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}
            ],
            "hostname": pod, "subdomain": name, "nodeName": "node-1",
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "schedulerName": "default-scheduler", "priority": 0,
            "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        },
        "status": {
            "phase": "Running", "qosClass": "Burstable", "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
            "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}], "startTime": time,
            "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"), condition("Ready"),
                           condition("ContainersReady"), condition("PodScheduled")],
            "containerStatuses": [{"name": "db", "ready": true, "started": true, "restartCount": 0,
                                   "image": "docker.io/library/postgres:16.4", "imageID": "docker.io/library/postgres@sha256:0123456789abcdef",
                                   "containerID": "containerd://0123456789abcdef", "state": {"running": {"startedAt": time}},
                                   "lastState": {}}]
        }
    })
}

/// The inputs of one kind, generated and serialised one at a time (as they arrive on the
/// wire), fed to `each`.
fn sets(scale: Scale, mut each: impl FnMut(&[u8])) {
    for i in 0..scale.sets {
        let bytes = serde_json::to_vec(&state::stateful_set(i, size(scale))).expect("json");
        each(&bytes);
    }
}

fn claims(scale: Scale, mut each: impl FnMut(&[u8])) {
    // Spread over the sets as `state::objects` spreads them: templates × ordinals.
    let mut n = 0;
    'outer: for ordinal in 0.. {
        for set in 0..scale.sets.max(1) {
            for t in ["data", "wal", "backup"] {
                if n == scale.claims {
                    break 'outer;
                }
                let bytes =
                    serde_json::to_vec(&state::claim(t, set, ordinal, size(scale))).expect("json");
                each(&bytes);
                n += 1;
            }
        }
    }
}

fn pods(scale: Scale, mut each: impl FnMut(&[u8])) {
    let mut n = 0;
    'outer: for ordinal in 0.. {
        for i in 0..scale.sets.max(1) {
            if n == scale.pods {
                break 'outer;
            }
            let set = state::stateful_set(i, size(scale));
            let bytes = serde_json::to_vec(&pod(&set, ordinal)).expect("json");
            each(&bytes);
            n += 1;
        }
    }
}

struct Row {
    kind: &'static str,
    objects: usize,
    input: usize,
    held: isize,
    json: usize,
    typed: isize,
    ingest_ns: f64,
    read_ns: f64,
}

fn per(bytes: isize, n: usize) -> f64 {
    bytes as f64 / n.max(1) as f64
}

fn main() {
    let scale = scale();
    let mut writers = ClusterWriters::with_controller("stateful-admission");
    let view = writers.view();
    let mut rows = Vec::new();

    // --- StatefulSets ---
    let (mut input, mut objects, mut spent) = (0usize, 0usize, 0u128);
    let before = live();
    writers.apply_stateful_set(Event::Init);
    sets(scale, |bytes| {
        input += bytes.len();
        objects += 1;
        let start = Instant::now();
        let set: SetLite = serde_json::from_slice(bytes).expect("set");
        writers.apply_stateful_set(Event::InitApply(set));
        spent += start.elapsed().as_nanos();
    });
    writers.apply_stateful_set(Event::InitDone);
    let held = live() - before;
    let keys = view.stateful_set_keys();
    let start = Instant::now();
    for (namespace, name) in &keys {
        black_box(view.stateful_set(namespace, name));
    }
    let read_ns = start.elapsed().as_nanos() as f64 / keys.len().max(1) as f64;
    // Typed and whole, as the StatefulSet controller's own cache held them (a sample).
    let sample = objects.min(1000);
    let mut typed: Vec<StatefulSet> = Vec::with_capacity(sample);
    let before_typed = live();
    let mut taken = 0;
    sets(scale, |bytes| {
        if taken < sample {
            let mut set: StatefulSet = serde_json::from_slice(bytes).expect("set");
            set.metadata.managed_fields = None;
            typed.push(set);
            taken += 1;
        }
    });
    let typed_per = per(live() - before_typed, sample);
    // Typed and trimmed as the view kept them before (identity, the project's annotations,
    // replicas, ordinals, serviceName and typed claim templates).
    let before_trimmed = live();
    for set in &mut typed {
        let meta = &mut set.metadata;
        meta.labels = None;
        meta.owner_references = None;
        meta.finalizers = None;
        meta.annotations = meta
            .annotations
            .take()
            .map(|a| {
                a.into_iter()
                    .filter(|(k, _)| k.starts_with("stateful-admission.io/"))
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
            .filter(|a| !a.is_empty());
        let spec = std::mem::take(&mut set.spec);
        set.spec = k8s_openapi::api::apps::v1::StatefulSetSpec {
            replicas: spec.replicas,
            ordinals: spec.ordinals,
            service_name: spec.service_name,
            volume_claim_templates: spec.volume_claim_templates.map(|mut templates| {
                for t in &mut templates {
                    t.status = None;
                }
                templates
            }),
            ..Default::default()
        };
        set.status = None;
    }
    let trimmed_per = typed_per + per(live() - before_trimmed, sample);
    drop(typed);
    println!(
        "StatefulSet typed and trimmed as the view kept it before: {trimmed_per:.0} B per set"
    );
    rows.push(Row {
        kind: "StatefulSet",
        objects,
        input,
        held,
        json: view.stored_json_bytes(Kind::StatefulSet),
        typed: typed_per as isize,
        ingest_ns: spent as f64 / objects.max(1) as f64,
        read_ns,
    });

    // The StatefulSet controller's key store (name and namespace per set).
    let before = live();
    let mut key_writer = Writer::<kube::core::PartialObjectMeta<StatefulSet>>::default();
    key_writer.apply_watcher_event(&Event::Init);
    for (namespace, name) in &keys {
        key_writer.apply_watcher_event(&Event::InitApply(kube::core::PartialObjectMeta {
            types: None,
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            _phantom: std::marker::PhantomData,
        }));
    }
    key_writer.apply_watcher_event(&Event::InitDone);
    let key_store = live() - before;
    drop(keys);

    // --- Claims ---
    let (mut input, mut objects, mut spent) = (0usize, 0usize, 0u128);
    let before = live();
    writers.apply_claim(Event::Init);
    claims(scale, |bytes| {
        input += bytes.len();
        objects += 1;
        let start = Instant::now();
        let claim: ClaimLite = serde_json::from_slice(bytes).expect("claim");
        writers.apply_claim(Event::InitApply(claim));
        spent += start.elapsed().as_nanos();
    });
    writers.apply_claim(Event::InitDone);
    let held = live() - before;
    let keys = view.claim_keys();
    let start = Instant::now();
    for (namespace, name) in &keys {
        black_box(view.claim(namespace, name));
    }
    let read_ns = start.elapsed().as_nanos() as f64 / keys.len().max(1) as f64;
    drop(keys);
    let sample = objects.min(1000);
    let mut typed: Vec<PersistentVolumeClaim> = Vec::with_capacity(sample);
    let before_typed = live();
    let mut taken = 0;
    claims(scale, |bytes| {
        if taken < sample {
            let mut claim: PersistentVolumeClaim = serde_json::from_slice(bytes).expect("claim");
            claim.metadata.managed_fields = None;
            typed.push(claim);
            taken += 1;
        }
    });
    let typed_per = per(live() - before_typed, sample);
    drop(typed);
    rows.push(Row {
        kind: "PersistentVolumeClaim",
        objects,
        input,
        held,
        json: view.stored_json_bytes(Kind::Claim),
        typed: typed_per as isize,
        ingest_ns: spent as f64 / objects.max(1) as f64,
        read_ns,
    });

    // --- Pods ---
    let (mut input, mut objects, mut spent) = (0usize, 0usize, 0u128);
    let before = live();
    writers.apply_pod(Event::Init);
    pods(scale, |bytes| {
        input += bytes.len();
        objects += 1;
        let start = Instant::now();
        let pod: PodLite = serde_json::from_slice(bytes).expect("pod");
        writers.apply_pod(Event::InitApply(pod));
        spent += start.elapsed().as_nanos();
    });
    writers.apply_pod(Event::InitDone);
    let held = live() - before;
    // Ordinal 0 of the first sets.
    let names: Vec<(String, String)> = (0..scale.sets.min(1000))
        .map(|i| {
            let set = state::stateful_set(i, size(scale));
            let meta = &set["metadata"];
            (
                meta["namespace"].as_str().unwrap_or_default().to_owned(),
                format!("{}-0", meta["name"].as_str().unwrap_or_default()),
            )
        })
        .collect();
    let start = Instant::now();
    for (namespace, name) in &names {
        black_box(view.pod(namespace, name));
    }
    let read_ns = start.elapsed().as_nanos() as f64 / names.len().max(1) as f64;
    let sample = objects.min(1000);
    let mut typed: Vec<Pod> = Vec::with_capacity(sample);
    let before_typed = live();
    let mut taken = 0;
    pods(scale, |bytes| {
        if taken < sample {
            let mut pod: Pod = serde_json::from_slice(bytes).expect("pod");
            pod.metadata.managed_fields = None;
            typed.push(pod);
            taken += 1;
        }
    });
    let typed_per = per(live() - before_typed, sample);
    drop(typed);
    rows.push(Row {
        kind: "Pod",
        objects,
        input,
        held,
        json: view.stored_json_bytes(Kind::Pod),
        typed: typed_per as isize,
        ingest_ns: spent as f64 / objects.max(1) as f64,
        read_ns,
    });

    println!(
        "view memory at {} claims / {} StatefulSets / {} pods (counting allocator over jemalloc)",
        scale.claims, scale.sets, scale.pods
    );
    println!(
        "| kind | objects | input JSON / object | held by the view | per object | of which stored JSON | typed (managedFields dropped) per object | decode + store | read (decode) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut total = 0;
    for r in &rows {
        total += r.held;
        println!(
            "| {} | {} | {:.0} B | {:.1} MiB | {:.0} B | {:.0} B | {} B | {:.1} µs | {:.1} µs |",
            r.kind,
            r.objects,
            r.input as f64 / r.objects.max(1) as f64,
            r.held as f64 / 1048576.0,
            per(r.held, r.objects),
            r.json as f64 / r.objects.max(1) as f64,
            r.typed,
            r.ingest_ns / 1000.0,
            r.read_ns / 1000.0,
        );
    }
    println!(
        "view total: {:.1} MiB; StatefulSet controller key store: {:.1} MiB ({:.0} B per set)",
        total as f64 / 1048576.0,
        key_store as f64 / 1048576.0,
        per(key_store, scale.sets)
    );
    black_box((&writers, &key_writer));
}
