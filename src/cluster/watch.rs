//! Fills a [`ClusterView`](super::ClusterView) from the API with one reflector per kind.
//! Objects are trimmed on the way in ([`super::Trim`]): managedFields everywhere, and all a
//! StatefulSet's readers do not use.

use futures::{StreamExt, future::BoxFuture};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::{ClusterView, ClusterWriters, Trim};

/// Starts watching; returns the view and the future that drives the reflectors (run it on
/// the runtime for as long as the view is used).
pub fn from_cluster(client: Client) -> (ClusterView, BoxFuture<'static, ()>) {
    let writers = ClusterWriters::new();
    let view = writers.view();
    let ClusterWriters {
        mut storage_classes,
        mut namespaces,
        mut stateful_sets,
        mut claims,
        ..
    } = writers;
    let driver = futures::future::join4(
        run::<StorageClass>(Api::all(client.clone()), move |e| {
            storage_classes.apply_watcher_event(e)
        }),
        run::<Namespace>(Api::all(client.clone()), move |e| {
            namespaces.apply_watcher_event(e)
        }),
        run::<StatefulSet>(Api::all(client.clone()), move |e| {
            stateful_sets.apply_watcher_event(e)
        }),
        run::<PersistentVolumeClaim>(Api::all(client), move |e| claims.apply_watcher_event(e)),
    );
    (
        view,
        Box::pin(async move {
            driver.await;
        }),
    )
}

/// Watches one kind and hands every event to its cache, as a kube reflector does.
async fn run<K>(api: Api<K>, mut apply: impl FnMut(&watcher::Event<K>))
where
    K: Trim + Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|object: &mut K| object.trim());
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => apply(&event),
            // The watcher retries with backoff; the cache keeps serving the last state.
            Err(error) => tracing::warn!(%kind, %error, "watch error"),
        }
    }
}
