//! Failures as the real apiserver reports them: a `metav1.Status` body with the HTTP code,
//! reason and message kube's client parses into `kube::Error::Api`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::resources::ResourceType;

/// An API failure, rendered as a `Status` object.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// Admission warnings given before the failure: the apiserver writes each into a
    /// `Warning` header as it is added, so a failed write carries them too.
    pub warnings: Vec<String>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            warnings: Vec::new(),
        }
    }

    /// This failure with the warnings given before it.
    pub fn with_warnings(mut self, warnings: &[String]) -> Self {
        self.warnings.extend(warnings.iter().cloned());
        self
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(resource: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", resource.qualified_resource()),
        )
        .with_details(json!({"name": name, "group": resource.group, "kind": resource.plural}))
    }

    /// A URL that names no served resource.
    pub fn unknown_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// An admission plugin's refusal (`admission.NewForbidden`): 403, the resource and name.
    pub fn forbidden(resource: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: {why}",
                resource.qualified_resource()
            ),
        )
        .with_details(json!({"name": name, "group": resource.group, "kind": resource.plural}))
    }

    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    pub fn already_exists(resource: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{} \"{name}\" already exists",
                resource.qualified_resource()
            ),
        )
        .with_details(json!({"name": name, "group": resource.group, "kind": resource.plural}))
    }

    /// An optimistic-concurrency failure on a stale `metadata.resourceVersion`.
    pub fn conflict(resource: &ResourceType, name: &str) -> Self {
        Self::conflict_because(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn conflict_because(resource: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                resource.qualified_resource()
            ),
        )
        .with_details(json!({"name": name, "group": resource.group, "kind": resource.plural}))
    }

    /// A delete's failed precondition (`preconditions.uid`, `.resourceVersion`), as
    /// `rest.BeforeDelete` words it: the kind (not the resource) names the object, and
    /// `details.kind` is the kind too.
    pub fn delete_precondition_failed(
        resource: &ResourceType,
        name: &str,
        what: &str,
        wanted: &str,
        actual: &str,
    ) -> Self {
        let might = if what == "UID" {
            "deleted and then recreated"
        } else {
            "modified"
        };
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the {what} in the precondition ({wanted}) \
                 does not match the {what} in record ({actual}). The object might have been {might}",
                resource.qualified_kind()
            ),
        )
        .with_details(json!({"name": name, "group": resource.group, "kind": resource.kind}))
    }

    /// A replace whose body names another uid: the storage layer's precondition check, its
    /// error wrapped as the apiserver does (`storeerr.InterpretUpdateError`).
    pub fn uid_precondition_failed(
        resource: &ResourceType,
        namespace: &str,
        name: &str,
        wanted: &str,
        actual: &str,
    ) -> Self {
        let key = if namespace.is_empty() {
            format!("/registry/{}/{name}", resource.plural)
        } else {
            format!("/registry/{}/{namespace}/{name}", resource.plural)
        };
        Self::conflict_because(
            resource,
            name,
            &format!(
                "StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: \
                 Precondition failed: UID in precondition: {wanted}, UID in object meta: {actual}"
            ),
        )
    }

    /// A 422 listing field errors in the apiserver's `<path>: <Type>: <detail>` style.
    /// The message lists each distinct error once (`ErrorList.ToAggregate`); the causes keep
    /// every one.
    pub fn invalid(resource: &ResourceType, name: &str, errors: &[FieldError]) -> Self {
        let mut rendered: Vec<String> = Vec::new();
        for text in errors.iter().map(FieldError::to_string) {
            if !rendered.contains(&text) {
                rendered.push(text);
            }
        }
        let summary = match rendered.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.kind.cause_reason(), "message": e.body(), "field": e.path}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!(
                "{} {} is invalid: {summary}",
                resource.qualified_kind(),
                go_quote(name)
            ),
        )
        .with_details(
            json!({"name": name, "group": resource.group, "kind": resource.kind, "causes": causes}),
        )
    }

    /// A 422 about the request's options (`PatchOptions`, `CreateOptions`), as
    /// `errors.NewInvalid` renders it for the `meta.k8s.io` group.
    pub fn invalid_options(kind: &str, errors: &[FieldError]) -> Self {
        let rendered: Vec<String> = errors.iter().map(FieldError::to_string).collect();
        let summary = match rendered.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.kind.cause_reason(), "message": e.body(), "field": e.path}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{kind}.meta.k8s.io \"\" is invalid: {summary}"),
        )
        .with_details(json!({"group": "meta.k8s.io", "kind": kind, "causes": causes}))
    }

    /// A server-side apply conflict (`errors.NewApplyConflict`): 409 with one cause per field.
    pub fn apply_conflict(message: String, causes: Vec<Value>) -> Self {
        Self::new(409, "Conflict", message).with_details(json!({"causes": causes}))
    }

    /// A denial by an admission webhook, or its failure (`webhookerrors.ToStatusErr`): the
    /// webhook's code (at least 400), reason and details.
    pub fn from_webhook(code: u16, reason: &str, message: String, details: Option<Value>) -> Self {
        let reason = match reason {
            "BadRequest" => "BadRequest",
            "Forbidden" => "Forbidden",
            "Invalid" => "Invalid",
            "Conflict" => "Conflict",
            "NotFound" => "NotFound",
            "AlreadyExists" => "AlreadyExists",
            "InternalError" => "InternalError",
            "TooManyRequests" => "TooManyRequests",
            _ => "",
        };
        Self {
            code: code.max(400),
            reason,
            message,
            details,
            warnings: Vec::new(),
        }
    }

    /// A JSON patch that does not apply (a failed `test`, a missing path).
    pub fn unprocessable_patch(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// A history too short to resume a watch from: the client must relist.
    pub fn gone(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type}) - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, \
                 application/strategic-merge-patch+json"
            ),
        )
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// An apply whose configuration the field manager cannot type (a 500 with no reason, as
    /// `fieldmanager` returns it): `failed to create typed patch object (<ns>/<name>; <gvk>):
    /// <path>: field not declared in schema`.
    pub fn typed_patch(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// The failure `fail_next` injects: the code with the reason the apiserver pairs it with.
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, format!("injected failure ({code} {reason})"))
    }

    /// The `metav1.Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        // `StatusReason` is omitempty.
        if self.reason.is_empty()
            && let Some(map) = status.as_object_mut()
        {
            map.remove("reason");
        }
        if let Some(details) = &self.details {
            let mut details = details.clone();
            // `StatusDetails.group` is omitempty: the core group is not named.
            if let Some(map) = details.as_object_mut()
                && map.get("group").is_some_and(|g| g == "")
            {
                map.remove("group");
            }
            status["details"] = details;
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (code, axum::Json(self.to_status())).into_response();
        for warning in &self.warnings {
            let header = super::admission::warning_header(warning);
            if let Ok(value) = axum::http::HeaderValue::from_str(&header) {
                response
                    .headers_mut()
                    .append(axum::http::header::WARNING, value);
            }
        }
        response
    }
}

/// One field error of a 422 Invalid, as `k8s.io/apimachinery/pkg/util/validation/field` renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub kind: FieldErrorKind,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldErrorKind {
    Forbidden,
    Required,
    /// Carries the offending value as the message quotes it.
    Invalid(String),
    /// Carries the offending value as printed already (a number, an `intstr.IntOrString`).
    InvalidRaw(String),
    /// `field.TooLong`: the value is never printed.
    TooLong,
}

impl FieldErrorKind {
    fn cause_reason(&self) -> &'static str {
        match self {
            Self::Forbidden => "FieldValueForbidden",
            Self::Required => "FieldValueRequired",
            Self::Invalid(_) | Self::InvalidRaw(_) => "FieldValueInvalid",
            Self::TooLong => "FieldValueTooLong",
        }
    }
}

impl FieldError {
    pub fn forbidden(path: &str, detail: &str) -> Self {
        Self {
            path: path.to_owned(),
            kind: FieldErrorKind::Forbidden,
            detail: detail.to_owned(),
        }
    }

    pub fn required(path: &str, detail: &str) -> Self {
        Self {
            path: path.to_owned(),
            kind: FieldErrorKind::Required,
            detail: detail.to_owned(),
        }
    }

    pub fn invalid(path: &str, value: &str, detail: &str) -> Self {
        Self {
            path: path.to_owned(),
            kind: FieldErrorKind::Invalid(value.to_owned()),
            detail: detail.to_owned(),
        }
    }

    /// An invalid value printed as given: `Invalid value: 0: cannot be 0`.
    pub fn invalid_raw(path: &str, shown: &str, detail: &str) -> Self {
        Self {
            path: path.to_owned(),
            kind: FieldErrorKind::InvalidRaw(shown.to_owned()),
            detail: detail.to_owned(),
        }
    }

    /// `field.TooLong(path, _, max)`: `Too long: <detail>`, the value left out.
    pub fn too_long(path: &str, detail: &str) -> Self {
        Self {
            path: path.to_owned(),
            kind: FieldErrorKind::TooLong,
            detail: detail.to_owned(),
        }
    }

    /// The part after `<path>: `.
    fn body(&self) -> String {
        match &self.kind {
            FieldErrorKind::Forbidden => format!("Forbidden: {}", self.detail),
            // field.Error leaves out an empty detail.
            FieldErrorKind::Required if self.detail.is_empty() => "Required value".to_owned(),
            FieldErrorKind::Required => format!("Required value: {}", self.detail),
            FieldErrorKind::Invalid(value) => {
                format!("Invalid value: {}: {}", go_quote(value), self.detail)
            }
            FieldErrorKind::InvalidRaw(shown) => format!("Invalid value: {shown}: {}", self.detail),
            FieldErrorKind::TooLong if self.detail.is_empty() => "Too long".to_owned(),
            FieldErrorKind::TooLong => format!("Too long: {}", self.detail),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.body())
    }
}

/// A string as Go's `%q` (`strconv.Quote`) prints it, as `field.Error` and `errors.NewInvalid`
/// quote values and names: printable characters as they are, the usual backslash escapes, other
/// control characters as `\xNN`, other unprintable ones as `\uNNNN`/`\UNNNNNNNN` (approximating
/// `unicode.IsPrint` by Rust's control and whitespace classes).
pub fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if c == ' ' || !(c.is_control() || c.is_whitespace() || is_format_char(c)) => {
                out.push(c);
            }
            c if u32::from(c) < 0x10000 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// The format characters (Unicode category Cf) a name or label could plausibly carry, which
/// `unicode.IsPrint` rejects.
fn is_format_char(c: char) -> bool {
    matches!(u32::from(c), 0xad | 0x600..=0x605 | 0x200b..=0x200f | 0x202a..=0x202e | 0x2060..=0x2064 | 0xfeff)
}
