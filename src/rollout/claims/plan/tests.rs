use super::*;
use serde_json::json;

fn template(storage: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "data", "labels": {"app": "web", "chart": "v2"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                 "resources": {"requests": {"storage": storage}}}
    }))
    .expect("template")
}

/// A bound claim with `spec` request and `capacity`.
fn claim(spec: &str, capacity: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "c", "resourceVersion": "7", "labels": {"app": "web", "chart": "v2", "mine": "x"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast", "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": spec}}},
        "status": {"phase": "Bound", "capacity": {"storage": capacity}}
    }))
    .expect("claim")
}

fn with(
    mut c: PersistentVolumeClaim,
    f: impl FnOnce(&mut PersistentVolumeClaim),
) -> PersistentVolumeClaim {
    f(&mut c);
    c
}

fn patch_body(a: &Assessment) -> Value {
    match a {
        Assessment::Patch(p) => p.body.clone(),
        other => panic!("no patch: {other:?}"),
    }
}

#[test]
fn claims_are_assessed_as_the_kep_defines_compatibility() {
    let t = template("2Gi");
    let cases: Vec<(&str, PersistentVolumeClaim, bool, Assessment)> = vec![
        ("same size", claim("2Gi", "2Gi"), true, Assessment::Compatible),
        ("larger than the template", claim("5Gi", "5Gi"), true, Assessment::Compatible),
        ("spec ahead of capacity", claim("2Gi", "1Gi"), true, Assessment::Updating),
        (
            "class differs",
            with(claim("1Gi", "1Gi"), |c| {
                c.spec.as_mut().expect("spec").storage_class_name = Some("slow".into())
            }),
            true,
            Assessment::Incompatible("its storageClassName differ from the template; delete the claim and its pod to re-create it from the template".into()),
        ),
        (
            "class does not expand",
            claim("1Gi", "1Gi"),
            false,
            Assessment::Incompatible("it needs 2Gi but its StorageClass \"fast\" does not allow volume expansion; delete the claim and its pod to re-create it from the template".into()),
        ),
        (
            "unbound and too small",
            with(claim("1Gi", "1Gi"), |c| c.status = None),
            true,
            Assessment::Waiting("the claim is not bound yet; only bound claims can be expanded".into()),
        ),
    ];
    for (name, c, expandable, want) in cases {
        assert_eq!(
            assess(&t, &c, expandable, ClusterFacts::default()),
            want,
            "{name}"
        );
    }
}

#[test]
fn patches_never_ask_what_the_apiserver_rejects() {
    let t = template("2Gi");
    // Grow: to the template.
    assert_eq!(
        patch_body(&assess(
            &t,
            &claim("1Gi", "1Gi"),
            true,
            ClusterFacts::default()
        )),
        json!({"metadata": {"resourceVersion": "7"}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}})
    );
    // Capacity already above the template: nothing to do with storage.
    assert_eq!(
        assess(&t, &claim("3Gi", "3Gi"), true, ClusterFacts::default()),
        Assessment::Compatible
    );
    // Failed expansion to 8Gi, capacity 1Gi: recover down to the template (above capacity).
    assert_eq!(
        patch_body(&assess(
            &t,
            &claim("8Gi", "1Gi"),
            true,
            ClusterFacts::default()
        )),
        json!({"metadata": {"resourceVersion": "7"}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}})
    );
    // ... but not where the apiserver refuses any decrease: the claim keeps its request.
    let refused = ClusterFacts {
        recovery: Some(false),
        ..ClusterFacts::default()
    };
    assert_eq!(
        assess(&t, &claim("8Gi", "1Gi"), true, refused),
        Assessment::Updating
    );
    // Failed expansion to 8Gi, capacity 3Gi above the template: target is capacity, which
    // the apiserver rejects (not above capacity); leave it updating.
    assert_eq!(
        assess(&t, &claim("8Gi", "3Gi"), true, ClusterFacts::default()),
        Assessment::Updating
    );
    // Smaller template than the claim: never shrink.
    assert_eq!(
        assess(
            &template("1Gi"),
            &claim("2Gi", "2Gi"),
            true,
            ClusterFacts::default()
        ),
        Assessment::Compatible
    );
}

#[test]
fn labels_annotations_and_class_are_added_without_removing_the_users() {
    let t = with(template("1Gi"), |t| {
        t.metadata.labels = Some(
            [
                ("chart".to_owned(), "v3".to_owned()),
                ("new".to_owned(), "1".to_owned()),
            ]
            .into(),
        );
        t.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
        t.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
    });
    let a = assess(&t, &claim("1Gi", "1Gi"), true, ClusterFacts::default());
    let Assessment::Patch(p) = a else {
        panic!("{a:?}")
    };
    assert_eq!(
        p.body,
        json!({"metadata": {"resourceVersion": "7", "labels": {"chart": "v3", "new": "1"}, "annotations": {"a": "b"}},
               "spec": {"volumeAttributesClassName": "gold"}})
    );
    assert_eq!(
        p.changes,
        [
            "volumeAttributesClassName unset -> gold",
            "labels chart,new",
            "annotations a"
        ]
    );
    assert!(p.starts_update);
    // The control plane's own annotations are not the template's to roll out (the view
    // does not keep them on claims, so they would look missing forever).
    let t = with(template("1Gi"), |t| {
        t.metadata.annotations = Some(
            [(
                "pv.kubernetes.io/bind-completed".to_owned(),
                "yes".to_owned(),
            )]
            .into(),
        );
    });
    assert_eq!(
        assess(&t, &claim("1Gi", "1Gi"), true, ClusterFacts::default()),
        Assessment::Compatible
    );
    // Labels only: no update starts.
    let t = with(template("1Gi"), |t| {
        t.metadata.labels = Some([("chart".to_owned(), "v3".to_owned())].into());
    });
    let Assessment::Patch(p) = assess(&t, &claim("1Gi", "1Gi"), true, ClusterFacts::default())
    else {
        panic!()
    };
    assert!(!p.starts_update);
    // Modification pending until status.currentVolumeAttributesClassName follows.
    let t = with(template("1Gi"), |t| {
        t.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
    });
    let c = with(claim("1Gi", "1Gi"), |c| {
        c.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
    });
    assert_eq!(
        assess(&t, &c, true, ClusterFacts::default()),
        Assessment::Updating
    );
    let done = with(c, |c| {
        c.status
            .as_mut()
            .expect("status")
            .current_volume_attributes_class_name = Some("gold".into());
    });
    assert_eq!(
        assess(&t, &done, true, ClusterFacts::default()),
        Assessment::Compatible
    );
}

/// Where the cluster drops a claim's class: never patched for, never waited for; the
/// rest of the change goes on, and the template's status says the class is not applied.
#[test]
fn a_class_the_cluster_drops_is_not_applicable() {
    let dropped = ClusterFacts {
        claim_volume_attributes_class: Some(false),
        ..ClusterFacts::default()
    };
    let gold = |t: PersistentVolumeClaim| {
        with(t, |t| {
            t.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
        })
    };
    // Class only: compatible as it is (the apiserver would drop the patch).
    assert_eq!(
        assess(&gold(template("1Gi")), &claim("1Gi", "1Gi"), true, dropped),
        Assessment::Compatible
    );
    // With a size: the size alone is patched.
    let Assessment::Patch(p) = assess(&gold(template("2Gi")), &claim("1Gi", "1Gi"), true, dropped)
    else {
        panic!("a patch")
    };
    assert_eq!(
        p.body,
        json!({"metadata": {"resourceVersion": "7"}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}})
    );
    assert_eq!(p.changes, ["storage 1Gi -> 2Gi"]);
    // A claim that somehow has the class (kept from before the gate went off) is not
    // waited for either.
    let has = with(claim("1Gi", "1Gi"), |c| {
        c.spec.as_mut().expect("spec").volume_attributes_class_name = Some("gold".into());
    });
    assert_eq!(
        assess(&gold(template("1Gi")), &has, true, dropped),
        Assessment::Compatible
    );
    // Unknown is tried, as before anything was learned.
    assert!(matches!(
        assess(
            &gold(template("1Gi")),
            &claim("1Gi", "1Gi"),
            true,
            ClusterFacts::default()
        ),
        Assessment::Patch(_)
    ));

    // The plan: both replicas grow within the budget, none is held for the class, and the
    // template's status records the class as not applied, changed or not.
    let t = gold(template("2Gi"));
    let claims = [claim("1Gi", "1Gi"), claim("1Gi", "1Gi")];
    for changed in [false, true] {
        let mut rollout = rolling(2, 0);
        rollout.cluster = dropped;
        if changed {
            rollout.class_changed.insert("data".into());
        }
        let replicas: Vec<Replica<'_>> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| Replica {
                index: i,
                ordinal: u32::try_from(i).expect("small"),
                pod: None,
                slots: vec![Slot {
                    template: &t,
                    claim: Some(c),
                    expandable: true,
                }],
            })
            .collect();
        let plan = plan(&rollout, &replicas, |t, n| format!("{t}-web-{n}"));
        assert_eq!(plan.steps.len(), 2, "{plan:?}");
        assert!(plan.held.is_empty());
        assert_eq!(
            plan.status[0].volume_attributes_class,
            Some(status::ClassStatus {
                name: "gold".into(),
                applied: false,
                changed,
                reason: status::CLASS_DROPPED.into(),
            })
        );
        assert!(
            status::render(&plan.status)
                .contains(r#""volumeAttributesClass":{"name":"gold","applied":false"#),
            "{}",
            status::render(&plan.status)
        );
    }
}

struct Case {
    name: &'static str,
    rollout: Rollout,
    /// Per ordinal: (spec, capacity) of the one claim.
    claims: Vec<(&'static str, &'static str)>,
    want_steps: Vec<u32>,
    want_held: Vec<u32>,
    /// Claims the rollout still waits for (`volume-claim-status`'s `awaiting`).
    want_awaiting: u32,
}

fn rolling(max_unavailable: usize, partition: usize) -> Rollout {
    Rollout {
        policy: ClaimUpdatePolicy::InPlace,
        rolling: true,
        partition,
        max_unavailable,
        update_revision: Some("rev-2".into()),
        recreated_since: Some("2026-01-01T00:00:00Z".parse().expect("ts")),
        cluster: ClusterFacts::default(),
        class_changed: Default::default(),
    }
}

#[test]
fn planning_table() {
    let t = template("2Gi");
    let small = ("1Gi", "1Gi");
    let busy = ("2Gi", "1Gi");
    let done = ("2Gi", "2Gi");
    let cases = vec![
        Case {
            name: "budget 2 takes the two highest",
            rollout: rolling(2, 0),
            claims: vec![small; 5],
            want_steps: vec![4, 3],
            want_held: vec![2, 1, 0],
            want_awaiting: 5,
        },
        Case {
            name: "one updating leaves one",
            rollout: rolling(2, 0),
            claims: vec![small, small, small, done, busy],
            want_steps: vec![2],
            want_held: vec![1, 0],
            want_awaiting: 4,
        },
        Case {
            name: "budget used up",
            rollout: rolling(2, 0),
            claims: vec![small, small, busy, busy, done],
            want_steps: vec![],
            want_held: vec![1, 0],
            want_awaiting: 4,
        },
        Case {
            name: "partition stops below",
            rollout: rolling(5, 3),
            claims: vec![small; 5],
            want_steps: vec![4, 3],
            want_held: vec![2, 1, 0],
            want_awaiting: 2,
        },
        Case {
            name: "all done",
            rollout: rolling(1, 0),
            claims: vec![done; 3],
            want_steps: vec![],
            want_held: vec![],
            want_awaiting: 0,
        },
        Case {
            name: "policy OnDelete never patches",
            rollout: Rollout {
                policy: ClaimUpdatePolicy::OnDelete,
                ..rolling(3, 0)
            },
            claims: vec![small; 3],
            want_steps: vec![],
            want_held: vec![],
            want_awaiting: 0,
        },
    ];
    for case in cases {
        let claims: Vec<PersistentVolumeClaim> =
            case.claims.iter().map(|(s, c)| claim(s, c)).collect();
        let replicas: Vec<Replica<'_>> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| Replica {
                index: i,
                ordinal: i as u32,
                pod: None,
                slots: vec![Slot {
                    template: &t,
                    claim: Some(c),
                    expandable: true,
                }],
            })
            .collect();
        let plan = plan(&case.rollout, &replicas, |t, n| format!("{t}-web-{n}"));
        let steps: Vec<u32> = plan.steps.iter().map(|s| s.ordinal).collect();
        assert_eq!(steps, case.want_steps, "{}", case.name);
        assert_eq!(plan.held, case.want_held, "{}", case.name);
        assert_eq!(plan.status[0].awaiting, case.want_awaiting, "{}", case.name);
        assert!(
            plan.steps
                .iter()
                .all(|s| s.claim == format!("data-web-{}", s.ordinal))
        );
    }
}

/// The claim status counts what the rollout awaits as `status` classifies each claim:
/// failed resizes, claims waiting for or in a pod restart, incompatible ones.
#[test]
fn the_status_counts_what_the_rollout_awaits() {
    let t = template("2Gi");
    let condition = |type_: &'static str| {
        move |c: &mut PersistentVolumeClaim| {
            c.status.as_mut().expect("status").conditions = Some(vec![
                serde_json::from_value(json!({"type": type_, "status": "True"}))
                    .expect("condition"),
            ]);
        }
    };
    let claims = [
        claim("2Gi", "2Gi"),
        with(claim("2Gi", "1Gi"), condition("ControllerResizeError")),
        with(claim("2Gi", "1Gi"), condition("FileSystemResizePending")),
        with(
            with(claim("2Gi", "1Gi"), condition("FileSystemResizePending")),
            |c| {
                c.metadata.annotations = Some(
                    [(
                        crate::names::RESIZE_RESTART.to_owned(),
                        r#"{"pod":"web-3","podUID":"u3","at":"2026-01-01T00:00:00Z"}"#.to_owned(),
                    )]
                    .into(),
                );
            },
        ),
        with(claim("1Gi", "1Gi"), |c| {
            c.spec.as_mut().expect("spec").access_modes = Some(vec!["ReadWriteMany".into()]);
        }),
        claim("2Gi", "1Gi"),
    ];
    let replicas: Vec<Replica<'_>> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| Replica {
            index: i,
            ordinal: i as u32,
            pod: None,
            slots: vec![Slot {
                template: &t,
                claim: Some(c),
                expandable: true,
            }],
        })
        .collect();
    let p = plan(&rolling(6, 0), &replicas, |t, n| format!("{t}-web-{n}"));
    assert_eq!(
        status::render(&p.status),
        r#"[{"name":"data","compatible":1,"updating":4,"overSized":0,"totalCapacity":"7Gi","awaiting":5,"failed":1,"incompatible":1,"waitingForRestart":1,"restarting":1}]"#
    );
    // Policy OnDelete awaits no claim: the KEP's counts alone.
    let on_delete = Rollout {
        policy: ClaimUpdatePolicy::OnDelete,
        ..rolling(6, 0)
    };
    let p = plan(&on_delete, &replicas, |t, n| format!("{t}-web-{n}"));
    assert_eq!(
        status::render(&p.status),
        r#"[{"name":"data","compatible":1,"updating":4,"overSized":0,"totalCapacity":"7Gi"}]"#
    );
}

#[test]
fn an_incompatible_claim_blocks_one_unit_and_is_reported() {
    let t = template("2Gi");
    let other = with(claim("1Gi", "1Gi"), |c| {
        c.spec.as_mut().expect("spec").access_modes = Some(vec!["ReadWriteMany".into()])
    });
    let claims = [claim("1Gi", "1Gi"), claim("1Gi", "1Gi"), other];
    let replicas: Vec<Replica<'_>> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| Replica {
            index: i,
            ordinal: i as u32,
            pod: None,
            slots: vec![Slot {
                template: &t,
                claim: Some(c),
                expandable: true,
            }],
        })
        .collect();
    let p = plan(&rolling(2, 0), &replicas, |t, n| format!("{t}-web-{n}"));
    assert_eq!(p.steps.iter().map(|s| s.ordinal).collect::<Vec<_>>(), [1]);
    assert_eq!(p.incompatible.len(), 1);
    assert_eq!(p.incompatible[0].claim, "data-web-2");
    assert_eq!(p.unavailable, 1);
    let p = plan(&rolling(1, 0), &replicas, |t, n| format!("{t}-web-{n}"));
    assert!(
        p.steps.is_empty(),
        "budget 1 is blocked by the incompatible claim"
    );
    assert_eq!(p.status[0].compatible, 0);
}

#[test]
fn on_delete_strategy_waits_for_a_recreated_pod() {
    let t = template("2Gi");
    let c = claim("1Gi", "1Gi");
    let since: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
    let pod = |rev: &str, created: &str, terminating: bool| PodFacts {
        revision: Some(rev.into()),
        created: Some(created.parse().expect("ts")),
        terminating,
    };
    let cases = [
        ("no pod", None, Some(since), false),
        (
            "old pod",
            Some(pod("rev-2", "2025-12-31T00:00:00Z", false)),
            Some(since),
            false,
        ),
        (
            "old revision",
            Some(pod("rev-1", "2026-01-02T00:00:00Z", false)),
            Some(since),
            false,
        ),
        (
            "terminating",
            Some(pod("rev-2", "2026-01-02T00:00:00Z", true)),
            Some(since),
            false,
        ),
        (
            "templates not live yet",
            Some(pod("rev-2", "2026-01-02T00:00:00Z", false)),
            None,
            false,
        ),
        (
            "re-created",
            Some(pod("rev-2", "2026-01-02T00:00:00Z", false)),
            Some(since),
            true,
        ),
    ];
    for (name, pod, since, want) in cases {
        let rollout = Rollout {
            rolling: false,
            recreated_since: since,
            ..rolling(1, 0)
        };
        let replicas = [Replica {
            index: 0,
            ordinal: 0,
            pod,
            slots: vec![Slot {
                template: &t,
                claim: Some(&c),
                expandable: true,
            }],
        }];
        let p = plan(&rollout, &replicas, |t, n| format!("{t}-web-{n}"));
        assert_eq!(!p.steps.is_empty(), want, "{name}");
    }
}
