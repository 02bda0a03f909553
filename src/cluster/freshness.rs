//! Whether each kind of the view is current: when its watch broke and why, until it is
//! current again. The webhook keeps answering from what the view holds (every replica is cut
//! off alike, and failing closed would stop the cluster's writes); `/readyz?verbose`, `check`
//! and `cluster_view_stale_seconds` say how stale that is.
//!
//! A kind breaks at its watch's first error (a dropped stream, a refused connection, an
//! apiserver answering 5xx) and is current again at its first event after that, or once the
//! re-opened watch has not failed for a moment and the apiserver answers (a watch that
//! resumes emits nothing until an object changes; see [`super::watch`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use tokio::time::Instant;

use super::{Kind, Kinds};

/// A kind whose watch has been failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub kind: Kind,
    /// Since its watch first failed.
    pub age: Duration,
    /// Its latest error.
    pub error: String,
}

#[derive(Debug, Clone)]
struct Broken {
    since: Instant,
    error: String,
}

/// Shared by the watches (writers) and the view (readers); cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Freshness(Arc<Mutex<[Option<Broken>; Kind::ALL.len()]>>);

impl Freshness {
    fn slots(&self) -> std::sync::MutexGuard<'_, [Option<Broken>; Kind::ALL.len()]> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The watch of `kind` failed with `error`; true when it was current until now.
    pub(crate) fn broke(&self, kind: Kind, error: String) -> bool {
        let mut slots = self.slots();
        match &mut slots[kind as usize] {
            Some(broken) => {
                broken.error = error;
                false
            }
            slot @ None => {
                *slot = Some(Broken {
                    since: Instant::now(),
                    error,
                });
                true
            }
        }
    }

    /// The watch of `kind` is current; how long it was not, if it was not.
    pub(crate) fn restored(&self, kind: Kind) -> Option<Duration> {
        self.slots()[kind as usize]
            .take()
            .map(|broken| broken.since.elapsed())
    }

    pub(crate) fn is_broken(&self, kind: Kind) -> bool {
        self.slots()[kind as usize].is_some()
    }

    /// The kinds not current at `now`, in [`Kind::ALL`]'s order.
    pub(crate) fn stale(&self, now: Instant) -> Vec<Stale> {
        let slots = self.slots();
        Kind::ALL
            .into_iter()
            .filter_map(|kind| {
                slots[kind as usize].as_ref().map(|broken| Stale {
                    kind,
                    age: now.saturating_duration_since(broken.since),
                    error: broken.error.clone(),
                })
            })
            .collect()
    }
}

/// `cluster_view_stale_seconds{kind}`, computed at each scrape.
#[derive(Debug)]
pub(crate) struct StaleSeconds {
    pub(crate) watched: Kinds,
    pub(crate) freshness: Freshness,
}

impl Collector for StaleSeconds {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stale = self.freshness.stale(Instant::now());
        let mut family = encoder.encode_descriptor(
            "cluster_view_stale_seconds",
            "Seconds since the watch of each kind of the cluster view first failed, while it has not been current since; 0 while current. The webhook and the controller act on what the view last saw",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for kind in self.watched.list() {
            let age = stale
                .iter()
                .find(|s| s.kind == kind)
                .map_or(0, |s| i64::try_from(s.age.as_secs()).unwrap_or(i64::MAX));
            let labels = [("kind", kind.plural())];
            ConstGauge::new(age).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_kind_is_stale_from_its_first_error_until_it_is_current_again() {
        let freshness = Freshness::default();
        assert!(freshness.stale(Instant::now()).is_empty());
        assert!(freshness.broke(Kind::Claim, "connection refused".into()));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(
            !freshness.broke(Kind::Claim, "connection reset".into()),
            "already broken"
        );
        assert!(freshness.broke(Kind::Pod, "503".into()));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            freshness.stale(Instant::now()),
            [
                Stale {
                    kind: Kind::Claim,
                    age: Duration::from_secs(7),
                    error: "connection reset".into()
                },
                Stale {
                    kind: Kind::Pod,
                    age: Duration::from_secs(2),
                    error: "503".into()
                },
            ]
        );
        assert_eq!(
            freshness.restored(Kind::Claim),
            Some(Duration::from_secs(7))
        );
        assert_eq!(freshness.restored(Kind::Claim), None, "once");
        assert!(!freshness.is_broken(Kind::Claim) && freshness.is_broken(Kind::Pod));

        let mut registry = prometheus_client::registry::Registry::with_prefix("p");
        registry.register_collector(Box::new(StaleSeconds {
            watched: Kinds::of(&[Kind::Claim, Kind::Pod]),
            freshness: freshness.clone(),
        }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains("# TYPE p_cluster_view_stale_seconds gauge"),
            "{text}"
        );
        assert!(
            text.contains("p_cluster_view_stale_seconds{kind=\"persistentvolumeclaims\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("p_cluster_view_stale_seconds{kind=\"pods\"} 2"),
            "{text}"
        );
    }
}
