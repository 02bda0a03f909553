//! The admission endpoints: parse, hand off to the pure rules, answer. Everything about a
//! request that is not a rule lives here: content type, body size, malformed input, metrics
//! and the per-review span.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tracing::Instrument;

use super::metrics::{Metrics, ReviewLabels};
use crate::admission::GateCell;
use crate::admission::{self, Context, Phase, Policy, offline, wire};
use crate::cluster::ClusterView;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;

/// Largest AdmissionReview body accepted. kube-apiserver caps objects near 1.5 MiB in etcd; a
/// review carries the object twice (object and oldObject).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Request-body bytes held at once across all connections (ten bodies at the cap). Without
/// it a flood of large bodies grows memory with the number of connections and streams.
pub const BODY_BUDGET_BYTES: usize = 32 * 1024 * 1024;

/// Shares of [`BODY_BUDGET_BYTES`]: a request reserves its declared length (the whole cap when
/// it declares none) before its body is read and holds it until answered; others wait, within
/// the request timeout. Reserving up front, all at once, cannot deadlock.
#[derive(Debug)]
pub struct BodyBudget {
    permits: tokio::sync::Semaphore,
    total: usize,
}

impl BodyBudget {
    pub fn new(bytes: u32) -> Self {
        Self {
            permits: tokio::sync::Semaphore::new(bytes as usize),
            total: bytes as usize,
        }
    }

    /// Waits for `bytes` (at most the whole budget) and holds them until dropped.
    pub async fn reserve(&self, bytes: usize) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let share = u32::try_from(bytes.min(self.total)).unwrap_or(u32::MAX);
        self.permits.acquire_many(share).await.ok()
    }

    /// Bytes not reserved now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

/// The function that judges a request: [`admission::evaluate`], or a stand-in in tests.
pub type Evaluator =
    fn(Phase, &AdmissionRequest<DynamicObject>, &Context<'_>) -> admission::Verdict;

/// What the handlers share.
pub struct AdmissionState {
    pub view: ClusterView,
    pub policy: Policy,
    pub metrics: Arc<Metrics>,
    pub evaluator: Evaluator,
    /// The apiserver's maxUnavailable gate as the controller's probe found it (the same
    /// cell the controller writes when both run in `serve`; unknown otherwise).
    pub max_unavailable_gate: GateCell,
    pub body_budget: Arc<BodyBudget>,
}

impl AdmissionState {
    pub fn new(view: ClusterView, policy: Policy, metrics: Arc<Metrics>) -> Self {
        Self {
            view,
            policy,
            metrics,
            evaluator: admission::evaluate,
            max_unavailable_gate: GateCell::default(),
            body_budget: Arc::new(BodyBudget::new(BODY_BUDGET_BYTES as u32)),
        }
    }

    /// Shares the controller's gate state with the rules.
    pub fn with_max_unavailable_gate(self, gate: GateCell) -> Self {
        Self {
            max_unavailable_gate: gate,
            ..self
        }
    }

    /// The policy for one request: the flags, and the gate as last probed.
    pub fn policy(&self) -> Policy {
        self.policy
            .with_max_unavailable_gate(self.max_unavailable_gate.get())
    }
}

/// `POST /mutate` and `POST /validate`. A panic inside a rule becomes a 500 and the server
/// keeps serving.
pub fn router(state: Arc<AdmissionState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .with_state(state)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_panic: Box<dyn std::any::Any + Send>| {
                tracing::error!("panic while evaluating an admission review");
                error_response(StatusCode::INTERNAL_SERVER_ERROR, "internal error", None)
            },
        ))
}

async fn mutate(
    State(state): State<Arc<AdmissionState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(Phase::Mutate, &state, &headers, body).await
}

async fn validate(
    State(state): State<Arc<AdmissionState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    handle(Phase::Validate, &state, &headers, body).await
}

async fn handle(phase: Phase, state: &AdmissionState, headers: &HeaderMap, body: Body) -> Response {
    let endpoint = phase.as_str();
    let _in_flight = state.metrics.in_flight(endpoint);
    let reject = |code: StatusCode, message: &str, uid: Option<&str>| {
        state.metrics.rejected(endpoint, code.as_u16());
        error_response(code, message, uid)
    };

    if !is_json(headers) {
        return reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content type must be application/json",
            None,
        );
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return reject(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large",
            None,
        );
    }
    let share = declared.map_or(MAX_BODY_BYTES, |len| len as usize);
    let Some(_share) = state.body_budget.reserve(share).await else {
        return reject(StatusCode::SERVICE_UNAVAILABLE, "shutting down", None);
    };
    let bytes = match read_body(body).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            return reject(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large",
                None,
            );
        }
        Err(BodyError::Io(message)) => {
            return reject(StatusCode::BAD_REQUEST, &message, None);
        }
    };

    let started = Instant::now();
    let req = match wire::decode_review(&bytes) {
        Ok(req) => req,
        Err(e) => {
            let message = match e.error {
                offline::BadReview::NotJson(e) => format!("malformed JSON: {e}"),
                other => other.to_string(),
            };
            return reject(StatusCode::BAD_REQUEST, &message, e.uid.as_deref());
        }
    };
    drop(bytes);

    // A span for what rules log at debug level; off (and free) at the default level.
    let span = tracing::debug_span!("review", endpoint, uid = %req.uid);
    async {
        let policy = state.policy();
        let ctx = Context {
            view: &state.view,
            policy: &policy,
        };
        let verdict = (state.evaluator)(phase, &req, &ctx);
        let (allowed, mutated) = (verdict.is_allowed(), verdict.is_mutated());
        let warned = !verdict.warnings.is_empty();
        let response = admission::respond(&req, verdict).into_review();
        let elapsed = started.elapsed();
        // One line per review a user sees the effect of (a denial or warnings, such as a
        // recorded template change) at info; the rest, a PVC getting its default class for
        // one, at debug: at thousands of reviews per second a line each costs a third of the
        // throughput, and the apiserver's audit log records every mutation anyway.
        macro_rules! reviewed {
            ($level:ident) => {
                tracing::$level!(
                    endpoint,
                    uid = %req.uid,
                    kind = %req.kind.kind,
                    namespace = req.namespace.as_deref().unwrap_or(""),
                    name = %req.name,
                    operation = ?req.operation,
                    allowed,
                    mutated,
                    duration_us = elapsed.as_micros() as u64,
                    "reviewed"
                )
            };
        }
        if !allowed || warned {
            reviewed!(info);
        } else {
            reviewed!(debug);
        }
        state.metrics.observe(
            ReviewLabels {
                endpoint,
                resource: req.resource.resource.clone(),
                operation: format!("{:?}", req.operation).to_uppercase(),
                allowed,
                mutated,
            },
            elapsed.as_secs_f64(),
        );
        match admission::encode_review(response) {
            Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
            Err(e) => error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &e.to_string(),
                Some(&req.uid),
            ),
        }
    }
    .instrument(span)
    .await
}

enum BodyError {
    TooLarge,
    Io(String),
}

async fn read_body(body: Body) -> Result<Bytes, BodyError> {
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            let is_limit = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if is_limit {
                BodyError::TooLarge
            } else {
                BodyError::Io(format!("cannot read body: {e}"))
            }
        })
}

/// `application/json`, with or without parameters such as `charset`.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// A short JSON error; carries the request uid when one could be read.
fn error_response(code: StatusCode, message: &str, uid: Option<&str>) -> Response {
    let mut body = json!({ "error": message });
    if let Some(uid) = uid {
        body["uid"] = Value::from(uid);
    }
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
