//! The compact store's JSON, packed: serde writes the lite kinds' fields in one order, so the
//! same runs of field names and punctuation (`"},"spec":{"accessModes":["ReadWriteOnce"],…`)
//! make up most of every stored claim, pod and StatefulSet. Each of the runs below is stored
//! as one byte that compact JSON never holds: a control byte (JSON escapes them inside
//! strings and serde writes no whitespace outside) or a byte that valid UTF-8 never holds
//! (0xC0, 0xC1, 0xF5–0xFF). Unpacking puts the runs back byte for byte, so what is read
//! decodes as it was written; JSON with none of the runs is stored as it is.
//!
//! At 50,000 claims, 10,000 sets and 25,000 pods this holds the view in less than half the
//! bytes (BENCHMARKS.md, "Ready in seconds and lean at a platform's size").

use std::borrow::Cow;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, MatchKind};

/// The runs, in no particular order; the longest match wins where two start at one place.
/// A run that a kind's JSON lacks costs nothing but a table entry.
const RUNS: [&str; 44] = [
    // Every kind's metadata, as the view keeps it (name and namespace are the store's keys).
    r#"{"metadata":{"creationTimestamp":"20"#,
    r#"{"metadata":{"annotations":{"stateful-admission.io/"#,
    r#""labels":{"app.kubernetes.io/instance":""#,
    r#"","app.kubernetes.io/name":""#,
    r#""},"resourceVersion":""#,
    r#"","uid":""#,
    r#""},"name":""#,
    r#""lastTransitionTime":"20"#,
    r#"","message":""#,
    r#"","reason":""#,
    r#"","status":"True","type":""#,
    r#"","status":"False","type":""#,
    // Claims, and the claim templates of sets.
    r#""},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":""#,
    r#""spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":""#,
    r#""}},"storageClassName":""#,
    r#"","volumeMode":"Filesystem""#,
    r#","volumeName":"pvc-"#,
    r#""},"status":{"accessModes":["ReadWriteOnce"],"capacity":{"storage":""#,
    r#""},"phase":"Bound"}}"#,
    r#""},"phase":"Pending"}}"#,
    // StatefulSets.
    r#","generation":"#,
    r#"},"spec":{"replicas":"#,
    r#","serviceName":""#,
    r#"","podManagementPolicy":""#,
    r#","updateStrategy":{"rollingUpdate":{"partition":0},"type":"RollingUpdate"}"#,
    r#","updateStrategy":{"type":"OnDelete"}"#,
    r#","volumeClaimTemplates":[{"metadata":{"#,
    r#"}},{"metadata":{"#,
    r#"}}]},"status":{"availableReplicas":"#,
    r#","collisionCount":0,"conditions":[{"#,
    r#""},{"lastTransitionTime":"20"#,
    r#""}],"currentReplicas":"#,
    r#","currentRevision":""#,
    r#"","observedGeneration":"#,
    r#","readyReplicas":"#,
    r#","replicas":"#,
    r#","updateRevision":""#,
    r#"","updatedReplicas":"#,
    // Pods of StatefulSets.
    r#""labels":{"controller-revision-hash":""#,
    r#""},"ownerReferences":[{"apiVersion":"apps/v1","controller":true,"kind":"StatefulSet","name":""#,
    r#""}],"resourceVersion":""#,
    r#""},"status":{"conditions":[{"lastTransitionTime":"20"#,
    r#"","status":"True","type":"Ready"}],"phase":"Running"}}"#,
    r#"","status":"False","type":"Ready"}],"phase":"Running"}}"#,
];

/// The byte that stands for run `i`.
const fn code(i: usize) -> u8 {
    match i {
        0..=30 => 0x01 + i as u8,
        31..=32 => 0xC0 + (i - 31) as u8,
        _ => 0xF5 + (i - 33) as u8,
    }
}

/// The run a byte stands for, if it stands for one.
fn run_of(byte: u8) -> Option<&'static str> {
    let i = match byte {
        0x01..=0x1F => usize::from(byte - 0x01),
        0xC0..=0xC1 => 31 + usize::from(byte - 0xC0),
        0xF5..=0xFF => 33 + usize::from(byte - 0xF5),
        _ => return None,
    };
    RUNS.get(i).copied()
}

static PACKER: LazyLock<Option<(AhoCorasick, Vec<[u8; 1]>)>> = LazyLock::new(|| {
    let finder = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(RUNS)
        .ok()?;
    let codes = (0..RUNS.len()).map(|i| [code(i)]).collect();
    Some((finder, codes))
});

/// `json` (serde's compact output) with each run replaced by its byte.
pub(crate) fn pack(json: &[u8]) -> Box<[u8]> {
    match PACKER.as_ref() {
        Some((finder, codes)) => finder.replace_all_bytes(json, codes).into_boxed_slice(),
        None => json.into(),
    }
}

/// The JSON `packed` was made from.
pub(crate) fn unpack(packed: &[u8]) -> Cow<'_, [u8]> {
    if !packed.iter().any(|b| run_of(*b).is_some()) {
        return Cow::Borrowed(packed);
    }
    let mut json = Vec::with_capacity(packed.len() * 3);
    for &byte in packed {
        match run_of(byte) {
            Some(run) => json.extend_from_slice(run.as_bytes()),
            None => json.push(byte),
        }
    }
    Cow::Owned(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_run_has_its_own_byte_and_none_is_one_json_holds() {
        let codes: std::collections::BTreeSet<u8> = (0..RUNS.len()).map(code).collect();
        assert_eq!(codes.len(), RUNS.len());
        for (i, run) in RUNS.iter().enumerate() {
            assert_eq!(run_of(code(i)), Some(*run));
        }
        // Bytes of compact JSON (printable ASCII and the UTF-8 of any character) stand for
        // nothing.
        let text =
            serde_json::to_vec(&json!({"a\tb\n": "é ✓ \u{1}\u{7f}", "n": [1, -2.5e3, null, true]}))
                .expect("json");
        assert!(text.iter().all(|b| run_of(*b).is_none()), "{text:?}");
    }

    #[test]
    fn what_is_packed_unpacks_to_the_same_bytes() {
        let claim = br#"{"metadata":{"creationTimestamp":"2026-11-26T20:37:18Z","labels":{"app.kubernetes.io/instance":"rabbitmq-00023","app.kubernetes.io/name":"rabbitmq"},"resourceVersion":"929","uid":"35141364-93fe-455f-96ff-0ac4721b4974"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"100Gi"}},"storageClassName":"storage-38","volumeMode":"Filesystem","volumeName":"pvc-e74fbdd8-597b-4354-af9a-cacebc8725ba"},"status":{"accessModes":["ReadWriteOnce"],"capacity":{"storage":"100Gi"},"phase":"Bound"}}"#;
        let packed = pack(claim);
        assert!(
            packed.len() * 2 < claim.len(),
            "{} of {}",
            packed.len(),
            claim.len()
        );
        assert_eq!(unpack(&packed).as_ref(), &claim[..]);
        // Text with none of the runs is kept as it is, and read without a copy.
        let plain = br#"{"a":1}"#;
        assert_eq!(&*pack(plain), plain);
        assert!(matches!(unpack(plain), Cow::Borrowed(_)));
        // Runs inside strings are packed too, and come back whole.
        let odd = serde_json::to_vec(&json!({"note": "\"},\"name\":\" and \",\"uid\":\""}))
            .expect("json");
        assert_eq!(unpack(&pack(&odd)).as_ref(), &odd[..]);
    }

    /// Random JSON made of the runs themselves (whole, cut and overlapping), control
    /// characters, multi-byte UTF-8 and plain text, in keys and values: what serde writes for
    /// it comes back byte for byte, and no run's byte is ever left in the packed text unless it
    /// stands for its run.
    #[test]
    fn random_json_round_trips() {
        let pieces: Vec<&str> = RUNS
            .iter()
            .copied()
            .chain([
                "\u{1}",
                "\u{1f}",
                "é",
                "✓",
                "\u{10ffff}",
                "\"",
                "\\",
                "a",
                ":",
                "{",
            ])
            .collect();
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: usize| {
            // xorshift64: deterministic, so a failure reproduces.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..2_000 {
            let text = |next: &mut dyn FnMut(usize) -> usize| {
                let mut s = String::new();
                for _ in 0..next(6) {
                    let piece = pieces[next(pieces.len())];
                    // Sometimes only a part of a run, cut on a character boundary.
                    let cut = piece
                        .char_indices()
                        .map(|(i, _)| i)
                        .nth(next(piece.chars().count() + 1))
                        .unwrap_or(piece.len());
                    s.push_str(&piece[..cut]);
                }
                s
            };
            let mut object = serde_json::Map::new();
            for _ in 0..next(5) {
                let key = text(&mut next);
                let value = match next(4) {
                    0 => json!(text(&mut next)),
                    1 => json!({ text(&mut next): [text(&mut next), next(1000)] }),
                    2 => json!(null),
                    _ => json!(next(7) as f64 / 3.0),
                };
                object.insert(key, value);
            }
            let bytes = serde_json::to_vec(&serde_json::Value::Object(object)).expect("json");
            assert_eq!(unpack(&pack(&bytes)).as_ref(), &bytes[..], "{bytes:?}");
        }
    }
}
