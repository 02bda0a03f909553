//! Quantities in a claim's raw JSON. The apiserver rejects a malformed quantity while decoding,
//! before any webhook; a hand-written review (or a test) can still carry one, and the rules
//! must answer it with a field error (422) instead of failing.

use serde_json::Value;

use super::{at, shown};
use crate::admission::FieldError;
use crate::quantity::Quantity;

/// A quantity read from a request: its value and the text the user wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    pub value: Quantity,
    pub raw: String,
}

/// Reads the quantity at JSON `pointer` of `object`; `field` is the path named in an error.
/// Absent (or `null`) is `Ok(None)`. A JSON number is read by its text, as upstream's
/// `Quantity.UnmarshalJSON` does.
pub(crate) fn read(object: &Value, pointer: &str, field: &str) -> Result<Option<Read>, FieldError> {
    match at(object, pointer) {
        None => Ok(None),
        Some(v) => parse_value(v, field).map(Some),
    }
}

/// Parses one JSON value as a quantity.
pub(crate) fn parse_value(value: &Value, field: &str) -> Result<Read, FieldError> {
    let raw = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            return Err(FieldError::invalid(
                field,
                shown(&other.to_string()),
                "must be a quantity string",
            ));
        }
    };
    Quantity::parse(&raw)
        .map(|value| Read {
            value,
            raw: raw.clone(),
        })
        .map_err(|e| FieldError::invalid(field, shown(&raw), e.to_string()))
}

/// Field errors for every malformed quantity of a claim's spec (`spec.resources.requests` and
/// `.limits`) and, with `with_status`, its status (`capacity`, `allocatedResources`).
/// `prefix` is put before each path (`"oldObject."` for the old object).
pub(crate) fn check_claim(data: &Value, prefix: &str) -> Vec<FieldError> {
    check(data, prefix, false)
}

/// [`check_claim`] including the status maps (for the old object of an UPDATE, whose status
/// is the one the rules read).
pub(crate) fn check_claim_with_status(data: &Value, prefix: &str) -> Vec<FieldError> {
    check(data, prefix, true)
}

fn check(data: &Value, prefix: &str, with_status: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut maps: Vec<&[&str]> = vec![
        &["spec", "resources", "requests"],
        &["spec", "resources", "limits"],
    ];
    if with_status {
        maps.push(&["status", "capacity"]);
        maps.push(&["status", "allocatedResources"]);
    }
    for segments in maps {
        check_map(data, segments, prefix, &mut errors);
    }
    // One error per field, even when two walks pass the same wrong-typed parent.
    errors.dedup();
    errors
}

/// Walks `segments` from `data`; reports a parent that is not an object, then every entry of
/// the map at the end that is not a quantity.
fn check_map(data: &Value, segments: &[&str], prefix: &str, errors: &mut Vec<FieldError>) {
    let mut node = data;
    let mut path = prefix.trim_end_matches('.').to_owned();
    for segment in segments {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(segment);
        match node.get(segment) {
            None | Some(Value::Null) => return,
            Some(Value::Object(_)) => node = &node[*segment],
            Some(other) => {
                errors.push(FieldError::invalid(
                    path,
                    shown(&other.to_string()),
                    "must be an object",
                ));
                return;
            }
        }
    }
    if let Value::Object(map) = node {
        for (key, value) in map.iter().filter(|(_, v)| !v.is_null()) {
            if let Err(e) = parse_value(value, &format!("{path}.{key}")) {
                errors.push(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_and_numbers_parse_other_types_are_field_errors() {
        let claim = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}, "limits": {"storage": 1024}}}});
        let read_at = |p: &str| read(&claim, p, "f");
        assert_eq!(
            read_at("/spec/resources/requests/storage")
                .expect("ok")
                .map(|r| r.raw),
            Some("2Gi".to_owned())
        );
        assert_eq!(
            read_at("/spec/resources/limits/storage")
                .expect("ok")
                .map(|r| r.value),
            Some(Quantity::from_units(1024))
        );
        assert_eq!(read_at("/spec/absent").expect("ok"), None);
        let err = parse_value(&json!({"a": 1}), "spec.x").expect_err("object");
        assert_eq!(
            err.to_string(),
            r#"spec.x: Invalid value: "{\"a\":1}": must be a quantity string"#
        );
    }

    #[test]
    fn malformed_quantities_and_shapes_are_listed_with_their_paths() {
        let cases = [
            (
                json!({"spec": {"resources": {"requests": {"storage": "abc"}}}}),
                vec![
                    r#"spec.resources.requests.storage: Invalid value: "abc": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"#,
                ],
            ),
            (
                json!({"spec": {"resources": {"requests": {"storage": "1Gi"}, "limits": {"storage": "1iK"}}}}),
                vec![
                    r#"spec.resources.limits.storage: Invalid value: "1iK": unable to parse quantity's suffix"#,
                ],
            ),
            (
                json!({"spec": {"resources": "big"}}),
                vec![r#"spec.resources: Invalid value: "\"big\"": must be an object"#],
            ),
            (
                json!({"spec": {"resources": {"requests": [1]}}}),
                vec![r#"spec.resources.requests: Invalid value: "[1]": must be an object"#],
            ),
            (
                json!({"spec": 7}),
                vec![r#"spec: Invalid value: "7": must be an object"#],
            ),
            (json!({}), vec![]),
            (
                json!({"spec": {"resources": {"requests": {"storage": null}}}}),
                vec![],
            ),
        ];
        for (claim, want) in cases {
            let got: Vec<String> = check_claim(&claim, "")
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(got, want, "{claim}");
        }
    }

    #[test]
    fn status_maps_are_checked_for_the_old_object_only_when_asked() {
        let old = json!({"status": {"capacity": {"storage": "x1"}, "allocatedResources": {"storage": true}}});
        assert!(check_claim(&old, "oldObject.").is_empty());
        let got: Vec<String> = check_claim_with_status(&old, "oldObject.")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].starts_with(r#"oldObject.status.capacity.storage: Invalid value: "x1""#));
        assert_eq!(
            got[1],
            r#"oldObject.status.allocatedResources.storage: Invalid value: "true": must be a quantity string"#
        );
    }

    #[test]
    fn hostile_values_are_cut_in_messages() {
        let huge = "9".repeat(10_000) + "x";
        let claim = json!({"spec": {"resources": {"requests": {"storage": huge}}}});
        let errors = check_claim(&claim, "");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().len() < 300, "{}", errors[0]);
    }
}
