//! Server-side apply (`PATCH` with `application/apply-patch+yaml`, kube's `Patch::Apply`),
//! as `k8s.io/apiserver/pkg/endpoints/handlers/patch.go` and structured-merge-diff's
//! `Updater.Apply` do it, within the limits of [`super::managed_fields`]:
//!
//! - `fieldManager` is required (422 `PatchOptions.meta.k8s.io "" is invalid: fieldManager:
//!   Required value: is required for apply patch`); `force=true` takes conflicting fields;
//!   `force` on any other patch is forbidden;
//! - the body (YAML or JSON) must name the served `apiVersion` and `kind`, and the object of
//!   the URL; it may not carry `metadata.managedFields`;
//! - the configuration is merged into the live object: maps merge key by key; containers,
//!   init containers, volumes (by `name`) and ports (by `containerPort`) item by item, so
//!   what the apiserver defaulted in an item stays (the configuration's items replace the
//!   list, though: an item it leaves out goes, whoever owned it); every other value — lists
//!   included — is replaced whole, as the atomic `spec.volumeClaimTemplates` is;
//! - fields the applier applied last time and no longer applies are removed when no other
//!   manager owns them; fields whose value the apply changes move to the applier, or, when
//!   another manager owns one and `force` is off, nothing is written and the answer is 409
//!   with the apiserver's message (`Apply failed with 1 conflict: conflict with "helm" using
//!   apps/v1: .spec.volumeClaimTemplates`) and one `FieldManagerConflict` cause per field;
//! - the merged object is defaulted afterwards, so defaults are not the applier's;
//! - an apply to an object that does not exist creates it (admission sees a CREATE);
//! - `dryRun=All` answers the result without storing it.

use serde_json::{Value, json};

use super::FakeApiConfig;
use super::errors::{ApiError, FieldError};
use super::managed_fields::{self, Conflict, FieldSet, Tracking};
use super::registry::{self, Target, Update, Writer};
use super::resources::ResourceType;
use super::schema::Schema;
use super::store::{Store, meta_str};

/// Checks the options of a patch: `fieldManager` for apply, `force` only with apply.
pub fn check_options(is_apply: bool, manager: Option<&str>, force: bool) -> Result<(), ApiError> {
    let error = if is_apply && manager.is_none_or(str::is_empty) {
        FieldError::required("fieldManager", "is required for apply patch")
    } else if !is_apply && force {
        FieldError::forbidden("force", "may not be specified for non-apply patch")
    } else {
        return Ok(());
    };
    Err(ApiError::invalid_options("PatchOptions", &[error]))
}

/// The applied configuration: YAML, of which JSON is a part.
pub fn parse(body: &[u8]) -> Result<Value, ApiError> {
    let config: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            let text = std::str::from_utf8(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            serde_saphyr::from_str(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
        }
    };
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "error decoding YAML: the applied configuration must be an object",
        ));
    }
    Ok(config)
}

fn check_config(resource: &ResourceType, config: &Value, name: &str) -> Result<(), ApiError> {
    let text = |k: &str| config.get(k).and_then(Value::as_str).unwrap_or("");
    if text("apiVersion").is_empty() || text("kind").is_empty() {
        return Err(ApiError::bad_request(
            "apiVersion and kind must be set in the applied configuration",
        ));
    }
    if text("apiVersion") != resource.api_version() || text("kind") != resource.kind {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({}) does not match the expected API version ({})",
            text("apiVersion"),
            resource.api_version()
        )));
    }
    match meta_str(config, "name") {
        Some(given) if given == name => {}
        given => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                given.unwrap_or("")
            )));
        }
    }
    if config.pointer("/metadata/managedFields").is_some() {
        return Err(ApiError::bad_request(
            "metadata.managedFields must be nil in an applied configuration",
        ));
    }
    Ok(())
}

/// A field the version's types do not have, in an applied configuration: before server-side
/// field validation (v1.25) the field manager cannot build a typed object from it and the
/// whole apply is refused (a create or a merge patch drops such a field while decoding, and
/// goes through). Real v1.24 answered exactly this to `maxUnavailable`, the one field of ours
/// its types lack.
fn refuse_untyped_fields(
    config: &FakeApiConfig,
    resource: &ResourceType,
    applied: &Value,
    name: &str,
) -> Result<(), ApiError> {
    if !std::ptr::eq(resource, &super::resources::STATEFULSETS)
        || config.statefulset_max_unavailable_in_types
        || applied
            .pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable")
            .is_none()
    {
        return Ok(());
    }
    let namespace = meta_str(applied, "namespace").unwrap_or("");
    Err(ApiError::typed_patch(format!(
        "failed to create typed patch object ({namespace}/{name}; {}, Kind={}): \
         .spec.updateStrategy.rollingUpdate.maxUnavailable: field not declared in schema",
        resource.api_version(),
        resource.kind
    )))
}

/// Lists of the pod spec merged by a key (associative in the apiserver's schema), so that
/// fields the apiserver defaulted in an item (`imagePullPolicy`, a port's `protocol`, a
/// volume's `defaultMode`) stay when the configuration leaves them out.
const ASSOCIATIVE: [(&str, &str); 4] = [
    ("containers", "name"),
    ("initContainers", "name"),
    ("volumes", "name"),
    ("ports", "containerPort"),
];

/// Merges `config` into `target`: maps key by key; the lists of [`ASSOCIATIVE`] item by item
/// (the configuration's items, in its order, each merged onto the live item with its key);
/// anything else replaced.
pub fn merge(target: &mut Value, config: &Value) {
    match (target.as_object_mut(), config.as_object()) {
        (Some(t), Some(c)) => {
            for (key, value) in c {
                let item_key = ASSOCIATIVE
                    .iter()
                    .find(|(list, _)| list == key)
                    .map(|(_, item_key)| *item_key);
                match (t.get_mut(key), item_key) {
                    (Some(Value::Array(live)), Some(item_key)) if value.is_array() => {
                        let merged = merge_by_key(live, value, item_key);
                        *live = merged;
                    }
                    (Some(existing), _) => merge(existing, value),
                    (None, _) => {
                        t.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        _ => *target = config.clone(),
    }
}

fn merge_by_key(live: &[Value], config: &Value, item_key: &str) -> Vec<Value> {
    let items = config.as_array().map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .map(|item| {
            let key = item.get(item_key);
            match live
                .iter()
                .find(|l| key.is_some() && l.get(item_key) == key)
            {
                Some(existing) => {
                    let mut merged = existing.clone();
                    merge(&mut merged, item);
                    merged
                }
                None => item.clone(),
            }
        })
        .collect()
}

/// The part of the configuration the write addresses (`status` is reset on the main
/// resource of a type with a status subresource, and `spec` on that subresource).
fn scoped(config: &Value, tracking: Tracking) -> Value {
    let mut out = config.clone();
    if let Some(map) = out.as_object_mut() {
        match tracking {
            Tracking::Whole => {}
            Tracking::Main | Tracking::Scale => {
                map.remove("status");
            }
            Tracking::Status => {
                map.remove("spec");
            }
        }
    }
    out
}

fn conflict_error(conflicts: &[Conflict]) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|c| {
            json!({"reason": "FieldManagerConflict",
                   "message": format!("conflict with {}", c.manager),
                   "field": FieldSet::render(&c.path)})
        })
        .collect();
    ApiError::apply_conflict(managed_fields::conflict_message(conflicts), causes)
}

/// An apply to an existing object: the updated object, before admission.
pub fn apply_update(
    config: &FakeApiConfig,
    request: &Update<'_>,
    current: &Value,
    applied: &Value,
    force: bool,
) -> Result<Value, ApiError> {
    let resource = request.resource;
    check_config(resource, applied, request.name)?;
    refuse_untyped_fields(config, resource, applied, request.name)?;
    let tracking = registry::tracking(resource, request.target);
    let mut applied = scoped(applied, tracking);
    registry::drop_unknown_fields(config, resource, &mut applied);
    let mut merged = current.clone();
    merge(&mut merged, &applied);
    let now = registry::now_rfc3339();
    let schema = Schema::new(resource, config);
    managed_fields::apply(
        Some(current),
        &mut merged,
        managed_fields::field_set(&schema, &managed_fields::tracked(&applied, tracking)),
        &managed_fields::Writer {
            manager: request.writer.manager,
            api_version: &resource.api_version(),
            tracking,
            now: &now,
            schema,
        },
        force,
    )
    .map_err(|conflicts| conflict_error(&conflicts))?;
    update_last_applied(request.writer.manager, &applied, &mut merged);
    registry::strategy_update(config, request, current, merged)
}

/// The annotation `kubectl apply` (client-side) keeps its last configuration in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `lastAppliedUpdater`: an apply by `kubectl` (its server-side apply) rewrites the
/// client-side annotation where the object has one, so that a later client-side apply
/// agrees; the annotation is the applied configuration as JSON, without the annotation
/// itself. Done after the field manager: the annotation stays whoever's it was.
fn update_last_applied(manager: &str, applied: &Value, object: &mut Value) {
    let present = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .is_some_and(|v| !v.is_empty());
    if manager != "kubectl" || !present {
        return;
    }
    let mut last = applied.clone();
    if let Some(annotations) = last
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(LAST_APPLIED);
    }
    let text = format!("{last}\n");
    if let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.insert(LAST_APPLIED.to_owned(), json!(text));
    }
}

/// An apply that creates the object: the created object, before admission; the applier
/// owns what it applied (defaults are nobody's).
pub fn apply_create(
    store: &mut Store,
    config: &FakeApiConfig,
    resource: &'static ResourceType,
    namespace: Option<&str>,
    name: &str,
    applied: &Value,
    writer: Writer<'_>,
) -> Result<Value, ApiError> {
    check_config(resource, applied, name)?;
    refuse_untyped_fields(config, resource, applied, name)?;
    let tracking = registry::tracking(resource, Target::Main);
    let mut applied = scoped(applied, tracking);
    registry::drop_unknown_fields(config, resource, &mut applied);
    let mut object =
        registry::prepare_create(store, config, resource, namespace, applied.clone(), writer)?;
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        meta.remove("managedFields");
    }
    let now = registry::now_rfc3339();
    let schema = Schema::new(resource, config);
    managed_fields::apply(
        None,
        &mut object,
        managed_fields::field_set(&schema, &managed_fields::tracked(&applied, tracking)),
        &managed_fields::Writer {
            manager: writer.manager,
            api_version: &resource.api_version(),
            tracking,
            now: &now,
            schema,
        },
        true,
    )
    .map_err(|conflicts| conflict_error(&conflicts))?;
    Ok(object)
}
