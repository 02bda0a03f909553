//! What the user reads when a write is refused or defaulted: template edits that may not be
//! recorded are denied naming the field path (maxUnavailable 0 in the spelling and wording of
//! the cluster at hand); a namespace's default class wins over the
//! cluster's for classless claims; expansion limits stand beside the apiserver's own resize
//! denials, in the same style.

use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use serde_json::{Value, json};

use crate::support::wait::step;
use crate::support::{Scenario, Scope, ServeOptions, actors, eventually, install, objects};

pub fn template_denials() -> Scenario {
    Scenario {
        name: "denials_name_the_field_path",
        needs: &[],
        requires: None,
        body: |scope| template_denials_body(scope).boxed(),
    }
}

pub fn namespace_default_class() -> Scenario {
    Scenario {
        name: "namespace_default_class_wins_for_classless_claims",
        needs: &[],
        requires: None,
        body: |scope| namespace_default_class_body(scope).boxed(),
    }
}

pub fn expansion_limits() -> Scenario {
    Scenario {
        name: "expansion_limits_beside_the_builtin_resize_denials",
        needs: &[],
        requires: None,
        body: |scope| expansion_limits_body(scope).boxed(),
    }
}

async fn template_denials_body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let class = format!("{ns}-a");
    install::apply(
        cluster,
        vec![
            objects::storage_class(s, &class, true, json!({})),
            objects::storage_class(s, &format!("{ns}-b"), true, json!({})),
        ],
    )?;
    let _node = actors::start(&scope, vec![ns.clone()]);
    let _serve = scope.serve(ServeOptions::default()).await?;
    let set = objects::statefulset(&ns, "db", 1, &class, "1Gi", json!({}));
    cluster.kubectl(
        &["apply", "-f", "-"],
        Some(&objects::manifest(std::slice::from_ref(&set))),
    )?;

    step(s, "a template's storageClassName changed");
    let mut edited = set.clone();
    edited["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] =
        json!(format!("{ns}-b"));
    edited["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] =
        json!("2Gi");
    let out = cluster.kubectl_status(&["apply", "-f", "-"], Some(&objects::manifest(&[edited])))?;
    denied_with(
        &out,
        &[
            "The StatefulSet \"db\" is invalid",
            "spec.volumeClaimTemplates[0].spec.storageClassName: Forbidden: may not change; only",
        ],
    )?;

    step(s, "a template added");
    let mut added = set.clone();
    if let Some(templates) = added["spec"]["volumeClaimTemplates"].as_array_mut() {
        templates.push(objects::claim_template("logs", &class, "1Gi"));
    }
    let out = cluster.kubectl_status(&["apply", "-f", "-"], Some(&objects::manifest(&[added])))?;
    denied_with(&out, &["spec.volumeClaimTemplates[1]", "Forbidden"])?;

    // In the spelling the cluster's users have (the annotation where the API has no field,
    // which kubectl would refuse), worded as the cluster's own validation would.
    step(s, "maxUnavailable 0, as upstream validation words it");
    let mut zero = set.clone();
    objects::merge(
        &mut zero,
        scope.caps.mu_spelling().strategy(&json!(0), json!({})),
    );
    let out = cluster.kubectl_status(&["apply", "-f", "-"], Some(&objects::manifest(&[zero])))?;
    denied_with(&out, &scope.caps.zero_max_unavailable_denial())?;

    step(
        s,
        "the set is as it was: nothing recorded by a denied request",
    );
    let live = cluster.kubectl(&["get", "statefulset", "db", "-n", &ns, "-o", "json"], None)?;
    let live: Value = serde_json::from_str(&live.stdout)?;
    anyhow::ensure!(
        live.pointer("/metadata/annotations/stateful-admission.io~1desired-volume-claim-templates")
            .is_none(),
        "a denied edit left a recorded template"
    );
    Ok(())
}

/// kubectl failed, and its error names each of `parts`.
fn denied_with(out: &crate::support::cluster::Kubectl, parts: &[&str]) -> anyhow::Result<()> {
    anyhow::ensure!(!out.success, "the request was accepted: {}", out.stdout);
    // The apiserver's own refusal, had the webhook not answered first.
    anyhow::ensure!(
        !out.stderr
            .contains("updates to statefulset spec for fields other than"),
        "the apiserver's generic refusal, not ours: {}",
        out.stderr
    );
    for part in parts {
        anyhow::ensure!(
            out.stderr.contains(part),
            "the denial does not say `{part}`: {}",
            out.stderr
        );
    }
    Ok(())
}

async fn namespace_default_class_body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let plain = scope.namespace("plain").await?;
    let cluster = scope.cluster();
    let (cluster_default, team, explicit) = (
        format!("{ns}-cluster"),
        format!("{ns}-team"),
        format!("{ns}-explicit"),
    );
    install::apply(
        cluster,
        vec![
            objects::storage_class(
                s,
                &cluster_default,
                true,
                json!({"metadata": {"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}}),
            ),
            objects::storage_class(s, &team, true, json!({})),
            objects::storage_class(s, &explicit, true, json!({})),
        ],
    )?;
    cluster.kubectl(
        &[
            "annotate",
            "namespace",
            &ns,
            &format!("stateful-admission.io/default-storage-class={team}"),
        ],
        None,
    )?;
    let _serve = scope.serve(ServeOptions::default()).await?;
    let claim = |namespace: &str, name: &str, class: Option<&str>| {
        let mut c = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
        if let Some(class) = class {
            c["spec"]["storageClassName"] = json!(class);
        }
        c
    };
    // The webhook's view must have the namespace's annotation and the classes before the test
    // relies on them: a dry run shows what a create would get.
    step(s, "classless claim in the annotated namespace");
    let classless = objects::manifest(&[claim(&ns, "classless", None)]);
    eventually(
        "the namespace default applied (dry run)",
        Duration::from_secs(20),
        || async {
            let out = cluster.kubectl(
                &["create", "--dry-run=server", "-o", "json", "-f", "-"],
                Some(&classless),
            )?;
            let got: Value = serde_json::from_str(&out.stdout)?;
            let class = got
                .pointer("/spec/storageClassName")
                .and_then(Value::as_str);
            anyhow::ensure!(class == Some(team.as_str()), "a dry run got {class:?}");
            Ok(())
        },
    )
    .await?;
    cluster.kubectl(&["create", "-f", "-"], Some(&classless))?;
    cluster.kubectl(
        &["create", "-f", "-"],
        Some(&objects::manifest(&[claim(
            &ns,
            "explicit",
            Some(&explicit),
        )])),
    )?;
    cluster.kubectl(
        &["create", "-f", "-"],
        Some(&objects::manifest(&[claim(&plain, "classless", None)])),
    )?;
    let class_of = |namespace: &str, name: &str| {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), namespace);
        let name = name.to_owned();
        async move {
            anyhow::Ok(
                api.get(&name)
                    .await?
                    .spec
                    .and_then(|s| s.storage_class_name)
                    .unwrap_or_default(),
            )
        }
    };
    let got = class_of(&ns, "classless").await?;
    anyhow::ensure!(
        got == team,
        "the namespace's default class: got {got:?}, want {team:?}"
    );
    let got = class_of(&ns, "explicit").await?;
    anyhow::ensure!(
        got == explicit,
        "a class the client set is kept: got {got:?}"
    );
    let got = class_of(&plain, "classless").await?;
    anyhow::ensure!(
        got == cluster_default,
        "without a namespace default, the cluster's: got {got:?}, want {cluster_default:?}"
    );
    Ok(())
}

async fn expansion_limits_body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let cluster = scope.cluster();
    let (limited, fixed) = (format!("{ns}-limited"), format!("{ns}-fixed"));
    install::apply(
        cluster,
        vec![
            objects::storage_class(
                s,
                &limited,
                true,
                json!({"metadata": {"annotations": {"stateful-admission.io/max-volume-size": "5Gi"}}}),
            ),
            objects::storage_class(s, &fixed, false, json!({})),
        ],
    )?;
    let _node = actors::start(&scope, vec![ns.clone()]);
    let _serve = scope.serve(ServeOptions::default()).await?;
    let claim = |name: &str, class: &str| {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": "1Gi"}}}})
    };
    cluster.kubectl(
        &["create", "-f", "-"],
        Some(&objects::manifest(&[
            claim("limited", &limited),
            claim("fixed", &fixed),
        ])),
    )?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), &ns);
    for name in ["limited", "fixed"] {
        eventually(
            &format!("claim {name} bound"),
            Duration::from_secs(60),
            || async {
                let phase = claims.get(name).await?.status.and_then(|s| s.phase);
                anyhow::ensure!(phase.as_deref() == Some("Bound"), "{phase:?}");
                Ok(())
            },
        )
        .await?;
    }
    let resize = |name: &str, size: &str| {
        cluster.kubectl_status(
            &[
                "patch",
                "pvc",
                name,
                "-n",
                &ns,
                "--type=merge",
                "-p",
                &json!({"spec": {"resources": {"requests": {"storage": size}}}}).to_string(),
            ],
            None,
        )
    };

    step(s, "beyond the class's max-volume-size: our denial");
    let out = resize("limited", "10Gi")?;
    denied_with(
        &out,
        &[
            "The PersistentVolumeClaim \"limited\" is invalid: spec.resources.requests.storage: \
             Invalid value: \"10Gi\": must be less than or equal to 5Gi, the \
             stateful-admission.io/max-volume-size of StorageClass",
        ],
    )?;
    step(s, "within it: the apiserver grows the claim");
    resize("limited", "3Gi")?;
    eventually(
        "limited at 3Gi capacity",
        Duration::from_secs(30),
        || async {
            let claim = claims.get("limited").await?;
            let capacity = objects::claim_capacity(&claim);
            anyhow::ensure!(capacity.as_deref() == Some("3Gi"), "capacity {capacity:?}");
            Ok(())
        },
    )
    .await?;

    step(
        s,
        "a class without allowVolumeExpansion: the apiserver's own resize plugin denies",
    );
    let out = resize("fixed", "2Gi")?;
    denied_with(
        &out,
        &[
            "persistentvolumeclaims \"fixed\" is forbidden: only dynamically provisioned pvc can be resized",
        ],
    )?;
    anyhow::ensure!(
        !out.stderr.contains("stateful-admission.io"),
        "the built-in plugin answers before our validating webhook: {}",
        out.stderr
    );
    Ok(())
}
