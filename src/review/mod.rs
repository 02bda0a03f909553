//! The AdmissionReview envelope around the rules: decode a review's bytes ([`wire`]), run the
//! rules of one phase ([`crate::admission::evaluate`]), apply the admission mode ([`mode`]),
//! and render the answer ([`respond`]). [`handle`] is that pipeline, once: the HTTPS routes
//! call it for each request, and the `review` command ([`offline`]) calls it for each phase
//! as the apiserver would.

pub mod builder;
pub(crate) mod mode;
pub mod offline;
pub mod respond;
pub mod wire;

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

use crate::admission::{Context, Phase, Verdict};
pub use mode::{WouldDeny, apply_mode};
pub use respond::{encode_review, respond};
pub use wire::{DecodeError, decode_review};

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

/// The function that judges a request: [`crate::admission::evaluate`], or a stand-in in
/// tests.
pub type Evaluator = fn(Phase, &AdmissionRequest<DynamicObject>, &Context<'_>) -> Verdict;

/// One review through the pipeline, not yet rendered.
#[derive(Debug)]
pub struct Reviewed {
    pub request: AdmissionRequest<DynamicObject>,
    /// The rules' verdict after the admission mode.
    pub verdict: Verdict,
    /// The denial that `warn` mode turned into a warning, if any.
    pub would_deny: Option<WouldDeny>,
}

/// Decodes `body`, runs `evaluate` for `phase` and applies the policy's admission mode.
pub fn handle(
    phase: Phase,
    body: &[u8],
    ctx: &Context<'_>,
    evaluate: Evaluator,
) -> Result<Reviewed, DecodeError> {
    let request = decode_review(body)?;
    // A span for what rules log at debug level; off (and free) at the default level.
    let _span =
        tracing::debug_span!("review", endpoint = phase.as_str(), uid = %request.uid).entered();
    let (verdict, would_deny) = apply_mode(
        ctx.policy.admission_mode,
        &request,
        evaluate(phase, &request, ctx),
    );
    Ok(Reviewed {
        request,
        verdict,
        would_deny,
    })
}
