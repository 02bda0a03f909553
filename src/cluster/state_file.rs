//! `--state FILE`: cluster state from a file instead of a cluster. Accepts YAML or JSON, as a
//! `List` (what `kubectl get -o yaml` prints), a multi-document stream, or single objects.

use std::path::Path;

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
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if matches!(first, Some(b'{') | Some(b'[')) {
        return parse_json(file, bytes);
    }
    let docs = parse_yaml(file, bytes)?;
    objects_from_values(
        file,
        docs.into_iter()
            .enumerate()
            .map(|(i, d)| (i + 1, d))
            .collect(),
    )
}

/// JSON, possibly several concatenated documents, decoded one List item at a time: a state of
/// 10,000 claims never exists as one JSON tree (that tree was most of the startup memory).
fn parse_json(file: &str, bytes: &[u8]) -> Result<ClusterObjects, StateError> {
    use serde::de::DeserializeSeed;
    let mut out = ClusterObjects::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut document = 0;
    loop {
        document += 1;
        let mut failed = None;
        let seed = stream::Document {
            out: &mut out,
            failed: &mut failed,
        };
        if let Err(e) = seed.deserialize(&mut de) {
            return Err(match failed {
                Some(message) => StateError::Document {
                    file: file.to_owned(),
                    document,
                    message,
                },
                None => StateError::Parse {
                    file: file.to_owned(),
                    message: e.to_string(),
                },
            });
        }
        // Only whitespace left: done; anything else is the next document.
        if de.end().is_ok() {
            return Ok(out);
        }
    }
}

fn parse_yaml(file: &str, bytes: &[u8]) -> Result<Vec<Value>, StateError> {
    let parse_err = |message: String| StateError::Parse {
        file: file.to_owned(),
        message,
    };
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

fn add(out: &mut ClusterObjects, mut item: Value) -> Result<(), String> {
    // Before decoding, so that the typed kinds never build them (the lite kinds skip them).
    if let Some(metadata) = item.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
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

/// Decodes one object as the watches do (its lite type, or its typed kind trimmed at once),
/// so that what is dropped is freed before the next object is read and its memory is reused.
fn decode<K: super::lite::Watched>(item: Value) -> Result<K, serde_json::Error> {
    let mut object: K = serde_json::from_value(item)?;
    object.trim();
    Ok(object)
}

/// The streaming side of [`parse_json`]: a document is `null` (skipped), an array of
/// objects, an object with an `items` array (a List), or one object — as in
/// [`objects_from_values`].
mod stream {
    use std::fmt;

    use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};

    use super::{ClusterObjects, add};

    pub(super) struct Document<'a> {
        pub out: &'a mut ClusterObjects,
        /// Why the document was refused, when it parsed but does not decode.
        pub failed: &'a mut Option<String>,
    }

    impl<'de> DeserializeSeed<'de> for Document<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl Document<'_> {
        fn add<E: de::Error>(&mut self, item: Value) -> Result<(), E> {
            add(self.out, item).map_err(|message| {
                let e = E::custom(&message);
                *self.failed = Some(message);
                e
            })
        }

        fn refuse<E: de::Error>(&mut self, found: &str) -> Result<(), E> {
            let message = format!("expected an object, found {found}");
            let e = E::custom(&message);
            *self.failed = Some(message);
            Err(e)
        }
    }

    impl<'de> Visitor<'de> for Document<'_> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a List, an array of objects or an object")
        }

        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }

        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            while let Some(item) = seq.next_element::<Value>()? {
                self.add(item)?;
            }
            Ok(())
        }

        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
            let mut fields = Map::new();
            let mut listed = false;
            while let Some(key) = map.next_key::<String>()? {
                if key == "items" {
                    let items = map.next_value_seed(Items {
                        doc: Document {
                            out: self.out,
                            failed: self.failed,
                        },
                    })?;
                    match items {
                        None => listed = true,
                        Some(value) => {
                            fields.insert(key, value);
                        }
                    }
                } else {
                    fields.insert(key, map.next_value()?);
                }
            }
            if listed {
                Ok(())
            } else {
                self.add(Value::Object(fields))
            }
        }

        fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<(), E> {
            self.refuse(&v.to_string())
        }
        fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<(), E> {
            self.refuse(&v.to_string())
        }
        fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<(), E> {
            self.refuse(&v.to_string())
        }
        fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<(), E> {
            self.refuse(&Value::from(v).to_string())
        }
        fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
            self.refuse(&Value::from(v).to_string())
        }
    }

    /// The value of a top-level `items` key: an array is streamed into the objects (`None`);
    /// anything else is kept as a field of a single object (`Some`).
    struct Items<'a> {
        doc: Document<'a>,
    }

    impl<'de> DeserializeSeed<'de> for Items<'_> {
        type Value = Option<Value>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Value>, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Items<'_> {
        type Value = Option<Value>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<Value>, A::Error> {
            self.doc.visit_seq(seq).map(|()| None)
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<Value>, A::Error> {
            let value = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
            Ok(Some(value))
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<Value>, E> {
            Ok(Some(Value::Null))
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<Value>, E> {
            Ok(Some(Value::from(v)))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<Value>, E> {
            Ok(Some(Value::from(v)))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<Value>, E> {
            Ok(Some(Value::from(v)))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<Value>, E> {
            Ok(Some(Value::from(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<Value>, E> {
            Ok(Some(Value::from(v)))
        }
    }

    use serde::Deserialize as _;
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

    #[test]
    fn json_lists_arrays_and_objects_stream_into_the_same_objects_as_yaml() {
        let yaml = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n- {apiVersion: v1, kind: PersistentVolumeClaim, metadata: {name: c, namespace: a, managedFields: [{manager: m}]}}\n";
        let json = r#"{"items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}},{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"c","namespace":"a","managedFields":[{"manager":"m"}]}}],"kind":"List","apiVersion":"v1"}
null
[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"b"}}]
{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"c"},"items":{"not":"a list"}}"#;
        let from_yaml = parse("s.yaml", yaml.as_bytes()).expect("yaml");
        let from_json = parse("s.json", json.as_bytes()).expect("json");
        assert_eq!(from_json.claims, from_yaml.claims);
        assert_eq!(
            from_json
                .namespaces
                .iter()
                .filter_map(|n| n.metadata.name.as_deref())
                .collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        // Stripped as the reflectors strip them.
        assert_eq!(from_json.claims[0].metadata.managed_fields, None);
        assert_eq!(from_yaml.claims[0].metadata.managed_fields, None);
    }

    #[test]
    fn json_errors_name_the_document_when_it_parses_and_the_position_when_not() {
        let err = parse("s.json", b"[]\n{\"kind\":\"StatefulSet\",\"metadata\":{\"name\":\"web\"},\"spec\":{\"replicas\":\"many\"}}")
            .expect_err("bad replicas");
        assert!(
            err.to_string()
                .starts_with("state file s.json: document 2: StatefulSet \"web\""),
            "{err}"
        );
        let err = parse("s.json", b"[1]").expect_err("not an object");
        assert_eq!(
            err.to_string(),
            "state file s.json: document 1: object has no kind"
        );
        let err = parse("s.json", b"{\"items\": [{\"kind\": ").expect_err("truncated");
        assert!(
            err.to_string()
                .starts_with("state file s.json: cannot parse"),
            "{err}"
        );
        let err = parse("s.json", b"{} 5").expect_err("a number");
        assert!(
            err.to_string().contains("document 1: object has no kind"),
            "{err}"
        );
    }
}
