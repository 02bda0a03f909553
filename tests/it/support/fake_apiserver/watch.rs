//! Watch streams: newline-delimited `{"type", "object"}` events, resumed from the store's
//! history, with bookmarks, `timeoutSeconds`, `sendInitialEvents` and 410 Gone for a
//! resourceVersion older than the retained history.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::Shared;
use super::errors::ApiError;
use super::resources::ResourceType;
use super::selectors::Selection;
use super::store::{ChangeKind, StoreChange};
use super::traffic::{self, WatchTicket};

/// A parsed watch request.
pub struct WatchRequest {
    pub resource: &'static ResourceType,
    pub namespace: Option<String>,
    pub selection: Selection,
    pub resource_version: Option<String>,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
}

impl WatchRequest {
    /// The event a watcher of this request sees for a change, if any: a change that moves
    /// an object into or out of the selection shows as ADDED or DELETED.
    fn translate(&self, change: &StoreChange) -> Option<Value> {
        if !std::ptr::eq(change.resource, self.resource) || !self.in_namespace(&change.object) {
            return None;
        }
        let now = self.selection.matches(&change.object);
        let before = change
            .previous
            .as_ref()
            .is_some_and(|p| self.selection.matches(p));
        let kind = match change.kind {
            ChangeKind::Added => now.then_some(ChangeKind::Added),
            ChangeKind::Deleted => before.then_some(ChangeKind::Deleted),
            ChangeKind::Modified => match (before, now) {
                (true, true) => Some(ChangeKind::Modified),
                (false, true) => Some(ChangeKind::Added),
                (true, false) => Some(ChangeKind::Deleted),
                (false, false) => None,
            },
        }?;
        Some(json!({"type": kind.as_watch_type(), "object": change.object}))
    }

    fn in_namespace(&self, object: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|ns| {
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                == Some(ns)
        })
    }

    fn bookmark(&self, revision: u64, initial_events_end: bool) -> Value {
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({
            "type": "BOOKMARK",
            "object": {"kind": self.resource.kind, "apiVersion": self.resource.api_version(), "metadata": metadata},
        })
    }
}

/// Where a watch starts.
enum Start {
    /// No resourceVersion, `"0"`, or `sendInitialEvents`: synthetic ADDED events for the
    /// current state first.
    CurrentState,
    /// After a given resourceVersion, replayed from history.
    After(u64),
}

/// Opens a watch and returns the streaming response body; the stream ends on
/// `timeoutSeconds`, client disconnect, `disconnect_watches` or server shutdown.
pub fn start(shared: &Arc<Shared>, request: WatchRequest) -> Result<Body, ApiError> {
    let start = match request.resource_version.as_deref() {
        None | Some("" | "0") => Start::CurrentState,
        Some(_) if request.send_initial_events => Start::CurrentState,
        Some(rv) => Start::After(rv.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion: Invalid value: {rv:?}: must be a valid resourceVersion"
            ))
        })?),
    };

    // Subscribing and reading the backlog under one lock leaves no gap and no duplicate:
    // changes are published while the store lock is held.
    let (backlog, changes, revision) = {
        let store = shared.store();
        let changes = store.subscribe();
        let revision = store.revision();
        let backlog = match start {
            Start::CurrentState => Ok(store
                .list(request.resource, request.namespace.as_deref())
                .filter(|o| request.selection.matches(o))
                .map(|o| json!({"type": "ADDED", "object": o}))
                .collect::<Vec<_>>()),
            Start::After(rv) if rv < store.history_floor() => {
                Err(ApiError::gone(rv, store.history_floor()))
            }
            Start::After(rv) => Ok(store
                .history_since(rv)
                .filter_map(|c| request.translate(c))
                .collect()),
        };
        (backlog, changes, revision)
    };

    let ticket = WatchTicket::open(shared, request.resource);
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let task = WatchTask {
        shared: Arc::clone(shared),
        request,
        changes,
        tx,
        last_sent: revision,
    };
    tokio::spawn(task.run(backlog, revision));
    Ok(Body::from_stream(traffic::deliver(ticket, rx)))
}

struct WatchTask {
    shared: Arc<Shared>,
    request: WatchRequest,
    changes: broadcast::Receiver<Arc<StoreChange>>,
    tx: mpsc::Sender<Bytes>,
    /// Changes at or below this revision are already covered by what was sent.
    last_sent: u64,
}

/// Why a watch loop stops.
struct Closed;

impl WatchTask {
    async fn run(mut self, backlog: Result<Vec<Value>, ApiError>, revision: u64) {
        let backlog = match backlog {
            Ok(events) => events,
            Err(gone) => {
                // The apiserver answers 200 and sends the 410 as an ERROR event, which is
                // what makes kube's watcher relist.
                let _ = self
                    .send(&json!({"type": "ERROR", "object": gone.to_status()}))
                    .await;
                return;
            }
        };
        for event in &backlog {
            if self.send(event).await.is_err() {
                return;
            }
        }
        if self.request.send_initial_events && self.request.bookmarks {
            let end = self.request.bookmark(revision, true);
            if self.send(&end).await.is_err() {
                return;
            }
        }
        let _ = self.pump().await;
    }

    async fn pump(&mut self) -> Result<(), Closed> {
        let mut shutdown = self.shared.shutdown.subscribe();
        let mut disconnect = self.shared.disconnect.subscribe();
        let interval = self
            .shared
            .config()
            .bookmark_interval
            .max(Duration::from_millis(10));
        let mut bookmarks = tokio::time::interval_at(Instant::now() + interval, interval);
        let deadline = self.request.timeout.map(|t| Instant::now() + t);
        let tx = self.tx.clone();
        loop {
            tokio::select! {
                () = stopped(&mut shutdown) => return Err(Closed),
                _ = disconnect.changed() => return Err(Closed),
                () = tx.closed() => return Err(Closed),
                () = sleep_until_deadline(deadline) => return Ok(()),
                _ = bookmarks.tick(), if self.request.bookmarks => self.bookmark().await?,
                change = self.changes.recv() => match change {
                    Ok(change) => self.forward(&change).await?,
                    // Fell behind the live channel: close, and let the client resume from history.
                    Err(_) => return Err(Closed),
                },
            }
        }
    }

    /// Sends everything published up to the current revision, then a bookmark for it, so a
    /// client resuming from the bookmark misses nothing.
    async fn bookmark(&mut self) -> Result<(), Closed> {
        let (pending, revision) = {
            let store = self.shared.store();
            let mut pending = Vec::new();
            loop {
                match self.changes.try_recv() {
                    Ok(change) => pending.push(change),
                    Err(TryRecvError::Empty) => break,
                    Err(_) => return Err(Closed),
                }
            }
            (pending, store.revision())
        };
        for change in pending {
            self.forward(&change).await?;
        }
        self.last_sent = self.last_sent.max(revision);
        let bookmark = self.request.bookmark(revision, false);
        self.send(&bookmark).await
    }

    async fn forward(&mut self, change: &StoreChange) -> Result<(), Closed> {
        // Another type's change (also the other view of an Event, at the same revision).
        if !std::ptr::eq(change.resource, self.request.resource) {
            return Ok(());
        }
        if change.resource_version <= self.last_sent {
            return Ok(());
        }
        self.last_sent = change.resource_version;
        match self.request.translate(change) {
            Some(event) => self.send(&event).await,
            None => Ok(()),
        }
    }

    async fn send(&self, event: &Value) -> Result<(), Closed> {
        let mut line = serde_json::to_vec(event).map_err(|_| Closed)?;
        line.push(b'\n');
        self.tx.send(Bytes::from(line)).await.map_err(|_| Closed)
    }
}

async fn stopped(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    // A dropped sender means the server is gone: stop as well.
    let _ = shutdown.wait_for(|down| *down).await;
}

async fn sleep_until_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
