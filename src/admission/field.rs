//! Field errors in the apiserver's style (`<field path>: <Type>: <detail>`), mirroring
//! `k8s.io/apimachinery/pkg/util/validation/field`, so that a denial from this webhook reads
//! exactly like one from kube-apiserver's own validation.

use std::fmt;

/// The offending value of an `Invalid` or `Unsupported value` error, printed the way
/// `field.Error.ErrorBody` prints it: strings quoted, integers bare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    Str(String),
    Int(i64),
    /// Printed bare, as Go prints a value whose pointer implements `fmt.Stringer`
    /// (`intstr.IntOrString` renders `50%` or `2`), or a `%#v` struct dump.
    Display(String),
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Go's %q; Rust's Debug quoting agrees on every printable ASCII string.
            BadValue::Str(s) => write!(f, "{s:?}"),
            BadValue::Int(i) => write!(f, "{i}"),
            BadValue::Display(s) => f.write_str(s),
        }
    }
}

impl From<&str> for BadValue {
    fn from(s: &str) -> Self {
        BadValue::Str(s.to_owned())
    }
}

impl From<String> for BadValue {
    fn from(s: String) -> Self {
        BadValue::Str(s)
    }
}

impl From<i64> for BadValue {
    fn from(i: i64) -> Self {
        BadValue::Int(i)
    }
}

impl From<i32> for BadValue {
    fn from(i: i32) -> Self {
        BadValue::Int(i64::from(i))
    }
}

/// `field.ErrorType`, limited to the types our rules produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    Forbidden,
    Invalid(BadValue),
    NotSupported {
        value: BadValue,
        supported: Vec<String>,
    },
    TooLong,
}

/// One field error: the path of the field, its type and a human detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub error_type: ErrorType,
    pub detail: String,
}

impl FieldError {
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::Forbidden,
            detail: detail.into(),
        }
    }

    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<BadValue>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::Invalid(value.into()),
            detail: detail.into(),
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::Required,
            detail: detail.into(),
        }
    }

    pub fn not_supported(
        field: impl Into<String>,
        value: impl Into<BadValue>,
        supported: &[&str],
    ) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::NotSupported {
                value: value.into(),
                supported: supported.iter().map(|s| (*s).to_owned()).collect(),
            },
            detail: String::new(),
        }
    }

    pub fn too_long(field: impl Into<String>, max_bytes: usize) -> Self {
        Self {
            field: field.into(),
            error_type: ErrorType::TooLong,
            detail: format!("must have at most {max_bytes} bytes"),
        }
    }
}

impl fmt::Display for FieldError {
    /// `field.Error.Error()`: `<field>: <ErrorBody>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.field)?;
        match &self.error_type {
            ErrorType::Required => f.write_str("Required value")?,
            ErrorType::Forbidden => f.write_str("Forbidden")?,
            ErrorType::TooLong => f.write_str("Too long")?,
            ErrorType::Invalid(value) => write!(f, "Invalid value: {value}")?,
            ErrorType::NotSupported { value, supported } => {
                write!(f, "Unsupported value: {value}")?;
                if !supported.is_empty() {
                    let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                    write!(f, ": supported values: {}", quoted.join(", "))?;
                }
            }
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message alone, several in brackets, with
/// duplicate messages dropped.
pub(crate) fn aggregate(errors: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::with_capacity(errors.len());
    for e in errors {
        let msg = e.to_string();
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    match seen.len() {
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_the_apiserver_format() {
        let cases = [
            (
                FieldError::invalid(
                    "spec.updateStrategy.rollingUpdate.maxUnavailable",
                    0,
                    "must be greater than or equal to 1",
                ),
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 0: must be greater than or equal to 1",
            ),
            (
                FieldError::invalid("spec.x", "abc", "must be an integer"),
                r#"spec.x: Invalid value: "abc": must be an integer"#,
            ),
            (
                FieldError::forbidden(
                    "spec.volumeClaimTemplates[0].spec.storageClassName",
                    "may not change",
                ),
                "spec.volumeClaimTemplates[0].spec.storageClassName: Forbidden: may not change",
            ),
            (FieldError::required("spec.x", ""), "spec.x: Required value"),
            (
                FieldError::not_supported("spec.p", "Maybe", &["InPlace", "OnDelete"]),
                r#"spec.p: Unsupported value: "Maybe": supported values: "InPlace", "OnDelete""#,
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }

    #[test]
    fn aggregate_brackets_several_and_drops_duplicates() {
        let a = FieldError::forbidden("a", "x");
        let b = FieldError::forbidden("b", "y");
        assert_eq!(aggregate(std::slice::from_ref(&a)), "a: Forbidden: x");
        assert_eq!(
            aggregate(&[a.clone(), b, a]),
            "[a: Forbidden: x, b: Forbidden: y]"
        );
    }
}
