//! An apiserver outage ([`FakeApiServer::begin_outage`], [`FakeApiServer::end_outage`]): for
//! a while every open connection is reset and every new one is reset as soon as it is
//! accepted, on the same address; then the server answers again, with the same store and
//! history (as an apiserver restarted on the same etcd, or a partition healed). Clients see
//! what they see of a stopped apiserver: connection reset, no answer.
//!
//! A request in flight when the outage begins is dropped unanswered and unrecorded, and
//! what it would have written is not written (an apiserver stopped before it committed);
//! watch streams end. Held requests ([`FakeApiServer::hold_next`]) are in flight too.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::{FakeApiServer, Shared, lock};

/// Whether the server is down, and the token that cuts what the current up-time serves.
#[derive(Clone, Default)]
pub struct Outage(Arc<Mutex<UpTime>>);

#[derive(Default)]
struct UpTime {
    down: bool,
    /// Cancelled when the next outage begins.
    cut: CancellationToken,
}

impl Outage {
    /// Whether an outage is under way.
    pub fn is_down(&self) -> bool {
        lock(&self.0).down
    }

    /// The token of the current up-time; `None` while down.
    fn up(&self) -> Option<CancellationToken> {
        let state = lock(&self.0);
        (!state.down).then(|| state.cut.clone())
    }
}

impl FakeApiServer {
    /// Stops answering: every open connection (watches, requests in flight, idle ones) is
    /// reset, and every new one is reset once accepted, until [`end_outage`](Self::end_outage).
    pub fn begin_outage(&self) {
        let mut state = lock(&self.shared.outage.0);
        if !state.down {
            state.down = true;
            state.cut.cancel();
        }
    }

    /// Answers again, on the same address, with the same store.
    pub fn end_outage(&self) {
        let mut state = lock(&self.shared.outage.0);
        if state.down {
            state.down = false;
            state.cut = CancellationToken::new();
        }
    }

    /// Whether an outage is under way.
    pub fn is_down(&self) -> bool {
        self.shared.outage.is_down()
    }
}

/// The server's listener: resets what arrives during an outage, and gives each connection
/// the token that will cut it.
pub struct Listener {
    inner: TcpListener,
    outage: Outage,
}

impl Listener {
    pub fn new(inner: TcpListener, outage: Outage) -> Self {
        Self { inner, outage }
    }
}

impl axum::serve::Listener for Listener {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        loop {
            let (stream, address) = axum::serve::Listener::accept(&mut self.inner).await;
            match self.outage.up() {
                Some(cut) => return (Connection::new(stream, cut), address),
                None => reset(&stream),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// Closes with a reset (RST) rather than an orderly close, as a dead peer's kernel would.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// A connection that fails every read and write once its up-time ends.
pub struct Connection {
    stream: TcpStream,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
    is_cut: bool,
}

impl Connection {
    fn new(stream: TcpStream, cut: CancellationToken) -> Self {
        Self {
            stream,
            cut: Box::pin(cut.cancelled_owned()),
            is_cut: false,
        }
    }

    /// Whether the outage began (registering to be woken when it does).
    fn cut(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.is_cut && self.cut.as_mut().poll(cx).is_ready() {
            self.is_cut = true;
            reset(&self.stream);
        }
        self.is_cut
    }
}

fn reset_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "fake apiserver outage")
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.cut(cx) {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.cut(cx) {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.cut(cx) {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The up-time a request arrived in, for what runs inside [`cut_in_flight`].
#[derive(Clone)]
pub struct ArrivedIn(CancellationToken);

impl ArrivedIn {
    /// Whether an outage began since the request arrived: a held request released after
    /// that must not reach the registry (the select in [`cut_in_flight`] cannot stop a
    /// handler that runs to its end in the poll that saw the release).
    pub fn is_cut(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// Middleware, outermost: a request in flight when the outage begins is dropped (its
/// handler, hold and record with it); the answer goes nowhere, its connection is reset.
pub async fn cut_in_flight(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(cut) = shared.outage.up() else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    request.extensions_mut().insert(ArrivedIn(cut.clone()));
    tokio::select! {
        biased;
        () = cut.cancelled() => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        response = next.run(request) => response,
    }
}
