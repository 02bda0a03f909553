//! A simulated kubelet and built-in StatefulSet controller for one set on the fake API server,
//! acting through the store hooks as those components would:
//!
//! - the built-in controller names a revision after the pod template it holds, as upstream's
//!   ControllerRevisions are named after a hash of `spec.template`
//!   (`history.HashControllerRevision` of `getPatch`, pkg/controller/statefulset/stateful_set_utils.go):
//!   a template it has not seen before is named `<set>-rev<generation>` and recorded in
//!   `status.updateRevision`, one it has seen keeps its name, so a set re-created with the same
//!   template (an orphan delete and a create, which start again at generation 1) or rolled back
//!   to an earlier one has the same revision as its pods, and a change of anything but the
//!   template (replicas, the partition) is no new revision;
//! - it re-creates a missing pod `create_delay` after it went missing, at the revision
//!   upstream's `newVersionedStatefulSetPod` (pkg/controller/statefulset/stateful_set_utils.go)
//!   picks in the sync that finds the pod missing: the current revision below the partition
//!   or, where `spec.updateStrategy.rollingUpdate` is nil, below `status.currentReplicas` as
//!   persisted then, the update revision otherwise; under `OrderedReady` only once every lower
//!   ordinal is Running and Ready, one at a time; the pod is made from that revision's template
//!   (its labels and spec: the containers and their images), as upstream's `ApplyRevision`
//!   restores it;
//! - the kubelet marks a pod Running and Ready `ready_delay` after its creation, but a new pod
//!   of a replica the test holds ([`StatefulSetSim::hold_ready`]) stays Pending until released;
//! - with the `MaxUnavailableStatefulSet` gate off the built-in controller itself replaces one
//!   pod at a time (upstream's loop: from the top down to the partition, delete the first
//!   old-revision pod, stop at the first unavailable one; under `OrderedReady` only when all
//!   are healthy), never under `updateStrategy.type: OnDelete` (upstream's `updateStatefulSet`
//!   returns before its update loop there); its deletions are counted apart from the API's;
//! - it keeps the status counters as upstream's sync does: counted from the pods it started
//!   from, plus what it created, minus what it deleted itself (`status.CurrentReplicas--`),
//!   so a pod someone else deleted still counts in `currentReplicas` until the next sync;
//!   `availableReplicas` counts pods Ready for `spec.minReadySeconds` (`isRunningAndAvailable`);
//!   and it completes the rollout (`currentRevision`, `currentReplicas`);
//! - it writes the status as upstream's `updateStatefulSetStatus` does: only when a counter
//!   or revision differs from the stored one (`inconsistentStatus`), and as a whole, the
//!   status computed afresh without conditions (`UpdateStatus`, a replace of the `status`
//!   subresource at the version read), so every such write drops the conditions of others;
//!   a conflict is tried again on the next tick, from a fresh read.
//!
//! Writes go through the API (pod creation, status patches with the resourceVersion read as
//! precondition, so a pod deleted meanwhile is never resurrected), except the built-in
//! controller's deletions, which use the store hook so that the request log holds only the
//! system under test's deletions.
//!
//! Pods go at once when deleted (the fake server has no graceful termination), so an
//! unavailable replica here is a missing or not-yet-Ready pod.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fake_apiserver::{FakeApiServer, ResourceType};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

/// Timings of the simulation.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub create_delay: Duration,
    pub ready_delay: Duration,
    pub tick: Duration,
    /// The kubelet starts a pod only once none of its claims waits at
    /// `FileSystemResizePending`, as a real one grows the file system while mounting the
    /// volume, before any container runs (with [`super::offline_resizer::ResizerConfig::grow_at_mount`]).
    pub mount_grows_file_systems: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            create_delay: Duration::from_millis(200),
            ready_delay: Duration::from_millis(300),
            tick: Duration::from_millis(10),
            mount_grows_file_systems: false,
        }
    }
}

/// What the simulated components did.
#[derive(Debug, Clone, Default)]
pub struct SimStats {
    /// Pods created, in order.
    pub created: Vec<String>,
    /// Pods the built-in controller deleted for the update, in order.
    pub deleted_by_builtin: Vec<String>,
}

/// The running simulation of one set.
pub struct StatefulSetSim {
    stop: CancellationToken,
    handle: JoinHandle<()>,
    stats: Arc<Mutex<SimStats>>,
    held: Arc<Mutex<BTreeSet<String>>>,
}

/// Is this pod Running and Ready (and not terminating)?
pub fn pod_is_available(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// The pod's `controller-revision-hash` label.
pub fn pod_revision(pod: &Value) -> Option<&str> {
    pod.pointer("/metadata/labels/controller-revision-hash")
        .and_then(Value::as_str)
}

struct State {
    /// When each missing ordinal was found missing, and the revision it will come back at,
    /// chosen then (the create itself lands `create_delay` later).
    missing: HashMap<u32, (Instant, String)>,
    created_at: HashMap<String, Instant>,
    /// Every pod template seen, with the name of its revision, in the order first seen.
    revisions: Vec<(Value, String)>,
}

impl State {
    /// The name of `template`'s revision: the one it was first given, else `fresh` (made
    /// unique among the names given so far: a set re-created with a new template starts at
    /// generation 1 again, whose name an earlier template may hold).
    fn revision_of(&mut self, template: &Value, fresh: String) -> String {
        if let Some((_, name)) = self.revisions.iter().find(|(t, _)| t == template) {
            return name.clone();
        }
        let taken = |name: &str| self.revisions.iter().any(|(_, n)| n == name);
        let mut name = fresh.clone();
        let mut suffix = 2;
        while taken(&name) {
            name = format!("{fresh}-{suffix}");
            suffix += 1;
        }
        self.revisions.push((template.clone(), name.clone()));
        name
    }

    /// A revision named by the set's own status (a set seeded with it keeps its names): its
    /// template is `template` unless another name holds that template already.
    fn name_revision(&mut self, template: &Value, name: &str) {
        if !self
            .revisions
            .iter()
            .any(|(t, n)| t == template || n == name)
        {
            self.revisions.push((template.clone(), name.to_owned()));
        }
    }

    /// The template of revision `name`, where known.
    fn template_of(&self, name: &str) -> Option<&Value> {
        self.revisions
            .iter()
            .find(|(_, n)| n == name)
            .map(|(t, _)| t)
    }
}

impl StatefulSetSim {
    /// Simulates `namespace/name` with the built-in controller's own one-at-a-time update on
    /// (`builtin_rolling_update`, the gate-off behaviour) or off.
    pub fn start(
        api: &FakeApiServer,
        namespace: &str,
        name: &str,
        config: SimConfig,
        builtin_rolling_update: bool,
    ) -> Self {
        let stop = CancellationToken::new();
        let stats = Arc::new(Mutex::new(SimStats::default()));
        let held = Arc::new(Mutex::new(BTreeSet::new()));
        let sim = Sim {
            api: api.clone(),
            client: api.client(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            config,
            builtin_rolling_update,
            stats: stats.clone(),
            held: held.clone(),
        };
        let task_stop = stop.clone();
        let handle = tokio::spawn(async move {
            let mut state = State {
                missing: HashMap::new(),
                created_at: HashMap::new(),
                revisions: Vec::new(),
            };
            let mut tick = tokio::time::interval(sim.config.tick);
            loop {
                tokio::select! {
                    _ = task_stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                sim.step(&mut state).await;
            }
        });
        Self {
            stop,
            handle,
            stats,
            held,
        }
    }

    /// From now on the kubelet starts no new pod named `pod` (a pod Running already is left
    /// as it is): one created from now on stays Pending, unavailable, until
    /// [`Self::release_ready`].
    pub fn hold_ready(&self, pod: &str) {
        lock(&self.held).insert(pod.to_owned());
    }

    /// The kubelet starts `pod` again, as usual (`ready_delay` after its creation).
    pub fn release_ready(&self, pod: &str) {
        lock(&self.held).remove(pod);
    }

    pub fn stats(&self) -> SimStats {
        lock(&self.stats).clone()
    }

    pub async fn stop(self) -> SimStats {
        self.stop.cancel();
        let _ = self.handle.await;
        lock(&self.stats).clone()
    }
}

struct Sim {
    api: FakeApiServer,
    client: kube::Client,
    namespace: String,
    name: String,
    config: SimConfig,
    builtin_rolling_update: bool,
    stats: Arc<Mutex<SimStats>>,
    held: Arc<Mutex<BTreeSet<String>>>,
}

impl Sim {
    fn pod_name(&self, n: u32) -> String {
        format!("{}-{n}", self.name)
    }

    fn pod(&self, n: u32) -> Option<Value> {
        self.api.get_object(
            ResourceType::of::<Pod>(),
            &self.namespace,
            &self.pod_name(n),
        )
    }

    /// Whether a claim of replica `n` still waits for its file system to grow.
    fn mounting(&self, set: &Value, n: u32) -> bool {
        set.pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t.pointer("/metadata/name").and_then(Value::as_str))
            .any(|template| {
                self.api
                    .get_object(
                        ResourceType::of::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(),
                        &self.namespace,
                        &format!("{template}-{}-{n}", self.name),
                    )
                    .is_some_and(|claim| super::offline_resizer::resize_pending(&claim))
            })
    }

    async fn step(&self, state: &mut State) {
        let Some(set) = self.api.get_object(
            ResourceType::of::<StatefulSet>(),
            &self.namespace,
            &self.name,
        ) else {
            return;
        };
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let sets_api: Api<StatefulSet> = Api::namespaced(self.client.clone(), &self.namespace);
        let generation = set
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let uid = set
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let replicas = set
            .pointer("/spec/replicas")
            .and_then(Value::as_u64)
            .unwrap_or(1) as u32;
        let partition = set
            .pointer("/spec/updateStrategy/rollingUpdate/partition")
            .and_then(Value::as_u64)
            .unwrap_or(0) as u32;
        let ordered = set
            .pointer("/spec/podManagementPolicy")
            .and_then(Value::as_str)
            != Some("Parallel");
        let on_delete = set
            .pointer("/spec/updateStrategy/type")
            .and_then(Value::as_str)
            == Some("OnDelete");
        // The revision of this template, as the built-in controller named it once it observed
        // the generation (a set seeded with its status keeps its own names), else by the
        // template: the name it had, or one after this generation.
        let template = set
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(Value::Null);
        let observed = set
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64);
        let update_revision = match set
            .pointer("/status/updateRevision")
            .and_then(Value::as_str)
            .filter(|_| observed == Some(generation))
        {
            Some(named) => {
                state.name_revision(&template, named);
                named.to_owned()
            }
            None => state.revision_of(&template, format!("{}-rev{generation}", self.name)),
        };
        let min_ready = set
            .pointer("/spec/minReadySeconds")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let current_revision = set
            .pointer("/status/currentRevision")
            .and_then(Value::as_str)
            .map_or_else(|| update_revision.clone(), str::to_owned);
        let now = Instant::now();

        // The pods this sync starts from; the status is counted from them, as upstream's.
        let start: Vec<Option<Value>> = (0..replicas).map(|n| self.pod(n)).collect();
        let revision_of =
            |p: &Option<Value>| p.as_ref().and_then(|p| pod_revision(p).map(str::to_owned));
        let mut revisions: Vec<Option<String>> = start.iter().map(revision_of).collect();

        // The kubelet: a pod runs and turns Ready `ready_delay` after its creation.
        for n in 0..replicas {
            let Some(pod) = &start[n as usize] else {
                continue;
            };
            let created = *state.created_at.entry(self.pod_name(n)).or_insert(now);
            let pending = pod.pointer("/status/phase").and_then(Value::as_str) != Some("Running");
            if pending && self.config.mount_grows_file_systems && self.mounting(&set, n) {
                continue;
            }
            if pending && lock(&self.held).contains(&self.pod_name(n)) {
                continue;
            }
            if pending && now.duration_since(created) >= self.config.ready_delay {
                let since = jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string();
                let patch = json!({
                    // The pod as read, or nothing: a deleted or re-created pod is left alone.
                    "metadata": {"resourceVersion": pod.pointer("/metadata/resourceVersion")},
                    "status": {"phase": "Running", "conditions": [
                        {"type": "Ready", "status": "True", "lastTransitionTime": since}]},
                });
                let _ = pods_api
                    .patch_status(
                        &self.pod_name(n),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await;
            }
        }

        // The controller re-creates missing pods (in order, one at a time, under OrderedReady).
        for n in 0..replicas {
            match self.pod(n) {
                None => {
                    let (since, revision) = state
                        .missing
                        .entry(n)
                        .or_insert_with(|| {
                            let revision = if recreated_at_current_revision(&set, n, partition) {
                                current_revision.clone()
                            } else {
                                update_revision.clone()
                            };
                            (now, revision)
                        })
                        .clone();
                    if now.duration_since(since) >= self.config.create_delay {
                        let index_label = self.api.config().pod_index_label;
                        let from = state.template_of(&revision).unwrap_or(&template);
                        let pod = new_pod(
                            &self.namespace,
                            &self.name,
                            &uid,
                            n,
                            (&revision, from),
                            index_label,
                        );
                        if pods_api.create(&PostParams::default(), &pod).await.is_ok() {
                            state.missing.remove(&n);
                            state.created_at.insert(self.pod_name(n), Instant::now());
                            lock(&self.stats).created.push(self.pod_name(n));
                            revisions[n as usize] = Some(revision);
                        }
                    }
                    if ordered {
                        break;
                    }
                }
                Some(pod) => {
                    state.missing.remove(&n);
                    if ordered && !pod_is_available(&pod) {
                        break;
                    }
                }
            }
        }

        let pods: Vec<Option<Value>> = (0..replicas).map(|n| self.pod(n)).collect();
        let all_available = pods
            .iter()
            .all(|p| p.as_ref().is_some_and(pod_is_available));

        // The built-in controller's own update with the gate off: one pod at a time.
        if self.builtin_rolling_update && !on_delete && (!ordered || all_available) {
            for n in (partition..replicas).rev() {
                let Some(pod) = &pods[n as usize] else {
                    break;
                };
                if pod_revision(pod) != Some(update_revision.as_str()) {
                    let removed = self.api.remove_object(
                        ResourceType::of::<Pod>(),
                        &self.namespace,
                        &self.pod_name(n),
                    );
                    if removed.is_some() {
                        state.created_at.remove(&self.pod_name(n));
                        lock(&self.stats).deleted_by_builtin.push(self.pod_name(n));
                        // Upstream's `status.CurrentReplicas--` after its own deletion.
                        revisions[n as usize] = None;
                    }
                    break;
                }
                if !pod_is_available(pod) {
                    break;
                }
            }
        }

        // Status, written only when it changes.
        let pods: Vec<Option<Value>> = (0..replicas).map(|n| self.pod(n)).collect();
        let count = |f: &dyn Fn(&Value) -> bool| pods.iter().flatten().filter(|p| f(p)).count();
        let ready = count(&pod_is_available);
        let available = count(&|p| pod_is_available_for(p, min_ready));
        let counted = |revision: &str| {
            revisions
                .iter()
                .filter(|r| r.as_deref() == Some(revision))
                .count()
        };
        let updated = counted(&update_revision);
        let complete = pods.iter().all(|p| {
            p.as_ref().is_some_and(|p| {
                pod_is_available(p) && pod_revision(p) == Some(update_revision.as_str())
            })
        });
        // upstream `completeRollingUpdate`
        let (current, current_replicas) = if complete {
            (update_revision.clone(), updated)
        } else {
            (current_revision.clone(), counted(&current_revision))
        };
        let status = json!({
            "observedGeneration": generation,
            "replicas": pods.iter().flatten().count(),
            "readyReplicas": ready,
            "availableReplicas": available,
            "currentReplicas": current_replicas,
            "updatedReplicas": updated,
            "currentRevision": current,
            "updateRevision": update_revision,
        });
        if inconsistent_status(&set, &status) {
            let mut replaced = set.clone();
            replaced["status"] = status;
            if let Ok(replaced) = serde_json::from_value::<StatefulSet>(replaced) {
                let _ = sets_api
                    .replace_status(&self.name, &PostParams::default(), &replaced)
                    .await;
            }
        }
    }
}

/// Whether `status` differs from the set's in what upstream's `inconsistentStatus`
/// (pkg/controller/statefulset/stateful_set_control.go) compares: the counters and
/// revisions, not the conditions.
fn inconsistent_status(set: &Value, status: &Value) -> bool {
    [
        "observedGeneration",
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "currentReplicas",
        "updatedReplicas",
        "currentRevision",
        "updateRevision",
    ]
    .iter()
    .any(|k| {
        let stored = set.pointer(&format!("/status/{k}")).unwrap_or(&Value::Null);
        let counted = &status[*k];
        // An absent counter is zero, as in the Go struct.
        stored != counted && !(stored.is_null() && counted == &json!(0))
    })
}

/// Running and Ready for at least `min_ready` seconds (upstream `isRunningAndAvailable`:
/// `podutil.IsPodAvailable`, the Ready condition's `lastTransitionTime + minReadySeconds`
/// before now).
pub fn pod_is_available_for(pod: &Value, min_ready: u64) -> bool {
    if !pod_is_available(pod) {
        return false;
    }
    if min_ready == 0 {
        return true;
    }
    let since = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    since.is_some_and(|t| {
        t.as_second()
            .saturating_add(i64::try_from(min_ready).unwrap_or(i64::MAX))
            < jiff::Timestamp::now().as_second()
    })
}

/// Turns a Running pod's Ready condition to `ready`, now, as the kubelet does when its
/// readiness probe starts or stops passing (`client`: one of the fake API server's).
pub async fn set_pod_ready(client: &kube::Client, namespace: &str, pod: &str, ready: bool) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let since = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": status, "lastTransitionTime": since}]}});
    pods.patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the pod's readiness is set");
}

/// Whether upstream re-creates the pod at `ordinal` at the current revision rather than the
/// update revision: `newVersionedStatefulSetPod` (pkg/controller/statefulset/stateful_set_utils.go)
/// with the set as persisted when the sync finds the pod missing. Below the partition where
/// `rollingUpdate` is set; below `status.currentReplicas` where it is nil (only a type left
/// empty is defaulted to `rollingUpdate: {partition: 0}`).
fn recreated_at_current_revision(set: &Value, ordinal: u32, partition: u32) -> bool {
    let strategy = set.pointer("/spec/updateStrategy");
    let rolling =
        strategy.and_then(|s| s.get("type")).and_then(Value::as_str) == Some("RollingUpdate");
    match strategy
        .and_then(|s| s.get("rollingUpdate"))
        .filter(|r| !r.is_null())
    {
        None => {
            let current_replicas = set
                .pointer("/status/currentReplicas")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            rolling && u64::from(ordinal) < current_replicas
        }
        Some(_) => ordinal < partition,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pod the StatefulSet controller makes from `revision`'s template (its labels and spec;
/// a template without containers gets one container `app`); from v1.28 it carries its ordinal
/// as the label `apps.kubernetes.io/pod-index` (`index_label`).
fn new_pod(
    namespace: &str,
    set: &str,
    set_uid: &str,
    ordinal: u32,
    (revision, template): (&str, &Value),
    index_label: bool,
) -> Pod {
    let name = format!("{set}-{ordinal}");
    let spec = template
        .get("spec")
        .filter(|s| {
            s.get("containers")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty())
        })
        .cloned()
        .unwrap_or_else(|| json!({"containers": [{"name": "app", "image": "app"}]}));
    let mut labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert("app".into(), json!(set));
    labels.insert("statefulset.kubernetes.io/pod-name".into(), json!(name));
    labels.insert("controller-revision-hash".into(), json!(revision));
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": set, "uid": set_uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    });
    if index_label {
        pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = json!(ordinal.to_string());
    }
    serde_json::from_value(pod).expect("a valid pod")
}
