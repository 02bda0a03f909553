//! Fills a [`ClusterView`](super::ClusterView) from the API: the process's only watches,
//! one per kind. StorageClasses, Namespaces, StatefulSets and PersistentVolumeClaims always
//! (the webhook reads them); with the controller also the Pods of StatefulSets (those with
//! the `statefulset.kubernetes.io/pod-name` label) and the journals in the controller's
//! namespace. Every replica keeps them, leader or not, so a takeover starts from a synced
//! view. (The controller's Lease is not watched: leader election reads and renews it with
//! GET and replace, as client-go's does.)
//!
//! Each watch decodes its kind's lite type ([`super::lite`]), so what no reader uses is
//! skipped while decoding; the initial list comes in pages, so the memory it passes through
//! stays near one page of full objects. Each event is applied to its store, then published
//! to the view's feed, in the watch's own task. The webhook's kinds list first; claims, pods
//! and journals start once they have (the webhook is ready sooner, and fewer lists pass
//! through memory at once).
//!
//! After an error a watch is tried again by what the error says of the apiserver
//! ([`Failure`]): not answering, or answering that it cannot serve now (429, 5xx), is retried
//! soon, from 200 ms doubling up to [`WatchSettings::reconnect_max_delay`] (2 s), jittered, so
//! that the view is current again within seconds of an apiserver's return (kube-runtime's
//! default backoff grows to 30 s); a refusal (403, 404) backs off to 30 s as kube's does; a
//! 410 relists at once. Meanwhile the kind is stale ([`super::freshness`]); when it is
//! current again the view publishes [`Change::Resumed`](super::Change::Resumed), so that the
//! controller retries at once what failed during the outage.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::watcher;
use kube::{Api, Client};

use super::feed::{Change, Feed, SyncSender};
use super::freshness::Freshness;
use super::lite::{ClaimLite, JournalLite, PodLite, SetLite, Watched};
use super::{ClusterView, ClusterWriters, Kind, Kinds, Sink, apply};
use crate::backoff::{Exponential, jitter, jittered};
use crate::names;

/// Objects per page of an initial list (the apiserver's own default chunk for kubectl and
/// client-go informers is 500 too).
pub const PAGE_SIZE: u32 = 500;

/// How the watches come back after failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchSettings {
    /// The longest wait between attempts to re-open a watch the apiserver did not answer
    /// (`--watch-reconnect-max-delay`).
    pub reconnect_max_delay: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            reconnect_max_delay: Duration::from_secs(2),
        }
    }
}

/// Starts watching the webhook's kinds, and the controller's when `controller_namespace`
/// (where its journals live) is given; returns the view and the future that drives the
/// watches (run it for as long as the view is used).
pub fn from_cluster(
    client: Client,
    controller_namespace: Option<&str>,
) -> (ClusterView, BoxFuture<'static, ()>) {
    from_cluster_with(client, controller_namespace, WatchSettings::default())
}

/// [`from_cluster`] with these retry settings.
pub fn from_cluster_with(
    client: Client,
    controller_namespace: Option<&str>,
    settings: WatchSettings,
) -> (ClusterView, BoxFuture<'static, ()>) {
    let writers = match controller_namespace {
        Some(namespace) => ClusterWriters::with_controller(namespace),
        None => ClusterWriters::new(),
    };
    let view = writers.view();
    let ClusterWriters {
        storage_classes,
        namespaces,
        stateful_sets,
        claims,
        controller,
        feed,
        sync,
        freshness,
        ..
    } = writers;
    let ends = Ends {
        feed,
        sync,
        freshness,
        settings,
    };
    let mut watches = vec![
        run::<StorageClass>(Api::all(client.clone()), config(), storage_classes, &ends),
        run::<Namespace>(Api::all(client.clone()), config(), namespaces, &ends),
        run::<SetLite>(Api::all(client.clone()), config(), stateful_sets, &ends),
        after_webhook(
            &view,
            run::<ClaimLite>(Api::all(client.clone()), config(), claims, &ends),
        ),
    ];
    if let (Some(writers), Some(namespace)) = (controller, controller_namespace) {
        watches.push(after_webhook(
            &view,
            run::<PodLite>(
                Api::all(client.clone()),
                config().labels(names::POD_NAME_LABEL),
                writers.pods,
                &ends,
            ),
        ));
        watches.push(after_webhook(
            &view,
            run::<JournalLite>(
                Api::namespaced(client, namespace),
                config().labels(names::JOURNAL_LABEL),
                writers.journals,
                &ends,
            ),
        ));
    }
    let driver = futures::future::join_all(watches).map(|_| ()).boxed();
    (view, driver)
}

/// Where every watch reports: the feed, the sync state, its freshness; and its settings.
#[derive(Clone)]
struct Ends {
    feed: Feed,
    sync: SyncSender,
    freshness: Freshness,
    settings: WatchSettings,
}

/// Starts `watch` once the kinds the webhook's verdicts read have listed: those lists then
/// have the apiserver and this process to themselves, so the webhook is ready in seconds;
/// claims, pods and journals (a warning's input, and the controller's) list right after.
fn after_webhook(view: &ClusterView, watch: BoxFuture<'static, ()>) -> BoxFuture<'static, ()> {
    let view = view.clone();
    async move {
        if view.wait_kinds(Kinds::of(&Kind::WEBHOOK)).await.is_ok() {
            watch.await;
        }
    }
    .boxed()
}

fn config() -> watcher::Config {
    watcher::Config::default().page_size(PAGE_SIZE)
}

/// How long a re-opened watch must go without failing before the apiserver is asked whether
/// it answers (a resumed watch emits nothing until an object changes).
const SETTLE: Duration = Duration::from_millis(500);

/// Watches one kind and hands every event to its store and then to the feed; after an error
/// waits as [`Retry`] says, the kind stale meanwhile.
fn run<K: Watched>(
    api: Api<K>,
    config: watcher::Config,
    mut sink: impl Sink<K> + Send + 'static,
    ends: &Ends,
) -> BoxFuture<'static, ()> {
    let Ends {
        feed,
        sync,
        freshness,
        settings,
    } = ends.clone();
    async move {
        let kind = K::KIND;
        let client = Client::from(api.clone());
        let mut retry = Retry::new(settings.reconnect_max_delay);
        let stream = watcher(api, config);
        let mut stream = std::pin::pin!(stream);
        let restored = |retry: &mut Retry| {
            if let Some(down) = freshness.restored(kind) {
                tracing::info!(kind = kind.plural(), ?down, "watch current again");
                retry.reset();
                feed.publish(|| Change::Resumed(kind));
            }
        };
        loop {
            let next = if freshness.is_broken(kind) {
                // Polling drives the re-watch; the stream keeps its state across timeouts.
                match tokio::time::timeout(SETTLE, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        if answers(&client).await {
                            restored(&mut retry);
                        }
                        continue;
                    }
                }
            } else {
                stream.next().await
            };
            match next {
                None => return,
                Some(Ok(event)) => {
                    apply(&mut sink, &feed, &sync, event);
                    restored(&mut retry);
                }
                Some(Err(error)) => {
                    let delay = retry.after(classify(&error), jitter());
                    // Once per outage at warn; the retries at debug.
                    if freshness.broke(kind, error.to_string()) {
                        tracing::warn!(kind = kind.plural(), %error, ?delay, "watch failed; the view keeps serving the last state; retrying");
                    } else {
                        tracing::debug!(kind = kind.plural(), %error, ?delay, "watch failed again; retrying");
                    }
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
    .boxed()
}

/// Whether the apiserver answers now (`/version`, readable by every client).
async fn answers(client: &Client) -> bool {
    matches!(
        tokio::time::timeout(SETTLE * 4, client.apiserver_version()).await,
        Ok(Ok(_))
    )
}

/// What a watch error says of the apiserver, for how soon to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// 410 Gone: the history is compacted; the watcher lists again at once.
    Expired,
    /// No answer (connection refused or reset, a timeout), or an answer that it cannot
    /// serve now (429, 5xx): worth asking again soon.
    Unavailable,
    /// Refused (403, 404, a bad request): asking again soon changes nothing.
    Refused,
}

/// Reads `error` as a [`Failure`].
pub(crate) fn classify(error: &watcher::Error) -> Failure {
    let code = |code: u16| match code {
        410 => Failure::Expired,
        429 | 500..=599 => Failure::Unavailable,
        _ => Failure::Refused,
    };
    match error {
        watcher::Error::WatchError(status) => code(status.code),
        watcher::Error::InitialListFailed(error)
        | watcher::Error::WatchStartFailed(error)
        | watcher::Error::WatchFailed(error) => match error {
            kube::Error::Api(status) => code(status.code),
            // Transport: connect, TLS, a dropped stream, a timeout.
            _ => Failure::Unavailable,
        },
        watcher::Error::NoResourceVersion => Failure::Refused,
    }
}

/// The waits between attempts of one watch, growing with failures in a row.
#[derive(Debug)]
pub(crate) struct Retry {
    cap: Duration,
    attempts: u32,
    last: Option<Failure>,
}

impl Retry {
    /// First wait of an unavailable apiserver, doubling up to the cap.
    const UNAVAILABLE: Duration = Duration::from_millis(200);
    /// First wait of a refusal, doubling up to 30 s (kube-runtime's default backoff).
    const REFUSED: Duration = Duration::from_millis(800);
    const REFUSED_CAP: Duration = Duration::from_secs(30);

    pub(crate) fn new(cap: Duration) -> Self {
        Self {
            cap,
            attempts: 0,
            last: None,
        }
    }

    /// The watch is current: the next failure starts from the first wait.
    pub(crate) fn reset(&mut self) {
        self.attempts = 0;
        self.last = None;
    }

    /// How long to wait after `failure`; `jitter` in [0, 1) picks within the upper half of
    /// the wait (so that replicas cut off together do not return together).
    pub(crate) fn after(&mut self, failure: Failure, jitter: f64) -> Duration {
        self.attempts = self.attempts.saturating_add(1);
        let repeated = self.last.replace(failure) == Some(failure);
        let wait = match failure {
            // The apiserver answered: relist now, unless it keeps answering 410.
            Failure::Expired if !repeated => return Duration::ZERO,
            Failure::Expired | Failure::Unavailable => {
                Exponential::new(Self::UNAVAILABLE, self.cap)
            }
            Failure::Refused => Exponential::new(Self::REFUSED, Self::REFUSED_CAP.max(self.cap)),
        }
        .after(self.attempts);
        jittered(wait, jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("x", "y").with_code(code)))
    }

    #[test]
    fn errors_say_how_soon_to_try_again() {
        use watcher::Error as E;
        let transport = || kube::Error::Service("tcp connect error: Connection refused".into());
        for (error, want) in [
            (E::WatchStartFailed(transport()), Failure::Unavailable),
            (E::InitialListFailed(transport()), Failure::Unavailable),
            (E::WatchFailed(transport()), Failure::Unavailable),
            (E::InitialListFailed(api(503)), Failure::Unavailable),
            (E::WatchStartFailed(api(429)), Failure::Unavailable),
            (E::WatchStartFailed(api(500)), Failure::Unavailable),
            (E::InitialListFailed(api(410)), Failure::Expired),
            (
                E::WatchError(Box::new(Status::failure("gone", "Expired").with_code(410))),
                Failure::Expired,
            ),
            (E::InitialListFailed(api(403)), Failure::Refused),
            (E::WatchStartFailed(api(404)), Failure::Refused),
            (E::NoResourceVersion, Failure::Refused),
        ] {
            assert_eq!(classify(&error), want, "{error}");
        }
    }

    #[test]
    fn an_unavailable_apiserver_is_asked_again_within_the_cap_a_refusal_backs_off_to_30s() {
        let ms = Duration::from_millis;
        let mut retry = Retry::new(Duration::from_secs(2));
        // The upper end of the jitter: 200 ms doubling, capped at 2 s.
        let waits: Vec<Duration> = (0..7)
            .map(|_| retry.after(Failure::Unavailable, 0.999_999))
            .map(|d| Duration::from_millis(d.as_millis().div_ceil(10) as u64 * 10))
            .collect();
        assert_eq!(
            waits,
            [
                ms(200),
                ms(400),
                ms(800),
                ms(1600),
                ms(2000),
                ms(2000),
                ms(2000)
            ]
        );
        // The lower end: half.
        assert_eq!(retry.after(Failure::Unavailable, 0.0), ms(1000));
        // A 410 after the outage relists at once; a second one in a row waits.
        assert_eq!(retry.after(Failure::Expired, 0.5), Duration::ZERO);
        assert!(retry.after(Failure::Expired, 0.0) > Duration::ZERO);
        retry.reset();
        assert_eq!(retry.after(Failure::Unavailable, 0.0), ms(100));
        let mut refused = Retry::new(Duration::from_secs(2));
        let last = (0..10).map(|_| refused.after(Failure::Refused, 0.0)).last();
        assert_eq!(last, Some(Duration::from_secs(15)), "half of 30 s");
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }
}
