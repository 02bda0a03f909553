use serde_json::{Value, json};

use super::*;
use crate::status::fixtures::*;
use crate::status::model::{self, Inputs};

struct Case {
    name: &'static str,
    objects: Vec<Value>,
    want: Outcome,
    reason: &'static str,
    /// A part of the message.
    says: &'static str,
}

fn case(
    name: &'static str,
    objects: Vec<Value>,
    want: Outcome,
    reason: &'static str,
    says: &'static str,
) -> Case {
    Case {
        name,
        objects,
        want,
        reason,
        says,
    }
}

fn objects(set: Value, claims: Vec<Value>) -> Vec<Value> {
    let mut all = vec![set, class("fast", true)];
    all.extend(claims);
    all
}

fn progressing_false(set: Value, rollout: &str) -> Value {
    let set = with(
        set,
        "/status/conditions",
        json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                "message": "no progress for 600s: updating volume claims: 3 still updating",
                "lastTransitionTime": time(550)}]),
    );
    let record = json!({"rollout": rollout, "complete": false, "progressAt": time(0),
        "best": {"observedGeneration": 1, "updated": 3, "ready": 3, "available": 3,
                 "outdated": 0, "away": 0, "claimsCompatible": 0, "claimsUpdating": 3},
        "progressing": {"status": "False", "since": time(550)}});
    with(
        set,
        &format!(
            "/metadata/annotations/{}",
            names_key(crate::names::PROGRESS)
        ),
        json!(record.to_string()),
    )
}

/// A pointer segment for an annotation key.
fn names_key(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[test]
fn verdicts_follow_what_the_controller_will_do() {
    let in_place = Some("InPlace");
    let recorded = set("web", "1Gi", Some("2Gi"), in_place);
    let converged = set("web", "2Gi", None, in_place);
    let resize_error = with(
        claim("web", 2, "2Gi", "1Gi"),
        "/status/conditions",
        json!([{"type": "ControllerResizeError", "status": "True",
                "message": "resize volume \"pv-web-2\" by resizer \"disk.example.com\" failed: quota exceeded"}]),
    );
    let infeasible = with(
        claim("web", 2, "2Gi", "1Gi"),
        "/status/allocatedResourceStatuses",
        json!({"storage": "NodeResizeInfeasible"}),
    );
    let resizing = with(
        claim("web", 2, "2Gi", "1Gi"),
        "/status/conditions",
        json!([{"type": "Resizing", "status": "True"}]),
    );
    let unbound = without(
        without(claim("web", 2, "2Gi", "2Gi"), "/status/capacity"),
        "/status/phase",
    );
    let renamed = with(
        recorded.clone(),
        &format!(
            "/metadata/annotations/{}",
            names_key(crate::names::DESIRED_VOLUME_CLAIM_TEMPLATES)
        ),
        json!(json!([with(template("2Gi"), "/metadata/name", json!("logs"))]).to_string()),
    );
    let partitioned = with(
        converged.clone(),
        "/spec/updateStrategy/rollingUpdate/partition",
        json!(2),
    );
    let mut bad_journal = journal(&recorded, "journaled");
    bad_journal["data"]["statefulset.json"] = json!("{not json");
    let cases = vec![
        case(
            "nothing recorded, claims at the template's size",
            objects(converged.clone(), claims("web", "2Gi", "2Gi")),
            Outcome::Done,
            "RolloutComplete",
            "the live object and 3 of 3 claims carry the recorded templates",
        ),
        case(
            "right after the apply: recorded, the controller has not acted",
            objects(recorded.clone(), claims("web", "2Gi", "2Gi")),
            Outcome::Progressing,
            "ChangeRecorded",
            "change recorded (data: 1Gi -> 2Gi); waiting for the controller",
        ),
        case(
            "journaled",
            {
                let mut o = objects(recorded.clone(), claims("web", "2Gi", "2Gi"));
                o.push(journal(&recorded, "journaled"));
                o
            },
            Outcome::Progressing,
            "Converging",
            "convergence: journaled (journal stateful-admission/sa-journal.db.web, step journaled)",
        ),
        case(
            "deleting",
            {
                let mut o = objects(
                    with(
                        recorded.clone(),
                        "/metadata/deletionTimestamp",
                        json!(time(590)),
                    ),
                    claims("web", "2Gi", "2Gi"),
                );
                o.push(journal(&recorded, "deleting"));
                o
            },
            Outcome::Progressing,
            "Converging",
            "convergence: deleting",
        ),
        case(
            "deleting, the garbage collector slow to orphan the dependents",
            {
                let mut o = objects(
                    with(
                        with(
                            recorded.clone(),
                            "/metadata/deletionTimestamp",
                            json!(time(579)),
                        ),
                        "/metadata/finalizers",
                        json!(["orphan"]),
                    ),
                    claims("web", "2Gi", "2Gi"),
                );
                o.push(journal(&recorded, "deleting"));
                o
            },
            Outcome::Progressing,
            "Converging",
            "convergence: deleting (journal stateful-admission/sa-journal.db.web, step deleting): waiting for the garbage collector to orphan the dependents of db/web (uid-web) for 21s",
        ),
        case(
            "gone, the journal re-creates it",
            vec![journal(&recorded, "deleting")],
            Outcome::Progressing,
            "Converging",
            "convergence: re-creating from journal stateful-admission/sa-journal.db.web",
        ),
        case(
            "created again, the journal not dropped yet",
            {
                let mut o = objects(
                    with(converged.clone(), "/metadata/uid", json!("uid-web-2")),
                    claims("web", "2Gi", "2Gi"),
                );
                o.push(journal(&recorded, "deleting"));
                o
            },
            Outcome::Progressing,
            "Converging",
            "convergence: finishing",
        ),
        case(
            "converged, claims still to patch",
            objects(converged.clone(), claims("web", "1Gi", "1Gi")),
            Outcome::Progressing,
            "UpdatingClaims",
            "0 of 3 claims compatible; data-web-0 to be patched (storage 1Gi -> 2Gi)",
        ),
        case(
            "converged, one claim resizing",
            objects(
                converged.clone(),
                vec![
                    claim("web", 0, "2Gi", "2Gi"),
                    claim("web", 1, "2Gi", "2Gi"),
                    resizing,
                ],
            ),
            Outcome::Progressing,
            "UpdatingClaims",
            "2 of 3 claims compatible; data-web-2 updating (Resizing)",
        ),
        case(
            "a resize error",
            objects(
                converged.clone(),
                vec![
                    claim("web", 0, "2Gi", "2Gi"),
                    claim("web", 1, "2Gi", "2Gi"),
                    resize_error.clone(),
                ],
            ),
            Outcome::Failed,
            "ClaimResizeFailed",
            "claim data-web-2: ControllerResizeError: resize volume \"pv-web-2\" by resizer \"disk.example.com\" failed: quota exceeded",
        ),
        case(
            "a resize error while the change is still recorded",
            objects(
                recorded.clone(),
                vec![
                    claim("web", 0, "2Gi", "2Gi"),
                    claim("web", 1, "2Gi", "2Gi"),
                    resize_error.clone(),
                ],
            ),
            Outcome::Failed,
            "ClaimResizeFailed",
            "claim data-web-2: ControllerResizeError",
        ),
        case(
            "an infeasible node resize",
            objects(
                converged.clone(),
                vec![
                    claim("web", 0, "2Gi", "2Gi"),
                    claim("web", 1, "2Gi", "2Gi"),
                    infeasible,
                ],
            ),
            Outcome::Failed,
            "ClaimResizeFailed",
            "claim data-web-2: allocatedResourceStatuses[storage]: NodeResizeInfeasible",
        ),
        case(
            "policy OnDelete: the live object is what is awaited",
            objects(
                set("web", "2Gi", None, None),
                vec![claim("web", 0, "1Gi", "1Gi"), resize_error],
            ),
            Outcome::Done,
            "RolloutComplete",
            "policy OnDelete patches no existing claim (0 of 2 compatible)",
        ),
        case(
            "policy OnDelete, recorded: not done before the re-create",
            objects(
                set("web", "1Gi", Some("2Gi"), None),
                claims("web", "1Gi", "1Gi"),
            ),
            Outcome::Progressing,
            "ChangeRecorded",
            "change recorded",
        ),
        case(
            "claims below the partition are not awaited",
            objects(
                partitioned,
                vec![
                    claim("web", 0, "1Gi", "1Gi"),
                    claim("web", 1, "1Gi", "1Gi"),
                    claim("web", 2, "2Gi", "2Gi"),
                ],
            ),
            Outcome::Done,
            "RolloutComplete",
            "1 of 1 claims carry the recorded templates; 2 held back by the update strategy",
        ),
        case(
            "a class that does not expand",
            {
                let mut o = vec![converged.clone(), class("fast", false)];
                o.extend(claims("web", "1Gi", "1Gi"));
                o
            },
            Outcome::Failed,
            "ClaimIncompatible",
            "claim data-web-0: it needs 2Gi but its StorageClass \"fast\" does not allow volume expansion",
        ),
        case(
            "an unusable journal",
            {
                let mut o = objects(recorded.clone(), claims("web", "2Gi", "2Gi"));
                o.push(bad_journal);
                o
            },
            Outcome::Failed,
            "ConvergeStuck",
            "journal ConfigMap stateful-admission/sa-journal.db.web cannot be used (the journaled object does not parse",
        ),
        case(
            "recorded templates the controller refuses",
            objects(renamed, claims("web", "1Gi", "1Gi")),
            Outcome::Failed,
            "ConvergeRefused",
            "the controller does not apply the recorded templates: metadata.annotations[stateful-admission.io/desired-volume-claim-templates]: Invalid value",
        ),
        case(
            "past the progress deadline of this rollout",
            objects(
                progressing_false(
                    recorded.clone(),
                    &crate::rollout::progress::rollout_key(
                        1,
                        recorded
                            .pointer(&format!(
                                "/metadata/annotations/{}",
                                names_key(crate::names::DESIRED_VOLUME_CLAIM_TEMPLATES)
                            ))
                            .and_then(Value::as_str),
                    ),
                ),
                claims("web", "2Gi", "1Gi"),
            ),
            Outcome::Failed,
            "ProgressDeadlineExceeded",
            "progress deadline exceeded: no progress for 600s",
        ),
        case(
            "a stall of an earlier rollout says nothing",
            objects(
                progressing_false(recorded.clone(), "1"),
                claims("web", "2Gi", "2Gi"),
            ),
            Outcome::Progressing,
            "ChangeRecorded",
            "change recorded",
        ),
        case(
            "a claim not bound yet asks for the template's size",
            objects(
                converged.clone(),
                vec![
                    claim("web", 0, "2Gi", "2Gi"),
                    claim("web", 1, "2Gi", "2Gi"),
                    unbound,
                ],
            ),
            Outcome::Done,
            "RolloutComplete",
            "2 of 2 claims carry the recorded templates; 1 not bound yet",
        ),
    ];
    for c in cases {
        let report = report(&c.objects);
        let set = report
            .items
            .iter()
            .find(|s| s.name == "web")
            .unwrap_or_else(|| panic!("{}: no row: {report:#?}", c.name));
        let v = &set.verdict;
        assert_eq!(
            (v.result, v.reason.as_str()),
            (c.want, c.reason),
            "{}: {v:?}",
            c.name
        );
        assert!(v.message.contains(c.says), "{}: {:?}", c.name, v.message);
    }
}

#[test]
fn refusal_events_count_for_this_change_only() {
    let recorded = set("web", "1Gi", Some("2Gi"), Some("InPlace"));
    let skipped = |uid: &str, at: i64| {
        event(
            "ConvergeSkipped",
            "Warning",
            "StatefulSet",
            "web",
            uid,
            "the desired volume claim templates cannot be applied: too large",
            at,
        )
    };
    let judged = |objects: Vec<Value>| {
        let report = report(&objects);
        report.items[0].verdict.clone()
    };
    let v = judged(vec![recorded.clone(), skipped("uid-web", 200)]);
    assert_eq!(
        (v.result, v.reason.as_str()),
        (Outcome::Failed, "ConvergeRefused")
    );
    assert!(
        v.message.contains(
            "ConvergeSkipped: the desired volume claim templates cannot be applied: too large"
        ),
        "{v:?}"
    );
    // Before the change was recorded (T0+100): about an earlier change.
    assert_eq!(
        judged(vec![recorded.clone(), skipped("uid-web", 50)]).result,
        Outcome::Progressing
    );
    // About another set of that name.
    assert_eq!(
        judged(vec![recorded, skipped("uid-old", 200)]).result,
        Outcome::Progressing
    );
}

#[test]
fn without_storage_classes_the_controllers_incompatible_event_is_believed() {
    let converged = set("web", "2Gi", None, Some("InPlace"));
    let mut inputs: Inputs = inputs(&[
        converged,
        claim("web", 0, "1Gi", "1Gi"),
        event(
            "VolumeClaimIncompatible",
            "Warning",
            "PersistentVolumeClaim",
            "data-web-0",
            "uid-data-web-0",
            "claim data-web-0 cannot follow volume claim template \"data\" in place: it needs 2Gi but its StorageClass \"fast\" does not allow volume expansion",
            300,
        ),
    ]);
    inputs.classes.unreadable = Some("forbidden".into());
    let report = report_of(&inputs, None, &[]);
    let v = &report.items[0].verdict;
    assert_eq!(
        (v.result, v.reason.as_str()),
        (Outcome::Failed, "ClaimIncompatible"),
        "{v:?}"
    );
    assert_eq!(report.unreadable[0].resource, "storageclasses");
    // With the classes readable the claim is judged from them: this one expands.
    let mut readable = inputs.clone();
    readable.classes.unreadable = None;
    readable.classes.objects.insert(
        (String::new(), "fast".into()),
        serde_json::from_value(class("fast", true)).expect("class"),
    );
    let v = &report_of(&readable, None, &[]).items[0].verdict;
    assert_eq!(v.reason, "UpdatingClaims", "{v:?}");
}

#[test]
fn without_journals_a_recorded_change_is_pending_and_an_absent_set_is_waited_for() {
    let recorded = set("web", "1Gi", Some("2Gi"), Some("InPlace"));
    let mut inputs = inputs(&[recorded]);
    inputs.journals.unreadable = Some("configmaps is forbidden (403)".into());
    let v = &report_of(&inputs, None, &[]).items[0].verdict;
    assert_eq!(v.reason, "ChangeRecorded");
    assert!(
        v.message
            .contains("journals cannot be read: configmaps is forbidden"),
        "{v:?}"
    );

    let empty = Inputs::default();
    let gone = |since: i64| model::Absent {
        namespace: NS.into(),
        name: "web".into(),
        since: at(since),
    };
    let report = report_of(&empty, Some("web"), &[gone(NOW - 10)]);
    let v = &report.items[0].verdict;
    assert_eq!(
        (v.result, v.reason.as_str()),
        (Outcome::Progressing, "Absent")
    );
    let report = report_of(&empty, Some("web"), &[gone(NOW - 30)]);
    assert_eq!(report.items[0].verdict.result, Outcome::NotFound);
    assert_eq!(
        wait_result(&report),
        WaitResult::NotFound(vec![
            "statefulset db/web: not found (no convergence journal says it is being created again)"
                .into()
        ])
    );
}

#[test]
fn on_delete_strategy_claims_wait_for_their_pod_then_are_awaited() {
    let on_delete = |s: Value| with(s, "/spec/updateStrategy", json!({"type": "OnDelete"}));
    let converged = on_delete(with(
        set("web", "2Gi", None, Some("InPlace")),
        "/metadata/creationTimestamp",
        json!(time(200)),
    ));
    let pod = |created: i64| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "web-0", "namespace": NS, "creationTimestamp": time(created),
                            "labels": {"controller-revision-hash": "web-1"}}})
    };
    let base = objects(converged, vec![claim("web", 0, "1Gi", "1Gi")]);
    // The pod predates the templates: held, not awaited.
    let mut o = base.clone();
    o.push(pod(150));
    let set = &report(&o).items[0];
    assert_eq!(set.claim_list[0].state, model::ClaimState::Held);
    assert!(
        set.claim_list[0]
            .message
            .as_deref()
            .unwrap_or("")
            .contains("patched once pod web-0 is deleted and created again")
    );
    assert_eq!(set.verdict.result, Outcome::Done);
    // Re-created since: the controller patches it now, so it is awaited.
    let mut o = base;
    o.push(pod(300));
    let set = &report(&o).items[0];
    assert_eq!(set.claim_list[0].state, model::ClaimState::Pending);
    assert_eq!(set.verdict.result, Outcome::Progressing);
}

#[test]
fn wait_results_put_failures_first_and_need_every_set_done() {
    let done = objects(set("a", "2Gi", None, None), Vec::new());
    let waiting = set("b", "1Gi", Some("2Gi"), None);
    let failing = with(
        set("c", "1Gi", Some("2Gi"), None),
        &format!(
            "/metadata/annotations/{}",
            names_key(crate::names::DESIRED_VOLUME_CLAIM_TEMPLATES)
        ),
        json!("[]"),
    );
    let mut all = done.clone();
    assert!(
        matches!(wait_result(&report(&all)), WaitResult::Done(l) if l == vec!["statefulset db/a: storage rollout complete: the live object carries the recorded templates; policy OnDelete patches no existing claim (0 of 0 compatible), new and re-created claims get the templates".to_owned()])
    );
    all.push(waiting);
    let r = report(&all);
    assert_eq!(wait_result(&r), WaitResult::Waiting);
    assert_eq!(
        timed_out(&r, Duration::from_secs(600), Some(NS)),
        [
            "timed out after 10m waiting for statefulset db/b: change recorded (data: 1Gi -> 2Gi); waiting for the controller to journal it and re-create the StatefulSet with it"
        ]
    );
    all.push(failing);
    let WaitResult::Failed(lines) = wait_result(&report(&all)) else {
        panic!("a failure")
    };
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0]
            .starts_with("statefulset db/c: the controller does not apply the recorded templates:"),
        "{lines:?}"
    );
    // Nothing selected is not done (the set may be away to be created again, or the
    // namespace wrong): it is waited for, and the timeout says where nothing was found.
    let nothing = report(&[]);
    assert_eq!(wait_result(&nothing), WaitResult::Waiting);
    assert_eq!(
        timed_out(&nothing, Duration::from_secs(90), Some("dbs")),
        [
            "timed out after 90s waiting for a StatefulSet with a storage rollout: none found in namespace dbs"
        ]
    );
    assert_eq!(
        timed_out(&nothing, Duration::from_secs(90), None),
        [
            "timed out after 90s waiting for a StatefulSet with a storage rollout: none found in any namespace (-A)"
        ]
    );
}

/// Where the cluster drops claims' classes (the controller's claim status says so): the
/// claims are not awaited for the class; a recorded class change fails once the rest is
/// done, a class the template had all along is said in the Done message.
#[test]
fn a_class_the_cluster_cannot_apply_fails_only_a_change_and_only_at_the_end() {
    let gold = |set: Value| {
        with(
            set,
            "/spec/volumeClaimTemplates/0/spec/volumeAttributesClassName",
            json!("gold"),
        )
    };
    let status = |changed: bool| {
        json!([{"name": "data", "compatible": 3, "updating": 0, "overSized": 0,
                "totalCapacity": "6Gi", "volumeAttributesClass": {"name": "gold",
                "applied": false, "changed": changed,
                "reason": "the cluster drops a claim's volumeAttributesClassName (its VolumeAttributesClass feature gate is off)"}}])
        .to_string()
    };
    let with_status = |set: Value, changed: bool| {
        with(
            set,
            &format!(
                "/metadata/annotations/{}",
                names_key(crate::names::VOLUME_CLAIM_STATUS)
            ),
            json!(status(changed)),
        )
    };
    let converged = gold(set("web", "2Gi", None, Some("InPlace")));
    // Claims without the class (dropped), at the template's size.
    let done = claims("web", "2Gi", "2Gi");
    let changed = report(&objects(with_status(converged.clone(), true), done.clone()));
    let v = &changed.items[0].verdict;
    assert_eq!(
        (v.result, v.reason.as_str()),
        (Outcome::Failed, "VolumeAttributesClassNotApplied"),
        "{v:?}"
    );
    assert!(
        v.message.starts_with(
            "template data: volumeAttributesClassName \"gold\" cannot be applied: the cluster drops"
        ) && v
            .message
            .ends_with("everything else of the rollout is done"),
        "{}",
        v.message
    );
    assert_eq!(
        wait_result(&changed),
        WaitResult::Failed(vec![format!("statefulset db/web: {}", v.message)])
    );
    // Still growing: not failed yet, the claims are awaited for their size only.
    let growing = report(&objects(
        with_status(converged.clone(), true),
        claims("web", "2Gi", "1Gi"),
    ));
    assert_eq!(growing.items[0].verdict.result, Outcome::Progressing);
    assert!(
        !growing.items[0]
            .verdict
            .message
            .contains("volumeAttributesClassName"),
        "{:?}",
        growing.items[0].verdict
    );
    // All along: done, and said.
    let along = report(&objects(
        with_status(converged.clone(), false),
        done.clone(),
    ));
    let v = &along.items[0].verdict;
    assert_eq!(v.result, Outcome::Done, "{v:?}");
    assert!(
        v.message
            .contains("template data's volumeAttributesClassName \"gold\" is not on its claims"),
        "{}",
        v.message
    );
    // Without the controller's word (a cluster that keeps classes), claims wait for the class.
    let keeps = report(&objects(converged, done));
    assert_eq!(keeps.items[0].verdict.result, Outcome::Progressing);
    // The table's CHANGE cell and the detail say it.
    let table = crate::status::render::table(
        &changed,
        crate::status::render::TableOptions::default(),
        at(600),
    )
    .render();
    assert!(table.contains("data: class gold not applied"), "{table}");
    let detail = crate::status::render::detail(&changed.items[0], at(600), false);
    assert!(
        detail.contains(
            "Not applied:    data: volumeAttributesClassName \"gold\": the cluster drops"
        ),
        "{detail}"
    );
}

/// Claims whose file system waits for their pod to be re-created (offline expansion): not
/// done, and the line says what the controller's restart planner decides on the same objects:
/// the pod to restart by hand, the eviction it makes now, what holds it (the budget), a
/// restart under way, and a record it will not act on.
#[test]
fn claims_waiting_for_a_restart_name_the_pod() {
    let converged = set("web", "2Gi", None, Some("InPlace"));
    let pending = |claim: Value| {
        with(
            claim,
            "/status/conditions",
            json!([{"type": "FileSystemResizePending", "status": "True",
                    "lastTransitionTime": time(500)}]),
        )
    };
    let claims = vec![
        claim("web", 0, "2Gi", "2Gi"),
        claim("web", 1, "2Gi", "2Gi"),
        pending(claim("web", 2, "2Gi", "1Gi")),
    ];
    let pods = vec![
        pod("web", 0, "u-0", 100),
        pod("web", 1, "u-1", 100),
        pod("web", 2, "u-2", 100),
    ];
    let with_pods = |set: Value, claims: Vec<Value>, pods: Vec<Value>| {
        let mut all = objects(set, claims);
        all.extend(pods);
        all
    };
    let waiting = report(&with_pods(converged.clone(), claims.clone(), pods.clone()));
    let web = &waiting.items[0];
    assert_eq!(web.claims.waiting_for_restart, 1);
    let v = &web.verdict;
    assert_eq!(
        (v.result, v.reason.as_str()),
        (Outcome::Progressing, "UpdatingClaims")
    );
    assert!(
        v.message
            .contains("data-web-2 waiting for a restart (waits for pod web-2 to be re-created")
            && v.message.contains("kubectl delete pod -n db web-2"),
        "{}",
        v.message
    );
    // Opted in: the controller evicts it now (past the grace, within the budget).
    let opted = with(
        converged.clone(),
        &format!(
            "/metadata/annotations/{}",
            names_key(crate::names::RESTART_PODS_FOR_RESIZE)
        ),
        json!("true"),
    );
    let report_opted = report(&with_pods(opted.clone(), claims.clone(), pods.clone()));
    assert!(
        report_opted.items[0]
            .verdict
            .message
            .contains("the controller evicts pod web-2 now, within the budget"),
        "{}",
        report_opted.items[0].verdict.message
    );
    // Another replica down: the controller holds it, and status says so (not "evicted").
    let mut one_down = pods.clone();
    one_down[0] = with(one_down[0].clone(), "/status/phase", json!("Pending"));
    let held = report(&with_pods(opted.clone(), claims.clone(), one_down));
    assert!(
        held.items[0].verdict.message.contains("held by the budget"),
        "{}",
        held.items[0].verdict.message
    );
    // No pod: the StatefulSet controller is re-creating it, which is the restart.
    let replaced = report(&with_pods(opted, claims.clone(), pods[..2].to_vec()));
    assert!(
        replaced.items[0]
            .verdict
            .message
            .contains("the StatefulSet controller is re-creating the pod"),
        "{}",
        replaced.items[0].verdict.message
    );
    // Evicted by the controller: restarting, still awaited.
    let mut evicted = claims;
    evicted[2] = with(
        evicted[2].clone(),
        &format!(
            "/metadata/annotations/{}",
            names_key(crate::names::RESIZE_RESTART)
        ),
        json!("{\"pod\":\"web-2\",\"podUID\":\"u-2\",\"at\":\"2027-01-15T08:00:00Z\"}"),
    );
    // Its new pod (another uid) Ready 10 s ago: the file system grows as it mounts.
    let mut new_pod = pods.clone();
    new_pod[2] = pod("web", 2, "u-new", NOW - 10);
    let restarting = report(&with_pods(converged.clone(), evicted.clone(), new_pod));
    let web = &restarting.items[0];
    assert_eq!(web.claims.restarting, 1);
    assert_eq!(web.verdict.result, Outcome::Progressing);
    assert!(
        web.verdict
            .message
            .contains("data-web-2 restarting (pod web-2 evicted at"),
        "{}",
        web.verdict.message
    );
    // The recorded pod still there and the set no longer opts in: the record is not acted
    // on, and status says so instead of "restarting" forever.
    let cancelled = report(&with_pods(converged, evicted, pods));
    assert!(
        cancelled.items[0]
            .verdict
            .message
            .contains("the restart recorded for it is not made: the set no longer opts in"),
        "{}",
        cancelled.items[0].verdict.message
    );
}
