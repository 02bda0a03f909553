//! The admission endpoints: parse, hand off to the pure rules, answer. Everything about a
//! request that is not a rule lives here: content type, body size, malformed input, metrics
//! and the per-review span.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::metrics::{Metrics, ReviewLabels};
use crate::admission::{self, Context, Phase, Policy};
use crate::capabilities::CapabilityCell;
use crate::cluster::ClusterView;
use crate::review::{self, BadReview};

/// Largest AdmissionReview body accepted. kube-apiserver caps objects near 1.5 MiB in etcd; a
/// review carries the object twice (object and oldObject).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Request-body bytes held at once across all connections (ten bodies at the cap). Without
/// it a flood of large bodies grows memory with the number of connections and streams.
pub const BODY_BUDGET_BYTES: usize = 32 * 1024 * 1024;

/// How much of a request body an early error reply (413, 415) reads and throws away before
/// answering, and for how long. Answering first and dropping the rest makes HTTP/2 reset the
/// stream (RST_STREAM NO_ERROR, as RFC 9113 §8.1 allows), which some clients report as a
/// stream error instead of the answer (curl 7.88: `Stream error in the HTTP/2 framing
/// layer`), and makes HTTP/1.1 close a connection with unread data, whose TCP reset can
/// destroy the answer before the client reads it. Nothing drained is kept, so the body limit
/// and the body budget are untouched; the bounds keep a drain from costing more than a review.
#[derive(Debug, Clone, Copy)]
pub struct EarlyReplyDrain {
    /// Body bytes read at most, counting what was read before the error was found. The
    /// default, 8 MiB, covers the largest review kube-apiserver can send (an object under its
    /// 3 MiB request limit plus an old object under etcd's 1.5 MiB) with room to spare.
    pub bytes: usize,
    /// Longest wait for the rest of the body; shorter than the request timeout, so that the
    /// client gets the real error, not a 408.
    pub timeout: Duration,
}

impl Default for EarlyReplyDrain {
    fn default() -> Self {
        Self {
            bytes: 8 * 1024 * 1024,
            timeout: Duration::from_secs(1),
        }
    }
}

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

pub use review::Evaluator;

/// What the handlers share.
pub struct AdmissionState {
    pub view: ClusterView,
    pub policy: Policy,
    pub metrics: Arc<Metrics>,
    pub evaluator: Evaluator,
    /// What the cluster does, as the prober of `serve` keeps it (unknown, or the policy's
    /// own, when nothing probes).
    pub capabilities: Option<CapabilityCell>,
    pub body_budget: Arc<BodyBudget>,
    pub early_reply_drain: EarlyReplyDrain,
}

impl AdmissionState {
    pub fn new(view: ClusterView, policy: Policy, metrics: Arc<Metrics>) -> Self {
        Self {
            view,
            policy,
            metrics,
            evaluator: admission::evaluate,
            capabilities: None,
            body_budget: Arc::new(BodyBudget::new(BODY_BUDGET_BYTES as u32)),
            early_reply_drain: EarlyReplyDrain::default(),
        }
    }

    /// Shares what the prober learns with the rules.
    pub fn with_capabilities(self, capabilities: CapabilityCell) -> Self {
        Self {
            capabilities: Some(capabilities),
            ..self
        }
    }

    /// The policy for one request: the flags, and the capabilities as last learned (a
    /// snapshot from memory: no API call on the admission path).
    pub fn policy(&self) -> Policy {
        match &self.capabilities {
            Some(cell) => self.policy.with_capabilities(cell.get()),
            None => self.policy.clone(),
        }
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

async fn handle(
    phase: Phase,
    state: &AdmissionState,
    headers: &HeaderMap,
    mut body: Body,
) -> Response {
    let endpoint = phase.as_str();
    let _in_flight = state.metrics.in_flight(endpoint);
    let reject = |code: StatusCode, message: &str, uid: Option<&str>| {
        state.metrics.rejected(endpoint, code.as_u16());
        error_response(code, message, uid)
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // An answer before the body is read: first let the client finish sending, within bounds.
    let early = |body: Body, already_read: usize, code: StatusCode, message: &'static str| {
        let drain = state.early_reply_drain;
        let fits = declared.is_none_or(|len| len <= drain.bytes as u64);
        let allowance = drain.bytes.saturating_sub(already_read);
        async move {
            if fits && !expects_continue(headers) {
                drain_body(body, allowance, drain.timeout).await;
            }
            reject(code, message, None)
        }
    };

    if !is_json(headers) {
        return early(
            body,
            0,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content type must be application/json",
        )
        .await;
    }
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return early(
            body,
            0,
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large",
        )
        .await;
    }
    let share = declared.map_or(MAX_BODY_BYTES, |len| len as usize);
    let Some(share) = state.body_budget.reserve(share).await else {
        return early(body, 0, StatusCode::SERVICE_UNAVAILABLE, "shutting down").await;
    };
    let bytes = match read_body(&mut body).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            // Nothing read is kept: the share goes back before the drain.
            drop(share);
            return early(
                body,
                MAX_BODY_BYTES,
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large",
            )
            .await;
        }
        Err(BodyError::Io(message)) => {
            return reject(StatusCode::BAD_REQUEST, &message, None);
        }
    };
    drop(body);

    let started = Instant::now();
    let policy = state.policy();
    let ctx = Context {
        view: &state.view,
        policy: &policy,
    };
    let reviewed = review::handle(phase, &bytes, &ctx, state.evaluator);
    drop(bytes);
    let review::Reviewed {
        request: req,
        verdict,
        would_deny,
    } = match reviewed {
        Ok(reviewed) => reviewed,
        Err(e) => {
            let message = match e.error {
                BadReview::NotJson(e) => format!("malformed JSON: {e}"),
                other => other.to_string(),
            };
            return reject(StatusCode::BAD_REQUEST, &message, e.uid.as_deref());
        }
    };

    {
        if let Some(would_deny) = &would_deny {
            // The denial a user would have seen, for whoever decides to switch to enforce.
            tracing::info!(
                endpoint,
                uid = %req.uid,
                kind = %req.kind.kind,
                namespace = req.namespace.as_deref().unwrap_or(""),
                name = %req.name,
                operation = ?req.operation,
                reason = would_deny.reason,
                message = %would_deny.message,
                "would deny (admission mode warn)"
            );
            state
                .metrics
                .would_deny(endpoint, &req.resource.resource, would_deny.reason);
        }
        let (allowed, mutated) = (verdict.is_allowed(), verdict.is_mutated());
        let warned = !verdict.warnings.is_empty();
        let response = review::respond(&req, verdict).into_review();
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
        match review::encode_review(response) {
            Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
            Err(e) => error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &e.to_string(),
                Some(&req.uid),
            ),
        }
    }
}

enum BodyError {
    TooLarge,
    Io(String),
}

/// Reads the body up to [`MAX_BODY_BYTES`]; past it the rest stays unread in `body`.
async fn read_body(body: &mut Body) -> Result<Bytes, BodyError> {
    match http_body_util::Limited::new(body, MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Err(e) => Err(BodyError::Io(format!("cannot read body: {e}"))),
    }
}

/// Reads and discards the rest of a body, at most `bytes` of it and for at most `timeout`;
/// past either the answer goes out anyway (and the stream or connection is reset).
async fn drain_body(mut body: Body, bytes: usize, timeout: Duration) {
    let read_all = async {
        let mut left = bytes;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return Err("the body failed");
            };
            if let Some(data) = frame.data_ref() {
                left = left
                    .checked_sub(data.len())
                    .ok_or("the body is larger than the drain allows")?;
            }
        }
        Ok(())
    };
    let drained = tokio::time::timeout(timeout, read_all)
        .await
        .unwrap_or(Err("the body was not sent in time"));
    if let Err(why) = drained {
        tracing::debug!(
            bytes,
            ?timeout,
            why,
            "request body not drained before an early reply"
        );
    }
}

/// `Expect: 100-continue`: the client waits for a go-ahead before sending the body, and a
/// final answer tells it not to send it (RFC 9110 §10.1.1), so there is nothing to drain.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"))
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
