//! The convergence planner as a table: what exists now in, the step's writes and Events out,
//! at every point a crash can leave it and for every refusal.

use serde_json::{Value, json};

use super::*;
use crate::admission::statefulset::templates;
use crate::controller::action::Report;

const CONTROLLER_NS: &str = "stateful-admission";

/// A live set as the apiserver returns it: uid u1 at resourceVersion 41, helm owning the
/// templates, 2Gi recorded over the live 1Gi.
fn live_set() -> Value {
    let desired = templates::desired_annotation(&[json!({"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}})])
    .expect("annotation");
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": "web", "namespace": "db", "uid": "u1", "resourceVersion": "41",
            "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "helm", "operation": "Apply", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:volumeClaimTemplates": {}}}}],
            "annotations": {names::DESIRED_VOLUME_CLAIM_TEMPLATES: desired},
        },
        "spec": {"replicas": 3, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]},
        "status": {"replicas": 3}
    })
}

/// The journal the controller writes for [`live_set`], at `step`.
fn journal_of(live: &Value, step: JournalStep) -> ConfigMap {
    let object = journal::desired_object(live).expect("desired");
    let mut cm = journal::journal_configmap(CONTROLLER_NS, live, &object).expect("journal");
    cm.metadata.uid = Some("j1".into());
    cm.metadata.resource_version = Some("7".into());
    if let Some(a) = cm.metadata.annotations.as_mut() {
        a.insert(names::JOURNAL_STEP.into(), step.as_str().into());
    }
    cm
}

/// The set as our create made it: uid u2, only our managedFields, the new templates.
fn created_set(managers: &[&str]) -> Value {
    let object = journal::desired_object(&live_set()).expect("desired");
    let mut created = object;
    created["metadata"]["uid"] = json!("u2");
    created["metadata"]["resourceVersion"] = json!("50");
    created["metadata"]["managedFields"] = Value::Array(
        managers
            .iter()
            .map(|m| {
                json!({"manager": m, "operation": "Update", "fieldsType": "FieldsV1",
                            "fieldsV1": {"f:spec": {"f:replicas": {}}}})
            })
            .collect(),
    );
    created
}

fn state<'a>(live: Option<&'a Value>, journal: Option<&'a ConfigMap>) -> State<'a> {
    State {
        namespace: "db",
        name: "web",
        controller_namespace: CONTROLLER_NS,
        live,
        journal,
        enabled: true,
        namespace_is: Presence::Active,
    }
}

/// A plan as a line per action: `verb kind/name [after] (preconditions) -> events`, or
/// `event reason`, then the steps and what follows.
fn describe(plan: &Plan) -> Vec<String> {
    let Plan::Act {
        actions,
        steps,
        then,
    } = plan
    else {
        return vec![format!("{plan:?}")];
    };
    let reasons = |reports: &[Report]| {
        reports
            .iter()
            .map(|r| r.reason.clone())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut lines: Vec<String> = actions
        .iter()
        .map(|a| match a {
            Action::Report(r) => format!("event {} {:?}", r.reason, r.type_),
            Action::Write(w) => {
                let pre = match &w.request {
                    Request::Delete {
                        uid,
                        resource_version,
                        orphan,
                    } => format!(
                        " uid={} rv={} orphan={orphan}",
                        uid.as_deref().unwrap_or("-"),
                        resource_version.as_deref().unwrap_or("-")
                    ),
                    Request::Patch(body) => format!(
                        " rv={}",
                        body.pointer("/metadata/resourceVersion")
                            .and_then(Value::as_str)
                            .unwrap_or("-")
                    ),
                    Request::Create(_) | Request::PatchStatus(_) | Request::Evict { .. } => {
                        String::new()
                    }
                };
                format!(
                    "{} {}/{} after={:?}{pre} expected={:?} done->[{}]",
                    w.verb.as_str(),
                    match w.target.kind {
                        Kind::ConfigMap => "journal",
                        Kind::StatefulSet => "set",
                        Kind::Claim => "claim",
                        Kind::Pod => "pod",
                    },
                    w.target.name,
                    w.after,
                    w.expected,
                    reasons(&w.on_done)
                )
            }
        })
        .collect();
    lines.push(format!("steps {steps:?} then {then:?}"));
    lines
}

/// (case, live set, journal, the plan described)
type Row<'a> = (
    &'a str,
    Option<&'a Value>,
    Option<&'a ConfigMap>,
    Vec<&'a str>,
);

#[test]
fn every_state_plans_its_step_completely() {
    let live = live_set();
    let mut moved = live_set();
    moved["metadata"]["resourceVersion"] = json!("42");
    let mut status_only = moved.clone();
    status_only["status"] = json!({"replicas": 2});
    let mut edited = moved.clone();
    edited["metadata"]["labels"] = json!({"team": "blue"});
    let mut deleting = live_set();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
    let journaled = journal_of(&live, JournalStep::Journaled);
    let marked = journal_of(&live, JournalStep::Deleting);
    let mut corrupt = marked.clone();
    if let Some(d) = corrupt.data.as_mut() {
        d.insert(journal::DATA_KEY.into(), "{not json".into());
    }
    let ours_only = created_set(&[names::CONTROLLER_NAME]);
    let restored = created_set(&["helm", names::CONTROLLER_NAME]);
    let mut replaced = live_set();
    replaced["metadata"]["uid"] = json!("u3");
    replaced["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] =
        json!("9Gi");
    let mut undesired = live_set();
    undesired["metadata"]["annotations"][names::DESIRED_VOLUME_CLAIM_TEMPLATES] =
        json!("[{\"metadata\": {\"name\": \"other\"}}]");

    let rows: Vec<Row<'_>> = vec![
        (
            "recorded templates: journal first",
            Some(&live),
            None,
            vec![
                "StartConvergence journal/sa-journal.db.web after=Anything expected=[409] done->[ConvergeStarted]",
                "steps [(0, \"journaled\")] then ReadAgain",
            ],
        ),
        (
            "recorded templates that do not apply: said once, nothing written",
            Some(&undesired),
            None,
            vec!["event ConvergeSkipped Warning", "steps [] then Stop"],
        ),
        (
            "crash after the journal: mark it, then delete at once, and drop it if the set was gone",
            Some(&live),
            Some(&journaled),
            vec![
                "AdvanceConvergence journal/sa-journal.db.web after=Anything rv=7 expected=[404, 409] done->[]",
                "DeleteStatefulSet set/web after=Done uid=u1 rv=41 orphan=true expected=[404, 409] done->[ConvergeDeleted]",
                "EndConvergence journal/sa-journal.db.web after=Gone uid=j1 rv=- orphan=false expected=[404, 409] done->[ConvergeAbandoned]",
                "steps [(0, \"marked\"), (1, \"deleted\"), (2, \"deleted-by-user\")] then ReadAgain",
            ],
        ),
        (
            "crash after the mark: the delete again, with the journaled uid and version",
            Some(&live),
            Some(&marked),
            vec![
                "DeleteStatefulSet set/web after=Anything uid=u1 rv=41 orphan=true expected=[404, 409] done->[ConvergeDeleted]",
                "EndConvergence journal/sa-journal.db.web after=Gone uid=j1 rv=- orphan=false expected=[404, 409] done->[ConvergeAbandoned]",
                "steps [(0, \"deleted\"), (1, \"deleted-by-user\")] then ReadAgain",
            ],
        ),
        (
            "deleted, the garbage collector not done yet: wait",
            Some(&deleting),
            Some(&marked),
            vec!["Wait(Some(Poll))"],
        ),
        (
            "crash after the delete: create from the journal; its namespace gone, drop the journal",
            None,
            Some(&marked),
            vec![
                "CreateStatefulSet set/web after=Anything expected=[404, 409] done->[ConvergeRecreated]",
                "EndConvergence journal/sa-journal.db.web after=Gone uid=j1 rv=- orphan=false expected=[404, 409] done->[]",
                "steps [(0, \"created\"), (1, \"namespace-gone\")] then ReadAgain",
            ],
        ),
        (
            "crash after the create: give the managers their fields back",
            Some(&ours_only),
            Some(&marked),
            vec![
                "RestoreOwnership set/web after=Anything rv=50 expected=[404, 409] done->[]",
                "steps [(0, \"ownership-restored\")] then ReadAgain",
            ],
        ),
        (
            "crash after the restore: drop the journal, finished",
            Some(&restored),
            Some(&marked),
            vec![
                "EndConvergence journal/sa-journal.db.web after=Anything uid=j1 rv=- orphan=false expected=[404, 409] done->[ConvergeFinished]",
                "steps [(0, \"finished\")] then Stop",
            ],
        ),
        (
            "crash after the journal was dropped: nothing",
            Some(&restored),
            None,
            vec!["Wait(None)"],
        ),
        (
            "refused: the set's uid changed (someone else's set): drop, leave it",
            Some(&replaced),
            Some(&marked),
            vec![
                "EndConvergence journal/sa-journal.db.web after=Anything uid=j1 rv=- orphan=false expected=[404, 409] done->[ConvergeAbandoned]",
                "steps [(0, \"replaced\")] then Stop",
            ],
        ),
        (
            "refused: the user deleted the set before our delete",
            None,
            Some(&journaled),
            vec![
                "EndConvergence journal/sa-journal.db.web after=Anything uid=j1 rv=- orphan=false expected=[404, 409] done->[ConvergeAbandoned]",
                "steps [(0, \"deleted-by-user\")] then Stop",
            ],
        ),
        (
            "the set's status moved meanwhile: refresh the journal",
            Some(&status_only),
            Some(&journaled),
            vec![
                "AdvanceConvergence journal/sa-journal.db.web after=Anything rv=7 expected=[404, 409] done->[]",
                "steps [(0, \"refreshed\")] then ReadAgain",
            ],
        ),
        (
            "refused: the set was edited meanwhile: drop the journal, keep the edit",
            Some(&edited),
            Some(&marked),
            vec![
                "EndConvergence journal/sa-journal.db.web after=Anything uid=j1 rv=- orphan=false expected=[404, 409] done->[ConvergeAbandoned]",
                "steps [(0, \"abandoned\")] then ReadAgain",
            ],
        ),
        (
            "refused: a corrupt journal is kept for a human, said once",
            Some(&live),
            Some(&corrupt),
            vec![
                "event ConvergeJournalUnreadable Warning",
                "steps [] then Stop",
            ],
        ),
        ("no set, no journal", None, None, vec!["Wait(None)"]),
    ];
    for (case, live, journal, want) in rows {
        assert_eq!(describe(&plan(&state(live, journal))), want, "{case}");
    }
}

#[test]
fn the_journal_holds_the_object_to_create_and_the_ownership_to_restore() {
    let live = live_set();
    let Plan::Act { actions, .. } = plan(&state(Some(&live), None)) else {
        panic!("a plan")
    };
    let Some(Action::Write(write)) = actions.first() else {
        panic!("{actions:?}")
    };
    let Request::Create(cm) = &write.request else {
        panic!("{write:?}")
    };
    assert_eq!(cm["metadata"]["namespace"], CONTROLLER_NS);
    assert_eq!(
        cm["metadata"]["annotations"][names::JOURNAL_SET_UID],
        "u1",
        "the journal names the set it is about"
    );
    let object: Value =
        serde_json::from_str(cm["data"][journal::DATA_KEY].as_str().expect("the object"))
            .expect("json");
    assert_eq!(
        object["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "2Gi"
    );
    assert!(object["metadata"]["uid"].is_null(), "a new object");
    assert!(
        cm["data"][journal::MANAGED_FIELDS_KEY]
            .as_str()
            .is_some_and(|m| m.contains("helm")),
        "helm's ownership journaled"
    );
    // The Event about the created set carries no uid: the executor names the one it got.
    let marked = journal_of(&live, JournalStep::Deleting);
    let Plan::Act { actions, .. } = plan(&state(None, Some(&marked))) else {
        panic!("a plan")
    };
    let Some(Action::Write(create)) = actions.first() else {
        panic!()
    };
    assert_eq!(create.on_done[0].regarding.uid, None);
    assert_eq!(create.on_done[0].regarding.name.as_deref(), Some("web"));
}

#[test]
fn in_a_namespace_being_deleted_nothing_starts_and_a_journal_goes_with_its_set() {
    let live = live_set();
    let mut going = live_set();
    going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
    let marked = journal_of(&live, JournalStep::Deleting);
    let in_ns = |presence, live, journal| State {
        namespace_is: presence,
        ..state(live, journal)
    };
    {
        let presence = Presence::Terminating;
        assert_eq!(
            plan(&in_ns(presence, Some(&live), None)),
            Plan::Wait(None),
            "{presence:?}"
        );
        assert_eq!(
            plan(&in_ns(presence, Some(&live), Some(&marked))),
            Plan::Wait(Some(Poll)),
            "the namespace controller deletes the set first"
        );
        for set in [None, Some(&going)] {
            assert_eq!(
                describe(&plan(&in_ns(presence, set, Some(&marked)))),
                [
                    "EndConvergence journal/sa-journal.db.web after=Anything uid=j1 rv=- orphan=false expected=[404, 409] done->[]",
                    "steps [(0, \"namespace-gone\")] then Stop",
                ],
                "{presence:?}, set {:?}",
                set.is_some()
            );
        }
    }
}

#[test]
fn with_convergence_off_a_started_one_is_finished_and_none_started() {
    let live = live_set();
    let off = |journal| State {
        enabled: false,
        ..state(Some(&live), journal)
    };
    assert_eq!(plan(&off(None)), Plan::Wait(None));
    let marked = journal_of(&live, JournalStep::Deleting);
    assert!(
        describe(&plan(&off(Some(&marked))))[0].starts_with("DeleteStatefulSet"),
        "finished, not left half done"
    );
}

#[test]
fn a_journal_whose_object_is_not_a_set_is_invalid() {
    let live = live_set();
    let mut marked = journal_of(&live, JournalStep::Deleting);
    if let Some(d) = marked.data.as_mut() {
        d.insert(journal::DATA_KEY.into(), "{\"metadata\": 5}".into());
    }
    assert!(
        matches!(plan(&state(None, Some(&marked))), Plan::Invalid(why) if why.contains("not a StatefulSet"))
    );
}

#[test]
fn an_orphan_delete_waiting_on_the_garbage_collector_is_said_once_per_wait() {
    let live = live_set();
    let journal = journal_of(&live, JournalStep::Deleting);
    let mut deleting = live.clone();
    deleting["metadata"]["resourceVersion"] = json!("42");
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:00Z");
    deleting["metadata"]["finalizers"] = json!(["orphan"]);
    let at = |t: &str| t.parse::<jiff::Timestamp>().expect("time");

    // Still a plain wait: the step is the state machine's, the saying is beside it.
    assert_eq!(
        plan(&state(Some(&deleting), Some(&journal))),
        Plan::Wait(Some(Poll))
    );
    let early = state(Some(&deleting), Some(&journal));
    assert_eq!(orphan_wait(&early, at("2026-01-01T00:01:04Z")), None);

    let wait = orphan_wait(&early, at("2026-01-01T00:01:21Z")).expect("a long wait");
    assert_eq!(wait.uid, "u1");
    assert_eq!(wait.waited.as_secs(), 21);
    assert!(
        wait.note.starts_with(
            "waiting for the garbage collector to orphan the dependents of db/web (u1) for 21s: "
        ),
        "{}",
        wait.note
    );
    let report = &wait.report;
    assert_eq!(
        (
            report.reason.as_str(),
            report.type_,
            report.regarding.kind.as_deref(),
            report.regarding.uid.as_deref(),
            report.once.as_deref(),
        ),
        (
            "ConvergeWaitingForGarbageCollector",
            EventType::Normal,
            Some("StatefulSet"),
            Some("u1"),
            Some("orphan-wait/u1"),
        ),
        "one Event per wait: the key is the deleted set's uid, not the time"
    );
    assert_eq!(report.note, wait.note);

    // The finalizer gone (another finalizer holds the set), no journal, or the set gone: no
    // wait on the garbage collector.
    let mut other_finalizer = deleting.clone();
    other_finalizer["metadata"]["finalizers"] = json!(["example.com/backup"]);
    let late = at("2026-01-01T00:02:00Z");
    assert_eq!(
        orphan_wait(&state(Some(&other_finalizer), Some(&journal)), late),
        None
    );
    assert_eq!(orphan_wait(&state(Some(&deleting), None), late), None);
    assert_eq!(orphan_wait(&state(None, Some(&journal)), late), None);
}
