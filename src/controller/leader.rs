//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
//! the holder renews `renewTime` every retry period; another candidate takes the lease only
//! after it has seen the same record unchanged for a whole lease duration by its own clock
//! (so clock skew between nodes does not matter); every write carries the resourceVersion it
//! read, so two candidates cannot both win. The decision is a pure function; [`Elector`] only
//! does the API calls.
//!
//! The holder keeps a [`LeaseClock`]: valid until the start of its last successful renewal
//! plus the renew deadline. Each renewal is bounded by the time left, so a hung request ends
//! at the deadline and the holder steps down there; the controller's writes are fenced on the
//! same clock ([`super::fence`]). Times are tokio's monotonic `Instant`s (tests control them).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::Api;

use super::fence::LeaseClock;
use crate::field_manager;
use tokio_util::sync::CancellationToken;

/// Timing of the election (client-go's defaults, `tools/leaderelection`).
#[derive(Debug, Clone)]
pub struct LeaseTiming {
    /// How long the record must stay unchanged before another candidate takes it.
    pub lease_duration: Duration,
    /// How long the holder acts after the start of its last successful renewal.
    pub renew_deadline: Duration,
    /// Time between renewals, and between attempts to take the Lease.
    pub retry_period: Duration,
}

impl LeaseTiming {
    /// client-go's rules (`NewLeaderElector`), and whole seconds for the Lease's
    /// `leaseDurationSeconds`: the renew deadline is shorter than the lease duration (the
    /// holder stops before another may start) and the retry period shorter than the renew
    /// deadline (a failed renewal is retried before the deadline).
    pub fn validate(&self) -> Result<(), String> {
        let (duration, deadline, retry) =
            (self.lease_duration, self.renew_deadline, self.retry_period);
        if duration.is_zero() || duration.subsec_nanos() != 0 {
            return Err(format!(
                "--lease-duration must be a whole number of seconds, at least 1s (the Lease records leaseDurationSeconds), not {duration:?}"
            ));
        }
        if retry.is_zero() {
            return Err("--retry-period must be more than 0s".to_owned());
        }
        if deadline >= duration {
            return Err(format!(
                "--renew-deadline ({deadline:?}) must be shorter than --lease-duration ({duration:?}): a leader must stop writing before another replica may take the Lease"
            ));
        }
        if retry >= deadline {
            return Err(format!(
                "--retry-period ({retry:?}) must be shorter than --renew-deadline ({deadline:?}): a failed renewal must be retried before the deadline"
            ));
        }
        Ok(())
    }
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
    /// Valid until the start of the last successful renewal plus the renew deadline.
    clock: Arc<LeaseClock>,
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
            clock: Arc::new(LeaseClock::new(timing.renew_deadline)),
            timing,
            observation: Observation::default(),
            status: None,
            health: None,
            holder: None,
        }
    }

    /// The clock the controller's writes are fenced on.
    pub(crate) fn clock(&self) -> Arc<LeaseClock> {
        self.clock.clone()
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

    /// One read-decide-write round; returns whether we hold the lease afterwards. On
    /// success the clock runs from the round's start: a slow answer does not extend it.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let started = Instant::now();
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
                self.clock.renewed(started);
                Ok(true)
            }
            // A 409 (someone wrote the Lease between our read and our write) is a failed
            // round, as in client-go's tryAcquireOrRenew: the next round reads who holds it.
            Err(e) => Err(e),
        }
    }

    /// Returns once we hold the lease, or `false` if `stop` was cancelled first. Each
    /// attempt is bounded by the renew deadline: one whose answer came later is no hold.
    pub(crate) async fn acquire(&mut self, stop: &CancellationToken) -> bool {
        loop {
            let attempt = tokio::select! {
                _ = stop.cancelled() => return false,
                attempt = tokio::time::timeout(self.timing.renew_deadline, self.try_acquire_or_renew()) => attempt,
            };
            match attempt {
                Ok(Ok(true)) if !self.clock.remaining(Instant::now()).is_zero() => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
                    return true;
                }
                Ok(Ok(true)) => {
                    tracing::warn!(lease = %self.name, "the Lease was taken, but the answer came after the renew deadline; trying again");
                    self.clock.revoke();
                }
                Ok(Ok(false)) => self.say(
                    crate::health::State::Ok,
                    format!(
                        "standby: {} leads (Lease {})",
                        self.holder.as_deref().unwrap_or("another replica"),
                        self.name
                    ),
                ),
                Ok(Err(kube::Error::Api(status))) if status.code == 409 => {
                    tracing::debug!(lease = %self.name, "another candidate wrote the Lease first");
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, lease = %self.name, "lease not readable or writable");
                    self.say(
                        crate::health::State::Warning,
                        format!("cannot campaign for Lease {}: {error}", self.name),
                    );
                }
                Err(_) => {
                    tracing::warn!(lease = %self.name, deadline = ?self.timing.renew_deadline, "no answer about the lease within the renew deadline");
                    self.say(
                        crate::health::State::Warning,
                        format!(
                            "cannot campaign for Lease {}: no answer within {:?}",
                            self.name, self.timing.renew_deadline
                        ),
                    );
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
    }

    /// Renews every retry period until the lease is lost or `stop` is cancelled. Lost: read
    /// held by another (at once; client-go would poll on to the deadline), or no successful
    /// renewal started within the renew deadline (a failed one, a 409 included, is retried
    /// after the retry period, as client-go's `renew` does), which is checked
    /// when it passes, not only when a request returns (each renewal is bounded by the time
    /// left, as client-go's `renew` bounds its retries by `RenewDeadline`). The clock is
    /// revoked on loss. Returns `true` when stopped while still leading.
    pub(crate) async fn hold(&mut self, stop: &CancellationToken) -> bool {
        loop {
            let next = Instant::now() + self.timing.retry_period;
            let wake = self
                .clock
                .valid_until()
                .map_or(next, |until| until.min(next));
            tokio::select! {
                _ = stop.cancelled() => return true,
                () = tokio::time::sleep_until(wake) => {}
            }
            let left = self.clock.remaining(Instant::now());
            if left.is_zero() {
                return self.step_down("renew deadline passed without a successful renewal");
            }
            let renewal = tokio::select! {
                _ = stop.cancelled() => return true,
                renewal = tokio::time::timeout(left, self.try_acquire_or_renew()) => renewal,
            };
            match renewal {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => return self.step_down("leadership lost to another candidate"),
                Ok(Err(error)) => {
                    let left = self.clock.remaining(Instant::now());
                    tracing::warn!(%error, ?left, "lease renewal failed");
                }
                Err(_) => {
                    return self.step_down("renewal unanswered at the renew deadline");
                }
            }
        }
    }

    /// Lost: the clock stops (every fenced write is refused from now on); returns false.
    fn step_down(&self, why: &str) -> bool {
        self.clock.revoke();
        tracing::warn!(lease = %self.name, deadline = ?self.timing.renew_deadline, "{why}; stepping down");
        false
    }

    /// Gives the lease up so that another replica takes over at once (client-go's
    /// ReleaseOnCancel): empty holder, one-second duration.
    pub(crate) async fn release(&mut self) {
        // Given up: nothing is written under it from here on.
        self.clock.revoke();
        let released = tokio::time::timeout(self.timing.renew_deadline, self.write_release());
        if released.await.is_err() {
            tracing::warn!(lease = %self.name, "could not release the lease: no answer");
        }
    }

    async fn write_release(&mut self) {
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
    use crate::controller::test_api;
    use axum::http::Method;
    use serde_json::{Value, json};
    use std::sync::Mutex;

    /// The writes (PUT, POST) a fake Lease store received, in order, each with the code it
    /// answered (`None`: left hanging).
    #[derive(Default)]
    struct Writes(Mutex<Vec<Option<u16>>>);

    impl Writes {
        fn count(&self) -> usize {
            self.0.lock().expect("lock").len()
        }

        fn answers(&self) -> Vec<Option<u16>> {
            self.0.lock().expect("lock").clone()
        }
    }

    /// A Lease store behind a client: GET answers the stored lease, PUT and POST store the
    /// body, unless `put` says to hang (`None`) or fail.
    fn lease_api(
        holder: Option<&str>,
        put: impl Fn(usize) -> Option<u16> + Send + Sync + 'static,
    ) -> (Api<Lease>, Arc<Writes>) {
        lease_api_written_by(holder, put, None)
    }

    /// [`lease_api`], where a 409 comes with the Lease written by another: held by
    /// `conflict_holder` from then on, where given, else only its resourceVersion moved.
    fn lease_api_written_by(
        holder: Option<&str>,
        put: impl Fn(usize) -> Option<u16> + Send + Sync + 'static,
        conflict_holder: Option<&'static str>,
    ) -> (Api<Lease>, Arc<Writes>) {
        let stored: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(holder.map(|h| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "l", "namespace": "sa", "resourceVersion": "1"},
                   "spec": {"holderIdentity": h, "leaseDurationSeconds": 15,
                            "renewTime": "2030-01-01T00:00:00.000000Z"}})
        })));
        let writes = Arc::new(Writes::default());
        let logged = writes.clone();
        let client = test_api::client(move |method, _path, body| {
            let mut stored = stored.lock().expect("lock");
            if method == Method::GET {
                return Some(match stored.as_ref() {
                    Some(lease) => (200, lease.clone()),
                    None => (
                        404,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
                    ),
                });
            }
            let n = {
                let mut log = logged.0.lock().expect("lock");
                log.push(None);
                log.len() - 1
            };
            let answer = match put(n) {
                None => None,
                Some(code) if code >= 300 => {
                    if code == 409 {
                        let lease = stored.get_or_insert_with(|| {
                            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                   "metadata": {"name": "l", "namespace": "sa"},
                                   "spec": {"leaseDurationSeconds": 15}})
                        });
                        lease["metadata"]["resourceVersion"] = json!(format!("other-{n}"));
                        if let Some(other) = conflict_holder {
                            lease["spec"]["holderIdentity"] = json!(other);
                        }
                    }
                    Some((
                        code,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}),
                    ))
                }
                Some(code) => {
                    let mut lease: Value = serde_json::from_slice(body).expect("a lease");
                    lease["metadata"]["resourceVersion"] = json!((n + 2).to_string());
                    *stored = Some(lease.clone());
                    Some((code, lease))
                }
            };
            logged.0.lock().expect("lock")[n] = answer.as_ref().map(|(code, _)| *code);
            answer
        });
        (Api::namespaced(client, "sa"), writes)
    }

    fn timing() -> LeaseTiming {
        LeaseTiming::default()
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_renewal_ends_the_hold_at_the_renew_deadline() {
        // The acquisition is answered; every renewal after it hangs.
        let (api, writes) = lease_api(None, |n| (n == 0).then_some(201));
        let mut elector = Elector::new(api, "l", "a", timing());
        let stop = CancellationToken::new();
        let started = Instant::now();
        assert!(elector.acquire(&stop).await);
        let clock = elector.clock();
        assert_eq!(clock.valid_until(), Some(started + Duration::from_secs(10)));
        assert!(!elector.hold(&stop).await, "lost");
        assert_eq!(
            Instant::now() - started,
            Duration::from_secs(10),
            "at the deadline"
        );
        assert_eq!(clock.valid_until(), None, "revoked");
        assert_eq!(writes.count(), 2, "one renewal sent, never answered");
    }

    #[tokio::test(start_paused = true)]
    async fn failed_renewals_are_retried_until_the_deadline_then_the_hold_ends() {
        let (api, writes) = lease_api(None, |n| Some(if n == 0 { 201 } else { 500 }));
        let mut elector = Elector::new(api, "l", "a", timing());
        let stop = CancellationToken::new();
        let started = Instant::now();
        assert!(elector.acquire(&stop).await);
        assert!(!elector.hold(&stop).await);
        assert_eq!(Instant::now() - started, Duration::from_secs(10));
        // Renewals at 2, 4, 6 and 8 s, each failing; none at the deadline.
        assert_eq!(writes.count(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_keep_the_clock_running_and_a_stop_keeps_the_lease_for_release() {
        let (api, _) = lease_api(Some("a"), |_| Some(200));
        let clock = held_for(api, Duration::from_secs(61)).await;
        assert!(clock.valid_until().is_some(), "still held, for release");
    }

    /// Acquires as "a" over `api`, holds for `period` (paused clock), then stops: asserts
    /// the clock was renewed within the last retry period and the hold ended still leading.
    async fn held_for(api: Api<Lease>, period: Duration) -> Arc<LeaseClock> {
        let mut elector = Elector::new(api, "l", "a", timing());
        let stop = CancellationToken::new();
        assert!(elector.acquire(&stop).await);
        let clock = elector.clock();
        let holding = tokio::spawn({
            let stop = stop.clone();
            async move { elector.hold(&stop).await }
        });
        tokio::time::sleep(period).await;
        // Renewed every 2 s: never more than 2 s old.
        assert!(
            clock.remaining(Instant::now()) >= Duration::from_secs(8),
            "renewed within the last retry period"
        );
        stop.cancel();
        assert!(holding.await.expect("joined"), "stopped while leading");
        clock
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_taken_over_ends_the_hold_as_soon_as_it_is_read() {
        // The first renewal loses the race to "b", who takes the Lease.
        let (api, writes) =
            lease_api_written_by(None, |n| Some(if n == 0 { 201 } else { 409 }), Some("b"));
        let mut elector = Elector::new(api, "l", "a", timing());
        let stop = CancellationToken::new();
        let started = Instant::now();
        assert!(elector.acquire(&stop).await);
        assert!(!elector.hold(&stop).await);
        assert_eq!(
            Instant::now() - started,
            Duration::from_secs(4),
            "the 409 at 2 s, the Lease read held by b at 4 s"
        );
        assert_eq!(writes.count(), 2, "nothing written once b holds it");
        assert_eq!(elector.clock().valid_until(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_on_a_lease_still_ours_is_retried_not_a_step_down() {
        // Someone else's write (an annotation, say) moves the resourceVersion under the
        // first renewal; the Lease still names us.
        let (api, writes) =
            lease_api_written_by(Some("a"), |n| Some(if n == 1 { 409 } else { 200 }), None);
        // Renewed after the conflict, and still leading.
        held_for(api, Duration::from_secs(12)).await;
        // The acquisition succeeded, the first renewal was answered 409 and a later one 200:
        // the conflict was served to a renewal, and the hold went on past it.
        let answers = writes.answers();
        assert!(
            answers.first() == Some(&Some(200))
                && answers.get(1) == Some(&Some(409))
                && answers.iter().skip(2).any(|a| *a == Some(200)),
            "answers to the writes, in order: {answers:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn losing_the_race_for_a_lease_is_a_standby_not_an_error() {
        // Another candidate creates it between our read and our create; then holds it.
        let (api, writes) = lease_api_written_by(None, |_| Some(409), Some("b"));
        let mut elector = Elector::new(api, "l", "a", timing());
        let stop = CancellationToken::new();
        let campaign = tokio::spawn(async move { elector.acquire(&stop).await });
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!campaign.is_finished(), "still a candidate");
        campaign.abort();
        assert_eq!(writes.count(), 1, "b holds it: waited, not written");
    }

    #[test]
    fn timings_follow_client_go_rules() {
        let t = |d: u64, r: u64, p: u64| LeaseTiming {
            lease_duration: Duration::from_millis(d),
            renew_deadline: Duration::from_millis(r),
            retry_period: Duration::from_millis(p),
        };
        assert!(LeaseTiming::default().validate().is_ok());
        assert!(t(2000, 1500, 200).validate().is_ok());
        for (bad, says) in [
            (t(15_000, 15_000, 2000), "--renew-deadline"),
            (t(15_000, 20_000, 2000), "--renew-deadline"),
            (t(15_000, 10_000, 10_000), "--retry-period"),
            (t(15_000, 10_000, 0), "--retry-period"),
            (t(1500, 1000, 200), "whole number of seconds"),
            (t(0, 0, 0), "--lease-duration"),
        ] {
            let error = bad.validate().expect_err("refused");
            assert!(error.contains(says), "{error}");
        }
    }

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
