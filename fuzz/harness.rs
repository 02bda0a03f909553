//! The properties the fuzz targets check, as plain functions of the input bytes, so that the
//! libFuzzer targets in `fuzz_targets/` and the corpus-replay test in `tests/it/fuzz_replay.rs`
//! run exactly the same code. Each function returns quietly on input the server would reject
//! (not JSON, not an AdmissionReview) and panics when a property breaks:
//!
//! - no panic anywhere on the request path (parse, decode, evaluate, respond, encode);
//! - the response echoes the request uid and serialises to JSON;
//! - a patch of an allowed mutation applies to the request's own object, and the patched
//!   object still decodes (the offline mutate → patch → validate path succeeds);
//! - a StatefulSet mutation run again on its own output asks for no further change;
//! - a quantity that parses prints to a string that parses to the same quantity;
//! - the server's one-pass decoder (`admission::wire`) reads a review as kube's derived decoder
//!   does, but for what it skips by design (managedFields of objects other than claims).
//!
//! Allocation is bounded by the fuzzer (`-rss_limit_mb`, `-malloc_limit_mb` in scripts/fuzz.sh).

use std::sync::OnceLock;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use serde::Deserialize;
use serde_json::Value;
use stateful_admission::admission::{self, Context, Phase, Policy};
use stateful_admission::cluster::{ClusterView, state_file};
use stateful_admission::quantity::Quantity;
use stateful_admission::review::BadReview;
use stateful_admission::review::builder::ReviewBuilder;
use stateful_admission::review::offline::{self, Phases};
use stateful_admission::review::{self, wire};

/// Cluster state of the rule tests: classes with and without expansion and a size limit, a
/// namespace with its own default class, a set with stored desired templates, orphaned claims.
const STATE_FILES: [(&str, &str); 2] = [
    (
        "claim/state.yaml",
        include_str!("../tests/fixtures/claim/state.yaml"),
    ),
    (
        "statefulset/state-orphaned-claims.json",
        include_str!("../tests/fixtures/statefulset/state-orphaned-claims.json"),
    ),
];

/// Reviews the `state` target replays against a fuzzed cluster view.
pub const REVIEWS: [&str; 7] = [
    include_str!("../tests/fixtures/apiserver/statefulset-update-vct-change.mutate.json"),
    include_str!("../tests/fixtures/apiserver/pvc-create-by-statefulset-controller.mutate.json"),
    include_str!("../tests/fixtures/apiserver/pvc-create.validate.json"),
    include_str!("../tests/fixtures/apiserver/pvc-update-expand-bound.validate.json"),
    include_str!("../tests/fixtures/claim/pvc-create-filled-in-class.mutate.json"),
    include_str!("../tests/fixtures/statefulset/create-max-unavailable.mutate.json"),
    include_str!("../tests/fixtures/statefulset/update-vct-storage-class.mutate.json"),
];

fn fixture_view() -> &'static ClusterView {
    static VIEW: OnceLock<ClusterView> = OnceLock::new();
    VIEW.get_or_init(|| {
        let mut objects = stateful_admission::cluster::ClusterObjects::default();
        for (name, text) in STATE_FILES {
            let o = state_file::parse(name, text.as_bytes()).expect("fixture state parses");
            objects.storage_classes.extend(o.storage_classes);
            objects.namespaces.extend(o.namespaces);
            objects.stateful_sets.extend(o.stateful_sets);
            objects.claims.extend(o.claims);
        }
        ClusterView::from_objects(objects)
    })
}

/// A whole AdmissionReview body, as POSTed to `/mutate` and `/validate`.
pub fn review_body(data: &[u8]) {
    let ours = wire::decode_review(data);
    let Ok(raw) = serde_json::from_slice::<Value>(data) else {
        // Not JSON, or JSON with a number no f64 holds (JSON sets no range). Only the first
        // must be refused: a number in a field no rule reads (an unknown metadata field, say)
        // is read past, as kube's typed decoder reads past unknown fields. Found by the fuzzer.
        let is_json = std::str::from_utf8(data)
            .is_ok_and(|text| serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok());
        assert!(is_json || ours.is_err(), "a body that is not JSON decoded");
        return;
    };
    if let Ok(ours) = ours {
        decoders_agree(&raw, ours);
    }
    check_review(&raw, fixture_view());
}

fn decoders_agree(raw: &Value, ours: AdmissionRequest<DynamicObject>) {
    let Ok(review) = AdmissionReview::<DynamicObject>::deserialize(raw) else {
        return;
    };
    let Ok(theirs): Result<AdmissionRequest<DynamicObject>, _> = review.try_into() else {
        panic!("decoded a review kube finds without a request");
    };
    let plain = |mut r: AdmissionRequest<DynamicObject>| {
        // What the rules do not read of this resource's objects is read past.
        wire::forget_unread(&mut r);
        for o in [r.object.as_mut(), r.old_object.as_mut()]
            .into_iter()
            .flatten()
        {
            // kube keeps one or the other of two type fields that are not both strings,
            // depending on key order; the wire decoder keeps neither.
            if let Some(data) = o.data.as_object_mut() {
                data.remove("apiVersion");
                data.remove("kind");
            }
        }
        (r.types.clone(), serde_json::to_value(&r).ok())
    };
    assert_eq!(
        plain(ours),
        plain(theirs),
        "the wire decoder disagrees with kube's"
    );
}

/// One rule with a fuzzed object: `data[0]` picks kind, operation and phase; the rest is the
/// object as JSON, or `[object, oldObject]`. An UPDATE without an old object gets the
/// captured one of its kind.
pub fn rule_object(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(input) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let statefulset = selector & 1 == 0;
    let operation = if selector & 2 == 0 {
        "CREATE"
    } else {
        "UPDATE"
    };
    let (object, old) = match input {
        Value::Array(mut pair) if pair.len() == 2 => {
            let old = pair.pop();
            (pair.pop().unwrap_or_default(), old)
        }
        object => (object, None),
    };
    let mut builder = if statefulset {
        ReviewBuilder::statefulset(operation)
    } else {
        ReviewBuilder::claim(operation)
    }
    .object(object);
    if operation == "UPDATE" {
        let old = old.unwrap_or_else(|| captured_old_object(statefulset));
        builder = builder.old_object(old);
    }
    check_review(builder.json(), fixture_view());
}

fn captured_old_object(statefulset: bool) -> Value {
    let text = if statefulset { REVIEWS[0] } else { REVIEWS[3] };
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.pointer("/request/oldObject").cloned())
        .unwrap_or_default()
}

/// A fuzzed cluster view (a JSON List or array of objects, as `--state` takes), against
/// every captured review: hostile annotations on classes, namespaces and sets.
pub fn cluster_state(data: &[u8]) {
    let Ok(objects) = state_file::parse("fuzz", data) else {
        return;
    };
    let view = ClusterView::from_objects(objects);
    for text in REVIEWS {
        let raw: Value = serde_json::from_str(text).expect("fixture is JSON");
        check_review(&raw, &view);
    }
}

/// `Quantity::parse` on any string; what parses prints back to the same value.
pub fn quantity(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(q) = Quantity::parse(text) else {
        return;
    };
    let printed = q.to_string();
    let again = Quantity::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which does not parse: {e}"));
    assert_eq!(again, q, "{text:?} printed as {printed:?}");
}

fn check_review(raw: &Value, view: &ClusterView) {
    let Ok(req) = offline::decode_request(raw) else {
        return;
    };
    let policy = Policy::default();
    let ctx = Context {
        view,
        policy: &policy,
    };
    for phase in [Phase::Mutate, Phase::Validate] {
        let verdict = admission::evaluate(phase, &req, &ctx);
        let patch = verdict.patch.clone();
        let allowed = verdict.is_allowed();
        let response = review::respond(&req, verdict);
        assert_eq!(response.uid, req.uid, "the response echoes the request uid");
        let bytes = review::encode_review(response.into_review()).expect("the response encodes");
        serde_json::from_slice::<Value>(&bytes).expect("the response is JSON");
        if allowed && !patch.is_empty() {
            let mut object = raw
                .pointer("/request/object")
                .cloned()
                .expect("a patch comes with an object");
            json_patch::patch(&mut object, &patch)
                .unwrap_or_else(|e| panic!("the {phase:?} patch does not apply: {e}"));
        }
    }
    let Ok(body) = serde_json::to_vec(raw) else {
        return;
    };
    match offline::review(&body, Phases::Both, &ctx) {
        Err(BadReview::Patch(e)) => panic!("mutate, patch, validate failed: {e}"),
        Ok(outcome) if outcome.allowed && req.resource.resource == "statefulsets" => {
            mutation_is_idempotent(raw, outcome.object, &ctx)
        }
        _ => {}
    }
}

/// DESIGN.md: calling the mutation again on its own output yields no patch.
fn mutation_is_idempotent(raw: &Value, patched: Option<Value>, ctx: &Context<'_>) {
    let Some(patched) = patched else {
        return;
    };
    if raw.pointer("/request/object") == Some(&patched) {
        return;
    }
    let mut again = raw.clone();
    again["request"]["object"] = patched;
    let Ok(req) = offline::decode_request(&again) else {
        panic!("the patched object no longer decodes");
    };
    let verdict = admission::evaluate(Phase::Mutate, &req, ctx);
    assert!(
        verdict.patch.is_empty(),
        "mutating the mutated object patches again: {:?}",
        verdict.patch
    );
}
