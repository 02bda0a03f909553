use super::*;
use serde_json::json;

/// A template as the apiserver hands it over: defaulted, with status and timestamps.
fn template(name: &str, storage: &str) -> Value {
    json!({
        "kind": "PersistentVolumeClaim", "apiVersion": "v1",
        "metadata": {"name": name, "creationTimestamp": null},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}},
                 "volumeMode": "Filesystem"},
        "status": {"phase": "Pending"}
    })
}

fn with(mut t: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    let mut node = &mut t;
    for part in parent.split('/').skip(1) {
        node = node
            .as_object_mut()
            .expect("object")
            .entry(part)
            .or_insert_with(|| json!({}));
    }
    node.as_object_mut()
        .expect("object")
        .insert(key.to_owned(), value);
    t
}

fn denied(c: Classification) -> Vec<String> {
    match c {
        Classification::Denied(errors) => errors.iter().map(ToString::to_string).collect(),
        other => panic!("not denied: {other:?}"),
    }
}

#[test]
fn same_is_equality_of_cleaned_values() {
    let values = [
        json!(null),
        json!({}),
        json!([]),
        json!([null]),
        json!([{}]),
        json!({"a": null}),
        json!({"a": {}}),
        json!({"a": []}),
        json!({"a": [null, {}]}),
        json!({"a": 1}),
        json!({"a": 1, "b": null}),
        json!({"a": {"b": {"c": null}}, "d": "x"}),
        json!({"d": "x"}),
        json!([1, null, 2]),
        json!([1, 2]),
        json!([2, 1]),
        json!([{"a": 1}, {"b": null}]),
        json!([{"a": 1}]),
        json!("x"),
        json!(""),
        json!(0),
        json!(false),
    ];
    for a in &values {
        for b in &values {
            assert_eq!(same(Some(a), Some(b)), clean(a) == clean(b), "{a} vs {b}");
        }
        assert_eq!(same(Some(a), None), clean(a).is_none(), "{a} vs absent");
    }
}

#[test]
fn templates_are_written_as_cleaned_copies_would_be() {
    fn text(v: impl Serialize) -> String {
        serde_json::to_string(&v).expect("json")
    }
    let values = [
        json!(null),
        json!({}),
        json!([null, {}, 1]),
        json!("x"),
        json!({"a": [null, {"b": null}], "c": {"d": {}}, "e": 0}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Bound"}}),
        json!({"metadata": {"creationTimestamp": null}}),
        json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}),
        json!({"metadata": {"creationTimestamp": "t", "name": "data", "labels": {}}}),
        json!({"metadata": "odd", "spec": {"accessModes": [null, "ReadWriteOnce"]}}),
        json!({"metadata": {"name": "data", "annotations": {"a": "\"quoted\""}},
            "spec": {"resources": {"requests": {"storage": "1Gi"}, "limits": null},
                "volumeMode": "Filesystem", "selector": {"matchLabels": {}}}}),
    ];
    for v in &values {
        let reference = serde_json::to_string(&clean_template(v)).expect("json");
        assert_eq!(text(CleanTemplate(v)), reference, "{v}");
        if let Some(cleaned) = clean(v) {
            let reference = serde_json::to_string(&cleaned).expect("json");
            assert_eq!(text(Clean(v)), reference, "{v}");
        }
    }
}

#[test]
fn semantic_equality_is_not_a_change() {
    let base = template("data", "1Gi");
    let same = [
        template("data", "1024Mi"),
        with(template("data", "1Gi"), "/status/phase", json!("Bound")),
        with(template("data", "1Gi"), "/metadata/labels", json!({})),
        with(
            template("data", "1Gi"),
            "/metadata/annotations",
            json!(null),
        ),
        with(
            template("data", "1Gi"),
            "/metadata/creationTimestamp",
            json!("2026-01-01T00:00:00Z"),
        ),
        json!({"metadata": {"name": "data"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1073741824"}}}}),
        with(template("data", "1Gi"), "/spec/selector", json!(null)),
        with(template("data", "1Gi"), "/spec/resources/limits", json!({})),
    ];
    for t in same {
        assert_eq!(
            classify_template_change(std::slice::from_ref(&base), std::slice::from_ref(&t)),
            Classification::Unchanged,
            "{t}"
        );
    }
    let labelled = |l: Value| with(template("data", "1Gi"), "/metadata/labels", l);
    assert_eq!(
        classify_template_change(
            &[labelled(json!({"a": "1", "b": "2"}))],
            &[labelled(json!({"b": "2", "a": "1"}))]
        ),
        Classification::Unchanged
    );
}

#[test]
fn allowed_fields_are_recorded_with_what_changed() {
    let old = template("data", "1Gi");
    let cases = [
        (
            template("data", "5Gi"),
            vec![Change::Storage {
                old: Some("1Gi".into()),
                new: Some("5Gi".into()),
                decrease: false,
            }],
        ),
        (
            template("data", "512Mi"),
            vec![Change::Storage {
                old: Some("1Gi".into()),
                new: Some("512Mi".into()),
                decrease: true,
            }],
        ),
        (
            with(
                template("data", "1Gi"),
                "/metadata/labels",
                json!({"helm.sh/chart": "x-2"}),
            ),
            vec![Change::Labels],
        ),
        (
            with(
                template("data", "1Gi"),
                "/metadata/annotations",
                json!({"a": "b"}),
            ),
            vec![Change::Annotations],
        ),
        (
            with(
                template("data", "1Gi"),
                "/spec/volumeAttributesClassName",
                json!("gold"),
            ),
            vec![Change::VolumeAttributesClass {
                old: None,
                new: Some("gold".into()),
            }],
        ),
    ];
    for (new, want) in cases {
        let got = classify_template_change(std::slice::from_ref(&old), std::slice::from_ref(&new));
        assert_eq!(
            got,
            Classification::Allowed(vec![TemplateChange {
                index: 0,
                name: "data".into(),
                changes: want
            }]),
            "{new}"
        );
    }
}

#[test]
fn other_fields_are_denied_one_error_per_path() {
    let old = template("data", "1Gi");
    let p = "spec.volumeClaimTemplates[0]";
    let cases = [
        (
            with(old.clone(), "/spec/storageClassName", json!("fast")),
            "spec.storageClassName",
        ),
        (
            with(old.clone(), "/spec/accessModes", json!(["ReadWriteMany"])),
            "spec.accessModes",
        ),
        (
            with(old.clone(), "/spec/volumeMode", json!("Block")),
            "spec.volumeMode",
        ),
        (
            with(
                old.clone(),
                "/spec/dataSource",
                json!({"kind": "VolumeSnapshot", "name": "s"}),
            ),
            "spec.dataSource",
        ),
        (
            with(
                old.clone(),
                "/spec/dataSourceRef",
                json!({"kind": "VolumeSnapshot", "name": "s"}),
            ),
            "spec.dataSourceRef",
        ),
        (
            with(
                old.clone(),
                "/spec/selector",
                json!({"matchLabels": {"a": "b"}}),
            ),
            "spec.selector",
        ),
        (
            with(old.clone(), "/spec/volumeName", json!("pv-1")),
            "spec.volumeName",
        ),
        (
            with(
                old.clone(),
                "/spec/resources/limits",
                json!({"storage": "2Gi"}),
            ),
            "spec.resources.limits[storage]",
        ),
        (
            with(old.clone(), "/spec/resources/requests/cpu", json!("1")),
            "spec.resources.requests[cpu]",
        ),
        (
            with(old.clone(), "/metadata/finalizers", json!(["x"])),
            "metadata.finalizers",
        ),
    ];
    for (new, path) in cases {
        let got = denied(classify_template_change(std::slice::from_ref(&old), &[new]));
        assert_eq!(
            got,
            [format!(
                "{p}.{path}: Forbidden: may not change; {MAY_CHANGE}"
            )]
        );
    }
    // Several at once, allowed ones alongside: only the offending paths are reported.
    let new = with(
        with(
            template("data", "5Gi"),
            "/spec/storageClassName",
            json!("fast"),
        ),
        "/spec/accessModes",
        json!(["ReadWriteMany"]),
    );
    let got = denied(classify_template_change(&[old], &[new]));
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].starts_with(&format!("{p}.spec.accessModes: Forbidden")));
    assert!(got[1].starts_with(&format!("{p}.spec.storageClassName: Forbidden")));
}

#[test]
fn template_list_changes_are_denied() {
    let (a, b, c) = (
        template("a", "1Gi"),
        template("b", "1Gi"),
        template("c", "1Gi"),
    );
    let got = denied(classify_template_change(
        std::slice::from_ref(&a),
        &[a.clone(), b.clone()],
    ));
    assert_eq!(
        got,
        [format!(
            "spec.volumeClaimTemplates[1]: Forbidden: volume claim template \"b\" may not be added to an existing StatefulSet; {MAY_CHANGE}"
        )]
    );
    let got = denied(classify_template_change(
        &[a.clone(), b.clone()],
        std::slice::from_ref(&a),
    ));
    assert_eq!(
        got,
        [format!(
            "spec.volumeClaimTemplates: Forbidden: volume claim template \"b\" may not be removed; {MAY_CHANGE}"
        )]
    );
    let got = denied(classify_template_change(
        &[a.clone(), b.clone()],
        &[a.clone(), c.clone()],
    ));
    assert_eq!(
        got,
        [format!(
            "spec.volumeClaimTemplates[1].metadata.name: Forbidden: volume claim template \"b\" may not be renamed to \"c\"; {MAY_CHANGE}"
        )]
    );
    let got = denied(classify_template_change(
        &[a.clone(), b.clone()],
        &[b.clone(), a.clone()],
    ));
    assert_eq!(
        got,
        [
            "spec.volumeClaimTemplates: Forbidden: volume claim templates may not be reordered; keep the order of the existing StatefulSet"
        ]
    );
    let got = denied(classify_template_change(&[], std::slice::from_ref(&a)));
    assert_eq!(got.len(), 1);
    assert!(got[0].starts_with(
        "spec.volumeClaimTemplates[0]: Forbidden: volume claim template \"a\" may not be added"
    ));
    assert_eq!(
        classify_template_change(&[], &[]),
        Classification::Unchanged
    );
}

#[test]
fn malformed_quantities_are_invalid_not_a_crash() {
    let old = template("data", "1Gi");
    for bad in ["lots", "1GB", "", "1e", "--1"] {
        let got = denied(classify_template_change(
            std::slice::from_ref(&old),
            &[template("data", bad)],
        ));
        assert_eq!(got.len(), 1, "{bad}: {got:?}");
        assert!(
            got[0].starts_with(&format!(
                "spec.volumeClaimTemplates[0].spec.resources.requests[storage]: Invalid value: {bad:?}: "
            )),
            "{got:?}"
        );
    }
    let wrong_type = with(
        old.clone(),
        "/spec/resources/requests/storage",
        json!({"x": 1}),
    );
    assert_eq!(
        denied(classify_template_change(&[old], &[wrong_type])).len(),
        1
    );
}

#[test]
fn the_desired_annotation_is_compact_sorted_and_parses_as_claims() {
    let t = with(
        template("data", "5Gi"),
        "/metadata/labels",
        json!({"z": "1", "a": "2"}),
    );
    let text = desired_annotation(std::slice::from_ref(&t)).expect("annotation");
    assert_eq!(
        text,
        r#"[{"metadata":{"labels":{"a":"2","z":"1"},"name":"data"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"5Gi"}},"volumeMode":"Filesystem"}}]"#
    );
    assert_eq!(desired_annotation(&[t]).expect("again"), text);
    let mut annotations = std::collections::BTreeMap::new();
    annotations.insert(
        crate::names::DESIRED_VOLUME_CLAIM_TEMPLATES.to_owned(),
        text.clone(),
    );
    let parsed = crate::admission::set_claims::desired_templates(Some(&annotations))
        .expect("present")
        .expect("parses");
    assert_eq!(parsed.len(), 1);
    assert!(check_desired_annotation(&text, &[template("data", "1Gi")]).is_empty());
    let wrong = with(
        template("data", "5Gi"),
        "/spec/accessModes",
        json!("ReadWriteOnce"),
    );
    let err = desired_annotation(&[wrong]).expect_err("not a claim");
    assert!(
        err.to_string()
            .contains("is not a list of PersistentVolumeClaim templates"),
        "{err}"
    );
}

#[test]
fn user_written_desired_annotations_are_checked() {
    let live = [template("data", "1Gi"), template("logs", "1Gi")];
    let ok = desired_annotation(&[template("data", "9Gi"), template("logs", "2Gi")]).expect("ok");
    assert!(check_desired_annotation(&ok, &live).is_empty());
    let p = DESIRED_PATH;
    let one = |raw: &str| -> String {
        let errors = check_desired_annotation(raw, &live);
        assert_eq!(errors.len(), 1, "{raw}: {errors:?}");
        errors[0].to_string()
    };
    assert!(one("not json").starts_with(&format!(
        "{p}: Invalid value: \"not json\": must be a JSON array of volume claim templates: "
    )));
    assert_eq!(
        one(r#"{"a":1}"#),
        format!(
            "{p}: Invalid value: \"{{\\\"a\\\":1}}\": must be a JSON array of volume claim templates"
        )
    );
    assert!(one(r#"[1, 2]"#).contains("is not a list of PersistentVolumeClaim templates"));
    assert!(
        one(r#"[{"metadata":{"name":"data"}}]"#)
            .contains(r#"must name the templates ["data", "logs"] in this order, not ["data"]"#)
    );
    let reordered =
        desired_annotation(&[template("logs", "1Gi"), template("data", "1Gi")]).expect("ok");
    assert!(one(&reordered).contains("in this order"));
    let class = desired_annotation(&[
        with(
            template("data", "1Gi"),
            "/spec/storageClassName",
            json!("x"),
        ),
        template("logs", "1Gi"),
    ])
    .expect("ok");
    assert_eq!(
        one(&class),
        format!(
            "{p}: Forbidden: template \"data\": spec.storageClassName differs from the live template; {MAY_CHANGE}"
        )
    );
    let bad_qty =
        desired_annotation(&[template("data", "huge"), template("logs", "1Gi")]).expect("ok");
    assert!(
        one(&bad_qty)
            .contains("template \"data\": spec.resources.requests[storage]: quantities must match")
    );
    let huge = format!("[{}]", " ".repeat(MAX_DESIRED_TEMPLATES_BYTES));
    assert_eq!(
        one(&huge),
        format!("{p}: Too long: must have at most 262144 bytes")
    );
    let long_garbage = "x".repeat(10_000);
    assert!(one(&long_garbage).len() < 400);
}
