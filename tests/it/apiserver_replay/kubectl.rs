//! The requests kubectl sends for the captured command lines, and what it prints:
//!
//! - `apply -f -` (client-side): GET; if absent, POST the manifest with its
//!   `last-applied-configuration` annotation; else a strategic merge PATCH of what changed
//!   since the live object (the annotation, and lists without a merge key sent whole);
//!   `fieldManager=kubectl-client-side-apply`, `fieldValidation=Strict`;
//! - `apply --server-side --force-conflicts -f -`: an apply PATCH of the manifest,
//!   `fieldManager=kubectl`, `force=true`, `fieldValidation=Strict`;
//! - `scale <kind> <name> --replicas=N`: GET, then a merge PATCH of the `scale` subresource;
//! - `patch <kind> <name> --type merge -p <json>`: GET, then a merge PATCH,
//!   `fieldManager=kubectl-patch`.
//!
//! A failure prints as kubectl's `StandardErrorMessage` does: an Invalid with causes as
//! `The <Kind> "<name>" is invalid: <field>: <message>`, others as
//! `Error from server (<Reason>): <message>`; exit code 1.

use serde_json::{Map, Value, json};

use super::{Answer, Harness, KUBECTL};

/// Exit code and output of a command.
pub struct Outcome {
    pub status: i64,
    pub output: String,
}

/// The API path of a resource type kubectl names, and how its output names it.
fn resource(kind: &str) -> (&'static str, &'static str, &'static str) {
    match kind {
        "statefulset" | "statefulsets" | "sts" | "StatefulSet" => {
            ("/apis/apps/v1", "statefulsets", "statefulset.apps")
        }
        "pvc" | "persistentvolumeclaim" | "persistentvolumeclaims" | "PersistentVolumeClaim" => {
            ("/api/v1", "persistentvolumeclaims", "persistentvolumeclaim")
        }
        other => panic!("kubectl: no resource type {other} in the harness"),
    }
}

fn failed(answer: &Answer) -> Outcome {
    let body = &answer.body;
    let details = &body["details"];
    let causes: Vec<String> = details["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            )
        })
        .collect();
    let output = if body["reason"] == "Invalid" && !causes.is_empty() {
        let prefix = format!(
            "The {} {:?} is invalid: ",
            details["kind"].as_str().unwrap_or(""),
            details["name"].as_str().unwrap_or("")
        );
        match causes.as_slice() {
            [one] => format!("{prefix}{one}"),
            many => format!("{prefix}\n* {}", many.join("\n* ")),
        }
    } else {
        format!(
            "Error from server ({}): {}",
            body["reason"].as_str().unwrap_or(""),
            body["message"].as_str().unwrap_or("")
        )
    };
    Outcome { status: 1, output }
}

fn done(answer: &Answer, printed: String) -> Outcome {
    if answer.ok() {
        Outcome {
            status: 0,
            output: printed,
        }
    } else {
        failed(answer)
    }
}

/// `-n <namespace>` of a command line.
fn namespace(words: &[&str]) -> String {
    words
        .windows(2)
        .find(|w| w[0] == "-n" || w[0] == "--namespace")
        .map_or("default".to_owned(), |w| w[1].to_owned())
}

/// The annotation client-side apply keeps: the manifest as JSON (keys sorted) with an empty
/// `metadata.annotations` but for the annotation itself, and a newline.
fn last_applied(manifest: &Value) -> String {
    let mut recorded = manifest.clone();
    let mut annotations = recorded["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    recorded["metadata"]["annotations"] = Value::Object(annotations);
    format!("{recorded}\n")
}

/// Lists merged by a key in a strategic merge patch (their items compared by it).
fn merge_key(field: &str) -> Option<&'static str> {
    matches!(field, "containers" | "initContainers" | "volumes").then_some("name")
}

/// The changes `modified` makes to `current`, as `CreateThreeWayMergePatch` computes them
/// with deletions (from `original`) only where a field was in `original`.
fn three_way(original: &Value, modified: &Value, current: &Value) -> Map<String, Value> {
    let mut patch = Map::new();
    let (Some(m), c) = (modified.as_object(), current.as_object()) else {
        return patch;
    };
    for (key, want) in m {
        let have = c.and_then(|c| c.get(key));
        match (want, have) {
            (Value::Object(_), Some(have @ Value::Object(_))) => {
                let sub = three_way(original.get(key).unwrap_or(&Value::Null), want, have);
                if !sub.is_empty() {
                    patch.insert(key.clone(), Value::Object(sub));
                }
            }
            (Value::Array(items), Some(Value::Array(live))) if merge_key(key).is_some() => {
                let key_field = merge_key(key).unwrap_or("name");
                // Each item of the manifest: unchanged if the live item with its key has every
                // field it sets.
                let unchanged = items.iter().all(|item| {
                    live.iter()
                        .find(|l| l.get(key_field) == item.get(key_field))
                        .is_some_and(|l| three_way(&Value::Null, item, l).is_empty())
                });
                if !unchanged {
                    patch.insert(key.clone(), want.clone());
                }
            }
            (want, Some(have)) if want == have => {}
            (want, _) => {
                patch.insert(key.clone(), want.clone());
            }
        }
    }
    for key in original.as_object().into_iter().flatten().map(|(k, _)| k) {
        if !m.contains_key(key) && c.is_some_and(|c| c.contains_key(key)) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    patch
}

/// Runs one captured kubectl record.
pub async fn run(h: &Harness, record: &Value) -> Outcome {
    let line = record["request"]["path"].as_str().unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    let ns = namespace(&words);
    let manifest = &record["request"]["body"];
    if words.contains(&"apply") {
        let kind = manifest["kind"].as_str().unwrap_or("");
        let name = manifest["metadata"]["name"].as_str().unwrap_or("");
        let (prefix, plural, printed) = resource(kind);
        let collection = format!("{prefix}/namespaces/{ns}/{plural}");
        let item = format!("{collection}/{name}");
        if words.contains(&"--server-side") {
            let force = words.contains(&"--force-conflicts");
            let path = format!("{item}?fieldManager=kubectl&force={force}&fieldValidation=Strict");
            let answer = h
                .call(
                    KUBECTL,
                    "PATCH",
                    &path,
                    Some("application/apply-patch+yaml"),
                    Some(manifest),
                )
                .await;
            return done(&answer, format!("{printed}/{name} serverside-applied"));
        }
        let mut modified = manifest.clone();
        modified["metadata"]["annotations"] =
            json!({"kubectl.kubernetes.io/last-applied-configuration": last_applied(manifest)});
        let current = h.call(KUBECTL, "GET", &item, None, None).await;
        if current.status == 404 {
            let path = format!(
                "{collection}?fieldManager=kubectl-client-side-apply&fieldValidation=Strict"
            );
            let answer = h.call(KUBECTL, "POST", &path, None, Some(&modified)).await;
            return done(&answer, format!("{printed}/{name} created"));
        }
        let original: Value = current
            .body
            .pointer("/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration")
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or(Value::Null);
        let patch = three_way(&original, &modified, &current.body);
        if patch.is_empty() {
            return Outcome {
                status: 0,
                output: format!("{printed}/{name} unchanged"),
            };
        }
        let path = format!("{item}?fieldManager=kubectl-client-side-apply&fieldValidation=Strict");
        let answer = h
            .call(
                KUBECTL,
                "PATCH",
                &path,
                Some("application/strategic-merge-patch+json"),
                Some(&Value::Object(patch)),
            )
            .await;
        return done(&answer, format!("{printed}/{name} configured"));
    }
    if let Some(at) = words.iter().position(|w| *w == "scale") {
        let (prefix, plural, printed) = resource(words[at + 1]);
        let name = words[at + 2];
        let replicas: i64 = words
            .iter()
            .find_map(|w| w.strip_prefix("--replicas="))
            .and_then(|n| n.parse().ok())
            .expect("--replicas=N");
        let item = format!("{prefix}/namespaces/{ns}/{plural}/{name}");
        let found = h.call(KUBECTL, "GET", &item, None, None).await;
        if !found.ok() {
            return failed(&found);
        }
        let answer = h
            .call(
                KUBECTL,
                "PATCH",
                &format!("{item}/scale"),
                Some("application/merge-patch+json"),
                Some(&json!({"spec": {"replicas": replicas}})),
            )
            .await;
        return done(&answer, format!("{printed}/{name} scaled"));
    }
    if let Some(at) = words.iter().position(|w| *w == "patch") {
        let (prefix, plural, printed) = resource(words[at + 1]);
        let name = words[at + 2];
        let patch: Value = line
            .split_once(" -p ")
            .and_then(|(_, json)| serde_json::from_str(json).ok())
            .expect("-p <json>");
        let item = format!("{prefix}/namespaces/{ns}/{plural}/{name}");
        let found = h.call(KUBECTL, "GET", &item, None, None).await;
        if !found.ok() {
            return failed(&found);
        }
        let answer = h
            .call(
                KUBECTL,
                "PATCH",
                &format!("{item}?fieldManager=kubectl-patch"),
                Some("application/merge-patch+json"),
                Some(&patch),
            )
            .await;
        let unchanged = answer.ok() && answer.body == found.body;
        let suffix = if unchanged {
            "patched (no change)"
        } else {
            "patched"
        };
        return done(&answer, format!("{printed}/{name} {suffix}"));
    }
    panic!("kubectl: no such command in the harness: {line}");
}
