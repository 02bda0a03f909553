//! Offline evaluation of one AdmissionReview exactly as the apiserver would run our two
//! webhooks: mutate, apply the returned JSON patch to the object, then validate the patched
//! object. Used by the `review` command and by tests that check the object a user would end
//! up with.

use serde_json::Value;

use super::{BadReview, Evaluator, WouldDeny, encode_review, handle, respond};
use crate::admission::{Context, Phase, Verdict};

/// Which webhooks to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phases {
    /// Mutate, apply the patch, validate — the apiserver's order.
    Both,
    Only(Phase),
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
/// the server decodes bytes with [`super::decode_review`].
pub fn decode_request(
    raw: &Value,
) -> Result<kube::core::admission::AdmissionRequest<kube::core::DynamicObject>, BadReview> {
    let body = serde_json::to_vec(raw).map_err(|e| BadReview::NotJson(e.to_string()))?;
    super::decode_review(&body).map_err(|e| e.error)
}

/// Evaluates one AdmissionReview body with the project's rules.
pub fn review(raw: &[u8], phases: Phases, ctx: &Context<'_>) -> Result<Outcome, BadReview> {
    review_with(raw, phases, ctx, crate::admission::evaluate)
}

/// Evaluates one AdmissionReview body as the apiserver runs the webhooks: each phase through
/// [`handle`], as the server answers it; with both, the mutation's patch applied to the object
/// the validating webhook then sees.
pub fn review_with(
    raw: &[u8],
    phases: Phases,
    ctx: &Context<'_>,
    evaluate: Evaluator,
) -> Result<Outcome, BadReview> {
    let run = |phase: Phase, body: &[u8]| handle(phase, body, ctx, evaluate).map_err(|e| e.error);
    let first = run(
        match phases {
            Phases::Both => Phase::Mutate,
            Phases::Only(phase) => phase,
        },
        raw,
    )?;
    let body: Value = serde_json::from_slice(raw).map_err(|e| BadReview::NotJson(e.to_string()))?;
    let object = body.pointer("/request/object").filter(|o| !o.is_null());
    let mut would_deny: Vec<WouldDeny> = first.would_deny.into_iter().collect();
    let request = first.request;
    let (verdict, object) = match phases {
        Phases::Only(_) => {
            let object = if first.verdict.is_allowed() {
                apply(object, &first.verdict)?
            } else {
                object.cloned()
            };
            (first.verdict, object)
        }
        Phases::Both => {
            let mutated = first.verdict;
            if !mutated.is_allowed() {
                (mutated, object.cloned())
            } else if mutated.patch.is_empty() {
                // Nothing patched: validation sees the request's object as it came.
                let validated = run(Phase::Validate, raw)?;
                would_deny.extend(validated.would_deny);
                (combine(mutated, validated.verdict), object.cloned())
            } else {
                let patched = apply(object, &mutated)?;
                let mut next = body.clone();
                if let (Some(slot), Some(patched)) =
                    (next.pointer_mut("/request/object"), patched.as_ref())
                {
                    *slot = patched.clone();
                }
                let next =
                    serde_json::to_vec(&next).map_err(|e| BadReview::Patch(e.to_string()))?;
                let validated = run(Phase::Validate, &next).map_err(|e| match e {
                    // The patched object no longer decodes: the patch is at fault.
                    BadReview::Decode(why) => BadReview::Patch(why),
                    other => other,
                })?;
                would_deny.extend(validated.would_deny);
                (combine(mutated, validated.verdict), patched)
            }
        }
    };
    let allowed = verdict.is_allowed();
    let response = respond(&request, verdict).into_review();
    let review = encode_review(response)
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
