//! The convergence journal and its state machine: re-create a StatefulSet with its desired
//! templates through a journal so that a crash at any step loses nothing.
//!
//! The journal is a ConfigMap `names::journal_name(ns, name)` in the controller's namespace, labelled
//! `stateful-admission.io/journal: "true"`, with no ownerReference (it must outlive the set).
//! Its annotations name the set (namespace, name, uid) and the resourceVersion the journal was
//! written from, and the step reached (`journaled`, then `deleting` just before the orphan
//! delete is sent); `data["statefulset.json"]` holds the full object to create and
//! `data["managed-fields.json"]` the set's `metadata.managedFields` (field ownership).
//!
//! Steps, each persisted before the next: write the journal → mark it `deleting` → delete the
//! set (`propagationPolicy: Orphan`, preconditions uid and resourceVersion) → wait until it
//! is gone → create it from the journal → restore its field ownership → delete the journal.
//! [`next`] maps what exists now to the next step, so a restart resumes wherever the last run
//! stopped:
//!
//! | live set                           | journal          | next step                       |
//! |------------------------------------|------------------|---------------------------------|
//! | desired annotation, converge on    | none             | `Start` (write the journal)     |
//! | anything else                      | none             | `Nothing`                       |
//! | journaled uid, resourceVersion     | `journaled`      | `MarkDeleting`                  |
//! | journaled uid, same rv             | `deleting`       | `Delete`                        |
//! | journaled uid, resourceVersion moved | either         | `Recheck` (status only → refresh, else abandon) |
//! | journaled uid, being deleted       | either           | `WaitGone`                      |
//! | another uid, journaled templates, only our ownership | either | `Restore` (ownership)   |
//! | another uid                        | either           | `Drop` (ours: finished; else replaced by someone) |
//! | absent                             | `deleting`       | `Create`                        |
//! | absent                             | `journaled`      | `Drop` (the user deleted it: we never sent a delete) |
//! | any                                | unreadable       | `Stuck` (kept for a human)      |
//!
//! Field ownership: the apiserver does not keep managedFields sent with a create — its field
//! manager compares the new object with an empty one, so every field is "added" and moves to
//! the creator (`FieldManager.Update` in `k8s.io/apimachinery/pkg/util/managedfields`). It
//! does keep them on an update that changes nothing else (`decodeLiveOrNew` takes the
//! request's managedFields, and an empty comparison moves no field). So the set is created
//! (field manager `stateful-admission`, which then owns every field) and a second write
//! carrying the created object's resourceVersion puts the journaled entries back, as Velero
//! restores them. The entry that owned `spec.volumeClaimTemplates` (the applier whose change
//! the webhook recorded) owns it again, so that applier's next server-side apply meets no
//! conflict. The journaled entries are restored as they were, our own included (they own the
//! annotations we write); the entry our create produced is dropped, being an artifact of the
//! re-create; the dropped desired-templates annotation is taken out of every entry; entries
//! of subresources (status) are the live ones, which describe the new object. The restore
//! happens only while the live set's entries of the main resource are all ours: once anyone
//! else has written the new set, their ownership stands. A journal without managedFields
//! (written before they were kept) finishes without a restore.
//!
//! While the set waits to be gone (`WaitGone`: the garbage collector has yet to orphan its
//! dependents) the claim rollout goes on from the same desired templates, and a wait of
//! [`ORPHAN_WAIT_SAID`] or longer is said ([`orphan_wait`]).
//!
//! The delete is sent right after the mark, and its answer tells a set someone else deleted
//! meanwhile (404: the journal is dropped, nothing re-created) from ours. Only a crash
//! between the mark and that answer, coinciding with a user's delete, re-creates a set the
//! user deleted: the journal cannot tell the two apart then.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use serde_json::Value;

use crate::admission::statefulset::templates;
use crate::names;

/// Key of the journaled object in the ConfigMap's data.
pub const DATA_KEY: &str = "statefulset.json";
/// Key of the journaled `metadata.managedFields` in the ConfigMap's data.
pub const MANAGED_FIELDS_KEY: &str = "managed-fields.json";

/// How far a journal got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalStep {
    /// Written; the set has not been asked to go.
    Journaled,
    /// The orphan delete is about to be (or was) sent.
    Deleting,
}

impl JournalStep {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Journaled => "journaled",
            Self::Deleting => "deleting",
        }
    }
}

/// A journal read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Journal {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub step: JournalStep,
    /// The object to create.
    pub object: Value,
    /// The set's managedFields to restore after the create (empty: none journaled).
    pub managed_fields: Vec<Value>,
}

/// The live set as the state machine needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSet {
    pub uid: String,
    pub resource_version: String,
    pub deleting: bool,
    /// Carries a desired-templates annotation (something to converge).
    pub wants: bool,
    /// `spec.volumeClaimTemplates` as stored.
    pub templates: Vec<Value>,
    /// Managers of the managedFields entries of the main resource (not of subresources).
    pub managers: Vec<String>,
    /// When it was marked for deletion (`metadata.deletionTimestamp`), where that parses.
    pub deleting_since: Option<jiff::Timestamp>,
    /// It carries the `orphan` finalizer: the garbage collector has yet to orphan its
    /// dependents (pods, claims, ControllerRevisions) before the apiserver lets it go.
    pub orphaning: bool,
}

/// Why a journal is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The set we created from it exists: done.
    Finished,
    /// Another set (another uid, other templates) took the name.
    Replaced,
    /// The set went while we had not sent our delete: the user deleted it.
    DeletedByUser,
}

/// The next convergence step, as the state machine names it (the controller's convergence plan
/// turns it into writes and Events).
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Nothing,
    Start,
    MarkDeleting,
    Delete {
        uid: String,
        resource_version: String,
    },
    WaitGone,
    Recheck,
    Create,
    /// Put the journaled field ownership back on the set we created.
    Restore {
        resource_version: String,
    },
    Drop(DropReason),
    Stuck(String),
}

/// The state machine: what to do given the live set and the journal.
pub fn next(
    set: Option<&LiveSet>,
    journal: Option<&Result<Journal, String>>,
    converge: bool,
) -> Step {
    let journal = match journal {
        None => {
            return match set {
                Some(s) if converge && s.wants && !s.deleting => Step::Start,
                _ => Step::Nothing,
            };
        }
        Some(Err(why)) => return Step::Stuck(why.clone()),
        Some(Ok(j)) => j,
    };
    match set {
        None => match journal.step {
            JournalStep::Deleting => Step::Create,
            JournalStep::Journaled => Step::Drop(DropReason::DeletedByUser),
        },
        Some(s) if s.uid != journal.uid => {
            let journaled = journal
                .object
                .pointer("/spec/volumeClaimTemplates")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            match templates::classify_template_change(journaled, &s.templates) {
                templates::Classification::Unchanged if restores_ownership(journal, s) => {
                    Step::Restore {
                        resource_version: s.resource_version.clone(),
                    }
                }
                templates::Classification::Unchanged => Step::Drop(DropReason::Finished),
                _ => Step::Drop(DropReason::Replaced),
            }
        }
        Some(s) if s.deleting => Step::WaitGone,
        Some(s) if s.resource_version != journal.resource_version => Step::Recheck,
        Some(s) => match journal.step {
            JournalStep::Journaled => Step::MarkDeleting,
            JournalStep::Deleting => Step::Delete {
                uid: s.uid.clone(),
                resource_version: s.resource_version.clone(),
            },
        },
    }
}

/// The finalizer the apiserver puts on an object deleted with `propagationPolicy: Orphan`;
/// the garbage collector removes it once it has orphaned the object's dependents.
pub const ORPHAN_FINALIZER: &str = "orphan";

/// How long an orphan delete of ours waits for the garbage collector before that is said
/// (Event, `/readyz?verbose`, `status`). kube-controller-manager's garbage collector takes the
/// `orphan` finalizer off within a second when it keeps up; after an apiserver restart it first
/// re-syncs its graph of owners, and the set stays terminating for tens of seconds.
pub const ORPHAN_WAIT_SAID: Duration = Duration::from_secs(5);

/// How long the set we orphan-deleted has waited for the garbage collector at `now`, once that
/// is [`ORPHAN_WAIT_SAID`] or longer: the journal's own set, marked deleting by us, still
/// carrying the `orphan` finalizer (kube-controller-manager's garbage collector removes it
/// after taking the set's ownerReferences off its dependents: `orphanDependents`, then
/// `removeFinalizer`, in `pkg/controller/garbagecollector`). `None` for anything else, also
/// for a deletion time ahead of `now` (clock skew).
pub fn orphan_wait(set: &LiveSet, journal: &Journal, now: jiff::Timestamp) -> Option<Duration> {
    if set.uid != journal.uid || journal.step != JournalStep::Deleting || !set.orphaning {
        return None;
    }
    let waited = Duration::try_from(now.duration_since(set.deleting_since?)).ok()?;
    (waited >= ORPHAN_WAIT_SAID).then_some(waited)
}

/// What a convergence that waits on the garbage collector says, in the project's words for
/// every place that says it (the Event, `/readyz?verbose`, `status`).
pub fn orphan_wait_note(namespace: &str, name: &str, uid: &str, waited: Duration) -> String {
    format!(
        "waiting for the garbage collector to orphan the dependents of {namespace}/{name} ({uid}) for {}s: the StatefulSet keeps its orphan finalizer until kube-controller-manager's garbage collector has taken its ownerReferences off its pods and claims; it is re-created once it is gone, and its claims keep rolling out meanwhile",
        waited.as_secs()
    )
}

/// Whether the set we created should get the journaled ownership back: the journal names a
/// manager other than us for the main resource, and nobody but us has written the new set.
fn restores_ownership(journal: &Journal, live: &LiveSet) -> bool {
    let ours = |m: &str| m == names::CONTROLLER_NAME;
    let journaled_others = main_entries(&journal.managed_fields)
        .any(|e| !ours(e.get("manager").and_then(Value::as_str).unwrap_or("")));
    journaled_others && !live.managers.is_empty() && live.managers.iter().all(|m| ours(m))
}

/// Entries of the main resource (no `subresource`).
fn main_entries(entries: &[Value]) -> impl Iterator<Item = &Value> {
    entries.iter().filter(|e| {
        e.get("subresource")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    })
}

/// Managers of the main resource's managedFields of a set as the apiserver returned it.
pub fn main_managers(raw: &Value) -> Vec<String> {
    let entries = raw
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    main_entries(entries)
        .map(|e| {
            e.get("manager")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

/// The managedFields to journal for live set `raw`: all its entries, with the
/// desired-templates annotation (which the re-created set does not carry) taken out of each
/// and entries left owning nothing dropped.
pub fn journal_managed_fields(raw: &Value) -> Vec<Value> {
    let path = [
        "f:metadata".to_owned(),
        "f:annotations".to_owned(),
        format!("f:{}", names::DESIRED_VOLUME_CLAIM_TEMPLATES),
    ];
    raw.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let mut entry = entry.clone();
            if let Some(Value::Object(fields)) = entry.get_mut("fieldsV1") {
                remove_field(fields, &path);
                if fields.is_empty() {
                    return None;
                }
            }
            Some(entry)
        })
        .collect()
}

/// Removes `path` from a `fieldsV1` tree, and parents left empty (a parent without `"."`
/// was not a member itself; left as `{}` it would become one).
fn remove_field(node: &mut serde_json::Map<String, Value>, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        node.remove(first);
        return;
    }
    if let Some(Value::Object(child)) = node.get_mut(first) {
        remove_field(child, rest);
        if child.is_empty() {
            node.remove(first);
        }
    }
}

/// The merge patch that restores the journaled ownership on the created set `raw`: the
/// journaled entries of the main resource, the live ones of subresources, and the created
/// object's resourceVersion as precondition. `None` when there is nothing to restore.
pub fn restore_patch(journal: &Journal, raw: &Value) -> Option<Value> {
    let mut entries: Vec<Value> = main_entries(&journal.managed_fields).cloned().collect();
    if entries.is_empty() {
        return None;
    }
    let live = raw
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    entries.extend(
        live.iter()
            .filter(|e| {
                e.get("subresource")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
            })
            .cloned(),
    );
    Some(serde_json::json!({"metadata": {
        "resourceVersion": raw.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null),
        "managedFields": entries,
    }}))
}

/// After the set's resourceVersion moved under a journal: keep going when only what is
/// stripped from the journal changed (status written by the StatefulSet controller), else
/// give the journal up so the user's change is not overwritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recheck {
    Refresh,
    Abandon,
}

pub fn recheck(journal: &Journal, fresh: &Result<Value, String>) -> Recheck {
    // Our own claim status may be written by a reconcile that did not see the journal yet;
    // it is recomputed after the re-create anyway.
    let without_status = |v: &Value| {
        let mut v = v.clone();
        if let Some(Value::Object(a)) = v.pointer_mut("/metadata/annotations") {
            a.remove(names::VOLUME_CLAIM_STATUS);
        }
        v
    };
    match fresh {
        Ok(object) if without_status(object) == without_status(&journal.object) => Recheck::Refresh,
        _ => Recheck::Abandon,
    }
}

fn annotation<'a>(raw: &'a Value, key: &str) -> Option<&'a str> {
    raw.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// The object to create from the live set `raw` (as the apiserver returned it): the desired
/// templates in place of the live ones, the desired-templates annotation dropped, and what
/// the apiserver owns stripped (status, uid, resourceVersion, managedFields,
/// creationTimestamp, generation, deletion marks, the `orphan` finalizer). Every other label,
/// annotation and field (Helm's, Argo CD's, unknown ones) is kept.
pub fn desired_object(raw: &Value) -> Result<Value, String> {
    let text = annotation(raw, names::DESIRED_VOLUME_CLAIM_TEMPLATES)
        .ok_or_else(|| "the set has no desired templates".to_owned())?;
    let live = templates::templates_of(raw.get("spec").unwrap_or(&Value::Null))
        .map_err(|e| e.to_string())?;
    let errors = templates::check_desired_annotation(text, live);
    if let Some(e) = errors.first() {
        return Err(e.to_string());
    }
    let desired: Vec<Value> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut object = raw.clone();
    let Some(map) = object.as_object_mut() else {
        return Err("the set is not a JSON object".to_owned());
    };
    map.remove("status");
    if let Some(Value::Object(spec)) = map.get_mut("spec") {
        spec.insert("volumeClaimTemplates".into(), Value::Array(desired));
    }
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        for key in [
            "uid",
            "resourceVersion",
            "managedFields",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(key);
        }
        if let Some(Value::Object(a)) = meta.get_mut("annotations") {
            a.remove(names::DESIRED_VOLUME_CLAIM_TEMPLATES);
        }
        if let Some(Value::Array(f)) = meta.get_mut("finalizers") {
            f.retain(|x| x != ORPHAN_FINALIZER);
            if f.is_empty() {
                meta.remove("finalizers");
            }
        }
    }
    Ok(object)
}

/// The journal ConfigMap for live set `raw` and the object to create.
pub fn journal_configmap(
    controller_namespace: &str,
    raw: &Value,
    object: &Value,
) -> Result<ConfigMap, String> {
    let meta = |k: &str| {
        raw.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (namespace, name) = (meta("namespace"), meta("name"));
    let annotations = BTreeMap::from([
        (names::JOURNAL_SET_NAMESPACE.to_owned(), namespace.clone()),
        (names::JOURNAL_SET_NAME.to_owned(), name.clone()),
        (names::JOURNAL_SET_UID.to_owned(), meta("uid")),
        (
            names::JOURNAL_SET_RESOURCE_VERSION.to_owned(),
            meta("resourceVersion"),
        ),
        (
            names::JOURNAL_STEP.to_owned(),
            JournalStep::Journaled.as_str().to_owned(),
        ),
    ]);
    let text = serde_json::to_string(object).map_err(|e| e.to_string())?;
    let mut data = BTreeMap::from([(DATA_KEY.to_owned(), text)]);
    let managed_fields = journal_managed_fields(raw);
    if !managed_fields.is_empty() {
        data.insert(
            MANAGED_FIELDS_KEY.to_owned(),
            serde_json::to_string(&managed_fields).map_err(|e| e.to_string())?,
        );
    }
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(names::journal_name(&namespace, &name)),
            namespace: Some(controller_namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                names::JOURNAL_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    })
}

/// The set a journal names, from its annotations.
pub fn owner(journal: &ConfigMap) -> Option<(String, String)> {
    let a = journal.metadata.annotations.as_ref()?;
    let ns = a.get(names::JOURNAL_SET_NAMESPACE)?;
    let name = a.get(names::JOURNAL_SET_NAME)?;
    (!ns.is_empty() && !name.is_empty()).then(|| (ns.clone(), name.clone()))
}

/// Reads a journal back; an error says what is wrong with it.
pub fn read(journal: &ConfigMap) -> Result<Journal, String> {
    let a = journal
        .metadata
        .annotations
        .as_ref()
        .ok_or("the journal has no annotations")?;
    let get = |k: &str| {
        a.get(k)
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| format!("the journal lacks annotation {k}"))
    };
    let step = match get(names::JOURNAL_STEP)?.as_str() {
        "journaled" => JournalStep::Journaled,
        "deleting" => JournalStep::Deleting,
        other => return Err(format!("the journal has an unknown step {other:?}")),
    };
    let text = journal
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .ok_or_else(|| format!("the journal has no {DATA_KEY}"))?;
    let object: Value = serde_json::from_str(text)
        .map_err(|e| format!("the journaled object does not parse: {e}"))?;
    if !object.is_object() {
        return Err("the journaled object is not a JSON object".to_owned());
    }
    let managed_fields = match journal
        .data
        .as_ref()
        .and_then(|d| d.get(MANAGED_FIELDS_KEY))
    {
        None => Vec::new(),
        Some(text) => serde_json::from_str::<Vec<Value>>(text)
            .ok()
            .filter(|entries| entries.iter().all(Value::is_object))
            .ok_or_else(|| {
                format!("the journaled {MANAGED_FIELDS_KEY} is not a list of entries")
            })?,
    };
    Ok(Journal {
        namespace: get(names::JOURNAL_SET_NAMESPACE)?,
        name: get(names::JOURNAL_SET_NAME)?,
        uid: get(names::JOURNAL_SET_UID)?,
        resource_version: get(names::JOURNAL_SET_RESOURCE_VERSION)?,
        step,
        object,
        managed_fields,
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod ownership_tests {
    use super::*;
    use serde_json::json;

    fn desired_key() -> String {
        format!("f:{}", names::DESIRED_VOLUME_CLAIM_TEMPLATES)
    }

    #[test]
    fn the_journal_keeps_managed_fields_without_the_dropped_annotation() {
        let raw = json!({"metadata": {"name": "web", "namespace": "db", "uid": "u1", "resourceVersion": "41",
        "annotations": {names::DESIRED_VOLUME_CLAIM_TEMPLATES: "[]"},
        "managedFields": [
            {"manager": "helm", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {"f:meta.helm.sh/release-name": {}}},
                          "f:spec": {"f:volumeClaimTemplates": {}}}},
            {"manager": "kubectl-annotate", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {desired_key(): {}}}}},
            {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, desired_key(): {}}}}},
        ]}});
        let kept = journal_managed_fields(&raw);
        assert_eq!(
            kept,
            vec![
                raw["metadata"]["managedFields"][0].clone(),
                json!({"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                       "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}}}),
            ],
            "an entry that owned only the annotation goes; the map's own membership stays"
        );
        let cm =
            journal_configmap("ops", &raw, &json!({"metadata": {"name": "web"}})).expect("journal");
        let journal = read(&cm).expect("reads");
        assert_eq!(journal.managed_fields, kept);
        assert!(
            !cm.data.as_ref().expect("data")[DATA_KEY].contains("managedFields"),
            "the object to create carries none"
        );

        let mut bare = raw.clone();
        bare["metadata"]
            .as_object_mut()
            .expect("meta")
            .remove("managedFields");
        let cm = journal_configmap("ops", &bare, &json!({})).expect("journal");
        assert!(
            !cm.data
                .as_ref()
                .expect("data")
                .contains_key(MANAGED_FIELDS_KEY)
        );
        assert_eq!(
            read(&cm).expect("reads").managed_fields,
            Vec::<Value>::new()
        );

        let mut broken = cm;
        broken
            .data
            .as_mut()
            .expect("data")
            .insert(MANAGED_FIELDS_KEY.into(), "{}".into());
        assert_eq!(
            read(&broken).expect_err("not a list"),
            "the journaled managed-fields.json is not a list of entries"
        );
    }

    #[test]
    fn the_restore_patch_puts_journaled_entries_back_and_keeps_live_subresource_ones() {
        let helm = json!({"manager": "helm", "operation": "Apply", "fieldsType": "FieldsV1",
                          "fieldsV1": {"f:spec": {"f:volumeClaimTemplates": {}}}});
        let old_status = json!({"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                                "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}});
        let new_status = json!({"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                                "time": "2026-02-02T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}});
        let journal = Journal {
            namespace: "db".into(),
            name: "web".into(),
            uid: "u1".into(),
            resource_version: "41".into(),
            step: JournalStep::Deleting,
            object: json!({}),
            managed_fields: vec![helm.clone(), old_status],
        };
        let created = json!({"metadata": {"resourceVersion": "77", "managedFields": [
            {"manager": names::CONTROLLER_NAME, "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}},
            new_status.clone()]}});
        assert_eq!(
            restore_patch(&journal, &created),
            Some(
                json!({"metadata": {"resourceVersion": "77", "managedFields": [helm, new_status]}})
            )
        );
        assert_eq!(main_managers(&created), [names::CONTROLLER_NAME]);
        let empty = Journal {
            managed_fields: Vec::new(),
            ..journal
        };
        assert_eq!(
            restore_patch(&empty, &created),
            None,
            "never an empty list: it would reset them"
        );
    }
}
