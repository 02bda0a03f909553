//! What monitoring reads: the catalogue of metric families the binary exports (the chart's
//! dashboard and alerts are checked against it, README.md lists it), the served certificate's
//! expiry through the real binary, and the convergence journal gauges through the controller.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use prometheus_client::registry::Registry;
use serde_json::json;
use stateful_admission::certs::{self, x509};
use stateful_admission::controller::Features;
use stateful_admission::names;
use stateful_admission::server::metrics::Metrics;

use crate::common::fixture_path;
use crate::serve_tls::Served;
use crate::support::controller::{
    CONTROLLER_NAMESPACE, RunningController, config, eventually, no_features,
};
use crate::support::fake_apiserver::FakeApiServer;

/// Read by the chart check (charts/stateful-admission/tests/test_monitoring.py).
const CATALOGUE: &str = "charts/stateful-admission/tests/metrics.txt";
const REGENERATE: &str = "UPDATE_METRIC_CATALOGUE=1 cargo test --locked --test it metric_catalogue";

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Every family `serve` can register (the webhook's, the self-managed certificates', the
/// controller's) as `(name, type)`. prometheus-client leaves a family without samples out of
/// the exposition (a labelled family before its first child), so the names come from the
/// registry's own listing; the type from the exposition where the family has samples, else
/// from the declaration of the field it is registered from.
fn families() -> BTreeSet<(String, String)> {
    let mut registry = Registry::with_prefix("stateful_admission");
    Metrics::register(&mut registry);
    // As `serve` registers the view's staleness beside the webhook's metrics.
    stateful_admission::cluster::ClusterView::empty().register_metrics(&mut registry);
    certs::self_managed::Metrics::register(&mut registry);
    // The capability prober, on every replica.
    let _ = stateful_admission::capabilities::run::Prober::new(
        stateful_admission::capabilities::run::Settings::default(),
        &mut registry,
        Default::default(),
    );
    // Every feature on, as `serve` runs by default.
    let _ = stateful_admission::controller::Controller::new(
        stateful_admission::controller::ControllerConfig::default(),
        &mut registry,
        Default::default(),
    );
    stateful_admission::write_limit::WriteLimit::new(
        stateful_admission::write_limit::DEFAULT_QPS,
        stateful_admission::write_limit::DEFAULT_BURST,
    )
    .expect("the default limit")
    .register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    let exposed: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect();
    let listing = format!("{registry:?}");
    let registered = listing
        .split("Descriptor { name: \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|name| format!("stateful_admission_{name}"));
    let sources = rust_sources(&repo_file("src"));
    registered
        .chain(exposed.keys().cloned())
        .map(|name| {
            let kind = exposed.get(&name).cloned().unwrap_or_else(|| {
                let short = name.trim_start_matches("stateful_admission_");
                declared_kind(&sources, short).unwrap_or_else(|| panic!("no type found for {name}"))
            });
            (name, kind)
        })
        .collect()
}

fn rust_sources(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(std::fs::read_to_string(&path).expect("source"));
        }
    }
    out
}

/// `registry.register("name", "help", owner.field.clone())` with `field: Family<_, Kind>` (or
/// `field: Kind`) declared in the same file.
fn declared_kind(sources: &[String], name: &str) -> Option<String> {
    sources.iter().find_map(|text| {
        let quoted = format!("\"{name}\",");
        let at = text
            .match_indices(&quoted)
            .map(|(at, _)| at)
            .find(|&at| text[..at].trim_end().ends_with("register("))?;
        let rest = &text[at..];
        let call = &rest[..rest.find(".clone()")?];
        let field = call.rsplit('.').next()?.trim();
        // The field's declaration, whatever its visibility.
        let ty = text.lines().find(|line| {
            let line = line.trim_start();
            let line = line
                .strip_prefix("pub(super) ")
                .or_else(|| line.strip_prefix("pub(crate) "))
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            line.starts_with(&format!("{field}: "))
        })?;
        ["Histogram", "Counter", "Gauge"]
            .into_iter()
            .find(|kind| ty.contains(kind))
            .map(str::to_lowercase)
    })
}

/// The name a query uses: counters are exposed with `_total`.
fn sample_name(name: &str, kind: &str) -> String {
    if kind == "counter" {
        format!("{name}_total")
    } else {
        name.to_owned()
    }
}

#[test]
fn metric_catalogue_lists_every_family_the_binary_exports() {
    let families = families();
    let path = repo_file(CATALOGUE);
    if std::env::var_os("UPDATE_METRIC_CATALOGUE").is_some() {
        let mut text = format!(
            "# Every metric family `stateful-admission serve` exports, with its type. The chart\n\
             # check validates the dashboard and the alerts against it; a test keeps it equal to\n\
             # the code. Regenerate: {REGENERATE}\n"
        );
        for (name, kind) in &families {
            text.push_str(&format!("{name} {kind}\n"));
        }
        std::fs::write(&path, text).expect("write the catalogue");
    }
    let listed: BTreeSet<(String, String)> = std::fs::read_to_string(&path)
        .expect("the catalogue exists")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.to_owned()))
        .collect();
    assert_eq!(
        listed, families,
        "{CATALOGUE} differs from the metrics the code registers; regenerate: {REGENERATE}"
    );
    for expected in [
        (
            "stateful_admission_serving_certificate_expiry_timestamp_seconds",
            "gauge",
        ),
        (
            "stateful_admission_statefulsets_past_progress_deadline",
            "gauge",
        ),
        ("stateful_admission_convergence_journals_open", "gauge"),
        (
            "stateful_admission_convergence_journal_oldest_timestamp_seconds",
            "gauge",
        ),
        ("stateful_admission_controller_leader", "gauge"),
        (
            "stateful_admission_admission_request_duration_seconds",
            "histogram",
        ),
    ] {
        assert!(
            families.contains(&(expected.0.to_owned(), expected.1.to_owned())),
            "{expected:?}"
        );
    }
}

#[test]
fn readme_metrics_section_names_every_metric() {
    let readme = std::fs::read_to_string(repo_file("README.md")).expect("README.md");
    let section = readme
        .split("\n## Metrics\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README.md has a Metrics section");
    let missing: Vec<String> = families()
        .iter()
        .map(|(name, kind)| sample_name(name.trim_start_matches("stateful_admission_"), kind))
        .filter(|name| !section.contains(&format!("`{name}`")))
        .collect();
    assert!(missing.is_empty(), "README.md Metrics lacks {missing:?}");
}

fn scrape(served: &Served) -> String {
    let url = served.probe_url("/metrics");
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(async move { reqwest::get(&url).await?.text().await })
    })
    .join()
    .expect("scrape thread")
    .expect("metrics")
}

fn served_expiry(served: &Served) -> Option<i64> {
    scrape(served).lines().find_map(|l| {
        l.strip_prefix("stateful_admission_serving_certificate_expiry_timestamp_seconds ")
            .and_then(|v| v.parse().ok())
    })
}

fn not_after(pem: &str) -> i64 {
    x509::parse_pem(pem.as_bytes())
        .expect("certificate")
        .not_after
        .unix_timestamp()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_served_certificate_expiry_is_reported_for_files_and_follows_a_new_pair() {
    let names = vec!["localhost".to_owned()];
    let first = certs::generate("first", &names, 30, 2).expect("certs");
    let second = certs::generate("second", &names, 30, 20).expect("certs");
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = first.write(dir.path(), false).expect("write");
    let served = Served::start(&[
        "--tls-cert",
        paths.cert.to_str().expect("path"),
        "--tls-key",
        paths.key.to_str().expect("path"),
        "--cert-poll-interval",
        "1s",
        "--state",
        fixture_path("state/empty.yaml").to_str().expect("path"),
    ]);
    assert_eq!(served_expiry(&served), Some(not_after(&first.cert_pem)));

    // cert-manager renews: the Secret volume shows the new pair, the listener reloads it.
    std::fs::write(&paths.key, &second.key_pem).expect("key");
    std::fs::write(&paths.cert, &second.cert_pem).expect("cert");
    let renewed = eventually(Duration::from_secs(10), || {
        served_expiry(&served) == Some(not_after(&second.cert_pem))
    })
    .await;
    assert!(renewed, "expiry now {:?}", served_expiry(&served));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_served_certificate_expiry_is_reported_for_a_self_signed_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let served = Served::start(&[
        "--self-signed",
        "--self-signed-dir",
        dir.path().to_str().expect("path"),
        "--state",
        fixture_path("state/empty.yaml").to_str().expect("path"),
    ]);
    let cert = std::fs::read_to_string(dir.path().join("tls.crt")).expect("tls.crt");
    assert_eq!(served_expiry(&served), Some(not_after(&cert)));
}

fn journal_gauges(controller: &RunningController) -> (Option<i64>, Option<i64>) {
    let metrics = controller.metrics();
    let value = |name: &str| {
        metrics.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|v| v.strip_prefix(' '))
                .and_then(|v| v.parse().ok())
        })
    };
    (
        value("convergence_journals_open"),
        value("convergence_journal_oldest_timestamp_seconds"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_convergence_journal_is_reported_with_its_creation_time_until_it_closes() {
    let api = FakeApiServer::start().await;
    // A journal nobody can finish (it holds no object): kept for a human, and old.
    let created = "2026-01-01T00:00:00Z";
    api.put_object(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "sa-journal.db.web", "namespace": CONTROLLER_NAMESPACE,
            "creationTimestamp": created,
            "labels": {names::JOURNAL_LABEL: "true"},
            "annotations": {names::JOURNAL_SET_NAMESPACE: "db", names::JOURNAL_SET_NAME: "web"},
        },
    }));
    let mut settings = config(
        "journals",
        Features {
            claim_rollout: true,
            converge: true,
            ..no_features()
        },
    );
    settings.converge_poll = Duration::from_millis(100);
    let controller = RunningController::start(&api, settings);
    let created: jiff::Timestamp = created.parse().expect("time");
    let open = eventually(Duration::from_secs(15), || {
        journal_gauges(&controller) == (Some(1), Some(created.as_second()))
    })
    .await;
    assert!(open, "{:?}", journal_gauges(&controller));
    assert!(
        api.get::<ConfigMap>(CONTROLLER_NAMESPACE, "sa-journal.db.web")
            .is_some(),
        "an unreadable journal is kept"
    );

    api.remove::<ConfigMap>(CONTROLLER_NAMESPACE, "sa-journal.db.web");
    let closed = eventually(Duration::from_secs(15), || {
        journal_gauges(&controller) == (Some(0), Some(0))
    })
    .await;
    assert!(closed, "{:?}", journal_gauges(&controller));
    controller.stop().await;
}
