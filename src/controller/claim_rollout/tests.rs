use std::sync::Arc;

use super::*;
use crate::controller::action::Request;
use prometheus_client::registry::Registry;
use serde_json::Value;

#[test]
fn refusals_back_off_doubling_and_an_eviction_forgets_them() {
    let rollout = ClaimRollout::register(&mut Registry::default());
    assert_eq!(rollout.backoff("p1"), None);
    assert!(!rollout.was_evicted("p1"));
    let waits: Vec<u64> = (0..3).map(|_| rollout.refused("p1").as_secs()).collect();
    assert_eq!(waits, [1, 2, 4]);
    assert!(
        rollout
            .backoff("p1")
            .is_some_and(|b| b > Duration::from_secs(3))
    );
    // Another pod has its own count.
    assert_eq!(rollout.refused("p2"), Duration::from_secs(1));

    rollout.evicted("p1");
    assert!(rollout.was_evicted("p1"));
    assert_eq!(
        rollout.backoff("p1"),
        None,
        "an evicted pod waits for nothing"
    );
    assert!(!rollout.was_evicted("p2"));
    // Refused again later (a new pod with the same uid never comes; a stale answer):
    // counted from one.
    assert_eq!(rollout.refused("p1"), Duration::from_secs(1));
    assert!(!rollout.was_evicted("p1"));
}

fn snapshot(status: Option<&str>) -> SetSnapshot {
    let mut annotations = serde_json::Map::new();
    if let Some(s) = status {
        annotations.insert(names::VOLUME_CLAIM_STATUS.into(), s.into());
    }
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "db", "uid": "u1", "resourceVersion": "40",
                     "annotations": annotations},
        "spec": {"selector": {}, "serviceName": "web", "template": {}},
    }))
    .expect("set");
    let claim = |n: u32| -> Arc<PersistentVolumeClaim> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {
                "name": format!("data-web-{n}"), "namespace": "db",
                "uid": format!("c{n}"), "resourceVersion": format!("{}", 10 + n)}}))
            .expect("claim"),
        )
    };
    SetSnapshot {
        set: Arc::new(set),
        namespace: "db".into(),
        name: "web".into(),
        ordinals: vec![0, 1],
        pods: vec![(0, None), (1, None)],
        claims: vec![
            ("data".into(), 0, Some(claim(0))),
            ("data".into(), 1, Some(claim(1))),
        ],
        journal: None,
    }
}

fn plan() -> plan::Plan {
    plan::Plan {
        steps: vec![plan::Step {
            template: "data".into(),
            ordinal: 1,
            claim: "data-web-1".into(),
            patch: plan::ClaimPatch {
                body: json!({"metadata": {"resourceVersion": "11"},
                             "spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
                changes: vec!["storage 1Gi -> 2Gi".into()],
                starts_update: true,
            },
        }],
        incompatible: vec![plan::Incompatible {
            template: "data".into(),
            ordinal: 0,
            claim: "data-web-0".into(),
            reason: "storage class differs".into(),
        }],
        status: vec![status::TemplateStatus {
            name: "data".into(),
            compatible: 0,
            updating: 1,
            over_sized: 0,
            total_capacity: "2Gi".into(),
            awaiting: 1,
            ..status::TemplateStatus::default()
        }],
        unavailable: 1,
        in_progress: true,
        held: Vec::new(),
    }
}

fn writes(actions: &[Action]) -> Vec<&Write> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Write(w) => Some(w),
            Action::Report(_) => None,
        })
        .collect()
}

fn reports(actions: &[Action]) -> Vec<(&str, Option<&str>, Option<&str>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Report(r) => Some((
                r.reason.as_str(),
                r.regarding.kind.as_deref(),
                r.once.as_deref(),
            )),
            Action::Write(_) => None,
        })
        .collect()
}

#[test]
fn a_rollout_plan_becomes_patches_reports_and_a_status_write() {
    let actions = rollout_actions(&snapshot(None), &plan(), true);
    let w = writes(&actions);
    assert_eq!(w.len(), 2, "{actions:?}");

    let patch = w[0];
    assert_eq!(patch.verb, Verb::PatchClaim);
    assert_eq!(patch.target.key(), "persistentvolumeclaims/db/data-web-1");
    assert_eq!(patch.target.resource_version.as_deref(), Some("11"));
    assert!(
        patch.expect,
        "the view must show the patch before the next plan"
    );
    assert_eq!(patch.about.name.as_deref(), Some("data-web-1"));
    assert!(
        matches!(&patch.request, Request::Patch(b) if b["spec"]["resources"]["requests"]["storage"] == "2Gi")
    );
    let done: Vec<_> = patch
        .on_done
        .iter()
        .map(|r| (r.reason.as_str(), r.regarding.kind.as_deref()))
        .collect();
    assert_eq!(
        done,
        [
            ("VolumeClaimPatched", Some("PersistentVolumeClaim")),
            ("VolumeClaimPatched", Some("StatefulSet"))
        ]
    );
    assert_eq!(
        patch.on_done[1]
            .related
            .as_ref()
            .and_then(|r| r.name.as_deref()),
        Some("data-web-1")
    );
    assert!(patch.on_done[0].note.contains("storage 1Gi -> 2Gi"));
    assert!(
        patch
            .on_failed
            .iter()
            .all(|r| r.note.contains("{error}") && r.once.is_some())
    );

    assert_eq!(
        reports(&actions),
        [
            (
                "VolumeClaimIncompatible",
                Some("PersistentVolumeClaim"),
                Some(
                    "u1/incompatible/c0/claim data-web-0 cannot follow volume claim template \"data\" in place: storage class differs/claim"
                )
            ),
            (
                "VolumeClaimIncompatible",
                Some("StatefulSet"),
                Some(
                    "u1/incompatible/c0/claim data-web-0 cannot follow volume claim template \"data\" in place: storage class differs"
                )
            ),
        ]
    );

    let status = w[1];
    assert_eq!(status.verb, Verb::WriteClaimStatus);
    assert_eq!(status.target.key(), "statefulsets/db/web");
    let Request::Patch(body) = &status.request else {
        panic!("a patch: {status:?}")
    };
    assert_eq!(
        body["metadata"]["annotations"][names::VOLUME_CLAIM_STATUS],
        status::render(&plan().status)
    );
    assert!(status.on_done.is_empty(), "not complete yet");
}

#[test]
fn the_claim_status_is_wanted_only_where_it_tells_something() {
    let set_with = |keys: &[&str]| {
        let annotations: serde_json::Map<String, Value> = keys
            .iter()
            .map(|k| ((*k).to_owned(), Value::from("x")))
            .collect();
        serde_json::from_value::<StatefulSet>(json!({
            "metadata": {"name": "web", "annotations": annotations},
            "spec": {"selector": {}, "serviceName": "web", "template": {}},
        }))
        .expect("set")
    };
    let matching = plan::Plan {
        status: vec![status::TemplateStatus {
            name: "data".into(),
            compatible: 2,
            updating: 0,
            over_sized: 1,
            total_capacity: "3Gi".into(),
            volume_attributes_class: None,
            ..status::TemplateStatus::default()
        }],
        ..plan::Plan::default()
    };
    let updating = plan::Plan {
        status: vec![status::TemplateStatus {
            updating: 1,
            ..matching.status[0].clone()
        }],
        in_progress: true,
        ..matching.clone()
    };
    let held = plan::Plan {
        held: vec![1],
        in_progress: true,
        ..matching.clone()
    };
    let waiting_to_bind = plan::Plan {
        in_progress: true,
        ..matching.clone()
    };
    let to_patch = plan::Plan {
        steps: plan().steps,
        in_progress: true,
        ..matching.clone()
    };
    let incompatible = plan::Plan {
        incompatible: plan().incompatible,
        in_progress: true,
        ..matching.clone()
    };
    let (in_place, on_delete) = (ClaimUpdatePolicy::InPlace, ClaimUpdatePolicy::OnDelete);
    let plain = set_with(&[]);
    let recorded = set_with(&[names::DESIRED_VOLUME_CLAIM_TEMPLATES]);
    let reported = set_with(&[names::VOLUME_CLAIM_STATUS]);
    // (what, set, policy, plan, wanted)
    let cases = [
        ("healthy, OnDelete", &plain, on_delete, &matching, false),
        (
            "healthy, InPlace: claims match",
            &plain,
            in_place,
            &matching,
            false,
        ),
        (
            "InPlace, a claim only waiting to be bound",
            &plain,
            in_place,
            &waiting_to_bind,
            false,
        ),
        (
            "InPlace, a claim to patch",
            &plain,
            in_place,
            &to_patch,
            true,
        ),
        (
            "InPlace, a patch held by the budget",
            &plain,
            in_place,
            &held,
            true,
        ),
        (
            "InPlace, a claim updating",
            &plain,
            in_place,
            &updating,
            true,
        ),
        (
            "OnDelete, a claim updating by hand",
            &plain,
            on_delete,
            &updating,
            false,
        ),
        (
            "a claim that cannot follow, OnDelete",
            &plain,
            on_delete,
            &incompatible,
            true,
        ),
        ("a change recorded", &recorded, on_delete, &matching, true),
        (
            "reported before: kept current",
            &reported,
            on_delete,
            &matching,
            true,
        ),
    ];
    for (what, set, policy, plan, wanted) in cases {
        assert_eq!(status_wanted(set, policy, plan), wanted, "{what}");
    }
}

#[test]
fn the_status_is_written_only_where_it_changes_and_completion_is_said() {
    let p = plan();
    let same = status::render(&p.status);
    assert!(
        writes(&rollout_actions(&snapshot(Some(&same)), &p, true))
            .iter()
            .all(|w| w.verb != Verb::WriteClaimStatus),
        "unchanged"
    );
    assert!(
        writes(&rollout_actions(&snapshot(None), &p, false))
            .iter()
            .all(|w| w.verb != Verb::WriteClaimStatus),
        "not in use, or a journal is open"
    );
    let done = plan::Plan {
        steps: Vec::new(),
        incompatible: Vec::new(),
        in_progress: false,
        status: vec![status::TemplateStatus {
            compatible: 2,
            updating: 0,
            ..p.status[0].clone()
        }],
        ..p
    };
    let actions = rollout_actions(&snapshot(Some(&same)), &done, true);
    let w = writes(&actions);
    assert_eq!(w.len(), 1);
    assert_eq!(
        w[0].on_done
            .iter()
            .map(|r| r.reason.as_str())
            .collect::<Vec<_>>(),
        ["VolumeClaimRolloutComplete"]
    );
}
