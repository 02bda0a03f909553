//! The thin shell of `check`: the API calls, and nothing to judge. Every request is a read,
//! a server-side dry run (`dryRun=All`, never stored) or an access review.

use std::sync::Arc;

use axum::http;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::judge::{self, Access, Features, PathProof, ServingCert, TemplateEdit};
use super::{Release, Report};
use crate::{field_manager, names};
use k8s_openapi::api::apps::v1::StatefulSet;

/// Name of the objects the dry runs would create (never stored).
pub const PROBE_NAME: &str = "stateful-admission-check";

/// Runs every check against the cluster `config` points at.
pub async fn run(config: kube::Config, release: &Release) -> Report {
    let mut checks = Vec::new();
    let client = match kube::Client::try_from(config.clone()) {
        Ok(client) => client,
        Err(e) => {
            checks.push(super::Check::failed(
                super::CLUSTER_CONNECTION,
                format!("cannot build a client: {e}"),
                format!(
                    "check the kubeconfig and --context, see {}",
                    super::runbook("check-cannot-reach-the-cluster")
                ),
            ));
            return Report { checks };
        }
    };

    let version = client
        .apiserver_version()
        .await
        .map(|info| info.git_version)
        .map_err(|e| e.to_string());
    if let Err(why) = &version {
        checks.push(super::Check::failed(
            super::CLUSTER_CONNECTION,
            format!("the apiserver did not answer /version: {why}"),
            format!(
                "check the kubeconfig, --context and the network path to the apiserver, see {}",
                super::runbook("check-cannot-reach-the-cluster")
            ),
        ));
        return Report { checks };
    }

    // The dry runs first: their result stands in for the certificate check when the Secret
    // cannot be read.
    let labels = Api::<Namespace>::all(client.clone())
        .get_opt(&release.probe_namespace)
        .await
        .ok()
        .flatten()
        .and_then(|ns| ns.metadata.labels);
    let (dry_runs, path) = match judge::probe_namespace_excluded(release, labels.as_ref()) {
        Some(skipped) => (vec![skipped], PathProof::NotReached),
        None => dry_runs(&client, release).await,
    };

    let cert = serving_cert(&client, release).await;
    let now = rustls::pki_types::UnixTime::now();
    let mutating = get_value(
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        &release.fullname,
    )
    .await;
    let validating = get_value(
        Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        &release.fullname,
    )
    .await;
    let served = served_at_urls([&mutating, &validating]).await;
    for (kind, config) in [("mutating", mutating), ("validating", validating)] {
        match config {
            Ok(config) => checks.push(judge::webhook_configuration(
                kind,
                config.as_ref(),
                release,
                &cert,
                &served,
                path,
                now,
            )),
            Err(why) => checks.push(super::Check::failed(
                format!("{kind} webhook configuration"),
                format!("cannot read it: {why}"),
                "run check as a user who may read webhook configurations",
            )),
        }
    }
    checks.extend(dry_runs);

    let features = deployment_features(&client, release).await;
    if features.controller {
        let lease_name = features.lease.as_deref().unwrap_or(&release.lease);
        let lease = get_value(
            Api::<Lease>::namespaced(client.clone(), &release.namespace),
            lease_name,
        )
        .await;
        checks.push(match lease {
            Ok(lease) => judge::lease(lease.as_ref(), lease_name, jiff::Timestamp::now()),
            Err(why) => super::Check::failed(
                "controller lease",
                format!("cannot read Lease {lease_name:?}: {why}"),
                "run check as a user who may read Leases in the release namespace",
            ),
        });
    }
    let user = match &features.service_account {
        Some(name) => format!("system:serviceaccount:{}:{name}", release.namespace),
        None => release.service_account_user(),
    };
    let answers = access_reviews(config, &user, &features.needs(release), &release.namespace).await;
    let readiness = replica_readiness(&client, release, &features).await;
    // What the cluster does, learned here as the replicas learn it (dry runs in the release
    // namespace, which the webhooks exclude); what needs an existing claim comes from them.
    let own = crate::capabilities::probe::probe(
        &client,
        &release.namespace,
        &crate::capabilities::probe::Candidates::default(),
        &[],
    )
    .await;
    let (capability_checks, cluster) = judge::capabilities(&own, &readiness);
    checks.extend(judge::replicas(&readiness));
    checks.push(judge::permissions(&user, &answers));
    checks.extend(capability_checks);
    checks.push(judge::version(&version, &features, &cluster));
    Report { checks }
}

/// The dry-run StatefulSet create, template edit and claim create in the probe namespace,
/// and whether any of them showed the webhook's answer.
async fn dry_runs(client: &kube::Client, release: &Release) -> (Vec<super::Check>, PathProof) {
    let namespace = &release.probe_namespace;
    let statefulset = dry_run_create(
        client,
        &format!("/apis/apps/v1/namespaces/{namespace}/statefulsets"),
        &probe_statefulset(namespace),
    )
    .await
    .map(|(_, warnings)| warnings);
    let (statefulset_check, created) = judge::statefulset_dry_run(&statefulset);
    let edit = template_edit(client, namespace).await;
    let (edit_check, edited) = judge::template_edit_dry_run(namespace, &edit);
    let claim = dry_run_create(
        client,
        &format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims"),
        &probe_claim(namespace),
    )
    .await
    .map(|(object, _)| object);
    let default_class = default_class(client, namespace).await;
    let path = if created == PathProof::Reached || edited == PathProof::Reached {
        PathProof::Reached
    } else {
        PathProof::NotReached
    };
    let checks = vec![
        statefulset_check,
        edit_check,
        judge::claim_dry_run(&claim, default_class.as_deref()),
    ];
    (checks, path)
}

async fn get_value<K>(api: Api<K>, name: &str) -> Result<Option<Value>, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(Some(object)) => serde_json::to_value(object)
            .map(Some)
            .map_err(|e| e.to_string()),
        Ok(None) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// `tls.crt` of the first of the release's certificate Secrets that exists.
/// What each webhook URL of the configurations (`clientConfig.url`) serves: a TLS handshake
/// as the apiserver makes, recording the chain for [`judge::webhook_configuration`] to verify.
async fn served_at_urls(configs: [&Result<Option<Value>, String>; 2]) -> judge::Served {
    let mut served = judge::Served::new();
    let urls = configs
        .into_iter()
        .filter_map(|c| c.as_ref().ok().and_then(Option::as_ref))
        .filter_map(|c| c.get("webhooks").and_then(Value::as_array))
        .flatten()
        .filter_map(|w| w.pointer("/clientConfig/url").and_then(Value::as_str));
    for url in urls {
        let Ok((authority, host, _)) = judge::url_endpoint(url) else {
            continue;
        };
        if let std::collections::btree_map::Entry::Vacant(entry) = served.entry(authority) {
            let chain = served_chain(entry.key(), &host).await;
            entry.insert(chain);
        }
    }
    served
}

/// The certificate chain served at `authority` for `host` (DER, leaf first), unverified.
async fn served_chain(authority: &str, host: &str) -> Result<Vec<Vec<u8>>, String> {
    use rustls::pki_types::ServerName;
    let recorder = Arc::new(ChainRecorder::default());
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .dangerous()
    .with_custom_certificate_verifier(recorder.clone())
    .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let connect = async {
        let tcp = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake failed: {e}"))
    };
    match tokio::time::timeout(std::time::Duration::from_secs(5), connect).await {
        Err(_) => return Err("no answer within 5 s".to_owned()),
        Ok(Err(why)) => return Err(why),
        Ok(Ok(_)) => {}
    }
    let chain = recorder.chain.lock().map_err(|e| e.to_string())?.clone();
    if chain.is_empty() {
        return Err("no certificate served".to_owned());
    }
    Ok(chain)
}

/// A verifier that accepts any chain and keeps it (DER, leaf first), so that the verdict stays with the
/// pure check (which verifies it against each webhook's own caBundle). The handshake's
/// signatures are still checked, so the chain is the one the peer holds the key of.
#[derive(Debug, Default)]
struct ChainRecorder {
    chain: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl rustls::client::danger::ServerCertVerifier for ChainRecorder {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if let Ok(mut chain) = self.chain.lock() {
            *chain = std::iter::once(end_entity)
                .chain(intermediates)
                .map(|c| c.as_ref().to_vec())
                .collect();
        }
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

async fn serving_cert(client: &kube::Client, release: &Release) -> ServingCert {
    let api = Api::<Secret>::namespaced(client.clone(), &release.namespace);
    let mut why = Vec::new();
    for name in &release.secrets {
        match api.get_opt(name).await {
            Ok(Some(secret)) => {
                let crt = secret.data.as_ref().and_then(|d| d.get("tls.crt"));
                match crt.map(|b| String::from_utf8_lossy(&b.0).into_owned()) {
                    Some(chain_pem) => {
                        return ServingCert::Read {
                            secret: name.clone(),
                            chain_pem,
                        };
                    }
                    None => why.push(format!("Secret {name:?} has no tls.crt")),
                }
            }
            Ok(None) => why.push(format!("no Secret {name:?}")),
            Err(e) => why.push(format!("Secret {name:?}: {e}")),
        }
    }
    ServingCert::Unreadable(why.join("; "))
}

/// The default class a claim in `namespace` gets: the namespace's annotation, else the
/// cluster default; `None` when there is none or it cannot be read.
async fn default_class(client: &kube::Client, namespace: &str) -> Option<String> {
    let ns = Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await;
    if let Some(class) = ns.ok().flatten().and_then(|ns| {
        ns.metadata
            .annotations
            .and_then(|a| a.get(names::DEFAULT_STORAGE_CLASS).cloned())
    }) {
        return Some(class);
    }
    let classes = Api::<StorageClass>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    classes.items.into_iter().find_map(|class| {
        let annotations = class.metadata.annotations.unwrap_or_default();
        (annotations
            .get("storageclass.kubernetes.io/is-default-class")
            .map(String::as_str)
            == Some("true"))
        .then(|| class.metadata.name.unwrap_or_default())
    })
}

/// The switches the release's Deployment runs with; the defaults when it cannot be read.
async fn deployment_features(client: &kube::Client, release: &Release) -> Features {
    let deployment = Api::<Deployment>::namespaced(client.clone(), &release.namespace)
        .get_opt(&release.fullname)
        .await
        .ok()
        .flatten();
    let Some(spec) = deployment.map(|d| d.spec) else {
        return Features::default();
    };
    let deployment_selector = spec.selector.match_labels.clone();
    let Some(pod) = spec.template.spec else {
        return Features::default();
    };
    let service_account = pod.service_account_name.clone().filter(|n| !n.is_empty());
    let selector = deployment_selector.map(|labels| {
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    });
    let args: Vec<String> = pod
        .containers
        .into_iter()
        .flat_map(|c| c.args.unwrap_or_default())
        .collect();
    Features {
        service_account,
        selector,
        ..Features::from_args(&args)
    }
}

/// Each running replica's `/readyz?verbose`, through the apiserver's pod proxy.
async fn replica_readiness(
    client: &kube::Client,
    release: &Release,
    features: &Features,
) -> Vec<(String, Result<String, String>)> {
    let Some(selector) = &features.selector else {
        return Vec::new();
    };
    let pods = match Api::<k8s_openapi::api::core::v1::Pod>::namespaced(
        client.clone(),
        &release.namespace,
    )
    .list(&ListParams::default().labels(selector))
    .await
    {
        Ok(pods) => pods.items,
        Err(_) => return Vec::new(),
    };
    let mut answers = Vec::new();
    for pod in pods {
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let Some(name) = pod.metadata.name.filter(|_| running) else {
            continue;
        };
        let path = format!(
            "/api/v1/namespaces/{}/pods/{name}:{}/proxy/readyz?verbose",
            release.namespace, features.probe_port
        );
        let answer = match http::Request::get(path).body(Vec::new()) {
            Ok(request) => match client.request_text(request).await {
                Ok(text) => Ok(text),
                // A replica not ready answers 503 with the same lines.
                Err(kube::Error::Api(status)) if status.code == 503 => Ok(status.message),
                Err(error) => Err(error.to_string()),
            },
            Err(error) => Err(error.to_string()),
        };
        answers.push((name, answer));
    }
    answers
}

/// One SelfSubjectAccessReview per need, asked as `user` by impersonation.
async fn access_reviews(
    mut config: kube::Config,
    user: &str,
    needs: &[Access],
    namespace: &str,
) -> Result<Vec<(Access, bool)>, String> {
    config.auth_info.impersonate = Some(user.to_owned());
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let api = Api::<SelfSubjectAccessReview>::all(client);
    let mut answers = Vec::new();
    for need in needs {
        let (resource, subresource) = match need.resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_owned())),
            None => (need.resource, None),
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(need.verb.to_owned()),
                    group: Some(need.group.to_owned()),
                    resource: Some(resource.to_owned()),
                    subresource,
                    namespace: need.in_release_namespace.then(|| namespace.to_owned()),
                    name: need.name.clone(),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let answer = api
            .create(&field_manager::post(), &review)
            .await
            .map_err(|e| e.to_string())?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        answers.push((need.clone(), allowed));
    }
    Ok(answers)
}

/// A server-side dry-run create: the object as it would be stored, and the warnings, or the
/// apiserver's message.
async fn dry_run_create(
    client: &kube::Client,
    url_path: &str,
    object: &Value,
) -> Result<(Value, Vec<String>), String> {
    dry_run(client, url_path, None, object).await
}

/// A server-side dry-run create (`name` none) or replace of the object `name`.
async fn dry_run(
    client: &kube::Client,
    url_path: &str,
    name: Option<&str>,
    object: &Value,
) -> Result<(Value, Vec<String>), String> {
    let body = serde_json::to_vec(object).map_err(|e| e.to_string())?;
    let request = kube::core::Request::new(url_path);
    let params = field_manager::dry_run_post();
    let request = match name {
        None => request.create(&params, body),
        Some(name) => request.replace(name, &params, body),
    }
    .map_err(|e| e.to_string())?;
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let warnings = response
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(warning_text)
        .collect();
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .map_err(|e| e.to_string())?;
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if !status.is_success() {
        let message = value
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| format!("HTTP {status}"), str::to_owned);
        return Err(message);
    }
    Ok((value, warnings))
}

/// A dry-run edit of the first StatefulSet in `namespace` that has volumeClaimTemplates: a
/// label added to its first template, a change the mutating webhook records (and puts the
/// live templates back) where the apiserver alone would refuse it.
async fn template_edit(client: &kube::Client, namespace: &str) -> Option<TemplateEdit> {
    let sets = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await;
    let sets = match sets {
        Ok(sets) => sets,
        Err(e) => {
            return Some(TemplateEdit {
                name: String::new(),
                outcome: Err(format!("cannot list StatefulSets: {e}")),
            });
        }
    };
    let set = sets.items.into_iter().find(|s| {
        s.spec
            .volume_claim_templates
            .as_ref()
            .is_some_and(|t| !t.is_empty())
    })?;
    let name = set.metadata.name.clone().unwrap_or_default();
    let outcome = match serde_json::to_value(&set) {
        Ok(mut object) => {
            if let Some(template) = object.pointer_mut("/spec/volumeClaimTemplates/0/metadata") {
                if !template.get("labels").is_some_and(Value::is_object) {
                    template["labels"] = json!({});
                }
                template["labels"][CHECK_LABEL] = json!("dry-run");
            }
            if let Some(status) = object.as_object_mut() {
                status.remove("status");
            }
            let path = format!("/apis/apps/v1/namespaces/{namespace}/statefulsets");
            dry_run(client, &path, Some(&name), &object).await
        }
        Err(e) => Err(e.to_string()),
    };
    Some(TemplateEdit { name, outcome })
}

/// The label the template edit adds (never stored: the edit is a dry run).
pub const CHECK_LABEL: &str = "stateful-admission.io/check";

/// The text of a `Warning: 299 - "text"` header (RFC 7234 §5.5, as kube-apiserver writes it).
pub fn warning_text(header: &str) -> String {
    let Some(start) = header.find('"') else {
        return header.to_owned();
    };
    let quoted = header[start + 1..].trim_end();
    let quoted = quoted.strip_suffix('"').unwrap_or(quoted);
    let mut out = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A StatefulSet whose `max-unavailable` annotation (2) is above its replicas (1): our
/// mutating webhook warns about it (denies it with `--strict-max-unavailable`), on every
/// Kubernetes version, whatever the MaxUnavailableStatefulSet gate says.
pub fn probe_statefulset(namespace: &str) -> Value {
    let labels = json!({"app.kubernetes.io/name": PROBE_NAME});
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": PROBE_NAME,
            "namespace": namespace,
            "labels": labels,
            "annotations": {names::MAX_UNAVAILABLE: "2"},
        },
        "spec": {
            "replicas": 1,
            "serviceName": PROBE_NAME,
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    })
}

/// A claim without `storageClassName`.
pub fn probe_claim(namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": PROBE_NAME, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_headers_are_unquoted() {
        assert_eq!(warning_text(r#"299 - "a \"b\" c""#), r#"a "b" c"#);
        assert_eq!(warning_text("plain"), "plain");
    }
}
