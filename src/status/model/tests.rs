use serde_json::json;

use super::*;
use crate::status::fixtures::*;

fn entry(manager: &str, seconds: i64, fields: Value) -> Value {
    json!({"manager": manager, "operation": "Update", "apiVersion": "apps/v1",
           "time": time(seconds), "fieldsType": "FieldsV1", "fieldsV1": fields})
}

fn recorded_at(set: &Value) -> Option<String> {
    report(std::slice::from_ref(set)).items[0]
        .change_recorded_at
        .clone()
}

#[test]
fn the_change_is_dated_by_who_recorded_it() {
    let annotation = json!({"f:metadata": {"f:annotations": {
        "f:stateful-admission.io/desired-volume-claim-templates": {}}}});
    let templates = json!({"f:spec": {"f:volumeClaimTemplates": {}}});
    let recorded = set("web", "1Gi", Some("2Gi"), None);
    // The entry owning the annotation, not a later writer.
    let set_a = with(
        recorded.clone(),
        "/metadata/managedFields",
        json!([
            entry("helm", 100, annotation.clone()),
            entry("kubectl-scale", 200, json!({"f:spec": {"f:replicas": {}}})),
            entry(names::CONTROLLER_NAME, 300, json!({"f:metadata": {}}))
        ]),
    );
    assert_eq!(recorded_at(&set_a), Some(time(100)));
    // Where no entry owns it (the mutation not attributed), the last write by anyone but us.
    let set_b = with(
        recorded,
        "/metadata/managedFields",
        json!([
            entry("helm", 100, templates.clone()),
            entry("kubectl-scale", 200, json!({})),
            entry(names::CONTROLLER_NAME, 300, json!({}))
        ]),
    );
    assert_eq!(recorded_at(&set_b), Some(time(200)));
    // After the re-create: the applier's restored entry owning the templates, while claims
    // still follow.
    let converged = with(
        set("web", "2Gi", None, Some("InPlace")),
        "/metadata/managedFields",
        json!([
            entry("helm", 100, templates),
            entry(names::CONTROLLER_NAME, 300, json!({}))
        ]),
    );
    let following = report(&[
        converged.clone(),
        class("fast", true),
        claim("web", 0, "1Gi", "1Gi"),
    ]);
    assert_eq!(following.items[0].change_recorded_at, Some(time(100)));
    // Nothing in flight: no age.
    let done = report(&[
        converged,
        class("fast", true),
        claim("web", 0, "2Gi", "2Gi"),
    ]);
    assert_eq!(done.items[0].change_recorded_at, None);
}

#[test]
fn managed_fields_are_trimmed_to_what_dates_the_change() {
    let entries: Vec<ManagedFieldsEntry> = serde_json::from_value(json!([
        entry(
            "helm",
            100,
            json!({"f:metadata": {"f:labels": {"f:app": {}},
            "f:annotations": {"f:stateful-admission.io/desired-volume-claim-templates": {}}},
            "f:spec": {"f:template": {"f:spec": {}}, "f:volumeClaimTemplates": {}}})
        ),
        entry("kubectl", 200, json!({"f:spec": {"f:replicas": {}}})),
    ]))
    .expect("entries");
    let trimmed = trim_managed_fields(Some(entries)).expect("kept");
    assert_eq!(
        serde_json::to_value(&trimmed).expect("json"),
        json!([
            {"manager": "helm", "operation": "Update", "time": time(100), "fieldsV1": {
                "f:metadata": {"f:annotations": {"f:stateful-admission.io/desired-volume-claim-templates": {}}},
                "f:spec": {"f:volumeClaimTemplates": {}}}},
            {"manager": "kubectl", "operation": "Update", "time": time(200), "fieldsV1": {}}
        ])
    );
    assert_eq!(trim_managed_fields(None), None);
}

#[test]
fn sets_are_listed_when_they_carry_something_of_ours_or_are_named() {
    let plain = without(set("plain", "1Gi", None, None), "/status/conditions");
    let in_place = without(
        set("inplace", "1Gi", None, Some("InPlace")),
        "/status/conditions",
    );
    let conditions = set("conditions", "1Gi", None, None);
    let recorded = without(
        set("recorded", "1Gi", Some("2Gi"), None),
        "/status/conditions",
    );
    let other_ns = with(
        set("elsewhere", "1Gi", Some("2Gi"), None),
        "/metadata/namespace",
        json!("other"),
    );
    let gone = set("gone", "1Gi", Some("2Gi"), Some("InPlace"));
    let objects = [
        plain,
        in_place,
        conditions,
        recorded.clone(),
        other_ns,
        journal(&gone, "deleting"),
    ];
    let names: Vec<(String, Presence)> = report(&objects)
        .items
        .iter()
        .map(|s| (s.name.clone(), s.presence))
        .collect();
    assert_eq!(
        names,
        [
            ("conditions".to_owned(), Presence::Present),
            ("gone".to_owned(), Presence::Recreating),
            ("inplace".to_owned(), Presence::Present),
            ("recorded".to_owned(), Presence::Present),
        ]
    );
    // Absent, it is described by the object its journal creates.
    let recreating = &report(&objects).items[1];
    assert_eq!(
        (
            recreating.policy.as_str(),
            recreating.replicas,
            recreating.convergence.phase
        ),
        ("InPlace", 3, ConvergencePhase::Recreating)
    );
    let named = report_of(&inputs(&objects), Some("plain"), &[]);
    assert_eq!(named.items.len(), 1);
    assert_eq!(named.items[0].name, "plain");
    // Every namespace.
    let mut all = selection(None);
    all.namespace = None;
    let everywhere = build(&inputs(&objects), &all, &Followed::default(), at(NOW));
    assert_eq!(everywhere.items.len(), 5);
    // A set reported before is reported again, with nothing of ours left on it.
    let followed = Followed {
        sets: [(NS.to_owned(), "plain".to_owned())].into(),
        absent: Vec::new(),
    };
    let again = build(&inputs(&objects), &selection(None), &followed, at(NOW));
    assert!(again.items.iter().any(|s| s.name == "plain"));
}

#[test]
fn only_our_newest_events_about_the_set_and_its_claims_are_kept() {
    let mut objects = vec![
        set("web", "1Gi", None, Some("InPlace")),
        claim("web", 0, "1Gi", "1Gi"),
    ];
    for i in 0..12 {
        objects.push(event(
            "VolumeClaimPatched",
            "Normal",
            "StatefulSet",
            "web",
            "uid-web",
            &format!("n{i}"),
            100 + i,
        ));
    }
    objects.push(event(
        "VolumeClaimPatchFailed",
        "Warning",
        "PersistentVolumeClaim",
        "data-web-0",
        "uid-data-web-0",
        "claim",
        150,
    ));
    // About a claim of the same name that was deleted since: another uid.
    objects.push(event(
        "VolumeClaimIncompatible",
        "Warning",
        "PersistentVolumeClaim",
        "data-web-0",
        "uid-old",
        "old claim",
        160,
    ));
    let mut foreign = event(
        "Resizing",
        "Normal",
        "PersistentVolumeClaim",
        "data-web-0",
        "uid-data-web-0",
        "theirs",
        170,
    );
    foreign["reportingController"] = json!("external-resizer");
    objects.push(foreign);
    let events = &report(&objects).items[0].events;
    let notes: Vec<&str> = events.iter().map(|e| e.note.as_str()).collect();
    assert_eq!(
        notes,
        [
            "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11", "claim"
        ]
    );
    assert_eq!(events[9].object, "PersistentVolumeClaim/data-web-0");
    assert_eq!(events[9].time.as_deref(), Some(time(150).as_str()));
}

#[test]
fn the_batch_shown_is_the_last_one_of_the_update_in_progress() {
    let rolling = |current: &str| {
        with(
            with(
                set("web", "2Gi", None, None),
                "/metadata/annotations/stateful-admission.io~1max-unavailable",
                json!("3"),
            ),
            "/status/currentRevision",
            json!(current),
        )
    };
    let batch = |revision: &str| {
        event(
            "MaxUnavailableBatch",
            "Normal",
            "StatefulSet",
            "web",
            "uid-web",
            &max_unavailable::batch_note(&["web-2", "web-1", "web-0"], revision, 3, 0),
            500,
        )
    };
    let shown = |objects: &[Value]| {
        let m = report(objects).items[0].max_unavailable.clone();
        m.map(|m| (m.budget, m.batch))
    };
    // The fixture's update revision is web-1.
    assert_eq!(
        shown(&[rolling("web-0"), batch("web-1")]),
        Some((3, Some(3)))
    );
    assert_eq!(
        shown(&[rolling("web-0"), batch("web-0")]),
        Some((3, None)),
        "a batch of an earlier update"
    );
    assert_eq!(
        shown(&[rolling("web-1"), batch("web-1")]),
        Some((3, None)),
        "the update is over"
    );
}

#[test]
fn inputs_take_only_the_kinds_status_reads() {
    assert!(
        Inputs::from_json(&[
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})
        ])
        .is_err()
    );
    let inputs =
        Inputs::from_json(&[set("web", "1Gi", None, None), class("fast", true)]).expect("inputs");
    assert!(inputs.sets.get(NS, "web").is_some());
    assert!(inputs.classes.get("", "fast").is_some());
}
