use super::*;
use serde_json::json;

const T0: &str = "2030-01-01T00:00:00Z";

fn at(seconds_after_t0: i64) -> Timestamp {
    Timestamp::from_second(parse_time(T0).map_or(0, |t| t.as_second()) + seconds_after_t0)
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

fn time(seconds_after_t0: i64) -> String {
    format_time(at(seconds_after_t0))
}

/// A set of 3 replicas at generation 2; `status` and `annotations` merged over the base.
fn set(status: Value, annotations: Value) -> StatefulSet {
    let mut base = json!({
        "metadata": {"name": "web", "namespace": "ns", "generation": 2, "annotations": annotations},
        "spec": {"replicas": 3, "selector": {}, "serviceName": "web", "template": {},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}},
        "status": {"observedGeneration": 2, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                   "updatedReplicas": 3, "currentReplicas": 3, "currentRevision": "web-2", "updateRevision": "web-2"},
    });
    json_patch::merge(&mut base["status"], &status);
    serde_json::from_value(base).expect("a set")
}

fn healthy() -> StatefulSet {
    set(json!({}), json!({}))
}

fn cond(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    since: i64,
) -> StatefulSetCondition {
    StatefulSetCondition {
        type_: Some(type_.to_owned()),
        status: Some(status.to_owned()),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_transition_time: Some(Time(at(since))),
    }
}

fn find<'a>(d: &'a Decision, type_: &str) -> &'a StatefulSetCondition {
    d.conditions
        .as_ref()
        .and_then(|cs| cs.iter().find(|c| c.type_.as_deref() == Some(type_)))
        .unwrap_or_else(|| panic!("a {type_} condition is written"))
}

fn summary(c: &StatefulSetCondition) -> (String, String, String) {
    (
        c.status.clone().unwrap_or_default(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    )
}

fn record(rollout: &str, complete: bool, progress_at: i64, best: Marks) -> Progress {
    Progress {
        rollout: rollout.to_owned(),
        complete,
        progress_at: time(progress_at),
        best,
        available: Some(Transition {
            status: "True".into(),
            since: time(0),
        }),
        progressing: Some(Transition {
            status: "True".into(),
            since: time(0),
        }),
    }
}

fn marks(updated: i64, ready: i64, available: i64) -> Marks {
    Marks {
        observed_generation: 2,
        updated,
        ready,
        available,
        outdated: 3 - updated,
        away: 0,
        claims_compatible: 0,
        claims_updating: 0,
        current_revision: Some("web-1".into()),
    }
}

/// A rollout from web-1 to web-2 with `updated` pods done and all ready.
fn rolling(updated: i64) -> StatefulSet {
    set(
        json!({"updatedReplicas": updated, "currentRevision": "web-1", "updateRevision": "web-2"}),
        json!({}),
    )
}

#[test]
fn a_new_set_is_scaling_up_and_unavailable() {
    let s = set(
        json!({"observedGeneration": null, "replicas": 0, "readyReplicas": null, "availableReplicas": 0,
               "updatedReplicas": null, "currentReplicas": null, "currentRevision": null, "updateRevision": null}),
        json!({}),
    );
    let d = plan(&observe(&s), &[], None, at(5));
    assert_eq!(
        summary(find(&d, AVAILABLE)),
        (
            "False".into(),
            reason::REPLICAS_UNAVAILABLE.into(),
            "0 of 3 replicas available.".into()
        )
    );
    assert_eq!(
        summary(find(&d, PROGRESSING)),
        (
            "True".into(),
            reason::SCALING_UP.into(),
            "StatefulSet \"web\" is scaling up: 0 of 3 replicas created, 0 available.".into()
        )
    );
    assert_eq!(
        find(&d, PROGRESSING).last_transition_time,
        Some(Time(at(5)))
    );
    let p = d.progress.expect("the record is written");
    assert_eq!(
        (p.rollout.as_str(), p.complete, p.progress_at.as_str()),
        ("2", false, time(5).as_str())
    );
    assert_eq!(
        d.look_again,
        Some(Duration::from_secs(600) + LOOK_AGAIN_MARGIN),
        "looked at again when the deadline passes"
    );
    assert!(!d.deadline_exceeded);
}

#[test]
fn a_complete_set_at_first_sight_is_complete_without_a_record() {
    let d = plan(&observe(&healthy()), &[], None, at(0));
    assert_eq!(
        summary(find(&d, PROGRESSING)),
        (
            "True".into(),
            reason::ROLLOUT_COMPLETE.into(),
            "StatefulSet \"web\" has successfully rolled out revision \"web-2\".".into()
        )
    );
    assert_eq!(
        summary(find(&d, AVAILABLE)),
        (
            "True".into(),
            reason::REPLICAS_AVAILABLE.into(),
            "3 of 3 replicas available.".into()
        )
    );
    assert_eq!(d.progress, None, "first contact writes the conditions only");
    assert_eq!(d.look_again, None);
}

/// A partitioned or `OnDelete` set is never completed by the built-in controller
/// (`currentRevision` stays behind), so its completion needs the record.
#[test]
fn a_complete_set_the_built_in_controller_never_completes_is_recorded() {
    let partitioned = set(json!({"currentRevision": "web-1"}), json!({}));
    let mut o = observe(&partitioned);
    o.partition = 1;
    let d = plan(&o, &[], None, at(0));
    assert_eq!(d.phase, Phase::Complete);
    assert!(d.progress.as_ref().is_some_and(|p| p.complete));
}

#[test]
fn availability_dips_keep_an_unrecorded_set_complete_while_remembered() {
    let first = plan(&observe(&healthy()), &[], None, at(0));
    let conditions = first.conditions.clone().unwrap_or_default();
    let mut remembered = Remembered::of(&conditions);
    remembered.completed = Some(observe(&healthy()).rollout);
    let dipped = set(
        json!({"availableReplicas": 2, "readyReplicas": 2}),
        json!({}),
    );
    // The built-in controller's status write dropped our conditions meanwhile.
    let d = plan_remembering(&observe(&dipped), &[], None, Some(&remembered), at(50));
    assert_eq!(d.phase, Phase::Complete);
    assert_eq!(d.progress, None);
    assert_eq!(
        find(&d, PROGRESSING).last_transition_time,
        Some(Time(at(0))),
        "Progressing kept its transition time"
    );
    assert_eq!(summary(find(&d, AVAILABLE)).0, "False", "Available moved");
    assert_eq!(find(&d, AVAILABLE).last_transition_time, Some(Time(at(50))));
    // Without memory (a restart), the dip opens a record as before.
    let d = plan(&observe(&dipped), &[], None, at(50));
    assert!(matches!(
        d.phase,
        Phase::Progressing(reason::WAITING_FOR_AVAILABILITY, _)
    ));
    assert!(d.progress.is_some());
    // A settled set whose conditions were dropped gets them back with their times.
    let d = plan_remembering(&observe(&healthy()), &[], None, Some(&remembered), at(70));
    assert_eq!(d.conditions, first.conditions);
    assert_eq!(d.progress, None);
}

#[test]
fn a_pod_that_went_missing_keeps_a_completed_unrecorded_set_complete_while_remembered() {
    let first = plan(&observe(&healthy()), &[], None, at(0));
    assert!(
        first.steady,
        "healthy at first sight says what its status says"
    );
    let mut remembered = Remembered::of(first.conditions.as_deref().unwrap_or_default());
    remembered.completed = Some(observe(&healthy()).rollout);
    // Deleted (or evicted): gone from replicas and updatedReplicas until it is re-created.
    let missing = set(
        json!({"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2, "currentReplicas": 2}),
        json!({}),
    );
    let d = plan_remembering(&observe(&missing), &[], None, Some(&remembered), at(40));
    assert_eq!(d.phase, Phase::Complete, "not a rollout: availability");
    assert_eq!(d.progress, None, "no record for a pod that comes and goes");
    assert!(!d.steady);
    assert_eq!(summary(find(&d, AVAILABLE)).0, "False");
    // Re-created, not ready yet: the same.
    let back = set(
        json!({"readyReplicas": 2, "availableReplicas": 2}),
        json!({}),
    );
    let d = plan_remembering(&observe(&back), &[], None, Some(&remembered), at(41));
    assert_eq!(
        (d.phase.clone(), d.progress.clone()),
        (Phase::Complete, None)
    );
    // A new generation (a scale, an edit) is a rollout again.
    let mut scaled = missing.clone();
    scaled.metadata.generation = Some(3);
    scaled.status.as_mut().expect("status").observed_generation = Some(3);
    let d = plan_remembering(&observe(&scaled), &[], None, Some(&remembered), at(42));
    assert!(matches!(d.phase, Phase::Progressing(reason::SCALING_UP, _)));
    assert!(d.progress.is_some());
    // Without memory (first sight), a missing pod may be a scale-up under way: a record.
    let d = plan(&observe(&missing), &[], None, at(43));
    assert!(matches!(d.phase, Phase::Progressing(reason::SCALING_UP, _)));
    assert!(d.progress.is_some());
}

#[test]
fn conditions_differing_only_in_their_times_are_not_rewritten() {
    let first = plan(&observe(&healthy()), &[], None, at(0));
    let mut written = first.conditions.clone().unwrap_or_default();
    for c in &mut written {
        c.last_transition_time = Some(Time(at(-3600)));
    }
    let d = plan(&observe(&healthy()), &written, None, at(10));
    assert_eq!(d.conditions, None, "the same content, other times");
    assert_eq!(
        said(&written),
        said(first.conditions.as_deref().unwrap_or_default())
    );
    // A message that changes is news.
    let dipped = set(json!({"availableReplicas": 2}), json!({}));
    let d = plan(&observe(&dipped), &written, None, at(20));
    assert!(d.conditions.is_some());
    assert_ne!(
        said(d.conditions.as_deref().unwrap_or_default()),
        said(&written)
    );
}

/// The conditions and record of a rollout seen in flight and then complete, as a later
/// look reads them back.
fn settled(s: &StatefulSet, now: i64) -> (Vec<StatefulSetCondition>, Progress) {
    let o = observe(s);
    let d = plan(&o, &[], None, at(now));
    if let Some(progress) = d.progress {
        // In flight at first sight: the first look's record.
        return (d.conditions.unwrap_or_default(), progress);
    }
    let mut in_flight = o.clone();
    in_flight.observed_generation = o.generation - 1;
    let first = plan(&in_flight, &[], None, at(now));
    let existing = first.conditions.unwrap_or_default();
    let recorded = first.progress.expect("a record in flight");
    // Complete as this controller sees it before the built-in controller moved
    // `currentRevision`: the record says complete (once settled, it is removed).
    let mut unsettled = o;
    unsettled.current_revision = None;
    let d = plan(&unsettled, &existing, Some(&recorded), at(now));
    (
        d.conditions.unwrap_or(existing),
        d.progress.expect("the record of the completion"),
    )
}

#[test]
fn nothing_is_written_when_conditions_and_record_are_current() {
    let (conditions, progress) = settled(&healthy(), 0);
    // Complete, but the built-in controller has not completed it (a partition).
    let mut partitioned = observe(&healthy());
    partitioned.partition = 1;
    for later in [1, 600, 86_400] {
        let d = plan(&partitioned, &conditions, Some(&progress), at(later));
        assert_eq!(
            (
                d.conditions,
                d.progress,
                d.remove_progress,
                d.deadline_exceeded
            ),
            (None, None, false, false),
            "at +{later}s"
        );
    }
    // Settled by the built-in controller: the record goes, in one write, and nothing else.
    let d = plan(&observe(&healthy()), &conditions, Some(&progress), at(1));
    assert_eq!(
        (d.conditions, d.progress, d.remove_progress, d.phase),
        (None, None, true, Phase::Complete)
    );
    let d = plan(&observe(&healthy()), &conditions, None, at(2));
    assert_eq!(
        (d.conditions, d.progress, d.remove_progress),
        (None, None, false),
        "and then nothing"
    );
    // The same while a rollout waits within its deadline.
    let (conditions, progress) = settled(&rolling(1), 0);
    let d = plan(&observe(&rolling(1)), &conditions, Some(&progress), at(100));
    assert_eq!((d.conditions, d.progress), (None, None));
    assert_eq!(
        d.look_again,
        Some(Duration::from_secs(500) + LOOK_AGAIN_MARGIN)
    );
}

#[test]
fn dropped_conditions_come_back_with_their_transition_times() {
    let (conditions, progress) = settled(&rolling(1), 0);
    // The built-in controller rewrote status without them.
    let d = plan(&observe(&rolling(1)), &[], Some(&progress), at(30));
    assert_eq!(d.conditions.as_deref(), Some(conditions.as_slice()));
    assert_eq!(d.progress, None, "the record did not change");
}

#[test]
fn progress_moves_the_clock_and_keeps_the_transition_time() {
    let rec = record("2", false, 0, marks(1, 3, 3));
    let existing = [
        cond(
            AVAILABLE,
            "True",
            reason::REPLICAS_AVAILABLE,
            "3 of 3 replicas available.",
            0,
        ),
        cond(PROGRESSING, "True", reason::UPDATING_REPLICAS, "old", 0),
    ];
    let d = plan(&observe(&rolling(2)), &existing, Some(&rec), at(300));
    let p = d.progress.clone().expect("progress is recorded");
    assert_eq!(p.progress_at, time(300));
    assert_eq!(p.best.updated, 2);
    let c = find(&d, PROGRESSING);
    assert_eq!(
        summary(c),
        (
            "True".into(),
            reason::UPDATING_REPLICAS.into(),
            "StatefulSet \"web\" is rolling out revision \"web-2\": 2 of 3 replicas updated."
                .into()
        )
    );
    assert_eq!(
        c.last_transition_time,
        Some(Time(at(0))),
        "status did not change"
    );
    assert_eq!(
        d.look_again,
        Some(Duration::from_secs(600) + LOOK_AGAIN_MARGIN)
    );
}

#[test]
fn progress_is_judged_against_high_water_marks() {
    // (what changed, marks recorded, status now, progress?)
    let cases: Vec<(&str, Marks, Value, bool)> = vec![
        (
            "one more pod updated",
            marks(1, 3, 3),
            json!({"updatedReplicas": 2, "currentRevision": "web-1"}),
            true,
        ),
        (
            "one more pod ready",
            marks(1, 2, 2),
            json!({"updatedReplicas": 1, "readyReplicas": 3, "availableReplicas": 2, "currentRevision": "web-1"}),
            true,
        ),
        (
            "one more pod available",
            marks(1, 3, 2),
            json!({"updatedReplicas": 1, "currentRevision": "web-1"}),
            true,
        ),
        (
            "a pod flapped back to ready",
            marks(1, 3, 3),
            json!({"updatedReplicas": 1, "currentRevision": "web-1"}),
            false,
        ),
        (
            "a pod went unready",
            marks(1, 3, 3),
            json!({"updatedReplicas": 1, "readyReplicas": 2, "availableReplicas": 2, "currentRevision": "web-1"}),
            false,
        ),
        (
            "the current revision moved",
            marks(1, 3, 3),
            json!({"updatedReplicas": 1, "currentRevision": "web-0"}),
            true,
        ),
        (
            "generation observed",
            Marks {
                observed_generation: 1,
                ..marks(1, 3, 3)
            },
            json!({"updatedReplicas": 1, "currentRevision": "web-1"}),
            true,
        ),
        (
            "closer to the desired count",
            Marks {
                away: 2,
                ..marks(1, 3, 3)
            },
            json!({"updatedReplicas": 1, "currentRevision": "web-1"}),
            true,
        ),
        (
            "a claim became compatible",
            Marks {
                claims_compatible: 1,
                ..marks(1, 3, 3)
            },
            json!({"updatedReplicas": 1, "currentRevision": "web-1"}),
            false,
        ),
    ];
    for (name, best, status, progressed) in cases {
        let s = set(status, json!({}));
        let rec = record("2", false, 0, best);
        let d = plan(&observe(&s), &[], Some(&rec), at(60));
        let moved = d
            .progress
            .as_ref()
            .is_some_and(|p| p.progress_at == time(60));
        assert_eq!(moved, progressed, "{name}");
    }
    // Claims count from the claim rollout's status.
    let s = set(
        json!({"updatedReplicas": 1, "currentRevision": "web-1"}),
        json!({"stateful-admission.io/volume-claim-status": r#"{"data": {"compatible": 2, "updating": 1, "overSized": 0, "totalCapacity": "3Gi"}}"#}),
    );
    let rec = record(
        &observe(&s).rollout,
        false,
        0,
        Marks {
            claims_compatible: 1,
            claims_updating: 1,
            ..marks(1, 3, 3)
        },
    );
    let d = plan(&observe(&s), &[], Some(&rec), at(60));
    assert!(
        d.progress.is_some_and(|p| p.progress_at == time(60)),
        "a claim became compatible"
    );
}

#[test]
fn no_progress_past_the_deadline_turns_progressing_false_once() {
    let s = set(
        json!({"updatedReplicas": 1, "currentRevision": "web-1"}),
        json!({"stateful-admission.io/progress-deadline-seconds": "30"}),
    );
    let rec = record("2", false, 0, marks(1, 3, 3));
    let existing = [
        cond(
            AVAILABLE,
            "True",
            reason::REPLICAS_AVAILABLE,
            "3 of 3 replicas available.",
            0,
        ),
        cond(PROGRESSING, "True", reason::UPDATING_REPLICAS, "x", 0),
    ];
    let within = plan(&observe(&s), &existing, Some(&rec), at(29));
    assert_eq!(find(&within, PROGRESSING).status.as_deref(), Some("True"));
    assert_eq!(
        within.look_again,
        Some(Duration::from_secs(1) + LOOK_AGAIN_MARGIN)
    );

    let d = plan(&observe(&s), &existing, Some(&rec), at(30));
    let c = find(&d, PROGRESSING);
    assert_eq!(
        summary(c),
        ("False".into(), reason::PROGRESS_DEADLINE_EXCEEDED.into(),
         "StatefulSet \"web\" has made no progress for 30s while rolling out revision \"web-2\": 1 of 3 replicas updated.".into())
    );
    assert_eq!(c.last_transition_time, Some(Time(at(30))));
    assert!(d.deadline_exceeded);
    assert_eq!(d.look_again, None);
    let p = d.progress.expect("the transition is recorded");
    assert_eq!(
        p.progressing,
        Some(Transition {
            status: "False".into(),
            since: time(30)
        })
    );
    assert_eq!(p.progress_at, time(0), "no progress was seen");

    // Later looks neither warn again nor write.
    let written = d.conditions.unwrap_or_default();
    let again = plan(&observe(&s), &written, Some(&p), at(90));
    assert_eq!(
        (again.conditions, again.progress, again.deadline_exceeded),
        (None, None, false)
    );
    // Nor after the built-in controller dropped the conditions.
    let wiped = plan(&observe(&s), &[], Some(&p), at(95));
    assert!(!wiped.deadline_exceeded);
    assert_eq!(wiped.conditions.as_deref(), Some(written.as_slice()));

    // Progress after the deadline makes it True again, with a new transition time.
    let moved = set(
        json!({"updatedReplicas": 2, "currentRevision": "web-1"}),
        json!({"stateful-admission.io/progress-deadline-seconds": "30"}),
    );
    let d = plan(&observe(&moved), &written, Some(&p), at(100));
    let c = find(&d, PROGRESSING);
    assert_eq!(c.status.as_deref(), Some("True"));
    assert_eq!(c.last_transition_time, Some(Time(at(100))));
}

#[test]
fn completion_sticks_until_the_next_rollout() {
    let (conditions, progress) = settled(&healthy(), 0);
    // A pod died: Available says so, Progressing still reports the finished rollout.
    let degraded = set(
        json!({"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2}),
        json!({}),
    );
    let d = plan(&observe(&degraded), &conditions, Some(&progress), at(5000));
    assert_eq!(find(&d, AVAILABLE).status.as_deref(), Some("False"));
    assert_eq!(
        find(&d, PROGRESSING).reason.as_deref(),
        Some(reason::ROLLOUT_COMPLETE)
    );
    assert!(!d.deadline_exceeded);
    assert_eq!(d.look_again, None);
    assert_eq!(
        find(&d, AVAILABLE).last_transition_time,
        Some(Time(at(5000)))
    );
    // Available turning is not a fact of the record (it follows readiness: a write to the set
    // per pod turning would double the built-in controller's writes under churn).
    assert_eq!(
        d.progress, None,
        "the record is not rewritten for Available"
    );
    // Its time lives in memory and rides along with the record's next write.
    let mut remembered = Remembered::of(d.conditions.as_deref().unwrap_or_default());
    remembered.completed = None;
    let stalled_by_claims = set(
        json!({"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2}),
        json!({"stateful-admission.io/volume-claim-status": r#"[{"compatible": 1, "updating": 1}]"#}),
    );
    let d = plan_remembering(
        &observe(&stalled_by_claims),
        &[],
        Some(&progress),
        Some(&remembered),
        at(5100),
    );
    let p = d.progress.expect("the claim rollout reopened the rollout");
    assert_eq!(
        p.available,
        Some(Transition {
            status: "False".into(),
            since: time(5000)
        }),
        "with Available's transition as remembered"
    );

    // A new generation is a new rollout.
    let mut next = healthy();
    next.metadata.generation = Some(3);
    let d = plan(&observe(&next), &conditions, Some(&progress), at(6000));
    let p = d.progress.clone().expect("a new record");
    assert_eq!(
        (p.rollout.as_str(), p.progress_at.as_str()),
        ("3", time(6000).as_str())
    );
    assert_eq!(
        find(&d, PROGRESSING).reason.as_deref(),
        Some(reason::UPDATING_REPLICAS)
    );
    assert_eq!(
        p.progressing, progress.progressing,
        "transition times carry over"
    );
}

#[test]
fn claims_still_updating_keep_the_rollout_open() {
    let claims = |updating: i64| {
        set(
            json!({}),
            json!({"stateful-admission.io/volume-claim-status": format!(r#"[{{"compatible": 1, "updating": {updating}}}]"#)}),
        )
    };
    let d = plan(&observe(&claims(2)), &[], None, at(0));
    assert_eq!(
        summary(find(&d, PROGRESSING)),
        (
            "True".into(),
            reason::UPDATING_VOLUME_CLAIMS.into(),
            "StatefulSet \"web\" is updating volume claims: 2 still updating.".into()
        )
    );
    // Complete first, then the claim rollout starts: reopened, with a fresh clock.
    let (conditions, progress) = settled(&claims(0), 0);
    let d = plan(&observe(&claims(1)), &conditions, Some(&progress), at(900));
    assert_eq!(
        find(&d, PROGRESSING).reason.as_deref(),
        Some(reason::UPDATING_VOLUME_CLAIMS)
    );
    assert_eq!(
        find(&d, PROGRESSING).last_transition_time,
        Some(Time(at(0)))
    );
    let p = d.progress.expect("reopened");
    assert_eq!(
        (p.complete, p.progress_at.as_str()),
        (false, time(900).as_str())
    );
}

#[test]
fn reasons_say_what_is_under_way() {
    let cases = [
        (
            "scale down",
            json!({"replicas": 5, "updatedReplicas": 5}),
            reason::SCALING_DOWN,
            "scaling down: 5 replicas, 3 desired",
        ),
        (
            "scale up",
            json!({"replicas": 2, "availableReplicas": 2, "updatedReplicas": 2}),
            reason::SCALING_UP,
            "scaling up: 2 of 3 replicas created, 2 available",
        ),
        (
            "update",
            json!({"updatedReplicas": 1, "currentRevision": "web-1"}),
            reason::UPDATING_REPLICAS,
            "rolling out revision \"web-2\": 1 of 3 replicas updated",
        ),
        (
            "new generation not yet observed",
            json!({"observedGeneration": 1}),
            reason::UPDATING_REPLICAS,
            "rolling out revision \"web-2\": 3 of 3 replicas updated",
        ),
        (
            "availability",
            json!({"availableReplicas": 2, "readyReplicas": 2}),
            reason::WAITING_FOR_AVAILABILITY,
            "waiting for replicas to become available: 2 of 3 available",
        ),
    ];
    for (name, status, why, detail) in cases {
        let d = plan(&observe(&set(status, json!({}))), &[], None, at(0));
        assert_eq!(
            summary(find(&d, PROGRESSING)),
            (
                "True".into(),
                why.into(),
                format!("StatefulSet \"web\" is {detail}.")
            ),
            "{name}"
        );
    }
}

#[test]
fn completeness_follows_the_update_strategy() {
    let mut partitioned = rolling(2);
    partitioned.spec.update_strategy =
        serde_json::from_value(json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}))
            .ok();
    let mut on_delete = rolling(0);
    on_delete.spec.update_strategy = serde_json::from_value(json!({"type": "OnDelete"})).ok();
    let mut huge_partition = rolling(0);
    huge_partition.spec.update_strategy = serde_json::from_value(
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 99}}),
    )
    .ok();
    let cases = [
        ("all updated and available", healthy(), true),
        ("rolling update half done", rolling(2), false),
        ("partition reached", partitioned, true),
        ("partition above the replicas", huge_partition, true),
        ("OnDelete waits for nobody", on_delete, true),
        (
            "revisions differ",
            set(json!({"currentRevision": "web-1"}), json!({})),
            false,
        ),
        (
            "not all available",
            set(json!({"availableReplicas": 2}), json!({})),
            false,
        ),
        (
            "generation not observed",
            set(json!({"observedGeneration": 1}), json!({})),
            false,
        ),
        (
            "claims updating",
            set(
                json!({}),
                json!({"stateful-admission.io/volume-claim-status": r#"{"data": {"updating": 1}}"#}),
            ),
            false,
        ),
        (
            "claims done",
            set(
                json!({}),
                json!({"stateful-admission.io/volume-claim-status": r#"{"data": {"updating": 0, "compatible": 3}}"#}),
            ),
            true,
        ),
    ];
    for (name, s, complete) in cases {
        assert_eq!(is_complete(&observe(&s)), complete, "{name}");
    }
}

#[test]
fn other_conditions_are_kept_in_place() {
    let foreign = StatefulSetCondition {
        type_: Some("Custom".into()),
        status: Some("True".into()),
        reason: None,
        message: None,
        last_transition_time: None,
    };
    let existing = [
        cond(PROGRESSING, "True", "X", "x", 0),
        foreign.clone(),
        cond(PROGRESSING, "True", "X", "duplicate", 0),
    ];
    let d = plan(&observe(&healthy()), &existing, None, at(10));
    let types: Vec<_> = d
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.type_.unwrap_or_default())
        .collect();
    assert_eq!(types, [PROGRESSING, "Custom", AVAILABLE]);
}

#[test]
fn a_malformed_record_is_rewritten() {
    for text in ["not json", "{}", r#"{"rollout": 5}"#, "null"] {
        // In flight: the record matters, and is written afresh.
        let s = set(
            json!({"updatedReplicas": 1}),
            json!({"stateful-admission.io/progress": text}),
        );
        assert_eq!(read_progress(&s), None, "{text}");
        assert!(
            plan(&observe(&s), &[], read_progress(&s).as_ref(), at(0))
                .progress
                .is_some()
        );
    }
    let (_, progress) = settled(&healthy(), 0);
    let text = serde_json::to_string(&progress).unwrap_or_default();
    let s = set(json!({}), json!({"stateful-admission.io/progress": text}));
    assert_eq!(read_progress(&s), Some(progress));
}

#[test]
fn claim_status_is_read_leniently() {
    let cases: [(&str, Option<ClaimCounts>); 9] = [
        (
            r#"{"data": {"compatible": 3, "updating": 1, "overSized": 0, "totalCapacity": "3Gi"}, "logs": {"compatible": 2, "updating": 2}}"#,
            Some(ClaimCounts {
                compatible: 5,
                updating: 3,
            }),
        ),
        (
            r#"[{"name": "data", "compatible": 1, "updating": 0}]"#,
            Some(ClaimCounts {
                compatible: 1,
                updating: 0,
            }),
        ),
        (
            r#"{"compatible": 2, "updating": 1}"#,
            Some(ClaimCounts {
                compatible: 2,
                updating: 1,
            }),
        ),
        (
            r#"{"data": {"updating": "1"}}"#,
            Some(ClaimCounts::default()),
        ),
        (
            r#"{"data": {"updating": -4}}"#,
            Some(ClaimCounts::default()),
        ),
        (
            r#"{"a": {"updating": 9223372036854775807}, "b": {"updating": 5}}"#,
            Some(ClaimCounts {
                compatible: 0,
                updating: i64::MAX,
            }),
        ),
        ("not json", None),
        ("42", None),
        ("", None),
    ];
    for (text, expected) in cases {
        assert_eq!(claim_counts(text), expected, "{text}");
    }
    let huge = format!("[{}]", vec![r#"{"updating": 1}"#; 10_000].join(","));
    assert_eq!(claim_counts(&huge).map(|c| c.updating), Some(10_000));
}

#[test]
fn the_deadline_annotation_falls_back_to_the_default() {
    let cases = [
        (None, 600),
        (Some("30"), 30),
        (Some(" 45 "), 45),
        (Some("0"), 600),
        (Some("-5"), 600),
        (Some("1.5"), 600),
        (Some("2147483647"), 2_147_483_647),
        (Some("2147483648"), 600),
        (Some("ten"), 600),
    ];
    for (value, secs) in cases {
        assert_eq!(deadline(value), Duration::from_secs(secs), "{value:?}");
    }
}

#[test]
fn the_rollout_key_follows_generation_and_desired_templates() {
    assert_eq!(rollout_key(4, None), "4");
    assert_eq!(rollout_key(4, Some("[]")), rollout_key(4, Some("[]")));
    assert_ne!(rollout_key(4, Some("[]")), rollout_key(4, Some("[{}]")));
    assert_ne!(rollout_key(4, Some("[]")), rollout_key(5, Some("[]")));
    // Stable across builds: the record outlives the binary.
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
}
