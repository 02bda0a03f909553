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

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use super::feed::{Feed, SyncSender};
use super::lite::{ClaimLite, JournalLite, PodLite, SetLite, Watched};
use super::{ClusterView, ClusterWriters, Kind, Kinds, Sink, apply};
use crate::names;

/// Objects per page of an initial list (the apiserver's own default chunk for kubectl and
/// client-go informers is 500 too).
pub const PAGE_SIZE: u32 = 500;

/// Starts watching the webhook's kinds, and the controller's when `controller_namespace`
/// (where its journals live) is given; returns the view and the future that drives the
/// watches (run it for as long as the view is used).
pub fn from_cluster(
    client: Client,
    controller_namespace: Option<&str>,
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
        ..
    } = writers;
    let mut watches = vec![
        run::<StorageClass>(
            Api::all(client.clone()),
            config(),
            storage_classes,
            &feed,
            &sync,
        ),
        run::<Namespace>(Api::all(client.clone()), config(), namespaces, &feed, &sync),
        run::<SetLite>(
            Api::all(client.clone()),
            config(),
            stateful_sets,
            &feed,
            &sync,
        ),
        after_webhook(
            &view,
            run::<ClaimLite>(Api::all(client.clone()), config(), claims, &feed, &sync),
        ),
    ];
    if let (Some(writers), Some(namespace)) = (controller, controller_namespace) {
        watches.push(after_webhook(
            &view,
            run::<PodLite>(
                Api::all(client.clone()),
                config().labels(names::POD_NAME_LABEL),
                writers.pods,
                &feed,
                &sync,
            ),
        ));
        watches.push(after_webhook(
            &view,
            run::<JournalLite>(
                Api::namespaced(client, namespace),
                config().labels(names::JOURNAL_LABEL),
                writers.journals,
                &feed,
                &sync,
            ),
        ));
    }
    let driver = futures::future::join_all(watches).map(|_| ()).boxed();
    (view, driver)
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

/// Watches one kind and hands every event to its store and then to the feed.
fn run<K: Watched>(
    api: Api<K>,
    config: watcher::Config,
    mut sink: impl Sink<K> + Send + 'static,
    feed: &Feed,
    sync: &SyncSender,
) -> BoxFuture<'static, ()> {
    let (feed, sync) = (feed.clone(), sync.clone());
    async move {
        let kind = K::kind(&()).into_owned();
        let stream = watcher(api, config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => apply(&mut sink, &feed, &sync, event),
                // The watcher retries with backoff; the store keeps serving the last state.
                Err(error) => tracing::warn!(%kind, %error, "watch error"),
            }
        }
    }
    .boxed()
}
