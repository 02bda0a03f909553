//! What the recorded claim change is (the templates before and after it), and when it was
//! recorded, as the set's managed fields tell it.

use super::*;

/// The recorded templates against the live ones, and why they cannot be applied, if so.
pub(super) fn changes(
    set: &StatefulSet,
    desired: Option<&str>,
) -> (Vec<TemplateChange>, Option<String>) {
    let Some(desired) = desired else {
        return (Vec::new(), None);
    };
    let raw = serde_json::to_value(set).unwrap_or(Value::Null);
    // The controller's own check before it journals (`ConvergeSkipped` when it fails).
    let refused = converge::desired_object(&raw).err();
    let live = raw
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Ok(Value::Array(desired)) = serde_json::from_str::<Value>(desired) else {
        return (Vec::new(), refused);
    };
    let changes = match templates::classify_template_change(&live, &desired) {
        Classification::Allowed(changes) => changes
            .into_iter()
            .map(|c| {
                let mut out = TemplateChange {
                    template: c.name,
                    storage: None,
                    volume_attributes_class_name: None,
                    labels: false,
                    annotations: false,
                };
                for change in c.changes {
                    match change {
                        templates::Change::Labels => out.labels = true,
                        templates::Change::Annotations => out.annotations = true,
                        templates::Change::Storage { old, new, .. } => {
                            out.storage = Some(FromTo { from: old, to: new });
                        }
                        templates::Change::VolumeAttributesClass { old, new } => {
                            out.volume_attributes_class_name = Some(FromTo { from: old, to: new });
                        }
                    }
                }
                out
            })
            .collect(),
        Classification::Unchanged | Classification::Denied(_) => Vec::new(),
    };
    (changes, refused)
}

/// Whether a managedFields entry (of the main resource) owns `path` (`f:` keys).
fn owns(entry: &ManagedFieldsEntry, path: &[&str]) -> bool {
    let mut node = entry.fields_v1.as_ref().map(|f| &f.0);
    for key in path {
        node = node.and_then(|n| n.get(*key));
    }
    node.is_some()
}

pub(super) fn main_resource(entry: &ManagedFieldsEntry) -> bool {
    entry.subresource.as_deref().is_none_or(str::is_empty)
}

const ANNOTATION_PATH: [&str; 3] = [
    "f:metadata",
    "f:annotations",
    "f:stateful-admission.io/desired-volume-claim-templates",
];

const TEMPLATES_PATH: [&str; 2] = ["f:spec", "f:volumeClaimTemplates"];

/// When the change was recorded, from managedFields: the time of the entry that owns the
/// desired-templates annotation (the applier, where the apiserver attributes a webhook's
/// mutation to it); else, while the annotation is there, the last write by anyone but the
/// controller (the one that recorded it, or a later one); else the last write, by anyone but
/// the controller, of an entry that owns the templates (after a re-create, the applier's
/// restored entry).
pub(super) fn change_recorded_at(set: &StatefulSet, recorded: bool) -> Option<Timestamp> {
    let entries: Vec<&ManagedFieldsEntry> = set
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| main_resource(e) && e.manager.as_deref() != Some(names::CONTROLLER_NAME))
        .collect();
    let latest = |f: &dyn Fn(&ManagedFieldsEntry) -> bool| {
        entries
            .iter()
            .filter(|e| f(e))
            .filter_map(|e| e.time.as_ref().map(|t| t.0))
            .max()
    };
    if recorded {
        latest(&|e| owns(e, &ANNOTATION_PATH)).or_else(|| latest(&|_| true))
    } else {
        latest(&|e| owns(e, &TEMPLATES_PATH))
    }
}

/// The managedFields `change_recorded_at` reads, and no more: each entry's manager,
/// operation, subresource and time, and of its fields only the two it looks for.
pub(crate) fn trim_managed_fields(
    entries: Option<Vec<ManagedFieldsEntry>>,
) -> Option<Vec<ManagedFieldsEntry>> {
    entries.map(|entries| {
        entries
            .into_iter()
            .map(|e| {
                let mut fields = serde_json::Map::new();
                if owns(&e, &ANNOTATION_PATH) {
                    fields.insert(
                        "f:metadata".into(),
                        json!({"f:annotations": {ANNOTATION_PATH[2]: {}}}),
                    );
                }
                if owns(&e, &TEMPLATES_PATH) {
                    fields.insert("f:spec".into(), json!({"f:volumeClaimTemplates": {}}));
                }
                ManagedFieldsEntry {
                    fields_v1: Some(FieldsV1(Value::Object(fields))),
                    fields_type: None,
                    api_version: None,
                    ..e
                }
            })
            .collect()
    })
}
