//! The webhook's HTTPS server with one extra route, for load measurements only: the same
//! accept loop ([`listener::serve_tls`]), TLS configuration, admission router, request-timeout
//! layer and logging as `stateful-admission serve`, plus `POST /trivial`, which reads the body
//! under the same size cap and answers a constant AdmissionReview without parsing or rules.
//! Measuring both routes against one process in one run gives the cost of the rules next to
//! the cost of TLS and HTTP. The production binary has no such route.
//!
//! `cargo run --release --example bench_server -- STATE_FILE CERT_DIR [ADDR]` prints
//! `listening <addr>` on stdout once bound and stops on SIGTERM or Ctrl-C.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use prometheus_client::registry::Registry;
use stateful_admission::admission::Policy;
use stateful_admission::cluster::{ClusterView, state_file};
use stateful_admission::server::{ListenerLimits, listener, metrics, routes, tls};
use stateful_admission::telemetry::{self, LogFormat};
use tokio_util::sync::CancellationToken;

// The allocator of the production binary (src/main.rs), so that the numbers are its numbers.
stateful_admission::global_allocator!();

const TRIVIAL_RESPONSE: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"","allowed":true}}"#;

async fn trivial(body: Body) -> Response {
    match axum::body::to_bytes(body, routes::MAX_BODY_BYTES).await {
        Ok(_) => (
            [(header::CONTENT_TYPE, "application/json")],
            TRIVIAL_RESPONSE,
        )
            .into_response(),
        Err(_) => StatusCode::PAYLOAD_TOO_LARGE.into_response(),
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(state), Some(cert_dir)) = (args.next(), args.next()) else {
        anyhow::bail!("usage: bench_server STATE_FILE CERT_DIR [ADDR]");
    };
    let addr: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:0").parse()?;
    // `serve`'s default level; BENCH_LOG sets another, to measure what logging costs.
    let level = std::env::var("BENCH_LOG").unwrap_or_else(|_| "info".to_owned());
    telemetry::init(LogFormat::Json, &level);
    let view = ClusterView::from_objects(state_file::load(&PathBuf::from(state))?);

    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let generated = stateful_admission::certs::generate("stateful-admission-bench", &names, 1, 1)?;
    let paths = generated.write(&PathBuf::from(cert_dir), false)?;
    let certs = tls::CertReloader::load(&paths.cert, &paths.key)?;
    let tls_config = certs.server_config()?;

    let mut registry = Registry::default();
    let metrics = Arc::new(metrics::Metrics::register(&mut registry));
    let state = Arc::new(routes::AdmissionState::new(
        view,
        Policy::default(),
        metrics,
    ));
    // Same layering as `Server::run`: the timeout wraps the whole router.
    let app = routes::router(state)
        .merge(Router::new().route("/trivial", post(trivial)))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(10),
        ));

    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot bind {addr}"))?;
        println!("listening {}", listener.local_addr()?);
        std::io::stdout().flush()?;
        let stop = CancellationToken::new();
        let serving = tokio::spawn(listener::serve_tls(
            listener,
            tls_config,
            app,
            ListenerLimits::default(),
            stop.clone(),
        ));
        shutdown_signal().await;
        stop.cancel();
        serving.await?;
        anyhow::Ok(())
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
