//! Strategic merge patch (`application/strategic-merge-patch+json`) as
//! `k8s.io/apimachinery/pkg/util/strategicpatch` applies it, for the lists whose Go types
//! declare `patchStrategy:"merge"` with a `patchMergeKey`. Covered, per type:
//! - MutatingWebhookConfiguration and ValidatingWebhookConfiguration: `webhooks` (key `name`)
//!   and `webhooks[].matchConditions` (key `name`); `rules` and the rest are atomic.
//!
//! Every other list, of every type, is replaced as in a JSON merge patch, and maps merge with
//! `null` deleting a key. In a keyed list, a patch item replaces nothing: it is merged into
//! the item with the same key, or appended when there is none; items the patch does not name
//! are kept. Directives: `{"$patch": "delete"}` in a keyed item removes that item,
//! `{"$patch": "replace"}` as a keyed list's item replaces the list with the other items and
//! in a map replaces the map; `$setElementOrder/<list>` is accepted and ignored (the order
//! stays: existing items in place, new ones appended); `$retainKeys` and
//! `$deleteFromPrimitiveList` are not implemented and answer 400.

use serde_json::{Map, Value};

use super::errors::ApiError;
use super::resources::{self, ResourceType};

/// The merge-keyed lists of a type: dotted path from the object root (list items add no
/// segment), and the key.
pub fn merge_keys(resource: &ResourceType) -> &'static [(&'static str, &'static str)] {
    const WEBHOOKS: &[(&str, &str)] = &[("webhooks", "name"), ("webhooks.matchConditions", "name")];
    if std::ptr::eq(resource, &resources::MUTATING_WEBHOOK_CONFIGURATIONS)
        || std::ptr::eq(resource, &resources::VALIDATING_WEBHOOK_CONFIGURATIONS)
    {
        WEBHOOKS
    } else {
        &[]
    }
}

/// Applies `patch` (a JSON object) to `target`.
pub fn apply(resource: &ResourceType, target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let Some(patch) = patch.as_object() else {
        return Err(ApiError::bad_request(
            "error decoding patch: a strategic merge patch must be a JSON object",
        ));
    };
    merge_map(merge_keys(resource), "", target, patch)
}

fn child(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

fn merge_map(
    keys: &[(&str, &str)],
    path: &str,
    target: &mut Value,
    patch: &Map<String, Value>,
) -> Result<(), ApiError> {
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    match patch.get("$patch").map(|d| d.as_str()) {
        None => {}
        Some(Some("replace")) => {
            *target = Value::Object(Map::new());
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unsupported $patch directive in a map: {other:?}"
            )));
        }
    }
    for (field, value) in patch {
        if field == "$patch" || field.starts_with("$setElementOrder/") {
            continue;
        }
        if field.starts_with('$') {
            return Err(ApiError::bad_request(format!(
                "the fake API server does not implement the {field} directive"
            )));
        }
        let Some(object) = target.as_object_mut() else {
            continue;
        };
        if value.is_null() {
            object.remove(field);
            continue;
        }
        let path = child(path, field);
        let key = keys.iter().find(|(p, _)| *p == path).map(|(_, k)| *k);
        let slot = object.entry(field.clone()).or_insert(Value::Null);
        match (value, key) {
            (Value::Array(items), Some(key)) => merge_list(keys, &path, key, slot, items)?,
            (Value::Object(map), _) => merge_map(keys, &path, slot, map)?,
            _ => *slot = value.clone(),
        }
    }
    Ok(())
}

fn merge_list(
    keys: &[(&str, &str)],
    path: &str,
    key: &str,
    target: &mut Value,
    items: &[Value],
) -> Result<(), ApiError> {
    let replace = items
        .iter()
        .any(|item| item.get("$patch") == Some(&Value::from("replace")));
    if replace || !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    for item in items {
        let Some(map) = item.as_object() else {
            return Err(ApiError::bad_request(format!(
                "{path}: a list with a merge key takes objects, got {item}"
            )));
        };
        match map.get("$patch").and_then(Value::as_str) {
            Some("replace") => continue,
            Some("delete") | None => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "unsupported $patch directive in a list: {other:?}"
                )));
            }
        }
        let Some(wanted) = map.get(key) else {
            // Upstream's mergepatch.ErrNoMergeKey is not a Status error: a 500.
            return Err(ApiError::internal(format!(
                "map: {item} does not contain declared merge key: {key}"
            )));
        };
        let Some(list) = target.as_array_mut() else {
            continue;
        };
        let found = list
            .iter()
            .position(|existing| existing.get(key) == Some(wanted));
        if map.get("$patch").is_some() {
            if let Some(index) = found {
                list.remove(index);
            }
            continue;
        }
        match found {
            Some(index) => merge_map(keys, path, &mut list[index], map)?,
            None => {
                let mut added = Value::Object(Map::new());
                merge_map(keys, path, &mut added, map)?;
                list.push(added);
            }
        }
    }
    Ok(())
}
