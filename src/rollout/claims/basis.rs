//! Which object a set's claim rollout plans from (pure): the live set, or, while a convergence
//! of ours holds it, what its journal says.
//!
//! A convergence orphan-deletes the set and creates it again from its journal. Between the two
//! the set is terminating (until kube-controller-manager's garbage collector has orphaned its
//! dependents and removed the `orphan` finalizer: seconds, or tens of seconds while the
//! collector re-syncs after an apiserver restart) and then absent (until our create). The
//! claims need neither wait: the rollout needs the desired templates and the update strategy,
//! partition, maxUnavailable, replicas and ordinals, and both the terminating set (its recorded
//! annotation and spec) and the journal's object (the set to be created, with the desired
//! templates as its own) hold them unchanged (KEP-4650: the claims follow the templates,
//! whichever object carries them). So:
//!
//! | live set | journal | basis |
//! |---|---|---|
//! | not being deleted | any | the live set (as without a convergence) |
//! | being deleted, with the journal's uid | step `deleting` (our orphan delete) | the live set, held |
//! | being deleted otherwise | any | nothing: someone deletes the set |
//! | absent | step `deleting`, readable | the journal's object with the deleted set's uid, held |
//! | absent | none, step `journaled` (the user deleted it), unreadable | nothing |
//!
//! A held set's rollout patches claims within the budget as always, writes no status
//! annotation (the journal is open) and restarts no pod: the StatefulSet controller does not
//! re-create pods of a set being deleted (`updateStatefulSet` returns early once
//! `DeletionTimestamp` is set) nor of an absent one, so an evicted pod would stay down until
//! the set is back.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;

use crate::names;
use crate::rollout::journal::{self, JournalStep};

/// What the claim rollout of a set plans from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Basis {
    /// The live set. `held`: our convergence has orphan-deleted it and waits for it to go.
    Live { held: bool },
    /// The set is absent between our delete and our create: the object the journal creates,
    /// named by the deleted set's uid (its pods' owner until the garbage collector orphans
    /// them). Always held.
    Journal(Box<StatefulSet>),
    /// Nothing to roll out now, and why.
    Nothing(&'static str),
}

/// The basis of the rollout of a set that is `live` (as the view holds it, or absent) with
/// `journal` open for it (as the view holds it, annotations only, for a live set; read whole
/// from the API for an absent one).
pub(crate) fn basis(live: Option<&StatefulSet>, journal: Option<&ConfigMap>) -> Basis {
    let annotation = |key: &str| {
        journal
            .and_then(|j| j.metadata.annotations.as_ref())
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    let deleting_step = annotation(names::JOURNAL_STEP) == Some(JournalStep::Deleting.as_str());
    match live {
        Some(set) if set.metadata.deletion_timestamp.is_none() => Basis::Live { held: false },
        Some(set)
            if deleting_step
                && set.metadata.uid.is_some()
                && annotation(names::JOURNAL_SET_UID) == set.metadata.uid.as_deref() =>
        {
            Basis::Live { held: true }
        }
        Some(_) => Basis::Nothing("the StatefulSet is being deleted, not by its convergence"),
        None => {
            let Some(journal) = journal else {
                return Basis::Nothing("the StatefulSet is absent and no journal re-creates it");
            };
            match journal::read(journal) {
                Ok(j) if j.step == JournalStep::Deleting => match journal_set(&j) {
                    Some(set) => Basis::Journal(Box::new(set)),
                    None => Basis::Nothing("the journaled object is not a StatefulSet"),
                },
                // Gone before our delete was sent: the user deleted it, it is not re-created.
                Ok(_) => Basis::Nothing("the StatefulSet was deleted by someone else"),
                // The convergence reports it (`ConvergeJournalUnreadable`).
                Err(_) => Basis::Nothing("the journal cannot be used"),
            }
        }
    }
}

/// The set a journal creates, as the rollout reads it: its desired templates as its own, and
/// the identity of the set it replaces.
fn journal_set(journal: &journal::Journal) -> Option<StatefulSet> {
    let mut set: StatefulSet = serde_json::from_value(journal.object.clone()).ok()?;
    set.metadata.namespace = Some(journal.namespace.clone());
    set.metadata.name = Some(journal.name.clone());
    set.metadata.uid = Some(journal.uid.clone());
    Some(set)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::admission::statefulset::templates;
    use crate::rollout::claims::{desired_templates, rollout_settings};

    /// The live set: uid u1, InPlace, partition 1, maxUnavailable 2 (annotation), 4 replicas
    /// from ordinal 3, 2Gi recorded over the live 1Gi.
    fn live_raw() -> Value {
        let desired = templates::desired_annotation(&[json!({"metadata": {"name": "data", "labels": {"tier": "db"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}})])
        .expect("annotation");
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "db", "uid": "u1", "resourceVersion": "41",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {names::DESIRED_VOLUME_CLAIM_TEMPLATES: desired,
                                         names::VOLUME_CLAIM_UPDATE_POLICY: "InPlace",
                                         names::MAX_UNAVAILABLE: "2"}},
            "spec": {"replicas": 4, "ordinals": {"start": 3}, "serviceName": "web",
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]},
            "status": {"replicas": 4, "updateRevision": "web-2"}
        })
    }

    fn typed(raw: &Value) -> StatefulSet {
        serde_json::from_value(raw.clone()).expect("a set")
    }

    fn terminating(raw: &Value) -> Value {
        let mut raw = raw.clone();
        raw["metadata"]["deletionTimestamp"] = json!("2026-01-02T00:00:00Z");
        raw["metadata"]["finalizers"] = json!(["orphan"]);
        raw
    }

    /// The journal of `raw` at `step`, whole (as read from the API).
    fn journal(raw: &Value, step: JournalStep) -> ConfigMap {
        let object = journal::desired_object(raw).expect("desired");
        let mut cm = journal::journal_configmap("ops", raw, &object).expect("journal");
        if let Some(a) = cm.metadata.annotations.as_mut() {
            a.insert(names::JOURNAL_STEP.into(), step.as_str().into());
        }
        cm
    }

    /// As the view keeps a journal: its annotations, not its content.
    fn metadata_only(mut cm: ConfigMap) -> ConfigMap {
        cm.data = None;
        cm
    }

    #[test]
    fn the_rollout_plans_from_the_live_set_or_while_our_convergence_holds_it_from_its_journal() {
        let raw = live_raw();
        let live = typed(&raw);
        let deleting = typed(&terminating(&raw));
        let marked = journal(&raw, JournalStep::Deleting);
        let journaled = journal(&raw, JournalStep::Journaled);
        let mut other_uid = raw.clone();
        other_uid["metadata"]["uid"] = json!("u0");
        let others = metadata_only(journal(&other_uid, JournalStep::Deleting));
        let mut unreadable = marked.clone();
        unreadable.data = Some([(journal::DATA_KEY.to_owned(), "{".to_owned())].into());
        let view = metadata_only(marked.clone());
        let view_journaled = metadata_only(journaled.clone());
        let held = || Basis::Live { held: true };
        let cases: Vec<(&str, Option<&StatefulSet>, Option<&ConfigMap>, Basis)> = vec![
            // No journal: as before.
            ("no journal", Some(&live), None, Basis::Live { held: false }),
            (
                "no journal, being deleted (by its user)",
                Some(&deleting),
                None,
                Basis::Nothing("the StatefulSet is being deleted, not by its convergence"),
            ),
            (
                "absent, no journal",
                None,
                None,
                Basis::Nothing("the StatefulSet is absent and no journal re-creates it"),
            ),
            // A journal open before the delete: the live set as it is.
            (
                "journaled, not deleted yet",
                Some(&live),
                Some(&view_journaled),
                Basis::Live { held: false },
            ),
            // Terminating under our orphan delete.
            (
                "terminating, our journal",
                Some(&deleting),
                Some(&view),
                held(),
            ),
            (
                "terminating, our journal read whole",
                Some(&deleting),
                Some(&marked),
                held(),
            ),
            (
                "terminating, the journal not marked: the user deletes it",
                Some(&deleting),
                Some(&view_journaled),
                Basis::Nothing("the StatefulSet is being deleted, not by its convergence"),
            ),
            (
                "terminating, another set's journal",
                Some(&deleting),
                Some(&others),
                Basis::Nothing("the StatefulSet is being deleted, not by its convergence"),
            ),
            // Absent between our delete and our create.
            (
                "absent, journal marked deleting",
                None,
                Some(&marked),
                Basis::Journal(Box::new({
                    let mut set: StatefulSet =
                        serde_json::from_value(journal::desired_object(&raw).expect("desired"))
                            .expect("a set");
                    set.metadata.uid = Some("u1".into());
                    set
                })),
            ),
            (
                "absent, journal not marked: the user deleted it",
                None,
                Some(&journaled),
                Basis::Nothing("the StatefulSet was deleted by someone else"),
            ),
            (
                "absent, the view's journal: its content is to be read",
                None,
                Some(&view),
                Basis::Nothing("the journal cannot be used"),
            ),
            (
                "absent, unreadable journal",
                None,
                Some(&unreadable),
                Basis::Nothing("the journal cannot be used"),
            ),
        ];
        for (case, live, journal, want) in cases {
            assert_eq!(basis(live, journal), want, "{case}");
        }
    }

    #[test]
    fn the_journals_object_plans_as_the_live_set_did() {
        let raw = live_raw();
        let live = typed(&terminating(&raw));
        let Basis::Journal(from_journal) = basis(None, Some(&journal(&raw, JournalStep::Deleting)))
        else {
            panic!("planned from the journal");
        };
        // The same templates to follow: recorded on the live set, its own on the journal's.
        let (desired, journaled) = (
            desired_templates(&live).expect("templates"),
            desired_templates(&from_journal).expect("templates"),
        );
        assert_eq!(journaled, desired);
        assert_eq!(
            desired[0]
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .map(|q| q.0.as_str()),
            Some("2Gi")
        );
        // The same strategy, partition, budget and policy; the same replicas and ordinals.
        let (a, _) = rollout_settings(&live, 4);
        let (b, _) = rollout_settings(&from_journal, 4);
        assert_eq!(
            (a.policy, a.rolling, a.partition, a.max_unavailable),
            (b.policy, b.rolling, b.partition, b.max_unavailable)
        );
        assert_eq!((b.partition, b.max_unavailable), (1, 2));
        assert_eq!(
            (a.recreated_since, b.recreated_since),
            (None, None),
            "claims of OnDelete replicas wait for the set to carry the templates either way"
        );
        assert_eq!(from_journal.spec.replicas, live.spec.replicas);
        assert_eq!(from_journal.spec.ordinals, live.spec.ordinals);
        assert_eq!(from_journal.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(
            (
                from_journal.metadata.namespace.as_deref(),
                from_journal.metadata.name.as_deref()
            ),
            (Some("db"), Some("web"))
        );
    }
}
