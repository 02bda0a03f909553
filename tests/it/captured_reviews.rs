//! The AdmissionReviews real apiservers of every supported version sent to a webhook
//! (tests/fixtures/apiserver-behaviour/<label>/reviews: a kubectl apply creating a set, the
//! StatefulSet controller's claims, the PV binder's updates, a template edit by client-side and
//! by server-side apply, a dry run, a resize), through the router as `serve` answers them. The
//! verdicts must not depend on the version that sent them: the shapes differ (1.24's reviews
//! carry no `userInfo.extra`, 1.35's templates no `creationTimestamp: null`, 1.24's types no
//! `maxUnavailable` or `volumeAttributesClassName`), the rules' answers do not.

use serde_json::{Value, json};
use stateful_admission::admission::Policy;
use stateful_admission::cluster::ClusterView;

use crate::common::{self, patch_of, review_response};

/// Each captured apiserver, and whether it keeps StatefulSet `maxUnavailable` (the one
/// capability these reviews' answers depend on: where it keeps it, it also defaults it to 1,
/// and the webhook copies nothing into the fallback annotation).
const LABELS: [(&str, bool); 6] = [
    ("v1.24", false),
    ("v1.32", false),
    ("v1.32-gates-on", true),
    ("v1.35", false),
    ("v1.35-maxunavailable-on", true),
    ("v1.36", false),
];

/// The policy of a `serve` that has learned what `label`'s apiserver does.
fn policy(keeps_max_unavailable: bool) -> Policy {
    use stateful_admission::capabilities::{Capabilities, Learned, Name, Value};
    let mut capabilities = Capabilities::default();
    capabilities.set(
        Name::MaxUnavailable,
        Learned::probed(
            if keeps_max_unavailable {
                Value::Kept
            } else {
                Value::Dropped
            },
            "captured",
        ),
    );
    Policy::default().with_capabilities(std::sync::Arc::new(capabilities))
}

/// A captured review with its placeholders (values that change from run to run) filled in.
fn review(label: &str, file: &str) -> Value {
    let path = common::fixture_path(&format!("apiserver-behaviour/{label}/reviews/{file}"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .replace("<uid>", "6f2d9c5e-1111-4a3b-9c2d-0123456789ab")
        .replace("<time>", "2026-01-01T00:00:00Z")
        .replace("<resourceVersion>", "1");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cluster the reviews were captured in, as the webhook's view holds it: the class the
/// claims use (it allows expansion) and the namespace.
fn view() -> ClusterView {
    ClusterView::from_json(&[
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": "standard"}, "provisioner": "example.com/none",
               "allowVolumeExpansion": true}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "reviews",
               "labels": {"kubernetes.io/metadata.name": "reviews"}}}),
    ])
    .expect("a view")
}

/// What an answer comes to: allowed, the paths the patch touches, the warnings' first words.
type Verdict = (bool, Vec<String>, Vec<String>);

fn verdict(response: &Value) -> Verdict {
    let allowed = response["allowed"] == json!(true);
    let paths = patch_of(response)
        .as_array()
        .into_iter()
        .flatten()
        .map(|op| {
            format!(
                "{} {}",
                op["op"].as_str().unwrap_or(""),
                op["path"].as_str().unwrap_or("")
            )
        })
        .collect();
    let warnings = response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|w| w.chars().take(60).collect())
        .collect();
    (allowed, paths, warnings)
}

#[tokio::test]
async fn every_version_s_reviews_get_the_same_answers() {
    let mut by_file: std::collections::BTreeMap<String, (String, Verdict)> =
        std::collections::BTreeMap::new();
    for (label, keeps) in LABELS {
        let app = common::app(view(), policy(keeps));
        let dir = common::fixture_path(&format!("apiserver-behaviour/{label}/reviews"));
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files.len(), 16, "{label}: {files:?}");
        for file in files {
            let endpoint = if file.ends_with("-mutate.json") {
                "/mutate"
            } else {
                "/validate"
            };
            let sent = review(label, &file);
            let response = review_response(&app, endpoint, &sent).await;
            assert_eq!(response["uid"], sent["request"]["uid"], "{label} {file}");
            let got = verdict(&response);
            match by_file.get(&file) {
                None => {
                    by_file.insert(file.clone(), (label.to_owned(), got));
                }
                Some((first, want)) => assert_eq!(
                    &got, want,
                    "{file}: {label} answered otherwise than {first}: {response}"
                ),
            }
        }
    }
    let expect = |file: &str| &by_file[file].1;
    // Everything is allowed; only the template edits are changed, and said.
    for (file, (_, (allowed, paths, warnings))) in &by_file {
        assert!(*allowed, "{file}");
        if !file.starts_with("07") && !file.starts_with("08") {
            assert!(paths.is_empty(), "{file}: {paths:?}");
            assert!(warnings.is_empty(), "{file}: {warnings:?}");
        }
    }
    // The template edit of kubectl apply and of server-side apply: the old templates put back,
    // the new ones recorded, a warning naming the change.
    for file in [
        "07-statefulsets-UPDATE-mutate.json",
        "08-statefulsets-UPDATE-mutate.json",
    ] {
        let (_, paths, warnings) = expect(file);
        assert!(
            paths.contains(&"replace /spec/volumeClaimTemplates".to_owned()),
            "{file}: {paths:?}"
        );
        assert!(
            paths
                .iter()
                .any(|p| p.contains("desired-volume-claim-templates")),
            "{file}: {paths:?}"
        );
        assert!(
            warnings.iter().any(|w| w.contains("data")),
            "{file}: {warnings:?}"
        );
    }
}

/// The recorded change itself, exactly, on the oldest and the newest version: the desired
/// template is the new one, whatever the version put into the review's templates.
#[tokio::test]
async fn a_template_edit_records_the_same_desired_template_on_every_version() {
    let mut recorded = Vec::new();
    for (label, keeps) in LABELS {
        let app = common::app(view(), policy(keeps));
        let response = review_response(
            &app,
            "/mutate",
            &review(label, "07-statefulsets-UPDATE-mutate.json"),
        )
        .await;
        let desired = patch_of(&response)
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|op| {
                op["value"]
                    .get("stateful-admission.io/desired-volume-claim-templates")
                    .or_else(|| {
                        op["path"]
                            .as_str()
                            .filter(|p| p.ends_with("desired-volume-claim-templates"))
                            .map(|_| &op["value"])
                    })
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("{label}: nothing recorded: {response}"));
        let templates: Value = serde_json::from_str(&desired).expect("a JSON array");
        assert_eq!(
            templates.pointer("/0/spec/resources/requests/storage"),
            Some(&json!("2Gi")),
            "{label}: {templates}"
        );
        recorded.push((label, templates));
    }
    for (label, templates) in &recorded[1..] {
        assert_eq!(
            templates, &recorded[0].1,
            "{label} records what {} records",
            recorded[0].0
        );
    }
}

/// Where the apiserver keeps and defaults `maxUnavailable` (gate on), a create arrives with
/// `maxUnavailable: 1` the user never wrote: a webhook that has not learned the gate copies it
/// into the fallback annotation (harmless, the controller stands down where the field is
/// kept); one that has, does not.
#[tokio::test]
async fn the_fallback_copy_follows_what_the_webhook_learned() {
    let create = review("v1.32-gates-on", "01-statefulsets-CREATE-mutate.json");
    assert_eq!(
        create.pointer("/request/object/spec/updateStrategy/rollingUpdate/maxUnavailable"),
        Some(&json!(1)),
        "defaulted by the apiserver"
    );
    let unknown =
        review_response(&common::app(view(), Policy::default()), "/mutate", &create).await;
    assert_eq!(
        verdict(&unknown).1,
        ["add /metadata/annotations/stateful-admission.io~1max-unavailable"]
    );
    let learned = review_response(&common::app(view(), policy(true)), "/mutate", &create).await;
    assert!(verdict(&learned).1.is_empty(), "{learned}");
}

/// Where the apiserver takes volumeClaimTemplate edits itself (KEP-4650, learned as
/// `native-template-edits`), the webhook leaves an edit as sent: nothing put back, nothing
/// recorded, no warning.
#[tokio::test]
async fn a_native_apiserver_gets_template_edits_as_sent() {
    use stateful_admission::capabilities::{Capabilities, Learned, Name, NativeField, Value};
    let mut capabilities = Capabilities::default();
    capabilities.set(
        Name::NativeTemplateEdits,
        Learned::probed(
            Value::Native(NativeField::VolumeClaimUpdatePolicy),
            "a test",
        ),
    );
    let native = Policy::default().with_capabilities(std::sync::Arc::new(capabilities));
    for file in [
        "07-statefulsets-UPDATE-mutate.json",
        "08-statefulsets-UPDATE-mutate.json",
    ] {
        let edit = review("v1.36", file);
        let response =
            review_response(&common::app(view(), native.clone()), "/mutate", &edit).await;
        assert_eq!(
            verdict(&response),
            (true, Vec::new(), Vec::new()),
            "{file}: {response}"
        );
        // Where it does not, the same edit is put back and recorded.
        let response = review_response(&common::app(view(), policy(false)), "/mutate", &edit).await;
        assert!(!verdict(&response).1.is_empty(), "{file}");
    }
}
