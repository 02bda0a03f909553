//! PersistentVolumeClaim rules through the public surface: the pure rule functions, the router
//! (`/mutate`, `/validate`) and the `review` CLI. Default class (KEP-3333), the set's stored
//! template on claim creation, expansion gating and shrink recovery (KEP-284), bad input.

use axum::http::StatusCode;
use serde_json::{Value, json};
use stateful_admission::admission::claim::{default_class, expansion};
use stateful_admission::admission::{Context, Denial, Phase, Policy, Verdict, evaluate};
use stateful_admission::cluster::ClusterView;
use stateful_admission::review::builder::ReviewBuilder;
use stateful_admission::review::offline::{self, Phases};

use crate::common::{app, fixture, fixture_path, patch_of, post_review, run_binary, temp_file};

// ---------------------------------------------------------------- builders

fn sc(name: &str, expandable: Option<bool>, annotations: Value) -> Value {
    let mut class = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": annotations},
        "provisioner": "csi.example.com"});
    if let Some(e) = expandable {
        class["allowVolumeExpansion"] = json!(e);
    }
    class
}

fn default_sc(name: &str, created: &str) -> Value {
    let mut class = sc(
        name,
        None,
        json!({"storageclass.kubernetes.io/is-default-class": "true"}),
    );
    class["metadata"]["creationTimestamp"] = json!(created);
    class
}

fn namespace(name: &str, default_class: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name,
        "annotations": {"stateful-admission.io/default-storage-class": default_class}}})
}

/// The classes of the expansion tables: `gold` expands (max 10Gi), `silver` does not,
/// `bronze` leaves the field unset, `broken` has a malformed limit.
fn expansion_view() -> ClusterView {
    view(&[
        sc(
            "gold",
            Some(true),
            json!({"stateful-admission.io/max-volume-size": "10Gi"}),
        ),
        sc("silver", Some(false), json!({})),
        sc("bronze", None, json!({})),
        sc(
            "broken",
            Some(true),
            json!({"stateful-admission.io/max-volume-size": "ten gigs"}),
        ),
        sc(
            "huge-limit",
            Some(true),
            json!({"stateful-admission.io/max-volume-size": "x".repeat(5000)}),
        ),
    ])
}

fn view(objects: &[Value]) -> ClusterView {
    ClusterView::from_json(objects).expect("valid objects")
}

/// A claim in `default` named `mine`.
fn pvc(class: Option<&str>, storage: &str) -> Value {
    let mut claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "mine", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}},
                 "volumeMode": "Filesystem"}});
    if let Some(c) = class {
        claim["spec"]["storageClassName"] = json!(c);
    }
    claim
}

fn with_status(mut claim: Value, status: Value) -> Value {
    claim["status"] = status;
    claim
}

fn bound(claim: Value, capacity: &str) -> Value {
    with_status(
        claim,
        json!({"phase": "Bound", "capacity": {"storage": capacity}}),
    )
}

fn update(old: &Value, new: &Value) -> Value {
    // The apiserver hands validating webhooks the new object with the old status.
    let mut new = new.clone();
    if let Some(status) = old.get("status") {
        new["status"] = status.clone();
    }
    ReviewBuilder::claim("UPDATE")
        .object(new)
        .old_object(old.clone())
        .into_json()
}

fn warnings_of(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn ctx<'a>(view: &'a ClusterView, policy: &'a Policy) -> Context<'a> {
    Context { view, policy }
}

fn no_recovery() -> Policy {
    Policy {
        expansion_recovery: false,
        ..Policy::default()
    }
}

/// What a table row expects.
#[derive(Debug, Clone)]
enum Want {
    Allowed,
    /// 403 with this detail.
    Forbidden(&'static str),
    /// 422 with this aggregated field-error message.
    Invalid(String),
}

fn check_verdict(what: &str, verdict: &Verdict, want: &Want) {
    match (want, &verdict.denial) {
        (Want::Allowed, None) => {}
        (Want::Forbidden(d), Some(Denial::Forbidden(got))) => assert_eq!(got, d, "{what}"),
        (Want::Invalid(m), Some(Denial::Invalid(errors))) => {
            let got: Vec<String> = errors.iter().map(ToString::to_string).collect();
            assert_eq!(&got.join(", "), m, "{what}");
        }
        _ => panic!("{what}: want {want:?}, got {verdict:?}"),
    }
}

async fn check_router(what: &str, app: &axum::Router, review: &Value, want: &Want) -> Value {
    let (status, body) = post_review(app, "/validate", review).await;
    assert_eq!(status, StatusCode::OK, "{what}: {body}");
    let response = body["response"].clone();
    assert_eq!(response["uid"], review["request"]["uid"], "{what}");
    match want {
        Want::Allowed => assert_eq!(response["allowed"], true, "{what}: {response}"),
        Want::Forbidden(d) => {
            assert_eq!(response["allowed"], false, "{what}");
            assert_eq!(response["status"]["code"], 403, "{what}");
            assert_eq!(response["status"]["reason"], "Forbidden", "{what}");
            assert_eq!(
                response["status"]["message"],
                format!("persistentvolumeclaims \"mine\" is forbidden: {d}"),
                "{what}"
            );
        }
        Want::Invalid(m) => {
            assert_eq!(response["allowed"], false, "{what}");
            assert_eq!(response["status"]["code"], 422, "{what}");
            assert_eq!(response["status"]["reason"], "Invalid", "{what}");
            assert_eq!(
                response["status"]["message"],
                format!("PersistentVolumeClaim \"mine\" is invalid: {m}"),
                "{what}"
            );
        }
    }
    response
}

fn shrink_message(detail: &str) -> String {
    format!("spec.resources.requests.storage: Forbidden: {detail}")
}

// ---------------------------------------------------------------- expansion (resize admission)

/// Upstream `TestPVCResizeAdmission` shapes, plus the size policy.
fn resize_table() -> Vec<(&'static str, Value, Value, Want)> {
    let gold_bound = bound(pvc(Some("gold"), "1Gi"), "1Gi");
    vec![
        (
            "expansion of a bound claim of an expandable class",
            gold_bound.clone(),
            pvc(Some("gold"), "2Gi"),
            Want::Allowed,
        ),
        (
            "no size change on any claim",
            with_status(pvc(Some("silver"), "1Gi"), json!({"phase": "Pending"})),
            pvc(Some("silver"), "1Gi"),
            Want::Allowed,
        ),
        (
            "same size written otherwise is no change",
            bound(pvc(Some("silver"), "1Gi"), "1Gi"),
            pvc(Some("silver"), "1024Mi"),
            Want::Allowed,
        ),
        (
            "expansion of a pending claim",
            with_status(pvc(Some("gold"), "1Gi"), json!({"phase": "Pending"})),
            pvc(Some("gold"), "2Gi"),
            Want::Forbidden(expansion::NOT_BOUND),
        ),
        (
            "expansion of a claim without status",
            pvc(Some("gold"), "1Gi"),
            pvc(Some("gold"), "2Gi"),
            Want::Forbidden(expansion::NOT_BOUND),
        ),
        (
            "expansion on a class that forbids it",
            bound(pvc(Some("silver"), "1Gi"), "1Gi"),
            pvc(Some("silver"), "2Gi"),
            Want::Forbidden(expansion::NOT_EXPANDABLE),
        ),
        (
            "expansion on a class that does not say",
            bound(pvc(Some("bronze"), "1Gi"), "1Gi"),
            pvc(Some("bronze"), "2Gi"),
            Want::Forbidden(expansion::NOT_EXPANDABLE),
        ),
        (
            "expansion of a claim without a class",
            bound(pvc(None, "1Gi"), "1Gi"),
            pvc(None, "2Gi"),
            Want::Forbidden(expansion::NOT_EXPANDABLE),
        ),
        (
            "expansion of a claim with the empty class",
            bound(pvc(Some(""), "1Gi"), "1Gi"),
            pvc(Some(""), "2Gi"),
            Want::Forbidden(expansion::NOT_EXPANDABLE),
        ),
        (
            "expansion with a class that does not exist",
            bound(pvc(Some("ghost"), "1Gi"), "1Gi"),
            pvc(Some("ghost"), "2Gi"),
            Want::Forbidden(expansion::NOT_EXPANDABLE),
        ),
        (
            "expansion while changing the class",
            bound(pvc(Some("silver"), "1Gi"), "1Gi"),
            pvc(Some("gold"), "2Gi"),
            Want::Forbidden(expansion::NOT_EXPANDABLE),
        ),
        (
            "beta annotation decides the class, as upstream",
            {
                let mut c = bound(pvc(None, "1Gi"), "1Gi");
                c["metadata"]["annotations"] =
                    json!({"volume.beta.kubernetes.io/storage-class": "gold"});
                c
            },
            {
                let mut c = pvc(None, "2Gi");
                c["metadata"]["annotations"] =
                    json!({"volume.beta.kubernetes.io/storage-class": "gold"});
                c
            },
            Want::Allowed,
        ),
        (
            "expansion up to the class limit",
            gold_bound.clone(),
            pvc(Some("gold"), "10Gi"),
            Want::Allowed,
        ),
        (
            "expansion above the class limit",
            gold_bound.clone(),
            pvc(Some("gold"), "10241Mi"),
            Want::Invalid(
                r#"spec.resources.requests.storage: Invalid value: "10241Mi": must be less than or equal to 10Gi, the stateful-admission.io/max-volume-size of StorageClass "gold""#
                    .to_owned(),
            ),
        ),
        (
            "a malformed class limit is ignored",
            bound(pvc(Some("broken"), "1Gi"), "1Gi"),
            pvc(Some("broken"), "1Ti"),
            Want::Allowed,
        ),
    ]
}

#[tokio::test]
async fn resize_admission_table_through_the_rule_and_the_router() {
    let view = expansion_view();
    let policy = Policy::default();
    let app = app(view.clone(), policy.clone());
    for (what, old, new, want) in resize_table() {
        let review = update(&old, &new);
        let req = ReviewBuilder::claim("UPDATE")
            .object(review["request"]["object"].clone())
            .old_object(old.clone())
            .request()
            .expect("request");
        let rule = expansion::review_update(
            req.old_object.as_ref().expect("old"),
            req.object.as_ref().expect("new"),
            &ctx(&view, &policy),
        );
        check_verdict(what, &rule, &want);
        check_verdict(
            what,
            &evaluate(Phase::Validate, &req, &ctx(&view, &policy)),
            &want,
        );
        check_router(what, &app, &review, &want).await;
        // The mutating webhook never touches an update.
        let (_, body) = post_review(&app, "/mutate", &review).await;
        assert_eq!(body["response"]["allowed"], true, "{what}");
        assert!(body["response"].get("patch").is_none(), "{what}");
    }
}

#[test]
fn malformed_class_limits_are_reported_as_warnings() {
    let view = expansion_view();
    let policy = Policy::default();
    for (class, shown) in [
        ("broken", "\"ten gigs\"".to_owned()),
        (
            "huge-limit",
            format!("\"{}\"... (cut from 5000 characters)", "x".repeat(64)),
        ),
    ] {
        let review = update(
            &bound(pvc(Some(class), "1Gi"), "1Gi"),
            &pvc(Some(class), "2Gi"),
        );
        let out = offline::review(
            review.to_string().as_bytes(),
            Phases::Both,
            &ctx(&view, &policy),
        )
        .expect("review");
        assert!(out.allowed);
        let list = warnings_of(&out.review["response"]);
        assert!(
            list.iter().all(|w| w.chars().count() <= 256),
            "{class}: {list:?}"
        );
        let warnings = list.join("\n");
        assert!(
            warnings.contains(&format!(
                "StorageClass \"{class}\": annotation stateful-admission.io/max-volume-size is {shown}, which is not a size"
            )) && warnings.contains("quantities must match the regular expression")
                && warnings.contains("; no size limit applies"),
            "{class}: {warnings}"
        );
        assert!(warnings.len() < 600, "{class}: hostile value not cut");
    }
}

// ---------------------------------------------------------------- shrink and recovery

/// Upstream `ValidatePersistentVolumeClaimUpdate` size cases, with and without recovery.
fn shrink_table() -> Vec<(&'static str, Value, Value, Policy, Want)> {
    // A failed expansion from 1Gi to 3Gi: the request says 3Gi, the volume still has 1Gi.
    let failed = bound(pvc(Some("gold"), "3Gi"), "1Gi");
    let on = Policy::default();
    vec![
        (
            "recovery above capacity",
            failed.clone(),
            pvc(Some("gold"), "2Gi"),
            on.clone(),
            Want::Allowed,
        ),
        (
            "recovery to just above capacity",
            failed.clone(),
            pvc(Some("gold"), "1073741825"),
            on.clone(),
            Want::Allowed,
        ),
        (
            "equal to capacity is denied",
            failed.clone(),
            pvc(Some("gold"), "1Gi"),
            on.clone(),
            Want::Invalid(shrink_message(expansion::BELOW_CAPACITY)),
        ),
        (
            "equal to capacity written otherwise is denied",
            failed.clone(),
            pvc(Some("gold"), "1024Mi"),
            on.clone(),
            Want::Invalid(shrink_message(expansion::BELOW_CAPACITY)),
        ),
        (
            "below capacity is denied",
            failed.clone(),
            pvc(Some("gold"), "500Mi"),
            on.clone(),
            Want::Invalid(shrink_message(expansion::BELOW_CAPACITY)),
        ),
        (
            "a shrink of an expanded claim is denied",
            bound(pvc(Some("gold"), "2Gi"), "2Gi"),
            pvc(Some("gold"), "1Gi"),
            on.clone(),
            Want::Invalid(shrink_message(expansion::BELOW_CAPACITY)),
        ),
        (
            "without recovery any decrease is denied",
            failed.clone(),
            pvc(Some("gold"), "2Gi"),
            no_recovery(),
            Want::Invalid(shrink_message(expansion::BELOW_PREVIOUS)),
        ),
        (
            "without recovery an increase is still judged by the plugin rules",
            bound(pvc(Some("gold"), "1Gi"), "1Gi"),
            pvc(Some("gold"), "2Gi"),
            no_recovery(),
            Want::Allowed,
        ),
        (
            "a decrease on a class that forbids expansion is judged by size only",
            bound(pvc(Some("silver"), "3Gi"), "1Gi"),
            pvc(Some("silver"), "2Gi"),
            on.clone(),
            Want::Allowed,
        ),
        (
            "a claim without capacity may not go to zero",
            with_status(pvc(Some("gold"), "1Gi"), json!({"phase": "Pending"})),
            pvc(Some("gold"), "0"),
            on,
            Want::Invalid(shrink_message(expansion::BELOW_CAPACITY)),
        ),
    ]
}

#[tokio::test]
async fn shrink_and_recovery_table_through_the_rule_and_the_router() {
    let view = expansion_view();
    for (what, old, new, policy, want) in shrink_table() {
        let review = update(&old, &new);
        let req = ReviewBuilder::claim("UPDATE")
            .object(review["request"]["object"].clone())
            .old_object(old)
            .request()
            .expect("request");
        let rule = expansion::review_update(
            req.old_object.as_ref().expect("old"),
            req.object.as_ref().expect("new"),
            &ctx(&view, &policy),
        );
        check_verdict(what, &rule, &want);
        check_router(what, &app(view.clone(), policy), &review, &want).await;
    }
}

#[test]
fn recovery_capture_through_the_cli_with_and_without_the_flag() {
    let state = fixture_path("claim/state.yaml");
    let state = state.to_str().expect("path");
    let capture = fixture_path("claim/pvc-update-recover-to-capacity.validate.json");
    let capture = capture.to_str().expect("path");
    // The capture lowers 3Gi to exactly the capacity: denied either way, with each message.
    for (flag, detail) in [
        ("true", expansion::BELOW_CAPACITY),
        ("false", expansion::BELOW_PREVIOUS),
    ] {
        let run = run_binary(
            &[
                "review",
                "--state",
                state,
                "--expansion-recovery",
                flag,
                capture,
            ],
            None,
        );
        assert_eq!(run.code, 1, "{}", run.stderr);
        let response = &run.json()["response"];
        assert_eq!(response["uid"], "8c1d2e3f-4a5b-4c6d-8e7f-901a2b3c4d5e");
        assert_eq!(response["status"]["code"], 422);
        assert_eq!(
            response["status"]["message"],
            format!(
                "PersistentVolumeClaim \"mine\" is invalid: {}",
                shrink_message(detail)
            )
        );
    }
    // Lowered to 2Gi instead: allowed with recovery, the object unchanged.
    let mut review = fixture("claim/pvc-update-recover-to-capacity.validate.json");
    review["request"]["object"]["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
    let file = temp_file(".json", review.to_string().as_bytes());
    let run = run_binary(
        &[
            "review",
            "--state",
            state,
            file.path().to_str().expect("path"),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.json()["response"].get("patch").is_none());
}

// ---------------------------------------------------------------- expansion warnings

#[test]
fn warnings_come_from_the_old_status_only_where_it_tells() {
    let view = expansion_view();
    let policy = Policy::default();
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "quiet status: no warning",
            json!({"phase": "Bound", "capacity": {"storage": "1Gi"}, "allocatedResources": {"storage": "1Gi"}}),
            vec![],
        ),
        (
            "allocated above capacity",
            json!({"phase": "Bound", "capacity": {"storage": "1Gi"}, "allocatedResources": {"storage": "2Gi"}}),
            vec![
                "a previous expansion of this claim has not finished: status.allocatedResources.storage is 2Gi, status.capacity.storage is 1Gi; the new size 4Gi is requested on top of it",
            ],
        ),
        (
            "resize status and condition",
            json!({"phase": "Bound", "capacity": {"storage": "1Gi"},
                   "allocatedResourceStatuses": {"storage": "NodeResizePending"},
                   "conditions": [{"type": "Resizing", "status": "True"}, {"type": "Other", "status": "True"}]}),
            vec![
                "a previous expansion of this claim has not finished: status.allocatedResourceStatuses.storage is NodeResizePending; condition Resizing is True; the new size 4Gi is requested on top of it",
            ],
        ),
        (
            "file system resize waits for a pod",
            json!({"phase": "Bound", "capacity": {"storage": "1Gi"},
                   "conditions": [{"type": "FileSystemResizePending", "status": "True"}]}),
            vec![
                "the volume waits for a file system resize that only happens when a pod (re)starts using it (condition FileSystemResizePending); this expansion will complete the same way",
            ],
        ),
        (
            "false conditions say nothing",
            json!({"phase": "Bound", "capacity": {"storage": "1Gi"},
                   "conditions": [{"type": "Resizing", "status": "False"}, "junk", {"type": 5}]}),
            vec![],
        ),
        (
            "a failed expansion",
            json!({"phase": "Bound", "capacity": {"storage": "1Gi"},
                   "allocatedResourceStatuses": {"storage": "ControllerResizeInfeasible"},
                   "conditions": [{"type": "ControllerResizeError", "status": "True"}]}),
            vec![
                "a previous expansion of this claim failed (ControllerResizeInfeasible, ControllerResizeError): to recover, lower the request to a value above status.capacity.storage (1Gi)",
            ],
        ),
    ];
    for (what, status, want) in cases {
        let old = with_status(pvc(Some("gold"), "2Gi"), status);
        let req = ReviewBuilder::claim("UPDATE")
            .object(pvc(Some("gold"), "4Gi"))
            .old_object(old)
            .request()
            .expect("request");
        let verdict = evaluate(Phase::Validate, &req, &ctx(&view, &policy));
        assert!(verdict.is_allowed(), "{what}: {verdict:?}");
        assert_eq!(verdict.warnings, want, "{what}");
    }
}

#[test]
fn retroactive_class_assignment_is_allowed_and_warned_about_when_unknown() {
    let view = expansion_view();
    let policy = Policy::default();
    let old = with_status(pvc(None, "1Gi"), json!({"phase": "Pending"}));
    for (class, warnings) in [
        ("gold", vec![]),
        (
            "ghost",
            vec![
                "spec.storageClassName: set to \"ghost\", but no such StorageClass exists; the claim stays Pending until it does",
            ],
        ),
    ] {
        let req = ReviewBuilder::claim("UPDATE")
            .object(pvc(Some(class), "1Gi"))
            .old_object(old.clone())
            .request()
            .expect("request");
        let verdict = evaluate(Phase::Validate, &req, &ctx(&view, &policy));
        assert!(verdict.is_allowed(), "{class}");
        assert_eq!(verdict.warnings, warnings, "{class}");
    }
    // Any other class change is the apiserver's to judge: no denial from here.
    let req = ReviewBuilder::claim("UPDATE")
        .object(pvc(Some("silver"), "1Gi"))
        .old_object(bound(pvc(Some("gold"), "1Gi"), "1Gi"))
        .request()
        .expect("request");
    let verdict = evaluate(Phase::Validate, &req, &ctx(&view, &policy));
    assert_eq!(verdict, Verdict::allow());
}

#[test]
fn captured_expansion_through_the_cli_depends_on_the_class() {
    let capture = fixture_path("apiserver/pvc-update-expand-bound.validate.json");
    let capture = capture.to_str().expect("path");
    // gold expands in the claim state file; without it the class is unknown.
    let state = fixture_path("claim/state.yaml");
    let run = run_binary(
        &["review", "--state", state.to_str().expect("path"), capture],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(run.json()["response"]["allowed"], true);
    let silver = temp_file(
        ".yaml",
        b"apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gold}\nprovisioner: x\nallowVolumeExpansion: false\n",
    );
    let run = run_binary(
        &[
            "review",
            "--state",
            silver.path().to_str().expect("path"),
            capture,
        ],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    let response = &run.json()["response"];
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(
        response["status"]["message"],
        format!(
            "persistentvolumeclaims \"mine\" is forbidden: {}",
            expansion::NOT_EXPANDABLE
        )
    );
    // The capture's mutate phase is left alone.
    let mutate = fixture_path("apiserver/pvc-update-expand-bound.mutate.json");
    let run = run_binary(
        &[
            "review",
            "--phase",
            "mutate",
            mutate.to_str().expect("path"),
        ],
        None,
    );
    assert_eq!(run.code, 0);
    assert!(run.json()["response"].get("patch").is_none());
}

// ---------------------------------------------------------------- default class

fn classes_view() -> ClusterView {
    view(&[
        default_sc("std", "2026-01-01T00:00:00Z"),
        sc("fast", None, json!({})),
        namespace("team", "fast"),
        namespace("typo", "fsat"),
    ])
}

fn managed(spec_fields: Value) -> Value {
    json!([{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1",
            "time": "2026-11-22T05:07:21Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": spec_fields}}])
}

fn create_in(namespace: &str, class: Option<&str>, managed_fields: Option<Value>) -> Value {
    let mut claim = pvc(class, "1Gi");
    claim["metadata"]["namespace"] = json!(namespace);
    if let Some(m) = managed_fields {
        claim["metadata"]["managedFields"] = m;
    }
    ReviewBuilder::claim("CREATE").object(claim).into_json()
}

#[tokio::test]
async fn default_class_table_through_the_router_and_offline_review() {
    let view = classes_view();
    let policy = Policy::default();
    let app = app(view.clone(), policy.clone());
    let no_class = managed(json!({"f:accessModes": {}, "f:resources": {}}));
    let with_class = managed(json!({"f:storageClassName": {}}));
    let cases: Vec<(&str, Value, Option<&str>, Vec<String>)> = vec![
        (
            "classless claim gets the cluster default",
            create_in("default", None, None),
            Some("std"),
            vec![],
        ),
        (
            "classless claim gets the namespace default",
            create_in("team", None, Some(no_class.clone())),
            Some("fast"),
            vec![],
        ),
        (
            "the plugin's fill-in yields to the namespace default",
            create_in("team", Some("std"), Some(no_class.clone())),
            Some("fast"),
            vec![],
        ),
        (
            "the plugin's fill-in stands without a namespace default",
            create_in("default", Some("std"), Some(no_class.clone())),
            None,
            vec![],
        ),
        (
            "a class the client wrote is kept",
            create_in("team", Some("std"), Some(with_class)),
            None,
            vec![],
        ),
        (
            "a class without managedFields is kept",
            create_in("team", Some("std"), None),
            None,
            vec![],
        ),
        (
            "the empty class is a choice",
            create_in("team", Some(""), Some(no_class.clone())),
            None,
            vec![],
        ),
        (
            "a namespace default naming no class falls back, with a warning",
            create_in("typo", None, None),
            Some("std"),
            vec![
                "namespace \"typo\": annotation stateful-admission.io/default-storage-class names \"fsat\", but no such StorageClass exists; using the cluster default \"std\"".to_owned(),
            ],
        ),
        (
            "the beta annotation is a choice",
            {
                let mut r = create_in("team", None, None);
                r["request"]["object"]["metadata"]["annotations"] =
                    json!({"volume.beta.kubernetes.io/storage-class": "whatever"});
                r
            },
            None,
            vec![],
        ),
    ];
    for (what, review, want_class, want_warnings) in cases {
        let (status, body) = post_review(&app, "/mutate", &review).await;
        assert_eq!(status, StatusCode::OK, "{what}");
        let response = &body["response"];
        assert_eq!(response["allowed"], true, "{what}");
        match want_class {
            Some(class) => {
                assert_eq!(response["patchType"], "JSONPatch", "{what}");
                assert_eq!(
                    patch_of(response),
                    json!([{"op": "add", "path": "/spec/storageClassName", "value": class}]),
                    "{what}"
                );
            }
            None => assert!(response.get("patch").is_none(), "{what}: {response}"),
        }
        let warnings: Vec<String> = response
            .get("warnings")
            .map(|w| serde_json::from_value(w.clone()).expect("strings"))
            .unwrap_or_default();
        assert_eq!(warnings, want_warnings, "{what}");
        // Offline, the patched object carries the class, and mutating it again changes nothing.
        let out = offline::review(
            review.to_string().as_bytes(),
            Phases::Both,
            &ctx(&view, &policy),
        )
        .expect("review");
        assert!(out.allowed, "{what}");
        let object = out.object.expect("object");
        let original = &review["request"]["object"]["spec"]["storageClassName"];
        let class = &object["spec"]["storageClassName"];
        match want_class {
            Some(c) => assert_eq!(class, c, "{what}"),
            None => assert_eq!(class, original, "{what}"),
        }
        let again = ReviewBuilder::claim("CREATE").object(object).into_json();
        let (_, body) = post_review(&app, "/mutate", &again).await;
        assert!(
            body["response"].get("patch").is_none(),
            "{what}: not idempotent"
        );
    }
}

#[test]
fn no_default_anywhere_leaves_the_claim_alone() {
    let view = view(&[sc("fast", None, json!({})), namespace("typo", "fsat")]);
    let policy = Policy::default();
    let req = ReviewBuilder::claim("CREATE")
        .object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "mine", "namespace": "typo"}, "spec": {}}))
        .request()
        .expect("request");
    let verdict = evaluate(Phase::Mutate, &req, &ctx(&view, &policy));
    assert!(verdict.patch.is_empty());
    assert_eq!(
        verdict.warnings,
        vec![
            "namespace \"typo\": annotation stateful-admission.io/default-storage-class names \"fsat\", but no such StorageClass exists; the claim is left without a class"
        ]
    );
    assert_eq!(default_class::pick_default_class(&view, "typo"), None);
}

#[test]
fn the_picker_for_the_controller_follows_creation_times_and_names() {
    let view = view(&[
        default_sc("b-old", "2026-01-01T00:00:00Z"),
        default_sc("z-new", "2026-03-01T00:00:00Z"),
        default_sc("a-new", "2026-03-01T00:00:00Z"),
        sc("fast", None, json!({})),
        namespace("team", "fast"),
    ]);
    let pick = |ns: &str| default_class::pick_default_class(&view, ns).expect("a default");
    assert_eq!(
        pick("default"),
        default_class::DefaultClass {
            name: "a-new".into(),
            source: default_class::DefaultSource::Cluster
        }
    );
    assert_eq!(pick("team").name, "fast");
    assert_eq!(pick("team").source, default_class::DefaultSource::Namespace);
}

#[test]
fn filled_in_capture_gets_the_namespace_default_through_the_cli() {
    let state = fixture_path("claim/state.yaml");
    let capture = fixture_path("claim/pvc-create-filled-in-class.mutate.json");
    let run = run_binary(
        &[
            "review",
            "--state",
            state.to_str().expect("path"),
            "--phase",
            "mutate",
            capture.to_str().expect("path"),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let response = &run.json()["response"];
    assert_eq!(response["uid"], "5b2e7c1a-3f4d-4e8b-9a61-0c2d3e4f5a6b");
    assert_eq!(
        patch_of(response),
        json!([{"op": "add", "path": "/spec/storageClassName", "value": "fast"}])
    );
    // The validate capture of the same apply (class "gold", namespace "default"): untouched.
    let capture = fixture_path("apiserver/pvc-create.validate.json");
    let run = run_binary(
        &[
            "review",
            "--state",
            state.to_str().expect("path"),
            capture.to_str().expect("path"),
        ],
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.json()["response"].get("patch").is_none());
}

// ---------------------------------------------------------------- the set's stored template

fn set_state() -> ClusterView {
    let text = std::fs::read(fixture_path("claim/state.yaml")).expect("state");
    let objects =
        stateful_admission::cluster::state_file::parse("state.yaml", &text).expect("state");
    ClusterView::from_objects(objects)
}

#[tokio::test]
async fn claims_of_a_set_get_the_stored_template() {
    let view = set_state();
    let policy = Policy::default();
    let capture = fixture("apiserver/pvc-create-by-statefulset-controller.mutate.json");
    let want = json!([
        {"op": "add", "path": "/spec/storageClassName", "value": "std"},
        {"op": "add", "path": "/spec/resources/requests/storage", "value": "2Gi"},
        {"op": "add", "path": "/spec/volumeAttributesClassName", "value": "fast-io"},
        {"op": "add", "path": "/metadata/labels/helm.sh~1chart", "value": "web-1.1.0"},
        {"op": "add", "path": "/metadata/labels/tier", "value": "db"},
        {"op": "add", "path": "/metadata/annotations", "value": {"backup": "daily"}},
    ]);
    let response =
        crate::common::review_response(&app(view.clone(), policy.clone()), "/mutate", &capture)
            .await;
    assert_eq!(response["allowed"], true);
    assert_eq!(patch_of(&response), want);

    let out = offline::review(
        capture.to_string().as_bytes(),
        Phases::Both,
        &ctx(&view, &policy),
    )
    .expect("review");
    assert!(out.allowed);
    let object = out.object.expect("object");
    assert_eq!(object["spec"]["resources"]["requests"]["storage"], "2Gi");
    assert_eq!(object["spec"]["volumeAttributesClassName"], "fast-io");
    assert_eq!(
        object["metadata"]["labels"],
        json!({"app": "web", "helm.sh/chart": "web-1.1.0", "tier": "db"})
    );
    assert_eq!(
        object["metadata"]["annotations"],
        json!({"backup": "daily"})
    );
    // Unknown and untouched fields survive.
    assert_eq!(
        object["metadata"]["finalizers"],
        json!(["kubernetes.io/pvc-protection"])
    );
    assert_eq!(object["status"], json!({"phase": "Pending"}));

    // Reinvocation on the patched object: nothing left to do.
    let mut again = capture.clone();
    again["request"]["object"] = object;
    let out = offline::review(
        again.to_string().as_bytes(),
        Phases::Only(Phase::Mutate),
        &ctx(&view, &policy),
    )
    .expect("review");
    assert!(
        out.review["response"].get("patch").is_none(),
        "{}",
        out.review
    );

    // Another ordinal, and a claim name of no set, through the CLI.
    let state = fixture_path("claim/state.yaml");
    for (name, patched) in [
        ("data-web-7", true),
        ("data-other-0", false),
        ("logs-web-0", false),
    ] {
        let mut review = capture.clone();
        review["request"]["name"] = json!(name);
        review["request"]["object"]["metadata"]["name"] = json!(name);
        review["request"]["object"]["spec"]["storageClassName"] = json!("std");
        let file = temp_file(".json", review.to_string().as_bytes());
        let run = run_binary(
            &[
                "review",
                "--state",
                state.to_str().expect("path"),
                file.path().to_str().expect("path"),
            ],
            None,
        );
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        assert_eq!(
            run.json()["response"].get("patch").is_some(),
            patched,
            "{name}"
        );
    }
}

/// A set `web` in `default` with live template `data` and the given stored annotation.
fn set_with(live_template: Value, desired: Option<String>) -> ClusterView {
    let mut set = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "serviceName": "web", "template": {},
                 "volumeClaimTemplates": [live_template]}});
    if let Some(d) = desired {
        set["metadata"]["annotations"] =
            json!({"stateful-admission.io/desired-volume-claim-templates": d});
    }
    view(&[set])
}

fn template(storage: &str, vac: Option<&str>) -> Value {
    let mut t = json!({"metadata": {"name": "data", "labels": {"app": "web"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}});
    if let Some(v) = vac {
        t["spec"]["volumeAttributesClassName"] = json!(v);
    }
    t
}

fn set_claim(storage: Option<&str>, vac: Option<&str>) -> Value {
    let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-web-0", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "resources": {}}});
    if let Some(s) = storage {
        c["spec"]["resources"] = json!({"requests": {"storage": s}});
    }
    if let Some(v) = vac {
        c["spec"]["volumeAttributesClassName"] = json!(v);
    }
    c
}

#[test]
fn stored_template_table() {
    let policy = Policy::default();
    let desired = |t: Value| Some(json!([t]).to_string());
    let cases: Vec<(&str, ClusterView, Value, Value, Vec<&str>)> = vec![
        (
            "a smaller stored size is applied too",
            set_with(template("5Gi", None), desired(template("2Gi", None))),
            set_claim(Some("5Gi"), None),
            json!([{"op": "add", "path": "/spec/resources/requests/storage", "value": "2Gi"}]),
            vec![],
        ),
        (
            "equal sizes written otherwise are left",
            set_with(template("1Gi", None), desired(template("1024Mi", None))),
            set_claim(Some("1Gi"), None),
            json!([]),
            vec![],
        ),
        (
            "missing requests are created",
            set_with(template("1Gi", None), desired(template("2Gi", None))),
            set_claim(None, None),
            json!([{"op": "add", "path": "/spec/resources/requests", "value": {"storage": "2Gi"}}]),
            vec![],
        ),
        (
            "a malformed claim size is replaced",
            set_with(template("1Gi", None), desired(template("2Gi", None))),
            set_claim(Some("lots"), None),
            json!([{"op": "add", "path": "/spec/resources/requests/storage", "value": "2Gi"}]),
            vec![],
        ),
        (
            "a class dropped from the template is removed when it came from it",
            set_with(
                template("1Gi", Some("old-io")),
                desired(template("1Gi", None)),
            ),
            set_claim(Some("1Gi"), Some("old-io")),
            json!([{"op": "remove", "path": "/spec/volumeAttributesClassName"}]),
            vec![],
        ),
        (
            "a class that did not come from the template is kept",
            set_with(
                template("1Gi", Some("old-io")),
                desired(template("1Gi", None)),
            ),
            set_claim(Some("1Gi"), Some("other-io")),
            json!([]),
            vec![],
        ),
        (
            "no stored templates: nothing",
            set_with(template("1Gi", None), None),
            set_claim(Some("1Gi"), None),
            json!([]),
            vec![],
        ),
        (
            "a stored size that is no quantity is skipped with a warning",
            set_with(
                template("1Gi", None),
                desired(template("2 gigs", Some("io"))),
            ),
            set_claim(Some("1Gi"), None),
            json!([{"op": "add", "path": "/spec/volumeAttributesClassName", "value": "io"}]),
            vec![
                "the stored template \"data\": asks for storage \"2 gigs\", which is not a quantity; the claim keeps its request",
            ],
        ),
    ];
    for (what, view, claim, want_patch, want_warnings) in cases {
        let req = ReviewBuilder::claim("CREATE")
            .username(STATEFULSET_CONTROLLER)
            .object(claim)
            .request()
            .expect("request");
        let verdict = evaluate(Phase::Mutate, &req, &ctx(&view, &policy));
        assert!(verdict.is_allowed(), "{what}");
        assert_eq!(
            serde_json::to_value(&verdict.patch).expect("patch"),
            want_patch,
            "{what}"
        );
        assert_eq!(verdict.warnings, want_warnings, "{what}");
    }
}

#[test]
fn hostile_stored_annotations_leave_the_claim_alone_with_a_warning() {
    let policy = Policy::default();
    let huge = format!("[{}", "{\"metadata\":".repeat(20_000));
    for (what, value) in [
        ("not JSON", "{{{".to_owned()),
        (
            "an object, not an array",
            json!({"metadata": {"name": "data"}}).to_string(),
        ),
        (
            "wrong field types",
            json!([{"metadata": {"name": 7}}]).to_string(),
        ),
        (
            "spec of the wrong shape",
            json!([{"metadata": {"name": "data"}, "spec": "big"}]).to_string(),
        ),
        ("huge and deeply nested", huge),
        ("a huge string", format!("\"{}\"", "a".repeat(100_000))),
    ] {
        let view = set_with(template("1Gi", None), Some(value));
        let req = ReviewBuilder::claim("CREATE")
            .object(set_claim(Some("1Gi"), None))
            .request()
            .expect("request");
        let verdict = evaluate(Phase::Mutate, &req, &ctx(&view, &policy));
        assert!(verdict.is_allowed(), "{what}");
        assert!(verdict.patch.is_empty(), "{what}");
        // Two warnings when the parser's message is long; every fact whole, in order.
        let w = &verdict.warnings;
        assert!((1..=2).contains(&w.len()), "{what}: {w:?}");
        assert!(w.iter().all(|w| w.chars().count() <= 256), "{what}: {w:?}");
        let all = w.join("; ").replace("; StatefulSet default/web: ", "; ");
        assert!(
            all.starts_with("StatefulSet default/web: annotation stateful-admission.io/desired-volume-claim-templates is not a JSON array of claim templates (")
                && all.ends_with("); claim \"data-web-0\" is created from the set's current template"),
            "{what}: {w:?}"
        );
    }
}

// ------------------------------------------- claims created by someone else keep their values

const STATEFULSET_CONTROLLER: &str = "system:serviceaccount:kube-system:statefulset-controller";

/// `data-web-0` as the StatefulSet controller creates it (the captured request), with the
/// requesting user replaced.
fn capture_by(username: &str) -> Value {
    let mut review = fixture("apiserver/pvc-create-by-statefulset-controller.mutate.json");
    review["request"]["userInfo"]["username"] = json!(username);
    review
}

fn cli(args: &[&str], review: &Value, env: Option<(&str, &str)>) -> crate::common::Run {
    let file = temp_file(".json", review.to_string().as_bytes());
    let state = fixture_path("claim/state.yaml");
    let mut all = vec!["review", "--state", state.to_str().expect("path")];
    all.extend_from_slice(args);
    all.push(file.path().to_str().expect("path"));
    match env {
        None => run_binary(&all, None),
        Some((key, value)) => crate::common::run_binary_with_env(&all, &[(key, value)]),
    }
}

/// Only the StatefulSet controller's claims get the set's recorded template values: its own
/// service account (`--use-service-account-credentials`) or the controller-manager's single
/// credential, by default. A claim pre-created by a person keeps its own values, with warnings
/// that say so, what the template would have set and how to get it.
#[tokio::test]
async fn claims_created_by_anyone_else_keep_their_values() {
    let view = set_state();
    let policy = Policy::default();
    let router = app(view.clone(), policy.clone());
    let controller_patch = json!([
        {"op": "add", "path": "/spec/storageClassName", "value": "std"},
        {"op": "add", "path": "/spec/resources/requests/storage", "value": "2Gi"},
        {"op": "add", "path": "/spec/volumeAttributesClassName", "value": "fast-io"},
        {"op": "add", "path": "/metadata/labels/helm.sh~1chart", "value": "web-1.1.0"},
        {"op": "add", "path": "/metadata/labels/tier", "value": "db"},
        {"op": "add", "path": "/metadata/annotations", "value": {"backup": "daily"}},
    ]);
    for review in [
        fixture("apiserver/pvc-create-by-statefulset-controller.mutate.json"),
        fixture("claim/pvc-create-by-kube-controller-manager.mutate.json"),
    ] {
        let who = review["request"]["userInfo"]["username"].clone();
        let response = crate::common::review_response(&router, "/mutate", &review).await;
        assert_eq!(patch_of(&response), controller_patch, "{who}");
        assert!(response.get("warnings").is_none(), "{who}: {response}");
        let run = cli(&[], &review, None);
        assert_eq!(run.code, 0, "{who}: {}", run.stderr);
        assert_eq!(patch_of(&run.json()["response"]), controller_patch, "{who}");
    }

    // `kubectl apply` of a claim restored from a snapshot at 10Gi, by the kubeadm admin.
    let admin = fixture("claim/pvc-create-by-kubernetes-admin.mutate.json");
    let want_warnings = [
        "PersistentVolumeClaim data-web-3 keeps its own values: created by \"kubernetes-admin\", not by the StatefulSet controller",
        "template \"data\" of StatefulSet web not applied: storage 10Gi -> 2Gi; volumeAttributesClassName unset -> \"fast-io\"; labels helm.sh/chart, tier; annotations backup",
        "PersistentVolumeClaim data-web-3 keeps its own values: to get the template's values, delete the claim before its pod uses it and let the StatefulSet controller create it",
        "PersistentVolumeClaim data-web-3 keeps its own values: a StatefulSet controller running as another user belongs in --statefulset-controller-users",
    ];
    let response = crate::common::review_response(&router, "/mutate", &admin).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("patch").is_none(), "{response}");
    assert_eq!(warnings_of(&response), want_warnings);
    for w in warnings_of(&response) {
        assert!(
            w.chars().count() <= 256,
            "{} characters: {w}",
            w.chars().count()
        );
    }
    let run = cli(&[], &admin, None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    assert!(out["response"].get("patch").is_none(), "{out}");
    assert_eq!(warnings_of(&out["response"]), want_warnings);
    // Offline, the object comes out as the user wrote it.
    let outcome = offline::review(
        admin.to_string().as_bytes(),
        Phases::Both,
        &ctx(&view, &policy),
    )
    .expect("review");
    assert_eq!(outcome.object.as_ref(), Some(&admin["request"]["object"]));

    // The flag (or its environment variable) names the StatefulSet controller's user where a
    // distribution differs; the default users are then no longer trusted.
    let custom = "system:serviceaccount:kube-system:sts-controller";
    for (args, env) in [
        (vec!["--statefulset-controller-users", custom], None),
        (
            vec![],
            Some(("STATEFUL_ADMISSION_STATEFULSET_CONTROLLER_USERS", custom)),
        ),
    ] {
        let run = cli(&args, &capture_by(custom), env);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(
            patch_of(&run.json()["response"]),
            controller_patch,
            "{args:?} {env:?}"
        );
        let run = cli(
            &args,
            &fixture("apiserver/pvc-create-by-statefulset-controller.mutate.json"),
            env,
        );
        let response = &run.json()["response"];
        assert_eq!(
            patch_of(response),
            json!([{"op": "add", "path": "/spec/storageClassName", "value": "std"}]),
            "{args:?}: only the default class"
        );
        assert_eq!(warnings_of(response).len(), 4, "{response}");
    }
    let run = cli(
        &[
            "--statefulset-controller-users",
            &format!("{custom},kubernetes-admin"),
        ],
        &admin,
        None,
    );
    assert!(
        run.json()["response"].get("patch").is_some(),
        "a listed user is trusted"
    );

    // A claim of another user that already has the template's values: no warning.
    let mut same = admin.clone();
    let object = &mut same["request"]["object"];
    object["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
    object["spec"]["volumeAttributesClassName"] = json!("fast-io");
    object["metadata"]["labels"] =
        json!({"app": "web", "helm.sh/chart": "web-1.1.0", "tier": "db"});
    object["metadata"]["annotations"]["backup"] = json!("daily");
    let response = crate::common::review_response(&router, "/mutate", &same).await;
    assert!(
        response.get("patch").is_none() && response.get("warnings").is_none(),
        "{response}"
    );

    // No user name at all is not the StatefulSet controller either.
    let mut anonymous = capture_by("x");
    anonymous["request"]["userInfo"] = json!({});
    let response = crate::common::review_response(&router, "/mutate", &anonymous).await;
    assert!(
        warnings_of(&response)[0].contains("created by an unnamed user, not by"),
        "{response}"
    );
}

/// Where the set's policy is `InPlace`, the controller patches existing claims anyway: the
/// warning says so instead of suggesting a delete.
#[test]
fn under_in_place_the_warning_says_the_controller_patches_the_claim() {
    let text = std::fs::read(fixture_path("claim/state.yaml")).expect("state");
    let text = String::from_utf8(text).expect("utf-8").replace(
        "      annotations:\n        stateful-admission.io/desired-volume-claim-templates",
        "      annotations:\n        stateful-admission.io/volume-claim-update-policy: InPlace\n        stateful-admission.io/desired-volume-claim-templates",
    );
    let objects = stateful_admission::cluster::state_file::parse("state.yaml", text.as_bytes())
        .expect("state");
    let view = ClusterView::from_objects(objects);
    let policy = Policy::default();
    let admin = fixture("claim/pvc-create-by-kubernetes-admin.mutate.json");
    let out = offline::review(
        admin.to_string().as_bytes(),
        Phases::Both,
        &ctx(&view, &policy),
    )
    .expect("review");
    let warnings = warnings_of(&out.review["response"]);
    assert_eq!(
        warnings.last().map(String::as_str),
        Some(
            "PersistentVolumeClaim data-web-3 keeps its own values: policy InPlace: the controller patches it to the template later, as the set's other claims; a StatefulSet controller running as another user belongs in --statefulset-controller-users"
        ),
        "{warnings:?}"
    );
}

// ---------------------------------------------------------------- bad input

#[tokio::test]
async fn malformed_quantities_and_shapes_are_422_not_500() {
    let view = expansion_view();
    let policy = Policy::default();
    let app = app(view.clone(), policy.clone());
    let regex = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
    let good_old = bound(pvc(Some("gold"), "1Gi"), "1Gi");
    let cases: Vec<(&str, Value, String)> = vec![
        (
            "create: malformed request",
            ReviewBuilder::claim("CREATE")
                .object(pvc(Some("gold"), "abc"))
                .into_json(),
            format!("spec.resources.requests.storage: Invalid value: \"abc\": {regex}"),
        ),
        (
            "create: limits of the wrong type",
            {
                let mut c = pvc(Some("gold"), "1Gi");
                c["spec"]["resources"]["limits"] = json!(["1Gi"]);
                ReviewBuilder::claim("CREATE").object(c).into_json()
            },
            "spec.resources.limits: Invalid value: \"[\\\"1Gi\\\"]\": must be an object".to_owned(),
        ),
        (
            "update: malformed new request",
            update(&good_old, &pvc(Some("gold"), "2Gb")),
            format!("spec.resources.requests.storage: Invalid value: \"2Gb\": {regex}"),
        ),
        (
            "update: boolean request",
            {
                let mut c = pvc(Some("gold"), "1Gi");
                c["spec"]["resources"]["requests"]["storage"] = json!(true);
                update(&good_old, &c)
            },
            "spec.resources.requests.storage: Invalid value: \"true\": must be a quantity string"
                .to_owned(),
        ),
        (
            "update: malformed old capacity",
            update(
                &with_status(
                    pvc(Some("gold"), "1Gi"),
                    json!({"phase": "Bound", "capacity": {"storage": "1 Gi"}}),
                ),
                &pvc(Some("gold"), "2Gi"),
            ),
            format!("oldObject.status.capacity.storage: Invalid value: \"1 Gi\": {regex}"),
        ),
        (
            "update: a spec that is not an object",
            {
                let mut c = pvc(Some("gold"), "1Gi");
                c["spec"] = json!("big");
                update(&good_old, &c)
            },
            "spec: Invalid value: \"\\\"big\\\"\": must be an object".to_owned(),
        ),
    ];
    for (what, review, message) in cases {
        let want = Want::Invalid(message);
        check_router(what, &app, &review, &want).await;
        let run = run_binary(&["review", "-"], Some(review.to_string().as_bytes()));
        assert_eq!(run.code, 1, "{what}: {}", run.stderr);
        assert_eq!(run.json()["response"]["status"]["code"], 422, "{what}");
    }
    // Numbers are quantities, as upstream decodes them.
    let mut c = pvc(Some("gold"), "1Gi");
    c["spec"]["resources"]["requests"]["storage"] = json!(2147483648_u64);
    check_router("number", &app, &update(&good_old, &c), &Want::Allowed).await;
}

#[tokio::test]
async fn missing_spec_or_objects_are_allowed_unchanged() {
    let view = classes_view();
    let policy = Policy::default();
    let app = app(view, policy);
    let bare = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "mine", "namespace": "default"}});
    let reviews = [
        ReviewBuilder::claim("CREATE")
            .object(bare.clone())
            .into_json(),
        ReviewBuilder::claim("UPDATE")
            .object(bare.clone())
            .old_object(bare.clone())
            .into_json(),
        ReviewBuilder::claim("UPDATE").object(bare).into_json(),
    ];
    for review in reviews {
        for endpoint in ["/mutate", "/validate"] {
            let (status, body) = post_review(&app, endpoint, &review).await;
            assert_eq!(status, StatusCode::OK);
            let response = &body["response"];
            assert_eq!(response["allowed"], true, "{endpoint}: {response}");
            assert!(response.get("patch").is_none(), "{endpoint}: {response}");
        }
    }
}

#[test]
fn a_hostile_namespace_default_is_quoted_cut_and_ignored() {
    let view = view(&[
        default_sc("std", "2026-01-01T00:00:00Z"),
        namespace("hostile", &format!("{}\"\n", "../".repeat(5000))),
    ]);
    let policy = Policy::default();
    let mut claim = pvc(None, "1Gi");
    claim["metadata"]["namespace"] = json!("hostile");
    let req = ReviewBuilder::claim("CREATE")
        .object(claim)
        .request()
        .expect("request");
    let verdict = evaluate(Phase::Mutate, &req, &ctx(&view, &policy));
    assert_eq!(
        serde_json::to_value(&verdict.patch).expect("patch"),
        json!([{"op": "add", "path": "/spec/storageClassName", "value": "std"}])
    );
    assert_eq!(verdict.warnings.len(), 1);
    let w = &verdict.warnings[0];
    assert!(
        w.contains("names \"../../")
            && w.contains("\"... (cut from 15002 characters), but no such StorageClass exists")
            && w.chars().count() <= 256,
        "{w}"
    );
}
