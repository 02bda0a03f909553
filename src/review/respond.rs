//! The answer to a review: a verdict rendered as the AdmissionResponse kube-apiserver expects
//! (denials in its own status shape), and the response serialised for the wire.

use kube::core::DynamicObject;
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::response::{StatusCause, StatusDetails};

use crate::admission::{Denial, ErrorType, Verdict, field, warning};

/// Serialises a review for the wire. The `patch` goes out as a base64 string, the encoding
/// `admission.k8s.io/v1` documents for a byte field (kube's type would write an array of
/// numbers).
pub fn encode_review(
    mut review: kube::core::admission::AdmissionReview<DynamicObject>,
) -> serde_json::Result<Vec<u8>> {
    use base64::Engine as _;

    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Encoded<'a> {
        api_version: &'a str,
        kind: &'a str,
        response: EncodedResponse<'a>,
    }
    #[derive(serde::Serialize)]
    struct EncodedResponse<'a> {
        #[serde(flatten)]
        response: &'a AdmissionResponse,
        #[serde(skip_serializing_if = "Option::is_none")]
        patch: Option<String>,
    }

    let Some(response) = review.response.as_mut() else {
        return serde_json::to_vec(&review);
    };
    let patch = response
        .patch
        .take()
        .map(|p| base64::engine::general_purpose::STANDARD.encode(p));
    serde_json::to_vec(&Encoded {
        api_version: &review.types.api_version,
        kind: &review.types.kind,
        response: EncodedResponse { response, patch },
    })
}

/// Renders a verdict as the AdmissionResponse for `req`; the uid is always the request's.
pub fn respond(req: &AdmissionRequest<DynamicObject>, verdict: Verdict) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(req);
    if !verdict.warnings.is_empty() {
        response.warnings = Some(warning::fit(verdict.warnings));
    }
    match verdict.denial {
        None if verdict.patch.is_empty() => response,
        None => {
            let patch = json_patch::Patch(verdict.patch);
            match response.clone().with_patch(patch) {
                Ok(r) => r,
                // Serialising a patch of JSON values cannot fail; deny rather than panic.
                Err(e) => response.deny(format!("internal error: {e}")),
            }
        }
        Some(denial) => {
            response.allowed = false;
            response.result = denial_status(req, denial);
            response
        }
    }
}

pub(super) fn denial_status(req: &AdmissionRequest<DynamicObject>, denial: Denial) -> Status {
    let name = if req.name.is_empty() {
        req.object
            .as_ref()
            .and_then(|o| o.metadata.generate_name.clone())
            .unwrap_or_default()
    } else {
        req.name.clone()
    };
    match denial {
        Denial::Invalid(errors) => {
            // apierrors.NewInvalid
            let kind = &req.kind;
            let qualified = if kind.group.is_empty() {
                kind.kind.clone()
            } else {
                format!("{}.{}", kind.kind, kind.group)
            };
            let message = format!(
                "{qualified} {name:?} is invalid: {}",
                field::aggregate(&errors)
            );
            let causes = errors
                .iter()
                .map(|e| StatusCause {
                    reason: cause_reason(&e.error_type).to_owned(),
                    message: e
                        .to_string()
                        .split_once(": ")
                        .map_or_else(String::new, |(_, m)| m.to_owned()),
                    field: e.field.clone(),
                })
                .collect();
            Status::failure(&message, "Invalid")
                .with_code(422)
                .with_details(StatusDetails {
                    name,
                    group: kind.group.clone(),
                    kind: kind.kind.clone(),
                    uid: String::new(),
                    causes,
                    retry_after_seconds: 0,
                })
        }
        Denial::Forbidden(detail) => {
            // admission.NewForbidden / apierrors.NewForbidden
            let r = &req.resource;
            let qualified = if r.group.is_empty() {
                r.resource.clone()
            } else {
                format!("{}.{}", r.resource, r.group)
            };
            let message = format!("{qualified} {name:?} is forbidden: {detail}");
            Status::failure(&message, "Forbidden").with_code(403)
        }
    }
}

/// `metav1.CauseType` of a field error.
fn cause_reason(t: &ErrorType) -> &'static str {
    match t {
        ErrorType::Required => "FieldValueRequired",
        ErrorType::Forbidden => "FieldValueForbidden",
        ErrorType::Invalid(_) => "FieldValueInvalid",
        ErrorType::NotSupported { .. } => "FieldValueNotSupported",
        ErrorType::TooLong => "FieldValueTooLong",
    }
}
