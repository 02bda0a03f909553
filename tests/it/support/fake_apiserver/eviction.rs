//! The Eviction subresource, `POST /api/v1/namespaces/{ns}/pods/{name}/eviction`, as
//! kube-apiserver's `EvictionREST.Create` answers it (`pkg/registry/core/pod/storage/eviction.go`),
//! with the PodDisruptionBudget status it reads computed on the spot, as the disruption
//! controller would have written it (`pkg/controller/disruption/disruption.go`: `trySync`,
//! `getExpectedPodCount`, `countHealthyPods`).
//!
//! - 400 for a body that is not an Eviction, or names another pod or namespace than the URL;
//!   404 for a missing pod;
//! - a pod that is `Pending`, `Succeeded`, `Failed` or being deleted goes without a look at any
//!   budget (`canIgnorePDB`);
//! - budgets whose selector (non-empty, valid) matches the pod: none, the pod goes; more than
//!   one, 500 with the apiserver's Status; one: an unready pod goes where the budget's
//!   `unhealthyPodEvictionPolicy` is `AlwaysAllow`, or where it is healthy now
//!   (`currentHealthy >= desiredHealthy > 0`); otherwise the budget must allow a disruption,
//!   else 429 with the apiserver's Status (`checkAndDecrement`), and nothing is deleted;
//! - the pod goes as a delete does (finalizers, PVC protection), after the `DisruptionTarget`
//!   condition is written on it (`addConditionAndDeletePod`, where
//!   [`FakeApiConfig::pod_disruption_conditions`]); the delete's preconditions (`uid`,
//!   `resourceVersion`) are checked there, 409 with the apiserver's message; `dryRun` checks
//!   everything and changes nothing;
//! - the answer is 201 with a `Success` Status; each eviction is logged
//!   ([`FakeApiServer::eviction_records`]) besides the request log and the write records
//!   (verb `create`, subresource `eviction`).
//!
//! Not modelled: the budget's status write that upstream makes on an eviction
//! (`disruptionsAllowed` decremented, the pod in `disruptedPods`: the fake's pods go at once, so
//! the next computation sees them gone), a budget whose status lags its generation (the
//! computation is always current), admission of the eviction (hooks see no `pods/eviction`),
//! and the refusal of a `dryRun` that differs between the query and the body. A budget's stored
//! status stays what was written to it ([`FakeApiServer::sync_disruption_budgets`] writes the
//! computed one).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::errors::ApiError;
use super::registry::{self, DeleteOptions};
use super::resources::{self, ResourceType};
use super::selectors::LabelSelector;
use super::store::{Store, meta_str, namespace_and_name};
use super::{FakeApiConfig, FakeApiServer, Shared, lock};

/// `The disruption budget ... needs ...`: upstream's `policyv1.DisruptionBudgetCause`.
const DISRUPTION_BUDGET_CAUSE: &str = "DisruptionBudget";

/// The message of every refusal by a budget (`checkAndDecrement`).
pub const REFUSAL_MESSAGE: &str =
    "Cannot evict pod as it would violate the pod's disruption budget.";

/// The message of the 500 for a pod that more than one budget selects.
pub const MULTIPLE_BUDGETS_MESSAGE: &str = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

/// The disruption controller's numbers for one budget, as of now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DisruptionStatus {
    pub expected_pods: i64,
    pub desired_healthy: i64,
    pub current_healthy: i64,
    pub disruptions_allowed: i64,
    /// Whether the controller could compute it; where not (a selected pod's controller is not
    /// found, a value that is not an integer or percentage) it fails safe: no disruption
    /// allowed, the other numbers as last written to the budget's status.
    pub synced: bool,
}

/// One eviction as the server answered it.
#[derive(Debug, Clone)]
pub struct EvictionRecord {
    /// When it arrived, from the server's start (the clock of `WriteRecord::at`).
    pub at: Duration,
    pub namespace: String,
    pub pod: String,
    /// The uid of the pod the eviction met; `None` when there was none (404).
    pub uid: Option<String>,
    /// 201 evicted (or would have, on a dry run), 429 refused by a budget, 409 a failed
    /// precondition, 500 more than one budget, 404 no pod, 400 a bad body.
    pub code: u16,
    pub dry_run: bool,
    /// The budget that decided, where one did.
    pub budget: Option<String>,
}

impl EvictionRecord {
    /// Whether the pod went (201, not a dry run).
    pub fn evicted(&self) -> bool {
        self.code == 201 && !self.dry_run
    }

    /// Whether a budget refused it (429).
    pub fn refused(&self) -> bool {
        self.code == 429
    }
}

/// The query parameters an eviction reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionParams {
    dry_run: Option<String>,
}

/// `policy/v1` defaulting (`SetDefaults_PodDisruptionBudgetSpec`): a budget that sets neither
/// `minAvailable` nor `maxUnavailable` gets `minAvailable: 1`.
pub fn default_pod_disruption_budget(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let set = |key: &str| spec.get(key).is_some_and(|v| !v.is_null());
    if !set("minAvailable") && !set("maxUnavailable") {
        spec.insert("minAvailable".into(), json!(1));
    }
}

/// The status the registry gives a new budget (`PrepareForCreate` empties it; the counters are
/// not omitempty).
pub fn initial_pod_disruption_budget_status() -> Value {
    json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0})
}

/// The route's handler.
pub(super) async fn serve(
    State(shared): State<Arc<Shared>>,
    method: Method,
    Path((version, namespace, name)): Path<(String, String, String)>,
    query: Result<Query<EvictionParams>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Response {
    if version != "v1" {
        return ApiError::unknown_path().into_response();
    }
    if method != Method::POST {
        return ApiError::method_not_allowed(method.as_str()).into_response();
    }
    let query_dry_run = match query {
        Ok(Query(params)) => params.dry_run.as_deref() == Some("All"),
        Err(rejection) => return ApiError::bad_request(rejection.body_text()).into_response(),
    };
    let at = shared.traffic.elapsed();
    let outcome = evict(&shared, &namespace, &name, &body, query_dry_run);
    let (code, response) = match outcome.result {
        Ok(answer) => (answer.code, answer.into_response()),
        Err(error) => (error.code, error.into_response()),
    };
    lock(&shared.evictions).push(EvictionRecord {
        at,
        namespace,
        pod: name,
        uid: outcome.uid,
        code,
        dry_run: outcome.dry_run,
        budget: outcome.budget,
    });
    response
}

/// A Status the eviction answers with (not an error: `Success`, or the 500 upstream builds as
/// a `metav1.Status` rather than an error, which has no reason).
struct Answer {
    code: u16,
    status: Value,
}

impl Answer {
    fn success() -> Self {
        Self {
            code: 201,
            status: json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Success", "code": 201}),
        }
    }

    fn multiple_budgets() -> Self {
        Self {
            code: 500,
            status: json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Failure", "message": MULTIPLE_BUDGETS_MESSAGE, "code": 500}),
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (code, axum::Json(self.status)).into_response()
    }
}

struct Outcome {
    result: Result<Answer, ApiError>,
    uid: Option<String>,
    dry_run: bool,
    budget: Option<String>,
}

/// The refusal by a budget that allows no disruption now.
pub fn refusal(budget: &str, desired_healthy: i64, current_healthy: i64) -> ApiError {
    ApiError {
        code: 429,
        reason: "TooManyRequests",
        message: REFUSAL_MESSAGE.to_owned(),
        details: Some(json!({"causes": [{
            "reason": DISRUPTION_BUDGET_CAUSE,
            "message": format!(
                "The disruption budget {budget} needs {desired_healthy} healthy pods and has {current_healthy} currently"
            ),
        }]})),
        warnings: Vec::new(),
    }
}

/// The parts of the Eviction body that matter: its `deleteOptions`.
fn read_body(
    body: &[u8],
    namespace: &str,
    name: &str,
    query_dry_run: bool,
) -> Result<DeleteOptions, ApiError> {
    let eviction = registry::parse_object(body)?;
    let api_version = eviction
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    // The handler decodes into policy/v1 by default and accepts v1 and v1beta1 Evictions.
    if !api_version.is_empty() && !matches!(api_version, "policy/v1" | "policy/v1beta1") {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version (policy/v1)"
        )));
    }
    if eviction
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| !k.is_empty() && k != "Eviction")
    {
        return Err(ApiError::bad_request(format!(
            "not a Eviction object: {}",
            eviction["kind"]
        )));
    }
    if meta_str(&eviction, "namespace").is_some_and(|ns| !ns.is_empty() && ns != namespace) {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if meta_str(&eviction, "name").unwrap_or("") != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    // Only `deleteOptions` is read: any other spelling (`delete_options`) is an unknown field
    // the apiserver drops.
    let options = match eviction.get("deleteOptions") {
        None | Some(Value::Null) => Vec::new(),
        Some(options) => {
            serde_json::to_vec(options).map_err(|e| ApiError::internal(e.to_string()))?
        }
    };
    DeleteOptions::parse(&options, None, query_dry_run)
}

fn evict(
    shared: &Shared,
    namespace: &str,
    name: &str,
    body: &[u8],
    query_dry_run: bool,
) -> Outcome {
    let mut outcome = Outcome {
        result: Ok(Answer::success()),
        uid: None,
        dry_run: query_dry_run,
        budget: None,
    };
    let options = match read_body(body, namespace, name, query_dry_run) {
        Ok(options) => options,
        Err(error) => {
            outcome.result = Err(error);
            return outcome;
        }
    };
    outcome.dry_run = options.dry_run;
    let config = shared.config();
    let mut store = shared.store();
    let Some(pod) = store.get(&resources::PODS, namespace, name).cloned() else {
        outcome.result = Err(ApiError::not_found(&resources::PODS, name));
        return outcome;
    };
    outcome.uid = meta_str(&pod, "uid").map(str::to_owned);
    outcome.result = match decide(&store, &config, &pod, &mut outcome.budget) {
        Ok(Verdict::Go) => remove(&mut store, &config, &pod, &options),
        Ok(Verdict::SeveralBudgets) => Ok(Answer::multiple_budgets()),
        Err(refused) => Err(refused),
    };
    outcome
}

/// What the budgets say of an eviction they do not refuse.
enum Verdict {
    Go,
    /// More than one budget selects the pod: upstream answers a Status (500), not an error.
    SeveralBudgets,
}

/// Whether the pod may go, or the budget's refusal.
fn decide(
    store: &Store,
    config: &FakeApiConfig,
    pod: &Value,
    decided_by: &mut Option<String>,
) -> Result<Verdict, ApiError> {
    if can_ignore_budgets(pod) {
        return Ok(Verdict::Go);
    }
    let (namespace, _) = namespace_and_name(pod);
    let budgets: Vec<&Value> = store
        .list(&resources::POD_DISRUPTION_BUDGETS, Some(&namespace))
        .filter(|budget| selects(budget, pod))
        .collect();
    let budget = match budgets.as_slice() {
        [] => return Ok(Verdict::Go),
        [one] => *one,
        _ => return Ok(Verdict::SeveralBudgets),
    };
    let budget_name = meta_str(budget, "name").unwrap_or("").to_owned();
    *decided_by = Some(budget_name.clone());
    let status = disruption_status(store, budget);
    if !is_ready(pod) {
        let always_allow = config.unhealthy_pod_eviction_policy
            && budget.pointer("/spec/unhealthyPodEvictionPolicy") == Some(&json!("AlwaysAllow"));
        // The default (IfHealthyBudget): an unready pod may go while the application is not
        // disrupted; it counts in neither number, so nothing is decremented.
        let healthy =
            status.current_healthy >= status.desired_healthy && status.desired_healthy > 0;
        if always_allow || healthy {
            return Ok(Verdict::Go);
        }
    }
    if status.disruptions_allowed <= 0 {
        return Err(refusal(
            &budget_name,
            status.desired_healthy,
            status.current_healthy,
        ));
    }
    Ok(Verdict::Go)
}

/// `canIgnorePDB`: a pod that is not running, or already going, disrupts nothing more.
fn can_ignore_budgets(pod: &Value) -> bool {
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    matches!(phase, Some("Succeeded" | "Failed" | "Pending"))
        || pod
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
}

/// `podutil.IsPodReady`: the `Ready` condition is `True`.
fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.get("type") == Some(&json!("Ready")) && c.get("status") == Some(&json!("True"))
            })
        })
}

/// The budget's selector as eviction reads it: invalid, nil or empty selects nothing.
fn selector_of(budget: &Value) -> Option<LabelSelector> {
    let selector = budget.pointer("/spec/selector").filter(|s| !s.is_null())?;
    LabelSelector::from_object(selector).filter(|s| !s.is_empty())
}

fn selects(budget: &Value, pod: &Value) -> bool {
    selector_of(budget).is_some_and(|s| s.matches(pod))
}

/// Deletes the pod (or, on a dry run, checks that it could), after the `DisruptionTarget`
/// condition.
fn remove(
    store: &mut Store,
    config: &FakeApiConfig,
    pod: &Value,
    options: &DeleteOptions,
) -> Result<Answer, ApiError> {
    let (namespace, name) = namespace_and_name(pod);
    let pods = &resources::PODS;
    if options.dry_run {
        registry::delete(store, config, pods, &namespace, &name, options)?;
        return Ok(Answer::success());
    }
    // `addConditionAndDeletePod`: the preconditions are checked against the pod as stored,
    // with the delete's wording, before the condition is written.
    let uid = meta_str(pod, "uid").unwrap_or("");
    if let Some(wanted) = options
        .uid
        .as_deref()
        .filter(|u| !u.is_empty() && *u != uid)
    {
        return Err(ApiError::delete_precondition_failed(
            pods, &name, "UID", wanted, uid,
        ));
    }
    let version = meta_str(pod, "resourceVersion").unwrap_or("");
    if let Some(wanted) = options
        .resource_version
        .as_deref()
        .filter(|rv| !rv.is_empty() && *rv != version)
    {
        return Err(ApiError::delete_precondition_failed(
            pods,
            &name,
            "ResourceVersion",
            wanted,
            version,
        ));
    }
    if config.pod_disruption_conditions {
        let mut marked = pod.clone();
        add_disruption_target(&mut marked);
        store.commit_upsert(pods, marked);
    }
    let checked = DeleteOptions {
        uid: None,
        resource_version: None,
        ..options.clone()
    };
    registry::delete(store, config, pods, &namespace, &name, &checked)?;
    Ok(Answer::success())
}

/// `podutil.UpdatePodCondition` with the eviction's `DisruptionTarget` condition.
fn add_disruption_target(pod: &mut Value) {
    let condition = json!({
        "type": "DisruptionTarget", "status": "True", "lastProbeTime": null,
        "lastTransitionTime": registry::now_rfc3339(),
        "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting",
    });
    let Some(object) = pod.as_object_mut() else {
        return;
    };
    let status = object.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let Some(status) = status.as_object_mut() else {
        return;
    };
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    if let Some(list) = conditions.as_array_mut() {
        match list
            .iter_mut()
            .find(|c| c.get("type") == Some(&json!("DisruptionTarget")))
        {
            Some(existing) => *existing = condition,
            None => list.push(condition),
        }
    }
}

/// `intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)`; `None` for anything
/// but an integer or a percentage.
fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((percent as f64 * total as f64 / 100.0).ceil() as i64)
        }
        _ => None,
    }
}

/// `getExpectedScale`: the sum of the scales of the controllers of the selected pods (each
/// once); `None` where a pod's controller is not found. Pods without a controller are left out
/// (upstream warns with an `UnmanagedPods` Event). Of the controllers upstream knows, the fake
/// stores StatefulSets only.
fn expected_scale(store: &Store, namespace: &str, pods: &[&Value]) -> Option<i64> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut total = 0;
    for pod in pods {
        let Some(controller) = pod
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| {
                refs.iter()
                    .find(|r| r.get("controller") == Some(&json!(true)))
            })
        else {
            continue;
        };
        let uid = controller.get("uid").and_then(Value::as_str).unwrap_or("");
        if seen.contains(uid) {
            continue;
        }
        let kind = controller.get("kind").and_then(Value::as_str).unwrap_or("");
        let api_version = controller
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let name = controller.get("name").and_then(Value::as_str).unwrap_or("");
        if kind != "StatefulSet" || !api_version.starts_with("apps/") {
            return None;
        }
        let set = store
            .get(&resources::STATEFULSETS, namespace, name)
            .filter(|s| meta_str(s, "uid") == Some(uid))?;
        // `spec.replicas` defaults to 1.
        total += set
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        seen.insert(uid.to_owned());
    }
    Some(total)
}

/// What the disruption controller would write into the budget's status now.
pub fn disruption_status(store: &Store, budget: &Value) -> DisruptionStatus {
    let (namespace, _) = namespace_and_name(budget);
    let pods: Vec<&Value> = match selector_of(budget) {
        Some(selector) => store
            .list(&resources::PODS, Some(&namespace))
            .filter(|pod| selector.matches(pod))
            .collect(),
        None => Vec::new(),
    };
    // `countHealthyPods`: Ready and not being deleted.
    let current_healthy = pods
        .iter()
        .filter(|p| {
            p.pointer("/metadata/deletionTimestamp")
                .is_none_or(Value::is_null)
        })
        .filter(|p| is_ready(p))
        .count() as i64;
    let spec_value = |key: &str| {
        budget
            .pointer(&format!("/spec/{key}"))
            .filter(|v| !v.is_null())
    };
    let expected_and_desired = if let Some(max_unavailable) = spec_value("maxUnavailable") {
        expected_scale(store, &namespace, &pods).and_then(|expected| {
            let unavailable = scaled(max_unavailable, expected)?;
            Some((expected, (expected - unavailable).max(0)))
        })
    } else if let Some(min_available) = spec_value("minAvailable") {
        match min_available {
            Value::Number(n) => n.as_i64().map(|desired| (pods.len() as i64, desired)),
            other => expected_scale(store, &namespace, &pods)
                .and_then(|expected| Some((expected, scaled(other, expected)?))),
        }
    } else {
        Some((0, 0))
    };
    let Some((expected_pods, desired_healthy)) = expected_and_desired else {
        // `failSafe`: no disruption, the rest as last written.
        let written = |key: &str| {
            budget
                .pointer(&format!("/status/{key}"))
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        return DisruptionStatus {
            expected_pods: written("expectedPods"),
            desired_healthy: written("desiredHealthy"),
            current_healthy: written("currentHealthy"),
            disruptions_allowed: 0,
            synced: false,
        };
    };
    let allowed = current_healthy - desired_healthy;
    DisruptionStatus {
        expected_pods,
        desired_healthy,
        current_healthy,
        disruptions_allowed: if expected_pods <= 0 || allowed <= 0 {
            0
        } else {
            allowed
        },
        synced: true,
    }
}

impl FakeApiServer {
    /// Every eviction answered so far, oldest first.
    pub fn eviction_records(&self) -> Vec<EvictionRecord> {
        lock(&self.shared.evictions).clone()
    }

    /// How many times each pod (`namespace/name`) was evicted (201, not a dry run).
    pub fn evictions(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for record in lock(&self.shared.evictions).iter().filter(|r| r.evicted()) {
            *counts
                .entry(format!("{}/{}", record.namespace, record.pod))
                .or_insert(0) += 1;
        }
        counts
    }

    /// How many times `namespace/pod` was evicted (201, not a dry run).
    pub fn evictions_of(&self, namespace: &str, pod: &str) -> usize {
        lock(&self.shared.evictions)
            .iter()
            .filter(|r| r.evicted() && r.namespace == namespace && r.pod == pod)
            .count()
    }

    /// How many evictions of `namespace/pod` a budget refused (429).
    pub fn eviction_refusals_of(&self, namespace: &str, pod: &str) -> usize {
        lock(&self.shared.evictions)
            .iter()
            .filter(|r| r.refused() && r.namespace == namespace && r.pod == pod)
            .count()
    }

    /// What the disruption controller would write into a budget's status now; `None` when
    /// there is no such budget.
    pub fn disruption_status(&self, namespace: &str, name: &str) -> Option<DisruptionStatus> {
        let store = self.shared.store();
        let budget = store.get(&resources::POD_DISRUPTION_BUDGETS, namespace, name)?;
        Some(disruption_status(&store, budget))
    }

    /// Writes every budget's computed status in `namespace`, as one sync of the disruption
    /// controller would (`observedGeneration`, the counters, the `DisruptionAllowed`
    /// condition), where it changed.
    pub fn sync_disruption_budgets(&self, namespace: &str) {
        let budgets: &'static ResourceType = &resources::POD_DISRUPTION_BUDGETS;
        let mut store = self.shared.store();
        let current: Vec<Value> = store.list(budgets, Some(namespace)).cloned().collect();
        for mut budget in current {
            let computed = disruption_status(&store, &budget);
            let (reason, flag) = match (computed.synced, computed.disruptions_allowed > 0) {
                (false, _) => ("SyncFailed", "False"),
                (true, true) => ("SufficientPods", "True"),
                (true, false) => ("InsufficientPods", "False"),
            };
            let previous = budget.get("status").cloned().unwrap_or(Value::Null);
            let kept_time = previous
                .pointer("/conditions/0")
                .filter(|c| c.get("status") == Some(&json!(flag)))
                .and_then(|c| c.get("lastTransitionTime").cloned());
            let status = json!({
                "observedGeneration": budget.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
                "disruptionsAllowed": computed.disruptions_allowed,
                "currentHealthy": computed.current_healthy,
                "desiredHealthy": computed.desired_healthy,
                "expectedPods": computed.expected_pods,
                "conditions": [{
                    "type": "DisruptionAllowed", "status": flag, "reason": reason, "message": "",
                    "observedGeneration": budget.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
                    "lastTransitionTime": kept_time.unwrap_or_else(|| json!(registry::now_rfc3339())),
                }],
            });
            if previous != status {
                budget["status"] = status;
                store.commit_upsert(budgets, budget);
            }
        }
    }
}
