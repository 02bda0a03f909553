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

/// Waits (2 minutes at most) until set `name` of namespace `ns` has `replicas` ready replicas
/// and the claims of its template `template` are bound at `size`: where most scenarios start.
pub async fn ready_with_bound_claims(
    client: &kube::Client,
    ns: &str,
    name: &str,
    template: &str,
    replicas: usize,
    size: &str,
) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let sets: kube::Api<StatefulSet> = kube::Api::namespaced(client.clone(), ns);
    let claims: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(client.clone(), ns);
    eventually(
        &format!("{replicas} ready replicas of {name} with bound {size} claims"),
        Duration::from_secs(120),
        || async {
            let set = sets.get(name).await?;
            let ready = set
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            anyhow::ensure!(
                usize::try_from(ready).is_ok_and(|r| r == replicas),
                "{ready} of {replicas} ready"
            );
            for n in 0..replicas {
                let claim = claims.get(&format!("{template}-{name}-{n}")).await?;
                anyhow::ensure!(
                    super::objects::claim_capacity(&claim).as_deref() == Some(size),
                    "{template}-{name}-{n} not bound at {size} yet"
                );
            }
            Ok(())
        },
    )
    .await
}
