//! The plain-HTTP probe port: `/healthz`, `/readyz`, `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::cluster::{ClusterView, Kind, Stale};
use crate::health::Health;

/// Ready means: the TLS listener is bound, the kinds the webhook's verdicts read
/// (StorageClasses, Namespaces, StatefulSets) have listed, and we are not shutting down.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    tls_bound: AtomicBool,
    synced: AtomicBool,
    draining: AtomicBool,
}

impl Readiness {
    pub(crate) fn set_tls_bound(&self) {
        self.tls_bound.store(true, Ordering::SeqCst);
    }
    pub(crate) fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }
    pub(crate) fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }
    pub(crate) fn is_ready(&self) -> bool {
        self.tls_bound.load(Ordering::SeqCst)
            && self.synced.load(Ordering::SeqCst)
            && !self.draining.load(Ordering::SeqCst)
    }
}

struct ProbeState {
    readiness: Arc<Readiness>,
    registry: Arc<Registry>,
    view: ClusterView,
    health: Arc<Health>,
}

pub(crate) fn router(
    readiness: Arc<Readiness>,
    registry: Arc<Registry>,
    view: ClusterView,
    health: Arc<Health>,
) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Arc::new(ProbeState {
            readiness,
            registry,
            view,
            health,
        }))
}

#[derive(serde::Deserialize)]
struct ReadyzQuery {
    verbose: Option<String>,
}

/// `/readyz`: 200 `ok` when ready, else 503. With `?verbose` (and always when not ready) one
/// line per part, kube-apiserver's way (`[+]name ok`, `[-]name ...`), then the verdict:
/// which part is waiting for what. Only the webhook's parts decide readiness.
async fn readyz(
    State(state): State<Arc<ProbeState>>,
    Query(query): Query<ReadyzQuery>,
) -> impl IntoResponse {
    let ready = state.readiness.is_ready();
    if ready && query.verbose.is_none() {
        return (StatusCode::OK, "ok".to_owned());
    }
    let mut lines = Vec::new();
    let r = &state.readiness;
    lines.push(if r.tls_bound.load(Ordering::SeqCst) {
        "[+]tls ok".to_owned()
    } else {
        "[-]tls: the webhook listener is not bound yet".to_owned()
    });
    if r.draining.load(Ordering::SeqCst) {
        lines.push("[-]shutdown: draining, no new requests".to_owned());
    }
    lines.extend(view_lines(&state.view.sync_status()));
    lines.extend(stale_lines(&state.view.stale()));
    lines.extend(state.health.parts().iter().map(crate::health::Part::line));
    let code = if ready {
        lines.push("readyz check passed".to_owned());
        StatusCode::OK
    } else {
        lines.push("readyz check failed".to_owned());
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, lines.join("\n") + "\n")
}

/// What the view has listed, by who reads it: the webhook's kinds decide readiness; claims
/// feed only a warning; pods and journals are the controller's.
pub(crate) fn view_lines(status: &[(Kind, bool)]) -> Vec<String> {
    let names = |want: bool, of: &[Kind]| {
        status
            .iter()
            .filter(|(k, synced)| *synced == want && of.contains(k))
            .map(|(k, _)| k.plural())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut lines = Vec::new();
    for (part, kinds, why) in [
        (
            "webhook",
            &Kind::WEBHOOK[..],
            "its verdicts and patches read them",
        ),
        (
            "webhook-claims",
            &[Kind::Claim][..],
            "the existing-claims warning on StatefulSet CREATE says it could not check them meanwhile",
        ),
        (
            "controller-view",
            &[Kind::Pod, Kind::Journal][..],
            "the controller takes the Lease once the whole view has listed",
        ),
    ] {
        let (done, waiting) = (names(true, kinds), names(false, kinds));
        if !waiting.is_empty() {
            lines.push(format!("[-]{part} listing {waiting}: {why}"));
        } else if !done.is_empty() {
            lines.push(format!("[+]{part} ok: {done} listed"));
        }
    }
    lines
}

/// While watches fail: how stale the view is, and why. A warning (`[!]`), not unreadiness:
/// the webhook keeps answering from what it holds; `check` shows the line.
pub(crate) fn stale_lines(stale: &[Stale]) -> Vec<String> {
    let Some(oldest) = stale.iter().max_by_key(|s| s.age) else {
        return Vec::new();
    };
    let kinds = stale
        .iter()
        .map(|s| s.kind.plural())
        .collect::<Vec<_>>()
        .join(", ");
    vec![format!(
        "[!]view stale: {kinds} not refreshed for {}s, the apiserver unreachable or refusing the watch ({}); answering from what was last seen",
        oldest.age.as_secs(),
        crate::text::clip(&oldest.error, 200)
    )]
}

async fn metrics(State(state): State<Arc<ProbeState>>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "cannot encode metrics".to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_view_is_one_warning_line_with_its_age_and_error() {
        assert!(stale_lines(&[]).is_empty());
        let lines = stale_lines(&[
            Stale {
                kind: Kind::StatefulSet,
                age: std::time::Duration::from_millis(27_400),
                error: "failed to start watching object: connection refused".into(),
            },
            Stale {
                kind: Kind::Pod,
                age: std::time::Duration::from_secs(3),
                error: "watch stream failed: connection reset".into(),
            },
        ]);
        assert_eq!(
            lines,
            [
                "[!]view stale: statefulsets, pods not refreshed for 27s, the apiserver unreachable or refusing the watch (failed to start watching object: connection refused); answering from what was last seen"
            ]
        );
    }

    /// A part's warning (a convergence waiting on the garbage collector) is said in the
    /// verbose answer and leaves the webhook ready.
    #[tokio::test]
    async fn a_warning_line_is_informational_and_keeps_readiness() {
        let readiness = Arc::new(Readiness::default());
        readiness.set_tls_bound();
        readiness.set_synced();
        let health = Arc::new(Health::default());
        health.set(
            "convergence",
            crate::health::State::Warning,
            "waiting for the garbage collector to orphan the dependents of db/web (u1) for 21s",
        );
        let state = Arc::new(ProbeState {
            readiness,
            registry: Arc::new(Registry::default()),
            view: ClusterView::empty(),
            health: health.clone(),
        });
        let ask = |verbose: bool| {
            let state = state.clone();
            async move {
                let query = ReadyzQuery {
                    verbose: verbose.then(String::new),
                };
                let response = readyz(State(state), Query(query)).await.into_response();
                let code = response.status();
                let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                    .await
                    .expect("body");
                (code, String::from_utf8_lossy(&body).into_owned())
            }
        };
        assert_eq!(ask(false).await, (StatusCode::OK, "ok".to_owned()));
        let (code, text) = ask(true).await;
        assert_eq!(code, StatusCode::OK, "{text}");
        assert!(
            text.contains("\n[!]convergence waiting for the garbage collector to orphan the dependents of db/web (u1) for 21s\n"),
            "{text}"
        );
        assert!(text.ends_with("readyz check passed\n"), "{text}");

        health.remove("convergence");
        let (_, text) = ask(true).await;
        assert!(!text.contains("convergence"), "{text}");
    }

    #[test]
    fn ready_only_when_bound_and_synced_and_not_draining() {
        let r = Readiness::default();
        assert!(!r.is_ready());
        r.set_tls_bound();
        assert!(!r.is_ready(), "not synced yet");
        r.set_synced();
        assert!(r.is_ready());
        r.set_draining();
        assert!(!r.is_ready());
    }
}
