//! What the benches share: the reviews they time, a cluster view of the size issue 9 names,
//! and the request path of `server::routes::handle` without the HTTP around it.

#![allow(dead_code)] // each bench uses part of it

pub mod state;

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde::Deserialize;
use serde_json::Value;
use stateful_admission::admission::{self, Context, Phase, Verdict};
use stateful_admission::cluster::ClusterView;
use stateful_admission::review::{self, wire};

// The allocator of the production binary (src/main.rs), so that the numbers are its numbers.
stateful_admission::global_allocator!();

/// One review as the apiserver sends it, and the endpoint it goes to.
pub struct Scenario {
    pub name: &'static str,
    pub phase: Phase,
    pub body: Vec<u8>,
}

fn read(path: &str) -> Vec<u8> {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// The reviews the issue asks about, and one more that scans the claim cache.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        // 3 templates, two ~6.5 KB objects with managedFields: storage raised, labels changed.
        Scenario {
            name: "statefulset_update_3_templates",
            phase: Phase::Mutate,
            body: read("benches/fixtures/statefulset-update-3-templates.mutate.json"),
        },
        // Class filled in by the DefaultStorageClass plugin in a namespace with its own default.
        Scenario {
            name: "pvc_create_default_class",
            phase: Phase::Mutate,
            body: read("tests/fixtures/claim/pvc-create-filled-in-class.mutate.json"),
        },
        // Bound claim raised from 1Gi to 2Gi in an expandable class.
        Scenario {
            name: "pvc_update_expansion",
            phase: Phase::Validate,
            body: read("tests/fixtures/apiserver/pvc-update-expand-bound.validate.json"),
        },
        // A new set looks for claims it would adopt among every cached claim.
        Scenario {
            name: "statefulset_create",
            phase: Phase::Mutate,
            body: read("tests/fixtures/statefulset/create-max-unavailable.mutate.json"),
        },
    ]
}

/// A synced view holding the generated cluster (10,000 PVCs, 2,000 StatefulSets, 50 classes).
pub fn issue_view() -> ClusterView {
    ClusterView::from_json(&state::objects(state::Size::ISSUE)).expect("generated state loads")
}

/// The phases of `routes::handle` after the body is read, kept apart so each can be timed.
pub fn decode(body: &[u8]) -> AdmissionRequest<DynamicObject> {
    wire::decode_review(body).expect("benchmark reviews decode")
}

/// What the server did before `wire`: bytes → `Value` → kube's derived decoder (kept to
/// report before and after).
pub fn decode_via_value(body: &[u8]) -> AdmissionRequest<DynamicObject> {
    let raw: Value = serde_json::from_slice(body).expect("benchmark reviews are JSON");
    kube::core::admission::AdmissionReview::<DynamicObject>::deserialize(&raw)
        .expect("benchmark reviews decode")
        .try_into()
        .expect("benchmark reviews have a request")
}

/// The body read through as JSON and checked, nothing built: what any decoder must spend.
pub fn read_through(body: &[u8]) -> serde::de::IgnoredAny {
    serde_json::from_slice(body).expect("benchmark reviews are JSON")
}

pub fn evaluate(phase: Phase, req: &AdmissionRequest<DynamicObject>, ctx: &Context<'_>) -> Verdict {
    admission::evaluate(phase, req, ctx)
}

pub fn respond_encode(req: &AdmissionRequest<DynamicObject>, verdict: Verdict) -> Vec<u8> {
    review::encode_review(review::respond(req, verdict).into_review()).expect("responses encode")
}

/// The whole pure path, as the handler runs it: decode, evaluate, respond, encode.
pub fn review(phase: Phase, body: &[u8], ctx: &Context<'_>) -> Vec<u8> {
    let req = decode(body);
    let verdict = evaluate(phase, &req, ctx);
    respond_encode(&req, verdict)
}
