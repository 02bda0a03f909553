//! The write path with admission, as kube-apiserver runs it for CREATE and UPDATE (PUT,
//! PATCH, server-side apply, and their subresources):
//!
//! 1. the registry prepares the object: merged or patched, defaulted, managedFields computed
//!    — **before** admission, so a mutating webhook's changes are owned by the writer's
//!    entry or by nobody (`endpoints/handlers/create.go`, and the transformers of
//!    `update.go`/`patch.go`: the field manager runs before the mutating admission);
//! 2. each mutating webhook of each hook gets an AdmissionReview, its JSONPatch is applied
//!    and the result defaulted again;
//! 3. the registry validates (and, on create, assigns uid and creationTimestamp, which
//!    validating webhooks see and mutating ones do not);
//! 4. each validating webhook gets an AdmissionReview;
//! 5. the registry stores the object, unless it changed meanwhile (the write is then redone
//!    from step 1, as the registry's `GuaranteedUpdate` does) or this is a dry run.
//!
//! A hook ([`AdmissionHook`]) says which webhooks match a request (reading the store if it
//! wants, as the apiserver reads webhook configurations) and calls one webhook: it answers
//! the response AdmissionReview or a [`CallError`], which the webhook's
//! [`FailurePolicy`] turns into a 500 (`Fail`) or nothing (`Ignore`). A denial becomes the
//! response `Status` (`admission webhook "<name>" denied the request: <message>`), warnings
//! become `Warning: 299 - "<text>"` headers (on a failed write too, as the apiserver adds each
//! header when the warning is given). Not modelled: reinvocation of mutating webhooks,
//! matchConditions, timeouts, and the validation of managedFields a webhook changed.

use std::sync::Arc;

use base64::Engine;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::Shared;
use super::apply;
use super::errors::ApiError;
use super::registry::{self, PatchKind, Target, Update, Writer};
use super::resources::ResourceType;
use super::store::{StoreView, meta_str, namespace_and_name};

/// Mutating webhooks run before validation, validating ones after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Mutating,
    Validating,
}

/// What a failed call to a webhook does to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The request goes on as if the webhook had allowed it.
    Ignore,
    /// The request fails with 500.
    Fail,
}

/// One webhook a hook offers for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// As denial and failure messages name it, e.g. `mutate.stateful-admission.io`.
    pub name: String,
    pub phase: Phase,
    /// Where the hook sends the review: a path of an in-process router, a URL.
    pub endpoint: String,
    pub failure_policy: FailurePolicy,
}

/// Why a webhook could not be called, or answered nonsense.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError(pub String);

/// `CREATE` or `UPDATE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
        }
    }
}

/// What webhooks match on.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    pub operation: Operation,
    pub resource: &'static ResourceType,
    /// `Some("status")` for a status write.
    pub sub_resource: Option<&'a str>,
    /// `""` for cluster-scoped objects.
    pub namespace: &'a str,
    pub name: &'a str,
    pub dry_run: bool,
}

/// Admission plugged into the fake server ([`super::FakeApiServer::add_admission_hook`]).
pub trait AdmissionHook: Send + Sync {
    /// The webhooks of `phase` to call for a request, in order; none when nothing matches.
    fn webhooks(
        &self,
        phase: Phase,
        attributes: &Attributes<'_>,
        store: &StoreView<'_>,
    ) -> Vec<Webhook>;

    /// Sends `review` (an `admission.k8s.io/v1` AdmissionReview with a `request`) to one
    /// webhook; answers the AdmissionReview it sent back.
    fn call(
        &self,
        webhook: &Webhook,
        review: Value,
    ) -> BoxFuture<'static, Result<Value, CallError>>;
}

/// Who asks, as `userInfo` tells webhooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    /// The authenticator's uid of the user, if it gives one.
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// A UUID derived from `seed`: the same user gets the same one.
fn stable_uid(seed: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    seed.hash(&mut hasher);
    let a = hasher.finish();
    (seed, "b").hash(&mut hasher);
    let b = hasher.finish();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

impl UserInfo {
    /// From the impersonation headers (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-<key>`;
    /// kube's client sends the first two when configured to impersonate), else the cluster
    /// admin of a kubeadm kubeconfig. A service account (`system:serviceaccount:<ns>:<name>`)
    /// authenticates with a token: it has a uid, and from v1.32 the token's id in `extra`
    /// (`service_account_credential_id`).
    pub fn from_headers(headers: &axum::http::HeaderMap, config: &super::FakeApiConfig) -> Self {
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect()
        };
        let mut user = match values("impersonate-user").into_iter().next() {
            Some(username) => {
                let mut groups = values("impersonate-group");
                groups.push("system:authenticated".into());
                Self {
                    username,
                    uid: values("impersonate-uid").into_iter().next(),
                    groups,
                    extra: std::collections::BTreeMap::new(),
                }
            }
            None => Self {
                username: "kubernetes-admin".into(),
                uid: None,
                groups: vec![
                    "kubeadm:cluster-admins".into(),
                    "system:authenticated".into(),
                ],
                extra: std::collections::BTreeMap::new(),
            },
        };
        for (name, value) in headers {
            if let Some(key) = name.as_str().strip_prefix("impersonate-extra-")
                && let Ok(value) = value.to_str()
            {
                user.extra
                    .entry(key.replace("%2F", "/").replace("%2f", "/"))
                    .or_default()
                    .push(value.to_owned());
            }
        }
        if user.username.starts_with("system:serviceaccount:") {
            if user.uid.is_none() {
                user.uid = Some(stable_uid(&user.username));
            }
            if config.service_account_credential_id {
                let jti = format!("JTI={}", stable_uid(&format!("{}/token", user.username)));
                user.extra
                    .entry("authentication.kubernetes.io/credential-id".to_owned())
                    .or_insert_with(|| vec![jti]);
            }
        }
        user
    }

    /// As an AdmissionReview's `userInfo`.
    pub fn to_json(&self) -> Value {
        let mut info = json!({"username": self.username, "groups": self.groups});
        if let Some(uid) = &self.uid {
            info["uid"] = json!(uid);
        }
        if !self.extra.is_empty() {
            info["extra"] = json!(self.extra);
        }
        info
    }
}

/// What a write sends.
#[derive(Debug, Clone)]
pub enum WriteBody {
    /// POST: the object to create.
    Create(Value),
    /// PUT: the new object.
    Replace(Value),
    /// PATCH other than apply: the raw patch.
    Patch(PatchKind, Vec<u8>),
    /// Server-side apply: the applied configuration.
    Apply { config: Value, force: bool },
}

/// One write request.
#[derive(Debug, Clone)]
pub struct WriteRequest<'a> {
    pub resource: &'static ResourceType,
    pub namespace: Option<&'a str>,
    /// The name on the URL (none for POST).
    pub name: Option<&'a str>,
    pub target: Target,
    pub writer: Writer<'a>,
    /// `fieldManager` as the client sent it, for the review's `options`.
    pub field_manager: Option<&'a str>,
    /// `fieldValidation` as the client sent it, for the review's `options`.
    pub field_validation: Option<&'a str>,
    pub user: UserInfo,
    pub body: WriteBody,
}

/// What a write answered.
#[derive(Debug, Clone)]
pub struct Written {
    pub object: Value,
    /// 201 (created) or 200.
    pub created: bool,
    pub warnings: Vec<String>,
}

/// How often a write whose object changed under its admission is redone.
const MAX_ATTEMPTS: usize = 5;

#[derive(Debug, Clone)]
struct Prepared {
    operation: Operation,
    /// The stored object an update started from.
    current: Option<Value>,
    object: Value,
}

impl WriteRequest<'_> {
    fn update(&self) -> Update<'_> {
        Update {
            resource: self.resource,
            namespace: self.namespace.unwrap_or(""),
            name: self.name.unwrap_or(""),
            target: self.target,
            writer: self.writer,
            uid_precondition: matches!(self.body, WriteBody::Replace(_)),
        }
    }
}

/// Runs one write through the registry and the hooks.
pub(super) async fn write(
    shared: &Arc<Shared>,
    request: &WriteRequest<'_>,
) -> Result<Written, ApiError> {
    let hooks = shared.hooks().clone();
    for _ in 0..MAX_ATTEMPTS {
        let config = shared.config();
        let prepared = {
            let mut store = shared.store();
            let prepared = prepare(&mut store, &config, request)?;
            if hooks.is_empty() {
                let prepared = complete(&mut store, &config, request, prepared)?;
                return commit(&mut store, request, prepared, Vec::new());
            }
            prepared
        };
        let mut warnings = Vec::new();
        let mut prepared = prepared;
        prepared.object = run_hooks(
            shared,
            &hooks,
            Phase::Mutating,
            request,
            &prepared,
            &mut warnings,
        )
        .await
        .map_err(|e| e.with_warnings(&warnings))?;
        if request.target != Target::Status {
            registry::apply_defaults(
                &config,
                request.resource,
                prepared.current.as_ref(),
                &mut prepared.object,
            );
        }
        let prepared = complete(&mut shared.store(), &config, request, prepared)
            .map_err(|e| e.with_warnings(&warnings))?;
        run_hooks(
            shared,
            &hooks,
            Phase::Validating,
            request,
            &prepared,
            &mut warnings,
        )
        .await
        .map_err(|e| e.with_warnings(&warnings))?;
        let mut store = shared.store();
        let (namespace, name) = namespace_and_name(&prepared.object);
        let now = store.get(request.resource, &namespace, &name);
        let moved = match (&prepared.current, now) {
            (Some(before), Some(now)) => {
                meta_str(before, "resourceVersion") != meta_str(now, "resourceVersion")
            }
            (Some(_), None) => true,
            // An apply that meant to create finds the object: apply to it instead.
            (None, Some(_)) => matches!(request.body, WriteBody::Apply { .. }),
            (None, None) => false,
        };
        if moved {
            continue;
        }
        return commit(&mut store, request, prepared, warnings);
    }
    Err(ApiError::conflict(
        request.resource,
        request.name.unwrap_or(""),
    ))
}

fn prepare(
    store: &mut super::store::Store,
    config: &super::FakeApiConfig,
    request: &WriteRequest<'_>,
) -> Result<Prepared, ApiError> {
    let update = request.update();
    let (operation, current, object) = match &request.body {
        WriteBody::Create(object) => (
            Operation::Create,
            None,
            registry::prepare_create(
                store,
                config,
                request.resource,
                request.namespace,
                object.clone(),
                request.writer,
            )?,
        ),
        WriteBody::Replace(new) => {
            let current = update.current(store)?;
            let object = registry::prepare_update(config, &update, &current, new.clone())?;
            (Operation::Update, Some(current), object)
        }
        WriteBody::Patch(kind, patch) => {
            let current = update.current(store)?;
            let new = registry::patched(request.resource, &current, *kind, patch)?;
            let object = registry::prepare_update(config, &update, &current, new)?;
            (Operation::Update, Some(current), object)
        }
        WriteBody::Apply {
            config: applied,
            force,
        } => {
            match store
                .get(request.resource, update.namespace, update.name)
                .cloned()
            {
                Some(current) => {
                    let object = apply::apply_update(config, &update, &current, applied, *force)?;
                    (Operation::Update, Some(current), object)
                }
                None if request.target == Target::Main => (
                    Operation::Create,
                    None,
                    apply::apply_create(
                        store,
                        config,
                        request.resource,
                        request.namespace,
                        update.name,
                        applied,
                        request.writer,
                    )?,
                ),
                None => return Err(ApiError::not_found(request.resource, update.name)),
            }
        }
    };
    Ok(Prepared {
        operation,
        current,
        object,
    })
}

fn complete(
    store: &mut super::store::Store,
    config: &super::FakeApiConfig,
    request: &WriteRequest<'_>,
    mut prepared: Prepared,
) -> Result<Prepared, ApiError> {
    if request.target != Target::Status {
        registry::drop_disabled_fields(
            config,
            request.resource,
            prepared.current.as_ref(),
            &mut prepared.object,
        );
    }
    let object = match &prepared.current {
        None => registry::complete_create(store, config, request.resource, prepared.object)?,
        Some(current) => {
            registry::complete_update(store, config, &request.update(), current, prepared.object)?
        }
    };
    Ok(Prepared { object, ..prepared })
}

fn commit(
    store: &mut super::store::Store,
    request: &WriteRequest<'_>,
    prepared: Prepared,
    warnings: Vec<String>,
) -> Result<Written, ApiError> {
    let (object, created) = match &prepared.current {
        None => (
            registry::commit_create(
                store,
                request.resource,
                prepared.object,
                request.writer.dry_run,
            )?,
            true,
        ),
        Some(current) => (
            registry::commit_update(store, &request.update(), current, prepared.object)?,
            false,
        ),
    };
    Ok(Written {
        object,
        created,
        warnings,
    })
}

/// The AdmissionReview a webhook gets, shaped like the apiserver's (see
/// `tests/fixtures/apiserver`).
fn review(uid: &str, request: &WriteRequest<'_>, prepared: &Prepared, zero_null: bool) -> Value {
    let resource = request.resource;
    let mut object = prepared.object.clone();
    // Before the registry names it, a new object's creationTimestamp is zero: `null` up to
    // v1.34, left out after.
    if zero_null && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.entry("creationTimestamp").or_insert(Value::Null);
    }
    let (namespace, name) = namespace_and_name(&prepared.object);
    let kind = json!({"group": resource.group, "version": resource.version, "kind": resource.kind});
    let gvr =
        json!({"group": resource.group, "version": resource.version, "resource": resource.plural});
    let options_kind = match prepared.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
    };
    let mut options = json!({"kind": options_kind, "apiVersion": "meta.k8s.io/v1"});
    if let Some(manager) = request.field_manager {
        options["fieldManager"] = json!(manager);
    }
    if let Some(validation) = request.field_validation {
        options["fieldValidation"] = json!(validation);
    }
    if request.writer.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    let mut body = json!({
        "uid": uid,
        "kind": kind,
        "resource": gvr,
        "requestKind": kind,
        "requestResource": gvr,
        "operation": prepared.operation.as_str(),
        "userInfo": request.user.to_json(),
        "object": object,
        "oldObject": prepared.current,
        "dryRun": request.writer.dry_run,
        "options": options,
    });
    if let Some(sub) = sub_resource(request.target) {
        body["subResource"] = json!(sub);
    }
    // `AdmissionRequest.name` is omitempty: a create by `generateName` has none before the
    // registry names it.
    if !name.is_empty() {
        body["name"] = json!(name);
    }
    if !namespace.is_empty() {
        body["namespace"] = json!(namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body})
}

fn sub_resource(target: Target) -> Option<&'static str> {
    match target {
        Target::Main => None,
        Target::Status => Some("status"),
        Target::Scale => Some("scale"),
    }
}

/// Calls every webhook of `phase`; answers the object as the mutating ones left it.
async fn run_hooks(
    shared: &Arc<Shared>,
    hooks: &[Arc<dyn AdmissionHook>],
    phase: Phase,
    request: &WriteRequest<'_>,
    prepared: &Prepared,
    warnings: &mut Vec<String>,
) -> Result<Value, ApiError> {
    let mut object = prepared.object.clone();
    let zero_null = shared.config().zero_creation_timestamp_null;
    for hook in hooks {
        let webhooks = {
            let store = shared.store();
            let (namespace, name) = namespace_and_name(&object);
            let attributes = Attributes {
                operation: prepared.operation,
                resource: request.resource,
                sub_resource: sub_resource(request.target),
                namespace: &namespace,
                name: &name,
                dry_run: request.writer.dry_run,
            };
            hook.webhooks(phase, &attributes, &StoreView(&store))
        };
        for webhook in webhooks {
            let uid = shared.store().new_uid();
            let current = Prepared {
                object: object.clone(),
                ..prepared.clone()
            };
            let answer = hook
                .call(&webhook, review(&uid, request, &current, zero_null))
                .await
                .and_then(|reply| verdict(phase, &uid, &reply));
            match answer {
                Ok(Verdict::Allowed { patch, warnings: w }) => {
                    warnings.extend(w);
                    if let Some(ops) = patch {
                        json_patch::patch(&mut object, &ops).map_err(|e| {
                            ApiError::internal(format!(
                                "Internal error occurred: JSON patch of webhook {:?} does not apply: {e}",
                                webhook.name
                            ))
                        })?;
                    }
                }
                Ok(Verdict::Denied {
                    status,
                    warnings: w,
                }) => {
                    warnings.extend(w);
                    return Err(denial(&webhook.name, &status));
                }
                Err(CallError(why)) => match webhook.failure_policy {
                    FailurePolicy::Ignore => {}
                    FailurePolicy::Fail => {
                        return Err(ApiError::internal(format!(
                            "Internal error occurred: failed calling webhook {:?}: {why}",
                            webhook.name
                        )));
                    }
                },
            }
        }
    }
    Ok(object)
}

enum Verdict {
    Allowed {
        patch: Option<json_patch::Patch>,
        warnings: Vec<String>,
    },
    Denied {
        status: Value,
        warnings: Vec<String>,
    },
}

/// Reads a webhook's answer as `VerifyAdmissionResponse` does.
fn verdict(phase: Phase, uid: &str, reply: &Value) -> Result<Verdict, CallError> {
    let response = reply
        .get("response")
        .ok_or_else(|| CallError("the webhook answered no response".into()))?;
    let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if got != uid {
        return Err(CallError(format!(
            "expected response.uid={uid:?}, got {got:?}"
        )));
    }
    let warnings: Vec<String> = response
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if response.get("allowed").and_then(Value::as_bool) != Some(true) {
        return Ok(Verdict::Denied {
            status: response.get("status").cloned().unwrap_or(json!({})),
            warnings,
        });
    }
    let patch = match response.get("patch").and_then(Value::as_str) {
        None => None,
        Some(_) if phase == Phase::Validating => {
            return Err(CallError(
                "a validating webhook may not return a patch".into(),
            ));
        }
        Some(encoded) => {
            if response.get("patchType").and_then(Value::as_str) != Some("JSONPatch") {
                return Err(CallError("patchType must be JSONPatch".into()));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| CallError(format!("the patch is not base64: {e}")))?;
            Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| CallError(format!("the patch is not a JSON patch: {e}")))?,
            )
        }
    };
    Ok(Verdict::Allowed { patch, warnings })
}

/// `webhookerrors.ToStatusErr`.
fn denial(webhook: &str, status: &Value) -> ApiError {
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let text = |k: &str| status.get(k).and_then(Value::as_str).unwrap_or("");
    let message = if !text("message").is_empty() {
        format!("{denied_by}: {}", text("message"))
    } else if !text("reason").is_empty() {
        format!("{denied_by}: {}", text("reason"))
    } else {
        format!("{denied_by} without explanation")
    };
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(400);
    ApiError::from_webhook(
        code,
        text("reason"),
        message,
        status.get("details").cloned(),
    )
}

/// A warning as the apiserver sends it in a `Warning` header.
pub fn warning_header(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    format!("299 - \"{escaped}\"")
}
