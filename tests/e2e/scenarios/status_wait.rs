//! `stateful-admission status --wait` in the CI step after a `helm upgrade`-style size change
//! (a server-side apply of the chart's new size): run by a developer who may only view the
//! namespace, it returns 0 only once the set was re-created with the new size and every claim
//! carries it, and 1, naming the claim, when a resize fails.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::wait::step;
use crate::support::{Scenario, Scope, ServeOptions, actors, eventually, install, objects, serve};

pub fn status_wait() -> Scenario {
    Scenario {
        name: "status_wait_returns_once_set_and_claims_carry_the_size",
        needs: &[],
        requires: None,
        body: |scope| body(scope).boxed(),
    }
}

async fn body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let class = format!("{ns}-fast");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let node = actors::start(&scope, vec![ns.clone()]);
    let _serve = scope.serve(ServeOptions::default()).await?;
    let manifest = |size: &str| {
        objects::manifest(&[objects::statefulset(
            &ns,
            "db",
            3,
            &class,
            size,
            json!({"metadata": {"annotations": {
                "stateful-admission.io/volume-claim-update-policy": "InPlace"}}}),
        )])
    };
    let apply = ["apply", "--server-side", "-f", "-"];
    cluster.kubectl(&apply, Some(&manifest("1Gi")))?;
    let sets: Api<StatefulSet> = Api::namespaced(scope.client(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), &ns);
    let sizes = || async {
        let mut out = Vec::new();
        for n in 0..3 {
            let claim = claims.get(&format!("data-db-{n}")).await?;
            out.push((
                objects::claim_request(&claim),
                objects::claim_capacity(&claim),
            ));
        }
        anyhow::Ok(out)
    };
    eventually(
        "3 ready replicas with bound 1Gi claims",
        Duration::from_secs(120),
        || async {
            let ready = sets
                .get("db")
                .await?
                .status
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            anyhow::ensure!(ready == 3, "{ready} of 3 ready");
            let got = sizes().await?;
            anyhow::ensure!(
                got.iter().all(|(_, c)| c.as_deref() == Some("1Gi")),
                "claims {got:?}"
            );
            Ok(())
        },
    )
    .await?;
    let viewer = viewer_kubeconfig(&scope).await?;
    let before = sets.get("db").await?.metadata.uid;

    step(s, "resizer held; apply 2Gi; status --wait right after");
    node.resize_paused.store(true, Ordering::SeqCst);
    cluster.kubectl(&apply, Some(&manifest("2Gi")))?;
    let mut wait = Waiting::start(&viewer, &ns, &["db", "--wait", "--timeout", "3m"])?;
    // Re-created with the new size, the highest claim patched and held by the resizer: a state
    // that stays until the resizer is back, in which `--wait` must still be waiting.
    eventually(
        "the set re-created at 2Gi, data-db-2 asking 2Gi at 1Gi",
        Duration::from_secs(120),
        || async {
            let set = sets.get("db").await?;
            let live = objects::template_size(&set, 0);
            anyhow::ensure!(
                set.metadata.uid != before && live.as_deref() == Some("2Gi"),
                "live template {live:?}"
            );
            let got = sizes().await?;
            anyhow::ensure!(
                got[2] == (Some("2Gi".into()), Some("1Gi".into())),
                "claims {got:?}"
            );
            Ok(())
        },
    )
    .await?;
    wait.line_with(&["1 updating"]).await?;
    anyhow::ensure!(
        wait.child.try_wait()?.is_none(),
        "status --wait ended while a claim was still resizing: {}",
        wait.seen.join("\n")
    );

    step(
        s,
        "resizer back: status --wait returns 0 once every claim is at 2Gi",
    );
    node.resize_paused.store(false, Ordering::SeqCst);
    let (code, stdout, stderr) = wait.exit().await?;
    let got = sizes().await?;
    anyhow::ensure!(
        code == Some(0),
        "status --wait exited {code:?}: {stdout}\n{stderr}"
    );
    anyhow::ensure!(
        got.iter()
            .all(|(r, c)| r.as_deref() == Some("2Gi") && c.as_deref() == Some("2Gi")),
        "status --wait returned before every claim carried 2Gi: {got:?}"
    );
    let set = sets.get("db").await?;
    anyhow::ensure!(
        objects::template_size(&set, 0).as_deref() == Some("2Gi")
            && !set
                .metadata
                .annotations
                .unwrap_or_default()
                .contains_key("stateful-admission.io/desired-volume-claim-templates"),
        "status --wait returned before the live set carried 2Gi"
    );
    anyhow::ensure!(
        stdout.ends_with(&format!(
            "statefulset {ns}/db: storage rollout complete: the live object and 3 of 3 claims carry the recorded templates"
        )),
        "{stdout}"
    );

    step(
        s,
        "a resize that fails: status --wait exits 1 naming the claim",
    );
    node.fail_resize(&ns, "data-db-2", "the volume's quota is exhausted");
    cluster.kubectl(&apply, Some(&manifest("3Gi")))?;
    let wait = Waiting::start(&viewer, &ns, &["db", "--wait", "--timeout", "3m"])?;
    let (code, stdout, stderr) = wait.exit().await?;
    anyhow::ensure!(
        code == Some(1),
        "status --wait exited {code:?}: {stdout}\n{stderr}"
    );
    anyhow::ensure!(
        stderr.contains(&format!(
            "error: statefulset {ns}/db: claim data-db-2: ControllerResizeError: the volume's quota is exhausted"
        )),
        "{stderr}"
    );
    Ok(())
}

/// A kubeconfig of a ServiceAccount of the namespace bound to the `view` ClusterRole there: a
/// developer who may get, list and watch in it and nothing else (not the controller's
/// journals, not StorageClasses).
async fn viewer_kubeconfig(scope: &Scope) -> anyhow::Result<std::path::PathBuf> {
    let ns = &scope.ns;
    install::apply(
        scope.cluster(),
        vec![
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "developer", "namespace": ns}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "developer-view", "namespace": ns},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                   "subjects": [{"kind": "ServiceAccount", "name": "developer", "namespace": ns}]}),
        ],
    )?;
    let accounts: Api<ServiceAccount> = Api::namespaced(scope.client(), ns);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request("developer", &PostParams::default(), &request)
        .await?
        .status
        .context("TokenRequest without status")?
        .token;
    let cluster = scope.cluster();
    let mut entry = json!({"server": cluster.server});
    if let Some(ca) = &cluster.ca_pem {
        entry["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": entry}],
        "users": [{"name": "developer", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "developer", "namespace": ns}}],
        "current-context": "e2e",
    });
    let path = scope
        .install
        .work_dir
        .join(scope.scenario)
        .join("developer.kubeconfig");
    std::fs::create_dir_all(path.parent().context("a directory")?)?;
    std::fs::write(&path, serde_json::to_vec_pretty(&config)?)?;
    Ok(path)
}

/// `status` running in the background, its stdout read line by line.
struct Waiting {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Waiting {
    fn start(kubeconfig: &std::path::Path, ns: &str, args: &[&str]) -> anyhow::Result<Self> {
        let mut child = Command::new(serve::binary()?)
            .arg("status")
            .args(["-n", ns, "--controller-namespace", install::NAMESPACE])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let (send, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            lines,
            seen: Vec::new(),
        })
    }

    /// Waits for a line of its output with every one of `parts`.
    async fn line_with(&mut self, parts: &[&str]) -> anyhow::Result<()> {
        let found = tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if parts.iter().all(|p| line.contains(p)) {
                    return true;
                }
            }
            false
        })
        .await;
        anyhow::ensure!(
            found == Ok(true),
            "status printed no line with {parts:?}:\n{}",
            self.seen.join("\n")
        );
        Ok(())
    }

    /// Its exit code, stdout and stderr once it ends.
    async fn exit(mut self) -> anyhow::Result<(Option<i32>, String, String)> {
        let mut child = self.child;
        let (code, stderr) = tokio::task::spawn_blocking(move || {
            let status = child.wait()?;
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                std::io::Read::read_to_string(&mut pipe, &mut stderr)?;
            }
            anyhow::Ok((status.code(), stderr))
        })
        .await??;
        while let Some(line) = self.lines.recv().await {
            self.seen.push(line);
        }
        Ok((code, self.seen.join("\n"), stderr))
    }
}
