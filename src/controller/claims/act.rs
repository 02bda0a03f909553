//! The API calls of the claim rollout and convergence; every decision is made in `plan` and
//! `converge`, here they are only carried out.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, PersistentVolumeClaim};
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::converge::{self, Action, DropReason, JournalStep, LiveSet, Recheck};
use crate::controller::action::{Kind, Report, Request, Target, Verb, Write};
use crate::controller::context::{Ctx, Error, journal_name};
use crate::controller::executor::{Outcome, code};
use crate::names;

fn sets_raw(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<StatefulSet>(&()),
    )
}

/// An Event with the controller's action name.
pub fn event(type_: EventType, reason: &str, action: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(super::clip(&note, 1000)),
        action: action.to_owned(),
        secondary: None,
    }
}

/// An Event about a set that concerns one of its claims: the claim is the related object,
/// which also keeps the recorder from folding events about different claims into one series.
pub fn claim_event(
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
    claim: Option<&PersistentVolumeClaim>,
) -> Event {
    Event {
        secondary: claim.map(|c| kube::Resource::object_ref(c, &())),
        ..event(type_, reason, action, note)
    }
}

/// A stand-in for a set that may be gone, to hang Events on.
pub fn set_ref(namespace: &str, name: &str, uid: Option<&str>) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            uid: uid.map(str::to_owned),
            ..ObjectMeta::default()
        },
        ..StatefulSet::default()
    }
}

fn live_facts(raw: &Value) -> LiveSet {
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
        managers: converge::main_managers(raw),
    }
}

/// A convergence step taken: counted, and logged at info with the set, its uid and the
/// journal (uninstall and incident reviews read these lines).
fn step_taken(
    ctx: &Ctx,
    step: &'static str,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    journal: &str,
) {
    ctx.metrics.claims.step(step);
    tracing::info!(
        step,
        namespace,
        name,
        uid = uid.unwrap_or(""),
        journal = %format!("{}/{journal}", ctx.config.namespace),
        "convergence step"
    );
}

/// Drives the convergence of set `namespace/name` as far as it goes now, reading the set and
/// its journal fresh from the API before every step (caches may lag behind our own writes).
/// Returns when to look again.
pub async fn converge(
    ctx: &Ctx,
    namespace: &str,
    name: &str,
    enabled: bool,
) -> Result<Option<Duration>, Error> {
    let poll = ctx.config.converge_poll;
    let sets = sets_raw(&ctx.client, namespace);
    let journals = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let journal_name = journal_name(namespace, name);
    // Each pass makes one step; a full convergence is seven.
    for _ in 0..8 {
        let raw = sets
            .get_opt(name)
            .await?
            .map(|o| serde_json::to_value(o).unwrap_or(Value::Null));
        let cm = journals.get_opt(&journal_name).await?;
        let live = raw.as_ref().map(live_facts);
        let journal = cm.as_ref().map(converge::read);
        let action = converge::next(live.as_ref(), journal.as_ref(), enabled);
        let uid = live.as_ref().map(|l| l.uid.clone());
        let about = set_ref(namespace, name, uid.as_deref());
        tracing::debug!(namespace, name, ?action, "converge step");
        match action {
            Action::Nothing => return Ok(None),
            Action::WaitGone => return Ok(Some(poll)),
            Action::Stuck(why) => {
                if ctx
                    .exec
                    .first_report(&format!("stuck/{journal_name}/{why}"))
                {
                    tracing::warn!(namespace, name, journal = %journal_name, %why, "convergence journal unreadable; kept for a human");
                    ctx.event(
                        &about,
                        event(
                            EventType::Warning,
                            "ConvergeJournalUnreadable",
                            "Converge",
                            format!(
                                "journal ConfigMap {}/{journal_name} cannot be used ({why}); it is kept: inspect it, then delete it",
                                ctx.config.namespace
                            ),
                        ),
                    )
                    .await;
                }
                return Ok(None);
            }
            Action::Start => {
                let Some(raw) = raw else { continue };
                let object = match converge::desired_object(&raw) {
                    Ok(o) => o,
                    Err(why) => {
                        if ctx
                            .exec
                            .first_report(&format!("invalid/{namespace}/{name}/{why}"))
                        {
                            ctx.event(
                                &about,
                                event(
                                    EventType::Warning,
                                    "ConvergeSkipped",
                                    "Converge",
                                    format!("the desired volume claim templates cannot be applied: {why}"),
                                ),
                            )
                            .await;
                        }
                        return Ok(None);
                    }
                };
                let cm = converge::journal_configmap(&ctx.config.namespace, &raw, &object)
                    .map_err(Error::Invalid)?;
                let write = Write::new(
                    Verb::StartConvergence,
                    Target::new(Kind::ConfigMap, &ctx.config.namespace, &journal_name),
                    Request::Create(serde_json::to_value(&cm).map_err(|e| Error::Invalid(e.to_string()))?),
                    format!(
                        "open journal ConfigMap {}/{journal_name} and re-create the StatefulSet with its desired volume claim templates (orphan delete, then create; pods and claims are kept)",
                        ctx.config.namespace
                    ),
                )
                .about(about_ref(&about));
                match ctx.exec.write(&write).await {
                    Ok(Outcome::Observed) => return Ok(None),
                    Ok(Outcome::Done(_)) => {
                        step_taken(
                            ctx,
                            "journaled",
                            namespace,
                            name,
                            uid.as_deref(),
                            &journal_name,
                        );
                        ctx.event(
                            &about,
                            event(
                                EventType::Normal,
                                "ConvergeStarted",
                                "Converge",
                                format!(
                                    "journaled in ConfigMap {}/{journal_name}; re-creating the StatefulSet with its desired volume claim templates (pods and claims are kept)",
                                    ctx.config.namespace
                                ),
                            ),
                        )
                        .await;
                    }
                    Err(e) if code(&e) == Some(409) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Action::MarkDeleting => {
                let body = json!({"metadata": {
                    "resourceVersion": cm.as_ref().and_then(|c| c.metadata.resource_version.clone()),
                    "annotations": {names::JOURNAL_STEP: JournalStep::Deleting.as_str()}}});
                let write = Write::new(
                    Verb::AdvanceConvergence,
                    Target::new(Kind::ConfigMap, &ctx.config.namespace, &journal_name),
                    Request::Patch(body),
                    format!("mark journal {}/{journal_name} deleting, then orphan-delete the StatefulSet", ctx.config.namespace),
                )
                .about(about_ref(&about));
                match ctx.exec.write(&write).await {
                    Ok(Outcome::Observed) => return Ok(None),
                    Ok(Outcome::Done(_)) => step_taken(
                        ctx,
                        "marked",
                        namespace,
                        name,
                        uid.as_deref(),
                        &journal_name,
                    ),
                    Err(e) if matches!(code(&e), Some(404 | 409)) => continue,
                    Err(e) => return Err(e.into()),
                }
                // Straight on, without another read: the answer to our own delete tells a set
                // the user deleted meanwhile (404) from ours.
                let Some(live) = live else { continue };
                match delete_set(ctx, &journal_name, &about, live.uid, live.resource_version)
                    .await?
                {
                    Deleted::AlreadyGone => {
                        return drop_deleted_by_user(ctx, &journals, &journal_name, &about).await;
                    }
                    Deleted::Observed => return Ok(None),
                    Deleted::Sent => {}
                }
            }
            Action::Delete {
                uid,
                resource_version,
            } => match delete_set(ctx, &journal_name, &about, uid, resource_version).await? {
                Deleted::AlreadyGone => {
                    return drop_deleted_by_user(ctx, &journals, &journal_name, &about).await;
                }
                Deleted::Observed => return Ok(None),
                Deleted::Sent => {}
            },
            Action::Recheck => {
                let (Some(raw), Some(Ok(j)), Some(cm)) = (raw, journal, cm) else {
                    continue;
                };
                let fresh = converge::desired_object(&raw);
                match converge::recheck(&j, &fresh) {
                    Recheck::Refresh => {
                        let rv = raw
                            .pointer("/metadata/resourceVersion")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        // The ownership to restore is the latest too.
                        let managed_fields = converge::journal_managed_fields(&raw);
                        let managed_fields = if managed_fields.is_empty() {
                            Value::Null
                        } else {
                            Value::String(
                                serde_json::to_string(&managed_fields)
                                    .map_err(|e| Error::Invalid(e.to_string()))?,
                            )
                        };
                        let body = json!({"metadata": {
                            "resourceVersion": cm.metadata.resource_version,
                            "annotations": {names::JOURNAL_SET_RESOURCE_VERSION: rv}},
                            "data": {converge::MANAGED_FIELDS_KEY: managed_fields}});
                        let write = Write::new(
                            Verb::AdvanceConvergence,
                            Target::new(Kind::ConfigMap, &ctx.config.namespace, &journal_name),
                            Request::Patch(body),
                            format!("refresh journal {}/{journal_name} to the StatefulSet's resourceVersion {rv}", ctx.config.namespace),
                        )
                        .about(about_ref(&about));
                        match ctx.exec.write(&write).await {
                            Ok(Outcome::Observed) => return Ok(None),
                            Ok(Outcome::Done(_)) => step_taken(
                                ctx,
                                "refreshed",
                                namespace,
                                name,
                                uid.as_deref(),
                                &journal_name,
                            ),
                            Err(e) if matches!(code(&e), Some(404 | 409)) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Recheck::Abandon => {
                        if !drop_journal(ctx, &journal_name, &cm, &about).await? {
                            return Ok(None);
                        }
                        step_taken(
                            ctx,
                            "abandoned",
                            namespace,
                            name,
                            uid.as_deref(),
                            &journal_name,
                        );
                        ctx.event(
                            &about,
                            event(
                                EventType::Warning,
                                "ConvergeAbandoned",
                                "Converge",
                                "the StatefulSet changed while it was being converged; the journal was dropped and the changed object is left as it is (it is converged again from its new state if it still has desired templates)".to_owned(),
                            ),
                        )
                        .await;
                    }
                }
            }
            Action::Create => {
                let Some(Ok(j)) = journal else { continue };
                // Checked before it is sent: a journal that does not hold a set is a human's.
                let _: DynamicObject = serde_json::from_value(j.object.clone()).map_err(|e| {
                    Error::Invalid(format!("journaled object is not a StatefulSet: {e}"))
                })?;
                let write = Write::new(
                    Verb::CreateStatefulSet,
                    Target::new(Kind::StatefulSet, namespace, name),
                    Request::Create(j.object.clone()),
                    format!(
                        "create StatefulSet {namespace}/{name} with its desired volume claim templates from journal {}/{journal_name}",
                        ctx.config.namespace
                    ),
                )
                .about(about_ref(&about));
                match ctx.exec.write(&write).await {
                    Ok(Outcome::Observed) => return Ok(None),
                    Ok(created) => {
                        let created_uid = created.uid();
                        step_taken(
                            ctx,
                            "created",
                            namespace,
                            name,
                            created_uid.as_deref(),
                            &journal_name,
                        );
                        ctx.event(
                            &set_ref(namespace, name, created_uid.as_deref()),
                            event(
                                EventType::Normal,
                                "ConvergeRecreated",
                                "Converge",
                                "re-created with the desired volume claim templates".to_owned(),
                            ),
                        )
                        .await;
                    }
                    Err(e) if code(&e) == Some(409) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Action::Restore { resource_version } => {
                let (Some(raw), Some(Ok(j))) = (raw, journal) else {
                    continue;
                };
                let Some(body) = converge::restore_patch(&j, &raw) else {
                    continue;
                };
                tracing::debug!(namespace, name, %resource_version, "restoring field ownership");
                let write = Write::new(
                    Verb::RestoreOwnership,
                    Target::new(Kind::StatefulSet, namespace, name),
                    Request::Patch(body),
                    format!("give the fields of StatefulSet {namespace}/{name} back to their managers (resourceVersion {resource_version})"),
                )
                .about(about_ref(&about));
                match ctx.exec.write(&write).await {
                    Ok(Outcome::Observed) => return Ok(None),
                    Ok(Outcome::Done(_)) => step_taken(
                        ctx,
                        "ownership-restored",
                        namespace,
                        name,
                        uid.as_deref(),
                        &journal_name,
                    ),
                    // Written meanwhile, or gone: the next pass decides from what is there.
                    Err(e) if matches!(code(&e), Some(404 | 409)) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Action::Drop(reason) => {
                let Some(cm) = cm else { continue };
                if !drop_journal(ctx, &journal_name, &cm, &about).await? {
                    return Ok(None);
                }
                let (type_, reason_text, note) = match reason {
                    DropReason::Finished => {
                        step_taken(
                            ctx,
                            "finished",
                            namespace,
                            name,
                            uid.as_deref(),
                            &journal_name,
                        );
                        (
                            EventType::Normal,
                            "ConvergeFinished",
                            "converged: the StatefulSet carries its desired volume claim templates"
                                .to_owned(),
                        )
                    }
                    DropReason::Replaced => {
                        step_taken(
                            ctx,
                            "replaced",
                            namespace,
                            name,
                            uid.as_deref(),
                            &journal_name,
                        );
                        (EventType::Warning, "ConvergeAbandoned", "another StatefulSet of this name was created meanwhile; it is left alone and the journal dropped".to_owned())
                    }
                    DropReason::DeletedByUser => {
                        step_taken(
                            ctx,
                            "deleted-by-user",
                            namespace,
                            name,
                            uid.as_deref(),
                            &journal_name,
                        );
                        (
                            EventType::Warning,
                            "ConvergeAbandoned",
                            DELETED_BY_USER.to_owned(),
                        )
                    }
                };
                ctx.event(&about, event(type_, reason_text, "Converge", note))
                    .await;
                return Ok(None);
            }
        }
    }
    Ok(Some(poll))
}

const DELETED_BY_USER: &str = "the StatefulSet was deleted by someone else before convergence deleted it; it is not re-created and the journal dropped";

#[derive(Debug, PartialEq, Eq)]
enum Deleted {
    /// Our delete was accepted (or refused by a precondition: the next pass rechecks).
    Sent,
    /// The set was gone already: someone else deleted it.
    AlreadyGone,
    /// Observe mode: reported, not sent.
    Observed,
}

/// The orphan delete of the set, with the journaled uid and resourceVersion as preconditions.
async fn delete_set(
    ctx: &Ctx,
    journal_name: &str,
    about: &StatefulSet,
    uid: String,
    resource_version: String,
) -> Result<Deleted, Error> {
    let namespace = about.metadata.namespace.as_deref().unwrap_or_default();
    let name = about.metadata.name.as_deref().unwrap_or_default();
    let write = Write::new(
        Verb::DeleteStatefulSet,
        Target {
            uid: Some(uid.clone()),
            resource_version: Some(resource_version.clone()),
            ..Target::new(Kind::StatefulSet, namespace, name)
        },
        Request::Delete {
            uid: Some(uid.clone()),
            resource_version: Some(resource_version),
            orphan: true,
        },
        format!("delete StatefulSet {namespace}/{name} (uid {uid}) with propagationPolicy Orphan; pods and claims keep running"),
    )
    .about(about_ref(about))
    .expected(&[404, 409])
    .on_done(Report::normal(
        about_ref(about),
        "ConvergeDeleted",
        "Converge",
        "deleted with propagationPolicy Orphan; pods and claims keep running".to_owned(),
    ));
    match ctx.exec.write(&write).await {
        Ok(Outcome::Observed) => Ok(Deleted::Observed),
        Ok(Outcome::Done(_)) => {
            step_taken(ctx, "deleted", namespace, name, Some(&uid), journal_name);
            Ok(Deleted::Sent)
        }
        Err(e) if code(&e) == Some(404) => Ok(Deleted::AlreadyGone),
        Err(e) if code(&e) == Some(409) => Ok(Deleted::Sent),
        Err(e) => Err(e.into()),
    }
}

async fn drop_deleted_by_user(
    ctx: &Ctx,
    journals: &Api<ConfigMap>,
    journal_name: &str,
    about: &StatefulSet,
) -> Result<Option<Duration>, Error> {
    if let Some(cm) = journals.get_opt(journal_name).await?
        && !drop_journal(ctx, journal_name, &cm, about).await?
    {
        return Ok(None);
    }
    step_taken(
        ctx,
        "deleted-by-user",
        about.metadata.namespace.as_deref().unwrap_or_default(),
        about.metadata.name.as_deref().unwrap_or_default(),
        about.metadata.uid.as_deref(),
        journal_name,
    );
    ctx.event(
        about,
        event(
            EventType::Warning,
            "ConvergeAbandoned",
            "Converge",
            DELETED_BY_USER.to_owned(),
        ),
    )
    .await;
    Ok(None)
}

/// Deletes journal `name` (this very ConfigMap: its uid is the precondition). False in
/// observe mode, where it is only reported.
async fn drop_journal(
    ctx: &Ctx,
    name: &str,
    cm: &ConfigMap,
    about: &StatefulSet,
) -> Result<bool, Error> {
    let write = Write::new(
        Verb::EndConvergence,
        Target {
            uid: cm.metadata.uid.clone(),
            ..Target::new(Kind::ConfigMap, &ctx.config.namespace, name)
        },
        Request::Delete {
            uid: cm.metadata.uid.clone(),
            resource_version: None,
            orphan: false,
        },
        format!("delete journal ConfigMap {}/{name}", ctx.config.namespace),
    )
    .about(about_ref(about))
    .expected(&[404, 409]);
    match ctx.exec.write(&write).await {
        Ok(outcome) => Ok(outcome.is_done()),
        Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

fn about_ref(about: &StatefulSet) -> ObjectReference {
    kube::Resource::object_ref(about, &())
}
