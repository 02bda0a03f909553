//! What the cluster does, learned by the prober of `serve` from the fake speaking as each
//! captured apiserver version: every capability comes out as that version's captured answers
//! say (the same table the captures give the pure judge in src/capabilities/judge.rs), those
//! that need an existing claim included.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use serde_json::json;
use stateful_admission::capabilities::run::{Prober, Settings};
use stateful_admission::capabilities::{Capabilities, CapabilityCell, Name};
use stateful_admission::cluster::watch;
use tokio_util::sync::CancellationToken;

use crate::support::controller::{CONTROLLER_NAMESPACE, client, eventually};
use crate::support::fake_apiserver::{FakeApiConfig, FakeApiServer, Profile};

/// A cluster with the claims the dry-run patches need: one class-less and unbound, one bound
/// whose request (3Gi) is above its capacity (2Gi), of an expandable class.
fn seed(api: &FakeApiServer) {
    api.put_object(
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard"}, "provisioner": "example.com/none",
        "allowVolumeExpansion": true}),
    );
    api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "no-class", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}}));
    api.put_object(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "expanding", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
                 "volumeName": "pv-expanding", "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": "3Gi"}}},
        "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                   "capacity": {"storage": "2Gi"}}}));
}

/// What a prober learns of `api` once every capability is known (or 20 s passed).
async fn learned(api: &FakeApiServer) -> Arc<Capabilities> {
    let client = client(api);
    let stop = CancellationToken::new();
    let (view, driver) = watch::from_cluster(client.clone(), Some(CONTROLLER_NAMESPACE));
    let driver = tokio::spawn(driver);
    let cell = CapabilityCell::default();
    let prober = Prober::new(
        Settings {
            namespace: CONTROLLER_NAMESPACE.to_owned(),
            ..Settings::default()
        },
        &mut Registry::default(),
        cell.clone(),
    );
    let task = tokio::spawn(prober.run(client, Some(view), stop.clone()));
    let all_known = eventually(Duration::from_secs(20), || {
        cell.get().iter().all(|(_, l)| l.value.is_some())
    })
    .await;
    stop.cancel();
    let _ = task.await;
    driver.abort();
    let capabilities = cell.get();
    assert!(all_known, "{capabilities:#?}");
    capabilities
}

#[tokio::test(flavor = "multi_thread")]
async fn each_version_s_capabilities_are_learned_from_what_it_answers() {
    for profile in Profile::ALL {
        let api = FakeApiServer::start_with(FakeApiConfig::profile(profile)).await;
        seed(&api);
        let got = learned(&api).await;
        let value = |name: Name| got.value(name).map_or("unknown", |v| v.as_str());
        let row: Vec<&str> = Name::ALL.into_iter().map(value).collect();
        let want: [&str; 6] = match profile {
            Profile::V1_24 => ["absent", "absent", "none", "refused", "refused", "no"],
            Profile::V1_32 => ["dropped", "dropped", "none", "accepted", "accepted", "no"],
            Profile::V1_32GatesOn => ["kept", "kept", "v1beta1", "accepted", "accepted", "no"],
            Profile::V1_35 | Profile::V1_36 => {
                ["dropped", "kept", "v1", "accepted", "accepted", "no"]
            }
            Profile::V1_35MaxUnavailableOn => ["kept", "kept", "v1", "accepted", "accepted", "no"],
        };
        assert_eq!(row, want, "{}: {got:#?}", profile.label());
        for (name, learned) in got.iter() {
            assert_eq!(learned.how.source(), "probe", "{}: {name}", profile.label());
        }
        // Nothing the probes sent was stored.
        assert!(
            api.writes()
                .iter()
                .all(|w| w.is_dry_run() || w.method == "GET"),
            "{}: {:?}",
            profile.label(),
            api.writes()
        );
        assert_eq!(
            api.list::<k8s_openapi::api::apps::v1::StatefulSet>().len(),
            0,
            "{}",
            profile.label()
        );
    }
}

/// A synthetic apiserver with KEP-4650 (no captured version has it): OpenAPI lists the field
/// and the dry run keeps it.
#[tokio::test(flavor = "multi_thread")]
async fn native_template_edits_are_learned_where_the_apiserver_keeps_the_field() {
    let api = FakeApiServer::start_with(FakeApiConfig {
        native_template_edits: true,
        ..FakeApiConfig::profile(Profile::V1_36)
    })
    .await;
    seed(&api);
    let got = learned(&api).await;
    assert_eq!(
        got.value(Name::NativeTemplateEdits).map(|v| v.as_str()),
        Some("volumeClaimUpdatePolicy"),
        "{got:#?}"
    );
    assert!(
        got.get(Name::NativeTemplateEdits)
            .describe()
            .contains("spec.volumeClaimUpdatePolicy came back"),
        "{got:#?}"
    );
}
