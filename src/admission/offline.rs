//! Offline evaluation of one AdmissionReview exactly as the apiserver would run our two
//! webhooks: mutate, apply the returned JSON patch to the object, then validate the patched
//! object. Used by the `review` command and by tests that check the object a user would end
//! up with.

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::Value;

use super::{Context, Phase, Verdict, WouldDeny, apply_mode, evaluate, respond, wire};

/// Which webhooks to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phases {
    /// Mutate, apply the patch, validate — the apiserver's order.
    Both,
    Only(Phase),
}

/// Input that is not an AdmissionReview we can evaluate.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not an AdmissionReview with a request")]
    NoRequest,
    #[error("malformed AdmissionReview: {0}")]
    Decode(String),
    #[error("the mutating phase returned a patch that does not apply: {0}")]
    Patch(String),
}

/// The result of an offline review.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The response AdmissionReview, as the webhook would send it.
    pub review: Value,
    pub allowed: bool,
    /// The object after the returned patch (the request's object when nothing was patched or
    /// the request was denied).
    pub object: Option<Value>,
    /// Denials the admission mode `warn` turned into warnings, one per phase at most.
    pub would_deny: Vec<WouldDeny>,
}

impl Outcome {
    /// The response with its patch decoded for reading: `response.patch` as the JSON-patch
    /// array instead of the base64 string the webhook sends. A response without a patch is
    /// returned as it is.
    pub fn review_with_decoded_patch(self) -> Result<Value, String> {
        use base64::Engine as _;
        let mut review = self.review;
        let Some(patch) = review.pointer_mut("/response/patch") else {
            return Ok(review);
        };
        let bytes = patch
            .as_str()
            .map(|p| base64::engine::general_purpose::STANDARD.decode(p))
            .ok_or("response.patch is not a string")?
            .map_err(|e| format!("response.patch is not base64: {e}"))?;
        *patch = serde_json::from_slice(&bytes)
            .map_err(|e| format!("response.patch is not JSON: {e}"))?;
        Ok(review)
    }
}

/// Decodes an AdmissionReview held as a JSON value (the builder, tests, the fuzz harness);
/// the server decodes bytes with [`wire::decode_review`].
pub fn decode_request(raw: &Value) -> Result<AdmissionRequest<DynamicObject>, BadReview> {
    let body = serde_json::to_vec(raw).map_err(|e| BadReview::NotJson(e.to_string()))?;
    wire::decode_review(&body).map_err(|e| e.error)
}

/// Evaluates one AdmissionReview body.
pub fn review(raw: &[u8], phases: Phases, ctx: &Context<'_>) -> Result<Outcome, BadReview> {
    let req = wire::decode_review(raw).map_err(|e| e.error)?;
    let raw: Value = serde_json::from_slice(raw).map_err(|e| BadReview::NotJson(e.to_string()))?;
    let object = raw.pointer("/request/object").filter(|o| !o.is_null());

    let mut would_deny = Vec::new();
    // Each phase's verdict as the webhook answers it, in the policy's admission mode.
    let mut judge = |phase: Phase, req: &AdmissionRequest<DynamicObject>| {
        let (verdict, denial) =
            apply_mode(ctx.policy.admission_mode, req, evaluate(phase, req, ctx));
        would_deny.extend(denial);
        verdict
    };
    let (verdict, object) = match phases {
        Phases::Only(phase) => {
            let verdict = judge(phase, &req);
            let object = if verdict.is_allowed() {
                apply(object, &verdict)?
            } else {
                object.cloned()
            };
            (verdict, object)
        }
        Phases::Both => {
            let mutated = judge(Phase::Mutate, &req);
            if !mutated.is_allowed() {
                (mutated, object.cloned())
            } else if mutated.patch.is_empty() {
                // Nothing patched: validation sees the request's object as it came.
                let validated = judge(Phase::Validate, &req);
                (combine(mutated, validated), object.cloned())
            } else {
                let patched = apply(object, &mutated)?;
                let validate_req = with_object(&req, patched.as_ref())?;
                let validated = judge(Phase::Validate, &validate_req);
                (combine(mutated, validated), patched)
            }
        }
    };
    let allowed = verdict.is_allowed();
    let response = respond(&req, verdict).into_review();
    let review = super::encode_review(response)
        .and_then(|bytes| serde_json::from_slice(&bytes))
        .map_err(|e| BadReview::Decode(e.to_string()))?;
    Ok(Outcome {
        review,
        allowed,
        object,
        would_deny,
    })
}

fn apply(object: Option<&Value>, verdict: &Verdict) -> Result<Option<Value>, BadReview> {
    let Some(object) = object else {
        return Ok(None);
    };
    let mut patched = object.clone();
    if !verdict.patch.is_empty() {
        json_patch::patch(&mut patched, &verdict.patch)
            .map_err(|e| BadReview::Patch(e.to_string()))?;
    }
    Ok(Some(patched))
}

fn with_object(
    req: &AdmissionRequest<DynamicObject>,
    object: Option<&Value>,
) -> Result<AdmissionRequest<DynamicObject>, BadReview> {
    let mut next = req.clone();
    if let Some(object) = object {
        next.object =
            Some(wire::object_from_value(object, &req.resource).map_err(BadReview::Patch)?);
    }
    Ok(next)
}

/// The apiserver's combined answer: the mutation's patch if validation allows, and the
/// warnings of both phases either way.
fn combine(mutated: Verdict, validated: Verdict) -> Verdict {
    let mut warnings = mutated.warnings;
    warnings.extend(validated.warnings);
    Verdict {
        patch: if validated.denial.is_none() {
            mutated.patch
        } else {
            Vec::new()
        },
        denial: validated.denial,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outcome(response: Value) -> Outcome {
        Outcome {
            review: json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": response}),
            allowed: true,
            object: None,
            would_deny: Vec::new(),
        }
    }

    #[test]
    fn a_decoded_patch_replaces_the_base64_string_and_nothing_else() {
        let ops = json!([{"op": "add", "path": "/spec/storageClassName", "value": "standard"}]);
        let wire = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(ops.to_string())
        };
        let response =
            json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": wire});
        let decoded = outcome(response.clone())
            .review_with_decoded_patch()
            .expect("decodes");
        let mut want = outcome(response).review;
        want["response"]["patch"] = ops;
        assert_eq!(decoded, want);

        let unpatched = outcome(json!({"uid": "u", "allowed": true}));
        assert_eq!(
            unpatched.clone().review_with_decoded_patch(),
            Ok(unpatched.review)
        );
        for (bad, why) in [
            (json!(5), "not a string"),
            (json!("%%%"), "not base64"),
            (json!("bm90IGpzb24="), "not JSON"),
        ] {
            let err = outcome(json!({"uid": "u", "allowed": true, "patch": bad}))
                .review_with_decoded_patch()
                .expect_err("bad patch");
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn an_object_without_metadata_is_malformed() {
        // Found by the fuzzer: a PVC CREATE whose object had no metadata got a label patch
        // at /metadata/labels, which cannot apply.
        let review = |object: Value| {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "PersistentVolumeClaim"},
                "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"},
                "name": "data-web-0", "namespace": "default", "operation": "CREATE",
                "userInfo": {}, "object": object, "oldObject": null}})
        };
        for object in [json!({"spec": {}}), json!({"metadata": "x"}), json!([1])] {
            let err = decode_request(&review(object.clone())).expect_err("no metadata");
            assert_eq!(
                err.to_string(),
                "malformed AdmissionReview: request.object: metadata must be an object",
                "{object}"
            );
        }
        assert!(decode_request(&review(json!({"metadata": {"name": "data-web-0"}}))).is_ok());
        assert!(decode_request(&review(Value::Null)).is_ok());
    }
}
