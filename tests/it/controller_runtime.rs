//! The controller runtime against the fake API server: one acting replica under a Lease,
//! handover on release and on a crash.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;

use crate::support::controller::{
    CONTROLLER_NAMESPACE, RunningController, config, eventually, no_features,
};
use crate::support::fake_apiserver::FakeApiServer;
use stateful_admission::controller::Features;

fn holder(api: &FakeApiServer) -> Option<String> {
    api.get::<Lease>(CONTROLLER_NAMESPACE, "stateful-admission-controller")
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

#[tokio::test(flavor = "multi_thread")]
async fn one_replica_leads_and_hands_over_on_release_and_on_crash() {
    let api = FakeApiServer::start().await;
    let a = RunningController::start(&api, config("replica-a", no_features()));
    assert!(
        eventually(Duration::from_secs(15), || a.is_leader()).await,
        "the first replica leads"
    );
    assert_eq!(holder(&api).as_deref(), Some("replica-a"));

    let b = RunningController::start(&api, config("replica-b", no_features()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !b.is_leader(),
        "a second replica waits while the lease is renewed"
    );
    assert!(a.is_leader());
    assert_eq!(holder(&api).as_deref(), Some("replica-a"));

    // A clean stop releases the lease (holder cleared), so the other replica takes over
    // without waiting for it to expire.
    a.stop().await;
    assert_ne!(
        holder(&api).as_deref(),
        Some("replica-a"),
        "released on stop"
    );
    assert!(eventually(Duration::from_secs(15), || b.is_leader()).await);
    assert_eq!(holder(&api).as_deref(), Some("replica-b"));

    // A crash releases nothing: a third replica waits for the lease to expire, then leads.
    let c = RunningController::start(&api, config("replica-c", no_features()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!c.is_leader());
    b.kill();
    assert!(eventually(Duration::from_secs(6), || c.is_leader()).await);
    assert_eq!(holder(&api).as_deref(), Some("replica-c"));
    let lease = api
        .get::<Lease>(CONTROLLER_NAMESPACE, "stateful-admission-controller")
        .and_then(|l| l.spec)
        .expect("lease");
    assert_eq!(lease.lease_transitions, Some(2));
    c.stop().await;
}

/// A replica takes the Lease only once its view is complete, so that a takeover never plans
/// from a half-filled view; a stop that comes before (SIGTERM right after start) ends it.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_takes_the_lease_only_once_its_view_has_listed() {
    let api = FakeApiServer::start().await;
    const POD_LIST: &str = "/api/v1/pods?&labelSelector";
    for stop_first in [true, false] {
        let pod_list = api.hold_next("GET", POD_LIST, 1);
        let features = Features {
            claim_rollout: true,
            ..no_features()
        };
        let controller = RunningController::start(&api, config("replica-a", features));
        pod_list
            .arrived(1, Duration::from_secs(15))
            .await
            .expect("the view lists pods");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!controller.is_leader(), "leads with its pods not listed");
        assert!(
            api.requests().iter().all(|r| !r.path.contains("/leases")),
            "campaigned with its pods not listed"
        );
        if stop_first {
            // Stops within 10 s, while the list is still unanswered, holding nothing.
            controller.stop().await;
            assert_eq!(holder(&api), None, "never took the Lease");
            drop(pod_list);
            continue;
        }
        pod_list.release();
        assert!(
            eventually(Duration::from_secs(15), || controller.is_leader()).await,
            "leads once the view is complete"
        );
        controller.stop().await;
        assert_eq!(holder(&api), None, "the lease is released");
    }
}

/// Every feature reads the shared view, so a view that does not watch the controller's pods
/// and journals (the webhook's alone, or another namespace's journals) is refused at once:
/// the controller never leads on it.
#[tokio::test(flavor = "multi_thread")]
async fn a_view_without_the_controllers_kinds_is_refused() {
    let api = FakeApiServer::start().await;
    for namespace in [None, Some("elsewhere")] {
        let (view, driver) =
            stateful_admission::cluster::watch::from_cluster(api.client(), namespace);
        let driver = tokio::spawn(driver);
        let mut registry = prometheus_client::registry::Registry::default();
        let controller = stateful_admission::controller::Controller::new(
            config("replica-a", no_features()),
            &mut registry,
            Default::default(),
        );
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::time::timeout(
            Duration::from_secs(5),
            controller.run(api.client(), view, stop),
        )
        .await
        .expect("returns at once");
        driver.abort();
    }
    assert_eq!(holder(&api), None, "never took the Lease");
    assert!(
        api.requests().iter().all(|r| !r.path.contains("/leases")),
        "never asked for it"
    );
}
