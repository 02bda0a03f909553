//! A claim rollout plan as what the executor carries out: a patch per planned step (each with
//! its Events), a report of each claim that cannot follow its template, and the
//! `volume-claim-status` annotation where it changes.

use super::*;

/// What a rollout plan does: a patch per planned step (each with its Events), a report of
/// each claim that cannot follow its template, and the `volume-claim-status` annotation
/// where it changes (`write_status`: the set uses the feature and no journal is open).
pub(crate) fn rollout_actions(
    snapshot: &SetSnapshot,
    plan: &plan::Plan,
    write_status: bool,
) -> Vec<Action> {
    let set = snapshot.set.as_ref();
    let (ns, name) = (&snapshot.namespace, &snapshot.name);
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let set_ref = action::reference_of(Kind::StatefulSet, &set.metadata);
    let claim_of = |claim: &str| {
        snapshot
            .claims
            .iter()
            .find_map(|(t, n, c)| {
                (set_claims::claim_name(t, name, *n) == claim).then_some(c.clone())
            })
            .flatten()
    };
    let mut actions = Vec::with_capacity(plan.steps.len() + plan.incompatible.len() + 1);
    for step in &plan.steps {
        let changes = step.patch.changes.join(", ");
        let claim = claim_of(&step.claim);
        let claim_ref = claim
            .as_ref()
            .map(|c| action::reference_of(Kind::Claim, &c.metadata));
        let target = match &claim {
            Some(c) => Target::of(Kind::Claim, &c.metadata),
            None => Target::new(Kind::Claim, ns, &step.claim),
        };
        let done = format!(
            "patched claim {} to template {:?}: {changes}",
            step.claim, step.template
        );
        let failed = format!(
            "could not patch claim {} ({changes}): {{error}}; retrying",
            step.claim
        );
        let once = format!("{uid}/patch/{}/", step.claim);
        let mut write = Write::new(
            Verb::PatchClaim,
            target,
            Request::Patch(step.patch.body.clone()),
            format!(
                "patch claim {} to template {:?}: {changes}",
                step.claim, step.template
            ),
        )
        .about(set_ref.clone())
        .expect();
        if let Some(c) = &claim_ref {
            write = write
                .about(c.clone())
                .on_done(Report::normal(
                    c.clone(),
                    "VolumeClaimPatched",
                    "PatchClaim",
                    done.clone(),
                ))
                .on_failed(
                    Report::warning(
                        c.clone(),
                        "VolumeClaimPatchFailed",
                        "PatchClaim",
                        failed.clone(),
                    )
                    .once(format!("{once}claim/")),
                );
        }
        write = write
            .on_done(
                Report::normal(set_ref.clone(), "VolumeClaimPatched", "PatchClaim", done)
                    .related(claim_ref.clone()),
            )
            .on_failed(
                Report::warning(
                    set_ref.clone(),
                    "VolumeClaimPatchFailed",
                    "PatchClaim",
                    failed,
                )
                .related(claim_ref.clone())
                .once(once),
            );
        actions.push(Action::Write(write));
    }
    for bad in &plan.incompatible {
        let claim = claim_of(&bad.claim);
        let claim_uid = claim
            .as_ref()
            .and_then(|c| c.metadata.uid.clone())
            .unwrap_or_default();
        let claim_ref = claim
            .as_ref()
            .map(|c| action::reference_of(Kind::Claim, &c.metadata));
        let note = format!(
            "claim {} cannot follow volume claim template {:?} in place: {}",
            bad.claim, bad.template, bad.reason
        );
        let once = format!("{uid}/incompatible/{claim_uid}/{note}");
        if let Some(c) = &claim_ref {
            actions.push(Action::Report(
                Report::warning(
                    c.clone(),
                    "VolumeClaimIncompatible",
                    "RolloutClaims",
                    note.clone(),
                )
                .once(format!("{once}/claim")),
            ));
        }
        actions.push(Action::Report(
            Report::warning(
                set_ref.clone(),
                "VolumeClaimIncompatible",
                "RolloutClaims",
                note,
            )
            .related(claim_ref)
            .once(once),
        ));
    }
    let stored = annotations(set).and_then(|a| a.get(names::VOLUME_CLAIM_STATUS));
    if write_status && !status::unchanged(stored.map(String::as_str), &plan.status) {
        let was_updating = stored
            .and_then(|s| serde_json::from_str::<Vec<status::TemplateStatus>>(s).ok())
            .is_some_and(|s| s.iter().any(|t| t.updating > 0));
        let value = status::render(&plan.status);
        let body = json!({"metadata": {"annotations": {names::VOLUME_CLAIM_STATUS: &value}}});
        let mut write = Write::new(
            Verb::WriteClaimStatus,
            Target::of(Kind::StatefulSet, &set.metadata),
            Request::Patch(body),
            format!("set annotation {}: {value}", names::VOLUME_CLAIM_STATUS),
        );
        if was_updating && !plan.in_progress {
            write = write.on_done(Report::normal(
                set_ref,
                "VolumeClaimRolloutComplete",
                "RolloutClaims",
                "every claim is compatible with its volume claim template".to_owned(),
            ));
        }
        actions.push(Action::Write(write));
    }
    actions
}
