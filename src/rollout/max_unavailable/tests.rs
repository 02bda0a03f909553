use jiff::SignedDuration;

use super::*;
use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSetOrdinals, StatefulSetSpec, StatefulSetStatus,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use std::collections::BTreeMap;

const SET_UID: &str = "set-uid";
const OLD: &str = "web-old";
const NEW: &str = "web-new";

fn now() -> Timestamp {
    "2026-05-01T12:00:00Z".parse().expect("timestamp")
}

/// A set of `replicas` with maxUnavailable in the annotation (as the webhook writes it
/// where the gate is off), observed by the built-in controller, updating to `NEW`.
fn set(replicas: i32, partition: i32, max_unavailable: &str) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("db".into()),
            uid: Some(SET_UID.into()),
            generation: Some(2),
            annotations: Some(BTreeMap::from([(
                names::MAX_UNAVAILABLE.to_owned(),
                max_unavailable.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: StatefulSetSpec {
            replicas: Some(replicas),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateStatefulSetStrategy {
                    partition: Some(partition),
                    max_unavailable: None,
                }),
            }),
            ..StatefulSetSpec::default()
        },
        status: Some(StatefulSetStatus {
            observed_generation: Some(2),
            update_revision: Some(NEW.into()),
            current_revision: Some(OLD.into()),
            ..StatefulSetStatus::default()
        }),
    }
}

fn with_policy(mut s: StatefulSet, policy: PodManagement) -> StatefulSet {
    s.spec.pod_management_policy = Some(policy.as_str().into());
    s
}

fn with_min_ready(mut s: StatefulSet, seconds: i32) -> StatefulSet {
    s.spec.min_ready_seconds = Some(seconds);
    s
}

/// How a test pod looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum P {
    /// Running and Ready for an hour.
    Up,
    /// Running and Ready since this many seconds.
    ReadyFor(i64),
    /// Running, not Ready.
    NotReady,
    /// Pending.
    Pending,
    /// Deletion timestamp set (still Ready).
    Terminating,
    /// No pod.
    Gone,
    /// Ready, but controlled by another owner.
    Foreign,
}

fn pod(ordinal: u32, revision: &str, p: P) -> Option<Arc<Pod>> {
    let ready_since = match p {
        P::ReadyFor(s) => now() - SignedDuration::from_secs(s),
        _ => now() - SignedDuration::from_hours(1),
    };
    let ready = matches!(p, P::Up | P::ReadyFor(_) | P::Terminating | P::Foreign);
    let owner = if p == P::Foreign { "other" } else { SET_UID };
    (p != P::Gone).then(|| {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(format!("web-{ordinal}")),
                uid: Some(format!("uid-{ordinal}")),
                resource_version: Some(format!("{}", 100 + ordinal)),
                labels: Some(BTreeMap::from([(
                    names::CONTROLLER_REVISION_HASH_LABEL.to_owned(),
                    revision.to_owned(),
                )])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "StatefulSet".into(),
                    name: "web".into(),
                    uid: owner.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                deletion_timestamp: (p == P::Terminating).then(|| Time(now())),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(
                    if p == P::Pending {
                        "Pending"
                    } else {
                        "Running"
                    }
                    .into(),
                ),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(ready_since)),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
    })
}

/// Pods `0..states.len()`, each old-revision unless listed in `new`.
fn pods(states: &[P], new: &[u32]) -> Vec<(u32, Option<Arc<Pod>>)> {
    (0u32..)
        .zip(states)
        .map(|(n, p)| {
            let revision = if new.contains(&n) { NEW } else { OLD };
            (n, pod(n, revision, *p))
        })
        .collect()
}

fn deleted(plan: &Plan) -> Vec<u32> {
    plan.deletions.iter().map(|d| d.ordinal).collect()
}

fn plan_for(s: &StatefulSet, pods: &[(u32, Option<Arc<Pod>>)]) -> Plan {
    let rollout = rollout(s).expect("the driver handles this set");
    plan(&rollout, pods, now())
}

/// Upstream `TestStatefulSetControlRollingUpdateWithMaxUnavailableInOrderedModeVerifyInvariant`:
/// 6 replicas, partition 3, maxUnavailable 2, every pod Running and Ready at the old
/// revision except the terminating ones; upstream deletes `2 - terminating` pods (at least
/// 0). It calls the rolling step directly, which our `Parallel` plan is; `OrderedReady`
/// first waits for every replica (upstream's `processReplica`), except that a batch joins
/// the top pod's replacement the built-in controller started (`[5]` terminating).
#[test]
fn terminating_pods_use_the_budget_like_upstream() {
    let rows: [(&[u32], &[u32], &[u32]); 10] = [
        // terminating → deleted (Parallel), deleted (OrderedReady)
        (&[], &[5, 4], &[5, 4]),
        (&[5], &[4], &[4]),
        (&[3], &[5], &[]),
        (&[4], &[5], &[]),
        (&[5, 4], &[], &[]),
        (&[5, 3], &[], &[]),
        (&[4, 3], &[], &[]),
        (&[5, 4, 3], &[], &[]),
        // below the partition: counted, never touched
        (&[2], &[5], &[]),
        (&[1], &[5], &[]),
    ];
    for (terminating, want_parallel, want_ordered) in rows {
        let states: Vec<P> = (0..6)
            .map(|n| {
                if terminating.contains(&n) {
                    P::Terminating
                } else {
                    P::Up
                }
            })
            .collect();
        let pods = pods(&states, &[]);
        for (policy, want) in [
            (PodManagement::Parallel, want_parallel),
            (PodManagement::OrderedReady, want_ordered),
        ] {
            let plan = plan_for(&with_policy(set(6, 3, "2"), policy), &pods);
            assert_eq!(
                deleted(&plan),
                want,
                "{policy:?}, terminating {terminating:?}"
            );
            assert_eq!(plan.unavailable, terminating.len());
            assert!(
                plan.deletions.iter().all(|d| !d.already_unavailable),
                "{policy:?}: terminating pods are never deleted again"
            );
        }
    }
}

/// Upstream `TestStatefulSetControlRollingUpdateWithMaxUnavailable`, step by step:
/// 6 replicas, partition 3, maxUnavailable 2, for both policies.
#[test]
fn rolling_update_steps_follow_upstream() {
    use P::*;
    type Row = (&'static str, [P; 6], &'static [u32], &'static [u32]);
    let parallel: [Row; 4] = [
        ("all up: 5 and 4 go", [Up; 6], &[], &[5, 4]),
        (
            "4 ready, 5 still starting: 3 goes",
            [Up, Up, Up, Up, Up, NotReady],
            &[4, 5],
            &[3],
        ),
        (
            "both re-created, not ready: budget used",
            [Up, Up, Up, Up, Pending, Pending],
            &[4, 5],
            &[],
        ),
        (
            "3, 4, 5 updated and ready: nothing below the partition",
            [Up; 6],
            &[3, 4, 5],
            &[],
        ),
    ];
    let ordered: [Row; 4] = [
        ("all up: 5 and 4 go", [Up; 6], &[], &[5, 4]),
        (
            "4 ready, 5 not yet re-created: wait",
            [Up, Up, Up, Up, Up, Gone],
            &[4],
            &[],
        ),
        ("4 and 5 ready: 3 goes", [Up; 6], &[4, 5], &[3]),
        ("3, 4, 5 updated and ready", [Up; 6], &[3, 4, 5], &[]),
    ];
    for (policy, rows) in [
        (PodManagement::Parallel, parallel),
        (PodManagement::OrderedReady, ordered),
    ] {
        for (step, states, new, want) in rows {
            let plan = plan_for(&with_policy(set(6, 3, "2"), policy), &pods(&states, new));
            assert_eq!(deleted(&plan), want, "{policy:?}: {step}");
        }
    }
}

/// With the gate off the built-in controller deletes the top old pod itself as soon as
/// every replica is available; an `OrderedReady` batch joins that deletion (counting it)
/// instead of waiting for it, and only that.
#[test]
fn ordered_ready_batches_join_the_builtin_controllers_deletion() {
    use P::*;
    type Row = (
        &'static str,
        [P; 6],
        &'static [u32],
        &'static str,
        &'static [u32],
    );
    let rows: [Row; 8] = [
        (
            "top pod deleted by the built-in controller",
            [Up, Up, Up, Up, Up, Gone],
            &[],
            "2",
            &[4],
        ),
        (
            "top pod terminating at the old revision",
            [Up, Up, Up, Up, Up, Terminating],
            &[],
            "2",
            &[4],
        ),
        (
            "a larger budget joins with more",
            [Up, Up, Up, Up, Up, Gone],
            &[],
            "3",
            &[4, 3],
        ),
        (
            "the re-created top pod is not ready yet",
            [Up, Up, Up, Up, Up, Pending],
            &[5],
            "2",
            &[],
        ),
        (
            "a new pod terminating is no update step",
            [Up, Up, Up, Up, Up, Terminating],
            &[5],
            "2",
            &[],
        ),
        (
            "the last batch is not done: 5 gone above the new 4",
            [Up, Up, Up, Up, Up, Gone],
            &[4],
            "2",
            &[],
        ),
        (
            "a replica gone far below the next pod",
            [Up, Up, Gone, Up, Up, Up],
            &[],
            "2",
            &[],
        ),
        (
            "a pod of another owner in the top place",
            [Up, Up, Up, Up, Up, Foreign],
            &[],
            "2",
            &[],
        ),
    ];
    for (name, states, new, max, want) in rows {
        let s = with_policy(set(6, 0, max), PodManagement::OrderedReady);
        let plan = plan_for(&s, &pods(&states, new));
        assert_eq!(deleted(&plan), want, "{name}");
        assert!(
            plan.unavailable + plan.deletions.len() <= plan.max_unavailable || want.is_empty(),
            "{name}"
        );
    }
}

/// Upstream `TestStatefulSetMetrics`: effective maxUnavailable (percent rounds down) and
/// the unavailable count; OrderedReady rows make pods not Ready, Parallel rows terminating.
/// Rows resolving to 1 are left to the built-in controller here, so the gauge values are
/// checked on the resolution alone.
#[test]
fn gauges_match_upstream_metrics_table() {
    use IntOrString::{Int, String as Str};
    let rows: [(&str, i32, IntOrString, PodManagement, usize, i64); 8] = [
        (
            "ordered pods within limit",
            5,
            Int(2),
            PodManagement::OrderedReady,
            1,
            2,
        ),
        (
            "parallel pods exceeding limit",
            10,
            Str("20%".into()),
            PodManagement::Parallel,
            3,
            2,
        ),
        (
            "ordered pods exactly at limit",
            6,
            Int(3),
            PodManagement::OrderedReady,
            3,
            3,
        ),
        (
            "parallel pods all available",
            4,
            Int(1),
            PodManagement::Parallel,
            0,
            1,
        ),
        (
            "ordered pods with percentage",
            8,
            Str("25%".into()),
            PodManagement::OrderedReady,
            1,
            2,
        ),
        (
            "parallel pods with large percentage",
            5,
            Str("80%".into()),
            PodManagement::Parallel,
            4,
            4,
        ),
        (
            "small statefulset with maxUnavailable 1",
            2,
            Int(1),
            PodManagement::OrderedReady,
            1,
            1,
        ),
        (
            "single pod statefulset",
            1,
            Int(1),
            PodManagement::Parallel,
            1,
            1,
        ),
    ];
    for (name, replicas, value, policy, unavailable, want_max) in rows {
        let mut s = with_policy(set(replicas, 0, "1"), policy);
        if let Some(r) = s
            .spec
            .update_strategy
            .as_mut()
            .and_then(|u| u.rolling_update.as_mut())
        {
            r.max_unavailable = Some(value);
        }
        let down = if policy == PodManagement::Parallel {
            P::Terminating
        } else {
            P::NotReady
        };
        let states: Vec<P> = (0..replicas as usize)
            .map(|n| if n < unavailable { down } else { P::Up })
            .collect();
        match rollout(&s) {
            Ok(r) => {
                assert_eq!(r.source, Source::Native, "{name}");
                let plan = plan(&r, &pods(&states, &[]), now());
                assert_eq!(plan.max_unavailable as i64, want_max, "{name}");
                assert_eq!(plan.unavailable, unavailable, "{name}");
                assert!(
                    plan.unavailable + plan.deletions.len() <= plan.max_unavailable
                        || plan.deletions.is_empty(),
                    "{name}: never beyond the budget"
                );
            }
            Err(skip) => {
                assert_eq!(want_max, 1, "{name}");
                assert_eq!(skip, Skip::AtMostOne, "{name}");
            }
        }
    }
}

/// The 1.37 change for `Parallel` (kubernetes#137666): old pods that are unavailable
/// anyway are replaced first and cost no budget; `OrderedReady` still waits.
#[test]
fn broken_old_pods_are_replaced_first_under_parallel() {
    use P::*;
    type Row = (
        &'static str,
        &'static [P],
        i32,
        &'static str,
        &'static [u32],
    );
    let rows: [Row; 6] = [
        (
            "every pod broken at the old revision: the rollout is not stuck",
            &[NotReady, NotReady, NotReady],
            0,
            "2",
            &[2, 1],
        ),
        (
            "broken pods at the bottom go before good ones at the top",
            &[NotReady, NotReady, NotReady, Up, Up],
            0,
            "2",
            &[2, 1],
        ),
        (
            "one broken: it goes, and the budget left takes the top one",
            &[Up, NotReady, Up, Up, Up, Up],
            0,
            "2",
            &[1, 5],
        ),
        (
            "broken below the partition: counted, not touched",
            &[Up, NotReady, Up, Up, Up, Up],
            3,
            "2",
            &[5],
        ),
        (
            "pending and gone pods are unavailable too",
            &[Up, Up, Pending, Gone, Up, Up],
            0,
            "3",
            &[2, 5],
        ),
        (
            "terminating and broken: the broken one is replaced, no budget left",
            &[Terminating, Terminating, NotReady, Up],
            0,
            "2",
            &[2],
        ),
    ];
    for (name, states, partition, max, want) in rows {
        let replicas = states.len() as i32;
        let pods = pods(states, &[]);
        let parallel = with_policy(set(replicas, partition, max), PodManagement::Parallel);
        let plan = plan_for(&parallel, &pods);
        assert_eq!(deleted(&plan), want, "{name}");
        let healthy_deleted = plan
            .deletions
            .iter()
            .filter(|d| !d.already_unavailable)
            .count();
        assert!(
            plan.unavailable + healthy_deleted <= plan.max_unavailable || healthy_deleted == 0,
            "{name}: unavailable stays within maxUnavailable"
        );
        let ordered = with_policy(set(replicas, partition, max), PodManagement::OrderedReady);
        assert_eq!(
            deleted(&plan_for(&ordered, &pods)),
            Vec::<u32>::new(),
            "{name}: OrderedReady waits for every replica"
        );
    }
}

/// Upstream `TestStatefulSetRollingUpdateRespectsMinReadySeconds` and
/// `TestStatefulSetPartitionRollingUpdateWithMinReadySeconds`: pods Ready for less than
/// `minReadySeconds` are unavailable; the plan says when to look again.
#[test]
fn min_ready_seconds_hold_the_rollout() {
    for policy in [PodManagement::OrderedReady, PodManagement::Parallel] {
        let s = with_min_ready(with_policy(set(4, 2, "2"), policy), 30);
        let young = pods(&[P::ReadyFor(10); 4], &[]);
        let plan = plan_for(&s, &young);
        assert_eq!(plan.unavailable, 4, "{policy:?}");
        assert_eq!(plan.recheck_after, Some(Duration::from_secs(21)));
        // OrderedReady (upstream's tests) waits; under Parallel old pods that are not yet
        // available count as broken ones and are replaced, at most maxUnavailable a step.
        let want: &[u32] = match policy {
            PodManagement::OrderedReady => &[],
            PodManagement::Parallel => &[3, 2],
        };
        assert_eq!(deleted(&plan), want, "{policy:?}");

        let mixed = pods(
            &[
                P::ReadyFor(60),
                P::ReadyFor(60),
                P::ReadyFor(60),
                P::ReadyFor(25),
            ],
            &[],
        );
        let plan = plan_for(&s, &mixed);
        assert_eq!(plan.unavailable, 1, "{policy:?}");
        assert_eq!(plan.recheck_after, Some(Duration::from_secs(6)));
        // OrderedReady waits for pod 3; Parallel replaces it first (unavailable anyway)
        // and takes 2 with the budget left.
        let want: &[u32] = match policy {
            PodManagement::OrderedReady => &[],
            PodManagement::Parallel => &[3, 2],
        };
        assert_eq!(deleted(&plan), want, "{policy:?}");

        let old_enough = pods(&[P::ReadyFor(31); 4], &[]);
        let plan = plan_for(&s, &old_enough);
        assert_eq!((plan.unavailable, plan.recheck_after), (0, None));
        assert_eq!(deleted(&plan), [3, 2], "{policy:?}");
    }
    // Exactly minReadySeconds is not yet available (upstream: strictly before now).
    let s = with_min_ready(set(3, 0, "2"), 30);
    let plan = plan_for(&s, &pods(&[P::ReadyFor(30); 3], &[]));
    assert_eq!(plan.unavailable, 3);
    assert_eq!(plan.recheck_after, Some(Duration::from_secs(1)));
}

#[test]
fn pods_the_set_does_not_control_count_as_missing_and_stay() {
    let states = [P::Up, P::Up, P::Up, P::Foreign];
    let plan = plan_for(
        &with_policy(set(4, 0, "2"), PodManagement::Parallel),
        &pods(&states, &[]),
    );
    assert_eq!(plan.unavailable, 1);
    assert_eq!(deleted(&plan), [2]);
}

#[test]
fn deletions_carry_preconditions_and_the_budget_is_never_exceeded() {
    let plan = plan_for(&set(10, 0, "30%"), &pods(&[P::Up; 10], &[]));
    assert_eq!(plan.max_unavailable, 3);
    assert_eq!(deleted(&plan), [9, 8, 7]);
    assert_eq!(plan.outdated, 10);
    assert_eq!(plan.hold, Hold::BudgetUsed);
    assert_eq!(
        plan.deletions[0],
        Deletion {
            ordinal: 9,
            name: "web-9".into(),
            uid: "uid-9".into(),
            resource_version: "109".into(),
            already_unavailable: false,
        }
    );
    // More budget than pods to update: only the old ones at or above the partition go.
    let plan = plan_for(&set(4, 1, "100%"), &pods(&[P::Up; 4], &[3]));
    assert_eq!(deleted(&plan), [2, 1]);
    assert_eq!(plan.hold, Hold::Nothing);
    // Done: nothing old is left.
    let plan = plan_for(&set(4, 0, "2"), &pods(&[P::Up; 4], &[0, 1, 2, 3]));
    assert_eq!(
        (deleted(&plan), plan.outdated, plan.hold),
        (vec![], 0, Hold::Nothing)
    );
    // A pod without the revision label is not at the update revision (upstream: "").
    let mut unlabelled = pods(&[P::Up; 3], &[0, 1, 2]);
    if let Some(p) = unlabelled[1].1.as_mut() {
        Arc::make_mut(p).metadata.labels = None;
    }
    assert_eq!(deleted(&plan_for(&set(3, 0, "2"), &unlabelled)), [1]);
}

/// Positions, not ordinals, are compared with the partition (upstream's `replicas`
/// slice starts at `spec.ordinals.start`).
#[test]
fn the_partition_counts_from_the_start_ordinal() {
    let mut s = set(4, 2, "2");
    s.spec.ordinals = Some(StatefulSetOrdinals { start: Some(10) });
    let states = [P::Up; 4];
    let pods: Vec<(u32, Option<Arc<Pod>>)> = (10u32..)
        .zip(states)
        .map(|(n, p)| (n, pod(n, OLD, p)))
        .collect();
    assert_eq!(deleted(&plan_for(&s, &pods)), [13, 12]);
}

#[test]
fn sets_the_driver_leaves_alone() {
    let native = |v: IntOrString| {
        let mut s = set(6, 0, "3");
        if let Some(r) = s
            .spec
            .update_strategy
            .as_mut()
            .and_then(|u| u.rolling_update.as_mut())
        {
            r.max_unavailable = Some(v);
        }
        s
    };
    let mut deleting = set(6, 0, "2");
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    let mut on_delete = set(6, 0, "2");
    on_delete.spec.update_strategy = Some(StatefulSetUpdateStrategy {
        type_: Some("OnDelete".into()),
        rolling_update: None,
    });
    let mut unset = set(6, 0, "2");
    unset.metadata.annotations = None;
    let mut stale = set(6, 0, "2");
    stale.metadata.generation = Some(3);
    let mut no_revision = set(6, 0, "2");
    if let Some(st) = no_revision.status.as_mut() {
        st.update_revision = None;
    }
    let mut no_status = set(6, 0, "2");
    no_status.status = None;
    let mut no_uid = set(6, 0, "2");
    no_uid.metadata.uid = None;
    let invalid = "metadata.annotations[stateful-admission.io/max-unavailable]: Invalid value: 0: cannot be 0";
    let cases: Vec<(&str, StatefulSet, Skip)> = vec![
        ("being deleted", deleting, Skip::Deleting),
        ("OnDelete", on_delete, Skip::NotRollingUpdate),
        ("no maxUnavailable", unset, Skip::Unset),
        ("1", set(6, 0, "1"), Skip::AtMostOne),
        ("10% of 6 rounds down to 0, then 1", set(6, 0, "10%"), Skip::AtMostOne),
        ("invalid annotation", set(6, 0, "0"), Skip::Invalid(invalid.into())),
        (
            "hostile annotation",
            set(6, 0, "{\"not\": \"a number\"}"),
            Skip::Invalid(
                "metadata.annotations[stateful-admission.io/max-unavailable]: Invalid value: {\"not\": \"a number\"}: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%' or '93%', regex used for validation is '[0-9]+%')".into(),
            ),
        ),
        (
            "invalid native value",
            native(IntOrString::String("abc".into())),
            Skip::Invalid("spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: abc: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%' or '93%', regex used for validation is '[0-9]+%')".into()),
        ),
        ("native 1 wins over annotation 3", native(IntOrString::Int(1)), Skip::AtMostOne),
        ("partition equal to replicas", set(6, 6, "2"), Skip::Paused),
        ("partition above replicas", set(6, 9, "2"), Skip::Paused),
        ("scaled to zero", set(0, 0, "2"), Skip::Paused),
        ("spec not yet observed", stale, Skip::NotObserved),
        ("no update revision", no_revision, Skip::NoUpdateRevision),
        ("no status", no_status, Skip::NotObserved),
        ("no uid", no_uid, Skip::NoUid),
    ];
    for (name, s, want) in cases {
        assert_eq!(rollout(&s), Err(want), "{name}");
    }
    let huge = "9".repeat(100_000);
    assert!(matches!(rollout(&set(6, 0, &huge)), Err(Skip::Invalid(_))));

    // What the driver reads from a set it handles.
    let r = rollout(&native(IntOrString::String("50%".into()))).expect("handled");
    assert_eq!(
        (r.max_unavailable, r.source, r.policy, r.partition),
        (3, Source::Native, PodManagement::OrderedReady, 0)
    );
    let r = rollout(&with_min_ready(set(7, 2, "3"), 5)).expect("handled");
    assert_eq!(
        r,
        Rollout {
            uid: SET_UID.into(),
            policy: PodManagement::OrderedReady,
            replicas: 7,
            partition: 2,
            max_unavailable: 3,
            source: Source::Annotation,
            min_ready_seconds: 5,
            update_revision: NEW.into(),
            recreated_at_current_below: None,
        }
    );
}

/// `updateStrategy: {type: RollingUpdate}` without `rollingUpdate`, as the apiserver
/// stores it (defaulting adds the block only to an empty type), with the built-in
/// controller's `status.currentReplicas`.
fn without_rolling_update(mut s: StatefulSet, current_replicas: i32) -> StatefulSet {
    s.spec.update_strategy = Some(StatefulSetUpdateStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: None,
    });
    if let Some(st) = s.status.as_mut() {
        st.current_replicas = Some(current_replicas);
    }
    s
}

/// Upstream `newVersionedStatefulSetPod` re-creates a pod below `status.currentReplicas`
/// at the current revision when `rollingUpdate` is nil, and only the built-in controller's
/// own deletions lower the count first: the driver deletes no such pod (it would restart
/// twice), leaves it to the built-in one-at-a-time update and says why.
#[test]
fn pods_that_would_come_back_at_the_old_revision_are_left_alone() {
    use P::*;
    type Row = (
        &'static str,
        PodManagement,
        &'static [P],
        &'static [u32],
        i32,
        &'static [u32],
        usize,
        Hold,
    );
    let rows: [Row; 6] = [
        (
            "all old: every one would come back old",
            PodManagement::OrderedReady,
            &[Up, Up, Up, Up, Up],
            &[],
            5,
            &[],
            5,
            Hold::RecreatedAtCurrentRevision,
        ),
        (
            "the built-in controller deleted the top pod and lowered the count",
            PodManagement::OrderedReady,
            &[Up, Up, Up, Up, Gone],
            &[],
            4,
            &[],
            4,
            Hold::RecreatedAtCurrentRevision,
        ),
        (
            "halfway: the old ones are below the count",
            PodManagement::Parallel,
            &[Up, Up, Up, Up, Up],
            &[3, 4],
            3,
            &[],
            3,
            Hold::RecreatedAtCurrentRevision,
        ),
        (
            "a status the built-in controller has not lowered yet errs on the safe side",
            PodManagement::Parallel,
            &[Up, Up, Up, Up, Up],
            &[4],
            5,
            &[],
            4,
            Hold::RecreatedAtCurrentRevision,
        ),
        (
            "an old pod at or above the count comes back new: it may go",
            PodManagement::Parallel,
            &[Up, Gone, Up, Up, Up],
            &[3, 4],
            2,
            &[2],
            1,
            Hold::RecreatedAtCurrentRevision,
        ),
        (
            "done",
            PodManagement::OrderedReady,
            &[Up, Up, Up, Up, Up],
            &[0, 1, 2, 3, 4],
            0,
            &[],
            0,
            Hold::Nothing,
        ),
    ];
    for (name, policy, states, new, current, want, left, hold) in rows {
        let s = without_rolling_update(
            with_policy(set(states.len() as i32, 0, "2"), policy),
            current,
        );
        let r = rollout(&s).expect("handled");
        assert_eq!(
            r.recreated_at_current_below,
            Some(current as usize),
            "{name}"
        );
        assert_eq!(r.partition, 0, "{name}");
        let plan = plan(&r, &pods(states, new), now());
        assert_eq!(deleted(&plan), want, "{name}");
        assert_eq!(plan.left_to_builtin, left, "{name}");
        assert_eq!(plan.hold, hold, "{name}");
    }
    // With `rollingUpdate: {partition: 0}` the same set is driven within the budget.
    let s = set(5, 0, "2");
    let plan = plan_for(&s, &pods(&[Up; 5], &[]));
    assert_eq!(deleted(&plan), [4, 3]);
    assert_eq!(plan.left_to_builtin, 0);
    assert_eq!(plan.hold, Hold::BudgetUsed);
    // An absent count is 0 (the API omits a zero): every pod comes back at the update
    // revision, as upstream reads it.
    let mut unknown = without_rolling_update(set(5, 0, "2"), 0);
    if let Some(st) = unknown.status.as_mut() {
        st.current_replicas = None;
    }
    assert_eq!(
        rollout(&unknown).map(|r| r.recreated_at_current_below),
        Ok(Some(0))
    );
}

#[test]
fn long_batches_are_shortened_in_events_and_their_notes_read_back() {
    assert_eq!(pod_list(&["web-5", "web-4"]), "web-5, web-4");
    let many: Vec<String> = (0..300)
        .map(|i| format!("pod-with-a-long-name-{i}"))
        .collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let list = pod_list(&refs);
    assert!(list.ends_with(" and 290 more"), "{list}");
    assert!(list.len() < 512);
    for pods in [&refs[..1], &refs[..2], &refs[..10], &refs[..11], &refs[..]] {
        let note = batch_note(pods, "web-7d9f", 2, 1);
        assert_eq!(
            read_batch_note(&note),
            Some(BatchNote {
                pods: pods.len(),
                update_revision: "web-7d9f".into()
            }),
            "{note}"
        );
    }
    assert_eq!(read_batch_note("something else"), None);
}
