//! The cluster view against the fake API server: it follows the cluster through its watches,
//! tells subscribers of each change after applying it, and after a 410 Gone relists into the
//! objects it holds, sweeping those that went while it was away.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Value, json};
use stateful_admission::cluster::{Change, ClusterView, Kind, watch};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::support::controller::eventually;
use crate::support::fake_apiserver::FakeApiServer;

fn claim(name: &str, label: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": "db", "labels": {"v": label},
                        "managedFields": [{"manager": "m", "operation": "Update"}]},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
}

fn label(view: &ClusterView, name: &str) -> Option<String> {
    view.claim("db", name)
        .and_then(|c| c.metadata.labels.clone())
        .and_then(|l| l.get("v").cloned())
}

/// The changes received so far.
fn drain(changes: &mut UnboundedReceiver<Change>) -> Vec<Change> {
    std::iter::from_fn(|| changes.try_recv().ok()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_view_follows_changes_and_a_relist_sweeps_what_went_meanwhile() {
    let api = FakeApiServer::start().await;
    for name in ["a", "b", "c"] {
        api.put_object(claim(name, "1"));
    }
    let (view, driver) = watch::from_cluster(api.client(), Some("stateful-admission"));
    let driver = tokio::spawn(driver);
    tokio::time::timeout(Duration::from_secs(10), view.wait_synced())
        .await
        .expect("synced in time")
        .expect("synced");
    let mut changes = view.subscribe();
    let held = |view: &ClusterView| {
        let mut names: Vec<String> = view.claim_keys().into_iter().map(|(_, n)| n).collect();
        names.sort();
        names
    };
    assert_eq!(held(&view), ["a", "b", "c"]);
    let stored = view.claim("db", "a").expect("held");
    assert_eq!(stored.metadata.managed_fields, None, "trimmed");

    // A change arrives as a change of the view, already applied.
    api.put_object(claim("d", "1"));
    assert!(eventually(Duration::from_secs(10), || view.claim("db", "d").is_some()).await);
    assert!(
        eventually(Duration::from_secs(5), || drain(&mut changes).contains(
            &Change::Claim {
                namespace: "db".into(),
                name: "d".into()
            }
        ))
        .await
    );

    // Away while "b" is deleted and "a" changes, and the history to resume from is lost.
    api.fail_next("GET", "watch=true", 500, usize::MAX);
    api.disconnect_watches();
    let refused = || {
        api.requests()
            .iter()
            .any(|r| r.is_watch() && r.code == 500 && r.path == "/api/v1/persistentvolumeclaims")
    };
    assert!(
        eventually(Duration::from_secs(10), refused).await,
        "the claim watch is down"
    );
    api.remove::<PersistentVolumeClaim>("db", "b");
    api.put_object(claim("a", "2"));
    api.compact_history();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        held(&view),
        ["a", "b", "c", "d"],
        "the last state is served meanwhile"
    );
    let _ = drain(&mut changes);
    api.clear_faults();

    assert!(
        eventually(Duration::from_secs(30), || held(&view) == ["a", "c", "d"]).await,
        "the relist sweeps the deleted claim: {:?}",
        held(&view)
    );
    assert_eq!(label(&view, "a").as_deref(), Some("2"), "updated in place");
    // The view is updated first, its subscribers told a moment later.
    let mut seen = Vec::new();
    assert!(
        eventually(Duration::from_secs(5), || {
            seen.extend(drain(&mut changes));
            seen.contains(&Change::Relisted(Kind::Claim))
        })
        .await,
        "subscribers hear of the relist: {seen:?}"
    );
    assert!(
        !seen.iter().any(|c| matches!(c, Change::Claim { .. })),
        "a relist's objects are not published one by one: {seen:?}"
    );
    let lists = api
        .requests()
        .iter()
        .filter(|r| {
            r.method == "GET" && !r.is_watch() && r.path == "/api/v1/persistentvolumeclaims"
        })
        .count();
    assert_eq!(lists, 2, "the initial list and the relist after 410 Gone");
    driver.abort();
}
