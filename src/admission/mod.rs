//! The pure core: admission rules as plain functions from a request (and a read-only view of
//! the cluster) to a [`Verdict`]. No HTTP, no API client, no clock, no AdmissionReview envelope
//! in here: [`crate::review`] decodes a review, calls [`evaluate`] and renders the answer, for
//! the server and the `review` command alike.

pub mod claim;
pub(crate) mod field;
pub(crate) mod set_claims;
pub mod statefulset;
pub(crate) mod warning;

use json_patch::PatchOperation;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{DynamicObject, GroupVersionResource};

use std::sync::Arc;

use crate::capabilities::Capabilities;
use crate::cluster::ClusterView;
use crate::names;
pub use field::{BadValue, ErrorType, FieldError};

/// Which webhook is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Mutate,
    Validate,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Mutate => "mutate",
            Phase::Validate => "validate",
        }
    }
}

/// Policy switches of the rules, set from command-line flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Deny (instead of warn) maxUnavailable above replicas or above replicas - partition.
    pub strict_max_unavailable: bool,
    /// Copy a set `maxUnavailable` into the `max-unavailable` annotation, for clusters whose
    /// apiserver drops the native field.
    pub max_unavailable_fallback: bool,
    /// Allow shrinking a claim's request to a value above its capacity (recovery from a
    /// failed expansion, KEP-1790); when off any decrease is denied.
    pub expansion_recovery: bool,
    /// What the cluster does, as last learned ([`crate::capabilities`]); set per request by
    /// the server from what its prober learned, from `--capability` flags offline.
    pub capabilities: Arc<Capabilities>,
    /// Usernames the StatefulSet controller creates claims as: only their claims get a set's
    /// stored template values. Shared, as the policy is copied for every request.
    pub statefulset_controller_users: Arc<[String]>,
    /// What a denial of the rules does to the request: deny it, or only warn.
    pub admission_mode: AdmissionMode,
    /// Start coordinated rollouts ([`crate::rollout::hold`]): only where a controller acts on
    /// them (`serve` with its controller enforcing the claim rollout), so that a hold is never
    /// left for no one to lower. Holds already on a set are kept either way.
    pub coordinated_rollout: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            strict_max_unavailable: false,
            max_unavailable_fallback: true,
            expansion_recovery: true,
            capabilities: Arc::new(Capabilities::unknown(
                "offline: no cluster to learn from (state it with --capability)",
            )),
            statefulset_controller_users: names::STATEFULSET_CONTROLLER_USERS
                .iter()
                .map(|u| (*u).to_owned())
                .collect(),
            admission_mode: AdmissionMode::Enforce,
            coordinated_rollout: true,
        }
    }
}

impl Policy {
    /// Whether `username` is the StatefulSet controller's.
    pub fn is_statefulset_controller(&self, username: &str) -> bool {
        self.statefulset_controller_users
            .iter()
            .any(|u| u == username)
    }

    /// Whether a set `maxUnavailable` should still be copied into the fallback annotation:
    /// the flag is on and the apiserver is not known to keep the field. While unknown (no
    /// probe yet, `review`) the copy is kept, as it costs little.
    pub fn needs_max_unavailable_fallback(&self) -> bool {
        self.max_unavailable_fallback && self.capabilities.keeps_max_unavailable() != Some(true)
    }

    /// The apiserver's `MaxUnavailableStatefulSet` gate as the capabilities say it.
    pub fn max_unavailable_gate(&self) -> GateStatus {
        GateStatus::of(&self.capabilities)
    }

    /// This policy with the capabilities as last learned.
    pub fn with_capabilities(&self, capabilities: Arc<Capabilities>) -> Self {
        Self {
            capabilities,
            ..self.clone()
        }
    }
}

/// The apiserver's `MaxUnavailableStatefulSet` gate as seen from outside: does a
/// StatefulSet's `spec.updateStrategy.rollingUpdate.maxUnavailable` survive a write?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GateStatus {
    /// Not probed yet, or the probe failed.
    #[default]
    Unknown,
    /// The field is kept; the built-in StatefulSet controller honours it.
    Enabled,
    /// The field is dropped; the companion controller drives the rollout.
    Disabled,
}

impl GateStatus {
    /// The gate as `capabilities` know it: kept is on; dropped, or absent from the types, off.
    pub fn of(capabilities: &Capabilities) -> Self {
        match capabilities.keeps_max_unavailable() {
            Some(true) => Self::Enabled,
            Some(false) => Self::Disabled,
            None => Self::Unknown,
        }
    }

    /// The value of the `max_unavailable_gate_enabled` metric: 1, 0, or -1 when unknown.
    pub fn metric_value(self) -> i64 {
        match self {
            Self::Enabled => 1,
            Self::Disabled => 0,
            Self::Unknown => -1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enabled => "enabled",
            Self::Disabled => "disabled",
            Self::Unknown => "unknown",
        }
    }
}

/// What the webhook does with a request its rules deny.
///
/// In `Warn` mode (Kyverno's `Audit`, Gatekeeper's `warn` enforcement action) such a request
/// is allowed exactly as it came: the denial message goes back as the first warning, and the
/// patch computed alongside the denial is dropped, as in `Enforce` mode. A denied request's
/// patch was never meant to be stored on its own (an edit of a set's templates that is denied
/// for one template is not recorded for the others), so the object is stored as the client
/// sent it and whatever the apiserver's own validation says about it still holds (a template
/// change passed on unchanged is then refused by the apiserver itself). Requests the rules
/// allow, including those the mutation makes acceptable, are mutated in both modes alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AdmissionMode {
    #[default]
    Enforce,
    Warn,
}

impl AdmissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::Warn => "warn",
        }
    }
}

/// Starts the warning that carries a denial the `Warn` mode let through.
pub const WOULD_DENY_PREFIX: &str = "would be denied (admission mode warn)";

/// Everything a rule may consult besides the request.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    pub view: &'a ClusterView,
    pub policy: &'a Policy,
}

/// Why a request is denied; rendered into the response `status` the way kube-apiserver
/// renders the same failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// 422 `Invalid`: `<Kind>.<group> "<name>" is invalid: <field errors>`.
    Invalid(Vec<FieldError>),
    /// 403 `Forbidden`: `<resource>.<group> "<name>" is forbidden: <detail>`.
    Forbidden(String),
}

/// The outcome of the rules for one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    pub denial: Option<Denial>,
    pub patch: Vec<PatchOperation>,
    pub warnings: Vec<String>,
}

impl Verdict {
    /// Allowed, unchanged, no warning.
    pub fn allow() -> Self {
        Self::default()
    }

    pub fn invalid(errors: Vec<FieldError>) -> Self {
        Self {
            denial: Some(Denial::Invalid(errors)),
            ..Self::default()
        }
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self {
            denial: Some(Denial::Forbidden(detail.into())),
            ..Self::default()
        }
    }

    pub fn is_allowed(&self) -> bool {
        self.denial.is_none()
    }

    pub fn is_mutated(&self) -> bool {
        self.is_allowed() && !self.patch.is_empty()
    }

    pub fn warn(&mut self, warning: impl Into<String>) {
        self.warnings.push(warning.into());
    }

    /// Adds a structured warning: as many warnings of at most 256 characters as it takes.
    pub fn warn_all(&mut self, warning: warning::Warning) {
        self.warnings.extend(warning.build());
    }

    /// Combines the verdicts of independent rules on one request: field errors add up, the
    /// first forbidden reason wins, patches and warnings are concatenated in order. Patches of
    /// a denied request are dropped when rendered.
    pub fn merge(&mut self, other: Verdict) {
        self.denial = match (self.denial.take(), other.denial) {
            (Some(Denial::Invalid(mut a)), Some(Denial::Invalid(b))) => {
                a.extend(b);
                Some(Denial::Invalid(a))
            }
            (Some(a), _) => Some(a),
            (None, b) => b,
        };
        self.patch.extend(other.patch);
        self.warnings.extend(other.warnings);
    }
}

/// The requests the rules look at: `apps/v1 statefulsets` and `v1 persistentvolumeclaims`,
/// the main resource (no subresource), CREATE or UPDATE. Decided from the request's resource,
/// subresource and operation alone, before anything is required of its objects: any other
/// request (a `CONNECT` of `pods/exec` carries `PodExecOptions`, with no `metadata`) is allowed
/// unchanged whatever its objects are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    StatefulSet,
    Claim,
}

impl Route {
    pub fn of(
        resource: &GroupVersionResource,
        sub_resource: Option<&str>,
        operation: &Operation,
    ) -> Option<Self> {
        if !sub_resource.is_none_or(str::is_empty)
            || !matches!(operation, Operation::Create | Operation::Update)
        {
            return None;
        }
        match (
            resource.group.as_str(),
            resource.version.as_str(),
            resource.resource.as_str(),
        ) {
            ("apps", "v1", "statefulsets") => Some(Self::StatefulSet),
            ("", "v1", "persistentvolumeclaims") => Some(Self::Claim),
            _ => None,
        }
    }

    /// The route of a decoded request.
    pub fn of_request(req: &AdmissionRequest<DynamicObject>) -> Option<Self> {
        Self::of(&req.resource, req.sub_resource.as_deref(), &req.operation)
    }
}

/// Runs the rules of `phase` on one request.
pub fn evaluate(phase: Phase, req: &AdmissionRequest<DynamicObject>, ctx: &Context<'_>) -> Verdict {
    let Some(route) = Route::of_request(req) else {
        return Verdict::allow();
    };
    if let Some(ns) = req.namespace.as_deref()
        && ctx.view.namespace_ignored(ns)
    {
        return Verdict::allow();
    }
    match route {
        Route::StatefulSet => statefulset::review(phase, req, ctx),
        Route::Claim => claim::review(phase, req, ctx),
    }
}
