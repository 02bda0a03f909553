//! The fake API server's watch lag: the chosen watches get their events late, in order;
//! other watches and lists are not delayed.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use tokio::time::Instant;

use crate::support::fake_apiserver::FakeApiServer;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("a config map")
}

/// The names of the first `n` ADDED events of a watch, with when each arrived.
async fn added(
    stream: impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>>,
    n: usize,
) -> Vec<(String, Instant)> {
    let mut stream = std::pin::pin!(stream);
    let mut seen = Vec::new();
    while seen.len() < n {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await {
            Ok(Some(Ok(WatchEvent::Added(cm)))) => seen.push((cm.name_any(), Instant::now())),
            Ok(Some(Ok(_))) => {}
            other => panic!("the watch ended early: {other:?}"),
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lagged_watch_gets_its_events_late_and_in_order_and_others_do_not() {
    let api = FakeApiServer::start().await;
    let maps: Api<ConfigMap> = Api::default_namespaced(api.client());
    let first = maps
        .create(&PostParams::default(), &config_map("a"))
        .await
        .expect("create");
    let from = first.resource_version().expect("rv");
    let lag = Duration::from_millis(600);
    api.lag_next_watches("/configmaps?", lag, 1);
    let lagged = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("lagged watch");
    let prompt = maps
        .watch(&WatchParams::default(), &from)
        .await
        .expect("second watch");

    let written = Instant::now();
    for name in ["b", "c", "d"] {
        maps.create(&PostParams::default(), &config_map(name))
            .await
            .expect("create");
    }
    // Lists are never delayed.
    let listed = maps.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 4);
    assert!(written.elapsed() < lag, "the list was not held back");

    let (lagged, prompt) = tokio::join!(added(lagged, 3), added(prompt, 3));
    let names = |events: &[(String, Instant)]| -> Vec<String> {
        events.iter().map(|(n, _)| n.clone()).collect()
    };
    assert_eq!(names(&lagged), ["b", "c", "d"]);
    assert_eq!(names(&prompt), ["b", "c", "d"]);
    assert!(
        prompt.iter().all(|(_, at)| *at - written < lag),
        "the second watch is not delayed"
    );
    assert!(
        lagged.iter().all(|(_, at)| *at - written >= lag),
        "every event of the lagged watch comes at least {lag:?} after it was written"
    );
    // A burst stays a burst: the lag is not added once per event.
    let (_, last) = lagged[2];
    assert!(last - written < lag * 2, "{:?}", last - written);
}
