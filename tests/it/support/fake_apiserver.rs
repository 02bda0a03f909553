//! An in-process fake Kubernetes API server for integration tests.
//!
//! It speaks the real wire protocol over HTTP on 127.0.0.1 so that kube's `Client`,
//! `Api` and the runtime's watchers and reflectors run unmodified against it, for the
//! resources the project touches: statefulsets (with `status` and `scale`) and deployments
//! (apps/v1); persistentvolumeclaims, persistentvolumes, pods, namespaces, configmaps, secrets
//! and events (core v1); events (events.k8s.io/v1); storageclasses and
//! volumeattributesclasses (storage.k8s.io/v1 or v1beta1, where served);
//! leases (coordination.k8s.io/v1); poddisruptionbudgets (policy/v1); mutatingwebhookconfigurations
//! and validatingwebhookconfigurations (admissionregistration.k8s.io/v1, cluster-scoped).
//!
//! It answers as one apiserver version: [`FakeApiConfig::profile`] sets every switch as a
//! captured real apiserver answered (`tests/fixtures/apiserver-behaviour/`, [`profile`]), and
//! `tests/it/apiserver_replay.rs` checks each profile against its captures; discovery and
//! OpenAPI ([`discovery`]) serve that version's documents, adjusted to the switches.
//!
//! Fidelity, by design:
//! - objects are raw JSON (unknown fields survive); one global resourceVersion; core/v1 and
//!   events.k8s.io/v1 Events are one collection in two views ([`events`]); create sets
//!   uid, creationTimestamp, generation (statefulsets) and the registry's initial status;
//! - list and watch with label and field selectors, bookmarks, `timeoutSeconds`,
//!   `sendInitialEvents`, and a 410 Gone ERROR event for a resourceVersion older than the
//!   retained history (capped at [`FakeApiConfig::watch_history_limit`]);
//! - paged lists ([`pagination`]): `limit` and `continue` with the apiserver's token, every
//!   page read from the first page's snapshot, `remainingItemCount`, 410 `Expired` for a
//!   continuation the retained history no longer reaches; `resourceVersion=0` is answered
//!   whole, as the watch cache does;
//! - accounting ([`traffic`]): watch streams open and opened and list requests per
//!   resource, a compact record of every write (verb, resource, subresource, field manager,
//!   user agent, code, time); and watch lag injection on chosen streams (on all, where
//!   [`WATCH_LAG_ENV`] says so);
//! - bulk seeding straight into the store ([`FakeApiServer::seed`]);
//! - replace and patch (JSON patch, merge patch, strategic merge patch) with optimistic
//!   concurrency on `metadata.resourceVersion`. Strategic merge merges lists by their patch
//!   merge key only where [`strategic`] lists them (the webhook configurations' `webhooks`
//!   and `webhooks[].matchConditions`, by `name`); every other list is replaced as in a merge
//!   patch;
//! - `metadata.managedFields` on every create, update, patch, apply and status write
//!   ([`managed_fields`]): the manager is `fieldManager`, else the user agent's product
//!   token, else `unknown`; on create the creator takes every field the object has from
//!   any managedFields sent, on an update sent ones stand as given; associative lists
//!   (containers, volumes, conditions, webhooks, ...) by key and atomic maps and lists as the
//!   schema has them ([`schema`]);
//! - server-side apply ([`apply`]): `fieldManager` required, `force`, merge with lists
//!   replaced whole, pruning, and 409 conflicts with the apiserver's message;
//! - admission ([`admission`]): pluggable hooks get AdmissionReviews shaped like the
//!   apiserver's for every CREATE and UPDATE, after managedFields are computed; mutating
//!   patches are applied, denials and webhook failures (by failurePolicy) answered, warnings
//!   sent as `Warning` headers;
//! - `/status` subresources for statefulsets, deployments, claims and pods: a status write
//!   changes status and metadata (not a pod's ownerReferences), never spec; a write of the
//!   main resource leaves status alone;
//! - object metadata validated on every create, update, patch and apply of every type, as each
//!   version words it ([`objectmeta`]): the type's name rule (DNS subdomain; DNS label for
//!   namespaces and, v1.27+, StatefulSets; path segment only for core/v1 Events and budgets),
//!   `generateName` (honoured after mutating admission, cut to 58 bytes), label keys and
//!   values, annotation keys and their 256 KiB total, as 422 `Invalid` with the apiserver's
//!   causes;
//! - the StatefulSet and PVC validation and the defaulting our rules meet, as each version
//!   words and decides them; the defaults of StorageClasses, volumes, namespaces, pods and
//!   webhook configurations; Secrets turn `stringData` into `data`, default to `Opaque`, keep
//!   their type, and a `kubernetes.io/tls` Secret needs `tls.crt` and `tls.key`;
//! - the admission plugins every apiserver runs: DefaultStorageClass, DefaultTolerationSeconds,
//!   Priority, PersistentVolumeClaimResize (a switch, off by default) and
//!   StorageObjectInUseProtection: new claims get the `kubernetes.io/pvc-protection` finalizer,
//!   which a claim being deleted loses as soon as no scheduled, unfinished pod uses it (the PVC
//!   protection controller; checked on the claim's delete and on the delete of a pod using
//!   it), volumes `kubernetes.io/pv-protection`, VolumeAttributesClasses (v1.35+)
//!   `kubernetes.io/vac-protection`;
//! - delete with uid/resourceVersion preconditions and the garbage collector's orphaning;
//!   other propagation policies are only recorded: dependents are never deleted;
//! - `dryRun=All` validates (and admits) and answers without storing;
//! - `/version` and `SelfSubjectAccessReview` ([`authz`]) with a policy and an impersonation
//!   switch the test sets;
//! - outages ([`outage`]): every connection reset for a while, then the same server again;
//! - the Eviction subresource (`pods/{name}/eviction`, [`eviction`]): budgets' selectors,
//!   `minAvailable`/`maxUnavailable` (integer or percent) over the selected pods and their
//!   controllers' scale, unready pods, 429 refusals, 500 for two budgets, preconditions, the
//!   `DisruptionTarget` condition, each answer logged ([`FakeApiServer::eviction_records`]).
//!
//! Not modelled: authentication (impersonation headers only name the user webhooks see, with
//! `Impersonate-Uid` and `Impersonate-Extra-*`), namespace lifecycle (objects may be created
//! in namespaces that do not exist; deleting a namespace deletes nothing else), pod graceful
//! termination (pods go at once, as unscheduled pods do), the disruption controller (a budget's
//! status is what was written to it; evictions compute it), associative lists in apply's merge
//! (an item the configuration leaves out goes), warnings for unknown fields (they are dropped
//! silently), the go-cmp diff older versions append to a claim's immutability message, quantity
//! canonicalisation, the webhook configurations' validation (their metadata is validated), and
//! owner reference and finalizer validation. Objects put with the store
//! hooks ([`FakeApiServer::put_object`]) keep the managedFields they carry, as another
//! controller's write would leave them.

pub mod admission;
mod apply;
pub mod authz;
mod discovery;
mod errors;
mod events;
pub mod eviction;
mod http;
pub mod managed_fields;
pub mod objectmeta;
mod outage;
mod pagination;
pub mod profile;
mod registry;
mod request_log;
pub mod resources;
mod schema;
mod seed;
mod selectors;
mod store;
mod strategic;
mod traffic;
mod validation;
mod watch;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch as signal};

pub use request_log::RecordedRequest;
pub use resources::ResourceType;
pub use store::{ChangeKind, StoreChange, StoreView};
pub use traffic::{GARBAGE_COLLECTOR_AGENT, WatchSelector, WriteRecord};
pub use validation::{PVC_SPEC_FORBIDDEN, STATEFULSET_SPEC_FORBIDDEN};

pub use admission::AdmissionHook;
pub use eviction::DisruptionStatus;
pub use objectmeta::MetadataWording;
pub use profile::Profile;
use request_log::{Fault, HoldRule, RequestLog};
use store::{Store, meta_str, metadata_mut, namespace_and_name, typed};

/// How a validation message quotes an `intstr.IntOrString` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueWording {
    /// Go's `%#v` of the struct, as `field.Invalid` printed it up to v1.33:
    /// `intstr.IntOrString{Type:1, IntVal:0, StrVal:"0%"}`.
    GoStruct,
    /// As JSON, as v1.34+ print it: `0`, `"0%"`.
    Json,
}

/// Behaviour switches; all may also be changed while the server runs
/// ([`FakeApiServer::configure`]). [`FakeApiConfig::profile`] sets them as one captured
/// apiserver version answers; the default is a v1.33 with both StatefulSet and
/// VolumeAttributesClass gates on.
#[derive(Debug, Clone)]
pub struct FakeApiConfig {
    /// Whether a claim's `spec.storageClassName` may go from unset to a value (Kubernetes
    /// 1.25+, KEP-3333). When false the update is rejected as older apiservers did.
    pub retroactive_default_class_allowed: bool,
    /// Act like an apiserver with the `MaxUnavailableStatefulSet` gate off: silently drop
    /// `spec.updateStrategy.rollingUpdate.maxUnavailable` on every StatefulSet write
    /// (unless the stored object already uses it, as the registry does).
    pub drop_statefulset_max_unavailable: bool,
    /// Act like an apiserver with the `VolumeAttributesClass` gate off (v1.32 and v1.33's
    /// default): silently drop a claim's `spec.volumeAttributesClassName` on every write
    /// (unless the stored claim already uses it). StatefulSet claim templates keep it. With
    /// the gate off no version of `storage.k8s.io` serves VolumeAttributesClasses either.
    pub drop_claim_volume_attributes_class: bool,
    /// How long kube-controller-manager's garbage collector takes to act on an orphan
    /// delete: the object stays, with `deletionTimestamp` and the `orphan` finalizer, until
    /// its stand-in has orphaned the dependents and removed the finalizer (the object then
    /// goes), never during an outage; those patches are recorded as the collector's
    /// ([`GARBAGE_COLLECTOR_AGENT`]). Zero (the default) finishes the delete within the
    /// request, unrecorded (the answer, as the apiserver's, is the marked object; watches see
    /// it marked, then deleted).
    pub orphan_deletion_lag: Duration,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// How many changes are kept for watches to resume from.
    pub watch_history_limit: usize,
    /// How many requests the request log keeps (oldest dropped first).
    pub request_log_limit: usize,
    /// `gitVersion` of `/version`.
    pub git_version: String,
    /// `gitCommit` of `/version`.
    pub git_commit: String,
    /// Whose captured discovery documents and OpenAPI property names are served (adjusted to
    /// the switches: [`profile::Documents`]).
    pub documents: Profile,
    /// The `storage.k8s.io` version that serves VolumeAttributesClasses (`v1`, `v1beta1`),
    /// when `drop_claim_volume_attributes_class` is off; none: no version serves them (404).
    pub volume_attributes_class_api: Option<&'static str>,
    /// Whether a new VolumeAttributesClass gets the `kubernetes.io/vac-protection` finalizer
    /// (v1.35+).
    pub volume_attributes_class_protection: bool,
    /// Whether the StatefulSet types have `rollingUpdate.maxUnavailable` (not in
    /// v1.24.0-alpha.1): without it a sent value is lost in decoding, before the field manager
    /// sees it, and OpenAPI does not list it.
    pub statefulset_max_unavailable_in_types: bool,
    /// `SetDefaults_StatefulSet` with `MaxUnavailableStatefulSet` on: a `rollingUpdate`
    /// without `maxUnavailable` gets 1.
    pub max_unavailable_default_one: bool,
    /// `maxUnavailable` validated (`pkg/apis/apps/validation`: not negative, not 0, not over
    /// 100%), as with `MaxUnavailableStatefulSet` on, in this wording; none: not validated.
    pub max_unavailable_validation: Option<ValueWording>,
    /// Whether the claim types have `spec.volumeAttributesClassName` (v1.29+): without it a
    /// sent value is lost in decoding, and the immutability message is the older one
    /// (`... except resources.requests for bound claims`).
    pub claim_volume_attributes_class_in_types: bool,
    /// Whether `spec.persistentVolumeClaimRetentionPolicy` is served and defaulted
    /// (`StatefulSetAutoDeletePVC`, beta from v1.27): when off it is dropped, as v1.24 does.
    pub statefulset_retention_policy: bool,
    /// The spec fields a StatefulSet update may change, in the order the apiserver's
    /// message names them ([`profile::STATEFULSET_MUTABLE_V1_32`] and its siblings).
    pub statefulset_mutable_fields: &'static [&'static str],
    /// Whether a zero `metadata.creationTimestamp` prints as `null` (up to v1.34): in the
    /// pod template and claim templates of a StatefulSet, and in the object a mutating webhook
    /// sees on create.
    pub zero_creation_timestamp_null: bool,
    /// Whether the claim immutability message ends with a unified diff of the two specs as
    /// JSON (v1.35+, `k8s.io/apimachinery/pkg/util/diff`). Older apiservers append a go-cmp
    /// diff, which the fake does not reproduce: the message then ends after the sentence.
    pub claim_spec_json_diff: bool,
    /// Whether a bound claim's request may be lowered while it stays above `status.capacity`
    /// (`RecoverVolumeExpansionFailure`, on from v1.32): when off any decrease is refused with
    /// `field can not be less than previous value`.
    pub expansion_recovery: bool,
    /// Not a captured version: a future apiserver with KEP-4650 (StatefulSet claim template
    /// updates). StatefulSetSpec lists `volumeClaimUpdatePolicy` in OpenAPI, the field is kept
    /// on writes, and an update changing only the labels, annotations,
    /// `resources.requests.storage` or `volumeAttributesClassName` of claim templates is
    /// accepted.
    pub native_template_edits: bool,
    /// Whether service-account users carry `authentication.kubernetes.io/credential-id` in
    /// `userInfo.extra` (v1.32+: the token's JTI), as webhooks see it.
    pub service_account_credential_id: bool,
    /// Whether the StatefulSet controller labels pods `apps.kubernetes.io/pod-index` (v1.28+),
    /// for the simulations that play it.
    pub pod_index_label: bool,
    /// Whether pods get `metadata.generation` (v1.35+).
    pub pod_generation: bool,
    /// Whether a PersistentVolume's status records `lastPhaseTransitionTime` (v1.29+).
    pub volume_last_phase_transition_time: bool,
    /// Whether a PersistentVolume's `spec.claimRef` is tracked field by field in managedFields
    /// (v1.26+); before, it is one atomic value.
    pub volume_claim_ref_granular: bool,
    /// Whether the `PersistentVolumeClaimResize` admission plugin runs, as on every apiserver
    /// (and in every profile): a claim's request grows only while it is bound and its
    /// StorageClass has `allowVolumeExpansion: true` (403 otherwise). Off by default, where
    /// tests expand bound claims without making their class.
    pub claim_resize_admission: bool,
    /// Whether an eviction writes the `DisruptionTarget` condition on the pod before deleting
    /// it (`PodDisruptionConditions`, on from v1.26, GA in v1.31).
    pub pod_disruption_conditions: bool,
    /// Whether an eviction honours a budget's `spec.unhealthyPodEvictionPolicy`
    /// (`PDBUnhealthyPodEvictionPolicy`, on from v1.27, GA in v1.31); when off an unready pod
    /// goes only while the budget is healthy, as before.
    pub unhealthy_pod_eviction_policy: bool,
    /// How metadata errors are worded ([`objectmeta`]): `field.TooLong`'s sentence, and
    /// whether label checks count characters or bytes (v1.35+).
    pub metadata_wording: MetadataWording,
    /// Whether StatefulSet names must be DNS labels, and an update does not revalidate them
    /// (v1.27+); before, DNS subdomains.
    pub statefulset_name_dns_label: bool,
    /// Whether the client may impersonate (`Impersonate-User`) for an access review.
    pub impersonation_allowed: bool,
    /// What `SelfSubjectAccessReview` answers as refused; everything else is allowed.
    pub denied_access: Vec<authz::DeniedAccess>,
}

impl Default for FakeApiConfig {
    fn default() -> Self {
        Self {
            retroactive_default_class_allowed: true,
            drop_statefulset_max_unavailable: false,
            drop_claim_volume_attributes_class: false,
            orphan_deletion_lag: Duration::ZERO,
            bookmark_interval: Duration::from_secs(1),
            watch_history_limit: 10_000,
            request_log_limit: 100_000,
            git_version: "v1.33.0".to_owned(),
            git_commit: "0000000000000000000000000000000000000000".to_owned(),
            documents: Profile::V1_32GatesOn,
            volume_attributes_class_api: Some("v1beta1"),
            volume_attributes_class_protection: false,
            statefulset_max_unavailable_in_types: true,
            max_unavailable_default_one: false,
            max_unavailable_validation: None,
            claim_volume_attributes_class_in_types: true,
            statefulset_retention_policy: true,
            statefulset_mutable_fields: profile::STATEFULSET_MUTABLE_V1_32,
            zero_creation_timestamp_null: true,
            claim_spec_json_diff: false,
            expansion_recovery: true,
            native_template_edits: false,
            service_account_credential_id: false,
            pod_index_label: false,
            pod_generation: false,
            volume_last_phase_transition_time: true,
            volume_claim_ref_granular: true,
            claim_resize_admission: false,
            pod_disruption_conditions: true,
            unhealthy_pod_eviction_policy: true,
            metadata_wording: MetadataWording::V1_32,
            statefulset_name_dns_label: true,
            impersonation_allowed: true,
            denied_access: Vec::new(),
        }
    }
}

/// State shared by the HTTP handlers, watch tasks and the test handle.
struct Shared {
    store: Mutex<Store>,
    config: Mutex<FakeApiConfig>,
    log: Mutex<RequestLog>,
    faults: Mutex<Vec<Fault>>,
    holds: Mutex<Vec<HoldRule>>,
    /// Admission in the write path, in order.
    hooks: Mutex<Vec<Arc<dyn AdmissionHook>>>,
    /// Watch and list counts, write records, watch lags.
    traffic: traffic::Traffic,
    /// Becomes true on shutdown; every stream ends.
    shutdown: signal::Sender<bool>,
    /// Bumped to end every open watch (clients reconnect).
    disconnect: signal::Sender<u64>,
    /// Whether the server is in an outage ([`outage`]).
    outage: outage::Outage,
    /// Every eviction answered, in order ([`eviction`]).
    evictions: Mutex<Vec<eviction::EvictionRecord>>,
}

/// A test must not be wedged by a panic in another test thread holding a lock.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    fn config(&self) -> FakeApiConfig {
        lock(&self.config).clone()
    }

    fn log(&self) -> MutexGuard<'_, RequestLog> {
        lock(&self.log)
    }

    fn faults(&self) -> MutexGuard<'_, Vec<Fault>> {
        lock(&self.faults)
    }

    fn holds(&self) -> MutexGuard<'_, Vec<HoldRule>> {
        lock(&self.holds)
    }

    fn hooks(&self) -> MutexGuard<'_, Vec<Arc<dyn AdmissionHook>>> {
        lock(&self.hooks)
    }
}

/// Shuts the server down when the last handle goes.
struct Lifetime(Arc<Shared>);

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.0.shutdown.send_replace(true);
    }
}

/// A running fake API server. Clones share the server; it stops when the last clone is
/// dropped (or on [`FakeApiServer::shutdown`]), ending every watch stream.
#[derive(Clone)]
pub struct FakeApiServer {
    shared: Arc<Shared>,
    url: String,
    _lifetime: Arc<Lifetime>,
}

/// [`FakeApiServer::wait_for`] gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitTimeout(pub Duration);

impl std::fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the fake API server's store did not reach the expected state within {:?}",
            self.0
        )
    }
}

impl std::error::Error for WaitTimeout {}

/// Milliseconds every watch event of every server is held back by, where set (a stress run
/// of the suite: the controllers' views lag behind the store); a test's own lags win.
pub const WATCH_LAG_ENV: &str = "STATEFUL_ADMISSION_TEST_WATCH_LAG_MS";

/// Namespaces every cluster has.
const BUILTIN_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

impl FakeApiServer {
    /// Starts a server with the default configuration on an ephemeral port.
    pub async fn start() -> Self {
        Self::start_with(FakeApiConfig::default()).await
    }

    /// Starts a server on an ephemeral port of 127.0.0.1.
    ///
    /// # Panics
    /// If no loopback port can be bound.
    pub async fn start_with(config: FakeApiConfig) -> Self {
        let seed = jiff::Timestamp::now().as_nanosecond().unsigned_abs() as u64;
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(config.watch_history_limit, seed)),
            log: Mutex::new(RequestLog::new(config.request_log_limit)),
            config: Mutex::new(config),
            faults: Mutex::new(Vec::new()),
            holds: Mutex::new(Vec::new()),
            hooks: Mutex::new(Vec::new()),
            traffic: traffic::Traffic::new(),
            shutdown: signal::channel(false).0,
            disconnect: signal::channel(0).0,
            outage: outage::Outage::default(),
            evictions: Mutex::new(Vec::new()),
        });
        let server = Self {
            shared: Arc::clone(&shared),
            url: String::new(),
            _lifetime: Arc::new(Lifetime(Arc::clone(&shared))),
        };
        for name in BUILTIN_NAMESPACES {
            server.put_object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "status": {"phase": "Active"}}));
        }

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let address = listener
            .local_addr()
            .expect("local address of the listener");
        let mut shutdown = shared.shutdown.subscribe();
        let app = http::router(Arc::clone(&shared));
        let listener = outage::Listener::new(listener, shared.outage.clone());
        tokio::spawn(async move {
            let stopped = async move {
                let _ = shutdown.wait_for(|down| *down).await;
            };
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await;
        });
        // A stress run (scripts/stress-tests.sh --watch-lag) has every watch event arrive late.
        if let Some(lag) = std::env::var(WATCH_LAG_ENV)
            .ok()
            .and_then(|ms| ms.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
        {
            for resource in resources::ALL {
                server.lag_watches(resource, WatchSelector::Every, Duration::from_millis(lag));
            }
        }
        Self {
            url: format!("http://{address}"),
            ..server
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A kube client for this server, with default namespace `default`.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn client(&self) -> kube::Client {
        let uri = self.url.parse().expect("the server URL is a valid URI");
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        kube::Client::try_from(config).expect("a kube client for the fake API server")
    }

    /// The behaviour switches now.
    pub fn config(&self) -> FakeApiConfig {
        self.shared.config()
    }

    /// Changes behaviour switches; takes effect for the next request.
    pub fn configure(&self, change: impl FnOnce(&mut FakeApiConfig)) {
        change(&mut lock(&self.shared.config));
    }

    /// Stops the server now: every watch stream ends and no new connection is accepted.
    pub fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
    }

    // --- store hooks: act as another controller would, without the HTTP layer ---

    /// Creates or replaces an object directly, bypassing validation, preconditions and
    /// status isolation (e.g. a kubelet marking a pod Ready, the StatefulSet controller
    /// rewriting status, a claim becoming Bound). Like everything an apiserver stores, the
    /// object is defaulted; uid and creationTimestamp are assigned when missing (kept from
    /// the stored object on replace). Bumps the resourceVersion and notifies watches.
    /// Returns the stored object.
    ///
    /// # Panics
    /// If the object's `apiVersion`/`kind` is not served, or it has no `metadata.name`.
    pub fn put_object(&self, mut object: Value) -> Value {
        let resource = registry::resource_of(&object).unwrap_or_else(|| {
            panic!(
                "put_object: unsupported apiVersion/kind in {}",
                object.get("kind").unwrap_or(&Value::Null)
            )
        });
        let (namespace, name) = namespace_and_name(&object);
        assert!(!name.is_empty(), "put_object: metadata.name is required");
        let config = self.shared.config();
        let mut store = self.shared.store();
        let existing = store.get(resource, &namespace, &name).cloned();
        registry::apply_defaults(&config, resource, existing.as_ref(), &mut object);
        if resource.namespaced && namespace.is_empty() {
            metadata_mut(&mut object).insert("namespace".into(), json!("default"));
        }
        let uid = match existing.as_ref().and_then(|e| meta_str(e, "uid")) {
            Some(uid) => uid.to_owned(),
            None => store.new_uid(),
        };
        let created = existing
            .as_ref()
            .and_then(|e| e.pointer("/metadata/creationTimestamp").cloned())
            .unwrap_or_else(|| json!(registry::now_rfc3339()));
        let meta = metadata_mut(&mut object);
        meta.entry("uid").or_insert(json!(uid));
        meta.entry("creationTimestamp").or_insert(created);
        if resource.tracks_generation {
            let generation = existing
                .as_ref()
                .and_then(|e| e.pointer("/metadata/generation").cloned())
                .unwrap_or(json!(1));
            meta.entry("generation").or_insert(generation);
        }
        store.commit_upsert(resource, object)
    }

    /// Changes a stored object in place, under the store's lock, as a controller's
    /// read-modify-write with its resourceVersion as precondition would: `change` sees the
    /// object as stored now and returns whether to keep what it did. Nothing is defaulted,
    /// validated or isolated; the resourceVersion is bumped and watches notified only when
    /// kept. Returns the stored object when kept, `None` when the object is missing or
    /// `change` declined.
    pub fn update_object(
        &self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value) -> bool,
    ) -> Option<Value> {
        let mut store = self.shared.store();
        let mut object = store.get(resource, namespace, name)?.clone();
        if !change(&mut object) {
            return None;
        }
        Some(store.commit_upsert(resource, object))
    }

    /// A kube client for this server without kube's retries of 429, 503 and 504 (the default
    /// client resends a refused eviction up to 15 times, for minutes, before the caller sees
    /// the 429), with default namespace `default`.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn client_without_retries(&self) -> kube::Client {
        let uri = self.url.parse().expect("the server URL is a valid URI");
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        config.default_retry = false;
        kube::Client::try_from(config).expect("a kube client for the fake API server")
    }

    /// Typed [`put_object`](Self::put_object).
    pub fn put<K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned>(
        &self,
        object: &K,
    ) -> K {
        let mut value = serde_json::to_value(object).expect("a k8s-openapi object serializes");
        value["apiVersion"] = json!(K::api_version(&()));
        value["kind"] = json!(K::kind(&()));
        typed(self.put_object(value))
    }

    /// Removes an object directly (no finalizers, no preconditions), notifying watches.
    pub fn remove_object(
        &self,
        resource: &'static ResourceType,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        self.shared.store().commit_delete(resource, namespace, name)
    }

    /// Typed [`remove_object`](Self::remove_object).
    pub fn remove<K: kube::Resource<DynamicType = ()> + DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<K> {
        self.remove_object(ResourceType::of::<K>(), namespace, name)
            .map(typed)
    }

    /// An object as stored; `namespace` is `""` for cluster-scoped types.
    pub fn get_object(
        &self,
        resource: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        self.shared.store().get(resource, namespace, name).cloned()
    }

    /// Typed [`get_object`](Self::get_object).
    pub fn get<K: kube::Resource<DynamicType = ()> + DeserializeOwned>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<K> {
        self.get_object(ResourceType::of::<K>(), namespace, name)
            .map(typed)
    }

    /// Every stored object of a type, across namespaces, in namespace/name order.
    pub fn list_objects(&self, resource: &ResourceType) -> Vec<Value> {
        self.shared.store().list(resource, None).cloned().collect()
    }

    /// Typed [`list_objects`](Self::list_objects).
    pub fn list<K: kube::Resource<DynamicType = ()> + DeserializeOwned>(&self) -> Vec<K> {
        self.list_objects(ResourceType::of::<K>())
            .into_iter()
            .map(typed)
            .collect()
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().revision()
    }

    /// Every change committed from now on (through the API or the hooks).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoreChange>> {
        self.shared.store().subscribe()
    }

    /// Every stored object of a type and the resourceVersion they are all current at, read
    /// under one lock: what changes after it is in [`Self::changes_since`].
    pub fn snapshot(&self, resource: &ResourceType) -> (u64, Vec<Value>) {
        let store = self.shared.store();
        (
            store.revision(),
            store.list(resource, None).cloned().collect(),
        )
    }

    /// Every change committed after `revision`, oldest first, each with the object as it
    /// left it; `None` when the retained history ([`FakeApiConfig::watch_history_limit`],
    /// [`Self::compact_history`]) no longer reaches back to `revision`.
    pub fn changes_since(&self, revision: u64) -> Option<Vec<Arc<StoreChange>>> {
        let store = self.shared.store();
        (revision >= store.history_floor())
            .then(|| store.history_since(revision).cloned().collect())
    }

    /// The global resourceVersion, notified at every commit.
    pub fn revisions(&self) -> signal::Receiver<u64> {
        self.shared.store().watch_revision()
    }

    /// Waits until `predicate` holds for the store, re-checking after every change.
    pub async fn wait_for(
        &self,
        mut predicate: impl FnMut(&StoreView<'_>) -> bool,
        timeout: Duration,
    ) -> Result<(), WaitTimeout> {
        let mut revisions = self.shared.store().watch_revision();
        let check = async {
            loop {
                if predicate(&StoreView(&self.shared.store())) {
                    return;
                }
                if revisions.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(timeout, check)
            .await
            .map_err(|_| WaitTimeout(timeout))
    }

    /// Forgets the watch history: a watch resuming from any earlier resourceVersion gets
    /// 410 Gone and its client must relist.
    pub fn compact_history(&self) {
        self.shared.store().compact();
    }

    /// Ends every open watch stream, as an apiserver restart or a load balancer would;
    /// clients resume from their last resourceVersion.
    pub fn disconnect_watches(&self) {
        self.shared.disconnect.send_modify(|epoch| *epoch += 1);
    }

    // --- request log and fault injection ---

    /// Every request so far (up to [`FakeApiConfig::request_log_limit`]), oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.log().snapshot()
    }

    /// Only the requests that could change state: everything but GET (so neither reads
    /// nor watches).
    pub fn writes(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(RecordedRequest::is_write)
            .collect()
    }

    /// Empties the request log, e.g. once the system under test has settled.
    pub fn clear_requests(&self) {
        self.shared.log().clear();
    }

    /// Makes the next `times` requests with this method (case-insensitive) whose path and
    /// query contain `path_substring` fail with `status_code` and a matching Status.
    /// kube's client retries 429, 503 and 504 by itself; use another code to see the
    /// failure reach the caller.
    pub fn fail_next(&self, method: &str, path_substring: &str, status_code: u16, times: usize) {
        self.shared.faults().push(Fault {
            method: method.to_owned(),
            path_substring: path_substring.to_owned(),
            code: status_code,
            remaining: times,
        });
    }

    /// Puts `hook` in the write path, after the hooks added before (see [`admission`]).
    pub fn add_admission_hook(&self, hook: Arc<dyn AdmissionHook>) {
        self.shared.hooks().push(hook);
    }

    /// Takes every admission hook out of the write path.
    pub fn clear_admission_hooks(&self) {
        self.shared.hooks().clear();
    }

    /// Drops every pending injected failure.
    pub fn clear_faults(&self) {
        self.shared.faults().clear();
    }

    /// Holds the next `times` requests with this method whose path and query contain
    /// `path_substring` before they reach the registry, until [`Hold::release`] (or the
    /// `Hold` is dropped): clients racing on one object get their writes applied together,
    /// in arrival order, after each has read the same state.
    pub fn hold_next(&self, method: &str, path_substring: &str, times: usize) -> Hold {
        let arrived = Arc::new(signal::channel(0).0);
        let (release, released) = signal::channel(false);
        self.shared.holds().push(HoldRule {
            method: method.to_owned(),
            path_substring: path_substring.to_owned(),
            remaining: times,
            arrived: Arc::clone(&arrived),
            released,
        });
        Hold { arrived, release }
    }
}

/// Requests held by [`FakeApiServer::hold_next`]; released on drop.
pub struct Hold {
    arrived: Arc<signal::Sender<usize>>,
    release: signal::Sender<bool>,
}

impl Hold {
    /// Waits until `count` requests are held, or `timeout` passes.
    pub async fn arrived(&self, count: usize, timeout: Duration) -> Result<(), WaitTimeout> {
        let mut waiting = self.arrived.subscribe();
        tokio::time::timeout(timeout, waiting.wait_for(|n| *n >= count))
            .await
            .map(drop)
            .map_err(|_| WaitTimeout(timeout))
    }

    /// Lets every held request through, and the later matching ones unheld.
    pub fn release(&self) {
        self.release.send_replace(true);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.release();
    }
}
