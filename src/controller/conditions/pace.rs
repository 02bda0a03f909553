//! What of a [`Decision`] goes to the API now: pure, from the decision, the set's conditions
//! and what this process knows of the set beyond the object.
//!
//! On a stock apiserver the built-in StatefulSet controller rebuilds `.status` on each of its
//! writes (`updateStatefulSetStatus`, pkg/controller/statefulset/stateful_set_control.go,
//! writes a status computed afresh, without conditions; see
//! tests/fixtures/apiserver-behaviour), so ours are gone after every one of them. Putting them
//! back each time would double the set's status writes under pod churn. Instead (KEP-2804 asks
//! for conditions that reflect the state, not for a write per status change):
//!
//! - **Content, not times.** Conditions are written when what they say — type, status,
//!   reason and message of `Available` and `Progressing` — differs from what a user last read
//!   from us. `lastTransitionTime` alone is never a reason.
//! - **What a user last read.** Ours on the set, where they are there. Where a status write
//!   removed them: what this process last wrote or found there — a condition the user cannot
//!   tell from that one is not put back; the set's status shows what moved. On a set this
//!   process never spoke about (first contact, a restart, a new leader): what a set whose
//!   status says its rollout is complete and every replica available says already
//!   (`Available=True`, `Progressing=True RolloutComplete`, [`Decision::steady`]). So a
//!   healthy set is never written at first contact, and a set gets its conditions as soon as
//!   they have news.
//! - **Coalesced.** At most one write of a set's conditions per interval
//!   (`--statefulset-conditions-interval`, 1 s), refused ones included: a change within it
//!   waits for its end, and then only the latest is written, if it is still news. The first
//!   change after a quiet spell goes at once. A write refused because the set moved on (409)
//!   is decided again from a fresh read at the interval's end.
//! - **The first sight's record is held.** A progress record decided the first time a set is
//!   seen (no record on it) is kept in memory and written with the rollout's first news
//!   (progress, completion of a partitioned or `OnDelete` rollout, a passed deadline); one
//!   that completes meanwhile is never written. A restart before then starts its clock again.
//!
//! Every write of ours follows a change of what the conditions say, which only the built-in
//! controller's status writes (and a passing deadline) bring: under churn ours are at most
//! the built-in controller's, and none where what they say did not change.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSetCondition;

use crate::rollout::progress::{Decision, said};

/// When the conditions go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Send {
    /// Nothing a user has not read from us already.
    Nothing,
    Now,
    /// News, within the interval of the last write: look again then.
    After(Duration),
}

/// What becomes of the progress record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordStep {
    Unchanged,
    Write,
    /// Remove the record from the set.
    Remove,
    /// Keep the decided record in memory, not on the set (first sight).
    Hold,
    /// Drop a record held in memory (its rollout completed before it had news).
    Forget,
}

/// What this process knows of a set beyond the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Known {
    /// The set carries the record annotation (parsed or not).
    pub record_on_set: bool,
    /// Nothing is remembered of this set (this uid) in this leadership term.
    pub first_sight: bool,
    /// What our conditions said when this process last wrote them or found them on the set.
    pub told: Option<u64>,
    /// Since this process last sent the set's conditions (a refused write counts: it is a
    /// request all the same).
    pub since_write: Option<Duration>,
}

/// What goes out now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outgoing {
    pub record: RecordStep,
    pub conditions: Send,
}

impl Outgoing {
    /// Whether anything is written now.
    pub(crate) fn writes(&self) -> bool {
        matches!(self.record, RecordStep::Write | RecordStep::Remove)
            || self.conditions == Send::Now
    }

    /// When to look again for conditions held back by the interval.
    pub(crate) fn after(&self) -> Option<Duration> {
        match self.conditions {
            Send::After(d) => Some(d),
            Send::Nothing | Send::Now => None,
        }
    }
}

/// What of `decision` goes out now, for a set whose status conditions are `existing`.
pub(crate) fn outgoing(
    decision: &Decision,
    existing: &[StatefulSetCondition],
    known: &Known,
    interval: Duration,
) -> Outgoing {
    let record = match (&decision.progress, decision.remove_progress) {
        (Some(_), _) if known.first_sight && !known.record_on_set => RecordStep::Hold,
        (Some(_), _) => RecordStep::Write,
        (None, true) if known.record_on_set => RecordStep::Remove,
        (None, true) => RecordStep::Forget,
        (None, false) => RecordStep::Unchanged,
    };
    let conditions = match decision.conditions.as_deref().and_then(said) {
        None => Send::Nothing,
        Some(wanted) => conditions(
            wanted,
            said(existing),
            known.told,
            decision.steady,
            known.since_write,
            interval,
        ),
    };
    Outgoing { record, conditions }
}

/// Whether conditions saying `wanted` go out: see the module docs. `on_set`: what ours on the
/// set say (`None`: none there); `steady`: `wanted` is what a steady set's status says.
pub(crate) fn conditions(
    wanted: u64,
    on_set: Option<u64>,
    told: Option<u64>,
    steady: bool,
    since_write: Option<Duration>,
    interval: Duration,
) -> Send {
    let news = match (on_set, told) {
        (Some(there), _) => there != wanted,
        (None, Some(last)) => last != wanted,
        (None, None) => !steady,
    };
    if !news {
        return Send::Nothing;
    }
    match since_write {
        Some(ago) if ago < interval => Send::After(interval - ago),
        _ => Send::Now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::progress::{Phase, Progress};

    const S: Duration = Duration::from_secs(1);

    /// One row of the table below: what a user last read from us, and what goes out.
    struct Case {
        what: &'static str,
        on_set: Option<u64>,
        told: Option<u64>,
        steady: bool,
        since_write: Option<Duration>,
        expected: Send,
    }

    fn case(
        what: &'static str,
        (on_set, told): (Option<u64>, Option<u64>),
        steady: bool,
        since_write: Option<Duration>,
        expected: Send,
    ) -> Case {
        Case {
            what,
            on_set,
            told,
            steady,
            since_write,
            expected,
        }
    }

    #[test]
    fn conditions_go_out_when_what_they_say_is_news_at_most_once_per_interval() {
        // What the conditions would say now is `A`.
        const A: u64 = 1;
        const B: u64 = 2;
        let ms = Duration::from_millis;
        let cases = [
            case(
                "ours on the set say it",
                (Some(A), Some(B)),
                false,
                None,
                Send::Nothing,
            ),
            case(
                "ours on the set say otherwise",
                (Some(B), Some(A)),
                false,
                None,
                Send::Now,
            ),
            case(
                "removed, and the same as last told",
                (None, Some(A)),
                false,
                None,
                Send::Nothing,
            ),
            case(
                "removed, and news since",
                (None, Some(B)),
                false,
                None,
                Send::Now,
            ),
            case(
                "removed, the same, steady or not",
                (None, Some(A)),
                true,
                None,
                Send::Nothing,
            ),
            case(
                "never told, steady: the status says it",
                (None, None),
                true,
                None,
                Send::Nothing,
            ),
            case(
                "never told, something to tell",
                (None, None),
                false,
                None,
                Send::Now,
            ),
            case(
                "never told, stale ours on the set",
                (Some(B), None),
                true,
                None,
                Send::Now,
            ),
            case(
                "news right after a write waits",
                (None, Some(B)),
                false,
                Some(ms(300)),
                Send::After(ms(700)),
            ),
            case(
                "news once the interval passed",
                (None, Some(B)),
                false,
                Some(S),
                Send::Now,
            ),
            case(
                "no news waits for nothing",
                (None, Some(A)),
                false,
                Some(ms(10)),
                Send::Nothing,
            ),
        ];
        for c in cases {
            assert_eq!(
                conditions(A, c.on_set, c.told, c.steady, c.since_write, S),
                c.expected,
                "{}",
                c.what
            );
        }
        assert_eq!(
            conditions(A, None, Some(B), false, Some(ms(1)), Duration::ZERO),
            Send::Now,
            "no interval: each change at once"
        );
    }

    fn cond(type_: &str, status: &str, reason: &str, message: &str) -> StatefulSetCondition {
        StatefulSetCondition {
            type_: Some(type_.into()),
            status: Some(status.into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_transition_time: None,
        }
    }

    fn record() -> Progress {
        Progress {
            rollout: "2".into(),
            complete: false,
            progress_at: "2030-01-01T00:00:00Z".into(),
            best: Default::default(),
            available: None,
            progressing: None,
        }
    }

    fn decision(conditions: Option<Vec<StatefulSetCondition>>) -> Decision {
        Decision {
            phase: Phase::Complete,
            conditions,
            progress: None,
            remove_progress: false,
            deadline_exceeded: false,
            steady: false,
            look_again: None,
        }
    }

    #[test]
    fn a_record_of_the_first_sight_is_held_and_written_with_the_next_news() {
        let first = Known {
            first_sight: true,
            ..Known::default()
        };
        let later = Known::default();
        let on_set = Known {
            record_on_set: true,
            first_sight: true,
            ..Known::default()
        };
        let wants = |progress: bool, remove: bool| Decision {
            progress: progress.then(record),
            remove_progress: remove,
            ..decision(None)
        };
        // (what, decision, known, expected)
        let cases = [
            (
                "first sight, none on the set",
                wants(true, false),
                first,
                RecordStep::Hold,
            ),
            (
                "first sight, a record to rewrite",
                wants(true, false),
                on_set,
                RecordStep::Write,
            ),
            ("news later", wants(true, false), later, RecordStep::Write),
            (
                "completed, on the set",
                wants(false, true),
                on_set,
                RecordStep::Remove,
            ),
            (
                "completed, only held",
                wants(false, true),
                later,
                RecordStep::Forget,
            ),
            ("nothing", wants(false, false), later, RecordStep::Unchanged),
        ];
        for (what, d, known, expected) in cases {
            let out = outgoing(&d, &[], &known, S);
            assert_eq!(out.record, expected, "{what}");
            assert_eq!(
                out.writes(),
                matches!(expected, RecordStep::Write | RecordStep::Remove),
                "{what}"
            );
        }
    }

    #[test]
    fn outgoing_conditions_compare_what_ours_say() {
        let available = cond(
            "Available",
            "True",
            "ReplicasAvailable",
            "3 of 3 replicas available.",
        );
        let complete = cond("Progressing", "True", "RolloutComplete", "done");
        let wanted = vec![available.clone(), complete.clone()];
        let fingerprint = said(&wanted);
        // Removed by a status write; last told the same: not put back.
        let told = Known {
            told: fingerprint,
            ..Known::default()
        };
        let out = outgoing(&decision(Some(wanted.clone())), &[], &told, S);
        assert_eq!(out.conditions, Send::Nothing);
        assert!(!out.writes());
        // Steady at first sight: nothing.
        let steady = Decision {
            steady: true,
            ..decision(Some(wanted.clone()))
        };
        let first = Known {
            first_sight: true,
            ..Known::default()
        };
        assert_eq!(outgoing(&steady, &[], &first, S).conditions, Send::Nothing);
        // Unavailable at first sight: at once.
        let unavailable = vec![
            cond(
                "Available",
                "False",
                "ReplicasUnavailable",
                "2 of 3 replicas available.",
            ),
            complete,
        ];
        let out = outgoing(&decision(Some(unavailable.clone())), &[], &first, S);
        assert_eq!(out.conditions, Send::Now);
        assert!(out.writes());
        // Within the interval of the last write: after its end.
        let recent = Known {
            told: fingerprint,
            since_write: Some(Duration::from_millis(250)),
            ..Known::default()
        };
        let out = outgoing(&decision(Some(unavailable)), &[], &recent, S);
        assert_eq!(out.conditions, Send::After(Duration::from_millis(750)));
        assert_eq!(out.after(), Some(Duration::from_millis(750)));
        assert!(!out.writes());
        // Foreign conditions do not count; the same of ours with other times is no news.
        let mut timed = available;
        timed.last_transition_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        let foreign = cond("Custom", "True", "X", "y");
        assert_eq!(
            said(&[foreign.clone(), timed, wanted[1].clone()]),
            fingerprint
        );
        assert_eq!(said(&[foreign]), None);
    }
}
