//! core/v1 and events.k8s.io/v1 Events are one collection in the apiserver, served in two
//! versions with different field names. The store keeps both views of each Event, written
//! together at one resourceVersion ([`super::store::Store::commit_upsert`]); these are the
//! conversions (`k8s.io/kubernetes/pkg/apis/events/v1` to and from the internal core Event),
//! with the fields each version always prints (`source: {}`, null timestamps, ...).

use serde_json::{Map, Value, json};

use super::resources::{self, ResourceType};

/// `(core/v1 field, events.k8s.io/v1 field)`.
const RENAMED: [(&str, &str); 14] = [
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("action", "action"),
    ("reason", "reason"),
    ("type", "type"),
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Fields core/v1 prints even when unset (no `omitempty`, or a struct), with that value.
fn core_always() -> [(&'static str, Value); 7] {
    [
        ("involvedObject", json!({})),
        ("source", json!({})),
        ("firstTimestamp", Value::Null),
        ("lastTimestamp", Value::Null),
        ("eventTime", Value::Null),
        ("reportingComponent", json!("")),
        ("reportingInstance", json!("")),
    ]
}

/// The same for events.k8s.io/v1.
fn v1_always() -> [(&'static str, Value); 5] {
    [
        ("eventTime", Value::Null),
        ("regarding", json!({})),
        ("deprecatedSource", json!({})),
        ("deprecatedFirstTimestamp", Value::Null),
        ("deprecatedLastTimestamp", Value::Null),
    ]
}

/// Whether `resource` is one of the two Event versions.
pub fn is_event(resource: &ResourceType) -> bool {
    std::ptr::eq(resource, &resources::CORE_EVENTS) || std::ptr::eq(resource, &resources::EVENTS)
}

/// The core/v1 and events.k8s.io/v1 views of an Event written through `resource`.
pub fn views(resource: &ResourceType, object: &Value) -> (Value, Value) {
    let core = if std::ptr::eq(resource, &resources::EVENTS) {
        convert(object, "v1", "Event", |(core, v1)| (v1, core))
    } else {
        object.clone()
    };
    let core = with_defaults(core, &core_always(), "count");
    let mut v1 = convert(&core, "events.k8s.io/v1", "Event", |pair| pair);
    // events.k8s.io/v1 leaves these out when empty (`omitempty`), where core/v1 prints "".
    if let Some(map) = v1.as_object_mut() {
        for field in [
            "reportingController",
            "reportingInstance",
            "action",
            "reason",
            "note",
            "type",
        ] {
            if map.get(field).is_some_and(|v| v == "") {
                map.remove(field);
            }
        }
    }
    let v1 = with_defaults(v1, &v1_always(), "deprecatedCount");
    (core, v1)
}

/// Copies `metadata` and every field of [`RENAMED`] (from the first name of the pair `order`
/// gives to the second), and sets the type.
fn convert(
    from: &Value,
    api_version: &str,
    kind: &str,
    order: impl Fn((&'static str, &'static str)) -> (&'static str, &'static str),
) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!(kind));
    if let Some(meta) = from.get("metadata") {
        out.insert("metadata".into(), meta.clone());
    }
    for pair in RENAMED {
        let (source, target) = order(pair);
        if let Some(value) = from.get(source) {
            out.insert(target.into(), value.clone());
        }
    }
    Value::Object(out)
}

/// Fills in what the version always prints; drops a zero `count` (`omitempty`).
fn with_defaults(mut object: Value, always: &[(&str, Value)], count: &str) -> Value {
    if let Some(map) = object.as_object_mut() {
        for (field, value) in always {
            map.entry(*field).or_insert_with(|| value.clone());
        }
        if map.get(count).is_some_and(|c| c.is_null() || c == 0) {
            map.remove(count);
        }
    }
    object
}
