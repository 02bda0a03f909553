//! Apiserver outages against the fake API server ([`FakeApiServer::begin_outage`]): every
//! connection reset for a while, then the same server again. The controller resumes within
//! seconds of the apiserver's return (claims, a journaled re-create between its delete and
//! its create), whether the outage outlasted its Lease or not; the webhook stays ready and
//! says how stale its view is.
//!
//! A convergence the return starts does not hold the claims back, however long
//! kube-controller-manager's garbage collector keeps the orphan-deleted set terminating (the
//! fake's stand-in with a 20 s lag).
//!
//! Each test prints the time from the apiserver's return to the write it waited for.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;
use stateful_admission::controller::{ControllerConfig, LeaseTiming};

use k8s_openapi::api::events::v1::Event;

use crate::claim_rollout::{
    NS, class, complete_expansion, converged, fast, features, install, set, set_uid,
};
use crate::common::run_binary_with_env;
use crate::fencing::{patched, rollout};
use crate::serve_cluster::kubeconfig;
use crate::serve_tls::Served;
use crate::support::controller::{
    CONTROLLER_NAMESPACE, RunningController, config, eventually, written_by,
};
use crate::support::fake_apiserver::{FakeApiServer, GARBAGE_COLLECTOR_AGENT, WriteRecord};

/// The bound of the issue: the first write within this long of the apiserver's return.
const RESUME: Duration = Duration::from_secs(5);

/// The first successful write of `identity` after `back` that `matches`, if any.
fn first_after(
    api: &FakeApiServer,
    identity: &str,
    back: Duration,
    matches: impl Fn(&WriteRecord) -> bool,
) -> Option<WriteRecord> {
    api.write_records()
        .into_iter()
        // The capability probes' dry runs store nothing: not a write.
        .filter(|r| {
            written_by(r, identity) && r.succeeded() && !r.dry_run && r.at >= back && matches(r)
        })
        .min_by_key(|r| r.at)
}

fn claim_patch(ordinal: u32) -> impl Fn(&WriteRecord) -> bool {
    let name = format!("data-web-{ordinal}");
    move |r: &WriteRecord| {
        r.resource
            .is_some_and(|t| t.plural == "persistentvolumeclaims")
            && r.name.as_deref() == Some(name.as_str())
    }
}

fn not_lease(r: &WriteRecord) -> bool {
    r.resource.is_none_or(|t| t.plural != "leases")
}

/// The fake itself: connections reset during the outage, and afterwards the same address
/// serves the same store.
#[tokio::test(flavor = "multi_thread")]
async fn an_outage_resets_every_connection_then_the_same_server_answers_again() {
    use kube::Api;
    let api = FakeApiServer::start().await;
    let client = crate::support::controller::client(&api);
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    api.put_object(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}}),
    );
    assert!(maps.get("a").await.is_ok());
    let held = api.hold_next("POST", "/configmaps", 1);
    let create = tokio::spawn({
        let maps = maps.clone();
        async move {
            let map: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": "b"}})).expect("a config map");
            maps.create(&Default::default(), &map).await
        }
    });
    held.arrived(1, Duration::from_secs(5)).await.expect("held");
    api.begin_outage();
    assert!(api.is_down());
    let dropped = create.await.expect("joined");
    assert!(
        matches!(&dropped, Err(e) if !matches!(e, kube::Error::Api(_))),
        "no answer: {dropped:?}"
    );
    for _ in 0..3 {
        let refused = maps.get("a").await;
        assert!(
            matches!(&refused, Err(e) if !matches!(e, kube::Error::Api(_))),
            "{refused:?}"
        );
    }
    drop(held);
    api.end_outage();
    assert_eq!(
        maps.get("a")
            .await
            .expect("answered again")
            .metadata
            .name
            .as_deref(),
        Some("a")
    );
    assert!(
        maps.get_opt("b").await.expect("answered").is_none(),
        "the request in flight at the outage was not applied"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_resume_within_seconds_of_the_apiservers_return_after_an_outage_longer_than_the_lease()
 {
    let api = FakeApiServer::start().await;
    rollout(&api);
    let config = config("replica-a", features(false));
    let renew_deadline = config.timing.renew_deadline;
    let a = RunningController::start(&api, config);
    assert!(eventually(Duration::from_secs(15), || patched(&api, 2)).await);
    // Down right after the first claim was patched; its expansion completes meanwhile.
    api.begin_outage();
    complete_expansion(&api, "data-web-2");
    let outage = renew_deadline * 4;
    tokio::time::sleep(outage).await;
    assert!(!a.is_leader(), "stepped down at its renew deadline");
    // Taken first: a write right at the return counts from before it.
    let back = api.uptime();
    api.end_outage();
    assert!(
        eventually(RESUME + Duration::from_secs(5), || patched(&api, 1)).await,
        "the rollout did not resume"
    );
    let first = first_after(&api, "replica-a", back, not_lease).expect("a write");
    let claim = first_after(&api, "replica-a", back, claim_patch(1)).expect("the patch");
    eprintln!(
        "outage of {outage:?} (Lease lost): first write {:?} and the next claim patched {:?} after the apiserver's return",
        first.at - back,
        claim.at - back
    );
    assert!(claim.at - back <= RESUME, "{:?}", claim.at - back);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_that_failed_in_an_outage_shorter_than_the_renew_deadline_is_retried_on_return_not_after_its_backoff()
 {
    let api = FakeApiServer::start().await;
    rollout(&api);
    // client-go's lease duration and renew deadline, renewals every 500 ms: the Lease
    // outlives the outage.
    let config = ControllerConfig {
        timing: LeaseTiming {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_millis(500),
        },
        ..config("replica-a", features(false))
    };
    let a = RunningController::start(&api, config);
    assert!(eventually(Duration::from_secs(15), || patched(&api, 2)).await);
    // The next patch reaches the apiserver as it goes down: lost, and the reconcile fails;
    // retried during the outage it fails again, its backoff growing (1, 2, 4, 8 s).
    let next_patch = api.hold_next("PATCH", "/persistentvolumeclaims/", usize::MAX);
    complete_expansion(&api, "data-web-2");
    next_patch
        .arrived(1, Duration::from_secs(10))
        .await
        .expect("the next patch");
    api.begin_outage();
    drop(next_patch);
    let outage = Duration::from_millis(7500);
    tokio::time::sleep(outage).await;
    // Taken first: a write right at the return counts from before it.
    let back = api.uptime();
    api.end_outage();
    assert!(
        eventually(RESUME + Duration::from_secs(10), || patched(&api, 1)).await,
        "the rollout did not resume"
    );
    let claim = first_after(&api, "replica-a", back, claim_patch(1)).expect("the patch");
    eprintln!(
        "outage of {outage:?} (Lease kept): the failed claim patch went out {:?} after the apiserver's return",
        claim.at - back
    );
    assert!(claim.at - back <= RESUME, "{:?}", claim.at - back);
    assert!(a.is_leader(), "led throughout");
    let leases = api
        .write_records()
        .into_iter()
        .filter(|r| r.resource.is_some_and(|t| t.plural == "leases") && r.succeeded())
        .all(|r| written_by(&r, "replica-a"));
    assert!(leases, "nobody else took the Lease");
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_convergence_cut_off_between_its_delete_and_its_create_re_creates_the_set_on_return() {
    let api = FakeApiServer::start().await;
    api.put_object(class("fast", true));
    let uid = install(&api, set("web", 3, "fast", Some("2Gi"), &[]), 3, "fast");
    // The re-create reaches the apiserver as it goes down: the set stays deleted. (Held
    // until then, every one: the set's reconcile and the journals' loop may both try.)
    let create = api.hold_next("POST", "/namespaces/db/statefulsets", usize::MAX);
    let config = fast("replica-a", features(true));
    let outage = config.timing.renew_deadline * 4;
    let a = RunningController::start(&api, config);
    create
        .arrived(1, Duration::from_secs(15))
        .await
        .expect("the convergence got to its create");
    api.begin_outage();
    drop(create);
    assert!(api.get::<StatefulSet>(NS, "web").is_none(), "deleted");
    tokio::time::sleep(outage).await;
    assert!(api.get::<StatefulSet>(NS, "web").is_none(), "still absent");
    // Taken first: a write right at the return counts from before it.
    let back = api.uptime();
    api.end_outage();
    assert!(
        eventually(RESUME + Duration::from_secs(5), || converged(&api)).await,
        "not converged after the outage"
    );
    let created = first_after(&api, "replica-a", back, |r| {
        r.resource.is_some_and(|t| t.plural == "statefulsets") && r.verb.as_str() == "create"
    })
    .expect("the create");
    eprintln!(
        "outage of {outage:?} between delete and create: re-created {:?} after the apiserver's return",
        created.at - back
    );
    assert!(created.at - back <= RESUME, "{:?}", created.at - back);
    let live = api.get::<StatefulSet>(NS, "web").expect("set");
    assert_ne!(
        live.metadata.uid.as_deref(),
        Some(uid.as_str()),
        "re-created"
    );
    a.stop().await;
}

/// How long the fake's garbage collector takes to orphan a deleted set's dependents in
/// [`claims_roll_on_while_a_slow_garbage_collector_holds_the_convergence_after_an_outage`]:
/// about what kube-controller-manager's took on a real v1.32 cluster right after an apiserver
/// restart (the set stayed terminating for 21 s while the collector re-synced).
const SLOW_GARBAGE_COLLECTOR: Duration = Duration::from_secs(20);

fn terminating(api: &FakeApiServer) -> bool {
    api.get::<StatefulSet>(NS, "web")
        .is_some_and(|s| s.metadata.deletion_timestamp.is_some())
}

/// The Events that say the convergence waits for the garbage collector.
fn gc_waits(api: &FakeApiServer) -> Vec<Event> {
    api.list::<Event>()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ConvergeWaitingForGarbageCollector"))
        .collect()
}

/// A write to set `web` itself (a create names no object).
fn is_set(r: &WriteRecord) -> bool {
    r.resource.is_some_and(|t| t.plural == "statefulsets") && r.name.as_deref() == Some("web")
}

/// `status -n db web -o json` through the binary, against the fake.
async fn status_json(api: &FakeApiServer) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, kubeconfig(api)).expect("kubeconfig");
    let path = path.to_str().expect("utf-8").to_owned();
    let run = tokio::task::spawn_blocking(move || {
        run_binary_with_env(
            &[
                "status",
                "-n",
                NS,
                "web",
                "-o",
                "json",
                "--controller-namespace",
                CONTROLLER_NAMESPACE,
            ],
            &[("KUBECONFIG", path.as_str())],
        )
    })
    .await
    .expect("status ran");
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.json()
}

/// The case, as a real kube-apiserver and kube-controller-manager showed it: the
/// apiserver stops right after the first claim of an `InPlace` rollout was patched; at its
/// return the controller leads at once and starts the set's convergence (journal, mark, orphan
/// delete), and the garbage collector, re-syncing itself, keeps the set terminating for 20 s.
/// The claims do not wait for it: the next one is patched within seconds of the return, while
/// the set is still terminating (the fake's write records show it before the collector's
/// finalizer removal and our create), each claim once; the wait is said (an Event, the
/// controller's `/readyz?verbose` line, `status`); and the rollout and the convergence finish.
#[tokio::test(flavor = "multi_thread")]
async fn claims_roll_on_while_a_slow_garbage_collector_holds_the_convergence_after_an_outage() {
    let api = FakeApiServer::start().await;
    api.configure(|c| c.orphan_deletion_lag = SLOW_GARBAGE_COLLECTOR);
    rollout(&api);
    let old_uid = set_uid(&api, "web").expect("the set");
    // Claims come first in a reconcile, then the convergence: its journal reaches the
    // apiserver as it goes down, right after the first claim patch. (Held until then, every
    // one.)
    let journal = api.hold_next(
        "POST",
        &format!("/namespaces/{CONTROLLER_NAMESPACE}/configmaps"),
        usize::MAX,
    );
    let config = config("replica-a", features(true));
    let outage = config.timing.renew_deadline * 4;
    let a = RunningController::start(&api, config);
    journal
        .arrived(1, Duration::from_secs(15))
        .await
        .expect("the convergence got to its journal");
    assert!(patched(&api, 2), "the first claim was patched before");
    api.begin_outage();
    drop(journal);
    tokio::time::sleep(outage).await;
    assert!(!a.is_leader(), "stepped down at its renew deadline");
    // Taken first: a write right at the return counts from before it.
    let back = api.uptime();
    api.end_outage();

    // The convergence starts at the return and its orphan delete waits for the collector;
    // the controller's view shows the set terminating (its watches are back).
    assert!(
        eventually(RESUME, || terminating(&api)).await,
        "the orphan delete was not sent"
    );
    assert!(
        eventually(RESUME, || a
            .view()
            .stateful_set(NS, "web")
            .is_some_and(|s| s.metadata.deletion_timestamp.is_some()))
        .await,
        "the controller's view does not show the set terminating"
    );
    // Only now does the first claim finish growing: what comes next comes while the set is
    // terminating, and the controller knows it.
    complete_expansion(&api, "data-web-2");
    assert!(
        eventually(RESUME, || patched(&api, 1)).await,
        "the next claim waited for the garbage collector"
    );
    complete_expansion(&api, "data-web-1");
    assert!(
        eventually(RESUME, || patched(&api, 0)).await,
        "the last claim waited for the garbage collector"
    );
    complete_expansion(&api, "data-web-0");

    // A wait of 5 s is said, once: an Event, the controller's readyz line, and status.
    assert!(
        eventually(Duration::from_secs(15), || !gc_waits(&api).is_empty()).await,
        "the wait was not said"
    );
    let says = format!(
        "waiting for the garbage collector to orphan the dependents of {NS}/web ({old_uid}) for "
    );
    let event = gc_waits(&api).remove(0);
    let note = event.note.clone().unwrap_or_default();
    assert!(note.starts_with(&says), "{note}");
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.uid.as_deref()),
        Some(old_uid.as_str())
    );
    // The readiness board is written by the loop that polls journals, on its own beat.
    let line = format!("[!]convergence {says}");
    assert!(
        eventually(Duration::from_secs(10), || a
            .readyz_lines()
            .iter()
            .any(|l| l.starts_with(&line)))
        .await,
        "{:?}",
        a.readyz_lines()
    );
    let report = status_json(&api).await;
    let convergence = &report["items"][0]["convergence"];
    assert_eq!(convergence["phase"], "Deleting", "{report:#}");
    assert!(
        convergence["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&says)),
        "{convergence:#}"
    );
    assert!(
        convergence["garbageCollectorWaitSeconds"]
            .as_u64()
            .is_some_and(|s| s >= 5),
        "{convergence:#}"
    );
    assert!(
        terminating(&api),
        "all of it said while the garbage collector still holds the set"
    );

    // The collector finishes; the set is created again and the rollout is done.
    assert!(
        eventually(SLOW_GARBAGE_COLLECTOR + Duration::from_secs(15), || {
            converged(&api)
        })
        .await,
        "not converged"
    );
    assert!((0..3).all(|n| patched(&api, n)));
    assert!(
        eventually(Duration::from_secs(5), || !a
            .readyz_lines()
            .iter()
            .any(|l| l.starts_with("[!]convergence")))
        .await,
        "the readyz line outlived the wait: {:?}",
        a.readyz_lines()
    );
    assert_eq!(gc_waits(&api).len(), 1, "one Event per wait");

    // The order, from the fake's write records.
    let deleted = first_after(&api, "replica-a", back, |r| {
        is_set(r) && r.verb.as_str() == "delete"
    })
    .expect("our orphan delete");
    let records = api.write_records();
    let finalizer_removed = records
        .iter()
        .find(|r| r.user_agent.as_deref() == Some(GARBAGE_COLLECTOR_AGENT) && is_set(r))
        .expect("the collector's finalizer removal")
        .clone();
    let created = first_after(&api, "replica-a", back, |r| {
        r.resource.is_some_and(|t| t.plural == "statefulsets") && r.verb.as_str() == "create"
    })
    .expect("our create");
    let next = first_after(&api, "replica-a", back, claim_patch(1)).expect("claim 1 patched");
    let last = first_after(&api, "replica-a", back, claim_patch(0)).expect("claim 0 patched");
    eprintln!(
        "outage of {outage:?}, garbage collector {SLOW_GARBAGE_COLLECTOR:?}: after the apiserver's return, orphan delete {:?}, next claim patched {:?}, last claim patched {:?}, set absent {:?}, created {:?}",
        deleted.at - back,
        next.at - back,
        last.at - back,
        finalizer_removed.at - back,
        created.at - back
    );
    assert!(next.at - back <= RESUME, "{:?}", next.at - back);
    for claim in [&next, &last] {
        assert!(
            deleted.at < claim.at && claim.at < finalizer_removed.at && claim.at < created.at,
            "patched while the set was terminating: delete {:?}, patch {:?}, finalizer removed {:?}, created {:?}",
            deleted.at - back,
            claim.at - back,
            finalizer_removed.at - back,
            created.at - back
        );
    }
    for n in 0..3 {
        let patches = api
            .write_records()
            .iter()
            .filter(|r| written_by(r, "replica-a") && r.succeeded() && claim_patch(n)(r))
            .count();
        assert_eq!(patches, 1, "claim {n} patched {patches} times");
    }
    a.stop().await;
}

async fn readyz(served: &Served) -> (u16, String) {
    match reqwest::get(served.probe_url("/readyz?verbose")).await {
        Ok(response) => (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        ),
        Err(error) => (0, error.to_string()),
    }
}

async fn stale_seconds(served: &Served, kind: &str) -> Option<f64> {
    let text = reqwest::get(served.probe_url("/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let prefix = format!("stateful_admission_cluster_view_stale_seconds{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
}

/// `serve` against the fake through a kubeconfig: during an outage it stays ready and says
/// how stale its view is (`/readyz?verbose`, `cluster_view_stale_seconds`); after it, the
/// view is current again within the reconnect delay.
#[tokio::test(flavor = "multi_thread")]
async fn serve_stays_ready_through_an_outage_and_says_how_stale_its_view_is() {
    let api = FakeApiServer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kube = dir.path().join("kubeconfig");
    std::fs::write(&kube, kubeconfig(&api)).expect("kubeconfig");
    let served = Served::start_with_env(
        &[
            "--self-signed",
            "--self-signed-dir",
            dir.path().join("certs").to_str().expect("path"),
            "--controller=false",
            "--watch-reconnect-max-delay",
            "1s",
        ],
        &[("KUBECONFIG", kube.to_str().expect("path"))],
    );
    let mut state = (0, String::new());
    for _ in 0..300 {
        state = readyz(&served).await;
        if state.0 == 200 && !state.1.contains("[-]") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state.0, 200, "{}", state.1);
    assert!(!state.1.contains("view stale"), "{}", state.1);
    assert_eq!(stale_seconds(&served, "statefulsets").await, Some(0.0));

    api.begin_outage();
    let mut stale = String::new();
    for _ in 0..100 {
        let (code, text) = readyz(&served).await;
        assert_eq!(code, 200, "ready during the outage: {text}");
        if text.contains("view stale") && stale_seconds(&served, "statefulsets").await >= Some(2.0)
        {
            stale = text;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let line = stale
        .lines()
        .find(|l| l.starts_with("[!]view stale: "))
        .unwrap_or_else(|| panic!("no staleness line: {stale}"));
    for kind in [
        "storageclasses",
        "namespaces",
        "statefulsets",
        "persistentvolumeclaims",
    ] {
        assert!(line.contains(kind), "{line}");
    }
    assert!(line.contains("answering from what was last seen"), "{line}");
    assert!(stale.contains("readyz check passed"), "{stale}");

    api.end_outage();
    let back = std::time::Instant::now();
    let mut current = false;
    for _ in 0..50 {
        if !readyz(&served).await.1.contains("view stale") {
            current = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(current, "the view is still stale 5s after the outage");
    eprintln!(
        "view current again {:?} after the apiserver's return (reconnect at most 1s)",
        back.elapsed()
    );
    assert_eq!(stale_seconds(&served, "statefulsets").await, Some(0.0));
}
