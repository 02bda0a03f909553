//! What the controller does, as data. Planners return [`Action`]s; the
//! [executor](super::executor) carries them out (or, in observe mode, reports them). Nothing
//! here talks to the API, so a plan can be checked in a test as a plain value.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, PersistentVolumeClaim, Pod};
use kube::api::ApiResource;
use kube::runtime::events::EventType;
use serde_json::Value;

/// What a write is for: the `action` label of `controller_actions_total`, the `action` of our
/// Events, and the reason `Would<Verb>` of the observe-mode Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// Patch a claim towards its desired template (claim rollout).
    PatchClaim,
    /// Give a classless claim the default StorageClass (retroactive default class).
    AssignStorageClass,
    /// Write the `volume-claim-status` annotation of a set.
    WriteClaimStatus,
    /// Write or remove the `progress` record of a set.
    WriteProgress,
    /// Write the `Available`/`Progressing` conditions of a set.
    WriteConditions,
    /// Delete an old-revision pod for a maxUnavailable rolling update.
    DeletePod,
    /// Open a convergence journal (the first step of re-creating a set).
    StartConvergence,
    /// Move a convergence journal on a step.
    AdvanceConvergence,
    /// Orphan-delete a journaled set.
    DeleteStatefulSet,
    /// Re-create a journaled set.
    CreateStatefulSet,
    /// Give the users' field managers back their fields of a re-created set.
    RestoreOwnership,
    /// Close a convergence journal.
    EndConvergence,
    /// Record on a claim that its pod is restarted for a resize (or remove the record).
    RecordPodRestart,
    /// Evict a pod whose claim waits for it to be re-created to finish a resize.
    EvictPod,
    /// Lower or release the hold of a coordinated rollout (`rollout-hold` on a set).
    HoldRollout,
}

impl Verb {
    pub const ALL: [Self; 15] = [
        Self::PatchClaim,
        Self::AssignStorageClass,
        Self::WriteClaimStatus,
        Self::WriteProgress,
        Self::WriteConditions,
        Self::DeletePod,
        Self::StartConvergence,
        Self::AdvanceConvergence,
        Self::DeleteStatefulSet,
        Self::CreateStatefulSet,
        Self::RestoreOwnership,
        Self::EndConvergence,
        Self::RecordPodRestart,
        Self::EvictPod,
        Self::HoldRollout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PatchClaim => "PatchClaim",
            Self::AssignStorageClass => "AssignStorageClass",
            Self::WriteClaimStatus => "WriteClaimStatus",
            Self::WriteProgress => "WriteProgress",
            Self::WriteConditions => "WriteConditions",
            Self::DeletePod => "DeletePod",
            Self::StartConvergence => "StartConvergence",
            Self::AdvanceConvergence => "AdvanceConvergence",
            Self::DeleteStatefulSet => "DeleteStatefulSet",
            Self::CreateStatefulSet => "CreateStatefulSet",
            Self::RestoreOwnership => "RestoreOwnership",
            Self::EndConvergence => "EndConvergence",
            Self::RecordPodRestart => "RecordPodRestart",
            Self::EvictPod => "EvictPod",
            Self::HoldRollout => "HoldRollout",
        }
    }

    /// The reason of the Event that reports this write in observe mode.
    pub fn would(self) -> &'static str {
        match self {
            Self::PatchClaim => "WouldPatchClaim",
            Self::AssignStorageClass => "WouldAssignStorageClass",
            Self::WriteClaimStatus => "WouldWriteClaimStatus",
            Self::WriteProgress => "WouldWriteProgress",
            Self::WriteConditions => "WouldWriteConditions",
            Self::DeletePod => "WouldDeletePod",
            Self::StartConvergence => "WouldStartConvergence",
            Self::AdvanceConvergence => "WouldAdvanceConvergence",
            Self::DeleteStatefulSet => "WouldDeleteStatefulSet",
            Self::CreateStatefulSet => "WouldCreateStatefulSet",
            Self::RestoreOwnership => "WouldRestoreOwnership",
            Self::EndConvergence => "WouldEndConvergence",
            Self::RecordPodRestart => "WouldRecordPodRestart",
            Self::EvictPod => "WouldEvictPod",
            Self::HoldRollout => "WouldHoldRollout",
        }
    }
}

/// The kinds the controller writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Claim,
    StatefulSet,
    Pod,
    ConfigMap,
}

impl Kind {
    pub fn api_resource(self) -> ApiResource {
        match self {
            Self::Claim => ApiResource::erase::<PersistentVolumeClaim>(&()),
            Self::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
            Self::Pod => ApiResource::erase::<Pod>(&()),
            Self::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Self::Claim => "persistentvolumeclaims",
            Self::StatefulSet => "statefulsets",
            Self::Pod => "pods",
            Self::ConfigMap => "configmaps",
        }
    }
}

/// The object a write goes to, and the version it was planned from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    /// The resourceVersion the plan saw. With [`Write::expect`], the executor remembers it
    /// after the write: while the view still shows this version, a plan of the object is stale.
    pub resource_version: Option<String>,
}

impl Target {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: None,
            resource_version: None,
        }
    }

    /// The target as the view holds `meta`: its uid and resourceVersion.
    pub fn of(kind: Kind, meta: &kube::api::ObjectMeta) -> Self {
        Self {
            kind,
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
        }
    }

    /// The key of the object in the executor's expectations.
    pub fn key(&self) -> String {
        key(self.kind, &self.namespace, &self.name)
    }

    /// A reference to the object, for Events.
    pub fn reference(&self) -> ObjectReference {
        let resource = self.kind.api_resource();
        ObjectReference {
            api_version: Some(resource.api_version),
            kind: Some(resource.kind),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: self.uid.clone(),
            ..ObjectReference::default()
        }
    }
}

/// The key of object `namespace/name` of `kind` in the executor's expectations.
pub fn key(kind: Kind, namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", kind.plural())
}

/// The request of a write. Patches are JSON merge patches; a `resourceVersion` inside one is
/// its precondition.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Patch(Value),
    PatchStatus(Value),
    Create(Value),
    Delete {
        /// Preconditions: the object is deleted only while it has this uid and version.
        uid: Option<String>,
        resource_version: Option<String>,
        /// `propagationPolicy: Orphan` (the set's pods and claims stay).
        orphan: bool,
    },
    /// A pod's eviction (`pods/eviction`: the apiserver deletes it only where its
    /// PodDisruptionBudgets allow, else 429), only while the pod has this uid.
    Evict {
        uid: Option<String>,
    },
}

/// An Event to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub regarding: ObjectReference,
    /// The related object; it also keeps the recorder from folding Events about different
    /// objects into one series.
    pub related: Option<ObjectReference>,
    pub type_: EventType,
    pub reason: String,
    pub action: String,
    pub note: String,
    /// Published only the first time this key is seen (per leadership term, bounded).
    pub once: Option<String>,
}

/// Longest Event note the API takes is 1 kB.
pub const MAX_NOTE: usize = 1000;

impl Report {
    pub fn new(
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) -> Self {
        Self {
            regarding,
            related: None,
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note,
            once: None,
        }
    }

    pub fn normal(regarding: ObjectReference, reason: &str, action: &str, note: String) -> Self {
        Self::new(regarding, EventType::Normal, reason, action, note)
    }

    pub fn warning(regarding: ObjectReference, reason: &str, action: &str, note: String) -> Self {
        Self::new(regarding, EventType::Warning, reason, action, note)
    }

    pub fn related(mut self, related: Option<ObjectReference>) -> Self {
        self.related = related;
        self
    }

    pub fn once(mut self, key: String) -> Self {
        self.once = Some(key);
        self
    }
}

/// One write, with what to say about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub verb: Verb,
    pub target: Target,
    pub request: Request,
    /// What the write changes, in a few words (logs, and the note of the observe-mode Event).
    pub summary: String,
    /// The object Events about this write hang on: the target, or for a journal its set.
    pub about: ObjectReference,
    /// Remember the target's planned version after the write (see [`Target`]).
    pub expect: bool,
    /// Published once the write is done.
    pub on_done: Vec<Report>,
    /// Published when the write fails with an unexpected error; `{error}` in a note is
    /// replaced by the error, and a report-once key is extended by it (a new error is
    /// reported again; a success forgets the key).
    pub on_failed: Vec<Report>,
    /// Answers that are part of the plan, not failures: a 409 of a precondition, a 404 of an
    /// object gone meanwhile. They publish no failure Event.
    pub expected: &'static [u16],
    /// Whether it waits on the write before it in its plan (see [`After`]).
    pub after: After,
}

/// How a write depends on the one before it in its plan; the executor resolves it, so a plan
/// is complete as the planner returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum After {
    /// Runs whatever became of the one before.
    #[default]
    Anything,
    /// Runs only if the one before was done (in observe mode: reported).
    Done,
    /// Runs only if the one before was done, with the resourceVersion that write produced as
    /// its own precondition (in place of the one it was planned from).
    DoneVersion,
    /// Runs only if the one before found its object gone (answered 404).
    Gone,
    /// Runs unless the one before failed with an answer it did not expect (a batch stops at
    /// the first real failure; a 404 or 409 it expected does not stop it).
    NoFailure,
}

impl Write {
    pub fn new(verb: Verb, target: Target, request: Request, summary: String) -> Self {
        let about = target.reference();
        Self {
            verb,
            target,
            request,
            summary,
            about,
            expect: false,
            on_done: Vec::new(),
            on_failed: Vec::new(),
            expected: &[],
            after: After::Anything,
        }
    }

    pub fn after(mut self, after: After) -> Self {
        self.after = after;
        self
    }

    /// Makes the write carry `resource_version` as its precondition (the planned version of
    /// its target, and `metadata.resourceVersion` of a patch).
    pub fn precondition(&mut self, resource_version: &str) {
        self.target.resource_version = Some(resource_version.to_owned());
        if let Request::Patch(body) | Request::PatchStatus(body) = &mut self.request
            && let Some(meta) = body.get_mut("metadata").and_then(|m| m.as_object_mut())
        {
            meta.insert("resourceVersion".to_owned(), resource_version.into());
        }
    }

    pub fn about(mut self, about: ObjectReference) -> Self {
        self.about = about;
        self
    }

    pub fn expect(mut self) -> Self {
        self.expect = true;
        self
    }

    pub fn on_done(mut self, report: Report) -> Self {
        self.on_done.push(report);
        self
    }

    pub fn on_failed(mut self, report: Report) -> Self {
        self.on_failed.push(report);
        self
    }

    pub fn expected(mut self, codes: &'static [u16]) -> Self {
        self.expected = codes;
        self
    }
}

/// One thing the controller does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Write(Write),
    Report(Report),
}

/// A reference to a StatefulSet that may be gone, to hang Events on.
pub fn set_reference(namespace: &str, name: &str, uid: Option<&str>) -> ObjectReference {
    Target {
        uid: uid.map(str::to_owned),
        ..Target::new(Kind::StatefulSet, namespace, name)
    }
    .reference()
}

/// A reference to `object` as the view holds it.
pub fn reference_of(kind: Kind, meta: &kube::api::ObjectMeta) -> ObjectReference {
    Target::of(kind, meta).reference()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_name_their_observe_mode_reason() {
        for verb in Verb::ALL {
            assert_eq!(verb.would(), format!("Would{}", verb.as_str()));
        }
    }

    #[test]
    fn targets_name_their_object() {
        let t = Target::new(Kind::Claim, "db", "data-web-0");
        assert_eq!(t.key(), "persistentvolumeclaims/db/data-web-0");
        let r = set_reference("db", "web", Some("u1"));
        assert_eq!(r.api_version.as_deref(), Some("apps/v1"));
        assert_eq!(r.kind.as_deref(), Some("StatefulSet"));
        assert_eq!(r.uid.as_deref(), Some("u1"));
        let p = Target::new(Kind::Pod, "db", "web-0").reference();
        assert_eq!(p.api_version.as_deref(), Some("v1"));
        assert_eq!(p.kind.as_deref(), Some("Pod"));
    }
}
