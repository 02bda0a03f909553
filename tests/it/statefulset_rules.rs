//! StatefulSet rules through the public surface: the router's `/mutate` and `/validate`,
//! offline review (the apiserver's order) and the `review` CLI.

use serde_json::{Value, json};
use stateful_admission::admission::{Context, GateStatus, Phase, Policy};
use stateful_admission::cluster::ClusterView;
use stateful_admission::review::builder::ReviewBuilder;
use stateful_admission::review::offline::{self, Phases};

use crate::common::{
    app, fixture, fixture_path, patch_of, post_review, review_response, run_binary, temp_file,
};

const DESIRED: &str = "stateful-admission.io/desired-volume-claim-templates";
const MAX_UNAVAILABLE: &str = "stateful-admission.io/max-unavailable";
const MAY_CHANGE: &str = "only metadata.labels, metadata.annotations, spec.resources.requests.storage and spec.volumeAttributesClassName of a volume claim template may change";

/// The captured `kubectl apply` raising a template's storage (1Gi -> 5Gi) and its chart label,
/// as a server-side dry run.
fn storage_change() -> Value {
    fixture("statefulset/update-vct-storage-label.dryrun.mutate.json")
}

fn create_with_max_unavailable() -> Value {
    fixture("statefulset/create-max-unavailable.mutate.json")
}

fn set(mut review: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    let node = review.pointer_mut(parent).expect("parent exists");
    match node {
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
        }
        Value::Array(items) => {
            let i: usize = key.parse().expect("index");
            items[i] = value;
        }
        other => panic!("cannot set {pointer} in {other}"),
    }
    review
}

fn remove(mut review: Value, pointer: &str) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    review
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .expect("parent object")
        .remove(key);
    review
}

const NEW_VCT: &str = "/request/object/spec/volumeClaimTemplates/0";

/// The review with the new template's field at `pointer` (relative to the template) set.
fn template_edit(pointer: &str, value: Value) -> Value {
    set(storage_change(), &format!("{NEW_VCT}{pointer}"), value)
}

fn offline_review(
    review: &Value,
    phases: Phases,
    view: &ClusterView,
    policy: &Policy,
) -> offline::Outcome {
    let ctx = Context { view, policy };
    offline::review(&serde_json::to_vec(review).expect("json"), phases, &ctx).expect("reviewable")
}

fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn denial_message(response: &Value) -> String {
    assert_eq!(response["allowed"], false, "{response}");
    response["status"]["message"]
        .as_str()
        .expect("message")
        .to_owned()
}

#[tokio::test]
async fn an_allowed_template_change_is_recorded_and_the_old_templates_put_back() {
    let router = app(ClusterView::empty(), Policy::default());
    let review = storage_change();
    let response = review_response(&router, "/mutate", &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(response["uid"], review["request"]["uid"]);
    let old_templates = review["request"]["oldObject"]["spec"]["volumeClaimTemplates"].clone();
    let patch = patch_of(&response);
    assert_eq!(
        patch[0],
        json!({"op": "replace", "path": "/spec/volumeClaimTemplates", "value": old_templates})
    );
    assert_eq!(patch[1]["op"], "add");
    assert_eq!(
        patch[1]["path"],
        "/metadata/annotations/stateful-admission.io~1desired-volume-claim-templates"
    );
    assert_eq!(patch.as_array().map(Vec::len), Some(2), "{patch}");
    let stored: Value =
        serde_json::from_str(patch[1]["value"].as_str().expect("string")).expect("JSON");
    assert_eq!(
        stored,
        json!([{"metadata": {"labels": {"helm.sh/chart": "web-1.0.1"}, "name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}}, "volumeMode": "Filesystem"}}])
    );
    assert_eq!(
        warnings(&response),
        [
            "volume claim template \"data\": storage 1Gi -> 5Gi; labels changed; recorded in stateful-admission.io/desired-volume-claim-templates; policy OnDelete: only new or re-created claims use it"
        ]
    );
}

#[test]
fn the_patched_object_keeps_every_other_field_and_passes_validation() {
    let review = storage_change();
    let outcome = offline_review(
        &review,
        Phases::Both,
        &ClusterView::empty(),
        &Policy::default(),
    );
    assert!(outcome.allowed, "{}", outcome.review);
    let object = outcome.object.expect("object");
    let mut expected = review["request"]["object"].clone();
    expected["spec"]["volumeClaimTemplates"] =
        review["request"]["oldObject"]["spec"]["volumeClaimTemplates"].clone();
    let desired = object["metadata"]["annotations"][DESIRED].clone();
    assert!(
        desired.as_str().is_some_and(|s| s.contains("\"5Gi\"")),
        "{desired}"
    );
    expected["metadata"]["annotations"][DESIRED] = desired;
    // Everything else, managedFields and the last-applied annotation included, is untouched.
    assert_eq!(object, expected);
}

#[test]
fn the_mutation_is_idempotent_on_reinvocation() {
    let view = ClusterView::empty();
    let policy = Policy::default();
    for review in [storage_change(), create_with_max_unavailable()] {
        // Both phases: the offline review returns the patched object only then.
        let first = offline_review(&review, Phases::Both, &view, &policy);
        assert!(first.allowed);
        assert_ne!(
            patch_of(&first.review["response"]),
            json!([]),
            "first call patches"
        );
        let patched = first.object.expect("object");
        let again = set(review.clone(), "/request/object", patched.clone());
        let second = offline_review(&again, Phases::Only(Phase::Mutate), &view, &policy);
        assert!(second.allowed, "{}", second.review);
        assert!(
            second.review["response"]
                .get("patch")
                .is_none_or(Value::is_null),
            "{}",
            second.review
        );
        assert_eq!(second.object.expect("object"), patched);
    }
}

#[tokio::test]
async fn forbidden_template_edits_are_denied_with_one_error_per_path() {
    let router = app(ClusterView::empty(), Policy::default());
    let p = "spec.volumeClaimTemplates[0]";
    let added = {
        let mut r = storage_change();
        let mut extra = r["request"]["object"]["spec"]["volumeClaimTemplates"][0].clone();
        extra["metadata"]["name"] = json!("logs");
        r["request"]["object"]["spec"]["volumeClaimTemplates"]
            .as_array_mut()
            .expect("list")
            .push(extra);
        r
    };
    let cases = [
        (
            fixture("statefulset/update-vct-storage-class.mutate.json"),
            format!("[{p}.spec.accessModes: Forbidden: may not change; {MAY_CHANGE}, {p}.spec.storageClassName: Forbidden: may not change; {MAY_CHANGE}]"),
        ),
        (
            template_edit("/spec/volumeMode", json!("Block")),
            format!("{p}.spec.volumeMode: Forbidden: may not change; {MAY_CHANGE}"),
        ),
        (
            template_edit("/spec/selector", json!({"matchLabels": {"tier": "db"}})),
            format!("{p}.spec.selector: Forbidden: may not change; {MAY_CHANGE}"),
        ),
        (
            template_edit("/spec/dataSource", json!({"kind": "PersistentVolumeClaim", "name": "seed"})),
            format!("{p}.spec.dataSource: Forbidden: may not change; {MAY_CHANGE}"),
        ),
        (
            template_edit("/spec/resources/limits", json!({"storage": "10Gi"})),
            format!("{p}.spec.resources.limits[storage]: Forbidden: may not change; {MAY_CHANGE}"),
        ),
        (
            template_edit("/metadata/name", json!("data2")),
            format!("{p}.metadata.name: Forbidden: volume claim template \"data\" may not be renamed to \"data2\"; {MAY_CHANGE}"),
        ),
        (
            added,
            format!("spec.volumeClaimTemplates[1]: Forbidden: volume claim template \"logs\" may not be added to an existing StatefulSet; {MAY_CHANGE}"),
        ),
        (
            set(storage_change(), "/request/object/spec/volumeClaimTemplates", json!([])),
            format!("spec.volumeClaimTemplates: Forbidden: volume claim template \"data\" may not be removed; {MAY_CHANGE}"),
        ),
        (
            template_edit("/spec/resources/requests/storage", json!("5 gigs")),
            format!("{p}.spec.resources.requests[storage]: Invalid value: \"5 gigs\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        ),
        (
            template_edit("/spec/resources/requests/storage", json!(["5Gi"])),
            format!("{p}.spec.resources.requests[storage]: Invalid value: \"[\\\"5Gi\\\"]\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        ),
        (
            set(storage_change(), "/request/object/spec/volumeClaimTemplates", json!("data")),
            "spec.volumeClaimTemplates: Invalid value: string: must be a list of PersistentVolumeClaim templates".to_owned(),
        ),
    ];
    for (review, want) in cases {
        let (status, body) = post_review(&router, "/mutate", &review).await;
        assert_eq!(status, 200);
        let response = &body["response"];
        assert_eq!(response["status"]["code"], 422, "{response}");
        assert_eq!(response["status"]["reason"], "Invalid");
        assert_eq!(
            denial_message(response),
            format!("StatefulSet.apps \"web\" is invalid: {want}")
        );
        assert!(
            response.get("patch").is_none_or(Value::is_null),
            "a denial carries no patch"
        );
    }
}

#[tokio::test]
async fn semantically_equal_templates_and_unrelated_updates_are_not_changes() {
    let router = app(ClusterView::empty(), Policy::default());
    // Same templates written as 1024Mi without the defaulted fields, labels unchanged.
    let old_vct = storage_change()["request"]["oldObject"]["spec"]["volumeClaimTemplates"].clone();
    let mut same = old_vct.clone();
    same[0] = json!({"metadata": {"name": "data", "labels": {"helm.sh/chart": "web-1.0.0"}},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1024Mi"}}}});
    let unchanged = set(
        storage_change(),
        "/request/object/spec/volumeClaimTemplates",
        same,
    );
    let response = review_response(&router, "/mutate", &unchanged).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(patch_of(&response), json!([]));
    assert!(warnings(&response).is_empty());

    // A recorded desire stays when an update does not touch the templates.
    let stored = r#"[{"metadata":{"name":"data"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"5Gi"}}}}]"#;
    let mut review = set(
        storage_change(),
        "/request/object/spec/volumeClaimTemplates",
        old_vct,
    );
    review["request"]["oldObject"]["metadata"]["annotations"][DESIRED] = json!(stored);
    review["request"]["object"]["metadata"]["annotations"][DESIRED] = json!(stored);
    let response = review_response(&router, "/mutate", &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(patch_of(&response), json!([]));
}

#[tokio::test]
async fn hostile_desired_annotations_are_denied() {
    let router = app(ClusterView::empty(), Policy::default());
    let old_vct = storage_change()["request"]["oldObject"]["spec"]["volumeClaimTemplates"].clone();
    let base = set(
        storage_change(),
        "/request/object/spec/volumeClaimTemplates",
        old_vct,
    );
    let path = "metadata.annotations[stateful-admission.io/desired-volume-claim-templates]";
    let huge = format!("[{}]", " ".repeat(300 * 1024));
    let cases = [
        ("{not json".to_owned(), format!("{path}: Invalid value: \"{{not json\": must be a JSON array of volume claim templates: ")),
        (r#"{"a":1}"#.to_owned(), format!("{path}: Invalid value: \"{{\\\"a\\\":1}}\": must be a JSON array of volume claim templates")),
        (r#"[{"spec":{"accessModes":"RWO"}}]"#.to_owned(), format!("{path}: Invalid value: ")),
        (r#"[{"metadata":{"name":"other"}}]"#.to_owned(), format!("{path}: Invalid value: ")),
        (
            r#"[{"metadata":{"name":"data"},"spec":{"storageClassName":"gold","accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}]"#.to_owned(),
            format!("{path}: Forbidden: template \"data\": spec.storageClassName differs from the live template; {MAY_CHANGE}"),
        ),
        (huge, format!("{path}: Too long: must have at most 262144 bytes")),
    ];
    for (value, want) in cases {
        let mut review = base.clone();
        review["request"]["object"]["metadata"]["annotations"][DESIRED] = json!(value);
        let response = review_response(&router, "/mutate", &review).await;
        let message = denial_message(&response);
        assert!(
            message.starts_with(&format!("StatefulSet.apps \"web\" is invalid: {want}")),
            "{message}"
        );
        assert!(message.len() < 2048, "hostile values are not echoed whole");
    }
    // Also on CREATE.
    let mut review = create_with_max_unavailable();
    review["request"]["object"]["metadata"]["annotations"][DESIRED] = json!("nope");
    let message = denial_message(&review_response(&router, "/mutate", &review).await);
    assert!(message.contains(path), "{message}");
}

#[tokio::test]
async fn the_update_policy_annotation_shapes_the_warning_and_is_validated() {
    let router = app(ClusterView::empty(), Policy::default());
    let mut review = storage_change();
    review["request"]["object"]["metadata"]["annotations"]["stateful-admission.io/volume-claim-update-policy"] =
        json!("InPlace");
    let response = review_response(&router, "/mutate", &review).await;
    assert!(
        warnings(&response)[0].contains("policy InPlace: existing claims are patched in place")
    );

    let decrease = template_edit("/spec/resources/requests/storage", json!("512Mi"));
    let response = review_response(&router, "/mutate", &decrease).await;
    assert_eq!(response["allowed"], true);
    let w = warnings(&response);
    assert!(
        w[0].starts_with("volume claim template \"data\": storage 1Gi -> 512Mi; labels changed;"),
        "{w:?}"
    );
    assert_eq!(
        w[1],
        "volume claim template \"data\": storage decrease 1Gi -> 512Mi only affects new claims; existing claims are never shrunk"
    );

    review["request"]["object"]["metadata"]["annotations"]["stateful-admission.io/volume-claim-update-policy"] =
        json!("Eventually");
    let response = review_response(&router, "/mutate", &review).await;
    assert_eq!(
        denial_message(&response),
        "StatefulSet.apps \"web\" is invalid: metadata.annotations[stateful-admission.io/volume-claim-update-policy]: Unsupported value: \"Eventually\": supported values: \"InPlace\", \"OnDelete\""
    );
}

#[tokio::test]
async fn max_unavailable_is_validated_in_both_phases_with_upstream_messages() {
    let router = app(ClusterView::empty(), Policy::default());
    let p = "spec.updateStrategy.rollingUpdate.maxUnavailable";
    let percent = "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%' or '93%', regex used for validation is '[0-9]+%')";
    let cases = [
        (json!(0), format!("{p}: Invalid value: 0: cannot be 0")),
        (json!("0%"), format!("{p}: Invalid value: 0%: cannot be 0")),
        (
            json!(-2),
            format!("{p}: Invalid value: -2: must be greater than or equal to 0"),
        ),
        (
            json!("101%"),
            format!("{p}: Invalid value: 101%: must not be greater than 100%"),
        ),
        (
            json!("abc"),
            format!("[{p}: Invalid value: abc: {percent}, {p}: Invalid value: abc: cannot be 0]"),
        ),
        (json!("50"), format!("{p}: Invalid value: 50: {percent}")),
        (
            json!(true),
            format!("{p}: Invalid value: true: must be an integer or percentage (e.g '5%%')"),
        ),
    ];
    for (value, want) in cases {
        let review = set(
            create_with_max_unavailable(),
            "/request/object/spec/updateStrategy/rollingUpdate/maxUnavailable",
            value.clone(),
        );
        for endpoint in ["/mutate", "/validate"] {
            let response = review_response(&router, endpoint, &review).await;
            assert_eq!(response["status"]["code"], 422, "{endpoint} {value}");
            assert_eq!(
                denial_message(&response),
                format!("StatefulSet.apps \"web\" is invalid: {want}"),
                "{endpoint}"
            );
        }
    }
    let on_delete = set(
        create_with_max_unavailable(),
        "/request/object/spec/updateStrategy/type",
        json!("OnDelete"),
    );
    assert_eq!(
        denial_message(&review_response(&router, "/validate", &on_delete).await),
        "StatefulSet.apps \"web\" is invalid: spec.updateStrategy.rollingUpdate: Invalid value: apps.RollingUpdateStatefulSetStrategy{Partition:0, MaxUnavailable:(*intstr.IntOrString)(2)}: only allowed for updateStrategy 'RollingUpdate'"
    );
    let negative = set(
        create_with_max_unavailable(),
        "/request/object/spec/updateStrategy/rollingUpdate/partition",
        json!(-1),
    );
    assert_eq!(
        denial_message(&review_response(&router, "/mutate", &negative).await),
        "StatefulSet.apps \"web\" is invalid: spec.updateStrategy.rollingUpdate.partition: Invalid value: -1: must be greater than or equal to 0"
    );
    // Also on UPDATE.
    let update = set(
        storage_change(),
        "/request/object/spec/updateStrategy/rollingUpdate/maxUnavailable",
        json!(0),
    );
    assert_eq!(
        review_response(&router, "/mutate", &update).await["status"]["code"],
        422
    );
}

#[tokio::test]
async fn max_unavailable_above_replicas_warns_or_denies_when_strict() {
    let review = set(
        create_with_max_unavailable(),
        "/request/object/spec/updateStrategy/rollingUpdate/maxUnavailable",
        json!(5),
    );
    let lenient = app(ClusterView::empty(), Policy::default());
    let response = review_response(&lenient, "/mutate", &review).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(
        warnings(&response),
        [
            "spec.updateStrategy.rollingUpdate.maxUnavailable: 5 is greater than spec.replicas (3); all 3 pods it applies to may be unavailable at once during an update"
        ]
    );
    // The validating phase repeats denials only, never the warning.
    assert!(warnings(&review_response(&lenient, "/validate", &review).await).is_empty());

    let strict = app(
        ClusterView::empty(),
        Policy {
            strict_max_unavailable: true,
            ..Policy::default()
        },
    );
    for endpoint in ["/mutate", "/validate"] {
        assert_eq!(
            denial_message(&review_response(&strict, endpoint, &review).await),
            "StatefulSet.apps \"web\" is invalid: spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 5: must not be greater than spec.replicas (3); resolves to 5"
        );
    }
    // 100% of 3 with partition 2 resolves to 3 against 1 staged replica.
    let mut review = set(
        create_with_max_unavailable(),
        "/request/object/spec/updateStrategy/rollingUpdate/maxUnavailable",
        json!("100%"),
    );
    review = set(
        review,
        "/request/object/spec/updateStrategy/rollingUpdate/partition",
        json!(2),
    );
    let response = review_response(&lenient, "/mutate", &review).await;
    assert_eq!(
        warnings(&response),
        [
            "spec.updateStrategy.rollingUpdate.maxUnavailable: 100% (3 of 3 pods) is greater than spec.replicas - partition (3 - 2 = 1); all 1 pods it applies to may be unavailable at once during an update"
        ]
    );
}

#[tokio::test]
async fn a_native_max_unavailable_is_copied_into_the_fallback_annotation() {
    let router = app(ClusterView::empty(), Policy::default());
    let response = review_response(&router, "/mutate", &create_with_max_unavailable()).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(
        patch_of(&response),
        json!([{"op": "add", "path": "/metadata/annotations/stateful-admission.io~1max-unavailable", "value": "2"}])
    );
    // No annotations at all: the map is created.
    let bare = remove(
        create_with_max_unavailable(),
        "/request/object/metadata/annotations",
    );
    let response = review_response(&router, "/mutate", &bare).await;
    assert_eq!(
        patch_of(&response),
        json!([{"op": "add", "path": "/metadata/annotations", "value": {MAX_UNAVAILABLE: "2"}}])
    );
    // A percent is kept as written; a user's other value is replaced, with a warning.
    let mut review = set(
        create_with_max_unavailable(),
        "/request/object/spec/updateStrategy/rollingUpdate/maxUnavailable",
        json!("34%"),
    );
    review["request"]["object"]["metadata"]["annotations"][MAX_UNAVAILABLE] = json!("1");
    let response = review_response(&router, "/mutate", &review).await;
    assert_eq!(patch_of(&response)[0]["value"], "34%");
    assert_eq!(
        warnings(&response),
        [
            "stateful-admission.io/max-unavailable: \"1\" replaced by spec.updateStrategy.rollingUpdate.maxUnavailable (34%)"
        ]
    );
    // Turned off: nothing is written.
    let off = app(
        ClusterView::empty(),
        Policy {
            max_unavailable_fallback: false,
            ..Policy::default()
        },
    );
    let response = review_response(&off, "/mutate", &create_with_max_unavailable()).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(patch_of(&response), json!([]));

    // The controller's probe found the gate on: the apiserver keeps the field, so no copy.
    // Gate off or not known yet: the copy is written.
    for (gate, copies) in [
        (GateStatus::Enabled, false),
        (GateStatus::Disabled, true),
        (GateStatus::Unknown, true),
    ] {
        let cell = stateful_admission::capabilities::CapabilityCell::new(
            crate::common::capabilities_with_gate(gate),
        );
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = std::sync::Arc::new(stateful_admission::server::metrics::Metrics::register(
            &mut registry,
        ));
        let state = stateful_admission::server::routes::AdmissionState::new(
            ClusterView::empty(),
            Policy::default(),
            metrics,
        )
        .with_capabilities(cell);
        let router = stateful_admission::server::routes::router(std::sync::Arc::new(state));
        let response = review_response(&router, "/mutate", &create_with_max_unavailable()).await;
        assert_eq!(response["allowed"], true);
        assert_eq!(patch_of(&response) != json!([]), copies, "{gate:?}");
    }
}

#[tokio::test]
async fn hostile_fallback_annotations_are_denied_and_valid_ones_checked_against_replicas() {
    let router = app(ClusterView::empty(), Policy::default());
    let path = "metadata.annotations[stateful-admission.io/max-unavailable]";
    let without_native = remove(
        create_with_max_unavailable(),
        "/request/object/spec/updateStrategy/rollingUpdate/maxUnavailable",
    );
    let cases = [
        (
            "x".repeat(100_000),
            format!("{path}: Too long: must have at most 64 bytes"),
        ),
        (
            "0".to_owned(),
            format!("{path}: Invalid value: 0: cannot be 0"),
        ),
        (
            "250%".to_owned(),
            format!("{path}: Invalid value: 250%: must not be greater than 100%"),
        ),
        (
            "{\"a\":1}".to_owned(),
            format!("[{path}: Invalid value: {{\"a\":1}}: a valid percent string"),
        ),
    ];
    for (value, want) in cases {
        let mut review = without_native.clone();
        review["request"]["object"]["metadata"]["annotations"][MAX_UNAVAILABLE] = json!(value);
        for endpoint in ["/mutate", "/validate"] {
            let message = denial_message(&review_response(&router, endpoint, &review).await);
            assert!(
                message.starts_with(&format!("StatefulSet.apps \"web\" is invalid: {want}")),
                "{message}"
            );
            assert!(message.len() < 1024);
        }
    }
    let mut review = without_native;
    review["request"]["object"]["metadata"]["annotations"][MAX_UNAVAILABLE] = json!("7");
    let response = review_response(&router, "/mutate", &review).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(
        patch_of(&response),
        json!([]),
        "a user's annotation without a native field stays"
    );
    assert!(
        warnings(&response)[0].starts_with(&format!("{path}: 7 is greater than spec.replicas (3)"))
    );
}

#[tokio::test]
async fn malformed_statefulsets_are_denied_not_crashed_on() {
    let router = app(ClusterView::empty(), Policy::default());
    let no_spec = remove(create_with_max_unavailable(), "/request/object/spec");
    assert_eq!(
        denial_message(&review_response(&router, "/mutate", &no_spec).await),
        "StatefulSet.apps \"web\" is invalid: spec: Required value"
    );
    let wrong = set(
        create_with_max_unavailable(),
        "/request/object/spec",
        json!("spec"),
    );
    assert_eq!(
        review_response(&router, "/validate", &wrong).await["status"]["code"],
        422
    );
    let partition = set(
        create_with_max_unavailable(),
        "/request/object/spec/updateStrategy/rollingUpdate/partition",
        json!("two"),
    );
    assert_eq!(
        denial_message(&review_response(&router, "/mutate", &partition).await),
        "StatefulSet.apps \"web\" is invalid: spec.updateStrategy.rollingUpdate.partition: Invalid value: \"two\": must be an integer"
    );
    // Strategy missing entirely: defaults apply, nothing to say.
    let bare = remove(
        create_with_max_unavailable(),
        "/request/object/spec/updateStrategy",
    );
    let response = review_response(&router, "/mutate", &bare).await;
    assert_eq!(response["allowed"], true, "{response}");
}

#[test]
fn review_cli_warns_about_orphaned_claims_on_create() {
    let state = fixture_path("statefulset/state-orphaned-claims.json");
    let input = fixture_path("statefulset/create-max-unavailable.mutate.json");
    let run = run_binary(
        &[
            "review",
            "--state",
            state.to_str().expect("utf-8"),
            input.to_str().expect("utf-8"),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let response = &run.json()["response"];
    assert_eq!(response["allowed"], true);
    assert_eq!(
        warnings(response),
        [
            "PersistentVolumeClaim data-web-1 already exists: differs from template \"data\" in accessModes; the set will use it as is and never update it in place",
            "PersistentVolumeClaim data-web-2 already exists: differs from template \"data\" in volumeMode; the set will use it as is and never update it in place",
        ]
    );
    assert_eq!(
        patch_of(response),
        json!([{"op": "add", "path": "/metadata/annotations/stateful-admission.io~1max-unavailable", "value": "2"}])
    );
}

#[test]
fn review_cli_records_allowed_changes_and_denies_forbidden_ones() {
    let run = run_binary(
        &["review", "-"],
        Some(&serde_json::to_vec(&storage_change()).expect("json")),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let response = &run.json()["response"];
    assert_eq!(patch_of(response)[0]["path"], "/spec/volumeClaimTemplates");
    assert_eq!(warnings(response).len(), 1);

    let forbidden = fixture_path("statefulset/update-vct-storage-class.mutate.json");
    let run = run_binary(&["review", forbidden.to_str().expect("utf-8")], None);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let message = denial_message(&run.json()["response"]);
    assert!(
        message.contains("spec.volumeClaimTemplates[0].spec.storageClassName: Forbidden"),
        "{message}"
    );

    let strict_input = set(
        create_with_max_unavailable(),
        "/request/object/spec/updateStrategy/rollingUpdate/maxUnavailable",
        json!(9),
    );
    let file = temp_file(".json", &serde_json::to_vec(&strict_input).expect("json"));
    let path = file.path().to_str().expect("utf-8");
    assert_eq!(run_binary(&["review", path], None).code, 0);
    let run = run_binary(&["review", "--strict-max-unavailable", path], None);
    assert_eq!(run.code, 1);
    assert!(
        denial_message(&run.json()["response"])
            .contains("must not be greater than spec.replicas (3)")
    );
    let run = run_binary(
        &[
            "review",
            "--max-unavailable-fallback=false",
            "--phase",
            "mutate",
            path,
        ],
        None,
    );
    assert_eq!(run.code, 0);
    assert!(
        run.json()["response"]
            .get("patch")
            .is_none_or(Value::is_null)
    );
}

/// A template change of a long volumeAttributesClassName together with a size and a label:
/// every change is named with its old and new value, in warnings of at most 256 characters,
/// split rather than cut.
#[tokio::test]
async fn a_long_class_change_is_named_in_full_in_short_warnings() {
    let review = fixture("statefulset/update-vct-long-class.mutate.json");
    let old = "standard-rwo-iops-3000-throughput-125mibps-europe-west4-a";
    let new = "premium-rwo-iops-16000-throughput-1000mibps-encrypted-europe-west4-a";
    let want = [
        format!(
            "volume claim template \"data\": storage 1Gi -> 5Gi; volumeAttributesClassName \"{old}\" -> \"{new}\"; labels changed"
        ),
        "volume claim template \"data\": recorded in stateful-admission.io/desired-volume-claim-templates; policy OnDelete: only new or re-created claims use it".to_owned(),
    ];
    let router = app(ClusterView::empty(), Policy::default());
    let response = review_response(&router, "/mutate", &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(warnings(&response), want);
    let patch = patch_of(&response);
    assert_eq!(patch[0]["path"], "/spec/volumeClaimTemplates");
    assert_eq!(
        patch[0]["value"][0]["spec"]["volumeAttributesClassName"], old,
        "the live template is put back"
    );
    let stored = patch[1]["value"].as_str().expect("the desired templates");
    assert!(stored.contains(new), "{stored}");

    let run = run_binary(
        &[
            "review",
            fixture_path("statefulset/update-vct-long-class.mutate.json")
                .to_str()
                .expect("utf-8"),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(warnings(&run.json()["response"]), want);
    for w in &want {
        assert!(
            w.chars().count() <= 256,
            "{} characters: {w}",
            w.chars().count()
        );
    }
}

/// `updateStrategy: {type: RollingUpdate}` without `rollingUpdate`, with a budget in the
/// annotation, gets the `rollingUpdate: {partition: 0}` the apiserver defaults an empty type
/// to: without it the StatefulSet controller re-creates a pod deleted for the budget at the
/// old revision (upstream `newVersionedStatefulSetPod`). Nothing else is touched.
#[tokio::test]
async fn a_type_only_strategy_with_a_budget_gets_the_rolling_update_block() {
    let review = fixture("statefulset/create-type-only-max-unavailable.mutate.json");
    let want_patch = json!([{"op": "add", "path": "/spec/updateStrategy/rollingUpdate",
                             "value": {"partition": 0}}]);
    let want_warnings = [
        "spec.updateStrategy.rollingUpdate: set to {partition: 0}, as the apiserver defaults an empty type; without it the StatefulSet controller re-creates pods deleted for stateful-admission.io/max-unavailable at the old revision",
    ];
    let router = app(ClusterView::empty(), Policy::default());
    let response = review_response(&router, "/mutate", &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(patch_of(&response), want_patch);
    assert_eq!(warnings(&response), want_warnings);
    assert!(warnings(&review_response(&router, "/validate", &review).await).is_empty());

    // The apiserver's order, then a reinvocation on the result: nothing more to do.
    let view = ClusterView::empty();
    let policy = Policy::default();
    let first = offline_review(&review, Phases::Both, &view, &policy);
    assert!(first.allowed, "{}", first.review);
    let object = first.object.expect("object");
    assert_eq!(
        object["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    let mut expected = review["request"]["object"].clone();
    expected["spec"]["updateStrategy"] = object["spec"]["updateStrategy"].clone();
    assert_eq!(object, expected, "nothing else changes");
    let again = set(review.clone(), "/request/object", object);
    let second = offline_review(&again, Phases::Only(Phase::Mutate), &view, &policy);
    assert!(
        second.review["response"].get("patch").is_none(),
        "{}",
        second.review
    );

    let run = run_binary(
        &[
            "review",
            fixture_path("statefulset/create-type-only-max-unavailable.mutate.json")
                .to_str()
                .expect("utf-8"),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(patch_of(&run.json()["response"]), want_patch);

    // A set stored before the webhook ran gets it on its next update; `rollingUpdate: null`
    // is the same as none.
    let mut update = set(review.clone(), "/request/operation", json!("UPDATE"));
    update["request"]["oldObject"] = review["request"]["object"].clone();
    update["request"]["object"]["spec"]["updateStrategy"]["rollingUpdate"] = Value::Null;
    let response = review_response(&router, "/mutate", &update).await;
    assert_eq!(patch_of(&response), want_patch);

    // Not where defaulting already gave one, nor without a budget, nor for OnDelete.
    for (what, review) in [
        (
            "an empty type",
            set(
                review.clone(),
                "/request/object/spec/updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            ),
        ),
        ("no budget", {
            let mut r = review.clone();
            r["request"]["object"]["metadata"]["annotations"]
                .as_object_mut()
                .and_then(|a| a.remove(MAX_UNAVAILABLE))
                .expect("the annotation");
            r
        }),
        (
            "OnDelete",
            set(
                review.clone(),
                "/request/object/spec/updateStrategy",
                json!({"type": "OnDelete"}),
            ),
        ),
    ] {
        let response = review_response(&router, "/mutate", &review).await;
        assert_eq!(response["allowed"], true, "{what}: {response}");
        assert_eq!(patch_of(&response), json!([]), "{what}");
    }
}

/// An `InPlace` set `web` of three replicas as stored, with `strategy` as its update strategy,
/// running `image` with claims of `size`.
fn in_place_set(strategy: Value, image: &str, size: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "db", "uid": "5b1f0e4c-6f0a-4c57-9d0e-1d2b3c4d5e6f",
                     "resourceVersion": "1200", "generation": 4,
                     "labels": {"app": "web"},
                     "annotations": {"stateful-admission.io/volume-claim-update-policy": "InPlace",
                                     "stateful-admission.io/restart-pods-for-resize": "true"}},
        "spec": {"replicas": 3, "serviceName": "web", "podManagementPolicy": "OrderedReady",
                 "revisionHistoryLimit": 10,
                 "selector": {"matchLabels": {"app": "web"}},
                 "updateStrategy": strategy,
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "db", "image": image}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                              "resources": {"requests": {"storage": size}},
                              "volumeMode": "Filesystem"}}]},
    })
}

/// An UPDATE of [`in_place_set`] from `old` to `new` (image, size), as the apiserver sends it.
fn in_place_update(strategy: &Value, old: (&str, &str), new: (&str, &str)) -> Value {
    ReviewBuilder::statefulset("UPDATE")
        .object(in_place_set(strategy.clone(), new.0, new.1))
        .old_object(in_place_set(strategy.clone(), old.0, old.1))
        .into_json()
}

/// The object as the mutating response leaves it: its JSON patch applied to the request's.
fn mutated(review: &Value, response: &Value) -> Value {
    assert_eq!(response["allowed"], true, "{response}");
    let mut object = review["request"]["object"].clone();
    let patch: json_patch::Patch =
        serde_json::from_value(patch_of(response)).expect("a JSON patch");
    json_patch::patch(&mut object, &patch).expect("the patch applies to the request's object");
    object
}

/// The rollout hold the webhook records on a set, parsed.
fn rollout_hold(object: &Value) -> Option<Value> {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get("stateful-admission.io/rollout-hold"))
        .map(|raw| {
            serde_json::from_str(raw.as_str().expect("an annotation value is a string"))
                .expect("the hold is JSON")
        })
}

/// One update that changes both the pod template and a claim template's storage of an
/// `InPlace` set under RollingUpdate: the built-in rolling update is held (the partition raised
/// to the replicas: upstream's `updateStatefulSet` replaces only the ordinals at or above the
/// partition), and the user's
/// partition kept in `stateful-admission.io/rollout-hold`, so that each replica is re-created
/// once, after its claims were patched. Not under OnDelete (nothing rolls there), nor for a
/// change of one of the two.
#[tokio::test]
async fn one_update_of_image_and_storage_holds_the_rolling_update_at_the_replicas() {
    let router = app(ClusterView::empty(), Policy::default());
    let rolling = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}});
    let review = in_place_update(&rolling, ("db:1", "1Gi"), ("db:2", "2Gi"));
    let response = review_response(&router, "/mutate", &review).await;
    let object = mutated(&review, &response);
    assert_eq!(
        object.pointer("/spec/updateStrategy/rollingUpdate/partition"),
        Some(&json!(3)),
        "the partition raised to the replicas: {}",
        patch_of(&response)
    );
    let hold = rollout_hold(&object)
        .unwrap_or_else(|| panic!("no rollout hold recorded: {}", patch_of(&response)));
    assert_eq!(hold["partition"], 3, "{hold}");
    assert_eq!(hold["userPartition"], 0, "{hold}");
    // The image change stands; the claim template change is recorded as usual.
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"][0]["image"],
        "db:2"
    );
    assert!(
        object["metadata"]["annotations"][DESIRED]
            .as_str()
            .is_some_and(|d| d.contains("\"2Gi\"")),
        "{object}"
    );

    // The apiserver's order (both phases): allowed, the hold in the stored object.
    let view = ClusterView::empty();
    let policy = Policy::default();
    let outcome = offline_review(&review, Phases::Both, &view, &policy);
    assert!(outcome.allowed, "{}", outcome.review);
    let stored = outcome.object.expect("object");
    assert_eq!(
        stored.pointer("/spec/updateStrategy/rollingUpdate/partition"),
        Some(&json!(3))
    );
    // Reinvoked on its own result (the chart's `reinvocationPolicy: IfNeeded`): the user's
    // partition is still the one kept.
    let again = set(review.clone(), "/request/object", stored.clone());
    let response = review_response(&router, "/mutate", &again).await;
    let reinvoked = mutated(&again, &response);
    assert_eq!(
        reinvoked.pointer("/spec/updateStrategy/rollingUpdate/partition"),
        Some(&json!(3))
    );
    let hold = rollout_hold(&reinvoked).expect("the hold stays");
    assert_eq!(
        (&hold["partition"], &hold["userPartition"]),
        (&json!(3), &json!(0)),
        "{hold}"
    );

    for (what, review) in [
        (
            "OnDelete",
            in_place_update(
                &json!({"type": "OnDelete"}),
                ("db:1", "1Gi"),
                ("db:2", "2Gi"),
            ),
        ),
        (
            "the image alone",
            in_place_update(&rolling, ("db:1", "1Gi"), ("db:2", "1Gi")),
        ),
        (
            "the storage alone",
            in_place_update(&rolling, ("db:1", "1Gi"), ("db:1", "2Gi")),
        ),
    ] {
        let response = review_response(&router, "/mutate", &review).await;
        let object = mutated(&review, &response);
        let patch = patch_of(&response);
        assert!(
            patch.as_array().into_iter().flatten().all(|op| !op["path"]
                .as_str()
                .unwrap_or_default()
                .starts_with("/spec/updateStrategy")),
            "{what}: {patch}"
        );
        assert_eq!(
            object.pointer("/spec/updateStrategy"),
            review.pointer("/request/object/spec/updateStrategy"),
            "{what}: {patch}"
        );
        assert!(rollout_hold(&object).is_none(), "{what}: {patch}");
    }
}
