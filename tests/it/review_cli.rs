//! `stateful-admission review`: exit codes, stdin, bad input, and the response it prints.

use std::path::PathBuf;

use serde_json::{Value, json};
use stateful_admission::admission::Policy;
use stateful_admission::cluster::{ClusterView, state_file};

use crate::common::{
    app, fixture_path, patch_of, review_response, run_binary, run_binary_with_env, temp_file,
};

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn an_allowed_review_prints_the_response_and_exits_zero() {
    let review = fixture_path("apiserver/pvc-create.validate.json");
    let run = run_binary(&["review", path(&review)], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = run.json();
    assert_eq!(out["kind"], "AdmissionReview");
    assert_eq!(
        out["response"]["uid"],
        "4c114ae9-dfc0-44f7-91c9-cc0ae1fcaf46"
    );
    assert_eq!(out["response"]["allowed"], true);
}

#[test]
fn standard_input_is_read_with_a_dash() {
    let review =
        std::fs::read(fixture_path("apiserver/pvc-create.validate.json")).expect("fixture");
    for phase in [None, Some("mutate"), Some("validate")] {
        let mut args = vec!["review"];
        if let Some(p) = phase {
            args.extend(["--phase", p]);
        }
        args.push("-");
        let run = run_binary(&args, Some(&review));
        assert_eq!(run.code, 0, "{phase:?}: {}", run.stderr);
        assert_eq!(
            run.json()["response"]["uid"],
            "4c114ae9-dfc0-44f7-91c9-cc0ae1fcaf46"
        );
    }
}

#[test]
fn a_state_file_is_accepted_as_yaml_or_json() {
    let review = fixture_path("apiserver/pvc-create.validate.json");
    let yaml = temp_file(".yaml", b"apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gold}\nprovisioner: x\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n");
    let json = temp_file(".json", br#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"gold"},"provisioner":"x"}]}"#);
    for state in [yaml.path(), json.path()] {
        let run = run_binary(&["review", "--state", path(state), path(&review)], None);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
}

#[test]
fn bad_input_exits_two_with_one_line_on_stderr() {
    let good = fixture_path("apiserver/pvc-create.validate.json");
    let not_json = temp_file(".json", b"{ nope");
    let no_request = temp_file(".json", br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"x","allowed":true}}"#);
    let wrong_shape = temp_file(
        ".json",
        br#"{"kind":"AdmissionReview","request":{"uid":"x","operation":[]}}"#,
    );
    let bad_state = temp_file(".yaml", b"kind: StorageClass\nmetadata: {name: [}\n");
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "not JSON",
            vec!["review", path(not_json.path())],
            "not JSON",
        ),
        (
            "no request",
            vec!["review", path(no_request.path())],
            "not an AdmissionReview with a request",
        ),
        (
            "wrong shape",
            vec!["review", path(wrong_shape.path())],
            "malformed AdmissionReview",
        ),
        (
            "missing file",
            vec!["review", "/nonexistent/review.json"],
            "cannot read /nonexistent/review.json",
        ),
        (
            "bad state",
            vec!["review", "--state", path(bad_state.path()), path(&good)],
            "cannot parse",
        ),
        (
            "missing state",
            vec!["review", "--state", "/nonexistent/state.yaml", path(&good)],
            "cannot read state file",
        ),
        (
            "unknown phase",
            vec!["review", "--phase", "admit", path(&good)],
            "invalid value 'admit'",
        ),
    ];
    for (what, args, want) in cases {
        let run = run_binary(&args, None);
        assert_eq!(run.code, 2, "{what}: {}", run.stderr);
        assert!(
            run.stdout.is_empty(),
            "{what}: stdout must stay empty: {}",
            run.stdout
        );
        assert!(run.stderr.contains(want), "{what}: {}", run.stderr);
        if what != "unknown phase" {
            assert_eq!(
                run.stderr.trim_end().lines().count(),
                1,
                "{what}: {}",
                run.stderr
            );
        }
    }
}

#[test]
fn an_empty_standard_input_is_bad_input() {
    let run = run_binary(&["review", "-"], Some(b""));
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("not JSON"), "{}", run.stderr);
}

/// Requests no rule handles are allowed unchanged, whatever their objects are: a `kubectl
/// exec` reaches a webhook as a CONNECT of `pods/exec` carrying `PodExecOptions`.
#[test]
fn a_connect_with_an_options_object_is_allowed_unchanged() {
    let review = fixture_path("pod/connect-exec.json");
    for phase in [None, Some("mutate"), Some("validate")] {
        let mut args = vec!["review"];
        if let Some(p) = phase {
            args.extend(["--phase", p]);
        }
        args.push(path(&review));
        let run = run_binary(&args, None);
        assert_eq!(run.code, 0, "{phase:?}: {}", run.stderr);
        let response = &run.json()["response"];
        assert_eq!(response["uid"], "c0e7a3d2-6b1f-4e9a-8d5c-2f4b6a8c0e1d");
        assert_eq!(response["allowed"], true);
        assert!(response.get("patch").is_none(), "{response}");
        assert!(response.get("warnings").is_none(), "{response}");
    }
    // The same object in a request the rules handle is bad input.
    let mut handled: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&review).expect("fixture")).expect("json");
    handled["request"]["resource"] =
        serde_json::json!({"group": "", "version": "v1", "resource": "persistentvolumeclaims"});
    handled["request"]["subResource"] = serde_json::Value::Null;
    handled["request"]["operation"] = serde_json::json!("CREATE");
    let file = temp_file(".json", handled.to_string().as_bytes());
    let run = run_binary(&["review", path(file.path())], None);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("request.object: metadata must be an object"),
        "{}",
        run.stderr
    );
}

/// A file under `examples/`, as the README runs it.
fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

fn example_review(name: &str) -> Value {
    let text = std::fs::read(example(&format!("reviews/{name}"))).expect("example review");
    serde_json::from_slice(&text).expect("example is JSON")
}

const EMPTY_CLUSTER_NOTE: &str = "note: no --state given: reviewed against an empty cluster";

#[test]
fn every_example_review_exits_as_the_readme_says() {
    let state = example("cluster.yaml");
    let listing = std::fs::read_to_string(example("reviews/README.md")).expect("README");
    let mut seen = 0;
    for entry in std::fs::read_dir(example("reviews")).expect("examples/reviews") {
        let review = entry.expect("entry").path();
        if review.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = review.file_name().and_then(|n| n.to_str()).expect("name");
        // The README's table row for the file ends with the exit code it states.
        let row = listing
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("examples/reviews/README.md does not list {name}"));
        let want_code: i32 = row
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or_else(|| panic!("no exit code in the row for {name}: {row}"));
        let run = run_binary(&["review", "--state", path(&state), path(&review)], None);
        assert_eq!(run.code, want_code, "{name}: {}", run.stderr);
        assert_eq!(run.json()["response"]["allowed"], want_code == 0, "{name}");
        assert_eq!(run.stderr, "", "{name}: a state was given, nothing to note");
        seen += 1;
    }
    assert!(seen >= 4, "examples found: {seen}");
    assert!(
        listing.contains("**denied**, 422") && listing.contains("| 1 |"),
        "the README shows the denied example and its exit code"
    );
}

#[test]
fn the_denied_example_names_the_field_and_what_may_change() {
    let run = run_binary(
        &[
            "review",
            "--state",
            path(&example("cluster.yaml")),
            path(&example("reviews/statefulset-storage-class-change.json")),
        ],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let response = &run.json()["response"];
    assert_eq!(response["uid"], "7f3d2c9e-5b1a-4e8f-a6d4-0c2b9e81f357");
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    assert_eq!(
        response["status"]["message"],
        "StatefulSet.apps \"web\" is invalid: spec.volumeClaimTemplates[0].spec.storageClassName: \
         Forbidden: may not change; only metadata.labels, metadata.annotations, \
         spec.resources.requests.storage and spec.volumeAttributesClassName of a volume claim \
         template may change"
    );
    assert!(response.get("patch").is_none(), "{response}");
}

#[tokio::test]
async fn the_default_output_is_the_wire_response_and_patch_json_decodes_it() {
    let state = example("cluster.yaml");
    let view = ClusterView::from_objects(state_file::load(&state).expect("example state"));
    let server = app(view, Policy::default());
    for name in [
        "claim-created-without-class.json",
        "statefulset-storage-increase.json",
    ] {
        let review = example(&format!("reviews/{name}"));
        let args = |extra: &[&'static str]| {
            let mut args = vec!["review", "--phase", "mutate", "--state", path(&state)];
            args.extend_from_slice(extra);
            args.push(path(&review));
            args
        };
        let default = run_binary(&args(&[]), None);
        let base64 = run_binary(&args(&["--patch", "base64"]), None);
        let decoded = run_binary(&args(&["--patch", "json"]), None);
        for run in [&default, &base64, &decoded] {
            assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        }
        // What the webhook sends, field for field: the patch is the same base64 string.
        let wire = review_response(&server, "/mutate", &example_review(name)).await;
        assert_eq!(default.json()["response"], wire, "{name}");
        assert!(wire["patch"].is_string(), "{name}: the example is patched");
        assert_eq!(
            base64.stdout, default.stdout,
            "{name}: base64 is the default"
        );

        // --patch json: the same response with the array in place of the string.
        let mut want = default.json();
        want["response"]["patch"] = patch_of(&wire);
        assert_eq!(decoded.json(), want, "{name}");
        assert!(decoded.json()["response"]["patch"].is_array(), "{name}");
    }
}

#[test]
fn show_object_prints_the_object_after_the_patch() {
    let state = example("cluster.yaml");
    for (name, check) in [
        ("claim-created-without-class.json", "/spec/storageClassName"),
        (
            "statefulset-storage-increase.json",
            "/spec/volumeClaimTemplates/0/spec/resources/requests/storage",
        ),
    ] {
        let review_path = example(&format!("reviews/{name}"));
        let run = run_binary(
            &[
                "review",
                "--state",
                path(&state),
                "--show",
                "object",
                path(&review_path),
            ],
            None,
        );
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        let shown = run.json();

        // The request's object with the response's patch applied, as the apiserver does.
        let response = run_binary(
            &["review", "--state", path(&state), path(&review_path)],
            None,
        )
        .json()["response"]
            .clone();
        let mut want = example_review(name)["request"]["object"].clone();
        let ops: json_patch::Patch =
            serde_json::from_value(patch_of(&response)).expect("a JSON patch");
        json_patch::patch(&mut want, &ops).expect("the patch applies");
        assert_eq!(shown, want, "{name}");
        assert_ne!(
            shown.pointer(check),
            example_review(name)["request"]["object"].pointer(check),
            "{name}: {check} is what the mutation changes"
        );
    }
    // The set keeps its old templates and records the new ones.
    let run = run_binary(
        &[
            "review",
            "--state",
            path(&state),
            "--show",
            "object",
            path(&example("reviews/statefulset-storage-increase.json")),
        ],
        None,
    );
    let set = run.json();
    assert_eq!(
        set.pointer("/spec/volumeClaimTemplates/0/spec/resources/requests/storage"),
        Some(&json!("1Gi"))
    );
    let desired: Value = serde_json::from_str(
        set["metadata"]["annotations"]["stateful-admission.io/desired-volume-claim-templates"]
            .as_str()
            .expect("desired templates recorded"),
    )
    .expect("JSON array");
    assert_eq!(
        desired[0]["spec"]["resources"]["requests"]["storage"],
        "5Gi"
    );
}

#[test]
fn show_object_of_a_denied_review_prints_nothing_and_says_why() {
    let run = run_binary(
        &[
            "review",
            "--state",
            path(&example("cluster.yaml")),
            "--show",
            "object",
            path(&example("reviews/statefulset-storage-class-change.json")),
        ],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.starts_with("denied: StatefulSet.apps \"web\" is invalid: spec.volumeClaimTemplates[0].spec.storageClassName: Forbidden"),
        "{}",
        run.stderr
    );
}

#[test]
fn without_a_state_file_one_line_on_stderr_says_the_cluster_is_empty() {
    let review = example("reviews/claim-created-without-class.json");
    let run = run_binary(&["review", path(&review)], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.starts_with(EMPTY_CLUSTER_NOTE), "{}", run.stderr);
    // Which is why the claim got no class: there is no default to give it.
    assert!(run.json()["response"].get("patch").is_none());

    let with_state = run_binary(
        &[
            "review",
            "--state",
            path(&example("cluster.yaml")),
            path(&review),
        ],
        None,
    );
    assert_eq!(with_state.stderr, "");
    assert!(with_state.json()["response"]["patch"].is_string());

    // Bad input is one error line, not the note as well.
    let run = run_binary(&["review", "-"], Some(b"{ nope"));
    assert_eq!(run.code, 2);
    assert!(!run.stderr.contains(EMPTY_CLUSTER_NOTE), "{}", run.stderr);
}

#[test]
fn bad_combinations_and_values_of_patch_and_show_exit_two() {
    let review = example("reviews/claim-created-without-class.json");
    let mut delete = example_review("claim-created-without-class.json");
    delete["request"]["operation"] = json!("DELETE");
    delete["request"]["oldObject"] = delete["request"]["object"].take();
    let delete = temp_file(".json", &serde_json::to_vec(&delete).expect("json"));
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "object with a patch format",
            vec![
                "review",
                "--show",
                "object",
                "--patch",
                "json",
                path(&review),
            ],
            "--patch formats the printed review; --show object prints the object instead",
        ),
        (
            "object with the default patch format spelled out",
            vec![
                "review",
                "--patch",
                "base64",
                "--show",
                "object",
                path(&review),
            ],
            "--show object prints the object instead",
        ),
        (
            "object of the validating phase",
            vec![
                "review",
                "--show",
                "object",
                "--phase",
                "validate",
                path(&review),
            ],
            "--show object needs the mutating phase",
        ),
        (
            "object of a request without one",
            vec!["review", "--show", "object", path(delete.path())],
            "the request carries no object",
        ),
        (
            "unknown patch format",
            vec!["review", "--patch", "yaml", path(&review)],
            "invalid value 'yaml' for '--patch <base64|json>'",
        ),
        (
            "unknown show",
            vec!["review", "--show", "status", path(&review)],
            "invalid value 'status' for '--show <review|object>'",
        ),
    ];
    for (what, args, want) in cases {
        let run = run_binary(&args, None);
        assert_eq!(run.code, 2, "{what}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{what}");
        assert!(run.stderr.contains(want), "{what}: {}", run.stderr);
    }
    // The DELETE itself is fine to review: allowed unchanged.
    let run = run_binary(&["review", path(delete.path())], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn admission_mode_warn_allows_a_denied_review_with_the_denial_as_a_warning() {
    let review = example("reviews/statefulset-storage-class-change.json");
    let state = example("cluster.yaml");
    let args = |mode: &'static str| {
        vec![
            "review",
            "--state",
            path(&state),
            "--admission-mode",
            mode,
            path(&review),
        ]
    };
    let enforce = run_binary(&args("enforce"), None);
    assert_eq!(enforce.code, 1, "{}", enforce.stderr);
    let message = enforce.json()["response"]["status"]["message"].clone();
    assert!(
        message.as_str().is_some_and(|m| m.contains("Forbidden")),
        "{message}"
    );

    let warn = run_binary(&args("warn"), None);
    assert_eq!(warn.code, 0, "{}", warn.stderr);
    let response = warn.json()["response"].clone();
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
    let first = response["warnings"][0]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let message = message.as_str().unwrap_or_default();
    assert!(
        first.starts_with("would be denied (admission mode warn): ")
            && message.starts_with(
                first
                    .trim_start_matches("would be denied (admission mode warn): ")
                    .trim_end_matches(" (continued)")
            ),
        "{first}"
    );

    // The environment variable the chart sets works too; a bad mode is bad input.
    let from_env = run_binary_with_env(
        &[
            "review",
            "--state",
            path(&example("cluster.yaml")),
            path(&review),
        ],
        &[("STATEFUL_ADMISSION_ADMISSION_MODE", "warn")],
    );
    assert_eq!(from_env.code, 0, "{}", from_env.stderr);
    let bad = run_binary(&args("audit"), None);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}
