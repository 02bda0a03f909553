use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;

fn annotations(hold: Option<&str>) -> BTreeMap<String, String> {
    hold.map(|h| (names::ROLLOUT_HOLD.to_owned(), h.to_owned()))
        .into_iter()
        .collect()
}

fn spec(replicas: i64, partition: Option<i64>, kind: &str) -> Value {
    let mut strategy = json!({"type": kind});
    if let Some(p) = partition {
        strategy["rollingUpdate"] = json!({"partition": p});
    }
    json!({"replicas": replicas, "updateStrategy": strategy})
}

const HOLD_3_0: &str = r#"{"partition":3,"userPartition":0}"#;
const HELD_3_0: Hold = Hold {
    partition: 3,
    user_partition: 0,
};

#[test]
fn the_webhook_rule_table() {
    struct Case {
        what: &'static str,
        old: Option<(Option<&'static str>, Value)>,
        new: (Option<&'static str>, Value),
        start: bool,
        want: Admit,
    }
    let rolling = |r, p| spec(r, p, "RollingUpdate");
    let cases = [
        Case {
            what: "an image and a growth in one update hold every replica",
            old: Some((None, rolling(3, Some(0)))),
            new: (None, rolling(3, Some(0))),
            start: true,
            want: Admit {
                partition: Some(3),
                annotation: Some(Some(HOLD_3_0.into())),
                started: Some(HELD_3_0),
            },
        },
        Case {
            what: "no rollingUpdate block: the user's partition is the default 0",
            old: Some((None, rolling(3, None))),
            new: (None, rolling(3, None)),
            start: true,
            want: Admit {
                partition: Some(3),
                annotation: Some(Some(HOLD_3_0.into())),
                started: Some(HELD_3_0),
            },
        },
        Case {
            what: "a user's partition is recorded and given back later",
            old: Some((None, rolling(5, Some(2)))),
            new: (None, rolling(5, Some(2))),
            start: true,
            want: Admit {
                partition: Some(5),
                annotation: Some(Some(r#"{"partition":5,"userPartition":2}"#.into())),
                started: Some(Hold {
                    partition: 5,
                    user_partition: 2,
                }),
            },
        },
        Case {
            what: "a paused rollout (partition at replicas) holds nothing",
            old: Some((None, rolling(3, Some(3)))),
            new: (None, rolling(3, Some(3))),
            start: true,
            want: Admit::default(),
        },
        Case {
            what: "OnDelete holds nothing",
            old: Some((None, spec(3, None, "OnDelete"))),
            new: (None, spec(3, None, "OnDelete")),
            start: true,
            want: Admit::default(),
        },
        Case {
            what: "a user's apply during a hold: the partition stays held, theirs recorded",
            old: Some((Some(HOLD_3_0), rolling(3, Some(3)))),
            new: (Some(HOLD_3_0), rolling(3, Some(1))),
            start: false,
            want: Admit {
                partition: Some(3),
                annotation: Some(Some(r#"{"partition":3,"userPartition":1}"#.into())),
                started: None,
            },
        },
        Case {
            what: "an update that does not touch the partition keeps the hold as it is",
            old: Some((Some(HOLD_3_0), rolling(3, Some(3)))),
            new: (Some(HOLD_3_0), rolling(3, Some(3))),
            start: false,
            want: Admit::default(),
        },
        Case {
            what: "the controller lowers the hold: the partition follows in the same request",
            old: Some((Some(HOLD_3_0), rolling(3, Some(3)))),
            new: (
                Some(r#"{"partition":2,"userPartition":0}"#),
                rolling(3, Some(3)),
            ),
            start: false,
            want: Admit {
                partition: Some(2),
                annotation: None,
                started: None,
            },
        },
        Case {
            what: "a user's partition above the hold wins (their pause)",
            old: Some((
                Some(r#"{"partition":1,"userPartition":0}"#),
                rolling(3, Some(1)),
            )),
            new: (
                Some(r#"{"partition":1,"userPartition":0}"#),
                rolling(3, Some(3)),
            ),
            start: false,
            want: Admit {
                partition: None,
                annotation: Some(Some(r#"{"partition":1,"userPartition":3}"#.into())),
                started: None,
            },
        },
        Case {
            what: "the hold goes: the user's partition comes back",
            old: Some((
                Some(r#"{"partition":1,"userPartition":0}"#),
                rolling(3, Some(1)),
            )),
            new: (None, rolling(3, Some(1))),
            start: false,
            want: Admit {
                partition: Some(0),
                ..Admit::default()
            },
        },
        Case {
            what: "the hold goes in a request that sets a partition: that one stands",
            old: Some((
                Some(r#"{"partition":1,"userPartition":0}"#),
                rolling(3, Some(1)),
            )),
            new: (None, rolling(3, Some(2))),
            start: false,
            want: Admit::default(),
        },
        Case {
            what: "a switch to OnDelete during a hold removes it and gives the partition back",
            old: Some((Some(HOLD_3_0), rolling(3, Some(3)))),
            new: (Some(HOLD_3_0), spec(3, Some(3), "OnDelete")),
            start: false,
            want: Admit {
                partition: Some(0),
                annotation: Some(None),
                started: None,
            },
        },
        Case {
            what: "a hostile annotation is not read (the controller reports and removes it)",
            old: Some((None, rolling(3, Some(0)))),
            new: (
                Some(r#"{"partition":-4,"userPartition":"x"}"#),
                rolling(3, Some(0)),
            ),
            start: false,
            want: Admit::default(),
        },
        Case {
            what: "a new change during a hold starts over from the top, the user's kept",
            old: Some((
                Some(r#"{"partition":1,"userPartition":0}"#),
                rolling(3, Some(1)),
            )),
            new: (
                Some(r#"{"partition":1,"userPartition":0}"#),
                rolling(3, Some(1)),
            ),
            start: true,
            want: Admit {
                partition: Some(3),
                annotation: Some(Some(HOLD_3_0.into())),
                started: Some(HELD_3_0),
            },
        },
        Case {
            what: "called again after another webhook: the request holds already, nothing more",
            old: Some((None, rolling(3, Some(0)))),
            new: (Some(HOLD_3_0), rolling(3, Some(3))),
            start: true,
            want: Admit {
                partition: None,
                annotation: None,
                started: Some(HELD_3_0),
            },
        },
    ];
    for case in cases {
        let old_annotations = case.old.as_ref().map(|(a, _)| annotations(*a));
        let new_annotations = annotations(case.new.0);
        let got = admit(
            case.old
                .as_ref()
                .zip(old_annotations.as_ref())
                .map(|((_, spec), a)| (Some(a), spec)),
            (Some(&new_annotations), &case.new.1),
            case.start,
        );
        assert_eq!(got, case.want, "{}", case.what);
    }
}

fn replica(ordinal: u32, state: &str) -> Replica {
    let (updated, patched, ready, compatible) = match state {
        "old" => (false, false, false, false),
        "patching" => (false, true, false, false),
        "pending" => (false, true, true, false),
        "recreating" => (false, true, true, false),
        "done" => (true, true, true, true),
        "growing" => (true, true, true, false),
        _ => unreachable!("{state}"),
    };
    Replica {
        ordinal,
        updated_and_available: updated,
        claims_patched: patched,
        claims_ready_for_pod: ready,
        claims_compatible: compatible,
    }
}

#[test]
fn the_controller_step_table() {
    let hold = |partition, user_partition| Hold {
        partition,
        user_partition,
    };
    /// What, the hold, the set's partition, observed, the replicas, the step.
    type Case = (&'static str, Hold, i32, bool, Vec<Replica>, Step);
    let cases: [Case; 9] = [
        (
            "the top replica's claims are patched first",
            hold(3, 0),
            3,
            true,
            vec![replica(0, "old"), replica(1, "old"), replica(2, "old")],
            Step::Wait(Waiting::Claims { ordinal: 2 }),
        ),
        (
            "its claims wait for the node: its pod is re-created now",
            hold(3, 0),
            3,
            true,
            vec![replica(0, "old"), replica(1, "old"), replica(2, "pending")],
            Step::Lower { to: 2, ordinal: 2 },
        ),
        (
            "the re-created pod is not available yet",
            hold(2, 0),
            2,
            true,
            vec![
                replica(0, "old"),
                replica(1, "old"),
                replica(2, "recreating"),
            ],
            Step::Wait(Waiting::Replica { ordinal: 2 }),
        ),
        (
            "available, its claims still growing",
            hold(2, 0),
            2,
            true,
            vec![replica(0, "old"), replica(1, "old"), replica(2, "growing")],
            Step::Wait(Waiting::Replica { ordinal: 2 }),
        ),
        (
            "done: the next replica's claims",
            hold(2, 0),
            2,
            true,
            vec![
                replica(0, "old"),
                replica(1, "patching"),
                replica(2, "done"),
            ],
            Step::Wait(Waiting::Claims { ordinal: 1 }),
        ),
        (
            "the StatefulSet controller has not seen the spec",
            hold(3, 0),
            3,
            false,
            vec![replica(0, "old"), replica(1, "old"), replica(2, "pending")],
            Step::Wait(Waiting::NotObserved),
        ),
        (
            "the webhook did not move the partition",
            hold(2, 0),
            3,
            true,
            vec![replica(0, "old"), replica(1, "old"), replica(2, "pending")],
            Step::Wait(Waiting::PartitionNotApplied { want: 2, have: 3 }),
        ),
        (
            "through to the user's partition",
            hold(1, 1),
            1,
            true,
            vec![replica(0, "old"), replica(1, "done"), replica(2, "done")],
            Step::Release,
        ),
        (
            "scaled down below the hold: the top replica there is next",
            hold(5, 0),
            5,
            true,
            vec![replica(0, "old"), replica(1, "pending")],
            Step::Lower { to: 1, ordinal: 1 },
        ),
    ];
    for (what, hold, partition, observed, replicas, want) in cases {
        assert_eq!(next(&hold, partition, observed, &replicas), want, "{what}");
    }
}

#[test]
fn a_hold_reads_back_what_it_renders_and_refuses_hostile_values() {
    let hold = Hold {
        partition: 4,
        user_partition: 1,
    };
    let a = annotations(Some(&hold.render()));
    assert_eq!(Hold::of(Some(&a)), Some(Ok(hold)));
    for bad in [
        "",
        "null",
        "{}",
        r#"{"partition":1}"#,
        r#"{"partition":-1,"userPartition":0}"#,
        r#"{"partition":1,"userPartition":0,"extra":1}"#,
        r#"{"partition":99999999999,"userPartition":0}"#,
        "\u{0}",
    ] {
        let a = annotations(Some(bad));
        assert!(
            matches!(Hold::of(Some(&a)), Some(Err(_))),
            "{bad:?} is refused"
        );
    }
    assert_eq!(Hold::of(None), None);
}

#[test]
fn the_claims_of_the_next_replica_follow_once_those_above_are_through() {
    let hold = |partition, user_partition| Hold {
        partition,
        user_partition,
    };
    let cases: [(&str, Hold, Vec<Replica>, usize); 5] = [
        (
            "nothing re-created yet: the top replica's claims",
            hold(3, 0),
            vec![replica(0, "old"), replica(1, "old"), replica(2, "old")],
            2,
        ),
        (
            "the top replica's pod is being re-created: nothing more yet",
            hold(2, 0),
            vec![
                replica(0, "old"),
                replica(1, "old"),
                replica(2, "recreating"),
            ],
            2,
        ),
        (
            "through: the next replica's claims",
            hold(2, 0),
            vec![replica(0, "old"), replica(1, "old"), replica(2, "done")],
            1,
        ),
        (
            "never below the user's partition",
            hold(2, 2),
            vec![replica(0, "old"), replica(1, "old"), replica(2, "done")],
            2,
        ),
        (
            "a hold above the replicas (scaled down) counts from the top",
            hold(7, 0),
            vec![replica(0, "old"), replica(1, "old")],
            1,
        ),
    ];
    for (what, hold, replicas, want) in cases {
        assert_eq!(claims_partition(&hold, &replicas), want, "{what}");
    }
}
