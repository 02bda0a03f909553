//! Convergence as a planner: what exists now (the live set as the apiserver returned it, the
//! journal ConfigMap) in, the complete list of writes and Events of the next step out. The
//! step is the journal's state machine ([`journal::next`]); this turns it into
//! [`Action`]s, each write with its preconditions, the answers that are part of the plan,
//! its Events and, where it depends on the write before it, how ([`After`]). The shell
//! ([`super`]) only reads, runs a plan through the executor and reads again.
//!
//! | step | actions |
//! |---|---|
//! | start | create the journal (409: someone else did) → `ConvergeStarted` |
//! | mark deleting | patch the journal's step (its resourceVersion) → if done, orphan-delete the set (uid and resourceVersion preconditions) → `ConvergeDeleted`; if the set was gone already (404: the user deleted it), drop the journal → `ConvergeAbandoned` |
//! | delete | the orphan delete, and the same drop on 404 |
//! | recheck | the set moved under the journal: refresh the journal (status only changed), or drop it → `ConvergeAbandoned` |
//! | create | create the journaled set (409: someone else did) → `ConvergeRecreated`; its namespace gone (404): delete the journal |
//! | restore | give the journaled managers their fields back (the created set's resourceVersion) |
//! | drop | delete the journal (its uid) → `ConvergeFinished` or `ConvergeAbandoned`; stop |
//! | stuck, invalid templates | one Warning each, once; stop |
//! | the namespace is being deleted | start nothing; once the set is gone or going, delete the journal; stop |

use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::events::EventType;
use serde_json::{Value, json};

use crate::controller::action::{
    Action, After, Kind, Report, Request, Target, Verb, Write, set_reference,
};
use crate::names;
use crate::rollout::journal::{self, DropReason, JournalStep, LiveSet, Recheck, Step};

/// What the planner looks at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct State<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// Where journals live.
    pub controller_namespace: &'a str,
    /// The live set as the apiserver returned it (everything: the journal keeps it whole).
    pub live: Option<&'a Value>,
    /// The set's journal, as read.
    pub journal: Option<&'a ConfigMap>,
    /// `--converge`: start new convergences (one under way is finished either way).
    pub enabled: bool,
    /// The set's namespace, as the view holds it.
    pub namespace_is: Presence,
}

/// Whether the set's namespace can hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presence {
    /// Active, or not known otherwise (a namespace gone for good shows when the create is
    /// answered 404).
    Active,
    /// Being deleted: nothing can be created in it, and what it holds is being deleted.
    Terminating,
}

/// The next step of a convergence.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    /// Nothing to do now; `Some(Poll)` to look again soon (a delete under way), `None` when
    /// a change brings it back.
    Wait(Option<Poll>),
    /// Carry these out, then `then`.
    Act {
        actions: Vec<Action>,
        /// The convergence step each write is (`statefulset_converge_steps{step}` and the log
        /// line of a done write), by its index in `actions`.
        steps: Vec<(usize, &'static str)>,
        then: Then,
    },
    /// What was read cannot be acted on (a journal whose object is no StatefulSet): the
    /// reconcile fails and is retried with backoff.
    Invalid(String),
}

/// Look again after the convergence poll interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Poll;

/// What follows a plan's actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// Read the set and journal again and plan the next step.
    ReadAgain,
    /// This pass is over.
    Stop,
}

/// Notes of the Events a convergence publishes.
pub(crate) const DELETED_BY_USER: &str = "the StatefulSet was deleted by someone else before convergence deleted it; it is not re-created and the journal dropped";
const STARTED: &str = "re-creating the StatefulSet with its desired volume claim templates (pods and claims are kept)";
const CHANGED_MEANWHILE: &str = "the StatefulSet changed while it was being converged; the journal was dropped and the changed object is left as it is (it is converged again from its new state if it still has desired templates)";

/// The facts of the live set the state machine decides on.
pub(crate) fn live_facts(raw: &Value) -> LiveSet {
    let meta = |k: &str| {
        raw.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    LiveSet {
        uid: meta("uid"),
        resource_version: meta("resourceVersion"),
        deleting: raw
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|v| !v.is_null()),
        wants: raw
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES))
            .is_some(),
        templates: raw
            .pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        managers: journal::main_managers(raw),
        deleting_since: raw
            .pointer("/metadata/deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok()),
        orphaning: raw
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|f| f == journal::ORPHAN_FINALIZER)),
    }
}

/// An orphan delete of ours that has waited [`journal::ORPHAN_WAIT_SAID`] or longer for the
/// garbage collector: what `/readyz?verbose` says, and the Event the set gets once per wait.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OrphanWait {
    /// The set being deleted.
    pub uid: String,
    pub waited: std::time::Duration,
    /// `waiting for the garbage collector to orphan the dependents of ns/name (uid) for Ns: …`
    pub note: String,
    /// `ConvergeWaitingForGarbageCollector`, once per wait (the set's uid).
    pub report: Report,
}

/// Whether the set of `state` is our orphan-deleted one waiting long for the garbage collector
/// at `now` ([`journal::orphan_wait`]), and what to say about it.
pub(crate) fn orphan_wait(state: &State<'_>, now: jiff::Timestamp) -> Option<OrphanWait> {
    let live = live_facts(state.live?);
    let journal = journal::read(state.journal?).ok()?;
    let waited = journal::orphan_wait(&live, &journal, now)?;
    let note = journal::orphan_wait_note(state.namespace, state.name, &live.uid, waited);
    let about = set_reference(state.namespace, state.name, Some(&live.uid));
    let report = Report::normal(
        about,
        "ConvergeWaitingForGarbageCollector",
        "Converge",
        note.clone(),
    )
    .once(format!("orphan-wait/{}", live.uid));
    Some(OrphanWait {
        uid: live.uid,
        waited,
        note,
        report,
    })
}

/// Plans the next step of set `state.namespace/state.name`.
pub(crate) fn plan(state: &State<'_>) -> Plan {
    let (namespace, name) = (state.namespace, state.name);
    let journal_name = names::journal_name(namespace, name);
    let live = state.live.map(live_facts);
    let journal = state.journal.map(journal::read);
    let about = set_reference(namespace, name, live.as_ref().map(|l| l.uid.as_str()));
    let in_controller_ns = format!("{}/{journal_name}", state.controller_namespace);
    let event = |type_, reason: &str, note: String| {
        Report::new(about.clone(), type_, reason, "Converge", note)
    };
    let journal_target = |uid: Option<String>| Target {
        uid,
        ..Target::new(Kind::ConfigMap, state.controller_namespace, &journal_name)
    };
    // Deleting the journal (this very ConfigMap: its uid is the precondition).
    let drop_journal = |cm: &ConfigMap| {
        let uid = cm.metadata.uid.clone();
        Write::new(
            Verb::EndConvergence,
            journal_target(uid.clone()),
            Request::Delete {
                uid,
                resource_version: None,
                orphan: false,
            },
            format!("delete journal ConfigMap {in_controller_ns}"),
        )
        .about(about.clone())
        .expected(&[404, 409])
    };
    // The orphan delete with the journaled uid and resourceVersion as preconditions, then, if
    // the set was gone already (someone else deleted it: never re-create it), the journal.
    let delete_then = |uid: &str, resource_version: &str, cm: &ConfigMap| {
        vec![
            Action::Write(
                Write::new(
                    Verb::DeleteStatefulSet,
                    Target {
                        uid: Some(uid.to_owned()),
                        resource_version: Some(resource_version.to_owned()),
                        ..Target::new(Kind::StatefulSet, namespace, name)
                    },
                    Request::Delete {
                        uid: Some(uid.to_owned()),
                        resource_version: Some(resource_version.to_owned()),
                        orphan: true,
                    },
                    format!("delete StatefulSet {namespace}/{name} (uid {uid}) with propagationPolicy Orphan; pods and claims keep running"),
                )
                .about(about.clone())
                .expected(&[404, 409])
                .on_done(event(
                    EventType::Normal,
                    "ConvergeDeleted",
                    "deleted with propagationPolicy Orphan; pods and claims keep running".to_owned(),
                )),
            ),
            Action::Write(
                drop_journal(cm)
                    .after(After::Gone)
                    .on_done(event(EventType::Warning, "ConvergeAbandoned", DELETED_BY_USER.to_owned())),
            ),
        ]
    };
    let act = |actions: Vec<Action>, steps: Vec<(usize, &'static str)>, then| Plan::Act {
        actions,
        steps,
        then,
    };
    // A namespace being deleted takes the set with it, and nothing can be created there
    // again: no convergence starts, and one under way ends with the journal dropped (no
    // Event: the namespace takes none) once the set is gone or going.
    if state.namespace_is == Presence::Terminating {
        let set_stays = live.as_ref().is_some_and(|l| !l.deleting);
        return match state.journal {
            Some(_) if set_stays => Plan::Wait(Some(Poll)),
            Some(cm) => act(
                vec![Action::Write(drop_journal(cm))],
                vec![(0, "namespace-gone")],
                Then::Stop,
            ),
            None => Plan::Wait(None),
        };
    }
    match journal::next(live.as_ref(), journal.as_ref(), state.enabled) {
        Step::Nothing => Plan::Wait(None),
        Step::WaitGone => Plan::Wait(Some(Poll)),
        Step::Stuck(why) => act(
            vec![Action::Report(
                event(
                    EventType::Warning,
                    "ConvergeJournalUnreadable",
                    format!("journal ConfigMap {in_controller_ns} cannot be used ({why}); it is kept: inspect it, then delete it"),
                )
                .once(format!("stuck/{journal_name}/{why}")),
            )],
            Vec::new(),
            Then::Stop,
        ),
        Step::Start => {
            let Some(raw) = state.live else {
                return Plan::Wait(None);
            };
            let object = match journal::desired_object(raw) {
                Ok(object) => object,
                Err(why) => {
                    return act(
                        vec![Action::Report(
                            event(
                                EventType::Warning,
                                "ConvergeSkipped",
                                format!("the desired volume claim templates cannot be applied: {why}"),
                            )
                            .once(format!("invalid/{namespace}/{name}/{why}")),
                        )],
                        Vec::new(),
                        Then::Stop,
                    );
                }
            };
            let cm = match journal::journal_configmap(state.controller_namespace, raw, &object)
                .and_then(|cm| serde_json::to_value(cm).map_err(|e| e.to_string()))
            {
                Ok(cm) => cm,
                Err(why) => return Plan::Invalid(why),
            };
            act(
                vec![Action::Write(
                    Write::new(
                        Verb::StartConvergence,
                        journal_target(None),
                        Request::Create(cm),
                        format!("open journal ConfigMap {in_controller_ns} and re-create the StatefulSet with its desired volume claim templates (orphan delete, then create; pods and claims are kept)"),
                    )
                    .about(about.clone())
                    .expected(&[409])
                    .on_done(event(
                        EventType::Normal,
                        "ConvergeStarted",
                        format!("journaled in ConfigMap {in_controller_ns}; {STARTED}"),
                    )),
                )],
                vec![(0, "journaled")],
                Then::ReadAgain,
            )
        }
        Step::MarkDeleting => {
            let (Some(cm), Some(live)) = (state.journal, live.as_ref()) else {
                return Plan::Wait(None);
            };
            let body = json!({"metadata": {
                "resourceVersion": cm.metadata.resource_version,
                "annotations": {names::JOURNAL_STEP: JournalStep::Deleting.as_str()}}});
            let mark = Write::new(
                Verb::AdvanceConvergence,
                journal_target(None),
                Request::Patch(body),
                format!("mark journal {in_controller_ns} deleting, then orphan-delete the StatefulSet"),
            )
            .about(about.clone())
            .expected(&[404, 409]);
            // Straight on, without another read: the answer to our own delete tells a set the
            // user deleted meanwhile (404) from ours.
            let mut actions = vec![Action::Write(mark)];
            let mut rest = delete_then(&live.uid, &live.resource_version, cm);
            if let Some(Action::Write(delete)) = rest.first_mut() {
                delete.after = After::Done;
            }
            actions.extend(rest);
            act(
                actions,
                vec![(0, "marked"), (1, "deleted"), (2, "deleted-by-user")],
                Then::ReadAgain,
            )
        }
        Step::Delete {
            uid,
            resource_version,
        } => {
            let Some(cm) = state.journal else {
                return Plan::Wait(None);
            };
            act(
                delete_then(&uid, &resource_version, cm),
                vec![(0, "deleted"), (1, "deleted-by-user")],
                Then::ReadAgain,
            )
        }
        Step::Recheck => {
            let (Some(raw), Some(Ok(j)), Some(cm)) = (state.live, journal.as_ref(), state.journal)
            else {
                return Plan::Wait(None);
            };
            match journal::recheck(j, &journal::desired_object(raw)) {
                Recheck::Refresh => {
                    let rv = raw
                        .pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    // The ownership to restore is the latest too.
                    let managed_fields = journal::journal_managed_fields(raw);
                    let managed_fields = if managed_fields.is_empty() {
                        Value::Null
                    } else {
                        match serde_json::to_string(&managed_fields) {
                            Ok(text) => Value::String(text),
                            Err(e) => return Plan::Invalid(e.to_string()),
                        }
                    };
                    let body = json!({"metadata": {
                        "resourceVersion": cm.metadata.resource_version,
                        "annotations": {names::JOURNAL_SET_RESOURCE_VERSION: rv}},
                        "data": {journal::MANAGED_FIELDS_KEY: managed_fields}});
                    act(
                        vec![Action::Write(
                            Write::new(
                                Verb::AdvanceConvergence,
                                journal_target(None),
                                Request::Patch(body),
                                format!("refresh journal {in_controller_ns} to the StatefulSet's resourceVersion {rv}"),
                            )
                            .about(about.clone())
                            .expected(&[404, 409]),
                        )],
                        vec![(0, "refreshed")],
                        Then::ReadAgain,
                    )
                }
                Recheck::Abandon => act(
                    vec![Action::Write(drop_journal(cm).on_done(event(
                        EventType::Warning,
                        "ConvergeAbandoned",
                        CHANGED_MEANWHILE.to_owned(),
                    )))],
                    vec![(0, "abandoned")],
                    Then::ReadAgain,
                ),
            }
        }
        Step::Create => {
            let Some(Ok(j)) = journal else {
                return Plan::Wait(None);
            };
            // Checked before it is sent: a journal that does not hold a set is a human's.
            if let Err(e) = serde_json::from_value::<kube::api::DynamicObject>(j.object.clone()) {
                return Plan::Invalid(format!("journaled object is not a StatefulSet: {e}"));
            }
            let mut actions = vec![Action::Write(
                Write::new(
                    Verb::CreateStatefulSet,
                    Target::new(Kind::StatefulSet, namespace, name),
                    Request::Create(j.object),
                    format!("create StatefulSet {namespace}/{name} with its desired volume claim templates from journal {in_controller_ns}"),
                )
                .about(about.clone())
                .expected(&[404, 409])
                // About the set created: the executor names it by the uid it got.
                .on_done(Report::normal(
                    set_reference(namespace, name, None),
                    "ConvergeRecreated",
                    "Converge",
                    "re-created with the desired volume claim templates".to_owned(),
                )),
            )];
            // 404: the namespace is gone (deleted with everything in it): nothing to create
            // the set in, ever; the journal goes.
            if let Some(cm) = state.journal {
                actions.push(Action::Write(drop_journal(cm).after(After::Gone)));
            }
            act(
                actions,
                vec![(0, "created"), (1, "namespace-gone")],
                Then::ReadAgain,
            )
        }
        Step::Restore { resource_version } => {
            let (Some(raw), Some(Ok(j))) = (state.live, journal.as_ref()) else {
                return Plan::Wait(None);
            };
            let Some(body) = journal::restore_patch(j, raw) else {
                return Plan::Wait(Some(Poll));
            };
            act(
                vec![Action::Write(
                    Write::new(
                        Verb::RestoreOwnership,
                        Target::new(Kind::StatefulSet, namespace, name),
                        Request::Patch(body),
                        format!("give the fields of StatefulSet {namespace}/{name} back to their managers (resourceVersion {resource_version})"),
                    )
                    .about(about.clone())
                    // Written meanwhile, or gone: the next read decides from what is there.
                    .expected(&[404, 409]),
                )],
                vec![(0, "ownership-restored")],
                Then::ReadAgain,
            )
        }
        Step::Drop(reason) => {
            let Some(cm) = state.journal else {
                return Plan::Wait(None);
            };
            let (step, type_, reason_text, note) = match reason {
                DropReason::Finished => (
                    "finished",
                    EventType::Normal,
                    "ConvergeFinished",
                    "converged: the StatefulSet carries its desired volume claim templates",
                ),
                DropReason::Replaced => (
                    "replaced",
                    EventType::Warning,
                    "ConvergeAbandoned",
                    "another StatefulSet of this name was created meanwhile; it is left alone and the journal dropped",
                ),
                DropReason::DeletedByUser => (
                    "deleted-by-user",
                    EventType::Warning,
                    "ConvergeAbandoned",
                    DELETED_BY_USER,
                ),
            };
            act(
                vec![Action::Write(
                    drop_journal(cm).on_done(event(type_, reason_text, note.to_owned())),
                )],
                vec![(0, step)],
                Then::Stop,
            )
        }
    }
}

#[cfg(test)]
mod tests;
