//! `--state FILE`: cluster state from a file instead of a cluster. Accepts YAML or JSON, as a
//! `List` (what `kubectl get -o yaml` prints), a multi-document stream, or single objects.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ClusterObjects;

/// A state file that cannot be used, naming the file and the document at fault.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read state file {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("state file {file}: cannot parse: {message}")]
    Parse { file: String, message: String },
    #[error("state file {file}: document {document}: {message}")]
    Document {
        file: String,
        document: usize,
        message: String,
    },
}

/// Kinds the view holds; other kinds in a state file are skipped (with a log line), so that a
/// dump of a whole namespace can be used as it is.
const KINDS: [&str; 4] = [
    "StorageClass",
    "Namespace",
    "StatefulSet",
    "PersistentVolumeClaim",
];

/// Reads and parses a state file.
pub fn load(path: &Path) -> Result<ClusterObjects, StateError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| StateError::Read {
        file: file.clone(),
        source,
    })?;
    parse(&file, &bytes)
}

/// Parses state from bytes; `file` only names the source in errors.
pub fn parse(file: &str, bytes: &[u8]) -> Result<ClusterObjects, StateError> {
    let docs = parse_documents(file, bytes)?;
    objects_from_values(
        file,
        docs.into_iter()
            .enumerate()
            .map(|(i, d)| (i + 1, d))
            .collect(),
    )
}

fn parse_documents(file: &str, bytes: &[u8]) -> Result<Vec<Value>, StateError> {
    let parse_err = |message: String| StateError::Parse {
        file: file.to_owned(),
        message,
    };
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if matches!(first, Some(b'{') | Some(b'[')) {
        // JSON, possibly several concatenated documents.
        let mut docs = Vec::new();
        for doc in serde_json::Deserializer::from_slice(bytes).into_iter::<Value>() {
            docs.push(doc.map_err(|e| parse_err(e.to_string()))?);
        }
        return Ok(docs);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| parse_err(e.to_string()))?;
    // The YAML error renders a source snippet over several lines; keep the first (it names
    // the line and column) so that the error stays one line.
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| {
        let full = e.to_string();
        let first = full.lines().next().unwrap_or_default();
        parse_err(first.trim_start_matches("error: ").to_owned())
    })?;
    Ok(docs)
}

/// Sorts documents (with their 1-based position in the file) into typed objects, flattening
/// Lists. An empty document is skipped; a document of a known kind that does not decode is an
/// error naming the document.
pub fn objects_from_values(
    file: &str,
    docs: Vec<(usize, Value)>,
) -> Result<ClusterObjects, StateError> {
    let mut out = ClusterObjects::default();
    for (document, doc) in docs {
        let doc_err = |message: String| StateError::Document {
            file: file.to_owned(),
            document,
            message,
        };
        let items = match doc {
            Value::Null => continue,
            Value::Array(items) => items,
            Value::Object(ref map) if map.get("items").is_some_and(Value::is_array) => {
                let Value::Object(mut map) = doc else {
                    unreachable!("matched an object above")
                };
                match map.remove("items") {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                }
            }
            Value::Object(_) => vec![doc],
            other => return Err(doc_err(format!("expected an object, found {other}"))),
        };
        for item in items {
            add(&mut out, item).map_err(doc_err)?;
        }
    }
    Ok(out)
}

fn add(out: &mut ClusterObjects, item: Value) -> Result<(), String> {
    let kind = item
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| "object has no kind".to_owned())?
        .to_owned();
    let name = item
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let decode_err = |e: serde_json::Error| format!("{kind} {name:?}: {e}");
    match kind.as_str() {
        "StorageClass" => out.storage_classes.push(decode(item).map_err(decode_err)?),
        "Namespace" => out.namespaces.push(decode(item).map_err(decode_err)?),
        "StatefulSet" => out.stateful_sets.push(decode(item).map_err(decode_err)?),
        "PersistentVolumeClaim" => out.claims.push(decode(item).map_err(decode_err)?),
        _ => {
            tracing::warn!(kind, name, supported = ?KINDS, "skipping object of a kind the state view does not hold");
            return Ok(());
        }
    }
    if name.is_empty() {
        return Err(format!("{kind} has no metadata.name"));
    }
    Ok(())
}

fn decode<K: DeserializeOwned>(item: Value) -> Result<K, serde_json::Error> {
    serde_json::from_value(item)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_list_and_stream_and_json_all_load() {
        let yaml = r#"
apiVersion: v1
kind: List
items:
- apiVersion: storage.k8s.io/v1
  kind: StorageClass
  metadata: {name: gold}
  provisioner: x
---
apiVersion: v1
kind: Namespace
metadata: {name: db}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
"#;
        let objs = parse("state.yaml", yaml.as_bytes()).expect("parses");
        assert_eq!(objs.storage_classes.len(), 1);
        assert_eq!(objs.namespaces.len(), 1);

        let json = r#"{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"a","namespace":"db"}}
{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"b","namespace":"db"}}"#;
        let objs = parse("state.json", json.as_bytes()).expect("parses");
        assert_eq!(objs.claims.len(), 2);
    }

    #[test]
    fn errors_name_the_file_and_document() {
        let err = parse("s.yaml", b"kind: Namespace\nmetadata: {name: a}\n---\nkind: StatefulSet\nmetadata: {name: web}\nspec: {replicas: many}\n")
            .expect_err("bad replicas");
        let msg = err.to_string();
        assert!(
            msg.starts_with("state file s.yaml: document 2: StatefulSet \"web\""),
            "{msg}"
        );

        let err = parse("s.yaml", b"kind: [unclosed").expect_err("bad yaml");
        assert!(
            err.to_string()
                .starts_with("state file s.yaml: cannot parse"),
            "{err}"
        );

        let err = parse("s.json", b"{\"kind\": ").expect_err("bad json");
        assert!(
            err.to_string()
                .starts_with("state file s.json: cannot parse"),
            "{err}"
        );

        let err = parse("s.yaml", b"metadata: {name: a}\n").expect_err("no kind");
        assert!(
            err.to_string().contains("document 1: object has no kind"),
            "{err}"
        );
    }
}
