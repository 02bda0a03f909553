//! KEP-4650: which volumeClaimTemplate edits may be recorded, compared semantically.
//!
//! Templates are matched by name. Quantities compare by value (`1Gi` == `1024Mi`), maps
//! ignore order, and what the apiserver fills in or ignores is not a change: `apiVersion`,
//! `kind`, `status`, `metadata.creationTimestamp`, `volumeMode` absent vs `Filesystem`, and
//! null, empty maps and empty lists vs absent (apimachinery's semantic equality treats nil and
//! empty alike).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::admission::{BadValue, FieldError};
use crate::quantity::Quantity;
use crate::text::clip;

pub const TEMPLATES_PATH: &str = "spec.volumeClaimTemplates";
/// Field path of the desired-templates annotation, as apimachinery names a map key.
pub const DESIRED_PATH: &str =
    "metadata.annotations[stateful-admission.io/desired-volume-claim-templates]";
/// Largest desired-templates annotation accepted or written: the apiserver's limit for all
/// annotations of an object together (`TotalAnnotationSizeLimitB`).
pub const MAX_DESIRED_TEMPLATES_BYTES: usize = 256 * 1024;

const MAY_CHANGE: &str = "only metadata.labels, metadata.annotations, spec.resources.requests.storage and spec.volumeAttributesClassName of a volume claim template may change";

/// One allowed change of one template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Labels,
    Annotations,
    /// The storage request as written (`None` when absent); `decrease` by value.
    Storage {
        old: Option<String>,
        new: Option<String>,
        decrease: bool,
    },
    VolumeAttributesClass {
        old: Option<String>,
        new: Option<String>,
    },
}

/// The allowed changes of the template at `index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateChange {
    pub index: usize,
    pub name: String,
    pub changes: Vec<Change>,
}

/// What an update does to the templates.
#[derive(Debug, Clone, PartialEq)]
pub enum Classification {
    Unchanged,
    /// Only allowed fields changed; one entry per changed template, in the set's order.
    Allowed(Vec<TemplateChange>),
    /// Field errors, one per offending path.
    Denied(Vec<FieldError>),
}

/// A difference that is not allowed, at a path relative to the template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Offence {
    Forbidden(String),
    Malformed {
        path: String,
        value: String,
        detail: String,
    },
}

/// The template list of a spec: absent or null is empty; anything but a list is an error.
pub fn templates_of(spec: &Value) -> Result<&[Value], FieldError> {
    match spec.get("volumeClaimTemplates") {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(FieldError::invalid(
            TEMPLATES_PATH,
            BadValue::Display(json_type(other).to_owned()),
            "must be a list of PersistentVolumeClaim templates",
        )),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub fn template_name(t: &Value) -> &str {
    t.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Compares the templates of `oldObject` and `object`.
///
/// Adding, removing, renaming and reordering templates are all denied: the stored object
/// keeps the old list, and the desired list must line up with it name by name.
pub fn classify_template_change(old: &[Value], new: &[Value]) -> Classification {
    let old_names: Vec<&str> = old.iter().map(template_name).collect();
    let new_names: Vec<&str> = new.iter().map(template_name).collect();
    let mut errors = if old_names == new_names {
        Vec::new()
    } else {
        name_errors(&old_names, &new_names)
    };
    let mut changed = Vec::new();
    for (index, (template, name)) in new.iter().zip(&new_names).enumerate() {
        let Some(before) = old
            .iter()
            .zip(&old_names)
            .find_map(|(t, n)| (n == name).then_some(t))
        else {
            continue;
        };
        let (changes, offences) = diff_template(before, template);
        let prefix = format!("{TEMPLATES_PATH}[{index}]");
        for offence in offences {
            errors.push(match offence {
                Offence::Forbidden(path) => FieldError::forbidden(
                    format!("{prefix}.{path}"),
                    format!("may not change; {MAY_CHANGE}"),
                ),
                Offence::Malformed {
                    path,
                    value,
                    detail,
                } => FieldError::invalid(format!("{prefix}.{path}"), value, detail),
            });
        }
        if !changes.is_empty() {
            changed.push(TemplateChange {
                index,
                name: (*name).to_owned(),
                changes,
            });
        }
    }
    if !errors.is_empty() {
        Classification::Denied(errors)
    } else if changed.is_empty() {
        Classification::Unchanged
    } else {
        Classification::Allowed(changed)
    }
}

/// Errors for a list whose names differ: renamed in place, added, removed, or reordered.
fn name_errors(old: &[&str], new: &[&str]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut renamed_from = Vec::new();
    for (i, name) in new.iter().enumerate() {
        if old.contains(name) {
            continue;
        }
        match old.get(i) {
            Some(was) if !new.contains(was) => {
                renamed_from.push(*was);
                errors.push(FieldError::forbidden(
                    format!("{TEMPLATES_PATH}[{i}].metadata.name"),
                    format!("volume claim template {was:?} may not be renamed to {name:?}; {MAY_CHANGE}"),
                ));
            }
            _ => errors.push(FieldError::forbidden(
                format!("{TEMPLATES_PATH}[{i}]"),
                format!("volume claim template {name:?} may not be added to an existing StatefulSet; {MAY_CHANGE}"),
            )),
        }
    }
    for was in old {
        if !new.contains(was) && !renamed_from.contains(was) {
            errors.push(FieldError::forbidden(
                TEMPLATES_PATH,
                format!("volume claim template {was:?} may not be removed; {MAY_CHANGE}"),
            ));
        }
    }
    if errors.is_empty() {
        // Same names, another order (or duplicates that differ in count).
        errors.push(FieldError::forbidden(
            TEMPLATES_PATH,
            "volume claim templates may not be reordered; keep the order of the existing StatefulSet",
        ));
    }
    errors
}

/// Drops what the apiserver sets or ignores and every null or empty value, recursively: the
/// reference definition [`CleanTemplate`] and [`same`] are tested against.
#[cfg(test)]
fn clean_template(t: &Value) -> Value {
    let mut t = clean(t).unwrap_or(Value::Object(Map::new()));
    if let Value::Object(map) = &mut t {
        map.remove("apiVersion");
        map.remove("kind");
        map.remove("status");
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.remove("creationTimestamp");
            if meta.is_empty() {
                map.remove("metadata");
            }
        }
    }
    t
}

#[cfg(test)]
fn clean(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(map) => {
            let out: Map<String, Value> = map
                .iter()
                .filter_map(|(k, v)| clean(v).map(|v| (k.clone(), v)))
                .collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(items) => {
            (!items.is_empty()).then(|| Value::Array(items.iter().filter_map(clean).collect()))
        }
        other => Some(other.clone()),
    }
}

/// Serialises a template as `clean_template` leaves it, without building the cleaned copy.
struct CleanTemplate<'a>(&'a Value);

impl Serialize for CleanTemplate<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let map = match present(Some(self.0)) {
            None => return s.collect_map(std::iter::empty::<(&str, &str)>()),
            Some(Value::Object(map)) => map,
            Some(other) => return Clean(other).serialize(s),
        };
        let top = map.iter().filter(|(k, v)| match k.as_str() {
            "apiVersion" | "kind" | "status" => false,
            "metadata" => match v {
                Value::Object(meta) => meta
                    .iter()
                    .any(|(k, v)| k != "creationTimestamp" && present(Some(v)).is_some()),
                other => present(Some(other)).is_some(),
            },
            _ => present(Some(v)).is_some(),
        });
        s.collect_map(top.map(|(k, v)| {
            let value = match (k.as_str(), v) {
                ("metadata", Value::Object(meta)) => CleanOr::Meta(meta),
                _ => CleanOr::Clean(Clean(v)),
            };
            (k, value)
        }))
    }
}

enum CleanOr<'a> {
    Clean(Clean<'a>),
    /// Template metadata, without `creationTimestamp`.
    Meta(&'a Map<String, Value>),
}

impl Serialize for CleanOr<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CleanOr::Clean(c) => c.serialize(s),
            CleanOr::Meta(meta) => s.collect_map(
                meta.iter()
                    .filter(|(k, v)| *k != "creationTimestamp" && present(Some(v)).is_some())
                    .map(|(k, v)| (k, Clean(v))),
            ),
        }
    }
}

/// Serialises a present value without its null and empty parts, as `clean` leaves it.
struct Clean<'a>(&'a Value);

impl Serialize for Clean<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => s.collect_map(
                map.iter()
                    .filter(|(_, v)| present(Some(v)).is_some())
                    .map(|(k, v)| (k, Clean(v))),
            ),
            Value::Array(items) => s.collect_seq(
                items
                    .iter()
                    .filter(|v| present(Some(v)).is_some())
                    .map(Clean),
            ),
            other => other.serialize(s),
        }
    }
}

fn object(v: Option<&Value>) -> &Map<String, Value> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    match v {
        Some(Value::Object(m)) => m,
        _ => &EMPTY,
    }
}

fn union<'a>(a: &'a Map<String, Value>, b: &'a Map<String, Value>) -> Vec<&'a String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys
}

fn quantity_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Compares two optional quantities by value. A new value that does not parse is an error; an
/// old one (never stored by a real apiserver) is compared as written.
fn quantity_diff(
    old: Option<&Value>,
    new: Option<&Value>,
    path: &str,
) -> Result<Option<std::cmp::Ordering>, Offence> {
    let parse_new = new
        .map(|v| {
            let text = quantity_text(v).unwrap_or_else(|| v.to_string());
            Quantity::parse(&text).map_err(|e| Offence::Malformed {
                path: path.to_owned(),
                value: text,
                detail: e.to_string(),
            })
        })
        .transpose()?;
    let parse_old = old.and_then(|v| quantity_text(v).and_then(|t| Quantity::parse(&t).ok()));
    match (old, parse_old, parse_new) {
        (None, _, None) => Ok(None),
        (Some(_), Some(a), Some(b)) => Ok((a != b).then(|| b.cmp(&a))),
        (Some(a), None, Some(_)) => Ok((Some(a) != new).then_some(std::cmp::Ordering::Equal)),
        _ => Ok(Some(std::cmp::Ordering::Equal)),
    }
}

/// `v` unless [`clean`] would drop it (null, an empty list, an object of such values).
fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| match v {
        Value::Null => false,
        Value::Array(items) => !items.is_empty(),
        Value::Object(map) => map.values().any(|v| present(Some(v)).is_some()),
        _ => true,
    })
}

/// Whether `clean(a) == clean(b)`, without building either.
fn same(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (present(a), present(b)) {
        (None, None) => true,
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            a.iter().all(|(k, v)| same(Some(v), b.get(k)))
                && b.iter()
                    .all(|(k, v)| a.contains_key(k) || present(Some(v)).is_none())
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            let mut a = a.iter().filter(|v| present(Some(v)).is_some());
            let mut b = b.iter().filter(|v| present(Some(v)).is_some());
            loop {
                match (a.next(), b.next()) {
                    (None, None) => return true,
                    (Some(x), Some(y)) if same(Some(x), Some(y)) => {}
                    _ => return false,
                }
            }
        }
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// The allowed changes and the offences between two templates of the same name. Values are
/// compared as [`clean_template`] leaves them (null and empty values are absent; what the
/// apiserver sets or ignores is skipped), without copying either template.
fn diff_template(old: &Value, new: &Value) -> (Vec<Change>, Vec<Offence>) {
    let mut changes = Vec::new();
    let mut offences = Vec::new();
    let (old_top, new_top) = (object(Some(old)), object(Some(new)));
    for key in union(old_top, new_top) {
        match key.as_str() {
            "metadata" | "spec" | "apiVersion" | "kind" | "status" => {}
            _ if !same(old_top.get(key), new_top.get(key)) => {
                offences.push(Offence::Forbidden(key.clone()));
            }
            _ => {}
        }
    }

    let (om, nm) = (object(old.get("metadata")), object(new.get("metadata")));
    for key in union(om, nm) {
        if key == "creationTimestamp" || same(om.get(key), nm.get(key)) {
            continue;
        }
        match key.as_str() {
            "labels" => changes.push(Change::Labels),
            "annotations" => changes.push(Change::Annotations),
            // Paired by name, so a differing name cannot reach here.
            _ => offences.push(Offence::Forbidden(format!("metadata.{key}"))),
        }
    }

    let (os, ns) = (object(old.get("spec")), object(new.get("spec")));
    // core/v1 defaulting: SetDefaults_PersistentVolumeClaimSpec.
    static FILESYSTEM: std::sync::LazyLock<Value> =
        std::sync::LazyLock::new(|| Value::from("Filesystem"));
    fn field<'a>(spec: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
        present(spec.get(key)).or_else(|| (key == "volumeMode").then(|| &*FILESYSTEM))
    }
    let volume_mode = "volumeMode".to_owned();
    let mut keys = union(os, ns);
    if let Err(at) = keys.binary_search(&&volume_mode) {
        keys.insert(at, &volume_mode);
    }
    for key in keys {
        let (a, b) = (field(os, key), field(ns, key));
        match key.as_str() {
            "resources" => diff_resources(object(a), object(b), &mut changes, &mut offences),
            _ if same(a, b) => {}
            "volumeAttributesClassName" => changes.push(Change::VolumeAttributesClass {
                old: a.and_then(Value::as_str).map(str::to_owned),
                new: b.and_then(Value::as_str).map(str::to_owned),
            }),
            _ => offences.push(Offence::Forbidden(format!("spec.{key}"))),
        }
    }
    (changes, offences)
}

fn diff_resources(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    changes: &mut Vec<Change>,
    offences: &mut Vec<Offence>,
) {
    for key in union(old, new) {
        match key.as_str() {
            "requests" | "limits" => {
                let (a, b) = (object(old.get(key)), object(new.get(key)));
                for name in union(a, b) {
                    let (was, now) = (present(a.get(name)), present(b.get(name)));
                    if was.is_none() && now.is_none() {
                        continue;
                    }
                    let path = format!("spec.resources.{key}[{name}]");
                    match quantity_diff(was, now, &path) {
                        Err(offence) => offences.push(offence),
                        Ok(None) => {}
                        Ok(Some(order)) if key == "requests" && name == "storage" => {
                            changes.push(Change::Storage {
                                old: was.and_then(quantity_text),
                                new: now.and_then(quantity_text),
                                decrease: order == std::cmp::Ordering::Less,
                            });
                        }
                        Ok(Some(_)) => offences.push(Offence::Forbidden(path)),
                    }
                }
            }
            _ if !same(old.get(key), new.get(key)) => {
                offences.push(Offence::Forbidden(format!("spec.resources.{key}")));
            }
            _ => {}
        }
    }
}

/// The value of the desired-templates annotation for `templates`: every template, in the
/// set's order, cleaned of what the apiserver fills in, as compact JSON with sorted keys, so
/// that the same templates always give the same string.
pub fn desired_annotation(templates: &[Value]) -> Result<String, FieldError> {
    let cleaned: Vec<CleanTemplate<'_>> = templates.iter().map(CleanTemplate).collect();
    let text = serde_json::to_string(&cleaned).map_err(|e| {
        FieldError::invalid(
            TEMPLATES_PATH,
            BadValue::Display("...".into()),
            e.to_string(),
        )
    })?;
    if text.len() > MAX_DESIRED_TEMPLATES_BYTES {
        return Err(FieldError::too_long(
            DESIRED_PATH,
            MAX_DESIRED_TEMPLATES_BYTES,
        ));
    }
    // The controller reads it back as claims; a template that is not one must not be stored.
    if let Err(e) = serde_json::from_str::<Vec<PersistentVolumeClaim>>(&text) {
        return Err(FieldError::invalid(
            TEMPLATES_PATH,
            BadValue::Display("...".into()),
            format!("is not a list of PersistentVolumeClaim templates: {e}"),
        ));
    }
    Ok(text)
}

/// Checks a desired-templates annotation the user wrote: bounded, a JSON array of claims with
/// the live templates' names in the same order, differing from them only where a template may
/// change.
pub fn check_desired_annotation(raw: &str, live: &[Value]) -> Vec<FieldError> {
    if raw.len() > MAX_DESIRED_TEMPLATES_BYTES {
        return vec![FieldError::too_long(
            DESIRED_PATH,
            MAX_DESIRED_TEMPLATES_BYTES,
        )];
    }
    let shown = || BadValue::Str(clip(raw, 40));
    let desired: Vec<Value> = match serde_json::from_str::<Value>(raw) {
        Ok(Value::Array(items)) => items,
        Ok(_) => {
            return vec![FieldError::invalid(
                DESIRED_PATH,
                shown(),
                "must be a JSON array of volume claim templates",
            )];
        }
        Err(e) => {
            return vec![FieldError::invalid(
                DESIRED_PATH,
                shown(),
                format!("must be a JSON array of volume claim templates: {e}"),
            )];
        }
    };
    if let Err(e) = serde_json::from_str::<Vec<PersistentVolumeClaim>>(raw) {
        return vec![FieldError::invalid(
            DESIRED_PATH,
            shown(),
            format!("is not a list of PersistentVolumeClaim templates: {e}"),
        )];
    }
    let live_names: Vec<&str> = live.iter().map(template_name).collect();
    let desired_names: Vec<&str> = desired.iter().map(template_name).collect();
    if live_names != desired_names {
        return vec![FieldError::invalid(
            DESIRED_PATH,
            shown(),
            clip(
                &format!(
                    "must name the templates {live_names:?} in this order, not {desired_names:?}"
                ),
                180,
            ),
        )];
    }
    let mut errors = Vec::new();
    for ((live, desired), name) in live.iter().zip(&desired).zip(&live_names) {
        for offence in diff_template(live, desired).1 {
            errors.push(match offence {
                Offence::Forbidden(path) => FieldError::forbidden(
                    DESIRED_PATH,
                    format!(
                        "template {name:?}: {path} differs from the live template; {MAY_CHANGE}"
                    ),
                ),
                Offence::Malformed {
                    path,
                    value,
                    detail,
                } => FieldError::invalid(
                    DESIRED_PATH,
                    BadValue::Str(clip(&value, 40)),
                    format!("template {name:?}: {path}: {detail}"),
                ),
            });
        }
    }
    errors
}

#[cfg(test)]
mod tests;
