use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use super::*;
use crate::rollout::health::Health;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("a time")
}

const GRACE: Duration = Duration::from_secs(60);

fn settings() -> Settings {
    Settings {
        restart: true,
        rolling: true,
        partition: 0,
        max_unavailable: 1,
        update_revision: Some("web-2".into()),
        grace: GRACE,
        observed: true,
        now: at(1000),
    }
}

/// A replica of set `web` at `ordinal` (its index the same), its pod `health` at revision
/// `web-2` with uid `pod-<ordinal>`, and one claim in state `resize`.
fn replica(ordinal: u32, health: Health, resize: Resize) -> Replica {
    Replica {
        index: ordinal as usize,
        ordinal,
        pod: Some(PodState {
            name: format!("web-{ordinal}"),
            uid: format!("pod-{ordinal}"),
            revision: Some("web-2".into()),
            health,
            ready_since: Some(at(0)),
            created: Some(at(0)),
        }),
        backoff: None,
        claims: vec![Claim {
            name: format!("data-web-{ordinal}"),
            uid: Some(format!("claim-{ordinal}")),
            resource_version: Some("7".into()),
            request: Some("2Gi".into()),
            resize,
            record: None,
        }],
    }
}

/// Waiting for a restart since `seconds_ago` before [`settings`]' now.
fn waits(seconds_ago: i64) -> Resize {
    Resize::WaitsForRestart {
        since: Some(at(1000 - seconds_ago)),
    }
}

fn recorded(mut r: Replica, pod_uid: &str) -> Replica {
    r.claims[0].record = Some(Record {
        pod: r.pod.as_ref().map_or("web-x".into(), |p| p.name.clone()),
        pod_uid: pod_uid.into(),
        at: at(900),
        size: Some("2Gi".into()),
    });
    r
}

fn with_pod(mut r: Replica, f: impl FnOnce(&mut PodState)) -> Replica {
    if let Some(pod) = r.pod.as_mut() {
        f(pod);
    }
    r
}

/// `(ordinal, what)` of each step: `evict`, `clear`, `still`, or the wait's name.
fn summary(plan: &Plan) -> Vec<(u32, String)> {
    plan.steps
        .iter()
        .map(|s| match s {
            Step::Evict { ordinal, .. } => (*ordinal, "evict".to_owned()),
            Step::Clear { ordinal, why, .. } => (
                *ordinal,
                match why {
                    Cleared::Finished => "clear",
                    Cleared::OptedOut => "clear:opted-out",
                    Cleared::OnDelete => "clear:on-delete",
                    Cleared::NoLongerWaits => "clear:no-longer-waits",
                    Cleared::BeingReplaced => "clear:being-replaced",
                    Cleared::Partition => "clear:partition",
                    Cleared::Superseded => "clear:superseded",
                }
                .to_owned(),
            ),
            Step::StillWaiting { ordinal, .. } => (*ordinal, "still".to_owned()),
            Step::Waiting { ordinal, why, .. } => (
                *ordinal,
                match why {
                    Wait::NotOptedIn => "not-opted-in",
                    Wait::OnDelete => "on-delete",
                    Wait::Partition => "partition",
                    Wait::BeingReplaced => "being-replaced",
                    Wait::Budget => "budget",
                    Wait::Grace { .. } => "grace",
                    Wait::Refused { .. } => "refused",
                    Wait::NotObserved => "not-observed",
                }
                .to_owned(),
            ),
        })
        .collect()
}

struct Case {
    name: &'static str,
    settings: Settings,
    replicas: Vec<Replica>,
    want: Vec<(u32, &'static str)>,
}

#[test]
fn which_pod_is_restarted_when() {
    use Health::{Available, AvailableIn, Missing, NotReady, Terminating};
    let up = |n| replica(n, Available, Resize::Done);
    let stuck = |n| replica(n, Available, waits(120));
    let cases = vec![
        Case {
            name: "one claim past the grace: its pod",
            settings: settings(),
            replicas: vec![up(0), up(1), stuck(2)],
            want: vec![(2, "evict")],
        },
        Case {
            name: "a condition that reads exactly a grace ago may be up to a second younger: not yet",
            settings: settings(),
            replicas: vec![replica(1, Available, waits(60))],
            want: vec![(1, "grace")],
        },
        Case {
            name: "a second past that: its pod",
            settings: settings(),
            replicas: vec![replica(1, Available, waits(61))],
            want: vec![(1, "evict")],
        },
        Case {
            name: "within the grace: nothing yet (an online volume finishes meanwhile)",
            settings: settings(),
            replicas: vec![up(0), replica(1, Available, waits(10))],
            want: vec![(1, "grace")],
        },
        Case {
            name: "highest ordinal first, one at a time with a budget of 1",
            settings: settings(),
            replicas: vec![stuck(0), stuck(1), stuck(2)],
            want: vec![(2, "evict"), (1, "budget"), (0, "budget")],
        },
        Case {
            name: "a budget of 2: two at once",
            settings: Settings {
                max_unavailable: 2,
                ..settings()
            },
            replicas: vec![stuck(0), stuck(1), stuck(2)],
            want: vec![(2, "evict"), (1, "evict"), (0, "budget")],
        },
        Case {
            name: "a replica down for another reason takes the budget",
            settings: settings(),
            replicas: vec![stuck(0), replica(1, NotReady, Resize::Done)],
            want: vec![(0, "budget")],
        },
        Case {
            name: "a replica already down is restarted at no cost",
            settings: settings(),
            replicas: vec![replica(0, NotReady, waits(120)), stuck(1)],
            want: vec![(1, "budget"), (0, "evict")],
        },
        Case {
            name: "below the partition: never",
            settings: Settings {
                partition: 2,
                ..settings()
            },
            replicas: vec![stuck(0), up(1), stuck(2)],
            want: vec![(2, "evict"), (0, "partition")],
        },
        Case {
            name: "OnDelete: the user deletes pods",
            settings: Settings {
                rolling: false,
                ..settings()
            },
            replicas: vec![stuck(0), stuck(1)],
            want: vec![(1, "on-delete"), (0, "on-delete")],
        },
        Case {
            name: "not opted in: said, never done",
            settings: Settings {
                restart: false,
                ..settings()
            },
            replicas: vec![stuck(0)],
            want: vec![(0, "not-opted-in")],
        },
        Case {
            name: "a pod template rollout replaces the pod anyway: waited for",
            settings: settings(),
            replicas: vec![with_pod(stuck(1), |p| p.revision = Some("web-1".into()))],
            want: vec![(1, "being-replaced")],
        },
        Case {
            name: "a pod terminating or gone is being re-created: waited for",
            settings: settings(),
            replicas: vec![
                replica(0, Terminating, waits(120)),
                replica(1, Missing, waits(120)),
            ],
            want: vec![(1, "being-replaced"), (0, "being-replaced")],
        },
        Case {
            name: "a recorded restart whose pod is still there: the same pod again (a crash)",
            settings: settings(),
            replicas: vec![recorded(stuck(1), "pod-1"), stuck(0)],
            want: vec![(1, "evict"), (0, "budget")],
        },
        Case {
            name: "restarting: its new pod not available yet holds the budget",
            settings: settings(),
            replicas: vec![
                recorded(replica(1, NotReady, Resize::InProgress), "pod-old"),
                stuck(0),
            ],
            want: vec![(0, "budget")],
        },
        Case {
            name: "ready but not for minReadySeconds: still restarting",
            settings: settings(),
            replicas: vec![
                recorded(
                    replica(1, AvailableIn(Duration::from_secs(5)), Resize::Done),
                    "pod-old",
                ),
                stuck(0),
            ],
            want: vec![(0, "budget")],
        },
        Case {
            name: "finished: the record goes and the next one starts",
            settings: settings(),
            replicas: vec![recorded(up(1), "pod-old"), stuck(0)],
            want: vec![(1, "clear"), (0, "evict")],
        },
        Case {
            name: "the new pod is up and the file system still waits: said, not restarted again",
            settings: settings(),
            replicas: vec![recorded(stuck(1), "pod-old")],
            want: vec![(1, "still")],
        },
        Case {
            name: "the new pod just turned Ready and the kubelet has not cleared the condition yet: still restarting",
            settings: settings(),
            replicas: vec![
                recorded(
                    with_pod(stuck(1), |p| p.ready_since = Some(at(990))),
                    "pod-old",
                ),
                stuck(0),
            ],
            want: vec![(0, "budget")],
        },
        Case {
            name: "a new pod whose Ready time reads exactly a grace ago may have turned Ready up to a second later: still restarting",
            settings: settings(),
            replicas: vec![recorded(
                with_pod(stuck(1), |p| p.ready_since = Some(at(940))),
                "pod-old",
            )],
            want: vec![],
        },
        Case {
            name: "a second past that: said",
            settings: settings(),
            replicas: vec![recorded(
                with_pod(stuck(1), |p| p.ready_since = Some(at(939))),
                "pod-old",
            )],
            want: vec![(1, "still")],
        },
        Case {
            name: "a refused eviction waits out its backoff, and holds the budget",
            settings: settings(),
            replicas: vec![
                Replica {
                    backoff: Some(Duration::from_secs(4)),
                    ..recorded(stuck(2), "pod-2")
                },
                stuck(1),
            ],
            want: vec![(2, "refused"), (1, "budget")],
        },
        Case {
            name: "past its backoff: asked again",
            settings: settings(),
            replicas: vec![recorded(stuck(2), "pod-2"), stuck(1)],
            want: vec![(2, "evict"), (1, "budget")],
        },
        Case {
            name: "a pod that turned Ready after the condition had its volume grown at mount: the grace runs from then",
            settings: settings(),
            replicas: vec![with_pod(stuck(1), |p| p.ready_since = Some(at(990)))],
            want: vec![(1, "grace")],
        },
        Case {
            name: "online expansion in progress: no restart",
            settings: settings(),
            replicas: vec![replica(0, Available, Resize::InProgress)],
            want: vec![],
        },
        // A record is a promise, not an order: the same pod is asked again only while the
        // restart still applies, within the budget; otherwise the record goes, said.
        Case {
            name: "opted out while an eviction was refused: the record goes, no eviction",
            settings: Settings {
                restart: false,
                ..settings()
            },
            replicas: vec![Replica {
                backoff: Some(Duration::from_secs(4)),
                ..recorded(stuck(2), "pod-2")
            }],
            want: vec![(2, "clear:opted-out")],
        },
        Case {
            name: "opted out with the backoff over: the record goes, no eviction",
            settings: Settings {
                restart: false,
                ..settings()
            },
            replicas: vec![recorded(stuck(2), "pod-2")],
            want: vec![(2, "clear:opted-out")],
        },
        Case {
            name: "the claim finished growing online while its eviction was refused: the record goes",
            settings: settings(),
            replicas: vec![recorded(up(2), "pod-2")],
            want: vec![(2, "clear:no-longer-waits")],
        },
        Case {
            name: "another replica went down while an eviction was refused: the same pod waits for the budget",
            settings: settings(),
            replicas: vec![
                recorded(stuck(2), "pod-2"),
                replica(0, NotReady, Resize::Done),
            ],
            want: vec![(2, "budget")],
        },
        Case {
            name: "a recorded pod that is already down is asked again at no cost",
            settings: settings(),
            replicas: vec![
                recorded(replica(2, NotReady, waits(120)), "pod-2"),
                replica(0, NotReady, Resize::Done),
            ],
            want: vec![(2, "evict")],
        },
        Case {
            name: "the record's own replica is charged once: budget 1, it alone is asked again",
            settings: settings(),
            replicas: vec![recorded(stuck(2), "pod-2"), up(1), up(0)],
            want: vec![(2, "evict")],
        },
        Case {
            name: "updateStrategy became OnDelete: the record goes",
            settings: Settings {
                rolling: false,
                ..settings()
            },
            replicas: vec![recorded(stuck(1), "pod-1")],
            want: vec![(1, "clear:on-delete")],
        },
        Case {
            name: "the partition moved above a recorded replica: the record goes",
            settings: Settings {
                partition: 2,
                ..settings()
            },
            replicas: vec![recorded(stuck(1), "pod-1")],
            want: vec![(1, "clear:partition")],
        },
        Case {
            name: "a pod template rollout replaces a recorded pod: its re-creation is the restart",
            settings: settings(),
            replicas: vec![recorded(
                with_pod(stuck(1), |p| p.revision = Some("web-1".into())),
                "pod-1",
            )],
            want: vec![(1, "clear:being-replaced")],
        },
        Case {
            name: "a pod template rollout in progress takes the budget first (budget 1)",
            settings: settings(),
            replicas: vec![
                stuck(2),
                with_pod(up(1), |p| p.revision = Some("web-1".into())),
                up(0),
            ],
            want: vec![(2, "budget")],
        },
        Case {
            name: "a pod template rollout in progress: what it leaves of the budget restarts (budget 2)",
            settings: Settings {
                max_unavailable: 2,
                ..settings()
            },
            replicas: vec![
                stuck(2),
                with_pod(up(1), |p| p.revision = Some("web-1".into())),
                stuck(0),
            ],
            want: vec![(2, "evict"), (0, "budget")],
        },
        Case {
            name: "below the partition, an old revision is not the rolling update's: no budget taken",
            settings: Settings {
                partition: 1,
                ..settings()
            },
            replicas: vec![
                stuck(2),
                with_pod(up(0), |p| p.revision = Some("web-1".into())),
            ],
            want: vec![(2, "evict")],
        },
        Case {
            name: "the StatefulSet controller has not seen the latest spec: nothing restarted",
            settings: Settings {
                observed: false,
                ..settings()
            },
            replicas: vec![stuck(2), recorded(stuck(1), "pod-1")],
            want: vec![(2, "not-observed"), (1, "not-observed")],
        },
        Case {
            name: "a pod made after the claim began waiting and not Ready yet is the replacement: never evicted",
            settings: settings(),
            replicas: vec![with_pod(replica(1, NotReady, waits(120)), |p| {
                p.created = Some(at(950));
                p.ready_since = None;
            })],
            want: vec![(1, "being-replaced")],
        },
        Case {
            name: "a pod made before the claim began waiting and down: restarted at no cost",
            settings: settings(),
            replicas: vec![with_pod(replica(1, NotReady, waits(120)), |p| {
                p.created = Some(at(100));
            })],
            want: vec![(1, "evict")],
        },
        Case {
            name: "a new resize after a stuck one: a new restart, its record written over",
            settings: settings(),
            replicas: vec![{
                let mut r = recorded(stuck(1), "pod-old");
                r.claims[0].request = Some("3Gi".into());
                r
            }],
            want: vec![(1, "evict")],
        },
        Case {
            name: "a record of an earlier size on a claim that no longer waits: it goes",
            settings: settings(),
            replicas: vec![{
                let mut r = recorded(up(1), "pod-old");
                r.claims[0].request = Some("3Gi".into());
                r
            }],
            want: vec![(1, "clear:superseded")],
        },
        Case {
            name: "a record written before sizes were kept stands for whatever the claim asks",
            settings: settings(),
            replicas: vec![{
                let mut r = recorded(stuck(1), "pod-old");
                if let Some(record) = r.claims[0].record.as_mut() {
                    record.size = None;
                }
                r
            }],
            want: vec![(1, "still")],
        },
    ];
    for case in cases {
        let plan = super::plan(&case.settings, &case.replicas);
        let want: Vec<(u32, String)> = case
            .want
            .iter()
            .map(|(n, w)| (*n, (*w).to_owned()))
            .collect();
        assert_eq!(summary(&plan), want, "{}: {plan:?}", case.name);
    }
}

#[test]
fn an_eviction_names_the_pod_uid_and_the_claims_to_record_first() {
    let plan = super::plan(&settings(), &[replica(3, Health::Available, waits(61))]);
    assert_eq!(
        plan.steps,
        [Step::Evict {
            ordinal: 3,
            pod: "web-3".into(),
            pod_uid: "pod-3".into(),
            record_on: vec![RecordOn {
                claim: "data-web-3".into(),
                uid: Some("claim-3".into()),
                resource_version: Some("7".into()),
                request: Some("2Gi".into()),
            }],
        }]
    );
    // Resent after a crash: the recorded uid, nothing recorded again.
    let plan = super::plan(
        &settings(),
        &[recorded(replica(3, Health::Available, waits(61)), "pod-3")],
    );
    assert!(
        matches!(&plan.steps[..], [Step::Evict { pod_uid, record_on, .. }] if pod_uid == "pod-3" && record_on.is_empty()),
        "{plan:?}"
    );
}

#[test]
fn the_grace_and_min_ready_seconds_say_when_to_look_again() {
    // 45 s read back may be 44 s and a fraction (whole-second times): 16 s to go.
    let plan = super::plan(&settings(), &[replica(0, Health::Available, waits(45))]);
    assert_eq!(plan.recheck_after, Some(Duration::from_secs(16)));
    let plan = super::plan(
        &settings(),
        &[replica(
            0,
            Health::AvailableIn(Duration::from_secs(3)),
            Resize::Done,
        )],
    );
    assert_eq!(plan.recheck_after, Some(Duration::from_secs(3)));
    // A condition without a transition time: a whole grace from now.
    let plan = super::plan(
        &settings(),
        &[replica(
            0,
            Health::Available,
            Resize::WaitsForRestart { since: None },
        )],
    );
    assert_eq!(summary(&plan), [(0, "grace".to_owned())]);
    assert_eq!(plan.recheck_after, Some(GRACE));
    // A new pod Ready for 50 s (49 s at least) while its recorded claim still waits: stuck in
    // 11 s.
    let new_pod = recorded(
        with_pod(replica(0, Health::Available, waits(120)), |p| {
            p.ready_since = Some(at(950));
        }),
        "pod-old",
    );
    let plan = super::plan(&settings(), &[new_pod]);
    assert_eq!(summary(&plan), []);
    assert_eq!(plan.recheck_after, Some(Duration::from_secs(11)));
    // A refusal's backoff: looked at again when it ends.
    let refused = Replica {
        backoff: Some(Duration::from_secs(4)),
        ..recorded(replica(0, Health::Available, waits(120)), "pod-0")
    };
    let plan = super::plan(&settings(), &[refused]);
    assert_eq!(plan.recheck_after, Some(Duration::from_secs(4)));
}

#[test]
fn claims_tell_their_resize_and_record() {
    let claim = |request: &str, capacity: &str, conditions: serde_json::Value| {
        serde_json::from_value::<PersistentVolumeClaim>(serde_json::json!({
            "metadata": {"name": "data-web-0", "annotations": {
                "stateful-admission.io/resize-restart":
                    "{\"pod\":\"web-0\",\"podUID\":\"u-1\",\"at\":\"2027-01-15T08:00:00Z\"}"}},
            "spec": {"resources": {"requests": {"storage": request}}},
            "status": {"phase": "Bound", "capacity": {"storage": capacity},
                       "conditions": conditions}}))
        .expect("a claim")
    };
    let pending = serde_json::json!([{"type": "FileSystemResizePending", "status": "True",
        "lastTransitionTime": "2027-01-15T07:59:00Z"}]);
    assert_eq!(
        Resize::of(&claim("2Gi", "1Gi", pending.clone())),
        Resize::WaitsForRestart {
            since: Some("2027-01-15T07:59:00Z".parse().expect("time"))
        }
    );
    assert_eq!(
        Resize::of(&claim("2Gi", "1Gi", serde_json::json!([]))),
        Resize::InProgress
    );
    assert_eq!(Resize::of(&claim("2Gi", "2Gi", pending)), Resize::Done);
    let record = Record::of(&claim("1Gi", "1Gi", serde_json::json!([]))).expect("a record");
    assert_eq!(record.pod_uid, "u-1");
    assert_eq!(Record::of(&PersistentVolumeClaim::default()), None);
    // A record that does not parse is no record (the claim's own annotation, written by hand).
    let mut hostile = claim("1Gi", "1Gi", serde_json::json!([]));
    hostile
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(names::RESIZE_RESTART.into(), "{not json".repeat(1000));
    assert_eq!(Record::of(&hostile), None);
}

#[test]
fn an_eviction_is_written_ahead_on_each_claim_then_sent_with_the_pod_uid() {
    let set = crate::controller::action::set_reference("db", "web", Some("set-uid"));
    let plan = Plan {
        steps: vec![
            Step::Evict {
                ordinal: 2,
                pod: "web-2".into(),
                pod_uid: "pod-2".into(),
                record_on: vec![
                    RecordOn {
                        claim: "data-web-2".into(),
                        uid: Some("c-2".into()),
                        resource_version: Some("7".into()),
                        request: Some("2Gi".into()),
                    },
                    RecordOn {
                        claim: "logs-web-2".into(),
                        uid: Some("l-2".into()),
                        resource_version: Some("8".into()),
                        request: Some("5Gi".into()),
                    },
                ],
            },
            Step::Evict {
                ordinal: 1,
                pod: "web-1".into(),
                pod_uid: "pod-1".into(),
                record_on: Vec::new(),
            },
            Step::Clear {
                ordinal: 0,
                claim: "data-web-0".into(),
                uid: Some("c-0".into()),
                resource_version: Some("9".into()),
                why: Cleared::Finished,
            },
            Step::Clear {
                ordinal: 5,
                claim: "data-web-5".into(),
                uid: Some("c-5".into()),
                resource_version: Some("3".into()),
                why: Cleared::OptedOut,
            },
            Step::Waiting {
                ordinal: 3,
                pod: Some("web-3".into()),
                claims: vec!["data-web-3".into()],
                why: Wait::NotOptedIn,
            },
            Step::Waiting {
                ordinal: 4,
                pod: Some("web-4".into()),
                claims: vec!["data-web-4".into()],
                why: Wait::Budget,
            },
        ],
        recheck_after: None,
        restarting: Vec::new(),
    };
    let actions = actions("db", &set, &plan);
    let writes: Vec<&Write> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Write(w) => Some(w),
            Action::Report(_) => None,
        })
        .collect();
    let shape: Vec<(Verb, &str, After)> = writes
        .iter()
        .map(|w| (w.verb, w.target.name.as_str(), w.after))
        .collect();
    assert_eq!(
        shape,
        [
            (Verb::RecordPodRestart, "data-web-2", After::Anything),
            (Verb::RecordPodRestart, "logs-web-2", After::Done),
            (Verb::EvictPod, "web-2", After::Done),
            // A record written before (a crash in between): the eviction alone, at once.
            (Verb::EvictPod, "web-1", After::Anything),
            (Verb::RecordPodRestart, "data-web-0", After::Anything),
            (Verb::RecordPodRestart, "data-web-5", After::Anything),
        ]
    );
    // The record: the claim's version as precondition, the pod and its uid.
    let Request::Patch(body) = &writes[0].request else {
        panic!("a patch")
    };
    assert_eq!(body["metadata"]["resourceVersion"], "7");
    let record: Record = serde_json::from_str(
        body["metadata"]["annotations"][names::RESIZE_RESTART]
            .as_str()
            .expect("a record"),
    )
    .expect("it parses");
    assert_eq!(
        (
            record.pod.as_str(),
            record.pod_uid.as_str(),
            record.size.as_deref()
        ),
        ("web-2", "pod-2", Some("2Gi"))
    );
    // Each claim's record keeps its own size.
    let Request::Patch(body) = &writes[1].request else {
        panic!("a patch")
    };
    let record: Record = serde_json::from_str(
        body["metadata"]["annotations"][names::RESIZE_RESTART]
            .as_str()
            .expect("a record"),
    )
    .expect("it parses");
    assert_eq!(record.size.as_deref(), Some("5Gi"));
    // A finished restart's record goes silently; a cancelled one's is said once it is gone.
    assert!(writes[4].on_done.is_empty());
    assert_eq!(writes[5].on_done[0].reason, "PodRestartCancelled");
    assert!(
        writes[5].on_done[0]
            .note
            .contains("data-web-5 is not made: the set no longer opts in"),
        "{}",
        writes[5].on_done[0].note
    );
    // The eviction: only that pod (uid), PodDisruptionBudgets' refusals expected.
    assert_eq!(
        writes[2].request,
        Request::Evict {
            uid: Some("pod-2".into())
        }
    );
    assert!(writes[2].expected.contains(&429));
    assert_eq!(writes[2].on_done[0].reason, "PodEvictedForResize");
    // The record removed on its version.
    let Request::Patch(body) = &writes[4].request else {
        panic!("a patch")
    };
    assert_eq!(
        body,
        &serde_json::json!({"metadata": {"resourceVersion": "9",
            "annotations": {names::RESIZE_RESTART: null}}})
    );
    // What waits for the user is said once; the budget's wait is not said (it moves on).
    let reports: Vec<&crate::controller::action::Report> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Report(r) => Some(r),
            Action::Write(_) => None,
        })
        .collect();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].reason, "PodRestartNeededForResize");
    assert!(
        reports[0].note.contains("kubectl delete pod -n db web-3")
            && reports[0]
                .note
                .contains("stateful-admission.io/restart-pods-for-resize=true"),
        "{}",
        reports[0].note
    );
    assert!(reports[0].once.is_some());
}
