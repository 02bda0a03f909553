//! Fencing: a replica writes only while its own lease is valid by its own monotonic clock.
//!
//! client-go's leader election (`tools/leaderelection`) steps a leader down once it has not
//! renewed within the renew deadline, but nothing stops the writes its callers have under
//! way: a replica that was paused (SIGSTOP, a long GC or VM stall), partitioned or slow can
//! wake after another took the Lease and go on from a plan seconds old. Here every write of
//! the controller asks the fence immediately before it goes out:
//!
//! - [`LeaseClock`]: valid until the START of the last successful renewal plus the renew
//!   deadline, so a slow answer does not extend it. Another candidate takes the Lease only
//!   after it has seen the record unchanged for a whole lease duration, counted from when it
//!   read it, which is after our renewal started: with the renew deadline shorter than the
//!   lease duration, a replica stops before anyone else can start (client-go's reference
//!   timings: 15 s lease, 10 s renew deadline, 2 s retry period).
//! - [`Fence`]: one per leadership term: refuses once the clock has run out or the term was
//!   lost, counts refusals (`controller_writes_fenced_total`) and logs the first;
//!   [`Fence::closed`] resolves at that moment, so that writes in flight and the reconciles
//!   waiting on them are dropped rather than finished.
//!
//! The Lease's own writes are not fenced (they are how the clock is renewed), nor dry runs,
//! nor the certificate rotation every replica does outside the Lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// When this replica's hold on the Lease ends by its own clock.
#[derive(Debug)]
pub struct LeaseClock {
    renew_deadline: Duration,
    valid_until: watch::Sender<Option<Instant>>,
}

impl LeaseClock {
    /// A clock not running yet: nothing is valid until the first renewal.
    pub fn new(renew_deadline: Duration) -> Self {
        Self {
            renew_deadline,
            valid_until: watch::channel(None).0,
        }
    }

    /// A renewal (or acquisition) that started at `started` succeeded: valid until
    /// `started` plus the renew deadline, however long the answer took.
    pub fn renewed(&self, started: Instant) {
        let until = started + self.renew_deadline;
        self.valid_until
            .send_modify(|valid| *valid = Some(valid.map_or(until, |old| old.max(until))));
    }

    /// The Lease is lost or given up: nothing is valid until the next acquisition.
    pub fn revoke(&self) {
        self.valid_until.send_replace(None);
    }

    pub fn valid_until(&self) -> Option<Instant> {
        *self.valid_until.borrow()
    }

    /// Time left at `now` (zero when not valid).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.valid_until()
            .map_or(Duration::ZERO, |until| until.saturating_duration_since(now))
    }

    /// Resolves once the clock is not valid (at once if it is not now); a renewal meanwhile
    /// moves the moment on.
    pub async fn expired(&self) {
        let mut valid = self.valid_until.subscribe();
        loop {
            let until = *valid.borrow_and_update();
            match until {
                None => return,
                Some(until) if Instant::now() >= until => return,
                Some(until) => tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    changed = valid.changed() => if changed.is_err() { return },
                },
            }
        }
    }
}

/// Why a write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The term is over: the Lease was lost (to another candidate, or at the deadline).
    TermOver,
    /// No valid renewal: the clock never ran, or was revoked.
    NotHeld,
    /// The last successful renewal started more than the renew deadline ago.
    Expired { by: Duration },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TermOver => write!(f, "the leadership term is over"),
            Self::NotHeld => write!(f, "the Lease is not held"),
            Self::Expired { by } => write!(
                f,
                "the Lease was last renewed longer ago than the renew deadline (by {by:?})"
            ),
        }
    }
}

/// The fence's decision: the time left, or why not. Refused from the deadline on (at the
/// deadline itself too: another candidate may act a whole lease duration after it read our
/// record, and the margin is what keeps the two apart).
pub fn decide(
    valid_until: Option<Instant>,
    now: Instant,
    term_over: bool,
) -> Result<Duration, Refusal> {
    if term_over {
        return Err(Refusal::TermOver);
    }
    match valid_until {
        None => Err(Refusal::NotHeld),
        Some(until) if now >= until => Err(Refusal::Expired { by: now - until }),
        Some(until) => Ok(until - now),
    }
}

/// A write the fence refused (or a write in flight it abandoned), as the error the write
/// returns.
#[derive(Debug, Clone, thiserror::Error)]
#[error("write refused by fencing: {0}")]
pub struct Fenced(pub Refusal);

impl From<Fenced> for kube::Error {
    fn from(fenced: Fenced) -> Self {
        kube::Error::Service(Box::new(fenced))
    }
}

/// Whether `error` is a refusal of the fence (nothing was written, or what was in flight was
/// abandoned).
pub fn is_fenced(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Service(inner) if inner.is::<Fenced>())
}

/// The fence of one leadership term.
#[derive(Debug)]
pub struct Fence {
    clock: Arc<LeaseClock>,
    /// Cancelled when the term is lost: nothing of it writes again, even if a later term
    /// renews the clock.
    lost: CancellationToken,
    refused: Counter,
    logged: AtomicBool,
}

impl Fence {
    /// A fence on `clock` for the term that `lost` ends, counting refusals in `refused`.
    pub fn new(clock: Arc<LeaseClock>, lost: CancellationToken, refused: Counter) -> Self {
        Self {
            clock,
            lost,
            refused,
            logged: AtomicBool::new(false),
        }
    }

    /// Whether a write may go out now; `what` names it for the log.
    pub fn admit(&self, what: impl FnOnce() -> String) -> Result<(), Fenced> {
        match decide(
            self.clock.valid_until(),
            Instant::now(),
            self.lost.is_cancelled(),
        ) {
            Ok(_) => Ok(()),
            Err(why) => Err(self.refuse(why, what)),
        }
    }

    /// Whether a write would be admitted now (nothing counted).
    pub fn is_open(&self) -> bool {
        decide(
            self.clock.valid_until(),
            Instant::now(),
            self.lost.is_cancelled(),
        )
        .is_ok()
    }

    /// Counts a refusal, and logs the first of the term.
    pub fn refuse(&self, why: Refusal, what: impl FnOnce() -> String) -> Fenced {
        self.refused.inc();
        if self.logged.swap(true, Ordering::SeqCst) {
            tracing::debug!(%why, write = %what(), "write refused by fencing");
        } else {
            tracing::warn!(
                %why,
                write = %what(),
                "write refused by fencing: this replica's lease is not valid by its own clock; it writes nothing more until it leads again (first refusal of the term; later ones are counted in controller_writes_fenced_total)"
            );
        }
        Fenced(why)
    }

    /// Resolves when the fence closes (the clock runs out or the term is lost), with why.
    pub async fn closed(&self) -> Refusal {
        tokio::select! {
            () = self.lost.cancelled() => Refusal::TermOver,
            () = self.clock.expired() => decide(self.clock.valid_until(), Instant::now(), self.lost.is_cancelled())
                .err()
                .unwrap_or(Refusal::NotHeld),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_admits_only_before_the_deadline_of_a_term_not_lost() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        /// Valid until, now, term lost: the decision.
        type Row = (Option<Instant>, Instant, bool, Result<Duration, Refusal>);
        #[rustfmt::skip]
        let table: [Row; 7] = [
            (Some(t + ms(10)), t, false, Ok(ms(10))),
            (Some(t + ms(10)), t + ms(9), false, Ok(ms(1))),
            // At the deadline itself: refused.
            (
                Some(t + ms(10)),
                t + ms(10),
                false,
                Err(Refusal::Expired { by: ms(0) }),
            ),
            // A clock that jumped (a thawed process): refused, by how much.
            (
                Some(t + ms(10)),
                t + ms(5010),
                false,
                Err(Refusal::Expired { by: ms(5000) }),
            ),
            (None, t, false, Err(Refusal::NotHeld)),
            // A lost term stays closed whatever the clock says (a later term renewed it).
            (Some(t + ms(10)), t, true, Err(Refusal::TermOver)),
            (None, t, true, Err(Refusal::TermOver)),
        ];
        for (i, (until, now, lost, want)) in table.into_iter().enumerate() {
            assert_eq!(decide(until, now, lost), want, "row {i}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn validity_runs_from_the_start_of_the_renewal_that_succeeded() {
        let clock = LeaseClock::new(Duration::from_secs(10));
        assert_eq!(clock.remaining(Instant::now()), Duration::ZERO, "not held");
        let started = Instant::now();
        // The answer took 3 s: validity still counts from the start.
        tokio::time::advance(Duration::from_secs(3)).await;
        clock.renewed(started);
        assert_eq!(clock.valid_until(), Some(started + Duration::from_secs(10)));
        assert_eq!(clock.remaining(Instant::now()), Duration::from_secs(7));
        // An earlier start reported late never moves validity back.
        clock.renewed(started - Duration::from_secs(1));
        assert_eq!(clock.valid_until(), Some(started + Duration::from_secs(10)));
        clock.revoke();
        assert_eq!(clock.valid_until(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn expiry_resolves_at_the_deadline_and_a_renewal_moves_it() {
        let clock = Arc::new(LeaseClock::new(Duration::from_secs(10)));
        let t0 = Instant::now();
        clock.renewed(t0);
        let waiting = tokio::spawn({
            let clock = clock.clone();
            async move {
                clock.expired().await;
                Instant::now()
            }
        });
        tokio::time::advance(Duration::from_secs(6)).await;
        // Renewed at 6 s: valid until 16 s.
        clock.renewed(Instant::now());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(
            !waiting.is_finished(),
            "expired before the renewed deadline"
        );
        let expired_at = waiting.await.expect("joined");
        assert_eq!(expired_at - t0, Duration::from_secs(16));
        // A revoked clock has expired at once.
        clock.revoke();
        tokio::time::timeout(Duration::from_millis(1), clock.expired())
            .await
            .expect("expired at once");
    }

    #[tokio::test(start_paused = true)]
    async fn the_fence_counts_refusals_and_closes_at_the_deadline_or_on_loss() {
        let clock = Arc::new(LeaseClock::new(Duration::from_secs(10)));
        let refused = Counter::default();
        let lost = CancellationToken::new();
        let fence = Arc::new(Fence::new(clock.clone(), lost.clone(), refused.clone()));
        clock.renewed(Instant::now());
        assert!(fence.admit(|| "a".into()).is_ok());
        let closed = tokio::spawn({
            let fence = fence.clone();
            async move { (fence.closed().await, Instant::now()) }
        });
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_secs(10)).await;
        let (why, at) = closed.await.expect("joined");
        assert_eq!(
            (why, at - t0),
            (
                Refusal::Expired { by: Duration::ZERO },
                Duration::from_secs(10)
            )
        );
        assert!(matches!(
            fence.admit(|| "b".into()),
            Err(Fenced(Refusal::Expired { .. }))
        ));
        assert_eq!(refused.get(), 1);
        // Renewed again, but the term was lost: closed for good.
        clock.renewed(Instant::now());
        lost.cancel();
        assert_eq!(fence.closed().await, Refusal::TermOver);
        assert!(matches!(
            fence.admit(|| "c".into()),
            Err(Fenced(Refusal::TermOver))
        ));
        assert_eq!(refused.get(), 2);
        assert!(is_fenced(&kube::Error::from(Fenced(Refusal::NotHeld))));
        assert!(!is_fenced(&kube::Error::LinesCodecMaxLineLengthExceeded));
    }
}
