//! The admission router in-process (`tower::ServiceExt::oneshot`): envelope handling that does
//! not depend on any rule — uid echo, unhandled requests, 400/413/415/500, metrics.

use axum::http::StatusCode;
use serde_json::{Value, json};
use stateful_admission::admission::{Context, Phase, Policy, Verdict};
use stateful_admission::cluster::ClusterView;
use stateful_admission::review::builder::ReviewBuilder;

use crate::common::{app, app_with, fixture, post_raw, post_review};

fn router() -> axum::Router {
    app(ClusterView::empty(), Policy::default())
}

#[tokio::test]
async fn captured_requests_get_a_review_echoing_their_uid() {
    let app = router();
    for (name, endpoint) in [
        (
            "apiserver/statefulset-update-vct-change.mutate.json",
            "/mutate",
        ),
        (
            "apiserver/pvc-create-by-statefulset-controller.mutate.json",
            "/mutate",
        ),
        ("apiserver/pvc-create.validate.json", "/validate"),
        ("apiserver/pvc-update-expand-bound.mutate.json", "/mutate"),
        (
            "apiserver/pvc-update-expand-bound.validate.json",
            "/validate",
        ),
    ] {
        let review = fixture(name);
        let (status, body) = post_review(&app, endpoint, &review).await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
        assert_eq!(body["kind"], "AdmissionReview", "{name}");
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1", "{name}");
        assert_eq!(body["response"]["uid"], review["request"]["uid"], "{name}");
        assert!(
            body.get("request").is_none(),
            "{name}: request must not be echoed"
        );
    }
}

fn unhandled_requests() -> Vec<(&'static str, Value)> {
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "serviceName": "web",
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"storageClassName": "other"}}]}});
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-0", "namespace": "default"},
        "spec": {"resources": {"requests": {"storage": "not-a-quantity"}}}});
    vec![
        (
            "a pod",
            ReviewBuilder::new("CREATE", "", "v1", "pods", "Pod")
                .object(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}))
                .into_json(),
        ),
        (
            "the status subresource",
            ReviewBuilder::statefulset("UPDATE")
                .object(sts.clone())
                .old_object(sts.clone())
                .sub_resource("status")
                .into_json(),
        ),
        (
            "the scale subresource",
            ReviewBuilder::statefulset("UPDATE")
                .object(sts.clone())
                .old_object(sts.clone())
                .sub_resource("scale")
                .into_json(),
        ),
        (
            "a DELETE",
            ReviewBuilder::claim("DELETE").old_object(pvc.clone()).into_json(),
        ),
        (
            "a CONNECT",
            ReviewBuilder::new("CONNECT", "", "v1", "pods", "Pod").into_json(),
        ),
        (
            "another version of the resource",
            ReviewBuilder::new("UPDATE", "apps", "v1beta2", "statefulsets", "StatefulSet")
                .object(sts.clone())
                .old_object(sts)
                .into_json(),
        ),
        // Dispatch is decided before anything is required of the objects.
        (
            "a CONNECT of pods/exec carrying PodExecOptions",
            fixture("pod/connect-exec.json"),
        ),
        (
            "a status update whose object has no metadata",
            ReviewBuilder::statefulset("UPDATE")
                .object(json!({"status": {"replicas": 3}}))
                .old_object(json!({"status": {"replicas": 2}}))
                .sub_resource("status")
                .into_json(),
        ),
        (
            "a DELETE whose old object is not an object",
            ReviewBuilder::claim("DELETE").old_object(json!([1, 2])).into_json(),
        ),
        (
            "a CONNECT of a claim with options",
            ReviewBuilder::claim("CONNECT")
                .object(json!({"kind": "SomeOptions", "apiVersion": "v1", "path": "/"}))
                .into_json(),
        ),
    ]
}

#[tokio::test]
async fn unhandled_resources_subresources_and_operations_are_allowed_unchanged() {
    let app = router();
    for endpoint in ["/mutate", "/validate"] {
        for (what, review) in unhandled_requests() {
            let (status, body) = post_review(&app, endpoint, &review).await;
            assert_eq!(status, StatusCode::OK, "{what}: {body}");
            let response = &body["response"];
            assert_eq!(
                response["allowed"], true,
                "{what} on {endpoint}: {response}"
            );
            assert!(response.get("patch").is_none(), "{what}: {response}");
            assert!(response.get("warnings").is_none(), "{what}: {response}");
            assert_eq!(response["uid"], review["request"]["uid"]);
        }
    }
}

#[tokio::test]
async fn wrong_or_missing_content_type_is_415() {
    let app = router();
    let body = serde_json::to_vec(&fixture("apiserver/pvc-create.validate.json")).expect("json");
    for ct in [
        Some("text/plain"),
        Some("application/yaml"),
        Some("application/jsonx"),
        None,
    ] {
        let (status, bytes) = post_raw(&app, "/validate", ct, body.clone()).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}");
        let err: Value = serde_json::from_slice(&bytes).expect("JSON error body");
        assert!(
            err["error"]
                .as_str()
                .is_some_and(|e| e.contains("application/json"))
        );
    }
    for ct in ["application/json; charset=utf-8", "Application/JSON"] {
        let (status, _) = post_raw(&app, "/validate", Some(ct), body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{ct}");
    }
}

#[tokio::test]
async fn bodies_over_three_mebibytes_are_413() {
    let app = router();
    // A valid review padded past the limit with a huge annotation.
    let mut review = fixture("apiserver/pvc-create.validate.json");
    review["request"]["object"]["metadata"]["annotations"]["pad"] =
        Value::from("x".repeat(3 * 1024 * 1024));
    let body = serde_json::to_vec(&review).expect("json");
    let (status, bytes) = post_raw(&app, "/validate", Some("application/json"), body).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let err: Value = serde_json::from_slice(&bytes).expect("JSON error body");
    assert_eq!(err["error"], "request body too large");

    // Just under the limit is read and answered.
    let mut review = fixture("apiserver/pvc-create.validate.json");
    review["request"]["object"]["metadata"]["annotations"]["pad"] =
        Value::from("x".repeat(3 * 1024 * 1024 - 4096));
    let body = serde_json::to_vec(&review).expect("json");
    assert!(body.len() < 3 * 1024 * 1024);
    let (status, _) = post_raw(&app, "/validate", Some("application/json"), body).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_declared_oversized_length_is_refused_before_reading() {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;
    let req = Request::post("/mutate")
        .header("content-type", "application/json")
        .header("content-length", (64 * 1024 * 1024).to_string())
        .body(Body::empty())
        .expect("request");
    let resp = router().oneshot(req).await.expect("answer");
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn malformed_bodies_are_400_with_a_short_json_error() {
    let app = router();
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("not JSON", b"{not json".to_vec(), None),
        ("empty", Vec::new(), None),
        ("an array", b"[1,2]".to_vec(), None),
        ("no request", br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#.to_vec(), None),
        ("request null", br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":null}"#.to_vec(), None),
        (
            "request of the wrong shape",
            br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u-1","operation":5}}"#.to_vec(),
            Some("u-1"),
        ),
        (
            "object metadata of the wrong type",
            serde_json::to_vec(&{
                let mut r = fixture("apiserver/pvc-create.validate.json");
                r["request"]["object"]["metadata"]["labels"] = json!({"a": 1});
                r
            })
            .expect("json"),
            Some("4c114ae9-dfc0-44f7-91c9-cc0ae1fcaf46"),
        ),
        ("deeply nested", format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(), None),
        (
            "a handled request whose object has no metadata",
            serde_json::to_vec(&{
                let mut r = fixture("apiserver/pvc-create.validate.json");
                r["request"]["object"] = json!({"kind": "PodExecOptions", "stdin": true});
                r
            })
            .expect("json"),
            Some("4c114ae9-dfc0-44f7-91c9-cc0ae1fcaf46"),
        ),
    ];
    for (what, body, uid) in cases {
        let (status, bytes) = post_raw(&app, "/mutate", Some("application/json"), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}");
        let err: Value = serde_json::from_slice(&bytes).expect("JSON error body");
        let message = err["error"].as_str().unwrap_or_default();
        assert!(
            !message.is_empty() && message.len() < 300,
            "{what}: {message}"
        );
        assert_eq!(err["uid"].as_str(), uid, "{what}");
    }
}

#[tokio::test]
async fn a_panicking_rule_is_a_500_and_the_server_keeps_serving() {
    fn panicking(
        _: Phase,
        req: &kube::core::admission::AdmissionRequest<kube::core::DynamicObject>,
        _: &Context<'_>,
    ) -> Verdict {
        assert!(req.name != "boom", "rule panicked");
        Verdict::allow()
    }
    let (app, _) = app_with(panicking);
    let boom = ReviewBuilder::claim("CREATE")
        .object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "boom", "namespace": "default"}}))
        .into_json();
    let body = serde_json::to_vec(&boom).expect("json");
    let (status, bytes) = post_raw(&app, "/mutate", Some("application/json"), body).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let err: Value = serde_json::from_slice(&bytes).expect("JSON error body");
    assert_eq!(err["error"], "internal error");

    let fine = fixture("apiserver/pvc-create.validate.json");
    let (status, body) = post_review(&app, "/validate", &fine).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["response"]["allowed"], true);
}

#[tokio::test]
async fn denials_render_status_like_the_apiserver() {
    fn deny(
        _: Phase,
        _: &kube::core::admission::AdmissionRequest<kube::core::DynamicObject>,
        _: &Context<'_>,
    ) -> Verdict {
        use stateful_admission::admission::FieldError;
        let mut v = Verdict::invalid(vec![
            FieldError::forbidden("spec.a", "may not change"),
            FieldError::invalid("spec.b", 0, "must be greater than 0"),
        ]);
        v.warn("careful");
        v
    }
    let (app, _) = app_with(deny);
    let review = fixture("apiserver/statefulset-update-vct-change.mutate.json");
    let (status, body) = post_review(&app, "/mutate", &review).await;
    assert_eq!(status, StatusCode::OK);
    let response = &body["response"];
    assert_eq!(response["allowed"], false);
    assert_eq!(response["uid"], review["request"]["uid"]);
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    assert_eq!(response["status"]["status"], "Failure");
    assert_eq!(
        response["status"]["message"],
        "StatefulSet.apps \"web\" is invalid: [spec.a: Forbidden: may not change, spec.b: Invalid value: 0: must be greater than 0]"
    );
    assert_eq!(
        response["status"]["details"]["causes"][0]["field"],
        "spec.a"
    );
    assert_eq!(
        response["status"]["details"]["causes"][0]["reason"],
        "FieldValueForbidden"
    );
    assert_eq!(response["warnings"], json!(["careful"]));
    assert!(response.get("patch").is_none());
}

#[tokio::test]
async fn metrics_count_reviews_by_endpoint_resource_operation_and_outcome() {
    fn allow(
        _: Phase,
        _: &kube::core::admission::AdmissionRequest<kube::core::DynamicObject>,
        _: &Context<'_>,
    ) -> Verdict {
        Verdict::allow()
    }
    let (app, registry) = app_with(allow);
    let review = fixture("apiserver/pvc-create.validate.json");
    for _ in 0..3 {
        post_review(&app, "/validate", &review).await;
    }
    post_raw(&app, "/mutate", Some("text/plain"), Vec::new()).await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(
        text.contains(r#"admission_requests_total{endpoint="validate",resource="persistentvolumeclaims",operation="CREATE",allowed="true",mutated="false"} 3"#),
        "{text}"
    );
    assert!(
        text.contains(r#"admission_request_duration_seconds_count{endpoint="validate""#),
        "{text}"
    );
    assert!(
        text.contains(r#"admission_requests_rejected_total{endpoint="mutate",code="415"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"admission_requests_in_flight{endpoint="validate"} 0"#),
        "{text}"
    );
}

#[tokio::test]
async fn objects_in_an_opted_out_namespace_are_allowed_unchanged() {
    let class = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "x"});
    let namespace = |name: &str, ignore: &str| {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": {"stateful-admission.io/ignore": ignore}}})
    };
    let view = ClusterView::from_json(&[
        class,
        namespace("sandbox", "true"),
        namespace("apps", "yes"),
    ])
    .expect("state");
    let app = app(view, Policy::default());
    let claim = |ns: &str| {
        ReviewBuilder::claim("CREATE")
            .object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": ns},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
            .into_json()
    };
    // Only the exact value "true" opts out; elsewhere the classless claim gets the default.
    let response = crate::common::review_response(&app, "/mutate", &claim("sandbox")).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
    let response = crate::common::review_response(&app, "/mutate", &claim("apps")).await;
    assert_eq!(
        crate::common::patch_of(&response),
        json!([{"op": "add", "path": "/spec/storageClassName", "value": "standard"}])
    );

    // A denial in an opted-out namespace is not given either.
    let bad = ReviewBuilder::statefulset("CREATE")
        .object(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "sandbox"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "serviceName": "web",
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}}}}))
        .into_json();
    let response = crate::common::review_response(&app, "/mutate", &bad).await;
    assert_eq!(response["allowed"], true, "{response}");
    let mut elsewhere = bad.clone();
    elsewhere["request"]["namespace"] = json!("apps");
    elsewhere["request"]["object"]["metadata"]["namespace"] = json!("apps");
    let response = crate::common::review_response(&app, "/mutate", &elsewhere).await;
    assert_eq!(response["allowed"], false, "{response}");
}

/// Collects formatted log lines.
#[derive(Clone, Default)]
struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// At the default level a review is logged when it was denied or warned about, not when it
/// was merely allowed or mutated (a PVC getting its default class).
#[tokio::test(flavor = "current_thread")]
async fn reviews_a_user_sees_the_effect_of_are_logged_at_info() {
    fn verdict(
        _: Phase,
        req: &kube::core::admission::AdmissionRequest<kube::core::DynamicObject>,
        _: &Context<'_>,
    ) -> Verdict {
        let mut v = match req.name.as_str() {
            "denied" => {
                Verdict::invalid(vec![stateful_admission::admission::FieldError::forbidden(
                    "spec.a",
                    "may not change",
                )])
            }
            _ => Verdict::allow(),
        };
        match req.name.as_str() {
            "warned" => v.warn("careful"),
            "mutated" => v.patch.push(json_patch::PatchOperation::Remove(
                json_patch::RemoveOperation {
                    path: json_patch::jsonptr::PointerBuf::from_tokens(["spec", "x"]),
                },
            )),
            _ => {}
        }
        v
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let (app, _) = app_with(verdict);
    for name in ["plain", "mutated", "warned", "denied"] {
        let review = ReviewBuilder::claim("CREATE")
            .object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": "default"}, "spec": {"x": 1}}))
            .into_json();
        let (status, _) = post_review(&app, "/mutate", &review).await;
        assert_eq!(status, StatusCode::OK);
    }
    let text = String::from_utf8(lines.0.lock().expect("lines").clone()).expect("utf-8");
    let logged: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "reviewed")
        .collect();
    let names: Vec<&str> = logged
        .iter()
        .filter_map(|l| l["fields"]["name"].as_str())
        .collect();
    assert_eq!(names, ["warned", "denied"], "{text}");
    assert_eq!(logged[1]["fields"]["allowed"], false);
    assert_eq!(logged[1]["level"], "INFO");
    assert!(logged[1]["fields"]["uid"].is_string());
}

#[tokio::test]
async fn in_warn_mode_a_denial_is_allowed_unchanged_with_the_denial_as_a_warning() {
    use prometheus_client::registry::Registry;
    use stateful_admission::admission::{AdmissionMode, FieldError, WOULD_DENY_PREFIX};
    use stateful_admission::server::metrics::Metrics;
    use stateful_admission::server::routes::{self, AdmissionState};
    use std::sync::Arc;
    fn deny_and_patch(
        _: Phase,
        _: &kube::core::admission::AdmissionRequest<kube::core::DynamicObject>,
        _: &Context<'_>,
    ) -> Verdict {
        let mut v = Verdict::invalid(vec![FieldError::forbidden("spec.a", "may not change")]);
        v.patch.push(
            serde_json::from_value(json!({"op": "remove", "path": "/spec/replicas"})).expect("op"),
        );
        v.warn("careful");
        v
    }
    let app = |mode: AdmissionMode| {
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        let policy = Policy {
            admission_mode: mode,
            ..Policy::default()
        };
        let mut state = AdmissionState::new(ClusterView::empty(), policy, metrics);
        state.evaluator = deny_and_patch;
        (routes::router(Arc::new(state)), registry)
    };
    let review = fixture("apiserver/statefulset-update-vct-change.mutate.json");
    let message = "StatefulSet.apps \"web\" is invalid: spec.a: Forbidden: may not change";

    let (warn, registry) = app(AdmissionMode::Warn);
    let (status, body) = post_review(&warn, "/mutate", &review).await;
    assert_eq!(status, StatusCode::OK);
    let response = &body["response"];
    assert_eq!(response["uid"], review["request"]["uid"]);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response["status"].get("code").is_none(), "{response}");
    // The patch that came with the denial is not applied: the object is stored as sent.
    assert!(response.get("patch").is_none(), "{response}");
    assert_eq!(
        response["warnings"],
        json!([format!("{WOULD_DENY_PREFIX}: {message}"), "careful"])
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(
        text.contains(r#"admission_would_deny_total{endpoint="mutate",resource="statefulsets",reason="Invalid"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"admission_requests_total{endpoint="mutate",resource="statefulsets",operation="UPDATE",allowed="true",mutated="false"} 1"#),
        "{text}"
    );

    // The same rules in enforce mode deny, and count nothing as would-deny.
    let (enforce, registry) = app(AdmissionMode::Enforce);
    let (_, body) = post_review(&enforce, "/mutate", &review).await;
    assert_eq!(body["response"]["allowed"], false);
    assert_eq!(body["response"]["status"]["message"], message);
    assert_eq!(body["response"]["warnings"], json!(["careful"]));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(!text.contains("admission_would_deny_total{"), "{text}");
}
