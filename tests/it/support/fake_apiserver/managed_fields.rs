//! `metadata.managedFields` as the apiserver's field manager keeps them
//! (`k8s.io/apimachinery/pkg/util/managedfields/internal` on top of structured-merge-diff),
//! with the part of the OpenAPI schema [`super::schema`] knows: associative lists (containers
//! and volumes by name, conditions by type, webhooks by name, ...) are tracked item by item,
//! atomic maps (label selectors, object references) and every other list are one leaf, and
//! other maps are tracked key by key.
//!
//! - Field sets are paths of `f:<key>`, `k:{<key fields>}` and `v:<value>` elements, read from
//!   and written as `fieldsV1` (`"."` marks a map, list or list item that is itself a member
//!   besides some of its children).
//! - [`compare`] is structured-merge-diff's `Compare` on the typed objects: both sides carry
//!   the type's zero value ([`super::schema::Schema::zero`]), so a value struct is never
//!   added; leaves are added, modified or removed, and maps, lists and list items that appear
//!   or disappear are members too; two empty (or null) maps or lists are one leaf.
//! - [`update`] is `FieldManager.Update` for create, update, patch and status writes: the
//!   managedFields a request sends replace the live ones when they are non-empty and decode
//!   (`decodeLiveOrNew`; `[]` or one empty entry resets them), then every field the write
//!   adds or changes moves to the writer, and removed fields leave every entry. On create
//!   the baseline is an empty object, so the creator ends up owning every field whatever
//!   managedFields it sent.
//! - [`apply`] is `FieldManager.Apply` (server-side apply): see [`super::apply`].
//! - Not tracked, as `StripMetaManager` and the status reset strategy do: `apiVersion`,
//!   `kind`, the server-owned `metadata` fields, `status` on the main resource of a type with
//!   a status subresource, and `spec` on that subresource.
//!
//! Not modelled: the cap of ten Update managers, version conversion of field sets, and
//! `kubectl.kubernetes.io/last-applied-configuration` upgrades.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::schema::{ListType, Schema, item_element, with_zero};

/// One path: `["f:spec", "f:volumeClaimTemplates"]`.
pub type FieldPath = Vec<String>;

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet(BTreeSet<FieldPath>);

impl FieldSet {
    pub fn insert(&mut self, path: FieldPath) {
        self.0.insert(path);
    }

    pub fn contains(&self, path: &[String]) -> bool {
        self.0.iter().any(|p| p.as_slice() == path)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &FieldPath> {
        self.0.iter()
    }

    pub fn union(&self, other: &Self) -> Self {
        Self(self.0.union(&other.0).cloned().collect())
    }

    pub fn difference(&self, other: &Self) -> Self {
        Self(self.0.difference(&other.0).cloned().collect())
    }

    pub fn intersection(&self, other: &Self) -> Self {
        Self(self.0.intersection(&other.0).cloned().collect())
    }

    /// Reads `fieldsV1`; `None` when it is not a tree of objects.
    pub fn from_fields_v1(value: &Value) -> Option<Self> {
        fn walk(prefix: &mut FieldPath, node: &Map<String, Value>, set: &mut FieldSet) -> bool {
            for (key, child) in node {
                let Some(child) = child.as_object() else {
                    return false;
                };
                if key == "." {
                    set.insert(prefix.clone());
                    continue;
                }
                prefix.push(key.clone());
                if child.is_empty() {
                    set.insert(prefix.clone());
                } else if !walk(prefix, child, set) {
                    return false;
                }
                prefix.pop();
            }
            true
        }
        let mut set = Self::default();
        let root = value.as_object()?;
        walk(&mut Vec::new(), root, &mut set).then_some(set)
    }

    /// Writes `fieldsV1`.
    pub fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for path in &self.0 {
            let mut node = &mut root;
            for element in path {
                node = node
                    .entry(element.clone())
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .unwrap_or_else(|| unreachable!("only objects are inserted"));
            }
        }
        // A member that also has children is marked with ".".
        fn mark(node: &mut Map<String, Value>, prefix: &mut FieldPath, set: &FieldSet) {
            for (key, child) in node.iter_mut() {
                let Some(child) = child.as_object_mut() else {
                    continue;
                };
                prefix.push(key.clone());
                if !child.is_empty() {
                    if set.contains(prefix) {
                        child.insert(".".into(), json!({}));
                    }
                    mark(child, prefix, set);
                }
                prefix.pop();
            }
        }
        mark(&mut root, &mut Vec::new(), self);
        Value::Object(root)
    }

    /// `.spec.volumeClaimTemplates`, `.spec.template.spec.containers[name="main"].image`: a
    /// path as conflict messages print it (`fieldpath.Path.String`).
    pub fn render(path: &[String]) -> String {
        path.iter()
            .map(|e| {
                if let Some(key) = e.strip_prefix("k:") {
                    let fields: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                    let shown: Vec<String> =
                        fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!("[{}]", shown.join(","))
                } else if let Some(value) = e.strip_prefix("v:") {
                    format!("[={value}]")
                } else {
                    format!(".{}", e.strip_prefix("f:").unwrap_or(e))
                }
            })
            .collect()
    }
}

/// What a write did to each field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    /// Fields that got a (new) value.
    pub fn changed(&self) -> FieldSet {
        self.added.union(&self.modified)
    }
}

/// Compares two objects tracked as `tracking` says (see [`tracked`]), of the type `schema`
/// describes.
pub fn compare(schema: &Schema, tracking: Tracking, old: &Value, new: &Value) -> Comparison {
    let mut zero = tracked(&schema.zero(), tracking);
    // ObjectMeta is a value struct: there on both sides, even with nothing tracked in it.
    if let Some(map) = zero.as_object_mut() {
        map.entry("metadata").or_insert_with(|| json!({}));
    }
    let (old, new) = (with_zero(&zero, old), with_zero(&zero, new));
    let mut comparison = Comparison::default();
    let mut walker = Walker {
        schema,
        path: Vec::new(),
        names: Vec::new(),
        comparison: &mut comparison,
    };
    walker.walk(Some(&old), Some(&new));
    comparison
}

struct Walker<'a> {
    schema: &'a Schema,
    /// The field path so far.
    path: FieldPath,
    /// The schema path so far: field names, `*` for a list item.
    names: Vec<String>,
    comparison: &'a mut Comparison,
}

impl Walker<'_> {
    fn names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// `doLeaf`: absent on one side is added or removed; a different value is modified.
    fn leaf(&mut self, old: Option<&Value>, new: Option<&Value>) {
        match (old, new) {
            (None, Some(_)) => self.comparison.added.insert(self.path.clone()),
            (Some(_), None) => self.comparison.removed.insert(self.path.clone()),
            (Some(a), Some(b)) if a != b => self.comparison.modified.insert(self.path.clone()),
            _ => {}
        }
    }

    /// Compares one node; `None` is absent, `Some(null)` a null that is there.
    fn walk(&mut self, old: Option<&Value>, new: Option<&Value>) {
        let names = self.names();
        let is_map = [old, new].iter().flatten().any(|v| v.is_object());
        let is_list = [old, new].iter().flatten().any(|v| v.is_array());
        let empty = |v: Option<&Value>| match v {
            None | Some(Value::Null) => true,
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(_) => false,
        };
        let descended = if is_map && !self.schema.atomic_map(&names) {
            if empty(old) && empty(new) {
                // emptyPromoteToLeaf: two empty maps compare as one value.
                self.leaf(old, new);
                return;
            }
            let (o, n) = (
                old.and_then(Value::as_object),
                new.and_then(Value::as_object),
            );
            let keys: std::collections::BTreeSet<&String> =
                o.iter().chain(n.iter()).flat_map(|m| m.keys()).collect();
            for key in keys {
                self.path.push(format!("f:{key}"));
                self.names.push(key.clone());
                self.walk(o.and_then(|m| m.get(key)), n.and_then(|m| m.get(key)));
                self.names.pop();
                self.path.pop();
            }
            true
        } else if let (true, list @ (ListType::Map(_) | ListType::Set)) =
            (is_list, self.schema.list(&names))
        {
            if empty(old) && empty(new) {
                self.leaf(old, new);
                return;
            }
            let items = |v: Option<&Value>| -> Vec<(String, Value)> {
                v.and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|item| Some((item_element(list, item)?, item.clone())))
                    .collect()
            };
            let (o, n) = (items(old), items(new));
            let mut elements: Vec<&String> = o.iter().chain(n.iter()).map(|(e, _)| e).collect();
            elements.sort();
            elements.dedup();
            for element in elements {
                let find = |side: &[(String, Value)]| {
                    side.iter()
                        .find(|(e, _)| e == element)
                        .map(|(_, v)| v.clone())
                };
                let (a, b) = (find(&o), find(&n));
                self.path.push(element.clone());
                self.names.push("*".to_owned());
                if list == ListType::Set {
                    self.leaf(a.as_ref(), b.as_ref());
                } else {
                    self.walk(a.as_ref(), b.as_ref());
                }
                self.names.pop();
                self.path.pop();
            }
            true
        } else {
            self.leaf(old, new);
            false
        };
        // A map, list or item that is there on one side only is a member itself.
        if descended && !self.path.is_empty() {
            match (old, new) {
                (None, Some(_)) => self.comparison.added.insert(self.path.clone()),
                (Some(_), None) => self.comparison.removed.insert(self.path.clone()),
                _ => {}
            }
        }
    }
}

/// Every field an applied configuration sets (structured-merge-diff's `ToFieldSet`): its
/// leaves, atomic maps and lists whole, empty maps and nulls, and each item of an associative
/// list or set.
pub fn field_set(schema: &Schema, object: &Value) -> FieldSet {
    fn collect(
        schema: &Schema,
        path: &mut FieldPath,
        names: &mut Vec<String>,
        value: &Value,
        set: &mut FieldSet,
    ) {
        let names_now: Vec<&str> = names.iter().map(String::as_str).collect();
        match value {
            Value::Object(map) if !map.is_empty() && !schema.atomic_map(&names_now) => {
                for (key, child) in map {
                    path.push(format!("f:{key}"));
                    names.push(key.clone());
                    collect(schema, path, names, child, set);
                    names.pop();
                    path.pop();
                }
            }
            Value::Array(items) => match schema.list(&names_now) {
                list @ (ListType::Map(_) | ListType::Set) => {
                    for item in items {
                        let Some(element) = item_element(list, item) else {
                            continue;
                        };
                        path.push(element);
                        set.insert(path.clone());
                        if list != ListType::Set {
                            names.push("*".to_owned());
                            if let Value::Object(fields) = item {
                                for (key, child) in fields {
                                    path.push(format!("f:{key}"));
                                    names.push(key.clone());
                                    collect(schema, path, names, child, set);
                                    names.pop();
                                    path.pop();
                                }
                            }
                            names.pop();
                        }
                        path.pop();
                    }
                }
                ListType::Atomic if !path.is_empty() => set.insert(path.clone()),
                ListType::Atomic => {}
            },
            _ if !path.is_empty() => set.insert(path.clone()),
            _ => {}
        }
    }
    let mut set = FieldSet::default();
    collect(schema, &mut Vec::new(), &mut Vec::new(), object, &mut set);
    set
}

/// Which part of an object a write addresses, for tracking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracking {
    /// The main resource of a type without a status subresource: everything.
    Whole,
    /// The main resource of a type with a status subresource: all but `status`.
    Main,
    /// The `status` subresource: all but `spec` (the status strategies reset only the spec).
    Status,
    /// The `scale` subresource: as the main resource, its own entry.
    Scale,
}

/// The part of `object` the field manager tracks.
pub fn tracked(object: &Value, tracking: Tracking) -> Value {
    let mut out = object.clone();
    let Some(map) = out.as_object_mut() else {
        return json!({});
    };
    map.remove("apiVersion");
    map.remove("kind");
    match tracking {
        Tracking::Whole => {}
        Tracking::Main | Tracking::Scale => {
            map.remove("status");
        }
        Tracking::Status => {
            map.remove("spec");
        }
    }
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        for server_owned in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ] {
            meta.remove(server_owned);
        }
        if meta.is_empty() {
            map.remove("metadata");
        }
    }
    out
}

/// `Apply` or `Update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    /// `""` for the main resource.
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// `BuildManagerIdentifier`: appliers are one manager whatever version they applied.
    fn identity(&self) -> (String, Operation, String, String) {
        let version = match self.operation {
            Operation::Apply => String::new(),
            Operation::Update => self.api_version.clone(),
        };
        (
            self.manager.clone(),
            self.operation,
            version,
            self.subresource.clone(),
        )
    }

    /// `"helm"`, or `"kubectl" using apps/v1` for an updater: as conflict messages name it
    /// (`printManager`).
    pub fn describe(&self) -> String {
        let mut text = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            text = format!("{text} with subresource {:?}", self.subresource);
        }
        match self.operation {
            Operation::Apply => text,
            Operation::Update => format!("{text} using {}", self.api_version),
        }
    }
}

/// Decodes `managedFields`; an entry the apiserver would not decode fails the whole list.
pub fn decode(list: &Value) -> Result<Vec<Entry>, String> {
    let Some(items) = list.as_array() else {
        return Err("managedFields must be a list".into());
    };
    items
        .iter()
        .map(|item| {
            let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            let operation = match text("operation").as_str() {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                other => return Err(format!("unknown operation {other:?}")),
            };
            if !matches!(text("fieldsType").as_str(), "FieldsV1") {
                return Err(format!("unknown fieldsType {:?}", text("fieldsType")));
            }
            let fields = FieldSet::from_fields_v1(item.get("fieldsV1").unwrap_or(&json!({})))
                .ok_or("fieldsV1 is not a field set")?;
            Ok(Entry {
                manager: text("manager"),
                operation,
                api_version: text("apiVersion"),
                time: item.get("time").and_then(Value::as_str).map(str::to_owned),
                subresource: text("subresource"),
                fields,
            })
        })
        .collect()
}

/// Encodes entries as the apiserver orders them: appliers first, then by time, manager.
pub fn encode(entries: &[Entry]) -> Value {
    let mut sorted: Vec<&Entry> = entries.iter().filter(|e| !e.fields.is_empty()).collect();
    sorted.sort_by(|a, b| {
        (a.operation, &a.time, &a.manager, &a.subresource).cmp(&(
            b.operation,
            &b.time,
            &b.manager,
            &b.subresource,
        ))
    });
    Value::Array(
        sorted
            .into_iter()
            .map(|e| {
                let mut item = json!({
                    "manager": e.manager,
                    "operation": e.operation.as_str(),
                    "apiVersion": e.api_version,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": e.fields.to_fields_v1(),
                });
                if let Some(time) = &e.time {
                    item["time"] = json!(time);
                }
                if !e.subresource.is_empty() {
                    item["subresource"] = json!(e.subresource);
                }
                item
            })
            .collect(),
    )
}

/// The managedFields of an object (empty when absent or undecodable).
pub fn entries_of(object: &Value) -> Vec<Entry> {
    object
        .pointer("/metadata/managedFields")
        .map(|m| decode(m).unwrap_or_default())
        .unwrap_or_default()
}

fn set_entries(object: &mut Value, entries: &[Entry]) {
    let encoded = encode(entries);
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        if encoded.as_array().is_some_and(Vec::is_empty) {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), encoded);
        }
    }
}

/// `isResetManagedFields`: `[]`, or one entry with nothing in it.
fn is_reset(list: &Value) -> bool {
    match list.as_array().map(Vec::as_slice) {
        Some([]) => true,
        Some([one]) => one.as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// Who writes, and how the request names it.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub tracking: Tracking,
    pub now: &'a str,
    pub schema: Schema,
}

/// `FieldManager.Update`: sets `new`'s managedFields after a create (`live` is `None`),
/// update, patch or status write.
pub fn update(live: Option<&Value>, new: &mut Value, writer: &Writer<'_>) {
    let live_entries = || live.map(entries_of).unwrap_or_default();
    let requested = new.pointer("/metadata/managedFields").cloned();
    // A subresource write cannot set managedFields; others may (decodeLiveOrNew).
    let mut entries = match requested {
        _ if writer.tracking == Tracking::Status => live_entries(),
        Some(list) if is_reset(&list) => Vec::new(),
        Some(list) => match decode(&list) {
            Ok(given) if given.iter().any(|e| !e.fields.is_empty()) => given,
            _ => live_entries(),
        },
        None => live_entries(),
    };
    let baseline = json!({});
    let comparison = compare(
        &writer.schema,
        writer.tracking,
        &tracked(live.unwrap_or(&baseline), writer.tracking),
        &tracked(new, writer.tracking),
    );
    let changed = comparison.changed();
    let subresource = match writer.tracking {
        Tracking::Status => "status",
        Tracking::Scale => "scale",
        _ => "",
    };
    let mine = Entry {
        manager: writer.manager.to_owned(),
        operation: Operation::Update,
        api_version: writer.api_version.to_owned(),
        time: None,
        subresource: subresource.to_owned(),
        fields: FieldSet::default(),
    };
    for entry in &mut entries {
        entry.fields = entry
            .fields
            .difference(&changed)
            .difference(&comparison.removed);
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| e.identity() == mine.identity()) {
            Some(entry) => {
                entry.fields = entry.fields.union(&changed);
                entry.time = Some(writer.now.to_owned());
            }
            None => entries.push(Entry {
                fields: changed,
                time: Some(writer.now.to_owned()),
                ..mine
            }),
        }
    }
    entries.retain(|e| !e.fields.is_empty());
    set_entries(new, &entries);
}

/// Fields another manager owns whose value an apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    pub path: FieldPath,
}

/// `FieldManager.Apply` after the merge: `merged` is the live object with the applied
/// configuration merged in (not yet pruned); `applied` the configuration's field set.
/// Prunes what the applier owned before and no longer applies (unless someone else owns it),
/// moves changed fields to the applier, or reports the conflicts when not forced.
pub fn apply(
    live: Option<&Value>,
    merged: &mut Value,
    applied: FieldSet,
    writer: &Writer<'_>,
    force: bool,
) -> Result<(), Vec<Conflict>> {
    let mut entries = live.map(entries_of).unwrap_or_default();
    let me = Entry {
        manager: writer.manager.to_owned(),
        operation: Operation::Apply,
        api_version: writer.api_version.to_owned(),
        time: Some(writer.now.to_owned()),
        subresource: match writer.tracking {
            Tracking::Status => "status".to_owned(),
            _ => String::new(),
        },
        fields: applied.clone(),
    };
    let previous = entries
        .iter()
        .position(|e| e.identity() == me.identity())
        .map(|i| entries.remove(i).fields)
        .unwrap_or_default();
    let owned_by_others = entries
        .iter()
        .fold(FieldSet::default(), |all, e| all.union(&e.fields));
    for path in previous
        .difference(&applied)
        .difference(&owned_by_others)
        .iter()
    {
        remove_path(merged, path);
    }
    let baseline = json!({});
    let comparison = compare(
        &writer.schema,
        writer.tracking,
        &tracked(live.unwrap_or(&baseline), writer.tracking),
        &tracked(merged, writer.tracking),
    );
    let changed = comparison.changed();
    let mut conflicts: Vec<Conflict> = entries
        .iter()
        .flat_map(|e| {
            e.fields
                .intersection(&changed)
                .iter()
                .map(|path| Conflict {
                    manager: e.describe(),
                    path: path.clone(),
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if !force && !conflicts.is_empty() {
        conflicts.sort_by(|a, b| (&a.manager, &a.path).cmp(&(&b.manager, &b.path)));
        return Err(conflicts);
    }
    for entry in &mut entries {
        entry.fields = entry
            .fields
            .difference(&changed)
            .difference(&comparison.removed);
    }
    entries.push(me);
    entries.retain(|e| !e.fields.is_empty());
    set_entries(merged, &entries);
    Ok(())
}

/// Whether a list item is the one a `k:` or `v:` path element names.
fn item_matches(element: &str, item: &Value) -> bool {
    if let Some(key) = element.strip_prefix("k:") {
        let fields: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
        !fields.is_empty() && fields.iter().all(|(k, v)| item.get(k) == Some(v))
    } else if let Some(value) = element.strip_prefix("v:") {
        serde_json::from_str::<Value>(value).is_ok_and(|v| &v == item)
    } else {
        false
    }
}

/// Removes the field or list item at `path` from `object`, if there.
fn remove_path(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = object;
    for element in parents {
        let next = match element.strip_prefix("f:") {
            Some(key) => node.get_mut(key),
            None => node
                .as_array_mut()
                .and_then(|items| items.iter_mut().find(|i| item_matches(element, i))),
        };
        match next {
            Some(child) => node = child,
            None => return,
        }
    }
    match last.strip_prefix("f:") {
        Some(key) => {
            if let Some(map) = node.as_object_mut() {
                map.remove(key);
            }
        }
        None => {
            if let Some(items) = node.as_array_mut() {
                items.retain(|i| !item_matches(last, i));
            }
        }
    }
}

/// The apiserver's conflict message (`getConflictMessage`).
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [one] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            one.manager,
            FieldSet::render(&one.path)
        );
    }
    let mut by_manager: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for c in conflicts {
        by_manager
            .entry(&c.manager)
            .or_default()
            .push(FieldSet::render(&c.path));
    }
    let lines: Vec<String> = by_manager
        .into_iter()
        .flat_map(|(manager, paths)| {
            std::iter::once(format!("conflicts with {manager}:"))
                .chain(paths.into_iter().map(|p| format!("- {p}")))
        })
        .collect();
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Keeps the stored managedFields when a write changed nothing else but their times
/// (`IgnoreManagedFieldsTimestampsTransformer`): such a write is a no-op.
pub fn ignore_time_only_changes(current: &Value, new: &mut Value) {
    let without_times = |v: &Value| {
        let mut v = v.clone();
        if let Some(Value::Array(list)) = v.pointer_mut("/metadata/managedFields") {
            for entry in list.iter_mut().filter_map(Value::as_object_mut) {
                entry.remove("time");
            }
        }
        v
    };
    if without_times(current) == without_times(new)
        && let Some(stored) = current.pointer("/metadata/managedFields")
    {
        new["metadata"]["managedFields"] = stored.clone();
    }
}
