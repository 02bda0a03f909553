use super::*;
use crate::admission::statefulset::pod_template_changed;
use kube::core::admission::AdmissionReview;
use serde_json::json;

/// kube's own decoder, for comparison.
fn kube_decode(review: &Value) -> AdmissionRequest<DynamicObject> {
    AdmissionReview::<DynamicObject>::deserialize(review)
        .expect("kube decodes")
        .try_into()
        .expect("has a request")
}

/// Equal, but for type fields that are not both strings: kube keeps one or the other in
/// `data` depending on key order; we keep neither.
fn same(a: &AdmissionRequest<DynamicObject>, b: &AdmissionRequest<DynamicObject>) -> bool {
    let plain = |r: &AdmissionRequest<DynamicObject>| {
        let mut r = r.clone();
        for o in [r.object.as_mut(), r.old_object.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some(data) = o.data.as_object_mut() {
                data.remove("apiVersion");
                data.remove("kind");
            }
        }
        serde_json::to_value(&r).ok()
    };
    plain(a) == plain(b) && a.types == b.types
}

/// A captured review (tests/fixtures/apiserver-behaviour) with its placeholders for values
/// that change from run to run (`<uid>`, `<time>`, `<resourceVersion>`) filled in.
fn filled(text: &str) -> String {
    text.replace("<uid>", "6f2d9c5e-1111-4a3b-9c2d-0123456789ab")
        .replace("<time>", "2026-01-01T00:00:00Z")
        .replace("<resourceVersion>", "1")
}

fn fixtures() -> Vec<(String, Value)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut stack: Vec<_> = ["tests/fixtures", "benches/fixtures", "examples/reviews"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("fixtures dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                let text = filled(&std::fs::read_to_string(&path).expect("fixture"));
                if let Ok(v) = serde_json::from_str::<Value>(&text)
                    && v.get("request").is_some_and(Value::is_object)
                {
                    out.push((path.display().to_string(), v));
                }
            }
        }
    }
    out
}

#[test]
fn every_fixture_decodes_as_kube_decodes_it() {
    let all = fixtures();
    assert!(all.len() >= 12, "fixtures found: {}", all.len());
    let (mut claims, mut sets_trimmed, mut unhandled) = (0, 0, 0);
    for (name, review) in all {
        let body = serde_json::to_vec(&review).expect("json");
        let ours = decode_review(&body).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let slow = decode_review_slowly(std::str::from_utf8(&body).expect("utf-8"))
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert!(same(&ours, &slow), "{name}: both ways agree");
        if Route::of_request(&ours).is_none() {
            // Options objects (PodExecOptions) are no DynamicObject for kube either.
            assert!(ours.object.is_none() && ours.old_object.is_none(), "{name}");
            unhandled += 1;
            continue;
        }
        let mut theirs = kube_decode(&review);
        if theirs.resource.resource == "persistentvolumeclaims" {
            claims += 1;
            assert!(same(&ours, &theirs), "{name}: a claim is decoded whole");
            continue;
        }
        let whole = theirs.clone();
        forget_unread(&mut theirs);
        let mut ours = ours;
        forget_unread(&mut ours);
        assert!(same(&ours, &theirs), "{name}");
        if theirs.resource.resource == "statefulsets" && !same(&whole, &theirs) {
            sets_trimmed += 1;
            let object = ours.object.as_ref().expect("a set");
            assert_eq!(object.metadata.managed_fields, None, "{name}");
            assert_eq!(object.data.get("status"), None, "{name}");
            assert_eq!(object.data["spec"].get("template"), None, "{name}");
        }
    }
    assert!(
        claims > 0 && sets_trimmed > 0 && unhandled > 0,
        "{claims} {sets_trimmed} {unhandled}"
    );
}

fn review(object: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
        "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
        "name": "data-web-0", "namespace": "default", "operation": "CREATE",
        "userInfo": {}, "object": object, "oldObject": null}})
}

fn error_of(body: &[u8]) -> (String, Option<String>) {
    let e = decode_review(body).expect_err("must not decode");
    (e.error.to_string(), e.uid)
}

#[test]
fn malformed_reviews_are_told_apart() {
    let (e, uid) = error_of(b"{nope");
    assert!(e.starts_with("not JSON: "), "{e}");
    assert_eq!(uid, None);
    let (e, _) = error_of(b"{\"apiVersion\": \"v\", \"kind\": \"k\"} trailing");
    assert!(e.starts_with("not JSON: "), "{e}");
    // Invalid UTF-8 where nothing reads it: an unknown field's value.
    let mut body = serde_json::to_vec(&review(json!({"metadata": {}}))).expect("json");
    let at = body.len() - 1;
    body.splice(at..at, br#","unknown":"\xff""#.iter().copied());
    let pos = body.windows(4).position(|w| w == br"\xff").expect("marker");
    body.splice(pos..pos + 4, [0xff]);
    let (e, _) = error_of(&body);
    assert!(e.starts_with("not JSON: not UTF-8"), "{e}");
    for body in [
        &br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#[..],
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}"#,
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":[1]}"#,
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"x"}"#,
    ] {
        assert_eq!(
            error_of(body).0,
            "not an AdmissionReview with a request",
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    let mut no_version = review(json!({"metadata": {}}));
    no_version.as_object_mut().map(|r| r.remove("apiVersion"));
    let (e, uid) = error_of(&serde_json::to_vec(&no_version).expect("json"));
    assert!(e.contains("missing field `apiVersion`"), "{e}");
    assert_eq!(uid.as_deref(), Some("u-1"));
    for operation in ["5", "[]", "\"NUKE\""] {
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"AdmissionReview","request":{{"uid":"u-9","operation":{operation}}}}}"#
        );
        let (e, uid) = error_of(body.as_bytes());
        assert!(e.starts_with("malformed AdmissionReview: "), "{e}");
        assert_eq!(uid.as_deref(), Some("u-9"));
    }
}

#[test]
fn an_object_must_have_metadata() {
    for object in [
        json!({"spec": {}}),
        json!({"metadata": "x"}),
        json!({"metadata": null}),
        json!([1]),
        json!("x"),
    ] {
        let body = serde_json::to_vec(&review(object.clone())).expect("json");
        let (e, uid) = error_of(&body);
        assert_eq!(
            e, "malformed AdmissionReview: request.object: metadata must be an object",
            "{object}"
        );
        assert_eq!(uid.as_deref(), Some("u-1"));
    }
    let mut bad_old = review(json!({"metadata": {}}));
    bad_old["request"]["oldObject"] = json!({"spec": 1});
    let (e, _) = error_of(&serde_json::to_vec(&bad_old).expect("json"));
    assert_eq!(
        e,
        "malformed AdmissionReview: request.oldObject: metadata must be an object"
    );
    let (e, _) = error_of(
        &serde_json::to_vec(&review(json!({"metadata": {"labels": {"a": 1}}}))).expect("json"),
    );
    assert!(
        e.starts_with("malformed AdmissionReview: request.object: "),
        "{e}"
    );
}

/// What the apiserver sends for `kubectl exec`: a CONNECT of `pods/exec` whose object is
/// `PodExecOptions`, with no metadata.
fn connect_exec() -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-exec", "kind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "subResource": "exec",
        "requestKind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "requestSubResource": "exec",
        "name": "web-0", "namespace": "default", "operation": "CONNECT",
        "userInfo": {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]},
        "object": {"kind": "PodExecOptions", "apiVersion": "v1", "stdin": true, "stdout": true,
                   "tty": true, "container": "app", "command": ["sh"]},
        "oldObject": null, "dryRun": false, "options": null}})
}

#[test]
fn unhandled_requests_need_no_kubernetes_objects() {
    let mut cases = vec![("CONNECT pods/exec".to_owned(), connect_exec())];
    // The same resources the rules handle, with a subresource or another operation.
    for (sub, operation) in [
        (Some("status"), "UPDATE"),
        (Some("scale"), "UPDATE"),
        (None, "DELETE"),
        (None, "CONNECT"),
    ] {
        for object in [json!({"spec": {}}), json!([1]), json!("x"), json!(7)] {
            let mut r = with_resource(review(object.clone()), "apps", "statefulsets");
            r["request"]["operation"] = json!(operation);
            r["request"]["oldObject"] = object.clone();
            if let Some(sub) = sub {
                r["request"]["subResource"] = json!(sub);
            }
            cases.push((format!("{sub:?} {operation} {object}"), r));
        }
    }
    for (what, review) in cases {
        let decoded = decode_review(&serde_json::to_vec(&review).expect("json"))
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(decoded.uid, review["request"]["uid"], "{what}");
        assert!(
            decoded.object.is_none() && decoded.old_object.is_none(),
            "{what}"
        );
    }
    // A body that is not JSON is still refused, handled or not.
    let mut body = serde_json::to_string(&connect_exec()).expect("json");
    body = body.replace(r#""stdin":true"#, r#""stdin"::true"#);
    assert!(error_of(body.as_bytes()).0.starts_with("not JSON: "));
}

#[test]
fn objects_decode_like_kube_dynamic_objects() {
    for object in [
        Value::Null,
        json!({"metadata": {"name": "n"}}),
        json!({"apiVersion": "v1", "metadata": {}, "spec": {"a": 1}}),
        json!({"kind": "PersistentVolumeClaim", "metadata": {}, "status": {}}),
        json!({"apiVersion": 1, "kind": "K", "metadata": {"name": "n"}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
            "name": "n", "labels": {"a": "b"},
            "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:storageClassName": {}}}}]
        }, "spec": {"storageClassName": "x"}}),
    ] {
        let review = review(object.clone());
        let body = serde_json::to_vec(&review).expect("json");
        let ours = decode_review(&body).expect("decodes");
        assert!(same(&ours, &kube_decode(&review)), "{object}");
    }
}

fn with_resource(mut review: Value, group: &str, resource: &str) -> Value {
    review["request"]["resource"] = json!({"group": group, "version": "v1", "resource": resource});
    review
}

#[test]
fn managed_fields_are_skipped_except_for_claims() {
    let meta = json!({"name": "web", "managedFields": [{"manager": "m", "operation": "Update",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]});
    let set = with_resource(
        review(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta})),
        "apps",
        "statefulsets",
    );
    let decoded = decode_review(&serde_json::to_vec(&set).expect("json")).expect("decodes");
    let object = decoded.object.expect("object");
    assert_eq!(object.metadata.managed_fields, None);
    assert_eq!(object.metadata.name.as_deref(), Some("web"));

    let claim = review(json!({"metadata": meta}));
    let decoded = decode_review(&serde_json::to_vec(&claim).expect("json")).expect("decodes");
    let fields = decoded.object.expect("object").metadata.managed_fields;
    assert_eq!(fields.map(|f| f.len()), Some(1));
    // A claim's managedFields that are not what the API defines fail it, as with kube.
    let bad = review(json!({"metadata": {"managedFields": "x"}}));
    let (e, uid) = error_of(&serde_json::to_vec(&bad).expect("json"));
    assert!(
        e.starts_with("malformed AdmissionReview: request.object: invalid type"),
        "{e}"
    );
    assert_eq!(uid.as_deref(), Some("u-1"));
}

#[test]
fn a_sets_pod_template_and_status_are_read_past() {
    let object = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "managedFields": [{"manager": "m"}]},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}}]},
        "status": {"replicas": 3}});
    let set = with_resource(review(object.clone()), "apps", "statefulsets");
    let decoded = decode_review(&serde_json::to_vec(&set).expect("json")).expect("decodes");
    let data = decoded.object.expect("object").data;
    assert_eq!(
        data,
        json!({"spec": {"replicas": 3,
            TEMPLATE_DIGEST: digest(r#"{"spec":{"containers":[{"name":"c"}]}}"#),
            "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}})
    );
    // What is read past still tells a changed template from the same one.
    let mut changed = object.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("db:2");
    let changed = with_resource(review(changed), "apps", "statefulsets");
    let changed = decode_review(&serde_json::to_vec(&changed).expect("json")).expect("decodes");
    let changed = changed.object.expect("object").data;
    assert!(pod_template_changed(&data["spec"], &changed["spec"]));
    assert!(!pod_template_changed(&data["spec"], &data["spec"]));
    assert!(pod_template_changed(
        &json!({"template": {"a": 1}}),
        &json!({"template": {"a": 2}})
    ));
    // A claim keeps them (it has no pod template; this one is hostile).
    let other = with_resource(review(object.clone()), "", "persistentvolumeclaims");
    let decoded = decode_review(&serde_json::to_vec(&other).expect("json")).expect("decodes");
    let data = decoded.object.expect("object").data;
    assert_eq!(data["spec"], object["spec"]);
    assert_eq!(data["status"], object["status"]);
    // A resource no rule handles: its objects are not built at all.
    let other = with_resource(review(object.clone()), "apps", "deployments");
    let decoded = decode_review(&serde_json::to_vec(&other).expect("json")).expect("decodes");
    assert!(decoded.object.is_none());
    // What is read past is still checked: a body with a broken template is not JSON.
    let mut body = serde_json::to_string(&set).expect("json");
    body = body.replace(r#""containers":"#, r#""containers"::"#);
    assert!(error_of(body.as_bytes()).0.starts_with("not JSON: "));
    // A spec that is not an object is kept as it is, template or not.
    for spec in [
        json!(null),
        json!([{"template": 1}]),
        json!("x"),
        json!(1.5),
    ] {
        let mut object = object.clone();
        object["spec"] = spec.clone();
        let set = with_resource(review(object), "apps", "statefulsets");
        let decoded = decode_review(&serde_json::to_vec(&set).expect("json")).expect("decodes");
        assert_eq!(decoded.object.expect("object").data["spec"], spec);
    }
}

#[test]
fn numbers_no_f64_holds_are_refused_only_where_they_are_read() {
    let huge = "1E400";
    let unknown = review(json!({"metadata": {"name": "n", "unknownField": "HUGE"}}));
    let body = serde_json::to_string(&unknown)
        .expect("json")
        .replace("\"HUGE\"", huge);
    assert!(decode_review(body.as_bytes()).is_ok(), "read past: {body}");
    let read = review(json!({"metadata": {"name": "n"}, "spec": {"x": "HUGE"}}));
    let body = serde_json::to_string(&read)
        .expect("json")
        .replace("\"HUGE\"", huge);
    let (e, uid) = error_of(body.as_bytes());
    assert!(
        e.starts_with("malformed AdmissionReview: request.object: number out of range"),
        "{e}"
    );
    assert_eq!(uid.as_deref(), Some("u-1"));
}

#[test]
fn objects_before_the_resource_decode_alike() {
    // The apiserver writes `resource` before the objects; another order decodes the same.
    let set = with_resource(
        review(json!({"metadata": {"name": "web", "managedFields": []},
            "spec": {"template": {}}, "status": {}})),
        "apps",
        "statefulsets",
    );
    let request = set["request"].as_object().expect("request");
    let mut reordered: Vec<_> = request.iter().collect();
    reordered.sort_by_key(|(k, _)| !k.ends_with("bject"));
    let fields: Vec<String> = reordered
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())))
        .collect();
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{{}}}}}"#,
        fields.join(",")
    );
    assert!(
        body.find("\"object\"") < body.find("\"resource\""),
        "{body}"
    );
    let decoded = decode_review(body.as_bytes()).expect("decodes");
    let expected = decode_review(&serde_json::to_vec(&set).expect("json")).expect("decodes");
    assert!(same(&decoded, &expected));
    assert_eq!(
        decoded.object.expect("object").data,
        json!({"spec": {TEMPLATE_DIGEST: digest("{}")}})
    );
}
