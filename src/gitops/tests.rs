//! One table of cases, three consumers: `status`'s judge on every object of a case (what
//! `status --wait` ends with), and on the StatefulSet alone, as the controller leaves it, the
//! Argo CD health check (run by Lua 5.1) and the Flux expressions (run by a CEL interpreter).
//!
//! The set's `volume-claim-status` is not written by hand: each case's is what the
//! controller's own planner ([`claim_rollout::plan_for`]) records for the case's claims, pods
//! and StorageClasses. So a case checks the whole path: what the controller writes, what the
//! scripts make of it, and that this is `status`'s verdict.
//!
//! The Argo CD test data (`gitops/argocd/.../testdata`, `health_test.yaml`) is this table:
//! `STATEFUL_ADMISSION_WRITE_GITOPS_TESTDATA=1 cargo test --lib gitops` writes it again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use mlua::{Lua, LuaOptions, StdLib};
use serde_json::{Value, json};

use super::{ARGOCD_HEALTH_LUA, FLUX_HEALTH_CHECK_EXPRS};
use crate::admission::set_claims;
use crate::admission::statefulset::ClaimUpdatePolicy;
use crate::controller::claim_rollout;
use crate::controller::snapshot::SetSnapshot;
use crate::names;
use crate::rollout::claims::{self, status as claim_status};
use crate::rollout::progress::rollout_key;
use crate::status::fixtures::{
    NS, claim, claims, class, event, inputs, journal, report_of, set, template, time, with, without,
};
use crate::status::model::Outcome;
use shipped::lua_value;

/// Where the Argo CD check lives, in Argo CD's `resource_customizations/<group>/<Kind>` layout.
const ARGOCD_DIR: &str = "gitops/argocd/resource_customizations/apps/StatefulSet";

// --- the interpreters ---

/// The Lua runner of the integration tests and the real-cluster suite (written for their
/// crates, where its items are their public surface).
#[allow(unreachable_pub, dead_code)]
#[path = "../../tests/gitops/mod.rs"]
mod shipped;

/// Argo CD's health of `object` with the check installed (gitops-engine `GetResourceHealth`),
/// by the runner the integration tests and the real-cluster suite use too.
fn argocd(object: &Value) -> (String, String) {
    shipped::argocd_health(object).expect("the health check runs")
}

/// The expressions of the shipped `healthCheckExprs` entry.
fn flux_expressions() -> BTreeMap<String, String> {
    let entries: Vec<BTreeMap<String, String>> =
        serde_saphyr::from_str(FLUX_HEALTH_CHECK_EXPRS).expect("the Flux file is YAML");
    assert_eq!(entries.len(), 1, "one entry");
    let entry = entries.into_iter().next().unwrap_or_default();
    assert_eq!(
        (entry["apiVersion"].as_str(), entry["kind"].as_str()),
        ("apps/v1", "StatefulSet")
    );
    entry
}

/// Flux's status of `object` with the expressions (fluxcd/pkg `runtime/cel` StatusEvaluator):
/// InProgress while `status.observedGeneration` differs from `metadata.generation`, then the
/// first of inProgress, failed, current that holds, else InProgress.
fn flux(object: &Value) -> &'static str {
    let observed = object
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    if let (Some(observed), Some(generation)) = (observed, generation)
        && observed != generation
    {
        return "InProgress";
    }
    let expressions = flux_expressions();
    let mut context = cel::Context::default();
    for (key, value) in object.as_object().into_iter().flatten() {
        context
            .add_variable(key.as_str(), value.clone())
            .expect("a variable");
    }
    for (key, status) in [
        ("inProgress", "InProgress"),
        ("failed", "Failed"),
        ("current", "Current"),
    ] {
        let program = cel::Program::compile(&expressions[key])
            .unwrap_or_else(|e| panic!("{key} does not parse: {e}"));
        match program.execute(&context) {
            Ok(cel::Value::Bool(true)) => return status,
            Ok(cel::Value::Bool(false)) => {}
            other => panic!("{key} on {object}: {other:?}"),
        }
    }
    "InProgress"
}

// --- what the controller writes ---

/// The set `web` of `objects` with `volume-claim-status` as the controller's planner records
/// it for the claims, pods and StorageClasses there (`drops_classes`: the cluster drops a
/// claim's volumeAttributesClassName). A set that does not use the feature gets none, and a
/// set whose recorded templates do not parse keeps what it had (the controller stops there).
fn as_the_controller_leaves_it(objects: &[Value], drops_classes: bool) -> Option<Value> {
    let raw = objects
        .iter()
        .find(|o| o["kind"] == "StatefulSet" && o["metadata"]["name"] == "web")?
        .clone();
    let set: StatefulSet = serde_json::from_value(raw.clone()).expect("a StatefulSet");
    let Ok(templates) = claims::desired_templates(&set) else {
        return Some(raw);
    };
    let of_kind = |kind: &'static str| {
        objects
            .iter()
            .filter(move |o| o["kind"] == kind)
            .map(|o| (o["metadata"]["name"].as_str().unwrap_or("").to_owned(), o))
    };
    let pvcs: BTreeMap<String, Arc<PersistentVolumeClaim>> = of_kind("PersistentVolumeClaim")
        .map(|(n, o)| {
            (
                n,
                Arc::new(serde_json::from_value(o.clone()).expect("claim")),
            )
        })
        .collect();
    let pods: BTreeMap<String, Arc<Pod>> = of_kind("Pod")
        .map(|(n, o)| (n, Arc::new(serde_json::from_value(o.clone()).expect("pod"))))
        .collect();
    let expandable: BTreeMap<String, bool> = of_kind("StorageClass")
        .map(|(n, o)| (n, o["allowVolumeExpansion"] == true))
        .collect();
    let replicas = u32::try_from(set.spec.replicas.unwrap_or(1)).unwrap_or(0);
    let ordinals: Vec<u32> = (0..replicas).collect();
    let live: Vec<String> = set
        .spec
        .volume_claim_templates
        .iter()
        .flatten()
        .filter_map(|t| t.metadata.name.clone())
        .collect();
    let snapshot = SetSnapshot {
        set: Arc::new(set.clone()),
        namespace: NS.into(),
        name: "web".into(),
        ordinals: ordinals.clone(),
        pods: ordinals
            .iter()
            .map(|&n| (n, pods.get(&format!("web-{n}")).cloned()))
            .collect(),
        claims: live
            .iter()
            .flat_map(|t| {
                ordinals.iter().map(|&n| {
                    let name = set_claims::claim_name(t, "web", n);
                    (t.clone(), n, pvcs.get(&name).cloned())
                })
            })
            .collect(),
        journal: None,
    };
    let (mut settings, _) = claims::rollout_settings(&set, ordinals.len());
    if drops_classes {
        settings.cluster.claim_volume_attributes_class = Some(false);
    }
    let plan = claim_rollout::plan_for(&snapshot, &templates, &settings, |c| {
        expandable.get(c).copied().unwrap_or(false)
    });
    let annotations = set.metadata.annotations.clone().unwrap_or_default();
    let in_use = settings.policy == ClaimUpdatePolicy::InPlace
        || annotations.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES)
        || annotations.contains_key(names::VOLUME_CLAIM_STATUS);
    if !in_use {
        return Some(raw);
    }
    Some(with(
        raw,
        &annotation(names::VOLUME_CLAIM_STATUS),
        json!(claim_status::render(&plan.status)),
    ))
}

// --- fixtures ---

/// A pointer to annotation `key`.
fn annotation(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

fn objects(set: Value, claims: Vec<Value>) -> Vec<Value> {
    let mut all = vec![set, class("fast", true)];
    all.extend(claims);
    all
}

fn resizing(c: Value) -> Value {
    with(
        c,
        "/status/conditions",
        json!([{"type": "Resizing", "status": "True"}]),
    )
}

fn waits_for_restart(c: Value) -> Value {
    with(
        c,
        "/status/conditions",
        json!([{"type": "FileSystemResizePending", "status": "True",
                "lastTransitionTime": time(500)}]),
    )
}

fn evicted(c: Value) -> Value {
    with(
        waits_for_restart(c),
        &annotation(names::RESIZE_RESTART),
        json!(r#"{"pod":"web-2","podUID":"u-2","at":"2026-01-01T00:08:00Z"}"#),
    )
}

/// The controller's progress record of `rollout`, Progressing False past the deadline, with
/// the condition as the controller sets it.
fn stalled(set: Value, rollout: &str) -> Value {
    let set = with(
        set,
        "/status/conditions",
        json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                "message": "no progress for 600s: updating volume claims: 1 still updating",
                "lastTransitionTime": time(550)}]),
    );
    let record = json!({"rollout": rollout, "complete": false, "progressAt": time(0),
        "best": {"observedGeneration": 1, "updated": 3, "ready": 3, "available": 3,
                 "outdated": 0, "away": 0, "claimsCompatible": 2, "claimsUpdating": 1},
        "progressing": {"status": "False", "since": time(550)}});
    with(set, &annotation(names::PROGRESS), json!(record.to_string()))
}

fn desired_of(set: &Value) -> Option<String> {
    set.pointer(&annotation(names::DESIRED_VOLUME_CLAIM_TEMPLATES))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The template's class `gold`, and the claim status saying the cluster drops it (`changed`:
/// a recorded edit set it), as the controller wrote it before the set was re-created.
fn gold(set: Value, changed: bool) -> Value {
    let set = with(
        set,
        "/spec/volumeClaimTemplates/0/spec/volumeAttributesClassName",
        json!("gold"),
    );
    let status = json!([{"name": "data", "compatible": 3, "updating": 0, "overSized": 0,
        "totalCapacity": "6Gi", "volumeAttributesClass": {"name": "gold", "applied": false,
        "changed": changed, "reason": claim_status::CLASS_DROPPED}}]);
    with(
        set,
        &annotation(names::VOLUME_CLAIM_STATUS),
        json!(status.to_string()),
    )
}

// --- the table ---

struct Case {
    name: &'static str,
    /// Every object `status` reads.
    objects: Vec<Value>,
    /// The cluster drops claims' volumeAttributesClassName (the controller knows it).
    drops_classes: bool,
    /// `status`'s verdict: outcome and reason.
    judge: (Outcome, &'static str),
    /// Argo CD's health with the check: status and message (`None`: the set is absent, Argo CD
    /// says Missing without running a check).
    argocd: Option<(&'static str, &'static str)>,
    /// Flux's status with the expressions.
    flux: Option<&'static str>,
    /// Why the set alone cannot say what `status` says, where it cannot.
    beyond_the_set: Option<&'static str>,
}

const CHANGE_RECORDED: &str = "ChangeRecorded: a volumeClaimTemplates change is recorded; waiting for the controller to journal it and re-create the StatefulSet with it";
const COMPLETE: &str = "partitioned roll out complete: 3 new pods have been updated...";

#[allow(clippy::too_many_lines)]
fn cases() -> Vec<Case> {
    let in_place = Some("InPlace");
    let recorded = set("web", "1Gi", Some("2Gi"), in_place);
    let converged = set("web", "2Gi", None, in_place);
    let grown = |n| claim("web", n, "2Gi", "2Gi");
    let recreated = with(converged.clone(), "/metadata/uid", json!("uid-web-2"));
    let resize_error = with(
        claim("web", 2, "2Gi", "1Gi"),
        "/status/conditions",
        json!([{"type": "ControllerResizeError", "status": "True",
                "message": "resize volume \"pv-web-2\" failed: quota exceeded"}]),
    );
    let mut bad_journal = journal(&recorded, "journaled");
    bad_journal["data"]["statefulset.json"] = json!("{not json");
    let renamed = with(
        recorded.clone(),
        &annotation(names::DESIRED_VOLUME_CLAIM_TEMPLATES),
        json!(json!([with(template("2Gi"), "/metadata/name", json!("logs"))]).to_string()),
    );
    let this_rollout = rollout_key(1, None);
    let no_storage = set("web", "1Gi", None, None);
    let Some(desired) = desired_of(&recorded) else {
        panic!("the recorded set records templates")
    };
    vec![
        // An InPlace size change of three claims, from the apply to the end.
        Case {
            name: "patching: the apply recorded the change",
            objects: objects(recorded.clone(), claims("web", "1Gi", "1Gi")),
            drops_classes: false,
            judge: (Outcome::Progressing, "ChangeRecorded"),
            argocd: Some(("Progressing", CHANGE_RECORDED)),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "patching: claims patched, volumes growing, change still recorded",
            objects: objects(
                recorded.clone(),
                (0..3)
                    .map(|n| resizing(claim("web", n, "2Gi", "1Gi")))
                    .collect(),
            ),
            drops_classes: false,
            judge: (Outcome::Progressing, "ChangeRecorded"),
            argocd: Some(("Progressing", CHANGE_RECORDED)),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "converging: journaled",
            objects: {
                let mut o = objects(recorded.clone(), claims("web", "2Gi", "1Gi"));
                o.push(journal(&recorded, "journaled"));
                o
            },
            drops_classes: false,
            judge: (Outcome::Progressing, "Converging"),
            argocd: Some(("Progressing", CHANGE_RECORDED)),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "converging: orphan delete sent",
            objects: {
                let deleting = with(
                    recorded.clone(),
                    "/metadata/deletionTimestamp",
                    json!(time(590)),
                );
                let mut o = objects(deleting, claims("web", "2Gi", "1Gi"));
                o.push(journal(&recorded, "deleting"));
                o
            },
            drops_classes: false,
            judge: (Outcome::Progressing, "Converging"),
            argocd: Some(("Progressing", "Pending deletion")),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "converging: gone, the journal creates it again",
            objects: vec![journal(&recorded, "deleting")],
            drops_classes: false,
            judge: (Outcome::Progressing, "Converging"),
            argocd: None,
            flux: None,
            beyond_the_set: Some(
                "there is no StatefulSet for a few seconds: Argo CD says Missing, Flux waits",
            ),
        },
        Case {
            name: "converging: created again, the journal not dropped yet",
            objects: {
                let mut o = objects(recreated.clone(), claims("web", "2Gi", "1Gi"));
                o.push(journal(&recorded, "deleting"));
                o
            },
            drops_classes: false,
            judge: (Outcome::Progressing, "Converging"),
            argocd: Some((
                "Progressing",
                "UpdatingClaims: 3 claims not compatible with the volume claim templates yet",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "growing: converged, one claim resizing",
            objects: objects(
                converged.clone(),
                vec![grown(0), grown(1), resizing(claim("web", 2, "2Gi", "1Gi"))],
            ),
            drops_classes: false,
            judge: (Outcome::Progressing, "UpdatingClaims"),
            argocd: Some((
                "Progressing",
                "UpdatingClaims: 1 claim not compatible with the volume claim templates yet",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "waiting for a restart: the file system grows offline",
            objects: objects(
                converged.clone(),
                vec![
                    grown(0),
                    grown(1),
                    waits_for_restart(claim("web", 2, "2Gi", "1Gi")),
                ],
            ),
            drops_classes: false,
            judge: (Outcome::Progressing, "UpdatingClaims"),
            argocd: Some((
                "Progressing",
                "UpdatingClaims: 1 claim not compatible with the volume claim templates yet (1 waiting for its pod to be re-created)",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "waiting for a restart: pod evicted, or its eviction refused by a PodDisruptionBudget",
            objects: {
                let mut o = objects(
                    converged.clone(),
                    vec![grown(0), grown(1), evicted(claim("web", 2, "2Gi", "1Gi"))],
                );
                o.push(event(
                    "PodEvictionRefused",
                    "Warning",
                    "StatefulSet",
                    "web",
                    "uid-web",
                    "the eviction of pod web-2 for a resize was refused: Cannot evict pod as it would violate the pod's disruption budget.",
                    590,
                ));
                o
            },
            drops_classes: false,
            judge: (Outcome::Progressing, "UpdatingClaims"),
            argocd: Some((
                "Progressing",
                "UpdatingClaims: 1 claim not compatible with the volume claim templates yet (1 with its pod restarting)",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "stuck: the resize did not finish after its restart, past the progress deadline",
            objects: objects(
                stalled(converged.clone(), &this_rollout),
                vec![grown(0), grown(1), evicted(claim("web", 2, "2Gi", "1Gi"))],
            ),
            drops_classes: false,
            judge: (Outcome::Failed, "ProgressDeadlineExceeded"),
            argocd: Some((
                "Degraded",
                "ProgressDeadlineExceeded: progress deadline exceeded: no progress for 600s: updating volume claims: 1 still updating",
            )),
            flux: Some("Failed"),
            beyond_the_set: None,
        },
        Case {
            name: "stuck: a recorded change that made no progress for its deadline",
            objects: objects(
                stalled(recorded.clone(), &rollout_key(1, Some(&desired))),
                claims("web", "2Gi", "1Gi"),
            ),
            drops_classes: false,
            judge: (Outcome::Failed, "ProgressDeadlineExceeded"),
            argocd: Some((
                "Degraded",
                "ProgressDeadlineExceeded: progress deadline exceeded: no progress for 600s: updating volume claims: 1 still updating",
            )),
            flux: Some("Failed"),
            beyond_the_set: None,
        },
        Case {
            name: "a stall of an earlier rollout says nothing of this one",
            objects: objects(
                stalled(converged.clone(), "0"),
                vec![grown(0), grown(1), resizing(claim("web", 2, "2Gi", "1Gi"))],
            ),
            drops_classes: false,
            judge: (Outcome::Progressing, "UpdatingClaims"),
            argocd: Some((
                "Progressing",
                "UpdatingClaims: 1 claim not compatible with the volume claim templates yet",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "refused: the resize of a claim failed",
            objects: objects(converged.clone(), vec![grown(0), grown(1), resize_error]),
            drops_classes: false,
            judge: (Outcome::Failed, "ClaimResizeFailed"),
            argocd: Some((
                "Degraded",
                "ClaimResizeFailed: the resize or modification of 1 claim of template data failed (stateful-admission status -n db web names them)",
            )),
            flux: Some("Failed"),
            beyond_the_set: None,
        },
        Case {
            name: "refused: the claims' class does not allow expansion",
            objects: {
                let mut o = vec![converged.clone(), class("fast", false)];
                o.extend(claims("web", "1Gi", "1Gi"));
                o
            },
            drops_classes: false,
            judge: (Outcome::Failed, "ClaimIncompatible"),
            argocd: Some((
                "Degraded",
                "ClaimIncompatible: 3 claims of template data cannot follow it in place (stateful-admission status -n db web names them)",
            )),
            flux: Some("Failed"),
            beyond_the_set: None,
        },
        Case {
            name: "refused: the controller does not apply the recorded templates",
            objects: objects(renamed, claims("web", "1Gi", "1Gi")),
            drops_classes: false,
            judge: (Outcome::Failed, "ConvergeRefused"),
            argocd: Some(("Progressing", CHANGE_RECORDED)),
            flux: Some("InProgress"),
            beyond_the_set: Some(
                "the webhook records only templates it allows, so this is an annotation edited by hand; the set does not say the controller refuses it (status checks the templates itself and reads the controller's Events)",
            ),
        },
        Case {
            name: "stuck: the convergence journal cannot be used",
            objects: {
                let mut o = objects(recorded.clone(), claims("web", "2Gi", "2Gi"));
                o.push(bad_journal);
                o
            },
            drops_classes: false,
            judge: (Outcome::Failed, "ConvergeStuck"),
            argocd: Some(("Progressing", CHANGE_RECORDED)),
            flux: Some("InProgress"),
            beyond_the_set: Some(
                "the journal is a ConfigMap of the controller's namespace, which a GitOps tool does not see; the controller keeps it for a human and warns",
            ),
        },
        Case {
            name: "done: the live object and every claim carry the templates",
            objects: objects(converged.clone(), claims("web", "2Gi", "2Gi")),
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some(("Healthy", COMPLETE)),
            flux: Some("Current"),
            beyond_the_set: None,
        },
        Case {
            name: "done: claims below the partition are held back",
            objects: objects(
                with(
                    converged.clone(),
                    "/spec/updateStrategy/rollingUpdate/partition",
                    json!(2),
                ),
                vec![
                    claim("web", 0, "1Gi", "1Gi"),
                    claim("web", 1, "1Gi", "1Gi"),
                    grown(2),
                ],
            ),
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some(("Healthy", COMPLETE)),
            flux: Some("Current"),
            beyond_the_set: None,
        },
        Case {
            name: "done: policy OnDelete patches no existing claim",
            objects: objects(set("web", "2Gi", None, None), claims("web", "1Gi", "1Gi")),
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some(("Healthy", COMPLETE)),
            flux: Some("Current"),
            beyond_the_set: None,
        },
        Case {
            name: "class the cluster drops: a recorded class change, everything else done",
            objects: objects(gold(converged.clone(), true), claims("web", "2Gi", "2Gi")),
            drops_classes: true,
            judge: (Outcome::Failed, "VolumeAttributesClassNotApplied"),
            argocd: Some((
                "Degraded",
                "VolumeAttributesClassNotApplied: template data: volumeAttributesClassName \"gold\" cannot be applied: the cluster drops a claim's volumeAttributesClassName (its VolumeAttributesClass feature gate is off); everything else of the rollout is done",
            )),
            flux: Some("Failed"),
            beyond_the_set: None,
        },
        Case {
            name: "class the cluster drops: claims still growing",
            objects: objects(
                gold(converged.clone(), true),
                vec![grown(0), grown(1), resizing(claim("web", 2, "2Gi", "1Gi"))],
            ),
            drops_classes: true,
            judge: (Outcome::Progressing, "UpdatingClaims"),
            argocd: Some((
                "Progressing",
                "UpdatingClaims: 1 claim not compatible with the volume claim templates yet",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "class the cluster drops: the template had it all along",
            objects: objects(gold(converged.clone(), false), claims("web", "2Gi", "2Gi")),
            drops_classes: true,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some(("Healthy", COMPLETE)),
            flux: Some("Current"),
            beyond_the_set: None,
        },
        Case {
            name: "storage failed while pods roll: Degraded wins",
            objects: objects(
                with(
                    with(converged.clone(), "/status/readyReplicas", json!(2)),
                    "/status/updateRevision",
                    json!("web-2"),
                ),
                vec![
                    grown(0),
                    grown(1),
                    with(
                        claim("web", 2, "2Gi", "1Gi"),
                        "/status/allocatedResourceStatuses",
                        json!({"storage": "NodeResizeInfeasible"}),
                    ),
                ],
            ),
            drops_classes: false,
            judge: (Outcome::Failed, "ClaimResizeFailed"),
            argocd: Some((
                "Degraded",
                "ClaimResizeFailed: the resize or modification of 1 claim of template data failed (stateful-admission status -n db web names them)",
            )),
            flux: Some("Failed"),
            beyond_the_set: None,
        },
        Case {
            name: "storage under way while pods are not ready: Argo CD's message",
            objects: objects(
                with(recorded.clone(), "/status/readyReplicas", json!(2)),
                claims("web", "1Gi", "1Gi"),
            ),
            drops_classes: false,
            judge: (Outcome::Progressing, "ChangeRecorded"),
            argocd: Some(("Progressing", "Waiting for 1 pods to be ready...")),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        // Argo CD's own StatefulSet cases, on a set without a storage rollout.
        Case {
            name: "built-in: status not observed yet",
            objects: vec![without(no_storage.clone(), "/status/observedGeneration")],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some((
                "Progressing",
                "Waiting for statefulset spec update to be observed...",
            )),
            flux: Some("Current"),
            beyond_the_set: None,
        },
        Case {
            name: "built-in: a newer generation not observed yet",
            objects: vec![with(no_storage.clone(), "/metadata/generation", json!(2))],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some((
                "Progressing",
                "Waiting for statefulset spec update to be observed...",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "built-in: pods not ready",
            objects: vec![with(no_storage.clone(), "/status/readyReplicas", json!(1))],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some(("Progressing", "Waiting for 2 pods to be ready...")),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "built-in: partitioned roll out under way",
            objects: vec![with(
                with(
                    no_storage.clone(),
                    "/spec/updateStrategy/rollingUpdate/partition",
                    json!(1),
                ),
                "/status/updatedReplicas",
                json!(1),
            )],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some((
                "Progressing",
                "Waiting for partitioned roll out to finish: 1 out of 2 new pods have been updated...",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "built-in: partitioned roll out complete",
            objects: vec![with(
                with(
                    no_storage.clone(),
                    "/spec/updateStrategy/rollingUpdate/partition",
                    json!(1),
                ),
                "/status/updatedReplicas",
                json!(2),
            )],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some((
                "Healthy",
                "partitioned roll out complete: 2 new pods have been updated...",
            )),
            flux: Some("Current"),
            beyond_the_set: None,
        },
        Case {
            name: "built-in: OnDelete",
            objects: vec![with(
                with(
                    no_storage.clone(),
                    "/spec/updateStrategy",
                    json!({"type": "OnDelete"}),
                ),
                "/status/updateRevision",
                json!("web-2"),
            )],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some(("Healthy", "statefulset has 3 ready pods")),
            flux: Some("Current"),
            beyond_the_set: None,
        },
        Case {
            name: "built-in: rolling update under way",
            objects: vec![with(
                with(
                    with(
                        no_storage.clone(),
                        "/spec/updateStrategy",
                        json!({"type": "RollingUpdate"}),
                    ),
                    "/status/updateRevision",
                    json!("web-2"),
                ),
                "/status/updatedReplicas",
                json!(1),
            )],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some((
                "Progressing",
                "waiting for statefulset rolling update to complete 1 pods at revision web-2...",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "built-in: rolling update complete",
            objects: vec![with(
                no_storage.clone(),
                "/spec/updateStrategy",
                json!({"type": "RollingUpdate"}),
            )],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some((
                "Healthy",
                "statefulset rolling update complete 3 pods at revision web-1...",
            )),
            flux: Some("Current"),
            beyond_the_set: None,
        },
        Case {
            name: "built-in: no replicas given",
            objects: vec![with(
                without(no_storage.clone(), "/spec/replicas"),
                "/status/readyReplicas",
                json!(1),
            )],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some((
                "Healthy",
                "partitioned roll out complete: 3 new pods have been updated...",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
        Case {
            name: "built-in: scaling down",
            objects: vec![with(no_storage, "/spec/replicas", json!(2))],
            drops_classes: false,
            judge: (Outcome::Done, "RolloutComplete"),
            argocd: Some((
                "Healthy",
                "partitioned roll out complete: 3 new pods have been updated...",
            )),
            flux: Some("InProgress"),
            beyond_the_set: None,
        },
    ]
}

/// The set as a GitOps tool sees it in `case` (as the controller leaves it), if there is one.
fn seen(case: &Case) -> Option<Value> {
    as_the_controller_leaves_it(&case.objects, case.drops_classes)
}

/// `set` without anything of ours: what Argo CD's and kstatus's own checks decide on.
fn without_ours(set: &Value) -> Value {
    let mut set = set.clone();
    if let Some(Value::Object(a)) = set.pointer_mut("/metadata/annotations") {
        a.retain(|k, _| !k.starts_with(names::PREFIX));
    }
    set
}

#[test]
fn one_table_the_judge_argocd_and_flux_agree() {
    let mut failures = Vec::new();
    for case in cases() {
        let mut objects = case.objects.clone();
        if let Some(set) = seen(&case) {
            // `status` reads the claim status the controller wrote too (classes it drops).
            objects.retain(|o| !(o["kind"] == "StatefulSet" && o["metadata"]["name"] == "web"));
            objects.push(set);
        }
        let report = report_of(&inputs(&objects), Some("web"), &[]);
        let Some(row) = report.items.iter().find(|s| s.name == "web") else {
            failures.push(format!("{}: no row in {report:#?}", case.name));
            continue;
        };
        let judged = (row.verdict.result, row.verdict.reason.as_str());
        if judged != case.judge {
            failures.push(format!(
                "{}: status says {judged:?} ({}), the table {:?}",
                case.name, row.verdict.message, case.judge
            ));
        }
        let set = seen(&case);
        let argo = set.as_ref().map(argocd);
        let flux = set.as_ref().map(flux);
        let argo_seen = argo.as_ref().map(|(s, m)| (s.as_str(), m.as_str()));
        if argo_seen != case.argocd {
            failures.push(format!(
                "{}: Argo CD says {argo_seen:?}, the table {:?}",
                case.name, case.argocd
            ));
        }
        if flux != case.flux {
            failures.push(format!(
                "{}: Flux says {flux:?}, the table {:?}",
                case.name, case.flux
            ));
        }
        // The agreement itself: Failed is Degraded and Failed; under way is Progressing and
        // InProgress; done leaves the set to Argo CD's and kstatus's own rules.
        let (Some(set), Some((argo, _)), Some(flux)) = (&set, &argo, flux) else {
            continue;
        };
        let own = without_ours(set);
        let expected = match case.judge.0 {
            Outcome::Failed => ("Degraded".to_owned(), "Failed"),
            Outcome::Progressing => ("Progressing".to_owned(), "InProgress"),
            Outcome::Done | Outcome::NotFound => (argocd(&own).0, self::flux(&own)),
        };
        let agrees = (argo.as_str(), flux) == (expected.0.as_str(), expected.1);
        if agrees == case.beyond_the_set.is_some() {
            failures.push(format!(
                "{}: status {:?}, Argo CD {argo}, Flux {flux}: {}",
                case.name,
                case.judge,
                case.beyond_the_set.map_or_else(
                    || "they disagree".to_owned(),
                    |why| format!("said to disagree ({why}) but they agree")
                )
            ));
        }
        // Where the check speaks for the storage rollout, it names `status`'s reason.
        if case.judge.0 != Outcome::Done
            && case.beyond_the_set.is_none()
            && let Some((_, message)) = &case.argocd
            && message.contains(": ")
            && !message.starts_with(case.judge.1)
            && !(case.judge.1 == "Converging" && message.starts_with("UpdatingClaims"))
            && !(case.judge.1 == "Converging" && message.starts_with("ChangeRecorded"))
        {
            failures.push(format!(
                "{}: Argo CD's message {message:?} does not name {}",
                case.name, case.judge.1
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn without_the_string_library_the_check_names_the_argocd_cm_key_it_needs() {
    // What Argo CD runs a customization with by default (no useOpenLibs): no string library.
    let lua = Lua::new_with(StdLib::TABLE, LuaOptions::default()).expect("lua");
    let set = seen(&cases()[0]).expect("a set");
    lua.globals()
        .set("obj", lua_value(&lua, &set).expect("value"))
        .expect("obj");
    let failed = lua
        .load(ARGOCD_HEALTH_LUA)
        .eval::<mlua::Table>()
        .expect_err("the string library is needed for the JSON annotations");
    assert!(
        failed
            .to_string()
            .contains("resource.customizations.useOpenLibs.apps_StatefulSet"),
        "{failed}"
    );
    // No os, io or math: those calls would fail in the table's run above.
    for library in ["os.", "io.", "math.", "require", "load("] {
        assert!(
            !ARGOCD_HEALTH_LUA.contains(library),
            "the check uses {library}"
        );
    }
}

#[test]
fn the_check_names_a_rollout_as_the_controller_does() {
    // The FNV-1a the controller keys its progress record with, on texts of every length a
    // limb boundary can fall on, and on bytes above 0x7f.
    let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING, LuaOptions::default()).expect("lua");
    let script = ARGOCD_HEALTH_LUA
        .split("local function count(")
        .next()
        .expect("the script's helpers");
    let hash: mlua::Function = lua
        .load(format!("{script}\nreturn fnv1a64"))
        .eval()
        .expect("fnv1a64");
    for text in [
        String::new(),
        "a".into(),
        "[{\"metadata\":{\"name\":\"data\"}}]".into(),
        "ä€😀".into(),
        "x".repeat(1000),
    ] {
        let key = rollout_key(7, Some(&text));
        let lua_key: String = hash.call::<String>(text.as_str()).expect("hash");
        assert_eq!(format!("7/{lua_key}"), key, "{text:?}");
    }
}

#[test]
fn the_check_reads_json_as_json() {
    let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING, LuaOptions::default()).expect("lua");
    let script = ARGOCD_HEALTH_LUA
        .split("-- FNV-1a")
        .next()
        .expect("the decoder");
    let decode: mlua::Function = lua
        .load(format!("{script}\nreturn decode"))
        .eval()
        .expect("decode");
    let probe: mlua::Function = lua
        .load(
            r#"return function(decode, text)
                 local v = decode(text)
                 if v == nil then return "nil" end
                 return v[1].name .. "|" .. v[1].n .. "|" .. tostring(v[1].b) .. "|" .. #v
               end"#,
        )
        .eval()
        .expect("probe");
    let run = |text: &str| -> String {
        probe
            .call::<String>((decode.clone(), text))
            .expect("decode")
    };
    assert_eq!(
        run(r#" [ {"name":"d\"a\\t\u00e4\n","n":-12.5e1,"b":false,"x":null,"y":[]} , {} ] "#),
        "d\"a\\t\u{e4}\n|-125|false|2"
    );
    for bad in ["", "[", "[1,]", "{\"a\" 1}", "[1] x", "\"open", "nope"] {
        assert_eq!(run(bad), "nil", "{bad:?}");
    }
}

/// The Argo CD test data this table makes: `testdata/<case>.yaml` and `health_test.yaml`.
fn argocd_testdata() -> BTreeMap<PathBuf, String> {
    let mut files = BTreeMap::new();
    let mut tests = String::from(
        "# Made from the table of cases in src/gitops/tests.rs (the same cases run there against\n\
         # `stateful-admission status` and the Flux expressions).\ntests:\n",
    );
    for case in cases() {
        let (Some(set), Some((status, message))) = (seen(&case), case.argocd) else {
            continue;
        };
        let file: String = case
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect::<String>()
            .split('-')
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        let input = format!("testdata/{file}.yaml");
        let yaml = serde_saphyr::to_string(&set).expect("yaml");
        files.insert(PathBuf::from(&input), format!("# {}\n{yaml}", case.name));
        tests.push_str(&format!(
            "  - healthStatus:\n      status: {status}\n      message: {}\n    inputPath: {input}\n",
            serde_json::to_string(message).expect("a string")
        ));
    }
    files.insert(PathBuf::from("health_test.yaml"), tests);
    files
}

#[test]
fn argocd_testdata_is_the_table() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(ARGOCD_DIR);
    let files = argocd_testdata();
    if std::env::var_os("STATEFUL_ADMISSION_WRITE_GITOPS_TESTDATA").is_some() {
        let _ = std::fs::remove_dir_all(dir.join("testdata"));
        std::fs::create_dir_all(dir.join("testdata")).expect("testdata");
        for (path, text) in &files {
            std::fs::write(dir.join(path), text).expect("write");
        }
    }
    let on_disk: Vec<PathBuf> = std::fs::read_dir(dir.join("testdata"))
        .expect("testdata")
        .filter_map(Result::ok)
        .map(|e| PathBuf::from("testdata").join(e.file_name()))
        .collect();
    for path in on_disk {
        assert!(
            files.contains_key(&path),
            "{} is in no case of the table",
            path.display()
        );
    }
    for (path, text) in &files {
        let found = std::fs::read_to_string(dir.join(path)).unwrap_or_default();
        assert!(
            found == *text,
            "{} differs from the table; STATEFUL_ADMISSION_WRITE_GITOPS_TESTDATA=1 cargo test --lib gitops writes it",
            path.display()
        );
    }
}

#[test]
fn snippets_carry_the_checks_verbatim() {
    use super::{Snippet, render};
    let cm: Value = serde_saphyr::from_str(&render(Snippet::ArgocdCm)).expect("argocd-cm");
    assert_eq!(
        cm["data"]["resource.customizations.health.apps_StatefulSet"]
            .as_str()
            .map(str::trim_end),
        Some(ARGOCD_HEALTH_LUA.trim_end())
    );
    assert_eq!(
        cm["data"]["resource.customizations.useOpenLibs.apps_StatefulSet"],
        "true"
    );
    let values: Value =
        serde_saphyr::from_str(&render(Snippet::ArgocdValues)).expect("Helm values");
    assert_eq!(values["configs"]["cm"], cm["data"]);
    assert_eq!(render(Snippet::ArgocdLua), ARGOCD_HEALTH_LUA);
    let flux: Value = serde_saphyr::from_str(&render(Snippet::Flux)).expect("flux");
    let shipped: Value = serde_saphyr::from_str(FLUX_HEALTH_CHECK_EXPRS).expect("flux file");
    assert_eq!(flux["spec"]["healthCheckExprs"], shipped);
    assert_eq!(flux["spec"]["wait"], true);
}
