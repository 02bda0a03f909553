//! `stateful-admission review`: exit codes, stdin, bad input, and the response it prints.

use crate::common::{fixture_path, run_binary, temp_file};

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
