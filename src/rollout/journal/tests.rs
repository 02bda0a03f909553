use super::*;
use serde_json::json;

fn raw_set() -> Value {
    let desired = templates::desired_annotation(&[json!({"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}})])
    .expect("annotation");
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": "web", "namespace": "db", "uid": "u1", "resourceVersion": "41", "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{"manager": "helm"}],
            "labels": {"app.kubernetes.io/managed-by": "Helm", "argocd.argoproj.io/instance": "db"},
            "annotations": {"meta.helm.sh/release-name": "db", names::DESIRED_VOLUME_CLAIM_TEMPLATES: desired},
            "finalizers": ["orphan"]
        },
        "spec": {"replicas": 3, "futureField": {"x": 1},
                 "volumeClaimTemplates": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeMode": "Filesystem"},
                    "status": {"phase": "Pending"}}]},
        "status": {"replicas": 3}
    })
}

#[test]
fn the_desired_object_keeps_labels_and_unknown_fields_and_drops_server_fields() {
    let object = desired_object(&raw_set()).expect("desired");
    assert_eq!(
        object,
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {
                "name": "web", "namespace": "db",
                "labels": {"app.kubernetes.io/managed-by": "Helm", "argocd.argoproj.io/instance": "db"},
                "annotations": {"meta.helm.sh/release-name": "db"}
            },
            "spec": {"replicas": 3, "futureField": {"x": 1},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}}]}
        })
    );
    let mut bad = raw_set();
    bad["metadata"]["annotations"][names::DESIRED_VOLUME_CLAIM_TEMPLATES] =
        json!("[{\"metadata\":{\"name\":\"logs\"}}]");
    assert!(
        desired_object(&bad)
            .expect_err("names differ")
            .contains("must name the templates")
    );
    let mut none = raw_set();
    none["metadata"]["annotations"] = json!({});
    assert!(desired_object(&none).is_err());
}

#[test]
fn journals_round_trip_and_name_their_set() {
    let raw = raw_set();
    let object = desired_object(&raw).expect("desired");
    let cm = journal_configmap("ops", &raw, &object).expect("journal");
    assert_eq!(cm.metadata.name.as_deref(), Some("sa-journal.db.web"));
    assert_eq!(cm.metadata.namespace.as_deref(), Some("ops"));
    assert!(cm.metadata.owner_references.is_none());
    assert_eq!(owner(&cm), Some(("db".into(), "web".into())));
    let j = read(&cm).expect("reads");
    assert_eq!(
        (j.uid.as_str(), j.resource_version.as_str(), j.step),
        ("u1", "41", JournalStep::Journaled)
    );
    assert_eq!(j.object, object);
    let mut broken = cm.clone();
    broken.data = Some(BTreeMap::from([(DATA_KEY.to_owned(), "{".to_owned())]));
    assert!(
        read(&broken)
            .expect_err("broken")
            .starts_with("the journaled object does not parse")
    );
    let mut foreign = cm;
    foreign.metadata.annotations = None;
    assert!(owner(&foreign).is_none());
}

fn live(uid: &str, rv: &str, deleting: bool, wants: bool, storage: &str) -> LiveSet {
    LiveSet {
        uid: uid.into(),
        resource_version: rv.into(),
        deleting,
        wants,
        templates: vec![
            json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}}),
        ],
        managers: vec!["helm".into()],
        deleting_since: None,
        orphaning: false,
    }
}

fn managed_by(mut set: LiveSet, managers: &[&str]) -> LiveSet {
    set.managers = managers.iter().map(|m| (*m).to_owned()).collect();
    set
}

/// (case, live set, journal, converge enabled, next step)
type Row<'a> = (
    &'a str,
    Option<LiveSet>,
    Option<&'a Result<Journal, String>>,
    bool,
    Step,
);

#[test]
fn state_machine_table() {
    let object = desired_object(&raw_set()).expect("desired");
    let journal = |step, managed_fields: Vec<Value>| -> Result<Journal, String> {
        Ok(Journal {
            namespace: "db".into(),
            name: "web".into(),
            uid: "u1".into(),
            resource_version: "41".into(),
            step,
            object: object.clone(),
            managed_fields,
        })
    };
    let helm = json!({"manager": "helm", "operation": "Apply", "fieldsType": "FieldsV1",
                      "fieldsV1": {"f:spec": {"f:volumeClaimTemplates": {}}}});
    let ours = json!({"manager": names::CONTROLLER_NAME, "operation": "Update", "fieldsType": "FieldsV1",
                      "fieldsV1": {"f:spec": {"f:volumeClaimTemplates": {}}}});
    let status = json!({"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                        "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}});
    let (j, d) = (
        journal(JournalStep::Journaled, vec![helm.clone()]),
        journal(JournalStep::Deleting, vec![helm.clone(), status]),
    );
    let old_journal = journal(JournalStep::Deleting, Vec::new());
    let only_ours = journal(JournalStep::Deleting, vec![ours]);
    let created =
        |managers: &[&str]| Some(managed_by(live("u2", "50", false, false, "2Gi"), managers));
    let bad: Result<Journal, String> = Err("broken".into());
    let cases: Vec<Row<'_>> = vec![
        (
            "nothing recorded",
            Some(live("u1", "41", false, false, "1Gi")),
            None,
            true,
            Step::Nothing,
        ),
        (
            "recorded: start",
            Some(live("u1", "41", false, true, "1Gi")),
            None,
            true,
            Step::Start,
        ),
        (
            "converge off",
            Some(live("u1", "41", false, true, "1Gi")),
            None,
            false,
            Step::Nothing,
        ),
        (
            "someone else deleting",
            Some(live("u1", "41", true, true, "1Gi")),
            None,
            true,
            Step::Nothing,
        ),
        ("no set, no journal", None, None, true, Step::Nothing),
        (
            "journaled: mark",
            Some(live("u1", "41", false, true, "1Gi")),
            Some(&j),
            true,
            Step::MarkDeleting,
        ),
        (
            "marked: delete",
            Some(live("u1", "41", false, true, "1Gi")),
            Some(&d),
            true,
            Step::Delete {
                uid: "u1".into(),
                resource_version: "41".into(),
            },
        ),
        (
            "marked, converge now off: still finish",
            Some(live("u1", "41", false, true, "1Gi")),
            Some(&d),
            false,
            Step::Delete {
                uid: "u1".into(),
                resource_version: "41".into(),
            },
        ),
        (
            "moved before mark",
            Some(live("u1", "42", false, true, "1Gi")),
            Some(&j),
            true,
            Step::Recheck,
        ),
        (
            "moved before delete",
            Some(live("u1", "42", false, true, "1Gi")),
            Some(&d),
            true,
            Step::Recheck,
        ),
        (
            "deleting",
            Some(live("u1", "42", true, true, "1Gi")),
            Some(&d),
            true,
            Step::WaitGone,
        ),
        ("gone after our delete", None, Some(&d), true, Step::Create),
        (
            "gone before our delete",
            None,
            Some(&j),
            true,
            Step::Drop(DropReason::DeletedByUser),
        ),
        (
            "created by us: restore ownership",
            created(&[names::CONTROLLER_NAME]),
            Some(&d),
            true,
            Step::Restore {
                resource_version: "50".into(),
            },
        ),
        (
            "ownership restored",
            created(&["helm", names::CONTROLLER_NAME]),
            Some(&d),
            true,
            Step::Drop(DropReason::Finished),
        ),
        (
            "someone else wrote the new set first: theirs stands",
            created(&[names::CONTROLLER_NAME, "kubectl-edit"]),
            Some(&d),
            true,
            Step::Drop(DropReason::Finished),
        ),
        (
            "journal without managedFields: nothing to restore",
            created(&[names::CONTROLLER_NAME]),
            Some(&old_journal),
            true,
            Step::Drop(DropReason::Finished),
        ),
        (
            "journaled ownership all ours: nothing to restore",
            created(&[names::CONTROLLER_NAME]),
            Some(&only_ours),
            true,
            Step::Drop(DropReason::Finished),
        ),
        (
            "no managedFields on the new set: not ours to restore",
            created(&[]),
            Some(&d),
            true,
            Step::Drop(DropReason::Finished),
        ),
        (
            "replaced by a user",
            Some(live("u3", "50", false, false, "9Gi")),
            Some(&d),
            true,
            Step::Drop(DropReason::Replaced),
        ),
        (
            "unreadable",
            None,
            Some(&bad),
            true,
            Step::Stuck("broken".into()),
        ),
    ];
    for (name, set, journal, converge, want) in cases {
        assert_eq!(next(set.as_ref(), journal, converge), want, "{name}");
    }
}

#[test]
fn an_orphan_delete_of_ours_that_waits_on_the_garbage_collector_is_said_after_five_seconds() {
    let object = desired_object(&raw_set()).expect("desired");
    let journal = |uid: &str, step| Journal {
        namespace: "db".into(),
        name: "web".into(),
        uid: uid.into(),
        resource_version: "41".into(),
        step,
        object: object.clone(),
        managed_fields: Vec::new(),
    };
    let at = |t: &str| t.parse::<jiff::Timestamp>().expect("time");
    let deleted = at("2026-01-01T00:00:00Z");
    let set = |orphaning: bool, since: Option<jiff::Timestamp>| LiveSet {
        deleting_since: since,
        orphaning,
        ..live("u1", "42", since.is_some(), true, "1Gi")
    };
    let ours = journal("u1", JournalStep::Deleting);
    let now = |seconds: i64| deleted + jiff::SignedDuration::from_secs(seconds);
    let cases: Vec<(&str, LiveSet, Journal, jiff::Timestamp, Option<u64>)> = vec![
        (
            "just deleted",
            set(true, Some(deleted)),
            ours.clone(),
            now(4),
            None,
        ),
        (
            "five seconds",
            set(true, Some(deleted)),
            ours.clone(),
            now(5),
            Some(5),
        ),
        (
            "a slow collector",
            set(true, Some(deleted)),
            ours.clone(),
            now(21),
            Some(21),
        ),
        (
            "finalizer gone (another finalizer holds it)",
            set(false, Some(deleted)),
            ours.clone(),
            now(21),
            None,
        ),
        (
            "not being deleted",
            set(true, None),
            ours.clone(),
            now(21),
            None,
        ),
        (
            "a clock behind the apiserver's",
            set(true, Some(deleted)),
            ours.clone(),
            now(-3),
            None,
        ),
        (
            "not our delete: the journal is not marked",
            set(true, Some(deleted)),
            journal("u1", JournalStep::Journaled),
            now(21),
            None,
        ),
        (
            "another set's journal",
            set(true, Some(deleted)),
            journal("u0", JournalStep::Deleting),
            now(21),
            None,
        ),
    ];
    for (case, set, journal, now, want) in cases {
        assert_eq!(
            orphan_wait(&set, &journal, now).map(|d| d.as_secs()),
            want,
            "{case}"
        );
    }
    assert_eq!(
        orphan_wait_note("db", "web", "u1", Duration::from_secs(21)),
        "waiting for the garbage collector to orphan the dependents of db/web (u1) for 21s: the StatefulSet keeps its orphan finalizer until kube-controller-manager's garbage collector has taken its ownerReferences off its pods and claims; it is re-created once it is gone, and its claims keep rolling out meanwhile"
    );
}

#[test]
fn a_status_only_change_refreshes_and_any_other_abandons() {
    let raw = raw_set();
    let object = desired_object(&raw).expect("desired");
    let j = Journal {
        namespace: "db".into(),
        name: "web".into(),
        uid: "u1".into(),
        resource_version: "41".into(),
        step: JournalStep::Journaled,
        object,
        managed_fields: Vec::new(),
    };
    let mut status_only = raw.clone();
    status_only["metadata"]["resourceVersion"] = json!("42");
    status_only["status"] = json!({"replicas": 2});
    assert_eq!(recheck(&j, &desired_object(&status_only)), Recheck::Refresh);
    let mut edited = raw.clone();
    edited["metadata"]["labels"]["team"] = json!("x");
    assert_eq!(recheck(&j, &desired_object(&edited)), Recheck::Abandon);
    let mut dropped = raw;
    dropped["metadata"]["annotations"] = json!({});
    assert_eq!(recheck(&j, &desired_object(&dropped)), Recheck::Abandon);
}
