//! REST semantics of the generic registry: what create, update, patch and delete do to the
//! store, mirroring `k8s.io/apiserver/pkg/registry/generic/registry` and the per-type
//! strategies (status isolation, generation, defaulting, immutable fields).

use std::time::Duration;

use serde_json::{Value, json};

use super::FakeApiConfig;
use super::errors::{ApiError, FieldError};
use super::managed_fields;
use super::objectmeta;
use super::resources::{self, ResourceType};
use super::schema::Schema;
use super::store::{Store, meta_str, metadata_mut, namespace_and_name, set_meta};
use super::strategic;
use super::validation;

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Main,
    Status,
    /// `statefulsets/scale`: `spec.replicas` through an autoscaling/v1 Scale, written as an
    /// update of the main resource.
    Scale,
}

/// The patch flavours the fake server understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Json,
    Merge,
    /// Strategic merge: lists with a patch merge key are merged by it where
    /// [`strategic`](super::strategic) covers them; elsewhere it acts as a JSON merge patch.
    Strategic,
    /// Server-side apply ([`apply`](super::apply)).
    Apply,
}

impl PatchKind {
    /// The patch type for a request's content type.
    pub fn from_content_type(content_type: &str) -> Result<Self, ApiError> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" => Ok(Self::Apply),
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
}

/// The parts of `DeleteOptions` the fake server honours.
#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub propagation_policy: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` body (possibly empty) and the query's `propagationPolicy`
    /// and `dryRun`, which the apiserver also accepts.
    pub fn parse(
        body: &[u8],
        query_policy: Option<&str>,
        query_dry_run: bool,
    ) -> Result<Self, ApiError> {
        let options: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
        };
        let text = |p: &str| {
            options
                .pointer(p)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let dry_run = options
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|modes| modes.iter().any(|m| m == "All"));
        Ok(Self {
            uid: text("/preconditions/uid"),
            resource_version: text("/preconditions/resourceVersion"),
            propagation_policy: text("/propagationPolicy").or(query_policy.map(str::to_owned)),
            dry_run: dry_run || query_dry_run,
        })
    }
}

/// What a delete did.
pub struct DeleteOutcome {
    pub object: Value,
    /// 200, gone or waiting for finalizers alike (the apiserver answers 202 only when the
    /// client sent `orphanDependents: false`, which nobody here does).
    pub code: u16,
    /// An orphan delete held back by `FakeApiConfig::orphan_deletion_lag`: finish it after
    /// this long with [`finish_orphan_delete`].
    pub deferred: Option<Duration>,
}

/// The finalizer that makes the garbage collector orphan dependents first.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// Who writes: the field manager (already resolved from `fieldManager` or the user agent).
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub dry_run: bool,
}

/// The first stage of a create, up to what mutating admission sees: the object parsed,
/// named, defaulted, with its initial status and managedFields (the creator owns every
/// field). Identity (uid, creationTimestamp, generation) comes in [`complete_create`], as the
/// registry's `BeforeCreate` runs after mutating admission.
pub fn prepare_create(
    store: &mut Store,
    config: &FakeApiConfig,
    resource: &'static ResourceType,
    namespace: Option<&str>,
    mut object: Value,
    writer: Writer<'_>,
) -> Result<Value, ApiError> {
    check_type(&mut object, resource)?;
    match (resource.namespaced, namespace) {
        (true, None) => return Err(ApiError::method_not_allowed("POST")),
        (true, Some(ns)) => match meta_str(&object, "namespace") {
            Some(given) if !given.is_empty() && given != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => set_meta(&mut object, "namespace", json!(ns)),
        },
        (false, _) => {
            metadata_mut(&mut object).remove("namespace");
        }
    }
    if meta_str(&object, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
        return Err(ApiError::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    // The name is checked, or generated from `generateName`, after mutating admission
    // ([`complete_create`]), as the registry does.
    let meta = metadata_mut(&mut object);
    for server_owned in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        meta.remove(server_owned);
    }
    if let Some(status) = initial_status(config, resource) {
        object["status"] = status;
    }
    apply_defaults(config, resource, None, &mut object);
    let now = now_rfc3339();
    managed_fields::update(
        None,
        &mut object,
        &managed_fields::Writer {
            manager: writer.manager,
            api_version: &resource.api_version(),
            tracking: tracking(resource, Target::Main),
            now: &now,
            schema: Schema::new(resource, config),
        },
    );
    admit_create(store, config, resource, &mut object);
    Ok(object)
}

/// The built-in mutating admission plugins a new object meets, after the field manager (what
/// they set is nobody's) and before the mutating webhooks.
fn admit_create(
    store: &Store,
    config: &FakeApiConfig,
    resource: &ResourceType,
    object: &mut Value,
) {
    // StorageObjectInUseProtection: claims, volumes and (v1.35+) VolumeAttributesClasses.
    let protection = if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS) {
        Some(PVC_PROTECTION_FINALIZER)
    } else if std::ptr::eq(resource, &resources::PERSISTENT_VOLUMES) {
        Some(PV_PROTECTION_FINALIZER)
    } else if resource.plural == "volumeattributesclasses"
        && config.volume_attributes_class_protection
    {
        Some(VAC_PROTECTION_FINALIZER)
    } else {
        None
    };
    if let Some(finalizer) = protection {
        let mut list = finalizers(object);
        if !list.iter().any(|f| f == finalizer) {
            list.push(finalizer.to_owned());
            set_meta(object, "finalizers", json!(list));
        }
    }
    // DefaultStorageClass: a claim with no class (not `""`) and no beta annotation gets the
    // default class, the newest if several (plugin/pkg/admission/storage/storageclass/setdefault).
    if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS)
        && object
            .pointer("/spec/storageClassName")
            .is_none_or(Value::is_null)
        && object
            .pointer(&format!(
                "/metadata/annotations/{}",
                "volume.beta.kubernetes.io~1storage-class"
            ))
            .is_none()
        && let Some(class) = default_storage_class(store)
        && let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("storageClassName".into(), json!(class));
    }
    if std::ptr::eq(resource, &resources::PODS) {
        validation::admit_pod(object);
    }
}

/// The name of the default StorageClass (`storageclass.kubernetes.io/is-default-class` or its
/// beta form `"true"`), the newest if several.
pub fn default_storage_class(store: &Store) -> Option<String> {
    let is_default = |class: &&Value| {
        [
            "storageclass.kubernetes.io~1is-default-class",
            "storageclass.beta.kubernetes.io~1is-default-class",
        ]
        .iter()
        .any(|a| class.pointer(&format!("/metadata/annotations/{a}")) == Some(&json!("true")))
    };
    store
        .list(&resources::STORAGE_CLASSES, None)
        .filter(is_default)
        .max_by(|a, b| {
            let created = |o: &Value| {
                o.pointer("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            created(a).cmp(&created(b))
        })
        .and_then(|class| meta_str(class, "name").map(str::to_owned))
}

/// After mutating admission: identity and built-in validation; what validating admission
/// sees.
pub fn complete_create(
    store: &mut Store,
    config: &FakeApiConfig,
    resource: &'static ResourceType,
    mut object: Value,
) -> Result<Value, ApiError> {
    // `Store.Create` (v1.32+; `rest.BeforeCreate` before): a `generateName` becomes the name.
    let generate_name = meta_str(&object, "generateName").unwrap_or("").to_owned();
    if meta_str(&object, "name").is_none_or(str::is_empty) && !generate_name.is_empty() {
        let name = objectmeta::generated_name(&generate_name, &store.name_suffix());
        set_meta(&mut object, "name", json!(name));
        // The namespace strategy's Canonicalize labels the namespace with its generated name.
        if std::ptr::eq(resource, &resources::NAMESPACES) {
            validation::default_namespace(&mut object);
        }
    }
    let uid = store.new_uid();
    let meta = metadata_mut(&mut object);
    meta.insert("uid".into(), json!(uid));
    meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
    if tracks_generation(config, resource) {
        meta.insert("generation".into(), json!(1));
    }
    // The claim strategy's PrepareForCreate empties the status; validating admission sees
    // it so, and `Pending` is the v1 default the stored claim is read with.
    if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS) {
        object["status"] = json!({});
    }
    // The strategy's `Validate` (metadata, then the type's own); only if it passes, the
    // generic metadata check of `rest.BeforeCreate`.
    let mut errors = objectmeta::validate_create(config, resource, &object);
    errors.extend(validate_create(config, resource, &object));
    if errors.is_empty() {
        errors = objectmeta::validate_create_generic(config, resource, &object);
    }
    if !errors.is_empty() {
        let (_, name) = namespace_and_name(&object);
        return Err(ApiError::invalid(resource, &name, &errors));
    }
    Ok(object)
}

/// Stores a created object (or, on a dry run, only answers it).
pub fn commit_create(
    store: &mut Store,
    resource: &'static ResourceType,
    mut object: Value,
    dry_run: bool,
) -> Result<Value, ApiError> {
    if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS)
        && object.pointer("/status/phase").is_none()
    {
        object["status"] = json!({"phase": "Pending"});
    }
    let (ns, name) = namespace_and_name(&object);
    if store.get(resource, &ns, &name).is_some() {
        return Err(ApiError::already_exists(resource, &name));
    }
    if dry_run {
        return Ok(object);
    }
    Ok(store.commit_upsert(resource, object))
}

/// Whether `metadata.generation` counts changes of everything but metadata and status: the
/// types that track it, and pods from v1.35.
pub fn tracks_generation(config: &FakeApiConfig, resource: &ResourceType) -> bool {
    resource.tracks_generation || std::ptr::eq(resource, &resources::PODS) && config.pod_generation
}

/// What a new generation counts: the object without metadata and status.
fn generation_part(object: &Value) -> Value {
    let mut part = object.clone();
    if let Some(map) = part.as_object_mut() {
        for key in ["metadata", "status", "apiVersion", "kind"] {
            map.remove(key);
        }
    }
    part
}

/// How the field manager tracks a write to `target` of `resource`.
pub fn tracking(resource: &ResourceType, target: Target) -> managed_fields::Tracking {
    match target {
        Target::Status => managed_fields::Tracking::Status,
        Target::Scale => managed_fields::Tracking::Scale,
        Target::Main if resource.status_subresource => managed_fields::Tracking::Main,
        Target::Main => managed_fields::Tracking::Whole,
    }
}

/// An update (PUT or PATCH) of one existing object.
#[derive(Debug, Clone, Copy)]
pub struct Update<'a> {
    pub resource: &'static ResourceType,
    pub namespace: &'a str,
    pub name: &'a str,
    pub target: Target,
    pub writer: Writer<'a>,
    /// A replace: the body's uid is a precondition (on a patch it is a field like any other).
    pub uid_precondition: bool,
}

impl Update<'_> {
    pub fn current(&self, store: &Store) -> Result<Value, ApiError> {
        store
            .get(self.resource, self.namespace, self.name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(self.resource, self.name))
    }
}

/// The object a patch of `kind` makes of `current`.
pub fn patched(
    resource: &ResourceType,
    current: &Value,
    kind: PatchKind,
    body: &[u8],
) -> Result<Value, ApiError> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let mut new = current.clone();
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut new, &ops)
                .map_err(|e| ApiError::unprocessable_patch(e.to_string()))?;
        }
        PatchKind::Strategic => strategic::apply(resource, &mut new, &patch)?,
        PatchKind::Apply => return Err(ApiError::internal("an apply is not a patch")),
        PatchKind::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: a merge patch must be a JSON object",
                ));
            }
            json_patch::merge(&mut new, &patch);
        }
    }
    Ok(new)
}

/// The first stage of replace and patch, up to what mutating admission sees: the strategy
/// ([`strategy_update`]), then managedFields.
pub fn prepare_update(
    config: &FakeApiConfig,
    request: &Update<'_>,
    current: &Value,
    new: Value,
) -> Result<Value, ApiError> {
    let resource = request.resource;
    let mut updated = strategy_update(config, request, current, new)?;
    if request.target == Target::Status {
        // A status write cannot set managedFields: the live ones stay.
        match current.pointer("/metadata/managedFields") {
            Some(live) => set_meta(&mut updated, "managedFields", live.clone()),
            None => {
                metadata_mut(&mut updated).remove("managedFields");
            }
        }
    }
    let now = now_rfc3339();
    managed_fields::update(
        Some(current),
        &mut updated,
        &managed_fields::Writer {
            manager: request.writer.manager,
            api_version: &resource.api_version(),
            tracking: tracking(resource, request.target),
            now: &now,
            schema: Schema::new(resource, config),
        },
    );
    Ok(updated)
}

/// Name and namespace, preconditions, the strategy (status isolation, server-owned
/// fields) and defaulting of an update.
pub fn strategy_update(
    config: &FakeApiConfig,
    request: &Update<'_>,
    current: &Value,
    mut new: Value,
) -> Result<Value, ApiError> {
    let resource = request.resource;
    if !new.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    check_type(&mut new, resource)?;
    let (namespace, name) = namespace_and_name(current);
    match meta_str(&new, "name") {
        Some(given) if !given.is_empty() && given != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        _ => set_meta(&mut new, "name", json!(name)),
    }
    if resource.namespaced {
        match meta_str(&new, "namespace") {
            Some(given) if !given.is_empty() && given != namespace => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => set_meta(&mut new, "namespace", json!(namespace)),
        }
    }
    let current_rv = meta_str(current, "resourceVersion").unwrap_or("");
    // A resourceVersion in the body (also one a merge patch sets) is a precondition.
    if meta_str(&new, "resourceVersion").is_some_and(|rv| !rv.is_empty() && rv != current_rv) {
        return Err(ApiError::conflict(resource, &name));
    }
    // Another uid in the body: a replace's precondition (the storage layer checks it); on a
    // patch or apply, a change of an immutable field, which the generic and the type's own
    // update validation each report.
    let current_uid = meta_str(current, "uid").unwrap_or("");
    if let Some(uid) = meta_str(&new, "uid").filter(|uid| !uid.is_empty() && *uid != current_uid) {
        if request.uid_precondition {
            return Err(ApiError::uid_precondition_failed(
                resource,
                &namespace,
                &name,
                uid,
                current_uid,
            ));
        }
        let error = FieldError::invalid("metadata.uid", uid, "field is immutable");
        return Err(ApiError::invalid(resource, &name, &[error.clone(), error]));
    }

    let mut updated = match request.target {
        // A status write changes `.status` only.
        // A status write changes `.status` and metadata: the status strategies of the types
        // served here reset the spec only (a pod's also its ownerReferences).
        Target::Status => {
            let mut updated = new;
            keep_server_owned_metadata(current, &mut updated);
            if let (Some(map), Some(stored)) = (updated.as_object_mut(), current.as_object()) {
                map.retain(|k, _| {
                    matches!(k.as_str(), "metadata" | "status") || stored.contains_key(k)
                });
                for (k, v) in stored {
                    if !matches!(k.as_str(), "metadata" | "status") {
                        map.insert(k.clone(), v.clone());
                    }
                }
            }
            if std::ptr::eq(resource, &resources::PODS) {
                match current.pointer("/metadata/ownerReferences") {
                    Some(refs) => set_meta(&mut updated, "ownerReferences", refs.clone()),
                    None => {
                        metadata_mut(&mut updated).remove("ownerReferences");
                    }
                }
            }
            updated
        }
        Target::Main | Target::Scale => {
            keep_server_owned_metadata(current, &mut new);
            // The main resource ignores `.status` where a status subresource exists.
            if resource.status_subresource {
                match current.get("status") {
                    Some(status) => new["status"] = status.clone(),
                    None => {
                        if let Some(map) = new.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            }
            apply_defaults(config, resource, Some(current), &mut new);
            new
        }
    };
    set_meta(&mut updated, "resourceVersion", json!(current_rv));
    Ok(updated)
}

/// An update never sets the server's own metadata: the stored values stand.
fn keep_server_owned_metadata(current: &Value, new: &mut Value) {
    let meta = metadata_mut(new);
    for server_owned in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match current.get("metadata").and_then(|m| m.get(server_owned)) {
            Some(value) => meta.insert(server_owned.into(), value.clone()),
            None => meta.remove(server_owned),
        };
    }
}

/// After mutating admission: built-in validation and generation; what validating
/// admission sees.
pub fn complete_update(
    store: &Store,
    config: &FakeApiConfig,
    request: &Update<'_>,
    current: &Value,
    mut updated: Value,
) -> Result<Value, ApiError> {
    let resource = request.resource;
    // `rest.BeforeUpdate`: the generic metadata checks, then the strategy's `ValidateUpdate`.
    let mut errors = objectmeta::validate_update(config, resource, request.target, &updated);
    if request.target != Target::Status {
        errors.extend(validate_update(config, resource, current, &updated));
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid(resource, request.name, &errors));
    }
    if request.target != Target::Status {
        admit_update(store, config, resource, current, &updated)?;
        if tracks_generation(config, resource)
            && generation_part(current) != generation_part(&updated)
        {
            let generation = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            set_meta(&mut updated, "generation", json!(generation + 1));
        }
    }
    // The volume status strategy records when the phase last changed (v1.29+).
    if std::ptr::eq(resource, &resources::PERSISTENT_VOLUMES)
        && config.volume_last_phase_transition_time
        && current.pointer("/status/phase") != updated.pointer("/status/phase")
        && let Some(status) = updated.get_mut("status").and_then(Value::as_object_mut)
    {
        status.insert("lastPhaseTransitionTime".into(), json!(now_rfc3339()));
    }
    managed_fields::ignore_time_only_changes(current, &mut updated);
    Ok(updated)
}

/// The built-in validating admission plugins an update meets after the registry's validation:
/// `PersistentVolumeClaimResize` (plugin/pkg/admission/storage/persistentvolume/resize) lets a
/// claim's request grow only while it is bound and its class allows expansion.
fn admit_update(
    store: &Store,
    config: &FakeApiConfig,
    resource: &'static ResourceType,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    if !std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS)
        || !config.claim_resize_admission
    {
        return Ok(());
    }
    let size = |v: &Value| {
        v.pointer("/spec/resources/requests/storage")
            .and_then(Value::as_str)
            .and_then(validation::parse_quantity)
    };
    let (Some(old_size), Some(new_size)) = (size(old), size(new)) else {
        return Ok(());
    };
    if new_size <= old_size {
        return Ok(());
    }
    let name = meta_str(new, "name").unwrap_or("");
    if old.pointer("/status/phase").and_then(Value::as_str) != Some("Bound") {
        return Err(ApiError::forbidden(
            resource,
            name,
            "Only bound persistent volume claims can be expanded",
        ));
    }
    let class = |v: &Value| {
        v.pointer("/spec/storageClassName")
            .and_then(Value::as_str)
            .or_else(|| {
                v.pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
                    .and_then(Value::as_str)
            })
            .unwrap_or("")
            .to_owned()
    };
    let (old_class, new_class) = (class(old), class(new));
    let expandable = !new_class.is_empty()
        && old_class == new_class
        && store
            .get(&resources::STORAGE_CLASSES, "", &new_class)
            .and_then(|c| c.get("allowVolumeExpansion"))
            .and_then(Value::as_bool)
            == Some(true);
    if expandable {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            resource,
            name,
            "only dynamically provisioned pvc can be resized and the storageclass that provisions \
             the pvc must support resize",
        ))
    }
}

/// Stores an updated object; an update that changes nothing is not written (no new
/// resourceVersion, no event), nor is a dry run.
pub fn commit_update(
    store: &mut Store,
    request: &Update<'_>,
    current: &Value,
    updated: Value,
) -> Result<Value, ApiError> {
    if &updated == current || request.writer.dry_run {
        return Ok(updated);
    }
    let (namespace, name) = namespace_and_name(current);
    if is_deleting(&updated) && finalizers(&updated).is_empty() {
        return Ok(store
            .commit_delete(request.resource, &namespace, &name)
            .unwrap_or(updated));
    }
    Ok(store.commit_upsert(request.resource, updated))
}

pub fn delete(
    store: &mut Store,
    config: &FakeApiConfig,
    resource: &'static ResourceType,
    namespace: &str,
    name: &str,
    options: &DeleteOptions,
) -> Result<DeleteOutcome, ApiError> {
    let current = store
        .get(resource, namespace, name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(resource, name))?;
    let current_uid = meta_str(&current, "uid").unwrap_or("");
    if let Some(uid) = options.uid.as_deref().filter(|u| *u != current_uid) {
        return Err(ApiError::delete_precondition_failed(
            resource,
            name,
            "UID",
            uid,
            current_uid,
        ));
    }
    let current_rv = meta_str(&current, "resourceVersion").unwrap_or("");
    if let Some(rv) = options
        .resource_version
        .as_deref()
        .filter(|rv| *rv != current_rv)
    {
        return Err(ApiError::delete_precondition_failed(
            resource,
            name,
            "ResourceVersion",
            rv,
            current_rv,
        ));
    }
    if options.dry_run {
        return Ok(DeleteOutcome {
            object: current,
            code: 200,
            deferred: None,
        });
    }

    let orphan = options.propagation_policy.as_deref() == Some("Orphan");
    if orphan {
        // The object is marked (deletionTimestamp, the `orphan` finalizer, a new generation)
        // and answered so; the garbage collector then orphans its dependents and removes the
        // finalizer, at once or after `orphan_deletion_lag`.
        let mut marked = current.clone();
        mark_deleting(&mut marked);
        let mut list = finalizers(&marked);
        if !list.iter().any(|f| f == ORPHAN_FINALIZER) {
            list.push(ORPHAN_FINALIZER.to_owned());
        }
        set_meta(&mut marked, "finalizers", json!(list));
        let object = store.commit_upsert(resource, marked);
        let lag = config.orphan_deletion_lag;
        if lag.is_zero() {
            let uid = meta_str(&object, "uid").unwrap_or("").to_owned();
            // Within the request: one write, as before the collector stand-in had a lag.
            finish_orphan_delete(store, resource, namespace, name, &uid);
        }
        return Ok(DeleteOutcome {
            object,
            code: 200,
            deferred: (!lag.is_zero()).then_some(lag),
        });
    }
    if finalizers(&current).is_empty() {
        let object = store
            .commit_delete(resource, namespace, name)
            .unwrap_or(current);
        if std::ptr::eq(resource, &resources::PODS) {
            for claim in claims_of(&object) {
                release_claim(store, namespace, &claim);
            }
        }
        return Ok(DeleteOutcome {
            object,
            code: 200,
            deferred: None,
        });
    }
    // Other finalizers hold the object until whoever owns them removes them.
    if is_deleting(&current) {
        return Ok(DeleteOutcome {
            object: current,
            code: 200,
            deferred: None,
        });
    }
    let mut marked = current;
    mark_deleting(&mut marked);
    let object = store.commit_upsert(resource, marked);
    if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS) {
        release_claim(store, namespace, name);
    }
    Ok(DeleteOutcome {
        object,
        code: 200,
        deferred: None,
    })
}

/// The finalizer the StorageObjectInUseProtection admission plugin puts on every new claim.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";

/// ... on every new PersistentVolume.
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";

/// ... on every new VolumeAttributesClass (v1.35+).
pub const VAC_PROTECTION_FINALIZER: &str = "kubernetes.io/vac-protection";

/// The claims a pod's volumes name.
fn claims_of(pod: &Value) -> Vec<String> {
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/persistentVolumeClaim/claimName")?.as_str())
        .map(str::to_owned)
        .collect()
}

/// The PVC protection controller: a claim being deleted loses its finalizer once no
/// scheduled pod that has not finished uses it (an unscheduled pod never holds it).
fn release_claim(store: &mut Store, namespace: &str, name: &str) {
    let resource = &resources::PERSISTENT_VOLUME_CLAIMS;
    let Some(claim) = store.get(resource, namespace, name).cloned() else {
        return;
    };
    let list = finalizers(&claim);
    if !is_deleting(&claim) || !list.iter().any(|f| f == PVC_PROTECTION_FINALIZER) {
        return;
    }
    let in_use = store.list(&resources::PODS, Some(namespace)).any(|pod| {
        let scheduled = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let finished = matches!(
            pod.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        scheduled && !finished && claims_of(pod).iter().any(|c| c == name)
    });
    if in_use {
        return;
    }
    let remaining: Vec<String> = list
        .into_iter()
        .filter(|f| f != PVC_PROTECTION_FINALIZER)
        .collect();
    if remaining.is_empty() {
        store.commit_delete(resource, namespace, name);
    } else {
        let mut updated = claim;
        set_meta(&mut updated, "finalizers", json!(remaining));
        store.commit_upsert(resource, updated);
    }
}

/// One object the garbage collector stand-in wrote: a patch of `resource`
/// `namespace/name` (a dependent's ownerReferences, or the owner's finalizers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorWrite {
    pub resource: &'static ResourceType,
    pub namespace: String,
    pub name: String,
}

/// Completes a lagged orphan delete, as kube-controller-manager's garbage collector does
/// (`orphanDependents`, then `removeFinalizer`): strips the owner's references from its
/// dependents, removes the `orphan` finalizer and, if no other finalizer remains, the
/// object. Does nothing if the object was replaced meanwhile. Returns its writes in order,
/// the owner's last.
pub fn finish_orphan_delete(
    store: &mut Store,
    resource: &'static ResourceType,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Vec<CollectorWrite> {
    let Some(current) = store.get(resource, namespace, name).cloned() else {
        return Vec::new();
    };
    if meta_str(&current, "uid") != Some(uid) {
        return Vec::new();
    }
    let mut written = orphan_dependents(store, &current);
    let remaining: Vec<String> = finalizers(&current)
        .into_iter()
        .filter(|f| f != ORPHAN_FINALIZER)
        .collect();
    if remaining.is_empty() {
        store.commit_delete(resource, namespace, name);
    } else {
        let mut updated = current;
        set_meta(&mut updated, "finalizers", json!(remaining));
        store.commit_upsert(resource, updated);
    }
    written.push(CollectorWrite {
        resource,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    });
    written
}

/// Removes ownerReferences to `owner` from every dependent (in its namespace, or anywhere
/// for a cluster-scoped owner), as the garbage collector does for `propagationPolicy: Orphan`;
/// returns the dependents patched.
fn orphan_dependents(store: &mut Store, owner: &Value) -> Vec<CollectorWrite> {
    let mut written = Vec::new();
    let Some(owner_uid) = meta_str(owner, "uid").map(str::to_owned) else {
        return written;
    };
    let (owner_ns, _) = namespace_and_name(owner);
    let refers_to_owner =
        |r: &Value| r.get("uid").and_then(Value::as_str) == Some(owner_uid.as_str());
    let dependents: Vec<Value> = store
        .all()
        .filter(|o| owner_ns.is_empty() || namespace_and_name(o).0 == owner_ns)
        .filter(|o| {
            o.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(refers_to_owner))
        })
        .cloned()
        .collect();
    for mut dependent in dependents {
        let Some(resource) = resource_of(&dependent) else {
            continue;
        };
        let before = dependent.clone();
        let meta = metadata_mut(&mut dependent);
        let kept: Vec<Value> = meta
            .get("ownerReferences")
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter(|r| !refers_to_owner(r))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if kept.is_empty() {
            meta.remove("ownerReferences");
        } else {
            meta.insert("ownerReferences".into(), json!(kept));
        }
        // The garbage collector's patch only removes: the references leave every entry, and
        // the collector (kube-controller-manager) gets none.
        let now = now_rfc3339();
        managed_fields::update(
            Some(&before),
            &mut dependent,
            &managed_fields::Writer {
                manager: "kube-controller-manager",
                api_version: &resource.api_version(),
                tracking: tracking(resource, Target::Main),
                now: &now,
                schema: Schema::of(resource),
            },
        );
        let (namespace, name) = namespace_and_name(&dependent);
        store.commit_upsert(resource, dependent);
        written.push(CollectorWrite {
            resource,
            namespace,
            name,
        });
    }
    written
}

/// The served type of a stored object.
pub fn resource_of(object: &Value) -> Option<&'static ResourceType> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    ResourceType::for_object_type(api_version, kind)
}

/// Sets deletionTimestamp (once), and bumps a generation the object has, as the registry
/// does when it first marks an object for deletion.
fn mark_deleting(object: &mut Value) {
    let meta = metadata_mut(object);
    if !meta.contains_key("deletionTimestamp") {
        meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        if let Some(generation) = meta
            .get("generation")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
        {
            meta.insert("generation".into(), json!(generation + 1));
        }
    }
}

fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

pub fn parse_object(body: &[u8]) -> Result<Value, ApiError> {
    let object: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })?;
    if object.is_object() {
        Ok(object)
    } else {
        Err(ApiError::bad_request("the body must be a JSON object"))
    }
}

/// Fills in `apiVersion` and `kind`, and rejects a body of another type.
fn check_type(object: &mut Value, resource: &ResourceType) -> Result<(), ApiError> {
    let api_version = resource.api_version();
    for (field, expected) in [
        ("apiVersion", api_version.as_str()),
        ("kind", resource.kind),
    ] {
        match object.get(field).and_then(Value::as_str) {
            Some(given) if !given.is_empty() && given != expected => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({}) does not match the expected API version ({api_version})",
                    object
                        .get("apiVersion")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                )));
            }
            _ => object[field] = json!(expected),
        }
    }
    Ok(())
}

/// The status a registry sets on create, whatever the client sent.
fn initial_status(config: &FakeApiConfig, resource: &ResourceType) -> Option<Value> {
    if std::ptr::eq(resource, &resources::PERSISTENT_VOLUMES) {
        Some(if config.volume_last_phase_transition_time {
            json!({"phase": "Pending", "lastPhaseTransitionTime": now_rfc3339()})
        } else {
            json!({"phase": "Pending"})
        })
    } else if std::ptr::eq(resource, &resources::STATEFULSETS) {
        Some(json!({"replicas": 0, "availableReplicas": 0}))
    } else if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS)
        || std::ptr::eq(resource, &resources::PODS)
    {
        Some(json!({"phase": "Pending"}))
    } else if std::ptr::eq(resource, &resources::NAMESPACES) {
        Some(json!({"phase": "Active"}))
    } else if std::ptr::eq(resource, &resources::POD_DISRUPTION_BUDGETS) {
        Some(super::eviction::initial_pod_disruption_budget_status())
    } else {
        None
    }
}

/// Fields the configured version's types lack, dropped as decoding drops unknown fields (the
/// default field validation warns and goes on).
pub fn drop_unknown_fields(config: &FakeApiConfig, resource: &ResourceType, object: &mut Value) {
    if std::ptr::eq(resource, &resources::STATEFULSETS) {
        validation::drop_unknown_statefulset_fields(object, config);
    } else if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS)
        && !config.claim_volume_attributes_class_in_types
    {
        validation::drop_volume_attributes_class(object);
    }
}

/// Defaulting, as the apiserver does while decoding a request (before the field manager and
/// admission see it).
pub fn apply_defaults(
    config: &FakeApiConfig,
    resource: &ResourceType,
    _old: Option<&Value>,
    object: &mut Value,
) {
    if std::ptr::eq(resource, &resources::STATEFULSETS) {
        validation::default_statefulset(object, config);
    } else if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS) {
        validation::default_pvc(object, config);
    } else if std::ptr::eq(resource, &resources::PERSISTENT_VOLUMES) {
        validation::default_pv(object);
    } else if std::ptr::eq(resource, &resources::STORAGE_CLASSES) {
        validation::default_storage_class(object);
    } else if std::ptr::eq(resource, &resources::NAMESPACES) {
        validation::default_namespace(object);
    } else if std::ptr::eq(resource, &resources::PODS) {
        validation::default_pod(object);
    } else if std::ptr::eq(resource, &resources::SECRETS) {
        validation::default_secret(object);
    } else if std::ptr::eq(resource, &resources::POD_DISRUPTION_BUDGETS) {
        super::eviction::default_pod_disruption_budget(object);
    } else if std::ptr::eq(resource, &resources::MUTATING_WEBHOOK_CONFIGURATIONS) {
        validation::default_webhooks(object, true);
    } else if std::ptr::eq(resource, &resources::VALIDATING_WEBHOOK_CONFIGURATIONS) {
        validation::default_webhooks(object, false);
    }
}

/// Drops fields behind disabled feature gates (kept if already in use), as the registry's
/// PrepareForCreate/PrepareForUpdate does: after mutating admission, and after the field
/// manager recorded who set them (a v1.32 apiserver with `MaxUnavailableStatefulSet` off
/// keeps `f:maxUnavailable` in managedFields while it drops the field; the same for a claim's
/// `volumeAttributesClassName` with `VolumeAttributesClass` off).
pub fn drop_disabled_fields(
    config: &FakeApiConfig,
    resource: &ResourceType,
    old: Option<&Value>,
    object: &mut Value,
) {
    if std::ptr::eq(resource, &resources::STATEFULSETS)
        && config.drop_statefulset_max_unavailable
        && !old.is_some_and(validation::uses_max_unavailable)
    {
        validation::drop_max_unavailable(object);
    }
    if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS)
        && config.drop_claim_volume_attributes_class
        && !old.is_some_and(validation::uses_volume_attributes_class)
    {
        validation::drop_volume_attributes_class(object);
    }
    // `StatefulSetAutoDeletePVC` off (v1.24): the retention policy goes unless in use.
    if std::ptr::eq(resource, &resources::STATEFULSETS)
        && !config.statefulset_retention_policy
        && !old.is_some_and(|o| {
            o.pointer("/spec/persistentVolumeClaimRetentionPolicy")
                .is_some_and(|p| !p.is_null())
        })
        && let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.remove("persistentVolumeClaimRetentionPolicy");
    }
}

/// Validation of a new object, where the fake models it.
fn validate_create(
    config: &FakeApiConfig,
    resource: &ResourceType,
    object: &Value,
) -> Vec<FieldError> {
    if std::ptr::eq(resource, &resources::SECRETS) {
        validation::validate_secret(object)
    } else if std::ptr::eq(resource, &resources::STATEFULSETS) {
        validation::validate_statefulset(object, config)
    } else {
        Vec::new()
    }
}

fn validate_update(
    config: &FakeApiConfig,
    resource: &ResourceType,
    old: &Value,
    new: &Value,
) -> Vec<FieldError> {
    if std::ptr::eq(resource, &resources::STATEFULSETS) {
        validation::validate_statefulset_update(old, new, config)
    } else if std::ptr::eq(resource, &resources::PERSISTENT_VOLUME_CLAIMS) {
        validation::validate_pvc_update(old, new, config)
    } else if std::ptr::eq(resource, &resources::SECRETS) {
        validation::validate_secret_update(old, new)
    } else {
        Vec::new()
    }
}

/// Now in the apiserver's timestamp form: RFC 3339, seconds, UTC.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
