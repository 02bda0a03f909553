//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
//! the holder renews `renewTime` every retry period; another candidate takes the lease only
//! after it has seen the same record unchanged for a whole lease duration by its own clock
//! (so clock skew between nodes does not matter); every write carries the resourceVersion it
//! read, so two candidates cannot both win. The decision is a pure function; [`Elector`] only
//! does the API calls.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::Api;

use crate::field_manager;
use tokio_util::sync::CancellationToken;

/// Timing of the election (client-go's defaults).
#[derive(Debug, Clone)]
pub struct LeaseTiming {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The last lease record seen, and when (by our clock) it was first seen.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observation {
    record: Option<(Option<String>, Option<String>)>,
    since: Option<Instant>,
}

impl Observation {
    /// Notes the holder and renew time of `lease`; the clock restarts when they change.
    pub(crate) fn observe(&mut self, lease: Option<&Lease>, now: Instant) {
        let record = lease.map(|l| {
            let spec = l.spec.as_ref();
            (
                spec.and_then(|s| s.holder_identity.clone()),
                spec.and_then(|s| s.renew_time.as_ref())
                    .map(|t| t.0.to_string()),
            )
        });
        if self.record != record || self.since.is_none() {
            self.record = record;
            self.since = Some(now);
        }
    }
}

/// What a candidate should do with the lease it just read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    /// No lease yet: create one held by us.
    Create(LeaseSpec),
    /// Write this spec (renewing ours or taking an expired or released one).
    Update(LeaseSpec),
    /// Someone else holds a live lease.
    Wait { holder: String },
}

/// Decides from the lease as read, what we have observed of it, and the wall-clock `now`
/// (only written into the record, never compared with another node's clock).
pub(crate) fn decide(
    lease: Option<&Lease>,
    identity: &str,
    observation: &Observation,
    now_instant: Instant,
    now: jiff::Timestamp,
    timing: &LeaseTiming,
) -> Decision {
    let duration_secs = i32::try_from(timing.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let fresh = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(duration_secs),
        acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    let Some(lease) = lease else {
        return Decision::Create(fresh(0, None));
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let transitions = spec.lease_transitions.unwrap_or(0);
    if holder == identity {
        return Decision::Update(fresh(transitions, spec.acquire_time));
    }
    let released = holder.is_empty();
    // The holder's own lease duration governs; fall back to ours.
    let held_for = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(timing.lease_duration, Duration::from_secs);
    let expired = observation
        .since
        .is_some_and(|since| now_instant.saturating_duration_since(since) >= held_for);
    if released || expired {
        Decision::Update(fresh(transitions.saturating_add(1), None))
    } else {
        Decision::Wait { holder }
    }
}

/// Campaigns for and holds one Lease.
pub(crate) struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: LeaseTiming,
    observation: Observation,
    last_renew: Option<Instant>,
    status: Option<StatusAnnotations>,
    /// Where a standby says who leads, or why it cannot campaign.
    health: Option<std::sync::Arc<crate::health::Health>>,
    /// The holder seen by the last round that lost.
    holder: Option<String>,
}

/// Annotations the holder keeps on its Lease at each renewal (what it knows that others, such
/// as `check`, read there): no write of its own, they ride on the renewals.
pub(crate) type StatusAnnotations = Box<dyn Fn() -> Vec<(&'static str, String)> + Send + Sync>;

impl Elector {
    pub(crate) fn new(api: Api<Lease>, name: &str, identity: &str, timing: LeaseTiming) -> Self {
        Self {
            api,
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing,
            observation: Observation::default(),
            last_renew: None,
            status: None,
            health: None,
            holder: None,
        }
    }

    /// Says on `health` (line `controller`) who leads, or why the Lease cannot be had.
    pub(crate) fn with_health(mut self, health: std::sync::Arc<crate::health::Health>) -> Self {
        self.health = Some(health);
        self
    }

    fn say(&self, state: crate::health::State, detail: String) {
        if let Some(health) = &self.health {
            health.set("controller", state, detail);
        }
    }

    /// Keeps these annotations on the Lease while holding it.
    pub(crate) fn with_status(mut self, status: StatusAnnotations) -> Self {
        self.status = Some(status);
        self
    }

    fn annotate(&self, meta: &mut ObjectMeta) {
        if let Some(status) = &self.status {
            let annotations = meta.annotations.get_or_insert_with(Default::default);
            for (key, value) in status() {
                annotations.insert(key.to_owned(), value);
            }
        }
    }

    /// One read-decide-write round; returns whether we hold the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let lease = self.api.get_opt(&self.name).await?;
        let now = Instant::now();
        self.observation.observe(lease.as_ref(), now);
        let decision = decide(
            lease.as_ref(),
            &self.identity,
            &self.observation,
            now,
            jiff::Timestamp::now(),
            &self.timing,
        );
        let result = match decision {
            Decision::Wait { holder } => {
                self.holder = Some(holder);
                return Ok(false);
            }
            Decision::Create(spec) => {
                let mut lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.annotate(&mut lease.metadata);
                self.api.create(&field_manager::post(), &lease).await
            }
            Decision::Update(spec) => {
                let mut lease = lease.unwrap_or_default();
                lease.spec = Some(spec);
                self.annotate(&mut lease.metadata);
                // Carries the resourceVersion we read: a concurrent writer makes this a 409.
                self.api
                    .replace(&self.name, &field_manager::post(), &lease)
                    .await
            }
        };
        match result {
            Ok(written) => {
                self.observation.observe(Some(&written), now);
                self.last_renew = Some(now);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Returns once we hold the lease, or `false` if `stop` was cancelled first.
    pub(crate) async fn acquire(&mut self, stop: &CancellationToken) -> bool {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                    return true;
                }
                Ok(false) => self.say(
                    crate::health::State::Ok,
                    format!(
                        "standby: {} leads (Lease {})",
                        self.holder.as_deref().unwrap_or("another replica"),
                        self.name
                    ),
                ),
                Err(error) => {
                    tracing::warn!(%error, lease = %self.name, "lease not readable or writable");
                    self.say(
                        crate::health::State::Warning,
                        format!("cannot campaign for Lease {}: {error}", self.name),
                    );
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
    }

    /// Renews until the lease is lost (no successful renewal within the renew deadline, or
    /// taken over) or `stop` is cancelled. Returns `true` when stopped while still leading.
    pub(crate) async fn hold(&mut self, stop: &CancellationToken) -> bool {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return true,
                _ = tokio::time::sleep(self.timing.retry_period) => {}
            }
            match self.try_acquire_or_renew().await {
                Ok(true) => continue,
                Ok(false) => {
                    tracing::warn!(lease = %self.name, "leadership lost to another candidate");
                    return false;
                }
                Err(error) => {
                    let since = self.last_renew.map(|t| t.elapsed()).unwrap_or_default();
                    tracing::warn!(%error, ?since, "lease renewal failed");
                    if since >= self.timing.renew_deadline {
                        tracing::warn!(lease = %self.name, "renew deadline passed; stepping down");
                        return false;
                    }
                }
            }
        }
    }

    /// Gives the lease up so that another replica takes over at once (client-go's
    /// ReleaseOnCancel): empty holder, one-second duration.
    pub(crate) async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        if let Err(error) = self
            .api
            .replace(&self.name, &field_manager::post(), &lease)
            .await
        {
            tracing::warn!(%error, "could not release the lease");
        } else {
            tracing::info!(lease = %self.name, "lease released");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renew: &str, duration: i32, transitions: i32) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("l".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(duration),
                renew_time: Some(MicroTime(renew.parse().expect("timestamp"))),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn decisions_follow_client_go() {
        let timing = LeaseTiming::default();
        let now = jiff::Timestamp::from_second(1_800_000_000).expect("time");
        let t0 = Instant::now();
        let other = lease(Some("b"), "2026-01-01T00:00:00Z", 15, 3);
        let mine = lease(Some("a"), "2026-01-01T00:00:00Z", 15, 3);
        let released = lease(None, "2026-01-01T00:00:00Z", 1, 3);

        // Nothing there: create.
        let d = decide(None, "a", &Observation::default(), t0, now, &timing);
        assert!(
            matches!(d, Decision::Create(ref s) if s.holder_identity.as_deref() == Some("a") && s.lease_transitions == Some(0))
        );

        // Held by another, just seen: wait, however old its renewTime looks (their clock).
        let mut obs = Observation::default();
        obs.observe(Some(&other), t0);
        assert_eq!(
            decide(
                Some(&other),
                "a",
                &obs,
                t0 + Duration::from_secs(14),
                now,
                &timing
            ),
            Decision::Wait { holder: "b".into() }
        );
        // Unchanged for a whole lease duration by our clock: take it, counting a transition.
        match decide(
            Some(&other),
            "a",
            &obs,
            t0 + Duration::from_secs(15),
            now,
            &timing,
        ) {
            Decision::Update(s) => {
                assert_eq!(s.holder_identity.as_deref(), Some("a"));
                assert_eq!(s.lease_transitions, Some(4));
            }
            d => panic!("expected takeover, got {d:?}"),
        }
        // The holder renewed meanwhile: our clock restarts.
        let renewed = lease(Some("b"), "2026-01-01T00:00:05Z", 15, 3);
        obs.observe(Some(&renewed), t0 + Duration::from_secs(14));
        assert!(matches!(
            decide(
                Some(&renewed),
                "a",
                &obs,
                t0 + Duration::from_secs(20),
                now,
                &timing
            ),
            Decision::Wait { .. }
        ));

        // Ours: renew, keeping the transition count.
        assert!(matches!(
            decide(Some(&mine), "a", &obs, t0, now, &timing),
            Decision::Update(ref s) if s.lease_transitions == Some(3) && s.renew_time == Some(MicroTime(now))
        ));
        // Released: take it at once.
        let mut obs = Observation::default();
        obs.observe(Some(&released), t0);
        assert!(matches!(
            decide(Some(&released), "a", &obs, t0, now, &timing),
            Decision::Update(ref s) if s.lease_transitions == Some(4)
        ));
    }
}
