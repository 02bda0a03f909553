//! PersistentVolumeClaim rules: default StorageClass (KEP-3333) and expansion gating (KEP-284).
//!
//! - [`default_class`]: CREATE (mutating) — classless claims get the namespace's or the
//!   cluster's default class.
//! - [`set_template`]: CREATE (mutating) — claims the StatefulSet controller creates get the
//!   set's stored desired template.
//! - [`expansion`]: UPDATE (validating) — resize admission, shrink/recovery and size policy.
//! - [`quantities`]: CREATE and UPDATE (validating) — malformed quantities are a 422, never a 500.
//!
//! Request objects are read as raw JSON (`DynamicObject.data`), so fields of any shape are
//! reported instead of failing a typed decode.

pub mod default_class;
pub mod expansion;
pub(crate) mod quantities;
pub(crate) mod set_template;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::Value;

use super::{Context, Phase, Verdict};

pub use crate::names::BETA_STORAGE_CLASS_ANNOTATION;

/// Entry point for `v1 persistentvolumeclaims` CREATE and UPDATE.
pub fn review(phase: Phase, req: &AdmissionRequest<DynamicObject>, ctx: &Context<'_>) -> Verdict {
    let Some(object) = req.object.as_ref() else {
        return Verdict::allow();
    };
    match (phase, &req.operation) {
        (Phase::Mutate, Operation::Create) => {
            let namespace = req
                .namespace
                .as_deref()
                .or(object.metadata.namespace.as_deref())
                .unwrap_or_default();
            let name = if req.name.is_empty() {
                object.metadata.name.as_deref().unwrap_or_default()
            } else {
                req.name.as_str()
            };
            let mut verdict = default_class::assign(object, namespace, ctx.view);
            let claim = set_template::NewClaim {
                object,
                namespace,
                name,
                username: req.user_info.username.as_deref(),
            };
            verdict.merge(set_template::apply(&claim, ctx));
            verdict
        }
        (Phase::Validate, Operation::Create) => {
            let errors = quantities::check_claim(&object.data, "");
            if errors.is_empty() {
                Verdict::allow()
            } else {
                Verdict::invalid(errors)
            }
        }
        (Phase::Validate, Operation::Update) => match req.old_object.as_ref() {
            Some(old) => expansion::review_update(old, object, ctx),
            None => Verdict::allow(),
        },
        _ => Verdict::allow(),
    }
}

/// The value at a JSON pointer, treating `null` as absent (the apiserver's decoders do).
fn at<'a>(value: &'a Value, pointer: &str) -> Option<&'a Value> {
    value.pointer(pointer).filter(|v| !v.is_null())
}

/// `add` at the path made of `tokens` (each escaped as RFC 6901 requires: `/` → `~1`). On an
/// existing object member `add` replaces it, so it serves for both cases.
fn add_op(tokens: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(tokens.iter().copied()),
        value,
    })
}

/// `remove` at the path made of `tokens`.
fn remove_op(tokens: &[&str]) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation {
        path: PointerBuf::from_tokens(tokens.iter().copied()),
    })
}

/// Longest excerpt of a request value quoted back in a message; hostile values can be huge.
const SHOWN_MAX: usize = 64;

/// A value as quoted in a message: cut at [`SHOWN_MAX`] bytes (on a character boundary).
fn shown(s: &str) -> String {
    crate::text::clip(s, SHOWN_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_escaped_and_long_values_cut() {
        let op = serde_json::to_value(add_op(
            &["metadata", "labels", "helm.sh/chart"],
            Value::Null,
        ))
        .expect("op");
        assert_eq!(op["path"], "/metadata/labels/helm.sh~1chart");
        let op = serde_json::to_value(remove_op(&["a~b/c"])).expect("op");
        assert_eq!(op["path"], "/a~0b~1c");
        assert_eq!(shown("short"), "short");
        let long = "é".repeat(100);
        let cut = shown(&long);
        assert!(cut.ends_with("...") && cut.len() <= SHOWN_MAX + 3, "{cut}");
    }
}
