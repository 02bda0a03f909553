//! The plain-HTTP probe port: `/healthz`, `/readyz`, `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Ready means: the TLS listener is bound, the cluster view has synced, and we are not
/// shutting down.
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
}

pub(crate) fn router(readiness: Arc<Readiness>, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Arc::new(ProbeState {
            readiness,
            registry,
        }))
}

async fn readyz(State(state): State<Arc<ProbeState>>) -> impl IntoResponse {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
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
