//! Watch lag: the events of chosen watch streams reach the client a fixed time after the
//! server sent them, in order, as from an apiserver whose watch cache (or a proxy between it
//! and the client) falls behind for one resource. Lists and other requests are not delayed.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Watches to delay: the next `remaining` watch requests whose path and query contain
/// `path_substring`.
#[derive(Debug, Clone)]
pub struct LagRule {
    pub path_substring: String,
    pub lag: Duration,
    pub remaining: usize,
}

/// Takes one use of the first rule matching a watch request, if any, and returns its lag.
pub fn take_lag(rules: &mut Vec<LagRule>, path_and_query: &str) -> Option<Duration> {
    let index = rules
        .iter()
        .position(|r| r.remaining > 0 && path_and_query.contains(&r.path_substring))?;
    let rule = &mut rules[index];
    rule.remaining -= 1;
    let lag = rule.lag;
    if rule.remaining == 0 {
        rules.remove(index);
    }
    Some(lag)
}

/// The response with every chunk of its body held back `lag` from when the server wrote it.
/// Chunks are stamped as they are written (not when the previous one went out), so a burst
/// arrives `lag` late as a burst, not spread out.
pub fn delay(response: Response, lag: Duration) -> Response {
    let (parts, body) = response.into_parts();
    let (tx, rx) = mpsc::unbounded_channel::<(Instant, Bytes)>();
    let mut upstream = body.into_data_stream();
    tokio::spawn(async move {
        while let Some(Ok(chunk)) = upstream.next().await {
            if tx.send((Instant::now() + lag, chunk)).is_err() {
                return;
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let (due, chunk) = rx.recv().await?;
        tokio::time::sleep_until(due).await;
        Some((Ok::<_, std::convert::Infallible>(chunk), rx))
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
