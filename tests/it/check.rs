//! `stateful-admission check` against the in-process fake API server: the real binary serving
//! the webhook over TLS on loopback, called by the fake through the webhook configurations it
//! stores (trusting only their caBundle), with each failure injected in turn.

use std::net::SocketAddr;

use base64::Engine as _;
use serde_json::{Value, json};
use stateful_admission::certs::{self, GeneratedCerts};
use stateful_admission::check::{Release, Report, Status, gather};

use crate::common::{fixture_path, run_binary_with_env, temp_file};
use crate::serve_tls::Served;
use crate::support::fake_apiserver::authz::DeniedAccess;
use crate::support::fake_apiserver::{
    FakeApiConfig, FakeApiServer, Profile, ResourceType, resources,
};
use crate::support::https_hook::HttpsHook;

const NS: &str = "stateful-admission";
const NAME: &str = "stateful-admission";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn generate() -> GeneratedCerts {
    certs::generate(NAME, &certs::service_dns_names(NAME, NS), 30, 10).expect("certificates")
}

struct Install {
    api: FakeApiServer,
    certs: GeneratedCerts,
    _served: Served,
    _dir: tempfile::TempDir,
}

/// A healthy install: both configurations with the right caBundle, the serving Secret, a
/// fresh Lease, a default StorageClass, and the webhook serving on loopback.
async fn install() -> Install {
    // A version that implements none of the five proposals natively, and does as it says.
    install_on(FakeApiConfig {
        git_version: "v1.24.17".to_owned(),
        drop_statefulset_max_unavailable: true,
        ..FakeApiConfig::default()
    })
    .await
}

/// [`install`] on an apiserver configured so.
async fn install_on(config: FakeApiConfig) -> Install {
    let certs = generate();
    let dir = tempfile::tempdir().expect("temp dir");
    let paths = certs.write(dir.path(), false).expect("write certificates");
    let served = Served::start(&[
        "--tls-cert",
        paths.cert.to_str().expect("utf-8"),
        "--tls-key",
        paths.key.to_str().expect("utf-8"),
        "--state",
        fixture_path("../../examples/cluster.yaml")
            .to_str()
            .expect("utf-8"),
    ]);
    let port: u16 = served
        .url("")
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let api = FakeApiServer::start_with(config).await;
    api.add_admission_hook(std::sync::Arc::new(HttpsHook::new([(
        (NS.to_owned(), NAME.to_owned(), 443),
        addr,
    )])));
    for kind in ["mutating", "validating"] {
        api.put_object(configuration(kind, &b64(&certs.ca_cert_pem)));
    }
    api.put_object(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{NAME}-certs"), "namespace": NS},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64(&certs.cert_pem), "tls.key": b64(&certs.key_pem)}}));
    api.put_object(lease(0));
    api.put_object(
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard",
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "example.com/disk"}),
    );
    api.put_object(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"replicas": 1, "serviceName": "db",
                 "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "db:1"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"},
                     "spec": {"accessModes": ["ReadWriteOnce"],
                              "resources": {"requests": {"storage": "1Gi"}}}}]}}));
    Install {
        api,
        certs,
        _served: served,
        _dir: dir,
    }
}

/// The chart's configuration of one webhook.
fn configuration(kind: &str, ca_bundle: &str) -> Value {
    let (type_name, hook, path, claim_op) = match kind {
        "mutating" => (
            "MutatingWebhookConfiguration",
            "mutate",
            "/mutate",
            "CREATE",
        ),
        _ => (
            "ValidatingWebhookConfiguration",
            "validate",
            "/validate",
            "UPDATE",
        ),
    };
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": type_name,
    "metadata": {"name": NAME},
    "webhooks": [{
        "name": format!("{hook}.stateful-admission.io"),
        "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
        "clientConfig": {"caBundle": ca_bundle,
                         "service": {"namespace": NS, "name": NAME, "path": path, "port": 443}},
        "rules": [
            {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["statefulsets"],
             "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["persistentvolumeclaims"],
             "operations": [claim_op], "scope": "Namespaced"}]
    }]})
}

/// The controller's Lease, renewed `age_seconds` ago.
fn lease(age_seconds: i64) -> Value {
    let renewed = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(age_seconds);
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": format!("{NAME}-leader"), "namespace": NS},
        "spec": {"holderIdentity": "stateful-admission-5d9c-x2", "leaseDurationSeconds": 15,
                 "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
}

async fn check(api: &FakeApiServer) -> Report {
    let mut config = kube::Config::new(api.url().parse().expect("url"));
    config.default_namespace = NS.to_owned();
    gather::run(config, &Release::of(NAME, NS)).await
}

fn status_of(report: &Report, name: &str) -> Status {
    report
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {report:#?}"))
        .status
}

fn only_failures(report: &Report) -> Vec<&str> {
    report
        .checks
        .iter()
        .filter(|c| c.status == Status::Failed)
        .map(|c| c.name.as_str())
        .collect()
}

/// The StatefulSets and claims as stored: the dry runs must leave them as they were.
fn stored(api: &FakeApiServer) -> Vec<Value> {
    [
        &resources::STATEFULSETS,
        &resources::PERSISTENT_VOLUME_CLAIMS,
    ]
    .into_iter()
    .flat_map(|resource| api.list_objects(resource as &ResourceType))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_install_passes_every_check_and_stores_nothing() {
    let install = install().await;
    let before = stored(&install.api);
    let revision = install.api.resource_version();
    let report = check(&install.api).await;
    assert!(!report.failed(), "{}", report.text());
    for name in [
        "mutating webhook configuration",
        "validating webhook configuration",
        "dry-run StatefulSet create",
        "dry-run StatefulSet template edit",
        "dry-run PersistentVolumeClaim create",
        "controller lease",
        "service account permissions",
        "kubernetes version",
    ] {
        assert_eq!(status_of(&report, name), Status::Ok, "{}", report.text());
    }
    let text = report.text();
    assert!(text.contains("verifies the serving certificate"), "{text}");
    assert!(
        text.contains("stateful-admission.io/max-unavailable"),
        "{text}"
    );
    assert_eq!(stored(&install.api), before, "a dry run stored something");
    assert_eq!(install.api.resource_version(), revision, "a dry run wrote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_configuration_fails() {
    let install = install().await;
    install
        .api
        .remove_object(&resources::VALIDATING_WEBHOOK_CONFIGURATIONS, "", NAME);
    let report = check(&install.api).await;
    assert!(report.failed());
    assert_eq!(
        only_failures(&report),
        ["validating webhook configuration"],
        "{}",
        report.text()
    );
    assert!(report.text().contains("not found"), "{}", report.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_bundle_fails_and_the_webhook_is_not_reached() {
    let install = install().await;
    let other = generate();
    for kind in ["mutating", "validating"] {
        install
            .api
            .put_object(configuration(kind, &b64(&other.ca_cert_pem)));
    }
    let report = check(&install.api).await;
    let failed = only_failures(&report);
    assert!(
        failed.contains(&"mutating webhook configuration"),
        "{}",
        report.text()
    );
    assert!(
        failed.contains(&"validating webhook configuration"),
        "{}",
        report.text()
    );
    // With failurePolicy Ignore the apiserver goes on without the webhook: the dry run
    // shows that the path is broken.
    assert!(
        failed.contains(&"dry-run StatefulSet create"),
        "{}",
        report.text()
    );
    assert!(
        report
            .text()
            .contains("x509-certificate-signed-by-unknown-authority"),
        "{}",
        report.text()
    );
    // The right bundle passes again: the failure came from the bundle alone.
    for kind in ["mutating", "validating"] {
        install
            .api
            .put_object(configuration(kind, &b64(&install.certs.ca_cert_pem)));
    }
    assert!(!check(&install.api).await.failed());
}

/// Webhooks outside the cluster (`clientConfig.url`, as a development setup or an external
/// endpoint has them) are verified by what the URL serves: its chain against each caBundle,
/// for the URL's host, as the apiserver's client would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_urls_are_verified_by_the_certificate_they_serve() {
    let install = install().await;
    let names = ["localhost".to_owned(), "127.0.0.1".to_owned()];
    let certs = certs::generate(NAME, &names, 30, 10).expect("certificates");
    let dir = tempfile::tempdir().expect("temp dir");
    let paths = certs.write(dir.path(), false).expect("write certificates");
    let served = Served::start(&[
        "--tls-cert",
        paths.cert.to_str().expect("utf-8"),
        "--tls-key",
        paths.key.to_str().expect("utf-8"),
        "--state",
        fixture_path("../../examples/cluster.yaml")
            .to_str()
            .expect("utf-8"),
    ]);
    let base = served.url("");
    let by_url = |kind: &str, bundle: &str, path: &str| {
        let mut config = configuration(kind, bundle);
        config["webhooks"][0]["clientConfig"] =
            json!({"caBundle": bundle, "url": format!("{base}{path}")});
        config
    };
    let statuses = |report: &Report| {
        (
            status_of(report, "mutating webhook configuration"),
            status_of(report, "validating webhook configuration"),
        )
    };
    let ours = b64(&certs.ca_cert_pem);
    install.api.put_object(by_url("mutating", &ours, "/mutate"));
    install
        .api
        .put_object(by_url("validating", &ours, "/validate"));
    let report = check(&install.api).await;
    assert_eq!(
        statuses(&report),
        (Status::Ok, Status::Ok),
        "{}",
        report.text()
    );
    let authority = base.trim_start_matches("https://");
    assert!(
        report.text().contains(&format!(
            "caBundle verifies the certificate served at {authority}"
        )),
        "{}",
        report.text()
    );

    // Another CA's bundle: the apiserver would refuse the certificate.
    let other = b64(&generate().ca_cert_pem);
    install
        .api
        .put_object(by_url("mutating", &other, "/mutate"));
    let report = check(&install.api).await;
    assert_eq!(
        statuses(&report),
        (Status::Failed, Status::Ok),
        "{}",
        report.text()
    );
    assert!(
        report
            .text()
            .contains("does not verify the certificate served at"),
        "{}",
        report.text()
    );

    // A URL with the wrong path, or not https.
    install
        .api
        .put_object(by_url("mutating", &ours, "/validate"));
    let report = check(&install.api).await;
    assert_eq!(statuses(&report).0, Status::Failed, "{}", report.text());
    assert!(
        report
            .text()
            .contains("path \"/validate\", expected \"/mutate\""),
        "{}",
        report.text()
    );
    let mut plain = by_url("mutating", &ours, "/mutate");
    plain["webhooks"][0]["clientConfig"]["url"] = json!(format!("http://{authority}/mutate"));
    install.api.put_object(plain);
    let report = check(&install.api).await;
    assert_eq!(statuses(&report).0, Status::Failed, "{}", report.text());
    assert!(
        report.text().contains("over https only"),
        "{}",
        report.text()
    );

    // Nothing listening: unverified, a warning unless a dry run showed the webhook answering.
    drop(served);
    install.api.put_object(by_url("mutating", &ours, "/mutate"));
    let report = check(&install.api).await;
    assert_eq!(statuses(&report).0, Status::Warning, "{}", report.text());
    assert!(
        report.text().contains("cannot connect"),
        "{}",
        report.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_secret_falls_back_to_the_dry_run() {
    let install = install().await;
    install
        .api
        .remove_object(&resources::SECRETS, NS, &format!("{NAME}-certs"));
    let report = check(&install.api).await;
    assert!(!report.failed(), "{}", report.text());
    assert!(
        report.text().contains("could not be read")
            && report
                .text()
                .contains("the dry-run requests reached the webhook"),
        "{}",
        report.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lease_or_a_stale_lease_fails() {
    let install = install().await;
    install.api.put_object(lease(60));
    let report = check(&install.api).await;
    assert_eq!(
        only_failures(&report),
        ["controller lease"],
        "{}",
        report.text()
    );
    assert!(report.text().contains("last renewed"), "{}", report.text());

    install
        .api
        .remove_object(&resources::LEASES, NS, &format!("{NAME}-leader"));
    let report = check(&install.api).await;
    assert_eq!(
        only_failures(&report),
        ["controller lease"],
        "{}",
        report.text()
    );
    assert!(report.text().contains("not found"), "{}", report.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_permission_fails_and_refused_impersonation_warns() {
    let install = install().await;
    let user = format!("system:serviceaccount:{NS}:{NAME}");
    install.api.configure(|c| {
        c.denied_access = vec![DeniedAccess::new(&user, "patch", "statefulsets/status")];
    });
    let report = check(&install.api).await;
    assert_eq!(
        only_failures(&report),
        ["service account permissions"],
        "{}",
        report.text()
    );
    assert!(
        report
            .text()
            .contains("may not patch statefulsets/status.apps (for conditions)"),
        "{}",
        report.text()
    );

    // The Lease is granted by name: the review asks about that name.
    install.api.configure(|c| {
        c.denied_access = vec![DeniedAccess::named(
            &user,
            "update",
            "leases",
            &format!("{NAME}-leader"),
        )];
    });
    let report = check(&install.api).await;
    assert_eq!(
        only_failures(&report),
        ["service account permissions"],
        "{}",
        report.text()
    );
    assert!(
        report
            .text()
            .contains(
            "may not update leases.coordination.k8s.io \"stateful-admission-leader\" (for leader election)"
        ),
        "{}",
        report.text()
    );

    install.api.configure(|c| c.impersonation_allowed = false);
    let report = check(&install.api).await;
    assert!(!report.failed(), "{}", report.text());
    assert_eq!(
        status_of(&report, "service account permissions"),
        Status::Warning
    );
}

/// A version whose upstream default keeps maxUnavailable (1.35.2), on a cluster that drops it
/// (a vendor build, `--feature-gates`): check says so and keeps our driver; where the cluster
/// keeps the field, ours is named redundant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_line_judges_by_what_the_cluster_does() {
    let install = install().await;
    install
        .api
        .configure(|c| c.git_version = "v1.35.2".to_owned());
    let report = check(&install.api).await;
    assert!(!report.failed(), "{}", report.text());
    let text = report.text();
    let line = text
        .lines()
        .find(|l| l.contains("kubernetes version:"))
        .expect("a version line");
    assert!(line.starts_with("ok "), "{line}");
    assert!(
        line.contains("KEP-961: upstream 1.35.2's default is on")
            && line.contains("this cluster does not"),
        "{line}"
    );
    assert!(!line.contains("--max-unavailable-driver=false"), "{line}");
    assert!(
        text.contains("capability max-unavailable: dropped (probe:"),
        "{text}"
    );

    install
        .api
        .configure(|c| c.drop_statefulset_max_unavailable = false);
    let report = check(&install.api).await;
    assert_eq!(status_of(&report, "kubernetes version"), Status::Warning);
    let text = report.text();
    assert!(
        text.contains("KEP-961: this cluster does it natively (max-unavailable kept (probe)): ours is redundant"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_the_kubeconfig_prints_json_and_exits_by_the_result() {
    let install = install().await;
    let kubeconfig = temp_file(
        ".yaml",
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: admin\n    namespace: {NS}\n\
             current-context: fake\nusers:\n- name: admin\n  user: {{}}\n",
            install.api.url()
        )
        .as_bytes(),
    );
    let path = kubeconfig.path().to_str().expect("utf-8").to_owned();
    let run = |args: Vec<&'static str>| {
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            let mut all = vec!["check"];
            all.extend(args);
            run_binary_with_env(&all, &[("KUBECONFIG", path.as_str())])
        })
    };
    let text = run(vec![]).await.expect("run");
    assert_eq!(text.code, 0, "{}{}", text.stdout, text.stderr);
    assert!(
        text.stdout
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("ok")),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("0 failed"), "{}", text.stdout);

    install
        .api
        .remove_object(&resources::MUTATING_WEBHOOK_CONFIGURATIONS, "", NAME);
    let json = run(vec!["-o", "json"]).await.expect("run");
    assert_eq!(json.code, 1, "{}{}", json.stdout, json.stderr);
    // The client's own ERROR lines about the 404 stay out: the report says it.
    assert_eq!(json.stderr, "", "{}", json.stderr);
    let report = json.json();
    let failed: Vec<&Value> = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["status"] == "failed")
        .collect();
    // Without the mutating webhook neither StatefulSet dry run comes back mutated or warned
    // about; the claim still gets the default class, from the apiserver's DefaultStorageClass
    // plugin.
    let names: Vec<&Value> = failed.iter().map(|c| &c["name"]).collect();
    assert_eq!(
        names,
        [
            "mutating webhook configuration",
            "dry-run StatefulSet create",
            "dry-run StatefulSet template edit",
        ],
        "{report:#}"
    );
    assert!(
        failed[0]["hint"]
            .as_str()
            .is_some_and(|h| h.contains("docs/runbooks.md#"))
    );

    // Another namespace names no release there.
    let elsewhere = run(vec!["--namespace", "other"]).await.expect("run");
    assert_eq!(elsewhere.code, 1, "{}", elsewhere.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_namespace_the_webhooks_skip_is_named_instead_of_failing() {
    let install = install().await;
    install
        .api
        .put_object(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "default", "labels": {"stateful-admission.io/ignore": "true"}}}));
    let report = check(&install.api).await;
    assert!(!report.failed(), "{}", report.text());
    assert_eq!(status_of(&report, "dry-run requests"), Status::Warning);
    assert!(
        report.text().contains("--probe-namespace"),
        "{}",
        report.text()
    );
    assert!(
        report
            .checks
            .iter()
            .all(|c| !c.name.starts_with("dry-run StatefulSet")),
        "{}",
        report.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployment_decides_which_permissions_lease_and_service_account_are_checked() {
    let install = install().await;
    install
        .api
        .put_object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "sa"}},
                 "template": {"metadata": {"labels": {"app": "sa"}},
                              "spec": {"serviceAccountName": "sa-runner",
                                       "containers": [{"name": "webhook", "image": "sa:1",
                                           "args": ["serve", "--statefulset-conditions=false",
                                                    "--lease-name=sa-lock"]}]}}}}));
    let runner = format!("system:serviceaccount:{NS}:sa-runner");
    // The conditions are off: their permission is not needed.
    install.api.configure(|c| {
        c.denied_access = vec![DeniedAccess::new(&runner, "patch", "statefulsets/status")];
    });
    let mut renamed = lease(0);
    renamed["metadata"]["name"] = json!("sa-lock");
    install.api.put_object(renamed);
    install
        .api
        .remove_object(&resources::LEASES, NS, &format!("{NAME}-leader"));
    let report = check(&install.api).await;
    assert!(!report.failed(), "{}", report.text());
    assert!(
        report.text().contains("Lease \"sa-lock\""),
        "{}",
        report.text()
    );
    assert!(report.text().contains(&runner), "{}", report.text());

    // What is on is checked, as the Deployment's ServiceAccount.
    install.api.configure(|c| {
        c.denied_access = vec![DeniedAccess::new(&runner, "delete", "pods")];
    });
    let report = check(&install.api).await;
    assert_eq!(
        only_failures(&report),
        ["service account permissions"],
        "{}",
        report.text()
    );
}

#[test]
fn without_a_cluster_configuration_check_exits_two() {
    let run = run_binary_with_env(&["check"], &[("KUBECONFIG", "/nonexistent/kubeconfig")]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.starts_with("error: no cluster configuration"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("docs/runbooks.md#check-cannot-reach-the-cluster"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stdout, "");
}

/// The one failed check of a run that never got to the checks.
fn only_check(run: &crate::common::Run) -> Value {
    let report = run.json();
    let checks = report["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 1, "{report:#}");
    assert_eq!(checks[0]["name"], "cluster connection", "{report:#}");
    assert_eq!(checks[0]["status"], "failed", "{report:#}");
    assert!(
        checks[0]["hint"]
            .as_str()
            .is_some_and(|h| h.contains("docs/runbooks.md#check-cannot-reach-the-cluster")),
        "{report:#}"
    );
    checks[0].clone()
}

#[test]
fn check_prints_json_in_every_outcome_with_the_exit_code_of_the_text_output() {
    // No kubeconfig: exit 2.
    let run = run_binary_with_env(
        &["check", "--output", "json"],
        &[("KUBECONFIG", "/nonexistent/kubeconfig")],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    let failed = only_check(&run);
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"/nonexistent/kubeconfig\"")),
        "{failed}"
    );
    assert_eq!(run.stderr, "");

    // A context the kubeconfig does not have: exit 2.
    let kubeconfig = temp_file(
        ".yaml",
        b"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
          contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
          current-context: c\nusers:\n- name: u\n  user: {}\n",
    );
    let path = kubeconfig.path().to_str().expect("utf-8");
    let run = run_binary_with_env(
        &["check", "-o", "json", "--context", "elsewhere"],
        &[("KUBECONFIG", path)],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    let failed = only_check(&run);
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.contains("elsewhere")),
        "{failed}"
    );

    // An apiserver that does not answer: exit 1, as any failed check.
    let run = run_binary_with_env(&["check", "-o", "json"], &[("KUBECONFIG", path)]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let failed = only_check(&run);
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.contains("/version")),
        "{failed}"
    );
    assert_eq!(run.stderr, "", "no client log lines");
}

/// `check` against every captured apiserver version (the fake speaking as each): every line
/// says what that apiserver does, and the version line never contradicts it: it calls our
/// maxUnavailable driver redundant exactly where the apiserver keeps the field, and says where
/// the cluster differs from upstream's default for its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_tells_the_truth_on_every_profile() {
    for profile in Profile::ALL {
        let label = profile.label();
        let install = install_on(FakeApiConfig::profile(profile)).await;
        let report = check(&install.api).await;
        let text = report.text();
        assert!(!report.failed(), "{label}: {text}");
        let line = |name: &str| {
            report
                .checks
                .iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("{label}: no {name}: {text}"))
                .clone()
        };
        let (mu, vac, api) = match profile {
            Profile::V1_24 => ("absent", "absent", "none"),
            Profile::V1_32 => ("dropped", "dropped", "none"),
            Profile::V1_32GatesOn => ("kept", "kept", "v1beta1"),
            Profile::V1_35 | Profile::V1_36 => ("dropped", "kept", "v1"),
            Profile::V1_35MaxUnavailableOn => ("kept", "kept", "v1"),
        };
        for (name, value) in [
            ("capability max-unavailable", mu),
            ("capability claim-volume-attributes-class", vac),
            ("capability volume-attributes-class-api", api),
            ("capability native-template-edits", "no"),
        ] {
            let check = line(name);
            assert_eq!(check.status, Status::Ok, "{label}: {text}");
            assert!(
                check.message.starts_with(&format!("{value} (probe: ")),
                "{label}: {name}: {}",
                check.message
            );
        }
        let version = line("kubernetes version");
        let driver_off = version.message.contains("--max-unavailable-driver=false");
        assert_eq!(driver_off, mu == "kept", "{label}: {}", version.message);
        assert_eq!(
            version.status == Status::Warning,
            mu == "kept",
            "{label}: {}",
            version.message
        );
        // The captured v1.35.3 build drops the field upstream 1.35.0–1.35.3 keeps by default.
        if profile == Profile::V1_35 {
            assert!(
                version.message.contains("KEP-961: upstream 1.35.3's default is on (gate MaxUnavailableStatefulSet), this cluster does not"),
                "{}",
                version.message
            );
        }
    }
}

/// A cluster whose apiserver takes volumeClaimTemplate edits itself (KEP-4650; synthetic: no
/// captured version has it): check says the native path is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_where_template_edits_are_native() {
    let install = install_on(FakeApiConfig {
        native_template_edits: true,
        ..FakeApiConfig::profile(Profile::V1_36)
    })
    .await;
    let report = check(&install.api).await;
    let text = report.text();
    assert!(
        text.contains("capability native-template-edits: volumeClaimUpdatePolicy (probe: "),
        "{text}"
    );
    assert!(
        text.contains("KEP-4650: the apiserver takes volumeClaimTemplate edits itself: the webhook leaves them to it (the native path is used)"),
        "{text}"
    );
}
