use serde_json::{Value, json};

use super::*;
use crate::status::fixtures::*;

/// Two sets: `web` mid-rollout (converged, one claim resizing, one to patch, a budget of
/// 2 from the annotation and a batch), `logs` with its change recorded.
fn objects() -> Vec<Value> {
    let web = with(
        with(
            set("web", "2Gi", None, Some("InPlace")),
            "/metadata/annotations/stateful-admission.io~1max-unavailable",
            json!("2"),
        ),
        "/status",
        json!({"replicas": 3, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 1,
               "currentReplicas": 2, "observedGeneration": 1,
               "currentRevision": "web-1", "updateRevision": "web-2",
               "conditions": [
                   {"type": "Available", "status": "False", "reason": "ReplicasUnavailable",
                    "message": "2 of 3 replicas available", "lastTransitionTime": time(400)},
                   {"type": "Progressing", "status": "True", "reason": "UpdatingVolumeClaims",
                    "message": "updating volume claims: 1 still updating", "lastTransitionTime": time(420)}]}),
    );
    let resizing = with(
        with(
            claim("web", 2, "2Gi", "1Gi"),
            "/status/conditions",
            json!([{"type": "Resizing", "status": "True"}]),
        ),
        "/status/allocatedResourceStatuses",
        json!({"storage": "ControllerResizeInProgress"}),
    );
    vec![
        web,
        class("fast", true),
        claim("web", 0, "1Gi", "1Gi"),
        claim("web", 1, "2Gi", "2Gi"),
        resizing,
        event(
            "VolumeClaimPatched",
            "Normal",
            "StatefulSet",
            "web",
            "uid-web",
            "patched claim data-web-2 to template \"data\": storage 1Gi -> 2Gi",
            560,
        ),
        event(
            "MaxUnavailableBatch",
            "Normal",
            "StatefulSet",
            "web",
            "uid-web",
            "Deleted web-2, web-1 for the update to revision web-2 (maxUnavailable 2, 0 unavailable before)",
            570,
        ),
        event(
            "Resized",
            "Normal",
            "PersistentVolumeClaim",
            "data-web-1",
            "uid-data-web-1",
            "not ours",
            580,
        ),
        set("logs", "1Gi", Some("4Gi"), None),
    ]
}

fn objects_with_foreign_event() -> Vec<Value> {
    let mut o = objects();
    // The resizer's Event, not ours: never shown.
    let last = o.len() - 2;
    o[last]["reportingController"] = json!("external-resizer disk.example.com");
    o
}

#[test]
fn the_table_has_a_row_per_set_with_its_rollout() {
    let report = report(&objects_with_foreign_event());
    let text = table(&report, TableOptions::default(), at(NOW)).render();
    assert_eq!(
        text,
        "\
NAME   STATE         POLICY     CHANGE             CLAIMS                        CONVERGENCE   MAXUNAVAILABLE   AVAILABLE                   PROGRESSING                 AGE
logs   Progressing   OnDelete   data: 1Gi -> 4Gi   0/0 (3 missing)               pending       -                True/ReplicasAvailable      True/RolloutComplete        8m20s
web    Progressing   InPlace    data: 1Gi -> 2Gi   1/3 (1 updating, 1 pending)   done          1/2 (batch 2)    False/ReplicasUnavailable   True/UpdatingVolumeClaims   8m20s
"
    );
}

/// An orphan delete of ours that has waited 21 s for the garbage collector, and one that
/// has waited 4 s: only the first is said, in the table, the detail and the report.
#[test]
fn a_convergence_waiting_on_the_garbage_collector_says_so_in_every_view() {
    let recorded = set("web", "1Gi", Some("2Gi"), Some("InPlace"));
    let deleted = |seconds: i64| {
        with(
            with(
                recorded.clone(),
                "/metadata/deletionTimestamp",
                json!(time(NOW - seconds)),
            ),
            "/metadata/finalizers",
            json!(["orphan"]),
        )
    };
    let mut objects = vec![deleted(21), class("fast", true)];
    objects.extend(claims("web", "1Gi", "1Gi"));
    objects.push(journal(&recorded, "deleting"));
    let report = report_of(&inputs(&objects), Some("web"), &[]);
    let web = &report.items[0];
    let says = "waiting for the garbage collector to orphan the dependents of db/web (uid-web) for 21s: the StatefulSet keeps its orphan finalizer until kube-controller-manager's garbage collector has taken its ownerReferences off its pods and claims; it is re-created once it is gone, and its claims keep rolling out meanwhile";

    let row = &table(&report, TableOptions::default(), at(NOW)).rows[0].cells;
    assert_eq!(row[5], "deleting (gc 21s)");
    let text = detail(web, at(NOW), false);
    assert!(
        text.contains(&format!(
            "Convergence:    deleting, journal stateful-admission/sa-journal.db.web (step deleting): {says}\n"
        )),
        "{text}"
    );
    let json: Value = serde_json::from_str(&super::json(&report)).expect("json");
    let convergence = &json["items"][0]["convergence"];
    assert_eq!(convergence["phase"], "Deleting");
    assert_eq!(convergence["garbageCollectorWaitSeconds"], 21);
    assert_eq!(convergence["message"], says);
    // Claims keep rolling meanwhile: the controller patches them from the recorded
    // templates, so they are pending, not held.
    assert_eq!(web.claims.pending, 3, "{:?}", web.claims);

    objects[0] = deleted(4);
    let report = report_of(&inputs(&objects), Some("web"), &[]);
    let convergence = &report.items[0].convergence;
    assert_eq!(
        (
            convergence.garbage_collector_wait_seconds,
            &convergence.message
        ),
        (None, &None),
        "a wait of seconds is not worth saying"
    );
    assert_eq!(
        table(&report, TableOptions::default(), at(NOW)).rows[0].cells[5],
        "deleting"
    );
}

#[test]
fn wide_all_namespaces_and_progress_add_columns() {
    let report = report(&objects_with_foreign_event());
    let options = TableOptions {
        wide: true,
        all_namespaces: true,
        progress: true,
    };
    let t = table(&report, options, at(NOW));
    assert_eq!(
        t.header,
        [
            "NAMESPACE",
            "NAME",
            "STATE",
            "POLICY",
            "CHANGE",
            "CLAIMS",
            "CONVERGENCE",
            "MAXUNAVAILABLE",
            "AVAILABLE",
            "PROGRESSING",
            "AGE",
            "JOURNAL",
            "LAST-BATCH",
            "MESSAGE",
            "PROGRESS"
        ]
    );
    let web = &t.rows[1].cells;
    assert_eq!(web[0], "db");
    assert_eq!(web[11], "-");
    assert_eq!(web[12], "30s");
    assert_eq!(
        web[13],
        "1 of 3 claims compatible; data-web-0 to be patched (storage 1Gi -> 2Gi), data-web-2 updating (Resizing)"
    );
    assert_eq!(web[14], "[######..............] 1/3");
    assert_eq!(t.rows[0].cells[14], "-");
}

#[test]
fn the_detail_view_shows_claims_conditions_and_our_events() {
    let report = report_of(&inputs(&objects_with_foreign_event()), Some("web"), &[]);
    let text = detail(&report.items[0], at(NOW), false);
    assert_eq!(
        text,
        "\
StatefulSet:    db/web
State:          Progressing (UpdatingClaims): 1 of 3 claims compatible; data-web-0 to be patched (storage 1Gi -> 2Gi), data-web-2 updating (Resizing)
Policy:         InPlace; updateStrategy RollingUpdate, partition 0, replicas 3
Change:         applied; claims following: data: 1Gi -> 2Gi (recorded 8m20s ago)
Convergence:    done
MaxUnavailable: 2 (annotation), budget 2, 1 unavailable, 1 updated, 2 in this update's last batch; last batch 30s ago: Deleted web-2, web-1 for the update to revision web-2 (maxUnavailable 2, 0 unavailable before)
Claims:         1/3 (1 updating, 1 pending)
Conditions:
  Type          Status   Reason                 Age     Message
  Available     False    ReplicasUnavailable    3m20s   2 of 3 replicas available
  Progressing   True     UpdatingVolumeClaims   3m      updating volume claims: 1 still updating
Volume claims:
  Name         State        Request   Capacity   Target   VAClass   Detail
  data-web-0   Pending      1Gi       1Gi        2Gi      -         storage 1Gi -> 2Gi
  data-web-1   Compatible   2Gi       2Gi        2Gi      -         -
  data-web-2   Updating     2Gi       1Gi        2Gi      -         Resizing; storage: ControllerResizeInProgress
Events:
  Type     Reason                Age   Object            Message
  Normal   VolumeClaimPatched    40s   StatefulSet/web   patched claim data-web-2 to template \"data\": storage 1Gi -> 2Gi
  Normal   MaxUnavailableBatch   30s   StatefulSet/web   Deleted web-2, web-1 for the update to revision web-2 (maxUnavailable 2, 0 unavailable before)
"
    );
}

#[test]
fn the_change_line_says_what_is_recorded_or_that_it_was_applied() {
    let change_line = |objects: &[Value]| -> String {
        let report = report_of(&inputs(objects), Some("web"), &[]);
        detail(&report.items[0], at(NOW), false)
            .lines()
            .find(|l| l.starts_with("Change:"))
            .unwrap_or_default()
            .to_owned()
    };
    let mut recorded = vec![
        set("web", "1Gi", Some("2Gi"), Some("InPlace")),
        class("fast", true),
    ];
    recorded.extend(claims("web", "1Gi", "1Gi"));
    assert_eq!(
        change_line(&recorded),
        "Change:         data: 1Gi -> 2Gi (recorded 8m20s ago)"
    );
    // Re-created with it, claims still to follow: applied, since then, and what they
    // are being moved to.
    let mut applied = vec![
        set("web", "2Gi", None, Some("InPlace")),
        class("fast", true),
    ];
    applied.extend(claims("web", "1Gi", "1Gi"));
    assert_eq!(
        change_line(&applied),
        "Change:         applied; claims following: data: 1Gi -> 2Gi (recorded 8m20s ago)"
    );
    // Claims at different sizes: each, once; those done are not moving.
    let mixed = [
        set("web", "2Gi", None, Some("InPlace")),
        class("fast", true),
        claim("web", 0, "1Gi", "1Gi"),
        claim("web", 1, "1536Mi", "1536Mi"),
        claim("web", 2, "2Gi", "1Gi"),
    ];
    assert_eq!(
        change_text(&following(&report(&mixed).items[0])),
        "data: 1Gi, 1536Mi -> 2Gi"
    );
    // Its journal finishing, nothing left to move: applied.
    let mut finishing = vec![
        set("web", "2Gi", None, Some("InPlace")),
        class("fast", true),
        journal(&set("web", "1Gi", Some("2Gi"), Some("InPlace")), "deleting"),
    ];
    finishing.extend(claims("web", "2Gi", "2Gi"));
    assert_eq!(
        change_line(&finishing),
        "Change:         applied (recorded 8m20s ago)"
    );
    let mut settled = vec![
        set("web", "2Gi", None, Some("InPlace")),
        class("fast", true),
    ];
    settled.extend(claims("web", "2Gi", "2Gi"));
    assert_eq!(change_line(&settled), "Change:         none recorded");
}

#[test]
fn failed_claims_show_the_error_and_the_volume_attributes_classes() {
    let converged = with(
        set("web", "2Gi", None, Some("InPlace")),
        "/spec/volumeClaimTemplates/0/spec/volumeAttributesClassName",
        json!("faster"),
    );
    let modifying = with(
        with(
            with(
                claim("web", 0, "2Gi", "2Gi"),
                "/spec/volumeAttributesClassName",
                json!("faster"),
            ),
            "/status/currentVolumeAttributesClassName",
            json!("fast"),
        ),
        "/status/modifyVolumeStatus",
        json!({"status": "Infeasible", "targetVolumeAttributesClassName": "faster"}),
    );
    let failed = with(
        claim("web", 1, "2Gi", "1Gi"),
        "/status/conditions",
        json!([{"type": "NodeResizeError", "status": "True", "message": "resize2fs: bad superblock"},
               {"type": "FileSystemResizePending", "status": "False"}]),
    );
    let report = report_of(
        &inputs(&[converged, class("fast", true), modifying, failed]),
        Some("web"),
        &[],
    );
    let text = detail(&report.items[0], at(NOW), false);
    assert!(text.contains("State:          Failed (ClaimResizeFailed): claim data-web-0: modifyVolumeStatus: Infeasible (to faster)"), "{text}");
    assert!(
        text.contains("  data-web-0   Failed    2Gi       2Gi        2Gi      fast (faster)/faster   modifyVolumeStatus: Infeasible (to faster)\n"),
        "{text}"
    );
    assert!(
        text.contains("  data-web-1   Failed    2Gi       1Gi        2Gi      -/faster               NodeResizeError: resize2fs: bad superblock; FileSystemResizePending=False\n"),
        "{text}"
    );
    assert!(
        text.contains("Events:         <none of stateful-admission>"),
        "{text}"
    );
}

#[test]
fn the_json_report_is_versioned_and_names_every_field() {
    let report = report_of(&inputs(&objects()), Some("web"), &[]);
    let value: Value = serde_json::from_str(&json(&report)).expect("json");
    assert_eq!(value["apiVersion"], "stateful-admission.io/v1alpha1");
    assert_eq!(value["kind"], "StatusReport");
    assert_eq!(value["time"], time(NOW));
    let web = &value["items"][0];
    assert_eq!(
        web["verdict"],
        json!({"result": "Progressing", "reason": "UpdatingClaims",
        "message": "1 of 3 claims compatible; data-web-0 to be patched (storage 1Gi -> 2Gi), data-web-2 updating (Resizing)"})
    );
    assert_eq!(
        web["claims"],
        json!({"total": 3, "compatible": 1, "updating": 1, "pending": 1,
        "held": 0, "waiting": 0, "provisioning": 0, "incompatible": 0, "failed": 0,
        "waitingForRestart": 0, "restarting": 0, "overSized": 0, "missing": 0})
    );
    assert_eq!(web["maxUnavailable"]["budget"], 2);
    assert_eq!(web["maxUnavailable"]["batch"], 2);
    assert_eq!(
        web["claimList"][2]["conditions"],
        json!([{"type": "Resizing", "status": "True"}])
    );
    assert_eq!(
        web["claimList"][2]["allocatedResourceStatuses"],
        json!({"storage": "ControllerResizeInProgress"})
    );
    // One line per report with --watch.
    assert_eq!(json_line(&report).lines().count(), 1);
}

#[test]
fn ages_are_kubectls_human_durations() {
    for (seconds, want) in [
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (5 * 3600 + 120, "5h2m"),
        (47 * 3600, "47h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
        (3 * 365 * 86400 + 86400, "3y1d"),
        (9 * 365 * 86400, "9y"),
    ] {
        assert_eq!(age(at(0), at(seconds)), want, "{seconds}");
    }
    assert_eq!(age(at(10), at(0)), "<invalid>");
    assert_eq!(age(at(1), at(0)), "0s", "a second of clock skew is now");
    assert_eq!(duration(Duration::from_secs(5400)), "90m");
}

#[test]
fn changes_and_claims_read_as_one_cell() {
    let from_to = |a: &str, b: &str| {
        Some(super::super::model::FromTo {
            from: Some(a.into()),
            to: Some(b.into()),
        })
    };
    let changes = [
        TemplateChange {
            template: "data".into(),
            storage: from_to("1Gi", "2Gi"),
            volume_attributes_class_name: from_to("fast", "faster"),
            labels: false,
            annotations: false,
        },
        TemplateChange {
            template: "logs".into(),
            storage: None,
            volume_attributes_class_name: Some(super::super::model::FromTo {
                from: None,
                to: Some("gold".into()),
            }),
            labels: true,
            annotations: true,
        },
    ];
    assert_eq!(
        change_text(&changes),
        "data: 1Gi -> 2Gi, class fast -> faster; logs: class unset -> gold, labels, annotations"
    );
    assert_eq!(claims_text(&ClaimCounts::default()), "-");
    let all = ClaimCounts {
        total: 9,
        compatible: 2,
        updating: 1,
        pending: 1,
        held: 1,
        waiting: 1,
        provisioning: 1,
        incompatible: 1,
        failed: 1,
        waiting_for_restart: 1,
        restarting: 1,
        over_sized: 1,
        missing: 2,
    };
    assert_eq!(
        claims_text(&all),
        "2/9 (1 updating, 1 pending, 1 held, 1 waiting, 1 provisioning, 1 incompatible, 1 failed, 1 waiting for a restart, 1 restarting, 1 over-sized, 2 missing)"
    );
    assert_eq!(progress_bar(0, 4, 8), "[........] 0/4");
    assert_eq!(progress_bar(3, 4, 8), "[######..] 3/4");
    assert_eq!(progress_bar(4, 4, 8), "[########] 4/4");
}

#[test]
fn rows_keep_the_first_tables_columns() {
    let widths = [4, 7];
    let cells = ["web".to_owned(), "Done".to_owned(), "x".to_owned()];
    assert_eq!(Table::line(&cells, &widths), "web    Done      x");
    let long = ["database".to_owned(), "Done".to_owned()];
    assert_eq!(Table::line(&long, &widths), "database   Done");
}
