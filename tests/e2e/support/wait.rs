//! Waiting for the cluster: a condition checked until a deadline, failing with its last reason.

use std::future::Future;
use std::time::Duration;

/// Checks `probe` every 250 ms until it returns `Ok`, or fails after `within` with `what` and
/// the probe's last error (what was seen instead).
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match probe().await {
            Ok(value) => return Ok(value),
            Err(last) if tokio::time::Instant::now() >= deadline => {
                anyhow::bail!("timed out after {within:?} waiting for {what}: {last:#}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Prints a step of a scenario (stderr, so that a CI log shows where a scenario was).
pub fn step(scenario: &str, what: &str) {
    eprintln!("e2e: {scenario}: {what}");
}
