//! The fuzz properties (fuzz/harness.rs) on stable Rust in every test run: every input the
//! fuzzer ever failed on (fuzz/regressions/TARGET/), every fixture, and a deterministic
//! sweep that puts hostile values in place of each field of each captured review — the
//! CI-sized version of `scripts/fuzz.sh`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::fuzz_harness as harness;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.retain(|p| p.is_file() && p.file_name().is_some_and(|n| n != ".gitkeep"));
    out.sort();
    out
}

/// A fuzz property: returns on input it rejects, panics when broken.
type Property = fn(&[u8]);

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn inputs_the_fuzzer_failed_on_pass_now() {
    let targets: [(&str, Property); 4] = [
        ("review", harness::review_body),
        ("rule_object", harness::rule_object),
        ("cluster_state", harness::cluster_state),
        ("quantity", harness::quantity),
    ];
    for (target, check) in targets {
        for input in files(&repo(&format!("fuzz/regressions/{target}"))) {
            let bytes = std::fs::read(&input).expect("readable");
            let outcome = std::panic::catch_unwind(|| check(&bytes));
            assert!(outcome.is_ok(), "{} fails again", input.display());
        }
    }
}

#[test]
fn every_fixture_review_and_state_holds_the_fuzz_properties() {
    let mut reviews = 0;
    for dir in [
        "tests/fixtures/apiserver",
        "tests/fixtures/claim",
        "tests/fixtures/statefulset",
        "benches/fixtures",
    ] {
        for file in files(&repo(dir)) {
            let bytes = std::fs::read(&file).expect("readable");
            harness::review_body(&bytes);
            harness::cluster_state(&bytes);
            reviews += 1;
        }
    }
    assert!(reviews >= 10, "fixtures found: {reviews}");
    harness::cluster_state(include_bytes!("../fixtures/claim/state.yaml"));
    harness::cluster_state(include_bytes!("../../examples/cluster.yaml"));
}

/// Values of the wrong type, size or shape, as a hostile or buggy client might send.
fn hostile_values() -> Vec<Value> {
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    vec![
        Value::Null,
        json!(-1),
        json!(""),
        json!("x".repeat(5_000)),
        json!({"a/b~c": "[{\"metadata\""}),
        deep,
    ]
}

/// Every JSON pointer of a value's leaves and containers, below `prefix`.
fn pointers(value: &Value, prefix: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let p = format!("{prefix}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(v, p, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let p = format!("{prefix}/{i}");
                out.push(p.clone());
                pointers(v, p, out);
            }
        }
        _ => {}
    }
}

#[test]
fn a_hostile_value_in_any_field_of_a_captured_review_breaks_no_property() {
    let hostile = hostile_values();
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in files(&repo("tests/fixtures/apiserver")) {
        let review: Value =
            serde_json::from_slice(&std::fs::read(&file).expect("readable")).expect("JSON");
        let mut paths = Vec::new();
        pointers(&review["request"], "/request".to_owned(), &mut paths);
        // managedFields entries are replaced whole; their insides are opaque to the rules
        // but for the keys the default-class rule looks for, which the fuzzer covers.
        paths.retain(|p| !p.contains("/managedFields/") || p.ends_with("/fieldsV1"));
        for path in &paths {
            for value in &hostile {
                let mut mutated = review.clone();
                if let Some(slot) = mutated.pointer_mut(path) {
                    *slot = value.clone();
                }
                let body = serde_json::to_vec(&mutated).expect("serialises");
                if std::panic::catch_unwind(|| harness::review_body(&body)).is_err() {
                    failures.push(format!(
                        "{}: {path} = {}",
                        file.display(),
                        truncate(&value.to_string())
                    ));
                }
                checked += 1;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked > 1000, "mutations checked: {checked}");
}

#[test]
fn truncated_and_corrupted_bodies_break_no_property() {
    for file in files(&repo("tests/fixtures/apiserver")) {
        let bytes = std::fs::read(&file).expect("readable");
        for cut in (0..bytes.len()).step_by(97) {
            harness::review_body(&bytes[..cut]);
            for byte in [b'{', b'"', b'0', 0xff] {
                let mut corrupted = bytes.clone();
                corrupted[cut] = byte;
                harness::review_body(&corrupted);
            }
        }
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}
