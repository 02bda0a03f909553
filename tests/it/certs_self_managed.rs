//! Self-managed certificates end to end: the actor against the fake API server (Secret with
//! optimistic concurrency, caBundle strategic-merge patches, files swapped for the TLS
//! reloader), and the real `serve --self-managed-certs` through a kubeconfig.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use prometheus_client::registry::Registry;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::{Value, json};
use stateful_admission::certs::rotation::{
    self, CertSecret, Lifetimes, Reason, RotationPlan, plan_rotation, renew_at,
};
use stateful_admission::certs::self_managed::{self, Metrics, SelfManagedConfig};
use stateful_admission::certs::{CertPaths, service_dns_names, x509};
use stateful_admission::server::ListenerLimits;
use stateful_admission::server::tls::CertReloader;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::serve_tls::Served;
use crate::support::controller::eventually;
use crate::support::fake_apiserver::{FakeApiServer, RecordedRequest, resources};

const NS: &str = "sa-system";
const SECRET: &str = "stateful-admission-certs";
const SERVICE: &str = "stateful-admission";
const MUTATING: &str = "stateful-admission";
const VALIDATING: &str = "stateful-admission";
const WAIT: Duration = Duration::from_secs(10);

fn names() -> Vec<String> {
    service_dns_names(SERVICE, NS)
}

/// What the chart renders in self-managed mode: no caBundle, every other field set.
fn webhook_configuration(kind: &str, name: &str, path: &str) -> Value {
    let webhook = |hook: &str, group: &str, resource: &str| {
        json!({
            "name": hook,
            "clientConfig": {"service": {"name": SERVICE, "namespace": NS, "path": path, "port": 443}},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": [resource], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NS]},
                {"key": "stateful-admission.io/ignore", "operator": "NotIn", "values": ["true"]},
            ]},
            "matchConditions": [{"name": "not-ignored", "expression": "true"}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "timeoutSeconds": 5,
        })
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "stateful-admission"}},
        "webhooks": [
            webhook("statefulsets.stateful-admission.io", "apps", "statefulsets"),
            webhook("persistentvolumeclaims.stateful-admission.io", "", "persistentvolumeclaims"),
        ],
    })
}

fn mutating_configuration() -> Value {
    webhook_configuration("MutatingWebhookConfiguration", MUTATING, "/mutate")
}

fn validating_configuration() -> Value {
    webhook_configuration("ValidatingWebhookConfiguration", VALIDATING, "/validate")
}

/// A fake cluster with both webhook configurations installed.
async fn cluster() -> FakeApiServer {
    let api = FakeApiServer::start().await;
    api.put_object(mutating_configuration());
    api.put_object(validating_configuration());
    api
}

fn config(dir: &Path, check_interval: Duration) -> SelfManagedConfig {
    SelfManagedConfig {
        secret: SECRET.to_owned(),
        namespace: NS.to_owned(),
        service: SERVICE.to_owned(),
        mutating_webhook: Some(MUTATING.to_owned()),
        validating_webhook: Some(VALIDATING.to_owned()),
        dir: dir.to_owned(),
        check_interval,
        lifetimes: Lifetimes::default(),
    }
}

/// A running actor; stopped on drop.
struct Replica {
    paths: CertPaths,
    metrics: Registry,
    stop: CancellationToken,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn start(api: &FakeApiServer, dir: &Path, check_interval: Duration) -> Replica {
    let mut metrics = Registry::default();
    let handle = Metrics::register(&mut metrics);
    let stop = CancellationToken::new();
    let paths = self_managed::start(
        api.client(),
        config(dir, check_interval),
        handle,
        stop.clone(),
    )
    .await
    .expect("self-managed certificates start");
    Replica {
        paths,
        metrics,
        stop,
    }
}

impl Replica {
    fn metrics(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.metrics).expect("encode");
        text
    }

    fn metric(&self, line_start: &str) -> Option<String> {
        self.metrics()
            .lines()
            .find(|l| l.starts_with(line_start))
            .map(|l| l.rsplit(' ').next().unwrap_or_default().to_owned())
    }

    fn file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.paths.cert.with_file_name(name)).expect(name)
    }
}

fn stored_secret(api: &FakeApiServer) -> Option<CertSecret> {
    let secret = api.get::<Secret>(NS, SECRET)?;
    let data = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    Some(CertSecret::from_data(&data))
}

fn secret_version(api: &FakeApiServer) -> Option<String> {
    api.get::<Secret>(NS, SECRET)
        .and_then(|s| s.metadata.resource_version)
}

/// Seeds the Secret as another replica would have written it.
fn seed(api: &FakeApiServer, secret: &CertSecret) {
    let data: serde_json::Map<String, Value> = secret
        .to_data()
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(v)),
            )
        })
        .collect();
    api.put_object(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NS}, "type": "kubernetes.io/tls", "data": data}));
}

/// A CA and serving certificate as the actor would have issued them at `at`.
fn issued_at(at: OffsetDateTime) -> CertSecret {
    let plan = plan_rotation(at, &CertSecret::default(), &names(), Lifetimes::default());
    rotation::execute(
        &plan,
        &CertSecret::default(),
        &names(),
        Lifetimes::default(),
        at,
    )
    .expect("issue")
}

/// `secret` with its serving certificate re-issued at `at`.
fn leaf_reissued(secret: &CertSecret, at: OffsetDateTime) -> CertSecret {
    let plan = RotationPlan {
        issue_ca: None,
        issue_leaf: Some(Reason::DueForRenewal),
        retained_cas: Vec::new(),
        bundle_outdated: false,
        next_check: at,
    };
    rotation::execute(&plan, secret, &names(), Lifetimes::default(), at).expect("issue")
}

fn info(pem: Option<&[u8]>) -> x509::CertInfo {
    x509::parse_pem(pem.unwrap_or_default()).expect("certificate")
}

/// The caBundle of every webhook of a configuration, decoded.
fn ca_bundles(api: &FakeApiServer, resource: &resources::ResourceType, name: &str) -> Vec<Vec<u8>> {
    let object = api.get_object(resource, "", name).expect("configuration");
    object["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|w| {
            let encoded = w["clientConfig"]["caBundle"].as_str().unwrap_or_default();
            base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .expect("base64")
        })
        .collect()
}

fn both_bundles(api: &FakeApiServer) -> Vec<Vec<u8>> {
    let mut all = ca_bundles(api, &resources::MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING);
    all.extend(ca_bundles(
        api,
        &resources::VALIDATING_WEBHOOK_CONFIGURATIONS,
        VALIDATING,
    ));
    all
}

/// A stored configuration without what the actor owns (caBundle) and what the server owns.
fn without_ca_bundles(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        // A changed `webhooks` (the bundle) is a new generation, as the apiserver counts it.
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
            "generation",
        ] {
            meta.remove(field);
        }
    }
    for webhook in object["webhooks"].as_array_mut().into_iter().flatten() {
        if let Some(client) = webhook["clientConfig"].as_object_mut() {
            client.remove("caBundle");
        }
    }
    object
}

/// Whether `leaf` verifies for the service's in-cluster name against the CAs of `bundle`,
/// as the apiserver checks a webhook.
fn verifies(bundle: &[u8], leaf: &[u8]) -> bool {
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(bundle) {
        roots.add(der.expect("bundle pem")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .expect("verifier");
    let leaf = CertificateDer::from_pem_slice(leaf).expect("leaf pem");
    let name = ServerName::try_from(format!("{SERVICE}.{NS}.svc")).expect("name");
    verifier
        .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
        .is_ok()
}

/// The certificate `addr` serves, after a handshake that trusts only `bundle` and checks the
/// service's in-cluster name.
async fn served_leaf(addr: SocketAddr, bundle: &[u8]) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(bundle) {
        roots.add(der.expect("bundle pem")).expect("root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from(format!("{SERVICE}.{NS}.svc")).expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("the served certificate chains to the bundle");
    tls.get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .expect("a peer certificate")
        .to_vec()
}

fn der(pem: Option<&[u8]>) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.unwrap_or_default())
        .expect("pem")
        .to_vec()
}

fn secret_creates(requests: &[RecordedRequest]) -> Vec<u16> {
    let collection = format!("/api/v1/namespaces/{NS}/secrets");
    requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == collection)
        .map(|r| r.code)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn first_start_creates_the_secret_writes_files_and_patches_both_ca_bundles() {
    let api = cluster().await;
    let before = [
        api.get_object(&resources::MUTATING_WEBHOOK_CONFIGURATIONS, "", MUTATING),
        api.get_object(
            &resources::VALIDATING_WEBHOOK_CONFIGURATIONS,
            "",
            VALIDATING,
        ),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let replica = start(&api, dir.path(), Duration::from_secs(60)).await;

    let stored = stored_secret(&api).expect("the Secret was created");
    let secret = api.get::<Secret>(NS, SECRET).expect("secret");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(
        secret
            .metadata
            .labels
            .unwrap_or_default()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("stateful-admission")
    );
    let ca = info(stored.ca_cert.as_deref());
    let leaf = info(stored.tls_cert.as_deref());
    assert_eq!(leaf.issuer, ca.subject);
    assert_eq!(leaf.dns_names, names());
    assert!(stored.ca_key.is_some());
    let bundle = stored.ca_bundle.clone().expect("bundle");
    assert_eq!(bundle, stored.ca_cert.clone().expect("ca"), "one CA so far");
    assert!(verifies(
        &bundle,
        stored.tls_cert.as_deref().unwrap_or_default()
    ));

    // The files the TLS listener reads are the Secret's.
    assert_eq!(
        replica.file("tls.crt"),
        stored.tls_cert.clone().expect("crt")
    );
    assert_eq!(
        replica.file("tls.key"),
        stored.tls_key.clone().expect("key")
    );
    assert_eq!(replica.file("ca.crt"), bundle);
    CertReloader::load(&replica.paths.cert, &replica.paths.key).expect("a usable pair");

    // Every webhook trusts the bundle; nothing else in the configurations changed.
    assert_eq!(both_bundles(&api), vec![bundle.clone(); 4]);
    let after = [
        api.get_object(&resources::MUTATING_WEBHOOK_CONFIGURATIONS, "", MUTATING),
        api.get_object(
            &resources::VALIDATING_WEBHOOK_CONFIGURATIONS,
            "",
            VALIDATING,
        ),
    ];
    for (before, after) in before.into_iter().zip(after) {
        assert_eq!(
            without_ca_bundles(after.expect("kept")),
            without_ca_bundles(before.expect("installed"))
        );
    }

    // One create, one strategic-merge patch per configuration, nothing else.
    let writes: Vec<(String, String, u16)> = api
        .writes()
        .iter()
        .map(|r| (r.method.clone(), r.path.clone(), r.code))
        .collect();
    assert_eq!(
        writes,
        [
            (
                "POST".to_owned(),
                format!("/api/v1/namespaces/{NS}/secrets"),
                201
            ),
            (
                "PATCH".to_owned(),
                format!(
                    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{MUTATING}"
                ),
                200
            ),
            (
                "PATCH".to_owned(),
                format!(
                    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{VALIDATING}"
                ),
                200
            ),
        ]
    );
    assert!(
        api.writes()[1..]
            .iter()
            .all(|r| r.content_type.as_deref() == Some("application/strategic-merge-patch+json"))
    );

    // Metrics: what was issued, and when it expires.
    assert_eq!(
        replica.metric("certificate_rotations_total{certificate=\"ca\"}"),
        Some("1".into())
    );
    assert_eq!(
        replica.metric("certificate_rotations_total{certificate=\"serving\"}"),
        Some("1".into())
    );
    assert_eq!(
        replica.metric("certificate_expiry_timestamp_seconds{certificate=\"serving\"}"),
        Some(leaf.not_after.unix_timestamp().to_string())
    );
    assert_eq!(
        replica.metric("certificate_expiry_timestamp_seconds{certificate=\"ca\"}"),
        Some(ca.not_after.unix_timestamp().to_string())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_started_later_reuses_the_secret() {
    let api = cluster().await;
    let first_dir = tempfile::tempdir().expect("tempdir");
    let first = start(&api, first_dir.path(), Duration::from_secs(60)).await;
    let stored = stored_secret(&api).expect("secret");
    let version = secret_version(&api);
    api.clear_requests();

    let second_dir = tempfile::tempdir().expect("tempdir");
    let second = start(&api, second_dir.path(), Duration::from_secs(60)).await;
    assert!(api.writes().is_empty(), "{:?}", api.writes());
    assert_eq!(secret_version(&api), version, "no new CA, no new leaf");
    for name in ["tls.crt", "tls.key", "ca.crt"] {
        assert_eq!(second.file(name), first.file(name), "{name}");
    }
    assert_eq!(second.file("tls.crt"), stored.tls_cert.expect("crt"));
    assert_eq!(
        second.metric("certificate_rotations_total"),
        None,
        "the second replica issued nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_starting_at_once_converge_on_one_secret() {
    let api = cluster().await;
    let dirs: Vec<_> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    // Every create waits until all replicas have read "no Secret" and sent theirs.
    let creates_held = api.hold_next("POST", &format!("/namespaces/{NS}/secrets"), dirs.len());
    let (replicas, ()) = tokio::join!(
        futures::future::join_all(dirs.iter().map(|d| start(
            &api,
            d.path(),
            Duration::from_secs(60)
        )),),
        async {
            creates_held
                .arrived(dirs.len(), WAIT)
                .await
                .expect("every replica tries to create");
            creates_held.release();
        },
    );

    let creates = secret_creates(&api.requests());
    assert_eq!(
        creates.iter().filter(|c| **c == 201).count(),
        1,
        "exactly one create succeeds: {creates:?}"
    );
    assert_eq!(
        creates.iter().filter(|c| **c == 409).count(),
        dirs.len() - 1,
        "the others lose with AlreadyExists: {creates:?}"
    );
    assert!(
        !api.writes()
            .iter()
            .any(|r| r.method == "PUT" && r.path.contains("/secrets/")),
        "losers re-read; they do not overwrite"
    );
    let stored = stored_secret(&api).expect("secret");
    for replica in &replicas {
        assert_eq!(
            replica.file("tls.crt"),
            stored.tls_cert.clone().expect("crt")
        );
        assert_eq!(
            replica.file("ca.crt"),
            stored.ca_bundle.clone().expect("ca")
        );
    }
    assert_eq!(both_bundles(&api), vec![stored.ca_bundle.expect("ca"); 4]);
}

/// Replicas that find the same leaf due at once race on the Secret's resourceVersion: one
/// replace wins, the others get 409, re-read, and serve the winner's certificate.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_renewing_at_once_keep_the_winners_certificate() {
    let api = cluster().await;
    let seeded = issued_at(OffsetDateTime::now_utc() - time::Duration::days(61));
    seed(&api, &seeded);
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let replaces_held = api.hold_next("PUT", &format!("/secrets/{SECRET}"), dirs.len());
    let (replicas, ()) = tokio::join!(
        futures::future::join_all(dirs.iter().map(|d| start(
            &api,
            d.path(),
            Duration::from_secs(60)
        )),),
        async {
            replaces_held
                .arrived(dirs.len(), WAIT)
                .await
                .expect("every replica tries to renew");
            replaces_held.release();
        },
    );

    let secret_path = format!("/api/v1/namespaces/{NS}/secrets/{SECRET}");
    let replaces: Vec<u16> = api
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path == secret_path)
        .map(|r| r.code)
        .collect();
    assert_eq!(
        replaces.iter().filter(|c| **c == 200).count(),
        1,
        "one replace wins: {replaces:?}"
    );
    assert_eq!(
        replaces.iter().filter(|c| **c == 409).count(),
        dirs.len() - 1,
        "the others lose with Conflict: {replaces:?}"
    );
    let stored = stored_secret(&api).expect("secret");
    assert_ne!(stored.tls_cert, seeded.tls_cert, "renewed");
    assert_eq!(stored.ca_cert, seeded.ca_cert, "same CA");
    for replica in &replicas {
        assert_eq!(
            replica.file("tls.crt"),
            stored.tls_cert.clone().expect("crt")
        );
        assert_eq!(
            replica.file("tls.key"),
            stored.tls_key.clone().expect("key")
        );
    }
}

/// A serving certificate reaching two thirds of its lifetime is re-issued by the same CA,
/// and the TLS listener serves the new one without restart.
#[tokio::test(flavor = "multi_thread")]
async fn leaf_renewal_at_two_thirds_keeps_the_ca_and_is_served() {
    let api = cluster().await;
    // Issued so that its two-thirds point is six seconds away (X.509 times are whole
    // seconds, and issuing, seeding and the first pass must all come before it).
    let now = OffsetDateTime::now_utc();
    let probe = issued_at(now);
    let to_due = renew_at(&info(probe.tls_cert.as_deref())) - now;
    let seeded = issued_at(now + time::Duration::seconds(6) - to_due);
    seed(&api, &seeded);
    api.clear_requests();

    let dir = tempfile::tempdir().expect("tempdir");
    let replica = start(&api, dir.path(), Duration::from_millis(200)).await;
    let writes: Vec<String> = api.writes().iter().map(|r| r.method.clone()).collect();
    assert_eq!(writes, ["PATCH", "PATCH"], "caBundles only: not due yet");
    api.clear_requests();
    assert_eq!(
        replica.file("tls.crt"),
        seeded.tls_cert.clone().expect("crt")
    );

    // The listener as `serve` runs it: reloader, watch, TLS.
    let reloader = CertReloader::load(&replica.paths.cert, &replica.paths.key).expect("loads");
    let mut registry = Registry::default();
    let server_metrics = Arc::new(stateful_admission::server::metrics::Metrics::register(
        &mut registry,
    ));
    let stop = CancellationToken::new();
    tokio::spawn(
        reloader
            .clone()
            .watch(Duration::from_millis(100), server_metrics, stop.clone()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(stateful_admission::server::listener::serve_tls(
        listener,
        reloader.server_config().expect("config"),
        axum::Router::new(),
        ListenerLimits::default(),
        stop.clone(),
    ));
    let bundle = seeded.ca_bundle.clone().expect("bundle");
    assert_eq!(
        served_leaf(addr, &bundle).await,
        der(seeded.tls_cert.as_deref())
    );

    let renewed = api
        .wait_for(
            |store| {
                store
                    .get::<Secret>(NS, SECRET)
                    .and_then(|s| s.data)
                    .and_then(|d| d.get("tls.crt").cloned())
                    .is_some_and(|c| Some(c.0) != seeded.tls_cert)
            },
            // Due about six seconds after it was issued, then the next pass.
            WAIT * 2,
        )
        .await;
    assert!(renewed.is_ok(), "the leaf is renewed once due");
    let stored = stored_secret(&api).expect("secret");
    assert_eq!(stored.ca_cert, seeded.ca_cert, "same CA");
    assert_eq!(stored.ca_key, seeded.ca_key);
    assert_eq!(stored.ca_bundle, seeded.ca_bundle);
    let leaf = info(stored.tls_cert.as_deref());
    assert!(renew_at(&leaf) > OffsetDateTime::now_utc() + time::Duration::days(59));
    assert!(verifies(
        &bundle,
        stored.tls_cert.as_deref().unwrap_or_default()
    ));

    let new_leaf = der(stored.tls_cert.as_deref());
    let mut served = Vec::new();
    for _ in 0..100 {
        served = served_leaf(addr, &bundle).await;
        if served == new_leaf {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(served, new_leaf, "the renewed certificate is served");
    // One write: the Secret. The bundle did not change, so no configuration was patched.
    let writes: Vec<(String, u16)> = api
        .writes()
        .iter()
        .map(|r| (r.method.clone(), r.code))
        .collect();
    assert_eq!(writes, [("PUT".to_owned(), 200)]);
    assert_eq!(
        replica.metric("certificate_rotations_total{certificate=\"serving\"}"),
        Some("1".into())
    );
    assert_eq!(
        replica.metric("certificate_rotations_total{certificate=\"ca\"}"),
        None
    );
    stop.cancel();
}

/// At two thirds of the CA's year a new CA signs a new leaf, and the bundle keeps the old CA
/// so that a replica still serving the old leaf stays trusted.
#[tokio::test(flavor = "multi_thread")]
async fn ca_renewal_keeps_the_old_ca_in_the_bundle_during_rollover() {
    let api = cluster().await;
    let now = OffsetDateTime::now_utc();
    let seeded = leaf_reissued(
        &issued_at(now - time::Duration::days(244)),
        now - time::Duration::days(1),
    );
    seed(&api, &seeded);
    let old_leaf = seeded.tls_cert.clone().expect("old leaf");
    let old_ca = seeded.ca_cert.clone().expect("old ca");

    let dir = tempfile::tempdir().expect("tempdir");
    let replica = start(&api, dir.path(), Duration::from_secs(60)).await;
    let stored = stored_secret(&api).expect("secret");
    let new_ca = stored.ca_cert.clone().expect("new ca");
    assert_ne!(new_ca, old_ca, "a new CA");
    let bundle = stored.ca_bundle.clone().expect("bundle");
    let cas = x509::parse_pem_bundle(&bundle).expect("bundle parses");
    assert_eq!(
        cas.iter().map(|c| c.subject.clone()).collect::<Vec<_>>(),
        [info(Some(&new_ca)).subject, info(Some(&old_ca)).subject],
        "new CA first, old CA kept"
    );
    let new_leaf = stored.tls_cert.clone().expect("new leaf");
    assert_eq!(info(Some(&new_leaf)).issuer, info(Some(&new_ca)).subject);
    assert!(verifies(&bundle, &new_leaf), "this replica's new leaf");
    assert!(verifies(&bundle, &old_leaf), "a replica not yet switched");
    assert_eq!(both_bundles(&api), vec![bundle.clone(); 4]);
    assert_eq!(replica.file("tls.crt"), new_leaf);
    assert_eq!(replica.file("ca.crt"), bundle);
    assert_eq!(
        replica.metric("certificate_rotations_total{certificate=\"ca\"}"),
        Some("1".into())
    );

    // Settled: another pass by a second replica changes nothing.
    api.clear_requests();
    let other = tempfile::tempdir().expect("tempdir");
    let _second = start(&api, other.path(), Duration::from_secs(60)).await;
    assert!(api.writes().is_empty(), "{:?}", api.writes());
}

/// Helm may create the webhook configurations after the Deployment: the actor starts
/// anyway, and sets the caBundle soon after the configuration appears.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_webhook_configuration_is_retried_soon_not_fatal() {
    let api = FakeApiServer::start().await;
    api.put_object(validating_configuration());
    let dir = tempfile::tempdir().expect("tempdir");
    // A long regular interval: only the retry for the missing configuration can be quick.
    let replica = start(&api, dir.path(), Duration::from_secs(3600)).await;
    let stored = stored_secret(&api).expect("secret");
    let bundle = stored.ca_bundle.clone().expect("bundle");
    assert_eq!(
        replica.file("tls.crt"),
        stored.tls_cert.clone().expect("crt")
    );
    assert_eq!(
        ca_bundles(
            &api,
            &resources::VALIDATING_WEBHOOK_CONFIGURATIONS,
            VALIDATING
        ),
        vec![bundle.clone(); 2]
    );

    api.put_object(mutating_configuration());
    let patched = api
        .wait_for(
            |store| {
                store
                    .get_object(&resources::MUTATING_WEBHOOK_CONFIGURATIONS, "", MUTATING)
                    .and_then(|o| o["webhooks"].as_array().cloned())
                    .is_some_and(|hooks| {
                        hooks
                            .iter()
                            .all(|w| w["clientConfig"].get("caBundle").is_some())
                    })
            },
            WAIT,
        )
        .await;
    assert!(patched.is_ok(), "the late configuration gets the caBundle");
    assert_eq!(
        ca_bundles(&api, &resources::MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING),
        vec![bundle; 2]
    );
    assert_eq!(
        secret_creates(&api.requests()),
        [201],
        "the Secret was created once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_write_at_steady_state() {
    let api = cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let interval = Duration::from_millis(100);
    let replica = start(&api, dir.path(), interval).await;
    let link = std::fs::read_link(dir.path().join("..data")).expect("data link");
    api.clear_requests();
    // The loop looked again and again since (every 100 ms): four reads of the Secret.
    let secret_reads = || {
        api.requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path.ends_with(&format!("/secrets/{SECRET}")))
            .count()
    };
    assert!(
        eventually(Duration::from_secs(30), || secret_reads() >= 4).await,
        "the loop kept checking ({} reads)",
        secret_reads()
    );
    assert!(api.writes().is_empty(), "{:?}", api.writes());
    assert_eq!(
        std::fs::read_link(dir.path().join("..data")).expect("data link"),
        link,
        "the files were not swapped"
    );
    assert_eq!(
        replica.metric("certificate_rotation_failures_total"),
        Some("0".into())
    );
}

fn kubeconfig(api: &FakeApiServer) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\nusers:\n- name: fake\n  user: {{}}\ncurrent-context: fake\n",
        api.url()
    )
}

/// The real binary: `serve --self-managed-certs` with a kubeconfig for the fake cluster.
#[tokio::test(flavor = "multi_thread")]
async fn serve_with_self_managed_certificates() {
    let api = cluster().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("kubeconfig");
    std::fs::write(&config, kubeconfig(&api)).expect("kubeconfig");
    let certs = dir.path().join("certs");
    let served = Served::start_with_env(
        &[
            "--self-managed-certs",
            "--cert-namespace",
            NS,
            "--cert-secret",
            SECRET,
            "--service-name",
            SERVICE,
            "--mutating-webhook-configuration",
            MUTATING,
            "--validating-webhook-configuration",
            VALIDATING,
            "--cert-dir",
            certs.to_str().expect("path"),
            "--controller",
            "false",
        ],
        &[("KUBECONFIG", config.to_str().expect("path"))],
    );
    assert!(
        eventually(WAIT, || served.probe("/readyz") == 200).await,
        "ready"
    );
    let stored = stored_secret(&api).expect("the binary created the Secret");
    let bundle = stored.ca_bundle.clone().expect("bundle");
    assert_eq!(both_bundles(&api), vec![bundle.clone(); 4]);

    // A client that trusts only the Secret's CA reaches the webhook by its Service name.
    let url = served.url("/mutate");
    let port: u16 = url
        .trim_start_matches("https://localhost:")
        .trim_end_matches("/mutate")
        .parse()
        .expect("port");
    let host = format!("{SERVICE}.{NS}.svc");
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&bundle).expect("pem"))
        .resolve(&host, SocketAddr::from(([127, 0, 0, 1], port)))
        .build()
        .expect("client");
    let review = stateful_admission::review::builder::ReviewBuilder::claim("CREATE")
        .object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}}}))
        .into_json();
    let response = client
        .post(format!("https://{host}:{port}/mutate"))
        .json(&review)
        .send()
        .await
        .expect("TLS verified against the Secret's CA");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["response"]["allowed"], true);
    assert_eq!(
        served_leaf(SocketAddr::from(([127, 0, 0, 1], port)), &bundle).await,
        der(stored.tls_cert.as_deref()),
        "the Secret's serving certificate is served"
    );

    let metrics = reqwest::get(served.probe_url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let leaf = info(stored.tls_cert.as_deref());
    assert!(
        metrics.lines().any(|l| l
            == format!(
                "stateful_admission_certificate_expiry_timestamp_seconds{{certificate=\"serving\"}} {}",
                leaf.not_after.unix_timestamp()
            )),
        "{metrics}"
    );
    // The listener's own view of what it serves agrees (reported in every mode).
    assert!(
        metrics.lines().any(|l| l
            == format!(
                "stateful_admission_serving_certificate_expiry_timestamp_seconds {}",
                leaf.not_after.unix_timestamp()
            )),
        "{metrics}"
    );
}
