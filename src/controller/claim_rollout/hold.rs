//! The coordinated rollout's controller half ([`crate::rollout::hold`]): the facts of each
//! replica from the snapshot, and the hold's next step as a write of the set's annotation
//! (the webhook moves the partition in that same request) with its Event.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};

use crate::controller::action::{self, Action, Kind, Report, Request, Target, Verb, Write};
use crate::controller::context::{Ctx, Error};
use crate::controller::executor::Ran;
use crate::controller::snapshot::SetSnapshot;
use crate::names;
pub(crate) use crate::rollout::hold::*;
use crate::rollout::restart;

/// While the partition is not the one the hold asks for, the annotation is written again
/// this often: the webhook applies it in that request.
const NOT_APPLIED_RECHECK: Duration = Duration::from_secs(30);

/// Each replica's facts, in the set's order, against the desired `templates`.
pub(crate) fn replicas(
    snapshot: &SetSnapshot,
    templates: &[PersistentVolumeClaim],
    now: Timestamp,
) -> Vec<Replica> {
    replicas_of(
        snapshot.set.as_ref(),
        &snapshot.ordinals,
        |ordinal| snapshot.pod(ordinal),
        |template, ordinal| {
            snapshot
                .claims
                .iter()
                .find(|(t, n, _)| t == template && *n == ordinal)
                .and_then(|(_, _, c)| c.as_deref())
        },
        templates,
        now,
    )
}

/// The hold's step for `snapshot` (whose pods' partition is `partition`; `in_place`: its
/// claims follow in place), carried out; returns when to look again.
pub(crate) async fn step(
    snapshot: &SetSnapshot,
    ctx: &Ctx,
    templates: &[PersistentVolumeClaim],
    hold: Result<Hold, String>,
    partition: i32,
    in_place: bool,
) -> Result<Option<Duration>, Error> {
    // A write of ours to the set the view has not shown yet: decided again once it has.
    if snapshot.is_stale(&ctx.exec, Kind::StatefulSet) {
        return Ok(None);
    }
    let set = snapshot.set.as_ref();
    let step = match hold {
        // The claims no longer follow in place: nothing to coordinate.
        Ok(_) if !in_place => Step::Release,
        Ok(hold) => next(
            &hold,
            partition,
            restart::observed(set),
            &replicas(snapshot, templates, Timestamp::now()),
        ),
        Err(why) => Step::Discard { why },
    };
    let (value, reason, note, recheck) = match &step {
        Step::Wait(Waiting::PartitionNotApplied { want, have }) => {
            let Some(Ok(hold)) = Hold::of(set.metadata.annotations.as_ref()) else {
                return Ok(None);
            };
            (
                Value::String(hold.render()),
                "RolloutHoldNotApplied",
                format!(
                    "the rolling update should be held at partition {want} but is at {have}: the webhook did not apply it; written again every {}s",
                    NOT_APPLIED_RECHECK.as_secs()
                ),
                Some(NOT_APPLIED_RECHECK),
            )
        }
        Step::Wait(_) => return Ok(None),
        Step::Lower { to, ordinal } => {
            let Some(Ok(hold)) = Hold::of(set.metadata.annotations.as_ref()) else {
                return Ok(None);
            };
            let lowered = Hold {
                partition: *to,
                ..hold
            };
            (
                Value::String(lowered.render()),
                "CoordinatedRolloutStep",
                format!(
                    "the claims of pod {}-{ordinal} are patched; the rolling update goes on to partition {}: the StatefulSet controller re-creates the pod, which is also the restart its claims' file systems wait for",
                    snapshot.name,
                    lowered.effective()
                ),
                None,
            )
        }
        Step::Release => (
            Value::Null,
            "CoordinatedRolloutComplete",
            "every replica above the partition re-created once, after its claims; the rolling update's partition is the user's again".to_owned(),
            None,
        ),
        Step::Discard { why } => (
            Value::Null,
            "RolloutHoldInvalid",
            format!(
                "annotation {} removed: {}; the rolling update is not held",
                names::ROLLOUT_HOLD,
                crate::text::clip(why, 200)
            ),
            None,
        ),
    };
    let set_ref = action::reference_of(Kind::StatefulSet, &set.metadata);
    // What did not go as planned (only the unapplied partition among the waits gets here).
    let report = if matches!(step, Step::Wait(_) | Step::Discard { .. }) {
        Report::warning(set_ref, reason, Verb::HoldRollout.as_str(), note.clone())
            .once(format!("{reason}/{}/{partition}", snapshot.namespace))
    } else {
        Report::normal(set_ref, reason, Verb::HoldRollout.as_str(), note.clone())
    };
    let mut write = Write::new(
        Verb::HoldRollout,
        Target {
            uid: set.metadata.uid.clone(),
            ..Target::new(Kind::StatefulSet, &snapshot.namespace, &snapshot.name)
        },
        Request::Patch(json!({"metadata": {"annotations": {names::ROLLOUT_HOLD: value}}})),
        note,
    )
    .expect()
    .expected(&[404, 409])
    .on_done(report);
    if let Some(version) = &set.metadata.resource_version {
        write.precondition(version);
    }
    for ran in ctx.exec.run(&[Action::Write(write)]).await {
        if let Ran::Written(Err(e)) = ran
            && !matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 409)
        {
            return Err(Error::Kube(e));
        }
    }
    Ok(recheck)
}
