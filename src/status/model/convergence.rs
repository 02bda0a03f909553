//! A set's convergence (from its journal and the live set) and its maxUnavailable driver (from
//! its batch note and Events).

use super::*;
use events::event_time;
use history::main_resource;

/// The convergence step the controller takes next, from the live set and its journal, and
/// (with `now`) how long its orphan delete has waited for the garbage collector.
pub(super) fn convergence(
    set: Option<&StatefulSet>,
    journal: Option<&ConfigMap>,
    inputs: &Inputs,
    selection: &Selection,
    (namespace, name): (&str, &str),
    now: Option<Timestamp>,
) -> Convergence {
    let journal_ref = journal.map(|_| {
        format!(
            "{}/{}",
            selection.controller_namespace,
            journal_name(namespace, name)
        )
    });
    let journal_step = journal
        .and_then(|j| j.metadata.annotations.as_ref())
        .and_then(|a| a.get(names::JOURNAL_STEP))
        .cloned();
    let wants = set
        .and_then(|s| s.metadata.annotations.as_ref())
        .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
    let deleting = set.is_some_and(|s| s.metadata.deletion_timestamp.is_some());
    if let Some(why) = &inputs.journals.unreadable {
        // Judged from the set alone.
        let phase = match set {
            None => ConvergencePhase::Unknown,
            Some(_) if deleting => ConvergencePhase::Deleting,
            Some(_) if wants => ConvergencePhase::Pending,
            Some(_) => ConvergencePhase::None,
        };
        return Convergence {
            phase,
            journal: None,
            journal_step: None,
            message: (phase != ConvergencePhase::None)
                .then(|| format!("journals cannot be read: {why}")),
            garbage_collector_wait_seconds: None,
        };
    }
    if set.is_none() && journal.is_none() {
        return Convergence {
            phase: ConvergencePhase::Unknown,
            journal: None,
            journal_step: None,
            message: None,
            garbage_collector_wait_seconds: None,
        };
    }
    let live = set.map(live_facts);
    let read = journal.map(converge::read);
    // The controller's own measure of the wait, and its words.
    let orphan_wait = match (&live, &read, now) {
        (Some(live), Some(Ok(journal)), Some(now)) => converge::orphan_wait(live, journal, now)
            .map(|waited| {
                (
                    waited.as_secs(),
                    converge::orphan_wait_note(namespace, name, &live.uid, waited),
                )
            }),
        _ => None,
    };
    let (phase, message) = match converge::next(live.as_ref(), read.as_ref(), true) {
        converge::Step::Nothing => (ConvergencePhase::None, None),
        converge::Step::Start => (ConvergencePhase::Pending, None),
        converge::Step::MarkDeleting => (ConvergencePhase::Journaled, None),
        converge::Step::Delete { .. } | converge::Step::WaitGone => (
            ConvergencePhase::Deleting,
            orphan_wait.as_ref().map(|(_, note)| note.clone()),
        ),
        converge::Step::Recheck => (ConvergencePhase::Rechecking, None),
        converge::Step::Create => (ConvergencePhase::Recreating, None),
        converge::Step::Restore { .. } => (ConvergencePhase::RestoringOwnership, None),
        converge::Step::Drop(converge::DropReason::Finished) => (ConvergencePhase::Finishing, None),
        converge::Step::Drop(converge::DropReason::Replaced) => (
            ConvergencePhase::Abandoned,
            Some(
                "another StatefulSet of this name was created meanwhile; it is left alone"
                    .to_owned(),
            ),
        ),
        converge::Step::Drop(converge::DropReason::DeletedByUser) => (
            ConvergencePhase::Abandoned,
            Some("the StatefulSet was deleted by someone else; it is not created again".to_owned()),
        ),
        converge::Step::Stuck(why) => (
            ConvergencePhase::Stuck,
            Some(format!(
                "journal ConfigMap {} cannot be used ({why}); it is kept: inspect it, then delete it",
                journal_ref.as_deref().unwrap_or_default()
            )),
        ),
    };
    Convergence {
        garbage_collector_wait_seconds: (phase == ConvergencePhase::Deleting)
            .then(|| orphan_wait.map(|(seconds, _)| seconds))
            .flatten(),
        phase,
        journal: journal_ref,
        journal_step,
        message,
    }
}

/// The live set as the convergence state machine sees it (as the controller reads it).
fn live_facts(set: &StatefulSet) -> converge::LiveSet {
    converge::LiveSet {
        uid: set.metadata.uid.clone().unwrap_or_default(),
        resource_version: set.metadata.resource_version.clone().unwrap_or_default(),
        deleting: set.metadata.deletion_timestamp.is_some(),
        wants: set
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(names::DESIRED_VOLUME_CLAIM_TEMPLATES)),
        templates: set
            .spec
            .volume_claim_templates
            .iter()
            .flatten()
            .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
            .collect(),
        managers: set
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| main_resource(e))
            .map(|e| e.manager.clone().unwrap_or_default())
            .collect(),
        deleting_since: set.metadata.deletion_timestamp.as_ref().map(|t| t.0),
        orphaning: set
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == converge::ORPHAN_FINALIZER),
    }
}

pub(super) fn max_unavailable_of(
    set: &StatefulSet,
    events: &EventIndex<'_>,
) -> Option<MaxUnavailable> {
    let rollout = max_unavailable::rollout(set).ok()?;
    let value = match rollout.source {
        max_unavailable::Source::Native => set
            .spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.max_unavailable.as_ref())
            .map(|v| match v {
                IntOrString::Int(i) => i.to_string(),
                IntOrString::String(s) => s.clone(),
            }),
        max_unavailable::Source::Annotation => set
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::MAX_UNAVAILABLE))
            .cloned(),
    }
    .unwrap_or_default();
    let status = set.status.as_ref();
    let batch = events.last_batch(
        set.metadata.namespace.as_deref().unwrap_or_default(),
        set.metadata.name.as_deref().unwrap_or_default(),
        set.metadata.uid.as_deref(),
    );
    let rolling_out = status.is_some_and(|s| s.current_revision != s.update_revision);
    let update_revision = status.and_then(|s| s.update_revision.as_deref());
    let current_batch = batch
        .and_then(|e| e.note.as_deref())
        .and_then(max_unavailable::read_batch_note)
        .filter(|b| rolling_out && Some(b.update_revision.as_str()) == update_revision)
        .map(|b| u32::try_from(b.pods).unwrap_or(u32::MAX));
    Some(MaxUnavailable {
        value,
        source: match rollout.source {
            max_unavailable::Source::Native => "native",
            max_unavailable::Source::Annotation => "annotation",
        }
        .to_owned(),
        budget: i64::try_from(rollout.max_unavailable).unwrap_or(i64::MAX),
        unavailable: status.map_or(0, |s| {
            (i64::from(s.replicas) - i64::from(s.available_replicas.unwrap_or(0))).max(0)
        }),
        updated_replicas: status.and_then(|s| s.updated_replicas).map_or(0, i64::from),
        rolling_out,
        batch: current_batch,
        last_batch: batch.map(|e| e.note.clone().unwrap_or_default()),
        last_batch_time: batch.and_then(event_time).map(format_time),
    })
}
