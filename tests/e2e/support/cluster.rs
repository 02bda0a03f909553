//! A cluster as the suite reaches it: the admin client, kubectl with the same kubeconfig, and the
//! apiserver's own metrics.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// One cluster, reached with a cluster-admin kubeconfig.
#[derive(Clone)]
pub struct Cluster {
    pub kubeconfig: PathBuf,
    pub client: Client,
    /// The apiserver's URL, as the kubeconfig names it.
    pub server: String,
    /// PEM of the CA that signs the apiserver's certificate (from the kubeconfig).
    pub ca_pem: Option<String>,
    /// `gitVersion` of the apiserver, e.g. `v1.32.0`.
    pub version: String,
}

impl Cluster {
    pub async fn connect(kubeconfig: &Path) -> anyhow::Result<Self> {
        let file = Kubeconfig::read_from(kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?;
        let config =
            Config::from_custom_kubeconfig(file.clone(), &KubeConfigOptions::default()).await?;
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned();
        let ca_pem = ca_of(&file, kubeconfig)?;
        let client = Client::try_from(config)?;
        let version = client.apiserver_version().await.with_context(|| {
            format!("the apiserver of {} does not answer", kubeconfig.display())
        })?;
        Ok(Self {
            kubeconfig: kubeconfig.to_owned(),
            client,
            server,
            ca_pem,
            version: version.git_version,
        })
    }

    /// `kubectl ARGS` with this cluster's kubeconfig and `stdin`; fails when kubectl does.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Kubectl> {
        let out = self.kubectl_status(args, stdin)?;
        anyhow::ensure!(
            out.success,
            "kubectl {} failed: {}{}",
            args.join(" "),
            out.stderr,
            out.stdout
        );
        Ok(out)
    }

    /// `kubectl ARGS`, successful or not.
    pub fn kubectl_status(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Kubectl> {
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("kubectl is needed on PATH for the real-cluster suite")?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        Ok(Kubectl {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// The apiserver's `/metrics`, as Prometheus text.
    pub async fn apiserver_metrics(&self) -> anyhow::Result<String> {
        let request = axum::http::Request::get("/metrics").body(Vec::new())?;
        Ok(self.client.request_text(request).await?)
    }
}

/// What kubectl printed.
#[derive(Debug)]
pub struct Kubectl {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    /// The `Warning: ...` lines kubectl printed (the apiserver's and the webhook's warnings).
    pub fn warnings(&self) -> Vec<String> {
        self.stderr
            .lines()
            .filter_map(|l| l.strip_prefix("Warning: "))
            .map(str::to_owned)
            .collect()
    }
}

fn ca_of(file: &Kubeconfig, path: &Path) -> anyhow::Result<Option<String>> {
    use base64::Engine as _;
    let context = file.current_context.as_deref();
    let cluster_name = file
        .contexts
        .iter()
        .find(|c| Some(c.name.as_str()) == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    let Some(cluster) = file
        .clusters
        .iter()
        .find(|c| Some(&c.name) == cluster_name.as_ref())
        .and_then(|c| c.cluster.as_ref())
    else {
        return Ok(None);
    };
    if let Some(data) = &cluster.certificate_authority_data {
        let pem = base64::engine::general_purpose::STANDARD.decode(data.trim())?;
        return Ok(Some(String::from_utf8(pem)?));
    }
    if let Some(file) = &cluster.certificate_authority {
        let file = path.parent().unwrap_or(Path::new(".")).join(file);
        return Ok(Some(std::fs::read_to_string(file)?));
    }
    Ok(None)
}
