//! The webhook configurations: their client config, the serving certificate against the CA
//! bundle, and the certificate each webhook URL served.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::*;

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
