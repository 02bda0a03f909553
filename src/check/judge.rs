//! The checks as pure functions of what [`super::gather`] fetched.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::Value;

use super::versions::{self, Version};
use super::{Check, Release, runbook};
use crate::capabilities::{Capabilities, Name};
use crate::names;

/// The serving certificate as found in the release's Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServingCert {
    /// `tls.crt` of the Secret named (PEM: the leaf first, then any intermediates).
    Read { secret: String, chain_pem: String },
    /// Why it could not be read (no such Secret, forbidden).
    Unreadable(String),
}

/// What each webhook URL (`clientConfig.url`, an endpoint outside the cluster) served in a TLS
/// handshake, by `host:port`: the chain (DER, leaf first) or why none was had.
pub(crate) type Served = std::collections::BTreeMap<String, Result<Vec<Vec<u8>>, String>>;

/// The `host:port` and path of an `https` webhook URL, as the apiserver would call it.
pub(crate) fn url_endpoint(url: &str) -> Result<(String, String, String), String> {
    let uri: axum::http::Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "{url:?}: the apiserver calls webhooks over https only"
        ));
    }
    let host = uri
        .host()
        .ok_or_else(|| format!("{url:?} has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok((authority, host, uri.path().to_owned()))
}

/// What the dry-run requests showed about the apiserver → Service → pod path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathProof {
    /// A response carried our mutation or warning: the apiserver called the webhook and
    /// trusted its certificate.
    Reached,
    NotReached,
}

/// `kind` is `mutating` or `validating`; `config` the configuration named like the release.
pub(crate) fn webhook_configuration(
    kind: &str,
    config: Option<&Value>,
    release: &Release,
    cert: &ServingCert,
    served: &Served,
    path: PathProof,
    now: UnixTime,
) -> Check {
    let (type_name, endpoint) = match kind {
        "mutating" => ("MutatingWebhookConfiguration", "/mutate"),
        _ => ("ValidatingWebhookConfiguration", "/validate"),
    };
    let name = format!("{kind} webhook configuration");
    let Some(config) = config else {
        return Check::failed(
            name,
            format!("{type_name} {:?} not found", release.fullname),
            format!(
                "install or upgrade the chart (or turn the webhook back on), see {}",
                runbook("putting-them-back-with-helm")
            ),
        );
    };
    let webhooks = config
        .get("webhooks")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if webhooks.is_empty() {
        return Check::failed(
            name,
            format!("{type_name} {:?} has no webhooks", release.fullname),
            format!(
                "reinstall the chart, see {}",
                runbook("putting-them-back-with-helm")
            ),
        );
    }
    let mut problems = Vec::new();
    // (where, caBundle, the URL's host:port and host for a webhook outside the cluster)
    let mut bundles = Vec::new();
    let mut urls = Vec::new();
    for (i, webhook) in webhooks.iter().enumerate() {
        let at = format!("webhooks[{i}].clientConfig");
        let client = webhook.get("clientConfig");
        let url = client.and_then(|c| c.get("url")).and_then(Value::as_str);
        let service = client.and_then(|c| c.get("service"));
        let target = match (service, url) {
            (Some(service), _) => {
                let field = |k: &str| service.get(k).and_then(Value::as_str).unwrap_or("");
                if field("namespace") != release.namespace {
                    problems.push(format!(
                        "{at}.service.namespace: {:?}, expected {:?}",
                        field("namespace"),
                        release.namespace
                    ));
                }
                if field("name") != release.fullname {
                    problems.push(format!(
                        "{at}.service.name: {:?}, expected {:?}",
                        field("name"),
                        release.fullname
                    ));
                }
                let port = service.get("port").and_then(Value::as_i64).unwrap_or(443);
                if port != i64::from(release.service_port) {
                    problems.push(format!(
                        "{at}.service.port: {port}, expected {}",
                        release.service_port
                    ));
                }
                if field("path") != endpoint {
                    problems.push(format!(
                        "{at}.service.path: {:?}, expected {endpoint:?}",
                        field("path")
                    ));
                }
                None
            }
            // An endpoint outside the cluster (admissionregistration's `url` mode).
            (None, Some(url)) => match url_endpoint(url) {
                Ok((authority, host, url_path)) => {
                    if url_path != endpoint {
                        problems.push(format!(
                            "{at}.url: path {url_path:?}, expected {endpoint:?}"
                        ));
                    }
                    urls.push(url.to_owned());
                    Some((authority, host))
                }
                Err(why) => {
                    problems.push(format!("{at}.url: {why}"));
                    None
                }
            },
            (None, None) => {
                problems.push(format!("{at}: neither service nor url is set"));
                continue;
            }
        };
        match client
            .and_then(|c| c.get("caBundle"))
            .and_then(Value::as_str)
            .filter(|b| !b.is_empty())
        {
            Some(bundle) => bundles.push((at, bundle, target)),
            None => problems.push(format!("{at}.caBundle: empty")),
        }
    }
    if problems.iter().any(|p| p.ends_with("caBundle: empty")) {
        return Check::failed(
            name,
            problems.join("; "),
            format!(
                "the certificate source has not injected the CA yet, see {}",
                runbook("cabundle-not-injected")
            ),
        );
    }
    if !problems.is_empty() {
        return Check::failed(
            name,
            problems.join("; "),
            format!(
                "the configuration does not name this release's Service; check --release and --namespace, or reinstall, see {}",
                runbook("putting-them-back-with-helm")
            ),
        );
    }
    let names_what = if urls.is_empty() {
        format!(
            "names Service {}/{}:{} path {endpoint}",
            release.namespace, release.fullname, release.service_port
        )
    } else {
        format!("names {}", urls.join(", "))
    };
    let bad_bundle = |why: String| {
        Check::failed(
            name.clone(),
            why,
            format!(
                "the apiserver will refuse the webhook's certificate; see {}",
                runbook("x509-certificate-signed-by-unknown-authority")
            ),
        )
    };
    let mut unverified = Vec::new();
    let mut sources = Vec::new();
    for (at, bundle, target) in &bundles {
        match target {
            // The apiserver calls the URL itself: what it serves is what must verify.
            Some((authority, host)) => match served.get(authority) {
                Some(Ok(chain)) => {
                    let chain: Vec<CertificateDer> = chain
                        .iter()
                        .map(|c| CertificateDer::from(c.as_slice()))
                        .collect();
                    if let Err(why) = verify(bundle, &chain, host, now) {
                        return bad_bundle(format!(
                            "{at}.caBundle does not verify the certificate served at {authority}: {why}"
                        ));
                    }
                    sources.push(format!("the certificate served at {authority}"));
                }
                Some(Err(why)) => unverified.push(format!("{authority}: {why}")),
                None => unverified.push(format!("{authority} was not reached")),
            },
            None => match cert {
                ServingCert::Read { secret, chain_pem } => {
                    let host = format!("{}.{}.svc", release.fullname, release.namespace);
                    let verified = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| format!("tls.crt is not PEM: {e}"))
                        .and_then(|chain| verify(bundle, &chain, &host, now));
                    if let Err(why) = verified {
                        return bad_bundle(format!(
                            "{at}.caBundle does not verify the serving certificate in Secret {secret:?} for {host}: {why}"
                        ));
                    }
                    sources.push(format!("the serving certificate in Secret {secret:?}"));
                }
                ServingCert::Unreadable(why) => {
                    unverified.push(format!("the serving certificate could not be read ({why})"));
                }
            },
        }
    }
    sources.dedup();
    unverified.dedup();
    if unverified.is_empty() {
        return Check::ok(
            name,
            format!(
                "{type_name} {:?} {names_what}; caBundle verifies {}",
                release.fullname,
                sources.join(" and ")
            ),
        );
    }
    let found = format!(
        "{type_name} {:?} {names_what} and carries a caBundle; {}",
        release.fullname,
        unverified.join("; ")
    );
    match path {
        PathProof::Reached => Check::ok(
            name,
            format!(
                "{found}, but the dry-run requests reached the webhook, so the apiserver trusts it"
            ),
        ),
        PathProof::NotReached => Check::warning(
            name,
            format!(
                "{found}, and the dry-run requests did not reach the webhook: the caBundle is unverified"
            ),
            format!(
                "run check with rights to read the Secret, see {}",
                runbook("x509-certificate-signed-by-unknown-authority")
            ),
        ),
    }
}

/// Verifies `chain` (leaf first) for `host` against the base64 `ca_bundle`, as the
/// apiserver's client does (path to a root of the bundle, validity, the DNS name or IP).
fn verify(
    ca_bundle: &str,
    chain: &[CertificateDer<'_>],
    host: &str,
    now: UnixTime,
) -> Result<(), String> {
    use base64::Engine as _;
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(ca_bundle.trim())
        .map_err(|e| format!("caBundle is not base64: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bundle) {
        let cert = cert.map_err(|e| format!("caBundle is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("caBundle holds an unusable certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("caBundle holds no certificate".to_owned());
    }
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err("no certificate to verify".to_owned());
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| e.to_string())?;
    let server_name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    verifier
        .verify_server_cert(leaf, intermediates, &server_name, &[], now)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Why the webhooks never see requests in the probe namespace, if they do not: the chart
/// excludes kube-system, the release namespace and namespaces labelled
/// `stateful-admission.io/ignore: "true"` (the server allows those unchanged as well).
pub(crate) fn probe_namespace_excluded(
    release: &Release,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<Check> {
    let namespace = &release.probe_namespace;
    let why = if namespace == "kube-system" || *namespace == release.namespace {
        "the chart excludes it from both webhooks"
    } else if labels
        .and_then(|l| l.get(names::IGNORE_LABEL))
        .is_some_and(|v| v == "true")
    {
        "it is labelled stateful-admission.io/ignore=true"
    } else {
        return None;
    };
    Some(Check::warning(
        "dry-run requests",
        format!("skipped: the webhooks never see namespace {namespace:?}: {why}"),
        "name a namespace the webhooks cover with --probe-namespace",
    ))
}

/// A dry-run StatefulSet create carrying `max-unavailable` above its replicas: the
/// mutating webhook warns (or, with `--strict-max-unavailable`, denies) naming the annotation.
/// `outcome` is the created object and the warnings, or the error message.
pub(crate) fn statefulset_dry_run(outcome: &Result<Vec<String>, String>) -> (Check, PathProof) {
    let name = "dry-run StatefulSet create";
    let ours =
        |text: &str| text.contains(names::MAX_UNAVAILABLE) || text.contains("maxUnavailable");
    match outcome {
        Ok(warnings) => match warnings.iter().find(|w| ours(w)) {
            Some(warning) => (
                Check::ok(
                    name,
                    format!("the webhook answered with its warning: {warning}"),
                ),
                PathProof::Reached,
            ),
            None => (
                Check::failed(
                    name,
                    "the apiserver accepted the dry run without the webhook's warning: the webhook was not called or its call failed (failurePolicy Ignore hides that)",
                    format!(
                        "check the Service, its endpoints and the caBundle, see {} and {}",
                        runbook("timeouts-context-deadline-exceeded"),
                        runbook("noticing-that-the-webhook-is-down")
                    ),
                ),
                PathProof::NotReached,
            ),
        },
        Err(message) if message.contains("denied the request") && ours(message) => (
            Check::ok(
                name,
                format!("the webhook denied it as its rules say: {message}"),
            ),
            PathProof::Reached,
        ),
        Err(message) => (
            Check::failed(
                name,
                format!("the dry run failed: {message}"),
                format!(
                    "an x509 or timeout error names the cause, see {}",
                    runbook("troubleshooting-by-symptom")
                ),
            ),
            PathProof::NotReached,
        ),
    }
}

/// A dry-run edit of an existing set's volumeClaimTemplates: which set, and the object as it
/// would be stored with the warnings, or the apiserver's message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TemplateEdit {
    pub name: String,
    pub outcome: Result<(Value, Vec<String>), String>,
}

/// The template edit is allowed because the mutating webhook records it and puts the live
/// templates back; without the webhook the apiserver refuses it (`spec: Forbidden`).
/// `None`: no set with templates in `namespace` to try it on.
pub(crate) fn template_edit_dry_run(
    namespace: &str,
    edit: &Option<TemplateEdit>,
) -> (Check, PathProof) {
    let name = "dry-run StatefulSet template edit";
    let Some(edit) = edit else {
        return (
            Check::ok(
                name,
                format!(
                    "skipped: no StatefulSet with volumeClaimTemplates in {namespace:?} to try an edit on (--probe-namespace)"
                ),
            ),
            PathProof::NotReached,
        );
    };
    let set = &edit.name;
    match &edit.outcome {
        Ok((object, warnings)) => {
            let recorded = object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(names::DESIRED_VOLUME_CLAIM_TEMPLATES))
                .is_some();
            let warned = warnings
                .iter()
                .any(|w| w.contains(names::DESIRED_VOLUME_CLAIM_TEMPLATES));
            if recorded && warned {
                (
                    Check::ok(
                        name,
                        format!(
                            "a label added to a template of StatefulSet {set:?} was recorded in {} with the webhook's warning",
                            names::DESIRED_VOLUME_CLAIM_TEMPLATES
                        ),
                    ),
                    PathProof::Reached,
                )
            } else {
                (
                    Check::failed(
                        name,
                        format!(
                            "the edit of StatefulSet {set:?} came back without the webhook's record or warning"
                        ),
                        format!("see {}", runbook("noticing-that-the-webhook-is-down")),
                    ),
                    PathProof::NotReached,
                )
            }
        }
        Err(message)
            if message.contains("updates to statefulset spec")
                || (message.contains("Forbidden") && message.contains("volumeClaimTemplates")) =>
        {
            (
                Check::failed(
                    name,
                    format!(
                        "the apiserver refused the edit of StatefulSet {set:?} itself: the mutating webhook did not run ({message})"
                    ),
                    format!(
                        "check the Service, its endpoints and the caBundle, see {}",
                        runbook("noticing-that-the-webhook-is-down")
                    ),
                ),
                PathProof::NotReached,
            )
        }
        Err(message) => (
            Check::failed(
                name,
                format!("the dry-run edit of StatefulSet {set:?} failed: {message}"),
                format!("see {}", runbook("troubleshooting-by-symptom")),
            ),
            PathProof::NotReached,
        ),
    }
}

/// A dry-run create of a claim without `storageClassName`: the class it comes back with.
/// The built-in DefaultStorageClass plugin may have set it before our webhook, so a class
/// alone proves nothing about the path (the StatefulSet check does); no class where a
/// default exists does show a missing mutation.
pub(crate) fn claim_dry_run(outcome: &Result<Value, String>, default_class: Option<&str>) -> Check {
    let name = "dry-run PersistentVolumeClaim create";
    match (outcome, default_class) {
        (Err(message), _) => Check::failed(
            name,
            format!("the dry run failed: {message}"),
            format!("see {}", runbook("troubleshooting-by-symptom")),
        ),
        (Ok(claim), default) => {
            let class = claim
                .pointer("/spec/storageClassName")
                .and_then(Value::as_str);
            match (class, default) {
                (Some(class), _) => Check::ok(
                    name,
                    format!("a claim without a class is created with class {class:?}"),
                ),
                (None, Some(default)) => Check::failed(
                    name,
                    format!(
                        "a claim without a class came back without one, though {default:?} is the default"
                    ),
                    format!(
                        "the mutating webhook did not run, see {}",
                        runbook("noticing-that-the-webhook-is-down")
                    ),
                ),
                (None, None) => Check::warning(
                    name,
                    "no default StorageClass (cluster or namespace): claims without a class stay without one",
                    "mark a StorageClass as default, or annotate the namespace with stateful-admission.io/default-storage-class",
                ),
            }
        }
    }
}

/// The controller's Lease: present, held, and renewed within its duration.
pub(crate) fn lease(lease: Option<&Value>, name: &str, now: jiff::Timestamp) -> Check {
    let check = "controller lease";
    let hint = format!("see {}", runbook("controller-without-leader"));
    let Some(lease) = lease else {
        return Check::failed(
            check,
            format!("Lease {name:?} not found: no replica has ever led"),
            hint,
        );
    };
    let spec = lease.get("spec").cloned().unwrap_or(Value::Null);
    let holder = spec
        .get("holderIdentity")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty());
    let Some(holder) = holder else {
        return Check::failed(check, format!("Lease {name:?} has no holder"), hint);
    };
    let duration = spec
        .get("leaseDurationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(15);
    let renewed = spec
        .get("renewTime")
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let Some(renewed) = renewed else {
        return Check::failed(
            check,
            format!("Lease {name:?} held by {holder:?} has no renewTime"),
            hint,
        );
    };
    let age = now.as_second() - renewed.as_second();
    if age > duration {
        return Check::failed(
            check,
            format!(
                "Lease {name:?} held by {holder:?} was last renewed {age}s ago, longer than its {duration}s duration: the leader is gone or stuck"
            ),
            hint,
        );
    }
    Check::ok(
        check,
        format!("Lease {name:?} held by {holder:?}, renewed {age}s ago (duration {duration}s)"),
    )
}

/// What each running replica's `/readyz?verbose` says (asked through the apiserver's pod
/// proxy): which part is waiting for what. `None` when no replica runs to ask (the other
/// checks say why).
pub(crate) fn replicas(answers: &[(String, Result<String, String>)]) -> Option<Check> {
    let name = "replicas";
    if answers.is_empty() {
        return None;
    }
    let hint = format!("see {}", runbook("troubleshooting-by-symptom"));
    let mut unanswered = Vec::new();
    let mut waiting = Vec::new();
    let mut roles = Vec::new();
    for (pod, answer) in answers {
        match answer {
            Err(why) => unanswered.push(format!("{pod}: {why}")),
            Ok(text) => {
                // What the cluster does has lines of its own (see `capabilities`).
                let not_ok: Vec<&str> = text
                    .lines()
                    .filter(|l| l.starts_with("[-]") || l.starts_with("[!]"))
                    .filter(|l| !l[3..].starts_with("capability "))
                    .collect();
                if !not_ok.is_empty() {
                    waiting.push(format!("{pod}: {}", not_ok.join("; ")));
                }
                let role = text
                    .lines()
                    .find_map(|l| l.strip_prefix("[+]controller "))
                    .map(|r| {
                        r.split(':')
                            .next()
                            .unwrap_or(r)
                            .split(' ')
                            .next()
                            .unwrap_or(r)
                    });
                roles.push(format!("{pod} {}", role.unwrap_or("webhook only")));
            }
        }
    }
    if !unanswered.is_empty() && waiting.is_empty() && roles.is_empty() {
        return Some(Check::warning(
            name,
            format!(
                "no replica could be asked for its /readyz: {}",
                unanswered.join("; ")
            ),
            "allow get on pods/proxy in the release namespace to see each replica's state",
        ));
    }
    if waiting.is_empty() && unanswered.is_empty() {
        return Some(Check::ok(name, format!("ready: {}", roles.join(", "))));
    }
    // A replica whose watches fail answers from a view seconds or minutes old.
    let hint = if waiting.iter().any(|w| w.contains("[!]view stale")) {
        format!(
            "a replica cannot refresh its view from the apiserver (network, apiserver down or overloaded): its webhook answers from what it last saw, its controller writes only under a valid Lease; see {}",
            runbook("a-replicas-view-is-stale")
        )
    } else {
        hint
    };
    let mut parts = waiting;
    parts.extend(unanswered);
    Some(Check::warning(name, parts.join(" | "), hint))
}

/// One access the ServiceAccount needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    /// The feature that needs it.
    pub feature: &'static str,
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    /// Namespaced to the release namespace; cluster-wide otherwise.
    pub in_release_namespace: bool,
    /// The one object the need is about, where the chart grants it by `resourceNames`.
    pub name: Option<String>,
}

/// The switches of `serve` that change what the ServiceAccount needs (all on by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Features {
    pub controller: bool,
    pub claim_rollout: bool,
    pub converge: bool,
    pub retroactive_default_class: bool,
    pub conditions: bool,
    pub max_unavailable: bool,
    /// `--self-managed-certs`: the certificate Secret and both webhook configurations are
    /// written by the binary, each by name.
    pub self_managed_certs: bool,
    /// `--lease-name`, `--cert-secret`, `--mutating-webhook-configuration`,
    /// `--validating-webhook-configuration` where the Deployment sets them.
    pub lease: Option<String>,
    pub cert_secret: Option<String>,
    pub mutating_webhook: Option<String>,
    pub validating_webhook: Option<String>,
    /// The pods' ServiceAccount (chart value `serviceAccount.name`), where the Deployment
    /// names one.
    pub service_account: Option<String>,
    /// The port of `/readyz` (`--probe-addr`), and the Deployment's pod selector.
    pub probe_port: u16,
    pub selector: Option<String>,
}

impl Default for Features {
    fn default() -> Self {
        Self {
            controller: true,
            claim_rollout: true,
            converge: true,
            retroactive_default_class: true,
            conditions: true,
            max_unavailable: true,
            self_managed_certs: false,
            lease: None,
            cert_secret: None,
            mutating_webhook: None,
            validating_webhook: None,
            service_account: None,
            probe_port: 8080,
            selector: None,
        }
    }
}

impl Features {
    /// The switches as the Deployment's container arguments set them (`--converge=false`).
    pub(crate) fn from_args(args: &[String]) -> Self {
        let off = |flag: &str| args.iter().any(|a| a == &format!("--{flag}=false"));
        let value = |flag: &str| {
            let prefix = format!("--{flag}=");
            args.iter()
                .find_map(|a| a.strip_prefix(&prefix))
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let controller = !off("controller");
        Self {
            controller,
            claim_rollout: controller && !off("claim-rollout"),
            converge: controller && !off("converge"),
            retroactive_default_class: controller && !off("retroactive-default-class"),
            conditions: controller && !off("statefulset-conditions"),
            max_unavailable: controller && !off("max-unavailable-driver"),
            self_managed_certs: args
                .iter()
                .any(|a| a == "--self-managed-certs" || a == "--self-managed-certs=true"),
            lease: value("lease-name"),
            cert_secret: value("cert-secret"),
            mutating_webhook: value("mutating-webhook-configuration"),
            validating_webhook: value("validating-webhook-configuration"),
            service_account: None,
            probe_port: value("probe-addr")
                .and_then(|a| a.rsplit(':').next().and_then(|p| p.parse().ok()))
                .unwrap_or(8080),
            selector: None,
        }
    }

    /// What the chart grants for these switches (templates/rbac.yaml), one need per line;
    /// `release` names the objects granted by name where the Deployment does not.
    pub(crate) fn needs(&self, release: &super::Release) -> Vec<Access> {
        let a = |feature, verb, group, resource, in_release_namespace| Access {
            feature,
            verb,
            group,
            resource,
            in_release_namespace,
            name: None,
        };
        let named = |access: Access, name: &str| Access {
            name: Some(name.to_owned()),
            ..access
        };
        let mut needs = Vec::new();
        for (group, resource) in [
            ("", "namespaces"),
            ("storage.k8s.io", "storageclasses"),
            ("apps", "statefulsets"),
            ("", "persistentvolumeclaims"),
        ] {
            needs.push(a("webhook", "watch", group, resource, false));
        }
        if self.controller {
            let lease = self.lease.as_deref().unwrap_or(&release.lease);
            needs.push(named(
                a(
                    "leader election",
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    true,
                ),
                lease,
            ));
            needs.push(a("controller", "watch", "", "pods", false));
            needs.push(a("controller", "create", "", "events", false));
            // Dry runs only, in the release namespace (the webhooks exclude it).
            needs.push(a(
                "capability probes",
                "create",
                "apps",
                "statefulsets",
                true,
            ));
            needs.push(a(
                "capability probes",
                "create",
                "",
                "persistentvolumeclaims",
                true,
            ));
        }
        if self.claim_rollout || self.retroactive_default_class {
            needs.push(a(
                "claim rollout / retroactive default class",
                "patch",
                "",
                "persistentvolumeclaims",
                false,
            ));
        }
        if self.claim_rollout {
            needs.push(a(
                "pod restarts for offline expansion",
                "create",
                "",
                "pods/eviction",
                false,
            ));
        }
        if self.claim_rollout || self.converge || self.conditions {
            needs.push(a(
                "convergence / conditions",
                "patch",
                "apps",
                "statefulsets",
                false,
            ));
        }
        if self.converge {
            needs.push(a("convergence", "delete", "apps", "statefulsets", false));
            needs.push(a("convergence", "create", "", "configmaps", true));
        }
        if self.claim_rollout || self.converge {
            needs.push(a("convergence", "create", "apps", "statefulsets", false));
        }
        if self.conditions {
            needs.push(a(
                "conditions",
                "patch",
                "apps",
                "statefulsets/status",
                false,
            ));
        }
        if self.max_unavailable {
            needs.push(a("maxUnavailable driver", "delete", "", "pods", false));
        }
        if self.self_managed_certs {
            let secret = self
                .cert_secret
                .clone()
                .unwrap_or_else(|| format!("{}-certs", release.fullname));
            needs.push(named(
                a("self-managed certificates", "update", "", "secrets", true),
                &secret,
            ));
            for (resource, configured) in [
                ("mutatingwebhookconfigurations", &self.mutating_webhook),
                ("validatingwebhookconfigurations", &self.validating_webhook),
            ] {
                if let Some(name) = configured {
                    needs.push(named(
                        a(
                            "self-managed certificates",
                            "patch",
                            "admissionregistration.k8s.io",
                            resource,
                            false,
                        ),
                        name,
                    ));
                }
            }
        }
        needs
    }
}

/// The answers of the SelfSubjectAccessReviews made as the ServiceAccount, one per need
/// (`Ok(allowed)`), or why impersonation was refused.
pub(crate) fn permissions(
    service_account: &str,
    answers: &Result<Vec<(Access, bool)>, String>,
) -> Check {
    let name = "service account permissions";
    let answers = match answers {
        Ok(answers) => answers,
        Err(why) => {
            return Check::warning(
                name,
                format!("could not ask as {service_account}: {why}"),
                "run check as a user allowed to impersonate service accounts (cluster-admin) to verify the RBAC",
            );
        }
    };
    let denied: Vec<String> = answers
        .iter()
        .filter(|(_, allowed)| !allowed)
        .map(|(a, _)| {
            let resource = if a.group.is_empty() {
                a.resource.to_owned()
            } else {
                format!("{}.{}", a.resource, a.group)
            };
            match &a.name {
                Some(name) => format!("{} {resource} {name:?} (for {})", a.verb, a.feature),
                None => format!("{} {resource} (for {})", a.verb, a.feature),
            }
        })
        .collect();
    if denied.is_empty() {
        Check::ok(
            name,
            format!(
                "{service_account} may do all {} things its features need",
                answers.len()
            ),
        )
    } else {
        Check::failed(
            name,
            format!("{service_account} may not {}", denied.join(", ")),
            format!(
                "upgrade the release so its RBAC matches its features, or turn the feature off, see {}",
                runbook("which-of-our-features-to-turn-off-there")
            ),
        )
    }
}

/// What the cluster does, one line per capability: as `check` learned it itself (discovery,
/// OpenAPI, dry runs in the release namespace) and as each replica's `/readyz?verbose` says
/// its prober learned it. What `check` cannot try itself (a dry-run patch of an existing claim)
/// comes from the replicas. Returns the lines and the capabilities judged by.
pub(crate) fn capabilities(
    own: &crate::capabilities::probe::Round,
    answers: &[(String, Result<String, String>)],
) -> (Vec<Check>, Capabilities) {
    use crate::capabilities::probe::Outcome;
    let reported: Vec<(String, Vec<ReplicaCapability>)> = answers
        .iter()
        .filter_map(|(pod, answer)| {
            answer
                .as_ref()
                .ok()
                .map(|t| (pod.clone(), replica_capabilities(t)))
        })
        .collect();
    let mut merged = Capabilities::unknown("not learned");
    merged.git_version = own.git_version.as_ref().ok().cloned();
    let mut checks = Vec::new();
    for name in Name::ALL {
        let check_name = format!("capability {name}");
        let said: Vec<(&str, &ReplicaCapability)> = reported
            .iter()
            .filter_map(|(pod, caps)| {
                caps.iter()
                    .find(|c| c.name == name)
                    .map(|c| (pod.as_str(), c))
            })
            .collect();
        let known_by_replica = said.iter().find(|(_, c)| c.value.is_some());
        let outcome = own.outcome(name);
        let (learned, source) = match (outcome, known_by_replica) {
            (Some(Outcome::Learned(learned)), _) => (learned.clone(), "check".to_owned()),
            (_, Some((pod, c))) => (
                crate::capabilities::Learned {
                    value: c.value,
                    how: crate::capabilities::How::Evidence(format!("replica {pod}: {}", c.detail)),
                    last_error: None,
                },
                format!("replica {pod}"),
            ),
            (Some(Outcome::Failed(why) | Outcome::NotTried(why)), None) => (
                crate::capabilities::Learned::unknown(why.clone()),
                "check".to_owned(),
            ),
            (None, None) => (
                crate::capabilities::Learned::unknown(match &own.git_version {
                    Err(why) => format!("the apiserver did not answer: {why}"),
                    Ok(_) => "no replica reports it".to_owned(),
                }),
                "check".to_owned(),
            ),
        };
        let disagree: Vec<String> = said
            .iter()
            .filter(|(_, c)| c.value.is_some() && c.value != learned.value)
            .map(|(pod, c)| format!("{pod} says {}", c.value.map_or("unknown", |v| v.as_str())))
            .collect();
        let check = match (learned.value, disagree.is_empty()) {
            (Some(value), true) => Check::ok(
                &check_name,
                format!(
                    "{value} ({}: {}){}",
                    learned.how.source(),
                    learned.how.detail(),
                    by(&source)
                ),
            ),
            (Some(value), false) => Check::warning(
                &check_name,
                format!(
                    "{value} ({}: {}){}, but {}: a replica learns it again within its probe interval, or at once when the apiserver's version changes",
                    learned.how.source(),
                    learned.how.detail(),
                    by(&source),
                    disagree.join(", ")
                ),
                format!(
                    "restart the replicas to learn it now, see {}",
                    runbook("what-the-cluster-does")
                ),
            ),
            // Not knowing is harmless where nothing could be tried yet; a failure is not.
            (None, _) if matches!(outcome, Some(Outcome::NotTried(_))) || outcome.is_none() => {
                Check::ok(
                    &check_name,
                    format!("not known yet ({})", learned.how.detail()),
                )
            }
            (None, _) => Check::warning(
                &check_name,
                format!("not known ({})", learned.how.detail()),
                format!("see {}", runbook("what-the-cluster-does")),
            ),
        };
        checks.push(check);
        merged.set(name, learned);
    }
    (checks, merged)
}

fn by(source: &str) -> String {
    if source == "check" {
        String::new()
    } else {
        format!(", as {source} learned it")
    }
}

/// One `[+]capability <name> <value> (...)` line of a replica's `/readyz?verbose`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplicaCapability {
    pub name: Name,
    /// `None`: the replica does not know it.
    pub value: Option<crate::capabilities::Value>,
    pub detail: String,
}

/// The capability lines of a replica's `/readyz?verbose`.
pub(crate) fn replica_capabilities(text: &str) -> Vec<ReplicaCapability> {
    text.lines()
        .filter_map(|line| {
            let rest = ["[+]", "[!]", "[-]"]
                .iter()
                .find_map(|m| line.strip_prefix(m))?
                .strip_prefix("capability ")?;
            let (name, rest) = rest.split_once(' ')?;
            let name = Name::parse(name)?;
            let (value, detail) = rest.split_once(' ').unwrap_or((rest, ""));
            let value = name.values().iter().copied().find(|v| v.as_str() == value);
            let detail = detail.trim().trim_start_matches('(').trim_end_matches(')');
            Some(ReplicaCapability {
                name,
                value,
                detail: detail.to_owned(),
            })
        })
        .collect()
}

/// The apiserver's version, what upstream does there by default, and what this cluster was
/// seen to do (`cluster`): where the two differ (a vendor build, `--feature-gates`) the cluster
/// wins. One of ours is called redundant only where the cluster was seen doing it natively,
/// never from the version alone.
pub(crate) fn version(
    git_version: &Result<String, String>,
    features: &Features,
    cluster: &Capabilities,
) -> Check {
    let name = "kubernetes version";
    let hint = format!("see {}", runbook("which-of-our-features-to-turn-off-there"));
    let text = match git_version {
        Ok(text) => text,
        Err(why) => return Check::warning(name, format!("/version failed: {why}"), hint),
    };
    let defaults = Version::parse(text).map(versions::native);
    // Ours is redundant only where the Deployment runs it.
    let ours_on = |kep: &str| match kep {
        "KEP-961" => features.max_unavailable,
        "KEP-3333" => features.retroactive_default_class,
        "KEP-2804" => features.conditions,
        _ => false,
    };
    let observed = |kep: &str| -> Option<(bool, String)> {
        let (capability, native) = match kep {
            "KEP-961" => (Name::MaxUnavailable, cluster.keeps_max_unavailable()?),
            "KEP-3333" => (
                Name::RetroactiveDefaultClass,
                cluster.value(Name::RetroactiveDefaultClass)?.is_yes(),
            ),
            "KEP-4650" => (
                Name::NativeTemplateEdits,
                cluster.value(Name::NativeTemplateEdits)?.is_yes(),
            ),
            _ => return None,
        };
        let learned = cluster.get(capability);
        Some((
            native,
            format!(
                "{capability} {} ({})",
                learned.value.map_or("unknown", |v| v.as_str()),
                learned.how.source()
            ),
        ))
    };
    let mut native = Vec::new();
    let mut apply = Vec::new();
    let mut differs = Vec::new();
    let mut redundant = Vec::new();
    let mut unknown = Vec::new();
    for kep in ["KEP-4650", "KEP-961", "KEP-3333", "KEP-284", "KEP-2804"] {
        let default = defaults
            .as_ref()
            .and_then(|d| d.iter().find(|n| n.kep == kep).cloned());
        match (kep, observed(kep)) {
            // Expansion is built in everywhere we run; ours adds limits and warnings.
            ("KEP-284", _) => native.push(kep.to_owned()),
            // No release sets these conditions: nothing to observe.
            ("KEP-2804", _) => apply.push(kep.to_owned()),
            (_, Some((is_native, seen))) => {
                if let Some(default) = &default
                    && default.native != is_native
                {
                    differs.push(format!(
                        "{kep}: upstream {}'s default is {} (gate {}), this cluster {} ({seen}): a vendor build or --feature-gates, and the cluster's answer is what counts",
                        Version::parse(text).map_or_else(|| text.clone(), |v| v.to_string()),
                        if default.native { "on" } else { "off" },
                        default.gate.unwrap_or("none"),
                        if is_native { "does it" } else { "does not" },
                    ));
                }
                if is_native {
                    native.push(kep.to_owned());
                    if kep == "KEP-4650" {
                        differs.push(
                            "KEP-4650: the apiserver takes volumeClaimTemplate edits itself: the webhook leaves them to it (the native path is used)".to_owned(),
                        );
                    }
                    if ours_on(kep) {
                        redundant.push(format!(
                            "{kep}: this cluster does it natively ({seen}): ours is redundant: {}",
                            default.as_ref().map_or("", |d| d.ours)
                        ));
                    }
                } else {
                    apply.push(kep.to_owned());
                }
            }
            (_, None) => unknown.push(kep.to_owned()),
        }
    }
    let mut message = format!("{text}: natively {}", list_or_none(&native));
    message.push_str(&format!("; ours apply: {}", list_or_none(&apply)));
    if !unknown.is_empty() {
        message.push_str(&format!(
            "; not known yet whether it does {} (see the capability lines)",
            unknown.join(", ")
        ));
    }
    for note in differs.iter().chain(&redundant) {
        message.push_str("; ");
        message.push_str(note);
    }
    if redundant.is_empty() {
        Check::ok(name, message)
    } else {
        Check::warning(name, message, hint)
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;
    use serde_json::json;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().expect("timestamp")
    }

    #[test]
    fn a_lease_is_ok_only_when_held_and_fresh() {
        let lease = |holder: &str, renewed: &str| json!({"spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}});
        let now = at("2026-01-01T00:00:20Z");
        let fresh = lease("pod-a", "2026-01-01T00:00:10.000000Z");
        assert_eq!(lease_status(Some(&fresh), now), "ok");
        let stale = lease("pod-a", "2026-01-01T00:00:01Z");
        assert_eq!(lease_status(Some(&stale), now), "failed");
        assert_eq!(
            lease_status(Some(&lease("", "2026-01-01T00:00:10Z")), now),
            "failed"
        );
        assert_eq!(lease_status(None, now), "failed");
    }

    fn lease_status(lease_json: Option<&Value>, now: jiff::Timestamp) -> &'static str {
        lease(lease_json, "l", now).status.as_str()
    }

    #[test]
    fn each_replica_says_which_part_waits_for_what() {
        let leading = "[+]tls ok\n[+]webhook ok: storageclasses, namespaces, statefulsets listed\n[+]controller leading (Lease l), mode enforce\n[+]max-unavailable-gate disabled: x\nreadyz check passed\n";
        let waiting = "[+]tls ok\n[-]webhook-claims listing persistentvolumeclaims: x\n[-]controller waiting for persistentvolumeclaims to list before campaigning for the Lease\nreadyz check passed\n";
        assert_eq!(replicas(&[]), None, "no replica runs: nothing to ask");
        let ok = replicas(&[("sa-1".into(), Ok(leading.into()))]).expect("a line");
        assert_eq!(
            (ok.status, ok.message.as_str()),
            (Status::Ok, "ready: sa-1 leading")
        );
        let slow = replicas(&[
            ("sa-1".into(), Ok(leading.into())),
            ("sa-2".into(), Ok(waiting.into())),
        ])
        .expect("a line");
        assert_eq!(slow.status, Status::Warning);
        assert!(
            slow.message
                .starts_with("sa-2: [-]webhook-claims listing persistentvolumeclaims")
                && slow
                    .message
                    .contains("[-]controller waiting for persistentvolumeclaims"),
            "{}",
            slow.message
        );
        // A replica cut off from the apiserver: ready (its webhook answers from its view),
        // with the staleness as a warning of its own.
        let cut_off = "[+]tls ok\n[+]webhook ok: storageclasses, namespaces, statefulsets listed\n[!]view stale: statefulsets, pods not refreshed for 27s, the apiserver unreachable or refusing the watch (failed to start watching object: connection refused); answering from what was last seen\n[+]controller standby: campaigning for Lease l\nreadyz check passed\n";
        let stale = replicas(&[
            ("sa-1".into(), Ok(leading.into())),
            ("sa-2".into(), Ok(cut_off.into())),
        ])
        .expect("a line");
        assert_eq!(stale.status, Status::Warning);
        assert_eq!(
            stale.message,
            "sa-2: [!]view stale: statefulsets, pods not refreshed for 27s, the apiserver unreachable or refusing the watch (failed to start watching object: connection refused); answering from what was last seen"
        );
        assert!(
            stale.hint.contains("cannot refresh its view")
                && stale.hint.contains("#a-replicas-view-is-stale"),
            "{}",
            stale.hint
        );
        let refused =
            replicas(&[("sa-1".into(), Err("pods \"sa-1\" is forbidden".into()))]).expect("a line");
        assert_eq!(refused.status, Status::Warning);
        assert!(refused.hint.contains("pods/proxy"), "{}", refused.hint);
    }

    #[test]
    fn a_probe_namespace_the_webhooks_skip_is_named() {
        let mut release = Release::of("stateful-admission", "ops");
        assert!(probe_namespace_excluded(&release, None).is_none());
        let ignored = [(names::IGNORE_LABEL.to_owned(), "true".to_owned())].into();
        let check = probe_namespace_excluded(&release, Some(&ignored)).expect("ignored");
        assert!(check.message.contains("labelled"), "{}", check.message);
        for namespace in ["ops", "kube-system"] {
            release.probe_namespace = namespace.to_owned();
            assert!(
                probe_namespace_excluded(&release, None).is_some(),
                "{namespace}"
            );
        }
    }

    #[test]
    fn features_follow_the_deployment_arguments() {
        let all = Features::from_args(&[]);
        assert_eq!(all, Features::default());
        let off = Features::from_args(&["--controller=false".to_owned()]);
        assert!(!off.converge && !off.max_unavailable);
        let release = super::super::Release::of("stateful-admission", "ops");
        assert!(off.needs(&release).iter().all(|a| a.feature == "webhook"));
        let needs = all.needs(&release);
        assert!(
            needs
                .iter()
                .any(|a| a.verb == "delete" && a.resource == "pods")
        );
        // The chart grants the Lease by name only; a review without the name would be denied.
        let lease = needs
            .iter()
            .find(|a| a.resource == "leases")
            .expect("lease");
        assert_eq!(lease.name.as_deref(), Some("stateful-admission-leader"));
        let chart = Features::from_args(&[
            "--lease-name=sa-lock".to_owned(),
            "--self-managed-certs".to_owned(),
            "--cert-secret=sa-certs".to_owned(),
            "--mutating-webhook-configuration=sa".to_owned(),
        ]);
        let needs = chart.needs(&release);
        let names: Vec<_> = needs.iter().filter_map(|a| a.name.as_deref()).collect();
        assert_eq!(names, ["sa-lock", "sa-certs", "sa"]);
    }

    /// `check` on every captured apiserver (its own probes' answers as captured): the version
    /// line never advises turning off a part the cluster's answers show is needed, calls ours
    /// redundant only where the cluster does it, and says where the cluster differs from
    /// upstream's default for its version.
    #[test]
    fn check_never_contradicts_what_each_captured_apiserver_does() {
        use crate::capabilities::judge::captured;
        for label in captured::LABELS {
            let cluster = captured::capabilities(label);
            let git = cluster.git_version.clone().expect("a version");
            let check = version(&Ok(git.clone()), &Features::default(), &cluster);
            let keeps = cluster.keeps_max_unavailable().expect("known");
            let driver_off = "--max-unavailable-driver=false";
            assert_eq!(
                check.message.contains(driver_off),
                keeps,
                "{label}: {}",
                check.message
            );
            let retro = cluster
                .value(Name::RetroactiveDefaultClass)
                .expect("known")
                .is_yes();
            assert_eq!(
                check.message.contains("--retroactive-default-class=false"),
                retro,
                "{label}: {}",
                check.message
            );
            // A warning exactly where something of ours runs that the cluster does itself.
            assert_eq!(
                check.status == Status::Warning,
                keeps || retro,
                "{label}: {}",
                check.message
            );
            assert!(
                check.message.starts_with(&format!("{git}: natively ")),
                "{}",
                check.message
            );
            // Each capability line says what the captured answers said, learned by check itself.
            let round = crate::capabilities::probe::Round {
                git_version: Ok(git.clone()),
                outcomes: cluster
                    .iter()
                    .map(|(n, l)| (n, crate::capabilities::probe::Outcome::Learned(l.clone())))
                    .collect(),
            };
            let (lines, merged) = capabilities(&round, &[]);
            assert_eq!(merged.keeps_max_unavailable(), Some(keeps));
            assert!(
                lines.iter().all(|l| l.status == Status::Ok),
                "{label}: {lines:?}"
            );
            let mu = lines
                .iter()
                .find(|l| l.name == "capability max-unavailable")
                .expect("a line");
            assert!(
                mu.message.starts_with(if keeps {
                    "kept"
                } else if label == "v1.24" {
                    "absent"
                } else {
                    "dropped"
                }),
                "{label}: {}",
                mu.message
            );
        }
        // v1.35.3 as captured (a build whose gate is off, unlike upstream 1.35.0's default):
        // the line says so, and keeps our driver.
        let cluster = captured::capabilities("v1.35");
        let check = version(
            &Ok(cluster.git_version.clone().expect("v")),
            &Features {
                retroactive_default_class: false,
                ..Features::default()
            },
            &cluster,
        );
        assert_eq!(check.status, Status::Ok, "{}", check.message);
        assert!(
            check.message.contains("KEP-961: upstream 1.35.3's default is on (gate MaxUnavailableStatefulSet), this cluster does not (max-unavailable dropped (probe))"),
            "{}",
            check.message
        );
        assert!(
            check
                .message
                .contains("ours apply: KEP-4650, KEP-961, KEP-2804"),
            "{}",
            check.message
        );
    }

    #[test]
    fn without_an_answer_the_version_line_gives_no_advice() {
        let unknown = Capabilities::default();
        let check = version(&Ok("v1.35.2".to_owned()), &Features::default(), &unknown);
        assert_eq!(check.status, Status::Ok, "{}", check.message);
        assert!(!check.message.contains("redundant"), "{}", check.message);
        assert!(
            check
                .message
                .contains("not known yet whether it does KEP-4650, KEP-961, KEP-3333"),
            "{}",
            check.message
        );
        let broken = version(
            &Err("connection refused".into()),
            &Features::default(),
            &unknown,
        );
        assert_eq!(broken.status, Status::Warning);
    }

    #[test]
    fn capability_lines_come_from_check_and_else_from_the_replicas() {
        use crate::capabilities::probe::{Outcome, Round};
        use crate::capabilities::{Learned, Value};
        let round = Round {
            git_version: Ok("v1.36.2".into()),
            outcomes: vec![
                (
                    Name::MaxUnavailable,
                    Outcome::Learned(Learned::probed(Value::Dropped, "dry run")),
                ),
                (
                    Name::RetroactiveDefaultClass,
                    Outcome::NotTried("no class-less claim".into()),
                ),
                (
                    Name::ExpansionRecovery,
                    Outcome::NotTried("no expanding claim".into()),
                ),
                (
                    Name::ClaimVolumeAttributesClass,
                    Outcome::Failed("500".into()),
                ),
            ],
        };
        let leader = "[+]tls ok\n[+]capability max-unavailable kept (probe: dry-run create)\n[+]capability retroactive-default-class accepted (evidence: claim db/data was given class \"fast\")\n[!]capability expansion-recovery unknown (no bound claim with an expansion in flight)\nreadyz check passed\n";
        let (lines, merged) = capabilities(&round, &[("sa-1".into(), Ok(leader.into()))]);
        let line = |name: &str| {
            lines
                .iter()
                .find(|l| l.name == format!("capability {name}"))
                .expect(name)
        };
        let mu = line("max-unavailable");
        assert_eq!(mu.status, Status::Warning, "{}", mu.message);
        assert!(mu.message.contains("sa-1 says kept"), "{}", mu.message);
        assert_eq!(
            merged.value(Name::MaxUnavailable),
            Some(Value::Dropped),
            "check's own answer wins"
        );
        let retro = line("retroactive-default-class");
        assert_eq!(retro.status, Status::Ok);
        assert!(
            retro
                .message
                .starts_with("accepted (evidence: replica sa-1: evidence: claim db/data"),
            "{}",
            retro.message
        );
        assert!(
            retro.message.ends_with("as replica sa-1 learned it"),
            "{}",
            retro.message
        );
        assert_eq!(
            line("expansion-recovery").status,
            Status::Ok,
            "not tried: nothing needs it yet"
        );
        assert_eq!(
            line("claim-volume-attributes-class").status,
            Status::Warning,
            "a failure is said"
        );
        // The replicas line leaves capability lines to these.
        let replicas_line = replicas(&[("sa-1".into(), Ok(leader.into()))]).expect("a line");
        assert_eq!(
            replicas_line.status,
            Status::Ok,
            "{}",
            replicas_line.message
        );
        // Hostile readyz text: unknown names and values are skipped, nothing panics.
        assert!(replica_capabilities("[+]capability\n[+]capability x y\n[+]capability max-unavailable\n[+]capability max-unavailable 😀 (").iter().all(|c| c.value.is_none()));
    }
}
