//! A large platform cluster for the fake API server, as the apiserver returns its objects:
//! Namespaces, StorageClasses, StatefulSets with one to three volumeClaimTemplates in a steady
//! state, their Running and Ready Pods, and their Bound claims, each with the annotations,
//! finalizers and managedFields the control plane adds. Deterministic for a seed; generated
//! lazily, so that seeding holds one copy (the store's).
//!
//! Shapes follow what kube-apiserver, kube-controller-manager, kube-scheduler and the kubelet
//! write (see tests/fixtures/apiserver for captured objects): a StatefulSet is ≈ 13 KB of JSON
//! (pod template with an init container, two containers with env, probes and resources, a
//! kubectl last-applied annotation, managedFields), a Pod ≈ 9 KB, a claim ≈ 2.5 KB.

use serde_json::{Map, Value, json};

/// Object counts of a generated cluster.
#[derive(Debug, Clone, Copy)]
pub struct ScaleSize {
    pub claims: usize,
    pub sets: usize,
    pub classes: usize,
    /// StatefulSets per namespace.
    pub sets_per_namespace: usize,
    pub seed: u64,
    pub mix: Mix,
}

/// What a platform's sets carry besides a healthy steady state, each on every n-th set
/// (`0`: none). The sets picked by `unready` and `incompatible` are never the same.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mix {
    /// `stateful-admission.io/volume-claim-update-policy: InPlace` (claims matching their
    /// templates), as a platform's charts set it for the teams that opted in.
    pub in_place: usize,
    /// Replica 0's pod not Ready (its readiness probe failing), counted so in the status.
    pub unready: usize,
    /// The first claim of replica 0 on another StorageClass than its template (a claim
    /// restored or adopted by hand): it cannot follow the template in place.
    pub incompatible: usize,
    /// `spec.minReadySeconds` of this many seconds (with `min_ready_every`).
    pub min_ready_seconds: u64,
    pub min_ready_every: usize,
}

impl Mix {
    /// Every set healthy, none with anything of ours.
    pub const HEALTHY: Self = Self {
        in_place: 0,
        unready: 0,
        incompatible: 0,
        min_ready_seconds: 0,
        min_ready_every: 0,
    };
    /// As a platform's cluster: half the sets opted into `InPlace`, one in a hundred with an
    /// unready pod, one in a hundred with a claim that cannot follow its template, one in a
    /// thousand with `minReadySeconds: 3`.
    pub const PLATFORM: Self = Self {
        in_place: 2,
        unready: 100,
        incompatible: 100,
        min_ready_seconds: 3,
        min_ready_every: 1000,
    };

    fn picks(every: usize, i: usize, offset: usize) -> bool {
        every > 0 && i % every == offset % every
    }

    pub fn is_in_place(&self, i: usize) -> bool {
        Self::picks(self.in_place, i, 1)
    }

    pub fn is_unready(&self, i: usize) -> bool {
        Self::picks(self.unready, i, self.unready / 2)
    }

    pub fn is_incompatible(&self, i: usize) -> bool {
        Self::picks(self.incompatible, i, self.incompatible.saturating_sub(1))
            && !self.is_unready(i)
    }

    pub fn min_ready(&self, i: usize) -> Option<u64> {
        (Self::picks(self.min_ready_every, i, 0) && self.min_ready_seconds > 0)
            .then_some(self.min_ready_seconds)
    }
}

impl ScaleSize {
    pub const SMALL: Self = Self {
        claims: 10_000,
        sets: 2_000,
        classes: 50,
        sets_per_namespace: 50,
        seed: 15,
        mix: Mix::HEALTHY,
    };
    pub const LARGE: Self = Self {
        claims: 50_000,
        sets: 10_000,
        classes: 50,
        sets_per_namespace: 50,
        seed: 15,
        mix: Mix::HEALTHY,
    };
}

/// What was generated, besides the objects.
#[derive(Debug, Clone)]
pub struct ScalePlan {
    pub size: ScaleSize,
    pub namespaces: usize,
    /// Per set: (namespace, name, replicas, templates).
    pub sets: Vec<SetPlan>,
}

#[derive(Debug, Clone)]
pub struct SetPlan {
    pub namespace: String,
    pub name: String,
    pub app: &'static str,
    pub replicas: usize,
    pub templates: usize,
    pub class: usize,
    /// Its index among the sets (what [`Mix`] picks by).
    pub index: usize,
}

impl ScalePlan {
    /// Decides names, replicas and templates so that the claims add up to `size.claims`.
    ///
    /// # Panics
    /// If the sets cannot hold the claims with one replica each and up to eight.
    pub fn new(size: ScaleSize) -> Self {
        let mut rng = Rng(size.seed);
        let namespaces = size.sets.div_ceil(size.sets_per_namespace.max(1));
        let mut sets: Vec<SetPlan> = (0..size.sets)
            .map(|i| {
                let app = APPS[rng.below(APPS.len())];
                SetPlan {
                    namespace: namespace_name(i / size.sets_per_namespace.max(1)),
                    name: format!("{app}-{i:05}"),
                    app,
                    replicas: 1,
                    templates: 1 + rng.below(3),
                    class: rng.below(size.classes.max(1)),
                    index: i,
                }
            })
            .collect();
        let mut missing = size
            .claims
            .checked_sub(sets.iter().map(|s| s.templates).sum())
            .expect("at least one claim per template of every set");
        let mut tries = 0;
        while missing > 0 {
            let set = &mut sets[rng.below(size.sets)];
            if set.templates <= missing && set.replicas < 8 {
                set.replicas += 1;
                missing -= set.templates;
            }
            tries += 1;
            assert!(
                tries < 100 * size.claims + 1000,
                "cannot place {missing} claims"
            );
        }
        Self {
            size,
            namespaces,
            sets,
        }
    }

    pub fn pods(&self) -> usize {
        self.sets.iter().map(|s| s.replicas).sum()
    }

    /// Every object: namespaces, classes, then per set the set, its pods and its claims.
    pub fn objects(&self) -> impl Iterator<Item = Value> + '_ {
        let namespaces = (0..self.namespaces).map(|i| namespace(&namespace_name(i), i));
        let classes = (0..self.size.classes).map(storage_class);
        let seed = self.size.seed;
        let sets = self.sets.iter().enumerate().flat_map(move |(i, plan)| {
            let mut rng = Rng(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let set = Set::new(plan, i, self.size.mix, &mut rng);
            let mut objects = Vec::with_capacity(1 + plan.replicas * (1 + plan.templates));
            objects.push(set.object(&mut rng));
            for ordinal in 0..plan.replicas {
                objects.push(set.pod(ordinal, &mut rng));
                for t in 0..plan.templates {
                    objects.push(set.claim(t, ordinal, &mut rng));
                }
            }
            objects
        });
        namespaces.chain(classes).chain(sets)
    }
}

const APPS: [&str; 10] = [
    "postgres",
    "mysql",
    "kafka",
    "zookeeper",
    "redis",
    "elasticsearch",
    "cassandra",
    "etcd",
    "mongodb",
    "rabbitmq",
];

const TEMPLATES: [(&str, &str); 3] = [
    ("data", "/var/lib/data"),
    ("wal", "/var/lib/wal"),
    ("logs", "/var/log/app"),
];

const PROVISIONERS: [&str; 5] = [
    "ebs.csi.aws.com",
    "pd.csi.storage.gke.io",
    "disk.csi.azure.com",
    "rook-ceph.rbd.csi.ceph.com",
    "csi.vsphere.vmware.com",
];

/// SplitMix64: small, seeded, good enough for test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).unwrap_or(0)
    }

    fn uid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    fn hex(&mut self, len: usize) -> String {
        let mut s = String::with_capacity(len + 16);
        while s.len() < len {
            s.push_str(&format!("{:016x}", self.next()));
        }
        s.truncate(len);
        s
    }

    /// A pod-template-hash style suffix.
    fn suffix(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..len)
            .map(|_| ALPHABET[self.below(ALPHABET.len())] as char)
            .collect()
    }
}

fn namespace_name(i: usize) -> String {
    format!("team-{i:03}")
}

/// `2026-10-01T08:00:00Z` plus `seconds`.
fn time(seconds: u64) -> String {
    const BASE: i64 = 1_790_841_600;
    jiff::Timestamp::from_second(BASE + i64::try_from(seconds).unwrap_or(0))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// The `fieldsV1` tree the apiserver records for the fields of `value` (maps as `f:` keys,
/// lists of named items as `k:{"name":…}` keys, other lists as leaves).
fn fields_v1(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut fields = Map::new();
            for (k, v) in map {
                fields.insert(format!("f:{k}"), fields_v1(v));
            }
            Value::Object(fields)
        }
        Value::Array(items)
            if items
                .iter()
                .all(|i| i.get("name").is_some_and(Value::is_string))
                && !items.is_empty() =>
        {
            let mut fields = Map::new();
            for item in items {
                let name = item.get("name").and_then(Value::as_str).unwrap_or("");
                let mut entry = match fields_v1(item) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                entry.insert(".".into(), json!({}));
                fields.insert(format!("k:{{\"name\":\"{name}\"}}"), Value::Object(entry));
            }
            Value::Object(fields)
        }
        _ => json!({}),
    }
}

fn managed(
    manager: &str,
    api_version: &str,
    at: &str,
    fields: Value,
    subresource: Option<&str>,
) -> Value {
    let mut entry = json!({
        "manager": manager,
        "operation": "Update",
        "apiVersion": api_version,
        "time": at,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(sub) = subresource {
        entry["subresource"] = json!(sub);
    }
    entry
}

fn namespace(name: &str, i: usize) -> Value {
    let at = time(i as u64);
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": Rng(0x6e73 ^ i as u64).uid(),
            "creationTimestamp": at,
            "labels": {"kubernetes.io/metadata.name": name, "team": name},
            "managedFields": [managed("kubectl-create", "v1", &at, json!({"f:metadata": {"f:labels": {".": {}, "f:kubernetes.io/metadata.name": {}, "f:team": {}}}}), None)],
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    })
}

fn class_name(i: usize) -> String {
    format!("storage-{i:02}")
}

fn storage_class(i: usize) -> Value {
    let name = class_name(i);
    let provisioner = PROVISIONERS[i % PROVISIONERS.len()];
    let at = time(i as u64);
    let mut annotations = json!({});
    if i == 0 {
        annotations["storageclass.kubernetes.io/is-default-class"] = json!("true");
    }
    let parameters = json!({"type": (["gp3", "pd-ssd", "Premium_LRS", "replicated", "thin"][i % 5]), "fsType": "ext4"});
    let applied = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"annotations": annotations, "name": name},
        "provisioner": provisioner, "parameters": parameters, "allowVolumeExpansion": i % 3 != 2,
        "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"});
    annotations["kubectl.kubernetes.io/last-applied-configuration"] = json!(format!("{applied}\n"));
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": name,
            "uid": Rng(0x7363 ^ i as u64).uid(),
            "creationTimestamp": at,
            "annotations": annotations,
            "managedFields": [managed("kubectl-client-side-apply", "storage.k8s.io/v1", &at,
                json!({"f:allowVolumeExpansion": {}, "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                       "f:parameters": {".": {}, "f:fsType": {}, "f:type": {}}, "f:provisioner": {}, "f:reclaimPolicy": {}, "f:volumeBindingMode": {}}), None)],
        },
        "provisioner": provisioner,
        "parameters": parameters,
        "allowVolumeExpansion": i % 3 != 2,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
    })
}

/// One StatefulSet being generated, with what its pods and claims repeat.
struct Set<'a> {
    plan: &'a SetPlan,
    mix: Mix,
    uid: String,
    created: u64,
    revision: String,
    labels: Value,
    template_spec: Value,
    templates: Vec<Value>,
    provisioner: &'static str,
}

impl<'a> Set<'a> {
    fn new(plan: &'a SetPlan, index: usize, mix: Mix, rng: &mut Rng) -> Self {
        let created = 3_600 + index as u64 * 7;
        let labels =
            json!({"app.kubernetes.io/name": plan.app, "app.kubernetes.io/instance": plan.name});
        let class = class_name(plan.class);
        let templates = TEMPLATES[..plan.templates]
            .iter()
            .enumerate()
            .map(|(t, (name, _))| {
                json!({
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": name, "creationTimestamp": null, "labels": labels},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": class,
                        "resources": {"requests": {"storage": (["100Gi", "20Gi", "10Gi"][t])}},
                        "volumeMode": "Filesystem",
                    },
                    "status": {"phase": "Pending"},
                })
            })
            .collect();
        Self {
            plan,
            mix,
            uid: rng.uid(),
            created,
            revision: format!("{}-{}", plan.name, rng.suffix(10)),
            template_spec: pod_spec(plan),
            labels,
            templates,
            provisioner: PROVISIONERS[plan.class % PROVISIONERS.len()],
        }
    }

    fn object(&self, _rng: &mut Rng) -> Value {
        let plan = self.plan;
        let at = time(self.created);
        let set_labels = json!({
            "app.kubernetes.io/name": plan.app,
            "app.kubernetes.io/instance": plan.name,
            "app.kubernetes.io/managed-by": "Helm",
            "helm.sh/chart": format!("{}-12.4.1", plan.app),
        });
        let spec = json!({
            "replicas": plan.replicas,
            "selector": {"matchLabels": self.labels},
            "template": {
                "metadata": {"creationTimestamp": null, "labels": self.labels,
                    "annotations": {"checksum/config": format!("{:064x}", self.created)}},
                "spec": self.template_spec,
            },
            "volumeClaimTemplates": self.templates,
            "serviceName": format!("{}-headless", plan.name),
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "revisionHistoryLimit": 10,
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
        });
        let mut spec = spec;
        if let Some(seconds) = self.mix.min_ready(plan.index) {
            spec["minReadySeconds"] = json!(seconds);
        }
        let mut applied_spec = spec.clone();
        for t in applied_spec["volumeClaimTemplates"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if let Some(map) = t.as_object_mut() {
                map.remove("status");
                map.remove("apiVersion");
                map.remove("kind");
            }
        }
        let mut ours = json!({});
        if self.mix.is_in_place(plan.index) {
            ours["stateful-admission.io/volume-claim-update-policy"] = json!("InPlace");
        }
        let applied = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"annotations": ours, "labels": set_labels, "name": plan.name, "namespace": plan.namespace},
            "spec": applied_spec,
        });
        let ready = plan.replicas - usize::from(self.mix.is_unready(plan.index));
        let status = json!({
            "observedGeneration": 1,
            "replicas": plan.replicas,
            "readyReplicas": ready,
            "currentReplicas": plan.replicas,
            "updatedReplicas": plan.replicas,
            "availableReplicas": ready,
            "currentRevision": self.revision,
            "updateRevision": self.revision,
            "collisionCount": 0,
        });
        let mut applied_fields = fields_v1(&applied);
        if let Some(map) = applied_fields.as_object_mut() {
            map.remove("f:apiVersion");
            map.remove("f:kind");
        }
        applied_fields["f:metadata"]["f:annotations"] =
            json!({".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}});
        let mut annotations = json!({
            "kubectl.kubernetes.io/last-applied-configuration": format!("{applied}\n"),
            "meta.helm.sh/release-name": plan.name,
            "meta.helm.sh/release-namespace": plan.namespace,
        });
        if let Some(map) = ours.as_object() {
            for (k, v) in map {
                annotations[k] = v.clone();
                applied_fields["f:metadata"]["f:annotations"][format!("f:{k}")] = json!({});
            }
        }
        json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": plan.name,
                "namespace": plan.namespace,
                "uid": self.uid,
                "generation": 1,
                "creationTimestamp": at,
                "labels": set_labels,
                "annotations": annotations,
                "managedFields": [
                    managed("kubectl-client-side-apply", "apps/v1", &at, applied_fields, None),
                    managed("kube-controller-manager", "apps/v1", &time(self.created + 300), fields_v1(&json!({"status": status})), Some("status")),
                ],
            },
            "spec": spec,
            "status": status,
        })
    }

    fn pod(&self, ordinal: usize, rng: &mut Rng) -> Value {
        let plan = self.plan;
        let name = format!("{}-{ordinal}", plan.name);
        let created = self.created + 5 + ordinal as u64 * 40;
        let node = format!("node-{:04}", rng.below(400));
        let mut labels = self.labels.clone();
        labels["controller-revision-hash"] = json!(self.revision);
        labels["statefulset.kubernetes.io/pod-name"] = json!(name);
        labels["apps.kubernetes.io/pod-index"] = json!(ordinal.to_string());
        let mut spec = self.template_spec.clone();
        let mut volumes: Vec<Value> = TEMPLATES[..plan.templates]
            .iter()
            .map(|(t, _)| json!({"name": t, "persistentVolumeClaim": {"claimName": format!("{t}-{name}")}}))
            .collect();
        volumes.extend(spec["volumes"].as_array().cloned().unwrap_or_default());
        let token = format!("kube-api-access-{}", rng.suffix(5));
        volumes.push(json!({"name": token, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}}));
        spec["volumes"] = json!(volumes);
        for list in ["containers", "initContainers"] {
            for c in spec[list].as_array_mut().into_iter().flatten() {
                if let Some(mounts) = c["volumeMounts"].as_array_mut() {
                    mounts.push(json!({"name": token, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}));
                }
            }
        }
        spec["nodeName"] = json!(node);
        spec["hostname"] = json!(name);
        spec["subdomain"] = json!(format!("{}-headless", plan.name));
        spec["serviceAccount"] = spec["serviceAccountName"].clone();
        spec["priority"] = json!(0);
        spec["enableServiceLinks"] = json!(true);
        spec["preemptionPolicy"] = json!("PreemptLowerPriority");
        spec["tolerations"] = json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ]);
        let started = time(created + 12);
        let ready = time(created + 30);
        let is_ready = !(ordinal == 0 && self.mix.is_unready(plan.index));
        let ready_status = if is_ready { "True" } else { "False" };
        let ip = format!(
            "10.{}.{}.{}",
            64 + rng.below(64),
            rng.below(256),
            1 + rng.below(254)
        );
        let container_status = |c: &Value, rng: &mut Rng| {
            json!({
                "name": c["name"], "state": {"running": {"startedAt": started}}, "lastState": {},
                "ready": true, "restartCount": 0, "image": c["image"],
                "imageID": format!("{}@sha256:{}", c["image"].as_str().unwrap_or("").split(':').next().unwrap_or(""), rng.hex(64)),
                "containerID": format!("containerd://{}", rng.hex(64)), "started": true,
            })
        };
        let containers: Vec<Value> = spec["containers"].as_array().cloned().unwrap_or_default();
        let inits: Vec<Value> = spec["initContainers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let host_ip = format!("172.20.{}.{}", rng.below(16), 1 + rng.below(254));
        let status = json!({
            "phase": "Running",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": null, "lastTransitionTime": started},
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": started},
                {"type": "Ready", "status": ready_status, "lastProbeTime": null, "lastTransitionTime": ready},
                {"type": "ContainersReady", "status": ready_status, "lastProbeTime": null, "lastTransitionTime": ready},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": time(created)},
            ],
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
            "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": time(created),
            "initContainerStatuses": inits.iter().map(|c| {
                let mut s = container_status(c, rng);
                s["state"] = json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": time(created + 3), "finishedAt": time(created + 4), "containerID": s["containerID"]}});
                s["ready"] = json!(true);
                s["started"] = json!(false);
                s
            }).collect::<Vec<_>>(),
            "containerStatuses": containers.iter().map(|c| {
                let mut s = container_status(c, rng);
                s["ready"] = json!(is_ready);
                s
            }).collect::<Vec<_>>(),
            "qosClass": "Burstable",
        });
        let owner = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": plan.name, "uid": self.uid, "controller": true, "blockOwnerDeletion": true}]);
        let mut owner_fields = Map::new();
        owner_fields.insert(
            format!("k:{{\"uid\":\"{}\"}}", self.uid),
            json!({".": {}, "f:apiVersion": {}, "f:blockOwnerDeletion": {}, "f:controller": {}, "f:kind": {}, "f:name": {}, "f:uid": {}}),
        );
        let meta_fields = json!({"f:metadata": {"f:generateName": {}, "f:labels": fields_v1(&labels), "f:ownerReferences": owner_fields}, "f:spec": fields_v1(&spec)});
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "generateName": format!("{}-", plan.name),
                "namespace": plan.namespace,
                "uid": rng.uid(),
                "creationTimestamp": time(created),
                "labels": labels,
                "annotations": {"checksum/config": format!("{:064x}", self.created)},
                "ownerReferences": owner,
                "managedFields": [
                    managed("kube-controller-manager", "v1", &time(created), meta_fields, None),
                    managed("kubelet", "v1", &ready, fields_v1(&json!({"status": status})), Some("status")),
                ],
            },
            "spec": spec,
            "status": status,
        })
    }

    fn claim(&self, template: usize, ordinal: usize, rng: &mut Rng) -> Value {
        let plan = self.plan;
        let (tname, _) = TEMPLATES[template];
        let name = format!("{tname}-{}-{ordinal}", plan.name);
        let created = time(self.created + 5 + ordinal as u64 * 40);
        let bound = time(self.created + 8 + ordinal as u64 * 40);
        let uid = rng.uid();
        let t = &self.templates[template];
        let node = format!("node-{:04}", rng.below(400));
        let annotations = json!({
            "pv.kubernetes.io/bind-completed": "yes",
            "pv.kubernetes.io/bound-by-controller": "yes",
            "volume.beta.kubernetes.io/storage-provisioner": self.provisioner,
            "volume.kubernetes.io/storage-provisioner": self.provisioner,
            "volume.kubernetes.io/selected-node": node,
        });
        let mut spec = t["spec"].clone();
        if template == 0 && ordinal == 0 && self.mix.is_incompatible(plan.index) {
            spec["storageClassName"] = json!("legacy-restored");
        }
        spec["volumeName"] = json!(format!("pvc-{uid}"));
        let storage = spec["resources"]["requests"]["storage"].clone();
        let status = json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": storage}});
        json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": name,
                "namespace": plan.namespace,
                "uid": uid,
                "creationTimestamp": created,
                "labels": t["metadata"]["labels"],
                "annotations": annotations,
                "finalizers": ["kubernetes.io/pvc-protection"],
                "managedFields": [
                    managed("kube-controller-manager", "v1", &created, json!({"f:metadata": {"f:labels": fields_v1(&t["metadata"]["labels"])},
                        "f:spec": {"f:accessModes": {}, "f:resources": {"f:requests": {".": {}, "f:storage": {}}}, "f:storageClassName": {}, "f:volumeMode": {}}}), None),
                    managed("kube-scheduler", "v1", &created, json!({"f:metadata": {"f:annotations": {".": {}, "f:volume.kubernetes.io/selected-node": {}}}}), None),
                    managed("kube-controller-manager", "v1", &bound, json!({"f:metadata": {"f:annotations": {"f:pv.kubernetes.io/bind-completed": {}, "f:pv.kubernetes.io/bound-by-controller": {},
                        "f:volume.beta.kubernetes.io/storage-provisioner": {}, "f:volume.kubernetes.io/storage-provisioner": {}}}, "f:spec": {"f:volumeName": {}}}), None),
                    managed("kube-controller-manager", "v1", &bound, json!({"f:status": {"f:accessModes": {}, "f:capacity": {".": {}, "f:storage": {}}, "f:phase": {}}}), Some("status")),
                ],
            },
            "spec": spec,
            "status": status,
        })
    }
}

/// The pod template's spec as the apiserver stores it (defaults filled in).
fn pod_spec(plan: &SetPlan) -> Value {
    let app = plan.app;
    let port = 5000 + (app.len() as u64) * 111;
    let probe_defaults = |mut probe: Value| {
        probe["timeoutSeconds"] = json!(5);
        probe["periodSeconds"] = json!(10);
        probe["successThreshold"] = json!(1);
        probe["failureThreshold"] = json!(6);
        probe
    };
    let mounts: Vec<Value> = TEMPLATES[..plan.templates]
        .iter()
        .map(|(name, path)| json!({"name": name, "mountPath": path}))
        .chain([json!({"name": "config", "mountPath": "/etc/app/conf.d", "readOnly": true})])
        .collect();
    let env = json!([
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
        {"name": "CLUSTER_NAME", "value": plan.name},
        {"name": "HEADLESS_SERVICE", "value": format!("{}-headless.{}.svc.cluster.local", plan.name, plan.namespace)},
        {"name": "ADMIN_PASSWORD", "valueFrom": {"secretKeyRef": {"name": format!("{}-credentials", plan.name), "key": "admin-password"}}},
        {"name": "REPLICATION_PASSWORD", "valueFrom": {"secretKeyRef": {"name": format!("{}-credentials", plan.name), "key": "replication-password"}}},
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "MAX_CONNECTIONS", "value": "500"},
        {"name": "MEMORY_LIMIT", "valueFrom": {"resourceFieldRef": {"containerName": app, "resource": "limits.memory", "divisor": "1Mi"}}},
    ]);
    json!({
        "initContainers": [{
            "name": "init-permissions",
            "image": "registry.example.com/library/busybox:1.36.1",
            "command": ["sh", "-c", format!("chown -R 1001:1001 {} && echo ready", TEMPLATES[..plan.templates].iter().map(|(_, p)| *p).collect::<Vec<_>>().join(" "))],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
            "volumeMounts": mounts,
            "securityContext": {"runAsUser": 0},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        }],
        "containers": [
            {
                "name": app,
                "image": format!("registry.example.com/library/{app}:16.4.0-debian-12-r9"),
                "args": ["--config-file=/etc/app/conf.d/app.conf", format!("--data-dir={}", TEMPLATES[0].1), "--listen-address=0.0.0.0"],
                "ports": [{"name": "client", "containerPort": port, "protocol": "TCP"}, {"name": "peer", "containerPort": port + 1, "protocol": "TCP"}],
                "env": env,
                "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
                "volumeMounts": mounts,
                "livenessProbe": probe_defaults(json!({"tcpSocket": {"port": "client"}, "initialDelaySeconds": 30})),
                "readinessProbe": probe_defaults(json!({"exec": {"command": ["/bin/sh", "-c", format!("/opt/{app}/bin/healthcheck --port {port} --timeout 4")]}, "initialDelaySeconds": 5})),
                "startupProbe": probe_defaults(json!({"httpGet": {"path": "/healthz", "port": port + 2, "scheme": "HTTP"}, "initialDelaySeconds": 10})),
                "securityContext": {"runAsUser": 1001, "runAsNonRoot": true, "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}, "readOnlyRootFilesystem": true},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            },
            {
                "name": "metrics",
                "image": format!("registry.example.com/library/{app}-exporter:0.15.0"),
                "args": ["--web.listen-address=:9187", "--log.level=info"],
                "ports": [{"name": "metrics", "containerPort": 9187, "protocol": "TCP"}],
                "env": [{"name": "DATA_SOURCE_URI", "value": format!("127.0.0.1:{port}/?sslmode=disable")},
                        {"name": "DATA_SOURCE_PASS", "valueFrom": {"secretKeyRef": {"name": format!("{}-credentials", plan.name), "key": "admin-password"}}}],
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}},
                "livenessProbe": probe_defaults(json!({"httpGet": {"path": "/", "port": "metrics", "scheme": "HTTP"}, "initialDelaySeconds": 10})),
                "readinessProbe": probe_defaults(json!({"httpGet": {"path": "/", "port": "metrics", "scheme": "HTTP"}, "initialDelaySeconds": 5})),
                "securityContext": {"runAsUser": 1001, "runAsNonRoot": true, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            },
        ],
        "volumes": [{"name": "config", "configMap": {"name": format!("{}-config", plan.name), "defaultMode": 420}}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": plan.name}},
            "topologyKey": "kubernetes.io/hostname"}}]}},
        "securityContext": {"fsGroup": 1001, "fsGroupChangePolicy": "OnRootMismatch"},
        "serviceAccountName": app,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 60,
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
    })
}
