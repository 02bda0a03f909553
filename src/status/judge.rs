//! Whether a storage rollout is done, failed or under way, from the model alone (pure).
//!
//! Done means the recorded templates are on the live object and on every claim the
//! controller will patch on its own:
//! - no convergence in flight: no desired-templates annotation (the webhook writes it
//!   synchronously, so right after `helm upgrade` returns a recorded change is "not done" even
//!   before the controller has acted) and no journal;
//! - policy `InPlace`: every existing claim compatible with its template, except those the
//!   controller leaves alone by design — below a partition, or waiting for a pod you delete
//!   (`updateStrategy: OnDelete`) — as `kubectl rollout status` counts a partitioned rollout
//!   done; policy `OnDelete` (KEP-4650's default) patches no claim, so only the live object
//!   is awaited, and new or re-created claims get the templates from it.
//!
//! Failed means it will not get there without someone acting: a journal the controller cannot
//! use, recorded templates it refuses, an awaited claim whose resize or modification failed or
//! that cannot follow its template in place, or the `Progressing` condition past its deadline
//! for this very rollout. A failure is only looked for in a rollout that is not done: pods
//! are `kubectl rollout status`'s business once the storage is.

use std::time::Duration;

use jiff::Timestamp;

use super::model::{
    ClaimState, ClaimStatus, ConvergencePhase, Outcome, Presence, SetStatus, StatusReport, Verdict,
};

/// How long a set may be absent, without a journal saying it is being created again, before
/// it counts as not found: convergence deletes and creates it within seconds, and journals may
/// not be readable to the user.
pub(crate) const NOT_FOUND_GRACE: Duration = Duration::from_secs(30);

/// Claims named in a message at most.
const CLAIMS_NAMED: usize = 3;

fn verdict(result: Outcome, reason: &str, message: String) -> Verdict {
    Verdict {
        result,
        reason: reason.to_owned(),
        message,
    }
}

/// Judges every set of `report` (`grace`: how long an absent set is waited for).
pub(crate) fn judge_report(report: &mut StatusReport, now: Timestamp, grace: Duration) {
    for set in &mut report.items {
        set.verdict = judge(set, now, grace);
    }
}

/// The verdict on one set.
pub(crate) fn judge(set: &SetStatus, now: Timestamp, grace: Duration) -> Verdict {
    match set.presence {
        Presence::Absent => {
            let since = set
                .absent_since
                .as_deref()
                .and_then(|t| t.parse::<Timestamp>().ok())
                .unwrap_or(now);
            let gone = now.duration_since(since).unsigned_abs();
            return if gone >= grace {
                verdict(
                    Outcome::NotFound,
                    "NotFound",
                    "not found (no convergence journal says it is being created again)".to_owned(),
                )
            } else {
                verdict(
                    Outcome::Progressing,
                    "Absent",
                    "not found: waiting for it to be created again by its convergence".to_owned(),
                )
            };
        }
        Presence::Recreating => {
            return verdict(
                Outcome::Progressing,
                "Converging",
                format!(
                    "convergence: {} from journal {}",
                    set.convergence.phase.as_str(),
                    set.convergence.journal.as_deref().unwrap_or_default()
                ),
            );
        }
        Presence::Present => {}
    }
    let c = &set.claims;
    let open = c.updating
        + c.pending
        + c.waiting
        + c.incompatible
        + c.failed
        + c.waiting_for_restart
        + c.restarting;
    let converged = set.convergence.phase == ConvergencePhase::None;
    if converged && (!set.claims_awaited || open == 0) {
        // Everything else is done: a recorded class change the cluster cannot apply has
        // failed (it never will be applied as things are); a class the template had all along
        // is said, not awaited.
        if let Some((template, class)) = set
            .classes_not_applied()
            .into_iter()
            .find(|(_, c)| c.changed)
        {
            return verdict(
                Outcome::Failed,
                "VolumeAttributesClassNotApplied",
                format!(
                    "template {template}: volumeAttributesClassName {:?} cannot be applied: {}; everything else of the rollout is done",
                    class.name, class.reason
                ),
            );
        }
        return verdict(Outcome::Done, "RolloutComplete", done_message(set));
    }
    if let Some(failed) = failure(set) {
        return failed;
    }
    if !converged {
        return converging(set);
    }
    verdict(
        Outcome::Progressing,
        "UpdatingClaims",
        format!(
            "{} of {} claims compatible; {}",
            c.compatible,
            awaited(c),
            open_claims(set)
        ),
    )
}

fn done_message(set: &SetStatus) -> String {
    let c = &set.claims;
    let mut text = if set.claims_awaited {
        format!(
            "storage rollout complete: the live object and {} of {} claims carry the recorded templates",
            c.compatible,
            awaited(c)
        )
    } else {
        format!(
            "storage rollout complete: the live object carries the recorded templates; policy OnDelete patches no existing claim ({} of {} compatible), new and re-created claims get the templates",
            c.compatible, c.total
        )
    };
    if set.claims_awaited && c.held > 0 {
        text.push_str(&format!(
            "; {} held back by the update strategy (not awaited)",
            c.held
        ));
    }
    if c.provisioning > 0 {
        text.push_str(&format!(
            "; {} not bound yet, asking for the template's size",
            c.provisioning
        ));
    }
    for (template, class) in set.classes_not_applied() {
        text.push_str(&format!(
            "; template {template}'s volumeAttributesClassName {:?} is not on its claims: {}",
            class.name, class.reason
        ));
    }
    text
}

/// The claims `--wait` waits for: all but those held back and those still provisioning.
fn awaited(c: &super::model::ClaimCounts) -> u32 {
    c.total - c.held - c.provisioning
}

fn failure(set: &SetStatus) -> Option<Verdict> {
    if set.convergence.phase == ConvergencePhase::Stuck {
        return Some(verdict(
            Outcome::Failed,
            "ConvergeStuck",
            set.convergence.message.clone().unwrap_or_default(),
        ));
    }
    if let Some(why) = set
        .desired_templates_error
        .as_ref()
        .or(set.refusal.as_ref())
    {
        return Some(verdict(
            Outcome::Failed,
            "ConvergeRefused",
            format!("the controller does not apply the recorded templates: {why}"),
        ));
    }
    if set.claims_awaited {
        for (state, reason) in [
            (ClaimState::Failed, "ClaimResizeFailed"),
            (ClaimState::Incompatible, "ClaimIncompatible"),
        ] {
            if let Some(claim) = set.claim_list.iter().find(|c| c.state == state) {
                return Some(verdict(
                    Outcome::Failed,
                    reason,
                    format!(
                        "claim {}: {}",
                        claim.name,
                        claim.message.as_deref().unwrap_or_default()
                    ),
                ));
            }
        }
    }
    if set.progress_deadline_exceeded {
        let message = set
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .map(|c| c.message.clone())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "no progress within the progress deadline".to_owned());
        return Some(verdict(
            Outcome::Failed,
            "ProgressDeadlineExceeded",
            format!("progress deadline exceeded: {message}"),
        ));
    }
    None
}

fn converging(set: &SetStatus) -> Verdict {
    let conv = &set.convergence;
    if conv.phase == ConvergencePhase::Pending {
        let what = change_summary(set);
        let mut text = format!(
            "change recorded{what}; waiting for the controller to journal it and re-create the StatefulSet with it"
        );
        if let Some(note) = &conv.message {
            text.push_str(&format!(" ({note})"));
        }
        return verdict(Outcome::Progressing, "ChangeRecorded", text);
    }
    let mut text = format!("convergence: {}", conv.phase.as_str());
    if let Some(journal) = &conv.journal {
        text.push_str(&format!(" (journal {journal}"));
        if let Some(step) = &conv.journal_step {
            text.push_str(&format!(", step {step}"));
        }
        text.push(')');
    }
    if let Some(note) = &conv.message {
        text.push_str(&format!(": {note}"));
    }
    verdict(Outcome::Progressing, "Converging", text)
}

fn change_summary(set: &SetStatus) -> String {
    let text = super::render::change_text(&set.changes);
    if text.is_empty() {
        String::new()
    } else {
        format!(" ({text})")
    }
}

/// The awaited claims that are not compatible yet, the first few by name.
fn open_claims(set: &SetStatus) -> String {
    let open: Vec<&ClaimStatus> = set
        .claim_list
        .iter()
        .filter(|c| {
            matches!(
                c.state,
                ClaimState::Updating
                    | ClaimState::Pending
                    | ClaimState::Waiting
                    | ClaimState::WaitingForRestart
                    | ClaimState::Restarting
            )
        })
        .collect();
    let mut parts: Vec<String> = open
        .iter()
        .take(CLAIMS_NAMED)
        .map(|c| {
            let state = match c.state {
                ClaimState::Updating => "updating",
                ClaimState::Pending => "to be patched",
                ClaimState::WaitingForRestart => "waiting for a restart",
                ClaimState::Restarting => "restarting",
                _ => "waiting",
            };
            let detail = match c.state {
                ClaimState::Updating => c
                    .conditions
                    .iter()
                    .filter(|k| k.status == "True")
                    .map(|k| k.type_.clone())
                    .chain(c.allocated_resource_statuses.values().cloned())
                    .next()
                    .or_else(|| Some(format!("{} of {}", show(&c.capacity), show(&c.request)))),
                _ => c.message.clone(),
            };
            match detail {
                Some(d) => format!("{} {state} ({d})", c.name),
                None => format!("{} {state}", c.name),
            }
        })
        .collect();
    if open.len() > CLAIMS_NAMED {
        parts.push(format!("{} more", open.len() - CLAIMS_NAMED));
    }
    parts.join(", ")
}

fn show(q: &Option<String>) -> &str {
    q.as_deref().unwrap_or("unset")
}

/// What `--wait` makes of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitResult {
    /// Every set is done, and there is one: one line each.
    Done(Vec<String>),
    /// A set failed (exit 1): one line per failed set.
    Failed(Vec<String>),
    /// A set is not found (exit 2).
    NotFound(Vec<String>),
    Waiting,
}

/// `statefulset NAMESPACE/NAME: MESSAGE`.
pub(crate) fn line(set: &SetStatus) -> String {
    format!(
        "statefulset {}/{}: {}",
        set.namespace, set.name, set.verdict.message
    )
}

/// The outcome of a judged report for `--wait`: failures first, then sets not found, then
/// done when every set is. Nothing selected is not done: right after `helm upgrade` the set
/// may be away while it is created again, and a wrong namespace must not pass for done.
pub(crate) fn wait_result(report: &StatusReport) -> WaitResult {
    let with = |o: Outcome| -> Vec<String> {
        report
            .items
            .iter()
            .filter(|s| s.verdict.result == o)
            .map(line)
            .collect()
    };
    let failed = with(Outcome::Failed);
    if !failed.is_empty() {
        return WaitResult::Failed(failed);
    }
    let missing = with(Outcome::NotFound);
    if !missing.is_empty() {
        return WaitResult::NotFound(missing);
    }
    if !report.items.is_empty()
        && report
            .items
            .iter()
            .all(|s| s.verdict.result == Outcome::Done)
    {
        return WaitResult::Done(with(Outcome::Done));
    }
    WaitResult::Waiting
}

/// One line per set not done when `--timeout` ran out, or one saying nothing was found in
/// `namespace` (`None`: every namespace).
pub(crate) fn timed_out(
    report: &StatusReport,
    after: Duration,
    namespace: Option<&str>,
) -> Vec<String> {
    let after = super::render::duration(after);
    if report.items.is_empty() {
        let place = match namespace {
            Some(ns) => format!("in namespace {ns}"),
            None => "in any namespace (-A)".to_owned(),
        };
        return vec![format!(
            "timed out after {after} waiting for a StatefulSet with a storage rollout: none found {place}"
        )];
    }
    report
        .items
        .iter()
        .filter(|s| s.verdict.result != Outcome::Done)
        .map(|s| format!("timed out after {after} waiting for {}", line(s)))
        .collect()
}

#[cfg(test)]
mod tests;
