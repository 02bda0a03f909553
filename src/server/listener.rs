//! The HTTPS accept loop: rustls handshakes, HTTP/1.1 or HTTP/2 by ALPN (the apiserver's
//! webhook client speaks h2), a connection cap, timeouts for slow or half-open peers, and a
//! graceful drain that answers every request already accepted.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Limits of the HTTPS listener.
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    /// Open connections at most; further peers wait in the kernel's backlog.
    pub max_connections: usize,
    /// A TLS handshake that takes longer is dropped.
    pub handshake_timeout: Duration,
    /// An HTTP/1 request whose headers take longer is dropped.
    pub header_read_timeout: Duration,
    /// Streams per HTTP/2 connection.
    pub max_concurrent_streams: u32,
    /// How long in-flight requests may take to finish after shutdown starts.
    pub drain_timeout: Duration,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            max_concurrent_streams: 250,
            drain_timeout: Duration::from_secs(25),
        }
    }
}

/// Serves `app` on `listener` until `stop` is cancelled, then drains.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: ListenerLimits,
    stop: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));

    loop {
        let slot = tokio::select! {
            _ = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let (tcp, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        let app = app.clone();
        let watcher = graceful.watcher();
        let handshake_timeout = limits.handshake_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                app.clone().oneshot(req)
            });
            let conn = builder.serve_connection(TokioIo::new(tls), service);
            if let Err(error) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?limits.drain_timeout, "connections still open after the drain timeout");
    }
}
