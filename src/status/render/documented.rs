use std::collections::BTreeSet;

use serde_json::Value;

use super::super::model::*;
use crate::status::fixtures::*;

/// Every key of `value`, at any depth (keys of free-form maps excepted).
fn keys(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                out.insert(k.clone());
                if k != "allocatedResourceStatuses" {
                    keys(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

#[test]
fn every_field_of_the_json_report_is_documented_in_the_readme() {
    let mut objects = vec![
        set("web", "1Gi", Some("2Gi"), Some("InPlace")),
        class("fast", true),
    ];
    objects.push(claim("web", 0, "1Gi", "1Gi"));
    objects.push(event(
        "ConvergeSkipped",
        "Warning",
        "StatefulSet",
        "web",
        "uid-web",
        "no",
        200,
    ));
    let mut report = report(&objects);
    report.unreadable.push(Unreadable {
        resource: "pods".into(),
        reason: "forbidden".into(),
    });
    // Every optional field filled, so that each is seen.
    let set = &mut report.items[0];
    set.absent_since = Some(time(0));
    set.policy_error = Some("x".into());
    set.desired_templates_error = Some("x".into());
    set.recorded_claim_status = Some(vec![crate::rollout::claims::status::TemplateStatus {
        name: "data".into(),
        compatible: 0,
        updating: 0,
        over_sized: 0,
        total_capacity: "1Gi".into(),
        awaiting: 1,
        failed: 1,
        incompatible: 1,
        waiting_for_restart: 1,
        restarting: 1,
        volume_attributes_class: Some(crate::rollout::claims::status::ClassStatus {
            name: "x".into(),
            applied: false,
            changed: true,
            reason: "x".into(),
        }),
    }]);
    set.convergence.journal = Some("x".into());
    set.convergence.journal_step = Some("x".into());
    set.convergence.message = Some("x".into());
    set.convergence.garbage_collector_wait_seconds = Some(21);
    set.max_unavailable = Some(MaxUnavailable {
        value: "2".into(),
        source: "annotation".into(),
        budget: 2,
        unavailable: 0,
        updated_replicas: 0,
        rolling_out: false,
        batch: Some(1),
        last_batch: Some("x".into()),
        last_batch_time: Some(time(0)),
    });
    set.conditions.push(Condition {
        type_: "Available".into(),
        status: "True".into(),
        reason: "x".into(),
        message: "x".into(),
        last_transition_time: Some(time(0)),
    });
    set.changes[0].volume_attributes_class_name = set.changes[0].storage.clone();
    let claim = &mut set.claim_list[0];
    claim.phase = Some("Bound".into());
    claim.volume_attributes_class = Some("x".into());
    claim.current_volume_attributes_class = Some("x".into());
    claim.target_volume_attributes_class = Some("x".into());
    claim.modify_volume_status = Some("x".into());
    claim
        .allocated_resource_statuses
        .insert("storage".into(), "x".into());
    claim.conditions.push(ClaimCondition {
        type_: "Resizing".into(),
        status: "True".into(),
        reason: Some("x".into()),
        message: Some("x".into()),
    });
    let mut found = BTreeSet::new();
    keys(&serde_json::to_value(&report).expect("json"), &mut found);

    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .expect("README.md");
    let section = readme
        .split("### The status report (`-o json`)")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the status report section");
    let missing: Vec<&String> = found
        .iter()
        .filter(|k| !section.contains(&format!("`{k}`")) && !section.contains(&format!("`{k}[]`")))
        .collect();
    assert!(missing.is_empty(), "README does not document {missing:?}");
    assert!(found.len() > 60, "{found:?}");
}
