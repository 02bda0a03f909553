//! Which scenario runs where, and how each adapts, for every apiserver the project captured
//! (v1.24 to v1.36, with the `MaxUnavailableStatefulSet` and `VolumeAttributesClass` gates
//! off and on): what [`Caps::probe`] finds there, written down as literals, and the table of
//! skips with their reasons. These trials need no cluster and run in every `cargo test`.
//!
//! A scenario is skipped only where the cluster lacks a field or API it is about; everything
//! else runs everywhere, adapting its spelling, apiVersion or expected message to the cluster.
//!
//! [`Caps::probe`]: crate::support::Caps::probe

use std::collections::BTreeMap;

use libtest_mimic::{Failed, Trial};
use serde_json::json;

use crate::scenarios;
use crate::support::caps::{self, Caps, Choice, Spelling};

const V1_24: &str = "v1.24.0-alpha.1";
const V1_32: &str = "v1.32.0-ste.0+cd13ec4ae44e35";
const V1_35: &str = "v1.35.3-ste.0+a466682e3867da";
const V1_36: &str = "v1.36.2-ste.0+98b35193b2ac7a";

/// What the probes find on each captured apiserver.
pub fn captured() -> Vec<(&'static str, Caps)> {
    let caps = |git: &str, mu_field, mu_kept, vac: Option<&str>, claim_vac_kept| Caps {
        git_version: git.to_owned(),
        mu_field,
        mu_kept,
        vac_version: vac.map(str::to_owned),
        claim_vac_kept,
        // Every captured version but v1.24 has the claim field (v1.32 drops its value).
        claim_vac_field: true,
        class_from_unset: Some(true),
    };
    vec![
        (
            // No maxUnavailable in the types yet, no VolumeAttributesClass, and a class-less
            // claim may not be given a class.
            "v1.24",
            Caps {
                class_from_unset: Some(false),
                claim_vac_field: false,
                ..caps(V1_24, false, false, None, false)
            },
        ),
        ("v1.32", caps(V1_32, true, false, None, false)),
        (
            // --feature-gates=MaxUnavailableStatefulSet=true,VolumeAttributesClass=true
            // --runtime-config=storage.k8s.io/v1beta1=true
            "v1.32-gates-on",
            caps(V1_32, true, true, Some("v1beta1"), true),
        ),
        // This build drops maxUnavailable; VolumeAttributesClass is GA.
        ("v1.35", caps(V1_35, true, false, Some("v1"), true)),
        (
            // --feature-gates=MaxUnavailableStatefulSet=true
            "v1.35-maxunavailable-on",
            caps(V1_35, true, true, Some("v1"), true),
        ),
        ("v1.36", caps(V1_36, true, false, Some("v1"), true)),
    ]
}

const NO_FIELD: &str = "StatefulSets have no spec.updateStrategy.rollingUpdate.maxUnavailable \
     (not in the apiserver's OpenAPI; kubectl refuses the field)";
const KEPT: &str = "the apiserver keeps spec.updateStrategy.rollingUpdate.maxUnavailable \
     (MaxUnavailableStatefulSet on): the built-in controller drives, ours stands down";
const DROPPED: &str = "the apiserver drops spec.updateStrategy.rollingUpdate.maxUnavailable \
     (MaxUnavailableStatefulSet off)";
const NO_VAC: &str = "no storage.k8s.io version serves volumeattributesclasses \
     (VolumeAttributesClass not served)";
const NO_CLAIM_VAC: &str =
    "claims have no spec.volumeAttributesClassName (not in the apiserver's OpenAPI)";
const CLAIM_VAC_KEPT: &str =
    "claims keep spec.volumeAttributesClassName (VolumeAttributesClass on)";

const GATE_OFF_FIELD: &str = "max_unavailable_gate_off_field";
const GATE_OFF_ANNOTATION: &str = "max_unavailable_gate_off_annotation";
const GATE_LEARNED: &str = "max_unavailable_gate_learned_after_failed_probes";
const GATE_ON: &str = "max_unavailable_gate_on_builtin_drives";
const VAC: &str = "volume_attributes_class_edit_reaches_claims";
const VAC_DROPPED: &str = "volume_attributes_class_the_cluster_drops_is_told_and_never_stalls";
const GITOPS_VAC_DROPPED: &str = "gitops_health_degraded_on_a_class_the_cluster_drops";
/// Needs nothing a version lacks (the Eviction API and policy/v1 budgets are older than every
/// captured version): it runs everywhere, on the first cluster.
const OFFLINE_EXPANSION: &str = "offline_expansion_restarts_pods_through_the_eviction_api";

const OPT_OUT: &str = "offline_expansion_opt_out_during_a_refused_eviction_evicts_nothing";
/// Needs nothing a version lacks either: rolling updates and their partition are older than
/// every captured version.
const IMAGE_AND_STORAGE: &str = "image_and_storage_in_one_apply_restart_each_pod_once";

/// Scenarios that must run on every captured apiserver, alone and with a second cluster.
const EVERYWHERE: [&str; 3] = [OFFLINE_EXPANSION, OPT_OUT, IMAGE_AND_STORAGE];

/// The scenarios skipped with `KUBECONFIG` alone on each captured apiserver, and why; every
/// other scenario runs there.
fn skips_alone() -> Vec<(&'static str, Vec<(&'static str, &'static str)>)> {
    vec![
        (
            "v1.24",
            vec![
                (GATE_OFF_FIELD, NO_FIELD),
                (GATE_ON, NO_FIELD),
                (VAC, NO_VAC),
                (VAC_DROPPED, NO_CLAIM_VAC),
                (GITOPS_VAC_DROPPED, NO_CLAIM_VAC),
            ],
        ),
        ("v1.32", vec![(GATE_ON, DROPPED), (VAC, NO_VAC)]),
        (
            "v1.32-gates-on",
            vec![
                (GATE_OFF_FIELD, KEPT),
                (GATE_OFF_ANNOTATION, KEPT),
                (GATE_LEARNED, KEPT),
                (VAC_DROPPED, CLAIM_VAC_KEPT),
                (GITOPS_VAC_DROPPED, CLAIM_VAC_KEPT),
            ],
        ),
        (
            "v1.35",
            vec![
                (GATE_ON, DROPPED),
                (VAC_DROPPED, CLAIM_VAC_KEPT),
                (GITOPS_VAC_DROPPED, CLAIM_VAC_KEPT),
            ],
        ),
        (
            "v1.35-maxunavailable-on",
            vec![
                (GATE_OFF_FIELD, KEPT),
                (GATE_OFF_ANNOTATION, KEPT),
                (GATE_LEARNED, KEPT),
                (VAC_DROPPED, CLAIM_VAC_KEPT),
                (GITOPS_VAC_DROPPED, CLAIM_VAC_KEPT),
            ],
        ),
        (
            "v1.36",
            vec![
                (GATE_ON, DROPPED),
                (VAC_DROPPED, CLAIM_VAC_KEPT),
                (GITOPS_VAC_DROPPED, CLAIM_VAC_KEPT),
            ],
        ),
    ]
}

/// With a second cluster (`KUBECONFIG`, `E2E_GATES_KUBECONFIG`): the scenarios that run on the
/// second, and those that still run nowhere (with both clusters' reasons).
#[allow(clippy::type_complexity)]
fn pairs() -> Vec<(
    (&'static str, &'static str),
    Vec<&'static str>,
    Vec<(&'static str, String)>,
)> {
    vec![
        (("v1.32", "v1.32-gates-on"), vec![GATE_ON, VAC], vec![]),
        (
            ("v1.35", "v1.35-maxunavailable-on"),
            vec![GATE_ON],
            [VAC_DROPPED, GITOPS_VAC_DROPPED]
                .map(|name| {
                    (
                        name,
                        format!(
                            "KUBECONFIG ({V1_35}): {CLAIM_VAC_KEPT}; E2E_GATES_KUBECONFIG ({V1_35}): {CLAIM_VAC_KEPT}"
                        ),
                    )
                })
                .into(),
        ),
        (
            ("v1.36", "v1.35-maxunavailable-on"),
            vec![GATE_ON],
            [VAC_DROPPED, GITOPS_VAC_DROPPED]
                .map(|name| {
                    (
                        name,
                        format!(
                            "KUBECONFIG ({V1_36}): {CLAIM_VAC_KEPT}; E2E_GATES_KUBECONFIG ({V1_35}): {CLAIM_VAC_KEPT}"
                        ),
                    )
                })
                .into(),
        ),
        (
            ("v1.32-gates-on", "v1.32"),
            vec![
                GATE_OFF_FIELD,
                GATE_OFF_ANNOTATION,
                GATE_LEARNED,
                VAC_DROPPED,
                GITOPS_VAC_DROPPED,
            ],
            vec![],
        ),
        (
            ("v1.24", "v1.32"),
            vec![GATE_OFF_FIELD, VAC_DROPPED, GITOPS_VAC_DROPPED],
            vec![
                (
                    GATE_ON,
                    format!(
                        "KUBECONFIG ({V1_24}): {NO_FIELD}; E2E_GATES_KUBECONFIG ({V1_32}): {DROPPED}"
                    ),
                ),
                (
                    VAC,
                    format!(
                        "KUBECONFIG ({V1_24}): {NO_VAC}; E2E_GATES_KUBECONFIG ({V1_32}): {NO_VAC}"
                    ),
                ),
            ],
        ),
    ]
}

fn by_label(label: &str) -> Result<Caps, Failed> {
    captured()
        .into_iter()
        .find(|(l, _)| *l == label)
        .map(|(_, c)| c)
        .ok_or_else(|| Failed::from(format!("no captured version {label}")))
}

fn check(failures: &mut Vec<String>, what: String, ok: bool) {
    if !ok {
        failures.push(what);
    }
}

fn verdict(failures: Vec<String>) -> Result<(), Failed> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failed::from(failures.join("\n")))
    }
}

/// Every scenario on every captured apiserver alone, and on the pairs above.
fn selection_table() -> Result<(), Failed> {
    let all = scenarios::all();
    let mut failures = Vec::new();
    for (label, skips) in skips_alone() {
        let caps = by_label(label)?;
        let skips: BTreeMap<&str, &str> = skips.into_iter().collect();
        for scenario in &all {
            let got = caps::choose(scenario.needs, &[("KUBECONFIG", &caps)]);
            let want = match skips.get(scenario.name) {
                Some(reason) => Choice::Skip(format!(
                    "{}: {reason}; no second cluster to run it on (E2E_GATES_KUBECONFIG is not set)",
                    caps.git_version
                )),
                None => Choice::Run(0),
            };
            check(
                &mut failures,
                format!("{label}: {}: {got:?}, want {want:?}", scenario.name),
                got == want,
            );
        }
    }
    for ((first, second), on_second, nowhere) in pairs() {
        let (a, b) = (by_label(first)?, by_label(second)?);
        let nowhere: BTreeMap<&str, String> = nowhere.into_iter().collect();
        for scenario in &all {
            let got = caps::choose(
                scenario.needs,
                &[("KUBECONFIG", &a), ("E2E_GATES_KUBECONFIG", &b)],
            );
            let want = match nowhere.get(scenario.name) {
                Some(reason) => Choice::Skip(reason.clone()),
                None if on_second.contains(&scenario.name) => Choice::Run(1),
                None => Choice::Run(0),
            };
            check(
                &mut failures,
                format!(
                    "{first} + {second}: {}: {got:?}, want {want:?}",
                    scenario.name
                ),
                got == want,
            );
        }
    }
    for name in EVERYWHERE {
        for (label, skips) in skips_alone() {
            check(
                &mut failures,
                format!("{label}: {name} is skipped, but it runs everywhere"),
                skips.iter().all(|(skipped, _)| *skipped != name),
            );
        }
        for ((first, second), on_second, nowhere) in pairs() {
            check(
                &mut failures,
                format!("{first} + {second}: {name} runs on the first cluster"),
                !on_second.contains(&name) && nowhere.iter().all(|(skipped, _)| *skipped != name),
            );
        }
        let needs = all.iter().find(|s| s.name == name).map(|s| s.needs.len());
        check(
            &mut failures,
            format!("{name} needs nothing of a version: {needs:?}"),
            needs == Some(0),
        );
    }
    for name in [
        GATE_OFF_FIELD,
        GATE_OFF_ANNOTATION,
        GATE_LEARNED,
        GATE_ON,
        VAC,
        VAC_DROPPED,
        GITOPS_VAC_DROPPED,
        OFFLINE_EXPANSION,
        IMAGE_AND_STORAGE,
    ] {
        check(
            &mut failures,
            format!("no scenario {name}"),
            all.iter().any(|s| s.name == name),
        );
    }
    verdict(failures)
}

/// One row of [`adaptations`]: label, spelling, the parts of the refusal of 0, the
/// VolumeAttributesClass apiVersion, and whether the cluster gives classless claims a class.
type Adaptation = (
    &'static str,
    Spelling,
    Vec<&'static str>,
    Option<&'static str>,
    bool,
);

/// How the scenarios that run everywhere adapt on each captured apiserver.
fn adaptations() -> Result<(), Failed> {
    use Spelling::{Annotation, Field};
    const FIELD_ZERO: &str =
        "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 0: cannot be 0";
    const ANNOTATION_ZERO: &str = "metadata.annotations[stateful-admission.io/max-unavailable]: Invalid value: 0: cannot be 0";
    // The apiserver's own validation may answer first, rendering the value its own way
    // (`intstr.IntOrString{Type:0, IntVal:0, StrVal:""}` on v1.32, `0` on v1.35).
    let kept_zero = vec![
        "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: ",
        ": cannot be 0",
    ];
    // label: maxUnavailable spelling (denials, in_place, first_contact, gate_learned), what
    // the refusal of 0 says, VolumeAttributesClass apiVersion, whether the retroactive-default
    // scenario expects the assignment (else the refusal) and the check scenario turns ours off.
    let table: Vec<Adaptation> = vec![
        ("v1.24", Annotation, vec![ANNOTATION_ZERO], None, false),
        ("v1.32", Field, vec![FIELD_ZERO], None, true),
        (
            "v1.32-gates-on",
            Field,
            kept_zero.clone(),
            Some("storage.k8s.io/v1beta1"),
            true,
        ),
        (
            "v1.35",
            Field,
            vec![FIELD_ZERO],
            Some("storage.k8s.io/v1"),
            true,
        ),
        (
            "v1.35-maxunavailable-on",
            Field,
            kept_zero,
            Some("storage.k8s.io/v1"),
            true,
        ),
        (
            "v1.36",
            Field,
            vec![FIELD_ZERO],
            Some("storage.k8s.io/v1"),
            true,
        ),
    ];
    let mut failures = Vec::new();
    for (label, spelling, zero, vac, retroactive) in table {
        let caps = by_label(label)?;
        let got = (
            caps.mu_spelling(),
            caps.zero_max_unavailable_denial(),
            caps.vac_api_version(),
            caps.retroactive_default_class_native(),
        );
        let want = (spelling, zero, vac.map(str::to_owned), retroactive);
        check(
            &mut failures,
            format!("{label}: {got:?}, want {want:?}"),
            got == want,
        );
    }
    verdict(failures)
}

/// The two spellings of maxUnavailable, as a manifest carries them.
fn spellings() -> Result<(), Failed> {
    let mut failures = Vec::new();
    let cases = [
        (
            Spelling::Field.strategy(&json!(2), json!({"partition": 1})),
            json!({"spec": {"updateStrategy": {"type": "RollingUpdate",
                "rollingUpdate": {"partition": 1, "maxUnavailable": 2}}}}),
        ),
        (
            Spelling::Annotation.strategy(&json!(2), json!({"partition": 1})),
            json!({"metadata": {"annotations": {"stateful-admission.io/max-unavailable": "2"}},
                   "spec": {"updateStrategy": {"type": "RollingUpdate",
                       "rollingUpdate": {"partition": 1}}}}),
        ),
        (
            Spelling::Annotation.strategy(&json!(0), json!({})),
            json!({"metadata": {"annotations": {"stateful-admission.io/max-unavailable": "0"}},
                   "spec": {"updateStrategy": {"type": "RollingUpdate"}}}),
        ),
        (
            Spelling::Annotation.strategy(&json!("25%"), json!({})),
            json!({"metadata": {"annotations": {"stateful-admission.io/max-unavailable": "25%"}},
                   "spec": {"updateStrategy": {"type": "RollingUpdate"}}}),
        ),
    ];
    for (got, want) in cases {
        check(&mut failures, format!("{got} != {want}"), got == want);
    }
    verdict(failures)
}

/// What the probes read from the cluster's answers: OpenAPI property names, the newest served
/// version, and advice in a `check` report.
fn probe_readings() -> Result<(), Failed> {
    let mut failures = Vec::new();
    // The shape of /openapi/v2 (definitions) on v1.24 and later.
    let doc = |properties: serde_json::Value| -> Result<BTreeMap<String, caps::Schema>, Failed> {
        serde_json::from_value(json!({
            "io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy": {
                "description": "…", "type": "object", "properties": properties},
            "io.k8s.api.core.v1.ObjectReference": {"type": "object"},
        }))
        .map_err(|e| Failed::from(e.to_string()))
    };
    let old = doc(json!({"partition": {"type": "integer", "format": "int32"}}))?;
    let new = doc(json!({"partition": {"type": "integer"},
        "maxUnavailable": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}}))?;
    let definition = "io.k8s.api.apps.v1.RollingUpdateStatefulSetStrategy";
    check(
        &mut failures,
        "v1.24's strategy has no maxUnavailable".into(),
        !caps::lists_property(&old, definition, "maxUnavailable"),
    );
    check(
        &mut failures,
        "later strategies list maxUnavailable".into(),
        caps::lists_property(&new, definition, "maxUnavailable"),
    );
    check(
        &mut failures,
        "an absent definition lists nothing".into(),
        !caps::lists_property(&new, "io.k8s.api.apps.v1.Nothing", "maxUnavailable"),
    );
    let versions = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    for (served, want) in [
        (versions(&["v1beta1"]), Some("v1beta1")),
        (versions(&["v1", "v1beta1"]), Some("v1")),
        (versions(&["v1alpha1", "v1beta1"]), Some("v1beta1")),
        (versions(&[]), None),
    ] {
        let got = caps::newest(&served);
        check(
            &mut failures,
            format!("newest of {served:?}: {got:?}"),
            got.as_deref() == want,
        );
    }
    // A report as `check -o json` prints it, with a line advising to turn our maxUnavailable
    // driver off.
    let report = json!({"checks": [
        {"name": "controller lease", "status": "ok", "message": "Lease held"},
        {"name": "kubernetes version", "status": "warning",
         "message": "KEP-961 (gate MaxUnavailableStatefulSet on by default): ours is redundant: the maxUnavailable driver and annotation (--max-unavailable-driver=false, --max-unavailable-fallback=false)",
         "hint": "see docs/runbooks.md"},
    ]});
    let dropped = by_label("v1.35")?;
    let kept = by_label("v1.35-maxunavailable-on")?;
    check(
        &mut failures,
        "advice to turn the driver off where the apiserver drops the field is wrong".into(),
        dropped.wrong_advice(&report).len() == 1,
    );
    check(
        &mut failures,
        "the same advice where the apiserver keeps the field is right".into(),
        kept.wrong_advice(&report).is_empty(),
    );
    let retroactive = json!({"checks": [{"name": "kubernetes version", "status": "warning",
        "message": "ours is redundant (--retroactive-default-class=false)"}]});
    check(
        &mut failures,
        "turning our default class off is wrong only where the apiserver refuses it".into(),
        by_label("v1.24")?.wrong_advice(&retroactive).len() == 1
            && dropped.wrong_advice(&retroactive).is_empty(),
    );
    verdict(failures)
}

/// The trials of this module.
pub fn trials() -> Vec<Trial> {
    vec![
        Trial::test("versions_selection_table", selection_table),
        Trial::test("versions_adaptations", adaptations),
        Trial::test("versions_max_unavailable_spellings", spellings),
        Trial::test("versions_probe_readings", probe_readings),
    ]
}
