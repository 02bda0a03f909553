//! The external resizer and the kubelet of a CSI driver without online expansion, for the
//! claims of one namespace on the fake API server: a claim's file system grows only when the
//! pod that uses it is re-created, as with drivers whose `NodeExpandVolume` needs the volume
//! unpublished.
//!
//! - The resizer (kubernetes-csi/external-resizer, `markPVCAsFSResizeRequired`):
//!   `controller_delay` after a bound claim is first seen asking for more than its
//!   `status.capacity`, the claim gets the condition `FileSystemResizePending` (`True`,
//!   `lastTransitionTime` now, upstream's message), `status.allocatedResources.storage` the
//!   request and `status.allocatedResourceStatuses.storage` `NodeResizePending`, and its volume
//!   (where stored) `spec.capacity` the request; `status.capacity` stays.
//! - The kubelet (`util.MarkFSResizeFinished` in pkg/volume/util/resize_util.go): once the pod
//!   that uses the claim is another pod than when the condition was set (another uid) and has
//!   been Ready for `node_delay`, `status.capacity` becomes the request and the resize
//!   conditions and `allocatedResourceStatuses.storage` go; with `grow_at_mount`, once it is
//!   another pod being started (not yet Running), as a real kubelet grows the file system at
//!   mount, before the containers run.
//!
//! The pod that uses a claim is the one whose volumes name it, else the StatefulSet's pod of
//! the same ordinal (`<template>-<set>-<n>` is used by `<set>-<n>`; the simulation's pods have
//! no volumes). Writes go through [`FakeApiServer::update_object`], each re-checked against the
//! claim as stored, so they race no one and stay out of the request log and write records.
//! Each new pod (uid) a claim's pod had while the claim waited counts as a restart
//! ([`OfflineResizer::restarts_of`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::{Value, json};
use stateful_admission::quantity::Quantity;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fake_apiserver::{FakeApiServer, ResourceType};
use super::statefulset_sim::pod_is_available;

/// The resizer's condition type.
pub const FILE_SYSTEM_RESIZE_PENDING: &str = "FileSystemResizePending";

/// Its message (external-resizer's `markPVCAsFSResizeRequired`).
pub const FILE_SYSTEM_RESIZE_PENDING_MESSAGE: &str =
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node.";

/// Timings.
#[derive(Debug, Clone)]
pub struct ResizerConfig {
    /// From a claim first seen asking for more to `FileSystemResizePending` (the controller
    /// side of the expansion).
    pub controller_delay: Duration,
    /// How long the re-created pod is Ready before the capacity is set (the node side).
    pub node_delay: Duration,
    pub tick: Duration,
    /// The node side finishes as the kubelet mounts the volume for a pod being started (a
    /// new pod, not yet Running), not once it is Ready: the order a real kubelet keeps (with
    /// [`super::statefulset_sim::SimConfig::mount_grows_file_systems`], the pod turns Ready
    /// only after).
    pub grow_at_mount: bool,
}

impl Default for ResizerConfig {
    fn default() -> Self {
        Self {
            controller_delay: Duration::from_millis(50),
            node_delay: Duration::ZERO,
            tick: Duration::from_millis(10),
            grow_at_mount: false,
        }
    }
}

/// What the resizer did.
#[derive(Debug, Clone, Default)]
pub struct ResizerStats {
    /// Claims set to `FileSystemResizePending`, in order (once per expansion).
    pub pending: Vec<String>,
    /// Claims whose expansion finished, in order.
    pub completed: Vec<String>,
    /// Per pod, the new pods (uids) it had while a claim of it waited.
    pub restarts: BTreeMap<String, usize>,
    /// Passes over the claims and pods finished: evidence that it looked (a "nothing
    /// finished" is read after two).
    pub steps: u64,
}

/// The running resizer of one namespace.
pub struct OfflineResizer {
    stop: CancellationToken,
    handle: JoinHandle<()>,
    stats: Arc<Mutex<ResizerStats>>,
    waiting: Arc<Mutex<BTreeSet<String>>>,
}

/// One claim that asks for more than its capacity.
struct Tracked {
    /// When it was first seen so.
    since: Instant,
    /// Set once the claim is at `FileSystemResizePending`.
    pending: Option<Pending>,
}

struct Pending {
    /// The claim's pod when the condition was set; `None` when it had none.
    pod_uid: Option<String>,
    /// New pods seen since.
    recreated: BTreeSet<String>,
    /// The new pod that is Ready, and since when.
    ready: Option<(String, Instant)>,
}

impl OfflineResizer {
    /// Plays the resizer for every claim of `namespace`.
    pub fn start(api: &FakeApiServer, namespace: &str, config: ResizerConfig) -> Self {
        Self::spawn(api, namespace, None, config)
    }

    /// Plays it for these claims of `namespace` only (others expand as the test makes them).
    pub fn start_for(
        api: &FakeApiServer,
        namespace: &str,
        claims: &[&str],
        config: ResizerConfig,
    ) -> Self {
        let scope = claims.iter().map(|c| (*c).to_owned()).collect();
        Self::spawn(api, namespace, Some(scope), config)
    }

    fn spawn(
        api: &FakeApiServer,
        namespace: &str,
        scope: Option<BTreeSet<String>>,
        config: ResizerConfig,
    ) -> Self {
        let stop = CancellationToken::new();
        let stats = Arc::new(Mutex::new(ResizerStats::default()));
        let waiting = Arc::new(Mutex::new(BTreeSet::new()));
        let resizer = Resizer {
            api: api.clone(),
            namespace: namespace.to_owned(),
            scope,
            config,
            stats: Arc::clone(&stats),
            waiting: Arc::clone(&waiting),
        };
        let task_stop = stop.clone();
        let handle = tokio::spawn(async move {
            let mut tracked = HashMap::new();
            let mut tick = tokio::time::interval(resizer.config.tick);
            loop {
                tokio::select! {
                    _ = task_stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                resizer.step(&mut tracked);
                lock(&resizer.stats).steps += 1;
            }
        });
        Self {
            stop,
            handle,
            stats,
            waiting,
        }
    }

    pub fn stats(&self) -> ResizerStats {
        lock(&self.stats).clone()
    }

    /// How many new pods `pod` had while a claim of it waited for one.
    pub fn restarts_of(&self, pod: &str) -> usize {
        lock(&self.stats).restarts.get(pod).copied().unwrap_or(0)
    }

    /// The claims at `FileSystemResizePending` now, waiting for a new pod.
    pub fn waiting(&self) -> Vec<String> {
        lock(&self.waiting).iter().cloned().collect()
    }

    pub async fn stop(self) -> ResizerStats {
        self.stop.cancel();
        let _ = self.handle.await;
        lock(&self.stats).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether a claim carries `FileSystemResizePending` (`True`).
pub fn resize_pending(claim: &Value) -> bool {
    claim
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == FILE_SYSTEM_RESIZE_PENDING && c["status"] == "True")
        })
}

fn storage_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

fn request_of(claim: &Value) -> Option<&str> {
    storage_at(claim, "/spec/resources/requests/storage")
}

/// Whether a bound claim asks for more than its capacity.
fn grows(claim: &Value) -> bool {
    let parse = |q: Option<&str>| q.and_then(|q| Quantity::parse(q).ok());
    claim.pointer("/status/phase").and_then(Value::as_str) == Some("Bound")
        && matches!(
            (parse(request_of(claim)), parse(storage_at(claim, "/status/capacity/storage"))),
            (Some(request), Some(capacity)) if request > capacity
        )
}

/// `status` as a map, made one if it is not.
fn status_mut(object: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !object.get("status").is_some_and(Value::is_object) {
        object["status"] = json!({});
    }
    match object.get_mut("status") {
        Some(Value::Object(status)) => status,
        _ => unreachable!("status was just made an object"),
    }
}

/// The resize conditions (`Resizing`, `FileSystemResizePending`) replaced by `with`, the others
/// kept (`MergeResizeConditionsOfPVC`).
fn set_resize_conditions(claim: &mut Value, with: Option<Value>) {
    let status = status_mut(claim);
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            !matches!(
                c["type"].as_str(),
                Some("Resizing" | FILE_SYSTEM_RESIZE_PENDING)
            )
        })
        .cloned()
        .collect();
    conditions.extend(with);
    if conditions.is_empty() {
        status.remove("conditions");
    } else {
        status.insert("conditions".into(), json!(conditions));
    }
}

struct Resizer {
    api: FakeApiServer,
    namespace: String,
    scope: Option<BTreeSet<String>>,
    config: ResizerConfig,
    stats: Arc<Mutex<ResizerStats>>,
    waiting: Arc<Mutex<BTreeSet<String>>>,
}

impl Resizer {
    fn claims(&self) -> Vec<Value> {
        self.api
            .list_objects(ResourceType::of::<PersistentVolumeClaim>())
            .into_iter()
            .filter(|c| {
                c.pointer("/metadata/namespace").and_then(Value::as_str) == Some(&self.namespace)
            })
            .filter(|c| {
                let name = c
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                self.scope.as_ref().is_none_or(|s| s.contains(name))
            })
            .collect()
    }

    /// The pod that uses `claim`: the one whose volumes name it, else the StatefulSet pod of the
    /// same ordinal.
    fn pod_of(&self, claim: &str) -> Option<(String, Option<Value>)> {
        let pods = self.api.list_objects(ResourceType::of::<Pod>());
        let in_namespace = |p: &&Value| {
            p.pointer("/metadata/namespace").and_then(Value::as_str) == Some(&self.namespace)
        };
        let mounting = pods.iter().filter(in_namespace).find(|p| {
            p.pointer("/spec/volumes")
                .and_then(Value::as_array)
                .is_some_and(|volumes| {
                    volumes.iter().any(|v| {
                        v.pointer("/persistentVolumeClaim/claimName") == Some(&json!(claim))
                    })
                })
        });
        if let Some(pod) = mounting {
            let name = pod.pointer("/metadata/name").and_then(Value::as_str)?;
            return Some((name.to_owned(), Some(pod.clone())));
        }
        for set in self.api.list_objects(ResourceType::of::<StatefulSet>()) {
            if set.pointer("/metadata/namespace").and_then(Value::as_str) != Some(&self.namespace) {
                continue;
            }
            let Some(set_name) = set.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            for template in set
                .pointer("/spec/volumeClaimTemplates")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(template) = template.pointer("/metadata/name").and_then(Value::as_str)
                else {
                    continue;
                };
                let Some(ordinal) = claim.strip_prefix(&format!("{template}-{set_name}-")) else {
                    continue;
                };
                if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let pod = format!("{set_name}-{ordinal}");
                let found = self
                    .api
                    .get_object(ResourceType::of::<Pod>(), &self.namespace, &pod);
                return Some((pod, found));
            }
        }
        None
    }

    fn step(&self, tracked: &mut HashMap<String, Tracked>) {
        let now = Instant::now();
        let claims = self.claims();
        let growing: BTreeSet<String> = claims
            .iter()
            .filter(|c| grows(c))
            .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        tracked.retain(|name, _| growing.contains(name));
        for claim in claims.iter().filter(|c| grows(c)) {
            let Some(name) = claim.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let entry = tracked.entry(name.to_owned()).or_insert(Tracked {
                since: now,
                pending: None,
            });
            let finished = match &mut entry.pending {
                None if now.duration_since(entry.since) >= self.config.controller_delay
                    || resize_pending(claim) =>
                {
                    entry.pending = self.mark_pending(claim, name);
                    false
                }
                None => false,
                Some(pending) => self.follow(claim, name, pending, now),
            };
            if finished {
                tracked.remove(name);
            }
        }
        *lock(&self.waiting) = tracked
            .iter()
            .filter(|(_, t)| t.pending.is_some())
            .map(|(name, _)| name.clone())
            .collect();
    }

    /// The controller side: the claim at `FileSystemResizePending`, or (already so, e.g. set
    /// before this resizer started) adopted as it is.
    fn mark_pending(&self, claim: &Value, name: &str) -> Option<Pending> {
        let pod_uid = self.pod_of(name).and_then(|(_, pod)| pod).and_then(|pod| {
            pod.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let pending = Pending {
            pod_uid,
            recreated: BTreeSet::new(),
            ready: None,
        };
        if resize_pending(claim) {
            return Some(pending);
        }
        let request = request_of(claim)?.to_owned();
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let stored = self.api.update_object(
            ResourceType::of::<PersistentVolumeClaim>(),
            &self.namespace,
            name,
            |claim| {
                if !grows(claim) || resize_pending(claim) {
                    return false;
                }
                set_resize_conditions(
                    claim,
                    Some(json!({"type": FILE_SYSTEM_RESIZE_PENDING, "status": "True",
                                "lastProbeTime": null, "lastTransitionTime": now,
                                "message": FILE_SYSTEM_RESIZE_PENDING_MESSAGE})),
                );
                let status = status_mut(claim);
                status.insert("allocatedResources".into(), json!({"storage": request}));
                let statuses = status
                    .entry("allocatedResourceStatuses")
                    .or_insert_with(|| json!({}));
                if !statuses.is_object() {
                    *statuses = json!({});
                }
                statuses["storage"] = json!("NodeResizePending");
                true
            },
        )?;
        if let Some(volume) = stored.pointer("/spec/volumeName").and_then(Value::as_str) {
            self.api
                .update_object(ResourceType::of::<PersistentVolume>(), "", volume, |pv| {
                    pv["spec"]["capacity"]["storage"] = json!(request);
                    true
                });
        }
        lock(&self.stats).pending.push(name.to_owned());
        Some(pending)
    }

    /// The node side: counts new pods, and finishes once one has been Ready long enough.
    /// Returns whether the expansion finished.
    fn follow(&self, claim: &Value, name: &str, pending: &mut Pending, now: Instant) -> bool {
        // A request raised again while waiting is what the resizer expands to.
        if let Some(request) = request_of(claim)
            && storage_at(claim, "/status/allocatedResources/storage") != Some(request)
        {
            let request = request.to_owned();
            self.api.update_object(
                ResourceType::of::<PersistentVolumeClaim>(),
                &self.namespace,
                name,
                |claim| {
                    if !grows(claim) {
                        return false;
                    }
                    status_mut(claim)
                        .insert("allocatedResources".into(), json!({"storage": request}));
                    true
                },
            );
        }
        let Some((pod_name, Some(pod))) = self.pod_of(name) else {
            pending.ready = None;
            return false;
        };
        let uid = pod
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if pending.pod_uid.as_deref() == Some(uid.as_str()) {
            pending.ready = None;
            return false;
        }
        if pending.recreated.insert(uid.clone()) {
            *lock(&self.stats).restarts.entry(pod_name).or_insert(0) += 1;
        }
        let starting = pod.pointer("/status/phase").and_then(Value::as_str) != Some("Running");
        if self.config.grow_at_mount && !starting {
            // Started without its volume grown: not how a kubelet mounts.
            pending.ready = None;
            return false;
        }
        if !self.config.grow_at_mount && !pod_is_available(&pod) {
            pending.ready = None;
            return false;
        }
        let since = match &pending.ready {
            Some((ready_uid, since)) if *ready_uid == uid => *since,
            _ => {
                pending.ready = Some((uid, now));
                now
            }
        };
        if now.duration_since(since) < self.config.node_delay {
            return false;
        }
        let finished = self.api.update_object(
            ResourceType::of::<PersistentVolumeClaim>(),
            &self.namespace,
            name,
            |claim| {
                let Some(request) = request_of(claim).map(str::to_owned) else {
                    return false;
                };
                if !grows(claim) {
                    return false;
                }
                set_resize_conditions(claim, None);
                let status = status_mut(claim);
                let capacity = status.entry("capacity").or_insert_with(|| json!({}));
                if !capacity.is_object() {
                    *capacity = json!({});
                }
                capacity["storage"] = json!(request);
                if let Some(statuses) = status
                    .get_mut("allocatedResourceStatuses")
                    .and_then(Value::as_object_mut)
                {
                    statuses.remove("storage");
                    if statuses.is_empty() {
                        status.remove("allocatedResourceStatuses");
                    }
                }
                true
            },
        );
        if finished.is_some() {
            lock(&self.stats).completed.push(name.to_owned());
        }
        finished.is_some()
    }
}
