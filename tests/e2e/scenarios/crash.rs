//! A `kill -9` of `serve` right after each step of a convergence (journal written, set deleted,
//! set created, journal removed), and a fresh `serve` after it: the set converges with its
//! desired templates, once, and no pod or claim is lost or replaced.
//!
//! Each crash point is pinned, not raced: the chart's ClusterRole loses the verb of the next
//! step (delete, create, patch of StatefulSets) while the step under test happens, so the
//! process is killed exactly between the two; the role comes back before the restart.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::support::history::SetHistory;
use crate::support::wait::step;
use crate::support::{Scenario, Scope, ServeOptions, actors, eventually, install, objects};

pub fn crash_at_every_step() -> Scenario {
    Scenario {
        name: "convergence_survives_kill_at_every_step",
        needs: &[],
        requires: None,
        body: |scope| body(scope).boxed(),
    }
}

#[derive(Debug, Clone, Copy)]
enum CrashPoint {
    JournalWritten,
    SetDeleted,
    SetCreated,
    JournalRemoved,
}

impl CrashPoint {
    /// The verb on StatefulSets withheld so that the process stops right after this point.
    fn withheld(self) -> Option<&'static str> {
        match self {
            CrashPoint::JournalWritten => Some("delete"),
            CrashPoint::SetDeleted => Some("create"),
            CrashPoint::SetCreated => Some("patch"),
            CrashPoint::JournalRemoved => None,
        }
    }
}

async fn body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let client = scope.client();
    let cluster = scope.cluster();
    let class = format!("{ns}-fast");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let _node = actors::start(&scope, vec![ns.clone()]);
    let manifest = |size: &str| objects::statefulset(&ns, "db", 2, &class, size, json!({}));
    let apply = |size: &str| {
        cluster.kubectl(
            &["apply", "--server-side", "-f", "-"],
            Some(&objects::manifest(&[manifest(size)])),
        )
    };
    let mut serve = scope.serve(ServeOptions::default()).await?;
    apply("1Gi")?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let journals: Api<ConfigMap> = Api::namespaced(client.clone(), install::NAMESPACE);
    let journal_open = || async {
        anyhow::Ok(
            !journals
                .list(&ListParams::default().labels("stateful-admission.io/journal"))
                .await?
                .items
                .is_empty(),
        )
    };
    eventually(
        "2 ready replicas with bound claims",
        Duration::from_secs(90),
        || async {
            let set = sets.get("db").await?;
            let ready = set
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            anyhow::ensure!(ready == 2, "{ready} of 2 ready");
            for n in 0..2 {
                let phase = claims
                    .get(&format!("data-db-{n}"))
                    .await?
                    .status
                    .and_then(|s| s.phase);
                anyhow::ensure!(phase.as_deref() == Some("Bound"), "data-db-{n}: {phase:?}");
            }
            Ok(())
        },
    )
    .await?;
    let history = SetHistory::watch(&scope, &ns);
    let before = uids(&scope, &ns).await?;
    let points = [
        (CrashPoint::JournalWritten, "2Gi"),
        (CrashPoint::SetDeleted, "3Gi"),
        (CrashPoint::SetCreated, "4Gi"),
        (CrashPoint::JournalRemoved, "5Gi"),
    ];
    for (i, (point, size)) in points.into_iter().enumerate() {
        step(s, &format!("kill -9 right after {point:?} ({size})"));
        let old_uid = sets.get("db").await?.metadata.uid;
        if let Some(verb) = point.withheld() {
            scope.install.revoke("apps", "statefulsets", verb)?;
        }
        apply(size)?;
        eventually(
            &format!("the convergence at {point:?}"),
            Duration::from_secs(60),
            || async {
                let set = sets.get_opt("db").await?;
                let open = journal_open().await?;
                let reached = match point {
                    CrashPoint::JournalWritten => {
                        open && set.as_ref().is_some_and(|x| x.metadata.uid == old_uid)
                    }
                    CrashPoint::SetDeleted => open && set.is_none(),
                    CrashPoint::SetCreated => {
                        open && set.as_ref().is_some_and(|x| x.metadata.uid != old_uid)
                    }
                    CrashPoint::JournalRemoved => {
                        !open && set.as_ref().is_some_and(|x| x.metadata.uid != old_uid)
                    }
                };
                anyhow::ensure!(
                    reached,
                    "journal open: {open}, set: {:?}",
                    set.map(|x| x.metadata.uid)
                );
                Ok(())
            },
        )
        .await?;
        serve.kill();
        scope.install.restore_access()?;
        // The container restarted in its pod: same identity, so it takes its Lease back at once.
        serve = scope
            .serve(ServeOptions {
                identity: Some(serve.identity.clone()),
                ..ServeOptions::default()
            })
            .await?;
        let converged = eventually(
            &format!("convergence to {size} after the restart"),
            Duration::from_secs(90),
            || async {
                let set = sets.get("db").await?;
                let live = objects::template_size(&set, 0);
                anyhow::ensure!(live.as_deref() == Some(size), "live template {live:?}");
                anyhow::ensure!(!journal_open().await?, "a journal is still open");
                let annotations = set.metadata.annotations.clone().unwrap_or_default();
                anyhow::ensure!(
                    !annotations
                        .contains_key("stateful-admission.io/desired-volume-claim-templates"),
                    "still recorded as desired"
                );
                Ok(set)
            },
        )
        .await?;
        let owners = objects::template_owners(&converged);
        anyhow::ensure!(
            owners == ["kubectl"],
            "after the crash at {point:?}, spec.volumeClaimTemplates is owned by {owners:?}"
        );
        let seen = history.of("db");
        anyhow::ensure!(
            seen.uids.len() == i + 2 && seen.deletions == i + 1,
            "after the crash at {point:?}: {} objects and {} deletions of the set, want {} and {}",
            seen.uids.len(),
            seen.deletions,
            i + 2,
            i + 1
        );
        let now = uids(&scope, &ns).await?;
        anyhow::ensure!(
            now == before,
            "pods or claims replaced: before {before:?}, after {now:?}"
        );
        // The next server-side apply still meets no conflict (ownership came back).
        apply(size)?;
    }
    Ok(())
}

async fn uids(scope: &Scope, ns: &str) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    let mut map = BTreeMap::new();
    for pod in objects::pods_of(&scope.client(), ns, "db").await? {
        map.insert(
            format!("pod/{}", pod.metadata.name.unwrap_or_default()),
            pod.metadata.uid,
        );
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scope.client(), ns);
    for claim in claims.list(&ListParams::default()).await?.items {
        map.insert(
            format!("pvc/{}", claim.metadata.name.unwrap_or_default()),
            claim.metadata.uid,
        );
    }
    anyhow::ensure!(
        map.len() == 4,
        "expected 2 pods and 2 claims: {:?}",
        map.keys()
    );
    Ok(map)
}

pub fn apply_during_recreate() -> Scenario {
    Scenario {
        name: "server_side_apply_while_the_set_is_recreated",
        needs: &[],
        requires: None,
        body: |scope| apply_during_recreate_body(scope).boxed(),
    }
}

/// A GitOps tool applying while the set is deleted for its re-create (between our orphan delete
/// and our create) creates the set itself: the apiserver turns a server-side apply of a missing
/// object into a create. The controller must see that set as the user's, leave it as applied,
/// and close its journal; pods and claims are kept and the next apply meets no conflict.
async fn apply_during_recreate_body(scope: Scope) -> anyhow::Result<()> {
    let s = scope.scenario;
    let ns = scope.ns.clone();
    let client = scope.client();
    let cluster = scope.cluster();
    let class = format!("{ns}-fast");
    install::apply(
        cluster,
        vec![objects::storage_class(s, &class, true, json!({}))],
    )?;
    let _node = actors::start(&scope, vec![ns.clone()]);
    let manifest = |size: &str| objects::statefulset(&ns, "db", 2, &class, size, json!({}));
    let apply = |size: &str| {
        cluster.kubectl(
            &["apply", "--server-side", "-f", "-"],
            Some(&objects::manifest(&[manifest(size)])),
        )
    };
    let _serve = scope.serve(ServeOptions::default()).await?;
    apply("1Gi")?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let journals: Api<ConfigMap> = Api::namespaced(client.clone(), install::NAMESPACE);
    let journal_open = || async {
        anyhow::Ok(
            !journals
                .list(&ListParams::default().labels("stateful-admission.io/journal"))
                .await?
                .items
                .is_empty(),
        )
    };
    eventually("2 ready replicas", Duration::from_secs(90), || async {
        let ready = sets.get("db").await?.status.and_then(|s| s.ready_replicas);
        anyhow::ensure!(ready == Some(2), "{ready:?} ready");
        Ok(())
    })
    .await?;
    let before = uids(&scope, &ns).await?;

    step(
        s,
        "2Gi recorded; our create withheld, so the set stays deleted",
    );
    scope.install.revoke("apps", "statefulsets", "create")?;
    apply("2Gi")?;
    eventually(
        "the set deleted for its re-create",
        Duration::from_secs(60),
        || async {
            let gone = sets.get_opt("db").await?.is_none();
            anyhow::ensure!(gone && journal_open().await?, "set gone: {gone}");
            Ok(())
        },
    )
    .await?;

    step(
        s,
        "the GitOps tool applies meanwhile: the apiserver creates the set",
    );
    let out = apply("2Gi")?;
    anyhow::ensure!(
        out.stdout.contains("serverside-applied") || out.stdout.contains("created"),
        "{}",
        out.stdout
    );
    let theirs = sets.get("db").await?.metadata.uid;
    scope.install.restore_access()?;
    eventually(
        "the journal closed without a second re-create",
        Duration::from_secs(60),
        || async {
            anyhow::ensure!(!journal_open().await?, "a journal is still open");
            Ok(())
        },
    )
    .await?;
    let set = sets.get("db").await?;
    anyhow::ensure!(
        set.metadata.uid == theirs,
        "the set the user's apply created was replaced"
    );
    anyhow::ensure!(
        objects::template_size(&set, 0).as_deref() == Some("2Gi"),
        "the user's templates are not what they applied"
    );
    let owners = objects::template_owners(&set);
    anyhow::ensure!(owners == ["kubectl"], "owners of the templates: {owners:?}");
    eventually(
        "pods adopted by the new set",
        Duration::from_secs(60),
        || async {
            for pod in objects::pods_of(&client, &ns, "db").await? {
                let owner = pod
                    .metadata
                    .owner_references
                    .unwrap_or_default()
                    .into_iter()
                    .find(|o| o.controller == Some(true));
                anyhow::ensure!(
                    owner.as_ref().map(|o| Some(o.uid.clone())) == Some(theirs.clone()),
                    "{:?} owned by {owner:?}",
                    pod.metadata.name
                );
            }
            Ok(())
        },
    )
    .await?;
    let now = uids(&scope, &ns).await?;
    anyhow::ensure!(
        now == before,
        "pods or claims replaced: before {before:?}, after {now:?}"
    );
    apply("2Gi")?;
    Ok(())
}
