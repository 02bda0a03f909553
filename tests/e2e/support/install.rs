//! The release installed from the chart, once per cluster: its ServiceAccount and RBAC as the
//! chart renders them, a token for that ServiceAccount (TokenRequest) in a kubeconfig of its
//! own, a serving certificate for loopback, and the chart's two webhook configurations in URL
//! mode pointing at the front.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use super::{Cluster, SCENARIO_LABEL, front::Front};

/// Release name, as `helm install stateful-admission ...` would have it.
pub const RELEASE: &str = "stateful-admission";
/// The release namespace: the controller's Lease and journals live here.
pub const NAMESPACE: &str = "stateful-admission-e2e";

pub struct Install {
    pub cluster: Cluster,
    /// Where the suite keeps its files for this cluster (certificates, kubeconfig, logs).
    pub work_dir: PathBuf,
    pub front: Front,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub ca_pem: String,
    /// A kubeconfig with the release ServiceAccount's token: what `serve` runs with.
    pub token_kubeconfig: PathBuf,
    /// The `serve` arguments of the chart's Deployment.
    pub chart_args: Vec<String>,
    /// Every document the chart rendered.
    pub documents: Vec<Value>,
}

impl Install {
    pub async fn new(cluster: Cluster) -> anyhow::Result<Self> {
        let tag = cluster
            .server
            .rsplit(':')
            .next()
            .unwrap_or("cluster")
            .to_owned();
        let work_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("e2e")
            .join(format!("{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&work_dir)?;

        let documents = render_chart(&cluster.version)?;
        let chart_args = documents
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .and_then(|d| d.pointer("/spec/template/spec/containers/0/args"))
            .and_then(Value::as_array)
            .context("the chart renders no Deployment with args")?
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();

        // A leftover of an interrupted run must not hold the Lease or journals.
        ensure_namespace(&cluster).await?;
        let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), NAMESPACE);
        let _ = leases
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
        let journals: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), NAMESPACE);
        let _ = journals
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels("stateful-admission.io/journal"),
            )
            .await;

        let access: Vec<Value> = documents
            .iter()
            .filter(|d| {
                matches!(
                    d["kind"].as_str(),
                    Some(
                        "ServiceAccount"
                            | "ClusterRole"
                            | "ClusterRoleBinding"
                            | "Role"
                            | "RoleBinding"
                    )
                )
            })
            .cloned()
            .collect();
        apply(&cluster, access)?;

        let host = webhook_host()?;
        let certs = stateful_admission::certs::generate(
            "stateful-admission-e2e",
            &[
                host.to_string(),
                "127.0.0.1".to_owned(),
                "localhost".to_owned(),
            ],
            30,
            30,
        )?;
        let tls_dir = work_dir.join("tls");
        std::fs::create_dir_all(&tls_dir)?;
        let tls_cert = tls_dir.join("tls.crt");
        let tls_key = tls_dir.join("tls.key");
        std::fs::write(&tls_cert, &certs.cert_pem)?;
        std::fs::write(&tls_key, &certs.key_pem)?;

        let token_kubeconfig = work_dir.join("serve.kubeconfig");
        write_token_kubeconfig(&cluster, &token_kubeconfig).await?;

        let front = Front::start(host).await?;
        let install = Self {
            cluster,
            work_dir,
            front,
            tls_cert,
            tls_key,
            ca_pem: certs.ca_cert_pem,
            token_kubeconfig,
            chart_args,
            documents,
        };
        install.register_webhooks(&install.ca_pem)?;
        Ok(install)
    }

    /// The chart's webhook configurations, in URL mode at the front, with `ca_pem` as caBundle.
    pub fn register_webhooks(&self, ca_pem: &str) -> anyhow::Result<()> {
        let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
        let hooks: Vec<Value> = self
            .documents
            .iter()
            .filter(|d| {
                matches!(
                    d["kind"].as_str(),
                    Some("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration")
                )
            })
            .cloned()
            .map(|mut d| {
                if let Some(hooks) = d["webhooks"].as_array_mut() {
                    for hook in hooks {
                        let path = hook
                            .pointer("/clientConfig/service/path")
                            .and_then(Value::as_str)
                            .unwrap_or("/")
                            .to_owned();
                        hook["clientConfig"] = json!({
                            "url": format!("https://{}{path}", self.front.addr),
                            "caBundle": bundle,
                        });
                    }
                }
                d
            })
            .collect();
        apply(&self.cluster, hooks)
    }
}

/// The address the apiserver reaches this machine at (`E2E_WEBHOOK_HOST`, default loopback: an
/// apiserver on this machine). For kind, the Docker network's gateway.
fn webhook_host() -> anyhow::Result<std::net::IpAddr> {
    match std::env::var("E2E_WEBHOOK_HOST") {
        Ok(host) if !host.is_empty() => host
            .parse()
            .with_context(|| format!("E2E_WEBHOOK_HOST={host:?} is not an IP address")),
        _ => Ok(std::net::IpAddr::from([127, 0, 0, 1])),
    }
}

/// The chart rendered by Helm's own engine for this cluster's version, with self-managed
/// certificates (so no cert-manager object) and webhooks limited to the suite's namespaces.
fn render_chart(version: &str) -> anyhow::Result<Vec<Value>> {
    let kube_version = version.split(['-', '+']).next().unwrap_or(version);
    let values = json!({
        "certs": {"mode": "selfManaged"},
        "webhook": {"namespaceSelectorExpressions": [
            {"key": SCENARIO_LABEL, "operator": "Exists"}
        ]},
    });
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/stateful-admission/tests/render.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["--release", RELEASE, "--namespace", NAMESPACE])
        .args(["--kube-version", kube_version])
        .args(["--values", &values.to_string()])
        .output()
        .context("running the chart renderer")?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The release namespace, created where it is missing.
pub async fn ensure_namespace(cluster: &Cluster) -> anyhow::Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.client.clone());
    if api.get_opt(NAMESPACE).await?.is_none() {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    }
    Ok(())
}

/// `kubectl apply --server-side` of these objects, as Helm 4 installs a chart.
pub fn apply(cluster: &Cluster, items: Vec<Value>) -> anyhow::Result<()> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    cluster.kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=helm",
            "-f",
            "-",
        ],
        Some(&list.to_string()),
    )?;
    Ok(())
}

/// A kubeconfig that authenticates as the release's ServiceAccount with a bound token.
async fn write_token_kubeconfig(cluster: &Cluster, path: &Path) -> anyhow::Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(4 * 3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request(RELEASE, &PostParams::default(), &request)
        .await
        .context("TokenRequest for the release's ServiceAccount")?
        .status
        .context("TokenRequest without status")?
        .token;
    let mut cluster_entry = json!({"server": cluster.server});
    if let Some(ca) = &cluster.ca_pem {
        cluster_entry["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster_entry}],
        "users": [{"name": "stateful-admission", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "stateful-admission",
                      "namespace": NAMESPACE}}],
        "current-context": "e2e",
    });
    std::fs::write(path, serde_json::to_vec_pretty(&config)?)?;
    Ok(())
}

impl Install {
    /// The controller's Lease as the chart's Deployment names it.
    pub fn lease_name(&self) -> String {
        self.chart_args
            .iter()
            .find_map(|a| a.strip_prefix("--lease-name="))
            .unwrap_or("stateful-admission-leader")
            .to_owned()
    }

    /// The chart's ClusterRole and Role without `verb` on `resource` (`group/resource`, `""`
    /// group for the core), applied as Helm would; [`Install::restore_access`] puts the chart's
    /// back. The apiserver's RBAC authorizer follows within moments.
    pub fn revoke(&self, group: &str, resource: &str, verb: &str) -> anyhow::Result<()> {
        let mut roles = self.roles();
        for role in &mut roles {
            if let Some(rules) = role["rules"].as_array_mut() {
                for rule in rules.iter_mut() {
                    let hits = |key: &str, want: &str| {
                        rule[key]
                            .as_array()
                            .is_some_and(|v| v.iter().any(|x| x == want))
                    };
                    if hits("apiGroups", group)
                        && hits("resources", resource)
                        && let Some(verbs) = rule["verbs"].as_array_mut()
                    {
                        verbs.retain(|v| v != verb);
                    }
                }
                rules.retain(|r| r["verbs"].as_array().is_some_and(|v| !v.is_empty()));
            }
        }
        apply(&self.cluster, roles)
    }

    /// The chart's ClusterRole and Role again.
    pub fn restore_access(&self) -> anyhow::Result<()> {
        apply(&self.cluster, self.roles())
    }

    fn roles(&self) -> Vec<Value> {
        self.documents
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
            .cloned()
            .collect()
    }
}
