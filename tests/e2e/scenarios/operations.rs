//! Operating the release on a real cluster.
//!
//! - Observe mode (`--controller-mode=observe`): for a recorded InPlace size change, a claim
//!   whose namespace default class appears (where the apiserver refuses that, the refusal's
//!   Event instead), and conditions, the `Would…` Events appear, and the
//!   apiserver's own counters (`apiserver_request_total` on its `/metrics`) show that nothing
//!   but Events and Leases was written meanwhile, besides the test's own two writes.
//! - `stateful-admission check` against this install: no check fails, and none advises
//!   turning off a part of ours that the cluster does not do itself (as the suite found it,
//!   not by version); with another CA's caBundle the webhook checks (and the dry runs the
//!   apiserver could not take to the webhook) fail, and with the leader stopped the Lease check
//!   fails; exit 1 each time.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::wait::step;
use crate::support::{
    SCENARIO_LABEL, Scenario, Scope, ServeOptions, USER, actors, eventually, install, objects,
    serve,
};

pub fn observe_mode() -> Scenario {
    Scenario {
        name: "observe_mode_reports_and_writes_nothing",
        needs: &[],
        requires: None,
        body: |scope| observe_body(scope).boxed(),
    }
}

pub fn check_install() -> Scenario {
    Scenario {
        name: "check_passes_then_names_a_broken_ca_bundle_and_a_stopped_leader",
        needs: &[],
        requires: None,
        body: |scope| check_body(scope).boxed(),
    }
}

/// Writes the apiserver counted, by `(resource, verb)`: `apiserver_request_total` samples of
/// the write verbs that were not dry runs.
fn writes(metrics: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split("\",")
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let verb = label("verb");
        if !matches!(
            verb.as_str(),
            "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE" | "DELETECOLLECTION"
        ) || !label("dry_run").is_empty()
        {
            continue;
        }
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        *out.entry((label("resource"), verb)).or_default() += value;
    }
    out
}

/// The resources the chart's roles let the release create, update, patch or delete (a
/// subresource counts as its resource, as `apiserver_request_total`'s `resource` label does).
fn writable_resources(documents: &[Value]) -> std::collections::BTreeSet<String> {
    documents
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
        .filter(|rule| {
            rule["verbs"].as_array().is_some_and(|verbs| {
                verbs.iter().any(|v| {
                    matches!(
                        v.as_str(),
                        Some("create" | "update" | "patch" | "delete" | "deletecollection" | "*")
                    )
                })
            })
        })
        .flat_map(|rule| rule["resources"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| {
            r.as_str()
                .map(|r| r.split('/').next().unwrap_or(r).to_owned())
        })
        .collect()
}

/// Namespaces of earlier scenarios are deleted in the background; their deletion writes
/// (the namespace controller empties them) would blur the counters.
async fn earlier_namespaces_gone(scope: &Scope) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(scope.client());
    eventually(
        "namespaces of earlier scenarios gone",
        Duration::from_secs(120),
        || async {
            let left: Vec<String> = namespaces
                .list(&ListParams::default().labels(SCENARIO_LABEL))
                .await?
                .items
                .into_iter()
                .filter(|n| {
                    n.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(SCENARIO_LABEL))
                        .is_some_and(|s| *s != crate::support::label_value(scope.scenario))
                })
                .filter_map(|n| n.metadata.name)
                .collect();
            anyhow::ensure!(left.is_empty(), "still there: {left:?}");
            Ok(())
        },
    )
    .await
}

async fn observe_body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let client = scope.client();
    let (class, team) = (format!("{ns}-fast"), format!("{ns}-team"));
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &ns,
            &PatchParams::apply(USER),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "annotations": {
                    "stateful-admission.io/default-storage-class": team}}})),
        )
        .await?;
    let _node = actors::start(&scope, vec![ns.clone()]);
    let serve = scope
        .serve(ServeOptions::args(&["--controller-mode=observe"]))
        .await?;
    let manifest = |size: &str| {
        objects::manifest(&[objects::statefulset(
            &ns,
            "db",
            2,
            &class,
            size,
            json!({"metadata": {"annotations": {
                "stateful-admission.io/volume-claim-update-policy": "InPlace"}}}),
        )])
    };
    let apply = ["apply", "--server-side", "-f", "-"];
    cluster.kubectl(&apply, Some(&manifest("1Gi")))?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    eventually(
        "2 ready replicas with bound claims",
        Duration::from_secs(120),
        || async {
            let set = sets.get("db").await?;
            let status = set.status.unwrap_or_default();
            anyhow::ensure!(
                status.ready_replicas == Some(2)
                    && status.current_revision == status.update_revision,
                "{status:?}"
            );
            for n in 0..2 {
                let claim = claims.get(&format!("data-db-{n}")).await?;
                anyhow::ensure!(
                    objects::claim_capacity(&claim).as_deref() == Some("1Gi"),
                    "data-db-{n} not bound yet"
                );
            }
            Ok(())
        },
    )
    .await?;
    // A claim made while its namespace's default class does not exist yet.
    claims
        .create(
            &PostParams {
                field_manager: Some(USER.into()),
                ..PostParams::default()
            },
            &serde_json::from_value(json!({
                "metadata": {"name": "loose", "namespace": ns},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}}))?,
        )
        .await?;
    earlier_namespaces_gone(&scope).await?;
    // Let what the cluster does on its own settle (status writes of the set, binding).
    tokio::time::sleep(Duration::from_secs(3)).await;

    step(
        s,
        "observing: a size change, a namespace default class appearing",
    );
    let before = writes(&cluster.apiserver_metrics().await?);
    cluster.kubectl(&apply, Some(&manifest("2Gi")))?;
    install::apply(
        cluster,
        vec![objects::storage_class(s, &team, true, json!({}))],
    )?;
    // Where the apiserver refuses a class on a claim created without one (before KEP-3333),
    // the controller plans no assignment: it tells the claim why it keeps none, in observe mode
    // too (an Event is the one write observe mode makes).
    let assignment = if scope.caps.class_from_unset == Some(false) {
        "DefaultStorageClassRejected"
    } else {
        "WouldAssignStorageClass"
    };
    let expected = [
        "WouldPatchClaim",
        "WouldStartConvergence",
        assignment,
        "WouldWriteConditions",
    ];
    eventually("the Would… Events", Duration::from_secs(60), || async {
        let mut missing = Vec::new();
        for reason in expected {
            if objects::events(&client, &ns, reason).await?.is_empty() {
                missing.push(reason);
            }
        }
        anyhow::ensure!(missing.is_empty(), "missing {missing:?}");
        Ok(())
    })
    .await?;
    // More reconciles: nothing planned is written late either.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = writes(&cluster.apiserver_metrics().await?);
    // The apiserver counts every client's writes; on a real cluster its own controllers write
    // meanwhile (the endpoints controller, say). Only a resource the release may write can
    // carry a write of ours, and the test's own two writes are of such resources.
    let writable = writable_resources(&scope.install.documents);
    let mut written: BTreeMap<(String, String), f64> = BTreeMap::new();
    for (key, count) in &after {
        let delta = count - before.get(key).copied().unwrap_or(0.0);
        let could_be_ours = writable.contains(&key.0) || key.0 == "storageclasses";
        if delta > 0.0 && could_be_ours && !matches!(key.0.as_str(), "events" | "leases") {
            written.insert(key.clone(), delta);
        }
    }
    // The test's own: the server-side apply of the set and of the class.
    let ours: BTreeMap<(String, String), f64> = [
        (("statefulsets".to_owned(), "APPLY".to_owned()), 1.0),
        (("storageclasses".to_owned(), "APPLY".to_owned()), 1.0),
    ]
    .into();
    anyhow::ensure!(
        written == ours,
        "writes other than Events and Leases while observing: {written:?}, expected only {ours:?}"
    );
    let loose = claims.get("loose").await?;
    anyhow::ensure!(
        loose
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_ref())
            .is_none(),
        "the classless claim stays classless"
    );
    let set = sets.get("db").await?;
    anyhow::ensure!(
        objects::condition(&set, "Available").is_none(),
        "no conditions written"
    );
    for n in 0..2 {
        let claim = claims.get(&format!("data-db-{n}")).await?;
        anyhow::ensure!(
            objects::claim_request(&claim).as_deref() == Some("1Gi"),
            "data-db-{n} patched"
        );
    }
    let text = serve.metrics().await?;
    anyhow::ensure!(
        serve::sample_value(
            &text,
            "stateful_admission_controller_actions_total{action=\"PatchClaim\",result=\"observed\"}"
        ) >= 1.0
            && serve::sample_value(
                &text,
                "stateful_admission_controller_actions_total{action=\"PatchClaim\",result=\"done\"}"
            ) == 0.0,
        "observed, not done:\n{text}"
    );
    Ok(())
}

/// `stateful-admission check` against the install, with the cluster-admin kubeconfig: its JSON
/// report and exit code.
fn run_check(scope: &Scope) -> anyhow::Result<(Value, Option<i32>)> {
    let out = Command::new(serve::binary()?)
        .args([
            "check",
            "--namespace",
            install::NAMESPACE,
            "--release",
            install::RELEASE,
            "--probe-namespace",
            &scope.ns,
            "-o",
            "json",
        ])
        .env("KUBECONFIG", &scope.cluster().kubeconfig)
        .env_remove("RUST_LOG")
        .output()?;
    let report: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        anyhow::anyhow!(
            "check printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((report, out.status.code()))
}

/// `name: status` of every check.
fn statuses(report: &Value) -> BTreeMap<String, String> {
    report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

async fn check_body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let client = scope.client();
    let class = format!("{ns}-fast");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    // The chart's Deployment, as installed on this cluster: where the cluster gives
    // class-less claims a default class itself (KEP-3333), our part off, as the runbook
    // advises. No scheduler here: its pods stay Pending; `check` reads its arguments. Removed
    // at the end.
    let retroactive = format!(
        "--retroactive-default-class={}",
        !scope.caps.retroactive_default_class_native()
    );
    let mut deployment = scope
        .install
        .documents
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("the chart renders no Deployment"))?;
    if let Some(args) = deployment
        .pointer_mut("/spec/template/spec/containers/0/args")
        .and_then(Value::as_array_mut)
    {
        for arg in args.iter_mut() {
            if arg
                .as_str()
                .is_some_and(|a| a.starts_with("--retroactive-default-class="))
            {
                *arg = json!(retroactive);
            }
        }
    }
    install::apply(cluster, vec![deployment.clone()])?;
    let result = check_steps(&scope, &ns, &class, &client, &retroactive).await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), install::NAMESPACE);
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
    let _ = deployments.delete(name, &Default::default()).await;
    result
}

async fn check_steps(
    scope: &Scope,
    ns: &str,
    class: &str,
    client: &kube::Client,
    retroactive: &str,
) -> anyhow::Result<()> {
    let s = scope.scenario;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            ns,
            &PatchParams::apply(USER),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "annotations": {
                    "stateful-admission.io/default-storage-class": class}}})),
        )
        .await?;
    scope.cluster().kubectl(
        &["apply", "--server-side", "-f", "-"],
        Some(&objects::manifest(&[objects::statefulset(
            ns,
            "db",
            0,
            class,
            "1Gi",
            json!({}),
        )])),
    )?;
    let leader = scope.serve(ServeOptions::args(&[retroactive])).await?;
    // A second replica that only serves the webhook, so that stopping the leader leaves the
    // admission path up.
    let _webhook = scope
        .serve(ServeOptions::args(&["--controller=false"]))
        .await?;
    eventually(
        "the Lease held, with the gate probed",
        Duration::from_secs(30),
        || async {
            anyhow::ensure!(
                leader
                    .metric("stateful_admission_controller_leader")
                    .await?
                    == 1.0,
                "not leading yet"
            );
            // check learns the gate itself, as the replicas do.
            let (report, _) = run_check(scope)?;
            let gate = statuses(&report).get("capability max-unavailable").cloned();
            anyhow::ensure!(gate.as_deref() == Some("ok"), "gate {gate:?}");
            Ok(())
        },
    )
    .await?;

    step(
        s,
        "check against the install: nothing failed, no wrong advice",
    );
    let (report, code) = run_check(scope)?;
    let found = statuses(&report);
    anyhow::ensure!(
        code == Some(0) && !found.is_empty() && found.values().all(|v| v != "failed"),
        "exit {code:?}: {report:#}"
    );
    // What the cluster does natively is judged by what it does: no line may advise turning
    // off a part of ours that the cluster does not do itself.
    let wrong = scope.caps.wrong_advice(&report);
    anyhow::ensure!(
        wrong.is_empty(),
        "advice to turn off what {} does not do itself: {wrong:?}\n{report:#}",
        scope.caps.git_version
    );
    for name in [
        "mutating webhook configuration",
        "validating webhook configuration",
        "dry-run StatefulSet create",
        "dry-run StatefulSet template edit",
        "dry-run PersistentVolumeClaim create",
        "controller lease",
        "capability max-unavailable",
        "capability claim-volume-attributes-class",
        "capability volume-attributes-class-api",
        "capability native-template-edits",
        "service account permissions",
        "kubernetes version",
    ] {
        anyhow::ensure!(found.contains_key(name), "no check {name:?}: {report:#}");
    }

    step(s, "another CA in the caBundle: the webhook checks fail");
    let other = stateful_admission::certs::generate("other", &["127.0.0.1".to_owned()], 30, 30)?;
    scope.install.register_webhooks(&other.ca_cert_pem)?;
    let broken = async {
        // The apiserver reloads webhook configurations from its watch within moments.
        let (report, code) = eventually(
            "check failing the dry runs",
            Duration::from_secs(30),
            || async {
                let (report, code) = run_check(scope)?;
                anyhow::ensure!(
                    statuses(&report)
                        .get("dry-run StatefulSet create")
                        .map(String::as_str)
                        == Some("failed"),
                    "{report:#}"
                );
                Ok((report, code))
            },
        )
        .await?;
        let found = statuses(&report);
        anyhow::ensure!(code == Some(1), "exit {code:?}: {report:#}");
        for name in [
            "mutating webhook configuration",
            "validating webhook configuration",
        ] {
            anyhow::ensure!(
                found.get(name).map(String::as_str) == Some("failed"),
                "{name}: {report:#}"
            );
        }
        anyhow::ensure!(
            found.get("controller lease").map(String::as_str) == Some("ok"),
            "{report:#}"
        );
        Ok(())
    }
    .await;
    scope.install.register_webhooks(&scope.install.ca_pem)?;
    broken?;

    step(s, "the leader stopped: the Lease check fails");
    leader.kill();
    let (report, code) = eventually(
        "the Lease past its duration",
        Duration::from_secs(60),
        || async {
            let (report, code) = run_check(scope)?;
            anyhow::ensure!(
                statuses(&report)
                    .get("controller lease")
                    .map(String::as_str)
                    == Some("failed"),
                "{report:#}"
            );
            Ok((report, code))
        },
    )
    .await?;
    anyhow::ensure!(code == Some(1), "exit {code:?}: {report:#}");
    let failed: Vec<String> = statuses(&report)
        .into_iter()
        .filter(|(_, v)| v == "failed")
        .map(|(k, _)| k)
        .collect();
    anyhow::ensure!(
        failed == ["controller lease"],
        "only the Lease fails while the webhook replica serves: {report:#}"
    );
    Ok(())
}
