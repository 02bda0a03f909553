//! Self-managed certificates, the acting part: read the Secret, let [`plan_rotation`] decide,
//! write the Secret (optimistically: a replica that loses the race re-reads the winner's),
//! put the trust bundle into our own webhook configurations, and place the serving pair where
//! the TLS reloader watches. Every replica runs this; all converge on the one Secret.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch};
use kube::{Api, Client};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::CertPaths;
use super::rotation::{self, CertSecret, Lifetimes, TLS_CERT_KEY, TLS_KEY_KEY, plan_rotation};
use super::x509;
use crate::field_manager;

/// Where the certificates live and whom to tell about the CA.
#[derive(Debug, Clone)]
pub struct SelfManagedConfig {
    pub secret: String,
    /// Namespace of the Secret and of the Service.
    pub namespace: String,
    /// Service the apiserver calls; the serving certificate carries its DNS names.
    pub service: String,
    pub mutating_webhook: Option<String>,
    pub validating_webhook: Option<String>,
    /// Directory (an emptyDir) for `tls.crt` and `tls.key`.
    pub dir: PathBuf,
    /// How often to re-read the Secret, which is also how soon a replica follows another's
    /// renewal.
    pub check_interval: Duration,
    pub lifetimes: Lifetimes,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    /// `ca` or `serving`.
    certificate: &'static str,
}

/// The actor's metric families.
#[derive(Debug, Default)]
pub struct Metrics {
    expiry: Family<CertificateLabels, Gauge>,
    rotations: Family<CertificateLabels, Counter>,
    failures: Counter,
}

impl Metrics {
    /// Creates the families and registers them (names prefixed by the registry's prefix).
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When the self-managed certificate in use expires (ca: the signing CA, serving: the webhook's), Unix time",
            metrics.expiry.clone(),
        );
        registry.register(
            "certificate_rotations",
            "Self-managed certificates this replica issued and stored, by certificate",
            metrics.rotations.clone(),
        );
        registry.register(
            "certificate_rotation_failures",
            "Self-managed certificate passes that failed and will be retried",
            metrics.failures.clone(),
        );
        Arc::new(metrics)
    }

    fn rotated(&self, certificate: &'static str) {
        self.rotations
            .get_or_create(&CertificateLabels { certificate })
            .inc();
    }

    fn in_use(&self, certificate: &'static str, pem: Option<&[u8]>) {
        if let Some(info) = pem.and_then(|pem| x509::parse_pem(pem).ok()) {
            self.expiry
                .get_or_create(&CertificateLabels { certificate })
                .set(info.not_after.unix_timestamp());
        }
    }
}

const CONFLICT_RETRIES: usize = 5;
const RETRY_SOON: Duration = Duration::from_secs(5);

/// Brings the Secret, the webhook configurations and the local files up to date once, then
/// keeps them so in the background until `stop`. Returns the paths to serve from.
pub async fn start(
    client: Client,
    config: SelfManagedConfig,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<CertPaths> {
    let paths = CertPaths {
        ca_cert: config.dir.join("ca.crt"),
        cert: config.dir.join(TLS_CERT_KEY),
        key: config.dir.join(TLS_KEY_KEY),
    };
    let first = reconcile(&client, &config, &metrics)
        .await
        .context("cannot set up the self-managed certificate")?;
    let mut complete = first;
    tokio::spawn(async move {
        loop {
            // A webhook configuration not created yet (Helm applies it after the Deployment)
            // is retried soon rather than at the next regular check.
            let wait = if complete {
                config.check_interval
            } else {
                config.check_interval.min(RETRY_SOON)
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            match reconcile(&client, &config, &metrics).await {
                Ok(done) => complete = done,
                Err(error) => {
                    complete = false;
                    metrics.failures.inc();
                    // The current certificate stays served; a third of its lifetime is left.
                    tracing::error!(
                        error = format!("{error:#}"),
                        "certificate rotation failed; will retry"
                    );
                }
            }
        }
    });
    Ok(paths)
}

/// One pass: Secret, then webhook configurations, then files — so that the new CA is trusted
/// before this replica serves a certificate it signed. Returns false when a named webhook
/// configuration does not exist (yet).
pub async fn reconcile(
    client: &Client,
    config: &SelfManagedConfig,
    metrics: &Metrics,
) -> anyhow::Result<bool> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let names = super::service_dns_names(&config.service, &config.namespace);
    let mut attempt = 0;
    let stored = loop {
        attempt += 1;
        let existing = secrets.get_opt(&config.secret).await.with_context(|| {
            format!("cannot read Secret {}/{}", config.namespace, config.secret)
        })?;
        let current = existing
            .as_ref()
            .and_then(|s| s.data.as_ref())
            .map(|d| d.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
            .map(|d: BTreeMap<String, Vec<u8>>| CertSecret::from_data(&d))
            .unwrap_or_default();
        let now = OffsetDateTime::now_utc();
        let plan = plan_rotation(now, &current, &names, config.lifetimes);
        if plan.is_noop() {
            break current;
        }
        tracing::info!(
            ca = plan.issue_ca.as_ref().map(ToString::to_string),
            leaf = plan.issue_leaf.as_ref().map(ToString::to_string),
            bundle_outdated = plan.bundle_outdated,
            next_check = %plan.next_check,
            "rotating the webhook certificate"
        );
        let next = rotation::execute(&plan, &current, &names, config.lifetimes, now)?;
        match write_secret(&secrets, config, existing, &next).await {
            Ok(()) => {
                if plan.issue_ca.is_some() {
                    metrics.rotated("ca");
                }
                if plan.issue_leaf.is_some() {
                    metrics.rotated("serving");
                }
                break next;
            }
            Err(kube::Error::Api(status))
                if (status.is_conflict() || status.is_already_exists())
                    && attempt < CONFLICT_RETRIES =>
            {
                tracing::debug!("another replica wrote the certificate Secret first; re-reading");
            }
            Err(error) => {
                return Err(error).with_context(|| {
                    format!("cannot write Secret {}/{}", config.namespace, config.secret)
                });
            }
        }
    };
    let bundle = stored.ca_bundle.clone().unwrap_or_default();
    let mut complete = true;
    if let Some(name) = &config.mutating_webhook {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        complete &= ensure_ca_bundle(&api, name, &bundle).await?;
    }
    if let Some(name) = &config.validating_webhook {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        complete &= ensure_ca_bundle(&api, name, &bundle).await?;
    }
    write_files(&config.dir, &stored)?;
    metrics.in_use("ca", stored.ca_cert.as_deref());
    metrics.in_use("serving", stored.tls_cert.as_deref());
    Ok(complete)
}

async fn write_secret(
    secrets: &Api<Secret>,
    config: &SelfManagedConfig,
    existing: Option<Secret>,
    next: &CertSecret,
) -> Result<(), kube::Error> {
    let data = next
        .to_data()
        .into_iter()
        .map(|(k, v)| (k, ByteString(v)))
        .collect();
    match existing {
        // resourceVersion rides along, so a concurrent writer makes this fail with 409.
        Some(mut secret) => {
            secret.data = Some(data);
            secret.metadata.managed_fields = None;
            secrets
                .replace(&config.secret, &field_manager::post(), &secret)
                .await
                .map(drop)
        }
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(config.secret.clone()),
                    namespace: Some(config.namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_owned(),
                        "stateful-admission".to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                type_: Some("kubernetes.io/tls".to_owned()),
                data: Some(data),
                ..Secret::default()
            };
            secrets
                .create(&field_manager::post(), &secret)
                .await
                .map(drop)
        }
    }
}

/// Sets `clientConfig.caBundle` on each webhook of the named configuration that lacks it;
/// no write when all carry it. A strategic merge on `webhooks` (merge key `name`) touches
/// nothing else. Returns false when the configuration does not exist.
async fn ensure_ca_bundle<K>(api: &Api<K>, name: &str, bundle: &[u8]) -> anyhow::Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let Some(object) = api
        .get_opt(name)
        .await
        .with_context(|| format!("cannot read webhook configuration {name}"))?
    else {
        tracing::warn!(
            configuration = name,
            "webhook configuration not found; caBundle not set yet"
        );
        return Ok(false);
    };
    let value = serde_json::to_value(&object)?;
    let patch = ca_bundle_patch(&value, bundle);
    if let Some(patch) = patch {
        api.patch(name, &field_manager::patch(), &Patch::Strategic(patch))
            .await
            .with_context(|| format!("cannot patch caBundle into {name}"))?;
        tracing::info!(configuration = name, "caBundle updated");
    }
    Ok(true)
}

/// The strategic-merge patch that gives every webhook of `configuration` the bundle, or none
/// when they all have it.
pub fn ca_bundle_patch(configuration: &Value, bundle: &[u8]) -> Option<Value> {
    let encoded = serde_json::to_value(ByteString(bundle.to_vec())).ok()?;
    let stale: Vec<Value> = configuration
        .get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|webhook| webhook.pointer("/clientConfig/caBundle") != Some(&encoded))
        .filter_map(|webhook| webhook.get("name").cloned())
        .map(|name| json!({"name": name, "clientConfig": {"caBundle": encoded}}))
        .collect();
    (!stale.is_empty()).then(|| json!({ "webhooks": stale }))
}

/// Places `ca.crt`, `tls.crt` and `tls.key` in `dir` the way the kubelet updates a Secret
/// volume: a new versioned directory, then an atomic rename of the `..data` symlink, so the
/// reloader never sees a certificate without its key. No change when the content is the same.
fn write_files(dir: &Path, secret: &CertSecret) -> anyhow::Result<()> {
    let files = [
        ("ca.crt", secret.ca_bundle.as_deref(), false),
        (TLS_CERT_KEY, secret.tls_cert.as_deref(), false),
        (TLS_KEY_KEY, secret.tls_key.as_deref(), true),
    ];
    let unchanged = files
        .iter()
        .all(|(name, content, _)| std::fs::read(dir.join(name)).ok().as_deref() == *content);
    if unchanged {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let stamp = OffsetDateTime::now_utc().unix_timestamp_nanos();
    let version = format!("..{stamp}");
    let version_dir = dir.join(&version);
    std::fs::create_dir_all(&version_dir)?;
    for (name, content, secret) in files {
        super::write_file(
            &version_dir.join(name),
            &String::from_utf8_lossy(content.unwrap_or_default()),
            secret,
        )?;
    }
    swap_data_link(dir, &version)?;
    // Old versions are no longer referenced.
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("..") && name != "..data" && name != version {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Ok(())
}

#[cfg(unix)]
fn swap_data_link(dir: &Path, version: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::symlink;
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(version, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    for name in ["ca.crt", TLS_CERT_KEY, TLS_KEY_KEY] {
        let link = dir.join(name);
        let target = PathBuf::from(format!("..data/{name}"));
        // A regular file left there (e.g. by `certs generate`) would shadow every swap.
        if std::fs::read_link(&link).ok() != Some(target.clone()) {
            let tmp = dir.join(format!("..{name}_tmp"));
            let _ = std::fs::remove_file(&tmp);
            symlink(&target, &tmp)?;
            std::fs::rename(&tmp, &link)?;
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn swap_data_link(dir: &Path, version: &str) -> anyhow::Result<()> {
    for name in ["ca.crt", TLS_CERT_KEY, TLS_KEY_KEY] {
        std::fs::copy(dir.join(version).join(name), dir.join(name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configuration(bundles: &[Option<&[u8]>]) -> Value {
        let webhooks: Vec<Value> = bundles
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut client = json!({"service": {"name": "svc", "namespace": "ns"}});
                if let Some(b) = b {
                    client["caBundle"] =
                        serde_json::to_value(ByteString(b.to_vec())).unwrap_or_default();
                }
                json!({"name": format!("w{i}.stateful-admission.io"), "clientConfig": client})
            })
            .collect();
        json!({"metadata": {"name": "cfg"}, "webhooks": webhooks})
    }

    #[test]
    fn ca_bundle_patch_names_only_stale_webhooks() {
        let bundle: &[u8] = b"NEW";
        let cases: Vec<(&str, Value, Option<Vec<&str>>)> = vec![
            (
                "all current: no write",
                configuration(&[Some(bundle), Some(bundle)]),
                None,
            ),
            (
                "missing bundle",
                configuration(&[None, Some(bundle)]),
                Some(vec!["w0.stateful-admission.io"]),
            ),
            (
                "old bundle",
                configuration(&[Some(b"OLD"), Some(b"OLD")]),
                Some(vec!["w0.stateful-admission.io", "w1.stateful-admission.io"]),
            ),
            ("no webhooks", json!({"metadata": {}}), None),
        ];
        for (name, cfg, want) in cases {
            let patch = ca_bundle_patch(&cfg, bundle);
            let got: Option<Vec<String>> = patch.as_ref().map(|p| {
                p["webhooks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|w| w["name"].as_str().unwrap_or_default().to_owned())
                    .collect()
            });
            assert_eq!(
                got,
                want.map(|v| v.into_iter().map(String::from).collect()),
                "{name}"
            );
            if let Some(p) = patch {
                assert_eq!(
                    p["webhooks"][0]["clientConfig"]["caBundle"], "TkVX",
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn files_swap_atomically_and_only_on_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = CertSecret {
            ca_bundle: Some(b"CA1".to_vec()),
            tls_cert: Some(b"CERT1".to_vec()),
            tls_key: Some(b"KEY1".to_vec()),
            ..CertSecret::default()
        };
        write_files(dir.path(), &first).expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("tls.crt")).expect("read"),
            b"CERT1"
        );
        let link = std::fs::read_link(dir.path().join("..data")).expect("link");
        write_files(dir.path(), &first).expect("rewrite");
        assert_eq!(
            std::fs::read_link(dir.path().join("..data")).expect("link"),
            link,
            "no change, no swap"
        );
        let second = CertSecret {
            tls_cert: Some(b"CERT2".to_vec()),
            tls_key: Some(b"KEY2".to_vec()),
            ..first
        };
        write_files(dir.path(), &second).expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("tls.crt")).expect("read"),
            b"CERT2"
        );
        assert_eq!(
            std::fs::read(dir.path().join("tls.key")).expect("read"),
            b"KEY2"
        );
        let versions = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("..") && n != "..data"
            })
            .count();
        assert_eq!(versions, 1, "old versions are removed");
    }

    /// Files left in the directory by something else are replaced by the links, so that
    /// the swapped content is what gets served, and a second pass changes nothing.
    #[cfg(unix)]
    #[test]
    fn stale_regular_files_are_replaced_by_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["ca.crt", TLS_CERT_KEY, TLS_KEY_KEY] {
            std::fs::write(dir.path().join(name), "STALE").expect("write");
        }
        let secret = CertSecret {
            ca_bundle: Some(b"CA1".to_vec()),
            tls_cert: Some(b"CERT1".to_vec()),
            tls_key: Some(b"KEY1".to_vec()),
            ..CertSecret::default()
        };
        write_files(dir.path(), &secret).expect("write");
        for (name, content) in [
            ("ca.crt", "CA1"),
            (TLS_CERT_KEY, "CERT1"),
            (TLS_KEY_KEY, "KEY1"),
        ] {
            assert_eq!(
                std::fs::read_to_string(dir.path().join(name)).expect("read"),
                content,
                "{name}"
            );
            assert_eq!(
                std::fs::read_link(dir.path().join(name)).expect("a link"),
                PathBuf::from(format!("..data/{name}"))
            );
        }
        let link = std::fs::read_link(dir.path().join("..data")).expect("link");
        write_files(dir.path(), &secret).expect("rewrite");
        assert_eq!(
            std::fs::read_link(dir.path().join("..data")).expect("link"),
            link,
            "in place: no further swap"
        );
    }
}
