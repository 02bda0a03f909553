//! Fencing against the fake API server: a replica writes only while its Lease is valid by its
//! own clock. Renewals blocked, or the replica frozen (its runtime stopped, as SIGSTOP stops
//! a process) while another takes over: the fake's write records, by user agent, show no
//! write of it after its deadline, and its work in flight is dropped.

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::claim_rollout::{NS, class, complete_expansion, features, install, set, storage};
use crate::support::controller::{Isolated, RunningController, config, eventually, written_by};
use crate::support::fake_apiserver::{FakeApiServer, WriteRecord};
use stateful_admission::names;

/// A set of three claims rolling out InPlace to 2Gi, one claim at a time.
pub(crate) fn rollout(api: &FakeApiServer) {
    api.put_object(class("fast", true));
    install(
        api,
        set(
            "web",
            3,
            "fast",
            Some("2Gi"),
            &[
                (names::VOLUME_CLAIM_UPDATE_POLICY, "InPlace"),
                (names::MAX_UNAVAILABLE, "1"),
            ],
        ),
        3,
        "fast",
    );
}

/// Whether claim `ordinal` of `web` asks for 2Gi.
pub(crate) fn patched(api: &FakeApiServer, ordinal: u32) -> bool {
    api.get::<PersistentVolumeClaim>(NS, &format!("data-web-{ordinal}"))
        .is_some_and(|c| storage(&c).0 == "2Gi")
}

fn is_lease(record: &WriteRecord) -> bool {
    record.resource.is_some_and(|r| r.plural == "leases")
}

fn claim_patches(api: &FakeApiServer, ordinal: u32) -> Vec<WriteRecord> {
    let name = format!("data-web-{ordinal}");
    api.write_records()
        .into_iter()
        .filter(|r| {
            r.resource
                .is_some_and(|t| t.plural == "persistentvolumeclaims")
                && r.name.as_deref() == Some(name.as_str())
                && r.succeeded()
                && !r.dry_run
        })
        .collect()
}

/// When the last renewal of `identity` that succeeded was answered: its deadline is at most
/// the renew deadline after that (it started before).
fn last_renewal(api: &FakeApiServer, identity: &str) -> Duration {
    api.write_records()
        .into_iter()
        .filter(|r| is_lease(r) && written_by(r, identity) && r.succeeded())
        .map(|r| r.at)
        .max()
        .expect("renewed at least once")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_renewals_are_blocked_writes_nothing_after_its_deadline_and_drops_its_work()
{
    let api = FakeApiServer::start().await;
    let config = config("replica-a", features(false));
    let deadline = config.timing.renew_deadline;
    // The first claim patch reaches the apiserver and is never answered: work in flight.
    let first_patch = api.hold_next("PATCH", "/persistentvolumeclaims/", 1);
    rollout(&api);
    let a = RunningController::start(&api, config);
    first_patch
        .arrived(1, Duration::from_secs(15))
        .await
        .expect("the rollout started");
    assert!(a.is_leader());
    // From now on no renewal of the Lease gets an answer.
    let renewals = api.hold_next("PUT", "/leases/", usize::MAX);
    let blocked = api.uptime();

    // It steps down at its deadline although the patch it waits for is still unanswered:
    // the reconcile in flight was dropped, not waited for.
    assert!(
        eventually(deadline * 3, || !a.is_leader()).await,
        "still leading {:?} after its renewals were blocked",
        api.uptime() - blocked
    );
    let stepped_down = api.uptime();
    let deadline_at = last_renewal(&api, "replica-a") + deadline;
    assert!(
        stepped_down <= deadline_at + Duration::from_secs(1),
        "stepped down {:?} after its deadline",
        stepped_down.saturating_sub(deadline_at)
    );
    // Give it time to do anything it still would; its renewals stay blocked.
    tokio::time::sleep(deadline * 2).await;
    let late: Vec<WriteRecord> = api
        .write_records()
        .into_iter()
        .filter(|r| written_by(r, "replica-a") && r.at > deadline_at && !r.dry_run)
        .collect();
    assert!(late.is_empty(), "written after its deadline: {late:?}");
    assert!(
        !patched(&api, 1) && !patched(&api, 0),
        "the rollout went on"
    );

    // Renewals answered again: it leads again and the rollout goes on (the held patch is
    // let through too; the next reconcile finds it done or does it).
    drop(renewals);
    drop(first_patch);
    assert!(eventually(Duration::from_secs(10), || a.is_leader()).await);
    assert!(eventually(Duration::from_secs(10), || patched(&api, 2)).await);
    complete_expansion(&api, "data-web-2");
    assert!(
        eventually(Duration::from_secs(10), || patched(&api, 1)).await,
        "the rollout resumed"
    );
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_then_thawed_leader_makes_no_write_after_it_wakes() {
    let api = FakeApiServer::start().await;
    let a_config = config("replica-a", features(false));
    let deadline = a_config.timing.renew_deadline;
    let lease = a_config.timing.lease_duration;
    rollout(&api);
    let a = Isolated::start(&api, a_config);
    assert!(eventually(Duration::from_secs(15), || a.controller.is_leader()).await);
    let b = RunningController::start(&api, config("replica-b", features(false)));
    // A patched the first claim (highest ordinal first); freeze it right after, for
    // longer than the Lease lasts.
    assert!(eventually(Duration::from_secs(10), || patched(&api, 2)).await);
    let freeze = lease * 3;
    a.freeze(freeze).await;
    let frozen = api.uptime();
    // Its deadline has passed long before it wakes: by then the other replica took over.
    complete_expansion(&api, "data-web-2");
    assert!(
        eventually(freeze, || patched(&api, 1)).await,
        "the other replica did not take over within the freeze"
    );
    assert!(b.is_leader());
    // Thawed: it finds its lease gone by its own clock and steps down.
    assert!(
        eventually(freeze + Duration::from_secs(5), || !a
            .controller
            .is_leader())
        .await,
        "the thawed replica still says it leads"
    );
    let thawed = api.uptime();
    // What it saw before the freeze (data-web-1 to patch next, with the view of then) is
    // given every chance to come out: none does.
    complete_expansion(&api, "data-web-1");
    assert!(eventually(Duration::from_secs(10), || patched(&api, 0)).await);
    tokio::time::sleep(lease).await;
    let after: Vec<WriteRecord> = api
        .write_records()
        .into_iter()
        // The capability probes' dry runs (every replica's, leading or not) store nothing.
        .filter(|r| written_by(r, "replica-a") && r.at > frozen + deadline && !r.dry_run)
        .collect();
    assert!(
        after.is_empty(),
        "the frozen replica wrote after its deadline: {after:?}"
    );
    for ordinal in 0..3 {
        assert_eq!(
            claim_patches(&api, ordinal).len(),
            1,
            "data-web-{ordinal} patched once"
        );
    }
    for ordinal in [1, 0] {
        assert!(
            claim_patches(&api, ordinal)
                .iter()
                .all(|r| written_by(r, "replica-b")),
            "data-web-{ordinal} patched by the new leader"
        );
    }
    eprintln!(
        "frozen {:?} at {frozen:?}, thawed by {thawed:?}; writes refused by the fence after the thaw: {} (0: the step-down at the expired clock came first)",
        freeze,
        a.controller.metric("controller_writes_fenced_total")
    );
    b.stop().await;
    a.controller.kill();
}
