//! The real binary against a cluster (the fake API server through a kubeconfig): readiness
//! waits for the cluster view, rules read the live state, the controller takes the Lease and
//! hands it back on SIGTERM.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use serde_json::json;
use stateful_admission::review::builder::ReviewBuilder;

use crate::serve_tls::Served;
use crate::support::controller::eventually;
use crate::support::fake_apiserver::{FakeApiServer, RecordedRequest};

pub(crate) fn kubeconfig(api: &FakeApiServer) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\nusers:\n- name: fake\n  user: {{}}\ncurrent-context: fake\n",
        api.url()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_reads_the_cluster_and_runs_the_controller_under_a_lease() {
    let api = FakeApiServer::start().await;
    api.put_object(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "x"}));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("kubeconfig");
    std::fs::write(&config, kubeconfig(&api)).expect("kubeconfig");
    let certs = dir.path().join("certs");
    let mut served = Served::start_with_env(
        &[
            "--self-signed",
            "--self-signed-dir",
            certs.to_str().expect("path"),
            "--controller-namespace",
            "stateful-admission",
            "--controller-identity",
            "replica-0",
        ],
        &[("KUBECONFIG", config.to_str().expect("path"))],
    );
    // Polled from this runtime without blocking it: the fake API server runs on it too.
    let ready_url = served.probe_url("/readyz");
    let mut ready = false;
    for _ in 0..300 {
        if reqwest::get(&ready_url)
            .await
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ready,
        "ready once the view synced; server log:\n{}",
        served.logs().join("\n")
    );
    let holder = || {
        api.get::<Lease>("stateful-admission", "stateful-admission-controller")
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    };
    assert!(
        eventually(Duration::from_secs(30), || holder().as_deref()
            == Some("replica-0"))
        .await
    );

    // The rules see the cluster: a classless claim gets the cluster's default class.
    let client = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(certs.join("ca.crt")).expect("ca"))
                .expect("pem"),
        )
        .build()
        .expect("client");
    let review = ReviewBuilder::claim("CREATE")
        .object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}}}))
        .into_json();
    let body: serde_json::Value = client
        .post(served.url("/mutate"))
        .json(&review)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(
        crate::common::patch_of(&body["response"]),
        json!([{"op": "add", "path": "/spec/storageClassName", "value": "standard"}])
    );

    // SIGTERM: the Lease is released for the next replica, and the process exits 0.
    served.terminate();
    let exit = served.wait_exit(Duration::from_secs(15));
    assert_eq!(
        exit,
        Some(0),
        "exits 0 after SIGTERM; server log:\n{}",
        served.logs().join("\n")
    );
    assert_eq!(holder(), None, "the lease is released on shutdown");
}

/// The process watches each kind once, whatever reads it: the webhook, and the controller's
/// features (claim rollout, convergence, default class, conditions, maxUnavailable) with the
/// Lease held. The Lease itself is read and renewed, not watched.
#[tokio::test(flavor = "multi_thread")]
async fn serve_watches_each_kind_once_for_the_webhook_and_the_controller() {
    let api = FakeApiServer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("kubeconfig");
    std::fs::write(&config, kubeconfig(&api)).expect("kubeconfig");
    let certs = dir.path().join("certs");
    let mut served = Served::start_with_env(
        &[
            "--self-signed",
            "--self-signed-dir",
            certs.to_str().expect("path"),
            "--controller-namespace",
            "stateful-admission",
            "--controller-identity",
            "replica-0",
            "--max-unavailable-gate",
            "disabled",
        ],
        &[("KUBECONFIG", config.to_str().expect("path"))],
    );
    let ready_url = served.probe_url("/readyz");
    let mut ready = false;
    for _ in 0..300 {
        if reqwest::get(&ready_url)
            .await
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "ready; server log:\n{}", served.logs().join("\n"));
    let leader = || {
        api.get::<Lease>("stateful-admission", "stateful-admission-controller")
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .is_some_and(|h| h == "replica-0")
    };
    assert!(eventually(Duration::from_secs(30), leader).await);
    // Time for every feature to start (and to open any watch of its own).
    tokio::time::sleep(Duration::from_secs(2)).await;

    let kinds = [
        "/api/v1/namespaces",
        "/api/v1/namespaces/stateful-admission/configmaps",
        "/api/v1/persistentvolumeclaims",
        "/api/v1/pods",
        "/apis/apps/v1/statefulsets",
        "/apis/storage.k8s.io/v1/storageclasses",
    ];
    let requests = api.requests();
    let count = |wanted: &dyn Fn(&RecordedRequest) -> bool| {
        let mut by_path = BTreeMap::<String, usize>::new();
        for r in requests.iter().filter(|r| r.method == "GET" && wanted(r)) {
            *by_path.entry(r.path.clone()).or_default() += 1;
        }
        by_path
    };
    let once: BTreeMap<String, usize> = kinds.iter().map(|p| ((*p).to_owned(), 1)).collect();
    assert_eq!(count(&|r| r.is_watch()), once, "watches by path");
    let lists = count(&|r| !r.is_watch() && kinds.contains(&r.path.as_str()));
    assert_eq!(lists, once, "initial lists by path");
    assert!(
        requests
            .iter()
            .filter(|r| !r.is_watch() && kinds.contains(&r.path.as_str()))
            .all(|r| r.query.split('&').any(|kv| kv == "limit=500")),
        "lists come in pages of 500"
    );
    assert!(
        requests
            .iter()
            .filter(|r| r.is_watch())
            .all(|r| r.code == 200 && !r.path.contains("leases")),
        "no watch on the Lease"
    );

    served.terminate();
    assert_eq!(served.wait_exit(Duration::from_secs(15)), Some(0));
}

/// `--kube-api-qps`/`--kube-api-burst` bound the process's writes (claim patches, their
/// Events, the gate probe) with a token bucket, as kube-controller-manager's flags do; the
/// Lease is not held back. Asserted from the fake's write records: in any window of S seconds
/// at most `burst + S * qps` writes pass, whatever the machine's speed.
#[tokio::test(flavor = "multi_thread")]
async fn serve_limits_its_write_rate_but_not_the_lease() {
    const CLAIMS: usize = 8;
    const QPS: f64 = 8.0;
    const BURST: usize = 2;
    let api = FakeApiServer::start().await;
    api.put_object(json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "x"}));
    for n in 0..CLAIMS {
        api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": format!("data-{n}"), "namespace": "default"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}}));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("kubeconfig");
    std::fs::write(&config, kubeconfig(&api)).expect("kubeconfig");
    let certs = dir.path().join("certs");
    let mut served = Served::start_with_env(
        &[
            "--self-signed",
            "--self-signed-dir",
            certs.to_str().expect("path"),
            "--controller-namespace",
            "stateful-admission",
            "--controller-identity",
            "replica-0",
            "--kube-api-qps",
            "8",
            "--kube-api-burst",
            "2",
        ],
        &[("KUBECONFIG", config.to_str().expect("path"))],
    );
    let classed = |api: &FakeApiServer| {
        api.list_objects(&crate::support::fake_apiserver::resources::PERSISTENT_VOLUME_CLAIMS)
            .iter()
            .filter(|c| c.pointer("/spec/storageClassName").is_some())
            .count()
    };
    assert!(
        eventually(Duration::from_secs(30), || classed(&api) == CLAIMS).await,
        "every classless claim gets the default class; server log:\n{}",
        served.logs().join("\n")
    );
    // The last Events land after the last patch, each waiting for the limit.
    let limited_writes = |api: &FakeApiServer| {
        api.write_records()
            .iter()
            .filter(|w| !w.target().starts_with("leases"))
            .count()
    };
    assert!(
        eventually(Duration::from_secs(10), || limited_writes(&api)
            >= 2 * CLAIMS)
        .await
    );
    let records = api.write_records();
    let limited: Vec<Duration> = records
        .iter()
        .filter(|w| !w.target().starts_with("leases"))
        .map(|w| w.at)
        .collect();
    assert!(
        limited.len() >= 2 * CLAIMS,
        "a patch and an Event per claim: {:?}",
        records.iter().map(|w| w.target()).collect::<Vec<_>>()
    );
    let span = (limited[limited.len() - 1] - limited[0]).as_secs_f64();
    // n writes need at least (n - burst) tokens after the first instant; one more for the
    // bucket's rounding.
    let least = (limited.len() - BURST - 1) as f64 / QPS;
    assert!(
        span >= least,
        "{} writes passed in {span:.2}s, the limit allows no fewer than {least:.2}s",
        limited.len()
    );
    assert!(
        records.iter().any(|w| w.target().starts_with("leases")),
        "the Lease was written"
    );
    let metrics = reqwest::get(served.probe_url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let throttled = metrics
        .lines()
        .find(|l| l.starts_with("stateful_admission_kube_api_writes_throttled_total "))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<u64>().ok());
    assert!(
        throttled.is_some_and(|n| n > 0),
        "writes waited for tokens: {throttled:?}"
    );
    served.terminate();
    assert_eq!(served.wait_exit(Duration::from_secs(15)), Some(0));
}

#[test]
fn serve_refuses_a_write_limit_that_is_not_positive() {
    for args in [
        ["--kube-api-qps", "0"],
        ["--kube-api-qps=-5", "--self-signed"],
        ["--kube-api-qps", "fast"],
        ["--kube-api-burst", "0"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_stateful-admission"))
            .arg("serve")
            .args(args)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--kube-api-"), "{args:?}: {stderr}");
    }
}

/// Readiness follows what the webhook reads: with the claim and pod lists slow (held here),
/// `serve` is ready as soon as classes, namespaces and sets are in, answers a template edit
/// correctly, says in `/readyz?verbose` what is still listing, and its controller neither
/// campaigns nor acts until the whole view is in.
#[tokio::test(flavor = "multi_thread")]
async fn serve_is_ready_and_answers_before_the_claims_and_pods_have_listed() {
    let api = FakeApiServer::start().await;
    let template = |size: &str| {
        json!({"metadata": {"name": "data"},
               "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
                        "resources": {"requests": {"storage": size}}}})
    };
    let set = |size: &str| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "serviceName": "web",
                     "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "app", "image": "app:1"}]}},
                     "volumeClaimTemplates": [template(size)]}})
    };
    api.put_object(
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard"}, "provisioner": "x", "allowVolumeExpansion": true}),
    );
    api.put_object(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}),
    );
    let stored = api.put_object(set("1Gi"));
    let claims = api.hold_next("GET", "/api/v1/persistentvolumeclaims?", 1);
    let pods = api.hold_next("GET", "/api/v1/pods?", 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("kubeconfig");
    std::fs::write(&config, kubeconfig(&api)).expect("kubeconfig");
    let certs = dir.path().join("certs");
    let mut served = Served::start_with_env(
        &[
            "--self-signed",
            "--self-signed-dir",
            certs.to_str().expect("path"),
            "--controller-namespace",
            "stateful-admission",
            "--controller-identity",
            "replica-0",
        ],
        &[("KUBECONFIG", config.to_str().expect("path"))],
    );
    claims
        .arrived(1, Duration::from_secs(30))
        .await
        .expect("the claim list is asked for");
    pods.arrived(1, Duration::from_secs(30))
        .await
        .expect("the pod list is asked for");
    let ready_url = served.probe_url("/readyz");
    let mut ready = false;
    for _ in 0..300 {
        if reqwest::get(&ready_url)
            .await
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ready,
        "ready with claims and pods still listing; server log:\n{}",
        served.logs().join("\n")
    );
    // Ready already; the journals (not held) list in their own time, and then only the two
    // held lists are waited for.
    let lines = [
        "[+]webhook ok: storageclasses, namespaces, statefulsets listed",
        "[-]webhook-claims listing persistentvolumeclaims",
        "[-]controller-view listing pods",
        "[-]controller waiting for persistentvolumeclaims, pods to list before campaigning for the Lease",
        "readyz check passed",
    ];
    let mut verbose = String::new();
    for _ in 0..300 {
        verbose = reqwest::get(format!("{ready_url}?verbose"))
            .await
            .expect("readyz")
            .text()
            .await
            .expect("text");
        if lines.iter().all(|line| verbose.contains(line)) {
            break;
        }
        assert!(
            verbose.contains("readyz check passed"),
            "ready stays ready:\n{verbose}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for line in lines {
        assert!(verbose.contains(line), "{line:?} in:\n{verbose}");
    }

    // A template edit is answered as with the whole view: recorded, the old templates kept.
    let client = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(certs.join("ca.crt")).expect("ca"))
                .expect("pem"),
        )
        .build()
        .expect("client");
    let mut old = stored.clone();
    old["metadata"]["managedFields"] = serde_json::Value::Null;
    let mut edited = old.clone();
    edited["spec"]["volumeClaimTemplates"][0] = template("2Gi");
    let review = ReviewBuilder::statefulset("UPDATE")
        .object(edited)
        .old_object(old)
        .into_json();
    let body: serde_json::Value = client
        .post(served.url("/mutate"))
        .json(&review)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let patch = crate::common::patch_of(&body["response"]).to_string();
    assert!(
        patch.contains("desired-volume-claim-templates") && patch.contains("2Gi"),
        "the change is recorded: {patch}"
    );
    // The controller has not acted: not even campaigned (no Lease written). The capability
    // probes' dry runs store nothing.
    let writes: Vec<_> = api
        .writes()
        .into_iter()
        .filter(|w| !w.is_dry_run())
        .collect();
    assert!(
        writes.is_empty(),
        "wrote before its view was complete: {:?}",
        api.writes()
            .iter()
            .map(|w| format!("{} {}", w.method, w.path))
            .collect::<Vec<_>>()
    );

    // The lists come in: the controller campaigns and leads.
    claims.release();
    pods.release();
    let holder = || {
        api.get::<Lease>("stateful-admission", "stateful-admission-controller")
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    };
    assert!(
        eventually(Duration::from_secs(30), || holder().as_deref()
            == Some("replica-0"))
        .await,
        "leads once the view is complete; server log:\n{}",
        served.logs().join("\n")
    );
    served.terminate();
    let _ = served.wait_exit(Duration::from_secs(15));
}

/// A port free now, on the loopback interface.
fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// The library's `serve` ([`Serve`], which the binary runs too) started in-process: ready once
/// its view synced, the controller under its Lease, the Lease handed back when it shuts down.
#[tokio::test(flavor = "multi_thread")]
async fn the_library_serve_runs_the_webhook_and_the_controller_in_process() {
    use stateful_admission::serve::Serve;
    use stateful_admission::server::{ListenerLimits, ServeConfig, TlsSource};

    use crate::support::controller::{client_as, config, no_features, prober};

    let api = FakeApiServer::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let probe_addr = free_addr();
    let serve_config = ServeConfig {
        addr: free_addr(),
        probe_addr,
        tls: TlsSource::SelfSigned {
            dir: dir.path().join("certs"),
            names: Vec::new(),
        },
        policy: Default::default(),
        cert_poll_interval: Duration::from_secs(10),
        shutdown_delay: Duration::ZERO,
        request_timeout: Duration::from_secs(10),
        limits: ListenerLimits::default(),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serve = Serve::new(serve_config)
        .client(client_as(&api, "replica-0"))
        .controller(Some(config("replica-0", no_features())))
        .prober(prober());
    let running = tokio::spawn(serve.run(async {
        let _ = stopped.await;
    }));
    let ready_url = format!("http://{probe_addr}/readyz");
    let mut ready = false;
    for _ in 0..300 {
        if reqwest::get(&ready_url)
            .await
            .is_ok_and(|r| r.status() == reqwest::StatusCode::OK)
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "ready once the view synced");
    let holder = || {
        api.get::<Lease>("stateful-admission", "stateful-admission-controller")
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
    };
    assert!(
        eventually(Duration::from_secs(30), || holder().as_deref()
            == Some("replica-0"))
        .await
    );
    let _ = stop.send(());
    let result = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("stops within the drain")
        .expect("the task ran");
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(holder(), None, "the lease is released on shutdown");
}
